//! `shallow lab`: each seed commit's measurement reproduced on the emulator, the mechanism
//! off and on, beside the figures the commit published.
//!
//! An [`Experiment`] is one commit's workload (spec §12, E1–E5) run twice by
//! [`shallow_sim::bench`]: once with the mechanism switched off, once on. Each metric is
//! compared with the published pair by [`reproduced`]: the effect must go the same way and
//! be at least half as large (relative change), computed from the numbers, never asserted.
//!
//! How each mechanism is switched off:
//! * autocorking, backlog ACK deferral, TCP_NOTSENT_LOWAT: their Linux sysctls
//!   (`tcp_autocorking`, `tcp_backlog_ack_defer`, `tcp_notsent_lowat`);
//! * TSQ: Linux cannot turn TSQ off; the engine's Shallow extension sysctl `shallow.tcp_tsq = 0`
//!   does (`tcp_small_queue_check` never stops the flow);
//! * write-space hysteresis (wake at X/2 instead of X): the extension sysctl
//!   `shallow.tcp_notsent_lowat_wake_half = 0` wakes at X. `pollout` shows what its commit's
//!   figures compare (lowat unset vs 2 MB) and, beside it, wake at X vs X/2 at 2 MB.
//!
//! [`linux`] runs `tsq`, `notsent-lowat`, `pollout` and `autocork` on real Linux (root): the
//! kernel's TCP with its sysctls toggled beside Shallow on a TUN, behind the same tbf, in one
//! table ([`LinuxReport`]). [`plot`] draws the charts of `--plots` (SVG, and PNG rendered from
//! the SVG).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

pub mod experiments;
pub mod linux;
pub mod plot;

pub use experiments::{run, Experiment, LabError, LabOptions};
pub use linux::{run_linux, LinuxOptions, LinuxReport, LinuxRow};
pub use plot::{write_linux_plots, write_plots, PlotError, PlotOutput};

/// How big a run is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// The seed's workload as far as the emulator goes (flows, duration).
    #[default]
    Full,
    /// Fewer flows, shorter runs: `shallow lab all --quick` in about a minute.
    Quick,
    /// Smaller still, for tests.
    Tiny,
}

/// What a seed commit published for one metric.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Claim {
    /// Figures with the mechanism off and on.
    Figures {
        /// Mechanism off.
        off: f64,
        /// Mechanism on.
        on: f64,
    },
    /// The commit says the metric does not change ("same throughput"), without figures.
    Unchanged,
    /// Nothing published: the metric is shown for context.
    None,
}

/// How far an "unchanged" metric may move and still count as unchanged (relative).
pub const UNCHANGED_TOLERANCE: f64 = 0.10;

/// Whether Shallow's `off`/`on` pair reproduces `claim`: for published figures, the relative
/// change `(on - off) / off` has the sign of the published one and at least half its size;
/// for [`Claim::Unchanged`], it is within [`UNCHANGED_TOLERANCE`]; `None` when nothing was
/// published. Non-finite measurements never reproduce anything.
pub fn reproduced(claim: Claim, off: f64, on: f64) -> Option<bool> {
    if matches!(claim, Claim::None) {
        return None;
    }
    if !off.is_finite() || !on.is_finite() {
        return Some(false);
    }
    let unchanged = |off: f64, on: f64| {
        if off == 0.0 {
            on == 0.0
        } else {
            ((on - off) / off).abs() <= UNCHANGED_TOLERANCE
        }
    };
    match claim {
        Claim::None => None,
        Claim::Unchanged => Some(unchanged(off, on)),
        Claim::Figures { off: so, on: sn } => {
            if so == sn {
                return Some(unchanged(off, on));
            }
            if off == 0.0 {
                // From zero only an increase is possible, and it is unboundedly large.
                return Some(sn > so && on > 0.0);
            }
            if so == 0.0 {
                // The published change has no relative size: compare the direction only.
                return Some((sn > so) == (on > off) && on != off);
            }
            let published = (sn - so) / so;
            let ours = (on - off) / off;
            Some(
                ours != 0.0
                    && ours.signum() == published.signum()
                    && ours.abs() >= 0.5 * published.abs(),
            )
        }
    }
}

/// One metric of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Metric {
    /// Name (unique within the experiment).
    pub name: String,
    /// Unit.
    pub unit: String,
    /// What the commit published.
    pub claim: Claim,
    /// Shallow, mechanism off.
    pub off: f64,
    /// Shallow, mechanism on.
    pub on: f64,
}

impl Metric {
    /// A metric.
    pub fn new(name: &str, unit: &str, claim: Claim, off: f64, on: f64) -> Metric {
        Metric {
            name: name.into(),
            unit: unit.into(),
            claim,
            off,
            on,
        }
    }

    /// `on / off`, `None` when `off` is zero.
    pub fn ratio(&self) -> Option<f64> {
        (self.off != 0.0).then(|| self.on / self.off)
    }

    /// See [`reproduced`].
    pub fn reproduced(&self) -> Option<bool> {
        reproduced(self.claim, self.off, self.on)
    }

    fn seed(&self) -> (Option<f64>, Option<f64>) {
        match self.claim {
            Claim::Figures { off, on } => (Some(off), Some(on)),
            _ => (None, None),
        }
    }
}

