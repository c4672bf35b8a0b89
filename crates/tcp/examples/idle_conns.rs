//! Heap per established idle connection: two stacks over the in-memory link (`harness::Pair`)
//! open N connections (each an active socket on A and an accepted one on B), and a counting
//! global allocator (dhat's, in its testing mode: counts only, no profile written) reports the bytes still allocated, over the stacks' state before the first
//! connect, divided by the 2N sockets. Idle: no data, no keepalive, nothing left in any queue.
//!
//! `cargo run --release -p shallow-tcp --features test-util --example idle_conns -- [N...]`
//! (default 10000 100000).

use shallow_tcp::harness::{LinkConfig, Pair};
use shallow_tcp::{Family, Instant};
use std::time::Duration;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Bytes currently allocated on the heap (dhat's count).
fn live() -> usize {
    dhat::HeapStats::get().curr_bytes
}

fn run(n: usize) {
    let mut p = Pair::new(
        7,
        LinkConfig {
            delay: Duration::from_micros(50),
            ..LinkConfig::default()
        },
    );
    p.a.sysctl_set("net.ipv4.ip_local_port_range", "1024 65535")
        .unwrap();
    // Listeners on enough ports that every connection has its own 4-tuple.
    let ports: Vec<u16> = (0..n.div_ceil(60_000).max(1))
        .map(|i| 80 + i as u16)
        .collect();
    let mut listeners = Vec::new();
    for &port in &ports {
        let l = p.b.socket(Family::V4).unwrap();
        p.b.bind(l, format!("10.0.0.2:{port}").parse().unwrap())
            .unwrap();
        p.b.listen(l, 4096).unwrap();
        listeners.push(l);
    }
    p.run_for(Duration::from_millis(1));
    let before = live();
    let mut clients = Vec::with_capacity(n);
    let mut children = Vec::with_capacity(n);
    let batch = 1000;
    let mut opened = 0;
    while opened < n {
        let k = batch.min(n - opened);
        for i in 0..k {
            let port = ports[(opened + i) % ports.len()];
            let c = p.a.socket(Family::V4).unwrap();
            let now: Instant = p.now;
            let _ =
                p.a.connect(now, c, format!("10.0.0.2:{port}").parse().unwrap());
            clients.push(c);
        }
        p.run_for(Duration::from_millis(2));
        for &l in &listeners {
            while let Ok((s, _)) = p.b.accept(l) {
                children.push(s);
            }
        }
        opened += k;
    }
    p.run_for(Duration::from_millis(10));
    for &l in &listeners {
        while let Ok((s, _)) = p.b.accept(l) {
            children.push(s);
        }
    }
    p.drain_wakeups();
    let after = live();
    let sockets = clients.len() + children.len();
    let established =
        p.a.sockets()
            .iter()
            .filter(|r| r.state == shallow_tcp::TcpState::Established)
            .count();
    println!(
        "{n} connections: {established} established on A, {} accepted on B; heap {:.1} MB for {sockets} sockets = {} bytes per socket",
        children.len(),
        after.saturating_sub(before) as f64 / 1e6,
        after.saturating_sub(before) / sockets.max(1),
    );
}

fn main() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let ns: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    for n in if ns.is_empty() {
        vec![10_000, 100_000]
    } else {
        ns
    } {
        run(n);
    }
}
