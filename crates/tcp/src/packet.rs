//! Glue to `shallow_wire`: parse an inbound IP packet into a `SegIn` and build outbound
//! segments. This is the only module that touches packet bytes. The engine's segments carry
//! `shallow_wire`'s [`TcpFlags`] (the one definition of the control bits); `SegIn` and
//! `SegOut` are the engine's own views because they hold what the wire model does not
//! (socket addresses, GRO shape, a shared payload buffer, Linux's parsed-option record).

use crate::payload::Payload;
use bytes::Bytes;
use core::net::{IpAddr, SocketAddr};
use shallow_wire::{
    checksum, tcp_field, IpPacket, IpRepr, Ipv4Repr, Ipv6Repr, SackBlocks, TcpFlags, TcpOption,
    TcpOptionRepr, TcpPacket, TcpRepr, IPPROTO_TCP,
};
use std::sync::Arc;

/// Options of an inbound segment (Linux `tcp_parse_options` → `struct tcp_options_received`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RxOpts {
    pub mss: Option<u16>,
    pub wscale: Option<u8>,
    pub sack_ok: bool,
    pub ts: Option<(u32, u32)>,
    pub sack: [(u32, u32); 4],
    pub num_sacks: u8,
    /// TCP header length with options (`doff * 4`; 0 for synthetic segments).
    pub hdr_len: u16,
    /// A SYN's Fast Open option (kind 34, or 254 with the magic), with an allowed cookie
    /// length (`tcp_parse_fastopen_option`); `None` when absent or malformed.
    pub fastopen: Option<crate::fastopen::Cookie>,
    /// Where a TCP-MD5 signature option (kind 19, 18 bytes; RFC 2385) puts its 16-byte
    /// digest, as an offset into the TCP header (`tcp_parse_md5sig_option`: the first
    /// option of kind 19; one of another length is no signature).
    pub md5: Option<u8>,
}

/// A parsed inbound TCP segment.
#[derive(Debug)]
pub(crate) struct SegIn<'a> {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    /// The urgent pointer (meaningful with URG, urg.rs).
    pub urg_ptr: u16,
    pub opts: RxOpts,
    pub payload: &'a [u8],
    /// The buffer `payload` lies in, when the substrate handed the payload over as `Bytes`
    /// ([`crate::Stack::handle_packet`] with [`crate::RxBytes::Paged`]): queues then keep a share of it instead of a copy.
    pub buf: Option<&'a Bytes>,
    /// Number of wire segments this (possibly GRO-aggregated) packet stands for.
    pub gso_segs: u32,
    /// Wire segment size if GRO-aggregated.
    pub gso_size: Option<u16>,
    /// IP TOS / traffic class byte (ECN is not negotiated; kept for later).
    #[allow(dead_code)]
    pub tos: u8,
    /// IP TTL / hop limit (an ACK stamp's `TCP_NLA_TTL`).
    pub ttl: u8,
    /// The TCP header as received, options included (empty for a synthetic or backlogged
    /// segment, which was checked before it was queued): what a TCP-MD5 signature covers.
    pub tcp_hdr: &'a [u8],
}

