//! Shallow's own packetdrill scripts (`crates/drill/scripts/*.pkt`): the send-path
//! mechanisms (TSQ, autocorking, backlog ACK deferral ...) written in the same language,
//! with the packets Linux sends for the same inputs. Every script must pass over IPv4 and
//! IPv6.

use std::path::Path;

use shallow_drill::expectations::{list_scripts, Status};
use shallow_drill::{run_file, RunConfig};

fn run_all(ipv6: bool) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    // Top-level scripts only: `scripts/kernel/` holds kernel recordings (tests/kernel_scripts.rs).
    let scripts: Vec<String> = list_scripts(&dir)
        .expect("list scripts")
        .into_iter()
        .filter(|s| !s.contains('/'))
        .collect();
    assert!(!scripts.is_empty(), "no scripts in {}", dir.display());
    let mut failures = Vec::new();
    for s in &scripts {
        let r = run_file(
            &dir.join(s),
            &RunConfig {
                ipv6,
                mapped: false,
                verbose: false,
            },
        );
        if r.status != Status::Pass {
            failures.push(format!("{s}:{}: {} {}", r.line, r.status, r.reason));
        }
    }
    assert!(
        failures.is_empty(),
        "{} over {}:\n{}",
        failures.len(),
        if ipv6 { "IPv6" } else { "IPv4" },
        failures.join("\n")
    );
}

#[test]
fn own_scripts_pass_over_ipv4() {
    run_all(false);
}

#[test]
fn own_scripts_pass_over_ipv6() {
    run_all(true);
}
