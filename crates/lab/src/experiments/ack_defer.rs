//! E5, backlog ACK deferral (133c4c0d3717): the ACKs of one fast flow with softirq and
//! application on separate CPUs and a quickack route, tcp_backlog_ack_defer 0 and 1.

use shallow_sim::bench::{BenchConfig, BenchExtras, BenchReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::{CpuLayout, Rate, Series};
use std::time::Duration;

use super::{
    metric, off_on, over_time, per_s, scaled_ms, secs, stream, sysctl, Arm, Emulated, MetricDef,
};
use crate::linux::{row, ArmResult, LinuxSpec, Side, Sysctls, Tbf, Workload, Writer};
use crate::{Claim, Scale};

/// The emulator's table: the receiver's deferral off, then on.
pub(super) fn emulated(s: Scale, base: &BenchConfig) -> Emulated {
    let duration = scaled_ms(s, 2000, 400, 60);
    let cfg = BenchConfig {
        recv_size: 131072,
        cpus: CpuLayout::Split,
        nic_rate: Some(Rate::gbps(200)),
        link: LinkSpec {
            rate: Some(Rate::gbps(200)),
            delay: Duration::from_micros(10),
            ..LinkSpec::default()
        },
        ..stream(base, 1, 65536, duration)
    };
    let arm = |label: &str, v: &str| Arm {
        label: label.into(),
        cfg: BenchConfig {
            rx_sysctls: vec![sysctl("tcp_backlog_ack_defer", v)],
            ..cfg.clone()
        },
        extras: BenchExtras {
            rx_route_quickack: true,
            ..BenchExtras::default()
        },
    };
    Emulated {
        switch: Some("net.ipv4.tcp_backlog_ack_defer"),
        arms: vec![arm("ack-defer off", "0"), arm("ack-defer on", "1")],
        metrics: metrics(),
        charts: vec![over_time(
            "acks-per-second",
            "ACKs the receiver sent (quickack route)",
            "ACKs per second (1/s)",
            false,
            off_on(
                "off: tcp_backlog_ack_defer = 0",
                "on: tcp_backlog_ack_defer = 1",
            ),
            |s: &Series| s.rate(|x| x.acks_sent),
        )],
        config: vec![
            ("workload", "1 TCP_STREAM flow, 64 KB writes, receiver reads 128 KB (netserver's default recv size: the initial SO_RCVBUF, tcp_rmem[1])".into()),
            ("link", "200 Gbit/s NIC and link, 20 us RTT".into()),
            ("cpus", "split: softirq on CPU 0, application on CPU 1 (both hosts)".into()),
            ("receiver route", "quickack 1".into()),
            ("duration", secs(duration)),
            ("off", "receiver net.ipv4.tcp_backlog_ack_defer = 0".into()),
            ("on", "receiver net.ipv4.tcp_backlog_ack_defer = 1".into()),
        ],
        notes: vec![
            "backlog drops: the seed's kernel (v6.6) dropped when backlog + receive queue exceeded rcvbuf + sndbuf + 64 KB; since April 2024 ('tcp: avoid premature drops in tcp_add_backlog()') the limit is 2 rcvbuf + sndbuf/2 + 64 KB, which the engine follows. The receive window keeps backlog + receive queue near rcvbuf, so the newer limit is never reached and there are no drops for deferral to remove; the engine has no switch for the older limit".into(),
            "the receiver's application CPU is saturated in both arms, as in the commit ('bottleneck is usually the user cpu'); the flow runs at tens of Gbit/s, not 100-120: compare ratios".into(),
            "with quickack every backlog packet processed at release is ACKed when deferral is off; backlog packets that tcp_add_backlog coalesced into the previous one (backlog_coalesces) need no ACK of their own. Linux cannot coalesce two full GRO packets (MAX_SKB_FRAGS = 17, the seed's ~60 KB); compare backlog_coalesces with backlog_packets".into(),
        ],
    }
}

fn metrics() -> Vec<MetricDef> {
    let both = (0, 1);
    let mut m = vec![
        metric(
            "acks",
            "1/s",
            Claim::Figures {
                off: 240_000.0,
                on: 40_000.0,
            },
            both,
            |r| per_s(r.total.acks_sent, r),
        ),
        metric(
            "backlog_drops",
            "1/s",
            Claim::Figures {
                off: 230.0,
                on: 0.0,
            },
            both,
            |r| per_s(r.total_extra.backlog_drops, r),
        ),
        metric(
            "throughput",
            "Gbit/s",
            Claim::Figures {
                off: 100.0,
                on: 120.0,
            },
            both,
            super::throughput_gbps,
        ),
        metric("backlog_packets", "1/s", Claim::None, both, |r| {
            per_s(r.total_extra.backlog_packets, r)
        }),
        metric("backlog_coalesces", "1/s", Claim::None, both, |r| {
            per_s(r.total_extra.backlog_coalesces, r)
        }),
        metric("acks_per_data_segment", "ratio", Claim::None, both, |r| {
            r.total.acks_per_data_segment.unwrap_or(f64::NAN)
        }),
    ];
    for (name, host, cpu) in [
        ("sender_softirq_cpu_util", "sender", 0),
        ("sender_app_cpu_util", "sender", 1),
        ("receiver_softirq_cpu_util", "receiver", 0),
        ("receiver_app_cpu_util", "receiver", 1),
    ] {
        m.push(metric(name, "fraction", Claim::None, both, move |r| {
            util(r, host, cpu)
        }));
    }
    m
}

/// Utilization of CPU `cpu` of `host`.
fn util(r: &BenchReport, host: &str, cpu: usize) -> f64 {
    r.cpu
        .iter()
        .find(|c| c.host == host && c.cpu == cpu)
        .map_or(f64::NAN, |c| c.utilization)
}

/// The Linux table: one kernel TCP_STREAM flow into a receiver with a quickack route, the
/// receiver's `tcp_backlog_ack_defer` 0 then 1 — the kernel's receiver, then Shallow's. The
/// bottleneck is not a queue here: a tbf far above the veth's speed.
pub(super) fn on_linux(s: Scale) -> LinuxSpec {
    let defer = |v: &'static str| -> Sysctls { vec![("ipv4/tcp_backlog_ack_defer", v)] };
    let gb = |a: &ArmResult| a.received as f64 / 1e9;
    LinuxSpec {
        tbf: Tbf {
            rate_bps: 100_000_000_000,
            burst: 4 << 20,
            limit: 64 << 20,
        },
        side: Side::Receiver,
        workload: Workload {
            flows: 1,
            msg: 65536,
            nodelay: false,
            writer: Writer::Blocking,
            duration: super::linux_duration(s),
            timestamps: false,
        },
        kernel_off: Some(defer("0")),
        kernel_on: defer("1"),
        shallow_off: defer("0"),
        shallow_on: defer("1"),
        rows: vec![
            row(
                "acks",
                "1/s",
                Claim::Figures {
                    off: 240_000.0,
                    on: 40_000.0,
                },
                |a| a.counter("TcpOutSegs") / a.duration_s,
            ),
            row(
                "throughput",
                "Gbit/s",
                Claim::Figures {
                    off: 100.0,
                    on: 120.0,
                },
                |a| a.throughput_bps() / 1e9,
            ),
            row("acks_per_data_segment", "ratio", Claim::None, |a| {
                a.counter("TcpOutSegs") / a.counter("TcpInSegs").max(1.0)
            }),
            row("backlog_coalesces", "1/s", Claim::None, |a| {
                a.counter("TcpExtTCPBacklogCoalesce") / a.duration_s
            }),
            row("backlog_drops", "1/s", Claim::None, |a| {
                a.counter("TcpExtTCPBacklogDrop") / a.duration_s
            }),
            row("receiver_cpu_per_gb", "CPU-s/GB", Claim::None, move |a| {
                a.recv_cpu_ns as f64 / 1e9 / gb(a).max(1e-9)
            }),
        ],
        notes: vec![
            "the sender is always the kernel's TCP (cubic, 64 KB blocking writes); the receiver reads 128 KB (netserver) with a quickack route back to the sender, as the commit's test".into(),
            "acks = the receiver's TcpOutSegs per second (it sends no data); Shallow's from its engine's counters".into(),
            "receiver CPU = the reading thread's CPU time (plus, for Shallow, its I/O thread, which does softirq's work); the kernel's own softirq time is not attributed to a process and is not counted".into(),
            "the commit's figures come from a 200 Gbit/s NIC with softirq and the application on separate CPUs; here one veth on a 2-vCPU VM, so compare directions and ratios, not figures".into(),
        ],
        charts: Vec::new(),
    }
}
