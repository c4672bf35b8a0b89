//! A readiness API for non-blocking sockets, like `epoll(7)`: a [`Poller`] holds sockets
//! registered with an [`Interest`] and a [`Trigger`] mode, and [`Poller::wait`] returns the
//! ones that are ready.
//!
//! It is driven the way epoll is: the engine's wake-ups (`sk_data_ready`, `sk_write_space`,
//! `sk_state_change`, drained by whichever thread holds the engine) put the socket on the
//! poller's ready list (`ep_poll_callback`), and `wait` re-polls each listed socket with
//! `Stack::poll` (`tcp_poll`, as `ep_item_poll` does) before it reports it, so an event
//! carries the readiness bits the engine computes at that moment — including the write-space
//! hysteresis of `TCP_NOTSENT_LOWAT` (writable only when unsent bytes are below half of it).
//!
//! Level-triggered registrations stay on the ready list after being reported and are reported
//! again while they poll ready; edge-triggered ones are reported once per wake-up (`EPOLLET`).
//! Errors and hang-ups (`POLLERR`, `POLLHUP`) are always reported, as epoll does.
//!
//! [`Poller::stats`] counts the wake-ups a poller received and the times a `wait` slept and
//! woke, for experiments on wake-up rates.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use shallow_tcp::{pollbits, SocketId};

use crate::host::Host;
use crate::net::{TcpListener, TcpStream};
pub use crate::readiness::PollerStats;
use crate::readiness::{PollerState, Reg, ALWAYS};
use crate::shared::{deadline, ebadf, netdown};

/// What a registration waits for: a set of poll bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Interest(u32);

impl Interest {
    /// Data to read, a connection to accept, or the peer's FIN (`EPOLLIN | EPOLLRDHUP`).
    pub const READABLE: Interest =
        Interest(pollbits::POLLIN | pollbits::POLLRDNORM | pollbits::POLLRDHUP);
    /// Room to write (`EPOLLOUT`).
    pub const WRITABLE: Interest = Interest(pollbits::POLLOUT | pollbits::POLLWRNORM);
    /// Both.
    pub const BOTH: Interest = Interest(Self::READABLE.0 | Self::WRITABLE.0);

    /// The poll bits.
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for Interest {
    type Output = Interest;
    fn bitor(self, rhs: Interest) -> Interest {
        Interest(self.0 | rhs.0)
    }
}

/// Level- or edge-triggered (`EPOLLET`) notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Trigger {
    /// Reported by every `wait` while ready.
    #[default]
    Level,
    /// Reported once per engine wake-up of the socket (when it polls ready then).
    Edge,
}

/// One ready socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The token given at registration.
    pub token: usize,
    /// The poll bits that are set and of interest (plus `POLLERR`/`POLLHUP`), as
    /// `shallow_tcp::pollbits`.
    pub readiness: u32,
}

impl Event {
    /// `POLLIN` (or a hang-up or error, which a read reports).
    pub fn is_readable(&self) -> bool {
        self.readiness & (pollbits::POLLIN | pollbits::POLLHUP | pollbits::POLLERR) != 0
    }
    /// `POLLOUT` (or an error, which a write reports).
    pub fn is_writable(&self) -> bool {
        self.readiness & (pollbits::POLLOUT | pollbits::POLLERR) != 0
    }
    /// `POLLERR`.
    pub fn is_error(&self) -> bool {
        self.readiness & pollbits::POLLERR != 0
    }
    /// `POLLHUP`: both directions are shut.
    pub fn is_hup(&self) -> bool {
        self.readiness & pollbits::POLLHUP != 0
    }
    /// `POLLRDHUP`: the peer shut down writing.
    pub fn is_read_closed(&self) -> bool {
        self.readiness & pollbits::POLLRDHUP != 0
    }
}

/// Room for the events of one [`Poller::wait`].
#[derive(Debug, Clone, Default)]
pub struct Events {
    list: Vec<Event>,
    cap: usize,
}

impl Events {
    /// Room for `n` events per wait (at least one), like `epoll_wait`'s `maxevents`.
    pub fn with_capacity(n: usize) -> Events {
        Events {
            list: Vec::with_capacity(n.max(1)),
            cap: n.max(1),
        }
    }
    /// The events of the last wait.
    pub fn iter(&self) -> std::slice::Iter<'_, Event> {
        self.list.iter()
    }
    /// Number of events.
    pub fn len(&self) -> usize {
        self.list.len()
    }
    /// True when the last wait returned none.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
    /// Capacity per wait.
    pub fn capacity(&self) -> usize {
        self.cap
    }
}

impl<'a> IntoIterator for &'a Events {
    type Item = &'a Event;
    type IntoIter = std::slice::Iter<'a, Event>;
    fn into_iter(self) -> Self::IntoIter {
        self.list.iter()
    }
}

/// Something that can be registered: a [`TcpStream`] or a [`TcpListener`].
pub trait Source {
    /// The engine socket.
    fn socket_id(&self) -> SocketId;
    /// Its host.
    fn source_host(&self) -> &Host;
}

impl Source for TcpStream {
    fn socket_id(&self) -> SocketId {
        self.socket()
    }
    fn source_host(&self) -> &Host {
        self.host()
    }
}

impl Source for TcpListener {
    fn socket_id(&self) -> SocketId {
        self.socket()
    }
    fn source_host(&self) -> &Host {
        self.host()
    }
}

impl Reg {
    fn new(token: usize, interest: Interest, trigger: Trigger) -> Reg {
        Reg {
            token,
            interest: interest.0,
            edge: trigger == Trigger::Edge,
        }
    }
}

