//! Dual-stack sockets: an AF_INET6 socket that talks to IPv4 peers through IPv4-mapped
//! IPv6 addresses (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2; the API of RFC 3493 §3.7 and the
//! transition notes of RFC 4038 §4.2), as Linux's `tcp_v6` does with `IPV6_V6ONLY` off
//! (`net.ipv6.bindv6only` = 0, the default).
//!
//! Every rule of the mapping lives here. Inside the engine a connection's addresses are
//! always the ones on the wire: an AF_INET6 socket connected to a mapped peer keeps IPv4
//! addresses in `Connection::local`/`Connection::remote`, so its packets carry an IPv4 header and its
//! MSS follows the IPv4 path (Linux switches such a socket to its `ipv6_mapped` operations,
//! whose network header is an IPv4 header). Addresses cross the socket API in the socket's
//! own family: [`to_api`] on the way out (getsockname, getpeername, accept), `to_wire` on
//! the way in (bind, connect).
//!
//! The rules below were measured on Linux 6.18 (a python3 script in a network namespace):
//!
//! | call on an AF_INET6 socket                          | result                       |
//! |-----------------------------------------------------|------------------------------|
//! | `bind(::ffff:a.b.c.d)` with `IPV6_V6ONLY`           | EINVAL                       |
//! | `bind(::ffff:a.b.c.d)`, a.b.c.d not local           | EADDRNOTAVAIL                |
//! | `connect(::ffff:a.b.c.d)` with `IPV6_V6ONLY`        | ENETUNREACH                  |
//! | `connect(::ffff:…)` when bound to a non-mapped IPv6 | ENETUNREACH                  |
//! | `connect(IPv6)` when bound to a mapped address      | EAFNOSUPPORT                 |
//! | `setsockopt(IPV6_V6ONLY)` once a port is bound      | EINVAL                       |
//! | any `IPPROTO_IPV6` option on an AF_INET socket      | set ENOPROTOOPT, get EOPNOTSUPP |
//! | `IP_TOS` / `IPV6_TCLASS` on an AF_INET6 socket      | two values; IPv4 packets carry IP_TOS |
//! | IPv4 SYN to a `::` listener with `IPV6_V6ONLY`      | RST (ECONNREFUSED)           |
//!
//! Bind conflicts (`BindScope::overlaps`) were measured for every pair of v4 `0.0.0.0`,
//! v4 address, v6 `::` (with and without `IPV6_V6ONLY`), v6 address (with and without),
//! v6 mapped address and v6 `::ffff:0.0.0.0`, in both orders: two binds conflict exactly
//! when the sets of destinations they receive for overlap (Linux `inet_rcv_saddr_equal`).

use core::net::{IpAddr, Ipv4Addr, SocketAddr};

use crate::errno::Errno;
use crate::socket::Family;

/// The IPv4 address inside an IPv4-mapped IPv6 address (RFC 4291 §2.5.5.2), if it is one.
pub fn mapped_v4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V6(a) => a.to_ipv4_mapped(),
        IpAddr::V4(_) => None,
    }
}

/// A socket address as it is on the wire: an IPv4-mapped IPv6 one (an AF_INET6 socket's
/// name for an IPv4 peer) as plain IPv4, any other as it is.
pub fn unmapped(addr: SocketAddr) -> SocketAddr {
    match mapped_v4(addr.ip()) {
        Some(v4) => SocketAddr::new(IpAddr::V4(v4), addr.port()),
        None => addr,
    }
}

/// Which socket call converts an address (they fail differently).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// `bind()` (`inet6_bind`: a mapped address on a V6ONLY socket is EINVAL).
    Bind,
    /// `connect()` (`tcp_v6_connect`: a mapped peer on a V6ONLY socket is ENETUNREACH).
    Connect,
}

/// An address given to `bind`/`connect` on a socket of `family`, as the engine keeps it: the
/// address on the wire. An IPv4-mapped address on an AF_INET6 socket becomes its IPv4
/// address (unless the socket is `IPV6_V6ONLY`); an address of the other family is
/// EAFNOSUPPORT.
pub(crate) fn to_wire(
    family: Family,
    v6only: bool,
    call: Call,
    addr: SocketAddr,
) -> Result<SocketAddr, Errno> {
    match (family, addr.ip()) {
        (Family::V4, IpAddr::V4(_)) => Ok(addr),
        (Family::V6, IpAddr::V6(a)) => match a.to_ipv4_mapped() {
            None => Ok(addr),
            Some(_) if v6only => Err(match call {
                Call::Bind => Errno::EINVAL,
                Call::Connect => Errno::ENETUNREACH,
            }),
            Some(v4) => Ok(SocketAddr::new(IpAddr::V4(v4), addr.port())),
        },
        _ => Err(Errno::EAFNOSUPPORT),
    }
}

/// An engine (wire) address as the socket API of a `family` socket shows it: an IPv4
/// address of an AF_INET6 socket in its IPv4-mapped form (getsockname, getpeername, accept).
pub fn to_api(family: Family, addr: SocketAddr) -> SocketAddr {
    match (family, addr.ip()) {
        (Family::V6, IpAddr::V4(a)) => SocketAddr::new(IpAddr::V6(a.to_ipv6_mapped()), addr.port()),
        _ => addr,
    }
}

