//! TCP segmentation offload in software (a NIC's TSO, Linux's GSO) and the in-place header
//! work around it: a light offsets view of an IPv4/IPv6 + TCP packet ([`parse_tcp`], whose
//! TCP fields are read through [`TcpPacket`]), checksum checks and fixes on raw packets, and
//! the cut of a super-segment into its wire segments ([`write_segment`]). Used by the
//! emulator's NIC and GRO. Nothing is re-derived here: header offsets are
//! [`tcp_field`](crate::tcp_field), flags are [`TcpFlags`], and every sum, fold and
//! pseudo-header is [`checksum`]'s (the one implementation of RFC 1071 in the project); test
//! packets are built with [`TcpRepr::emit_packet`]. Nothing here panics on malformed input:
//! every accessor is bounds-checked and a packet that is not well-formed TCP is reported as
//! such.
//!
//! Segmentation follows what Linux's `tcp_gso_segment` / `inet_gso_segment` produce on the
//! wire (observable behaviour, RFC 793/9293 and RFC 791 fields):
//! * headers are copied from the super-segment; segment *i* carries payload bytes
//!   `[i*gso_size, (i+1)*gso_size)` and `seq = seq0 + i*gso_size`;
//! * FIN and PSH only on the last segment, CWR only on the first;
//! * IPv4 total length and identification (`id0 + i`) are rewritten and the IPv4 header
//!   checksum recomputed; IPv6 payload length is rewritten;
//! * the TCP checksum is recomputed over each segment (RFC 9293 §3.1 pseudo-header).

use thiserror::Error;

use crate::checksum;
pub use crate::ip::IPPROTO_TCP;
use crate::ip::{IpRepr, Ipv4Repr};
use crate::tcp::{field, TcpFlags, TcpOptionIter, TcpPacket, TcpRepr};

/// Why a packet could not be segmented.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SegmentError {
    /// Not an IPv4/IPv6 packet carrying a complete TCP header.
    #[error("not a well-formed IPv4/IPv6 TCP packet")]
    NotTcp,
    /// `gso_size` was zero.
    #[error("gso_size is zero")]
    ZeroGsoSize,
    /// The requested segment index is past the last segment.
    #[error("segment index {index} out of range ({count} segments)")]
    Index {
        /// Requested index.
        index: usize,
        /// Number of segments.
        count: usize,
    },
}

/// Offsets and fields of a parsed IPv4/IPv6 + TCP packet (the TCP fields as [`TcpPacket`]
/// reads them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpView {
    /// 4 or 6.
    pub ip_version: u8,
    /// Offset of the TCP header (= length of IP header plus skipped IPv6 extension headers).
    pub tcp_off: usize,
    /// Length of the TCP header (data offset × 4).
    pub tcp_len: usize,
    /// Offset of the TCP payload.
    pub payload_off: usize,
    /// Payload length as given by the IP length field (clamped to the buffer).
    pub payload_len: usize,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control bits (all 12, as [`TcpPacket::flags`]).
    pub flags: TcpFlags,
    /// Window field.
    pub window: u16,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}
fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

/// The IP version nibble of `data`, if it is 4 or 6.
pub fn ip_version(data: &[u8]) -> Option<u8> {
    match data.first()? >> 4 {
        4 => Some(4),
        6 => Some(6),
        _ => None,
    }
}

/// Destination address bytes (4 or 16) of an IPv4/IPv6 packet.
pub fn dst_addr(data: &[u8]) -> Option<&[u8]> {
    match ip_version(data)? {
        4 => data.get(16..20),
        _ => data.get(24..40),
    }
}

/// Source address bytes (4 or 16) of an IPv4/IPv6 packet.
pub fn src_addr(data: &[u8]) -> Option<&[u8]> {
    match ip_version(data)? {
        4 => data.get(12..16),
        _ => data.get(8..24),
    }
}

/// IPv4 TOS byte or IPv6 traffic class.
pub fn tos(data: &[u8]) -> Option<u8> {
    match ip_version(data)? {
        4 => data.get(1).copied(),
        _ => Some(((be16(data, 0)? >> 4) & 0xff) as u8),
    }
}

