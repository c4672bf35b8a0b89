//! Runs Linux's packetdrill suite (`../shared/packetdrill/tcp`) over IPv4 and IPv6 and
//! compares each script's outcome with `expectations.toml` / `expectations-ipv6.toml`.
//!
//! A script doing worse than its expectation fails the test (a regression); one doing
//! better prints a note asking to update the file. With `SHALLOW_DRILL_UPDATE=1` the files
//! are rewritten with the actual outcomes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shallow_drill::expectations::{corpus_root, list_scripts, Expectation, Expectations, Status};
use shallow_drill::{run_file, RunConfig};

fn expectations_path(ipv6: bool) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(if ipv6 {
        "expectations-ipv6.toml"
    } else {
        "expectations.toml"
    })
}

fn run_suite(ipv6: bool) {
    let Some(root) = corpus_root() else {
        println!(
            "SKIP: ../shared/packetdrill/tcp not found; the Linux packetdrill suite is not run"
        );
        return;
    };
    let scripts = list_scripts(&root).expect("list scripts");
    let cfg = RunConfig {
        ipv6,
        verbose: false,
    };
    let mut actual = BTreeMap::new();
    let mut found = Expectations::default();
    let mut per_folder: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    for rel in &scripts {
        let r = run_file(&root.join(rel), &cfg);
        actual.insert(rel.clone(), r.status);
        let folder = rel
            .rsplit_once('/')
            .map(|(d, _)| d)
            .unwrap_or("")
            .to_string();
        let c = per_folder.entry(folder).or_default();
        c[match r.status {
            Status::Pass => 0,
            Status::Fail => 1,
            Status::Skip => 2,
        }] += 1;
        let reason = if r.line > 0 {
            format!("line {}: {}", r.line, r.reason)
        } else {
            r.reason.clone()
        };
        found.scripts.insert(
            rel.clone(),
            Expectation {
                status: r.status,
                reason,
            },
        );
    }
    let fam = if ipv6 { "IPv6" } else { "IPv4" };
    println!("{fam}: folder pass/fail/skip");
    for (f, c) in &per_folder {
        println!("  {f:<40} {:>3} {:>3} {:>3}", c[0], c[1], c[2]);
    }
    let path = expectations_path(ipv6);
    if std::env::var_os("SHALLOW_DRILL_UPDATE").is_some() {
        std::fs::write(&path, found.to_toml()).expect("write expectations");
        println!("updated {}", path.display());
        return;
    }
    let exp = Expectations::load(&path).expect("load expectations");
    let cmp = exp.compare(&actual);
    for c in &cmp.improvements {
        println!(
            "NOTE ({fam}): {} now {} (expected {}): update {} (SHALLOW_DRILL_UPDATE=1)",
            c.script,
            c.actual,
            c.expected,
            path.display()
        );
    }
    for c in &cmp.other_changes {
        println!(
            "NOTE ({fam}): {} now {} (expected {})",
            c.script, c.actual, c.expected
        );
    }
    let mut problems = Vec::new();
    for c in &cmp.regressions {
        problems.push(format!(
            "REGRESSION ({fam}): {} is {} ({}), expected {}",
            c.script, c.actual, found.scripts[&c.script].reason, c.expected
        ));
    }
    for s in &cmp.unlisted {
        problems.push(format!("{s} has no expectation in {}", path.display()));
    }
    assert!(cmp.is_acceptable(&exp), "{}", problems.join("\n"));
}

#[test]
fn linux_suite_ipv4_no_regressions() {
    run_suite(false);
}

#[test]
fn linux_suite_ipv6_no_regressions() {
    run_suite(true);
}
