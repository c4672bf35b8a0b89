//! The state an [`Host`](crate::Host)'s threads share. A host over Q device queues is Q
//! **shards** ([`Shard`]): each an engine (`shallow_tcp::Stack` with its driver and its one
//! TX queue) behind its own mutex ([`Shard::lock`]) with the application's slots of its
//! sockets, served by the I/O thread of its queue, plus a bounded inbox of packets other
//! queues read for it. Host-wide are the pollers' readiness sets (their own mutex, always
//! taken *after* a shard's, never before one), the flow-ownership rule ([`Steer`]), the packet
//! hook and the counters. The rules of waiting on a socket ([`Owned`]: Linux's `lock_sock`,
//! `release_sock`, `sk_wait_event`) and of waking its waiters ([`Inner::dispatch`]) are per
//! shard; a listener, which has a socket on every shard, also has a host-level wait
//! ([`ListenWait`]). See `host.rs` for the threading model.
//!
//! Lock order: shard → pollers, shard → a listener's wait, shard → an inbox, shard → hook; no
//! thread holds two shards' mutexes at once.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use shallow_tcp::{pollbits, Errno, Instant, SocketId, Stack, TxToken};

use crate::device::Device;
use crate::egress::OsDriver;
use crate::hook::HookState;
use crate::readiness::PollerState;
pub(crate) use crate::steer::Steer;
use crate::wake::Waker;

/// Bytes an application call moves per hold of the engine mutex: between chunks the mutex is
/// dropped (the socket stays owned) so that the I/O thread can run.
pub const CHUNK: usize = 64 * 1024;

/// Most packets a shard's inbox holds (packets another queue read for it); more are dropped
/// and counted ([`QueueStats::rx_forward_drops`]), as a full backlog of Linux's RPS
/// (`enqueue_to_backlog` over `netdev_max_backlog`) drops.
pub(crate) const INBOX_PACKETS: usize = 1024;

/// Most bytes a shard's inbox holds.
pub(crate) const INBOX_BYTES: usize = 16 << 20;

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
    /// Packets read from the device and given to the engine (to the shard that owns them,
    /// forwarded ones included).
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
    /// Packets the packet hook dropped ([`Host::set_packet_hook`](crate::Host::set_packet_hook)).
    pub hook_drops: AtomicU64,
    /// Non-TCP packets shown to the raw handler ([`Host::set_raw_handler`](crate::Host::set_raw_handler)).
    pub rx_raw: AtomicU64,
    /// Bytes held by the egress qdiscs now (the last figure a queue's thread stored for its
    /// own qdisc).
    pub qdisc_backlog: AtomicU64,
    /// Most bytes an egress qdisc has held at once.
    pub qdisc_backlog_max: AtomicU64,
    /// Packets the egress qdiscs dropped (their limit; completed so TSQ does not stall).
    pub qdisc_drops: AtomicU64,
    /// Engine wake-ups drained (`Stack::poll_wakeup`), for sockets with or without waiters.
    pub wakeups: AtomicU64,
    /// Of those, wake-ups that signalled sleeping blocking calls.
    pub thread_wakeups: AtomicU64,
    /// Async tasks woken (feature `tokio`).
    pub task_wakeups: AtomicU64,
    /// Times a blocking call went to sleep waiting for a socket event.
    pub sleeps: AtomicU64,
    /// Packets an application thread wrote to the device itself (direct transmit).
    pub tx_direct: AtomicU64,
    /// Times a blocking read polled the device itself before sleeping (`SO_BUSY_POLL`).
    pub busy_polls: AtomicU64,
    /// Device reads of a busy-polling thread that found packets.
    pub busy_poll_packets: AtomicU64,
    /// Times an application call woke an I/O thread because the engine's next deadline moved
    /// earlier than its planned wake-up.
    pub io_kicks: AtomicU64,
    /// Per device queue (one entry per I/O thread and shard, in queue order): packets read
    /// and written there. The totals above count every queue.
    pub queues: Vec<QueueStats>,
}

