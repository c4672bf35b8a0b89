//! Shallow's own packetdrill scripts (`crates/drill/scripts/*.pkt`): the send-path
//! mechanisms (TSQ, autocorking, backlog ACK deferral ...) and dual-stack sockets, written in
//! the same language, with the packets Linux sends for the same inputs. Every script must
//! pass over IPv4, IPv6 and IPv4-mapped IPv6, except that a script named `*-mapped.pkt` is
//! about AF_INET6 sockets with IPv4-mapped peers and runs in that variant only.

use std::path::Path;

use shallow_drill::expectations::{list_scripts, Status};
use shallow_drill::judge::Variant;
use shallow_drill::run_file;

fn run_all(variant: Variant) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    // Top-level scripts only: `scripts/kernel/` holds kernel recordings (tests/kernel_scripts.rs).
    let scripts: Vec<String> = list_scripts(&dir)
        .expect("list scripts")
        .into_iter()
        .filter(|s| !s.contains('/'))
        .filter(|s| variant == Variant::Ipv4MappedIpv6 || !s.ends_with("-mapped.pkt"))
        .collect();
    assert!(!scripts.is_empty(), "no scripts in {}", dir.display());
    let cfg = variant.run_config().expect("the engine runs every variant");
    let mut failures = Vec::new();
    for s in &scripts {
        let r = run_file(&dir.join(s), &cfg);
        if r.status != Status::Pass {
            failures.push(format!("{s}:{}: {} {}", r.line, r.status, r.reason));
        }
    }
    assert!(
        failures.is_empty(),
        "{} over {variant}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn own_scripts_pass_over_ipv4() {
    run_all(Variant::Ipv4);
}

#[test]
fn own_scripts_pass_over_ipv6() {
    run_all(Variant::Ipv6);
}

#[test]
fn own_scripts_pass_over_ipv4_mapped_ipv6() {
    run_all(Variant::Ipv4MappedIpv6);
}
