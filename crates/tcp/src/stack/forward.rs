//! Transparent termination: a listener for connections to *any* destination, as a TUN-based
//! proxy or VPN needs (gVisor's `tcp.Forwarder`, smoltcp's any-IP; on Linux, TPROXY steering
//! SYNs to an `IP_TRANSPARENT` listener). A SYN whose destination is not one of the stack's
//! addresses and that no connection or ordinary listener takes goes to the forwarding
//! listener of its family; the child it makes has the SYN's destination as its local address
//! (`getsockname` is the original destination, as under TPROXY), and everything else about
//! it — SYN queue and backlog, SYN cookies under flood, accept — is an ordinary listener's.
//! A user rule ([`ForwardFilter`]) may accept, reset or drop each new connection by its
//! addresses before any state is made for it, or defer it: the SYN is then held unanswered
//! until the application, which takes it with [`Stack::forward_request`], has tried the
//! destination and says with [`Stack::forward_complete`] what a router on the way would
//! have let the client see — the SYN-ACK, a RST (refused), or nothing (the client's SYN
//! retransmits then bring a new request). Retransmitted SYNs of a held connection are
//! ignored; a RST from the client ends it; one the application has not taken within the
//! initial RTO (1 s) is forgotten, so a flood the application cannot keep up with costs it
//! nothing once the SYN queue is full and SYN cookies answer. Under a SYN flood, when the SYN queue is full and
//! SYN cookies answer, a connection is accepted without asking.

use super::*;
use crate::socket::Deferral;
use crate::timer::{RtxEvent, TimerKind};
use shallow_wire::TcpFlags;

/// What to do with a SYN for a forwarded destination (see [`ForwardFilter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardVerdict {
    /// Handle it as the forwarding listener's SYN (SYN-ACK, or a SYN cookie under flood).
    Accept,
    /// Answer with a RST|ACK, as a closed port does (the client sees `ECONNREFUSED`).
    Reset,
    /// Drop it silently (the client retries its SYN, then times out).
    Drop,
    /// Hold it unanswered for the application to decide ([`Stack::forward_request`],
    /// [`Stack::forward_complete`]).
    Defer,
}

/// The application's answer to a held SYN ([`Stack::forward_complete`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardCompletion {
    /// Send the SYN-ACK: the connection goes on as an accepted one, and once established it
    /// is the application's socket (it wakes with `POLLOUT`, as a connect does).
    Accept,
    /// Answer the SYN with a RST|ACK (the client sees `ECONNREFUSED`) and forget it.
    Reset,
    /// Forget it without a word (the client's next SYN retransmission asks again).
    Drop,
}

/// A rule on new forwarded connections: called with (source, original destination) of each
/// SYN that would reach a forwarding listener. It runs on the engine's input path, so it must
/// be quick and must not call back into the stack.
pub type ForwardFilter =
    std::sync::Arc<dyn Fn(SocketAddr, SocketAddr) -> ForwardVerdict + Send + Sync>;

/// A held connection taken by [`Stack::forward_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeldSyn {
    /// Its socket, now the application's: answer with [`Stack::forward_complete`], or close.
    pub socket: SocketId,
    /// The client's address (in the listener's family).
    pub source: SocketAddr,
    /// The original destination (in the listener's family).
    pub original_dst: SocketAddr,
    /// The client's initial sequence number: what an ICMP error about the SYN quotes
    /// (RFC 792; the client checks it, as `tcp_v4_err` does).
    pub client_isn: u32,
}

/// The forwarding listeners (one per wire family) and the user's rule.
#[derive(Default, Clone)]
pub(crate) struct Forward {
    /// The listener for IPv4 destinations (an AF_INET one, or a dual-stack AF_INET6 one).
    v4: Option<SocketId>,
    /// The listener for IPv6 destinations.
    v6: Option<SocketId>,
    /// The user's rule; `None` accepts every connection.
    filter: Option<ForwardFilter>,
}

impl core::fmt::Debug for Forward {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Forward")
            .field("v4", &self.v4)
            .field("v6", &self.v6)
            .field("filter", &self.filter.is_some())
            .finish()
    }
}

impl Forward {
    /// The forwarding listener for destination `ip`, if any.
    pub(crate) fn listener(&self, ip: IpAddr) -> Option<SocketId> {
        match ip {
            IpAddr::V4(_) => self.v4,
            IpAddr::V6(_) => self.v6,
        }
    }

