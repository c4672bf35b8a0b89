//! ICMPv4 (RFC 792, RFC 1191) and ICMPv6 (RFC 4443, RFC 8201) messages.

use core::net::Ipv6Addr;

use crate::checksum;
use crate::error::{Result, WireError};
use crate::ip::IPPROTO_ICMPV6;

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Length of the fixed part of every ICMP message: type, code, checksum, 4 type-specific bytes.
const ICMP_HEADER_LEN: usize = 8;

/// An ICMPv4 message (RFC 792).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv4Repr<'a> {
    /// Type 8: echo request.
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Data to echo.
        data: &'a [u8],
    },
    /// Type 0: echo reply.
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Type 3: destination unreachable. Code 4 is "fragmentation needed and DF set", whose
    /// next-hop MTU is in the low 16 bits of the second word (RFC 1191 §4); other codes carry 0
    /// there.
    DstUnreachable {
        /// Code (0 net, 1 host, 2 protocol, 3 port, 4 frag needed, ...).
        code: u8,
        /// Next-hop MTU (RFC 1191 §4), meaningful for code 4.
        next_hop_mtu: u16,
        /// The invoking packet: its IP header and at least 8 bytes of its payload.
        invoking: &'a [u8],
    },
    /// Any other type, kept whole.
    Other {
        /// Type.
        type_: u8,
        /// Code.
        code: u8,
        /// The second 32-bit word, whose meaning depends on the type.
        rest: u32,
        /// The bytes after the 8-byte header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv4Repr<'a> {
    /// Type of echo reply.
    pub const ECHO_REPLY: u8 = 0;
    /// Type of destination unreachable.
    pub const DST_UNREACHABLE: u8 = 3;
    /// Type of echo request.
    pub const ECHO_REQUEST: u8 = 8;
    /// Destination-unreachable code "fragmentation needed and DF set" (RFC 792, RFC 1191).
    pub const CODE_FRAG_NEEDED: u8 = 4;

    /// Parses an ICMPv4 message (the whole IP payload) and verifies its checksum (RFC 792).
    pub fn parse(buf: &'a [u8]) -> Result<Self> {
        let r = Self::parse_ignoring_checksum(buf)?;
        if !checksum::verify(&[checksum::sum(buf)]) {
            return Err(WireError::BadChecksum);
        }
        Ok(r)
    }

    /// Parses without verifying the checksum (for captures with offloaded checksums).
    pub fn parse_ignoring_checksum(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < ICMP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let (type_, code, data) = (buf[0], buf[1], &buf[ICMP_HEADER_LEN..]);
        Ok(match type_ {
            Self::ECHO_REQUEST => Icmpv4Repr::EchoRequest {
                ident: be16(buf, 4),
                seq: be16(buf, 6),
                data,
            },
            Self::ECHO_REPLY => Icmpv4Repr::EchoReply {
                ident: be16(buf, 4),
                seq: be16(buf, 6),
                data,
            },
            Self::DST_UNREACHABLE => Icmpv4Repr::DstUnreachable {
                code,
                next_hop_mtu: be16(buf, 6),
                invoking: data,
            },
            _ => Icmpv4Repr::Other {
                type_,
                code,
                rest: be32(buf, 4),
                data,
            },
        })
    }

    /// The type and code.
    pub fn type_code(&self) -> (u8, u8) {
        match self {
            Icmpv4Repr::EchoRequest { .. } => (Self::ECHO_REQUEST, 0),
            Icmpv4Repr::EchoReply { .. } => (Self::ECHO_REPLY, 0),
            Icmpv4Repr::DstUnreachable { code, .. } => (Self::DST_UNREACHABLE, *code),
            Icmpv4Repr::Other { type_, code, .. } => (*type_, *code),
        }
    }

    fn parts(&self) -> (u32, &'a [u8]) {
        match *self {
            Icmpv4Repr::EchoRequest { ident, seq, data }
            | Icmpv4Repr::EchoReply { ident, seq, data } => {
                ((u32::from(ident) << 16) | u32::from(seq), data)
            }
            Icmpv4Repr::DstUnreachable {
                next_hop_mtu,
                invoking,
                ..
            } => (u32::from(next_hop_mtu), invoking),
            Icmpv4Repr::Other { rest, data, .. } => (rest, data),
        }
    }

    /// Encoded length: 8 + data.
    pub fn buffer_len(&self) -> usize {
        ICMP_HEADER_LEN + self.parts().1.len()
    }

    /// Writes the message with its checksum into the front of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = emit_icmp(self.type_code(), self.parts(), buf)?;
        let c = checksum::internet(&buf[..n]);
        buf[2..4].copy_from_slice(&c.to_be_bytes());
        Ok(n)
    }
}

