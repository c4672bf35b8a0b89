//! A Shallow host on Linux: `shallow_tcp::Stack` engines driven by I/O threads over a
//! device (a TUN queue, or one end of an in-memory [`link`](crate::link)) — one engine and one
//! thread per device queue —, with application threads calling socket operations through
//! [`TcpStream`](crate::TcpStream), [`TcpListener`](crate::TcpListener), the
//! [`Poller`](crate::Poller) readiness API and (feature `tokio`) async wrappers.
//!
//! # Threads like the kernel's
//!
//! The **I/O thread** plays softirq. It is the substrate loop of ARCHITECTURE.md with a real
//! clock: wait (`poll` on the device and a [`Waker`], until the engine's next timer or the
//! egress qdisc's next departure) → read a batch and feed `Stack::input` (GRO aggregates with
//! their `gso_size`) → `handle_timeout` when the deadline passed → drain `poll_transmit` into
//! the egress qdisc ([`Egress`]: fq with earliest-departure-time pacing by default, or none) →
//! write the packets whose time has come to the device and call `tx_complete` when the write
//! returns (the kernel has the packet: it has left this host) → drain `poll_wakeup` and wake
//! exactly the waiters of the sockets named.
//!
//! **Application threads** own a socket for the length of a call, as Linux's `lock_sock`:
//! the call takes the mutex of the engine that has the socket, marks the socket owned
//! (`Stack::lock_sock`), and does its work. A long call (a big `send` copying into the write
//! queue, a big `recv`) works in chunks of [`CHUNK`] bytes and drops the mutex between chunks
//! *while still owning the socket*, so the I/O thread keeps taking input: packets for the
//! owned socket go to its backlog, timers and TX completions set deferred flags. At its end
//! the call runs `Stack::release_sock` on the application thread, which processes the backlog
//! there (Linux `__release_sock`; that is what makes backlog ACK deferral real). A call that
//! must wait releases ownership while it sleeps and retakes it after (Linux `sk_wait_event`).
//!
//! # No lost wake-ups
//!
//! Every socket known to the application has a slot with a generation counter and a condition
//! variable used with its engine's mutex. Whoever drains `Stack::poll_wakeup` (the I/O thread
//! after each round, an application thread after each call) bumps the generation of each
//! socket named and signals only that socket's waiters, its pollers and its async tasks. A
//! waiter reads the generation under the mutex *before* it releases the socket (whose backlog
//! may itself produce a wake-up) and sleeps only while the generation is unchanged, so a
//! wake-up between its check and its sleep is never lost. A listener has a socket on every
//! engine and one host-level generation and condition variable (with a mutex of their own,
//! never an engine's): every engine's wake-up of any of its sockets bumps it, and a blocking
//! `accept` reads it before it tries the engines, so a connection that arrives on an engine
//! already tried ends the sleep. A [`Poller`](crate::Poller) sleeps under the host's pollers
//! mutex only while its ready list is empty, and a wake-up puts its socket on that list under
//! the same mutex.
//!
//! # Egress
//!
//! Between `poll_transmit` and the device sits a qdisc from `shallow-qdisc` ([`Egress`]):
//! `fq` by default (per-flow queues, packets held until their earliest departure time, the
//! engine stamping departures as Linux does under `SK_PACING_FQ`), or `tbf`, `pfifo_fast`, or
//! none. The I/O thread writes what the qdisc releases with the engine mutex dropped, then
//! calls `tx_complete` for each data packet: a packet counts against TSQ, and against
//! autocorking's "data still in the host" test, for exactly as long as it is in the qdisc
//! or being written. [`HostStats`] shows the qdisc's backlog.
//!
//! # Several queues: one engine per queue
//!
//! A host may run over the queues of one `IFF_MULTI_QUEUE` TUN ([`Host::start_queues`],
//! [`HostConfig::queues`]) or over several in-memory links. It is then Q **shards**: shard
//! `k` is its own engine (the given `Stack` for shard 0, `Stack::fork(k)` for the others: the
//! same configuration, its own keys), with its own egress qdisc on queue `k` (Linux's `mq`
//! root, one child per TX queue), its own socket slots and its own mutex, served by queue
//! `k`'s I/O thread; no thread ever holds two shards' mutexes. The engine cannot be split
//! finer: its connections share one environment (timers, output queue, memory accounting,
//! MIB, random stream), so a shard is the unit of locking.
//!
//! A TCP 4-tuple belongs to exactly one shard, [`Host::shard_of`] (a keyed flow hash scaled
//! to Q, the one rule of ownership). Inbound, queue `k`'s thread parses each packet's tuple
//! (IPv4/IPv6 + TCP; an ICMP error by the TCP header it quotes; anything else, IP fragments
//! included, goes to shard 0) and gives a packet of another shard's flow to that shard's
//! inbox (bounded: a full inbox drops the packet, counted in
//! [`QueueStats::rx_forward_drops`]; forwarded packets in [`QueueStats::rx_forwarded`]), as
//! Linux's RPS hands a packet to another CPU's backlog. Since shard `k` writes only on queue
//! `k`, the kernel's tun flow table (automq) sends a flow's packets back to its owner's queue
//! once the owner has written on it, so forwarding is mostly the first packets of a flow
//! (a passive open's SYN and the ACK that completes it). A listener listens on every shard
//! (same address and port; `accept` takes from any); `connect` takes the shards in turn and,
//! on its shard, an ephemeral port whose tuple that shard owns
//! (`Stack::set_connect_port_filter`), so two shards never pick one connected tuple.
//! Pollers are host-wide. Host-wide views: [`Host::counters`] (summed), [`Host::with_stacks`]
//! (every engine, e.g. for `ss`), [`Host::sysctl_set`] (every engine);
//! [`TcpStream::with_stack`](crate::TcpStream::with_stack) reaches one connection's engine.
//! `net.ipv4.tcp_mem`, host-wide in Linux, is divided evenly between the shards (a
//! deviation: one shard can reach its part while the host as a whole has room).
//! [`HostStats::queues`] counts packets per queue. With one queue everything is one shard
//! and no packet is parsed for steering.
//!
//! For tests, [`Host::set_packet_hook`] puts a loss/reordering hook on the I/O threads
//! between the device and the engine, in both directions.
//!
//! Time is `std::time::Instant` since the host started, in nanoseconds; the I/O thread waits
//! with `ppoll`'s nanosecond timeouts.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use shallow_qdisc::{FqConfig, Rate};
use shallow_tcp::{DeviceCaps, Instant, Stack};

