//! Translation between what a TUN device with `IFF_VNET_HDR` carries (a virtio-net header and
//! an IP packet) and what the engine takes and gives (`(bytes, gso_size)`).
//!
//! The rules are those of the virtio 1.x spec §5.1.6 ("Packet Transmission" and "Processing of
//! Incoming Packets"), as Linux's TUN driver applies them:
//! - `NEEDS_CSUM`: the checksum field at `csum_start + csum_offset` holds the folded
//!   pseudo-header sum (not complemented), and whoever finishes the packet sums everything from
//!   `csum_start` to the end and stores the complement there.
//! - `gso_type` `TCPV4`/`TCPV6` with `gso_size`: the packet is a TCP super-segment whose payload
//!   is cut into `gso_size`-byte segments; `hdr_len` is the length of the headers copied into
//!   every segment. Linux always sets `NEEDS_CSUM` on such packets.
//!
//! This module is pure code: it reads no fd and is tested without root.

use core::net::IpAddr;

use shallow_wire::checksum;
use shallow_wire::{tcp_field, IpPacket, TcpFlags, TcpPacket, VirtioNetHdr, IPPROTO_TCP};

/// Why a packet read from the TUN device was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RxError {
    /// Shorter than the virtio-net header.
    #[error("packet shorter than the virtio-net header")]
    Truncated,
    /// `csum_start`/`csum_offset` point outside the packet.
    #[error("NEEDS_CSUM offsets outside the packet")]
    BadCsumOffsets,
    /// A GSO type this crate does not take (UDP), one that does not match the IP version, or a
    /// `gso_size` of zero.
    #[error("unsupported or inconsistent GSO type {0:#x}")]
    BadGso(u8),
}

/// Why a packet could not be turned into a TUN write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxError {
    /// A super-segment (`gso_size` set) that is not a well-formed TCP/IP packet.
    #[error("GSO packet is not a well-formed TCP/IP packet")]
    NotTcp,
    /// Headers longer than [`MAX_TX_HEADERS`].
    #[error("GSO packet headers exceed {MAX_TX_HEADERS} bytes")]
    HeadersTooLong,
    /// `gso_size` of zero.
    #[error("gso_size of zero")]
    ZeroGsoSize,
}

/// Room for the headers of a GSO write: IPv6 with some extension headers plus TCP with 40
/// bytes of options.
pub const MAX_TX_HEADERS: usize = 256;

/// Finishes an inbound packet for the engine: completes a `NEEDS_CSUM` checksum in place and
/// returns the GRO segment size for a TCP GSO aggregate.
///
/// With `NEEDS_CSUM`, the checksum is completed as the virtio spec defines it (sum from
/// `csum_start` to the end, complemented, stored at `csum_offset`), so the engine's own
/// checksum check passes exactly when the kernel's partial sum was right. `DATA_VALID`
/// packets carry a complete checksum already and are left alone.
pub fn rx_finish(hdr: &VirtioNetHdr, packet: &mut [u8]) -> Result<Option<u16>, RxError> {
    if hdr.needs_csum() {
        let start = usize::from(hdr.csum_start);
        let field = start + usize::from(hdr.csum_offset);
        if field + 2 > packet.len() {
            return Err(RxError::BadCsumOffsets);
        }
        let c = checksum::combine(&[checksum::sum(&packet[start..])]);
        packet[field..field + 2].copy_from_slice(&c.to_be_bytes());
    }
    let kind = hdr.gso_kind();
    if kind == VirtioNetHdr::GSO_NONE {
        return Ok(None);
    }
    let version = packet.first().map(|b| b >> 4);
    let ok = match kind {
        VirtioNetHdr::GSO_TCPV4 => version == Some(4),
        VirtioNetHdr::GSO_TCPV6 => version == Some(6),
        _ => false,
    };
    if !ok || hdr.gso_size == 0 {
        return Err(RxError::BadGso(hdr.gso_type));
    }
    Ok(Some(hdr.gso_size))
}

/// A prepared TUN write: the virtio-net header and, for a super-segment, a copy of the packet's
/// headers with the checksum field replaced by the pseudo-header sum.
#[derive(Debug, Clone)]
pub struct TxPrep {
    /// The virtio-net header to put first.
    pub hdr: VirtioNetHdr,
    /// Copied headers (`head[..head_len]`), written in place of `packet[..head_len]`.
    pub head: [u8; MAX_TX_HEADERS],
    /// Length of the copied headers; 0 when the packet is written as it is.
    pub head_len: usize,
}

