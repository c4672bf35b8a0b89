//! Held SYNs of a forwarding listener ([`TcpListener::bind_any`](crate::TcpListener::bind_any)
//! with a [`ForwardVerdict::Defer`](shallow_tcp::ForwardVerdict::Defer) rule): the
//! application takes each as a [`ForwardRequest`], tries the original destination, and
//! answers the client as a router on the way would have let it see the destination: the
//! handshake ([`ForwardRequest::accept`], async), a RST ([`ForwardRequest::reset`]), an
//! ICMP destination-unreachable ([`ForwardRequest::unreachable`]), or nothing
//! ([`ForwardRequest::ignore`]: the client's SYN retransmission asks again). Dropping a
//! request ignores it.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use shallow_tcp::{Errno, ForwardCompletion, HeldSyn};
use shallow_wire::checksum;

use crate::net::{Listener, Sock, TcpListener, TcpStream};
use crate::shared::{errno, Want};
use shallow_tcp::TcpState;

/// What a forwarding listener has next: an established connection (accepted without asking,
/// as under a SYN flood when SYN cookies answer) or a held SYN to decide on.
#[derive(Debug)]
pub enum Forwarded {
    /// An established connection and its peer.
    Stream(TcpStream, SocketAddr),
    /// A SYN waiting for the application's answer.
    Request(ForwardRequest),
}

/// Why the destination of a held SYN cannot be reached, for [`ForwardRequest::unreachable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// No route to the destination's network (ICMP type 3 code 0; ICMPv6 type 1 code 0):
    /// the client's connect fails with `ENETUNREACH`.
    Net,
    /// The destination host does not answer (ICMP type 3 code 1; ICMPv6 type 1 code 3):
    /// `EHOSTUNREACH`.
    Host,
}

/// A held SYN taken from a forwarding listener: answer it once (see the module doc).
pub struct ForwardRequest {
    pub(crate) sock: Sock,
    held: HeldSyn,
}

impl std::fmt::Debug for ForwardRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardRequest")
            .field("shard", &self.sock.shard)
            .field("held", &self.held)
            .finish()
    }
}

impl ForwardRequest {
    /// The client's address.
    pub fn source(&self) -> SocketAddr {
        self.held.source
    }

    /// The address the client connects to.
    pub fn original_dst(&self) -> SocketAddr {
        self.held.original_dst
    }

    /// Answers with a RST|ACK, as a closed port does: the client sees `ECONNREFUSED`.
    pub fn reset(self) -> io::Result<()> {
        self.complete(ForwardCompletion::Reset)
    }

    /// Forgets the SYN without a word; the client's retransmission brings a new request (a
    /// destination that does not answer, as a router forwards SYNs that get nothing back).
    pub fn ignore(self) -> io::Result<()> {
        self.complete(ForwardCompletion::Drop)
    }

    /// Answers with an ICMP (ICMPv6) destination-unreachable error quoting the SYN, sent
    /// from the original destination's address, and forgets the SYN: the client's connect
    /// fails with `EHOSTUNREACH` or `ENETUNREACH` (Linux takes ICMP errors in SYN_SENT as
    /// hard errors).
    pub fn unreachable(self, why: Unreachable) -> io::Result<()> {
        let pkt = icmp_unreachable(&self.held, why);
        self.sock.host.raw_sender().send(&pkt)?;
        self.complete(ForwardCompletion::Drop)
    }

    /// Sends the SYN-ACK and blocks until the handshake completes: the connection. Fails
    /// with the socket's error (`ECONNRESET` when the client reset it, `ETIMEDOUT` when the
    /// SYN-ACK retries ran out). The async form is `accept` (feature `tokio`).
    pub fn accept_blocking(self) -> io::Result<TcpStream> {
        let s = self.into_stream()?;
        {
            let sh = &s.sock.host.shared;
            let mut o = sh.own(s.sock.shard, s.sock.id)?;
            loop {
                match o.stack().state(s.sock.id).map_err(errno)? {
                    TcpState::SynRecv => {}
                    TcpState::Close => return Err(closed_error(o.stack(), s.sock.id)),
                    _ => break,
                }
                if sh.stopped() {
                    return Err(crate::shared::netdown());
                }
                o.wait(Want::Any, None)?;
            }
        }
        Ok(s)
    }

    pub(crate) fn complete(&self, how: ForwardCompletion) -> io::Result<()> {
        self.sock
            .call(|st, now, s| st.forward_complete(now, s, how))
    }

