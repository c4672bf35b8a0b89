//! A Shallow host on Linux: one `shallow_tcp::Stack` driven by an I/O thread over a device
//! (a TUN queue, or one end of an in-memory [`link`](crate::link)), with application threads
//! calling socket operations through [`TcpStream`],
//! [`TcpListener`], the [`Poller`](crate::Poller) readiness API and (feature
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
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

pub use shallow_qdisc::{FqConfig, Rate};
use shallow_tcp::{pollbits, DeviceCaps, Errno, Instant, SocketId, Stack};

use crate::error::OsError;
use crate::iothread::{self, HookState, TxQueue};
use crate::link::MemLink;
use crate::netns::Peer;
use crate::poller::PollerState;
use crate::tun::{Offload, Tun, TunConfig};
use crate::wake::Waker;

/// The sockets live in [`crate::net`]; re-exported here, where they used to be.
pub use crate::net::{TcpListener, TcpStream};

/// Bytes an application call moves per hold of the engine mutex: between chunks the mutex is
/// dropped (the socket stays owned) so that the I/O thread can run.
pub const CHUNK: usize = 64 * 1024;

/// Poll bits that wake readers: data, end of stream, errors, hang-up.
pub(crate) const READ_EVENTS: u32 = pollbits::POLLIN
    | pollbits::POLLRDNORM
    | pollbits::POLLRDHUP
    | pollbits::POLLHUP
    | pollbits::POLLERR;
/// Poll bits that wake writers: write space, errors, hang-up.
pub(crate) const WRITE_EVENTS: u32 =
    pollbits::POLLOUT | pollbits::POLLWRNORM | pollbits::POLLHUP | pollbits::POLLERR;

/// Counters of the host's threads (not engine MIBs: what happened at the device and at the
/// application boundary).
#[derive(Debug, Default)]
pub struct HostStats {
    /// Packets read from the device and given to the engine.
    pub rx_packets: AtomicU64,
    /// Of those, GSO aggregates (`gso_size` set).
    pub rx_gso: AtomicU64,
    /// Packets dropped on read (malformed virtio-net header).
    pub rx_dropped: AtomicU64,
    /// Packets written to the device.
    pub tx_packets: AtomicU64,
    /// Of those, GSO super-segments.
    pub tx_gso: AtomicU64,
    /// Packets the device refused (counted, completed, dropped).
    pub tx_errors: AtomicU64,
    /// Packets the packet hook dropped ([`Host::set_packet_hook`]).
    pub hook_drops: AtomicU64,
    /// Bytes held by the egress qdisc now.
    pub qdisc_backlog: AtomicU64,
    /// Most bytes the egress qdisc has held at once.
    pub qdisc_backlog_max: AtomicU64,
    /// Packets the egress qdisc dropped (its limit; completed so TSQ does not stall).
    pub qdisc_drops: AtomicU64,
    /// Engine wake-ups drained (`Stack::poll_wakeup`), for sockets with or without waiters.
    pub wakeups: AtomicU64,
    /// Of those, wake-ups that signalled sleeping blocking calls.
    pub thread_wakeups: AtomicU64,
    /// Async tasks woken (feature `tokio`).
    pub task_wakeups: AtomicU64,
    /// Times a blocking call went to sleep waiting for a socket event.
    pub sleeps: AtomicU64,
    /// Per device queue (one entry per I/O thread, in queue order): packets read and written
    /// there. The totals above count every queue.
    pub queues: Vec<QueueStats>,
}

/// Counters of one device queue and its I/O thread (see [`HostStats::queues`]).
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Packets read from this queue and given to the engine.
    pub rx_packets: AtomicU64,
    /// Packets written to this queue.
    pub tx_packets: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What sits between `poll_transmit` and the device write.
