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

use serde::Serialize;

pub mod experiments;
pub mod linux;
pub mod plot;
mod report;

pub use experiments::{run, Experiment, LabError, LabOptions};
pub use linux::{run_linux, LinuxOptions};
pub use plot::{write_linux_plots, write_plots, PlotError, PlotOutput};
pub(crate) use report::fmt_num;
pub use report::{Chart, Curve, LabReport, LinuxReport, LinuxRow, Metric, LINUX_TOLERANCE};

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

impl Scale {
    /// `full scale`, `QUICK scale` or `TINY scale`: the scale in titles.
    pub(crate) fn short(self) -> &'static str {
        match self {
            Scale::Full => "full scale",
            Scale::Quick => "QUICK scale",
            Scale::Tiny => "TINY scale",
        }
    }
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