impl SegIn<'_> {
    /// The segment's TCP-MD5 digest, if it carries one (see [`RxOpts::md5`]).
    pub fn md5_digest(&self) -> Option<&[u8; 16]> {
        let at = usize::from(self.opts.md5?);
        self.tcp_hdr.get(at..at + 16)?.try_into().ok()
    }
    /// The digest this segment should carry under `key` (RFC 2385 §2.0); `None` when its
    /// header is not at hand.
    pub fn md5_expected(&self, key: &[u8]) -> Option<[u8; 16]> {
        let fixed = self.tcp_hdr.get(..20)?;
        let tcp_len = u32::try_from(self.tcp_hdr.len() + self.payload.len()).ok()?;
        Some(crate::md5::digest(
            self.src.ip(),
            self.dst.ip(),
            fixed,
            tcp_len,
            [self.payload],
            key,
        ))
    }
    /// seq + payload + SYN + FIN (`TCP_SKB_CB(skb)->end_seq`).
    pub fn end_seq(&self) -> u32 {
        let mut l = self.payload.len() as u32;
        if self.flags.contains(TcpFlags::SYN) {
            l += 1;
        }
        if self.flags.contains(TcpFlags::FIN) {
            l += 1;
        }
        self.seq.wrapping_add(l)
    }
    /// True when any bit of `f` is set.
    pub fn has(&self, f: TcpFlags) -> bool {
        self.flags.intersects(f)
    }
    /// `part` (a piece of `payload`) as a share of the buffer it lies in, when the payload
    /// came as `Bytes`; `None` means the caller must copy it.
    pub fn share(&self, part: &[u8]) -> Option<Bytes> {
        let b = self.buf?;
        let (start, end) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        let p = part.as_ptr() as usize;
        (part.is_empty() || (p >= start && p + part.len() <= end)).then(|| b.slice_ref(part))
    }
}

/// An owned copy of a segment, kept in a socket's backlog (`sk_backlog`).
#[derive(Debug)]
pub(crate) struct OwnedSeg {
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    pub urg_ptr: u16,
    pub opts: RxOpts,
    pub payload: Vec<u8>,
    pub gso_segs: u32,
    pub gso_size: Option<u16>,
    pub tos: u8,
    pub ttl: u8,
    /// Page fragments this buffer would occupy in Linux (see [`payload_frags`]); a merge
    /// may not take the sum past [`MAX_SKB_FRAGS`].
    pub frags: u32,
}

/// Linux's `MAX_SKB_FRAGS` (17 by default): the most page fragments one skb can hold. It bounds
/// `skb_try_coalesce`, and so the backlog coalescing of `tcp_add_backlog`: two full ~60 KB GRO
/// packets cannot merge (the figure in 133c4c0d3717's benchmark context).
pub(crate) const MAX_SKB_FRAGS: u32 = 17;

/// The page fragments a received payload occupies: one per 4 KiB page, at least one. Our
/// model of a NIC receive path that fills page-pool pages (the byte layout Linux would have);
/// it is what makes a ~60 KB GRO aggregate "full" (15 frags) and a 1448-byte segment one frag.
pub(crate) fn payload_frags(len: usize) -> u32 {
    (len.div_ceil(4096)).max(1) as u32
}

impl OwnedSeg {
    pub fn from_seg(s: &SegIn<'_>) -> OwnedSeg {
        OwnedSeg {
            src: s.src,
            dst: s.dst,
            seq: s.seq,
            ack: s.ack,
            flags: s.flags,
            window: s.window,
            urg_ptr: s.urg_ptr,
            opts: s.opts,
            payload: s.payload.to_vec(),
            gso_segs: s.gso_segs,
            gso_size: s.gso_size,
            tos: s.tos,
            ttl: s.ttl,
            frags: payload_frags(s.payload.len()),
        }
    }
    pub fn as_seg(&self) -> SegIn<'_> {
        SegIn {
            src: self.src,
            dst: self.dst,
            seq: self.seq,
            ack: self.ack,
            flags: self.flags,
            window: self.window,
            urg_ptr: self.urg_ptr,
            opts: self.opts,
            payload: &self.payload,
            buf: None,
            gso_segs: self.gso_segs,
            gso_size: self.gso_size,
            tos: self.tos,
            ttl: self.ttl,
            tcp_hdr: &[],
        }
    }
    /// `tcp_add_backlog` coalescing: append `s` if it directly follows this segment and
    /// carries identical options and compatible flags, and the merged buffer stays within
    /// `MAX_SKB_FRAGS` (`skb_try_coalesce`). Returns true if merged.
    pub fn try_coalesce(&mut self, s: &SegIn<'_>) -> bool {
        let end = self.seq.wrapping_add(self.payload.len() as u32);
        let frags = payload_frags(s.payload.len());
        if end != s.seq
            || self.frags + frags > MAX_SKB_FRAGS
            || self.flags.contains(TcpFlags::FIN)
            || self.tos != s.tos
            || (self.flags | s.flags).intersects(TcpFlags::SYN | TcpFlags::RST | TcpFlags::URG)
            || !(self.flags & s.flags).contains(TcpFlags::ACK)
            || (self.flags ^ s.flags).intersects(TcpFlags::ECE | TcpFlags::CWR)
            || self.opts != s.opts
        {
            return false;
        }
        self.payload.extend_from_slice(s.payload);
        self.frags += frags;
        if !crate::seq::before(s.ack, self.ack) {
            self.ack = s.ack;
            self.window = s.window;
        }
        self.flags |= s.flags & (TcpFlags::PSH | TcpFlags::FIN);
        let g = s.gso_size.unwrap_or(s.payload.len().min(65535) as u16);
        let mine = self
            .gso_size
            .unwrap_or(self.payload.len().min(65535) as u16);
        self.gso_size = Some(g.max(mine));
        self.gso_segs = (self.gso_segs + s.gso_segs).min(0xffff);
        true
    }
}