/// Parse `data` as IPv4/IPv6 + TCP. IPv4 options are allowed; IPv6 hop-by-hop, routing and
/// destination-options extension headers are skipped; fragments are not TCP here.
pub fn parse_tcp(data: &[u8]) -> Option<TcpView> {
    parse_tcp_split(data, 0)
}

/// [`parse_tcp`] for a packet held in two parts, as an skb with paged data is: `head` holds
/// the IP and TCP headers and possibly the start of the payload, and the last `frag_len` bytes
/// of the packet are held elsewhere (Linux `skb_shinfo(skb)->frags`). The length fields are
/// checked against both parts together; the headers must lie wholly in `head`.
pub fn parse_tcp_split(head: &[u8], frag_len: usize) -> Option<TcpView> {
    let data = head;
    let have = head.len().checked_add(frag_len)?;
    let version = ip_version(data)?;
    let (tcp_off, ip_end) = match version {
        4 => {
            let ihl = usize::from(data.first()? & 0x0f) * 4;
            if ihl < 20 || *data.get(9)? != IPPROTO_TCP {
                return None;
            }
            let frag = be16(data, 6)?;
            if frag & 0x3fff != 0 {
                return None; // a fragment (MF set or offset non-zero)
            }
            let total = usize::from(be16(data, 2)?);
            if total < ihl || total > have {
                return None;
            }
            (ihl, total)
        }
        _ => {
            if data.len() < 40 {
                return None;
            }
            let end = 40 + usize::from(be16(data, 4)?);
            if end > have {
                return None;
            }
            let mut next = *data.get(6)?;
            let mut off = 40;
            loop {
                match next {
                    IPPROTO_TCP => break,
                    0 | 43 | 60 => {
                        next = *data.get(off)?;
                        off += (usize::from(*data.get(off + 1)?) + 1) * 8;
                    }
                    _ => return None,
                }
                if off > end {
                    return None;
                }
            }
            (off, end)
        }
    };
    // The whole TCP header lies in `head` (checked by the view), and inside the IP packet.
    let tcp = TcpPacket::new_checked(data.get(tcp_off..)?).ok()?;
    let tcp_len = tcp.header_len();
    if tcp_off + tcp_len > ip_end {
        return None;
    }
    Some(TcpView {
        ip_version: version,
        tcp_off,
        tcp_len,
        payload_off: tcp_off + tcp_len,
        payload_len: ip_end - tcp_off - tcp_len,
        seq: tcp.seq(),
        ack: tcp.ack(),
        flags: tcp.flags(),
        window: tcp.window(),
        sport: tcp.src_port(),
        dport: tcp.dst_port(),
    })
}

/// Write `flags` into the TCP header of a parsed packet, keeping its data offset.
pub fn set_tcp_flags(data: &mut [u8], v: &TcpView, flags: TcpFlags) {
    let at = v.tcp_off + field::OFF_FLAGS.start;
    if let Some(word) = be16(data, at) {
        put16(
            data,
            at,
            (word & !TcpFlags::ALL.bits()) | (flags & TcpFlags::ALL).bits(),
        );
    }
}

/// Add `data` to a one's-complement running sum (RFC 1071), as big-endian 16-bit words; an
/// odd final byte is padded with zero. The sum is kept in 64 bits with end-around carry
/// (RFC 1071 §2(C)); fold it with [`csum_fold`]. The bytes are summed by [`checksum::sum`].
pub fn csum_add(sum: u64, data: &[u8]) -> u64 {
    csum_combine(sum, u64::from(checksum::sum(data)))
}

/// Add two running sums (end-around carry).
pub fn csum_combine(a: u64, b: u64) -> u64 {
    let (s, carry) = a.overflowing_add(b);
    s + u64::from(carry)
}

/// Fold a running sum to 16 bits ([`checksum::fold`]) and complement it.
pub fn csum_fold(sum: u64) -> u16 {
    !checksum::fold(sum)
}

