//! Instruction counts per unit of the engine's benches (`benches/common`): runs one scenario
//! for N steps inside `measured_*`, so that callgrind, told to count only there, gives the
//! cost of N units whatever the set-up cost:
//!
//! ```sh
//! scripts/engine-insns.sh [SCENARIO...]     # callgrind, instructions per unit
//! ```
//!
//! or by hand: `valgrind --tool=callgrind --collect-atstart=no
//! --toggle-collect='engine_insns::measured_*' target/release/examples/engine_insns input 20000`.
//! Scenarios: `input` (one 1448-byte in-order segment into B), `bulk` (two stacks without a
//! link: A's two 1448-byte segments, B's read and ACK), `bulk_link` (the harness's link,
//! TSO off), `rr` (1-byte request and response), `timers` (one 1 ms tick of 100,000
//! keepalive connections).

#[path = "../benches/common/mod.rs"]
mod common;

use common::{Duo, Input, Timers};
use core::time::Duration;

#[inline(never)]
fn measured_input(st: &mut Input, n: usize) {
    for _ in 0..n {
        st.step();
    }
}

#[inline(never)]
fn measured_bulk(st: &mut Duo, n: usize) {
    for _ in 0..n {
        st.bulk_step();
    }
}

#[inline(never)]
fn measured_bulk_link(
    p: &mut shallow_tcp::harness::Pair,
    c: shallow_tcp::SocketId,
    s: shallow_tcp::SocketId,
    bytes: usize,
) {
    common::transfer(p, c, s, bytes);
}

#[inline(never)]
fn measured_rr(st: &mut Duo, n: usize) {
    for _ in 0..n {
        st.rr_step();
    }
}

#[inline(never)]
fn measured_timers(st: &mut Timers, n: usize) {
    for _ in 0..n {
        st.tick();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = args.first().map(String::as_str).unwrap_or("input");
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0);
    match what {
        "input" => {
            let n = if n == 0 { 20_000 } else { n };
            let mut st = Input::new(n);
            measured_input(&mut st, n);
            println!("units {n} segments");
        }
        "bulk" => {
            let n = if n == 0 { 20_000 } else { n };
            let mut st = Duo::new(Duration::from_micros(5));
            // Past slow start and autotuning.
            for _ in 0..20_000 {
                st.bulk_step();
            }
            let (b0, a0) = (st.to_b, st.to_a);
            measured_bulk(&mut st, n);
            println!(
                "units {} segments ({} A->B, {} B->A)",
                st.to_b - b0,
                st.to_b - b0,
                st.to_a - a0
            );
        }
        "bulk_link" => {
            let bytes = if n == 0 { 32 << 20 } else { n };
            let (mut p, c, s) = common::bulk_1448();
            let (a0, b0) = (p.segs[0], p.segs[1]);
            measured_bulk_link(&mut p, c, s, bytes);
            println!(
                "units {} segments ({} A->B, {} B->A)",
                p.segs[0] - a0,
                p.segs[0] - a0,
                p.segs[1] - b0
            );
        }
        "rr" => {
            let n = if n == 0 { 20_000 } else { n };
            let mut st = Duo::new(Duration::from_micros(20));
            for _ in 0..1000 {
                st.rr_step();
            }
            let (b0, a0) = (st.to_b, st.to_a);
            measured_rr(&mut st, n);
            println!(
                "units {n} transactions ({} A->B, {} B->A)",
                st.to_b - b0,
                st.to_a - a0
            );
        }
        "timers" => {
            let conns: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(100_000);
            let n = if n == 0 { 1000 } else { n };
            let mut st = Timers::new(conns);
            // Into the steady state: every connection's first probe answered.
            for _ in 0..1000 {
                st.tick();
            }
            let p0 = st.probes;
            measured_timers(&mut st, n);
            println!(
                "units {n} ticks ({} probes, {conns} connections)",
                st.probes - p0
            );
        }
        other => panic!("unknown scenario {other}"),
    }
}
