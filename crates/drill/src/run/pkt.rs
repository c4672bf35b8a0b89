//! Packets on the runner's "wire": building inbound packets from `<` lines, parsing the
//! stack's outbound packets, software segmentation, and printing both in script syntax.

use std::net::{IpAddr, SocketAddr};

use shallow_wire::{
    IpPacket, IpRepr, Ipv4Repr, Ipv6Repr, TcpFlags, TcpOptionRepr, TcpPacket, TcpRepr,
};

/// An outbound packet taken apart (the fields the matcher compares).
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub win: u16,
    pub urg: u16,
    pub opts: Vec<TcpOptionRepr>,
    pub len: u32,
    pub tos: u8,
    pub ttl: u8,
    pub flowlabel: Option<u32>,
    /// IP header checksum (IPv4) and TCP checksum are valid.
    pub csum_ok: bool,
}

/// Parses an outbound IP packet carrying TCP; `None` for anything else.
pub(crate) fn parse_live(data: &[u8]) -> Option<Live> {
    let ip = IpPacket::parse(data).ok()?;
    if ip.protocol() != shallow_wire::IPPROTO_TCP {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let repr = TcpRepr::parse(&tcp).ok()?;
    let (ip_ok, flowlabel) = match &ip {
        IpPacket::V4(p) => (p.checksum_valid(), None),
        IpPacket::V6(p) => (true, Some(p.flow_label())),
    };
    Some(Live {
        src: SocketAddr::new(ip.src(), repr.src_port),
        dst: SocketAddr::new(ip.dst(), repr.dst_port),
        seq: repr.seq,
        ack: repr.ack,
        flags: repr.flags,
        win: repr.window,
        urg: repr.urgent,
        opts: repr.options,
        len: tcp.payload().len() as u32,
        tos: ip.tos(),
        ttl: ip.ttl(),
        flowlabel,
        csum_ok: ip_ok && tcp.checksum_valid(ip.src(), ip.dst()),
    })
}

/// The IP-level fields of a packet to build.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IpFields {
    pub tos: u8,
    pub ttl: u8,
    pub flowlabel: u32,
    pub ident: u16,
}

/// Builds one IPv4/IPv6 + TCP packet with a zero-filled payload of `len` bytes.
pub(crate) fn build_tcp(
    src: SocketAddr,
    dst: SocketAddr,
    tcp: &TcpRepr,
    len: usize,
    ip: IpFields,
) -> Result<Vec<u8>, String> {
    let tcp_len = tcp.header_len() + len;
    let ip_repr = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            protocol: shallow_wire::IPPROTO_TCP,
            ttl: ip.ttl,
            tos: ip.tos,
            df: true,
            ident: ip.ident,
            payload_len: tcp_len,
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src: s,
            dst: d,
            next_header: shallow_wire::IPPROTO_TCP,
            hop_limit: ip.ttl,
            traffic_class: ip.tos,
            flow_label: ip.flowlabel & 0xf_ffff,
            payload_len: tcp_len,
        }),
        _ => return Err("mixed address families".into()),
    };
    let hl = ip_repr.header_len();
    let mut buf = vec![0u8; hl + tcp_len];
    ip_repr
        .emit(&mut buf)
        .map_err(|e| format!("cannot build IP header: {e}"))?;
    let payload = vec![0u8; len];
    tcp.emit(&mut buf[hl..], &payload, src.ip(), dst.ip())
        .map_err(|e| format!("cannot build TCP header: {e}"))?;
    Ok(buf)
}