/// The partial sum ([`checksum`]'s form, folded) of the TCP pseudo-header
/// ([`checksum::pseudo_header_octets`]: RFC 9293 §3.1; RFC 8200 §8.1 for IPv6) of a parsed
/// packet whose TCP header plus payload is `tcp_total` bytes.
fn pseudo(data: &[u8], v: &TcpView, tcp_total: usize) -> u32 {
    let (src, dst) = if v.ip_version == 4 {
        (12..16, 16..20)
    } else {
        (8..24, 24..40)
    };
    let (src, dst) = (data.get(src).unwrap_or(&[]), data.get(dst).unwrap_or(&[]));
    let len = u32::try_from(tcp_total).unwrap_or(u32::MAX);
    checksum::pseudo_header_octets(src, dst, IPPROTO_TCP, len)
}

/// [`checksum::pseudo_header_octets`] of a parsed packet whose TCP header plus payload is
/// `tcp_total` bytes, as a running sum for [`csum_add`].
pub fn pseudo_sum(data: &[u8], v: &TcpView, tcp_total: usize) -> u64 {
    u64::from(pseudo(data, v, tcp_total))
}

/// Recompute the IPv4 header checksum in place (no-op for IPv6 or a short buffer).
pub fn fill_ipv4_checksum(data: &mut [u8]) {
    if ip_version(data) != Some(4) {
        return;
    }
    let ihl = usize::from(data[0] & 0x0f) * 4;
    if data.len() < ihl || ihl < 20 {
        return;
    }
    put16(data, 10, 0);
    let c = checksum::internet(&data[..ihl]);
    put16(data, 10, c);
}

/// True if the IPv4 header checksum is right (always true for IPv6, which has none).
pub fn ipv4_checksum_ok(data: &[u8]) -> bool {
    if ip_version(data) != Some(4) {
        return true;
    }
    let ihl = usize::from(data[0] & 0x0f) * 4;
    match data.get(..ihl) {
        Some(h) if ihl >= 20 => checksum::verify(&[checksum::sum(h)]),
        _ => false,
    }
}

/// Recompute the TCP checksum of a parsed packet in place.
pub fn fill_tcp_checksum(data: &mut [u8], v: &TcpView) {
    let end = v.payload_off + v.payload_len;
    let tcp_total = end - v.tcp_off;
    put16(data, v.tcp_off + field::CHECKSUM.start, 0);
    let p = pseudo(data, v, tcp_total);
    let c = checksum::combine(&[p, checksum::sum(data.get(v.tcp_off..end).unwrap_or(&[]))]);
    put16(data, v.tcp_off + field::CHECKSUM.start, c);
}