/// What an ICMP error tells TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IcmpKind {
    /// Fragmentation needed / packet too big, with the next-hop MTU.
    FragNeeded(u32),
    /// Destination unreachable with this errno; `hard` for port/protocol unreachable.
    Unreach(crate::Errno),
}

/// An ICMP error about one of our TCP segments.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IcmpIn {
    /// Our address in the invoking packet (its source).
    pub local: SocketAddr,
    /// The peer's address (the invoking packet's destination).
    pub remote: SocketAddr,
    /// Sequence number of the invoking segment.
    pub seq: u32,
    pub kind: IcmpKind,
}

/// Parse an ICMPv4/ICMPv6 error quoting a TCP segment (`tcp_v4_err` / `tcp_v6_err` input).
pub(crate) fn parse_icmp(packet: &[u8]) -> Option<IcmpIn> {
    use crate::Errno;
    let ip = IpPacket::parse(packet).ok()?;
    let (kind, invoking) = match &ip {
        IpPacket::V4(_) if ip.protocol() == shallow_wire::IPPROTO_ICMP => {
            match shallow_wire::Icmpv4Repr::parse(ip.payload()).ok()? {
                shallow_wire::Icmpv4Repr::DstUnreachable {
                    code,
                    next_hop_mtu,
                    invoking,
                } => {
                    let k = match code {
                        4 => IcmpKind::FragNeeded(u32::from(next_hop_mtu)),
                        0 | 6 | 11 => IcmpKind::Unreach(Errno::ENETUNREACH),
                        2 => IcmpKind::Unreach(Errno::ENOPROTOOPT),
                        3 => IcmpKind::Unreach(Errno::ECONNREFUSED),
                        9 | 10 | 13 => IcmpKind::Unreach(Errno::EACCES),
                        _ => IcmpKind::Unreach(Errno::EHOSTUNREACH),
                    };
                    (k, invoking)
                }
                _ => return None,
            }
        }
        IpPacket::V6(p) if ip.protocol() == shallow_wire::IPPROTO_ICMPV6 => {
            match shallow_wire::Icmpv6Repr::parse(ip.payload(), p.src(), p.dst()).ok()? {
                shallow_wire::Icmpv6Repr::PacketTooBig { mtu, invoking } => {
                    (IcmpKind::FragNeeded(mtu), invoking)
                }
                shallow_wire::Icmpv6Repr::DstUnreachable { code, invoking } => {
                    let e = match code {
                        0 => Errno::ENETUNREACH,
                        1 => Errno::EACCES,
                        4 => Errno::ECONNREFUSED,
                        _ => Errno::EHOSTUNREACH,
                    };
                    (IcmpKind::Unreach(e), invoking)
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    let inner = IpPacket::parse_snapped(invoking).ok()?;
    if inner.protocol() != IPPROTO_TCP {
        return None;
    }
    let t = inner.payload();
    if t.len() < tcp_field::ACK.start {
        return None;
    }
    // An ICMPv4 error may quote only the first 8 bytes of the TCP header: read the fields,
    // not a whole header view.
    let sport = u16::from_be_bytes(t[tcp_field::SRC_PORT].try_into().ok()?);
    let dport = u16::from_be_bytes(t[tcp_field::DST_PORT].try_into().ok()?);
    let seq = u32::from_be_bytes(t[tcp_field::SEQ].try_into().ok()?);
    Some(IcmpIn {
        local: SocketAddr::new(inner.src(), sport),
        remote: SocketAddr::new(inner.dst(), dport),
        seq,
        kind,
    })
}

/// Why an inbound packet was not turned into a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Malformed IP or TCP.
    Malformed,
    /// Not TCP (or a fragment): ignored.
    NotTcp,
    /// Bad TCP checksum.
    Checksum,
}

/// Parse an IP packet holding a TCP segment. Never panics on any input.
///
/// `csum_verified`: the NIC already verified the TCP checksum (Linux `CHECKSUM_UNNECESSARY`),
/// so it is not summed again; everything else is still checked.
pub(crate) fn parse(
    packet: &[u8],
    gso_size: Option<u16>,
    csum_verified: bool,
) -> Result<SegIn<'_>, ParseError> {
    let ip = IpPacket::parse(packet).map_err(|_| ParseError::Malformed)?;
    if ip.protocol() != IPPROTO_TCP || ip.is_fragment() {
        return Err(ParseError::NotTcp);
    }
    let tcp = TcpPacket::new_checked(ip.payload()).map_err(|_| ParseError::Malformed)?;
    if !csum_verified && !tcp.checksum_valid(ip.src(), ip.dst()) {
        return Err(ParseError::Checksum);
    }
    let payload = tcp.payload();
    Ok(seg_in(&ip, &tcp, payload, None, gso_size))
}

/// [`parse`] for a packet in two parts, as an skb with paged data is: `head` holds exactly the
/// IP and TCP headers and `frag` the whole payload, which the segment then shares
/// ([`SegIn::buf`]). The length fields must add up to both parts; anything else is malformed.
pub(crate) fn parse_frag<'a>(
    head: &'a [u8],
    frag: &'a Bytes,
    gso_size: Option<u16>,
    csum_verified: bool,
) -> Result<SegIn<'a>, ParseError> {
    let ip = IpPacket::parse_snapped(head).map_err(|_| ParseError::Malformed)?;
    if ip.protocol() != IPPROTO_TCP || ip.is_fragment() {
        return Err(ParseError::NotTcp);
    }
    let hdr = ip.payload();
    if ip.payload_len() != hdr.len() + frag.len() {
        return Err(ParseError::Malformed);
    }
    let tcp = TcpPacket::new_checked(hdr).map_err(|_| ParseError::Malformed)?;
    if tcp.header_len() != hdr.len() {
        return Err(ParseError::Malformed);
    }
    if !csum_verified {
        let len = u32::try_from(ip.payload_len()).map_err(|_| ParseError::Malformed)?;
        // The header is a whole number of 32-bit words, so the two sums add up.
        let ok = checksum::verify(&[
            checksum::pseudo_header(ip.src(), ip.dst(), IPPROTO_TCP, len),
            checksum::sum(hdr),
            checksum::sum(frag),
        ]);
        if !ok {
            return Err(ParseError::Checksum);
        }
    }
    Ok(seg_in(&ip, &tcp, frag, Some(frag), gso_size))
}

