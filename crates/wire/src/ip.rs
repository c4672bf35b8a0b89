//! IPv4 (RFC 791) and IPv6 (RFC 8200) headers.

use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::checksum;
use crate::error::{Result, WireError};

/// IP protocol number of ICMP (RFC 792).
pub const IPPROTO_ICMP: u8 = 1;
/// IP protocol number of TCP (RFC 9293).
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP (RFC 768).
pub const IPPROTO_UDP: u8 = 17;
/// IP protocol number (IPv6 next header) of ICMPv6 (RFC 4443).
pub const IPPROTO_ICMPV6: u8 = 58;

const IPV6_HOPOPTS: u8 = 0;
const IPV6_ROUTING: u8 = 43;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_DSTOPTS: u8 = 60;

/// Reads a big-endian u16 at `at`; callers have checked the length.
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The two ECN bits of the IPv4 TOS / IPv6 traffic class byte (RFC 3168 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ecn {
    /// `00`: not ECN-capable transport.
    NotEct,
    /// `01`: ECT(1).
    Ect1,
    /// `10`: ECT(0).
    Ect0,
    /// `11`: congestion experienced.
    Ce,
}

impl Ecn {
    /// The codepoint from the low two bits of a TOS / traffic class byte.
    pub fn from_bits(tos: u8) -> Ecn {
        match tos & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two-bit codepoint (RFC 3168 §5).
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// IPv4

/// A checked, zero-copy view of an IPv4 packet (RFC 791 §3.1).
///
/// `new_checked` guarantees: version 4, IHL ≥ 5, the header (with options) inside the buffer,
/// and header length ≤ total length ≤ buffer length. Bytes past the total length (link-layer
/// padding) are ignored. The header checksum is not verified on construction: see
/// [`Ipv4Packet::checksum_valid`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Packet<'a> {
    /// The header and payload, cut to the captured part of the total length.
    buf: &'a [u8],
    total_len: u16,
}

impl<'a> Ipv4Packet<'a> {
    /// Length of the header without options.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks `buf` as an IPv4 packet (see the type's doc for what is checked).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        let p = Self::new_snapped(buf)?;
        if usize::from(p.total_len) > buf.len() {
            return Err(WireError::BadTotalLen);
        }
        Ok(p)
    }

    /// Like [`new_checked`](Self::new_checked) but accepts a buffer that a capture's snap
    /// length cut short of the total length: the header must be whole, and
    /// [`payload`](Self::payload) is then the captured part only ([`is_snapped`](Self::is_snapped)).
    pub fn new_snapped(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < Self::MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if buf[0] >> 4 != 4 {
            return Err(WireError::BadVersion);
        }
        let hl = usize::from(buf[0] & 0x0f) * 4;
        if hl < Self::MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if hl > buf.len() {
            return Err(WireError::Truncated);
        }
        let total_len = be16(buf, 2);
        if usize::from(total_len) < hl {
            return Err(WireError::BadTotalLen);
        }
        let end = usize::from(total_len).min(buf.len());
        Ok(Ipv4Packet {
            buf: &buf[..end],
            total_len,
        })
    }

    /// Header length in bytes, options included (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf[0] & 0x0f) * 4
    }
    /// The type-of-service byte: DSCP in the upper six bits, ECN in the lower two (RFC 2474, 3168).
    pub fn tos(&self) -> u8 {
        self.buf[1]
    }
    /// The DSCP (upper six bits of the TOS byte, RFC 2474 §3).
    pub fn dscp(&self) -> u8 {
        self.buf[1] >> 2
    }
    /// The ECN codepoint (RFC 3168 §5).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.buf[1])
    }
    /// The total length field: header plus payload.
    pub fn total_len(&self) -> u16 {
        self.total_len
    }
    /// The identification field.
    pub fn ident(&self) -> u16 {
        be16(self.buf, 4)
    }
    /// Don't Fragment flag (RFC 791 §3.1; set by path-MTU discovery, RFC 1191).
    pub fn df(&self) -> bool {
        self.buf[6] & 0x40 != 0
    }
    /// More Fragments flag.
    pub fn mf(&self) -> bool {
        self.buf[6] & 0x20 != 0
    }
    /// The reserved (evil) flag bit, which RFC 791 says must be zero.
    pub fn reserved_flag(&self) -> bool {
        self.buf[6] & 0x80 != 0
    }
    /// Fragment offset in bytes (the field counts 8-byte units).
    pub fn frag_offset(&self) -> u16 {
        (be16(self.buf, 6) & 0x1fff).wrapping_mul(8)
    }
    /// True when this packet is a fragment: MF set or a non-zero offset (RFC 791 §2.3).
    pub fn is_fragment(&self) -> bool {
        self.mf() || be16(self.buf, 6) & 0x1fff != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buf[8]
    }
    /// The protocol of the payload (6 TCP, 1 ICMP, ...).
    pub fn protocol(&self) -> u8 {
        self.buf[9]
    }
    /// The header checksum field as stored.
    pub fn checksum(&self) -> u16 {
        be16(self.buf, 10)
    }
    /// True when the header checksum verifies (RFC 791 §3.1, RFC 1071).
    pub fn checksum_valid(&self) -> bool {
        checksum::verify(&[checksum::sum(&self.buf[..self.header_len()])])
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[12], self.buf[13], self.buf[14], self.buf[15])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.buf[16], self.buf[17], self.buf[18], self.buf[19])
    }
    /// The IP options (bytes 20 to the header length), unparsed.
    pub fn options(&self) -> &'a [u8] {
        &self.buf[Self::MIN_HEADER_LEN..self.header_len()]
    }
    /// The header bytes, options included.
    pub fn header(&self) -> &'a [u8] {
        &self.buf[..self.header_len()]
    }
    /// The payload: bytes from the header length to the total length (or to the end of a
    /// snapped capture).
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.header_len()..]
    }
    /// Payload length according to the total length field, captured or not.
    pub fn payload_len(&self) -> usize {
        usize::from(self.total_len) - self.header_len()
    }
    /// True when the buffer held less than the total length (only with `new_snapped`).
    pub fn is_snapped(&self) -> bool {
        self.buf.len() < usize::from(self.total_len)
    }
    /// The whole packet as checked (header and payload).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
}

