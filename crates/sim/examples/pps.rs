//! One run of the `engine_pps` benchmark's workload (TCP_STREAM over 10 Gbit/s, 1 ms RTT,
//! 200 ms of virtual time), printing the wire packets and wall time: a fixed amount of work
//! to profile (`valgrind --tool=callgrind`) or to time without criterion.
//!
//! Run: `cargo run --release -p shallow-sim --example pps -- [flows] [link] [qdisc] [--json]`
//! (defaults: 1, `rate=10gbit,delay=500us`, `pfifo_fast`). With `--json` the whole report is
//! printed as JSON instead, to compare two builds bit for bit.

use std::time::Duration;
use std::time::Instant;

use shallow_sim::bench::{run, BenchConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let flows = pos.first().and_then(|a| a.parse().ok()).unwrap_or(1);
    let link = pos.get(1).map_or("rate=10gbit,delay=500us", |s| s.as_str());
    let qdisc = pos.get(2).map_or("pfifo_fast", |s| s.as_str());
    let cfg = BenchConfig {
        flows,
        msg_size: 64 * 1024,
        duration: Some(Duration::from_millis(200)),
        link: link.parse().expect("valid link"),
        qdisc: qdisc.parse().expect("valid qdisc"),
        ..BenchConfig::default()
    };
    let t0 = Instant::now();
    let report = run(&cfg, None, &mut |_| {}).expect("run").0;
    let wall = t0.elapsed().as_secs_f64();
    if json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
        return;
    }
    let wire = report.total_extra.wire_packets;
    println!(
        "flows={flows} wire_packets={wire} wall={wall:.3}s pps={:.0}",
        wire as f64 / wall
    );
}