/// Counters of one device queue, its I/O thread and its shard (see [`HostStats::queues`]).
#[derive(Debug, Default)]
pub struct QueueStats {
    /// Packets read from this queue and given to an engine (this queue's shard, or by way of
    /// its inbox the shard that owns the packet's flow).
    pub rx_packets: AtomicU64,
    /// Of those, packets of a flow another shard owns, copied into that shard's inbox.
    pub rx_forwarded: AtomicU64,
    /// Packets read from this queue for another shard whose inbox was full: dropped.
    pub rx_forward_drops: AtomicU64,
    /// Packets written to this queue (all of them by this queue's shard).
    pub tx_packets: AtomicU64,
}

pub(crate) fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The host-level wait of a listener, which has one socket per shard: a generation bumped by
/// every shard's dispatch of a wake-up of any of its sockets, and the condition variable a
/// blocking `accept` sleeps on, with this mutex only (never a shard's).
#[derive(Debug, Default)]
pub(crate) struct ListenWait {
    gen: Mutex<u64>,
    cv: Condvar,
}

impl ListenWait {
    /// The generation now (read before trying the shards, so that a connection that arrives
    /// after a shard was tried ends the wait).
    pub fn gen(&self) -> u64 {
        *self.gen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A wake-up of one of the listener's sockets: bump and wake the sleepers.
    pub fn bump(&self) {
        let mut g = self.gen.lock().unwrap_or_else(|p| p.into_inner());
        *g = g.wrapping_add(1);
        self.cv.notify_all();
    }

    /// Sleeps while the generation is `gen0`, the host runs and the deadline has not passed.
    /// True when the deadline passed.
    pub fn wait(&self, gen0: u64, stop: &AtomicBool, deadline: Option<std::time::Instant>) -> bool {
        let mut g = self.gen.lock().unwrap_or_else(|p| p.into_inner());
        while *g == gen0 && !stop.load(Ordering::SeqCst) {
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return true;
                    }
                    g = self
                        .cv
                        .wait_timeout(g, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
        false
    }
}

/// Per-socket application state: the wait queue and the options the substrate implements.
pub(crate) struct Slot {
    /// Bumped by every engine wake-up of the socket for readers ([`READ_EVENTS`]).
    pub rgen: u64,
    /// Bumped by every engine wake-up of the socket for writers ([`WRITE_EVENTS`]).
    pub wgen: u64,
    /// Waiters of this socket (events and ownership), used with its shard's mutex.
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
    /// Async task waiting for the error queue (a transmit timestamp): woken by `POLLERR`,
    /// apart from the reader so that a task reading and one waiting for timestamps on the
    /// same stream do not take each other's place.
    pub err_waker: Option<std::task::Waker>,
    /// Pollers the socket is registered with.
    pub pollers: Vec<usize>,
    /// A listener's host-level wait (the listener's socket on each shard shares it).
    pub listen: Option<Arc<ListenWait>>,
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
            err_waker: None,
            pollers: Vec::new(),
            listen: None,
        }
    }
}

/// A shard's engine and everything guarded with it.
pub(crate) struct Inner {
    /// The shard's index (its device queue).
    pub k: usize,
    /// The engine with the egress qdisc of its device queue (Linux's `mq` child of that TX
    /// queue), whose admission it asks at the transmit (`shallow_tcp::driver`).
    pub driver: OsDriver,
    slots: Vec<Option<Slot>>,
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
    pub fn remove_slot(&mut self, s: SocketId, sh: &Shared) {
        let Some(slot) = self.slots.get_mut(s.0 as usize).and_then(Option::take) else {
            return;
        };
        if !slot.pollers.is_empty() {
            let mut ps = sh.lock_pollers();
            for p in &slot.pollers {
                if let Some(st) = ps.get_mut(*p).and_then(Option::as_mut) {
                    st.forget((self.k, s));
                }
            }
        }
        slot.cv.notify_all();
        if let Some(l) = &slot.listen {
            l.bump();
        }
        if let Some(w) = slot.read_waker {
            w.wake();
        }
        if let Some(w) = slot.write_waker {
            w.wake();
        }
        if let Some(w) = slot.err_waker {
            w.wake();
        }
    }

