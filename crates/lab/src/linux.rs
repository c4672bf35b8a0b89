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
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shallow_os::Netns;

pub use crate::report::{LinuxReport, LinuxRow};
use crate::{Chart, Claim, Curve, Experiment, LabError, Scale};

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

// ---------------------------------------------------------------------------------------
// The world: two namespaces, a veth pair with tbf on the sender's end, a TUN for Shallow.

const TX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 1);
const RX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 2);
const TUN_KERNEL: Ipv4Addr = Ipv4Addr::new(10, 215, 1, 1);
const SHALLOW_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 1, 2);

/// The bottleneck: `tc qdisc replace dev VETH root tbf rate R burst B limit L`.
#[derive(Clone, Copy, Debug)]
struct Tbf {
    rate_bps: u64,
    burst: u64,
    limit: u64,
}

impl Tbf {
    fn describe(&self) -> String {
        format!(
            "tbf rate {} Mbit/s burst {} KB limit {} KB on the sender's veth",
            self.rate_bps / 1_000_000,
            self.burst / 1024,
            self.limit / 1024
        )
    }
}

struct World {
    tx: Netns,
    rx: Netns,
    veth: String,
    tun: String,
    next_port: u16,
}

fn os_err(what: &str) -> impl FnOnce(shallow_os::OsError) -> LabError + '_ {
    move |e| LabError::Linux(format!("{what}: {e}"))
}

fn io_err(what: &str) -> impl FnOnce(io::Error) -> LabError + '_ {
    move |e| LabError::Linux(format!("{what}: {e}"))
}