/// Fix the headers of an aggregate of several segments, `data` parsed as `v` (the first
/// segment's header fields with the merged payload length), as Linux's
/// `inet_gro_complete`/`tcp4_gro_complete` do: the IP length of the whole, the IPv4 header
/// checksum, and the TCP checksum field in the `CHECKSUM_PARTIAL` form. Both GRO paths (the emulator's bytes
/// and unwritten TSO runs) end with this.
pub fn complete_aggregate(data: &mut [u8], v: &TcpView) {
    let total = v.payload_off + v.payload_len;
    if v.ip_version == 4 {
        data[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        fill_ipv4_checksum(data);
    } else {
        data[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
    }
    fill_tcp_csum_partial(data, v);
}

/// Put the `CHECKSUM_PARTIAL` form in the TCP checksum field of a parsed packet: the folded
/// pseudo-header sum, not complemented, which whoever completes the checksum (a NIC, GSO)
/// sums over together with the TCP header and payload. Linux leaves this value in a packet
/// whose checksum is offloaded (`tcp_v4_send_check` → `__tcp_v4_send_check`) and in a GRO
/// aggregate (`tcp4_gro_complete`); see [`complete_tcp_checksum`].
pub fn fill_tcp_csum_partial(data: &mut [u8], v: &TcpView) {
    let tcp_total = v.payload_off + v.payload_len - v.tcp_off;
    // combine() complements; the partial form is the plain folded sum.
    let p = !checksum::combine(&[pseudo(data, v, tcp_total)]);
    put16(data, v.tcp_off + field::CHECKSUM.start, p);
}

/// Complete a checksum left in the [`fill_tcp_csum_partial`] form (what the NIC does for a
/// `CHECKSUM_PARTIAL` packet: sum from the TCP header to the end, the field included, and
/// store the complement). The result equals [`fill_tcp_checksum`]'s.
pub fn complete_tcp_checksum(data: &mut [u8], v: &TcpView) {
    let end = v.payload_off + v.payload_len;
    let c = checksum::internet(data.get(v.tcp_off..end).unwrap_or(&[]));
    put16(data, v.tcp_off + field::CHECKSUM.start, c);
}

/// True if `data` is well-formed IPv4/IPv6 TCP with a correct TCP checksum (and, for IPv4, a
/// correct header checksum): what a receiver checks before accepting a segment.
pub fn tcp_checksum_ok(data: &[u8]) -> bool {
    match parse_tcp(data) {
        Some(v) => tcp_checksum_ok_parsed(data, &v),
        None => false,
    }
}

/// [`tcp_checksum_ok`] for an already parsed packet.
pub fn tcp_checksum_ok_parsed(data: &[u8], v: &TcpView) -> bool {
    if !ipv4_checksum_ok(data) {
        return false;
    }
    let end = v.payload_off + v.payload_len;
    let p = pseudo(data, v, end - v.tcp_off);
    match data.get(v.tcp_off..end) {
        Some(seg) => checksum::verify(&[p, checksum::sum(seg)]),
        None => false,
    }
}

/// The flags of wire segments `first..=last` (out of `count`) of a super-segment whose flags
/// are `flags`, as GSO sets them and GRO merges them: FIN and PSH only with the last segment,
/// CWR only with the first.
pub fn run_flags(flags: TcpFlags, first: usize, last: usize, count: usize) -> TcpFlags {
    let mut fl = flags;
    if last + 1 != count {
        fl &= !(TcpFlags::FIN | TcpFlags::PSH);
    }
    if first > 0 {
        fl &= !TcpFlags::CWR;
    }
    fl
}

/// Write IP length fields for a packet whose TCP payload is now `payload_len` bytes.
fn set_ip_len(data: &mut [u8], v: &TcpView, payload_len: usize) {
    let total = v.payload_off + payload_len;
    if v.ip_version == 4 {
        put16(data, 2, total.min(0xffff) as u16);
    } else {
        put16(data, 4, (total - 40).min(0xffff) as u16);
    }
}

/// Number of wire segments a super-segment of `data` with `gso_size` becomes (1 if it is not
/// TCP, has no payload or fits in one segment).
pub fn segment_count(data: &[u8], gso_size: u16) -> usize {
    match parse_tcp(data) {
        Some(v) if gso_size > 0 && v.payload_len > 0 => {
            v.payload_len.div_ceil(usize::from(gso_size))
        }
        _ => 1,
    }
}

/// Write wire segment `index` of the super-segment `data` into `out` (cleared first), with all
/// header fields fixed as the module doc describes.
pub fn write_segment(
    data: &[u8],
    gso_size: u16,
    index: usize,
    out: &mut Vec<u8>,
) -> Result<(), SegmentError> {
    let v = parse_tcp(data).ok_or(SegmentError::NotTcp)?;
    write_segment_parsed(data, &v, gso_size, index, out)
}

/// [`write_segment`] with the parse already done (the NIC parses once per super-segment).
pub fn write_segment_parsed(
    data: &[u8],
    v: &TcpView,
    gso_size: u16,
    index: usize,
    out: &mut Vec<u8>,
) -> Result<(), SegmentError> {
    let (head, payload) = split_parsed(data, v)?;
    write_segment_parts(head, payload, v, gso_size, index, out)
}

/// [`write_segment_parsed`] for a super-segment held in two parts, as an skb with paged data
/// is: `head` starts with its headers (`v.payload_off` bytes) and `payload` holds its
/// `v.payload_len` payload bytes.
pub fn write_segment_parts(
    head: &[u8],
    payload: &[u8],
    v: &TcpView,
    gso_size: u16,
    index: usize,
    out: &mut Vec<u8>,
) -> Result<(), SegmentError> {
    out.clear();
    out.reserve(v.payload_off + usize::from(gso_size).min(v.payload_len));
    let r = write_run_head_parts(head, payload, v, gso_size, index, index, out)?;
    out.extend_from_slice(&payload[r]);
    Ok(())
}

/// `data`'s headers and payload as [`parse_tcp`] found them (`v`).
fn split_parsed<'a>(data: &'a [u8], v: &TcpView) -> Result<(&'a [u8], &'a [u8]), SegmentError> {
    let end = v.payload_off + v.payload_len;
    if data.len() < end {
        return Err(SegmentError::NotTcp);
    }
    Ok((&data[..v.payload_off], &data[v.payload_off..end]))
}

/// The headers of the aggregate GRO makes of wire segments `first..=last` of a super-segment
/// `data` (parsed as `v`), for a packet whose payload is held apart from its headers (paged
/// data): writes into `out` (cleared first) exactly the headers of the aggregate built from
/// the segments' bytes, and returns where its payload lies in `data`. Those headers are
/// segment `first`'s ([`write_segment_parsed`]) with the PSH/FIN of segment `last` and the
/// IP length (and IPv4 header checksum) of the whole run; the TCP checksum is complete for a
/// single segment, and for several it is in the `CHECKSUM_PARTIAL` form GRO leaves on an
/// aggregate (Linux `tcp4_gro_complete`, see [`fill_tcp_csum_partial`]).
pub fn write_run_head(
    data: &[u8],
    v: &TcpView,
    gso_size: u16,
    first: usize,
    last: usize,
    out: &mut Vec<u8>,
) -> Result<core::ops::Range<usize>, SegmentError> {
    let (head, payload) = split_parsed(data, v)?;
    let r = write_run_head_parts(head, payload, v, gso_size, first, last, out)?;
    Ok(r.start + v.payload_off..r.end + v.payload_off)
}

/// [`write_run_head`] for a super-segment in two parts (see [`write_segment_parts`]); the
/// range returned is into `payload`.
pub fn write_run_head_parts(
    head: &[u8],
    payload: &[u8],
    v: &TcpView,
    gso_size: u16,
    first: usize,
    last: usize,
    out: &mut Vec<u8>,
) -> Result<core::ops::Range<usize>, SegmentError> {
    if gso_size == 0 {
        return Err(SegmentError::ZeroGsoSize);
    }
    let mss = usize::from(gso_size);
    let count = v.payload_len.div_ceil(mss).max(1);
    if last >= count || first > last {
        return Err(SegmentError::Index { index: last, count });
    }
    if head.len() < v.payload_off
        || payload.len() < v.payload_len
        || v.payload_off < v.tcp_off + TcpPacket::MIN_HEADER_LEN
    {
        return Err(SegmentError::NotTcp);
    }
    let start = (first * mss).min(v.payload_len);
    let end = ((last + 1) * mss).min(v.payload_len);
    let len = end - start;
    out.clear();
    out.extend_from_slice(&head[..v.payload_off]);
    set_ip_len(out, v, len);
    if v.ip_version == 4 {
        let id = be16(head, 4).unwrap_or(0).wrapping_add(first as u16);
        put16(out, 4, id);
        fill_ipv4_checksum(out);
    }
    put32(
        out,
        v.tcp_off + field::SEQ.start,
        v.seq.wrapping_add(start as u32),
    );
    let fl = run_flags(v.flags, first, last, count);
    set_tcp_flags(out, v, fl);
    let run = TcpView {
        payload_len: len,
        seq: v.seq.wrapping_add(start as u32),
        flags: fl,
        ..*v
    };
    if first == last {
        // The header is a whole number of 32-bit words, so header and payload sums add up.
        put16(out, v.tcp_off + field::CHECKSUM.start, 0);
        let c = checksum::combine(&[
            pseudo(out, &run, v.payload_off - v.tcp_off + len),
            checksum::sum(&out[v.tcp_off..v.payload_off]),
            checksum::sum(&payload[start..end]),
        ]);
        put16(out, v.tcp_off + field::CHECKSUM.start, c);
    } else {
        fill_tcp_csum_partial(out, &run);
    }
    Ok(start..end)
}

/// Split a super-segment into wire segments (convenience over [`write_segment`]).
pub fn segment(data: &[u8], gso_size: u16) -> Result<Vec<Vec<u8>>, SegmentError> {
    let v = parse_tcp(data).ok_or(SegmentError::NotTcp)?;
    let n = v.payload_len.div_ceil(usize::from(gso_size.max(1))).max(1);
    let mut segs = Vec::with_capacity(n);
    for i in 0..n {
        let mut out = Vec::new();
        write_segment_parsed(data, &v, gso_size, i, &mut out)?;
        segs.push(out);
    }
    Ok(segs)
}

/// Parameters of a test/fake IPv4 TCP packet built by [`build_ipv4_tcp`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpPacketSpec {
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// Window.
    pub window: u16,
    /// IPv4 identification.
    pub ip_id: u16,
    /// IPv4 TOS byte.
    pub tos: u8,
    /// TCP options (padded to a multiple of 4 with NOPs... callers pass whole words).
    pub options: Vec<u8>,
}