pub use crate::device::Device;
pub use crate::egress::Egress;
use crate::egress::{qdisc_for, OsDriver};
use crate::error::OsError;
pub use crate::hook::{Dir, PacketHook, Verdict, HOLD};
use crate::iothread;
use crate::netns::Peer;
use crate::raw::{RawHandler, RawSender};
use crate::shared::{errno, wake_all, Shard, Shared, Steer};
pub use crate::shared::{HostStats, QueueStats, CHUNK};
use crate::tun::{Offload, TunConfig};
use crate::wake::Waker;
use shallow_tcp::driver::EgressHandle;
use shallow_tcp::ForwardFilter;

/// How a host is set up by [`Host::attach`].
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// TUN device to attach to (default `shallow0`, made by `shallow netns up`).
    pub tun: String,
    /// Namespace that holds the TUN (default `Some("shallow-peer")`); `None`: the caller's.
    pub netns: Option<String>,
    /// Addresses of the Shallow host (default 10.213.0.2 and fd00:213::2).
    pub addrs: Vec<IpAddr>,
    /// Offloads to ask the TUN for.
    pub offload: Offload,
    /// Engine seed (ISNs, ephemeral ports); default: random per host.
    pub seed: u64,
    /// Sysctls to set (`net.ipv4.tcp_*` names as `Stack::sysctl_set` takes them).
    pub sysctls: Vec<(String, String)>,
    /// Egress qdisc (one per queue, as Linux's `mq` root has one child per TX queue).
    pub egress: Egress,
    /// Device queues, each with its own engine (shard) and I/O thread (default 1). Above 1
    /// the TUN is opened with `IFF_MULTI_QUEUE`, which must match how the existing device was
    /// made (`shallow netns up` makes a single-queue one; `ip tuntap add mode tun multi_queue
    /// vnet_hdr` makes a multi-queue one).
    pub queues: usize,
}