    /// Sends the SYN-ACK; the connection is the caller's once the handshake completes.
    pub(crate) fn into_stream(self) -> io::Result<TcpStream> {
        self.complete(ForwardCompletion::Accept)?;
        Ok(TcpStream {
            sock: std::sync::Arc::new(self.sock),
        })
    }
}

/// The error of a held connection that closed before its handshake completed: its
/// `SO_ERROR`, else `ETIMEDOUT` (the SYN-ACK retries ran out).
pub(crate) fn closed_error(st: &mut shallow_tcp::Stack, s: shallow_tcp::SocketId) -> io::Error {
    let e = st
        .getsockopt(s, shallow_tcp::SockOpt::SoError)
        .ok()
        .and_then(|v| v.int().ok())
        .filter(|v| *v != 0)
        .map_or(Errno::ETIMEDOUT.code(), |v| v as i32);
    io::Error::from_raw_os_error(e)
}

impl TcpListener {
    /// The next thing a forwarding listener ([`TcpListener::bind_any`]) has, blocking until
    /// one comes (unless non-blocking: `WouldBlock`): a held SYN to decide on
    /// ([`Forwarded::Request`], under a [`ForwardVerdict::Defer`] rule) or an established
    /// connection ([`Forwarded::Stream`]). Use this instead of `accept` on such a listener.
    ///
    /// [`ForwardVerdict::Defer`]: shallow_tcp::ForwardVerdict::Defer
    pub fn next_forwarded(&self) -> io::Result<Forwarded> {
        let l = &self.inner;
        let sh = &l.host().shared;
        loop {
            let gen0 = l.wait.gen();
            if let Some(f) = l.forwarded_any(None)? {
                return Ok(f);
            }
            if l.is_nonblocking() {
                return Err(errno(Errno::EAGAIN));
            }
            if sh.stopped() {
                return Err(crate::shared::netdown());
            }
            l.wait.wait(gen0, &sh.stop, None);
        }
    }
}

impl Listener {
    /// One non-blocking look at shard `k`'s forwarding socket: a held SYN first, then an
    /// established connection; with `waker`, a look that finds neither registers it as the
    /// socket's read waker before releasing it (so neither kind is missed).
    pub(crate) fn try_forwarded(
        &self,
        k: usize,
        waker: Option<&std::task::Waker>,
    ) -> io::Result<Option<Forwarded>> {
        let ls = &self.socks[k];
        let sh = &ls.host.shared;
        let mut o = sh.own(k, ls.id)?;
        match o.stack().forward_request(ls.id) {
            Ok(held) => {
                o.inner().add_slot(held.socket);
                drop(o);
                let sock = Sock {
                    host: ls.host.clone(),
                    shard: k,
                    id: held.socket,
                };
                return Ok(Some(Forwarded::Request(ForwardRequest { sock, held })));
            }
            Err(Errno::EAGAIN) => {}
            Err(e) => return Err(errno(e)),
        }
        drop(o);
        match self.try_accept(k, waker)? {
            Some((s, peer)) => Ok(Some(Forwarded::Stream(s, peer))),
            None => Ok(None),
        }
    }

    /// [`Listener::try_forwarded`] on every shard, starting at the next in turn.
    pub(crate) fn forwarded_any(
        &self,
        waker: Option<&std::task::Waker>,
    ) -> io::Result<Option<Forwarded>> {
        let n = self.socks.len();
        let start = self.next_shard();
        for i in 0..n {
            if let Some(f) = self.try_forwarded((start + i) % n, waker)? {
                return Ok(Some(f));
            }
        }
        Ok(None)
    }
}

