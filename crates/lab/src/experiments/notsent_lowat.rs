//! E2, TCP_NOTSENT_LOWAT (c9bee3b7fdec): the TCP memory of 200 TCP_STREAM flows, lowat unset
//! and 128 KB.

use shallow_sim::bench::{BenchConfig, BenchReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::Rate;
use std::time::Duration;

use super::{
    metric, off_on, over_time, scaled, scaled_ms, secs, stream, sysctl, throughput_gbps, Arm,
    Emulated,
};
use crate::linux::{
    max, mean, row, LinuxSpec, RowDef, SeriesChart, Side, Sysctls, Workload, Writer,
};
use crate::{Claim, Scale};

/// The commit's flows.
const SEED_FLOWS: usize = 200;
/// TCP memory of the commit's 200 flows, pages (/proc/net/protocols): lowat unset, 128 KB.
const SEED_PAGES: (f64, f64) = (45458.0, 20567.0);

/// The seed's pages for `flows` flows (pages scale with flows).
fn pages_claim(flows: usize) -> Claim {
    let k = SEED_FLOWS as f64 / flows as f64;
    Claim::Figures {
        off: SEED_PAGES.0 / k,
        on: SEED_PAGES.1 / k,
    }
}

/// The emulator's table: lowat unset, then 128 KB.
pub(super) fn emulated(s: Scale, base: &BenchConfig) -> Emulated {
    let flows = scaled(s, SEED_FLOWS, 40, 8);
    let duration = scaled_ms(s, 5000, 1000, 300);
    let cfg = BenchConfig {
        link: LinkSpec {
            rate: Some(Rate::gbps(10)),
            delay: Duration::from_micros(250),
            ..LinkSpec::default()
        },
        ..stream(base, flows, 16384, duration)
    };
    let arm = |label: &str, v: &str| {
        let cfg = BenchConfig {
            sysctls: vec![sysctl("tcp_notsent_lowat", v)],
            ..cfg.clone()
        };
        Arm::new(label, cfg)
    };
    let mut notes = Vec::new();
    if flows != SEED_FLOWS {
        notes.push(format!(
            "{flows} flows instead of the commit's 200: pages scale with flows, compare the ratio"
        ));
    }
    notes.push("TCP memory = sum over the sender's sockets of wmem_queued + rmem_alloc in pages, sampled every 10 ms (the commit read /proc/net/protocols once, after 60 s)".into());
    if flows != SEED_FLOWS {
        notes.push(format!("seed pages scaled by {flows}/200"));
    }
    let both = (0, 1);
    Emulated {
        switch: Some("net.ipv4.tcp_notsent_lowat"),
        arms: vec![
            arm("notsent-lowat off", "4294967295"),
            arm("notsent-lowat on", "131072"),
        ],
        metrics: vec![
            metric(
                "tcp_mem_pages_mean",
                "pages",
                pages_claim(flows),
                both,
                |r| r.total_extra.sockstat_mem_pages_mean,
            ),
            metric("tcp_mem_pages_peak", "pages", Claim::None, both, |r| {
                r.total_extra.sockstat_mem_pages_max as f64
            }),
            metric(
                "throughput",
                "Gbit/s",
                Claim::Unchanged,
                both,
                throughput_gbps,
            ),
            metric(
                "context_switches",
                "1/s",
                Claim::None,
                both,
                |r: &BenchReport| r.total.context_switches_per_s,
            ),
        ],
        charts: vec![over_time(
            "tcp-mem-pages",
            &format!("TCP memory of the sender's {flows} sockets"),
            "TCP memory: wmem_queued + rmem_alloc (4 KB pages)",
            true,
            off_on(
                "off: tcp_notsent_lowat unset",
                "on: tcp_notsent_lowat = 128 KB",
            ),
            |s| s.gauge(|x| x.hosts[0].tcp_mem_pages as f64),
        )],
        config: vec![
            (
                "workload",
                format!("{flows} TCP_STREAM flows (netperf 16 KB writes, blocking)"),
            ),
            ("link", "10 Gbit/s, 0.5 ms RTT, pfifo_fast".into()),
            ("duration", secs(duration)),
            (
                "off",
                "net.ipv4.tcp_notsent_lowat = 4294967295 (unset)".into(),
            ),
            ("on", "net.ipv4.tcp_notsent_lowat = 131072".into()),
        ],
        notes,
    }
}

/// Flows on the Linux substrate.
pub(super) fn linux_flows(s: Scale) -> usize {
    scaled(s, 50, 20, 4)
}

/// The Linux table: lowat unset, then 128 KB, in both halves.
pub(super) fn on_linux(s: Scale) -> LinuxSpec {
    let flows = linux_flows(s);
    let first = row("tcp_mem_pages_mean", "pages", pages_claim(flows), |a| {
        mean(&a.series(|s| s.mem_pages as f64))
    });
    let notes = vec![format!(
        "{flows} flows instead of the commit's 200: seed pages scaled by {flows}/200"
    )];
    lowat_on_linux(s, &[], "131072", first, notes)
}

/// The Linux table notsent-lowat and pollout share: [`linux_flows`] flows written by one
/// edge-triggered epoll thread behind the 1 Gbit/s tbf; on both substrates the `extra`
/// sysctls, then tcp_notsent_lowat unset (off) or `lowat` (on). The experiment's own `first`
/// row and `notes` come before the shared ones.
pub(super) fn lowat_on_linux(
    s: Scale,
    extra: &[(&'static str, &'static str)],
    lowat: &'static str,
    first: RowDef,
    mut notes: Vec<String>,
) -> LinuxSpec {
    let with = |v: &'static str| -> Sysctls {
        let mut x = extra.to_vec();
        x.push(("ipv4/tcp_notsent_lowat", v));
        x
    };
    notes.push("TCP memory = sum over the sending sockets of wmem_queued + rmem_alloc in pages (ss -tm skmem w + r; Shallow: SO_MEMINFO), sampled every 50 ms".into());
    notes.push("epoll wake-ups = epoll_wait calls of the sender thread that returned an event (Shallow: its Poller)".into());
    LinuxSpec {
        tbf: super::LINUX_TBF_1G,
        side: Side::Sender,
        workload: Workload {
            flows: linux_flows(s),
            msg: 16384,
            nodelay: false,
            writer: Writer::Epoll,
            duration: super::linux_duration(s),
            timestamps: false,
        },
        kernel_off: Some(with("4294967295")),
        kernel_on: with(lowat),
        shallow_off: with("4294967295"),
        shallow_on: with(lowat),
        rows: vec![
            first,
            row("tcp_mem_pages_peak", "pages", Claim::None, |a| {
                max(&a.series(|s| s.mem_pages as f64))
            }),
            row("notsent_mean", "KB", Claim::None, |a| {
                mean(&a.series(|s| s.notsent as f64)) / 1024.0
            }),
            row("epoll_wakeups", "1/s", Claim::None, |a| {
                a.send.wakeups as f64 / a.duration_s
            }),
            row("send_calls_per_mb", "1/MB", Claim::None, |a| {
                a.send.send_calls as f64 / (a.send.bytes as f64 / 1e6).max(1e-9)
            }),
            row("throughput", "Mbit/s", Claim::Unchanged, |a| {
                a.throughput_bps() / 1e6
            }),
        ],
        notes,
        charts: vec![SeriesChart {
            name: "tcp-memory",
            title: "TCP memory of the sending sockets over time",
            y_desc: "TCP memory (pages of 4 KB)",
            off_label: "lowat unset",
            on_label: "lowat set",
            value: |s| s.mem_pages as f64,
        }],
    }
}