fn emit_icmp((type_, code): (u8, u8), (rest, data): (u32, &[u8]), buf: &mut [u8]) -> Result<usize> {
    let n = ICMP_HEADER_LEN + data.len();
    let b = buf.get_mut(..n).ok_or(WireError::BufferTooSmall)?;
    b[0] = type_;
    b[1] = code;
    b[2..4].copy_from_slice(&[0, 0]);
    b[4..8].copy_from_slice(&rest.to_be_bytes());
    b[8..].copy_from_slice(data);
    Ok(n)
}

/// An ICMPv6 message (RFC 4443).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Icmpv6Repr<'a> {
    /// Type 1: destination unreachable (RFC 4443 §3.1).
    DstUnreachable {
        /// Code (0 no route, 1 prohibited, 3 address, 4 port, ...).
        code: u8,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Type 2: packet too big (RFC 4443 §3.2), the signal of path-MTU discovery (RFC 8201).
    PacketTooBig {
        /// The MTU of the next-hop link.
        mtu: u32,
        /// As much of the invoking packet as fits.
        invoking: &'a [u8],
    },
    /// Type 128: echo request (RFC 4443 §4.1).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Data to echo.
        data: &'a [u8],
    },
    /// Type 129: echo reply (RFC 4443 §4.2).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence number.
        seq: u16,
        /// Echoed data.
        data: &'a [u8],
    },
    /// Any other type (time exceeded, parameter problem, neighbour discovery, ...), kept whole.
    Other {
        /// Type.
        type_: u8,
        /// Code.
        code: u8,
        /// The second 32-bit word.
        rest: u32,
        /// The bytes after the 8-byte header.
        data: &'a [u8],
    },
}

impl<'a> Icmpv6Repr<'a> {
    /// Type of destination unreachable.
    pub const DST_UNREACHABLE: u8 = 1;
    /// Type of packet too big.
    pub const PACKET_TOO_BIG: u8 = 2;
    /// Type of echo request.
    pub const ECHO_REQUEST: u8 = 128;
    /// Type of echo reply.
    pub const ECHO_REPLY: u8 = 129;

    /// Parses an ICMPv6 message (the upper-layer payload) sent from `src` to `dst` and verifies
    /// its checksum, which covers the IPv6 pseudo-header (RFC 4443 §2.3, RFC 8200 §8.1).
    pub fn parse(buf: &'a [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<Self> {
        let r = Self::parse_ignoring_checksum(buf)?;
        let len = u32::try_from(buf.len()).map_err(|_| WireError::BadTotalLen)?;
        if !checksum::verify(&[
            checksum::pseudo_header(src.into(), dst.into(), IPPROTO_ICMPV6, len),
            checksum::sum(buf),
        ]) {
            return Err(WireError::BadChecksum);
        }
        Ok(r)
    }

    /// Parses without verifying the checksum.
    pub fn parse_ignoring_checksum(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < ICMP_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let (type_, code, data) = (buf[0], buf[1], &buf[ICMP_HEADER_LEN..]);
        Ok(match type_ {
            Self::DST_UNREACHABLE => Icmpv6Repr::DstUnreachable {
                code,
                invoking: data,
            },
            Self::PACKET_TOO_BIG => Icmpv6Repr::PacketTooBig {
                mtu: be32(buf, 4),
                invoking: data,
            },
            Self::ECHO_REQUEST => Icmpv6Repr::EchoRequest {
                ident: be16(buf, 4),
                seq: be16(buf, 6),
                data,
            },
            Self::ECHO_REPLY => Icmpv6Repr::EchoReply {
                ident: be16(buf, 4),
                seq: be16(buf, 6),
                data,
            },
            _ => Icmpv6Repr::Other {
                type_,
                code,
                rest: be32(buf, 4),
                data,
            },
        })
    }