/// The GSO size of a write (`None`: a plain packet), a zero one refused.
fn gso_of(gso_size: Option<u16>) -> Result<Option<u16>, TxError> {
    match gso_size {
        Some(0) => Err(TxError::ZeroGsoSize),
        g => Ok(g),
    }
}

impl TxPrep {
    /// The write of a packet as it is: an all-zero header (`GSO_NONE`), no copied headers.
    fn plain() -> TxPrep {
        TxPrep {
            hdr: VirtioNetHdr::default(),
            head: [0; MAX_TX_HEADERS],
            head_len: 0,
        }
    }

    /// The copied headers.
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }
}

/// Prepares one outbound packet (as `Transmit::data`/`gso_size` give it) for the TUN device.
///
/// A packet without `gso_size`, or whose payload fits in one segment, is written as it is
/// behind an all-zero header (`GSO_NONE`, no flags): the engine's checksum is complete.
/// A super-segment gets `gso_type` `TCPV4`/`TCPV6` (plus `ECN` when CWR is set, as Linux marks
/// `SKB_GSO_TCP_ECN`), `gso_size`, `hdr_len` = IP + TCP headers, `NEEDS_CSUM` with
/// `csum_start` at the TCP header and `csum_offset` 16, and the TCP checksum field set to the
/// folded pseudo-header sum over the whole TCP length: the state Linux's `tcp_v4_send_check`
/// leaves a `CHECKSUM_PARTIAL` packet in, and what its GSO code adjusts per segment.
pub fn tx_prepare(packet: &[u8], gso_size: Option<u16>) -> Result<TxPrep, TxError> {
    let prep = TxPrep::plain();
    let Some(gso) = gso_of(gso_size)? else {
        return Ok(prep);
    };
    let ip = IpPacket::parse(packet).map_err(|_| TxError::NotTcp)?;
    if ip.protocol() != IPPROTO_TCP || ip.is_fragment() {
        return Err(TxError::NotTcp);
    }
    let l4 = ip.payload();
    let tcp = TcpPacket::new_checked(l4).map_err(|_| TxError::NotTcp)?;
    if tcp.payload().len() <= usize::from(gso) {
        return Ok(prep);
    }
    let csum_start = ip.as_bytes_len() - l4.len();
    let hdr_len = csum_start + tcp.header_len();
    if hdr_len > MAX_TX_HEADERS {
        return Err(TxError::HeadersTooLong);
    }
    let (kind, src, dst): (u8, IpAddr, IpAddr) = match ip {
        IpPacket::V4(_) => (VirtioNetHdr::GSO_TCPV4, ip.src(), ip.dst()),
        IpPacket::V6(_) => (VirtioNetHdr::GSO_TCPV6, ip.src(), ip.dst()),
    };
    let l4_len = u32::try_from(l4.len()).map_err(|_| TxError::NotTcp)?;
    let pseudo = checksum::pseudo_header(src, dst, IPPROTO_TCP, l4_len) as u16;
    let cwr = tcp.flags().contains(TcpFlags::CWR);
    gso_prep(prep, packet, csum_start, hdr_len, kind, cwr, pseudo, gso)
}

/// [`tx_prepare`] for a packet whose payload (`payload_len` bytes) lies apart from `head`,
/// which holds exactly its IP and TCP headers (the engine's scatter-gather `Transmit`:
/// `data` and `frags`). The same header as for the whole packet.
pub fn tx_prepare_split(
    head: &[u8],
    payload_len: usize,
    gso_size: Option<u16>,
) -> Result<TxPrep, TxError> {
    if payload_len == 0 {
        return tx_prepare(head, gso_size);
    }
    let prep = TxPrep::plain();
    let Some(gso) = gso_of(gso_size)? else {
        return Ok(prep);
    };
    let v = shallow_wire::segment::parse_tcp_split(head, payload_len).ok_or(TxError::NotTcp)?;
    if v.payload_off != head.len() || v.payload_len != payload_len {
        return Err(TxError::NotTcp);
    }
    if payload_len <= usize::from(gso) {
        return Ok(prep);
    }
    let hdr_len = v.payload_off;
    if hdr_len > MAX_TX_HEADERS {
        return Err(TxError::HeadersTooLong);
    }
    let l4_len = u32::try_from(v.tcp_len + payload_len).map_err(|_| TxError::NotTcp)?;
    let (kind, pseudo) = match v.ip_version {
        4 => (
            VirtioNetHdr::GSO_TCPV4,
            checksum::pseudo_header_octets(&head[12..16], &head[16..20], IPPROTO_TCP, l4_len),
        ),
        _ => (
            VirtioNetHdr::GSO_TCPV6,
            checksum::pseudo_header_octets(&head[8..24], &head[24..40], IPPROTO_TCP, l4_len),
        ),
    };
    let cwr = v.flags.contains(TcpFlags::CWR);
    gso_prep(
        prep,
        head,
        v.tcp_off,
        hdr_len,
        kind,
        cwr,
        pseudo as u16,
        gso,
    )
}