#[derive(Debug, Clone, Default)]
pub enum Egress {
    /// Linux's `fq` (the default qdisc for paced TCP): per-flow queues, earliest departure
    /// time honoured, so pacing and TSQ see a real host queue. TX completion happens when the
    /// packet leaves fq and the device write returns.
    #[default]
    Fq,
    /// fq with an explicit configuration.
    FqWith(FqConfig),
    /// Linux's `tbf`: a token bucket of `rate` with `burst` bytes, holding at most `limit`
    /// bytes (a super-segment above the burst is cut in software, as `tbf_segment` does). A
    /// bottleneck on the host itself, which TSQ sees.
    Tbf {
        /// Token rate.
        rate: Rate,
        /// Bucket size in bytes.
        burst: u64,
        /// Queue limit in bytes.
        limit: usize,
    },
    /// Linux's `pfifo_fast` (the old default qdisc): three priority bands by TOS, at most
    /// `txqueuelen` packets.
    PfifoFast {
        /// Queue limit in packets (`txqueuelen`, Linux default 1000).
        txqueuelen: usize,
    },
    /// Linux's `pfifo`: one drop-tail FIFO of at most `limit` packets (`tc qdisc replace
    /// dev D root pfifo limit N`; 0 refuses everything).
    Pfifo {
        /// Queue limit in packets.
        limit: usize,
    },
    /// No qdisc: packets go to the device as the engine emits them (pacing times ignored).
    Direct,
}

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

/// What the I/O thread reads and writes packets through.
#[derive(Debug)]
pub enum Device {
    /// A TUN queue.
    Tun(Tun),
    /// One end of an in-memory link to another host.
    Mem(MemLink),
}

impl From<Tun> for Device {
    fn from(t: Tun) -> Device {
        Device::Tun(t)
    }
}

impl From<MemLink> for Device {
    fn from(l: MemLink) -> Device {
        Device::Mem(l)
    }
}

impl Device {
    fn name(&self) -> String {
        match self {
            Device::Tun(t) => t.name().to_string(),
            Device::Mem(_) => "mem".into(),
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Device::Tun(t) => t.as_fd(),
            Device::Mem(l) => l.as_fd(),
        }
    }

    pub(crate) fn send(&self, data: &[u8], gso_size: Option<u16>) -> io::Result<()> {
        match self {
            Device::Tun(t) => t.send(data, gso_size),
            Device::Mem(l) => l.send(data, gso_size),
        }
    }
}

/// Per-socket application state: the wait queue and the options the substrate implements.
pub(crate) struct Slot {
    /// Bumped by every engine wake-up of the socket for readers ([`READ_EVENTS`]).
    pub rgen: u64,
    /// Bumped by every engine wake-up of the socket for writers ([`WRITE_EVENTS`]).
    pub wgen: u64,
    /// Waiters of this socket (events and ownership), used with the engine mutex.
    pub cv: Arc<Condvar>,
    /// An application call owns the socket (across mutex drops).
    pub owned: bool,
    /// Threads sleeping on `cv`.
    pub waiters: u32,
    /// `SO_RCVTIMEO`.
    pub rcvtimeo: Option<Duration>,
    /// `SO_SNDTIMEO`.
    pub sndtimeo: Option<Duration>,
    /// `O_NONBLOCK`.
    pub nonblocking: bool,
    /// A socket error the engine reported to a call that had already moved bytes: Linux
    /// leaves it in `sk_err` for the next call (`tcp_sendmsg_locked` returns `copied`), so the
    /// next send or recv (or `SO_ERROR`) reports it.
    pub pending_err: Option<Errno>,
    /// Async task waiting to read (or accept).
    pub read_waker: Option<std::task::Waker>,
    /// Async task waiting to write (or connect).
    pub write_waker: Option<std::task::Waker>,
    /// Pollers the socket is registered with.
    pub pollers: Vec<usize>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            rgen: 0,
            wgen: 0,
            cv: Arc::new(Condvar::new()),
            owned: false,
            waiters: 0,
            rcvtimeo: None,
            sndtimeo: None,
            nonblocking: false,
            pending_err: None,
            read_waker: None,
            write_waker: None,
            pollers: Vec::new(),
        }
    }
}

