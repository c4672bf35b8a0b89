//! End-to-end runs of the engine in the emulator: determinism, data integrity over every
//! impairment, and the CPU/ownership/wake-up model.

use shallow_sim::bench::{run, BenchConfig, BenchReport, Test};
use shallow_sim::{CaptureOut, CostTable, CpuLayout, LinkSpec, QdiscSpec, Writer};
use std::time::Duration;

fn link(s: &str) -> LinkSpec {
    s.parse().unwrap()
}

fn bench(cfg: &BenchConfig) -> BenchReport {
    run(cfg, None, &mut |_| {}).unwrap().0
}

fn bulk(spec: &str, bytes: u64, seed: u64) -> BenchConfig {
    BenchConfig {
        test: Test::Bulk,
        bytes: Some(bytes),
        duration: Some(Duration::from_secs(120)),
        link: link(spec),
        seed,
        ..BenchConfig::default()
    }
}

#[test]
fn same_seed_same_json_and_pcap() {
    let cfg = BenchConfig {
        flows: 2,
        probe: true,
        qdisc: QdiscSpec::fq(),
        ..bulk("rate=500mbit,delay=2ms,loss=0.5%,jitter=100us", 1 << 20, 7)
    };
    let go = |cfg: &BenchConfig| {
        let (r, cap) = run(cfg, Some(CaptureOut::Memory(Vec::new())), &mut |_| {}).unwrap();
        let pcap = match cap {
            Some(CaptureOut::Memory(v)) => v,
            _ => panic!("no capture"),
        };
        (serde_json::to_string(&r).unwrap(), pcap)
    };
    let (j1, p1) = go(&cfg);
    let (j2, p2) = go(&cfg);
    assert_eq!(j1, j2);
    assert_eq!(p1, p2);
    assert!(p1.len() > 1 << 20, "the capture holds the transfer");
    let (j3, p3) = go(&BenchConfig { seed: 8, ..cfg });
    assert_ne!(p1, p3, "another seed gives another run");
    assert_ne!(j1, j3);
}

/// BULK with a SHA-256 check over each impairment (RFC 9293 §3.10: the receiver delivers
/// exactly the bytes sent, in order, whatever the network does).
#[test]
fn bulk_integrity_over_every_impairment() {
    let cases = [
        ("clean", "rate=1gbit,delay=1ms"),
        ("loss", "rate=1gbit,delay=1ms,loss=2%"),
        ("bursty loss", "rate=1gbit,delay=1ms,ge=1%/30%"),
        (
            "reorder",
            "rate=1gbit,delay=1ms,reorder=5%,reorder_delay=300us",
        ),
        ("dup", "rate=1gbit,delay=1ms,dup=3%"),
        ("corrupt", "rate=1gbit,delay=1ms,corrupt=1%"),
        ("jitter", "rate=1gbit,delay=1ms,jitter=400us"),
    ];
    for (i, (name, spec)) in cases.iter().enumerate() {
        let cfg = bulk(spec, 3 << 20, 100 + i as u64);
        let r = bench(&cfg);
        assert_eq!(r.verified, Some(true), "{name}: {:?}", r.flows[0]);
        assert_eq!(r.flows[0].bytes_read, 3 << 20, "{name}");
        assert!(r.duration_s < 120.0, "{name}: finished");
        let lossy = *name != "clean" && *name != "jitter";
        if lossy && *name != "reorder" {
            // Impairments that lose or damage packets force retransmissions or D-SACKs.
            let c = &r.counters;
            let rx = &r.rx_counters;
            assert!(
                c["TcpRetransSegs"] > 0
                    || rx["TcpExtTCPDSACKOldSent"] > 0
                    || rx["TcpInCsumErrors"] > 0,
                "{name}: impairment had no visible effect"
            );
        }
    }
}

