//! The reports and the one place that formats them: [`LabReport`] (the emulator: Shallow with
//! the mechanism off and on) and [`LinuxReport`] (the Linux substrate: the kernel's TCP and
//! Shallow on a TUN), each as a table and as JSON. Both tables are drawn by one renderer
//! (`render_table`), with the seed's figures and the verdicts written the same way.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::{Claim, Scale};

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

    /// See [`crate::reproduced`].
    pub fn reproduced(&self) -> Option<bool> {
        crate::reproduced(self.claim, self.off, self.on)
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

/// One metric measured on both substrates.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinuxRow {
    /// Name (unique within the experiment).
    pub name: String,
    /// Unit.
    pub unit: String,
    /// What the seed commit published.
    pub claim: Claim,
    /// Linux kernel, mechanism off (NaN: the kernel has no switch).
    pub kernel_off: f64,
    /// Linux kernel, mechanism on.
    pub kernel_on: f64,
    /// Shallow on the TUN, mechanism off (NaN: not run).
    pub shallow_off: f64,
    /// Shallow on the TUN, mechanism on.
    pub shallow_on: f64,
}

/// The result of one experiment on the Linux substrate.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinuxReport {
    /// Experiment name.
    pub experiment: String,
    /// Scale.
    pub scale: Scale,
    /// Rows in display order.
    pub rows: Vec<LinuxRow>,
    /// Setup.
    pub config: BTreeMap<String, String>,
    /// Caveats.
    pub notes: Vec<String>,
    /// Time series for `--plots`.
    #[serde(skip)]
    pub charts: Vec<Chart>,
}

/// A verdict where both values exist (NaN: the arm does not exist).
fn verdict(claim: Claim, off: f64, on: f64) -> Option<bool> {
    if off.is_nan() || on.is_nan() {
        return None;
    }
    crate::reproduced(claim, off, on)
}

impl LinuxRow {
    /// Whether the kernel's pair reproduces the seed's claim (`None`: no claim or no pair).
    pub fn kernel_reproduced(&self) -> Option<bool> {
        verdict(self.claim, self.kernel_off, self.kernel_on)
    }
    /// Whether Shallow's pair reproduces the seed's claim.
    pub fn shallow_reproduced(&self) -> Option<bool> {
        verdict(self.claim, self.shallow_off, self.shallow_on)
    }
    /// Shallow's value over the kernel's in the off arm and in the on arm, where both exist
    /// (`None` also where the kernel's is 0: a ratio says nothing there).
    pub fn shallow_over_linux(&self) -> [Option<f64>; 2] {
        let r = |s: f64, k: f64| (s.is_finite() && k.is_finite() && k != 0.0).then(|| s / k);
        [
            r(self.shallow_off, self.kernel_off),
            r(self.shallow_on, self.kernel_on),
        ]
    }
    /// Whether every arm's Shallow/Linux ratio is within ±[`LINUX_TOLERANCE`]
    /// (`None`: no ratio exists).
    pub fn within_tolerance(&self) -> Option<bool> {
        let rs: Vec<f64> = self.shallow_over_linux().into_iter().flatten().collect();
        (!rs.is_empty()).then(|| rs.iter().all(|r| (r - 1.0).abs() <= LINUX_TOLERANCE))
    }
}

/// How far Shallow's figure may be from the kernel's in the same run before the Linux table
/// flags it (issue 20's target): ±10%.
pub const LINUX_TOLERANCE: f64 = 0.10;

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

/// The seed's pair as JSON: its figures, or nulls.
fn seed_json(claim: Claim) -> (serde_json::Value, serde_json::Value) {
    match claim {
        Claim::Figures { off, on } => (json_num(off), json_num(on)),
        _ => (serde_json::Value::Null, serde_json::Value::Null),
    }
}

/// The seed's pair in a table: its figures, `same` for "unchanged", `-` for nothing.
fn seed_cells(claim: Claim) -> (String, String) {
    match claim {
        Claim::Figures { off, on } => (fmt_num(off), fmt_num(on)),
        Claim::Unchanged => ("same".into(), "same".into()),
        Claim::None => ("-".into(), "-".into()),
    }
}

/// The first columns of both tables.
const LEAD_HEAD: [&str; 4] = ["metric", "unit", "seed off", "seed on"];

