//! A Shallow host on Linux: one `shallow_tcp::Stack` driven by an I/O thread over a device
//! (a TUN queue, or one end of an in-memory [`link`](crate::link)), with application threads
//! calling socket operations through [`TcpStream`](crate::TcpStream),
//! [`TcpListener`](crate::TcpListener), the [`Poller`](crate::Poller) readiness API and (feature
//! `tokio`) async wrappers.
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
//! the call takes the engine mutex, marks the socket owned (`Stack::lock_sock`), and does
//! its work. A long call (a big `send` copying into the write queue, a big `recv`) works in
//! chunks of [`CHUNK`] bytes and drops the mutex between chunks *while still owning the
//! socket*, so the I/O thread keeps taking input: packets for the owned socket go to its
//! backlog, timers and TX completions set deferred flags. At its end the call runs
//! `Stack::release_sock` on the application thread, which processes the backlog there (Linux
//! `__release_sock`; that is what makes backlog ACK deferral real). A call that must wait
//! releases ownership while it sleeps and retakes it after (Linux `sk_wait_event`).
//!
//! # No lost wake-ups
//!
//! Every socket known to the application has a slot with a generation counter and a condition
//! variable used with the engine mutex. Whoever drains `Stack::poll_wakeup` (the I/O thread
//! after each round, an application thread after each call) bumps the generation of each
//! socket named and signals only that socket's waiters, its pollers and its async tasks. A
//! waiter reads the generation under the mutex *before* it releases the socket (whose backlog
//! may itself produce a wake-up) and sleeps only while the generation is unchanged, so a
//! wake-up between its check and its sleep is never lost.
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
//! # Several queues
//!
//! A host may run over the queues of one `IFF_MULTI_QUEUE` TUN ([`Host::start_queues`],
//! [`HostConfig::queues`]): one I/O thread per queue, all driving the one engine behind its
//! mutex (taken only to run input, timers and the egress qdiscs, never across a device read or
//! write). Each queue has its own qdisc, as Linux's `mq` root has one child per TX queue; a
//! packet goes to the queue its flow hash picks (`skb_tx_hash`), so a flow stays on one queue
//! and leaves in order (only that queue's thread dequeues and writes it), and the kernel's tun
//! flow table sends the flow's reverse packets to the same queue. Application calls wake
//! queue 0's thread, which drains `poll_transmit` and wakes the threads of the other queues it
//! gave packets to; TX completions are run by the thread that wrote the packet; a timer that is
//! due is run by whichever thread holds the mutex first (once: the deadline then moves on).
//! [`HostStats::queues`] counts packets per queue.
//!
//! For tests, [`Host::set_packet_hook`] puts a loss/reordering hook on the I/O thread
//! between the device and the engine, in both directions.
//!
//! Time is `std::time::Instant` since the host started, in nanoseconds; the I/O thread waits
//! with `ppoll`'s nanosecond timeouts.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
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
use crate::shared::{wake_all, Shared};
pub use crate::shared::{HostStats, QueueStats, CHUNK};
use crate::tun::{Offload, TunConfig};
use crate::wake::Waker;
use shallow_tcp::driver::EgressHandle;

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
    /// Device queues, each with its own I/O thread (default 1). Above 1 the TUN is opened
    /// with `IFF_MULTI_QUEUE`, which must match how the existing device was made (`shallow
    /// netns up` makes a single-queue one; `ip tuntap add mode tun multi_queue vnet_hdr`
    /// makes a multi-queue one).
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

/// A Shallow host: the engine plus its I/O thread over a device (one thread per queue with
/// [`Host::start_queues`]). Dropping it stops the threads.
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

    /// Starts one I/O thread per device queue (the queues of one `IFF_MULTI_QUEUE` TUN, as
    /// [`TunConfig::open`] returns them), all driving `stack` behind its one mutex, each
    /// queue with its own `egress` qdisc (Linux's `mq` root). A packet the engine emits goes
    /// to the queue its flow hash picks, so a flow keeps one queue. `InvalidInput` when
    /// `devices` is empty.
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
        let txq = shallow_tcp::driver::Egress::new(
            (0..n).map(|_| qdisc_for(egress.clone(), mtu)).collect(),
        );
        // The engine learns each qdisc's verdict at the transmit (NET_XMIT_DROP), as Linux's
        // TCP does from dev_queue_xmit: the driver installs the gate.
        let driver = OsDriver::with_egress(stack, EgressHandle::new(txq));
        let wakers = (0..n)
            .map(|_| Waker::new())
            .collect::<io::Result<Vec<_>>>()?;
        let shared = Arc::new(Shared::new(driver, wakers));
        {
            // The engine marks its packets with departure times only when fq is there to
            // honour them (Linux: `sk_pacing_status == SK_PACING_FQ`).
            let mut g = shared.lock();
            let caps = g.driver.device();
            g.driver.set_device(DeviceCaps {
                edt_pacing: fq,
                ..caps
            });
        }
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
                .spawn(move || iothread::io_loop(&s, q, &device))?;
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

    /// Runs `f` on the engine (under its lock) at the current time, then dispatches the
    /// wake-ups it produced and lets the I/O thread transmit what it queued. For engine calls
    /// this crate has no wrapper for (sysctls, counters, sockstat); socket calls on sockets of
    /// a [`TcpStream`](crate::TcpStream) should go through it, which owns the socket.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack, Instant) -> R) -> R {
        let mut g = self.shared.lock();
        let now = self.shared.now();
        let r = f(g.driver.stack_mut(), now);
        self.shared.finish(g);
        r
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
}

impl Host {
    /// Installs (or with `None` removes) the packet hook of the I/O thread: every packet read
    /// from the device and every packet written to it is first shown to the hook, which may
    /// pass, drop or hold it ([`Verdict`]). Drops are counted in `HostStats::hook_drops`.
    /// With several queues the one hook is shared: it runs on the thread of the queue that
    /// read or writes the packet, and a held packet is released by whichever thread comes
    /// next (a held transmitted packet may then leave on that thread's queue).
    pub fn set_packet_hook(&self, hook: Option<PacketHook>) {
        let mut h = self.shared.hook.lock().unwrap_or_else(|p| p.into_inner());
        h.set(hook);
        self.shared.hooked.store(true, Ordering::SeqCst);
        drop(h);
        self.shared.kick();
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
        let mut o = sh.own(id).unwrap();
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
        let inq = ha.with_stack(|st, _| st.ioctl(id, shallow_tcp::Ioctl::SiocInq).unwrap());
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
