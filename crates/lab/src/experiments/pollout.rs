//! E3, fewer POLLOUT events (a74f0fa082b7): memory and context switches of 100 flows over a
//! 100 ms RTT, lowat unset and 2 MB, and beside it waking at X vs X/2.

use shallow_sim::bench::{BenchConfig, BenchReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::{Rate, Series, Writer};
use std::time::Duration;

use super::notsent_lowat::{linux_flows, lowat_on_linux};
use super::{
    curve, metric, over_time, per_s, scaled, scaled_ms, secs, stream, sysctl, throughput_gbps, Arm,
    Emulated, OFF, ON,
};
use crate::linux::{mean, row, LinuxSpec};
use crate::{Claim, Scale};

/// The commit's flows.
const SEED_FLOWS: usize = 100;
/// TCP memory per flow, MB: lowat unset, 2 MB.
const SEED_MEM_PER_FLOW: Claim = Claim::Figures { off: 54.0, on: 3.5 };
/// Context switches per second of the commit's 100 flows (vmstat cs on the sender).
const SEED_CS: (f64, f64) = (6000.0, 13000.0);
/// The sender's tcp_wmem in the commit.
const WMEM: &str = "4096 262144 64000000";

/// Arm indexes: lowat unset, 2 MB waking at X/2, 2 MB waking at X.
const UNSET: usize = 0;
const HALF: usize = 1;
const AT_X: usize = 2;

/// The emulator's table: lowat unset, 2 MB (wake at X/2), and 2 MB waking at X.
pub(super) fn emulated(s: Scale, base: &BenchConfig) -> Emulated {
    let flows = scaled(s, SEED_FLOWS, 20, 4);
    let duration = scaled_ms(s, 10_000, 3000, 600);
    let cfg = BenchConfig {
        writer: Writer::Blocking,
        link: LinkSpec {
            rate: Some(Rate::gbps(10)),
            delay: Duration::from_millis(50),
            ..LinkSpec::default()
        },
        sample_interval: Duration::from_millis(50),
        ..stream(base, flows, 16384, duration)
    };
    // The seed's sender held 1,364,904 pages (5.2 GiB) of TCP memory, so its tcp_mem was far
    // above the 4 GiB machine of the engine's default; give the emulated sender a large
    // server's (Linux's tcp_init_mem for 128 GiB).
    let [m0, m1, m2] = shallow_tcp::sysctl::tcp_mem_for_memory(128 << 30);
    let tcp_mem = format!("{m0} {m1} {m2}");
    let arm = |label: &str, v: &str, wake_half: &str| {
        let sysctls = vec![
            sysctl("tcp_wmem", WMEM),
            sysctl("tcp_mem", &tcp_mem),
            sysctl("tcp_notsent_lowat", v),
            (
                "shallow.tcp_notsent_lowat_wake_half".into(),
                wake_half.into(),
            ),
        ];
        let cfg = BenchConfig {
            sysctls,
            ..cfg.clone()
        };
        Arm::new(label, cfg)
    };
    Emulated {
        switch: Some("net.ipv4.tcp_notsent_lowat"),
        arms: vec![
            arm("pollout off", "4294967295", "1"),
            arm("pollout on", "2097152", "1"),
            // The comparison the commit is about: the same lowat, waking at X (before it)
            // vs X/2. No published figure, so no verdict; shown for what it measures.
            arm("pollout wake at X", "2097152", "0"),
        ],
        metrics: metrics(flows),
        charts: charts(flows),
        config: vec![
            (
                "workload",
                format!("{flows} TCP_STREAM flows (netperf, blocking 16 KB writes), cubic"),
            ),
            ("link", "10 Gbit/s, 100 ms RTT".into()),
            ("sender tcp_wmem", WMEM.into()),
            (
                "sender tcp_mem",
                format!("{tcp_mem} pages (a 128 GiB machine's; the seed's held 1,364,904)"),
            ),
            ("duration", secs(duration)),
            ("off", "net.ipv4.tcp_notsent_lowat unset".into()),
            (
                "on",
                "net.ipv4.tcp_notsent_lowat = 2097152 (wake-ups at notsent < X/2)".into(),
            ),
        ],
        notes: notes(flows),
    }
}

fn metrics(flows: usize) -> Vec<super::MetricDef> {
    let per_flow =
        move |r: &BenchReport| r.total_extra.sockstat_mem_pages_mean * 4096.0 / flows as f64 / 1e6;
    let per_flow_peak = move |r: &BenchReport| {
        r.total_extra.sockstat_mem_pages_max as f64 * 4096.0 / flows as f64 / 1e6
    };
    let wakeups = |r: &BenchReport| per_s(r.total.sender_wakeups, r);
    let k = flows as f64 / SEED_FLOWS as f64;
    let cs = Claim::Figures {
        off: SEED_CS.0 * k,
        on: SEED_CS.1 * k,
    };
    let (x_half, main) = ((AT_X, HALF), (UNSET, HALF));
    vec![
        metric(
            "sender_context_switches (wake at X vs X/2)",
            "1/s",
            Claim::None,
            x_half,
            wakeups,
        ),
        metric(
            "throughput (wake at X vs X/2)",
            "Gbit/s",
            Claim::Unchanged,
            x_half,
            throughput_gbps,
        ),
        metric(
            "tcp_mem_per_flow_mean",
            "MB",
            SEED_MEM_PER_FLOW,
            main,
            per_flow,
        ),
        metric(
            "tcp_mem_per_flow_peak",
            "MB",
            Claim::None,
            main,
            per_flow_peak,
        ),
        metric("sender_context_switches", "1/s", cs, main, wakeups),
        metric(
            "context_switches_all_threads",
            "1/s",
            Claim::None,
            main,
            |r| r.total.context_switches_per_s,
        ),
        metric(
            "throughput",
            "Gbit/s",
            Claim::Unchanged,
            main,
            throughput_gbps,
        ),
    ]
}

fn charts(flows: usize) -> Vec<super::ChartDef> {
    let curves = || {
        vec![
            curve(UNSET, "off: tcp_notsent_lowat unset", true, OFF),
            curve(
                AT_X,
                "lowat 2 MB, wake at notsent < X (before the commit)",
                true,
                2,
            ),
            curve(HALF, "on: lowat 2 MB, wake at notsent < X/2", false, ON),
        ]
    };
    vec![
        over_time(
            "sender-wakeups",
            &format!("wake-ups of the {flows} blocked writers"),
            "sender wake-ups per second (1/s)",
            false,
            curves(),
            |s: &Series| s.rate(|x| x.sender_wakeups),
        ),
        over_time(
            "tcp-mem-per-flow",
            "TCP memory per flow of the sender",
            "TCP memory per flow: (wmem_queued + rmem_alloc) / flows (MB)",
            false,
            curves(),
            move |s: &Series| {
                s.gauge(|x| x.hosts[0].tcp_mem_pages as f64 * 4096.0 / flows as f64 / 1e6)
            },
        ),
    ]
}

fn notes(flows: usize) -> Vec<String> {
    let mut notes = vec![
        "the commit's figures compare lowat unset vs 2 MB, both with its X/2 wake rule".into(),
        "sender context switches = wake-ups of the sending host's blocked writers (the commit's vmstat cs ran on the sender, A); the receivers' are shown apart".into(),
        "the commit ran BBR; the engine has cubic and reno, so cubic is used".into(),
    ];
    if flows != SEED_FLOWS {
        notes.push(format!("{flows} flows instead of 100; context switches scale with flows (seed figures scaled by {flows}/100)"));
    }
    notes.push("wake_at_X_vs_X/2 rows: lowat 2 MB in both arms; 'off' wakes writers at notsent < X (shallow.tcp_notsent_lowat_wake_half = 0, the behaviour before the commit), 'on' below X/2".into());
    notes
}

/// The Linux table: the sender's tcp_wmem as the commit's, lowat unset, then 2 MB (both
/// halves wake at X/2: Linux 6.x has no switch for the rule).
pub(super) fn on_linux(s: Scale) -> LinuxSpec {
    let flows = linux_flows(s) as f64;
    let first = row("tcp_mem_per_flow_mean", "MB", SEED_MEM_PER_FLOW, move |a| {
        mean(&a.series(|s| s.mem_pages as f64)) * 4096.0 / flows / 1e6
    });
    let notes = vec![
        "the commit's 2 MB lowat matters with its 100 ms RTT (BDP of MBs per flow); this machine has no netem, the veth RTT is well under 1 ms".into(),
        "Linux 6.x cannot switch the X/2 wake rule off; both halves wake at notsent < X/2".into(),
    ];
    lowat_on_linux(s, &[("ipv4/tcp_wmem", WMEM)], "2097152", first, notes)
}
