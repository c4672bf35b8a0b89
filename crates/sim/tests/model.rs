//! Model checks of the emulator with the simple test endpoints.

use shallow_sim::capture::{CaptureOut, CapturePoint};
use shallow_sim::testing::{Sink, Source, SourceConfig, SourceMode, TestEndpoint};
use shallow_sim::{
    Dir, HostConfig, HostId, Instant, LinkSpec, NicConfig, QdiscSpec, Rate, Sim, TopologyBuilder,
};
use std::time::Duration;

const WIRE_LEN: u64 = 1488; // 20 IP + 20 TCP + 1448 payload

fn pair(
    seed: u64,
    src: SourceConfig,
    sender: HostConfig,
    fwd: LinkSpec,
    receiver: HostConfig,
    keep: bool,
) -> (Sim<TestEndpoint>, HostId, HostId) {
    let mut b = TopologyBuilder::new(seed);
    b.trace(true);
    let s = b.sender(sender, TestEndpoint::Source(Source::new(src)));
    let r = b.receiver(
        receiver,
        TestEndpoint::Sink(Sink {
            keep,
            ..Sink::default()
        }),
    );
    b.forward(fwd);
    (b.build().unwrap(), s, r)
}

fn source(sim: &Sim<TestEndpoint>, h: HostId) -> &Source {
    sim.endpoint(h).source().unwrap()
}
fn sink(sim: &Sim<TestEndpoint>, h: HostId) -> &Sink {
    sim.endpoint(h).sink().unwrap()
}

fn nic(rate: Rate) -> NicConfig {
    NicConfig {
        rate,
        ring_bytes: 4 * 1488,
        ..NicConfig::default()
    }
}

/// Idle-start pfifo, all packets offered at t = 0: packet i leaves when the bytes ahead of it
/// plus its own have been serialised at line rate, so its host-queue delay is
/// (i + 1) · len / rate; and (no coalescing) its TX completion comes at that same instant.
#[test]
fn host_queue_delay_is_bytes_ahead_over_rate() {
    let src = SourceConfig {
        count: 50,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        qdisc: QdiscSpec::Pfifo { limit: Some(1000) },
        nic: nic(Rate::gbps(1)),
        record_delays: true,
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    let m = sim.host_metrics(s);
    assert_eq!(m.delays.len(), 50);
    for (i, d) in m.delays.iter().enumerate() {
        assert_eq!(d.enqueued, Instant::ZERO);
        let bytes_ahead_and_self = (i as u64 + 1) * WIRE_LEN;
        assert_eq!(
            d.host_queue_delay(),
            Duration::from_nanos(bytes_ahead_and_self * 8),
            "packet {i}"
        );
    }
    let src = source(&sim, s);
    assert_eq!(src.completions.len(), 50);
    for (i, (tok, t)) in src.completions.iter().enumerate() {
        assert_eq!(*tok, i as u64);
        assert_eq!(*t, m.delays[i].left);
    }
    assert_eq!(m.queue_delay.max, Duration::from_nanos(50 * WIRE_LEN * 8));
    assert_eq!(sink(&sim, r).packets, 50);
    // BQL-like ring: the NIC never held more than its byte limit (+ the packet that crossed it).
    let f = m.flows[&1];
    assert_eq!(f.current, 0);
    assert_eq!(f.max, 50 * WIRE_LEN);
}

/// The ring byte limit holds packets back in the qdisc: right after t = 0 the NIC holds
/// ring_bytes worth and the rest waits in the qdisc.
#[test]
fn nic_ring_limit_backs_up_into_qdisc() {
    let src = SourceConfig {
        count: 20,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        qdisc: QdiscSpec::Pfifo { limit: Some(1000) },
        nic: nic(Rate::gbps(1)),
        ..HostConfig::default()
    };
    let (mut sim, s, _) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant(1));
    assert_eq!(sim.nic_inflight_bytes(s), 4 * WIRE_LEN as usize);
    assert_eq!(sim.qdisc(s).backlog_packets(), 16);
    sim.run_until(Instant::from_millis(10));
    assert_eq!(sim.qdisc(s).backlog_packets(), 0);
    assert_eq!(sim.nic_inflight_bytes(s), 0);

    // The descriptor count limits too.
    let src = SourceConfig {
        count: 20,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        nic: NicConfig {
            ring_descriptors: 2,
            ..nic(Rate::gbps(1))
        },
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant(1));
    assert_eq!(sim.nic_inflight_packets(s), 2);
    assert_eq!(sim.qdisc(s).backlog_packets(), 18);
    sim.run_until(Instant::from_millis(10));
    assert_eq!(sink(&sim, r).packets, 20);
}

