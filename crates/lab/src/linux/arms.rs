//! The arms: the workload run with the kernel's sockets or with Shallow's on a TUN, sampled
//! every 50 ms, and what each arm measured ([`ArmResult`]); [`Arms`] holds the four and
//! turns them into a report's rows and charts.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::parse::{engine_sysctls, threads_cpu_ns};
use super::workload::{
    blocking_senders, epoll_sender, kernel_senders, stamp_reader, Flow, KernelEpoll, Receiver,
    SendStats, ShallowPoller, TxSpans, Workload, WritePoller, Writer, TSTAMP_FLAGS,
};
use super::world::{io_err, Tbf, World, RX_ADDR};
use super::{LinuxSpec, Sysctls};
use crate::{Chart, Claim, Curve, LabError, LinuxRow};

/// One sample of the sender's state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Sample {
    /// Seconds since the senders started.
    pub(crate) t: f64,
    /// Bytes in the tbf (the bottleneck queue).
    pub(crate) tbf_bytes: u64,
    /// Sum over the sending sockets of wmem_alloc (bytes below TCP).
    pub(crate) below_tcp: u64,
    /// Sum over the sending sockets of pages of wmem_queued + rmem_alloc.
    pub(crate) mem_pages: u64,
    /// Sum over the sending sockets of unsent bytes.
    pub(crate) notsent: u64,
    /// Sum over the sending sockets of sndbuf (what send-buffer autotuning reached).
    pub(crate) sndbuf: u64,
    /// Sum over the sending sockets of cwnd, segments.
    pub(crate) cwnd: u64,
    /// Sum over the sending sockets of segments in flight.
    pub(crate) in_flight: u64,
    /// Mean over the sending sockets of the smoothed RTT, µs.
    pub(crate) srtt_us: u64,
}

/// Everything one arm measured.
#[derive(Clone, Debug, Default)]
pub(crate) struct ArmResult {
    /// How long the senders ran, s.
    pub(crate) duration_s: f64,
    /// Bytes the receiver read.
    pub(crate) received: u64,
    /// What the senders did.
    pub(crate) send: SendStats,
    /// The sender's state every 50 ms.
    pub(crate) samples: Vec<Sample>,
    /// Counter deltas over the run (`TcpExtX`, `TcpX`): the senders' side, or for an
    /// experiment on the receiver ([`super::Side::Receiver`]) the receiver's.
    pub(crate) counters: BTreeMap<String, u64>,
    /// CPU time of the receiving side, ns (receiver experiments only: the reading threads,
    /// and Shallow's I/O thread when Shallow receives).
    pub(crate) recv_cpu_ns: u64,
    /// With [`Workload::timestamps`]: the senders' per-write spans.
    pub(crate) tx_spans: Option<TxSpans>,
}

impl ArmResult {
    pub(crate) fn throughput_bps(&self) -> f64 {
        self.received as f64 * 8.0 / self.duration_s.max(1e-9)
    }
    pub(crate) fn series<F: Fn(&Sample) -> f64>(&self, f: F) -> Vec<f64> {
        self.samples.iter().map(f).collect()
    }
    pub(crate) fn counter(&self, k: &str) -> f64 {
        self.counters.get(k).copied().unwrap_or(0) as f64
    }
}

pub(crate) fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

pub(crate) fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i.min(s.len() - 1)]
}

pub(crate) fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// Senders at work: the stop flag, their start and their threads.
pub(super) struct Running {
    stop: Arc<AtomicBool>,
    t0: Instant,
    handles: Vec<JoinHandle<SendStats>>,
    stamps: Option<JoinHandle<TxSpans>>,
}