    /// Whether `l` is a forwarding listener.
    pub(crate) fn holds(&self, l: SocketId) -> bool {
        self.v4 == Some(l) || self.v6 == Some(l)
    }
}

/// **Transparent termination** (socket calls and configuration).
impl Stack {
    /// Makes the unbound socket `s` a listener for connections to any destination that is
    /// not one of the stack's addresses (see the module doc): an AF_INET socket takes IPv4
    /// destinations, an AF_INET6 one IPv6 destinations and — unless `IPV6_V6ONLY` — IPv4 ones
    /// (a dual-stack listener; an AF_INET forwarding listener set before or after takes
    /// precedence for IPv4). `backlog` is `listen(2)`'s. Its local address stays the
    /// unspecified one with port 0; accepted children have the original destination as their
    /// local address. `EINVAL` if `s` is bound or not a fresh socket, `EADDRINUSE` if its
    /// family's destinations already have a forwarding listener.
    pub fn listen_any(&mut self, s: SocketId, backlog: i32) -> Result<(), Errno> {
        let (state, bound, family, v6only) = {
            let sk = self.sock(s)?;
            (sk.state, sk.bound, sk.family, sk.opts.v6only)
        };
        if bound || state != TcpState::Close {
            return Err(Errno::EINVAL);
        }
        match family {
            Family::V4 if self.forward.v4.is_some_and(|l| self.is_v4_listener(l)) => {
                return Err(Errno::EADDRINUSE)
            }
            Family::V6 if self.forward.v6.is_some() => return Err(Errno::EADDRINUSE),
            _ => {}
        }
        let sk = self.sock_mut(s)?;
        sk.local = SocketAddr::new(family.unspecified(), 0);
        sk.bound = true;
        sk.state = TcpState::Listen;
        sk.listen = Some(Box::new(Listen {
            backlog: backlog.clamp(0, 4096) as u32,
            ..Default::default()
        }));
        match family {
            Family::V4 => self.forward.v4 = Some(s),
            Family::V6 => {
                self.forward.v6 = Some(s);
                if !v6only && self.forward.v4.is_none() {
                    self.forward.v4 = Some(s);
                }
            }
        }
        Ok(())
    }

    /// Sets the rule that accepts, resets or drops each new forwarded connection by its
    /// addresses (`None`, the default, accepts all). Connections already made are not
    /// affected.
    pub fn set_forward_filter(&mut self, filter: Option<ForwardFilter>) {
        self.forward.filter = filter;
    }

    /// Takes the next held connection of forwarding listener `l` ([`ForwardVerdict::Defer`]):
    /// its socket, which is now the application's (close it, or answer with
    /// [`Stack::forward_complete`]), the client's address, the original destination and the
    /// client's ISN ([`HeldSyn`]). `EAGAIN` when none waits (the listener wakes with `POLLIN` when
    /// one comes), `EINVAL` if `l` is not a forwarding listener.
    pub fn forward_request(&mut self, l: SocketId) -> Result<HeldSyn, Errno> {
        if !self.forward.holds(l) {
            return Err(Errno::EINVAL);
        }
        let c = {
            let sk = self.sock_mut(l)?;
            let Some(q) = sk.listen.as_mut() else {
                return Err(Errno::EINVAL);
            };
            let Some(c) = q.requests.pop_front() else {
                return Err(Errno::EAGAIN);
            };
            q.syn_queue.retain(|x| *x != c);
            c
        };
        let (child, env) = self.sk_env(c)?;
        child.parent = None;
        child.deferral = Some(Deferral::Claimed);
        child.disarm(env, TimerKind::Retrans);
        let f = child.family;
        Ok(HeldSyn {
            socket: c,
            source: dualstack::to_api(f, child.remote),
            original_dst: dualstack::to_api(f, child.local),
            client_isn: child.rcv.irs,
        })
    }

