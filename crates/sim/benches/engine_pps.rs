//! Simulated wire packets per wall-clock second with the real engine on both ends: one and
//! ten TCP_STREAM flows over a 10 Gbit/s, 1 ms RTT link (CPU cost model on).
//!
//! `cargo bench -p shallow-sim --bench engine_pps`; the elements/s figure is wire packets
//! (both directions: data and ACKs) per second of wall time, with mimalloc as the allocator
//! as in the `shallow` binary.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;

/// The allocator the `shallow` binary uses, so the figure is the one `shallow bench` gives.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use shallow_sim::bench::{run, BenchConfig};

fn cfg(flows: usize) -> BenchConfig {
    BenchConfig {
        flows,
        msg_size: 64 * 1024,
        duration: Some(Duration::from_millis(200)),
        link: "rate=10gbit,delay=500us".parse().unwrap(),
        ..BenchConfig::default()
    }
}

fn pps(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_pps");
    g.sample_size(10);
    for flows in [1, 10] {
        let cfg = cfg(flows);
        let wire = run(&cfg, None, &mut |_| {})
            .unwrap()
            .0
            .total_extra
            .wire_packets_both_ways;
        g.throughput(Throughput::Elements(wire));
        g.bench_function(format!("tcp_stream_{flows}_flows_10gbit"), |b| {
            b.iter(|| {
                run(&cfg, None, &mut |_| {})
                    .unwrap()
                    .0
                    .total_extra
                    .wire_packets
            })
        });
    }
    g.finish();
}

criterion_group!(benches, pps);
criterion_main!(benches);
