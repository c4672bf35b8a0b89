//! `shallow-bench`: netperf's workloads between Shallow (over a TUN) and the Linux kernel's
//! TCP, and the kernel's own baseline over a veth pair: what `shallow bench --substrate linux`
//! runs. (The emulator's runs are `shallow_sim::bench`: they build the emulator's topology.)
//!
//! Every run builds its own world and removes it afterwards:
//! - **Shallow ↔ Linux**: a fresh network namespace holding a TUN whose kernel side has the
//!   peer's address (10.213.0.1, fd00:213::1); a [`Host`] runs the engine on the TUN
//!   (10.213.0.2, fd00:213::2). The kernel's sockets live on threads of this process that
//!   entered the namespace.
//! - **Linux ↔ Linux**: two fresh namespaces joined by a veth pair (MTU 1500, the kernel's
//!   default offloads), the same addresses, kernel sockets on both ends.
//!
//! Workloads ([`Test`]): `TCP_STREAM` (the netperf side sends for the run time, then
//! half-closes; the netserver side reads to EOF), `TCP_MAERTS` (the same, data the other way),
//! and `TCP_RR` (the client sends `req_size` bytes and waits for `resp_size` back, one
//! transaction at a time): `shallow-workload`'s roles, the ones the emulator's threads play,
//! played here on blocking sockets, one thread per connection end ([`Play::run_blocking`]).
//! [`Pair`] says who is who. `flows` runs that many connections at
//! once, one thread per end each (super_netperf); the result adds them up. `queues` gives the
//! TUN that many `IFF_MULTI_QUEUE` queues and the Shallow host one I/O thread per queue.
//!
//! CPU ([`CpuUsage`]) is measured for the whole run as this process's user and system time
//! (`/proc/self/stat`: both endpoints are threads of this process in every pair, so the
//! kernel's TCP work done in process context is in the system time), plus the kernel's
//! softirq time of all CPUs (`/proc/stat`: the receive path of the TUN and veth runs there),
//! plus, for Shallow, the I/O thread's own time (`/proc/self/task/*/stat`, threads named
//! `shallow-io-*`). Clock ticks are `USER_HZ` = 100 per second, Linux's fixed user-space unit.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod smoltcp_peer;

use std::io::{self, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use shallow_os::{
    Device, Egress, Host, Netns, Offload, OsError, Peer, TcpListener, TcpStream, TunConfig,
};
use shallow_tcp::tstamp::sof;
use shallow_tcp::{DeviceCaps, Stack, TcpInfo, TxTimestamp};
pub use shallow_workload::tstamp::SpanSummary;
use shallow_workload::tstamp::{StampKind, WriteStamps};
pub use shallow_workload::Test;
use shallow_workload::{wall_clock, Conn, Play, Role, Source, Workload, Writer};

/// The `SOF_TIMESTAMPING_*` flags `--timestamps` sets on a data sender's socket: SCHED, SND
/// and ACK of every write, software stamps, a key per write, no payload on the error queue.
pub const TSTAMP_FLAGS: u32 =
    sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID | sof::OPT_TSONLY;

/// How often a data sender's error queue is read during a timestamped run (by a thread of
/// its own, beside the writer; the queue holds about `SO_RCVBUF / 768` events).
pub const TSTAMP_POLL: Duration = Duration::from_micros(500);

/// Linux's `USER_HZ`: the unit of the tick counts in `/proc/stat` and `/proc/PID/stat`.
pub const USER_HZ: f64 = 100.0;

/// The kernel peer's IPv4 address (the netserver side), as `shallow netns up` sets it.
pub const KERNEL4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// The netperf side's IPv4 address (Shallow, or the second kernel namespace).
pub const LOCAL4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
/// The kernel peer's IPv6 address.
pub const KERNEL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);
/// The netperf side's IPv6 address.
pub const LOCAL6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);

/// The port the netserver side listens on.
pub const PORT: u16 = 5001;

/// Who runs the netperf side and who runs netserver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pair {
    /// netperf on Shallow (over the TUN), netserver on the kernel.
    ShallowToLinux,
    /// netperf on the kernel, netserver on Shallow (its listener).
    LinuxToShallow,
    /// Both on the kernel, in two namespaces joined by veth: the kernel's own baseline.
    LinuxToLinux,
    /// netperf on smoltcp 0.14 over its own TUN (no offloads), netserver on the kernel: the
    /// peer user-space stack (`smoltcp_peer.rs`).
    SmoltcpToLinux,
}