#[test]
fn bulk_multi_flow_maerts_and_epoll() {
    let cfg = BenchConfig {
        flows: 3,
        writer: Writer::Epoll,
        msg_size: 100_000,
        ..bulk("rate=2gbit,delay=500us,loss=0.2%", 1 << 20, 3)
    };
    let r = bench(&cfg);
    assert_eq!(r.verified, Some(true));
    assert_eq!(r.flows.len(), 3);
    // MAERTS: the right host connects, the left host's accepted sockets send.
    let m = bench(&BenchConfig {
        test: Test::Maerts,
        duration: Some(Duration::from_millis(200)),
        bytes: None,
        ..bulk("rate=1gbit,delay=1ms", 1, 4)
    });
    assert!(m.flows[0].bytes_read > 1_000_000, "{:?}", m.flows[0]);
    assert!(m.flows[0].rtt_p50_us.unwrap() >= 2000.0);
    // RTT samples are per ACK (tcp_ack_update_rtt), not one per 10 ms sample interval: well
    // over 20 in 200 ms, none under the 2 ms path RTT, none lost.
    let f = &m.flows[0];
    assert!(f.rtt_samples > 100, "{} samples", f.rtt_samples);
    assert_eq!(f.rtt_samples_dropped, 0);
    assert!(f.rtt_p50_us.unwrap() <= f.rtt_p99_us.unwrap());
    assert_eq!(m.total.rtt_samples, f.rtt_samples);
}

#[test]
fn blocking_writer_counts_whole_messages_and_epoll_counts_calls() {
    let base = BenchConfig {
        msg_size: 64 * 1024,
        duration: Some(Duration::from_millis(300)),
        link: link("rate=1gbit,delay=2ms"),
        ..BenchConfig::default()
    };
    let b = bench(&base);
    let f = &b.flows[0];
    // A blocking send() is one call per message, however often it sleeps inside.
    assert!(f.bytes_written.div_ceil(64 * 1024) <= f.send_calls);
    assert!(f.send_calls <= f.bytes_written / (64 * 1024) + 1);
    assert_eq!(f.epoll_waits, 0);
    let e = bench(&BenchConfig {
        writer: Writer::Epoll,
        ..base
    });
    let f = &e.flows[0];
    assert!(
        f.epoll_waits > 0,
        "the writer filled the send buffer and waited"
    );
    assert!(
        f.send_calls > f.bytes_written / (64 * 1024),
        "EAGAIN calls count"
    );
    // Each wait that blocked was ended by one wake-up, each wake-up costs one switch.
    assert!(f.sender_wakeups <= f.epoll_waits);
}

#[test]
fn rr_latency_is_at_least_the_rtt() {
    let r = bench(&BenchConfig {
        test: Test::Rr,
        flows: 2,
        req_size: 100,
        resp_size: 2000,
        duration: Some(Duration::from_millis(500)),
        link: link("rate=1gbit,delay=5ms"),
        ..BenchConfig::default()
    });
    let t = &r.total;
    assert!(t.transactions >= 2 * 40, "{t:?}");
    let p50 = t.latency_p50_us.unwrap();
    assert!((10_000.0..11_000.0).contains(&p50), "p50 {p50}");
    assert!(t.latency_p99_us.unwrap() >= p50);
}

/// Ownership: a socket is owned only while a system call on it is using CPU time
/// (`lock_sock` … `release_sock`); with free CPUs no packet ever meets an owned socket,
/// and with a slow application CPU some do and go to the backlog (Linux `tcp_add_backlog`).
#[test]
fn backlog_only_while_a_call_is_running() {
    let base = BenchConfig {
        duration: Some(Duration::from_millis(200)),
        link: link("rate=5gbit,delay=1ms"),
        msg_size: 64 * 1024,
        recv_size: 1 << 20,
        cpus: CpuLayout::Split,
        ..BenchConfig::default()
    };
    let free = bench(&BenchConfig {
        costs: CostTable::ZERO,
        ..base.clone()
    });
    assert_eq!(free.total_extra.backlog_packets, 0);
    assert!(free.cpu.iter().all(|c| c.busy_s == 0.0));
    let slow = CostTable {
        copy_ps_per_byte: 2000, // a 1 MiB recv() copies for 2 ms
        ..CostTable::default()
    };
    let r = bench(&BenchConfig {
        costs: slow,
        ..base
    });
    assert!(r.total_extra.backlog_packets > 0, "{:?}", r.total_extra);
    assert_eq!(r.verified, None);
}

