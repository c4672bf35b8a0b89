//! `shallow lab EXPERIMENT --substrate linux`: the experiments this machine can show for real,
//! the Linux kernel's TCP beside Shallow on a TUN, the same workload, in one table.
//!
//! The world (made per run, removed afterwards): two network namespaces joined by a veth pair,
//! the sender's end with a `tbf` root qdisc (the bottleneck is the sender's own host queue, as
//! in the seeds' setups, spec §12: veth alone orphans packets at transmit, so TSQ and autocork
//! would barely act). The receiver is always the kernel's TCP in the receiving namespace,
//! reading with `read()` like netserver.
//!
//! * **Linux half:** the sending sockets are the kernel's, made in the sender namespace; the
//!   mechanism is switched with the kernel's own sysctls of that namespace
//!   (`net.ipv4.tcp_notsent_lowat`, `tcp_autocorking`, `tcp_wmem`; TSQ has no switch).
//!   Measured from inside: `tc -s qdisc` (bottleneck backlog), `ss -tmi` (`skmem` `t` =
//!   `wmem_alloc`, `w` = `wmem_queued`, `r` = `rmem_alloc`), `/proc/net/netstat` and
//!   `/proc/net/snmp` deltas (`TcpExtTCPAutoCorking`, `TcpOutSegs`), epoll wake-ups counted by
//!   our own sender loop, and the sender threads' CPU time (`/proc/thread-self/schedstat`).
//! * **Shallow half:** the engine runs on a TUN device in the sender namespace
//!   ([`shallow_os::Host`]); the kernel forwards its packets through the same veth and `tbf`
//!   to the same receiver. The mechanism is switched with the engine's sysctls. Memory from
//!   `SO_MEMINFO`, counters from the engine's MIB, wake-ups from [`shallow_os::Poller`],
//!   CPU time of the sender threads plus the host's I/O thread (`shallow-io-*`).
//!
//! Root is required (namespaces, veth, tc); without it [`run_linux`] fails with
//! [`LabError::NotRoot`], which the CLI prints as a skip.

use std::collections::BTreeMap;

pub use crate::report::{LinuxReport, LinuxRow};
use crate::{Claim, Experiment, LabError, Scale};

mod arms;
mod parse;
mod receive;
mod workload;
mod world;

pub(crate) use arms::{max, mean, quantile, ArmResult, Sample};
pub(crate) use workload::{TxSpans, Workload, Writer};
pub(crate) use world::Tbf;

use arms::Arms;
use parse::sysctl_name;
use world::World;

/// Which end's mechanism an experiment switches: the senders' (the kernel's TCP or Shallow
/// sends to the kernel's receiver) or the receiver's (the kernel's TCP sends to the kernel's
/// receiver or to Shallow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The sysctls are the sender's.
    Sender,
    /// The sysctls are the receiver's.
    Receiver,
}

/// How to run an experiment on Linux.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinuxOptions {
    /// Size of the runs.
    pub scale: Scale,
    /// Seed of the Shallow engine (ISNs, ports); the kernel half is not deterministic.
    pub seed: u64,
    /// Run only the kernel half (no TUN).
    pub kernel_only: bool,
}

/// Sysctls as (`ipv4/name` or `shallow/name`, value).
pub(crate) type Sysctls = Vec<(&'static str, &'static str)>;

/// One experiment on the Linux substrate, as data: what [`run_linux`] runs and how it reads
/// the results (the experiment's own file in `crate::experiments` builds it).
pub(crate) struct LinuxSpec {
    /// The bottleneck.
    pub(crate) tbf: Tbf,
    /// Whose mechanism it is.
    pub(crate) side: Side,
    /// What the senders do.
    pub(crate) workload: Workload,
    /// The kernel's sysctls, mechanism off (`None`: the kernel has no switch).
    pub(crate) kernel_off: Option<Sysctls>,
    /// The kernel's sysctls, mechanism on.
    pub(crate) kernel_on: Sysctls,
    /// The engine's sysctls, mechanism off.
    pub(crate) shallow_off: Sysctls,
    /// The engine's sysctls, mechanism on.
    pub(crate) shallow_on: Sysctls,
    /// The rows, in display order.
    pub(crate) rows: Vec<RowDef>,
    /// Caveats, in display order.
    pub(crate) notes: Vec<String>,
    /// The time series charts.
    pub(crate) charts: Vec<SeriesChart>,
}

/// A row: its name, unit and claim, and how it is computed from one arm's results.
pub(crate) struct RowDef {
    name: String,
    unit: &'static str,
    claim: Claim,
    value: Box<dyn Fn(&ArmResult) -> f64>,
}

/// A row of the Linux table.
pub(crate) fn row(
    name: impl Into<String>,
    unit: &'static str,
    claim: Claim,
    value: impl Fn(&ArmResult) -> f64 + 'static,
) -> RowDef {
    RowDef {
        name: name.into(),
        unit,
        claim,
        value: Box::new(value),
    }
}