impl Pair {
    /// `shallow->linux`, `linux->shallow`, `linux->linux`.
    pub fn label(self) -> &'static str {
        match self {
            Pair::ShallowToLinux => "shallow->linux",
            Pair::LinuxToShallow => "linux->shallow",
            Pair::LinuxToLinux => "linux->linux",
            Pair::SmoltcpToLinux => "smoltcp->linux",
        }
    }
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// The workload: TCP_STREAM, TCP_MAERTS or TCP_RR (BULK is the emulator's).
    pub test: Test,
    /// How long the sender sends (stream) or the client transacts (RR).
    pub duration: Duration,
    /// Bytes per `send()` of a bulk sender (netperf `-m`).
    pub msg_size: usize,
    /// Bytes per `recv()` of a bulk receiver (netperf `-M`).
    pub recv_size: usize,
    /// TCP_RR request size.
    pub req_size: usize,
    /// TCP_RR response size.
    pub resp_size: usize,
    /// TCP_NODELAY on both ends.
    pub nodelay: bool,
    /// Use IPv6 instead of IPv4.
    pub ipv6: bool,
    /// Sysctls of the Shallow engine (Linux names).
    pub sysctls: Vec<(String, String)>,
    /// Offloads asked of the TUN.
    pub offload: Offload,
    /// Seed of the Shallow engine (ISNs, ports).
    pub seed: u64,
    /// Parallel connections (each with its own thread on each end).
    pub flows: usize,
    /// TUN queues, each with its own I/O thread (above 1: `IFF_MULTI_QUEUE`). The veth pair
    /// ignores it.
    pub queues: usize,
    /// The Shallow engine sends TSO/GSO packets (false: [`DeviceCaps::gso`](shallow_tcp::DeviceCaps::gso) off, the
    /// `ethtool -K dev tso off gso off` case: one segment per packet). The veth pair ignores it.
    pub gso: bool,
    /// Application threads write the engine's packets to the TUN themselves
    /// ([`Host::set_direct_transmit`], the default); false hands every packet to the I/O
    /// threads. The veth pair ignores it.
    pub direct_tx: bool,
    /// `SO_TIMESTAMPING` on the data sender's sockets (Shallow's or the kernel's, whichever
    /// sends: [`TSTAMP_FLAGS`]) and the per-write spans in [`BenchResult::tx_spans`].
    pub timestamps: bool,
    /// `SO_BUSY_POLL` on Shallow's sockets, µs (0: off): a blocking read polls the TUN itself
    /// before it sleeps ([`TcpStream::set_busy_poll`]). The kernel's sockets are left as
    /// they are.
    pub busy_poll_us: u32,
    /// `SO_PREFER_BUSY_POLL` on Shallow's sockets: the I/O thread leaves the TUN to a
    /// polling reader.
    pub prefer_busy_poll: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            test: Test::Stream,
            duration: Duration::from_secs(5),
            // netperf's TCP_STREAM send size as `shallow bench` takes it by default (--msg-size 16k).
            msg_size: 16 * 1024,
            recv_size: 128 * 1024,
            req_size: 1,
            resp_size: 1,
            nodelay: false,
            ipv6: false,
            sysctls: Vec::new(),
            offload: Offload::DEFAULT,
            seed: 1,
            flows: 1,
            queues: 1,
            gso: true,
            direct_tx: true,
            timestamps: false,
            busy_poll_us: 0,
            prefer_busy_poll: false,
        }
    }
}

impl BenchConfig {
    /// The workload these settings describe: blocking writers, no byte count.
    pub fn workload(&self) -> Workload {
        Workload {
            test: self.test,
            msg_size: self.msg_size,
            recv_size: self.recv_size,
            req_size: self.req_size,
            resp_size: self.resp_size,
            bytes: None,
            writer: Writer::Blocking,
            nodelay: self.nodelay,
        }
    }
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Setting up the namespaces, TUN or host failed.
    #[error(transparent)]
    Os(#[from] OsError),
    /// A socket call of the workload failed.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A sysctl was refused by the engine.
    #[error("sysctl {0}")]
    Sysctl(String),
    /// A workload thread panicked.
    #[error("{0} thread panicked")]
    Panicked(&'static str),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> BenchError {
    let what = what.into();
    move |source| BenchError::Io { what, source }
}

/// CPU time over a run (see the module docs for what is measured).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuUsage {
    /// User time of this process, seconds.
    pub user_s: f64,
    /// System time of this process, seconds.
    pub sys_s: f64,
    /// Softirq time of all CPUs, seconds.
    pub softirq_s: f64,
    /// User + system time of Shallow's I/O threads (`shallow-io-*`), seconds.
    pub io_thread_s: f64,
}

impl CpuUsage {
    /// `user + sys + softirq`.
    pub fn total_s(&self) -> f64 {
        self.user_s + self.sys_s + self.softirq_s
    }
}

/// A snapshot of the CPU counters.
#[derive(Clone, Copy, Debug, Default)]
struct CpuSnap {
    user: u64,
    sys: u64,
    softirq: u64,
    io: u64,
}

/// Fields 14 and 15 (utime, stime) of a `/proc/.../stat` line; the command name (field 2)
/// is in parentheses and may hold spaces, so the fields are counted after the last `)`.
fn stat_times(line: &str) -> Option<(String, u64, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = line.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state): utime is field 14 → rest[11].
    let u = rest.get(11)?.parse().ok()?;
    let s = rest.get(12)?.parse().ok()?;
    Some((name, u, s))
}

fn snap() -> CpuSnap {
    let mut c = CpuSnap::default();
    if let Some((_, u, s)) = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .as_deref()
        .and_then(stat_times)
    {
        c.user = u;
        c.sys = s;
    }
    if let Ok(stat) = std::fs::read_to_string("/proc/stat") {
        // "cpu  user nice system idle iowait irq softirq ...": softirq is the 7th number.
        if let Some(l) = stat.lines().find(|l| l.starts_with("cpu ")) {
            c.softirq = l
                .split_whitespace()
                .nth(7)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
        }
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            let Ok(line) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            if let Some((name, u, s)) = stat_times(&line) {
                // The kernel truncates thread names to 15 bytes.
                if name.starts_with("shallow-io") {
                    c.io += u + s;
                }
            }
        }
    }
    c
}

fn cpu_since(a: CpuSnap) -> CpuUsage {
    let b = snap();
    let s = |x: u64, y: u64| y.saturating_sub(x) as f64 / USER_HZ;
    CpuUsage {
        user_s: s(a.user, b.user),
        sys_s: s(a.sys, b.sys),
        softirq_s: s(a.softirq, b.softirq),
        // Threads that exited during the run are not counted; the I/O thread lives throughout.
        io_thread_s: s(a.io, b.io),
    }
}

