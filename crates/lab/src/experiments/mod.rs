//! The five experiments (spec §12 E1–E5) as data, and one runner for the emulator.
//!
//! Each experiment is a file here (`tsq.rs`, `notsent_lowat.rs`, `pollout.rs`,
//! `autocork.rs`, `ack_defer.rs`) that holds the seed commit's published figures and two
//! tables built from them: [`Emulated`] (its arms with their sysctls and bench
//! configuration, the metrics with their unit, claim and how each is computed from an arm's
//! report, the charts, the setup and the notes) for [`run`], and where Linux runs it a
//! [`LinuxSpec`] (bottleneck, workload, the kernel's and the engine's sysctls per arm, rows,
//! charts, notes) for [`crate::linux::run_linux`]. The seed's figures are constants each
//! file shares between its two tables.
//!
//! Every arm also records a time series ([`shallow_sim::bench::run_series`], about 300
//! samples over the run; the report is the same as without it), from which each experiment
//! fills [`LabReport::charts`] for `--plots`, the off arm dashed: `tsq` the host-queue delay
//! CDF and bytes below TCP over time at each NIC rate; `notsent-lowat` TCP memory pages over
//! time; `pollout` sender wake-ups per second and TCP memory per flow over time; `autocork`
//! throughput and segments per write over time; `ack-defer` ACKs per second over time. Rates
//! are the differences of cumulative counters over each sampling interval.

use std::collections::BTreeMap;
use std::time::Duration;

use shallow_sim::bench::{self, BenchConfig, BenchError, BenchExtras, BenchReport};
use shallow_sim::hist::Histogram;
use shallow_sim::series::Sample;
use shallow_sim::time::{nanos, secs_f64};
use shallow_sim::{Series, SeriesConfig};

use crate::linux::{LinuxSpec, Tbf};
use crate::{Chart, Claim, Curve, LabReport, Metric, Scale};