/// A chart of one sampled value over time, a curve per arm (legends `Linux off: OFF_LABEL`...).
pub(crate) struct SeriesChart {
    /// File-name part.
    pub(crate) name: &'static str,
    /// Title.
    pub(crate) title: &'static str,
    /// Y axis description with unit.
    pub(crate) y_desc: &'static str,
    /// What the off arms are.
    pub(crate) off_label: &'static str,
    /// What the on arms are.
    pub(crate) on_label: &'static str,
    /// The value of a sample.
    pub(crate) value: fn(&Sample) -> f64,
}

/// Rows every experiment shows after its own: the sending sockets' state as `ss -tmi` shows
/// it (Shallow: `TCP_INFO`, `SO_MEMINFO`), per flow and averaged over the samples, to see
/// where the two halves part (cwnd growth, send-buffer autotuning, RTT).
fn state_rows(flows: usize) -> Vec<RowDef> {
    let per_flow = move |v: f64| v / flows.max(1) as f64;
    vec![
        row("cwnd_per_flow_mean", "segs", Claim::None, move |a| {
            per_flow(mean(&a.series(|s| s.cwnd as f64)))
        }),
        row("in_flight_per_flow_mean", "segs", Claim::None, move |a| {
            per_flow(mean(&a.series(|s| s.in_flight as f64)))
        }),
        row("sndbuf_per_flow_mean", "KB", Claim::None, move |a| {
            per_flow(mean(&a.series(|s| s.sndbuf as f64))) / 1024.0
        }),
        row("bottleneck_backlog_mean", "KB", Claim::None, |a| {
            mean(&a.series(|s| s.tbf_bytes as f64)) / 1024.0
        }),
        row("srtt_mean", "ms", Claim::None, |a| {
            mean(&a.series(|s| s.srtt_us as f64)) / 1000.0
        }),
    ]
}

/// The setup of the table: bottleneck, world, workload, duration and each arm's sysctls.
fn setup(spec: &LinuxSpec) -> BTreeMap<String, String> {
    let w = &spec.workload;
    let writer = match w.writer {
        Writer::Blocking => "blocking write() per flow thread",
        Writer::Epoll => {
            "non-blocking writes until EAGAIN on each edge-triggered EPOLLOUT, one thread"
        }
    };
    let nagle = if w.nodelay {
        ", TCP_NODELAY"
    } else {
        ", Nagle on"
    };
    let fmt_sys = |v: &[(&str, &str)]| {
        if v.is_empty() {
            "defaults".to_string()
        } else {
            v.iter()
                .map(|(k, x)| format!("{}={x}", sysctl_name(k)))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let kernel_off = spec
        .kernel_off
        .as_deref()
        .map_or("n/a: Linux has no switch for it".into(), fmt_sys);
    [
        ("bottleneck", spec.tbf.describe()),
        ("world", "sender namespace -> veth (tbf) -> receiver namespace (kernel TCP, 128 KB reads); Shallow on a TUN in the sender namespace with the same tbf as its own egress qdisc (the veth then gets pfifo_fast), forwarded through the same veth".into()),
        ("workload", format!("{} flow(s), {}-byte writes, {writer}{nagle}", w.flows, w.msg)),
        ("duration", format!("{} s per arm", w.duration.as_secs_f64())),
        ("congestion control", "cubic on both".into()),
        ("Linux off", kernel_off),
        ("Linux on", fmt_sys(&spec.kernel_on)),
        ("Shallow off", fmt_sys(&spec.shallow_off)),
        ("Shallow on", fmt_sys(&spec.shallow_on)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Runs `exp` on the Linux substrate. `progress(arm, fraction)` during each arm.
pub fn run_linux(
    exp: Experiment,
    opts: &LinuxOptions,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<LinuxReport, LabError> {
    let spec = exp.on_linux(opts.scale)?;
    let mut world = World::new(spec.tbf)?;
    let config = setup(&spec);
    let name = exp.name();
    let arms = Arms::run(
        &mut world,
        &spec,
        name,
        opts.seed,
        opts.kernel_only,
        progress,
    )?;
    let mut notes = Vec::new();
    if opts.kernel_only {
        notes.push("kernel half only (--kernel-only)".into());
    }
    notes.extend(spec.notes.iter().cloned());
    let rows = spec
        .rows
        .iter()
        .chain(&match spec.side {
            Side::Sender => state_rows(spec.workload.flows),
            Side::Receiver => Vec::new(),
        })
        .map(|r| arms.row(&r.name, r.unit, r.claim, &r.value))
        .collect();
    let charts = spec
        .charts
        .iter()
        .map(|c| arms.chart(c.name, c.title, c.y_desc, c.off_label, c.on_label, c.value))
        .collect();
    Ok(LinuxReport {
        experiment: name.into(),
        scale: opts.scale,
        rows,
        config,
        notes,
        charts,
    })
}
