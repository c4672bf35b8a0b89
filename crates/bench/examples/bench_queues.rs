//! The TUN bench pairs of `shallow bench --substrate linux` with several flows and several TUN
//! queues (one Shallow I/O thread per queue): bulk throughput and CPU-s/GB per queue count,
//! runs interleaved so that a slow moment of the machine does not fall on one setting only, with
//! the kernel's own figure over veth (`linux->linux`, reported under the first queue count).
//! Needs root and `/dev/net/tun`.
//!
//! `cargo run --release -p shallow-bench --example bench_queues -- [FLOWS] [SECONDS] [REPEATS]
//! [QUEUES...]` (default 4 flows, 5 s, 3 repeats, queues 1 2).

use std::time::Duration;

use shallow_bench::{run, BenchConfig, Pair, Test};

/// (goodput Gbit/s, CPU-s/GB) of each repeat of one (pair, queue count).
type Runs = Vec<((Pair, usize), Vec<(f64, f64)>)>;

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flows: usize = arg(&args, 0, 4);
    let secs: f64 = arg(&args, 1, 5.0);
    let repeats: usize = arg(&args, 2, 3);
    let mut queues: Vec<usize> = args.iter().skip(3).filter_map(|a| a.parse().ok()).collect();
    if queues.is_empty() {
        queues = vec![1, 2];
    }
    let pairs = [
        Pair::ShallowToLinux,
        Pair::LinuxToShallow,
        Pair::LinuxToLinux,
    ];
    let mut got: Runs = Vec::new();
    for rep in 0..repeats {
        for &q in &queues {
            for &pair in &pairs {
                // The kernel's own baseline over veth has no TUN queues: once per repeat.
                if pair == Pair::LinuxToLinux && q != queues[0] {
                    continue;
                }
                let cfg = BenchConfig {
                    test: Test::Stream,
                    duration: Duration::from_secs_f64(secs),
                    flows,
                    queues: q,
                    ..BenchConfig::default()
                };
                let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
                match run(&cfg, pair) {
                    Ok(r) => {
                        let g = r.goodput_bps() / 1e9;
                        let c = r.cpu_s_per_gb().unwrap_or(f64::NAN);
                        println!(
                            "run {rep} {} queues {q} flows {flows}: {g:.2} Gbit/s, {c:.2} CPU-s/GB \
                             (I/O threads {:.2} s), per-queue (rx, tx) packets {:?}, forwarded \
                             {:?}, loadavg {}",
                            pair.label(),
                            r.cpu.io_thread_s,
                            r.queue_packets,
                            r.queue_forwarded,
                            load.split_whitespace().next().unwrap_or("?")
                        );
                        match got.iter_mut().find(|(k, _)| *k == (pair, q)) {
                            Some((_, v)) => v.push((g, c)),
                            None => got.push(((pair, q), vec![(g, c)])),
                        }
                    }
                    Err(e) => eprintln!("run {rep} {} queues {q}: {e}", pair.label()),
                }
            }
        }
    }
    println!("median of {repeats} runs, TCP_STREAM, {flows} flows, {secs} s each:");
    for ((pair, q), v) in &got {
        let mut g: Vec<f64> = v.iter().map(|x| x.0).collect();
        let mut c: Vec<f64> = v.iter().map(|x| x.1).collect();
        println!(
            "  {:<15} queues {q}: {:>6.2} Gbit/s  {:>5.2} CPU-s/GB",
            pair.label(),
            median(&mut g),
            median(&mut c)
        );
    }
}