impl Default for HostConfig {
    fn default() -> Self {
        use std::hash::{BuildHasher, Hasher};
        let seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        HostConfig {
            tun: "shallow0".into(),
            netns: Some("shallow-peer".into()),
            addrs: vec![
                IpAddr::V4(Ipv4Addr::new(10, 213, 0, 2)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2)),
            ],
            offload: Offload::DEFAULT,
            seed,
            sysctls: Vec::new(),
            egress: Egress::default(),
            queues: 1,
        }
    }
}

/// A Shallow host: the engine plus its I/O thread over a device (one engine and thread per
/// queue with [`Host::start_queues`]). Dropping it stops the threads.
/// Cheap to clone (a handle on the same host); the thread stops when the last handle and every
/// socket of the host are gone, or on [`Host::shutdown`].
#[derive(Clone)]
pub struct Host {
    pub(crate) shared: Arc<Shared>,
    thread: Arc<ThreadGuard>,
}

struct ThreadGuard {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl ThreadGuard {
    /// Stops and joins every I/O thread (each is woken through its own eventfd, which keeps
    /// the wake-up if the thread is not yet waiting).
    fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.kick_all();
        let ts = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|p| p.into_inner()));
        for t in ts {
            let _ = t.join();
        }
        wake_all(&self.shared);
    }
}