/// The engine and everything guarded with it.
pub(crate) struct Inner {
    /// The engine.
    pub stack: Stack,
    slots: Vec<Option<Slot>>,
    /// Readiness sets, by poller id.
    pub pollers: Vec<Option<PollerState>>,
    /// The egress qdisc of each device queue (Linux's `mq` children), shared with the
    /// engine's admission at the transmit ([`iothread::EgressGate`]).
    pub txq: iothread::SharedTxQueues,
}

impl Inner {
    pub fn slot(&self, s: SocketId) -> Option<&Slot> {
        self.slots.get(s.0 as usize).and_then(Option::as_ref)
    }

    pub fn slot_mut(&mut self, s: SocketId) -> Option<&mut Slot> {
        self.slots.get_mut(s.0 as usize).and_then(Option::as_mut)
    }

    /// Starts tracking `s` for the application.
    pub fn add_slot(&mut self, s: SocketId) {
        let i = s.0 as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(Slot::new());
    }

    /// Stops tracking `s` (closed by the application), unregistering it from its pollers and
    /// waking whoever still waits on it.
    pub fn remove_slot(&mut self, s: SocketId) {
        let Some(slot) = self.slots.get_mut(s.0 as usize).and_then(Option::take) else {
            return;
        };
        for p in &slot.pollers {
            if let Some(ps) = self.pollers.get_mut(*p).and_then(Option::as_mut) {
                ps.forget(s);
            }
        }
        slot.cv.notify_all();
        if let Some(w) = slot.read_waker {
            w.wake();
        }
        if let Some(w) = slot.write_waker {
            w.wake();
        }
    }

    /// Drains the engine's wake-ups and wakes exactly the waiters of the sockets named: the
    /// socket's blocking callers (condition variable), its async tasks (by event direction)
    /// and the pollers it is registered with.
    pub fn dispatch(&mut self, stats: &HostStats) {
        while let Some(w) = self.stack.poll_wakeup() {
            bump(&stats.wakeups);
            let Some(slot) = self
                .slots
                .get_mut(w.socket.0 as usize)
                .and_then(Option::as_mut)
            else {
                continue;
            };
            // A wake-up with bits of neither kind wakes both (never lose one).
            let other = w.events & (READ_EVENTS | WRITE_EVENTS) == 0;
            if w.events & READ_EVENTS != 0 || other {
                slot.rgen = slot.rgen.wrapping_add(1);
            }
            if w.events & WRITE_EVENTS != 0 || other {
                slot.wgen = slot.wgen.wrapping_add(1);
            }
            if slot.waiters > 0 {
                slot.cv.notify_all();
                bump(&stats.thread_wakeups);
            }
            if w.events & READ_EVENTS != 0 {
                if let Some(t) = slot.read_waker.take() {
                    t.wake();
                    bump(&stats.task_wakeups);
                }
            }
            if w.events & WRITE_EVENTS != 0 {
                if let Some(t) = slot.write_waker.take() {
                    t.wake();
                    bump(&stats.task_wakeups);
                }
            }
            for p in &slot.pollers {
                if let Some(ps) = self.pollers.get_mut(*p).and_then(Option::as_mut) {
                    ps.on_wakeup(w.socket, w.events);
                }
            }
        }
    }
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// One per queue's I/O thread; application calls wake queue 0's ([`Shared::kick`]).
    pub wakers: Vec<Waker>,
    pub hook: Mutex<HookState>,
    pub hooked: AtomicBool,
    pub stop: AtomicBool,
    epoch: std::time::Instant,
    pub stats: HostStats,
}