/// The fields of an IPv4 header this stack builds: no options, never fragmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Payload protocol (6 for TCP).
    pub protocol: u8,
    /// Time to live.
    pub ttl: u8,
    /// TOS byte: `dscp << 2 | ecn`.
    pub tos: u8,
    /// Don't Fragment (RFC 1191: set on every TCP packet by path-MTU discovery).
    pub df: bool,
    /// Identification field.
    pub ident: u16,
    /// Length of the payload that follows the header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Reads the header fields of `p`. Fragments give [`WireError::Unsupported`]: a `Repr`
    /// stands for a whole datagram. IP options are skipped.
    pub fn parse(p: &Ipv4Packet<'_>) -> Result<Self> {
        if p.is_fragment() {
            return Err(WireError::Unsupported);
        }
        Ok(Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            protocol: p.protocol(),
            ttl: p.ttl(),
            tos: p.tos(),
            df: p.df(),
            ident: p.ident(),
            payload_len: p.payload_len(),
        })
    }

    /// Header length: always 20 (no options are emitted).
    pub fn header_len(&self) -> usize {
        Ipv4Packet::MIN_HEADER_LEN
    }

    /// Writes the 20-byte header, checksum included, into `buf[..20]` and returns 20. The
    /// payload is the caller's to place after it.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.payload_len + Ipv4Packet::MIN_HEADER_LEN;
        let total = u16::try_from(total).map_err(|_| WireError::ValueOutOfRange)?;
        let h = buf
            .get_mut(..Ipv4Packet::MIN_HEADER_LEN)
            .ok_or(WireError::BufferTooSmall)?;
        h[0] = 0x45;
        h[1] = self.tos;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&self.ident.to_be_bytes());
        h[6] = if self.df { 0x40 } else { 0 };
        h[7] = 0;
        h[8] = self.ttl;
        h[9] = self.protocol;
        h[10] = 0;
        h[11] = 0;
        h[12..16].copy_from_slice(&self.src.octets());
        h[16..20].copy_from_slice(&self.dst.octets());
        let c = checksum::internet(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(Ipv4Packet::MIN_HEADER_LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// IPv6

/// What an IPv6 fragment header (RFC 8200 §4.5) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Fragment {
    /// Offset of this fragment's data in bytes.
    pub offset: u16,
    /// M flag: more fragments follow.
    pub more: bool,
    /// Identification.
    pub ident: u32,
}

/// A checked, zero-copy view of an IPv6 packet (RFC 8200 §3) with its extension headers
/// walked.
///
/// `new_checked` guarantees: version 6, the 40-byte header and the payload length inside the
/// buffer, and every hop-by-hop (only first, §4.3), routing (§4.4), fragment (§4.5) and
/// destination-options (§4.6) header inside the payload. The first other next-header value
/// (TCP, ICMPv6, UDP, no-next-header, or anything unknown) is the upper-layer protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Packet<'a> {
    buf: &'a [u8],
    payload_len: u16,
    upper_protocol: u8,
    upper_offset: usize,
    fragment: Option<Ipv6Fragment>,
}