/// Starts the workload's senders over `flows`; `epoll` makes the poller of an
/// [`Writer::Epoll`] sender (`what` names it in errors).
pub(super) fn start_senders<F: Flow + 'static, P: WritePoller + Send + 'static>(
    flows: Vec<Arc<F>>,
    w: &Workload,
    what: &str,
    epoll: impl FnOnce(&[Arc<F>]) -> io::Result<P>,
) -> Result<Running, LabError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stamps = if w.timestamps {
        for f in &flows {
            f.set_timestamping(TSTAMP_FLAGS)
                .map_err(io_err("SO_TIMESTAMPING on a sender"))?;
        }
        Some(stamp_reader(flows.clone(), stop.clone()))
    } else {
        None
    };
    let t0 = Instant::now();
    let handles = match w.writer {
        Writer::Blocking => blocking_senders(flows, w, &stop),
        Writer::Epoll => {
            let p = epoll(&flows).map_err(io_err(what))?;
            vec![epoll_sender(flows, p, w, &stop)]
        }
    };
    Ok(Running {
        stop,
        t0,
        handles,
        stamps,
    })
}

impl Running {
    /// Seconds since the senders started.
    pub(super) fn elapsed_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Takes a sample every [`SAMPLE_EVERY`] until the workload's duration has passed.
    pub(super) fn sample(
        &self,
        w: &Workload,
        label: &str,
        progress: &mut dyn FnMut(&str, f64),
        mut take: impl FnMut(f64) -> Sample,
    ) -> Vec<Sample> {
        let mut samples = Vec::new();
        while self.t0.elapsed() < w.duration {
            std::thread::sleep(SAMPLE_EVERY);
            let t = self.t0.elapsed().as_secs_f64();
            samples.push(take(t));
            progress(label, (t / w.duration.as_secs_f64()).min(1.0));
        }
        samples
    }

    /// Ends the arm: what the receiver got so far and how long the senders ran, then
    /// `now()` (the counters, to subtract `c0` from, and CPU time beyond the senders'
    /// threads, ns), then the senders stop and the receiver finishes.
    fn end(
        self,
        recv: Receiver,
        samples: Vec<Sample>,
        c0: &BTreeMap<String, u64>,
        now: impl FnOnce() -> (BTreeMap<String, u64>, u64),
    ) -> ArmResult {
        let received = recv.bytes.load(Ordering::Relaxed);
        let duration_s = self.t0.elapsed().as_secs_f64();
        let (c1, more_cpu_ns) = now();
        let (mut send, tx_spans) = self.stop_all();
        send.cpu_ns += more_cpu_ns;
        let _ = recv.handle.join();
        ArmResult {
            duration_s,
            received,
            send,
            samples,
            counters: delta(c0, &c1),
            recv_cpu_ns: 0,
            tx_spans,
        }
    }

    /// Stops the senders and sums what they did.
    pub(super) fn stop(self) -> SendStats {
        self.stop_all().0
    }

    /// Stops the senders, sums what they did, and the timestamp reader's spans (once it has
    /// read the last writes' ACKs).
    fn stop_all(self) -> (SendStats, Option<TxSpans>) {
        self.stop.store(true, Ordering::Relaxed);
        let mut send = SendStats::default();
        for h in self.handles {
            let s = h.join().unwrap_or_default();
            send.bytes += s.bytes;
            send.send_calls += s.send_calls;
            send.wakeups += s.wakeups;
            send.cpu_ns += s.cpu_ns;
        }
        let spans = self.stamps.and_then(|h| h.join().ok());
        (send, spans)
    }
}

/// `c1 - c0` per counter.
pub(super) fn delta(
    c0: &BTreeMap<String, u64>,
    c1: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    c1.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*c0.get(k).unwrap_or(&0))))
        .collect()
}