impl Shared {
    pub fn now(&self) -> Instant {
        let ns = self.epoch.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the engine in an unknown state; going on with
        // it is still better than poisoning every socket of the host.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the I/O thread of queue 0 (to transmit what a call queued: it drains
    /// `poll_transmit` and hands other queues their packets).
    pub fn kick(&self) {
        self.kick_queue(0);
    }

    /// Wakes the I/O thread of queue `q`.
    pub fn kick_queue(&self, q: usize) {
        // An eventfd write only fails if the descriptor is gone, i.e. the host is shutting down.
        if let Some(w) = self.wakers.get(q) {
            let _ = w.wake();
        }
    }

    /// Wakes every I/O thread (stop).
    pub fn kick_all(&self) {
        for q in 0..self.wakers.len() {
            self.kick_queue(q);
        }
    }

    /// Number of device queues (I/O threads).
    pub fn queues(&self) -> usize {
        self.wakers.len()
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Dispatches wake-ups, unlocks, and kicks the I/O thread.
    pub fn finish(&self, mut g: MutexGuard<'_, Inner>) {
        g.dispatch(&self.stats);
        drop(g);
        self.kick();
    }

    /// Takes ownership of `s` for an application call (Linux `lock_sock`): waits while another
    /// call owns it. `EBADF` when the socket is not (or no longer) the application's.
    pub fn own(&self, s: SocketId) -> io::Result<Owned<'_>> {
        let g = self.lock();
        let mut o = Owned {
            sh: self,
            g: Some(g),
            s,
        };
        o.acquire()?;
        Ok(o)
    }
}

/// `ENETDOWN`: the host's I/O thread has stopped.
pub(crate) fn netdown() -> io::Error {
    io::Error::from_raw_os_error(libc::ENETDOWN)
}

/// `EBADF`: a socket the application no longer has.
pub(crate) fn ebadf() -> io::Error {
    io::Error::from_raw_os_error(libc::EBADF)
}

/// An engine errno as an `io::Error` with the Linux errno (so its kind is the kind Linux
/// would give).
pub(crate) fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.code())
}

/// Which wake-ups end a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Readers' events ([`READ_EVENTS`]): data, a connection to accept, EOF, errors.
    Read,
    /// Writers' events ([`WRITE_EVENTS`]): write space, errors.
    Write,
    /// Any wake-up (a state change: connect).
    Any,
}

impl Want {
    fn gen(self, slot: &Slot) -> u64 {
        match self {
            Want::Read => slot.rgen,
            Want::Write => slot.wgen,
            Want::Any => slot.rgen.wrapping_add(slot.wgen),
        }
    }
}

/// Why a wait ended without a wake-up.
pub(crate) enum WaitEnd {
    /// A wake-up (or a spurious return): retry the call.
    Woken,
    /// The deadline passed.
    TimedOut,
}

/// An application call that owns a socket (between `lock_sock` and `release_sock`). Holds
/// the engine mutex except while it yields between chunks or sleeps. Dropping it releases the
/// socket on this thread (backlog processed here) and wakes the I/O thread.
pub(crate) struct Owned<'a> {
    sh: &'a Shared,
    g: Option<MutexGuard<'a, Inner>>,
    s: SocketId,
}

impl<'a> Owned<'a> {
    pub fn inner(&mut self) -> &mut Inner {
        self.g.as_mut().expect("engine mutex held")
    }

    pub fn stack(&mut self) -> &mut Stack {
        &mut self.inner().stack
    }

    pub fn now(&self) -> Instant {
        self.sh.now()
    }

    pub fn slot(&mut self) -> io::Result<&mut Slot> {
        let s = self.s;
        self.inner().slot_mut(s).ok_or_else(ebadf)
    }

    /// Waits until no other call owns the socket, then owns it.
    fn acquire(&mut self) -> io::Result<()> {
        let s = self.s;
        loop {
            let g = self.g.as_mut().expect("engine mutex held");
            let slot = g.slot_mut(s).ok_or_else(ebadf)?;
            if !slot.owned {
                slot.owned = true;
                g.stack.lock_sock(s);
                return Ok(());
            }
            slot.waiters += 1;
            let cv = Arc::clone(&slot.cv);
            let g = self.g.take().expect("engine mutex held");
            let mut g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
            if let Some(slot) = g.slot_mut(s) {
                slot.waiters -= 1;
            }
            self.g = Some(g);
        }
    }