impl<'a> Ipv6Packet<'a> {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;

    /// Checks `buf` as an IPv6 packet (see the type's doc for what is checked).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        let p = Self::new_snapped(buf)?;
        if p.is_snapped() {
            return Err(WireError::BadTotalLen);
        }
        Ok(p)
    }

    /// Like [`new_checked`](Self::new_checked) but accepts a buffer that a capture's snap
    /// length cut short of the payload length: the fixed header and all extension headers must
    /// be whole, and [`payload`](Self::payload) is then the captured part only.
    pub fn new_snapped(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < Self::HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if buf[0] >> 4 != 6 {
            return Err(WireError::BadVersion);
        }
        let payload_len = be16(buf, 4);
        if payload_len == 0 && buf[6] == IPV6_HOPOPTS {
            // A jumbogram (RFC 2675) carries its length in a hop-by-hop option.
            return Err(WireError::Unsupported);
        }
        let end = (Self::HEADER_LEN + usize::from(payload_len)).min(buf.len());
        let buf = &buf[..end];
        let full_end = Self::HEADER_LEN + usize::from(payload_len);

        let mut next = buf[6];
        let mut off = Self::HEADER_LEN;
        let mut fragment = None;
        let mut first = true;
        while matches!(
            next,
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS | IPV6_FRAGMENT
        ) {
            if next == IPV6_HOPOPTS && !first {
                return Err(WireError::BadExtensionHeader);
            }
            let hdr = buf.get(off..off + 8).ok_or(if off + 8 > full_end {
                WireError::BadHeaderLen
            } else {
                WireError::Truncated
            })?;
            let len = if next == IPV6_FRAGMENT {
                // Fixed 8 bytes; its length byte is reserved (§4.5).
                let fo = be16(hdr, 2);
                fragment = Some(Ipv6Fragment {
                    offset: fo & 0xfff8,
                    more: fo & 1 != 0,
                    ident: u32::from_be_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]),
                });
                8
            } else {
                // Hdr Ext Len counts 8-octet units past the first 8 (§4.3).
                8 + usize::from(hdr[1]) * 8
            };
            if off + len > full_end {
                return Err(WireError::BadHeaderLen);
            }
            if off + len > buf.len() {
                return Err(WireError::Truncated);
            }
            next = hdr[0];
            off += len;
            first = false;
        }
        Ok(Ipv6Packet {
            buf,
            payload_len,
            upper_protocol: next,
            upper_offset: off,
            fragment,
        })
    }

    /// The traffic class byte: DSCP and ECN like IPv4's TOS (RFC 8200 §7).
    pub fn traffic_class(&self) -> u8 {
        (self.buf[0] << 4) | (self.buf[1] >> 4)
    }
    /// The ECN codepoint (RFC 3168 §5).
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }
    /// The 20-bit flow label (RFC 6437).
    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes([0, self.buf[1] & 0x0f, self.buf[2], self.buf[3]])
    }
    /// The payload length field: extension headers plus upper-layer data.
    pub fn payload_len(&self) -> u16 {
        self.payload_len
    }
    /// The next header field of the fixed header (may name an extension header).
    pub fn next_header(&self) -> u8 {
        self.buf[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buf[7]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr16(&self.buf[8..24]))
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        Ipv6Addr::from(addr16(&self.buf[24..40]))
    }
    /// The protocol after the extension headers (6 for TCP, 58 for ICMPv6).
    pub fn upper_protocol(&self) -> u8 {
        self.upper_protocol
    }
    /// Total length of the extension headers that were skipped.
    pub fn ext_headers_len(&self) -> usize {
        self.upper_offset - Self::HEADER_LEN
    }
    /// The fragment header, if one was present.
    pub fn fragment(&self) -> Option<Ipv6Fragment> {
        self.fragment
    }
    /// True when a fragment header with a non-zero offset or the M flag was present (an
    /// "atomic fragment" with offset 0 and M clear is a whole datagram, RFC 8200 §4.5).
    pub fn is_fragment(&self) -> bool {
        matches!(self.fragment, Some(f) if f.offset != 0 || f.more)
    }
    /// The upper-layer header and data (after the extension headers).
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.upper_offset..]
    }
    /// Upper-layer length according to the payload length field, captured or not.
    pub fn upper_len(&self) -> usize {
        usize::from(self.payload_len) + Self::HEADER_LEN - self.upper_offset
    }
    /// True when the buffer held less than the payload length (only with `new_snapped`).
    pub fn is_snapped(&self) -> bool {
        self.buf.len() < Self::HEADER_LEN + usize::from(self.payload_len)
    }
    /// The whole packet as checked.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
}

