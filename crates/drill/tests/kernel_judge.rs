//! The running kernel as the judge, in CI: Linux's packetdrill suite runs on this machine's
//! kernel (packetdrill built from `../shared/packetdrill/src`, one network namespace per
//! script) and on the engine, in the three variants Linux's runner uses, and every script
//! the expectations files record as agreeing must still agree.
//!
//! Needs root, `unshare`, `ip`, `python3` and what `build-packetdrill.sh` needs (gcc, make,
//! bison, flex). Without them it skips with the reason, unless `SHALLOW_REQUIRE_TUN=1`
//! (as CI sets), which turns the skip into a failure. A kernel run that disagrees is
//! repeated (three runs in all, the most frequent outcome counts; a script recorded as
//! agreeing gets up to three such tries), as timing on a loaded machine varies by
//! milliseconds; a script recorded as agreeing still agrees when any of those kernel runs
//! did what the engine does (measured: `tcp-info-sndbuf-limited` over IPv6 reads
//! `tcpi_busy_time` 48000 on most kernel runs, as the engine does, and 49000 or more on a
//! loaded machine). About four and a half minutes for the three variants (scripts the engine
//! skips for a missing feature need no kernel run). Then every
//! kernel recording in `scripts/kernel/` must still pass on the kernel.

use std::path::{Path, PathBuf};

use shallow_drill::expectations::{corpus_root, list_scripts, Expectations, Status};
use shallow_drill::judge::{
    agreement, allow_cubic, find_or_build_packetdrill, judge_script, kernel_release,
    missing_prerequisites, Agreement, Packetdrill, Variant,
};
use shallow_drill::record::Recorder;

fn expectations_path(v: Variant) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(match v {
        Variant::Ipv4 => "expectations.toml",
        Variant::Ipv6 => "expectations-ipv6.toml",
        Variant::Ipv4MappedIpv6 => "expectations-ipv4-mapped-ipv6.toml",
    })
}

fn skip_or_fail(why: &str) {
    if std::env::var_os("SHALLOW_REQUIRE_TUN").is_some_and(|v| v == "1") {
        panic!("SHALLOW_REQUIRE_TUN=1 but the kernel judge cannot run: {why}");
    }
    println!("SKIP: the kernel judge needs {why}");
}

#[test]
fn the_suite_agrees_with_the_running_kernel() {
    let Some(root) = corpus_root() else {
        return skip_or_fail("../shared/packetdrill/tcp");
    };
    let binary = match find_or_build_packetdrill() {
        Ok(b) => b,
        Err(e) => return skip_or_fail(&format!("a packetdrill binary ({e})")),
    };
    let missing = missing_prerequisites(&binary);
    if !missing.is_empty() {
        return skip_or_fail(&missing.join(", "));
    }
    let _cc = allow_cubic().expect("allow cubic in new namespaces");
    let pd = Packetdrill {
        binary,
        timeout: std::time::Duration::from_secs(120),
    };
    let scripts = list_scripts(&root).expect("list scripts");
    let mut problems = Vec::new();
    for variant in Variant::ALL {
        let path = expectations_path(variant);
        let exp = Expectations::load(&path).expect("load expectations");
        let mut counts = [0usize; 3];
        let mut kernel_changed = 0;
        for rel in scripts.iter().filter(|s| variant.applies_to(s)) {
            let Some(e) = exp.scripts.get(rel) else {
                problems.push(format!(
                    "{rel} ({variant}) has no entry in {}",
                    path.display()
                ));
                continue;
            };
            // Scripts the engine skips for a missing feature need no kernel run here.
            if e.status == Status::Skip {
                counts[2] += 1;
                continue;
            }
            let mut j = judge_script(&pd, &root.join(rel), variant, 3).expect("run packetdrill");
            // The kernel's timing varies from run to run (a loaded machine makes it late; a
            // timer lands on one tick or the next), so a script recorded as agreeing gets two
            // more tries of three runs each, and it still agrees if any of those kernel runs
            // did what the engine does: the engine then behaves as the kernel can. Only an
            // outcome the kernel never produces in nine runs counts as a change.
            let held = e
                .kernel
                .as_ref()
                .is_some_and(|k| agreement(k, &e.shallow()) == Agreement::Agree);
            let mut seen: Vec<String> = vec![j.kernel.short()];
            seen.extend(j.kernel_runs.iter().cloned());
            for _ in 0..2 {
                if !held || j.agreement == Agreement::Agree {
                    break;
                }
                j = judge_script(&pd, &root.join(rel), variant, 3).expect("run packetdrill");
                seen.push(j.kernel.short());
                seen.extend(j.kernel_runs.iter().cloned());
            }
            let engine_seen = seen.contains(&j.shallow.short());
            if held && j.agreement != Agreement::Agree && engine_seen {
                println!(
                    "NOTE ({variant}): {rel}: the kernel's runs were {seen:?}; the engine's {} is among them",
                    j.shallow.short()
                );
            }
            counts[match j.agreement {
                Agreement::Agree => 0,
                Agreement::Disagree => 1,
                Agreement::Skipped => 2,
            }] += 1;
            let recorded = e.kernel.as_ref();
            if recorded.is_some_and(|k| k.short() != j.kernel.short()) {
                kernel_changed += 1;
                println!(
                    "NOTE ({variant}): {rel}: the kernel now {} ({}); recorded {}",
                    j.kernel.short(),
                    j.kernel.reason,
                    recorded.map(|k| k.short()).unwrap_or_default()
                );
            }
            if held && j.agreement != Agreement::Agree && !engine_seen {
                problems.push(format!(
                    "{rel} ({variant}): recorded as agreeing, now kernel {} ({}) vs engine {} ({})",
                    j.kernel.short(),
                    j.kernel.reason,
                    j.shallow.short(),
                    j.shallow.reason
                ));
            }
        }
        println!(
            "kernel {} ({variant}): {} agree, {} disagree, {} not judged; {kernel_changed} kernel outcomes differ from the record",
            kernel_release(),
            counts[0],
            counts[1],
            counts[2]
        );
    }
    // The kernel recordings in the repository still describe this kernel.
    let rec = Recorder {
        pd: pd.clone(),
        variant: Variant::Ipv4,
        max_fixes: 0,
        replays: 0,
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kernel");
    let recorded = list_scripts(&dir).expect("list recordings");
    let mut passed = 0;
    for s in &recorded {
        let text = std::fs::read_to_string(dir.join(s)).expect("read recording");
        // Up to three runs: the recordings' times are one run's, within the tolerance.
        let ok = (0..3).any(|_| {
            rec.run_on_kernel(&text)
                .map(|o| o.status == Status::Pass)
                .unwrap_or(false)
        });
        if ok {
            passed += 1;
        } else {
            problems.push(format!("the kernel no longer passes its own recording {s}"));
        }
    }
    println!(
        "kernel recordings: {passed} of {} pass on the kernel",
        recorded.len()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