fn is_root() -> bool {
    // The effective uid of this process, from /proc (no libc call needed).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

impl World {
    fn new(tbf: Tbf) -> Result<World, LabError> {
        if !is_root() {
            return Err(LabError::NotRoot(
                "the Linux substrate needs root (network namespaces, veth, tc)".into(),
            ));
        }
        let tx = Netns::unique("shallow-lab-tx").map_err(os_err("create namespace"))?;
        let rx = Netns::unique("shallow-lab-rx").map_err(os_err("create namespace"))?;
        let veth = "slab0".to_string();
        let peer = "slab1".to_string();
        // Made directly inside the namespaces: nothing appears in the caller's.
        shallow_os::netns::ip(&[
            "link",
            "add",
            &veth,
            "netns",
            tx.name(),
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            rx.name(),
        ])
        .map_err(os_err("create veth pair"))?;
        let run = |ns: &Netns, args: &[&str]| ns.ip(args).map(|_| ()).map_err(os_err("ip"));
        run(
            &tx,
            &["addr", "add", &format!("{TX_ADDR}/24"), "dev", &veth],
        )?;
        run(
            &rx,
            &["addr", "add", &format!("{RX_ADDR}/24"), "dev", &peer],
        )?;
        for (ns, dev) in [(&tx, &veth), (&rx, &peer)] {
            run(ns, &["link", "set", "lo", "up"])?;
            run(ns, &["link", "set", dev, "up"])?;
        }
        // Shallow's subnet (behind the TUN in tx) is reached through tx.
        run(
            &rx,
            &[
                "route",
                "add",
                &format!("{}/24", Ipv4Addr::new(10, 215, 1, 0)),
                "via",
                &TX_ADDR.to_string(),
            ],
        )?;
        tx.sysctl_set("ipv4/ip_forward", "1")
            .map_err(os_err("ip_forward"))?;
        let w = World {
            tx,
            rx,
            veth,
            tun: "slabtun".into(),
            next_port: 5301,
        };
        w.set_tbf(tbf)?;
        Ok(w)
    }

    fn set_tbf(&self, t: Tbf) -> Result<(), LabError> {
        self.set_root_qdisc(&[
            "tbf",
            "rate",
            &format!("{}bit", t.rate_bps),
            "burst",
            &t.burst.to_string(),
            "limit",
            &t.limit.to_string(),
        ])
    }

    /// `tc qdisc replace dev VETH root QDISC...` in the sender namespace.
    fn set_root_qdisc(&self, qdisc: &[&str]) -> Result<(), LabError> {
        let mut args = vec!["qdisc", "replace", "dev", self.veth.as_str(), "root"];
        args.extend_from_slice(qdisc);
        let out = self
            .tx
            .command("tc")
            .args(&args)
            .output()
            .map_err(io_err("tc"))?;
        if !out.status.success() {
            return Err(LabError::Linux(format!(
                "tc {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Bytes in the tbf now (`tc -s qdisc`: "backlog 78728b 52p").
    fn tbf_backlog(&self) -> Option<u64> {
        let out = self
            .tx
            .command("tc")
            .args(["-s", "qdisc", "show", "dev", &self.veth])
            .output()
            .ok()?;
        parse_tc_backlog(&String::from_utf8_lossy(&out.stdout))
    }

    fn kernel_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        self.tx
            .sysctl_set(key, value)
            .map_err(os_err("sender namespace sysctl"))
    }

    /// `/proc/net/netstat` and `/proc/net/snmp` of the sender namespace, as `TcpExtX`/`TcpX`.
    fn kernel_counters(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for f in ["/proc/net/netstat", "/proc/net/snmp"] {
            if let Ok(out) = self.tx.command("cat").arg(f).output() {
                parse_proc_net(&String::from_utf8_lossy(&out.stdout), &mut m);
            }
        }
        m
    }

    /// `ss -tmniH` of the sender namespace's connections to `port`.
    fn kernel_sockets(&self, port: u16) -> Vec<SsSock> {
        let filter = format!("( dport = :{port} )");
        match self
            .tx
            .command("ss")
            .args(["-tmniH", "state", "established", &filter])
            .output()
        {
            Ok(out) => parse_ss(&String::from_utf8_lossy(&out.stdout)),
            Err(_) => Vec::new(),
        }
    }

    fn port(&mut self) -> u16 {
        self.next_port += 1;
        self.next_port
    }

    /// The engine on a TUN in the sender namespace: kernel side 10.215.1.1, Shallow 10.215.1.2;
    /// Shallow's own egress qdisc is the experiment's tbf (its host queue, where TSQ sees it).
    fn shallow_host(
        &self,
        sysctls: &[(String, String)],
        seed: u64,
        tbf: Tbf,
    ) -> Result<shallow_os::Host, LabError> {
        let mut cfg = shallow_os::TunConfig::new(&self.tun);
        cfg.persist = Some(false);
        let tun = self
            .tx
            .open_tun(&cfg)
            .map_err(os_err("open TUN"))?
            .into_iter()
            .next()
            .ok_or_else(|| LabError::Linux("no TUN queue".into()))?;
        let run = |args: &[&str]| self.tx.ip(args).map(|_| ()).map_err(os_err("ip"));
        run(&[
            "addr",
            "replace",
            &format!("{TUN_KERNEL}/24"),
            "dev",
            &self.tun,
        ])?;
        run(&["link", "set", "dev", &self.tun, "up"])?;
        let mut stack = shallow_tcp::Stack::new(seed);
        stack.add_address(IpAddr::V4(SHALLOW_ADDR));
        for (k, v) in sysctls {
            stack
                .sysctl_set(k, v)
                .map_err(|e| LabError::Linux(format!("engine sysctl {k}={v}: {e}")))?;
        }
        let egress = shallow_os::Egress::Tbf {
            rate: shallow_os::Rate::bps(tbf.rate_bps),
            burst: tbf.burst,
            limit: usize::try_from(tbf.limit).unwrap_or(usize::MAX),
        };
        shallow_os::Host::start_with(stack, tun, egress).map_err(io_err("start the Shallow host"))
    }
}

/// `ipv4/tcp_autocorking` → `net.ipv4.tcp_autocorking`; `shallow/tcp_tsq` (an engine
/// extension, no kernel file) → `shallow.tcp_tsq`.
fn sysctl_name(k: &str) -> String {
    match k.strip_prefix("shallow/") {
        Some(rest) => format!("shallow.{rest}"),
        None => format!("net.{}", k.replace('/', ".")),
    }
}

fn parse_tc_backlog(s: &str) -> Option<u64> {
    let l = s.lines().find(|l| l.trim_start().starts_with("backlog"))?;
    let b = l.split_whitespace().nth(1)?;
    parse_size(b.trim_end_matches('b'))
}

/// "78728", "77Kb"-style sizes of tc (K = 1024, M = 1024²).
fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(n) = s.strip_suffix('K') {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1024 * 1024)
    } else {
        (s, 1)
    };
    num.parse::<u64>().ok().map(|v| v * mul)
}

fn parse_proc_net(text: &str, out: &mut BTreeMap<String, u64>) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((p1, n)), Some((p2, v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        for (k, v) in n.split_whitespace().zip(v.split_whitespace()) {
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{p1}{k}"), v);
            }
        }
    }
}

/// What `ss -tmi` says about one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct SsSock {
    /// `skmem r`: rmem_alloc.
    rmem_alloc: u64,
    /// `skmem t`: wmem_alloc (bytes below TCP).
    wmem_alloc: u64,
    /// `skmem w`: wmem_queued.
    wmem_queued: u64,
    /// `notsent:`.
    notsent: u64,
}

fn parse_ss(text: &str) -> Vec<SsSock> {
    let mut v = Vec::new();
    for l in text.lines() {
        let Some(i) = l.find("skmem:(") else { continue };
        let rest = &l[i + 7..];
        let mem = rest.split(')').next().unwrap_or("");
        let mut s = SsSock::default();
        for f in mem.split(',') {
            let num = |p: &str| f.strip_prefix(p).and_then(|x| x.parse::<u64>().ok());
            if let Some(x) = num("r") {
                s.rmem_alloc = x;
            } else if let Some(x) = num("t") {
                s.wmem_alloc = x;
            } else if let Some(x) = num("w") {
                s.wmem_queued = x;
            }
        }
        if let Some(j) = l.find("notsent:") {
            s.notsent = l[j + 8..]
                .split_whitespace()
                .next()
                .and_then(|x| x.parse().ok())
                .unwrap_or(0);
        }
        v.push(s);
    }
    v
}

/// CPU time this thread has run, ns (`/proc/thread-self/schedstat`, first field).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

/// CPU time of this process's threads whose name starts with `prefix`, ns.
fn threads_cpu_ns(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut sum = 0;
    for e in dir.flatten() {
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if name.trim_end().starts_with(prefix) {
            sum += std::fs::read_to_string(p.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
                .unwrap_or(0u64);
        }
    }
    sum
}

// ---------------------------------------------------------------------------------------
// Workloads, written once over both kinds of socket.

/// A sending socket of either substrate.
trait Flow: Send + Sync {
    fn send(&self, buf: &[u8]) -> io::Result<usize>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn shutdown_write(&self) -> io::Result<()>;
}

impl Flow for std::net::TcpStream {
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::net::TcpStream::set_nonblocking(self, on)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

impl Flow for shallow_os::TcpStream {
    fn send(&self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        shallow_os::TcpStream::set_nonblocking(self, on)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        shallow_os::TcpStream::set_write_timeout(self, t)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// Edge-triggered readiness for writing over a set of flows (epoll or Shallow's Poller).
trait WritePoller {
    /// Waits up to `timeout`; pushes the indexes of flows that became writable.
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()>;
}

struct KernelEpoll {
    ep: std::os::fd::OwnedFd,
    cap: usize,
}

impl KernelEpoll {
    fn new(flows: &[std::net::TcpStream]) -> io::Result<KernelEpoll> {
        use rustix::event::epoll;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (i, f) in flows.iter().enumerate() {
            epoll::add(
                &ep,
                f.as_fd(),
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::OUT | epoll::EventFlags::ET,
            )?;
        }
        Ok(KernelEpoll {
            ep,
            cap: flows.len().max(1),
        })
    }
}

impl WritePoller for KernelEpoll {
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()> {
        use rustix::event::epoll;
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // Made per call: epoll's event type holds a raw pointer, so it cannot be kept in a
        // value that moves to the sender thread.
        let mut buf: Vec<epoll::Event> = Vec::with_capacity(self.cap);
        match epoll::wait(
            &self.ep,
            rustix::buffer::spare_capacity(&mut buf),
            Some(&ts),
        ) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for e in buf.iter().copied() {
            let (flags, data) = (e.flags, e.data);
            if flags.intersects(epoll::EventFlags::OUT | epoll::EventFlags::ERR) {
                ready.push(data.u64() as usize);
            }
        }
        Ok(())
    }
}

struct ShallowPoller {
    poller: shallow_os::Poller,
    events: shallow_os::Events,
}

impl ShallowPoller {
    fn new(
        host: &shallow_os::Host,
        flows: &[Arc<shallow_os::TcpStream>],
    ) -> io::Result<ShallowPoller> {
        let poller = shallow_os::Poller::new(host);
        for (i, f) in flows.iter().enumerate() {
            poller.register(
                &**f,
                i,
                shallow_os::poller::Interest::WRITABLE,
                shallow_os::Trigger::Edge,
            )?;
        }
        Ok(ShallowPoller {
            poller,
            events: shallow_os::Events::with_capacity(flows.len().max(1)),
        })
    }
}

impl WritePoller for ShallowPoller {
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()> {
        self.poller.wait(&mut self.events, Some(timeout))?;
        for e in self.events.iter() {
            if e.is_writable() {
                ready.push(e.token);
            }
        }
        Ok(())
    }
}

/// How the senders write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    /// One thread per flow, blocking `write()` of `msg` bytes (netperf).
    Blocking,
    /// One thread for all flows, non-blocking, writing until EAGAIN on every edge-triggered
    /// EPOLLOUT (spec §12 E3).
    Epoll,
}

#[derive(Clone, Debug)]
struct Workload {
    flows: usize,
    msg: usize,
    nodelay: bool,
    writer: Writer,
    duration: Duration,
}

/// What the senders did.
#[derive(Clone, Copy, Debug, Default)]
struct SendStats {
    bytes: u64,
    send_calls: u64,
    /// epoll_wait calls that returned at least one event (a wake-up of the sender thread).
    wakeups: u64,
    /// CPU time of the sender threads, ns.
    cpu_ns: u64,
}

fn blocking_senders<F: Flow + 'static>(
    flows: Vec<Arc<F>>,
    w: &Workload,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<SendStats>> {
    flows
        .into_iter()
        .map(|f| {
            let stop = stop.clone();
            let msg = w.msg;
            std::thread::spawn(move || {
                let c0 = thread_cpu_ns();
                let buf = vec![0x5au8; msg];
                let mut st = SendStats::default();
                let _ = f.set_write_timeout(Some(Duration::from_millis(50)));
                while !stop.load(Ordering::Relaxed) {
                    match f.send(&buf) {
                        Ok(n) => {
                            st.bytes += n as u64;
                            st.send_calls += 1;
                        }
                        Err(e)
                            if e.kind() == io::ErrorKind::WouldBlock
                                || e.kind() == io::ErrorKind::TimedOut
                                || e.kind() == io::ErrorKind::Interrupted =>
                        {
                            st.send_calls += 1;
                        }
                        Err(_) => break,
                    }
                }
                st.cpu_ns = thread_cpu_ns().saturating_sub(c0);
                let _ = f.shutdown_write();
                st
            })
        })
        .collect()
}

fn epoll_sender<F: Flow + 'static, P: WritePoller + Send + 'static>(
    flows: Vec<Arc<F>>,
    mut poller: P,
    w: &Workload,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<SendStats> {
    let stop = stop.clone();
    let msg = w.msg;
    std::thread::spawn(move || {
        let c0 = thread_cpu_ns();
        let buf = vec![0x5au8; msg];
        let mut st = SendStats::default();
        let mut dead = vec![false; flows.len()];
        let fill = |i: usize, st: &mut SendStats, dead: &mut Vec<bool>| loop {
            match flows[i].send(&buf) {
                Ok(n) => {
                    st.bytes += n as u64;
                    st.send_calls += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    st.send_calls += 1;
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    dead[i] = true;
                    return;
                }
            }
        };
        for (i, f) in flows.iter().enumerate() {
            let _ = f.set_nonblocking(true);
            fill(i, &mut st, &mut dead);
        }
        let mut ready = Vec::new();
        while !stop.load(Ordering::Relaxed) && dead.iter().any(|d| !d) {
            ready.clear();
            if poller.wait(&mut ready, Duration::from_millis(20)).is_err() {
                break;
            }
            if !ready.is_empty() {
                st.wakeups += 1;
            }
            for &i in &ready {
                if i < flows.len() && !dead[i] {
                    fill(i, &mut st, &mut dead);
                }
            }
        }
        st.cpu_ns = thread_cpu_ns().saturating_sub(c0);
        for f in &flows {
            let _ = f.set_nonblocking(false);
            let _ = f.shutdown_write();
        }
        st
    })
}

/// The kernel receiver in the receiving namespace: accepts `n` connections on `port` and
/// reads each to EOF with 128 KB reads (netserver's default), counting bytes.
struct Receiver {
    bytes: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

impl Receiver {
    fn start(rx: &Netns, port: u16, n: usize) -> Result<Receiver, LabError> {
        let addr = SocketAddr::new(IpAddr::V4(RX_ADDR), port);
        let listener = rx
            .run(move || std::net::TcpListener::bind(addr))
            .map_err(os_err("enter receiver namespace"))?
            .map_err(io_err("bind the receiver"))?;
        let bytes = Arc::new(AtomicU64::new(0));
        let b = bytes.clone();
        let handle = std::thread::spawn(move || {
            let mut readers = Vec::new();
            for _ in 0..n {
                let Ok((mut s, _)) = listener.accept() else {
                    break;
                };
                let b = b.clone();
                readers.push(std::thread::spawn(move || {
                    let mut buf = vec![0u8; 131072];
                    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                    while let Ok(k) = s.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        b.fetch_add(k as u64, Ordering::Relaxed);
                    }
                }));
            }
            for r in readers {
                let _ = r.join();
            }
        });
        Ok(Receiver { bytes, handle })
    }
}

/// One sample of the sender's state.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    t: f64,
    /// Bytes in the tbf (the bottleneck queue).
    tbf_bytes: u64,
    /// Sum over the sending sockets of wmem_alloc (bytes below TCP).
    below_tcp: u64,
    /// Sum over the sending sockets of pages of wmem_queued + rmem_alloc.
    mem_pages: u64,
    /// Sum over the sending sockets of unsent bytes.
    notsent: u64,
}

/// Everything one arm measured.
#[derive(Clone, Debug, Default)]
struct ArmResult {
    duration_s: f64,
    received: u64,
    send: SendStats,
    samples: Vec<Sample>,
    counters: BTreeMap<String, u64>,
}

impl ArmResult {
    fn throughput_bps(&self) -> f64 {
        self.received as f64 * 8.0 / self.duration_s.max(1e-9)
    }
    fn series<F: Fn(&Sample) -> f64>(&self, f: F) -> Vec<f64> {
        self.samples.iter().map(f).collect()
    }
    fn counter(&self, k: &str) -> f64 {
        self.counters.get(k).copied().unwrap_or(0) as f64
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    s[i.min(s.len() - 1)]
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

const SAMPLE_EVERY: Duration = Duration::from_millis(50);

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
    let n = w.flows;
    let nodelay = w.nodelay;
    let socks: Vec<std::net::TcpStream> = world
        .tx
        .run(move || -> io::Result<Vec<std::net::TcpStream>> {
            (0..n)
                .map(|_| {
                    let s = std::net::TcpStream::connect(dst)?;
                    s.set_nodelay(nodelay)?;
                    // The engine's congestion control (it has cubic and reno; the VM's
                    // default may be bbr). Per socket: root may pick any built-in one.
                    rustix::net::sockopt::set_tcp_congestion(&s, "cubic")?;
                    Ok(s)
                })
                .collect()
        })
        .map_err(os_err("enter sender namespace"))?
        .map_err(io_err("connect"))?;
    let c0 = world.kernel_counters();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles = match w.writer {
        Writer::Blocking => blocking_senders(socks.into_iter().map(Arc::new).collect(), w, &stop),
        Writer::Epoll => {
            let ep = KernelEpoll::new(&socks).map_err(io_err("epoll"))?;
            vec![epoll_sender(
                socks.into_iter().map(Arc::new).collect(),
                ep,
                w,
                &stop,
            )]
        }
    };
    let mut samples = Vec::new();
    while t0.elapsed() < w.duration {
        std::thread::sleep(SAMPLE_EVERY);
        let t = t0.elapsed().as_secs_f64();
        let socks = world.kernel_sockets(port);
        samples.push(Sample {
            t,
            tbf_bytes: world.tbf_backlog().unwrap_or(0),
            below_tcp: socks.iter().map(|s| s.wmem_alloc).sum(),
            mem_pages: socks
                .iter()
                .map(|s| (s.wmem_queued + s.rmem_alloc).div_ceil(4096))
                .sum(),
            notsent: socks.iter().map(|s| s.notsent).sum(),
        });
        progress(label, (t / w.duration.as_secs_f64()).min(1.0));
    }
    let received = recv.bytes.load(Ordering::Relaxed);
    let duration_s = t0.elapsed().as_secs_f64();
    let c1 = world.kernel_counters();
    stop.store(true, Ordering::Relaxed);
    let mut send = SendStats::default();
    for h in handles {
        let s = h.join().unwrap_or_default();
        send.bytes += s.bytes;
        send.send_calls += s.send_calls;
        send.wakeups += s.wakeups;
        send.cpu_ns += s.cpu_ns;
    }
    let _ = recv.handle.join();
    let counters = c1
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*c0.get(k).unwrap_or(&0))))
        .collect();
    Ok(ArmResult {
        duration_s,
        received,
        send,
        samples,
        counters,
    })
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
    let sysctls: Vec<(String, String)> = sysctls
        .iter()
        .map(|(k, v)| (sysctl_name(k), v.to_string()))
        .collect();
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
    let counters_now = |h: &shallow_os::Host| -> BTreeMap<String, u64> {
        h.with_stack(|st, _| {
            st.counters()
                .iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect()
        })
    };
    let c0 = counters_now(&host);
    let io0 = threads_cpu_ns("shallow-io");
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let handles = match w.writer {
        Writer::Blocking => blocking_senders(socks.clone(), w, &stop),
        Writer::Epoll => {
            let p = ShallowPoller::new(&host, &socks).map_err(io_err("Poller"))?;
            vec![epoll_sender(socks.clone(), p, w, &stop)]
        }
    };
    let mut samples = Vec::new();
    while t0.elapsed() < w.duration {
        std::thread::sleep(SAMPLE_EVERY);
        let t = t0.elapsed().as_secs_f64();
        let mut smp = Sample {
            t,
            tbf_bytes: host.stats().qdisc_backlog.load(Ordering::Relaxed),
            ..Sample::default()
        };
        for s in &socks {
            if let Ok(m) = s.meminfo() {
                smp.below_tcp += u64::from(m.wmem_alloc);
                smp.mem_pages += u64::from(m.wmem_queued + m.rmem_alloc).div_ceil(4096);
            }
            if let Ok(i) = s.tcp_info() {
                smp.notsent += u64::from(i.notsent_bytes);
            }
        }
        samples.push(smp);
        progress(label, (t / w.duration.as_secs_f64()).min(1.0));
    }
    let received = recv.bytes.load(Ordering::Relaxed);
    let duration_s = t0.elapsed().as_secs_f64();
    let c1 = counters_now(&host);
    let io_cpu = threads_cpu_ns("shallow-io").saturating_sub(io0);
    stop.store(true, Ordering::Relaxed);
    let mut send = SendStats::default();
    for h in handles {
        let s = h.join().unwrap_or_default();
        send.bytes += s.bytes;
        send.send_calls += s.send_calls;
        send.wakeups += s.wakeups;
        send.cpu_ns += s.cpu_ns;
    }
    send.cpu_ns += io_cpu;
    let _ = recv.handle.join();
    drop(socks);
    host.shutdown();
    world.set_tbf(tbf)?;
    let counters = c1
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(*c0.get(k).unwrap_or(&0))))
        .collect();
    Ok(ArmResult {
        duration_s,
        received,
        send,
        samples,
        counters,
    })
}

