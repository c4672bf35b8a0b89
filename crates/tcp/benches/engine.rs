//! Engine benchmarks: steady-state bulk bytes/s through two stacks over an in-memory link,
//! with 64 KiB TSO packets taken as GRO aggregates and with one 1448-byte segment per packet
//! (TSO off), and the per-packet cost of the input path.

use core::net::SocketAddr;
use core::time::Duration;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use shallow_tcp::harness::{LinkConfig, Pair, ADDR_B};
use shallow_tcp::{DeviceCaps, Errno, Family, Instant, Stack};

fn connected(link: LinkConfig) -> (Pair, shallow_tcp::SocketId, shallow_tcp::SocketId) {
    let mut p = Pair::new(1, link);
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 16).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80));
    p.run_for(Duration::from_millis(10));
    let (s, _) = p.b.accept(l).unwrap();
    (p, c, s)
}

/// Bytes moved from `c` (on A) to `s` (on B) until `bytes` more have been read.
fn transfer(
    p: &mut Pair,
    c: shallow_tcp::SocketId,
    s: shallow_tcp::SocketId,
    bytes: usize,
) -> usize {
    let chunk = vec![0x5au8; 256 * 1024];
    let mut rbuf = vec![0u8; 256 * 1024];
    let (mut sent, mut got) = (0, 0);
    while got < bytes {
        if sent < bytes {
            let n = (bytes - sent).min(chunk.len());
            match p.a.send(p.now, c, &chunk[..n], 0) {
                Ok(k) => sent += k,
                Err(Errno::EAGAIN) => {}
                Err(e) => panic!("{e}"),
            }
        }
        while let Ok(k) = p.b.recv(p.now, s, &mut rbuf, 0) {
            if k == 0 {
                break;
            }
            got += k;
        }
        p.drain_wakeups();
        if !p.step() {
            break;
        }
    }
    got
}

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

criterion_group!(benches, bulk, input_path);
criterion_main!(benches);
