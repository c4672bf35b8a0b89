//! The state an [`Host`](crate::Host)'s threads share: the engine behind its one mutex
//! ([`Shared::lock`]) with the application's socket slots, the pollers' readiness sets and the
//! TX queues; the rules of waiting on a socket ([`Owned`]: Linux's `lock_sock`,
//! `release_sock`, `sk_wait_event`) and of waking its waiters ([`Inner::dispatch`]); the
//! host's counters. See [`crate::host`] for the threading model.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use shallow_tcp::{pollbits, Errno, Instant, SocketId, Stack};

use crate::egress::OsDriver;
use crate::hook::HookState;
use crate::readiness::PollerState;
use crate::wake::Waker;

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
    /// Packets the packet hook dropped ([`Host::set_packet_hook`](crate::Host::set_packet_hook)).
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
    /// The engine with the egress qdisc of each device queue (Linux's `mq` children), whose
    /// admission it asks at the transmit (`shallow_tcp::driver`).
    pub driver: OsDriver,
    slots: Vec<Option<Slot>>,
    /// Readiness sets, by poller id.
    pub pollers: Vec<Option<PollerState>>,
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
    /// The shared state of a host over `driver` (the engine and its egress qdiscs) with one
    /// device queue per waker in `wakers`; time starts now.
    pub fn new(driver: OsDriver, wakers: Vec<Waker>) -> Shared {
        let n = wakers.len();
        Shared {
            inner: Mutex::new(Inner {
                driver,
                slots: Vec::new(),
                pollers: Vec::new(),
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
        }
    }

    pub fn now(&self) -> Instant {
        Instant::ZERO + self.epoch.elapsed()
    }

    /// The packet hook's state, locked, once a hook has been installed (`None` before, so
    /// that the I/O threads skip the hook's mutex on hosts that never had one). Taken by the
    /// I/O threads with the engine mutex held.
    pub fn lock_hook(&self) -> Option<MutexGuard<'_, HookState>> {
        if self.hooked.load(Ordering::Relaxed) {
            Some(self.hook.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        }
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
    /// Drops the engine mutex while keeping the socket owned, as between the chunks of a
    /// long call (for tests of the backlog); [`Owned::relock`] takes it again.
    #[cfg(test)]
    pub(crate) fn unlock(&mut self) {
        drop(self.g.take());
    }

    /// Takes the engine mutex again after [`Owned::unlock`].
    #[cfg(test)]
    pub(crate) fn relock(&mut self) {
        self.g = Some(self.sh.lock());
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
