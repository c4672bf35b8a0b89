//! TCP header and options (RFC 9293 §3.1, RFC 7323, RFC 2018).

use core::fmt;
use core::net::IpAddr;

use crate::checksum;
use crate::error::{Result, WireError};
use crate::ip::{IpRepr, IPPROTO_TCP};

/// Most option bytes a TCP header can carry: data offset 15 words − 5 fixed words.
pub const TCP_MAX_OPTIONS_LEN: usize = 40;

const KIND_EOL: u8 = 0;
const KIND_NOP: u8 = 1;
const KIND_MSS: u8 = 2;
const KIND_WS: u8 = 3;
const KIND_SACK_PERM: u8 = 4;
const KIND_SACK: u8 = 5;
const KIND_TS: u8 = 8;

/// Byte ranges of the fixed TCP header fields (RFC 9293 §3.1, Figure 1), from the start of the
/// TCP header. The one description of the header layout: [`TcpPacket`]'s accessors, the
/// emitters and the in-place header work of [`crate::segment`] all index through it.
pub mod field {
    use core::ops::Range;

    /// Source port.
    pub const SRC_PORT: Range<usize> = 0..2;
    /// Destination port.
    pub const DST_PORT: Range<usize> = 2..4;
    /// Sequence number.
    pub const SEQ: Range<usize> = 4..8;
    /// Acknowledgment number.
    pub const ACK: Range<usize> = 8..12;
    /// Data offset (high 4 bits), reserved bits and the 12 control bits: one big-endian
    /// 16-bit word ([`super::TcpFlags`] is its low 12 bits).
    pub const OFF_FLAGS: Range<usize> = 12..14;
    /// Window.
    pub const WINDOW: Range<usize> = 14..16;
    /// Checksum.
    pub const CHECKSUM: Range<usize> = 16..18;
    /// Urgent pointer.
    pub const URGENT: Range<usize> = 18..20;
    /// Where the options begin: the end of the fixed header.
    pub const OPTIONS: usize = 20;
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The 12 control bits after the data offset (RFC 9293 §3.1, with AE from RFC 9768's
/// accurate ECN and ECE/CWR from RFC 3168 §6.1). The three reserved bits above AE are kept so
/// that a parsed header re-emits identically.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// No more data from sender.
    pub const FIN: TcpFlags = TcpFlags(0x001);
    /// Synchronize sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x002);
    /// Reset the connection.
    pub const RST: TcpFlags = TcpFlags(0x004);
    /// Push function.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// Acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x010);
    /// Urgent pointer field is significant.
    pub const URG: TcpFlags = TcpFlags(0x020);
    /// ECN-Echo (RFC 3168 §6.1).
    pub const ECE: TcpFlags = TcpFlags(0x040);
    /// Congestion Window Reduced (RFC 3168 §6.1).
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// Accurate ECN flag (formerly NS, RFC 3540).
    pub const AE: TcpFlags = TcpFlags(0x100);
    /// The three reserved bits above AE (RFC 9293 §3.1 "Rsrvd"), kept as received.
    pub const RESERVED: TcpFlags = TcpFlags(0xe00);
    /// All 12 bits of the field: the control bits and the reserved ones.
    pub const ALL: TcpFlags = TcpFlags(0xfff);

    /// The empty set.
    pub const fn empty() -> TcpFlags {
        TcpFlags(0)
    }
    /// The raw 12-bit value.
    pub const fn bits(self) -> u16 {
        self.0
    }
    /// The flags of the 16-bit data-offset/flags word of a header (`field::OFF_FLAGS`): its
    /// low 12 bits.
    pub const fn from_word(word: u16) -> TcpFlags {
        TcpFlags(word & TcpFlags::ALL.0)
    }
    /// True when no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// True when every bit of `other` is set in `self`.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// True when any bit of `other` is set in `self`.
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }
    /// Sets or clears the bits of `other`.
    pub fn set(&mut self, other: TcpFlags, on: bool) {
        if on {
            self.0 |= other.0
        } else {
            self.0 &= !other.0
        }
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}
impl core::ops::BitOrAssign for TcpFlags {
    fn bitor_assign(&mut self, rhs: TcpFlags) {
        self.0 |= rhs.0
    }
}
impl core::ops::BitAnd for TcpFlags {
    type Output = TcpFlags;
    fn bitand(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & rhs.0)
    }
}
impl core::ops::BitAndAssign for TcpFlags {
    fn bitand_assign(&mut self, rhs: TcpFlags) {
        self.0 &= rhs.0
    }
}
impl core::ops::BitXor for TcpFlags {
    type Output = TcpFlags;
    fn bitxor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 ^ rhs.0)
    }
}
/// The complement within the 12 bits of the field ([`TcpFlags::ALL`]).
impl core::ops::Not for TcpFlags {
    type Output = TcpFlags;
    fn not(self) -> TcpFlags {
        TcpFlags(!self.0 & TcpFlags::ALL.0)
    }
}

