//! Transparent termination: a listener for connections to *any* destination, as a TUN-based
//! proxy or VPN needs (gVisor's `tcp.Forwarder`, smoltcp's any-IP; on Linux, TPROXY steering
//! SYNs to an `IP_TRANSPARENT` listener). A SYN whose destination is not one of the stack's
//! addresses and that no connection or ordinary listener takes goes to the forwarding
//! listener of its family; the child it makes has the SYN's destination as its local address
//! (`getsockname` is the original destination, as under TPROXY), and everything else about
//! it — SYN queue and backlog, SYN cookies under flood, accept — is an ordinary listener's.
//! A user rule ([`ForwardFilter`]) may accept, reset or drop each new connection by its
//! addresses before any state is made for it.

use super::*;

/// What to do with a SYN for a forwarded destination (see [`ForwardFilter`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardVerdict {
    /// Handle it as the forwarding listener's SYN (SYN-ACK, or a SYN cookie under flood).
    Accept,
    /// Answer with a RST|ACK, as a closed port does (the client sees `ECONNREFUSED`).
    Reset,
    /// Drop it silently (the client retries its SYN, then times out).
    Drop,
}

/// A rule on new forwarded connections: called with (source, original destination) of each
/// SYN that would reach a forwarding listener. It runs on the engine's input path, so it must
/// be quick and must not call back into the stack.
pub type ForwardFilter =
    std::sync::Arc<dyn Fn(SocketAddr, SocketAddr) -> ForwardVerdict + Send + Sync>;

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