impl Default for TcpPacketSpec {
    fn default() -> Self {
        TcpPacketSpec {
            src: [10, 0, 0, 1],
            dst: [10, 0, 1, 1],
            sport: 40000,
            dport: 5001,
            seq: 1,
            ack: 1,
            flags: TcpFlags::ACK,
            window: 65535,
            ip_id: 0,
            tos: 0,
            options: Vec::new(),
        }
    }
}

/// Build a valid IPv4 + TCP packet (DF set, TTL 64) with the given payload into `out`
/// (cleared first), with both checksums filled, through [`TcpRepr::emit_packet`]. Used by test
/// endpoints and tests; the engine builds its own. Options the spec holds that do not parse
/// end the option list there.
pub fn build_ipv4_tcp(spec: &TcpPacketSpec, payload: &[u8], out: &mut Vec<u8>) {
    let tcp = TcpRepr {
        src_port: spec.sport,
        dst_port: spec.dport,
        seq: spec.seq,
        ack: spec.ack,
        flags: spec.flags,
        window: spec.window,
        urgent: 0,
        options: TcpOptionIter::new(&spec.options)
            .map_while(Result::ok)
            .map(Into::into)
            .collect(),
    };
    let ip = IpRepr::V4(Ipv4Repr {
        src: spec.src.into(),
        dst: spec.dst.into(),
        protocol: IPPROTO_TCP,
        ttl: 64,
        tos: spec.tos,
        df: true,
        ident: spec.ip_id,
        payload_len: tcp.header_len() + payload.len(),
    });
    out.clear();
    // Cannot fail for a spec's header (at most 40 option bytes fit the u8 fields) unless the
    // payload overflows IPv4's 16-bit total length: then `out` stays empty.
    let _ = tcp.emit_packet(&ip, payload, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_checksum_completes_to_the_full_one() {
        for (len, v6) in [
            (0usize, false),
            (1, false),
            (1447, false),
            (3000, true),
            (1, true),
        ] {
            let payload: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
            let spec = TcpPacketSpec {
                seq: 0xfffff000,
                ip_id: 9,
                ..TcpPacketSpec::default()
            };
            let mut full = Vec::new();
            build_ipv4_tcp(&spec, &payload, &mut full);
            if v6 {
                // An IPv6 header over the same TCP segment.
                let tcp = full[20..].to_vec();
                full = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
                full[4..6].copy_from_slice(&(tcp.len() as u16).to_be_bytes());
                full.extend((0..32).map(|i| i as u8));
                full.extend_from_slice(&tcp);
            }
            let v = parse_tcp(&full).unwrap();
            fill_tcp_checksum(&mut full, &v);
            assert!(tcp_checksum_ok(&full));
            let mut p = full.clone();
            fill_tcp_csum_partial(&mut p, &v);
            assert_ne!(p, full, "the partial form differs from the full checksum");
            complete_tcp_checksum(&mut p, &v);
            assert_eq!(p, full);
        }
    }

    fn super_segment(payload_len: usize, fl: TcpFlags) -> Vec<u8> {
        let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7) as u8).collect();
        let spec = TcpPacketSpec {
            seq: 0xffff_ff00, // wraps inside the super-segment
            flags: fl,
            ip_id: 0xfffe,
            options: vec![1, 1, 8, 10, 0, 0, 0, 5, 0, 0, 0, 9], // NOP NOP TS
            ..TcpPacketSpec::default()
        };
        let mut out = Vec::new();
        build_ipv4_tcp(&spec, &payload, &mut out);
        out
    }

    #[test]
    fn built_packet_has_valid_checksums() {
        let p = super_segment(100, TcpFlags::ACK);
        assert!(tcp_checksum_ok(&p));
        let v = parse_tcp(&p).unwrap();
        assert_eq!(v.tcp_len, 32);
        assert_eq!(v.payload_len, 100);
    }

    /// `write_run_head` + the payload range it returns is the GRO aggregate of segments
    /// `first..=last` built from their bytes: one segment is exactly that segment; several
    /// are the first one's headers with the whole run's length, the last one's PSH/FIN, the
    /// run's payload, and a checksum field that completes to a valid checksum.
    #[test]
    fn run_heads_match_the_merged_segments() {
        let fl = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        let p = super_segment(4000, fl);
        let v = parse_tcp(&p).unwrap();
        let segs = segment(&p, 1000).unwrap();
        let mut head = Vec::new();
        for first in 0..segs.len() {
            for last in first..segs.len() {
                let r = write_run_head(&p, &v, 1000, first, last, &mut head).unwrap();
                let mut run = head.clone();
                run.extend_from_slice(&p[r]);
                let rv = parse_tcp_split(&head, run.len() - head.len()).unwrap();
                assert_eq!(rv.payload_off, head.len());
                if first == last {
                    assert_eq!(run, segs[first], "segment {first}");
                    continue;
                }
                let mut merged = segs[first].clone();
                for s in &segs[first + 1..=last] {
                    merged.extend_from_slice(&s[v.payload_off..]);
                }
                let mv = parse_tcp_split(&merged, 0);
                // Headers of the first segment, apart from length, flags and checksums.
                assert_eq!(run[4..10], merged[4..10], "{first}..={last}");
                assert_eq!(run[12..v.tcp_off + 13], merged[12..v.tcp_off + 13]);
                assert_eq!(run[v.payload_off..], merged[v.payload_off..]);
                assert_eq!(mv.map(|m| m.seq), Some(rv.seq));
                let fl = |p: &[u8]| parse_tcp_split(p, 0).unwrap().flags;
                let last_fl = fl(&segs[last]) & (TcpFlags::PSH | TcpFlags::FIN);
                assert_eq!(rv.flags, fl(&segs[first]) | last_fl);
                complete_tcp_checksum(&mut run, &rv);
                assert!(tcp_checksum_ok(&run), "{first}..={last}");
            }
        }
        assert!(write_run_head(&p, &v, 1000, 2, 1, &mut head).is_err());
        assert!(write_run_head(&p, &v, 1000, 0, 4, &mut head).is_err());
        assert!(write_run_head(&p, &v, 0, 0, 0, &mut head).is_err());
        assert!(write_run_head(&p[..100], &v, 1000, 0, 0, &mut head).is_err());
        // Parts that do not hold whole headers, or lengths past both parts, do not parse.
        assert!(parse_tcp_split(&p[..30], p.len() - 30).is_none());
        assert!(parse_tcp_split(&p[..v.payload_off], 10).is_none());
    }

    /// tcp_gso_segment behaviour: contiguous seq, FIN/PSH last only, CWR first only, lengths,
    /// IPv4 id increments, all checksums valid.
    #[test]
    fn segmentation_splits_and_fixes_headers() {
        let fl = TcpFlags::ACK | TcpFlags::PSH | TcpFlags::FIN | TcpFlags::CWR;
        let p = super_segment(4000, fl);
        let segs = segment(&p, 1448).unwrap();
        assert_eq!(segs.len(), 3);
        assert_eq!(segment_count(&p, 1448), 3);
        let mut expect_seq = 0xffff_ff00u32;
        let mut payload = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            assert!(tcp_checksum_ok(s), "segment {i} checksum");
            let v = parse_tcp(s).unwrap();
            assert_eq!(v.seq, expect_seq);
            let want_len = if i < 2 { 1448 } else { 4000 - 2 * 1448 };
            assert_eq!(v.payload_len, want_len);
            assert_eq!(be16(s, 2).unwrap() as usize, s.len());
            assert_eq!(be16(s, 4).unwrap(), 0xfffeu16.wrapping_add(i as u16));
            let last = i == 2;
            assert_eq!(v.flags.intersects(TcpFlags::FIN | TcpFlags::PSH), last);
            assert_eq!(v.flags.contains(TcpFlags::CWR), i == 0);
            assert!(v.flags.contains(TcpFlags::ACK));
            // Options copied verbatim.
            assert_eq!(s[20 + 20..20 + 32], p[40..52]);
            expect_seq = expect_seq.wrapping_add(v.payload_len as u32);
            payload.extend_from_slice(&s[v.payload_off..]);
        }
        assert_eq!(payload, p[52..]);
    }

    #[test]
    fn ipv6_segmentation() {
        // Build an IPv6 TCP packet by hand.
        let payload = vec![0xabu8; 3000];
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[IPPROTO_TCP, 64]);
        p.extend_from_slice(&[0xfd; 16]);
        p.extend_from_slice(&[0xfe; 16]);
        p.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18]);
        p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(&payload);
        let v = parse_tcp(&p).unwrap();
        fill_tcp_checksum(&mut p, &v);
        assert!(tcp_checksum_ok(&p));
        let segs = segment(&p, 1000).unwrap();
        assert_eq!(segs.len(), 3);
        for (i, s) in segs.iter().enumerate() {
            assert!(tcp_checksum_ok(s));
            let v = parse_tcp(s).unwrap();
            assert_eq!(v.seq, 1 + 1000 * i as u32);
            assert_eq!(be16(s, 4).unwrap(), 1020);
            assert_eq!(v.flags.contains(TcpFlags::PSH), i == 2);
        }
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        assert_eq!(segment(&[], 100), Err(SegmentError::NotTcp));
        assert_eq!(segment(&[0x45; 30], 100), Err(SegmentError::NotTcp));
        let p = super_segment(10, TcpFlags::ACK);
        for cut in 0..p.len() {
            let _ = parse_tcp(&p[..cut]);
            let _ = tcp_checksum_ok(&p[..cut]);
        }
        let mut out = Vec::new();
        assert_eq!(
            write_segment(&p, 0, 0, &mut out),
            Err(SegmentError::ZeroGsoSize)
        );
        assert!(matches!(
            write_segment(&p, 5, 2, &mut out),
            Err(SegmentError::Index { index: 2, count: 2 })
        ));
    }

    /// The wide-word sum equals the plain RFC 1071 16-bit sum for every length and content.
    #[test]
    fn wide_checksum_equals_16_bit_reference() {
        fn reference(d: &[u8]) -> u16 {
            let mut s: u32 = 0;
            for c in d.chunks(2) {
                let w = u32::from(c[0]) << 8 | u32::from(*c.get(1).unwrap_or(&0));
                s += w;
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        }
        let mut x: u32 = 12345;
        for len in 0..200 {
            let d: Vec<u8> = (0..len)
                .map(|_| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    (x >> 16) as u8
                })
                .collect();
            assert_eq!(csum_fold(csum_add(0, &d)), reference(&d), "len {len}");
            let ff = vec![0xffu8; len];
            assert_eq!(csum_fold(csum_add(0, &ff)), reference(&ff), "ff len {len}");
        }
    }

    #[test]
    fn bit_flip_breaks_checksum() {
        let p = super_segment(500, TcpFlags::ACK);
        for bit in [0usize, 100, 20 * 8 + 5, p.len() * 8 - 1] {
            let mut q = p.clone();
            q[bit / 8] ^= 1 << (bit % 8);
            assert!(!tcp_checksum_ok(&q), "bit {bit}");
        }
    }
}