/// Cuts a TSO super-segment into wire segments of `gso` payload bytes (what software GSO
/// does when the device has no TSO): sequence numbers advance, FIN and PSH stay on the last
/// segment only, CWR on the first only.
pub(crate) fn segment(data: &[u8], gso: u16) -> Vec<Vec<u8>> {
    let Some(live) = parse_live(data) else {
        return vec![data.to_vec()];
    };
    let gso = u32::from(gso.max(1));
    if live.len <= gso {
        return vec![data.to_vec()];
    }
    let Ok(ip) = IpPacket::parse(data) else {
        return vec![data.to_vec()];
    };
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
        return vec![data.to_vec()];
    };
    let Ok(base) = TcpRepr::parse(&tcp) else {
        return vec![data.to_vec()];
    };
    let ident = match &ip {
        IpPacket::V4(p) => p.ident(),
        IpPacket::V6(_) => 0,
    };
    let count = live.len.div_ceil(gso) as usize;
    let mut out = Vec::new();
    let mut off = 0u32;
    let mut i = 0u16;
    while off < live.len {
        let n = gso.min(live.len - off);
        let mut r = base.clone();
        r.seq = base.seq.wrapping_add(off);
        let k = usize::from(i);
        r.flags = shallow_wire::segment::run_flags(base.flags, k, k, count);
        let fields = IpFields {
            tos: live.tos,
            ttl: live.ttl,
            flowlabel: live.flowlabel.unwrap_or(0),
            ident: ident.wrapping_add(i),
        };
        match build_tcp(live.src, live.dst, &r, n as usize, fields) {
            Ok(p) => out.push(p),
            Err(_) => return vec![data.to_vec()],
        }
        off += n;
        i = i.wrapping_add(1);
    }
    out
}

/// Flags in script syntax (`S.`, `P.`, `F.`, `R`, `.`, `-` for none).
pub(crate) fn flags_str(f: TcpFlags) -> String {
    let mut s = String::new();
    for (bit, c) in [
        (TcpFlags::SYN, 'S'),
        (TcpFlags::FIN, 'F'),
        (TcpFlags::RST, 'R'),
        (TcpFlags::PSH, 'P'),
        (TcpFlags::URG, 'U'),
        (TcpFlags::ECE, 'E'),
        (TcpFlags::CWR, 'W'),
        (TcpFlags::AE, 'A'),
    ] {
        if f.contains(bit) {
            s.push(c);
        }
    }
    if f.contains(TcpFlags::ACK) {
        s.push('.');
    }
    if s.is_empty() {
        s.push('-');
    }
    s
}

