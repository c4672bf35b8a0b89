//! The five experiments (spec §12 E1–E5): each seed's workload on the emulator, with the
//! mechanism off and on.
//!
//! Every arm also records a time series ([`shallow_sim::bench::run_series`], about 300
//! samples over the run; the report is the same as without it), from which each experiment
//! fills [`LabReport::charts`] for `--plots`, the off arm dashed: `tsq` the host-queue delay
//! CDF and bytes below TCP over time at each NIC rate; `notsent-lowat` TCP memory pages over
//! time; `pollout` sender wake-ups per second and TCP memory per flow over time; `autocork`
//! throughput and segments per write over time; `ack-defer` ACKs per second over time. Rates
//! are the differences of cumulative counters over each sampling interval.

use std::collections::BTreeMap;

use shallow_sim::bench::{self, BenchConfig, BenchError, BenchExtras, BenchReport};
use shallow_sim::hist::Histogram;
use shallow_sim::series::Sample;
use shallow_sim::spec::LinkSpec;
use shallow_sim::{CpuLayout, QdiscSpec, Rate, Series, SeriesConfig, Test, Time, Writer};

use crate::{Chart, Claim, Curve, LabReport, Metric, Scale};

/// One experiment of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    /// TCP Small Queues (46d3ceabd8d9): host-queue delay of one bulk flow.
    Tsq,
    /// TCP_NOTSENT_LOWAT (c9bee3b7fdec): TCP memory of 200 TCP_STREAM flows.
    NotsentLowat,
    /// Fewer POLLOUT events (a74f0fa082b7): memory and context switches, 100 flows, 100 ms.
    Pollout,
    /// Autocorking (f54b311142a9): 4 flows of 128-byte writes.
    Autocork,
    /// Backlog ACK deferral (133c4c0d3717): ACKs of one fast flow, split CPUs, quickack route.
    AckDefer,
}

impl Experiment {
    /// Every experiment, in `shallow lab all` order.
    pub const ALL: [Experiment; 5] = [
        Experiment::Tsq,
        Experiment::NotsentLowat,
        Experiment::Pollout,
        Experiment::Autocork,
        Experiment::AckDefer,
    ];

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Tsq => "tsq",
            Experiment::NotsentLowat => "notsent-lowat",
            Experiment::Pollout => "pollout",
            Experiment::Autocork => "autocork",
            Experiment::AckDefer => "ack-defer",
        }
    }
}

impl std::str::FromStr for Experiment {
    type Err = String;
    fn from_str(s: &str) -> Result<Experiment, String> {
        Experiment::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Experiment::ALL.iter().map(|e| e.name()).collect();
                format!(
                    "unknown experiment `{s}` (expected {} or all)",
                    names.join(", ")
                )
            })
    }
}

/// How to run an experiment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LabOptions {
    /// Master seed of both arms.
    pub seed: u64,
    /// Size of the runs.
    pub scale: Scale,
}

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// The emulator refused the setup.
    #[error("{arm}: {source}")]
    Bench {
        /// Which arm.
        arm: String,
        /// Why.
        source: BenchError,
    },
    /// The engine lacks the sysctl that switches the mechanism.
    #[error("the engine has no sysctl `{0}`: cannot switch the mechanism off")]
    MissingSwitch(String),
    /// The Linux substrate needs root; the experiment was not run.
    #[error("skipped: {0}")]
    NotRoot(String),
    /// The Linux substrate cannot run this experiment on this machine.
    #[error("not supported on the Linux substrate: {0}")]
    Unsupported(String),
    /// Setting up or running the Linux substrate failed.
    #[error("Linux substrate: {0}")]
    Linux(String),
}

/// One run of an experiment: a label, a configuration, and substrate extras.
struct Arm {
    label: String,
    cfg: BenchConfig,
    extras: BenchExtras,
}

/// TX completion interrupt coalescing (`ethtool -C tx-usecs`) where an experiment needs a
/// real NIC's: 16 µs, mlx5's default.
const NIC_TX_USECS: Time = Time::from_micros(16);

fn ensure_sysctl(name: &str) -> Result<(), LabError> {
    let st = shallow_tcp::Stack::new(0);
    st.sysctl_get(name)
        .map(|_| ())
        .map_err(|_| LabError::MissingSwitch(name.into()))
}