/// A router queue limited in bytes holds at most that many bytes.
#[test]
fn bottleneck_byte_queue() {
    let src = SourceConfig {
        count: 50,
        ..SourceConfig::default()
    };
    let fwd: LinkSpec = "rate=10mbit,queue=3000".parse().unwrap();
    let (mut sim, _s, r) = pair(
        1,
        src,
        HostConfig::default(),
        fwd,
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    let ls = *sim.link_stats(Dir::Forward);
    assert_eq!(ls.max_queue_bytes, 2 * WIRE_LEN);
    assert_eq!(sink(&sim, r).packets + ls.queue_drops, 50);
    assert!(ls.queue_drops > 0);
}

/// TX completion = last bit out + interrupt-coalescing delay; packets whose last bit left
/// while the interrupt was pending are reported by the same interrupt.
#[test]
fn tx_completion_waits_for_coalescing_delay() {
    let src = SourceConfig {
        count: 3,
        ..SourceConfig::default()
    };
    let mut n = nic(Rate::gbps(1));
    n.tx_coalesce = Duration::from_micros(50);
    let host = HostConfig {
        nic: n,
        record_delays: true,
        ..HostConfig::default()
    };
    let (mut sim, s, _) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    let m = sim.host_metrics(s);
    let first_left = m.delays[0].left;
    assert_eq!(first_left, Instant(WIRE_LEN * 8));
    let irq = first_left + Duration::from_micros(50);
    let c = &source(&sim, s).completions;
    assert_eq!(c.len(), 3);
    // All three left (at 11.9, 23.8, 35.7 µs) before the interrupt at 61.9 µs.
    assert!(c.iter().all(|&(_, t)| t == irq), "{c:?}");
    assert_eq!(sim.host_stats(s).tx_irqs, 1);
}

/// TSO: a super-segment becomes MTU-sized wire packets at line rate; its completion comes
/// when the last bit of the last segment left; GRO at the receiver rebuilds aggregates.
#[test]
fn tso_segments_on_the_wire_and_gro_rebuilds() {
    let src = SourceConfig {
        count: 4,
        segs: 10,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        nic: NicConfig {
            rate: Rate::gbps(1),
            ..NicConfig::default()
        },
        record_delays: true,
        capture: Some((CapturePoint::Wire, CaptureOut::Memory(Vec::new()))),
        ..HostConfig::default()
    };
    let rx = HostConfig {
        rx_coalesce: Duration::from_micros(200),
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(1, src, host, LinkSpec::default(), rx, true);
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sim.host_stats(s).wire_packets, 40);
    assert_eq!(sim.host_stats(s).nic_packets, 4);
    let d = &sim.host_metrics(s).delays;
    // Each super-segment = 10 wire segments of 1488 bytes at 1 Gbit/s.
    for (i, rec) in d.iter().enumerate() {
        assert_eq!(rec.left, Instant((i as u64 + 1) * 10 * WIRE_LEN * 8));
    }
    let k = sink(&sim, r);
    assert_eq!(k.bad_checksum, 0);
    assert_eq!(k.segments, 40);
    assert_eq!(k.payload_bytes, 40 * 1448);
    // 200 µs of RX coalescing sees the first ~16 segments in one poll: aggregates exist and
    // carry gso_size = MSS.
    assert!(k.packets < 40);
    assert!(k.kept.iter().any(|(_, p)| p.gso_size == Some(1448)));
    assert!(sim.gro_stats(r).merged > 0);
}

/// fq honours each packet's EDT: with an idle 10 Gbit/s NIC, each packet starts on the wire
/// exactly at its departure time.
#[test]
fn fq_releases_at_edt() {
    let src = SourceConfig {
        count: 20,
        mode: SourceMode::Edt(Rate::mbps(100)),
        ..SourceConfig::default()
    };
    let host = HostConfig {
        qdisc: QdiscSpec::fq(),
        record_delays: true,
        ..HostConfig::default()
    };
    let (mut sim, s, _) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    let tx = Rate::gbps(10).tx_time(WIRE_LEN);
    let gap = Rate::mbps(100).tx_time(WIRE_LEN);
    let d = &sim.host_metrics(s).delays;
    assert_eq!(d.len(), 20);
    for (i, rec) in d.iter().enumerate() {
        assert_eq!(rec.left - tx, Instant::ZERO + gap * i as u32, "packet {i}");
    }
}

/// Bottleneck: a drop-tail router queue of 10 packets at 10 Mbit/s behind a 1 Gbit/s NIC
/// drops the excess of a burst; everything is accounted for.
#[test]
fn bottleneck_drop_tail() {
    let src = SourceConfig {
        count: 100,
        ..SourceConfig::default()
    };
    let fwd: LinkSpec = "rate=10mbit,delay=5ms,queue=10p".parse().unwrap();
    let host = HostConfig {
        nic: NicConfig {
            rate: Rate::gbps(1),
            ..NicConfig::default()
        },
        ..HostConfig::default()
    };
    let (mut sim, _s, r) = pair(1, src, host, fwd, HostConfig::default(), false);
    sim.run_until(Instant::from_secs(2));
    let ls = *sim.link_stats(Dir::Forward);
    assert_eq!(ls.packets_in, 100);
    assert!(ls.queue_drops > 50, "{ls:?}");
    assert_eq!(ls.max_queue_packets, 10);
    assert_eq!(sink(&sim, r).packets + ls.queue_drops, 100);
}

/// Gilbert–Elliott loss: the long-run loss fraction matches the stationary formula.
#[test]
fn gilbert_elliott_matches_stationary_loss() {
    let fwd: LinkSpec = "ge=1%/10%/20%/99%".parse().unwrap();
    let g = fwd.gilbert.unwrap();
    let n = 100_000;
    let src = SourceConfig {
        count: n,
        mss: 10,
        mode: SourceMode::Window(8 * WIRE_LEN),
        ..SourceConfig::default()
    };
    let (mut sim, _s, _r) = pair(
        3,
        src,
        HostConfig::default(),
        fwd,
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(10));
    let ls = *sim.link_stats(Dir::Forward);
    assert_eq!(ls.packets_in, n);
    let measured = ls.ge_lost as f64 / n as f64;
    let expected = g.stationary_loss(); // (0.1*0.01 + 0.01*0.8) / 0.11 ≈ 0.0818
    assert!(
        (measured - expected).abs() < 0.012,
        "measured {measured}, expected {expected}"
    );
}

/// Independent random loss at 5 %.
#[test]
fn random_loss_rate() {
    let fwd: LinkSpec = "loss=5%".parse().unwrap();
    let n = 40_000;
    let src = SourceConfig {
        count: n,
        mss: 10,
        mode: SourceMode::Window(8 * WIRE_LEN),
        ..SourceConfig::default()
    };
    let (mut sim, _s, r) = pair(
        5,
        src,
        HostConfig::default(),
        fwd,
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(10));
    let lost = sim.link_stats(Dir::Forward).lost;
    let f = lost as f64 / n as f64;
    assert!((f - 0.05).abs() < 0.006, "{f}");
    assert_eq!(sink(&sim, r).packets + lost, n);
}

/// Corruption flips one bit; the receiver's checksum catches every corrupted packet.
#[test]
fn corruption_is_caught_by_checksum() {
    let fwd: LinkSpec = "corrupt=30%".parse().unwrap();
    let src = SourceConfig {
        count: 2000,
        mode: SourceMode::Window(8 * WIRE_LEN),
        ..SourceConfig::default()
    };
    let rx = HostConfig {
        gro: false,
        ..HostConfig::default()
    };
    let (mut sim, _s, r) = pair(9, src, HostConfig::default(), fwd, rx, false);
    sim.run_until(Instant::from_secs(10));
    let c = sim.link_stats(Dir::Forward).corrupted;
    assert!(c > 400 && c < 800, "{c}");
    let k = sink(&sim, r);
    assert_eq!(k.packets, 2000);
    assert_eq!(k.bad_checksum, c);
}

/// Duplication and reordering.
#[test]
fn duplication_and_reordering() {
    let fwd: LinkSpec = "dup=100%".parse().unwrap();
    let src = SourceConfig {
        count: 100,
        ..SourceConfig::default()
    };
    let rx = HostConfig {
        gro: false,
        ..HostConfig::default()
    };
    let (mut sim, _s, r) = pair(9, src.clone(), HostConfig::default(), fwd, rx, false);
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sink(&sim, r).packets, 200);

    let fwd: LinkSpec = "reorder=10%,reorder_delay=1ms,delay=1ms".parse().unwrap();
    let rx = HostConfig {
        gro: false,
        ..HostConfig::default()
    };
    let (mut sim, _s, r) = pair(9, src, HostConfig::default(), fwd, rx, true);
    sim.run_until(Instant::from_secs(1));
    let reordered = sim.link_stats(Dir::Forward).reordered;
    assert!(reordered > 0);
    let seqs: Vec<u32> = sink(&sim, r)
        .kept
        .iter()
        .map(|(_, p)| u32::from_be_bytes([p.data[24], p.data[25], p.data[26], p.data[27]]))
        .collect();
    assert_eq!(seqs.len(), 100);
    let inversions = seqs.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    assert!(
        inversions > 0 && inversions <= reordered,
        "{inversions} {reordered}"
    );
}