/// tcpdump's letters, in tcpdump's order: `F S R P . U E W e` (`.` is ACK, `E` ECE, `W` CWR,
/// `e` AE); `none` for no flag. A SYN-ACK prints `S.`, a data segment with PSH `P.`.
impl fmt::Display for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LETTERS: [(TcpFlags, char); 9] = [
            (TcpFlags::FIN, 'F'),
            (TcpFlags::SYN, 'S'),
            (TcpFlags::RST, 'R'),
            (TcpFlags::PSH, 'P'),
            (TcpFlags::ACK, '.'),
            (TcpFlags::URG, 'U'),
            (TcpFlags::ECE, 'E'),
            (TcpFlags::CWR, 'W'),
            (TcpFlags::AE, 'e'),
        ];
        let mut any = false;
        for (flag, c) in LETTERS {
            if self.contains(flag) {
                fmt::Write::write_char(f, c)?;
                any = true;
            }
        }
        if !any {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TcpFlags({self} {:#05x})", self.0)
    }
}

/// Up to four SACK blocks (RFC 2018 §3), each `(left, right)`: the first sequence number of a
/// received block and the one just past it.
#[derive(Clone, Copy, Default, Eq)]
pub struct SackBlocks {
    blocks: [(u32, u32); 4],
    len: u8,
}

impl SackBlocks {
    /// Most blocks one option can hold (RFC 2018 §3: 4 × 8 + 2 = 34 ≤ 40 option bytes).
    pub const MAX: usize = 4;

    /// No blocks.
    pub const fn new() -> SackBlocks {
        SackBlocks {
            blocks: [(0, 0); 4],
            len: 0,
        }
    }
    /// Builds from a slice of at most four blocks.
    pub fn from_slice(blocks: &[(u32, u32)]) -> Result<SackBlocks> {
        let mut s = SackBlocks::new();
        for &(l, r) in blocks {
            s.push(l, r)?;
        }
        Ok(s)
    }
    /// Number of blocks.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }
    /// True when there is no block.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Appends a block; fails with [`WireError::TooManySackBlocks`] past four.
    pub fn push(&mut self, left: u32, right: u32) -> Result<()> {
        let slot = self
            .blocks
            .get_mut(usize::from(self.len))
            .ok_or(WireError::TooManySackBlocks)?;
        *slot = (left, right);
        self.len += 1;
        Ok(())
    }
    /// The blocks in option order.
    pub fn as_slice(&self) -> &[(u32, u32)] {
        &self.blocks[..self.len()]
    }
    /// Iterates over the blocks in option order.
    pub fn iter(&self) -> core::iter::Copied<core::slice::Iter<'_, (u32, u32)>> {
        self.as_slice().iter().copied()
    }
    /// Encoded option length: 2 + 8 per block.
    fn wire_len(&self) -> usize {
        2 + 8 * self.len()
    }
}

impl PartialEq for SackBlocks {
    fn eq(&self, other: &SackBlocks) -> bool {
        self.as_slice() == other.as_slice()
    }
}
impl core::hash::Hash for SackBlocks {
    fn hash<H: core::hash::Hasher>(&self, h: &mut H) {
        self.as_slice().hash(h)
    }
}
impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// One TCP option, borrowed from the header (RFC 9293 §3.1, §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TcpOption<'a> {
    /// Kind 0: end of option list; the bytes after it are padding.
    Eol,
    /// Kind 1: no-operation, used to align options.
    Nop,
    /// Kind 2, length 4: maximum segment size (RFC 9293 §3.7.1).
    Mss(u16),
    /// Kind 3, length 3: window scale shift count (RFC 7323 §2.2), as sent (not clamped to 14).
    WindowScale(u8),
    /// Kind 4, length 2: SACK permitted (RFC 2018 §2).
    SackPermitted,
    /// Kind 5, length 2 + 8n, 1 ≤ n ≤ 4: SACK blocks (RFC 2018 §3).
    Sack(SackBlocks),
    /// Kind 8, length 10: timestamps (RFC 7323 §3.2).
    Timestamps {
        /// TSval: the sender's timestamp clock.
        tsval: u32,
        /// TSecr: the echoed TSval.
        tsecr: u32,
    },
    /// Any other kind, or a known kind with a length its RFC does not allow (ignored as Linux's
    /// `tcp_parse_options` does): the option's data bytes after kind and length.
    Unknown {
        /// Option kind.
        kind: u8,
        /// The bytes after the kind and length bytes.
        data: &'a [u8],
    },
}

impl TcpOption<'_> {
    /// The option kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            TcpOption::Eol => KIND_EOL,
            TcpOption::Nop => KIND_NOP,
            TcpOption::Mss(_) => KIND_MSS,
            TcpOption::WindowScale(_) => KIND_WS,
            TcpOption::SackPermitted => KIND_SACK_PERM,
            TcpOption::Sack(_) => KIND_SACK,
            TcpOption::Timestamps { .. } => KIND_TS,
            TcpOption::Unknown { kind, .. } => *kind,
        }
    }
}