mod ack_defer;
mod autocork;
mod notsent_lowat;
mod pollout;
mod tsq;

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

    /// The experiment on the Linux substrate at scale `s`, or why it cannot run there.
    pub(crate) fn on_linux(self, s: Scale) -> Result<LinuxSpec, LabError> {
        match self {
            Experiment::Tsq => Ok(tsq::on_linux(s)),
            Experiment::NotsentLowat => Ok(notsent_lowat::on_linux(s)),
            Experiment::Pollout => Ok(pollout::on_linux(s)),
            Experiment::Autocork => Ok(autocork::on_linux(s)),
            Experiment::AckDefer => Ok(ack_defer::on_linux(s)),
        }
    }

    /// The experiment on the emulator at scale `s`, every arm from `base` (the seed).
    fn emulated(self, s: Scale, base: &BenchConfig) -> Emulated {
        match self {
            Experiment::Tsq => tsq::emulated(s, base),
            Experiment::NotsentLowat => notsent_lowat::emulated(s, base),
            Experiment::Pollout => pollout::emulated(s, base),
            Experiment::Autocork => autocork::emulated(s, base),
            Experiment::AckDefer => ack_defer::emulated(s, base),
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

// ---------------------------------------------------------------------------------------
// An emulator experiment as data.

/// One experiment on the emulator: what [`run`] runs and how it reads the results.
pub(crate) struct Emulated {
    /// The engine sysctl that switches the mechanism, checked before any arm runs.
    switch: Option<&'static str>,
    /// The arms, run in this order.
    arms: Vec<Arm>,
    /// The metrics, in display order.
    metrics: Vec<MetricDef>,
    /// The charts, in file order.
    charts: Vec<ChartDef>,
    /// The setup (the runner adds the scale and the cost table).
    config: Vec<(&'static str, String)>,
    /// Caveats, in display order.
    notes: Vec<String>,
}

/// One run of an experiment: a label, a configuration, and substrate extras.
struct Arm {
    label: String,
    cfg: BenchConfig,
    extras: BenchExtras,
}

impl Arm {
    /// An arm with no substrate extras.
    fn new(label: impl Into<String>, cfg: BenchConfig) -> Arm {
        Arm {
            label: label.into(),
            cfg,
            extras: BenchExtras::default(),
        }
    }
}

/// A metric: its name, unit and claim, the arms it compares (indexes of the mechanism-off
/// and -on arms) and how it is computed from one arm's report.
struct MetricDef {
    name: String,
    unit: &'static str,
    claim: Claim,
    arms: (usize, usize),
    value: Box<dyn Fn(&BenchReport) -> f64>,
}

/// A metric comparing arms `arms.0` (off) and `arms.1` (on).
fn metric(
    name: impl Into<String>,
    unit: &'static str,
    claim: Claim,
    arms: (usize, usize),
    value: impl Fn(&BenchReport) -> f64 + 'static,
) -> MetricDef {
    MetricDef {
        name: name.into(),
        unit,
        claim,
        arms,
        value: Box::new(value),
    }
}

/// How an arm's time series becomes a curve's points.
type Points = Box<dyn Fn(&Series) -> Vec<(f64, f64)>>;

/// A chart: its axes and curves (each drawn from one arm's series, its points left empty
/// here) and how an arm's series becomes points.
struct ChartDef {
    chart: Chart,
    curves: Vec<(usize, Curve)>,
    points: Points,
}

/// Curve colour groups: the mechanism-off arm, the on arm, and further arms.
const OFF: usize = 0;
const ON: usize = 1;

/// Arm `arm`'s curve.
fn curve(arm: usize, label: &str, dashed: bool, group: usize) -> (usize, Curve) {
    let c = Curve {
        label: label.into(),
        dashed,
        group,
        points: Vec::new(),
    };
    (arm, c)
}

/// The usual pair of curves: arm 0 is the mechanism off (dashed), arm 1 on.
fn off_on(off: &str, on: &str) -> Vec<(usize, Curve)> {
    vec![curve(0, off, true, OFF), curve(1, on, false, ON)]
}

/// A chart over the run's virtual time.
fn over_time(
    name: &str,
    title: &str,
    y_desc: &str,
    lower_right: bool,
    curves: Vec<(usize, Curve)>,
    points: impl Fn(&Series) -> Vec<(f64, f64)> + 'static,
) -> ChartDef {
    ChartDef {
        chart: Chart {
            name: name.into(),
            title: title.into(),
            x_desc: "virtual time since the start of the run (s)".into(),
            y_desc: y_desc.into(),
            log_x: false,
            legend_lower_right: lower_right,
            curves: Vec::new(),
        },
        curves,
        points: Box::new(points),
    }
}

// ---------------------------------------------------------------------------------------
// The runner.

/// TX completion interrupt coalescing (`ethtool -C tx-usecs`) where an experiment needs a
/// real NIC's: 16 µs, mlx5's default.
const NIC_TX_USECS: Duration = Duration::from_micros(16);

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
    let d = cfg.duration.unwrap_or(Duration::from_secs(10));
    SeriesConfig {
        interval: Duration::from_micros((nanos(d) / CHART_POINTS / 1000).max(20)),
        max_points: 2000,
    }
}

/// Run one experiment, every arm. `progress(arm, fraction)` after each sampling period.
pub fn run(
    exp: Experiment,
    opts: &LabOptions,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<LabReport, LabError> {
    let s = opts.scale;
    let base = BenchConfig {
        seed: opts.seed,
        ..BenchConfig::default()
    };
    let spec = exp.emulated(s, &base);
    if let Some(name) = spec.switch {
        ensure_sysctl(name)?;
    }
    let ran = spec
        .arms
        .iter()
        .map(|arm| go(arm, progress))
        .collect::<Result<Vec<_>, _>>()?;
    let metrics = spec
        .metrics
        .iter()
        .map(|m| {
            let (off, on) = (&ran[m.arms.0].0, &ran[m.arms.1].0);
            Metric::new(&m.name, m.unit, m.claim, (m.value)(off), (m.value)(on))
        })
        .collect();
    let charts = spec
        .charts
        .iter()
        .map(|c| Chart {
            curves: c
                .curves
                .iter()
                .map(|(arm, k)| Curve {
                    points: (c.points)(&ran[*arm].1),
                    ..k.clone()
                })
                .collect(),
            ..c.chart.clone()
        })
        .collect();
    let mut config: BTreeMap<String, String> = spec
        .config
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
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
        notes: spec.notes,
        charts,
    })
}

// ---------------------------------------------------------------------------------------
// What the experiments' tables share.

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

fn secs(t: Duration) -> String {
    format!("{} s", secs_f64(t))
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

fn throughput_gbps(r: &BenchReport) -> f64 {
    r.total.throughput_bps / 1e9
}

fn scaled<T: Copy>(scale: Scale, full: T, quick: T, tiny: T) -> T {
    match scale {
        Scale::Full => full,
        Scale::Quick => quick,
        Scale::Tiny => tiny,
    }
}

/// The scale's duration: `full`, `quick` or `tiny` milliseconds.
fn scaled_ms(scale: Scale, full: u64, quick: u64, tiny: u64) -> Duration {
    Duration::from_millis(scaled(scale, full, quick, tiny))
}

/// `base` as a TCP_STREAM run of `flows` flows writing `msg_size` bytes for `duration`.
fn stream(base: &BenchConfig, flows: usize, msg_size: usize, duration: Duration) -> BenchConfig {
    BenchConfig {
        test: shallow_sim::Test::Stream,
        flows,
        msg_size,
        duration: Some(duration),
        ..base.clone()
    }
}

fn sysctl(name: &str, v: &str) -> (String, String) {
    (format!("net.ipv4.{name}"), v.into())
}

/// How long each arm sends on the Linux substrate.
fn linux_duration(s: Scale) -> Duration {
    scaled(
        s,
        Duration::from_secs(10),
        Duration::from_secs(3),
        Duration::from_millis(600),
    )
}

/// The Linux substrate's bottleneck for notsent-lowat, pollout and autocork: a 1 Gbit/s tbf.
const LINUX_TBF_1G: Tbf = Tbf {
    rate_bps: 1_000_000_000,
    burst: 64 * 1024,
    limit: 8 << 20,
};