impl Drop for ThreadGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// Starts the I/O thread for `stack` (addresses and sysctls already set) over `device` (a
    /// [`Tun`](crate::Tun) or a [`MemLink`](crate::MemLink)), with the default egress qdisc (fq).
    pub fn start(stack: Stack, device: impl Into<Device>) -> io::Result<Host> {
        Self::start_with(stack, device, Egress::default())
    }

    /// [`Host::start`] with an explicit egress qdisc.
    pub fn start_with(stack: Stack, device: impl Into<Device>, egress: Egress) -> io::Result<Host> {
        Self::start_queues(stack, vec![device.into()], egress)
    }

    /// Starts one shard and I/O thread per device queue (the queues of one
    /// `IFF_MULTI_QUEUE` TUN, as [`TunConfig::open`] returns them, or several in-memory
    /// links). Shard 0's engine is `stack`; shard `k > 0`'s is `stack.fork(k)` (the same
    /// configuration, its own keys). Each shard has its own `egress` qdisc on its queue
    /// (Linux's `mq` root with one child per TX queue) and owns the flows [`Host::shard_of`]
    /// gives it. Above one queue, `net.ipv4.tcp_mem` (host-wide in Linux) is divided evenly
    /// between the shards, each shard's engine accounting its own sockets against its part.
    /// `InvalidInput` when `devices` is empty.
    pub fn start_queues(stack: Stack, devices: Vec<Device>, egress: Egress) -> io::Result<Host> {
        if devices.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a host needs at least one device queue",
            ));
        }
        let n = devices.len();
        let mtu = match &devices[0] {
            Device::Tun(_) => 1500,
            Device::Mem(l) => l.mtu(),
        };
        let fq = matches!(egress, Egress::Fq | Egress::FqWith(_));
        let steer = Steer::new(host_key(), n);
        let mut stacks: Vec<Stack> = (1..n).map(|k| stack.fork(k as u64)).collect();
        stacks.insert(0, stack);
        if n > 1 {
            share_fastopen_key(&mut stacks)?;
            let mem = stacks[0]
                .sysctl_get("net.ipv4.tcp_mem")
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let part = split_tcp_mem(&mem, n);
            for (k, st) in stacks.iter_mut().enumerate() {
                st.sysctl_set("net.ipv4.tcp_mem", &part)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
                // A connect on shard k takes only ports whose tuple shard k owns.
                st.set_connect_port_filter(Some(Arc::new(move |l: SocketAddr, r: SocketAddr| {
                    steer.owner((l.ip(), l.port(), r.ip(), r.port())) == k
                })));
            }
        }
        let devices: Vec<Arc<Device>> = devices.into_iter().map(Arc::new).collect();
        let mut shards = Vec::with_capacity(n);
        for ((k, stack), dev) in stacks.into_iter().enumerate().zip(&devices) {
            // The engine learns its qdisc's verdict at the transmit (NET_XMIT_DROP), as
            // Linux's TCP does from dev_queue_xmit: the driver installs the gate.
            let txq = shallow_tcp::driver::Egress::new(vec![qdisc_for(egress.clone(), mtu)]);
            let mut driver = OsDriver::with_egress(stack, EgressHandle::new(txq));
            // The engine marks its packets with departure times only when fq is there to
            // honour them (Linux: `sk_pacing_status == SK_PACING_FQ`).
            let caps = driver.device();
            // The engine's packets share the socket's bytes (scatter-gather, so a zero-copy
            // send is not copied into the send buffer); the device write copies each packet
            // out (a zero-copy completion says so, as Linux's tun makes it say).
            driver.set_device(DeviceCaps {
                edt_pacing: fq,
                sg: true,
                tx_copies: true,
                ..caps
            });
            shards.push(Shard::new(k, driver, Waker::new()?, Arc::clone(dev)));
        }
        let shared = Arc::new(Shared::new(shards, steer));
        let guard = ThreadGuard {
            shared: Arc::clone(&shared),
            threads: Mutex::new(Vec::with_capacity(n)),
        };
        for (q, device) in devices.into_iter().enumerate() {
            let s = Arc::clone(&shared);
            let name = if n == 1 {
                format!("shallow-io-{}", device.name())
            } else {
                format!("shallow-io-{}/{q}", device.name())
            };
            // On a spawn failure the guard stops and joins the threads already started.
            let t = std::thread::Builder::new()
                .name(name)
                .spawn(move || iothread::io_loop(&s, q))?;
            guard
                .threads
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(t);
        }
        Ok(Host {
            thread: Arc::new(guard),
            shared,
        })
    }

    /// Attaches to an existing TUN as `cfg` says (by default the one `shallow netns up` made:
    /// `shallow0` in namespace `shallow-peer`, this host at 10.213.0.2 and fd00:213::2).
    ///
    /// Errors: [`OsError::NotPermitted`] when not root, [`OsError::TunMissing`] without
    /// `/dev/net/tun`, [`OsError::NoSuchNetns`] / [`OsError::NoSuchTun`] when the namespace or
    /// the device is absent (run `shallow netns up`), [`OsError::Io`] for a bad sysctl.
    pub fn attach(cfg: &HostConfig) -> Result<Host, OsError> {
        let mut tcfg = TunConfig::new(&cfg.tun);
        tcfg.offload = cfg.offload;
        tcfg.mode = crate::tun::TunMode::Attach;
        tcfg.queues = cfg.queues;
        tcfg.multi_queue = cfg.queues > 1;
        let tuns = match &cfg.netns {
            Some(ns) => Peer {
                netns: ns.clone(),
                tun: cfg.tun.clone(),
                ..Peer::default()
            }
            .attach(&tcfg)?,
            None => tcfg.open()?,
        };
        if tuns.is_empty() {
            return Err(OsError::NoSuchTun {
                name: cfg.tun.clone(),
                netns: cfg.netns.clone(),
            });
        }
        let mut stack = Stack::new(cfg.seed);
        for a in &cfg.addrs {
            stack.add_address(*a);
        }
        for (k, v) in &cfg.sysctls {
            stack.sysctl_set(k, v).map_err(|e| OsError::Io {
                what: format!("sysctl {k}={v}"),
                source: io::Error::new(io::ErrorKind::InvalidInput, e.to_string()),
            })?;
        }
        let devices = tuns.into_iter().map(Device::Tun).collect();
        Host::start_queues(stack, devices, cfg.egress.clone())
            .map_err(|e| OsError::io("start the I/O threads", e))
    }

    /// [`Host::attach`] with the defaults: the TUN of `shallow netns up`.
    pub fn attach_default() -> Result<Host, OsError> {
        Host::attach(&HostConfig::default())
    }

    /// The host's clock: the engine's [`Instant`] now (nanoseconds since the host started,
    /// the clock every engine call and every [`TxTimestamp`](shallow_tcp::TxTimestamp) of
    /// this host's sockets uses). `t.time - before` (or `t.time.duration_since(before)`)
    /// with `before = host.now()` taken just before a write is the time from the write to
    /// the event; it is monotonic and shared by all shards.
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// Runs `f` on shard 0's engine (under its lock) at the current time, then dispatches the
    /// wake-ups it produced and lets its I/O thread transmit what it queued. With one device
    /// queue that is the host's only engine; with several, use [`Host::with_stacks`] for
    /// host-wide views (counters, sockstat, `ss`), [`Host::sysctl_set`] for sysctls and
    /// [`TcpStream::with_stack`](crate::TcpStream::with_stack) for one connection's engine.
    /// For engine calls this crate has no wrapper for; socket calls on sockets of a
    /// [`TcpStream`](crate::TcpStream) should go through it, which owns the socket.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack, Instant) -> R) -> R {
        self.with_shard(0, f)
    }

    /// Runs `f` on shard `k`'s engine, as [`Host::with_stack`] does on shard 0's. Panics when
    /// `k >= self.shards()`.
    pub fn with_shard<R>(&self, k: usize, f: impl FnOnce(&mut Stack, Instant) -> R) -> R {
        let mut g = self.shared.lock(k);
        let now = self.shared.now();
        let r = f(g.driver.stack_mut(), now);
        self.shared.finish(g);
        r
    }

    /// Runs `f(shard, engine, now)` on every shard's engine in turn (one lock at a time), and
    /// returns what each call returned, in shard order.
    pub fn with_stacks<R>(&self, mut f: impl FnMut(usize, &mut Stack, Instant) -> R) -> Vec<R> {
        (0..self.shards())
            .map(|k| self.with_shard(k, |st, now| f(k, st, now)))
            .collect()
    }

    /// The engines' SNMP counters summed over the shards (the names in shard 0's order).
    pub fn counters(&self) -> Vec<(String, u64)> {
        let mut sum: Vec<(String, u64)> = Vec::new();
        for part in self.with_stacks(|_, st, _| {
            st.counters()
                .iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect::<Vec<_>>()
        }) {
            if sum.is_empty() {
                sum = part;
                continue;
            }
            for (k, v) in part {
                match sum.iter_mut().find(|(n, _)| *n == k) {
                    Some(e) => e.1 += v,
                    None => sum.push((k, v)),
                }
            }
        }
        sum
    }

    /// Sets a sysctl (`Stack::sysctl_set`'s names) on every shard's engine. `net.ipv4.tcp_mem`
    /// is divided evenly between the shards (see [`Host::start_queues`]).
    pub fn sysctl_set(&self, name: &str, value: &str) -> Result<(), shallow_tcp::SysctlError> {
        let n = self.shards();
        let value = if name == "net.ipv4.tcp_mem" && n > 1 {
            split_tcp_mem(value, n)
        } else {
            value.to_string()
        };
        for r in self.with_stacks(|_, st, _| st.sysctl_set(name, &value)) {
            r?;
        }
        Ok(())
    }

    /// Number of shards (engines; one per device queue).
    pub fn shards(&self) -> usize {
        self.shared.shards.len()
    }

    /// The shard that owns the TCP flow between `local` (an address of this host) and
    /// `remote`: the one rule by which inbound packets are steered to an engine and `connect`
    /// picks its ephemeral port (keyed by a random key of this host; always 0 with one queue).
    pub fn shard_of(&self, local: SocketAddr, remote: SocketAddr) -> usize {
        self.shared
            .steer
            .owner((local.ip(), local.port(), remote.ip(), remote.port()))
    }

    /// False once the I/O thread has stopped (shut down, or the device went away).
    pub fn is_running(&self) -> bool {
        !self.shared.stopped()
    }

    /// Stops the I/O threads now (all of them joined before this returns); calls blocked on
    /// the host's sockets return `ENETDOWN`.
    pub fn shutdown(&self) {
        self.thread.stop();
    }

    /// The host's counters.
    pub fn stats(&self) -> &HostStats {
        &self.shared.stats
    }

    /// Whether application calls transmit on their own thread (the default, as a Linux
    /// process's `sendmsg` runs the qdisc and the driver in its own context: a send needs no
    /// wake-up of the I/O thread), or hand everything to the I/O threads (`false`: every call
    /// that may have queued output kicks its shard's I/O thread, which sends it). Either way
    /// one thread at a time moves a queue's packets, so a flow's packets stay in order. Once
    /// a packet hook has been installed the I/O threads transmit (the hook runs on them).
    pub fn set_direct_transmit(&self, on: bool) {
        self.shared.direct_tx.store(on, Ordering::Relaxed);
    }
}