/// The segment of a checked IP packet `ip` holding `tcp`, whose payload is `payload` (inside
/// `buf` when given).
fn seg_in<'a>(
    ip: &IpPacket<'_>,
    tcp: &TcpPacket<'a>,
    payload: &'a [u8],
    buf: Option<&'a Bytes>,
    gso_size: Option<u16>,
) -> SegIn<'a> {
    let (src, dst) = (ip.src(), ip.dst());
    let mut opts = RxOpts::default();
    let syn = tcp.flags().contains(TcpFlags::SYN);
    let hdr = &tcp.as_bytes()[..tcp.header_len()];
    let mut md5_seen = false;
    let ob = tcp.options_bytes();
    // The layout nearly every established segment has, `nop,nop,TS` and nothing else, read
    // in place (Linux's `tcp_parse_aligned_timestamp` fast path); what the walk below would
    // find in these twelve bytes, without walking.
    let aligned_ts = match ob {
        [1, 1, 8, 10, v @ ..] if v.len() == 8 => Some((
            u32::from_be_bytes([v[0], v[1], v[2], v[3]]),
            u32::from_be_bytes([v[4], v[5], v[6], v[7]]),
        )),
        _ => None,
    };
    let walk = match aligned_ts {
        Some(ts) => {
            opts.ts = Some(ts);
            &[][..]
        }
        None => ob,
    };
    for o in shallow_wire::TcpOptionIter::new(walk) {
        match o {
            Ok(TcpOption::Eol) | Err(_) => break,
            Ok(TcpOption::Mss(m)) if syn => opts.mss = Some(m),
            Ok(TcpOption::WindowScale(w)) if syn => opts.wscale = Some(w.min(14)),
            Ok(TcpOption::SackPermitted) if syn => opts.sack_ok = true,
            Ok(TcpOption::Timestamps { tsval, tsecr }) => opts.ts = Some((tsval, tsecr)),
            Ok(TcpOption::Unknown { kind: 19, data }) => {
                // The first kind-19 option decides; a wrong length is no signature.
                if !md5_seen {
                    md5_seen = true;
                    let at = data.as_ptr() as usize - hdr.as_ptr() as usize;
                    opts.md5 = (data.len() == 16).then_some(at as u8);
                }
            }
            Ok(TcpOption::Unknown { kind, data }) if syn => {
                if let Some(c) = crate::fastopen::Cookie::parse(kind, data) {
                    opts.fastopen = Some(c);
                }
            }
            Ok(TcpOption::Sack(b)) if !syn => {
                let mut n = 0;
                for (l, r) in b.iter() {
                    if n < 4 {
                        opts.sack[n] = (l, r);
                        n += 1;
                    }
                }
                opts.num_sacks = n as u8;
            }
            Ok(_) => {}
        }
    }
    opts.hdr_len = tcp.header_len() as u16;
    let gso_segs = match gso_size {
        Some(g) if g > 0 && payload.len() > g as usize => payload.len().div_ceil(g as usize) as u32,
        _ => 1,
    };
    SegIn {
        src: SocketAddr::new(src, tcp.src_port()),
        dst: SocketAddr::new(dst, tcp.dst_port()),
        seq: tcp.seq(),
        ack: tcp.ack(),
        // The eight bits FIN..CWR: AE and the reserved bits are not TCP's business here.
        flags: tcp.flags() & !(TcpFlags::AE | TcpFlags::RESERVED),
        window: tcp.window(),
        urg_ptr: tcp.urgent(),
        opts,
        payload,
        buf,
        gso_segs,
        gso_size,
        tos: ip.tos(),
        ttl: ip.ttl(),
        tcp_hdr: hdr,
    }
}