/// The GSO write's header and copied headers (see [`tx_prepare`]), from the packet's
/// `headers` (at least `hdr_len` bytes), its TCP header's offset and the folded
/// pseudo-header sum over the whole TCP length.
#[allow(clippy::too_many_arguments)]
fn gso_prep(
    mut prep: TxPrep,
    headers: &[u8],
    csum_start: usize,
    hdr_len: usize,
    kind: u8,
    cwr: bool,
    pseudo: u16,
    gso: u16,
) -> Result<TxPrep, TxError> {
    let ecn = if cwr { VirtioNetHdr::GSO_ECN } else { 0 };
    prep.head[..hdr_len].copy_from_slice(&headers[..hdr_len]);
    let field = tcp_field::CHECKSUM;
    prep.head[csum_start + field.start..csum_start + field.end]
        .copy_from_slice(&pseudo.to_be_bytes());
    prep.head_len = hdr_len;
    prep.hdr = VirtioNetHdr {
        flags: VirtioNetHdr::F_NEEDS_CSUM,
        gso_type: kind | ecn,
        hdr_len: hdr_len as u16,
        gso_size: gso,
        csum_start: csum_start as u16,
        csum_offset: tcp_field::CHECKSUM.start as u16,
        num_buffers: None,
    };
    Ok(prep)
}

/// Length of the whole IP packet a view covers (header + payload as the header says).
trait IpLen {
    fn as_bytes_len(&self) -> usize;
}