    /// `release_sock` on this thread: backlog, deferred work, then the socket is free for the
    /// next call (its waiters are signalled).
    fn release(&mut self) {
        let now = self.sh.now();
        let s = self.s;
        let g = self.g.as_mut().expect("engine mutex held");
        g.stack.release_sock(now, s);
        if let Some(slot) = g.slot_mut(s) {
            slot.owned = false;
            if slot.waiters > 0 {
                slot.cv.notify_all();
            }
        }
    }

    /// Drops the mutex for a moment while still owning the socket (between chunks of a long
    /// call), so the I/O thread can take input; packets for this socket go to its backlog.
    pub fn yield_now(&mut self) {
        if let Some(mut g) = self.g.take() {
            g.dispatch(&self.sh.stats);
            drop(g);
        }
        self.sh.kick();
        self.g = Some(self.sh.lock());
    }

    /// `close()` as Linux's `tcp_close`: under ownership, then `release_sock` (backlog
    /// processed before the socket is orphaned), and the application's slot is dropped in
    /// the same hold of the mutex.
    pub fn close(mut self) {
        let now = self.sh.now();
        let s = self.s;
        if let Ok(Some(w)) = self.stack().close_linger(now, s) {
            // SO_LINGER: wait for the FIN's ACK or the linger time (sk_stream_wait_close).
            let dl = deadline(Some(w.deadline.saturating_duration_since(now)));
            loop {
                let t = self.sh.now();
                if !self.stack().linger_pending(s, t) {
                    break;
                }
                if !matches!(self.wait(Want::Any, dl), Ok(WaitEnd::Woken)) {
                    break;
                }
            }
            let now = self.sh.now();
            self.stack().linger_finish(now, s);
        }
        self.release();
        self.inner().remove_slot(s);
        // Drop finds no slot (nothing more to release) and dispatches, unlocks, kicks.
    }

    /// Processes the backlog without giving the socket up (Linux `sk_flush_backlog`): the
    /// engine's `release_sock` followed by `lock_sock`, under one hold of the mutex.
    pub fn flush_backlog(&mut self) {
        let now = self.sh.now();
        let s = self.s;
        let g = self.inner();
        g.stack.release_sock(now, s);
        g.stack.lock_sock(s);
    }

    /// Linux `sk_wait_event`: releases the socket, sleeps until a wake-up of this socket or
    /// `deadline`, and owns the socket again. The generation is read before the release, so a
    /// wake-up produced by the backlog (or by the I/O thread at any later point) ends the wait.
    pub fn wait(
        &mut self,
        want: Want,
        deadline: Option<std::time::Instant>,
    ) -> io::Result<WaitEnd> {
        let s = self.s;
        let gen0 = want.gen(self.slot()?);
        self.release();
        let sh = self.sh;
        self.inner().dispatch(&sh.stats);
        self.sh.kick();
        let mut end = WaitEnd::Woken;
        loop {
            if self.sh.stopped() {
                // Own it again so that drop releases a consistent socket.
                self.acquire()?;
                return Err(netdown());
            }
            let g = self.g.as_mut().expect("engine mutex held");
            let slot = g.slot_mut(s).ok_or_else(ebadf)?;
            if want.gen(slot) != gen0 {
                break;
            }
            let left = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        end = WaitEnd::TimedOut;
                        break;
                    }
                    Some(left)
                }
            };
            slot.waiters += 1;
            let cv = Arc::clone(&slot.cv);
            bump(&self.sh.stats.sleeps);
            let g = self.g.take().expect("engine mutex held");
            let mut g = match left {
                None => cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(l) => cv.wait_timeout(g, l).unwrap_or_else(|p| p.into_inner()).0,
            };
            if let Some(slot) = g.slot_mut(s) {
                slot.waiters -= 1;
            }
            self.g = Some(g);
        }
        self.acquire()?;
        Ok(end)
    }
}

