//! Property tests: over random link impairments, the receiver gets exactly the bytes sent, in
//! order; both sides terminate cleanly (no leaked sockets), all `wmem_alloc` is returned and
//! every page of the stack-wide TCP memory goes back (also with a tiny `tcp_mem`).

use crate::harness::*;
use crate::tests::e2e::connect_pair;
use crate::*;
use core::time::Duration;
use proptest::prelude::*;

fn run_case(
    seed: u64,
    link: LinkConfig,
    size: usize,
    chunk: usize,
    flags: u32,
    tcp_mem: Option<String>,
) -> Result<(), TestCaseError> {
    let mut p = Pair::new(seed, link);
    if let Some(m) = &tcp_mem {
        p.a.sysctl_set("net.ipv4.tcp_mem", m).unwrap();
        p.b.sysctl_set("net.ipv4.tcp_mem", m).unwrap();
    }
    let (c, l, s) = connect_pair_lossy(&mut p)?;
    let data: Vec<u8> = (0..size)
        .map(|i| ((i as u64 * 2654435761) >> 7) as u8)
        .collect();
    let mut sent = 0;
    let mut got = Vec::with_capacity(size);
    let mut buf = vec![0u8; 32768];
    let deadline = p.now + Duration::from_secs(3000);
    let mut closed_c = false;
    while p.now < deadline {
        if sent < data.len() {
            // The application writes until EAGAIN (or 64 writes) between events.
            for _ in 0..64 {
                if sent >= data.len() {
                    break;
                }
                let end = (sent + chunk).min(data.len());
                match p.a.send(p.now, c, &data[sent..end], flags) {
                    Ok(n) => sent += n,
                    Err(Errno::EAGAIN) => break,
                    Err(e) => return Err(TestCaseError::fail(format!("send: {e}"))),
                }
            }
        } else if !closed_c && got.len() == data.len() {
            // Everything arrived: once acked, no memory may stay charged.
            p.run_for(Duration::from_secs(2));
            let m = p.a.meminfo(c).unwrap();
            prop_assert_eq!(m.wmem_alloc, 0, "all TX completions returned");
            prop_assert_eq!(m.wmem_queued, 0, "all data acked and freed");
            p.a.close(p.now, c).unwrap();
            closed_c = true;
        }
        loop {
            match p.b.recv(p.now, s, &mut buf, 0) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Errno::EAGAIN) => break,
                Err(e) => return Err(TestCaseError::fail(format!("recv: {e}"))),
            }
        }
        p.drain_wakeups();
        if closed_c && got.len() == data.len() && p.b.state(s).unwrap() == TcpState::CloseWait {
            break;
        }
        if !p.step() {
            break;
        }
    }
    prop_assert_eq!(got.len(), data.len());
    prop_assert!(got == data, "byte stream differs");
    p.b.close(p.now, s).unwrap();
    p.b.close(p.now, l).unwrap();
    p.run_for(Duration::from_secs(200));
    prop_assert_eq!(p.a.socket_count(), 0);
    prop_assert_eq!(p.b.socket_count(), 0);
    prop_assert_eq!(p.a.counters().value(Mib::CurrEstab), 0);
    prop_assert_eq!(p.b.counters().value(Mib::CurrEstab), 0);
    prop_assert_eq!(p.a.sockstat().mem_pages, 0, "A leaked TCP memory pages");
    prop_assert_eq!(p.b.sockstat().mem_pages, 0, "B leaked TCP memory pages");
    prop_assert_eq!(p.a.proto_mem().sockets, 0);
    prop_assert_eq!(p.b.proto_mem().sockets, 0);
    Ok(())
}

fn connect_pair_lossy(p: &mut Pair) -> Result<(SocketId, SocketId, SocketId), TestCaseError> {
    // The handshake itself is tested elsewhere; here it runs over a clean link.
    let (ab, ba) = (p.ab, p.ba);
    p.ab = LinkConfig {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        ..ab
    };
    p.ba = LinkConfig {
        loss: 0.0,
        dup: 0.0,
        reorder: 0.0,
        ..ba
    };
    let r = connect_pair(p);
    p.ab = ab;
    p.ba = ba;
    Ok(r)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn stream_integrity_over_impairments(
        seed in any::<u64>(),
        loss in 0.0f64..0.05,
        reorder in 0.0f64..0.1,
        dup in 0.0f64..0.05,
        delay_us in 100u64..20_000,
        rate_mbps in 0u64..200,
        size in 1usize..200_000,
        chunk in 1usize..20_000,
        more in any::<bool>(),
        gro in any::<bool>(),
    ) {
        let link = LinkConfig {
            delay: Duration::from_micros(delay_us),
            rate_bps: rate_mbps * 1_000_000,
            loss,
            reorder,
            reorder_delay: Duration::from_micros(delay_us / 2 + 100),
            dup,
            gro,
        };
        let flags = if more { msgflags::MSG_MORE } else { 0 };
        run_case(seed, link, size, chunk, flags, None)?;
    }

    #[test]
    fn stream_integrity_under_tiny_tcp_mem(
        seed in any::<u64>(),
        loss in 0.0f64..0.03,
        reorder in 0.0f64..0.1,
        delay_us in 100u64..20_000,
        rate_mbps in 0u64..200,
        size in 1usize..300_000,
        chunk in 1usize..70_000,
        gro in any::<bool>(),
        min in 1i64..8,
        press in 0i64..8,
        max in 0i64..48,
    ) {
        let link = LinkConfig {
            delay: Duration::from_micros(delay_us),
            rate_bps: rate_mbps * 1_000_000,
            loss,
            reorder,
            reorder_delay: Duration::from_micros(delay_us / 2 + 100),
            dup: 0.0,
            gro,
        };
        let mem = format!("{} {} {}", min, min + press, min + press + max);
        run_case(seed, link, size, chunk, 0, Some(mem))?;
    }
}