/// One option in script syntax.
pub(crate) fn opt_str(o: &TcpOptionRepr) -> String {
    match o {
        TcpOptionRepr::Eol => "eol".into(),
        TcpOptionRepr::Nop => "nop".into(),
        TcpOptionRepr::Mss(m) => format!("mss {m}"),
        TcpOptionRepr::WindowScale(w) => format!("wscale {w}"),
        TcpOptionRepr::SackPermitted => "sackOK".into(),
        TcpOptionRepr::Sack(b) => {
            let blocks: Vec<String> = b.iter().map(|(l, r)| format!("{l}:{r}")).collect();
            format!("sack {}", blocks.join(" "))
        }
        TcpOptionRepr::Timestamps { tsval, tsecr } => format!("TS val {tsval} ecr {tsecr}"),
        TcpOptionRepr::Unknown { kind, data } => {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            format!("{kind} {hex}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shallow_wire::SackBlocks;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn repr(flags: TcpFlags, opts: Vec<TcpOptionRepr>) -> TcpRepr {
        TcpRepr {
            src_port: 8080,
            dst_port: 40000,
            seq: 1000,
            ack: 77,
            flags,
            window: 256,
            urgent: 0,
            options: opts,
        }
    }

    const IP: IpFields = IpFields {
        tos: 2,
        ttl: 64,
        flowlabel: 0,
        ident: 9,
    };

    #[test]
    fn built_packets_parse_back_with_valid_checksums() {
        let ts = TcpOptionRepr::Timestamps { tsval: 5, tsecr: 6 };
        for (src, dst) in [
            ("192.168.0.1:8080", "192.0.2.1:40000"),
            ("[fd3d:fa7b:d17d::1]:8080", "[2001:db8::1]:40000"),
        ] {
            let r = repr(
                TcpFlags::ACK | TcpFlags::PSH,
                vec![TcpOptionRepr::Nop, TcpOptionRepr::Nop, ts.clone()],
            );
            let p = build_tcp(sa(src), sa(dst), &r, 300, IP).unwrap();
            let l = parse_live(&p).unwrap();
            assert!(l.csum_ok);
            assert_eq!((l.seq, l.ack, l.len, l.win, l.tos), (1000, 77, 300, 256, 2));
            assert_eq!(l.opts.len(), 3);
            assert_eq!(l.src, sa(src));
        }
        assert!(build_tcp(
            sa("192.168.0.1:1"),
            sa("[2001:db8::1]:2"),
            &repr(TcpFlags::empty(), vec![]),
            0,
            IP
        )
        .is_err());
    }

    /// Software GSO (what Linux does without TSO): MSS-sized pieces, consecutive sequence
    /// numbers, PSH and FIN only on the last piece, CWR only on the first (`tcp_gso_segment`).
    #[test]
    fn segmentation_moves_psh_fin_to_the_last_piece() {
        let flags = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        let p = build_tcp(
            sa("192.168.0.1:8080"),
            sa("192.0.2.1:40000"),
            &repr(flags, vec![]),
            2500,
            IP,
        )
        .unwrap();
        let segs: Vec<Live> = segment(&p, 1000)
            .iter()
            .map(|s| parse_live(s).unwrap())
            .collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(
            segs.iter().map(|s| s.len).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        assert_eq!(
            segs.iter().map(|s| s.seq).collect::<Vec<_>>(),
            [1000, 2000, 3000]
        );
        assert_eq!(segs[0].flags, TcpFlags::ACK | TcpFlags::CWR);
        assert_eq!(segs[1].flags, TcpFlags::ACK);
        assert_eq!(segs[2].flags, TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN);
        assert!(segs.iter().all(|s| s.csum_ok));
        // A packet no larger than gso_size is left alone.
        assert_eq!(segment(&p, 4000), vec![p.clone()]);
    }

    #[test]
    fn script_syntax_printing() {
        assert_eq!(flags_str(TcpFlags::SYN | TcpFlags::ACK), "S.");
        assert_eq!(flags_str(TcpFlags::PSH | TcpFlags::ACK), "P.");
        assert_eq!(
            flags_str(TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR),
            "SEW"
        );
        assert_eq!(flags_str(TcpFlags::empty()), "-");
        let sack = TcpOptionRepr::Sack(SackBlocks::from_slice(&[(1, 2), (5, 9)]).unwrap());
        assert_eq!(opt_str(&sack), "sack 1:2 5:9");
        assert_eq!(opt_str(&TcpOptionRepr::Mss(1460)), "mss 1460");
    }
}

/// An ICMP error as a script's `< icmp TYPE [CODE] [mtu N] [start:end(len)]` line gives it:
/// type and code by the names packetdrill knows for the run's family (an IPv4 script says
/// `unreachable frag_needed`, an IPv6 one `packet_too_big`), or `type_N` / `code_N`.
pub(crate) struct IcmpError {
    /// The type's name.
    pub type_name: String,
    /// The code's name, if any (code 0 otherwise).
    pub code: Option<String>,
    /// Next-hop MTU.
    pub mtu: Option<u32>,
}

/// Type and code bytes for `e` from a family's tables of (byte, name) (RFC 792 and 1191 for
/// IPv4, RFC 4443 for IPv6).
/// A code's wire byte and packetdrill name.
type IcmpCode = (u8, &'static str);
/// A type's wire byte, packetdrill name and codes.
type IcmpType = (u8, &'static str, &'static [IcmpCode]);

fn type_code(e: &IcmpError, types: &[IcmpType]) -> Result<(u8, u8), String> {
    let numbered =
        |s: &str, prefix: &str| s.strip_prefix(prefix).and_then(|n| n.parse::<u8>().ok());
    let (type_, codes): (u8, &[IcmpCode]) = match numbered(&e.type_name, "type_") {
        Some(t) => (t, &[]),
        None => types
            .iter()
            .find(|(_, n, _)| *n == e.type_name)
            .map(|(t, _, c)| (*t, *c))
            .ok_or_else(|| {
                format!(
                    "unknown ICMP type `{}` for this address family",
                    e.type_name
                )
            })?,
    };
    let code = match e.code.as_deref() {
        None => 0,
        Some(c) => numbered(c, "code_")
            .or_else(|| codes.iter().find(|(_, n)| *n == c).map(|(b, _)| *b))
            .ok_or_else(|| format!("unknown ICMP code `{c}` for type `{}`", e.type_name))?,
    };
    Ok((type_, code))
}

const ICMPV4_UNREACHABLE: &[IcmpCode] = &[
    (0, "net_unreachable"),
    (1, "host_unreachable"),
    (2, "protocol_unreachable"),
    (3, "port_unreachable"),
    (4, "frag_needed"),
    (5, "source_route_failed"),
    (6, "net_unknown"),
    (7, "host_unknown"),
    (8, "source_host_isolated"),
    (9, "net_prohibited"),
    (10, "host_prohibited"),
    (11, "net_unreachable_for_tos"),
    (12, "host_unreachable_for_tos"),
    (13, "packet_filtered"),
    (14, "precedence_violation"),
    (15, "precedence_cutoff"),
];
const ICMPV4_TYPES: &[IcmpType] = &[
    (3, "unreachable", ICMPV4_UNREACHABLE),
    (4, "source_quench", &[]),
    (5, "redirect", &[]),
    (11, "time_exceeded", &[]),
    (12, "parameter_problem", &[]),
];
const ICMPV6_TYPES: &[IcmpType] = &[
    (
        1,
        "unreachable",
        &[
            (0, "net_unreachable"),
            (0, "no_route"),
            (1, "admin_prohibited"),
            (2, "not_neighbour"),
            (3, "address_unreachable"),
            (4, "port_unreachable"),
        ],
    ),
    (2, "packet_too_big", &[]),
    (
        3,
        "time_exceeded",
        &[(0, "exceeded_hop_limit"), (1, "exceeded_frag_time")],
    ),
    (
        4,
        "parameter_problem",
        &[
            (0, "header_field"),
            (1, "unknown_next_header"),
            (2, "unknown_option"),
        ],
    ),
];

/// Builds an ICMP error from `from` to `to` that quotes `invoking` (a packet `to` sent: its
/// IP header and TCP header), as a router on the path would (RFC 792: the IP header and 8
/// bytes at least; RFC 4443: as much as fits).
/// Whether packetdrill can build this ICMP error for the family (it checks every ICMP line
/// when it parses the script, so a bad type or code fails the run before anything happens).
pub(crate) fn icmp_known(ipv6: bool, e: &IcmpError) -> Result<(), String> {
    type_code(e, if ipv6 { ICMPV6_TYPES } else { ICMPV4_TYPES }).map(|_| ())
}

pub(crate) fn build_icmp_error(
    from: IpAddr,
    to: IpAddr,
    e: &IcmpError,
    invoking: &[u8],
) -> Result<Vec<u8>, String> {
    match (from, to) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let (type_, code) = type_code(e, ICMPV4_TYPES)?;
            let repr = if type_ == 3 {
                shallow_wire::Icmpv4Repr::DstUnreachable {
                    code,
                    next_hop_mtu: if code == 4 {
                        e.mtu.unwrap_or(0).min(65535) as u16
                    } else {
                        0
                    },
                    invoking,
                }
            } else {
                shallow_wire::Icmpv4Repr::Other {
                    type_,
                    code,
                    rest: 0,
                    data: invoking,
                }
            };
            let mut body = vec![0u8; repr.buffer_len()];
            repr.emit(&mut body)
                .map_err(|x| format!("cannot build ICMP: {x}"))?;
            let ip = IpRepr::V4(Ipv4Repr {
                src: s,
                dst: d,
                protocol: shallow_wire::IPPROTO_ICMP,
                ttl: 64,
                tos: 0,
                df: false,
                ident: 0,
                payload_len: body.len(),
            });
            let mut buf = vec![0u8; ip.header_len() + body.len()];
            ip.emit(&mut buf)
                .map_err(|x| format!("cannot build IP header: {x}"))?;
            let hl = ip.header_len();
            buf[hl..].copy_from_slice(&body);
            Ok(buf)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let (type_, code) = type_code(e, ICMPV6_TYPES)?;
            let repr = match type_ {
                2 => shallow_wire::Icmpv6Repr::PacketTooBig {
                    mtu: e.mtu.unwrap_or(1280),
                    invoking,
                },
                1 => shallow_wire::Icmpv6Repr::DstUnreachable { code, invoking },
                _ => shallow_wire::Icmpv6Repr::Other {
                    type_,
                    code,
                    rest: 0,
                    data: invoking,
                },
            };
            let mut body = vec![0u8; repr.buffer_len()];
            repr.emit(&mut body, s, d)
                .map_err(|x| format!("cannot build ICMPv6: {x}"))?;
            let ip = IpRepr::V6(Ipv6Repr {
                src: s,
                dst: d,
                next_header: shallow_wire::IPPROTO_ICMPV6,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
                payload_len: body.len(),
            });
            let mut buf = vec![0u8; ip.header_len() + body.len()];
            ip.emit(&mut buf)
                .map_err(|x| format!("cannot build IP header: {x}"))?;
            let hl = ip.header_len();
            buf[hl..].copy_from_slice(&body);
            Ok(buf)
        }
        _ => Err("mixed address families".into()),
    }
}

#[cfg(test)]
mod icmp_tests {
    use super::*;

    fn err(t: &str, c: Option<&str>, mtu: Option<u32>) -> IcmpError {
        IcmpError {
            type_name: t.into(),
            code: c.map(Into::into),
            mtu,
        }
    }

    #[test]
    fn icmp_errors_by_packetdrill_names_per_family() {
        let quoted = [0x45u8; 28];
        let v4 = |e: &IcmpError| {
            build_icmp_error(
                "192.0.2.1".parse().unwrap(),
                "192.168.0.1".parse().unwrap(),
                e,
                &quoted,
            )
        };
        let p = v4(&err("unreachable", Some("frag_needed"), Some(1200))).unwrap();
        // ICMP header after a 20-byte IPv4 header: type 3, code 4, MTU in bytes 6..8.
        assert_eq!((p[20], p[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([p[26], p[27]]), 1200);
        assert_eq!(&p[28..], &quoted);
        let p = v4(&err("unreachable", Some("host_unreachable"), None)).unwrap();
        assert_eq!((p[20], p[21]), (3, 1));
        let p = v4(&err("type_11", Some("code_1"), None)).unwrap();
        assert_eq!((p[20], p[21]), (11, 1));
        // packetdrill's tables are per family: no ICMPv4 "packet too big".
        assert!(v4(&err("packet_too_big", None, Some(1280))).is_err());
        assert!(v4(&err("unreachable", Some("no_such_code"), None)).is_err());
        let v6 = |e: &IcmpError| {
            build_icmp_error(
                "2001:db8::1".parse().unwrap(),
                "fd3d:fa7b:d17d::1".parse().unwrap(),
                e,
                &quoted,
            )
        };
        let p = v6(&err("packet_too_big", None, Some(1280))).unwrap();
        assert_eq!((p[40], p[41]), (2, 0));
        assert_eq!(u32::from_be_bytes([p[44], p[45], p[46], p[47]]), 1280);
        let p = v6(&err("unreachable", Some("port_unreachable"), None)).unwrap();
        assert_eq!((p[40], p[41]), (1, 4));
        assert!(v6(&err("unreachable", Some("frag_needed"), None)).is_err());
    }
}