/// Runs the workload with the kernel's sockets in the sender namespace.
fn kernel_arm(
    world: &mut World,
    w: &Workload,
    sysctls: &[(&str, &str)],
    label: &str,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<ArmResult, LabError> {
    for (k, v) in sysctls {
        world.kernel_sysctl(k, v)?;
    }
    let port = world.port();
    let recv = Receiver::start(&world.rx, port, w.flows)?;
    let dst = SocketAddr::new(IpAddr::V4(RX_ADDR), port);
    let flows = kernel_senders(&world.tx, dst, w)?;
    let c0 = world.kernel_counters();
    let run = start_senders(flows, w, "epoll", KernelEpoll::new)?;
    let samples = run.sample(w, label, progress, |t| {
        let socks = world.kernel_sockets(port);
        Sample {
            t,
            tbf_bytes: world.tbf_backlog().unwrap_or(0),
            below_tcp: socks.iter().map(|s| s.wmem_alloc).sum(),
            mem_pages: socks
                .iter()
                .map(|s| (s.wmem_queued + s.rmem_alloc).div_ceil(4096))
                .sum(),
            notsent: socks.iter().map(|s| s.notsent).sum(),
            sndbuf: socks.iter().map(|s| s.sndbuf).sum(),
            cwnd: socks.iter().map(|s| s.cwnd).sum(),
            in_flight: socks.iter().map(|s| s.unacked).sum(),
            srtt_us: socks.iter().map(|s| s.srtt_us).sum::<u64>() / (socks.len().max(1) as u64),
        }
    });
    Ok(run.end(recv, samples, &c0, || (world.kernel_counters(), 0)))
}

/// The engines' counters now (summed over the host's shards).
fn engine_counters(h: &shallow_os::Host) -> BTreeMap<String, u64> {
    h.counters().into_iter().collect()
}

/// The state of Shallow's sockets and its egress tbf at `t`.
fn shallow_sample(t: f64, host: &shallow_os::Host, socks: &[Arc<shallow_os::TcpStream>]) -> Sample {
    let mut smp = Sample {
        t,
        tbf_bytes: host.stats().qdisc_backlog.load(Ordering::Relaxed),
        ..Sample::default()
    };
    for s in socks {
        if let Ok(m) = s.meminfo() {
            smp.below_tcp += u64::from(m.wmem_alloc);
            smp.mem_pages += u64::from(m.wmem_queued + m.rmem_alloc).div_ceil(4096);
            smp.sndbuf += u64::from(m.sndbuf);
        }
        if let Ok(i) = s.tcp_info() {
            smp.notsent += u64::from(i.notsent_bytes);
            smp.cwnd += u64::from(i.snd_cwnd);
            smp.in_flight += u64::from(i.unacked);
            smp.srtt_us += u64::from(i.rtt);
        }
    }
    smp.srtt_us /= socks.len().max(1) as u64;
    smp
}

/// Runs the workload with Shallow's sockets on a TUN in the sender namespace.
#[allow(clippy::too_many_arguments)]
fn shallow_arm(
    world: &mut World,
    tbf: Tbf,
    w: &Workload,
    sysctls: &[(&str, &str)],
    seed: u64,
    label: &str,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<ArmResult, LabError> {
    let sysctls = engine_sysctls(sysctls);
    // The bottleneck moves into Shallow's host: its egress tbf. The veth gets pfifo_fast so
    // the forwarded packets meet no second shaper.
    world.set_root_qdisc(&["pfifo_fast"])?;
    let host = world.shallow_host(&sysctls, seed, tbf)?;
    let port = world.port();
    let recv = Receiver::start(&world.rx, port, w.flows)?;
    let dst = SocketAddr::new(IpAddr::V4(RX_ADDR), port);
    let mut socks = Vec::new();
    for _ in 0..w.flows {
        let s = shallow_os::TcpStream::connect_timeout(&host, dst, Duration::from_secs(5))
            .map_err(io_err("Shallow connect"))?;
        s.set_nodelay(w.nodelay).map_err(io_err("TCP_NODELAY"))?;
        socks.push(Arc::new(s));
    }
    let c0 = engine_counters(&host);
    let io0 = threads_cpu_ns("shallow-io");
    let run = start_senders(socks.clone(), w, "Poller", |f| ShallowPoller::new(&host, f))?;
    let samples = run.sample(w, label, progress, |t| shallow_sample(t, &host, &socks));
    let result = run.end(recv, samples, &c0, || {
        let io_cpu = threads_cpu_ns("shallow-io").saturating_sub(io0);
        (engine_counters(&host), io_cpu)
    });
    drop(socks);
    host.shutdown();
    world.set_tbf(tbf)?;
    Ok(result)
}

/// Both arms of both halves.
pub(super) struct Arms {
    k_off: Option<ArmResult>,
    k_on: ArmResult,
    s_off: Option<ArmResult>,
    s_on: Option<ArmResult>,
}

impl Arms {
    /// Runs the kernel's arms (its off arm only where it has a switch), then Shallow's
    /// unless `kernel_only`. Arms are labelled `NAME linux off`, `NAME shallow on`, ...
    pub(super) fn run(
        world: &mut World,
        spec: &LinuxSpec,
        name: &str,
        seed: u64,
        kernel_only: bool,
        progress: &mut dyn FnMut(&str, f64),
    ) -> Result<Arms, LabError> {
        let w = &spec.workload;
        let rx = spec.side == super::Side::Receiver;
        let mut kernel = |world: &mut World, v: &Sysctls, arm: &str| {
            let label = format!("{name} linux {arm}");
            if rx {
                super::receive::kernel_rx_arm(world, w, v, &label, progress)
            } else {
                kernel_arm(world, w, v, &label, progress)
            }
        };
        let k_off = match &spec.kernel_off {
            Some(v) => Some(kernel(world, v, "off")?),
            None => None,
        };
        let k_on = kernel(world, &spec.kernel_on, "on")?;
        let (s_off, s_on) = if kernel_only {
            (None, None)
        } else {
            let mut shallow = |world: &mut World, v: &Sysctls, arm: &str| {
                let label = format!("{name} shallow {arm}");
                if rx {
                    super::receive::shallow_rx_arm(world, spec.tbf, w, v, seed, &label, progress)
                } else {
                    shallow_arm(world, spec.tbf, w, v, seed, &label, progress)
                }
            };
            let off = shallow(world, &spec.shallow_off, "off")?;
            let on = shallow(world, &spec.shallow_on, "on")?;
            (Some(off), Some(on))
        };
        Ok(Arms {
            k_off,
            k_on,
            s_off,
            s_on,
        })
    }

    /// A row: `f` of each arm (NaN where an arm did not run).
    pub(super) fn row(
        &self,
        name: &str,
        unit: &str,
        claim: Claim,
        f: impl Fn(&ArmResult) -> f64,
    ) -> LinuxRow {
        LinuxRow {
            name: name.into(),
            unit: unit.into(),
            claim,
            kernel_off: self.k_off.as_ref().map_or(f64::NAN, &f),
            kernel_on: f(&self.k_on),
            shallow_off: self.s_off.as_ref().map_or(f64::NAN, &f),
            shallow_on: self.s_on.as_ref().map_or(f64::NAN, &f),
        }
    }

    /// A chart of `f` of the samples over time, one curve per arm that ran.
    pub(super) fn chart(
        &self,
        name: &str,
        title: &str,
        y_desc: &str,
        off_label: &str,
        on_label: &str,
        f: impl Fn(&Sample) -> f64,
    ) -> Chart {
        let mut curves = Vec::new();
        let mut add = |label: String, a: Option<&ArmResult>| {
            if let Some(a) = a {
                curves.push(Curve {
                    dashed: label.contains(" off:"),
                    group: usize::from(label.starts_with("Shallow")),
                    label,
                    points: a.samples.iter().map(|s| (s.t, f(s))).collect(),
                });
            }
        };
        add(format!("Linux off: {off_label}"), self.k_off.as_ref());
        add(format!("Linux on: {on_label}"), Some(&self.k_on));
        add(format!("Shallow off: {off_label}"), self.s_off.as_ref());
        add(format!("Shallow on: {on_label}"), self.s_on.as_ref());
        Chart {
            name: name.into(),
            title: title.into(),
            x_desc: "time since the senders started (s)".into(),
            y_desc: y_desc.into(),
            log_x: false,
            legend_lower_right: false,
            curves,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_samples() {
        let v = [3.0, 1.0, 2.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
        assert_eq!(max(&v), 5.0);
        assert_eq!(mean(&v), 3.0);
    }
}