/// Iterator over the options of a TCP header (RFC 9293 §3.1 "Options").
///
/// Yields options in wire order. It ends after an EOL (the rest is padding), at the end of the
/// option space, or after yielding one `Err(BadOption)` for an option whose length byte is
/// missing, below 2 or past the option space (what follows cannot be located, so Linux's
/// `tcp_parse_options` stops there too).
#[derive(Debug, Clone)]
pub struct TcpOptionIter<'a> {
    rest: &'a [u8],
}

impl<'a> TcpOptionIter<'a> {
    /// Iterates over raw option bytes (at most 40 are meaningful, but any slice is safe).
    pub fn new(options: &'a [u8]) -> Self {
        TcpOptionIter { rest: options }
    }
}

impl<'a> Iterator for TcpOptionIter<'a> {
    type Item = Result<TcpOption<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&kind, after) = self.rest.split_first()?;
        match kind {
            KIND_EOL => {
                self.rest = &[];
                return Some(Ok(TcpOption::Eol));
            }
            KIND_NOP => {
                self.rest = after;
                return Some(Ok(TcpOption::Nop));
            }
            _ => {}
        }
        let Some(&len) = after.first() else {
            self.rest = &[];
            return Some(Err(WireError::BadOption));
        };
        let len = usize::from(len);
        if len < 2 || len > self.rest.len() {
            self.rest = &[];
            return Some(Err(WireError::BadOption));
        }
        let data = &self.rest[2..len];
        self.rest = &self.rest[len..];
        let opt = match (kind, len) {
            (KIND_MSS, 4) => TcpOption::Mss(be16(data, 0)),
            (KIND_WS, 3) => TcpOption::WindowScale(data[0]),
            (KIND_SACK_PERM, 2) => TcpOption::SackPermitted,
            (KIND_TS, 10) => TcpOption::Timestamps {
                tsval: be32(data, 0),
                tsecr: be32(data, 4),
            },
            (KIND_SACK, l) if l >= 10 && (l - 2) % 8 == 0 && (l - 2) / 8 <= SackBlocks::MAX => {
                let mut s = SackBlocks::new();
                for b in data.chunks_exact(8) {
                    // At most four chunks by the guard above.
                    let _ = s.push(be32(b, 0), be32(b, 4));
                }
                TcpOption::Sack(s)
            }
            _ => TcpOption::Unknown { kind, data },
        };
        Some(Ok(opt))
    }
}

/// A checked, zero-copy view of a TCP segment (RFC 9293 §3.1).
///
/// `new_checked` guarantees a 20-byte header, a data offset ≥ 5 and the whole header (options
/// included) inside the buffer. Options are parsed lazily by [`options`](Self::options), so a
/// malformed option does not make the segment unreadable. The buffer should end where the IP
/// packet's payload ends; the checksum is checked on demand with
/// [`checksum_valid`](Self::checksum_valid).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket<'a> {
    buf: &'a [u8],
}

impl<'a> TcpPacket<'a> {
    /// Length of the header without options.
    pub const MIN_HEADER_LEN: usize = field::OPTIONS;

    /// Checks `buf` as a TCP segment (see the type's doc).
    pub fn new_checked(buf: &'a [u8]) -> Result<Self> {
        if buf.len() < Self::MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let hl = usize::from(buf[field::OFF_FLAGS.start] >> 4) * 4;
        if hl < Self::MIN_HEADER_LEN {
            return Err(WireError::BadHeaderLen);
        }
        if hl > buf.len() {
            return Err(WireError::Truncated);
        }
        Ok(TcpPacket { buf })
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf, field::SRC_PORT.start)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf, field::DST_PORT.start)
    }
    /// Sequence number.
    pub fn seq(&self) -> u32 {
        be32(self.buf, field::SEQ.start)
    }
    /// Acknowledgment number (meaningful with ACK).
    pub fn ack(&self) -> u32 {
        be32(self.buf, field::ACK.start)
    }
    /// Header length in bytes (data offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.buf[field::OFF_FLAGS.start] >> 4) * 4
    }
    /// The 12 control bits (reserved bits included).
    pub fn flags(&self) -> TcpFlags {
        TcpFlags::from_word(be16(self.buf, field::OFF_FLAGS.start))
    }
    /// Window field, unscaled.
    pub fn window(&self) -> u16 {
        be16(self.buf, field::WINDOW.start)
    }
    /// Checksum field as stored.
    pub fn checksum(&self) -> u16 {
        be16(self.buf, field::CHECKSUM.start)
    }
    /// Urgent pointer.
    pub fn urgent(&self) -> u16 {
        be16(self.buf, field::URGENT.start)
    }
    /// The raw option bytes (header length − 20), padding included.
    pub fn options_bytes(&self) -> &'a [u8] {
        &self.buf[field::OPTIONS..self.header_len()]
    }
    /// Iterates over the options (see [`TcpOptionIter`]).
    pub fn options(&self) -> TcpOptionIter<'a> {
        TcpOptionIter::new(self.options_bytes())
    }
    /// The data after the header.
    pub fn payload(&self) -> &'a [u8] {
        &self.buf[self.header_len()..]
    }
    /// The segment's bytes: header and payload.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.buf
    }
    /// Sequence space the segment occupies: payload length + 1 for SYN + 1 for FIN
    /// (RFC 9293 §3.4, `SEG.LEN`).
    pub fn seg_len(&self) -> usize {
        self.payload().len()
            + usize::from(self.flags().contains(TcpFlags::SYN))
            + usize::from(self.flags().contains(TcpFlags::FIN))
    }
    /// True when the checksum over the pseudo-header of `src`/`dst` (RFC 9293 §3.1) and the
    /// whole segment verifies.
    pub fn checksum_valid(&self, src: IpAddr, dst: IpAddr) -> bool {
        let Ok(len) = u32::try_from(self.buf.len()) else {
            return false;
        };
        checksum::verify(&[
            checksum::pseudo_header(src, dst, IPPROTO_TCP, len),
            checksum::sum(self.buf),
        ])
    }
}