/// A row's first cells: name, unit and the seed's pair.
fn lead_cells(name: &str, unit: &str, claim: Claim) -> Vec<String> {
    let (so, sn) = seed_cells(claim);
    vec![name.into(), unit.into(), so, sn]
}

/// A verdict in a table.
fn yes_no(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "yes",
        Some(false) => "NO",
        None => "-",
    }
}

/// The one table renderer: a title line, the header, a rule, the rows (the first two
/// columns left-aligned, the numbers right-aligned), then `  key: value` per config entry
/// and `  note: ...` per note.
fn render_table(
    title: &str,
    head: &[&str],
    rows: &[Vec<String>],
    config: &BTreeMap<String, String>,
    notes: &[String],
) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.len());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let _ = match i {
                0 => write!(s, "{c:<width$}", width = w[i]),
                1 => write!(s, " | {c:<width$}", width = w[i]),
                _ => write!(s, " | {c:>width$}", width = w[i]),
            };
        }
        s
    };
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let head: Vec<String> = head.iter().map(|h| h.to_string()).collect();
    let _ = writeln!(out, "{}", line(&head));
    let rule: Vec<String> = w.iter().map(|n| "-".repeat(*n)).collect();
    let _ = writeln!(out, "{}", rule.join("-|-"));
    for r in rows {
        let _ = writeln!(out, "{}", line(r));
    }
    for (k, v) in config {
        let _ = writeln!(out, "  {k}: {v}");
    }
    for n in notes {
        let _ = writeln!(out, "  note: {n}");
    }
    out
}

