//! Runs Linux's packetdrill suite (`../shared/packetdrill/tcp`) over IPv4, IPv6 and
//! IPv4-mapped IPv6 (AF_INET6 sockets, IPv4 packets) and compares each script's outcome with
//! `expectations.toml` / `expectations-ipv6.toml` / `expectations-ipv4-mapped-ipv6.toml`.
//!
//! The kernel is the judge: where the file records the running kernel's outcome of a script
//! (`kernel = ...`, written by `shallow drill --judge kernel --record`) and the engine's
//! expected outcome agrees with it, the engine must still agree (pass where the kernel
//! passes, fail at the same line with the same kind where it fails). Elsewhere a script doing
//! worse than its expectation fails the test (a regression). A script that starts agreeing,
//! or does better, prints a note asking to update the file. With `SHALLOW_DRILL_UPDATE=1` the
//! engine's entries are rewritten with the actual outcomes (the kernel's are kept).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shallow_drill::expectations::{corpus_root, list_scripts, Expectation, Expectations, Status};
use shallow_drill::judge::{agreement, Agreement, Outcome, Variant};
use shallow_drill::run_file;

fn expectations_path(variant: Variant) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(match variant {
        Variant::Ipv4 => "expectations.toml",
        Variant::Ipv6 => "expectations-ipv6.toml",
        Variant::Ipv4MappedIpv6 => "expectations-ipv4-mapped-ipv6.toml",
    })
}

fn run_suite(variant: Variant) {
    let Some(root) = corpus_root() else {
        println!(
            "SKIP: ../shared/packetdrill/tcp not found; the Linux packetdrill suite is not run"
        );
        return;
    };
    let scripts: Vec<String> = list_scripts(&root)
        .expect("list scripts")
        .into_iter()
        .filter(|s| variant.applies_to(s))
        .collect();
    let cfg = variant.run_config().expect("the engine runs every variant");
    let path = expectations_path(variant);
    let exp = Expectations::load(&path).expect("load expectations");
    let mut actual = BTreeMap::new();
    let mut outcomes: BTreeMap<String, Outcome> = BTreeMap::new();
    let mut found = Expectations {
        kernel_version: exp.kernel_version.clone(),
        ..Default::default()
    };
    let mut per_folder: BTreeMap<String, [usize; 3]> = BTreeMap::new();
    for rel in &scripts {
        let r = run_file(&root.join(rel), &cfg);
        actual.insert(rel.clone(), r.status);
        outcomes.insert(rel.clone(), Outcome::from(&r));
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
        let kernel = exp.scripts.get(rel).and_then(|e| e.kernel.clone());
        found.scripts.insert(
            rel.clone(),
            Expectation {
                status: r.status,
                reason,
                line: r.line,
                kind: r.kind,
                kernel,
            },
        );
    }
    let fam = match variant {
        Variant::Ipv4 => "IPv4",
        Variant::Ipv6 => "IPv6",
        Variant::Ipv4MappedIpv6 => "IPv4-mapped-IPv6",
    };
    println!("{fam}: folder pass/fail/skip");
    for (f, c) in &per_folder {
        println!("  {f:<40} {:>3} {:>3} {:>3}", c[0], c[1], c[2]);
    }
    if std::env::var_os("SHALLOW_DRILL_UPDATE").is_some() {
        std::fs::write(&path, found.to_toml()).expect("write expectations");
        println!("updated {}", path.display());
        return;
    }
    // The kernel as the judge.
    let mut problems = Vec::new();
    let mut held_to_kernel = std::collections::BTreeSet::new();
    let mut counts = [0usize; 3];
    for (rel, got) in &outcomes {
        let Some(e) = exp.scripts.get(rel) else {
            continue;
        };
        let Some(k) = &e.kernel else {
            continue;
        };
        let now = agreement(k, got);
        counts[match now {
            Agreement::Agree => 0,
            Agreement::Disagree => 1,
            Agreement::Skipped => 2,
        }] += 1;
        if agreement(k, &e.shallow()) == Agreement::Agree {
            held_to_kernel.insert(rel.clone());
            if now != Agreement::Agree {
                problems.push(format!(
                    "STOPPED AGREEING WITH THE KERNEL ({fam}): {rel}: kernel {} ({}), engine now {} ({})",
                    k.short(),
                    k.reason,
                    got.short(),
                    got.reason
                ));
            }
        } else if now == Agreement::Agree {
            println!(
                "NOTE ({fam}): {rel} now agrees with the kernel ({}): update {} (SHALLOW_DRILL_UPDATE=1)",
                k.short(),
                path.display()
            );
        }
    }
    println!(
        "{fam}: against the kernel ({}): {} agree, {} disagree, {} not judged",
        exp.kernel_version.as_deref().unwrap_or("not recorded"),
        counts[0],
        counts[1],
        counts[2]
    );
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
    for c in cmp
        .regressions
        .iter()
        .filter(|c| !held_to_kernel.contains(&c.script))
    {
        problems.push(format!(
            "REGRESSION ({fam}): {} is {} ({}), expected {}",
            c.script, c.actual, found.scripts[&c.script].reason, c.expected
        ));
    }
    for s in &cmp.missing {
        if exp.scripts[s].status == Status::Pass {
            problems.push(format!("{s} is expected to pass ({fam}) but was not run"));
        }
    }
    for s in &cmp.unlisted {
        problems.push(format!("{s} has no expectation in {}", path.display()));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn linux_suite_ipv4_no_regressions() {
    run_suite(Variant::Ipv4);
}

#[test]
fn linux_suite_ipv6_no_regressions() {
    run_suite(Variant::Ipv6);
}

#[test]
fn linux_suite_ipv4_mapped_ipv6_no_regressions() {
    run_suite(Variant::Ipv4MappedIpv6);
}