    /// Drains the engine's wake-ups and wakes exactly the waiters of the sockets named: the
    /// socket's blocking callers (condition variable; a listener's host-level wait), its async
    /// tasks (by event direction) and the pollers it is registered with (whose mutex is taken
    /// here, after this shard's).
    pub fn dispatch(&mut self, sh: &Shared) {
        let stats = &sh.stats;
        let mut pollers = None;
        while let Some(w) = self.driver.poll_wakeup() {
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
            if let Some(l) = &slot.listen {
                l.bump();
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
            if w.events & (pollbits::POLLERR | pollbits::POLLHUP) != 0 {
                if let Some(t) = slot.err_waker.take() {
                    t.wake();
                    bump(&stats.task_wakeups);
                }
            }
            if !slot.pollers.is_empty() {
                let ps = pollers.get_or_insert_with(|| sh.lock_pollers());
                for p in &slot.pollers {
                    if let Some(st) = ps.get_mut(*p).and_then(Option::as_mut) {
                        st.on_wakeup((self.k, w.socket), w.events);
                    }
                }
            }
        }
    }
}

/// Packets another queue's thread read for a shard, waiting for the shard's thread.
#[derive(Default)]
pub(crate) struct Inbox {
    pkts: Vec<(Vec<u8>, Option<u16>)>,
    bytes: usize,
}

/// One engine of a host: the flows its device queue's hash gives it (see [`Steer`]).
pub(crate) struct Shard {
    inner: Mutex<Inner>,
    /// Wakes this shard's I/O thread.
    pub waker: Waker,
    inbox: Mutex<Inbox>,
    /// This shard's device queue: its I/O thread reads it; whoever runs the TX queue
    /// ([`crate::iothread::tx_run`]) writes it.
    pub dev: Arc<Device>,
    /// Someone is running this shard's TX queue (moving the engine's output through the
    /// qdisc to the device): Linux's `qdisc_run_begin`. One at a time keeps a flow's packets
    /// in order.
    pub tx_busy: AtomicBool,
    /// A thread found the TX queue busy with output of its own: the runner goes round again
    /// (Linux's `__QDISC_STATE_MISSED`).
    pub tx_missed: AtomicBool,
    /// TX completions of packets application threads wrote (`iothread::tx_run`), for the
    /// I/O thread to run.
    completions: Mutex<Vec<TxToken>>,
    /// When the I/O thread will wake next, ns on the host clock (`u64::MAX`: not before a
    /// packet or a kick): an application call that moves the engine's next deadline earlier
    /// kicks it, others do not (written under the shard's mutex).
    pub io_wakes_at: AtomicU64,
    /// Threads busy-polling this queue for sockets with `SO_PREFER_BUSY_POLL`: while any
    /// does, the I/O thread does not read the device (`iothread::busy_poll`).
    pub busy_preferred: AtomicU64,
}

impl Shard {
    /// The shard `k` over `driver` and device queue `dev`, its thread woken by `waker`.
    pub fn new(k: usize, driver: OsDriver, waker: Waker, dev: Arc<Device>) -> Shard {
        Shard {
            inner: Mutex::new(Inner {
                k,
                driver,
                slots: Vec::new(),
            }),
            waker,
            inbox: Mutex::new(Inbox::default()),
            dev,
            tx_busy: AtomicBool::new(false),
            tx_missed: AtomicBool::new(false),
            completions: Mutex::new(Vec::new()),
            io_wakes_at: AtomicU64::new(0),
            busy_preferred: AtomicU64::new(0),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves the engine in an unknown state; going on with
        // it is still better than poisoning every socket of the shard.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes this shard's I/O thread (to transmit what a call queued, or to take its inbox).
    pub fn kick(&self) {
        // An eventfd write only fails if the descriptor is gone, i.e. the host is shutting down.
        let _ = self.waker.wake();
    }

    /// Adds TX completions for the I/O thread to run.
    pub fn push_completions(&self, mut t: Vec<TxToken>) {
        let mut c = self.completions.lock().unwrap_or_else(|p| p.into_inner());
        c.append(&mut t);
    }

    /// The TX completions application threads left, taken.
    pub fn take_completions(&self) -> Vec<TxToken> {
        let mut c = self.completions.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut *c)
    }

    /// Copies a packet into the inbox; false (nothing copied) when the inbox is full.
    pub fn push_inbox(&self, p: &[u8], gso: Option<u16>) -> bool {
        let mut b = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
        if b.pkts.len() >= INBOX_PACKETS || b.bytes + p.len() > INBOX_BYTES {
            return false;
        }
        b.bytes += p.len();
        b.pkts.push((p.to_vec(), gso));
        true
    }

    /// Moves the inbox's packets to `out` (empty on entry: the two vectors swap, so their
    /// allocations are reused).
    pub fn take_inbox(&self, out: &mut Vec<(Vec<u8>, Option<u16>)>) {
        let mut b = self.inbox.lock().unwrap_or_else(|p| p.into_inner());
        if b.pkts.is_empty() {
            return;
        }
        std::mem::swap(&mut b.pkts, out);
        b.bytes = 0;
    }
}

pub(crate) struct Shared {
    /// One per device queue.
    pub shards: Vec<Shard>,
    /// Which shard owns a flow.
    pub steer: Steer,
    /// Readiness sets, by poller id (taken after a shard's mutex, never before).
    pollers: Mutex<Vec<Option<PollerState>>>,
    /// The shard the next `connect` goes to (round-robin).
    next_connect: AtomicUsize,
    pub hook: Mutex<HookState>,
    pub hooked: AtomicBool,
    /// The user's handler of non-TCP packets (`raw.rs`).
    pub raw: crate::raw::Raw,
    pub stop: AtomicBool,
    /// Application calls transmit on their own thread ([`Shared::finish`]); when off, every
    /// call hands its output to the I/O thread ([`crate::Host::set_direct_transmit`]).
    pub direct_tx: AtomicBool,
    epoch: std::time::Instant,
    pub stats: HostStats,
}

impl Shared {
    /// The shared state of a host over `shards` (one per device queue), flows owned as
    /// `steer` says; time starts now.
    pub fn new(shards: Vec<Shard>, steer: Steer) -> Shared {
        let n = shards.len();
        Shared {
            shards,
            steer,
            pollers: Mutex::new(Vec::new()),
            next_connect: AtomicUsize::new(0),
            hook: Mutex::new(HookState::default()),
            hooked: AtomicBool::new(false),
            raw: crate::raw::Raw::default(),
            stop: AtomicBool::new(false),
            direct_tx: AtomicBool::new(true),
            epoch: std::time::Instant::now(),
            stats: HostStats {
                queues: (0..n).map(|_| QueueStats::default()).collect(),
                ..HostStats::default()
            },
        }
    }