fn addr16(b: &[u8]) -> [u8; 16] {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    a
}

/// The fields of an IPv6 header this stack builds: no extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Next header (the upper-layer protocol, as no extension headers are emitted).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class: `dscp << 2 | ecn`.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Length of the payload that follows the header.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Reads the header fields of `p`; `next_header` is the upper-layer protocol and
    /// `payload_len` the upper-layer length (extension headers are dropped). Fragments give
    /// [`WireError::Unsupported`].
    pub fn parse(p: &Ipv6Packet<'_>) -> Result<Self> {
        if p.is_fragment() {
            return Err(WireError::Unsupported);
        }
        Ok(Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            next_header: p.upper_protocol(),
            hop_limit: p.hop_limit(),
            traffic_class: p.traffic_class(),
            flow_label: p.flow_label(),
            payload_len: p.upper_len(),
        })
    }

    /// Header length: always 40.
    pub fn header_len(&self) -> usize {
        Ipv6Packet::HEADER_LEN
    }

    /// Writes the 40-byte header into `buf[..40]` and returns 40.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let plen = u16::try_from(self.payload_len).map_err(|_| WireError::ValueOutOfRange)?;
        if self.flow_label > 0xf_ffff {
            return Err(WireError::ValueOutOfRange);
        }
        let h = buf
            .get_mut(..Ipv6Packet::HEADER_LEN)
            .ok_or(WireError::BufferTooSmall)?;
        let word = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        h[0..4].copy_from_slice(&word.to_be_bytes());
        h[4..6].copy_from_slice(&plen.to_be_bytes());
        h[6] = self.next_header;
        h[7] = self.hop_limit;
        h[8..24].copy_from_slice(&self.src.octets());
        h[24..40].copy_from_slice(&self.dst.octets());
        Ok(Ipv6Packet::HEADER_LEN)
    }
}

// ---------------------------------------------------------------------------------------------
// Either version