/// An owned TCP option to build (see [`TcpOption`] for the meaning of each).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TcpOptionRepr {
    /// Kind 0: end of option list.
    Eol,
    /// Kind 1: no-operation.
    Nop,
    /// Kind 2: maximum segment size.
    Mss(u16),
    /// Kind 3: window scale shift count.
    WindowScale(u8),
    /// Kind 4: SACK permitted.
    SackPermitted,
    /// Kind 5: SACK blocks (1 to 4).
    Sack(SackBlocks),
    /// Kind 8: timestamps.
    Timestamps {
        /// TSval.
        tsval: u32,
        /// TSecr.
        tsecr: u32,
    },
    /// Any other kind with its data bytes (emitted with length `2 + data.len()`).
    Unknown {
        /// Option kind.
        kind: u8,
        /// Bytes after kind and length.
        data: Vec<u8>,
    },
}

impl TcpOptionRepr {
    /// Encoded length in bytes.
    pub fn wire_len(&self) -> usize {
        match self {
            TcpOptionRepr::Eol | TcpOptionRepr::Nop => 1,
            TcpOptionRepr::Mss(_) => 4,
            TcpOptionRepr::WindowScale(_) => 3,
            TcpOptionRepr::SackPermitted => 2,
            TcpOptionRepr::Sack(s) => s.wire_len(),
            TcpOptionRepr::Timestamps { .. } => 10,
            TcpOptionRepr::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Writes the option at the front of `buf`; returns its length.
    fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.wire_len();
        let b = buf.get_mut(..n).ok_or(WireError::BadOption)?;
        match self {
            TcpOptionRepr::Eol => b[0] = KIND_EOL,
            TcpOptionRepr::Nop => b[0] = KIND_NOP,
            TcpOptionRepr::Mss(m) => {
                b[..2].copy_from_slice(&[KIND_MSS, 4]);
                b[2..].copy_from_slice(&m.to_be_bytes());
            }
            TcpOptionRepr::WindowScale(s) => b.copy_from_slice(&[KIND_WS, 3, *s]),
            TcpOptionRepr::SackPermitted => b.copy_from_slice(&[KIND_SACK_PERM, 2]),
            TcpOptionRepr::Sack(s) => {
                if s.is_empty() {
                    return Err(WireError::BadOption);
                }
                b[0] = KIND_SACK;
                b[1] = n as u8;
                for (chunk, (l, r)) in b[2..].chunks_exact_mut(8).zip(s.iter()) {
                    chunk[..4].copy_from_slice(&l.to_be_bytes());
                    chunk[4..].copy_from_slice(&r.to_be_bytes());
                }
            }
            TcpOptionRepr::Timestamps { tsval, tsecr } => {
                b[..2].copy_from_slice(&[KIND_TS, 10]);
                b[2..6].copy_from_slice(&tsval.to_be_bytes());
                b[6..].copy_from_slice(&tsecr.to_be_bytes());
            }
            TcpOptionRepr::Unknown { kind, data } => {
                if matches!(*kind, KIND_EOL | KIND_NOP) {
                    return Err(WireError::BadOption);
                }
                b[0] = *kind;
                b[1] = u8::try_from(n).map_err(|_| WireError::BadOption)?;
                b[2..].copy_from_slice(data);
            }
        }
        Ok(n)
    }
}

impl From<TcpOption<'_>> for TcpOptionRepr {
    fn from(o: TcpOption<'_>) -> Self {
        match o {
            TcpOption::Eol => TcpOptionRepr::Eol,
            TcpOption::Nop => TcpOptionRepr::Nop,
            TcpOption::Mss(m) => TcpOptionRepr::Mss(m),
            TcpOption::WindowScale(s) => TcpOptionRepr::WindowScale(s),
            TcpOption::SackPermitted => TcpOptionRepr::SackPermitted,
            TcpOption::Sack(s) => TcpOptionRepr::Sack(s),
            TcpOption::Timestamps { tsval, tsecr } => TcpOptionRepr::Timestamps { tsval, tsecr },
            TcpOption::Unknown { kind, data } => TcpOptionRepr::Unknown {
                kind,
                data: data.to_vec(),
            },
        }
    }
}