/// A random key for the host's flow-ownership hash.
/// Gives every shard shard 0's TCP Fast Open server key (`net.ipv4.tcp_fastopen_key`, made
/// now if it was never set: a fork has a key of its own otherwise), so that a cookie one
/// shard's listener gave opens a connection that lands on another, as on Linux, whose key is
/// the host's (per network namespace).
fn share_fastopen_key(stacks: &mut [Stack]) -> io::Result<()> {
    const KEY: &str = "net.ipv4.tcp_fastopen_key";
    let inval = |e: String| io::Error::new(io::ErrorKind::InvalidInput, e);
    let st = &mut stacks[0];
    // getsockopt(TCP_FASTOPEN_KEY) of a socket without its own key makes the stack's key
    // if there is none yet (`tcp_fastopen_init_key_once`) and writes it to the sysctl.
    let s = st.socket(shallow_tcp::Family::V4).map_err(errno)?;
    let got = st.getsockopt(s, shallow_tcp::SockOpt::TcpFastopenKey);
    st.close(Instant::ZERO, s).map_err(errno)?;
    got.map_err(errno)?;
    let key = st.sysctl_get(KEY).map_err(|e| inval(e.to_string()))?;
    for st in &mut stacks[1..] {
        st.sysctl_set(KEY, &key).map_err(|e| inval(e.to_string()))?;
    }
    Ok(())
}