/// An IPv4 or IPv6 packet, chosen by the version nibble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpPacket<'a> {
    /// IPv4.
    V4(Ipv4Packet<'a>),
    /// IPv6.
    V6(Ipv6Packet<'a>),
}

impl<'a> IpPacket<'a> {
    /// Checks `buf` as an IPv4 or IPv6 packet according to its first nibble.
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        match buf.first().map(|b| b >> 4) {
            None => Err(WireError::Truncated),
            Some(4) => Ipv4Packet::new_checked(buf).map(IpPacket::V4),
            Some(6) => Ipv6Packet::new_checked(buf).map(IpPacket::V6),
            Some(_) => Err(WireError::BadVersion),
        }
    }
    /// Like [`parse`](Self::parse), accepting a capture cut short by its snap length.
    pub fn parse_snapped(buf: &'a [u8]) -> Result<Self> {
        match buf.first().map(|b| b >> 4) {
            None => Err(WireError::Truncated),
            Some(4) => Ipv4Packet::new_snapped(buf).map(IpPacket::V4),
            Some(6) => Ipv6Packet::new_snapped(buf).map(IpPacket::V6),
            Some(_) => Err(WireError::BadVersion),
        }
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.src().into(),
            IpPacket::V6(p) => p.src().into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.dst().into(),
            IpPacket::V6(p) => p.dst().into(),
        }
    }
    /// Upper-layer protocol (IPv6: after extension headers).
    pub fn protocol(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.protocol(),
            IpPacket::V6(p) => p.upper_protocol(),
        }
    }
    /// ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        match self {
            IpPacket::V4(p) => p.ecn(),
            IpPacket::V6(p) => p.ecn(),
        }
    }
    /// TOS (IPv4) or traffic class (IPv6).
    pub fn tos(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.tos(),
            IpPacket::V6(p) => p.traffic_class(),
        }
    }
    /// TTL (IPv4) or hop limit (IPv6).
    pub fn ttl(&self) -> u8 {
        match self {
            IpPacket::V4(p) => p.ttl(),
            IpPacket::V6(p) => p.hop_limit(),
        }
    }
    /// True for a fragment (IPv4 MF/offset, IPv6 fragment header with M/offset).
    pub fn is_fragment(&self) -> bool {
        match self {
            IpPacket::V4(p) => p.is_fragment(),
            IpPacket::V6(p) => p.is_fragment(),
        }
    }
    /// The upper-layer bytes (captured part).
    pub fn payload(&self) -> &'a [u8] {
        match self {
            IpPacket::V4(p) => p.payload(),
            IpPacket::V6(p) => p.payload(),
        }
    }
    /// Upper-layer length according to the length fields, captured or not.
    pub fn payload_len(&self) -> usize {
        match self {
            IpPacket::V4(p) => p.payload_len(),
            IpPacket::V6(p) => p.upper_len(),
        }
    }
    /// True when the buffer held less than the length fields say (only with `parse_snapped`).
    pub fn is_snapped(&self) -> bool {
        match self {
            IpPacket::V4(p) => p.is_snapped(),
            IpPacket::V6(p) => p.is_snapped(),
        }
    }
}