/// The fields of a TCP header to build (RFC 9293 §3.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// Window field (already scaled down by the sender's shift).
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options in wire order, NOPs explicit. `emit` pads the list with zero bytes (EOL) to a
    /// multiple of 4; `parse` leaves out the EOL option and everything after it.
    pub options: Vec<TcpOptionRepr>,
}

impl TcpRepr {
    /// Reads the header of `p`. Options are taken up to the first EOL or up to a malformed
    /// option, whichever comes first (what follows a malformed length cannot be located; Linux's
    /// `tcp_parse_options` likewise stops there and still processes the segment). The checksum
    /// is not checked here: see [`TcpPacket::checksum_valid`].
    pub fn parse(p: &TcpPacket<'_>) -> Result<Self> {
        let mut options = Vec::new();
        for o in p.options() {
            match o {
                Ok(TcpOption::Eol) | Err(_) => break,
                Ok(o) => options.push(o.into()),
            }
        }
        Ok(TcpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            seq: p.seq(),
            ack: p.ack(),
            flags: p.flags(),
            window: p.window(),
            urgent: p.urgent(),
            options,
        })
    }

    /// Length of the options, unpadded.
    pub fn options_len(&self) -> usize {
        self.options.iter().map(TcpOptionRepr::wire_len).sum()
    }

    /// Header length: 20 + options padded to a multiple of 4.
    pub fn header_len(&self) -> usize {
        TcpPacket::MIN_HEADER_LEN + self.options_len().div_ceil(4) * 4
    }

    /// Writes header, options, padding and `payload` into `buf`, fills in the checksum over the
    /// pseudo-header of `src`/`dst` (RFC 9293 §3.1), and returns `header_len() + payload.len()`.
    ///
    /// Fails with [`WireError::BadOption`] if the options exceed 40 bytes (or an option cannot
    /// be encoded), [`WireError::BufferTooSmall`] if `buf` cannot hold the segment.
    pub fn emit(&self, buf: &mut [u8], payload: &[u8], src: IpAddr, dst: IpAddr) -> Result<usize> {
        let n = self.emit_header(buf, payload.len())?;
        let total = n + payload.len();
        buf[n..total].copy_from_slice(payload);
        let len = u32::try_from(total).map_err(|_| WireError::ValueOutOfRange)?;
        let c = checksum::combine(&[
            checksum::pseudo_header(src, dst, IPPROTO_TCP, len),
            checksum::sum(&buf[..total]),
        ]);
        buf[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
        Ok(total)
    }

    /// Appends one whole IP packet to `out`: `ip`'s header (its `payload_len` must be this
    /// header's length plus `payload.len()`), this TCP header, then `payload`, with the TCP
    /// checksum filled (RFC 9293 §3.1) and, for IPv4, the header checksum. The payload is copied
    /// once, straight after the headers, without zero-filling its room first. Returns the
    /// packet's length; on error `out` is left as it was.
    pub fn emit_packet(&self, ip: &IpRepr, payload: &[u8], out: &mut Vec<u8>) -> Result<usize> {
        self.emit_packet_with(ip, &[payload], out, false, false)
    }

    /// [`TcpRepr::emit_packet`] with the checksum offloaded (Linux `CHECKSUM_PARTIAL`): the
    /// checksum field holds the folded pseudo-header sum, not complemented, and the payload
    /// is not summed; the device completes it (for a TSO packet, once per wire segment; see
    /// `segment::complete_tcp_checksum`).
    pub fn emit_packet_csum_partial(
        &self,
        ip: &IpRepr,
        payload: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<usize> {
        self.emit_packet_with(ip, &[payload], out, true, false)
    }

    /// [`TcpRepr::emit_packet`] (or, with `csum_partial`, [`TcpRepr::emit_packet_csum_partial`])
    /// for a packet whose payload stays where it is, as a device with scatter-gather takes an
    /// skb's paged data: appends only the IP and TCP headers, with the lengths and checksums of
    /// the whole packet (the payload is summed, not copied). Returns the headers' length.
    pub fn emit_packet_head(
        &self,
        ip: &IpRepr,
        payload: &[u8],
        out: &mut Vec<u8>,
        csum_partial: bool,
    ) -> Result<usize> {
        self.emit_packet_with(ip, &[payload], out, csum_partial, true)
    }

    /// [`TcpRepr::emit_packet_head`] for a payload held in several pieces (an skb's
    /// fragments, each where it lies): the checksum sums them in order as one run of bytes
    /// (a piece that starts at an odd offset has its sum byte-swapped, RFC 1071 §2(B)).
    pub fn emit_packet_head_parts(
        &self,
        ip: &IpRepr,
        parts: &[&[u8]],
        out: &mut Vec<u8>,
        csum_partial: bool,
    ) -> Result<usize> {
        self.emit_packet_with(ip, parts, out, csum_partial, true)
    }

    fn emit_packet_with(
        &self,
        ip: &IpRepr,
        parts: &[&[u8]],
        out: &mut Vec<u8>,
        partial: bool,
        head_only: bool,
    ) -> Result<usize> {
        let start = out.len();
        let (hl, tl) = (ip.header_len(), self.header_len());
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        if head_only {
            out.resize(start + hl + tl, 0);
        } else {
            out.reserve(hl + tl + payload_len);
            out.resize(start + hl + tl, 0);
            for p in parts {
                out.extend_from_slice(p);
            }
        }
        let r = (|| {
            let pkt = &mut out[start..];
            ip.emit(pkt)?;
            let seg = &mut pkt[hl..];
            self.emit_header(seg, if head_only { 0 } else { payload_len })?;
            let len = u32::try_from(tl + payload_len).map_err(|_| WireError::ValueOutOfRange)?;
            let pseudo = checksum::pseudo_header(ip.src(), ip.dst(), IPPROTO_TCP, len);
            let c = if partial {
                // combine() complements; the partial form is the plain folded sum.
                !checksum::combine(&[pseudo])
            } else {
                // `seg` holds the payload unless it stays apart; the header is a whole
                // number of 32-bit words, so the two sums add up.
                let apart = if head_only {
                    checksum::sum_parts(parts.iter().copied())
                } else {
                    0
                };
                checksum::combine(&[pseudo, checksum::sum(seg), apart])
            };
            seg[field::CHECKSUM].copy_from_slice(&c.to_be_bytes());
            Ok(pkt.len())
        })();
        if r.is_err() {
            out.truncate(start);
        }
        r
    }

    /// Writes only the header (options and padding included) with a zero checksum field,
    /// checking that `buf` could also hold `payload_len` bytes after it; returns the header
    /// length. For callers that place the payload themselves and then compute the checksum
    /// (or leave it to a NIC, with a virtio `NEEDS_CSUM` header).
    pub fn emit_header(&self, buf: &mut [u8], payload_len: usize) -> Result<usize> {
        let opt_len = self.options_len();
        if opt_len > TCP_MAX_OPTIONS_LEN {
            return Err(WireError::BadOption);
        }
        let hl = TcpPacket::MIN_HEADER_LEN + opt_len.div_ceil(4) * 4;
        if buf.len() < hl + payload_len {
            return Err(WireError::BufferTooSmall);
        }
        let h = &mut buf[..hl];
        h[field::SRC_PORT].copy_from_slice(&self.src_port.to_be_bytes());
        h[field::DST_PORT].copy_from_slice(&self.dst_port.to_be_bytes());
        h[field::SEQ].copy_from_slice(&self.seq.to_be_bytes());
        h[field::ACK].copy_from_slice(&self.ack.to_be_bytes());
        let off_flags = ((hl as u16 / 4) << 12) | (self.flags & TcpFlags::ALL).0;
        h[field::OFF_FLAGS].copy_from_slice(&off_flags.to_be_bytes());
        h[field::WINDOW].copy_from_slice(&self.window.to_be_bytes());
        h[field::CHECKSUM].copy_from_slice(&[0, 0]);
        h[field::URGENT].copy_from_slice(&self.urgent.to_be_bytes());
        let mut at = field::OPTIONS;
        for o in &self.options {
            at += o.emit(&mut h[at..])?;
        }
        h[at..].fill(KIND_EOL);
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::Ipv4Addr;

    fn src() -> IpAddr {
        Ipv4Addr::new(10, 0, 0, 1).into()
    }
    fn dst() -> IpAddr {
        Ipv4Addr::new(10, 0, 0, 2).into()
    }

    fn syn() -> TcpRepr {
        TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq: 0x01020304,
            ack: 0,
            flags: TcpFlags::SYN,
            window: 64240,
            urgent: 0,
            options: vec![
                TcpOptionRepr::Mss(1460),
                TcpOptionRepr::SackPermitted,
                TcpOptionRepr::Timestamps { tsval: 1, tsecr: 0 },
                TcpOptionRepr::Nop,
                TcpOptionRepr::WindowScale(7),
            ],
        }
    }

    /// Linux's SYN option layout (mss, sackOK, TS, nop, wscale) is 20 bytes: header 40.
    #[test]
    fn syn_layout() {
        let r = syn();
        assert_eq!(r.header_len(), 40);
        let mut b = [0u8; 64];
        let n = r.emit(&mut b, &[], src(), dst()).unwrap();
        assert_eq!(n, 40);
        assert_eq!(
            &b[20..40],
            &[2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7]
        );
        let p = TcpPacket::new_checked(&b[..n]).unwrap();
        assert!(p.checksum_valid(src(), dst()));
        assert_eq!(TcpRepr::parse(&p).unwrap(), r);
        assert_eq!(p.flags().to_string(), "S");
    }

    /// `emit_packet` appends exactly what `IpRepr::emit` + `emit` write into a zeroed buffer,
    /// for IPv4 and IPv6; on error it leaves `out` untouched.
    #[test]
    fn emit_packet_matches_emit() {
        use crate::ip::{Ipv4Repr, Ipv6Repr};
        let r = syn();
        let payload: Vec<u8> = (0..1001u32).map(|i| (i * 7) as u8).collect();
        let tl = r.header_len() + payload.len();
        let ips = [
            IpRepr::V4(Ipv4Repr {
                src: "192.0.2.1".parse().unwrap(),
                dst: "198.51.100.2".parse().unwrap(),
                protocol: IPPROTO_TCP,
                ttl: 64,
                tos: 2,
                df: true,
                ident: 7,
                payload_len: tl,
            }),
            IpRepr::V6(Ipv6Repr {
                src: "2001:db8::1".parse().unwrap(),
                dst: "2001:db8::2".parse().unwrap(),
                next_header: IPPROTO_TCP,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 5,
                payload_len: tl,
            }),
        ];
        for ip in ips {
            let hl = ip.header_len();
            let mut want = vec![0u8; hl + tl];
            ip.emit(&mut want).unwrap();
            r.emit(&mut want[hl..], &payload, ip.src(), ip.dst())
                .unwrap();
            let mut out = vec![9, 9];
            assert_eq!(r.emit_packet(&ip, &payload, &mut out).unwrap(), hl + tl);
            assert_eq!(&out[..2], &[9, 9]);
            assert_eq!(&out[2..], &want[..]);
            // The offloaded form completes to the same bytes.
            let mut part = Vec::new();
            r.emit_packet_csum_partial(&ip, &payload, &mut part)
                .unwrap();
            assert_ne!(part, want);
            let v = crate::segment::parse_tcp(&part).unwrap();
            crate::segment::complete_tcp_checksum(&mut part, &v);
            assert_eq!(part, want);
            // Headers only, the payload left apart: the same bytes once it is appended,
            // with either checksum form.
            for partial in [false, true] {
                let mut head = vec![9];
                let n = r
                    .emit_packet_head(&ip, &payload, &mut head, partial)
                    .unwrap();
                assert_eq!(n, hl + r.header_len());
                head.extend_from_slice(&payload);
                let mut whole = vec![9];
                if partial {
                    r.emit_packet_csum_partial(&ip, &payload, &mut whole)
                } else {
                    r.emit_packet(&ip, &payload, &mut whole)
                }
                .unwrap();
                assert_eq!(head, whole, "partial: {partial}");
                // The payload in pieces (odd lengths among them): the same headers.
                let cuts = [0, 1, 4, 7, payload.len()];
                let parts: Vec<&[u8]> = cuts.windows(2).map(|w| &payload[w[0]..w[1]]).collect();
                let mut head2 = vec![9];
                r.emit_packet_head_parts(&ip, &parts, &mut head2, partial)
                    .unwrap();
                head2.extend_from_slice(&payload);
                assert_eq!(head2, whole, "pieces, partial: {partial}");
            }
        }
        let mut bad = syn();
        bad.options = vec![TcpOptionRepr::Nop; 41];
        let mut out = vec![1];
        assert!(bad.emit_packet(&ips[0], &payload, &mut out).is_err());
        assert_eq!(out, vec![1]);
        assert!(bad
            .emit_packet_head(&ips[0], &payload, &mut out, false)
            .is_err());
        assert_eq!(out, vec![1]);
    }

    /// RFC 9293 §3.1: data offset below 5 or beyond the buffer is malformed.
    #[test]
    fn data_offset_checks() {
        let mut b = [0u8; 20];
        b[12] = 4 << 4;
        assert_eq!(TcpPacket::new_checked(&b), Err(WireError::BadHeaderLen));
        b[12] = 6 << 4;
        assert_eq!(TcpPacket::new_checked(&b), Err(WireError::Truncated));
        assert_eq!(TcpPacket::new_checked(&b[..19]), Err(WireError::Truncated));
    }

    /// RFC 9293 §3.1: an option length below 2 or past the option space is malformed; the
    /// iterator reports it once and stops; options before it stay readable.
    #[test]
    fn malformed_options() {
        let cases: [&[u8]; 4] = [&[1, 2], &[1, 2, 1, 0], &[1, 8, 12, 1, 2, 3], &[1, 30, 3]];
        for opts in cases {
            let v: Vec<_> = TcpOptionIter::new(opts).collect();
            assert_eq!(v[0], Ok(TcpOption::Nop));
            assert_eq!(v[1], Err(WireError::BadOption));
            assert_eq!(v.len(), 2);
        }
    }

    /// A known kind with a wrong length is skipped as Unknown (Linux `tcp_parse_options` ignores
    /// it); unknown kinds (e.g. 30 MPTCP, 254 experimental) keep their bytes.
    #[test]
    fn unknown_and_wrong_length_options() {
        let opts = [2, 3, 9, 30, 4, 0xaa, 0xbb, 254, 2, 5, 6, 1, 2, 3, 4];
        let v: Vec<_> = TcpOptionIter::new(&opts).map(|o| o.unwrap()).collect();
        assert_eq!(
            v,
            vec![
                TcpOption::Unknown {
                    kind: 2,
                    data: &[9]
                },
                TcpOption::Unknown {
                    kind: 30,
                    data: &[0xaa, 0xbb]
                },
                TcpOption::Unknown {
                    kind: 254,
                    data: &[]
                },
                TcpOption::Unknown {
                    kind: 5,
                    data: &[1, 2, 3, 4]
                },
            ]
        );
    }

    /// RFC 2018 §3: 1 to 4 blocks of 8 bytes; 4 blocks fill 34 bytes.
    #[test]
    fn sack_blocks() {
        let mut s = SackBlocks::new();
        for i in 0..4 {
            s.push(i * 100, i * 100 + 50).unwrap();
        }
        assert_eq!(s.push(1, 2), Err(WireError::TooManySackBlocks));
        let r = TcpRepr {
            options: vec![
                TcpOptionRepr::Nop,
                TcpOptionRepr::Nop,
                TcpOptionRepr::Sack(s),
            ],
            flags: TcpFlags::ACK,
            ..syn()
        };
        assert_eq!(r.header_len(), 56);
        let mut b = [0u8; 56];
        r.emit(&mut b, &[], src(), dst()).unwrap();
        let p = TcpPacket::new_checked(&b).unwrap();
        assert_eq!(TcpRepr::parse(&p).unwrap(), r);
        match p.options().nth(2) {
            Some(Ok(TcpOption::Sack(got))) => assert_eq!(got.as_slice()[3], (300, 350)),
            other => panic!("{other:?}"),
        }
    }

    /// RFC 9293 §3.1: options are padded with zeros to a 32-bit boundary; parse drops the
    /// EOL and padding.
    #[test]
    fn padding_and_eol() {
        let r = TcpRepr {
            options: vec![TcpOptionRepr::WindowScale(14)],
            ..syn()
        };
        assert_eq!(r.header_len(), 24);
        let mut b = [0xffu8; 24];
        r.emit(&mut b, &[], src(), dst()).unwrap();
        assert_eq!(&b[20..24], &[3, 3, 14, 0]);
        let p = TcpPacket::new_checked(&b).unwrap();
        let all: Vec<_> = p.options().collect();
        assert_eq!(
            all,
            vec![Ok(TcpOption::WindowScale(14)), Ok(TcpOption::Eol)]
        );
        assert_eq!(TcpRepr::parse(&p).unwrap(), r);
    }

    /// Options beyond 40 bytes cannot be encoded; a short buffer is refused.
    #[test]
    fn emit_limits() {
        let r = TcpRepr {
            options: vec![TcpOptionRepr::Nop; 41],
            ..syn()
        };
        assert_eq!(
            r.emit(&mut [0; 100], &[], src(), dst()),
            Err(WireError::BadOption)
        );
        assert_eq!(
            syn().emit(&mut [0; 41], &[1, 2], src(), dst()),
            Err(WireError::BufferTooSmall)
        );
        let r = TcpRepr {
            options: vec![TcpOptionRepr::Sack(SackBlocks::new())],
            ..syn()
        };
        assert_eq!(
            r.emit(&mut [0; 100], &[], src(), dst()),
            Err(WireError::BadOption)
        );
    }

    /// The checksum covers the payload and the pseudo-header (RFC 9293 §3.1).
    #[test]
    fn checksum_covers_payload_and_addresses() {
        let mut b = [0u8; 45];
        let n = syn().emit(&mut b, b"hello", src(), dst()).unwrap();
        let p = TcpPacket::new_checked(&b[..n]).unwrap();
        assert!(p.checksum_valid(src(), dst()));
        assert!(!p.checksum_valid(dst(), Ipv4Addr::new(10, 0, 0, 3).into()));
        b[44] ^= 0x10;
        assert!(!TcpPacket::new_checked(&b)
            .unwrap()
            .checksum_valid(src(), dst()));
    }

    /// tcpdump's flag letters and order.
    #[test]
    fn flag_letters() {
        let f = |x: TcpFlags| x.to_string();
        assert_eq!(f(TcpFlags::SYN | TcpFlags::ACK), "S.");
        assert_eq!(f(TcpFlags::PSH | TcpFlags::ACK), "P.");
        assert_eq!(f(TcpFlags::FIN | TcpFlags::ACK), "F.");
        assert_eq!(f(TcpFlags::RST), "R");
        assert_eq!(f(TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR), "SEW");
        assert_eq!(f(TcpFlags::empty()), "none");
        assert_eq!(TcpFlags::AE.bits(), 0x100);
    }

    /// SEG.LEN counts SYN and FIN (RFC 9293 §3.4).
    #[test]
    fn seg_len_counts_syn_fin() {
        let mut b = [0u8; 45];
        let r = TcpRepr {
            flags: TcpFlags::SYN | TcpFlags::FIN,
            ..syn()
        };
        let n = r.emit(&mut b, b"abcde", src(), dst()).unwrap();
        assert_eq!(TcpPacket::new_checked(&b[..n]).unwrap().seg_len(), 7);
    }
}