impl IpLen for IpPacket<'_> {
    fn as_bytes_len(&self) -> usize {
        match self {
            IpPacket::V4(p) => p.as_bytes().len(),
            IpPacket::V6(p) => p.as_bytes().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};
    use shallow_wire::{IpRepr, Ipv4Repr, Ipv6Repr, TcpOptionRepr, TcpRepr};

    fn tcp_packet(v6: bool, payload: &[u8], flags: TcpFlags) -> Vec<u8> {
        let tcp = TcpRepr {
            src_port: 40000,
            dst_port: 5001,
            seq: 1000,
            ack: 2000,
            flags,
            window: 1000,
            urgent: 0,
            options: vec![
                TcpOptionRepr::Nop,
                TcpOptionRepr::Nop,
                TcpOptionRepr::Timestamps { tsval: 1, tsecr: 2 },
            ],
        };
        let ip = if v6 {
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2),
                dst: Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1),
                next_header: IPPROTO_TCP,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 7,
                payload_len: tcp.header_len() + payload.len(),
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 213, 0, 2),
                dst: Ipv4Addr::new(10, 213, 0, 1),
                protocol: IPPROTO_TCP,
                ttl: 64,
                tos: 0,
                df: true,
                ident: 1,
                payload_len: tcp.header_len() + payload.len(),
            })
        };
        let mut buf = vec![0u8; 65536];
        let h = ip.emit(&mut buf).unwrap();
        let n = h + tcp
            .emit(&mut buf[h..], payload, ip.src(), ip.dst())
            .unwrap();
        buf.truncate(n);
        buf
    }

    fn tcp_csum_ok(packet: &[u8]) -> bool {
        let ip = IpPacket::parse(packet).unwrap();
        TcpPacket::new_checked(ip.payload())
            .unwrap()
            .checksum_valid(ip.src(), ip.dst())
    }

    /// A packet without gso_size is written whole behind an all-zero header (virtio §5.1.6.2:
    /// no flags, GSO_NONE, checksum already complete).
    #[test]
    fn plain_packet_gets_zero_header() {
        let p = tcp_packet(false, b"hello", TcpFlags::ACK);
        let prep = tx_prepare(&p, None).unwrap();
        assert_eq!(prep.hdr, VirtioNetHdr::default());
        assert_eq!(prep.head_len, 0);
        // One segment's worth of payload is not a super-segment either.
        let prep = tx_prepare(&p, Some(5)).unwrap();
        assert_eq!(prep.hdr, VirtioNetHdr::default());
    }

    /// A super-segment becomes TCPV4/TCPV6 GSO with NEEDS_CSUM at the TCP header, offset 16,
    /// hdr_len = IP + TCP headers, and the checksum field = folded pseudo-header sum
    /// (virtio §5.1.6.2; Linux `tcp_v4_send_check` for CHECKSUM_PARTIAL).
    #[test]
    fn super_segment_gets_gso_header_and_partial_checksum() {
        for v6 in [false, true] {
            let payload = vec![0xab; 3000];
            let p = tcp_packet(v6, &payload, TcpFlags::ACK | TcpFlags::PSH);
            let prep = tx_prepare(&p, Some(1448)).unwrap();
            let ip_len = if v6 { 40 } else { 20 };
            assert_eq!(prep.hdr.flags, VirtioNetHdr::F_NEEDS_CSUM);
            let kind = if v6 {
                VirtioNetHdr::GSO_TCPV6
            } else {
                VirtioNetHdr::GSO_TCPV4
            };
            assert_eq!(prep.hdr.gso_type, kind);
            assert_eq!(prep.hdr.gso_size, 1448);
            assert_eq!(usize::from(prep.hdr.csum_start), ip_len);
            assert_eq!(prep.hdr.csum_offset, 16);
            assert_eq!(usize::from(prep.hdr.hdr_len), ip_len + 32);
            assert_eq!(prep.head_len, ip_len + 32);
            // Completing the partial checksum as a NIC would gives the packet's real checksum.
            let mut whole = p.clone();
            whole[..prep.head_len].copy_from_slice(prep.head());
            let rx = rx_finish(&prep.hdr, &mut whole).unwrap();
            assert_eq!(rx, Some(1448));
            assert_eq!(whole, p);
        }
    }

    /// CWR on a super-segment marks it GSO_ECN (Linux `SKB_GSO_TCP_ECN`).
    /// Headers apart from the payload (a scatter-gather packet): the same write as for the
    /// whole packet.
    #[test]
    fn split_packet_prepares_as_the_whole() {
        for v6 in [false, true] {
            for (len, gso, flags) in [
                (3000, Some(1000), TcpFlags::ACK),
                (3000, Some(1000), TcpFlags::ACK | TcpFlags::CWR),
                (900, Some(1000), TcpFlags::ACK),
                (900, None, TcpFlags::ACK | TcpFlags::PSH),
            ] {
                let p = tcp_packet(v6, &vec![7; len], flags);
                let head = &p[..p.len() - len];
                let whole = tx_prepare(&p, gso).unwrap();
                let split = tx_prepare_split(head, len, gso).unwrap();
                assert_eq!(split.hdr, whole.hdr, "v6 {v6} len {len}");
                assert_eq!(split.head(), whole.head());
            }
        }
        let p = tcp_packet(false, &[1; 3000], TcpFlags::ACK);
        // The headers must be exactly the head, and the lengths must agree.
        assert_eq!(
            tx_prepare_split(&p[..p.len() - 2999], 2999, Some(1000)).unwrap_err(),
            TxError::NotTcp
        );
        assert_eq!(
            tx_prepare_split(&p[..p.len() - 3000], 2000, Some(1000)).unwrap_err(),
            TxError::NotTcp
        );
    }

    #[test]
    fn cwr_sets_gso_ecn() {
        let p = tcp_packet(false, &[1; 3000], TcpFlags::ACK | TcpFlags::CWR);
        let prep = tx_prepare(&p, Some(1000)).unwrap();
        assert_eq!(
            prep.hdr.gso_type,
            VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_ECN
        );
    }

    /// gso_size 0 and non-TCP super-segments are refused instead of handed to the kernel.
    #[test]
    fn tx_rejects_bad_input() {
        let p = tcp_packet(false, &[1; 3000], TcpFlags::ACK);
        assert_eq!(tx_prepare(&p, Some(0)).unwrap_err(), TxError::ZeroGsoSize);
        assert_eq!(
            tx_prepare(&p[..30], Some(100)).unwrap_err(),
            TxError::NotTcp
        );
        let mut udp = p.clone();
        udp[9] = 17;
        assert_eq!(tx_prepare(&udp, Some(100)).unwrap_err(), TxError::NotTcp);
    }

    /// Inbound NEEDS_CSUM: the field holds the pseudo-header sum; completing it yields a packet
    /// whose TCP checksum verifies (virtio §5.1.6.4).
    #[test]
    fn rx_completes_partial_checksum() {
        let p = tcp_packet(true, &[9; 100], TcpFlags::ACK);
        let mut partial = p.clone();
        let l4_len = (p.len() - 40) as u32;
        let ip = IpPacket::parse(&p).unwrap();
        let pseudo = checksum::pseudo_header(ip.src(), ip.dst(), IPPROTO_TCP, l4_len) as u16;
        partial[40 + 16..40 + 18].copy_from_slice(&pseudo.to_be_bytes());
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            csum_start: 40,
            csum_offset: 16,
            ..Default::default()
        };
        assert_eq!(rx_finish(&hdr, &mut partial), Ok(None));
        assert_eq!(partial, p);
        assert!(tcp_csum_ok(&partial));
    }

    /// Hostile headers are errors, never out-of-bounds writes.
    #[test]
    fn rx_rejects_bad_headers() {
        let mut p = tcp_packet(false, &[9; 10], TcpFlags::ACK);
        let len = p.len() as u16;
        let bad = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            csum_start: len - 1,
            csum_offset: 0,
            ..Default::default()
        };
        assert_eq!(rx_finish(&bad, &mut p), Err(RxError::BadCsumOffsets));
        let bad = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            csum_start: u16::MAX,
            csum_offset: u16::MAX,
            ..Default::default()
        };
        assert_eq!(rx_finish(&bad, &mut p), Err(RxError::BadCsumOffsets));
        for (gso_type, gso_size) in [
            (VirtioNetHdr::GSO_TCPV6, 1000), // v4 packet marked TCPV6
            (VirtioNetHdr::GSO_UDP_L4, 1000),
            (VirtioNetHdr::GSO_TCPV4, 0),
        ] {
            let h = VirtioNetHdr {
                gso_type,
                gso_size,
                ..Default::default()
            };
            assert_eq!(rx_finish(&h, &mut p), Err(RxError::BadGso(gso_type)));
        }
        let h = VirtioNetHdr {
            gso_type: VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_ECN,
            gso_size: 1000,
            ..Default::default()
        };
        assert_eq!(rx_finish(&h, &mut p), Ok(Some(1000)));
        assert_eq!(rx_finish(&h, &mut []), Err(RxError::BadGso(h.gso_type)));
    }

    proptest::proptest! {
        /// Any header over any bytes: an answer, never a panic or an out-of-bounds write
        /// (ARCHITECTURE.md: bytes from the network never cause a panic).
        #[test]
        fn rx_finish_never_panics(
            flags in 0u8..8, gso_type in proptest::prelude::any::<u8>(),
            gso_size in proptest::prelude::any::<u16>(),
            csum_start in proptest::prelude::any::<u16>(),
            csum_offset in proptest::prelude::any::<u16>(),
            mut bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        ) {
            let h = VirtioNetHdr {
                flags, gso_type, hdr_len: 0, gso_size, csum_start, csum_offset,
                num_buffers: None,
            };
            let _ = rx_finish(&h, &mut bytes);
        }

        /// Any bytes with any gso_size: a prepared write or an error, never a panic.
        #[test]
        fn tx_prepare_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            gso in proptest::option::of(proptest::prelude::any::<u16>()),
        ) {
            if let Ok(p) = tx_prepare(&bytes, gso) {
                proptest::prop_assert!(p.head_len <= bytes.len());
            }
        }

        /// Any headers with any payload length apart: a prepared write or an error.
        #[test]
        fn tx_prepare_split_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100),
            len in 0usize..200_000,
            gso in proptest::option::of(proptest::prelude::any::<u16>()),
        ) {
            if let Ok(p) = tx_prepare_split(&bytes, len, gso) {
                proptest::prop_assert!(p.head_len <= bytes.len());
            }
        }
    }
}