/// The result of one run.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// The pair measured.
    pub pair: Pair,
    /// The workload.
    pub test: Test,
    /// Seconds from the first send to the receiver's EOF (stream), or of the transactions (RR).
    pub duration_s: f64,
    /// Bytes the data sender wrote (RR: requests and responses of the client).
    pub bytes_written: u64,
    /// Bytes the data receiver read.
    pub bytes_read: u64,
    /// `send()` calls of the data sender.
    pub send_calls: u64,
    /// `recv()` calls of the data receiver.
    pub recv_calls: u64,
    /// RR transactions completed.
    pub transactions: u64,
    /// Every RR transaction's latency, nanoseconds, sorted.
    pub latencies_ns: Vec<u64>,
    /// CPU over the run.
    pub cpu: CpuUsage,
    /// Shallow's socket at the end (None for Linux ↔ Linux).
    pub tcp_info: Option<TcpInfo>,
    /// Smoothed RTT samples of Shallow's socket (microseconds, every 10 ms), sorted.
    pub rtt_us: Vec<u32>,
    /// Shallow's MIB counters that changed during the run, with their deltas.
    pub counters: Vec<(String, u64)>,
    /// Packets Shallow's egress qdiscs dropped or refused at the transmit during the run
    /// (0 for Linux ↔ Linux).
    pub qdisc_drops: u64,
    /// Offloads the TUN granted (None for Linux ↔ Linux).
    pub offload: Option<Offload>,
    /// Packets (read, written) on each TUN queue during the run (empty for Linux ↔ Linux).
    pub queue_packets: Vec<(u64, u64)>,
    /// Of the packets read on each TUN queue, those of a flow another queue's shard owns,
    /// handed to that shard (empty for Linux ↔ Linux).
    pub queue_forwarded: Vec<u64>,
    /// With [`BenchConfig::timestamps`]: the data sender's per-write spans.
    pub tx_spans: Option<TxSpans>,
}

/// Per-write transmit timestamp spans of a run's data sender (all its flows together), read
/// from its error queue as a user would (`shallow_workload::tstamp`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TxSpans {
    /// Whose socket: "shallow" or "kernel".
    pub stack: &'static str,
    /// SCHED→SND: the write's residence in the host's queues (qdisc and device).
    pub sched_to_snd: Option<SpanSummary>,
    /// SND→ACK.
    pub snd_to_ack: Option<SpanSummary>,
    /// Writes not measured: an event lost (the error queue was full) or no ACK by the end.
    pub incomplete: u64,
}

impl BenchResult {
    /// Bytes read per second, in bits.
    pub fn goodput_bps(&self) -> f64 {
        self.bytes_read as f64 * 8.0 / self.duration_s.max(1e-9)
    }

    /// The `q` quantile (0..=1) of the RR latencies, microseconds.
    pub fn latency_us(&self, q: f64) -> Option<f64> {
        quantile(&self.latencies_ns, q).map(|v| v as f64 / 1000.0)
    }

    /// CPU seconds per 10^9 bytes moved (read), or None without data or for TCP_RR, whose
    /// figure is [`BenchResult::cpu_us_per_transaction`].
    pub fn cpu_s_per_gb(&self) -> Option<f64> {
        (self.bytes_read > 0 && self.test != Test::Rr)
            .then(|| self.cpu.total_s() / (self.bytes_read as f64 / 1e9))
    }

    /// CPU microseconds per TCP_RR transaction, or None for stream workloads.
    pub fn cpu_us_per_transaction(&self) -> Option<f64> {
        (self.transactions > 0 && self.test == Test::Rr)
            .then(|| self.cpu.total_s() * 1e6 / self.transactions as f64)
    }
}

/// The `q` quantile of sorted values (nearest rank).
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.saturating_sub(1).min(sorted.len() - 1))
        .copied()
}

/// What a workload thread counted.
#[derive(Debug, Default)]
struct Side {
    written: u64,
    read: u64,
    send_calls: u64,
    recv_calls: u64,
    transactions: u64,
    latencies: Vec<u64>,
    started: Option<StdInstant>,
    ended: Option<StdInstant>,
    stamps: Option<Stamps>,
}

/// A data sender's timestamp spans, ns.
#[derive(Debug, Default)]
struct Stamps {
    stack: &'static str,
    sched_to_snd: Vec<u64>,
    snd_to_ack: Vec<u64>,
    incomplete: u64,
}

/// The sides of parallel flows as one: counts added, the earliest start, the latest end.
fn merge(sides: Vec<Side>) -> Side {
    let mut m = Side::default();
    for s in sides {
        m.written += s.written;
        m.read += s.read;
        m.send_calls += s.send_calls;
        m.recv_calls += s.recv_calls;
        m.transactions += s.transactions;
        m.latencies.extend(s.latencies);
        m.started = match (m.started, s.started) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        m.ended = match (m.ended, s.ended) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if let Some(st) = s.stamps {
            let t = m.stamps.get_or_insert_with(Stamps::default);
            t.stack = st.stack;
            t.sched_to_snd.extend(st.sched_to_snd);
            t.snd_to_ack.extend(st.snd_to_ack);
            t.incomplete += st.incomplete;
        }
    }
    m.latencies.sort_unstable();
    m
}

/// Joins the threads of parallel flows and merges their sides.
fn join_flows(hs: Vec<JoinHandle<io::Result<Side>>>) -> io::Result<Side> {
    let mut v = Vec::with_capacity(hs.len());
    for h in hs {
        v.push(
            h.join()
                .map_err(|_| io::Error::other("a flow thread panicked"))??,
        );
    }
    Ok(merge(v))
}