    /// Answers the held SYN of connection `s` taken with [`Stack::forward_request`] (see
    /// [`ForwardCompletion`]). After `Reset` or `Drop` the socket is closed (`close` it to
    /// free it). `EINVAL` if `s` is not a held connection, its `SO_ERROR` (`ECONNRESET`) if
    /// the client gave up meanwhile.
    pub fn forward_complete(
        &mut self,
        now: Instant,
        s: SocketId,
        how: ForwardCompletion,
    ) -> Result<(), Errno> {
        self.tick(now);
        let (sk, env) = self.sk_env(s)?;
        if sk.deferral != Some(Deferral::Claimed) {
            if let Some(e) = sk.err.take() {
                return Err(e);
            }
            return Err(Errno::EINVAL);
        }
        match how {
            ForwardCompletion::Accept => {
                sk.deferral = Some(Deferral::Answered);
                sk.send_synack(env, now);
                sk.timer.rtx_event = RtxEvent::Rto;
                sk.rtt.reset_rto();
                sk.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
            }
            ForwardCompletion::Reset | ForwardCompletion::Drop => {
                let (local, remote, ack) = (sk.local, sk.remote, sk.rcv.nxt);
                sk.deferral = None;
                sk.set_closed(env);
                if how == ForwardCompletion::Reset {
                    self.send_reset_to(local, remote, 0, ack, TcpFlags::RST | TcpFlags::ACK);
                }
                self.reap(s);
            }
        }
        Ok(())
    }

    /// A segment for a held connection (called first by `rcv_conn`); true when it was one.
    /// Retransmitted SYNs (and anything else) are ignored while the SYN is unanswered; a
    /// RST ends the connection: a request still queued goes, a taken one is closed with
    /// `ECONNRESET` for the application to see.
    pub(super) fn deferred_rcv(&mut self, id: SocketId, seg: &SegIn<'_>) -> bool {
        let Ok((sk, env)) = self.sk_env(id) else {
            return false;
        };
        match sk.deferral {
            Some(Deferral::Waiting) | Some(Deferral::Claimed) => {}
            _ => return false,
        }
        if seg.has(TcpFlags::RST) && seg.seq == sk.rcv.nxt {
            if sk.deferral == Some(Deferral::Claimed) {
                sk.err = Some(Errno::ECONNRESET);
            }
            sk.deferral = None;
            sk.set_closed(env);
            self.reap(id);
        }
        true
    }

    /// A held and accepted connection became established: it is the application's socket,
    /// woken as a completed connect is (`child_established` asks first).
    pub(super) fn deferred_established(&mut self, id: SocketId) -> bool {
        let Ok((sk, env)) = self.sk_env(id) else {
            return false;
        };
        if sk.deferral != Some(Deferral::Answered) {
            return false;
        }
        sk.deferral = None;
        env.mib.inc(Mib::PassiveOpens);
        env.out.wake(id, POLLOUT | POLLWRNORM);
        true
    }

    /// Whether `ip` is a destination this stack terminates: one of its addresses (or any,
    /// for a stack without addresses), or any other with a forwarding listener of its family.
    pub(super) fn accepts_dst(&self, ip: IpAddr) -> bool {
        self.addrs.is_empty() || self.addrs.contains(&ip) || self.forward.listener(ip).is_some()
    }

    /// The forwarding listener a segment to `dst` reaches when no ordinary listener does:
    /// only for destinations that are not the stack's own addresses.
    pub(super) fn forward_listener_for(&self, dst: SocketAddr) -> Option<SocketId> {
        if self.addrs.contains(&dst.ip()) {
            return None;
        }
        self.forward.listener(dst.ip())
    }

    /// The user's verdict on a SYN to a forwarded destination.
    pub(super) fn forward_verdict(&self, seg: &SegIn<'_>) -> ForwardVerdict {
        match &self.forward.filter {
            Some(f) => f(seg.src, seg.dst),
            None => ForwardVerdict::Accept,
        }
    }

    /// Forgets socket `s`, which is being freed: a dual-stack AF_INET6 forwarding listener
    /// takes IPv4 destinations back from a closed AF_INET one.
    pub(super) fn forward_forget(&mut self, s: SocketId) {
        if self.forward.v6 == Some(s) {
            self.forward.v6 = None;
        }
        if self.forward.v4 == Some(s) {
            self.forward.v4 = self
                .forward
                .v6
                .filter(|&l| self.sock(l).is_ok_and(|sk| !sk.opts.v6only));
        }
    }

    fn is_v4_listener(&self, l: SocketId) -> bool {
        self.sock(l).is_ok_and(|sk| sk.family == Family::V4)
    }
}