    /// The type and code.
    pub fn type_code(&self) -> (u8, u8) {
        match self {
            Icmpv6Repr::DstUnreachable { code, .. } => (Self::DST_UNREACHABLE, *code),
            Icmpv6Repr::PacketTooBig { .. } => (Self::PACKET_TOO_BIG, 0),
            Icmpv6Repr::EchoRequest { .. } => (Self::ECHO_REQUEST, 0),
            Icmpv6Repr::EchoReply { .. } => (Self::ECHO_REPLY, 0),
            Icmpv6Repr::Other { type_, code, .. } => (*type_, *code),
        }
    }

    fn parts(&self) -> (u32, &'a [u8]) {
        match *self {
            Icmpv6Repr::DstUnreachable { invoking, .. } => (0, invoking),
            Icmpv6Repr::PacketTooBig { mtu, invoking } => (mtu, invoking),
            Icmpv6Repr::EchoRequest { ident, seq, data }
            | Icmpv6Repr::EchoReply { ident, seq, data } => {
                ((u32::from(ident) << 16) | u32::from(seq), data)
            }
            Icmpv6Repr::Other { rest, data, .. } => (rest, data),
        }
    }

    /// Encoded length: 8 + data.
    pub fn buffer_len(&self) -> usize {
        ICMP_HEADER_LEN + self.parts().1.len()
    }

    /// Writes the message into the front of `buf` with its checksum over the pseudo-header of
    /// `src`/`dst` (RFC 4443 §2.3); returns its length.
    pub fn emit(&self, buf: &mut [u8], src: Ipv6Addr, dst: Ipv6Addr) -> Result<usize> {
        let n = emit_icmp(self.type_code(), self.parts(), buf)?;
        let len = u32::try_from(n).map_err(|_| WireError::ValueOutOfRange)?;
        let c = checksum::combine(&[
            checksum::pseudo_header(src.into(), dst.into(), IPPROTO_ICMPV6, len),
            checksum::sum(&buf[..n]),
        ]);
        buf[2..4].copy_from_slice(&c.to_be_bytes());
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1191 §4: frag-needed carries the next-hop MTU in the low half of the second word.
    #[test]
    fn frag_needed_mtu() {
        let inv = [0x45u8; 28];
        let r = Icmpv4Repr::DstUnreachable {
            code: 4,
            next_hop_mtu: 1400,
            invoking: &inv,
        };
        let mut b = [0u8; 36];
        assert_eq!(r.emit(&mut b).unwrap(), 36);
        assert_eq!(&b[..2], &[3, 4]);
        assert_eq!(&b[4..8], &[0, 0, 0x05, 0x78]);
        assert_eq!(Icmpv4Repr::parse(&b).unwrap(), r);
        b[20] ^= 1;
        assert_eq!(Icmpv4Repr::parse(&b), Err(WireError::BadChecksum));
        assert!(Icmpv4Repr::parse_ignoring_checksum(&b).is_ok());
    }

    /// RFC 792: echo carries identifier and sequence number.
    #[test]
    fn echo_v4() {
        let r = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq: 7,
            data: b"ping",
        };
        let mut b = [0u8; 12];
        r.emit(&mut b).unwrap();
        assert_eq!(&b[4..8], &[0x12, 0x34, 0, 7]);
        assert_eq!(Icmpv4Repr::parse(&b).unwrap(), r);
        assert_eq!(r.emit(&mut [0; 11]), Err(WireError::BufferTooSmall));
        assert_eq!(Icmpv4Repr::parse(&b[..7]), Err(WireError::Truncated));
    }

    /// RFC 4443 §2.3: the ICMPv6 checksum covers the pseudo-header, so changing an address
    /// breaks it; §3.2 packet too big carries a 32-bit MTU.
    #[test]
    fn packet_too_big_v6() {
        let s: Ipv6Addr = "fe80::1".parse().unwrap();
        let d: Ipv6Addr = "fe80::2".parse().unwrap();
        let inv = [0x60u8; 48];
        let r = Icmpv6Repr::PacketTooBig {
            mtu: 1280,
            invoking: &inv,
        };
        let mut b = [0u8; 56];
        r.emit(&mut b, s, d).unwrap();
        assert_eq!(&b[..8], &[2, 0, b[2], b[3], 0, 0, 5, 0]);
        assert_eq!(Icmpv6Repr::parse(&b, s, d).unwrap(), r);
        assert_eq!(Icmpv6Repr::parse(&b, d, d), Err(WireError::BadChecksum));
    }
}