/// An option to put on an outbound segment (built into `TcpOptionRepr`s in Linux order).
#[derive(Clone, Copy, Debug)]
pub(crate) enum OutOpt {
    Nop,
    Mss(u16),
    Wscale(u8),
    SackOk,
    Ts(u32, u32),
    Sack([(u32, u32); 4], u8),
    /// A Fast Open option (padding NOPs are separate options).
    FastOpen(crate::fastopen::Cookie),
}

/// The options of an established connection's segment (timestamps, SACK blocks: at most
/// six [`OutOpt`]s with their NOPs), kept on the stack rather than in a `Vec` allocated
/// per packet; it reads as a slice.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OptBuf {
    opts: [OutOpt; 6],
    len: usize,
}

impl OptBuf {
    /// No options.
    pub fn new() -> OptBuf {
        OptBuf {
            opts: [OutOpt::Nop; 6],
            len: 0,
        }
    }

    /// Appends `o` (a caller never needs more than six).
    pub fn push(&mut self, o: OutOpt) {
        self.opts[self.len] = o;
        self.len += 1;
    }
}

impl core::ops::Deref for OptBuf {
    type Target = [OutOpt];
    fn deref(&self) -> &[OutOpt] {
        &self.opts[..self.len]
    }
}

/// Header fields of an outbound segment.
pub(crate) struct SegOut<'a> {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub seq: u32,
    pub ack: u32,
    pub flags: TcpFlags,
    pub window: u16,
    /// The urgent pointer; sent with URG (urg.rs).
    pub urgent: u16,
    pub tos: u8,
    pub ttl: u8,
    pub ident: u16,
    pub opts: &'a [OutOpt],
    /// The payload: one run of bytes, or an skb's pieces (payload.rs).
    pub payload: Payload<'a>,
    /// The TCP-MD5 key to sign with (RFC 2385): the signature goes first, as `nop,nop,md5`
    /// (where Linux's `tcp_options_write` puts it).
    pub md5: Option<Arc<[u8]>>,
}

