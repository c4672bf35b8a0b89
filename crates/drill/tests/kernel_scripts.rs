//! Scripts recorded from the running kernel (`crates/drill/scripts/kernel/`, made by
//! `shallow drill record` from the scenarios in `crates/drill/scenarios/` and by
//! `shallow drill fuzz --out`): their `>` lines and results are what Linux sent and returned,
//! so the engine agrees with the kernel exactly when it passes one. No root needed.
//!
//! `scripts/kernel/expectations.toml` records each script's engine outcome (the kernel's is a
//! pass by construction). A script that agreed and stops agreeing fails the test, as does
//! one that is not listed; one that starts agreeing prints a note. With
//! `SHALLOW_DRILL_UPDATE=1` the file is rewritten from the run.

use std::path::Path;

use shallow_drill::expectations::{list_scripts, Expectation, Expectations, Status};
use shallow_drill::judge::Outcome;
use shallow_drill::{run_file, RunConfig};

#[test]
fn kernel_recordings_replay_on_the_engine() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kernel");
    let path = dir.join("expectations.toml");
    let exp = Expectations::load(&path).expect("load expectations");
    let scripts = list_scripts(&dir).expect("list scripts");
    assert!(!scripts.is_empty(), "no recordings in {}", dir.display());
    let mut found = Expectations {
        kernel_version: exp.kernel_version.clone(),
        ..Default::default()
    };
    let mut problems = Vec::new();
    let mut agree = 0;
    for s in &scripts {
        let text = std::fs::read_to_string(dir.join(s)).expect("read");
        assert!(
            text.starts_with("// ") && text.contains("recorded from Linux"),
            "{s} is not a kernel recording (no header)"
        );
        let r = run_file(
            &dir.join(s),
            &RunConfig {
                ipv6: false,
                mapped: false,
                verbose: false,
            },
        );
        if r.status == Status::Pass {
            agree += 1;
        }
        let reason = if r.line > 0 {
            format!("line {}: {}", r.line, r.reason)
        } else {
            r.reason.clone()
        };
        found.scripts.insert(
            s.clone(),
            Expectation {
                status: r.status,
                reason,
                line: r.line,
                kind: r.kind,
                kernel: Some(Outcome::pass()),
            },
        );
        match exp.scripts.get(s) {
            None => problems.push(format!("{s} has no entry in {}", path.display())),
            Some(e) if e.status == Status::Pass && r.status != Status::Pass => {
                problems.push(format!(
                    "{s} stopped agreeing with the kernel: line {}: {}",
                    r.line, r.reason
                ))
            }
            Some(e) if e.status != Status::Pass && r.status == Status::Pass => println!(
                "NOTE: {s} now agrees with the kernel: update {} (SHALLOW_DRILL_UPDATE=1)",
                path.display()
            ),
            _ => {}
        }
    }
    println!(
        "kernel recordings: {agree} of {} agree with the engine",
        scripts.len()
    );
    if std::env::var_os("SHALLOW_DRILL_UPDATE").is_some() {
        std::fs::write(&path, found.to_toml()).expect("write expectations");
        println!("updated {}", path.display());
        return;
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