/// The result of one experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LabReport {
    /// Experiment name (`tsq`, `notsent-lowat`, ...).
    pub experiment: String,
    /// Scale it ran at.
    pub scale: Scale,
    /// Master seed of both arms.
    pub seed: u64,
    /// Metrics, in display order.
    pub metrics: Vec<Metric>,
    /// The setup: workload, links, how the mechanism was switched, scale.
    pub config: BTreeMap<String, String>,
    /// Caveats: what differs from the commit's setup.
    pub notes: Vec<String>,
    /// Time series and distributions recorded during the arms, for `--plots` (not in the
    /// JSON: they can be large).
    #[serde(skip)]
    pub charts: Vec<Chart>,
}

/// A chart an experiment recorded: one [`Curve`] per arm over the same axes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    /// File-name part (`EXP-NAME.svg`), e.g. `queue-delay-cdf-1G`.
    pub name: String,
    /// Title.
    pub title: String,
    /// X axis description with unit.
    pub x_desc: String,
    /// Y axis description with unit.
    pub y_desc: String,
    /// Logarithmic x axis (delays spanning decades).
    pub log_x: bool,
    /// Put the legend in the lower right corner (CDFs rise to the upper right).
    pub legend_lower_right: bool,
    /// One curve per arm, the mechanism-off arm first.
    pub curves: Vec<Curve>,
}

/// One arm's line in a [`Chart`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Curve {
    /// Legend text (`off: tcp_autocorking = 0`).
    pub label: String,
    /// Draw dashed (the mechanism-off arms), so arms differ without colour.
    pub dashed: bool,
    /// Colour group: curves of one substrate or setup share a colour (0, 1, 2, ...).
    pub group: usize,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

pub(crate) fn json_num(v: f64) -> serde_json::Value {
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

pub(crate) fn fmt_num(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    }
}

impl LabReport {
    /// `{"experiment": ..., "metrics": {NAME: {"unit", "seed_off", "seed_on", "claim", "off",
    /// "on", "ratio", "reproduced"}}, "config": {...}, ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut metrics = serde_json::Map::new();
        for m in &self.metrics {
            let (so, sn) = m.seed();
            let claim = match m.claim {
                Claim::Figures { .. } => "figures",
                Claim::Unchanged => "unchanged",
                Claim::None => "none",
            };
            metrics.insert(
                m.name.clone(),
                serde_json::json!({
                    "unit": m.unit,
                    "seed_off": so.map(json_num),
                    "seed_on": sn.map(json_num),
                    "claim": claim,
                    "off": json_num(m.off),
                    "on": json_num(m.on),
                    "ratio": m.ratio().map(json_num),
                    "reproduced": m.reproduced(),
                }),
            );
        }
        serde_json::json!({
            "experiment": self.experiment,
            "scale": self.scale,
            "seed": self.seed,
            "metrics": metrics,
            "config": self.config,
            "notes": self.notes,
        })
    }

    /// The table: metric | unit | seed off | seed on | Shallow off | Shallow on | on/off |
    /// reproduced?, then the setup and notes.
    pub fn table(&self) -> String {
        let head = [
            "metric",
            "unit",
            "seed off",
            "seed on",
            "Shallow off",
            "Shallow on",
            "on/off",
            "reproduced?",
        ];
        let mut rows: Vec<[String; 8]> = Vec::new();
        for m in &self.metrics {
            let (so, sn) = match m.claim {
                Claim::Figures { off, on } => (fmt_num(off), fmt_num(on)),
                Claim::Unchanged => ("same".into(), "same".into()),
                Claim::None => ("-".into(), "-".into()),
            };
            let rep = match m.reproduced() {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            rows.push([
                m.name.clone(),
                m.unit.clone(),
                so,
                sn,
                fmt_num(m.off),
                fmt_num(m.on),
                m.ratio().map_or("-".into(), |r| format!("{r:.3}")),
                rep.into(),
            ]);
        }
        let mut w = head.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.len());
            }
        }
        let mut out = String::new();
        let scale = match self.scale {
            Scale::Full => "full scale",
            Scale::Quick => "QUICK scale (fewer flows, shorter runs than the seed)",
            Scale::Tiny => "TINY scale (test size)",
        };
        let _ = writeln!(out, "== {} ({scale}, seed {})", self.experiment, self.seed);
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i > 1 {
                    let _ = write!(s, " | {c:>width$}", width = w[i]);
                } else if i == 1 {
                    let _ = write!(s, " | {c:<width$}", width = w[i]);
                } else {
                    let _ = write!(s, "{c:<width$}", width = w[i]);
                }
            }
            s
        };
        let _ = writeln!(out, "{}", line(&head.map(String::from)));
        let _ = writeln!(
            out,
            "{}",
            w.iter()
                .map(|n| "-".repeat(*n))
                .collect::<Vec<_>>()
                .join("-|-")
        );
        for r in &rows {
            let _ = writeln!(out, "{}", line(r));
        }
        for (k, v) in &self.config {
            let _ = writeln!(out, "  {k}: {v}");
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        out
    }
}