impl Drop for Owned<'_> {
    fn drop(&mut self) {
        if self.g.is_none() {
            return;
        }
        let s = self.s;
        let owned = self
            .g
            .as_ref()
            .and_then(|g| g.slot(s))
            .is_some_and(|sl| sl.owned);
        if owned {
            self.release();
        }
        if let Some(g) = self.g.take() {
            self.sh.finish(g);
        }
    }
}

/// The deadline of a wait of `timeout` from now (`None`: no limit).
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<std::time::Instant> {
    timeout.and_then(|t| std::time::Instant::now().checked_add(t))
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

/// Wakes every sleeper of the host (it stopped: their calls return `ENETDOWN`).
pub(crate) fn wake_all(sh: &Shared) {
    let mut g = sh.lock();
    for slot in g.slots.iter_mut().flatten() {
        slot.cv.notify_all();
        if let Some(w) = slot.read_waker.take() {
            w.wake();
        }
        if let Some(w) = slot.write_waker.take() {
            w.wake();
        }
    }
    for p in g.pollers.iter_mut().flatten() {
        p.wake_all();
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// Starts the I/O thread for `stack` (addresses and sysctls already set) over `device` (a
    /// [`Tun`] or a [`MemLink`]), with the default egress qdisc (fq).
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
        let txq = iothread::TxQueues::new(
            (0..n)
                .map(|_| TxQueue::new(iothread::qdisc_for(egress.clone(), mtu)))
                .collect(),
        );
        // The engine learns each qdisc's verdict at the transmit (NET_XMIT_DROP), as Linux's
        // TCP does from dev_queue_xmit.
        let mut stack = stack;
        if iothread::lock_txq(&txq).any_qdisc() {
            stack.set_tx_gate(Some(Box::new(iothread::EgressGate(txq.clone()))));
        }
        let wakers = (0..n)
            .map(|_| Waker::new())
            .collect::<io::Result<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                stack,
                slots: Vec::new(),
                pollers: Vec::new(),
                txq,
            }),
            wakers,
            hook: Mutex::new(HookState::default()),
            hooked: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            epoch: std::time::Instant::now(),
            stats: HostStats {
                queues: (0..n).map(|_| QueueStats::default()).collect(),
                ..HostStats::default()
            },
        });
        {
            // The engine marks its packets with departure times only when fq is there to
            // honour them (Linux: `sk_pacing_status == SK_PACING_FQ`).
            let mut g = shared.lock();
            let caps = g.stack.device();
            g.stack.set_device(DeviceCaps {
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
    /// a [`TcpStream`] should go through it, which owns the socket.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack, Instant) -> R) -> R {
        let mut g = self.shared.lock();
        let now = self.shared.now();
        let r = f(&mut g.stack, now);
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

/// Direction of a packet shown to a [`PacketHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the device to the engine.
    Rx,
    /// From the engine (after the qdisc) to the device.
    Tx,
}

/// What a [`PacketHook`] does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it.
    Pass,
    /// Drop it (a transmitted data packet is still TX-completed: the drop is below TCP).
    Drop,
    /// Hold it and deliver it after the next packet of the same direction, or after
    /// [`HOLD_NS`] if none comes: a one-packet reordering. A second hold delivers the first.
    Hold,
}

/// An impairment hook run by the I/O thread on every packet between the device and the
/// engine, in both directions (loss and reordering for tests; the kernel here may lack
/// `sch_netem`). Set with [`Host::set_packet_hook`].
pub type PacketHook = Box<dyn FnMut(Dir, &[u8], Option<u16>) -> Verdict + Send>;

/// Longest time a held packet waits for the next one (1 ms).
pub const HOLD_NS: u64 = 1_000_000;

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
    use std::io::{Read, Write};
    use std::net::SocketAddr;

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
        drop(o.g.take());
        (&s).write_all(b"hello").unwrap();
        let t0 = std::time::Instant::now();
        while sh.stats.rx_packets.load(Ordering::SeqCst) == rx0 {
            assert!(t0.elapsed() < Duration::from_secs(10), "no packet arrived");
            std::thread::sleep(Duration::from_millis(1));
        }
        o.g = Some(sh.lock());
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