/// Build one IP packet. Returns `None` only if the addresses' families differ or the segment
/// cannot be encoded (a bug guard; never expected).
#[cfg(test)]
pub(crate) fn build(s: &SegOut<'_>) -> Option<Vec<u8>> {
    build_with(s, false, false, &mut Vec::new())
}

/// Build one IP packet (as `build`), with the TCP checksum left to the device when
/// `csum_partial` (Linux `CHECKSUM_PARTIAL`: the field holds the pseudo-header sum), and only
/// its headers when `head_only` (the payload travels apart: `Transmit::frag`).
/// The TCP header of a segment, options included, its option list built in `options` (a
/// buffer the caller keeps from packet to packet, empty on entry: no allocation per packet).
fn tcp_repr(s: &SegOut<'_>, mut options: Vec<TcpOptionRepr>) -> Option<TcpRepr> {
    options.clear();
    options.reserve(s.opts.len() + 3);
    if s.md5.is_some() {
        options.push(TcpOptionRepr::Nop);
        options.push(TcpOptionRepr::Nop);
        options.push(TcpOptionRepr::Unknown {
            kind: crate::md5::TCPOPT_MD5SIG,
            data: vec![0; 16],
        });
    }
    for o in s.opts {
        options.push(match *o {
            OutOpt::Nop => TcpOptionRepr::Nop,
            OutOpt::Mss(m) => TcpOptionRepr::Mss(m),
            OutOpt::Wscale(w) => TcpOptionRepr::WindowScale(w),
            OutOpt::SackOk => TcpOptionRepr::SackPermitted,
            OutOpt::Ts(tsval, tsecr) => TcpOptionRepr::Timestamps { tsval, tsecr },
            OutOpt::Sack(b, n) => {
                TcpOptionRepr::Sack(SackBlocks::from_slice(&b[..(n as usize).min(4)]).ok()?)
            }
            OutOpt::FastOpen(c) => {
                let (kind, data) = c.option();
                TcpOptionRepr::Unknown { kind, data }
            }
        });
    }
    Some(TcpRepr {
        src_port: s.local.port(),
        dst_port: s.remote.port(),
        seq: s.seq,
        ack: s.ack,
        flags: s.flags,
        window: s.window,
        urgent: s.urgent,
        options,
    })
}