/// An epoll-like readiness set over the sockets of one [`Host`].
pub struct Poller {
    host: Host,
    id: usize,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller").field("id", &self.id).finish()
    }
}

impl Poller {
    /// A new, empty poller for `host`'s sockets (`epoll_create`).
    pub fn new(host: &Host) -> Poller {
        let mut g = host.shared.lock();
        let st = PollerState::new();
        let id = match g.pollers.iter().position(Option::is_none) {
            Some(i) => {
                g.pollers[i] = Some(st);
                i
            }
            None => {
                g.pollers.push(Some(st));
                g.pollers.len() - 1
            }
        };
        Poller {
            host: host.clone(),
            id,
        }
    }

    fn check(&self, src: &impl Source) -> io::Result<SocketId> {
        if !Arc::ptr_eq(&src.source_host().shared, &self.host.shared) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(src.socket_id())
    }

    /// Adds `src` with `token` (`EPOLL_CTL_ADD`; `EEXIST` if already registered). A socket
    /// that is ready now is reported by the next `wait`.
    pub fn register(
        &self,
        src: &impl Source,
        token: usize,
        interest: Interest,
        trigger: Trigger,
    ) -> io::Result<()> {
        let s = self.check(src)?;
        let mut g = self.host.shared.lock();
        let slot = g.slot_mut(s).ok_or_else(ebadf)?;
        if !slot.pollers.contains(&self.id) {
            slot.pollers.push(self.id);
        }
        let ps = g.pollers[self.id].as_mut().expect("own poller");
        if ps.regs.contains_key(&s) {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        ps.regs.insert(s, Reg::new(token, interest, trigger));
        ps.enqueue(s);
        Ok(())
    }

    /// Changes a registration (`EPOLL_CTL_MOD`; `ENOENT` if not registered). Like epoll, the
    /// socket is polled again by the next `wait` (an edge-triggered socket that is ready is
    /// reported once more).
    pub fn modify(
        &self,
        src: &impl Source,
        token: usize,
        interest: Interest,
        trigger: Trigger,
    ) -> io::Result<()> {
        let s = self.check(src)?;
        let mut g = self.host.shared.lock();
        let ps = g.pollers[self.id].as_mut().expect("own poller");
        let r = ps
            .regs
            .get_mut(&s)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
        *r = Reg::new(token, interest, trigger);
        ps.enqueue(s);
        Ok(())
    }

    /// Removes a registration (`EPOLL_CTL_DEL`; `ENOENT` if not registered).
    pub fn deregister(&self, src: &impl Source) -> io::Result<()> {
        let s = self.check(src)?;
        let mut g = self.host.shared.lock();
        let ps = g.pollers[self.id].as_mut().expect("own poller");
        if !ps.regs.contains_key(&s) {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        ps.forget(s);
        if let Some(slot) = g.slot_mut(s) {
            slot.pollers.retain(|p| *p != self.id);
        }
        Ok(())
    }

    /// Waits until at least one registered socket is ready, [`Poller::notify`] is called,
    /// or `timeout` passes (`None`: no limit; `Some(ZERO)`: just look). Fills `events` (at most
    /// its capacity) and returns how many. `ENETDOWN` when the host has stopped.
    pub fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        events.list.clear();
        let sh = &self.host.shared;
        let dl = deadline(timeout);
        let mut g = sh.lock();
        g.pollers[self.id].as_mut().expect("own poller").stats.waits += 1;
        loop {
            // Wake-ups that callers have produced but not yet dispatched.
            g.dispatch(&sh.stats);
            let inner = &mut *g;
            let ps = inner.pollers[self.id].as_mut().expect("own poller");
            let mut requeue = Vec::new();
            while events.list.len() < events.cap {
                let Some(s) = ps.ready.pop_front() else { break };
                ps.queued.remove(&s);
                let Some(r) = ps.regs.get(&s).copied() else {
                    continue;
                };
                let bits = inner.driver.poll(s).unwrap_or(ALWAYS) & (r.interest | ALWAYS);
                if bits != 0 {
                    events.list.push(Event {
                        token: r.token,
                        readiness: bits,
                    });
                    if !r.edge {
                        requeue.push(s);
                    }
                }
            }
            for s in requeue {
                ps.enqueue(s);
            }
            let notified = std::mem::take(&mut ps.notified);
            if !events.list.is_empty() || notified {
                ps.stats.events += events.list.len() as u64;
                let n = events.list.len();
                sh.finish(g);
                return Ok(n);
            }
            if sh.stopped() {
                return Err(netdown());
            }
            let left = match dl {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return Ok(0);
                    }
                    Some(left)
                }
            };
            ps.sleeping = true;
            ps.stats.sleeps += 1;
            let cv = Arc::clone(&ps.cv);
            g = match left {
                None => cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(l) => cv.wait_timeout(g, l).unwrap_or_else(|p| p.into_inner()).0,
            };
            g.pollers[self.id].as_mut().expect("own poller").sleeping = false;
        }
    }

    /// Makes a current or the next `wait` return (with no events if none is ready), from any
    /// thread.
    pub fn notify(&self) {
        let mut g = self.host.shared.lock();
        let ps = g.pollers[self.id].as_mut().expect("own poller");
        ps.notified = true;
        ps.cv.notify_all();
    }

    /// The poller's counters.
    pub fn stats(&self) -> PollerStats {
        let g = self.host.shared.lock();
        g.pollers[self.id].as_ref().expect("own poller").stats
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let mut g = self.host.shared.lock();
        if let Some(ps) = g.pollers.get_mut(self.id).and_then(Option::take) {
            for s in ps.regs.keys() {
                if let Some(slot) = g.slot_mut(*s) {
                    slot.pollers.retain(|p| *p != self.id);
                }
            }
        }
    }
}