/// CPU, not the link, limits throughput at high rates with small writes: the sending CPU
/// is saturated and the link is not, and making CPU time free raises throughput.
#[test]
fn cpu_bound_at_high_rate() {
    let base = BenchConfig {
        msg_size: 128,
        nodelay: true,
        duration: Some(Duration::from_millis(50)),
        link: link("rate=10gbit,delay=100us"),
        ..BenchConfig::default()
    };
    let r = bench(&base);
    let sender_cpu = r.cpu.iter().find(|c| c.host == "sender").unwrap();
    assert!(sender_cpu.utilization > 0.9, "{:?}", r.cpu);
    assert!(r.total.goodput_bps < 8e9);
    let cheap = CostTable {
        syscall_ns: 30,
        tx_packet_ns: 120,
        ..CostTable::default()
    };
    let fast = bench(&BenchConfig {
        costs: cheap,
        ..base
    });
    assert!(fast.total.goodput_bps > r.total.goodput_bps * 1.5);
}

/// More CPUs (`CpuLayout::Spread`): CPU-bound flows spread over 4 CPUs, one thread per flow
/// and RSS-steered softirq work, move more data than on one CPU; every sender CPU works and
/// softirq work lands on several; data stays intact and runs stay deterministic.
#[test]
fn spread_over_more_cpus() {
    let base = BenchConfig {
        flows: 4,
        msg_size: 128,
        nodelay: true,
        duration: Some(Duration::from_millis(30)),
        link: link("rate=10gbit,delay=100us"),
        ..BenchConfig::default()
    };
    let one = bench(&base);
    let cfg = BenchConfig {
        cpus: "4".parse().unwrap(),
        ..base
    };
    let four = bench(&cfg);
    let sender: Vec<_> = four.cpu.iter().filter(|c| c.host == "sender").collect();
    assert_eq!(sender.len(), 4);
    assert!(sender.iter().all(|c| c.busy_s > 0.0), "{:?}", four.cpu);
    assert!(
        sender.iter().filter(|c| c.softirq_s > 0.0).count() >= 2,
        "{:?}",
        four.cpu
    );
    assert!(four.total.goodput_bps > one.total.goodput_bps * 1.5);
    let again = bench(&cfg);
    assert_eq!(
        serde_json::to_string(&four).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
    let b = bench(&BenchConfig {
        flows: 3,
        cpus: CpuLayout::Spread { cpus: 3 },
        ..bulk("rate=1gbit,delay=1ms,loss=0.5%,reorder=1%", 300_000, 9)
    });
    assert_eq!(b.verified, Some(true));
    assert!("0".parse::<CpuLayout>().is_err());
    assert!("1000".parse::<CpuLayout>().is_err());
}

#[test]
fn probe_flow_reports_latency_alongside_bulk() {
    let r = bench(&BenchConfig {
        flows: 2,
        probe: true,
        // The tail-drop bottleneck may drop a probe packet (one ~200 ms loss-probe/RTO
        // stall), so the run is long enough for many transactions either way.
        duration: Some(Duration::from_millis(1000)),
        link: link("rate=200mbit,delay=2ms,queue=200p"),
        ..BenchConfig::default()
    });
    assert_eq!(r.flows.len(), 3);
    let p = &r.flows[2];
    assert_eq!(p.kind, "probe");
    assert!(p.transactions > 10);
    // Queued behind the bulk flows at the bottleneck: above the bare 4 ms RTT.
    assert!(p.latency_p99_us.unwrap() > 4_000.0);
    assert!(
        r.total.latency_p50_us.is_none(),
        "probe latency is not the workload's"
    );
}

#[test]
fn bad_configs_are_errors() {
    assert!(run(
        &BenchConfig {
            flows: 0,
            ..BenchConfig::default()
        },
        None,
        &mut |_| {}
    )
    .is_err());
    assert!(run(
        &BenchConfig {
            test: Test::Bulk,
            ..BenchConfig::default()
        },
        None,
        &mut |_| {}
    )
    .is_err());
    let e = run(
        &BenchConfig {
            sysctls: vec![("net.ipv4.no_such".into(), "1".into())],
            ..BenchConfig::default()
        },
        None,
        &mut |_| {},
    );
    assert!(e.is_err());
}

/// Softirq goes ahead of application threads only for a budget (Linux `netdev_budget_usecs`);
/// past it, `ksoftirqd` shares the CPU fairly, so a receive rate that saturates the CPU
/// does not starve the reading thread.
#[test]
fn saturating_softirq_does_not_starve_the_reader() {
    let costs = CostTable {
        rx_segment_ns: 20_000, // 20 µs per segment: 1 Gbit/s of arrivals is ~1.7 CPUs
        ..CostTable::default()
    };
    let r = bench(&BenchConfig {
        costs,
        // Long enough that slow start's overshoot (router drops, data waiting out of order
        // behind the gaps, retransmissions) is a small part of the run.
        duration: Some(Duration::from_millis(1500)),
        link: link("rate=1gbit,delay=20ms"),
        ..BenchConfig::default()
    });
    let rx_cpu = r.cpu.iter().find(|c| c.host == "receiver").unwrap();
    assert!(
        rx_cpu.softirq_s > 0.3 * 1.5,
        "softirq saturates: {:?}",
        r.cpu
    );
    let f = &r.flows[0];
    assert!(f.recv_calls > 100, "{f:?}");
    // The reader keeps up: most of what TCP sent was read.
    assert!(f.goodput_bps > 0.8 * f.throughput_bps, "{f:?}");
}

/// Every wake-up of a blocked thread is one context switch (the only way a thread sleeps
/// is a blocking wait).
#[test]
fn wakeups_are_context_switches() {
    let r = bench(&BenchConfig {
        flows: 3,
        duration: Some(Duration::from_millis(200)),
        link: link("rate=2gbit,delay=3ms"),
        ..BenchConfig::default()
    });
    for f in &r.flows {
        assert_eq!(f.context_switches, f.sender_wakeups + f.receiver_wakeups);
        assert!(f.receiver_wakeups > 0);
    }
    assert!(r.total.context_switches_per_s > 0.0);
}

/// TSQ off (the engine's `shallow.tcp_tsq = 0`: `tcp_small_queue_check` never stops the
/// flow): with the sender's NIC as the bottleneck, the bytes queued below TCP grow far past
/// TSQ's limit, and every byte still arrives intact (BULK's SHA-256 check).
#[test]
fn tsq_off_lifts_host_queue_limit_without_losing_data() {
    use shallow_sim::bench::{run_ext, BenchExtras};
    let cfg = BenchConfig {
        msg_size: 65536,
        nic_rate: Some(shallow_sim::Rate::gbps(1)),
        ..bulk("delay=50us", 32 << 20, 3)
    };
    let go = |tsq_off: bool| {
        let mut cfg = cfg.clone();
        if tsq_off {
            cfg.sysctls
                .push(("shallow.tcp_tsq".to_string(), "0".to_string()));
        }
        run_ext(&cfg, &BenchExtras::default(), None, &mut |_| {})
            .unwrap()
            .0
    };
    let (on, off) = (go(false), go(true));
    assert_eq!(on.verified, Some(true));
    assert_eq!(off.verified, Some(true));
    assert!(
        off.total.bytes_queued_max > 2 * on.total.bytes_queued_max,
        "TSQ off {} vs on {}",
        off.total.bytes_queued_max,
        on.total.bytes_queued_max
    );
}

/// `SO_TIMESTAMPING` on the senders: reading the error queue changes nothing in the run
/// (same report but for the spans), every write of a finished transfer is measured, the
/// per-write host-queue residence (SCHED→SND) is the per-packet host-queue delay seen from the
/// application, and TSQ bounds it (46d3ceabd8d9).
#[test]
fn timestamps_measure_each_write_without_changing_the_run() {
    let base = BenchConfig {
        msg_size: 65536,
        nic_rate: Some(shallow_sim::Rate::gbps(1)),
        ..bulk("delay=50us", 48 << 20, 3)
    };
    let go = |tsq: &str, stamps: bool| {
        bench(&BenchConfig {
            sysctls: vec![("shallow.tcp_tsq".into(), tsq.into())],
            timestamps: stamps,
            ..base.clone()
        })
    };
    for tsq in ["0", "1"] {
        let plain = go(tsq, false);
        let mut stamped = go(tsq, true);
        assert!(plain.tx_timestamps.is_none());
        let t = stamped.tx_timestamps.take().expect("spans with timestamps");
        assert_eq!(
            serde_json::to_string(&plain).unwrap(),
            serde_json::to_string(&stamped).unwrap(),
            "tsq={tsq}: reading the error queue changed the run"
        );
        // 48 MiB in 64 KiB writes, all acknowledged by the end of a BULK run.
        let sched = t.sched_to_snd.expect("SCHED->SND");
        assert_eq!(sched.writes, 768, "tsq={tsq}");
        assert_eq!(t.incomplete_writes, 0, "tsq={tsq}");
        assert_eq!(t.snd_to_ack.unwrap().writes, 768);
        assert!(sched.p50_us <= sched.p99_us && sched.p99_us <= sched.max_us);
    }
    let res = |tsq| go(tsq, true).tx_timestamps.unwrap().sched_to_snd.unwrap();
    let (off, on) = (res("0"), res("1"));
    assert!(
        on.p99_us * 4.0 < off.p99_us,
        "TSQ bounds the residence: on {on:?} off {off:?}"
    );
}

/// `MSG_ZEROCOPY` on the senders in the emulator: the ids of a finished BULK transfer are
/// completed once each, the bytes arrive intact (the run verifies them), and the time the stack
/// holds the application's buffers is the time its bytes spend in the host's queues and in
/// flight: TSQ shortens it. The emulated NIC gathers fragments, so no byte is copied: a
/// write whose bytes join the unsent tail of the previous one stays a fragment of its own.
#[test]
fn zerocopy_completes_every_send_and_tsq_shortens_the_hold() {
    let base = BenchConfig {
        msg_size: 65536,
        nic_rate: Some(shallow_sim::Rate::gbps(1)),
        ..bulk("delay=50us", 48 << 20, 3)
    };
    let go = |tsq: &str| {
        bench(&BenchConfig {
            sysctls: vec![("shallow.tcp_tsq".into(), tsq.into())],
            zerocopy: true,
            ..base.clone()
        })
    };
    let plain = bench(&base);
    assert!(plain.zerocopy.is_none());
    let mut holds = Vec::new();
    for tsq in ["0", "1"] {
        let r = go(tsq);
        assert_eq!(r.verified, Some(true), "tsq={tsq}");
        let z = r.zerocopy.expect("zero-copy report");
        // 48 MiB in 64 KiB writes: an id per call that took bytes (a non-blocking writer
        // that got part of a write in comes back with a new call), each completed once;
        // the last few may still wait for their ACK when the receiver has read everything.
        assert!(z.sends >= 768, "tsq={tsq}: {z:?}");
        assert!(
            z.completed <= z.sends && z.completed + 64 >= z.sends,
            "tsq={tsq}: {z:?}"
        );
        assert_eq!(z.copied, 0, "tsq={tsq}: {z:?}");
        println!("tsq={tsq}: {z:?}");
        let h = z.hold.expect("hold times");
        assert!(h.p50_us > 0.0 && h.p50_us <= h.p99_us);
        holds.push(h.p50_us);
    }
    assert!(
        holds[1] < holds[0],
        "TSQ shortens the hold: off {} us, on {} us",
        holds[0],
        holds[1]
    );
}