/// Plays `role` on a blocking socket to its end: a sender or an RR client until
/// `cfg.duration` has passed, then a half-close; a receiver or an RR server until EOF.
fn play<C: Conn<Error = io::Error>>(
    conn: &mut C,
    role: Role,
    cfg: &BenchConfig,
) -> io::Result<Side> {
    let data = vec![0x5au8; cfg.msg_size.max(cfg.req_size).max(cfg.resp_size)];
    let t0 = StdInstant::now();
    let mut p = Play::new(role).until(wall_clock() + cfg.duration);
    let mut latencies = Vec::new();
    p.run_blocking(
        conn,
        Source::Fill(&data),
        |_| false,
        |l| latencies.push(shallow_time::nanos(l)),
    )?;
    latencies.sort_unstable();
    let c = p.counts;
    Ok(Side {
        written: c.bytes_sent,
        read: c.bytes_received,
        send_calls: c.send_calls,
        recv_calls: c.recv_calls,
        transactions: c.transactions,
        latencies,
        started: Some(t0),
        ended: Some(StdInstant::now()),
        stamps: None,
    })
}

/// Whether `role` sends the data whose writes `--timestamps` measures (a bulk sender, or an
/// RR client's requests).
fn sends_data(role: &Role) -> bool {
    matches!(role, Role::Sender { .. } | Role::RrClient { .. })
}

/// Runs `work` (a data sender's play) while a thread of its own reads the socket's error
/// queue with `drain` every [`TSTAMP_POLL`] and pairs the events per write. After `work`, it
/// reads on until every write seen was acknowledged, at most one more second.
fn with_stamps(
    stack: &'static str,
    drain: impl Fn() -> io::Result<Vec<TxTimestamp>> + Sync,
    work: impl FnOnce() -> io::Result<Side>,
) -> io::Result<Side> {
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let collector = scope.spawn(|| -> io::Result<Stamps> {
            let mut w = WriteStamps::new();
            let mut st = Stamps {
                stack,
                ..Stamps::default()
            };
            let mut grace: Option<StdInstant> = None;
            loop {
                for t in drain()? {
                    let kind = StampKind::from_scm(t.kind.scm()).unwrap_or(StampKind::Ack);
                    if let Some(sp) = w.add(kind, t.key, t.time) {
                        st.sched_to_snd.push(shallow_time::nanos(sp.sched_to_snd));
                        st.snd_to_ack.push(shallow_time::nanos(sp.snd_to_ack));
                    }
                }
                if stop.load(Ordering::Acquire) {
                    let g = *grace.get_or_insert_with(StdInstant::now);
                    if w.pending() == 0 || g.elapsed() > Duration::from_secs(1) {
                        break;
                    }
                }
                std::thread::sleep(TSTAMP_POLL);
            }
            st.incomplete = w.incomplete + w.pending() as u64;
            Ok(st)
        });
        let side = work();
        stop.store(true, Ordering::Release);
        let stamps = collector
            .join()
            .map_err(|_| io::Error::other("the timestamp reader panicked"))?;
        let mut side = side?;
        side.stamps = Some(stamps?);
        Ok(side)
    })
}

/// `SO_BUSY_POLL` and `SO_PREFER_BUSY_POLL` on one of Shallow's sockets, as `cfg` asks.
fn set_busy_poll(s: &TcpStream, cfg: &BenchConfig) -> Result<(), BenchError> {
    if cfg.busy_poll_us > 0 {
        s.set_busy_poll(cfg.busy_poll_us)
            .map_err(io_err("SO_BUSY_POLL"))?;
        s.set_prefer_busy_poll(cfg.prefer_busy_poll)
            .map_err(io_err("SO_PREFER_BUSY_POLL"))?;
    }
    Ok(())
}

/// Plays `role` on a kernel socket, with `SO_TIMESTAMPING` and its error queue read when
/// `cfg.timestamps` and the role sends the data.
fn play_kernel(s: std::net::TcpStream, role: Role, cfg: &BenchConfig) -> io::Result<Side> {
    s.set_nodelay(cfg.nodelay)?;
    if !(cfg.timestamps && sends_data(&role)) {
        return play(&mut &s, role, cfg);
    }
    shallow_os::kernel_sock::set_timestamping(&s, TSTAMP_FLAGS)?;
    with_stamps(
        "kernel",
        || shallow_os::kernel_sock::recv_tx_timestamps(&s),
        || play(&mut &s, role, cfg),
    )
}

fn tx_spans(side: &mut Side) -> Option<TxSpans> {
    let st = side.stamps.as_mut()?;
    Some(TxSpans {
        stack: st.stack,
        sched_to_snd: SpanSummary::of(&mut st.sched_to_snd),
        snd_to_ack: SpanSummary::of(&mut st.snd_to_ack),
        incomplete: st.incomplete,
    })
}

fn addrs(ipv6: bool) -> (IpAddr, IpAddr) {
    if ipv6 {
        (IpAddr::V6(LOCAL6), IpAddr::V6(KERNEL6))
    } else {
        (IpAddr::V4(LOCAL4), IpAddr::V4(KERNEL4))
    }
}

/// Runs `f` on a new thread inside the namespace `ns`.
fn in_netns<R: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<JoinHandle<Result<R, OsError>>, OsError> {
    let ns = Netns::open(ns)?;
    Ok(std::thread::spawn(move || ns.run(f)))
}

