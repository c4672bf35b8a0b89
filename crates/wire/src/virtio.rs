//! The virtio-net header (virtio 1.x spec §5.1.6 "Device Operation", `struct virtio_net_hdr`)
//! that a Linux TUN/TAP device opened with `IFF_VNET_HDR` puts before every packet.

use crate::error::{Result, WireError};

/// The virtio-net header: offload metadata for one packet.
///
/// Fields are little-endian on the wire (virtio 1.x; a TUN device uses this order after
/// `TUNSETVNETLE`, and it is the native order on the little-endian hosts Shallow runs on).
/// The header is 10 bytes, or 12 with `num_buffers` (`VIRTIO_NET_F_MRG_RXBUF`, or
/// `TUNSETVNETHDRSZ` 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VirtioNetHdr {
    /// `NEEDS_CSUM` (1): the checksum from `csum_start` is to be completed (the field holds the
    /// pseudo-header sum); `DATA_VALID` (2): the checksum was verified; `RSC_INFO` (4).
    pub flags: u8,
    /// `NONE` 0, `TCPV4` 1, `UDP` 3, `TCPV6` 4, `UDP_L4` 5, or'ed with `ECN` 0x80 (the
    /// super-segment has CWR set, so only its first segment may carry it).
    pub gso_type: u8,
    /// Length of the headers to copy into every segment (Ethernet/IP/TCP).
    pub hdr_len: u16,
    /// Payload bytes per segment when `gso_type` is not `NONE`.
    pub gso_size: u16,
    /// Offset where checksumming starts (the transport header), with `NEEDS_CSUM`.
    pub csum_start: u16,
    /// Offset of the checksum field from `csum_start`, with `NEEDS_CSUM` (16 for TCP).
    pub csum_offset: u16,
    /// Number of merged receive buffers; `Some` makes the header 12 bytes.
    pub num_buffers: Option<u16>,
}

impl VirtioNetHdr {
    /// Length without `num_buffers`.
    pub const LEN: usize = 10;
    /// Length with `num_buffers`.
    pub const LEN_MRG: usize = 12;

    /// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
    pub const F_NEEDS_CSUM: u8 = 1;
    /// `VIRTIO_NET_HDR_F_DATA_VALID`.
    pub const F_DATA_VALID: u8 = 2;
    /// `VIRTIO_NET_HDR_F_RSC_INFO`.
    pub const F_RSC_INFO: u8 = 4;
    /// `VIRTIO_NET_HDR_GSO_NONE`.
    pub const GSO_NONE: u8 = 0;
    /// `VIRTIO_NET_HDR_GSO_TCPV4`.
    pub const GSO_TCPV4: u8 = 1;
    /// `VIRTIO_NET_HDR_GSO_UDP`.
    pub const GSO_UDP: u8 = 3;
    /// `VIRTIO_NET_HDR_GSO_TCPV6`.
    pub const GSO_TCPV6: u8 = 4;
    /// `VIRTIO_NET_HDR_GSO_UDP_L4`.
    pub const GSO_UDP_L4: u8 = 5;
    /// `VIRTIO_NET_HDR_GSO_ECN`, or'ed into `gso_type`.
    pub const GSO_ECN: u8 = 0x80;

    /// Parses a header of `len` bytes (10 or 12) from the front of `buf`.
    pub fn parse(buf: &[u8], len: usize) -> Result<Self> {
        if len != Self::LEN && len != Self::LEN_MRG {
            return Err(WireError::ValueOutOfRange);
        }
        let b = buf.get(..len).ok_or(WireError::Truncated)?;
        let le = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        Ok(VirtioNetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: le(2),
            gso_size: le(4),
            csum_start: le(6),
            csum_offset: le(8),
            num_buffers: (len == Self::LEN_MRG).then(|| le(10)),
        })
    }

    /// Encoded length: 10, or 12 with `num_buffers`.
    pub fn header_len(&self) -> usize {
        if self.num_buffers.is_some() {
            Self::LEN_MRG
        } else {
            Self::LEN
        }
    }

    /// Writes the header into the front of `buf`; returns its length.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.header_len();
        let b = buf.get_mut(..n).ok_or(WireError::BufferTooSmall)?;
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        if let Some(nb) = self.num_buffers {
            b[10..12].copy_from_slice(&nb.to_le_bytes());
        }
        Ok(n)
    }

    /// True when `NEEDS_CSUM` is set.
    pub fn needs_csum(&self) -> bool {
        self.flags & Self::F_NEEDS_CSUM != 0
    }

    /// The GSO type without the ECN bit.
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !Self::GSO_ECN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The field layout of `struct virtio_net_hdr`: two bytes then four little-endian u16.
    #[test]
    fn layout() {
        let h = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: VirtioNetHdr::GSO_TCPV4 | VirtioNetHdr::GSO_ECN,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
            num_buffers: None,
        };
        let mut b = [0u8; 12];
        assert_eq!(h.emit(&mut b).unwrap(), 10);
        assert_eq!(&b[..10], &[1, 0x81, 66, 0, 0xa8, 0x05, 20, 0, 16, 0]);
        assert_eq!(VirtioNetHdr::parse(&b, 10).unwrap(), h);
        assert_eq!(h.gso_kind(), VirtioNetHdr::GSO_TCPV4);
        let h12 = VirtioNetHdr {
            num_buffers: Some(1),
            ..h
        };
        assert_eq!(h12.emit(&mut b).unwrap(), 12);
        assert_eq!(VirtioNetHdr::parse(&b, 12).unwrap(), h12);
        assert_eq!(VirtioNetHdr::parse(&b, 11), Err(WireError::ValueOutOfRange));
        assert_eq!(VirtioNetHdr::parse(&b[..11], 12), Err(WireError::Truncated));
        assert_eq!(h12.emit(&mut [0; 11]), Err(WireError::BufferTooSmall));
    }
}
