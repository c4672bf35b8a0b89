//! Engine benchmarks: steady-state bulk bytes/s through two stacks over an in-memory link,
//! with 64 KiB TSO packets taken as GRO aggregates and with one 1448-byte segment per packet
//! (TSO off), and the per-packet cost of the input path; through two stacks passing packets
//! directly (`benches/common`): 1448-byte segments with their ACKs, 1-byte request/response
//! transactions; and one 1 ms timer tick of 100,000 keepalive connections. Their
//! instruction counts (stable on a shared machine): `scripts/engine-insns.sh`.

#[path = "common/mod.rs"]
mod common;

use common::{connected, transfer, Duo, Timers};
use core::time::Duration;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shallow_tcp::harness::LinkConfig;
use shallow_tcp::{DeviceCaps, Instant, Stack};

/// Bulk transfer in steady state: the connection is set up and warmed past slow start and
/// buffer autotuning (`WARMUP` bytes, not timed), then `BYTES` are timed. A short transfer
/// from a fresh connection measures mostly the start and read about 2x a 1 GiB run's rate;
/// `SHALLOW_BENCH_BYTES` sets the timed size to check that the figure does not depend on it.
fn bulk(c: &mut Criterion) {
    const WARMUP: usize = 32 << 20;
    let bytes: usize = std::env::var("SHALLOW_BENCH_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64 << 20);
    let mut g = c.benchmark_group("bulk");
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(10);
    for (name, tso) in [
        ("two_stacks_gro_64k_tso", true),
        ("two_stacks_1448B_no_tso", false),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let (mut p, c, s) = connected(LinkConfig {
                        delay: Duration::from_micros(100),
                        gro: tso,
                        ..Default::default()
                    });
                    p.a.set_device(DeviceCaps {
                        gso: tso,
                        ..p.a.device()
                    });
                    transfer(&mut p, c, s, WARMUP);
                    (p, c, s)
                },
                |(mut p, c, s)| transfer(&mut p, c, s, bytes),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
}

fn input_path(c: &mut Criterion) {
    // Per-packet cost: one 1448-byte in-order data segment into an established socket
    // (parse, checksum, demux, queue, ACK decision, window), the reader draining each time.
    let (mut p, cl, s) = connected(LinkConfig {
        delay: Duration::from_micros(10),
        ..Default::default()
    });
    let payload = vec![1u8; 1448];
    // Capture a real data packet from A to replay into B with advancing sequence numbers.
    p.a.send(p.now, cl, &payload, 0).unwrap();
    let t = p.a.poll_transmit(p.now).unwrap();
    let template = t.data.clone();
    let mut b: Stack = std::mem::replace(&mut p.b, Stack::new(9));
    let mut seq_off: u32 = 0;
    let mut now = p.now;
    let mut rbuf = vec![0u8; 65536];
    let mut g = c.benchmark_group("input");
    g.throughput(Throughput::Elements(1));
    g.bench_function("in_order_1448B_segment", |bch| {
        bch.iter(|| {
            let mut pkt = template.clone();
            // Rewrite seq (bytes 24..28 of an IPv4+TCP packet) and fix the TCP checksum
            // incrementally by recomputing it.
            let seq =
                u32::from_be_bytes([pkt[24], pkt[25], pkt[26], pkt[27]]).wrapping_add(seq_off);
            pkt[24..28].copy_from_slice(&seq.to_be_bytes());
            pkt[36] = 0;
            pkt[37] = 0;
            let src = core::net::IpAddr::from([pkt[12], pkt[13], pkt[14], pkt[15]]);
            let dst = core::net::IpAddr::from([pkt[16], pkt[17], pkt[18], pkt[19]]);
            let tcp_len = (pkt.len() - 20) as u32;
            let ck = shallow_wire::checksum::combine(&[
                shallow_wire::checksum::pseudo_header(src, dst, 6, tcp_len),
                shallow_wire::checksum::sum(&pkt[20..]),
            ]);
            pkt[36..38].copy_from_slice(&ck.to_be_bytes());
            now += Duration::from_micros(10);
            b.input(now, &pkt, None);
            seq_off = seq_off.wrapping_add(1448);
            while b.poll_transmit(now).is_some() {}
            while b.poll_wakeup().is_some() {}
            let _ = b.recv(now, s, &mut rbuf, 0);
        })
    });
    g.finish();
    let _ = Instant::ZERO;
}

/// Two stacks without a link (`Duo`): A writes two 1448-byte segments, B takes them, reads
/// and ACKs (one pure ACK per two segments: the ACK path of the sender).
fn duo(c: &mut Criterion) {
    let mut g = c.benchmark_group("duo");
    let mut st = Duo::new(Duration::from_micros(5));
    for _ in 0..20_000 {
        st.bulk_step();
    }
    g.throughput(Throughput::Elements(2));
    g.bench_function("segments_1448B_and_acks", |b| b.iter(|| st.bulk_step()));
    let mut st = Duo::new(Duration::from_micros(20));
    for _ in 0..1000 {
        st.rr_step();
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("rr_1B_transaction", |b| b.iter(|| st.rr_step()));
    g.finish();
}

/// One 1 ms tick of 100,000 idle keepalive connections (TCP_KEEPIDLE 1 s): ~100 probes
/// and their answers per tick, every timer in one set.
fn timers(c: &mut Criterion) {
    let mut g = c.benchmark_group("timers");
    g.sample_size(10);
    let mut st = Timers::new(100_000);
    for _ in 0..1000 {
        st.tick();
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("tick_100k_keepalive_conns", |b| b.iter(|| st.tick()));
    g.finish();
}

criterion_group!(benches, bulk, input_path, duo, timers);
criterion_main!(benches);