/// Hostile input: random segments (any flags, seq/ack near or far from the connection's,
/// random options and payload) and random bytes never panic the engine, and its queues stay
/// bounded.
mod hostile {
    use crate::harness::*;
    use crate::packet::{self, OutOpt, SegOut};
    use crate::tests::e2e::connect_pair;
    use crate::RxPacket;
    use core::net::SocketAddr;
    use core::time::Duration;
    use proptest::prelude::*;

    fn opt() -> impl Strategy<Value = OutOpt> {
        prop_oneof![
            Just(OutOpt::Nop),
            any::<u16>().prop_map(OutOpt::Mss),
            any::<u8>().prop_map(OutOpt::Wscale),
            Just(OutOpt::SackOk),
            (any::<u32>(), any::<u32>()).prop_map(|(a, b)| OutOpt::Ts(a, b)),
            (any::<[(u32, u32); 4]>(), 1u8..4).prop_map(|(b, n)| OutOpt::Sack(b, n)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn random_segments_never_panic(
            segs in proptest::collection::vec(
                (any::<u16>(), -70000i64..70000, -70000i64..70000, any::<u16>(), any::<bool>(),
                 proptest::collection::vec(opt(), 0..3), 0usize..3000, 0u64..50_000, any::<u16>()),
                1..40),
            junk in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut p = Pair::new(11, LinkConfig::default());
            let (c, _l, s) = connect_pair(&mut p);
            let _ = p.a.send(p.now, c, &[7u8; 30000], 0);
            p.run_for(Duration::from_millis(2));
            let local = p.b.local_addr(s).unwrap();
            let remote = p.b.peer_addr(s).unwrap();
            // Sequence numbers near what B expects and has sent.
            let (snd_una, _, rcv_nxt) = p.b.seqs(s);
            for (flags, dseq, dack, win, to_listener, opts, len, dt, split) in segs {
                let payload = vec![0x42u8; len];
                let dst = if to_listener { SocketAddr::new(local.ip(), 80) } else { local };
                let pkt = packet::build(&SegOut {
                    urgent: 0,
                    local: remote,
                    remote: dst,
                    seq: (dseq as u32).wrapping_add(rcv_nxt),
                    ack: (dack as u32).wrapping_add(snd_una),
                    flags: shallow_wire::TcpFlags(flags & 0xff),
                    window: win,
                    tos: 0,
                    ttl: 64,
                    ident: 0,
                    opts: &opts,
                    payload: crate::payload::Payload::Flat(&payload),
                    md5: None,
                });
                let gso = if len > 1000 { Some(1000) } else { None };
                match (pkt, split % 3) {
                    (Some(pkt), 0) => p.b.input(p.now, &pkt, gso),
                    // Paged: headers apart from the payload (`RxBytes::Paged`), as a device with
                    // scatter-gather hands it over, or split anywhere.
                    (Some(pkt), k) => {
                        let at = match shallow_wire::segment::parse_tcp(&pkt) {
                            Some(v) if k == 1 => v.payload_off,
                            _ => usize::from(split) % (pkt.len() + 1),
                        };
                        let frag = crate::Bytes::copy_from_slice(&pkt[at..]);
                        p.b.handle_packet(p.now, RxPacket::paged(&pkt[..at], &frag).gso(gso).csum_verified(split & 4 != 0));
                    }
                    (None, _) => {}
                }
                p.now += Duration::from_micros(dt);
                p.b.handle_timeout(p.now);
                while p.b.poll_transmit(p.now).is_some() {}
                while p.b.poll_wakeup().is_some() {}
            }
            p.b.input(p.now, &junk, None);
            p.b.input(p.now, &junk, Some(1));
            for at in [0, junk.len() / 2, junk.len()] {
                let frag = crate::Bytes::copy_from_slice(&junk[at..]);
                p.b.handle_packet(p.now, RxPacket::paged(&junk[..at], &frag).gso(Some(1)).csum_verified(at == 0));
            }
            // Queues stay bounded by the buffers.
            let m = p.b.meminfo(s);
            if let Ok(m) = m {
                prop_assert!(m.rmem_alloc <= 4 * m.rcvbuf + 65536);
            }
            prop_assert!(p.b.socket_count() < 64);
            // The engine still works: time passes without panics.
            p.run_for(Duration::from_secs(300));
        }
    }
}