// ---------------------------------------------------------------------------------------
// The experiments.

/// Both arms of both halves.
struct Arms {
    k_off: Option<ArmResult>,
    k_on: ArmResult,
    s_off: Option<ArmResult>,
    s_on: Option<ArmResult>,
}

impl Arms {
    fn row(&self, name: &str, unit: &str, claim: Claim, f: impl Fn(&ArmResult) -> f64) -> LinuxRow {
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

    fn chart(
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

/// Sysctls as (`ipv4/name` or `shallow/name`, value).
type Sysctls = Vec<(&'static str, &'static str)>;
/// Bottleneck, workload, kernel off (None: no switch) and on, engine off and on.
type Setup = (Tbf, Workload, Option<Sysctls>, Sysctls, Sysctls, Sysctls);

/// Runs `exp` on the Linux substrate. `progress(arm, fraction)` during each arm.
pub fn run_linux(
    exp: Experiment,
    opts: &LinuxOptions,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<LinuxReport, LabError> {
    let s = opts.scale;
    let secs = |full: u64, quick: u64, tiny_ms: u64| match s {
        Scale::Full => Duration::from_secs(full),
        Scale::Quick => Duration::from_secs(quick),
        Scale::Tiny => Duration::from_millis(tiny_ms),
    };
    let mut config = BTreeMap::new();
    let mut notes = Vec::new();
    let mut rows = Vec::new();
    let mut charts = Vec::new();
    // Per experiment: bottleneck, workload, kernel sysctls off/on, engine sysctls off/on.
    let (tbf, w, k_off, k_on, e_off, e_on): Setup = match exp {
        Experiment::Tsq => (
            Tbf {
                rate_bps: 200_000_000,
                burst: 32 * 1024,
                limit: 8 << 20,
            },
            Workload {
                flows: 1,
                msg: 65536,
                nodelay: false,
                writer: Writer::Blocking,
                duration: secs(10, 3, 600),
            },
            None,
            vec![],
            vec![("shallow/tcp_tsq", "0")],
            vec![],
        ),
        Experiment::NotsentLowat => (
            Tbf {
                rate_bps: 1_000_000_000,
                burst: 64 * 1024,
                limit: 8 << 20,
            },
            Workload {
                flows: match s {
                    Scale::Full => 50,
                    Scale::Quick => 20,
                    Scale::Tiny => 4,
                },
                msg: 16384,
                nodelay: false,
                writer: Writer::Epoll,
                duration: secs(10, 3, 600),
            },
            Some(vec![("ipv4/tcp_notsent_lowat", "4294967295")]),
            vec![("ipv4/tcp_notsent_lowat", "131072")],
            vec![("ipv4/tcp_notsent_lowat", "4294967295")],
            vec![("ipv4/tcp_notsent_lowat", "131072")],
        ),
        Experiment::Pollout => (
            Tbf {
                rate_bps: 1_000_000_000,
                burst: 64 * 1024,
                limit: 8 << 20,
            },
            Workload {
                flows: match s {
                    Scale::Full => 50,
                    Scale::Quick => 20,
                    Scale::Tiny => 4,
                },
                msg: 16384,
                nodelay: false,
                writer: Writer::Epoll,
                duration: secs(10, 3, 600),
            },
            Some(vec![
                ("ipv4/tcp_wmem", "4096 262144 64000000"),
                ("ipv4/tcp_notsent_lowat", "4294967295"),
            ]),
            vec![
                ("ipv4/tcp_wmem", "4096 262144 64000000"),
                ("ipv4/tcp_notsent_lowat", "2097152"),
            ],
            vec![
                ("ipv4/tcp_wmem", "4096 262144 64000000"),
                ("ipv4/tcp_notsent_lowat", "4294967295"),
            ],
            vec![
                ("ipv4/tcp_wmem", "4096 262144 64000000"),
                ("ipv4/tcp_notsent_lowat", "2097152"),
            ],
        ),
        Experiment::Autocork => (
            Tbf {
                rate_bps: 1_000_000_000,
                burst: 64 * 1024,
                limit: 8 << 20,
            },
            Workload {
                flows: 4,
                msg: 128,
                nodelay: false,
                writer: Writer::Blocking,
                duration: secs(10, 3, 600),
            },
            Some(vec![("ipv4/tcp_autocorking", "0")]),
            vec![("ipv4/tcp_autocorking", "1")],
            vec![("ipv4/tcp_autocorking", "0")],
            vec![("ipv4/tcp_autocorking", "1")],
        ),
        Experiment::AckDefer => {
            return Err(LabError::Unsupported(
                "ack-defer needs a NIC-speed flow with receive softirq and application on separate CPUs; on this 2-vCPU VM over veth the backlog is almost never used (spec §12 E5 local check: inconclusive)".into(),
            ))
        }
    };
    let mut world = World::new(tbf)?;
    config.insert("bottleneck".into(), tbf.describe());
    config.insert(
        "world".into(),
        "sender namespace -> veth (tbf) -> receiver namespace (kernel TCP, 128 KB reads); Shallow on a TUN in the sender namespace with the same tbf as its own egress qdisc (the veth then gets pfifo_fast), forwarded through the same veth".into(),
    );
    config.insert(
        "workload".into(),
        format!(
            "{} flow(s), {}-byte writes, {}{}",
            w.flows,
            w.msg,
            match w.writer {
                Writer::Blocking => "blocking write() per flow thread",
                Writer::Epoll =>
                    "non-blocking writes until EAGAIN on each edge-triggered EPOLLOUT, one thread",
            },
            if w.nodelay {
                ", TCP_NODELAY"
            } else {
                ", Nagle on"
            }
        ),
    );
    config.insert(
        "duration".into(),
        format!("{} s per arm", w.duration.as_secs_f64()),
    );
    config.insert("congestion control".into(), "cubic on both".into());
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
    config.insert(
        "Linux off".into(),
        k_off
            .as_deref()
            .map_or("n/a: Linux has no switch for it".into(), fmt_sys),
    );
    config.insert("Linux on".into(), fmt_sys(&k_on));
    config.insert("Shallow off".into(), fmt_sys(&e_off));
    config.insert("Shallow on".into(), fmt_sys(&e_on));

    let name = exp.name();
    let k_off_r = match &k_off {
        Some(v) => Some(kernel_arm(
            &mut world,
            &w,
            v,
            &format!("{name} linux off"),
            progress,
        )?),
        None => None,
    };
    let k_on_r = kernel_arm(&mut world, &w, &k_on, &format!("{name} linux on"), progress)?;
    let (s_off_r, s_on_r) = if opts.kernel_only {
        notes.push("kernel half only (--kernel-only)".into());
        (None, None)
    } else {
        let off = shallow_arm(
            &mut world,
            tbf,
            &w,
            &e_off,
            opts.seed,
            &format!("{name} shallow off"),
            progress,
        )?;
        let on = shallow_arm(
            &mut world,
            tbf,
            &w,
            &e_on,
            opts.seed,
            &format!("{name} shallow on"),
            progress,
        )?;
        (Some(off), Some(on))
    };
    let arms = Arms {
        k_off: k_off_r,
        k_on: k_on_r,
        s_off: s_off_r,
        s_on: s_on_r,
    };
    let rate = tbf.rate_bps as f64;
    let qdelay_ms = |a: &ArmResult| a.series(|s| s.tbf_bytes as f64 * 8.0 / rate * 1e3);
    let cpu_per_gb = |a: &ArmResult| {
        let gb = a.received as f64 / 1e9;
        if gb > 0.0 {
            a.send.cpu_ns as f64 / 1e9 / gb
        } else {
            f64::NAN
        }
    };
    match exp {
        Experiment::Tsq => {
            let dc = Claim::Figures {
                off: 132.0,
                on: 8.0,
            };
            rows.push(arms.row("bottleneck_queue_delay_p50", "ms", dc, |a| {
                quantile(&qdelay_ms(a), 0.5)
            }));
            rows.push(arms.row("bottleneck_queue_delay_p99", "ms", dc, |a| {
                quantile(&qdelay_ms(a), 0.99)
            }));
            rows.push(arms.row("tbf_backlog_max", "KB", Claim::None, |a| {
                max(&a.series(|s| s.tbf_bytes as f64)) / 1024.0
            }));
            rows.push(arms.row("bytes_below_tcp_mean", "KB", Claim::None, |a| {
                mean(&a.series(|s| s.below_tcp as f64)) / 1024.0
            }));
            rows.push(arms.row("throughput", "Mbit/s", Claim::Unchanged, |a| {
                a.throughput_bps() / 1e6
            }));
            notes.push("seed delay figures are the commit's 100 Mbit/s pair (132 ms -> < 8 ms); the bottleneck here is a 200 Mbit/s tbf (spec §12 E1's local setup)".into());
            notes.push(
                "queue delay = tbf backlog (tc -s qdisc, sampled every 50 ms) / tbf rate".into(),
            );
            notes.push("Linux cannot switch TSQ off; Shallow's off arm uses its extension sysctl shallow.tcp_tsq = 0".into());
            notes.push("queue delay for Shallow = backlog of its own egress tbf (same rate, burst and limit as the kernel's) / rate".into());
            charts.push(arms.chart(
                "tbf-backlog",
                "bottleneck (tbf) backlog over time",
                "tbf backlog (KB)",
                "TSQ off",
                "TSQ on",
                |s| s.tbf_bytes as f64 / 1024.0,
            ));
        }
        Experiment::NotsentLowat | Experiment::Pollout => {
            let flows = w.flows as f64;
            if exp == Experiment::NotsentLowat {
                let k = 200.0 / flows;
                rows.push(arms.row(
                    "tcp_mem_pages_mean",
                    "pages",
                    Claim::Figures {
                        off: 45458.0 / k,
                        on: 20567.0 / k,
                    },
                    |a| mean(&a.series(|s| s.mem_pages as f64)),
                ));
                notes.push(format!(
                    "{} flows instead of the commit's 200: seed pages scaled by {}/200",
                    w.flows, w.flows
                ));
            } else {
                rows.push(arms.row(
                    "tcp_mem_per_flow_mean",
                    "MB",
                    Claim::Figures { off: 54.0, on: 3.5 },
                    |a| mean(&a.series(|s| s.mem_pages as f64)) * 4096.0 / flows / 1e6,
                ));
                notes.push("the commit's 2 MB lowat matters with its 100 ms RTT (BDP of MBs per flow); this machine has no netem, the veth RTT is well under 1 ms".into());
                notes.push("Linux 6.x cannot switch the X/2 wake rule off; both halves wake at notsent < X/2".into());
            }
            rows.push(arms.row("tcp_mem_pages_peak", "pages", Claim::None, |a| {
                max(&a.series(|s| s.mem_pages as f64))
            }));
            rows.push(arms.row("notsent_mean", "KB", Claim::None, |a| {
                mean(&a.series(|s| s.notsent as f64)) / 1024.0
            }));
            rows.push(arms.row("epoll_wakeups", "1/s", Claim::None, |a| {
                a.send.wakeups as f64 / a.duration_s
            }));
            rows.push(arms.row("send_calls_per_mb", "1/MB", Claim::None, |a| {
                a.send.send_calls as f64 / (a.send.bytes as f64 / 1e6).max(1e-9)
            }));
            rows.push(arms.row("throughput", "Mbit/s", Claim::Unchanged, |a| {
                a.throughput_bps() / 1e6
            }));
            notes.push("TCP memory = sum over the sending sockets of wmem_queued + rmem_alloc in pages (ss -tm skmem w + r; Shallow: SO_MEMINFO), sampled every 50 ms".into());
            notes.push("epoll wake-ups = epoll_wait calls of the sender thread that returned an event (Shallow: its Poller)".into());
            charts.push(arms.chart(
                "tcp-memory",
                "TCP memory of the sending sockets over time",
                "TCP memory (pages of 4 KB)",
                "lowat unset",
                "lowat set",
                |s| s.mem_pages as f64,
            ));
        }
        Experiment::Autocork => {
            rows.push(arms.row(
                "throughput",
                "Mbit/s",
                Claim::Figures {
                    off: 6624.89,
                    on: 9410.39,
                },
                |a| a.throughput_bps() / 1e6,
            ));
            rows.push(arms.row(
                "sender_cpu_time",
                "CPU-s",
                Claim::Figures {
                    off: 40.046,
                    on: 35.209,
                },
                |a| a.send.cpu_ns as f64 / 1e9,
            ));
            let gb = |mbps: f64| mbps * 1e6 * 10.0 / 8.0 / 1e9;
            rows.push(arms.row(
                "sender_cpu_per_gb",
                "CPU-s/GB",
                Claim::Figures {
                    off: 40.046 / gb(6624.89),
                    on: 35.209 / gb(9410.39),
                },
                cpu_per_gb,
            ));
            rows.push(arms.row("segments_per_write", "segs", Claim::None, |a| {
                a.counter("TcpOutSegs") / (a.send.send_calls as f64).max(1.0)
            }));
            rows.push(arms.row("autocorking_events", "count", Claim::None, |a| {
                a.counter("TcpExtTCPAutoCorking")
            }));
            notes.push("the commit's command (super_netperf 4 -t TCP_STREAM -- -m 128: Nagle on); its 'on' arm reached its 10 Gbit/s line rate; here the line is a 1 Gbit/s tbf".into());
            notes.push("sender CPU = CPU time of the 4 writer threads (/proc/thread-self/schedstat: process context, including the kernel's send path; softirq on other CPUs is not in it); Shallow adds its I/O thread".into());
            notes.push(
                "segments per write = TcpOutSegs delta (all segments, ACKs included) / write calls"
                    .into(),
            );
        }
        Experiment::AckDefer => {}
    }
    Ok(LinuxReport {
        experiment: name.into(),
        scale: s,
        rows,
        config,
        notes,
        charts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tc_backlog() {
        let s = "qdisc tbf 8036: root refcnt 3 rate 200Mbit burst 32750b lat 334ms \n Sent 37550262 bytes 24811 pkt (dropped 0, overlimits 46923 requeues 0) \n backlog 78728b 52p requeues 0\n";
        assert_eq!(parse_tc_backlog(s), Some(78728));
        assert_eq!(
            parse_tc_backlog(" backlog 77Kb 52p requeues 0"),
            Some(77 * 1024)
        );
        assert_eq!(parse_tc_backlog("nothing"), None);
    }

    #[test]
    fn parses_ss_skmem_and_notsent() {
        let s = "0      930376 10.77.0.1:57802 10.77.0.2:5555\n\t skmem:(r0,rb131072,t109440,tb1410048,f1656,w944520,o0,bl0,d0) cubic wscale:10,10 notsent:814536 minrtt:0.007\n";
        let v = parse_ss(s);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0],
            SsSock {
                rmem_alloc: 0,
                wmem_alloc: 109440,
                wmem_queued: 944520,
                notsent: 814536
            }
        );
    }

    #[test]
    fn parses_proc_net_pairs() {
        let s = "TcpExt: A B\nTcpExt: 1 2\nIpExt: C\nIpExt: 3\n";
        let mut m = BTreeMap::new();
        parse_proc_net(s, &mut m);
        assert_eq!(m.get("TcpExtA"), Some(&1));
        assert_eq!(m.get("TcpExtB"), Some(&2));
        assert_eq!(m.get("IpExtC"), Some(&3));
    }

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
