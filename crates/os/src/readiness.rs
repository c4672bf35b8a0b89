//! The readiness set of a [`Poller`](crate::Poller), kept under the host's pollers mutex
//! (taken after a shard's engine mutex, never before one): its registrations, its ready list
//! and the condition variable its `wait` sleeps on. The engine's wake-ups reach it through
//! the dispatch of the shard that drained them (`ep_poll_callback`); the public API is in
//! `poller.rs`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar};

use shallow_tcp::{pollbits, SocketId};

/// Counters of a poller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollerStats {
    /// Engine wake-ups of registered sockets that matched their interest (each one is an
    /// `ep_poll_callback`).
    pub wakeups: u64,
    /// Calls of `wait`.
    pub waits: u64,
    /// Times a `wait` went to sleep (no socket was ready).
    pub sleeps: u64,
    /// Events reported.
    pub events: u64,
}

/// A socket of a host: (shard, the shard engine's socket id).
pub(crate) type SockRef = (usize, SocketId);

#[derive(Debug, Clone, Copy)]
pub(crate) struct Reg {
    /// The registered source's first socket: a listener has one socket per shard, reported
    /// as one event.
    pub src: SockRef,
    /// The token given at registration.
    pub token: usize,
    /// Poll bits of interest.
    pub interest: u32,
    /// Edge-triggered.
    pub edge: bool,
}

/// A poller's state, kept under the host's pollers mutex.
pub(crate) struct PollerState {
    /// Registrations by socket.
    pub regs: HashMap<SockRef, Reg>,
    /// Sockets to poll at the next `wait`, in order.
    pub ready: VecDeque<SockRef>,
    /// The sockets on `ready`.
    pub queued: HashSet<SockRef>,
    /// Where `wait` sleeps (with the pollers mutex).
    pub cv: Arc<Condvar>,
    /// A `wait` sleeps on `cv`.
    pub sleeping: bool,
    /// `Poller::notify` was called.
    pub notified: bool,
    /// Counters.
    pub stats: PollerStats,
}

/// Poll bits reported whatever the interest (as epoll does).
pub(crate) const ALWAYS: u32 = pollbits::POLLERR | pollbits::POLLHUP;

impl PollerState {
    /// An empty set.
    pub fn new() -> PollerState {
        PollerState {
            regs: HashMap::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            cv: Arc::new(Condvar::new()),
            sleeping: false,
            notified: false,
            stats: PollerStats::default(),
        }
    }

    /// Puts `s` on the ready list (once).
    pub fn enqueue(&mut self, s: SockRef) {
        if self.queued.insert(s) {
            self.ready.push_back(s);
        }
    }

    /// `ep_poll_callback`: a wake-up of `s` with `events`.
    pub fn on_wakeup(&mut self, s: SockRef, events: u32) {
        let Some(r) = self.regs.get(&s) else { return };
        if events & (r.interest | ALWAYS) == 0 {
            return;
        }
        self.stats.wakeups += 1;
        self.enqueue(s);
        if self.sleeping {
            self.cv.notify_all();
        }
    }

    /// The socket was closed: drop its registration.
    pub fn forget(&mut self, s: SockRef) {
        self.regs.remove(&s);
        if self.queued.remove(&s) {
            self.ready.retain(|x| *x != s);
        }
    }

    /// The host stopped: wake a sleeping `wait`.
    pub fn wake_all(&mut self) {
        self.cv.notify_all();
    }
}