fn join<R>(h: JoinHandle<Result<R, OsError>>, what: &'static str) -> Result<R, BenchError> {
    h.join()
        .map_err(|_| BenchError::Panicked(what))?
        .map_err(BenchError::from)
}

/// The kernel's side of a netserver: binds in `ns`, accepts `cfg.flows` connections and
/// serves each on its own thread.
fn kernel_server(
    ns: &Netns,
    cfg: &BenchConfig,
    addr: SocketAddr,
) -> Result<JoinHandle<Result<io::Result<Side>, OsError>>, BenchError> {
    let l = ns
        .run(move || std::net::TcpListener::bind(addr))?
        .map_err(io_err(format!("kernel bind {addr}")))?;
    let cfg = cfg.clone();
    Ok(std::thread::spawn(move || {
        Ok((|| {
            let mut hs = Vec::new();
            for _ in 0..cfg.flows.max(1) {
                let (s, _) = l.accept()?;
                let cfg = cfg.clone();
                hs.push(std::thread::spawn(move || kernel_serve(s, &cfg)));
            }
            join_flows(hs)
        })())
    }))
}

/// netserver's part of the workload on one accepted kernel connection.
fn kernel_serve(s: std::net::TcpStream, cfg: &BenchConfig) -> io::Result<Side> {
    play_kernel(s, cfg.workload().netserver_role(), cfg)
}

/// The kernel's side of netperf in `ns`: makes `cfg.flows` connections to `addr` and runs the
/// client's part on each, one thread per connection.
fn kernel_client(
    ns: &Netns,
    cfg: &BenchConfig,
    addr: SocketAddr,
) -> Result<JoinHandle<Result<io::Result<Side>, OsError>>, BenchError> {
    let cfg = cfg.clone();
    Ok(in_netns(ns.name(), move || {
        // Sockets belong to the namespace they are made in: connect here, then work anywhere.
        let mut conns = Vec::new();
        for _ in 0..cfg.flows.max(1) {
            conns.push(connect_retry(|| std::net::TcpStream::connect(addr))?);
        }
        let hs = conns
            .into_iter()
            .map(|s| {
                let cfg = cfg.clone();
                std::thread::spawn(move || kernel_netperf(s, &cfg))
            })
            .collect();
        join_flows(hs)
    })?)
}

/// netperf's part of the workload on one kernel connection.
fn kernel_netperf(s: std::net::TcpStream, cfg: &BenchConfig) -> io::Result<Side> {
    play_kernel(s, cfg.workload().netperf_role(), cfg)
}

/// Retries `f` while it fails with ECONNREFUSED (the listener is not up yet), up to 5 s.
fn connect_retry<S>(mut f: impl FnMut() -> io::Result<S>) -> io::Result<S> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            r => return r,
        }
    }
}

/// Combines the two sides' counts into a result (the data sender's and receiver's view).
fn result_of(
    pair: Pair,
    cfg: &BenchConfig,
    mut netperf: Side,
    mut netserver: Side,
    cpu: CpuUsage,
) -> BenchResult {
    let tx_spans = tx_spans(&mut netperf).or_else(|| tx_spans(&mut netserver));
    let (sender, receiver) = match cfg.test {
        Test::Maerts => (&netserver, &netperf),
        Test::Rr => (&netperf, &netperf),
        Test::Stream | Test::Bulk => (&netperf, &netserver),
    };
    let duration_s = match cfg.test {
        Test::Rr => match (netperf.started, netperf.ended) {
            (Some(a), Some(b)) => (b - a).as_secs_f64(),
            _ => 0.0,
        },
        // From the sender's first write to the receiver's EOF.
        _ => match (sender.started, receiver.ended) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        },
    };
    BenchResult {
        pair,
        test: cfg.test,
        duration_s,
        bytes_written: sender.written,
        bytes_read: receiver.read,
        send_calls: sender.send_calls,
        recv_calls: receiver.recv_calls,
        transactions: netperf.transactions,
        latencies_ns: netperf.latencies.clone(),
        cpu,
        tcp_info: None,
        rtt_us: Vec::new(),
        counters: Vec::new(),
        qdisc_drops: 0,
        offload: None,
        queue_packets: Vec::new(),
        queue_forwarded: Vec::new(),
        tx_spans,
    }
}

/// Runs one workload for one pair.
pub fn run(cfg: &BenchConfig, pair: Pair) -> Result<BenchResult, BenchError> {
    match pair {
        Pair::LinuxToLinux => run_veth(cfg),
        Pair::SmoltcpToLinux => smoltcp_peer::run(cfg),
        Pair::ShallowToLinux | Pair::LinuxToShallow => run_shallow(cfg, pair),
    }
}

/// Linux ↔ Linux over veth: netserver in namespace `A` (10.213.0.1 on `v1`), netperf in `B`
/// (10.213.0.2 on `v0`).
fn run_veth(cfg: &BenchConfig) -> Result<BenchResult, BenchError> {
    let a = Netns::unique("shbench-srv")?;
    let b = Netns::unique("shbench-cli")?;
    b.ip(&[
        "link",
        "add",
        "v0",
        "type",
        "veth",
        "peer",
        "name",
        "v1",
        "netns",
        a.name(),
    ])?;
    let (local, kernel) = addrs(cfg.ipv6);
    for (ns, dev, ip) in [(&b, "v0", local), (&a, "v1", kernel)] {
        ns.ip(&["link", "set", "lo", "up"])?;
        match ip {
            IpAddr::V4(v4) => ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev])?,
            IpAddr::V6(v6) => ns.ip(&[
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ])?,
        };
        ns.ip(&["link", "set", "dev", dev, "up"])?;
    }
    let addr = SocketAddr::new(kernel, PORT);
    let cpu0 = snap();
    let server = kernel_server(&a, cfg, addr)?;
    let client = kernel_client(&b, cfg, addr)?;
    let netperf = join(client, "netperf")?.map_err(io_err("netperf (kernel)"))?;
    let netserver = join(server, "netserver")?.map_err(io_err("netserver (kernel)"))?;
    let cpu = cpu_since(cpu0);
    Ok(result_of(Pair::LinuxToLinux, cfg, netperf, netserver, cpu))
}