/// Jitter keeps order (delay ± jitter, FIFO) and stays within bounds.
#[test]
fn jitter_bounds_and_fifo() {
    let fwd: LinkSpec = "delay=10ms,jitter=2ms".parse().unwrap();
    let src = SourceConfig {
        count: 200,
        mode: SourceMode::Rate(Rate::mbps(10)),
        ..SourceConfig::default()
    };
    let rx = HostConfig {
        gro: false,
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(4, src, HostConfig::default(), fwd, rx, true);
    sim.run_until(Instant::from_secs(2));
    let sent = source(&sim, s).send_times.clone();
    let kept = &sink(&sim, r).kept;
    assert_eq!(kept.len(), 200);
    let tx = Rate::gbps(10).tx_time(WIRE_LEN);
    let mut prev = Instant::ZERO;
    let mut distinct = std::collections::BTreeSet::new();
    for (i, (t, _)) in kept.iter().enumerate() {
        let owd = *t - sent[i] - tx;
        assert!(
            owd >= Duration::from_millis(8) && owd <= Duration::from_millis(12),
            "{owd:?}"
        );
        assert!(*t >= prev);
        prev = *t;
        distinct.insert(owd);
    }
    assert!(distinct.len() > 10);
}

/// Flows are routed by destination address to the right receiver.
#[test]
fn routing_by_destination() {
    let mut b = TopologyBuilder::new(1);
    for i in 0..2u8 {
        let cfg = SourceConfig {
            src: [10, 0, 0, i + 1].into(),
            dst: [10, 0, 1, 2 - i].into(),
            count: 10 + u64::from(i),
            flow: u32::from(i),
            ..SourceConfig::default()
        };
        b.sender(
            HostConfig::default(),
            TestEndpoint::Source(Source::new(cfg)),
        );
    }
    let r1 = b.receiver(HostConfig::default(), TestEndpoint::Sink(Sink::default()));
    let r2 = b.receiver(HostConfig::default(), TestEndpoint::Sink(Sink::default()));
    let stray = SourceConfig {
        src: [10, 0, 0, 3].into(),
        dst: [192, 0, 2, 1].into(),
        count: 3,
        ..SourceConfig::default()
    };
    b.sender(
        HostConfig::default(),
        TestEndpoint::Source(Source::new(stray)),
    );
    let mut sim = b.build().unwrap();
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sink(&sim, r1).segments, 11);
    assert_eq!(sink(&sim, r2).segments, 10);
    assert_eq!(sim.link_stats(Dir::Forward).no_route, 3);
}

