//! E4, autocorking (f54b311142a9): 4 flows of 128-byte writes, tcp_autocorking 0 and 1, as
//! the commit ran them (Nagle on) and with TCP_NODELAY (the spec's variant).

use shallow_sim::bench::{BenchConfig, BenchReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::{CpuLayout, Rate, Series};
use std::time::Duration;

use super::{
    curve, metric, over_time, ratio_over_time, scaled_ms, secs, sender_cpu_s, stream, sysctl, Arm,
    ChartDef, Emulated, MetricDef, NIC_TX_USECS, OFF, ON,
};
use crate::linux::{row, ArmResult, LinuxSpec, Side, Workload, Writer};
use crate::{Claim, Scale};

/// The commit's throughput, Mbit/s (super_netperf 4 -t TCP_STREAM -- -m 128): off, on.
pub(super) const SEED_MBPS: (f64, f64) = (6624.89, 9410.39);
/// The commit's perf task-clock of the 4 netperfs, CPU-s: off, on.
pub(super) const SEED_CPU_S: (f64, f64) = (40.046, 35.209);

/// The seed's throughput.
pub(super) fn throughput_claim() -> Claim {
    Claim::Figures {
        off: SEED_MBPS.0,
        on: SEED_MBPS.1,
    }
}

/// The seed's CPU time.
pub(super) fn cpu_claim() -> Claim {
    Claim::Figures {
        off: SEED_CPU_S.0,
        on: SEED_CPU_S.1,
    }
}

/// The seed's task-clock over the bytes sent: netperf's default 10 s run at the published
/// throughput (an assumption: the commit gives the elapsed time of one run).
pub(super) fn cpu_per_gb_claim() -> Claim {
    let gb = |mbps: f64| mbps * 1e6 * 10.0 / 8.0 / 1e9;
    Claim::Figures {
        off: SEED_CPU_S.0 / gb(SEED_MBPS.0),
        on: SEED_CPU_S.1 / gb(SEED_MBPS.1),
    }
}

/// The emulator's table: off and on with Nagle (the commit's command), then with TCP_NODELAY.
pub(super) fn emulated(s: Scale, base: &BenchConfig) -> Emulated {
    let duration = scaled_ms(s, 1000, 250, 40);
    let cfg = BenchConfig {
        // The commit's "Tested:" line is `super_netperf 4 -t TCP_STREAM -- -m 128`: no -D,
        // so Nagle is on. The spec's E4 adds TCP_NODELAY; shown apart below.
        nodelay: false,
        // One CPU per netperf, as the commit's machine (2.9-3.3 CPUs busy for 4).
        cpus: CpuLayout::Spread { cpus: 4 },
        tx_completion_delay: NIC_TX_USECS,
        link: LinkSpec {
            rate: Some(Rate::gbps(10)),
            delay: Duration::from_micros(25),
            ..LinkSpec::default()
        },
        ..stream(base, 4, 128, duration)
    };
    let arm = |label: &str, v: &str, nodelay: bool| {
        let cfg = BenchConfig {
            sysctls: vec![sysctl("tcp_autocorking", v)],
            nodelay,
            ..cfg.clone()
        };
        Arm::new(label, cfg)
    };
    let mut metrics = metrics_of("", (0, 1), true);
    metrics.extend(metrics_of(" (TCP_NODELAY)", (2, 3), false));
    Emulated {
        switch: Some("net.ipv4.tcp_autocorking"),
        arms: vec![
            arm("autocork off", "0", false),
            arm("autocork on", "1", false),
            arm("autocork nodelay off", "0", true),
            arm("autocork nodelay on", "1", true),
        ],
        metrics,
        charts: charts(),
        config: vec![
            ("workload", "4 TCP_STREAM flows, 128-byte writes, Nagle on (super_netperf 4 -t TCP_STREAM -- -m 128, the commit's command)".into()),
            ("link", "10 Gbit/s NIC and link, 50 us RTT, pfifo_fast".into()),
            ("cpus", "4 per host, spread: one netperf thread per CPU, each flow's softirq and TX completions on the CPU its port pair hashes to (RSS)".into()),
            ("nic tx-usecs", format!("{} us (TX completion interrupt coalescing of a real NIC; the emulator's default is 0)", NIC_TX_USECS.as_micros())),
            ("duration", secs(duration)),
            ("off", "net.ipv4.tcp_autocorking = 0".into()),
            ("on", "net.ipv4.tcp_autocorking = 1".into()),
        ],
        notes: vec![
            "seed CPU figures are perf task-clock seconds of the 4 netperfs over a fixed-length run (not per byte); Shallow's are the sending host's CPU busy seconds over the run; per GB assumes netperf's default 10 s run".into(),
            "the commit's 12% fewer cycles are over a fixed-length run in which its 'on' arm reached the 10 Gbit/s line rate (9.4 Gbit/s) and its CPUs idled; read sender_cpu_time beside throughput: it falls only when an arm is limited by the line, not by its CPUs".into(),
            "rows marked (TCP_NODELAY): the spec's E4 variant (netperf -D), which the commit did not run: every write is pushed at once unless autocorked".into(),
        ],
    }
}

/// The metrics of one off/on pair, named with `tag`; `seeded`: compared with the seed.
fn metrics_of(tag: &str, arms: (usize, usize), seeded: bool) -> Vec<MetricDef> {
    let claim = |c: Claim| if seeded { c } else { Claim::None };
    let cpu_per_gb = |r: &BenchReport| {
        let bytes = r.total.throughput_bps * r.duration_s / 8.0;
        if bytes > 0.0 {
            sender_cpu_s(r) / (bytes / 1e9)
        } else {
            f64::NAN
        }
    };
    let spw = |r: &BenchReport| {
        if r.total.send_calls == 0 {
            f64::NAN
        } else {
            r.total.segments_sent as f64 / r.total.send_calls as f64
        }
    };
    let corks = |r: &BenchReport| *r.counters.get("TcpExtTCPAutoCorking").unwrap_or(&0) as f64;
    vec![
        metric(
            format!("throughput{tag}"),
            "Mbit/s",
            claim(throughput_claim()),
            arms,
            |r| r.total.throughput_bps / 1e6,
        ),
        metric(
            format!("sender_cpu_time{tag}"),
            "CPU-s",
            claim(cpu_claim()),
            arms,
            sender_cpu_s,
        ),
        metric(
            format!("sender_cpu_per_gb{tag}"),
            "CPU-s/GB",
            claim(cpu_per_gb_claim()),
            arms,
            cpu_per_gb,
        ),
        metric(
            format!("segments_per_write{tag}"),
            "segs",
            Claim::None,
            arms,
            spw,
        ),
        metric(
            format!("bytes_per_segment{tag}"),
            "B",
            Claim::None,
            arms,
            |r| r.total.mean_segment_bytes,
        ),
        metric(
            format!("autocorking_events{tag}"),
            "count",
            Claim::None,
            arms,
            corks,
        ),
    ]
}

/// Throughput and segments per write over time, all four arms.
fn charts() -> Vec<ChartDef> {
    let curves = || {
        vec![
            curve(0, "off: tcp_autocorking = 0", true, OFF),
            curve(1, "on: tcp_autocorking = 1", false, ON),
            curve(2, "TCP_NODELAY, off: tcp_autocorking = 0", true, 2),
            curve(3, "TCP_NODELAY, on: tcp_autocorking = 1", false, 3),
        ]
    };
    vec![
        over_time(
            "throughput",
            "throughput of the 4 flows (bytes TCP sent)",
            "throughput (Gbit/s)",
            false,
            curves(),
            |s: &Series| {
                let pts = s.rate(|x| x.bytes_sent);
                pts.into_iter().map(|(t, v)| (t, v * 8.0 / 1e9)).collect()
            },
        ),
        over_time(
            "segments-per-write",
            "data segments sent per send() call (4 flows, 128-byte writes)",
            "segments per write",
            false,
            curves(),
            |s: &Series| ratio_over_time(s, |x| x.segments_sent, |x| x.send_calls),
        ),
    ]
}

/// The Linux table: the commit's command (4 flows of 128-byte writes, Nagle on) behind the
/// 1 Gbit/s tbf, tcp_autocorking 0 and 1 on both substrates.
pub(super) fn on_linux(s: Scale) -> LinuxSpec {
    let cpu_per_gb = |a: &ArmResult| {
        let gb = a.received as f64 / 1e9;
        if gb > 0.0 {
            a.send.cpu_ns as f64 / 1e9 / gb
        } else {
            f64::NAN
        }
    };
    LinuxSpec {
        tbf: super::LINUX_TBF_1G,
        side: Side::Sender,
        workload: Workload {
            flows: 4,
            msg: 128,
            nodelay: false,
            writer: Writer::Blocking,
            duration: super::linux_duration(s),
            timestamps: false,
        },
        kernel_off: Some(vec![("ipv4/tcp_autocorking", "0")]),
        kernel_on: vec![("ipv4/tcp_autocorking", "1")],
        shallow_off: vec![("ipv4/tcp_autocorking", "0")],
        shallow_on: vec![("ipv4/tcp_autocorking", "1")],
        rows: vec![
            row("throughput", "Mbit/s", throughput_claim(), |a| {
                a.throughput_bps() / 1e6
            }),
            row("sender_cpu_time", "CPU-s", cpu_claim(), |a| {
                a.send.cpu_ns as f64 / 1e9
            }),
            row("sender_cpu_per_gb", "CPU-s/GB", cpu_per_gb_claim(), cpu_per_gb),
            row("segments_per_write", "segs", Claim::None, |a| {
                a.counter("TcpOutSegs") / (a.send.send_calls as f64).max(1.0)
            }),
            row("autocorking_events", "count", Claim::None, |a| {
                a.counter("TcpExtTCPAutoCorking")
            }),
        ],
        notes: vec![
            "the commit's command (super_netperf 4 -t TCP_STREAM -- -m 128: Nagle on); its 'on' arm reached its 10 Gbit/s line rate; here the line is a 1 Gbit/s tbf".into(),
            "sender CPU = CPU time of the 4 writer threads (/proc/thread-self/schedstat: process context, including the kernel's send path; softirq on other CPUs is not in it); Shallow adds its I/O thread".into(),
            "segments per write = TcpOutSegs delta (all segments, ACKs included) / write calls".into(),
        ],
        charts: vec![],
    }
}