/// A namespace with the kernel peer on a TUN and a Shallow host on it (removed on drop:
/// the host first, then the namespace).
struct ShallowWorld {
    host: Host,
    ns: Netns,
    offload: Offload,
}

fn shallow_world(cfg: &BenchConfig) -> Result<ShallowWorld, BenchError> {
    let ns = Netns::unique("shbench")?;
    let mut tc = TunConfig::new("sh0");
    tc.offload = cfg.offload;
    tc.queues = cfg.queues.max(1);
    tc.multi_queue = tc.queues > 1;
    let tuns = ns.open_tun(&tc)?;
    let Some(offload) = tuns.first().map(|t| t.offload()) else {
        return Err(OsError::NoSuchTun {
            name: "sh0".into(),
            netns: Some(ns.name().into()),
        }
        .into());
    };
    let peer = Peer {
        netns: ns.name().into(),
        tun: "sh0".into(),
        ..Peer::default()
    };
    peer.configure(&ns)?;
    let mut stack = Stack::new(cfg.seed);
    stack.add_address(IpAddr::V4(LOCAL4));
    stack.add_address(IpAddr::V6(LOCAL6));
    stack.set_device(DeviceCaps {
        gso: cfg.gso,
        ..stack.device()
    });
    for (k, v) in &cfg.sysctls {
        stack
            .sysctl_set(k, v)
            .map_err(|e| BenchError::Sysctl(format!("{k}={v}: {e}")))?;
    }
    let devices = tuns.into_iter().map(Device::Tun).collect();
    let host = Host::start_queues(stack, devices, Egress::default())
        .map_err(io_err("start the I/O threads"))?;
    host.set_direct_transmit(cfg.direct_tx);
    Ok(ShallowWorld { host, ns, offload })
}

/// The engines' counters (summed over the host's shards).
fn counters_snapshot(host: &Host) -> Vec<(String, u64)> {
    host.counters()
}

/// Packets (read, written) per queue of `host` so far.
fn queue_snapshot(host: &Host) -> Vec<(u64, u64)> {
    use std::sync::atomic::Ordering::Relaxed;
    host.stats()
        .queues
        .iter()
        .map(|q| (q.rx_packets.load(Relaxed), q.tx_packets.load(Relaxed)))
        .collect()
}

/// Packets read per queue of `host` so far that went to another queue's shard.
fn forwarded_snapshot(host: &Host) -> Vec<u64> {
    use std::sync::atomic::Ordering::Relaxed;
    host.stats()
        .queues
        .iter()
        .map(|q| q.rx_forwarded.load(Relaxed))
        .collect()
}

/// Shallow's side of every flow at once (one thread per stream); the RTT samples of all.
fn shallow_sides(
    streams: &[TcpStream],
    cfg: &BenchConfig,
    netperf: bool,
) -> io::Result<(Side, Vec<u32>)> {
    std::thread::scope(|scope| {
        let hs: Vec<_> = streams
            .iter()
            .map(|s| scope.spawn(move || shallow_side(s, cfg, netperf)))
            .collect();
        let mut sides = Vec::with_capacity(hs.len());
        let mut rtts = Vec::new();
        for h in hs {
            let (side, r) = h
                .join()
                .map_err(|_| io::Error::other("a flow thread panicked"))??;
            sides.push(side);
            rtts.extend(r);
        }
        rtts.sort_unstable();
        Ok((merge(sides), rtts))
    })
}