/// The ICMP (ICMPv6) destination-unreachable error a router would send about `held`'s SYN:
/// from the original destination to the client, quoting an IP header and the first 8 bytes
/// of the TCP header (ports and the client's ISN) as RFC 792 / RFC 4443 §3.1 ask.
fn icmp_unreachable(held: &HeldSyn, why: Unreachable) -> Vec<u8> {
    let (src, dst) = (
        shallow_tcp::dualstack::unmapped(held.source),
        shallow_tcp::dualstack::unmapped(held.original_dst),
    );
    let mut tcp8 = Vec::with_capacity(8);
    tcp8.extend_from_slice(&src.port().to_be_bytes());
    tcp8.extend_from_slice(&dst.port().to_be_bytes());
    tcp8.extend_from_slice(&held.client_isn.to_be_bytes());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(c), IpAddr::V4(d)) => {
            // The quoted SYN: a 20-byte IPv4 header (a 40-byte SYN without options is as
            // good as any: the client matches on addresses, ports and sequence).
            let quoted_ip = ipv4_header(c, d, 6, 40);
            let mut icmp = vec![
                3,
                if why == Unreachable::Host { 1 } else { 0 },
                0,
                0,
                0,
                0,
                0,
                0,
            ];
            icmp.extend_from_slice(&quoted_ip);
            icmp.extend_from_slice(&tcp8);
            let sum = checksum::internet(&icmp);
            icmp[2..4].copy_from_slice(&sum.to_be_bytes());
            let mut pkt = ipv4_header(d, c, 1, 20 + icmp.len());
            pkt.extend_from_slice(&icmp);
            pkt
        }
        (IpAddr::V6(c), IpAddr::V6(d)) => {
            let quoted_ip = ipv6_header(c, d, 6, 20);
            let code = if why == Unreachable::Host { 3 } else { 0 };
            let mut icmp = vec![1, code, 0, 0, 0, 0, 0, 0];
            icmp.extend_from_slice(&quoted_ip);
            icmp.extend_from_slice(&tcp8);
            let ph = checksum::pseudo_header(d.into(), c.into(), 58, icmp.len() as u32);
            let sum = checksum::combine(&[ph, checksum::sum(&icmp)]);
            icmp[2..4].copy_from_slice(&sum.to_be_bytes());
            let mut pkt = ipv6_header(d, c, 58, icmp.len());
            pkt.extend_from_slice(&icmp);
            pkt
        }
        _ => Vec::new(),
    }
}

/// A 20-byte IPv4 header (DF, TTL 64, its checksum) for `total` bytes.
fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, total: usize) -> Vec<u8> {
    let mut h = vec![0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[6] = 0x40;
    h[8] = 64;
    h[9] = proto;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let sum = checksum::internet(&h);
    h[10..12].copy_from_slice(&sum.to_be_bytes());
    h
}

/// A 40-byte IPv6 header (hop limit 64) for `payload` bytes.
fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, next: u8, payload: usize) -> Vec<u8> {
    let mut h = vec![0u8; 40];
    h[0] = 0x60;
    h[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    h[6] = next;
    h[7] = 64;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use shallow_wire::{Icmpv4Repr, Icmpv6Repr};

    fn held(src: &str, dst: &str) -> HeldSyn {
        HeldSyn {
            socket: shallow_tcp::Stack::new(1)
                .socket(shallow_tcp::Family::V4)
                .unwrap(),
            source: src.parse().unwrap(),
            original_dst: dst.parse().unwrap(),
            client_isn: 0x0102_0304,
        }
    }

    #[test]
    fn icmp_errors_parse_with_valid_checksums_and_quote_the_syn() {
        let p = icmp_unreachable(&held("10.0.0.1:40000", "192.0.2.9:80"), Unreachable::Host);
        assert_eq!(checksum::internet(&p[..20]), 0, "IPv4 header checksum");
        assert_eq!(&p[12..16], &[192, 0, 2, 9]);
        assert_eq!(&p[16..20], &[10, 0, 0, 1]);
        let r = Icmpv4Repr::parse(&p[20..]).expect("a valid ICMP message");
        assert_eq!(r.type_code(), (3, 1));
        // The quoted TCP header: ports and ISN.
        assert_eq!(&p[48..56], &[0x9c, 0x40, 0, 80, 1, 2, 3, 4]);
        let p = icmp_unreachable(
            &held("[::ffff:10.0.0.1]:40000", "[::ffff:192.0.2.9]:80"),
            Unreachable::Net,
        );
        assert_eq!(Icmpv4Repr::parse(&p[20..]).unwrap().type_code(), (3, 0));
        let p = icmp_unreachable(
            &held("[fd00::1]:40000", "[2001:db8::9]:443"),
            Unreachable::Host,
        );
        let (s, d): (Ipv6Addr, Ipv6Addr) =
            ("2001:db8::9".parse().unwrap(), "fd00::1".parse().unwrap());
        let r = Icmpv6Repr::parse(&p[40..], s, d).expect("a valid ICMPv6 message");
        assert_eq!(r.type_code(), (1, 3));
    }
}