    pub fn now(&self) -> Instant {
        Instant::ZERO + self.epoch.elapsed()
    }

    /// The packet hook's state, locked, once a hook has been installed (`None` before, so
    /// that the I/O threads skip the hook's mutex on hosts that never had one). Taken by the
    /// I/O threads with their shard's mutex held.
    pub fn lock_hook(&self) -> Option<MutexGuard<'_, HookState>> {
        if self.hooked.load(Ordering::Relaxed) {
            Some(self.hook.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        }
    }

    /// The pollers' readiness sets (after a shard's mutex, if one is held).
    pub fn lock_pollers(&self) -> MutexGuard<'_, Vec<Option<PollerState>>> {
        self.pollers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Shard `k`'s engine, locked.
    pub fn lock(&self, k: usize) -> MutexGuard<'_, Inner> {
        self.shards[k].lock()
    }

    /// The shard a new connection goes to.
    pub fn connect_shard(&self) -> usize {
        self.next_connect.fetch_add(1, Ordering::Relaxed) % self.shards.len()
    }

    /// The shard a Fast Open connection to `peer` goes to: always the same one for one
    /// server address, since the client's cookie cache (Linux's `tcp_metrics`, host-wide) is
    /// each shard engine's own; the cookie one connection learned is then there for the next.
    pub fn peer_shard(&self, peer: std::net::IpAddr) -> usize {
        use std::hash::{Hash, Hasher};
        let n = self.shards.len();
        if n == 1 {
            return 0;
        }
        // Fixed keys: the choice only needs to be stable for the host's life.
        let mut h = std::hash::DefaultHasher::new();
        peer.hash(&mut h);
        (h.finish() % n as u64) as usize
    }