/// Shallow ↔ Linux over the TUN.
fn run_shallow(cfg: &BenchConfig, pair: Pair) -> Result<BenchResult, BenchError> {
    let w = shallow_world(cfg)?;
    let (local, kernel) = addrs(cfg.ipv6);
    let flows = cfg.flows.max(1);
    let before = counters_snapshot(&w.host);
    let drops0 = w.host.stats().qdisc_drops.load(Ordering::Relaxed);
    let q0 = queue_snapshot(&w.host);
    let f0 = forwarded_snapshot(&w.host);
    let cpu0 = snap();
    let (netperf, netserver, streams, rtts) = match pair {
        Pair::ShallowToLinux => {
            let addr = SocketAddr::new(kernel, PORT);
            let server = kernel_server(&w.ns, cfg, addr)?;
            let mut streams = Vec::with_capacity(flows);
            for _ in 0..flows {
                let s = connect_retry(|| {
                    TcpStream::connect_timeout(&w.host, addr, Duration::from_secs(5))
                })
                .map_err(io_err(format!("connect {addr}")))?;
                s.set_nodelay(cfg.nodelay).map_err(io_err("TCP_NODELAY"))?;
                set_busy_poll(&s, cfg)?;
                streams.push(s);
            }
            let (side, rtts) =
                shallow_sides(&streams, cfg, true).map_err(io_err("netperf (Shallow)"))?;
            let netserver = join(server, "netserver")?.map_err(io_err("netserver (kernel)"))?;
            (side, netserver, streams, rtts)
        }
        Pair::LinuxToShallow => {
            let addr = SocketAddr::new(local, PORT);
            let l = TcpListener::bind(&w.host, addr).map_err(io_err(format!("bind {addr}")))?;
            let client = kernel_client(&w.ns, cfg, addr)?;
            let mut streams = Vec::with_capacity(flows);
            for _ in 0..flows {
                let (s, _) = l.accept().map_err(io_err("accept"))?;
                s.set_nodelay(cfg.nodelay).map_err(io_err("TCP_NODELAY"))?;
                set_busy_poll(&s, cfg)?;
                streams.push(s);
            }
            let (side, rtts) =
                shallow_sides(&streams, cfg, false).map_err(io_err("netserver (Shallow)"))?;
            let netperf = join(client, "netperf")?.map_err(io_err("netperf (kernel)"))?;
            (netperf, side, streams, rtts)
        }
        Pair::LinuxToLinux => return run_veth(cfg),
        Pair::SmoltcpToLinux => return smoltcp_peer::run(cfg),
    };
    let cpu = cpu_since(cpu0);
    let mut r = result_of(pair, cfg, netperf, netserver, cpu);
    r.offload = Some(w.offload);
    // One socket's tcp_info describes the run only when there is one flow.
    if let [s] = streams.as_slice() {
        r.tcp_info = s.tcp_info().ok();
    }
    r.rtt_us = rtts;
    r.queue_packets = queue_snapshot(&w.host)
        .iter()
        .zip(q0.iter().chain(std::iter::repeat(&(0, 0))))
        .map(|(a, b)| (a.0 - b.0, a.1 - b.1))
        .collect();
    r.queue_forwarded = forwarded_snapshot(&w.host)
        .iter()
        .zip(f0.iter().chain(std::iter::repeat(&0)))
        .map(|(a, b)| a - b)
        .collect();
    r.qdisc_drops = w.host.stats().qdisc_drops.load(Ordering::Relaxed) - drops0;
    let after = counters_snapshot(&w.host);
    r.counters = after
        .into_iter()
        .filter_map(|(k, v)| {
            let b = before.iter().find(|(bk, _)| *bk == k).map_or(0, |x| x.1);
            (v > b).then(|| (k, v - b))
        })
        .collect();
    Ok(r)
}

