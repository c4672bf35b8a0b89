//! E1, TCP Small Queues (46d3ceabd8d9): the host-queue delay of one bulk flow, TSQ off and on.

use shallow_sim::bench::{BenchConfig, SpanReport, TxStampReport};
use shallow_sim::spec::LinkSpec;
use shallow_sim::{QdiscSpec, Rate, Series};
use std::time::Duration;

use super::{
    delay_cdf, metric, ms, off_on, over_time, scaled_ms, secs, stream, Arm, ChartDef, Emulated,
};
use crate::linux::{
    max, mean, quantile, row, ArmResult, LinuxSpec, SeriesChart, Side, Tbf, TxSpans, Workload,
    Writer,
};
use crate::{Chart, Claim, Scale};

/// The commit's host-queue delay at 100 Mbit/s, ms: 132 without TSQ, under 8 with it.
const DELAY_100M: Claim = Claim::Figures {
    off: 132.0,
    on: 8.0,
};
/// At 1 Gbit/s, ms.
const DELAY_1G: Claim = Claim::Figures { off: 50.0, on: 1.0 };
/// Bytes below TCP per socket at 1 Gbit/s, KB: the commit's words, 4 MB instead of ~128 KB.
const BELOW_TCP_1G: Claim = Claim::Figures {
    off: 4096.0,
    on: 128.0,
};

/// The emulator's table: at each NIC rate (1 Gbit/s, 100 Mbit/s) an off and an on arm.
pub(super) fn emulated(s: Scale, base: &BenchConfig) -> Emulated {
    let duration = scaled_ms(s, 10_000, 2000, 300);
    let mut e = Emulated {
        switch: None,
        arms: Vec::new(),
        metrics: Vec::new(),
        charts: Vec::new(),
        config: vec![
            ("workload", "1 TCP_STREAM flow, 64 KB writes, TSO, pfifo_fast".into()),
            ("bottleneck", "the sender's own NIC (1 Gbit/s, then 100 Mbit/s); 50 us one-way delay".into()),
            ("duration", secs(duration)),
            ("off", "shallow.tcp_tsq = 0 (Shallow extension: TSQ off, the engine never stops for bytes below it)".into()),
            ("on", "TSQ as in Linux 6.x (tcp_limit_output_bytes 4 MB, floor 2 truesize / 1 ms of pacing rate)".into()),
            ("timestamps", "SO_TIMESTAMPING (TX_SCHED | TX_SOFTWARE | TX_ACK | SOFTWARE | OPT_ID | OPT_TSONLY) on the sender, error queue read as events come".into()),
        ],
        notes: vec![
            "Linux has no switch for TSQ; the off arm uses Shallow's extension sysctl shallow.tcp_tsq".into(),
            "seed figures for bytes below TCP are the commit's words: ~128 KB per socket instead of 4 MB".into(),
            "write_sched_to_snd: per write, SCHED (its last byte entered the qdisc) to SND (the NIC's TX completion of it), from the sender's SO_TIMESTAMPING error queue: the host-queue residence a user reads; write_snd_to_ack: SND to its ACK".into(),
        ],
    };
    for (rate, tag, delay, below) in [
        (Rate::gbps(1), "1G", DELAY_1G, BELOW_TCP_1G),
        (Rate::mbps(100), "100M", DELAY_100M, Claim::None),
    ] {
        let cfg = BenchConfig {
            qdisc: QdiscSpec::PfifoFast,
            nic_rate: Some(rate),
            link: LinkSpec {
                rate: None,
                delay: Duration::from_micros(50),
                ..LinkSpec::default()
            },
            // SO_TIMESTAMPING on the sender: the per-write spans below (reading them
            // changes nothing in the run).
            timestamps: true,
            ..stream(base, 1, 65536, duration)
        };
        let off_cfg = BenchConfig {
            sysctls: vec![("shallow.tcp_tsq".into(), "0".into())],
            ..cfg.clone()
        };
        let i = e.arms.len();
        e.arms.push(Arm::new(format!("tsq {tag} off"), off_cfg));
        e.arms.push(Arm::new(format!("tsq {tag} on"), cfg));
        e.charts.extend(charts(tag, i));
        let arms = (i, i + 1);
        e.metrics.extend([
            metric(
                format!("host_queue_delay_p50@{tag}"),
                "ms",
                delay,
                arms,
                |r| ms(r.total.host_queue_delay_p50_us),
            ),
            metric(
                format!("host_queue_delay_p99@{tag}"),
                "ms",
                delay,
                arms,
                |r| ms(r.total.host_queue_delay_p99_us),
            ),
            metric(
                format!("write_sched_to_snd_p50@{tag}"),
                "ms",
                delay,
                arms,
                |r| ms(tx_span(r, |t| t.sched_to_snd.as_ref(), |s| s.p50_us)),
            ),
            metric(
                format!("write_sched_to_snd_p99@{tag}"),
                "ms",
                delay,
                arms,
                |r| ms(tx_span(r, |t| t.sched_to_snd.as_ref(), |s| s.p99_us)),
            ),
            metric(
                format!("write_snd_to_ack_p50@{tag}"),
                "ms",
                Claim::None,
                arms,
                |r| ms(tx_span(r, |t| t.snd_to_ack.as_ref(), |s| s.p50_us)),
            ),
            metric(
                format!("bytes_below_tcp_max@{tag}"),
                "KB",
                below,
                arms,
                |r| r.total.bytes_queued_max as f64 / 1024.0,
            ),
            metric(
                format!("bytes_below_tcp_mean@{tag}"),
                "KB",
                Claim::None,
                arms,
                |r| r.total.bytes_queued_mean / 1024.0,
            ),
            metric(
                format!("throughput@{tag}"),
                "Mbit/s",
                Claim::Unchanged,
                arms,
                |r| r.total.throughput_bps / 1e6,
            ),
        ]);
    }
    e
}