/// Runs one arm, recording its time series for the charts (the report is the same as
/// without the recorder).
fn go(arm: &Arm, progress: &mut dyn FnMut(&str, f64)) -> Result<(BenchReport, Series), LabError> {
    let label = arm.label.clone();
    let mut p = |f: f64| progress(&label, f);
    bench::run_series(&arm.cfg, &arm.extras, &series_cfg(&arm.cfg), None, &mut p)
        .map(|(r, _, s)| (r, s))
        .map_err(|source| LabError::Bench {
            arm: arm.label.clone(),
            source,
        })
}

/// Points of the charts' time series per arm: about this many over the run.
const CHART_POINTS: u64 = 300;

/// The recorder's setting for an arm: [`CHART_POINTS`] samples over its duration (not finer
/// than 20 µs), at most 2000 kept.
fn series_cfg(cfg: &BenchConfig) -> SeriesConfig {
    let d = cfg.duration.unwrap_or(Time::from_secs(10));
    SeriesConfig {
        interval: Time::from_micros((d.as_nanos() / CHART_POINTS / 1000).max(20)),
        max_points: 2000,
    }
}

/// Curve colour groups: the mechanism-off arm, the on arm, and further arms.
const OFF: usize = 0;
const ON: usize = 1;

fn curve(label: impl Into<String>, dashed: bool, group: usize, points: Vec<(f64, f64)>) -> Curve {
    Curve {
        label: label.into(),
        dashed,
        group,
        points,
    }
}

/// A chart over the run's virtual time.
fn over_time(
    name: &str,
    title: &str,
    y_desc: &str,
    lower_right: bool,
    curves: Vec<Curve>,
) -> Chart {
    Chart {
        name: name.into(),
        title: title.into(),
        x_desc: "virtual time since the start of the run (s)".into(),
        y_desc: y_desc.into(),
        log_x: false,
        legend_lower_right: lower_right,
        curves,
    }
}

/// The CDF of a delay histogram (ns) as (ms, fraction at or below), starting from 0 at the
/// smallest delay.
fn delay_cdf(h: &Histogram) -> Vec<(f64, f64)> {
    let c = h.cdf();
    let mut pts = Vec::with_capacity(c.len() + 1);
    if let Some(&(v, _)) = c.first() {
        pts.push((v as f64 / 1e6, 0.0));
    }
    pts.extend(c.iter().map(|&(v, f)| (v as f64 / 1e6, f)));
    pts
}

/// Per interval, the increase of `num` over the increase of `den` (intervals where `den`
/// did not move are left out): e.g. segments per `send()`.
fn ratio_over_time(
    s: &Series,
    num: impl Fn(&Sample) -> u64,
    den: impl Fn(&Sample) -> u64,
) -> Vec<(f64, f64)> {
    s.samples
        .windows(2)
        .filter_map(|w| {
            let d = den(&w[1]).saturating_sub(den(&w[0]));
            (d > 0).then(|| {
                let n = num(&w[1]).saturating_sub(num(&w[0]));
                (w[1].t.as_secs_f64(), n as f64 / d as f64)
            })
        })
        .collect()
}

fn ms(us: Option<f64>) -> f64 {
    us.map_or(f64::NAN, |v| v / 1000.0)
}

fn secs(t: Time) -> String {
    format!("{} s", t.as_secs_f64())
}

fn sender_cpu_s(r: &BenchReport) -> f64 {
    r.cpu
        .iter()
        .filter(|c| c.host == "sender")
        .map(|c| c.busy_s)
        .sum()
}

fn per_s(n: u64, r: &BenchReport) -> f64 {
    if r.duration_s > 0.0 {
        n as f64 / r.duration_s
    } else {
        f64::NAN
    }
}

fn scaled<T: Copy>(scale: Scale, full: T, quick: T, tiny: T) -> T {
    match scale {
        Scale::Full => full,
        Scale::Quick => quick,
        Scale::Tiny => tiny,
    }
}

fn sysctl(name: &str, v: &str) -> (String, String) {
    (format!("net.ipv4.{name}"), v.into())
}