/// Shallow's side of a workload (`netperf`: the connecting side), with a sampler of the
/// socket's smoothed RTT every 10 ms while Shallow sends data.
fn shallow_side(s: &TcpStream, cfg: &BenchConfig, netperf: bool) -> io::Result<(Side, Vec<u32>)> {
    let w = cfg.workload();
    let role = if netperf {
        w.netperf_role()
    } else {
        w.netserver_role()
    };
    let sends = !matches!(role, Role::Receiver { .. });
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        let sampler = scope.spawn(|| {
            let mut v = Vec::new();
            while sends && !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(10));
                if let Ok(i) = s.tcp_info() {
                    if i.rtt > 0 {
                        v.push(i.rtt);
                    }
                }
            }
            v.sort_unstable();
            v
        });
        let bulk_sender = matches!(role, Role::Sender { .. });
        let stamped = cfg.timestamps && sends_data(&role);
        let run = || {
            if stamped {
                s.set_timestamping(TSTAMP_FLAGS)?;
                with_stamps(
                    "shallow",
                    || s.tx_timestamps(),
                    || play(&mut &*s, role, cfg),
                )
            } else {
                play(&mut &*s, role, cfg)
            }
        };
        let side = run().and_then(|side| {
            if bulk_sender {
                // Until the kernel closes too: the whole stream has been read.
                let mut b = [0u8; 1];
                while (&mut &*s).read(&mut b)? > 0 {}
            }
            Ok(side)
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rtts = sampler.join().unwrap_or_default();
        side.map(|sd| (sd, rtts))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TCP_RR reports CPU per transaction, stream workloads CPU per GB, never both.
    #[test]
    fn cpu_figure_fits_the_workload() {
        let side = |read, transactions| Side {
            read,
            written: read,
            transactions,
            ..Side::default()
        };
        let cpu = CpuUsage {
            user_s: 1.0,
            sys_s: 1.0,
            softirq_s: 0.0,
            io_thread_s: 0.5,
        };
        let mut cfg = BenchConfig {
            test: Test::Rr,
            ..BenchConfig::default()
        };
        let rr = result_of(
            Pair::ShallowToLinux,
            &cfg,
            side(4000, 2000),
            side(0, 0),
            cpu,
        );
        assert_eq!(rr.cpu_s_per_gb(), None);
        assert_eq!(rr.cpu_us_per_transaction(), Some(1000.0));
        cfg.test = Test::Stream;
        let st = result_of(
            Pair::ShallowToLinux,
            &cfg,
            side(0, 0),
            side(2_000_000_000, 0),
            cpu,
        );
        assert_eq!(st.cpu_us_per_transaction(), None);
        assert_eq!(st.cpu_s_per_gb(), Some(1.0));
    }

    #[test]
    fn proc_stat_fields() {
        // A thread name with spaces and parentheses must not shift the fields.
        let line = "123 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 1 0";
        assert_eq!(stat_times(line), Some(("a (b) c".into(), 250, 75)));
        assert_eq!(stat_times("garbage"), None);
    }

    /// Parallel flows merge into one side: counts add up, the span runs from the earliest
    /// start to the latest end, latencies are pooled and sorted.
    #[test]
    fn flows_merge_into_one_side() {
        let t0 = StdInstant::now();
        let t1 = t0 + Duration::from_millis(10);
        let t2 = t0 + Duration::from_millis(20);
        let a = Side {
            written: 100,
            read: 7,
            send_calls: 2,
            recv_calls: 3,
            transactions: 1,
            latencies: vec![5, 1],
            started: Some(t1),
            ended: Some(t1),
            stamps: Some(Stamps {
                stack: "shallow",
                sched_to_snd: vec![4, 2],
                snd_to_ack: vec![9, 8],
                incomplete: 1,
            }),
        };
        let b = Side {
            written: 50,
            read: 3,
            send_calls: 1,
            recv_calls: 1,
            transactions: 2,
            latencies: vec![3],
            started: Some(t0),
            ended: Some(t2),
            stamps: Some(Stamps {
                stack: "shallow",
                sched_to_snd: vec![3],
                snd_to_ack: vec![7],
                incomplete: 2,
            }),
        };
        let mut m = merge(vec![a, b, Side::default()]);
        let t = tx_spans(&mut m).unwrap();
        assert_eq!(t.stack, "shallow");
        assert_eq!(t.incomplete, 3);
        let s = t.sched_to_snd.unwrap();
        assert_eq!((s.count, s.p50_ns, s.max_ns), (3, 3, 4));
        assert_eq!(t.snd_to_ack.unwrap().p50_ns, 8);
        assert_eq!(
            (
                m.written,
                m.read,
                m.send_calls,
                m.recv_calls,
                m.transactions
            ),
            (150, 10, 3, 4, 3)
        );
        assert_eq!(m.latencies, vec![1, 3, 5]);
        assert_eq!((m.started, m.ended), (Some(t0), Some(t2)));
    }

    /// Root only (skipped otherwise, unless `SHALLOW_REQUIRE_TUN=1`): `--timestamps` gives
    /// per-write spans from the data sender's socket in each pair: Shallow's when it sends,
    /// the kernel's (its own `SO_TIMESTAMPING`, over the TUN or veth) when it does; TCP_RR's
    /// client writes are measured too; and without it there are none.
    #[test]
    fn timestamps_of_the_data_sender_in_each_pair() {
        if !shallow_os::skip::can_run("timestamps_of_the_data_sender_in_each_pair", &[]) {
            return;
        }
        let cfg = BenchConfig {
            duration: Duration::from_millis(300),
            timestamps: true,
            ..BenchConfig::default()
        };
        for (test, pair, stack) in [
            (Test::Stream, Pair::ShallowToLinux, "shallow"),
            (Test::Maerts, Pair::ShallowToLinux, "kernel"),
            (Test::Stream, Pair::LinuxToShallow, "kernel"),
            (Test::Stream, Pair::LinuxToLinux, "kernel"),
            (Test::Rr, Pair::ShallowToLinux, "shallow"),
        ] {
            let r = run(
                &BenchConfig {
                    test,
                    ..cfg.clone()
                },
                pair,
            )
            .unwrap();
            let t = r.tx_spans.expect("spans");
            assert_eq!(t.stack, stack, "{test:?} {pair:?}");
            let sched = t.sched_to_snd.expect("SCHED->SND measured");
            let ack = t.snd_to_ack.expect("SND->ACK measured");
            assert_eq!(sched.count, ack.count);
            // Every write is one key; a write measured is at most one of the calls.
            assert!(
                sched.count <= r.send_calls.max(r.transactions),
                "{test:?} {pair:?}"
            );
            assert!(sched.p50_ns <= sched.p99_ns && sched.p99_ns <= sched.max_ns);
        }
        let r = run(
            &BenchConfig {
                timestamps: false,
                ..cfg
            },
            Pair::ShallowToLinux,
        )
        .unwrap();
        assert!(r.tx_spans.is_none());
    }

    /// Root only (skipped otherwise, unless `SHALLOW_REQUIRE_TUN=1`): a short TCP_STREAM with
    /// 4 flows over a 2-queue TUN moves every byte written, reports both queues, and the
    /// per-queue packets add up to something on each queue used.
    #[test]
    fn stream_with_flows_over_two_queues() {
        if !shallow_os::skip::can_run("stream_with_flows_over_two_queues", &[]) {
            return;
        }
        let cfg = BenchConfig {
            duration: Duration::from_millis(300),
            flows: 4,
            queues: 2,
            ..BenchConfig::default()
        };
        for pair in [Pair::ShallowToLinux, Pair::LinuxToShallow] {
            let r = run(&cfg, pair).unwrap();
            assert!(r.bytes_written > 0, "{pair:?}: nothing sent");
            assert_eq!(r.bytes_read, r.bytes_written, "{pair:?}: bytes lost");
            assert_eq!(r.queue_packets.len(), 2, "{pair:?}");
            assert_eq!(r.queue_forwarded.len(), 2, "{pair:?}");
            assert!(
                r.tcp_info.is_none(),
                "{pair:?}: one flow's tcp_info for four"
            );
            let tx: u64 = r.queue_packets.iter().map(|q| q.1).sum();
            assert!(tx > 0, "{pair:?}: no packet written");
        }
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&v, 0.0), Some(1));
        assert_eq!(quantile::<u64>(&[], 0.5), None);
    }

    /// The process CPU counters are found and parsed: spinning makes them advance.
    #[test]
    fn cpu_counters_advance() {
        let a = snap();
        let t = StdInstant::now();
        let mut x = 0u64;
        let mut c = CpuUsage::default();
        while c.user_s + c.sys_s == 0.0 && t.elapsed() < Duration::from_secs(5) {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
            }
            c = cpu_since(a);
        }
        assert!(
            c.user_s + c.sys_s > 0.0,
            "no CPU time seen in /proc/self/stat"
        );
    }
}