/// A percentile of one of a Linux arm's per-write spans, ms (NaN without them).
fn span_ms(a: &ArmResult, span: impl Fn(&TxSpans) -> &Vec<f64>, q: f64) -> f64 {
    a.tx_spans
        .as_ref()
        .map_or(f64::NAN, |t| quantile(span(t), q) / 1e6)
}

/// A percentile of one of the report's per-write spans, microseconds (None without them).
fn tx_span(
    r: &shallow_sim::bench::BenchReport,
    span: impl Fn(&TxStampReport) -> Option<&SpanReport>,
    q: impl Fn(&SpanReport) -> f64,
) -> Option<f64> {
    r.tx_timestamps.as_ref().and_then(span).map(q)
}

/// At NIC rate `tag`, from arms `i` (off) and `i + 1` (on): the host-queue delay CDF and
/// bytes below TCP over time.
fn charts(tag: &str, i: usize) -> [ChartDef; 2] {
    let curves = || {
        let mut c = off_on("off: shallow.tcp_tsq = 0", "on: TSQ (Linux default)");
        for (arm, _) in &mut c {
            *arm += i;
        }
        c
    };
    let cdf = ChartDef {
        chart: Chart {
            name: format!("queue-delay-cdf-{tag}"),
            title: format!("host-queue delay per packet, CDF, NIC at {tag}"),
            x_desc: "host-queue delay: qdisc enqueue to last bit out of the NIC (ms)".into(),
            y_desc: "fraction of packets at or below".into(),
            log_x: true,
            legend_lower_right: true,
            curves: Vec::new(),
        },
        curves: curves(),
        points: Box::new(|s: &Series| delay_cdf(&s.host_queue_delay)),
    };
    let below = over_time(
        &format!("bytes-below-tcp-{tag}"),
        &format!("bytes below TCP (qdisc + NIC, not completed), NIC at {tag}"),
        "bytes below TCP (KB)",
        false,
        curves(),
        |s| s.gauge(|x| x.hosts[0].bytes_below_tcp as f64 / 1024.0),
    );
    [cdf, below]
}

/// The Linux table: one flow behind a 200 Mbit/s tbf (spec §12 E1's local setup); the kernel
/// has no switch, Shallow's off arm sets `shallow.tcp_tsq = 0`.
pub(super) fn on_linux(s: Scale) -> LinuxSpec {
    let tbf = Tbf {
        rate_bps: 200_000_000,
        burst: 32 * 1024,
        limit: 8 << 20,
    };
    let rate = tbf.rate_bps as f64;
    let qdelay_ms = move |a: &ArmResult| a.series(|s| s.tbf_bytes as f64 * 8.0 / rate * 1e3);
    LinuxSpec {
        tbf,
        side: Side::Sender,
        workload: Workload {
            flows: 1,
            msg: 65536,
            nodelay: false,
            writer: Writer::Blocking,
            duration: super::linux_duration(s),
            timestamps: true,
        },
        kernel_off: None,
        kernel_on: vec![],
        shallow_off: vec![("shallow/tcp_tsq", "0")],
        shallow_on: vec![],
        rows: vec![
            row("bottleneck_queue_delay_p50", "ms", DELAY_100M, move |a| {
                quantile(&qdelay_ms(a), 0.5)
            }),
            row("bottleneck_queue_delay_p99", "ms", DELAY_100M, move |a| {
                quantile(&qdelay_ms(a), 0.99)
            }),
            row("write_sched_to_snd_p50", "ms", DELAY_100M, |a| {
                span_ms(a, |t| &t.sched_to_snd, 0.5)
            }),
            row("write_sched_to_snd_p99", "ms", DELAY_100M, |a| {
                span_ms(a, |t| &t.sched_to_snd, 0.99)
            }),
            row("write_snd_to_ack_p50", "ms", Claim::None, |a| {
                span_ms(a, |t| &t.snd_to_ack, 0.5)
            }),
            row("tbf_backlog_max", "KB", Claim::None, |a| {
                max(&a.series(|s| s.tbf_bytes as f64)) / 1024.0
            }),
            row("bytes_below_tcp_mean", "KB", Claim::None, |a| {
                mean(&a.series(|s| s.below_tcp as f64)) / 1024.0
            }),
            row("throughput", "Mbit/s", Claim::Unchanged, |a| {
                a.throughput_bps() / 1e6
            }),
        ],
        notes: vec![
            "seed delay figures are the commit's 100 Mbit/s pair (132 ms -> < 8 ms); the bottleneck here is a 200 Mbit/s tbf (spec §12 E1's local setup)".into(),
            "queue delay = tbf backlog (tc -s qdisc, sampled every 50 ms) / tbf rate".into(),
            "Linux cannot switch TSQ off; Shallow's off arm uses its extension sysctl shallow.tcp_tsq = 0".into(),
            "queue delay for Shallow = backlog of its own egress tbf (same rate, burst and limit as the kernel's) / rate".into(),
            "write_sched_to_snd: per write, SCHED (its last byte handed to the qdisc) to SND (the device took it: the tbf released it) from the sender's own SO_TIMESTAMPING error queue (the kernel's socket and Shallow's), read every 500 us by a thread beside the writer; write_snd_to_ack: SND to its ACK".into(),
        ],
        charts: vec![SeriesChart {
            name: "tbf-backlog",
            title: "bottleneck (tbf) backlog over time",
            y_desc: "tbf backlog (KB)",
            off_label: "TSQ off",
            on_label: "TSQ on",
            value: |s| s.tbf_bytes as f64 / 1024.0,
        }],
    }
}
