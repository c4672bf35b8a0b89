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
use crate::readiness::{PollerState, Reg, SockRef, ALWAYS};
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
    /// The engine socket (a listener's: shard 0's).
    fn socket_id(&self) -> SocketId;
    /// Its host.
    fn source_host(&self) -> &Host;
    /// Its engine sockets, `(shard, socket id)`: one for a stream, one per shard for a
    /// listener (registered together, reported as one event).
    fn source_sockets(&self) -> Vec<(usize, SocketId)>;
}

impl Source for TcpStream {
    fn socket_id(&self) -> SocketId {
        self.socket()
    }
    fn source_host(&self) -> &Host {
        self.host()
    }
    fn source_sockets(&self) -> Vec<(usize, SocketId)> {
        vec![(self.shard(), self.socket())]
    }
}

impl Source for TcpListener {
    fn socket_id(&self) -> SocketId {
        self.socket()
    }
    fn source_host(&self) -> &Host {
        self.host()
    }
    fn source_sockets(&self) -> Vec<(usize, SocketId)> {
        self.sockets()
    }
}

impl Reg {
    fn new(src: SockRef, token: usize, interest: Interest, trigger: Trigger) -> Reg {
        Reg {
            src,
            token,
            interest: interest.0,
            edge: trigger == Trigger::Edge,
        }
    }
}