/// Run one experiment, both arms. `progress(arm, fraction)` after each sampling period.
pub fn run(
    exp: Experiment,
    opts: &LabOptions,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<LabReport, LabError> {
    let mut config = BTreeMap::new();
    let mut notes = Vec::new();
    let mut metrics = Vec::new();
    let mut charts = Vec::new();
    let s = opts.scale;
    let base = BenchConfig {
        seed: opts.seed,
        ..BenchConfig::default()
    };
    match exp {
        Experiment::Tsq => {
            let duration = scaled(
                s,
                Time::from_secs(10),
                Time::from_secs(2),
                Time::from_millis(300),
            );
            config.insert(
                "workload".into(),
                "1 TCP_STREAM flow, 64 KB writes, TSO, pfifo_fast".into(),
            );
            config.insert(
                "bottleneck".into(),
                "the sender's own NIC (1 Gbit/s, then 100 Mbit/s); 50 us one-way delay".into(),
            );
            config.insert("duration".into(), secs(duration));
            config.insert("off".into(), "shallow.tcp_tsq = 0 (Shallow extension: TSQ off, the engine never stops for bytes below it)".into());
            config.insert("on".into(), "TSQ as in Linux 6.x (tcp_limit_output_bytes 4 MB, floor 2 truesize / 1 ms of pacing rate)".into());
            notes.push("Linux has no switch for TSQ; the off arm uses Shallow's extension sysctl shallow.tcp_tsq".into());
            notes.push("seed figures for bytes below TCP are the commit's words: ~128 KB per socket instead of 4 MB".into());
            for (rate, tag, delay_claim) in [
                (Rate::gbps(1), "1G", (50.0, 1.0)),
                (Rate::mbps(100), "100M", (132.0, 8.0)),
            ] {
                let cfg = BenchConfig {
                    test: Test::Stream,
                    flows: 1,
                    msg_size: 65536,
                    duration: Some(duration),
                    qdisc: QdiscSpec::PfifoFast,
                    nic_rate: Some(rate),
                    link: LinkSpec {
                        rate: None,
                        delay: Time::from_micros(50),
                        ..LinkSpec::default()
                    },
                    ..base.clone()
                };
                let (off, off_s) = go(
                    &Arm {
                        label: format!("tsq {tag} off"),
                        cfg: BenchConfig {
                            sysctls: vec![("shallow.tcp_tsq".into(), "0".into())],
                            ..cfg.clone()
                        },
                        extras: BenchExtras::default(),
                    },
                    progress,
                )?;
                let (on, on_s) = go(
                    &Arm {
                        label: format!("tsq {tag} on"),
                        cfg,
                        extras: BenchExtras::default(),
                    },
                    progress,
                )?;
                let (l_off, l_on) = ("off: shallow.tcp_tsq = 0", "on: TSQ (Linux default)");
                charts.push(Chart {
                    name: format!("queue-delay-cdf-{tag}"),
                    title: format!("host-queue delay per packet, CDF, NIC at {tag}"),
                    x_desc: "host-queue delay: qdisc enqueue to last bit out of the NIC (ms)"
                        .into(),
                    y_desc: "fraction of packets at or below".into(),
                    log_x: true,
                    legend_lower_right: true,
                    curves: vec![
                        curve(l_off, true, OFF, delay_cdf(&off_s.host_queue_delay)),
                        curve(l_on, false, ON, delay_cdf(&on_s.host_queue_delay)),
                    ],
                });
                let below = |s: &Series| s.gauge(|x| x.hosts[0].bytes_below_tcp as f64 / 1024.0);
                charts.push(over_time(
                    &format!("bytes-below-tcp-{tag}"),
                    &format!("bytes below TCP (qdisc + NIC, not completed), NIC at {tag}"),
                    "bytes below TCP (KB)",
                    false,
                    vec![
                        curve(l_off, true, OFF, below(&off_s)),
                        curve(l_on, false, ON, below(&on_s)),
                    ],
                ));
                let (a, b) = (&off.total, &on.total);
                let dc = Claim::Figures {
                    off: delay_claim.0,
                    on: delay_claim.1,
                };
                metrics.push(Metric::new(
                    &format!("host_queue_delay_p50@{tag}"),
                    "ms",
                    dc,
                    ms(a.host_queue_delay_p50_us),
                    ms(b.host_queue_delay_p50_us),
                ));
                metrics.push(Metric::new(
                    &format!("host_queue_delay_p99@{tag}"),
                    "ms",
                    dc,
                    ms(a.host_queue_delay_p99_us),
                    ms(b.host_queue_delay_p99_us),
                ));
                let qc = if tag == "1G" {
                    Claim::Figures {
                        off: 4096.0,
                        on: 128.0,
                    }
                } else {
                    Claim::None
                };
                metrics.push(Metric::new(
                    &format!("bytes_below_tcp_max@{tag}"),
                    "KB",
                    qc,
                    a.bytes_queued_max as f64 / 1024.0,
                    b.bytes_queued_max as f64 / 1024.0,
                ));
                metrics.push(Metric::new(
                    &format!("bytes_below_tcp_mean@{tag}"),
                    "KB",
                    Claim::None,
                    a.bytes_queued_mean / 1024.0,
                    b.bytes_queued_mean / 1024.0,
                ));
                metrics.push(Metric::new(
                    &format!("throughput@{tag}"),
                    "Mbit/s",
                    Claim::Unchanged,
                    a.throughput_bps / 1e6,
                    b.throughput_bps / 1e6,
                ));
            }
        }
        Experiment::NotsentLowat => {
            ensure_sysctl("net.ipv4.tcp_notsent_lowat")?;
            let flows = scaled(s, 200, 40, 8);
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
            config.insert(
                "workload".into(),
                format!("{flows} TCP_STREAM flows (netperf 16 KB writes, blocking)"),
            );
            config.insert("link".into(), "10 Gbit/s, 0.5 ms RTT, pfifo_fast".into());
            config.insert("duration".into(), secs(duration));
            config.insert(
                "off".into(),
                "net.ipv4.tcp_notsent_lowat = 4294967295 (unset)".into(),
            );
            config.insert("on".into(), "net.ipv4.tcp_notsent_lowat = 131072".into());
            if flows != 200 {
                notes.push(format!("{flows} flows instead of the commit's 200: pages scale with flows, compare the ratio"));
            }
            notes.push("TCP memory = sum over the sender's sockets of wmem_queued + rmem_alloc in pages, sampled every 10 ms (the commit read /proc/net/protocols once, after 60 s)".into());
            let arm = |label: &str, v: &str| Arm {
                label: label.into(),
                cfg: BenchConfig {
                    sysctls: vec![sysctl("tcp_notsent_lowat", v)],
                    ..cfg.clone()
                },
                extras: BenchExtras::default(),
            };
            let (off, off_s) = go(&arm("notsent-lowat off", "4294967295"), progress)?;
            let (on, on_s) = go(&arm("notsent-lowat on", "131072"), progress)?;
            let pages = |s: &Series| s.gauge(|x| x.hosts[0].tcp_mem_pages as f64);
            charts.push(over_time(
                "tcp-mem-pages",
                &format!("TCP memory of the sender's {flows} sockets"),
                "TCP memory: wmem_queued + rmem_alloc (4 KB pages)",
                true,
                vec![
                    curve("off: tcp_notsent_lowat unset", true, OFF, pages(&off_s)),
                    curve("on: tcp_notsent_lowat = 128 KB", false, ON, pages(&on_s)),
                ],
            ));
            let k = 200.0 / flows as f64;
            metrics.push(Metric::new(
                "tcp_mem_pages_mean",
                "pages",
                Claim::Figures {
                    off: 45458.0 / k,
                    on: 20567.0 / k,
                },
                off.total_extra.sockstat_mem_pages_mean,
                on.total_extra.sockstat_mem_pages_mean,
            ));
            metrics.push(Metric::new(
                "tcp_mem_pages_peak",
                "pages",
                Claim::None,
                off.total_extra.sockstat_mem_pages_max as f64,
                on.total_extra.sockstat_mem_pages_max as f64,
            ));
            metrics.push(Metric::new(
                "throughput",
                "Gbit/s",
                Claim::Unchanged,
                off.total.throughput_bps / 1e9,
                on.total.throughput_bps / 1e9,
            ));
            metrics.push(Metric::new(
                "context_switches",
                "1/s",
                Claim::None,
                off.total.context_switches_per_s,
                on.total.context_switches_per_s,
            ));
            if flows != 200 {
                notes.push(format!("seed pages scaled by {flows}/200"));
            }
        }
        Experiment::Pollout => {
            ensure_sysctl("net.ipv4.tcp_notsent_lowat")?;
            let flows = scaled(s, 100, 20, 4);
            let duration = scaled(
                s,
                Time::from_secs(10),
                Time::from_secs(3),
                Time::from_millis(600),
            );
            let cfg = BenchConfig {
                test: Test::Stream,
                flows,
                duration: Some(duration),
                msg_size: 16384,
                writer: Writer::Blocking,
                link: LinkSpec {
                    rate: Some(Rate::gbps(10)),
                    delay: Time::from_millis(50),
                    ..LinkSpec::default()
                },
                sample_interval: Time::from_millis(50),
                ..base.clone()
            };
            config.insert(
                "workload".into(),
                format!("{flows} TCP_STREAM flows (netperf, blocking 16 KB writes), cubic"),
            );
            config.insert("link".into(), "10 Gbit/s, 100 ms RTT".into());
            config.insert("sender tcp_wmem".into(), "4096 262144 64000000".into());
            // The seed's sender held 1,364,904 pages (5.2 GiB) of TCP memory, so its tcp_mem
            // was far above the 4 GiB machine of the engine's default; give the emulated
            // sender a large server's (Linux's tcp_init_mem for 128 GiB).
            let [m0, m1, m2] = shallow_tcp::sysctl::tcp_mem_for_memory(128 << 30);
            let tcp_mem = format!("{m0} {m1} {m2}");
            config.insert(
                "sender tcp_mem".into(),
                format!("{tcp_mem} pages (a 128 GiB machine's; the seed's held 1,364,904)"),
            );
            config.insert("duration".into(), secs(duration));
            config.insert("off".into(), "net.ipv4.tcp_notsent_lowat unset".into());
            config.insert(
                "on".into(),
                "net.ipv4.tcp_notsent_lowat = 2097152 (wake-ups at notsent < X/2)".into(),
            );
            notes.push(
                "the commit's figures compare lowat unset vs 2 MB, both with its X/2 wake rule"
                    .into(),
            );
            notes.push("sender context switches = wake-ups of the sending host's blocked writers (the commit's vmstat cs ran on the sender, A); the receivers' are shown apart".into());
            notes
                .push("the commit ran BBR; the engine has cubic and reno, so cubic is used".into());
            if flows != 100 {
                notes.push(format!("{flows} flows instead of 100; context switches scale with flows (seed figures scaled by {flows}/100)"));
            }
            let arm = |label: &str, v: &str, wake_half: &str| Arm {
                label: label.into(),
                cfg: BenchConfig {
                    sysctls: vec![
                        sysctl("tcp_wmem", "4096 262144 64000000"),
                        sysctl("tcp_mem", &tcp_mem),
                        sysctl("tcp_notsent_lowat", v),
                        (
                            "shallow.tcp_notsent_lowat_wake_half".into(),
                            wake_half.into(),
                        ),
                    ],
                    ..cfg.clone()
                },
                extras: BenchExtras::default(),
            };
            let (off, off_s) = go(&arm("pollout off", "4294967295", "1"), progress)?;
            let (on, on_s) = go(&arm("pollout on", "2097152", "1"), progress)?;
            // The comparison the commit is about: the same lowat, waking at X (before it)
            // vs X/2. No published figure, so no verdict; shown for what it measures.
            let (at_x, at_x_s) = go(&arm("pollout wake at X", "2097152", "0"), progress)?;
            let (l_off, l_x, l_on) = (
                "off: tcp_notsent_lowat unset",
                "lowat 2 MB, wake at notsent < X (before the commit)",
                "on: lowat 2 MB, wake at notsent < X/2",
            );
            let wakes = |s: &Series| s.rate(|x| x.sender_wakeups);
            charts.push(over_time(
                "sender-wakeups",
                &format!("wake-ups of the {flows} blocked writers"),
                "sender wake-ups per second (1/s)",
                false,
                vec![
                    curve(l_off, true, OFF, wakes(&off_s)),
                    curve(l_x, true, 2, wakes(&at_x_s)),
                    curve(l_on, false, ON, wakes(&on_s)),
                ],
            ));
            let mem = |s: &Series| {
                s.gauge(|x| x.hosts[0].tcp_mem_pages as f64 * 4096.0 / flows as f64 / 1e6)
            };
            charts.push(over_time(
                "tcp-mem-per-flow",
                "TCP memory per flow of the sender",
                "TCP memory per flow: (wmem_queued + rmem_alloc) / flows (MB)",
                false,
                vec![
                    curve(l_off, true, OFF, mem(&off_s)),
                    curve(l_x, true, 2, mem(&at_x_s)),
                    curve(l_on, false, ON, mem(&on_s)),
                ],
            ));
            notes.push("wake_at_X_vs_X/2 rows: lowat 2 MB in both arms; 'off' wakes writers at notsent < X (shallow.tcp_notsent_lowat_wake_half = 0, the behaviour before the commit), 'on' below X/2".into());
            metrics.push(Metric::new(
                "sender_context_switches (wake at X vs X/2)",
                "1/s",
                Claim::None,
                per_s(at_x.total.sender_wakeups, &at_x),
                per_s(on.total.sender_wakeups, &on),
            ));
            metrics.push(Metric::new(
                "throughput (wake at X vs X/2)",
                "Gbit/s",
                Claim::Unchanged,
                at_x.total.throughput_bps / 1e9,
                on.total.throughput_bps / 1e9,
            ));
            let per_flow = |r: &BenchReport| {
                r.total_extra.sockstat_mem_pages_mean * 4096.0 / flows as f64 / 1e6
            };
            let per_flow_peak = |r: &BenchReport| {
                r.total_extra.sockstat_mem_pages_max as f64 * 4096.0 / flows as f64 / 1e6
            };
            metrics.push(Metric::new(
                "tcp_mem_per_flow_mean",
                "MB",
                Claim::Figures { off: 54.0, on: 3.5 },
                per_flow(&off),
                per_flow(&on),
            ));
            metrics.push(Metric::new(
                "tcp_mem_per_flow_peak",
                "MB",
                Claim::None,
                per_flow_peak(&off),
                per_flow_peak(&on),
            ));
            let k = flows as f64 / 100.0;
            metrics.push(Metric::new(
                "sender_context_switches",
                "1/s",
                Claim::Figures {
                    off: 6000.0 * k,
                    on: 13000.0 * k,
                },
                per_s(off.total.sender_wakeups, &off),
                per_s(on.total.sender_wakeups, &on),
            ));
            metrics.push(Metric::new(
                "context_switches_all_threads",
                "1/s",
                Claim::None,
                off.total.context_switches_per_s,
                on.total.context_switches_per_s,
            ));
            metrics.push(Metric::new(
                "throughput",
                "Gbit/s",
                Claim::Unchanged,
                off.total.throughput_bps / 1e9,
                on.total.throughput_bps / 1e9,
            ));
        }
        Experiment::Autocork => {
            ensure_sysctl("net.ipv4.tcp_autocorking")?;
            let duration = scaled(
                s,
                Time::from_secs(1),
                Time::from_millis(250),
                Time::from_millis(40),
            );
            let cfg = BenchConfig {
                test: Test::Stream,
                flows: 4,
                duration: Some(duration),
                msg_size: 128,
                // The commit's "Tested:" line is `super_netperf 4 -t TCP_STREAM -- -m 128`:
                // no -D, so Nagle is on. The spec's E4 adds TCP_NODELAY; shown apart below.
                nodelay: false,
                // One CPU per netperf, as the commit's machine (2.9-3.3 CPUs busy for 4).
                cpus: CpuLayout::Spread { cpus: 4 },
                tx_completion_delay: NIC_TX_USECS,
                link: LinkSpec {
                    rate: Some(Rate::gbps(10)),
                    delay: Time::from_micros(25),
                    ..LinkSpec::default()
                },
                ..base.clone()
            };
            config.insert(
                "workload".into(),
                "4 TCP_STREAM flows, 128-byte writes, Nagle on (super_netperf 4 -t TCP_STREAM -- -m 128, the commit's command)".into(),
            );
            config.insert(
                "link".into(),
                "10 Gbit/s NIC and link, 50 us RTT, pfifo_fast".into(),
            );
            config.insert(
                "cpus".into(),
                "4 per host, spread: one netperf thread per CPU, each flow's softirq and TX completions on the CPU its port pair hashes to (RSS)".into(),
            );
            config.insert("nic tx-usecs".into(), format!("{} us (TX completion interrupt coalescing of a real NIC; the emulator's default is 0)", NIC_TX_USECS.as_nanos() / 1000));
            config.insert("duration".into(), secs(duration));
            config.insert("off".into(), "net.ipv4.tcp_autocorking = 0".into());
            config.insert("on".into(), "net.ipv4.tcp_autocorking = 1".into());
            notes.push("seed CPU figures are perf task-clock seconds of the 4 netperfs over a fixed-length run (not per byte); Shallow's are the sending host's CPU busy seconds over the run; per GB assumes netperf's default 10 s run".into());
            notes.push("the commit's 12% fewer cycles are over a fixed-length run in which its 'on' arm reached the 10 Gbit/s line rate (9.4 Gbit/s) and its CPUs idled; read sender_cpu_time beside throughput: it falls only when an arm is limited by the line, not by its CPUs".into());
            notes.push("rows marked (TCP_NODELAY): the spec's E4 variant (netperf -D), which the commit did not run: every write is pushed at once unless autocorked".into());
            let arm = |label: &str, v: &str, nodelay: bool| Arm {
                label: label.into(),
                cfg: BenchConfig {
                    sysctls: vec![sysctl("tcp_autocorking", v)],
                    nodelay,
                    ..cfg.clone()
                },
                extras: BenchExtras::default(),
            };
            let (off, off_s) = go(&arm("autocork off", "0", false), progress)?;
            let (on, on_s) = go(&arm("autocork on", "1", false), progress)?;
            let (nd_off, nd_off_s) = go(&arm("autocork nodelay off", "0", true), progress)?;
            let (nd_on, nd_on_s) = go(&arm("autocork nodelay on", "1", true), progress)?;
            let arms = [
                ("off: tcp_autocorking = 0", true, OFF, &off_s),
                ("on: tcp_autocorking = 1", false, ON, &on_s),
                ("TCP_NODELAY, off: tcp_autocorking = 0", true, 2, &nd_off_s),
                ("TCP_NODELAY, on: tcp_autocorking = 1", false, 3, &nd_on_s),
            ];
            charts.push(over_time(
                "throughput",
                "throughput of the 4 flows (bytes TCP sent)",
                "throughput (Gbit/s)",
                false,
                arms.iter()
                    .map(|&(l, d, g, s)| {
                        let pts = s.rate(|x| x.bytes_sent);
                        curve(
                            l,
                            d,
                            g,
                            pts.into_iter().map(|(t, v)| (t, v * 8.0 / 1e9)).collect(),
                        )
                    })
                    .collect(),
            ));
            charts.push(over_time(
                "segments-per-write",
                "data segments sent per send() call (4 flows, 128-byte writes)",
                "segments per write",
                false,
                arms.iter()
                    .map(|&(l, d, g, s)| {
                        curve(
                            l,
                            d,
                            g,
                            ratio_over_time(s, |x| x.segments_sent, |x| x.send_calls),
                        )
                    })
                    .collect(),
            ));
            // The seed's task-clock over the bytes sent: netperf's default 10 s run at the
            // published throughput (an assumption: the commit gives the elapsed time of one run).
            let gb = |mbps: f64| mbps * 1e6 * 10.0 / 8.0 / 1e9;
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
            let corks =
                |r: &BenchReport| *r.counters.get("TcpExtTCPAutoCorking").unwrap_or(&0) as f64;
            for (tag, off, on, seeded) in [
                ("", &off, &on, true),
                (" (TCP_NODELAY)", &nd_off, &nd_on, false),
            ] {
                let claim = |c: Claim| if seeded { c } else { Claim::None };
                metrics.push(Metric::new(
                    &format!("throughput{tag}"),
                    "Mbit/s",
                    claim(Claim::Figures {
                        off: 6624.89,
                        on: 9410.39,
                    }),
                    off.total.throughput_bps / 1e6,
                    on.total.throughput_bps / 1e6,
                ));
                metrics.push(Metric::new(
                    &format!("sender_cpu_time{tag}"),
                    "CPU-s",
                    claim(Claim::Figures {
                        off: 40.046,
                        on: 35.209,
                    }),
                    sender_cpu_s(off),
                    sender_cpu_s(on),
                ));
                metrics.push(Metric::new(
                    &format!("sender_cpu_per_gb{tag}"),
                    "CPU-s/GB",
                    claim(Claim::Figures {
                        off: 40.046 / gb(6624.89),
                        on: 35.209 / gb(9410.39),
                    }),
                    cpu_per_gb(off),
                    cpu_per_gb(on),
                ));
                metrics.push(Metric::new(
                    &format!("segments_per_write{tag}"),
                    "segs",
                    Claim::None,
                    spw(off),
                    spw(on),
                ));
                metrics.push(Metric::new(
                    &format!("bytes_per_segment{tag}"),
                    "B",
                    Claim::None,
                    off.total.mean_segment_bytes,
                    on.total.mean_segment_bytes,
                ));
                metrics.push(Metric::new(
                    &format!("autocorking_events{tag}"),
                    "count",
                    Claim::None,
                    corks(off),
                    corks(on),
                ));
            }
        }
        Experiment::AckDefer => {
            ensure_sysctl("net.ipv4.tcp_backlog_ack_defer")?;
            let duration = scaled(
                s,
                Time::from_secs(2),
                Time::from_millis(400),
                Time::from_millis(60),
            );
            let cfg = BenchConfig {
                test: Test::Stream,
                flows: 1,
                duration: Some(duration),
                msg_size: 65536,
                recv_size: 131072,
                cpus: CpuLayout::Split,
                nic_rate: Some(Rate::gbps(200)),
                link: LinkSpec {
                    rate: Some(Rate::gbps(200)),
                    delay: Time::from_micros(10),
                    ..LinkSpec::default()
                },
                ..base.clone()
            };
            config.insert(
                "workload".into(),
                "1 TCP_STREAM flow, 64 KB writes, receiver reads 128 KB (netserver's default recv size: the initial SO_RCVBUF, tcp_rmem[1])".into(),
            );
            config.insert("link".into(), "200 Gbit/s NIC and link, 20 us RTT".into());
            config.insert(
                "cpus".into(),
                "split: softirq on CPU 0, application on CPU 1 (both hosts)".into(),
            );
            config.insert("receiver route".into(), "quickack 1".into());
            config.insert("duration".into(), secs(duration));
            config.insert(
                "off".into(),
                "receiver net.ipv4.tcp_backlog_ack_defer = 0".into(),
            );
            config.insert(
                "on".into(),
                "receiver net.ipv4.tcp_backlog_ack_defer = 1".into(),
            );
            notes.push("backlog drops: the seed's kernel (v6.6) dropped when backlog + receive queue exceeded rcvbuf + sndbuf + 64 KB; since April 2024 ('tcp: avoid premature drops in tcp_add_backlog()') the limit is 2 rcvbuf + sndbuf/2 + 64 KB, which the engine follows. The receive window keeps backlog + receive queue near rcvbuf, so the newer limit is never reached and there are no drops for deferral to remove; the engine has no switch for the older limit".into());
            notes.push("the receiver's application CPU is saturated in both arms, as in the commit ('bottleneck is usually the user cpu'); the flow runs at tens of Gbit/s, not 100-120: compare ratios".into());
            notes.push("with quickack every backlog packet processed at release is ACKed when deferral is off; backlog packets that tcp_add_backlog coalesced into the previous one (backlog_coalesces) need no ACK of their own. Linux cannot coalesce two full GRO packets (MAX_SKB_FRAGS = 17, the seed's ~60 KB); compare backlog_coalesces with backlog_packets".into());
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
            let (off, off_s) = go(&arm("ack-defer off", "0"), progress)?;
            let (on, on_s) = go(&arm("ack-defer on", "1"), progress)?;
            let acks = |s: &Series| s.rate(|x| x.acks_sent);
            charts.push(over_time(
                "acks-per-second",
                "ACKs the receiver sent (quickack route)",
                "ACKs per second (1/s)",
                false,
                vec![
                    curve("off: tcp_backlog_ack_defer = 0", true, OFF, acks(&off_s)),
                    curve("on: tcp_backlog_ack_defer = 1", false, ON, acks(&on_s)),
                ],
            ));
            metrics.push(Metric::new(
                "acks",
                "1/s",
                Claim::Figures {
                    off: 240_000.0,
                    on: 40_000.0,
                },
                per_s(off.total.acks_sent, &off),
                per_s(on.total.acks_sent, &on),
            ));
            metrics.push(Metric::new(
                "backlog_drops",
                "1/s",
                Claim::Figures {
                    off: 230.0,
                    on: 0.0,
                },
                per_s(off.total_extra.backlog_drops, &off),
                per_s(on.total_extra.backlog_drops, &on),
            ));
            metrics.push(Metric::new(
                "throughput",
                "Gbit/s",
                Claim::Figures {
                    off: 100.0,
                    on: 120.0,
                },
                off.total.throughput_bps / 1e9,
                on.total.throughput_bps / 1e9,
            ));
            metrics.push(Metric::new(
                "backlog_packets",
                "1/s",
                Claim::None,
                per_s(off.total_extra.backlog_packets, &off),
                per_s(on.total_extra.backlog_packets, &on),
            ));
            metrics.push(Metric::new(
                "backlog_coalesces",
                "1/s",
                Claim::None,
                per_s(off.total_extra.backlog_coalesces, &off),
                per_s(on.total_extra.backlog_coalesces, &on),
            ));
            metrics.push(Metric::new(
                "acks_per_data_segment",
                "ratio",
                Claim::None,
                off.total.acks_per_data_segment.unwrap_or(f64::NAN),
                on.total.acks_per_data_segment.unwrap_or(f64::NAN),
            ));
            let util = |r: &BenchReport, host: &str, cpu: usize| {
                r.cpu
                    .iter()
                    .find(|c| c.host == host && c.cpu == cpu)
                    .map_or(f64::NAN, |c| c.utilization)
            };
            for (name, host, cpu) in [
                ("sender_softirq_cpu_util", "sender", 0),
                ("sender_app_cpu_util", "sender", 1),
                ("receiver_softirq_cpu_util", "receiver", 0),
                ("receiver_app_cpu_util", "receiver", 1),
            ] {
                metrics.push(Metric::new(
                    name,
                    "fraction",
                    Claim::None,
                    util(&off, host, cpu),
                    util(&on, host, cpu),
                ));
            }
        }
    }
    config.insert("scale".into(), format!("{s:?}").to_lowercase());
    config.insert(
        "cost table".into(),
        "emulator defaults (not tuned per experiment)".into(),
    );
    Ok(LabReport {
        experiment: exp.name().into(),
        scale: s,
        seed: opts.seed,
        metrics,
        config,
        notes,
        charts,
    })
}
