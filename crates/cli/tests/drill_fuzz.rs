//! `shallow drill fuzz` on the running kernel: every scenario ends in exactly one class
//! (agree, disagree, within the kernel's own variance, rejected), and the JSON report says
//! so. Needs root and what the kernel judge needs (a packetdrill binary, built from
//! `../shared/packetdrill/src` when missing); skips with the reason otherwise, unless
//! `SHALLOW_REQUIRE_TUN=1`.

use std::process::Command;

use shallow_drill::judge::{find_or_build_packetdrill, missing_for_capture, missing_prerequisites};

fn skip_or_fail(why: &str) {
    if std::env::var_os("SHALLOW_REQUIRE_TUN").is_some_and(|v| v == "1") {
        panic!("SHALLOW_REQUIRE_TUN=1 but drill fuzz cannot run: {why}");
    }
    println!("SKIP: drill fuzz needs {why}");
}

#[test]
fn fuzz_classifies_every_scenario_once() {
    let binary = match find_or_build_packetdrill() {
        Ok(b) => b,
        Err(e) => return skip_or_fail(&format!("a packetdrill binary ({e})")),
    };
    let mut missing = missing_prerequisites(&binary);
    missing.extend(missing_for_capture());
    if !missing.is_empty() {
        return skip_or_fail(&missing.join(", "));
    }
    let count = 4u64;
    let out = Command::new(env!("CARGO_BIN_EXE_shallow"))
        .args([
            "drill", "fuzz", "--judge", "kernel", "--seed", "50000", "--shrink", "0",
        ])
        .args([
            "--kernel-repeats",
            "2",
            "--json",
            "--count",
            &count.to_string(),
        ])
        .arg("--packetdrill")
        .arg(&binary)
        .output()
        .expect("run shallow drill fuzz");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let n = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert_eq!(
        n("agree") + n("disagree") + n("kernel_varies") + n("rejected"),
        count,
        "{v}"
    );
    assert_eq!(n("kernel_repeats"), 2);
    assert_eq!(
        v["divergences"].as_array().map(Vec::len),
        Some(n("disagree") as usize)
    );
    assert_eq!(
        v["kernel_variance"].as_array().map(Vec::len),
        Some(n("kernel_varies") as usize)
    );
    assert!(v["kernel"].as_str().is_some_and(|k| !k.is_empty()), "{v}");
}