/// An epoll-like readiness set over the sockets of one [`Host`]. Its state is host-wide
/// (under the host's pollers mutex, which a shard's dispatch takes after the shard's own), so
/// one poller watches sockets of every shard.
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
        let mut ps = host.shared.lock_pollers();
        let st = PollerState::new();
        let id = match ps.iter().position(Option::is_none) {
            Some(i) => {
                ps[i] = Some(st);
                i
            }
            None => {
                ps.push(Some(st));
                ps.len() - 1
            }
        };
        Poller {
            host: host.clone(),
            id,
        }
    }

    fn check(&self, src: &impl Source) -> io::Result<Vec<SockRef>> {
        if !Arc::ptr_eq(&src.source_host().shared, &self.host.shared) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(src.source_sockets())
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
        let socks = self.check(src)?;
        let sh = &self.host.shared;
        let first = socks[0];
        for (i, r) in socks.iter().enumerate() {
            // Shard first, then the pollers (the lock order).
            let mut g = sh.lock(r.0);
            let slot = g.slot_mut(r.1).ok_or_else(ebadf)?;
            let mut ps = sh.lock_pollers();
            let st = ps[self.id].as_mut().expect("own poller");
            if st.regs.contains_key(r) {
                if i == 0 {
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                continue;
            }
            if !slot.pollers.contains(&self.id) {
                slot.pollers.push(self.id);
            }
            st.regs
                .insert(*r, Reg::new(first, token, interest, trigger));
            st.enqueue(*r);
        }
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
        let socks = self.check(src)?;
        let mut ps = self.host.shared.lock_pollers();
        let st = ps[self.id].as_mut().expect("own poller");
        for r in &socks {
            let reg = st
                .regs
                .get_mut(r)
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))?;
            *reg = Reg::new(socks[0], token, interest, trigger);
            st.enqueue(*r);
        }
        Ok(())
    }

    /// Removes a registration (`EPOLL_CTL_DEL`; `ENOENT` if not registered).
    pub fn deregister(&self, src: &impl Source) -> io::Result<()> {
        let socks = self.check(src)?;
        let sh = &self.host.shared;
        for (i, r) in socks.iter().enumerate() {
            let mut g = sh.lock(r.0);
            {
                let mut ps = sh.lock_pollers();
                let st = ps[self.id].as_mut().expect("own poller");
                if !st.regs.contains_key(r) {
                    if i == 0 {
                        return Err(io::Error::from_raw_os_error(libc::ENOENT));
                    }
                    continue;
                }
                st.forget(*r);
            }
            if let Some(slot) = g.slot_mut(r.1) {
                slot.pollers.retain(|p| *p != self.id);
            }
        }
        Ok(())
    }

    /// Waits until at least one registered socket is ready, [`Poller::notify`] is called,
    /// or `timeout` passes (`None`: no limit; `Some(ZERO)`: just look). Fills `events` (at most
    /// its capacity) and returns how many. `ENETDOWN` when the host has stopped.
    ///
    /// The ready list is taken under the pollers mutex, each listed socket polled under its
    /// shard's mutex (the pollers mutex dropped: shard before pollers), and the wait sleeps
    /// only if, under the pollers mutex again, the ready list is still empty: a wake-up that
    /// came while the sockets were polled has put its socket back on the list.
    pub fn wait(&self, events: &mut Events, timeout: Option<Duration>) -> io::Result<usize> {
        events.list.clear();
        let sh = &self.host.shared;
        let dl = deadline(timeout);
        // Wake-ups that callers have produced but not yet dispatched.
        for k in 0..sh.shards.len() {
            let mut g = sh.lock(k);
            g.dispatch(sh);
        }
        sh.lock_pollers()[self.id]
            .as_mut()
            .expect("own poller")
            .stats
            .waits += 1;
        let mut srcs: Vec<SockRef> = Vec::new();
        let mut batch: Vec<(SockRef, Reg)> = Vec::new();
        // Level-triggered sockets reported by this wait: listed again when it returns.
        let mut requeue: Vec<SockRef> = Vec::new();
        loop {
            {
                let mut ps = sh.lock_pollers();
                let st = ps[self.id].as_mut().expect("own poller");
                while batch.len() + events.list.len() < events.cap {
                    let Some(s) = st.ready.pop_front() else { break };
                    st.queued.remove(&s);
                    if let Some(r) = st.regs.get(&s) {
                        batch.push((s, *r));
                    }
                }
            }
            for (s, r) in batch.drain(..) {
                let bits = {
                    let mut g = sh.lock(s.0);
                    if g.slot(s.1).is_some() {
                        g.driver.poll(s.1).unwrap_or(ALWAYS)
                    } else {
                        ALWAYS
                    }
                } & (r.interest | ALWAYS);
                if bits == 0 {
                    continue;
                }
                match srcs.iter().position(|x| *x == r.src) {
                    Some(i) => events.list[i].readiness |= bits,
                    None => {
                        srcs.push(r.src);
                        events.list.push(Event {
                            token: r.token,
                            readiness: bits,
                        });
                    }
                }
                if !r.edge {
                    requeue.push(s);
                }
            }
            let mut ps = sh.lock_pollers();
            let st = ps[self.id].as_mut().expect("own poller");
            if events.list.len() < events.cap && !st.ready.is_empty() {
                // More listed sockets to look at.
                continue;
            }
            for s in requeue.drain(..) {
                // Still registered (not forgotten meanwhile)?
                if st.regs.contains_key(&s) {
                    st.enqueue(s);
                }
            }
            let notified = std::mem::take(&mut st.notified);
            if !events.list.is_empty() || notified {
                st.stats.events += events.list.len() as u64;
                return Ok(events.list.len());
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
            st.sleeping = true;
            st.stats.sleeps += 1;
            let cv = Arc::clone(&st.cv);
            let mut ps = match left {
                None => cv.wait(ps).unwrap_or_else(|p| p.into_inner()),
                Some(l) => cv.wait_timeout(ps, l).unwrap_or_else(|p| p.into_inner()).0,
            };
            ps[self.id].as_mut().expect("own poller").sleeping = false;
        }
    }

    /// Makes a current or the next `wait` return (with no events if none is ready), from any
    /// thread.
    pub fn notify(&self) {
        let mut ps = self.host.shared.lock_pollers();
        let st = ps[self.id].as_mut().expect("own poller");
        st.notified = true;
        st.cv.notify_all();
    }

    /// The poller's counters.
    pub fn stats(&self) -> PollerStats {
        let ps = self.host.shared.lock_pollers();
        ps[self.id].as_ref().expect("own poller").stats
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        let sh = &self.host.shared;
        let st = sh.lock_pollers().get_mut(self.id).and_then(Option::take);
        if let Some(st) = st {
            for r in st.regs.keys() {
                if let Some(slot) = sh.lock(r.0).slot_mut(r.1) {
                    slot.pollers.retain(|p| *p != self.id);
                }
            }
        }
    }
}