/// An IPv4 or IPv6 header to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Reads the header fields of a packet (see [`Ipv4Repr::parse`], [`Ipv6Repr::parse`]).
    pub fn parse(p: &IpPacket<'_>) -> Result<Self> {
        match p {
            IpPacket::V4(p) => Ipv4Repr::parse(p).map(IpRepr::V4),
            IpPacket::V6(p) => Ipv6Repr::parse(p).map(IpRepr::V6),
        }
    }
    /// Header length (20 or 40).
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.header_len(),
            IpRepr::V6(r) => r.header_len(),
        }
    }
    /// Writes the header into the front of `buf` and returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        match self {
            IpRepr::V4(r) => r.emit(buf),
            IpRepr::V6(r) => r.emit(buf),
        }
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.src.into(),
            IpRepr::V6(r) => r.src.into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpRepr::V4(r) => r.dst.into(),
            IpRepr::V6(r) => r.dst.into(),
        }
    }
    /// Upper-layer protocol.
    pub fn protocol(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.protocol,
            IpRepr::V6(r) => r.next_header,
        }
    }
    /// Upper-layer length.
    pub fn payload_len(&self) -> usize {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_header() -> Vec<u8> {
        let r = Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 2),
            protocol: IPPROTO_TCP,
            ttl: 64,
            tos: 0b1011_1010,
            df: true,
            ident: 0x1234,
            payload_len: 4,
        };
        let mut b = vec![0u8; 24];
        r.emit(&mut b).unwrap();
        b
    }

    /// RFC 791 §3.1 field layout: TOS, DF, TTL, protocol, addresses and a valid checksum.
    #[test]
    fn v4_fields() {
        let b = v4_header();
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert_eq!(p.tos(), 0b1011_1010);
        assert_eq!(p.dscp(), 0b101110);
        assert_eq!(p.ecn(), Ecn::Ect0);
        assert!(p.df() && !p.mf() && !p.is_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.ident(), 0x1234);
        assert_eq!(p.total_len(), 24);
        assert_eq!(p.payload().len(), 4);
        assert!(p.checksum_valid());
    }

    /// RFC 791: IHL below 5 words is malformed; total length below the header or beyond the
    /// buffer is malformed; Ethernet padding past the total length is ignored.
    #[test]
    fn v4_lengths() {
        let mut b = v4_header();
        b[0] = 0x44;
        assert_eq!(Ipv4Packet::new_checked(&b), Err(WireError::BadHeaderLen));
        let mut b = v4_header();
        b[0] = 0x4f;
        assert_eq!(Ipv4Packet::new_checked(&b), Err(WireError::Truncated));
        let mut b = v4_header();
        b[3] = 19;
        assert_eq!(Ipv4Packet::new_checked(&b), Err(WireError::BadTotalLen));
        let mut b = v4_header();
        b[3] = 30;
        assert_eq!(Ipv4Packet::new_checked(&b), Err(WireError::BadTotalLen));
        let p = Ipv4Packet::new_snapped(&b).unwrap();
        assert!(p.is_snapped());
        assert_eq!(p.payload_len(), 10);
        let mut b = v4_header();
        b.extend_from_slice(&[0; 6]);
        assert_eq!(Ipv4Packet::new_checked(&b).unwrap().payload().len(), 4);
        let mut b = v4_header();
        b[0] = 0x65;
        assert_eq!(Ipv4Packet::new_checked(&b), Err(WireError::BadVersion));
    }

    /// RFC 791 §2.3: a packet with MF or a non-zero offset is a fragment.
    #[test]
    fn v4_fragments() {
        let mut b = v4_header();
        b[6] = 0x20;
        assert!(Ipv4Packet::new_checked(&b).unwrap().is_fragment());
        assert_eq!(
            Ipv4Repr::parse(&Ipv4Packet::new_checked(&b).unwrap()),
            Err(WireError::Unsupported)
        );
        let mut b = v4_header();
        b[7] = 3;
        let p = Ipv4Packet::new_checked(&b).unwrap();
        assert!(p.is_fragment());
        assert_eq!(p.frag_offset(), 24);
    }

    fn v6_with_ext(exts: &[(u8, Vec<u8>)], upper: u8, payload: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        let first = exts.first().map(|e| e.0).unwrap_or(upper);
        for (i, (_, data)) in exts.iter().enumerate() {
            let next = exts.get(i + 1).map(|e| e.0).unwrap_or(upper);
            let mut h = data.clone();
            h[0] = next;
            body.extend_from_slice(&h);
        }
        body.extend_from_slice(payload);
        let r = Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: first,
            hop_limit: 9,
            traffic_class: 0xb9,
            flow_label: 0xabcde,
            payload_len: body.len(),
        };
        let mut b = vec![0u8; 40];
        r.emit(&mut b).unwrap();
        b.extend_from_slice(&body);
        b
    }

    /// RFC 8200 §4: hop-by-hop, routing, fragment and destination options are skipped in
    /// order and the upper-layer protocol is the first other next-header value.
    #[test]
    fn v6_extension_headers() {
        let hop = vec![0, 0, 1, 4, 0, 0, 0, 0];
        let mut rt = vec![0, 1, 0, 0, 0, 0, 0, 0];
        rt.extend_from_slice(&[0; 8]);
        let frag = vec![0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef];
        let dst = vec![0, 0, 1, 4, 0, 0, 0, 0];
        let b = v6_with_ext(
            &[
                (IPV6_HOPOPTS, hop),
                (IPV6_ROUTING, rt),
                (IPV6_FRAGMENT, frag),
                (IPV6_DSTOPTS, dst),
            ],
            IPPROTO_TCP,
            b"abcd",
        );
        let p = Ipv6Packet::new_checked(&b).unwrap();
        assert_eq!(p.upper_protocol(), IPPROTO_TCP);
        assert_eq!(p.payload(), b"abcd");
        assert_eq!(p.ext_headers_len(), 40);
        assert_eq!(p.fragment().unwrap().ident, 0xdeadbeef);
        assert!(!p.is_fragment(), "atomic fragment is a whole datagram");
        assert_eq!(p.traffic_class(), 0xb9);
        assert_eq!(p.ecn(), Ecn::Ect1);
        assert_eq!(p.flow_label(), 0xabcde);
        assert_eq!(p.hop_limit(), 9);
        // cross-check with etherparse
        let (_, next, rest) =
            etherparse::Ipv6Extensions::from_slice(etherparse::IpNumber(IPV6_HOPOPTS), &b[40..])
                .unwrap();
        assert_eq!(next.0, IPPROTO_TCP);
        assert_eq!(rest, b"abcd");
    }

    /// RFC 8200 §4.1: hop-by-hop may only come first; an extension header running past the
    /// payload length is malformed.
    #[test]
    fn v6_bad_extension_headers() {
        let dst = vec![0, 0, 1, 4, 0, 0, 0, 0];
        let hop = vec![0, 0, 1, 4, 0, 0, 0, 0];
        let b = v6_with_ext(
            &[(IPV6_DSTOPTS, dst), (IPV6_HOPOPTS, hop)],
            IPPROTO_TCP,
            b"",
        );
        assert_eq!(
            Ipv6Packet::new_checked(&b),
            Err(WireError::BadExtensionHeader)
        );
        let dst = vec![0, 3, 1, 4, 0, 0, 0, 0];
        let b = v6_with_ext(&[(IPV6_DSTOPTS, dst)], IPPROTO_TCP, b"12345678");
        assert_eq!(Ipv6Packet::new_checked(&b), Err(WireError::BadHeaderLen));
        let mut b = v6_with_ext(&[], IPPROTO_TCP, b"1234");
        b[5] = 10;
        assert_eq!(Ipv6Packet::new_checked(&b), Err(WireError::BadTotalLen));
        assert!(Ipv6Packet::new_snapped(&b).unwrap().is_snapped());
    }

    /// RFC 8200 §4.5: a fragment header with an offset or the M flag marks a fragment.
    #[test]
    fn v6_fragment_flagged() {
        let frag = vec![0, 0, 0, 9, 0, 0, 0, 1];
        let b = v6_with_ext(&[(IPV6_FRAGMENT, frag)], IPPROTO_TCP, b"x");
        let p = Ipv6Packet::new_checked(&b).unwrap();
        assert!(p.is_fragment());
        assert_eq!(p.fragment().unwrap().offset, 8);
        assert!(p.fragment().unwrap().more);
        assert_eq!(Ipv6Repr::parse(&p), Err(WireError::Unsupported));
    }

    /// Emit refuses a buffer shorter than the header and values that do not fit their field.
    #[test]
    fn emit_errors() {
        let r = Ipv4Repr {
            src: Ipv4Addr::LOCALHOST,
            dst: Ipv4Addr::LOCALHOST,
            protocol: 6,
            ttl: 1,
            tos: 0,
            df: false,
            ident: 0,
            payload_len: 0,
        };
        assert_eq!(r.emit(&mut [0; 19]), Err(WireError::BufferTooSmall));
        let big = Ipv4Repr {
            payload_len: 65516,
            ..r
        };
        assert_eq!(big.emit(&mut [0; 20]), Err(WireError::ValueOutOfRange));
        let r6 = Ipv6Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: Ipv6Addr::LOCALHOST,
            next_header: 6,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0x10_0000,
            payload_len: 0,
        };
        assert_eq!(r6.emit(&mut [0; 40]), Err(WireError::ValueOutOfRange));
        assert_eq!(
            Ipv6Repr {
                flow_label: 0,
                ..r6
            }
            .emit(&mut [0; 39]),
            Err(WireError::BufferTooSmall)
        );
    }
}