/// `connect()` from a socket bound to `bound` (wire form) towards `remote` (wire form): an
/// AF_INET6 socket bound to a plain IPv6 address cannot reach a mapped peer
/// (ENETUNREACH), one bound to a mapped address cannot reach an IPv6 peer (EAFNOSUPPORT).
pub(crate) fn connect_check(bound: Option<IpAddr>, remote: IpAddr) -> Result<(), Errno> {
    match (bound, remote) {
        (Some(b), r) if b.is_unspecified() => {
            // `::` reaches both; an AF_INET6 socket bound to ::ffff:0.0.0.0 only IPv4.
            if b.is_ipv4() && r.is_ipv6() {
                Err(Errno::EAFNOSUPPORT)
            } else {
                Ok(())
            }
        }
        (Some(IpAddr::V6(_)), IpAddr::V4(_)) => Err(Errno::ENETUNREACH),
        (Some(IpAddr::V4(_)), IpAddr::V6(_)) => Err(Errno::EAFNOSUPPORT),
        _ => Ok(()),
    }
}

/// The destinations a bound socket receives for, by its local (wire) address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindScope {
    /// Every IPv4 address (AF_INET `0.0.0.0`, or AF_INET6 `::ffff:0.0.0.0`).
    AnyV4,
    /// One IPv4 address (AF_INET, or AF_INET6 bound to its mapped form).
    V4(Ipv4Addr),
    /// Every IPv6 address (`::` with `IPV6_V6ONLY`).
    AnyV6,
    /// One IPv6 address.
    V6(core::net::Ipv6Addr),
    /// Every IPv4 and IPv6 address (`::` without `IPV6_V6ONLY`: dual stack).
    Any,
}

impl BindScope {
    /// The scope of a socket bound to `local` (wire form); `v6only` is its `IPV6_V6ONLY`.
    pub(crate) fn of(local: IpAddr, v6only: bool) -> BindScope {
        match local {
            IpAddr::V4(a) if a.is_unspecified() => BindScope::AnyV4,
            IpAddr::V4(a) => BindScope::V4(a),
            IpAddr::V6(a) if a.is_unspecified() && v6only => BindScope::AnyV6,
            IpAddr::V6(a) if a.is_unspecified() => BindScope::Any,
            IpAddr::V6(a) => BindScope::V6(a),
        }
    }

    /// Whether two binds of one port collide (Linux `inet_rcv_saddr_equal` with wildcards;
    /// symmetric on 6.18, as measured).
    pub(crate) fn overlaps(self, other: BindScope) -> bool {
        use BindScope::*;
        match (self, other) {
            (Any, _) | (_, Any) => true,
            (AnyV4, AnyV4 | V4(_)) | (V4(_), AnyV4) => true,
            (V4(a), V4(b)) => a == b,
            (AnyV6, AnyV6 | V6(_)) | (V6(_), AnyV6) => true,
            (V6(a), V6(b)) => a == b,
            _ => false,
        }
    }

    /// Whether a listener of this scope receives SYNs for `dst`.
    pub(crate) fn receives(self, dst: IpAddr) -> bool {
        match dst {
            IpAddr::V4(a) => self.overlaps(BindScope::V4(a)),
            IpAddr::V6(a) => self.overlaps(BindScope::V6(a)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv6Addr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn mapped_addresses_convert_both_ways() {
        let m = sa("[::ffff:192.0.2.1]:80");
        let w = to_wire(Family::V6, false, Call::Connect, m).unwrap();
        assert_eq!(w, sa("192.0.2.1:80"));
        assert_eq!(to_api(Family::V6, w), m);
        assert_eq!(to_api(Family::V4, w), w);
        assert_eq!(to_wire(Family::V6, true, Call::Bind, m), Err(Errno::EINVAL));
        assert_eq!(
            to_wire(Family::V6, true, Call::Connect, m),
            Err(Errno::ENETUNREACH)
        );
        assert_eq!(
            to_wire(Family::V4, false, Call::Bind, m),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(
            to_wire(Family::V6, false, Call::Bind, sa("1.2.3.4:5")),
            Err(Errno::EAFNOSUPPORT)
        );
        assert_eq!(mapped_v4(IpAddr::V6(Ipv6Addr::LOCALHOST)), None);
    }

    /// The bind matrix measured on Linux 6.18 (see the module docs): rows bound first.
    #[test]
    fn bind_scopes_overlap_as_linux() {
        let v4any = BindScope::of("0.0.0.0".parse().unwrap(), false);
        let v4 = BindScope::of("127.0.0.1".parse().unwrap(), false);
        let any = BindScope::of("::".parse().unwrap(), false);
        let any6 = BindScope::of("::".parse().unwrap(), true);
        let v6 = BindScope::of("::1".parse().unwrap(), false);
        let v6b = BindScope::of("::1".parse().unwrap(), true);
        let all = [v4any, v4, any, any6, v6, v6b];
        let expect = [
            // v4any, v4, ::, :: v6only, ::1, ::1 v6only
            [true, true, true, false, false, false],
            [true, true, true, false, false, false],
            [true, true, true, true, true, true],
            [false, false, true, true, true, true],
            [false, false, true, true, true, true],
            [false, false, true, true, true, true],
        ];
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                assert_eq!(a.overlaps(*b), expect[i][j], "{a:?} then {b:?}");
            }
        }
        assert!(any.receives("192.0.2.1".parse().unwrap()));
        assert!(!any6.receives("192.0.2.1".parse().unwrap()));
    }
}