/// A window-limited source keeps at most its window below it; the host's per-flow account
/// of bytes below the endpoint agrees with the source's own.
#[test]
fn bytes_below_endpoint_metrics() {
    let src = SourceConfig {
        count: 200,
        mode: SourceMode::Window(4 * WIRE_LEN),
        flow: 42,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        nic: NicConfig {
            rate: Rate::mbps(100),
            ..NicConfig::default()
        },
        ..HostConfig::default()
    };
    let (mut sim, s, _) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    let f = sim.host_metrics(s).flows[&42];
    let so = source(&sim, s);
    assert_eq!(so.completions.len(), 200);
    assert_eq!(f.max, so.max_below);
    assert_eq!(f.max, 4 * WIRE_LEN);
    assert_eq!(f.current, 0);
    // While busy the account sits between 3 and 4 packets: the time-weighted mean over the
    // busy period is in that range.
    let busy_end = so.completions.last().unwrap().1;
    let twm = f.time_weighted_mean(busy_end);
    assert!(
        twm > 3.0 * WIRE_LEN as f64 && twm <= 4.0 * WIRE_LEN as f64,
        "{twm}"
    );
}

/// Qdisc drops complete the dropped packet's token at once (kfree_skb runs tcp_wfree).
#[test]
fn qdisc_drop_completes_token() {
    let src = SourceConfig {
        count: 5,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        qdisc: "pfifo:limit=0".parse().unwrap(),
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sim.host_stats(s).qdisc_drops, 5);
    assert_eq!(sim.qdisc(s).stats().dropped, 5);
    let c = &source(&sim, s).completions;
    assert_eq!(
        c.iter().map(|x| x.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    assert!(c.iter().all(|x| x.1 == Instant::ZERO));
    assert_eq!(sink(&sim, r).packets, 0);
}

/// tbf on the host: release times follow rate and burst; GSO packets larger than the burst are
/// split, and the token completes with the last piece.
#[test]
fn tbf_on_host_paces_and_splits() {
    let src = SourceConfig {
        count: 5,
        segs: 4,
        ..SourceConfig::default()
    };
    let host = HostConfig {
        qdisc: "tbf:rate=10mbit,burst=3000,limit=1m".parse().unwrap(),
        record_delays: true,
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sim.qdisc(s).stats().segmented, 5);
    assert_eq!(sim.host_stats(s).wire_packets, 20);
    assert_eq!(source(&sim, s).completions.len(), 5);
    assert_eq!(sink(&sim, r).payload_bytes, 5 * 4 * 1448);
    // 20 pieces of 1488 bytes. The bucket starts full with 3000 bytes' worth of tokens
    // (2.4 ms); piece k (from 1) may leave once k·1488·8/10e6 s of tokens were earned:
    // the last at 20·per − 2.4 ms.
    let last = sim.host_metrics(s).delays.last().unwrap().left;
    let per = Rate::mbps(10).tx_time(WIRE_LEN);
    let expect_last_release = Instant(shallow_sim::time::nanos(per) * 20 - 2_400_000);
    assert_eq!(last, expect_last_release + Rate::gbps(10).tx_time(WIRE_LEN));
}

/// An endpoint that always wants its timer "now" cannot hang the emulator.
#[test]
fn timer_livelock_is_broken() {
    struct Spinner(u64);
    impl shallow_sim::Endpoint for Spinner {
        fn input(&mut self, _: Instant, _: &mut shallow_sim::Packet) {}
        fn poll_transmit(&mut self, _: Instant) -> Option<shallow_sim::Packet> {
            None
        }
        fn tx_complete(&mut self, _: Instant, _: u64) {}
        fn poll_timeout(&self) -> Option<Instant> {
            Some(Instant::ZERO)
        }
        fn handle_timeout(&mut self, _: Instant) {
            self.0 += 1;
        }
    }
    let mut b = TopologyBuilder::new(1);
    let h = b.sender(HostConfig::default(), Spinner(0));
    let mut sim = b.build().unwrap();
    sim.run_until(Instant::from_micros(3));
    assert!(sim.host_stats(h).timer_spins >= 3);
    assert!(sim.endpoint(h).0 > 30_000);
}

/// A NIC that orphans at xmit completes each packet when it leaves the qdisc, not when its
/// last bit leaves: a window-limited source then fills the ring instead of waiting.
#[test]
fn orphan_at_xmit_completes_early() {
    let src = SourceConfig {
        count: 10,
        mode: SourceMode::Window(WIRE_LEN),
        ..SourceConfig::default()
    };
    let host = HostConfig {
        nic: NicConfig {
            orphan_at_xmit: true,
            ..nic(Rate::gbps(1))
        },
        record_delays: true,
        ..HostConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        host,
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant(1));
    // One packet of window, yet the ring holds 4 (its byte limit): each was completed on
    // entering the ring, which let the source send the next.
    assert_eq!(sim.nic_inflight_packets(s), 4);
    assert!(source(&sim, s)
        .completions
        .iter()
        .all(|c| c.1 == Instant::ZERO));
    sim.run_until(Instant::from_secs(1));
    assert_eq!(sink(&sim, r).packets, 10);
    assert_eq!(source(&sim, s).completions.len(), 10);
    assert_eq!(sim.host_metrics(s).flows[&1].current, 0);
}

/// Acting on an endpoint between events (a socket call) is followed by a transmit drain.
#[test]
fn with_endpoint_drains_transmit() {
    let src = SourceConfig {
        count: 0,
        ..SourceConfig::default()
    };
    let (mut sim, s, r) = pair(
        1,
        src,
        HostConfig::default(),
        LinkSpec::default(),
        HostConfig::default(),
        false,
    );
    sim.run_until(Instant::from_millis(1));
    assert_eq!(sim.host_stats(s).tx_packets, 0);
    sim.with_endpoint(s, |ep, now| {
        assert_eq!(now, Instant::from_millis(1));
        if let TestEndpoint::Source(src) = ep {
            src.cfg.count = 3;
        }
    });
    assert_eq!(sim.host_stats(s).tx_packets, 3);
    sim.run_for(Duration::from_millis(1));
    assert_eq!(sink(&sim, r).packets, 3);
    assert_eq!(sim.now(), Instant::from_millis(2));
}

/// The reverse direction has its own settings: a right-side host reaches a left-side host
/// through the reverse link.
#[test]
fn reverse_direction_has_its_own_link() {
    let mut b = TopologyBuilder::new(1);
    let l = b.sender(HostConfig::default(), TestEndpoint::Sink(Sink::default()));
    let cfg = SourceConfig {
        src: [10, 0, 1, 1].into(),
        dst: [10, 0, 0, 1].into(),
        count: 5,
        ..SourceConfig::default()
    };
    let r = b.receiver(
        HostConfig::default(),
        TestEndpoint::Source(Source::new(cfg)),
    );
    b.forward("delay=1ms".parse().unwrap());
    b.reverse("delay=7ms,rate=100mbit".parse().unwrap());
    let mut sim = b.build().unwrap();
    sim.run_until(Instant::from_millis(7));
    assert_eq!(sink(&sim, l).packets, 0);
    sim.run_until(Instant::from_millis(20));
    assert_eq!(sink(&sim, l).packets, 5);
    assert_eq!(sim.link_stats(Dir::Reverse).packets_in, 5);
    assert_eq!(sim.link_stats(Dir::Forward).packets_in, 0);
    let _ = r;
}