/// Bytes of IP and TCP headers [`build_with`] writes in front of the payload of `s` (the
/// length the device side is told before the packet exists, `crate::gate::TxMeta`).
pub(crate) fn header_len(s: &SegOut<'_>) -> usize {
    let ip = match s.local.ip() {
        IpAddr::V4(_) => 20,
        IpAddr::V6(_) => 40,
    };
    let md5 = if s.md5.is_some() {
        crate::md5::TCPOLEN_MD5SIG_ALIGNED as usize
    } else {
        0
    };
    ip + 20 + md5 + opts_len(s.opts).div_ceil(4) * 4
}

/// The bytes `opts` take in a TCP header, before the padding to 32 bits.
pub(crate) fn opts_len(opts: &[OutOpt]) -> usize {
    opts.iter()
        .map(|o| match *o {
            OutOpt::Nop => 1,
            OutOpt::Mss(_) => 4,
            OutOpt::Wscale(_) => 3,
            OutOpt::SackOk => 2,
            OutOpt::Ts(..) => 10,
            OutOpt::Sack(_, n) => 2 + 8 * usize::from(n.min(4)),
            OutOpt::FastOpen(c) => c.opt_len(),
        })
        .sum()
}

///
/// `scratch`: an option list the caller keeps between packets (its allocation is reused;
/// it is left empty).
pub(crate) fn build_with(
    s: &SegOut<'_>,
    csum_partial: bool,
    head_only: bool,
    scratch: &mut Vec<TcpOptionRepr>,
) -> Option<Vec<u8>> {
    let mut tcp = tcp_repr(s, std::mem::take(scratch))?;
    let built = build_repr(s, &mut tcp, csum_partial, head_only);
    tcp.options.clear();
    *scratch = std::mem::take(&mut tcp.options);
    built
}