impl LabReport {
    /// `{"experiment": ..., "metrics": {NAME: {"unit", "seed_off", "seed_on", "claim", "off",
    /// "on", "ratio", "reproduced"}}, "config": {...}, ...}`.
    pub fn to_json(&self) -> serde_json::Value {
        let mut metrics = serde_json::Map::new();
        for m in &self.metrics {
            let (so, sn) = seed_json(m.claim);
            let claim = match m.claim {
                Claim::Figures { .. } => "figures",
                Claim::Unchanged => "unchanged",
                Claim::None => "none",
            };
            metrics.insert(
                m.name.clone(),
                serde_json::json!({
                    "unit": m.unit,
                    "seed_off": so,
                    "seed_on": sn,
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
            &LEAD_HEAD[..],
            &["Shallow off", "Shallow on", "on/off", "reproduced?"],
        ]
        .concat();
        let rows: Vec<Vec<String>> = self
            .metrics
            .iter()
            .map(|m| {
                let mut cells = lead_cells(&m.name, &m.unit, m.claim);
                cells.extend([
                    fmt_num(m.off),
                    fmt_num(m.on),
                    m.ratio().map_or("-".into(), |r| format!("{r:.3}")),
                    yes_no(m.reproduced()).into(),
                ]);
                cells
            })
            .collect();
        let scale = match self.scale {
            Scale::Full => "full scale",
            Scale::Quick => "QUICK scale (fewer flows, shorter runs than the seed)",
            Scale::Tiny => "TINY scale (test size)",
        };
        let title = format!("== {} ({scale}, seed {})", self.experiment, self.seed);
        render_table(&title, &head, &rows, &self.config, &self.notes)
    }
}

impl LinuxReport {
    /// JSON: `{"experiment", "substrate": "linux", "metrics": {NAME: {"unit", "seed_off",
    /// "seed_on", "linux_off", "linux_on", "shallow_off", "shallow_on", "linux_reproduced",
    /// "shallow_reproduced"}}, "config", "notes"}`; NaN becomes null.
    pub fn to_json(&self) -> serde_json::Value {
        let mut metrics = serde_json::Map::new();
        for r in &self.rows {
            let (so, sn) = seed_json(r.claim);
            metrics.insert(
                r.name.clone(),
                serde_json::json!({
                    "unit": r.unit,
                    "seed_off": so,
                    "seed_on": sn,
                    "linux_off": json_num(r.kernel_off),
                    "linux_on": json_num(r.kernel_on),
                    "shallow_off": json_num(r.shallow_off),
                    "shallow_on": json_num(r.shallow_on),
                    "linux_reproduced": r.kernel_reproduced(),
                    "shallow_reproduced": r.shallow_reproduced(),
                    "shallow_over_linux_off": r.shallow_over_linux()[0].map(json_num),
                    "shallow_over_linux_on": r.shallow_over_linux()[1].map(json_num),
                    "within_10pct": r.within_tolerance(),
                }),
            );
        }
        serde_json::json!({
            "experiment": self.experiment,
            "substrate": "linux",
            "scale": self.scale,
            "metrics": metrics,
            "config": self.config,
            "notes": self.notes,
        })
    }

    /// metric | unit | seed off | seed on | Linux off | Linux on | Shallow off | Shallow on |
    /// Shallow/Linux (off / on, `!` beyond ±10%) | reproduced? (Linux / Shallow), then setup
    /// and notes.
    pub fn table(&self) -> String {
        let head = [
            &LEAD_HEAD[..],
            &[
                "Linux off",
                "Linux on",
                "Shallow off",
                "Shallow on",
                "Shallow/Linux off/on",
                "reproduced? Linux/Shallow",
            ],
        ]
        .concat();
        let cell = |v: f64| {
            if v.is_nan() {
                "n/a".to_string()
            } else {
                fmt_num(v)
            }
        };
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                let mut cells = lead_cells(&r.name, &r.unit, r.claim);
                cells.extend([
                    cell(r.kernel_off),
                    cell(r.kernel_on),
                    cell(r.shallow_off),
                    cell(r.shallow_on),
                    r.shallow_over_linux()
                        .iter()
                        .map(|x| match x {
                            Some(v) if (v - 1.0).abs() > LINUX_TOLERANCE => format!("{v:.2}!"),
                            Some(v) => format!("{v:.2}"),
                            None => "-".into(),
                        })
                        .collect::<Vec<_>>()
                        .join("/"),
                    format!(
                        "{}/{}",
                        yes_no(r.kernel_reproduced()),
                        yes_no(r.shallow_reproduced())
                    ),
                ]);
                cells
            })
            .collect();
        let title = format!(
            "== {} on Linux: the kernel's TCP and Shallow on a TUN ({})",
            self.experiment,
            self.scale.short()
        );
        render_table(&title, &head, &rows, &self.config, &self.notes)
    }

    /// The same report as a [`LabReport`] per substrate, for the chart writer.
    pub fn as_lab_reports(&self) -> [LabReport; 2] {
        let mk = |kernel: bool| LabReport {
            experiment: format!(
                "{}-linux-{}",
                self.experiment,
                if kernel { "kernel" } else { "shallow" }
            ),
            scale: self.scale,
            seed: 0,
            metrics: self
                .rows
                .iter()
                .map(|r| {
                    let (off, on) = if kernel {
                        (r.kernel_off, r.kernel_on)
                    } else {
                        (r.shallow_off, r.shallow_on)
                    };
                    Metric::new(&r.name, &r.unit, r.claim, off, on)
                })
                .collect(),
            config: self.config.clone(),
            notes: self.notes.clone(),
            charts: Vec::new(),
        };
        [mk(true), mk(false)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(k: [f64; 2], s: [f64; 2]) -> LinuxRow {
        LinuxRow {
            name: "m".into(),
            unit: "u".into(),
            claim: Claim::None,
            kernel_off: k[0],
            kernel_on: k[1],
            shallow_off: s[0],
            shallow_on: s[1],
        }
    }

    /// Shallow over the kernel per arm; a row is within tolerance only when every arm that
    /// has a ratio is within ±10%.
    #[test]
    fn shallow_over_linux_flags_beyond_ten_percent() {
        let r = row([100.0, 200.0], [109.0, 180.0]);
        assert_eq!(r.shallow_over_linux(), [Some(1.09), Some(0.9)]);
        assert_eq!(r.within_tolerance(), Some(true));
        let r = row([100.0, 200.0], [111.0, 200.0]);
        assert_eq!(r.within_tolerance(), Some(false));
        // No kernel off arm (TSQ): the on arm alone decides.
        let r = row([f64::NAN, 10.0], [50.0, 10.5]);
        assert_eq!(r.shallow_over_linux(), [None, Some(1.05)]);
        assert_eq!(r.within_tolerance(), Some(true));
        assert_eq!(row([0.0, 0.0], [3.0, 4.0]).within_tolerance(), None);
        let t = LinuxReport {
            experiment: "x".into(),
            scale: Scale::Quick,
            rows: vec![row([100.0, 200.0], [120.0, 190.0])],
            config: BTreeMap::new(),
            notes: Vec::new(),
            charts: Vec::new(),
        }
        .table();
        assert!(t.contains("1.20!/0.95"), "{t}");
    }
}
