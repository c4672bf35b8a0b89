//! The packet a substrate's egress queues: what the [`Driver`](super::Driver) makes of a
//! [`Transmit`] ([`EgressPacket`]), the engine's own [`Transmit`] as one, and the software GSO
//! cut every packet type shares ([`gso_segments`], Linux's `skb_gso_segment`).

use shallow_qdisc::{tos_to_priority, QdiscPacket};
use shallow_wire::segment;

use crate::socket::{Transmit, TxToken};
use crate::time::Instant;

/// A packet type a [`Driver`](super::Driver) moves from the engine's `poll_transmit` into its
/// qdiscs: made from a [`Transmit`], and carrying its TX-completion token, which the driver
/// completes itself when a qdisc drops the packet.
pub trait EgressPacket: QdiscPacket + Send + 'static {
    /// The packet for the engine's output `t`.
    fn from_transmit(t: Transmit) -> Self;
    /// Its TX-completion token ([`Transmit::token`]), taken from a packet a qdisc dropped.
    fn into_token(self) -> Option<TxToken>;
}

/// The largest wire segment of a GSO packet held as `head` followed by `frag_len` paged bytes
/// (headers + `gso_size`), for [`QdiscPacket::gso_segment_len`]; `None` for a packet that is
/// not a TCP super-segment.
pub fn gso_segment_len(head: &[u8], frag_len: usize, gso_size: Option<u16>) -> Option<usize> {
    let gso = gso_size.filter(|&g| g > 0)?;
    let v = segment::parse_tcp_split(head, frag_len)?;
    Some(v.payload_off + usize::from(gso))
}

/// Software GSO (Linux's `skb_gso_segment`, which tbf calls for a packet above its burst): the
/// wire segments of a super-segment of `gso_size` payload bytes per segment, held as `head`
/// (its headers, then the payload unless paged) and `frag` (the paged payload, or empty).
/// `None` when the packet cannot be cut (not TCP, or the parts do not match the headers).
pub fn gso_segments(head: &[u8], frag: &[u8], gso_size: u16) -> Option<Vec<Vec<u8>>> {
    if gso_size == 0 {
        return None;
    }
    let v = segment::parse_tcp_split(head, frag.len())?;
    // The payload: in `frag` for a paged packet (whose head is its headers), else after the
    // headers.
    let (head, payload) = if frag.is_empty() {
        head.split_at(v.payload_off.min(head.len()))
    } else if head.len() == v.payload_off {
        (head, frag)
    } else {
        return None;
    };
    let n = v.payload_len.div_ceil(usize::from(gso_size)).max(1);
    let mut pieces = Vec::with_capacity(n);
    for i in 0..n {
        let mut out = Vec::new();
        segment::write_segment_parts(head, payload, &v, gso_size, i, &mut out).ok()?;
        pieces.push(out);
    }
    Some(pieces)
}

impl QdiscPacket for Transmit {
    fn len(&self) -> usize {
        Transmit::len(self)
    }
    fn flow_hash(&self) -> u32 {
        self.flow
    }
    fn departure(&self) -> Option<Instant> {
        self.departure
    }
    /// The TOS byte's priority (Linux `rt_tos2priority`), for pfifo_fast's bands.
    fn priority(&self) -> u8 {
        segment::tos(&self.data).map_or(0, tos_to_priority)
    }
    fn gso_segment_len(&self) -> Option<usize> {
        gso_segment_len(&self.data, self.frag.len(), self.gso_size)
    }
    /// [`gso_segments`]: the TX-completion token rides on the last piece.
    fn gso_segment(self) -> Result<Vec<Transmit>, Transmit> {
        let Some(pieces) = self
            .gso_size
            .and_then(|g| gso_segments(&self.data, &self.frag, g))
        else {
            return Err(self);
        };
        let Transmit {
            departure,
            mut token,
            flow,
            ..
        } = self;
        let last = pieces.len() - 1;
        Ok(pieces
            .into_iter()
            .enumerate()
            .map(|(i, data)| Transmit {
                data,
                frag: Default::default(),
                gso_size: None,
                departure,
                token: if i == last { token.take() } else { None },
                flow,
            })
            .collect())
    }
}

impl EgressPacket for Transmit {
    fn from_transmit(t: Transmit) -> Transmit {
        t
    }
    fn into_token(self) -> Option<TxToken> {
        self.token
    }
}