/// [`build_with`] once the TCP header is made.
fn build_repr(
    s: &SegOut<'_>,
    tcp: &mut TcpRepr,
    csum_partial: bool,
    head_only: bool,
) -> Option<Vec<u8>> {
    let tcp_hl = tcp.header_len();
    let tcp_len = tcp_hl + s.payload.len();
    if let Some(key) = &s.md5 {
        // Sign (RFC 2385 §2.0): the header without options, so a scratch copy of the fixed
        // header gives the bytes the digest covers; the digest then fills the option.
        let mut fixed = vec![0u8; tcp_hl];
        tcp.emit_header(&mut fixed, 0).ok()?;
        let d = crate::md5::digest(
            s.local.ip(),
            s.remote.ip(),
            &fixed[..20],
            u32::try_from(tcp_len).ok()?,
            s.payload.parts(),
            key,
        );
        tcp.options[2] = TcpOptionRepr::Unknown {
            kind: crate::md5::TCPOPT_MD5SIG,
            data: d.to_vec(),
        };
    }
    let ip = match (s.local.ip(), s.remote.ip()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => IpRepr::V4(Ipv4Repr {
            src: a,
            dst: b,
            protocol: IPPROTO_TCP,
            ttl: s.ttl,
            tos: s.tos,
            df: true,
            ident: s.ident,
            payload_len: tcp_len,
        }),
        (IpAddr::V6(a), IpAddr::V6(b)) => IpRepr::V6(Ipv6Repr {
            src: a,
            dst: b,
            next_header: IPPROTO_TCP,
            hop_limit: s.ttl,
            traffic_class: s.tos,
            flow_label: 0,
            payload_len: tcp_len,
        }),
        _ => return None,
    };
    let mut buf =
        Vec::with_capacity(ip.header_len() + tcp_hl + if head_only { 0 } else { s.payload.len() });
    if head_only {
        match s.payload.flat() {
            Some(p) => tcp.emit_packet_head(&ip, p, &mut buf, csum_partial).ok()?,
            None => {
                let parts: Vec<&[u8]> = s.payload.parts().collect();
                tcp.emit_packet_head_parts(&ip, &parts, &mut buf, csum_partial)
                    .ok()?
            }
        };
        return Some(buf);
    }
    // A packet that carries its payload behind its headers: one run of bytes (several
    // pieces only come from a device with scatter-gather, which takes them apart).
    let joined;
    let payload = match s.payload.flat() {
        Some(p) => p,
        None => {
            joined = s.payload.parts().flatten().copied().collect::<Vec<u8>>();
            &joined[..]
        }
    };
    if csum_partial {
        tcp.emit_packet_csum_partial(&ip, payload, &mut buf).ok()?;
    } else {
        tcp.emit_packet(&ip, payload, &mut buf).ok()?;
    }
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data_seg(seq: u32, payload: &[u8]) -> SegIn<'_> {
        SegIn {
            src: "10.0.0.2:80".parse().unwrap(),
            dst: "10.0.0.1:1234".parse().unwrap(),
            seq,
            ack: 1,
            flags: TcpFlags::ACK,
            window: 100,
            urg_ptr: 0,
            opts: RxOpts::default(),
            payload,
            buf: None,
            gso_segs: 1,
            gso_size: None,
            tos: 0,
            ttl: 64,
            tcp_hdr: &[],
        }
    }

    /// `skb_try_coalesce` refuses a merge past MAX_SKB_FRAGS: 17 one-frag segments merge into
    /// one buffer, the 18th starts a new one; two full ~60 KB GRO aggregates never merge.
    #[test]
    fn backlog_coalescing_respects_max_skb_frags() {
        let small = [0u8; 1448];
        let mut tail = OwnedSeg::from_seg(&data_seg(0, &small));
        for i in 1..MAX_SKB_FRAGS {
            assert!(
                tail.try_coalesce(&data_seg(i * 1448, &small)),
                "segment {i}"
            );
        }
        assert_eq!(tail.frags, MAX_SKB_FRAGS);
        assert!(!tail.try_coalesce(&data_seg(MAX_SKB_FRAGS * 1448, &small)));
        let big = vec![0u8; 60 * 1024];
        let mut tail = OwnedSeg::from_seg(&data_seg(0, &big));
        assert_eq!(tail.frags, 15);
        assert!(!tail.try_coalesce(&data_seg(big.len() as u32, &big)));
        assert!(tail.try_coalesce(&data_seg(big.len() as u32, &small)));
    }

    #[test]
    fn roundtrip_syn_options() {
        let local: SocketAddr = "10.0.0.1:1234".parse().unwrap();
        let remote: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let opts = [
            OutOpt::Mss(1460),
            OutOpt::SackOk,
            OutOpt::Ts(7, 0),
            OutOpt::Nop,
            OutOpt::Wscale(8),
        ];
        let p = build(&SegOut {
            urgent: 0,
            local,
            remote,
            seq: 100,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 65535,
            tos: 0,
            ttl: 64,
            ident: 0,
            opts: &opts,
            payload: Payload::EMPTY,
            md5: None,
        })
        .unwrap();
        let s = parse(&p, None, false).unwrap();
        assert_eq!(s.src, local);
        assert_eq!(s.opts.mss, Some(1460));
        assert_eq!(s.opts.wscale, Some(8));
        assert!(s.opts.sack_ok);
        assert_eq!(s.opts.ts, Some((7, 0)));
        assert_eq!(s.end_seq(), 101);
        let mut bad = p.clone();
        let n = bad.len() - 1;
        bad[n] ^= 0xff;
        assert_eq!(parse(&bad, None, false).unwrap_err(), ParseError::Checksum);
        assert_eq!(
            parse(&[0x45, 0], None, false).unwrap_err(),
            ParseError::Malformed
        );
        // CHECKSUM_UNNECESSARY: the NIC vouched for the checksum, so it is not summed again,
        // but structural checks still run.
        assert!(parse(&bad, None, true).is_ok());
        assert_eq!(
            parse(&[0x45, 0], None, true).unwrap_err(),
            ParseError::Malformed
        );
        let mut cut = p.clone();
        cut.truncate(30);
        assert!(parse(&cut, None, true).is_err());
    }
}
