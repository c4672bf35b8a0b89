//! Packets on the runner's "wire": building inbound packets from `<` lines, parsing the
//! stack's outbound packets, software segmentation, and printing both in script syntax.

use std::net::{IpAddr, SocketAddr};

use shallow_wire::{
    IpPacket, IpRepr, Ipv4Repr, Ipv6Repr, TcpFlags as WireFlags, TcpOptionRepr, TcpPacket, TcpRepr,
};

use crate::ast::TcpFlags;

/// An outbound packet taken apart (the fields the matcher compares).
#[derive(Debug, Clone)]
pub(crate) struct Live {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: u16,
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
        flags: repr.flags.bits(),
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
    let mut out = Vec::new();
    let mut off = 0u32;
    let mut i = 0u16;
    while off < live.len {
        let n = gso.min(live.len - off);
        let last = off + n >= live.len;
        let mut r = base.clone();
        r.seq = base.seq.wrapping_add(off);
        let mut f = base.flags;
        if !last {
            f.set(WireFlags::FIN, false);
            f.set(WireFlags::PSH, false);
        }
        if off > 0 {
            f.set(WireFlags::CWR, false);
        }
        r.flags = f;
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
pub(crate) fn flags_str(f: u16) -> String {
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
        if f & bit != 0 {
            s.push(c);
        }
    }
    if f & TcpFlags::ACK != 0 {
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

    fn repr(flags: u16, opts: Vec<TcpOptionRepr>) -> TcpRepr {
        TcpRepr {
            src_port: 8080,
            dst_port: 40000,
            seq: 1000,
            ack: 77,
            flags: WireFlags(flags),
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
            &repr(0, vec![]),
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
        assert_eq!(flags_str(0), "-");
        let sack = TcpOptionRepr::Sack(SackBlocks::from_slice(&[(1, 2), (5, 9)]).unwrap());
        assert_eq!(opt_str(&sack), "sack 1:2 5:9");
        assert_eq!(opt_str(&TcpOptionRepr::Mss(1460)), "mss 1460");
    }
}