fn host_key() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// `tcp_mem` ("min pressure max" in pages) divided by `n` (each at least 1); the value as
/// given when it does not parse (the engine then refuses it).
fn split_tcp_mem(v: &str, n: usize) -> String {
    let parts: Vec<Option<i64>> = v.split_whitespace().map(|x| x.parse().ok()).collect();
    if parts.len() != 3 || parts.iter().any(Option::is_none) {
        return v.to_string();
    }
    parts
        .iter()
        .map(|x| (x.unwrap_or(0) / n as i64).max(1).to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

impl Host {
    /// Installs (or with `None` removes) the packet hook of the I/O threads: every packet read
    /// from the device and every packet written to it is first shown to the hook, which may
    /// pass, drop or hold it ([`Verdict`]). Drops are counted in `HostStats::hook_drops`.
    /// With several queues the one hook is shared: it runs on the thread of the queue that
    /// read or writes the packet, and each queue holds back at most one packet per direction,
    /// released by that queue's thread (a held received packet then goes to the shard that
    /// owns it, a held transmitted one leaves on its own queue). Once a hook has been
    /// installed, application calls leave transmitting to the I/O threads ([`Host::set_direct_transmit`]).
    pub fn set_packet_hook(&self, hook: Option<PacketHook>) {
        let mut h = self.shared.hook.lock().unwrap_or_else(|p| p.into_inner());
        h.set(hook);
        self.shared.hooked.store(true, Ordering::SeqCst);
        drop(h);
        self.shared.kick_all();
    }
}

/// **Transparent termination and non-TCP packets**: what a TUN-based proxy or VPN needs
/// (see [`TcpListener::bind_any`](crate::TcpListener::bind_any)).
impl Host {
    /// Sets (or with `None` removes) the rule that accepts, resets or drops each new
    /// connection to a forwarded destination by (source, original destination), on every
    /// shard (`shallow_tcp::Stack::set_forward_filter`). It runs on the engine's input path:
    /// it must be quick and must not call the host.
    pub fn set_forward_filter(&self, filter: Option<ForwardFilter>) {
        self.with_stacks(|_, st, _| st.set_forward_filter(filter.clone()));
    }

    /// Installs (or with `None` removes) the handler of received packets that are not TCP
    /// (UDP, ICMP, …; see [`crate::raw`]); it is shown each such packet before the engine,
    /// which still handles the ICMP errors of its own connections. Counted in
    /// `HostStats::rx_raw`.
    pub fn set_raw_handler(&self, handler: Option<RawHandler>) {
        self.shared.raw.set(handler);
    }

    /// A handle that writes whole IP packets to the device, for a raw handler's answers.
    pub fn raw_sender(&self) -> RawSender {
        RawSender::new(&self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link;
    use crate::net::{TcpListener, TcpStream};
    use std::io::{Read, Write};
    use std::net::SocketAddr;
    use std::time::Duration;

    fn pair() -> (Host, Host) {
        let (la, lb) = link::pair().unwrap();
        let mut a = Stack::new(1);
        a.add_address(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1)));
        let mut b = Stack::new(2);
        b.add_address(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)));
        (Host::start(a, la).unwrap(), Host::start(b, lb).unwrap())
    }

    /// Linux `tcp_v4_rcv`: a segment for a socket owned by the user goes to its backlog
    /// (`tcp_add_backlog`), and `release_sock` (`__release_sock`) processes it on the
    /// application thread. Here the application owns the socket with the engine mutex
    /// dropped (as between the chunks of a long call); the I/O thread takes the peer's data
    /// packet, which must not reach the receive queue until the owner releases.
    #[test]
    fn owned_socket_gets_input_through_backlog_at_release() {
        let (ha, hb) = pair();
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)), 7);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let c = TcpStream::connect(&ha, addr).unwrap();
        let (s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let sh = &ha.shared;
        let id = c.socket();
        let mut o = sh.own(c.shard(), id).unwrap();
        let rx0 = sh.stats.rx_packets.load(Ordering::SeqCst);
        o.unlock();
        (&s).write_all(b"hello").unwrap();
        let t0 = std::time::Instant::now();
        while sh.stats.rx_packets.load(Ordering::SeqCst) == rx0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no packet arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
        o.relock();
        assert!(o.stack().is_owned(id));
        let inq = o.stack().ioctl(id, shallow_tcp::Ioctl::SiocInq).unwrap();
        assert_eq!(inq, 0, "data reached the receive queue of an owned socket");
        drop(o);
        let inq = c.with_stack(|st, _| st.ioctl(id, shallow_tcp::Ioctl::SiocInq).unwrap());
        assert_eq!(inq, 5, "release_sock did not process the backlog");
        let mut buf = [0u8; 5];
        (&c).read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"hello");
    }

    /// A host over three queues (three in-memory links) runs one I/O thread per queue, and
    /// `shutdown` joins all of them: once it returns, no thread holds the host's shared state
    /// (each held a reference until its loop returned), and a reader blocked on a socket of
    /// the host returns `ENETDOWN` instead of sleeping on.
    #[test]
    fn multi_queue_shutdown_joins_every_io_thread() {
        let mut ends_a = Vec::new();
        let mut ends_b = Vec::new();
        for _ in 0..3 {
            let (la, lb) = link::pair().unwrap();
            ends_a.push(Device::Mem(la));
            ends_b.push(Device::Mem(lb));
        }
        let mut a = Stack::new(3);
        a.add_address(IpAddr::V4(Ipv4Addr::new(10, 9, 1, 1)));
        let mut b = Stack::new(4);
        b.add_address(IpAddr::V4(Ipv4Addr::new(10, 9, 1, 2)));
        let ha = Host::start_queues(a, ends_a, Egress::default()).unwrap();
        let hb = Host::start_queues(b, ends_b, Egress::default()).unwrap();
        assert_eq!(ha.stats().queues.len(), 3);
        // Host handle + thread guard + one per running I/O thread.
        assert_eq!(Arc::strong_count(&ha.shared), 2 + 3);
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 1, 2)), 9);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let c = TcpStream::connect(&ha, addr).unwrap();
        let (_s, _) = l.accept().unwrap();
        let sh = Arc::clone(&ha.shared);
        let base = sh.stats.sleeps.load(Ordering::SeqCst);
        let r = std::thread::spawn(move || {
            let mut b = [0u8; 1];
            (&c).read(&mut b).map_err(|e| e.raw_os_error())
        });
        let t0 = std::time::Instant::now();
        while sh.stats.sleeps.load(Ordering::SeqCst) == base {
            assert!(t0.elapsed() < Duration::from_secs(10), "reader never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        ha.shutdown();
        assert!(!ha.is_running());
        // Host handle + thread guard + this test's clone (+ the reader's socket, if it has not
        // returned yet): no I/O thread is left.
        let left = Arc::strong_count(&ha.shared);
        assert!(
            left <= 4,
            "{left} references: an I/O thread is still running"
        );
        assert_eq!(r.join().unwrap(), Err(Some(libc::ENETDOWN)));
        assert_eq!(Arc::strong_count(&ha.shared), 3);
        hb.shutdown();
    }

    /// `sk_wait_event`: a reader asleep on an empty socket is woken by the wake-up of that
    /// socket (the data's `sk_data_ready`), and wake-ups are counted.
    #[test]
    fn sleeping_reader_is_woken_by_data() {
        let (ha, hb) = pair();
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 9, 0, 2)), 8);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let c = TcpStream::connect(&ha, addr).unwrap();
        let (s, _) = l.accept().unwrap();
        let sh = Arc::clone(&ha.shared);
        let base = sh.stats.sleeps.load(Ordering::SeqCst);
        let r = std::thread::spawn(move || {
            let mut b = [0u8; 3];
            (&c).read_exact(&mut b).unwrap();
            b
        });
        // Wait until the reader sleeps, then send.
        let t0 = std::time::Instant::now();
        while sh.stats.sleeps.load(Ordering::SeqCst) == base {
            assert!(t0.elapsed() < Duration::from_secs(10), "reader never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        (&s).write_all(b"abc").unwrap();
        assert_eq!(&r.join().unwrap(), b"abc");
        assert!(sh.stats.thread_wakeups.load(Ordering::SeqCst) >= 1);
    }
}
