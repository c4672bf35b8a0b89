//! Property: nothing is created or lost without a count. Packets in = packets out + dropped +
//! still queued, for every qdisc alone and for the whole network.

use proptest::prelude::*;
use std::time::Duration;

use shallow_sim::packet::{Packet, Skb};
use shallow_sim::testing::{Sink, Source, SourceConfig, SourceMode, TestEndpoint};
use shallow_sim::{
    Dir, HostConfig, Instant, LinkSpec, NicConfig, QdiscSpec, QueueLimit, Rate, TopologyBuilder,
};

fn qdisc_spec(kind: u8) -> QdiscSpec {
    match kind % 5 {
        0 => QdiscSpec::PfifoFast,
        1 => QdiscSpec::Fq {
            limit: Some(40),
            flow_limit: Some(10),
            quantum: None,
            initial_quantum: None,
            maxrate: Some(Rate::mbps(50)),
        },
        2 => QdiscSpec::Tbf {
            rate: Rate::mbps(20),
            burst: 4000,
            limit: 30_000,
        },
        3 => QdiscSpec::Pfifo { limit: Some(7) },
        _ => QdiscSpec::Bfifo { limit: Some(9000) },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Each qdisc alone: offered = dequeued + dropped + backlog at every step.
    #[test]
    fn qdisc_conservation(
        kind in 0u8..5,
        ops in prop::collection::vec((any::<bool>(), 40usize..3000, 0u32..4, 0u64..2_000_000, any::<bool>()), 1..300),
    ) {
        let mut q = qdisc_spec(kind).build(1500, 20);
        let mut now = Instant::ZERO;
        let mut offered = 0u64;
        for (enq, len, flow, dt, edt) in ops {
            now += Duration::from_nanos(dt);
            if enq {
                let mut p = Packet::new(vec![0x45; len]);
                p.flow = flow;
                if edt {
                    p.departure = Some(now + Duration::from_nanos(dt));
                }
                offered += 1;
                let _ = q.enqueue(now, Skb::new(p, now));
            } else {
                let _ = q.dequeue(now);
            }
            let st = *q.stats();
            prop_assert_eq!(offered, st.dequeued + st.dropped + q.backlog_packets() as u64);
            prop_assert_eq!(st.enqueued, st.dequeued + q.backlog_packets() as u64);
        }
        // Everything held can eventually leave.
        let mut guard = 0;
        while q.backlog_packets() > 0 && guard < 100_000 {
            guard += 1;
            if q.dequeue(now).is_none() {
                now = q.next_wakeup(now).expect("held packets need a wake-up time").max(now);
            }
        }
        prop_assert_eq!(q.backlog_packets(), 0);
    }

    /// The whole network: every wire packet a NIC sent is delivered, dropped by the router, lost
    /// or unroutable (duplicates added); every token completes exactly once; every packet the
    /// endpoint sent was dropped by the qdisc or taken by the NIC.
    #[test]
    fn network_conservation(
        seed in any::<u64>(),
        kind in 0u8..5,
        count in 1u64..200,
        segs in 1u16..4,
        window in 1u64..40,
        loss in 0.0f64..0.2,
        dup in 0.0f64..0.2,
        queue in 1usize..50,
        rate_mbit in 1u64..1000,
        gro in any::<bool>(),
    ) {
        let mut b = TopologyBuilder::new(seed);
        let s = b.sender(
            HostConfig {
                qdisc: qdisc_spec(kind),
                nic: NicConfig { rate: Rate::gbps(1), tx_coalesce: Duration::from_micros(seed % 50), ..NicConfig::default() },
                ..HostConfig::default()
            },
            TestEndpoint::Source(Source::new(SourceConfig {
                count,
                segs,
                mode: SourceMode::Window(window * 1500),
                ..SourceConfig::default()
            })),
        );
        let r = b.receiver(
            HostConfig { gro, rx_coalesce: Duration::from_micros(seed % 20), ..HostConfig::default() },
            TestEndpoint::Sink(Sink::default()),
        );
        b.forward(LinkSpec {
            rate: Some(Rate::mbps(rate_mbit)),
            loss,
            dup,
            queue: QueueLimit::Packets(queue),
            delay: Duration::from_millis(1),
            ..LinkSpec::default()
        });
        let mut sim = b.build().unwrap();
        let idle = sim.run_until_idle(Instant::from_secs(100));
        prop_assert!(idle);
        let hs = *sim.host_stats(s);
        let ls = *sim.link_stats(Dir::Forward);
        let rs = *sim.host_stats(r);
        let src = sim.endpoint(s).source().unwrap();
        let sink = sim.endpoint(r).sink().unwrap();
        prop_assert_eq!(src.sent, count);
        prop_assert_eq!(hs.tx_packets, count);
        // Qdisc: offered = to NIC + dropped (tbf splits GSO packets, so count its pieces).
        let qs = *sim.qdisc(s).stats();
        prop_assert_eq!(sim.qdisc(s).backlog_packets(), 0);
        prop_assert_eq!(qs.enqueued, qs.dequeued);
        prop_assert_eq!(hs.nic_packets, qs.dequeued);
        // Every token completes exactly once.
        let mut toks: Vec<u64> = src.completions.iter().map(|c| c.0).collect();
        toks.sort_unstable();
        prop_assert_eq!(toks, (0..count).collect::<Vec<_>>());
        prop_assert_eq!(sim.nic_inflight_bytes(s), 0);
        // Link: in = dropped + lost + delivered - duplicates.
        prop_assert_eq!(ls.packets_in, hs.wire_packets);
        prop_assert_eq!(
            ls.packets_in,
            ls.queue_drops + ls.lost + ls.ge_lost + ls.no_route + ls.delivered - ls.duplicated
        );
        // Receiver: arrivals = ring drops + wire segments handed up.
        prop_assert_eq!(rs.rx_packets, ls.delivered);
        prop_assert_eq!(rs.rx_packets, rs.rx_ring_drops + sink.segments);
        prop_assert_eq!(sink.bad_checksum, 0);
    }
}
