//! E2, TCP_NOTSENT_LOWAT (c9bee3b7fdec): the TCP memory of 200 TCP_STREAM flows, lowat unset
//! and 128 KB.

use shallow_sim::bench::{BenchConfig, BenchReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::{Rate, Test, Time};

use super::{metric, off_on, over_time, scaled, secs, sysctl, throughput_gbps, Arm, Emulated};
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
    let duration = scaled(
        s,
        Time::from_secs(5),
        Time::from_secs(1),
        Time::from_millis(300),
    );
    let cfg = BenchConfig {
        test: Test::Stream,
        flows,
        duration: Some(duration),
        msg_size: 16384,
        link: LinkSpec {
            rate: Some(Rate::gbps(10)),
            delay: Time::from_micros(250),
            ..LinkSpec::default()
        },
        ..base.clone()
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