    /// Wakes every I/O thread (stop, a new hook).
    pub fn kick_all(&self) {
        for s in &self.shards {
            s.kick();
        }
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Ends an application call's hold of shard `g`: dispatches wake-ups, sends what the call
    /// queued, unlocks, and wakes the I/O thread only if it must run sooner than it planned.
    pub fn finish(&self, g: MutexGuard<'_, Inner>) {
        drop(self.after_call(g));
    }

    /// What an application call does before it lets go of its shard (still holding it, the
    /// mutex perhaps dropped and taken again): wake-ups dispatched; the engine's output sent
    /// from this thread ([`crate::iothread::tx_run`], as a Linux process's `sendmsg` runs
    /// the qdisc and the driver itself) unless direct transmit is off, in which case the I/O
    /// thread is kicked to send it; and the I/O thread kicked if the engine's next deadline
    /// (a timer, a qdisc's release time) is now earlier than its planned wake-up.
    pub fn after_call<'a>(&'a self, mut g: MutexGuard<'a, Inner>) -> MutexGuard<'a, Inner> {
        g.dispatch(self);
        let k = g.k;
        let shard = &self.shards[k];
        // A packet hook runs on the I/O threads only (`Host::set_packet_hook`).
        if !self.direct_tx.load(Ordering::Relaxed) || self.hooked.load(Ordering::Relaxed) {
            shard.kick();
            return g;
        }
        g = crate::iothread::tx_run(self, k, g, true);
        let now = self.now();
        let next = g.driver.poll_deadline(0, now);
        if next.is_some_and(|t| t.as_nanos() < shard.io_wakes_at.load(Ordering::SeqCst)) {
            bump(&self.stats.io_kicks);
            shard.kick();
        }
        g
    }

    /// Takes ownership of socket `s` of shard `k` for an application call (Linux
    /// `lock_sock`): waits while another call owns it. `EBADF` when the socket is not (or no
    /// longer) the application's.
    pub fn own(&self, k: usize, s: SocketId) -> io::Result<Owned<'_>> {
        let shard = &self.shards[k];
        let g = shard.lock();
        let mut o = Owned {
            sh: self,
            shard,
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
/// its shard's engine mutex except while it yields between chunks or sleeps. Dropping it
/// releases the socket on this thread (backlog processed here) and wakes the shard's I/O
/// thread.
pub(crate) struct Owned<'a> {
    sh: &'a Shared,
    shard: &'a Shard,
    g: Option<MutexGuard<'a, Inner>>,
    s: SocketId,
}

impl<'a> Owned<'a> {
    /// Drops the engine mutex while keeping the socket owned, as between the chunks of a
    /// long call (for tests of the backlog); [`Owned::relock`] takes it again.
    #[cfg(test)]
    pub(crate) fn unlock(&mut self) {
        drop(self.g.take());
    }

    /// Takes the engine mutex again after [`Owned::unlock`].
    #[cfg(test)]
    pub(crate) fn relock(&mut self) {
        self.g = Some(self.shard.lock());
    }

    pub fn inner(&mut self) -> &mut Inner {
        self.g.as_mut().expect("engine mutex held")
    }

    pub fn stack(&mut self) -> &mut Stack {
        self.inner().driver.stack_mut()
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
                g.driver.lock_sock(s);
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
        g.driver.release_sock(now, s);
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
        if let Some(g) = self.g.take() {
            drop(self.sh.after_call(g));
        }
        self.g = Some(self.shard.lock());
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
        let sh = self.sh;
        self.inner().remove_slot(s, sh);
        // Drop finds no slot (nothing more to release) and dispatches, unlocks, kicks.
    }

    /// Processes the backlog without giving the socket up (Linux `sk_flush_backlog`): the
    /// engine's `release_sock` followed by `lock_sock`, under one hold of the mutex.
    pub fn flush_backlog(&mut self) {
        let now = self.sh.now();
        let s = self.s;
        let g = self.inner();
        g.driver.release_sock(now, s);
        g.driver.lock_sock(s);
    }

    /// Linux `sk_wait_event`: releases the socket, sleeps until a wake-up of this socket or
    /// `deadline`, and owns the socket again. The generation is read before the release, so a
    /// wake-up produced by the backlog (or by the I/O thread at any later point) ends the wait.
    pub fn wait(
        &mut self,
        want: Want,
        deadline: Option<std::time::Instant>,
    ) -> io::Result<WaitEnd> {
        self.wait_with(want, deadline, false)
    }

    /// [`Owned::wait`] of a blocking read: with `SO_BUSY_POLL` set on the socket, it first
    /// polls the device itself for that long (Linux `sk_busy_loop` in `tcp_recvmsg`), then
    /// sleeps.
    pub fn wait_read_busy(&mut self, deadline: Option<std::time::Instant>) -> io::Result<WaitEnd> {
        self.wait_with(Want::Read, deadline, true)
    }

    fn wait_with(
        &mut self,
        want: Want,
        deadline: Option<std::time::Instant>,
        busy: bool,
    ) -> io::Result<WaitEnd> {
        let s = self.s;
        let gen0 = want.gen(self.slot()?);
        let mut busy = if busy {
            self.inner().driver.busy_poll(s).ok().filter(|b| b.usec > 0)
        } else {
            None
        };
        self.release();
        let g = self.g.take().expect("engine mutex held");
        self.g = Some(self.sh.after_call(g));
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
            if let Some(bp) = busy.take() {
                let mut until =
                    std::time::Instant::now() + Duration::from_micros(u64::from(bp.usec));
                if let Some(d) = deadline {
                    until = until.min(d);
                }
                let g = self.g.take().expect("engine mutex held");
                let k = g.k;
                drop(g);
                let (g, _) =
                    crate::iothread::busy_poll(self.sh, k, bp.budget, bp.prefer, until, |g| {
                        g.slot_mut(s).is_none_or(|sl| want.gen(sl) != gen0)
                    });
                self.g = Some(g);
                continue;
            }
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

/// Wakes every sleeper of the host (it stopped: their calls return `ENETDOWN`).
pub(crate) fn wake_all(sh: &Shared) {
    for shard in &sh.shards {
        let mut g = shard.lock();
        for slot in g.slots.iter_mut().flatten() {
            slot.cv.notify_all();
            if let Some(l) = &slot.listen {
                l.bump();
            }
            if let Some(w) = slot.read_waker.take() {
                w.wake();
            }
            if let Some(w) = slot.write_waker.take() {
                w.wake();
            }
            if let Some(w) = slot.err_waker.take() {
                w.wake();
            }
        }
    }
    for p in sh.lock_pollers().iter_mut().flatten() {
        p.wake_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard's inbox is bounded: it takes [`INBOX_PACKETS`] packets (or [`INBOX_BYTES`]
    /// bytes) and refuses more, copying nothing, until its thread takes what it holds.
    #[test]
    fn inbox_is_bounded() {
        let (link, _peer) = crate::link::pair().expect("link");
        let shard = Shard::new(
            0,
            OsDriver::new(Stack::new(1)),
            Waker::new().expect("eventfd"),
            Arc::new(Device::Mem(link)),
        );
        for i in 0..INBOX_PACKETS {
            assert!(shard.push_inbox(&[i as u8; 40], None), "packet {i} refused");
        }
        assert!(
            !shard.push_inbox(&[0; 40], None),
            "a full inbox took a packet"
        );
        let mut out = Vec::new();
        shard.take_inbox(&mut out);
        assert_eq!(out.len(), INBOX_PACKETS);
        assert_eq!(out[7].0, vec![7u8; 40]);
        out.clear();
        // By bytes: 64 KiB aggregates fill it before the packet count does.
        let big = vec![0u8; 65536];
        let fit = INBOX_BYTES / big.len();
        for _ in 0..fit {
            assert!(shard.push_inbox(&big, Some(1448)));
        }
        assert!(!shard.push_inbox(&big, Some(1448)));
        shard.take_inbox(&mut out);
        assert_eq!(out.len(), fit);
        assert!(shard.push_inbox(&big, Some(1448)), "taken: room again");
    }
}
