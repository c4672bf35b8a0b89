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

/// Linux's `qdisc_pkt_len` of a packet of `len` bytes held as `head` followed by `frag_len`
/// paged bytes: a TCP super-segment of `gso_size` payload bytes per segment counts its
/// headers once per wire segment; any other packet its length.
pub fn qdisc_pkt_len(head: &[u8], frag_len: usize, gso_size: Option<u16>, len: usize) -> usize {
    let Some(g) = gso_size.filter(|&g| g > 0) else {
        return len;
    };
    match segment::parse_tcp_split(head, frag_len) {
        Some(v) => {
            let segs = v.payload_len.div_ceil(usize::from(g)).max(1);
            len + v.payload_off * (segs - 1)
        }
        None => len,
    }
}

/// The TX-completion tokens of the `pieces` a packet with `token` was cut into, whose
/// headers are `header_len` bytes ([`TxToken::split`]).
pub fn split_token(
    token: Option<TxToken>,
    pieces: &[Vec<u8>],
    header_len: usize,
) -> Vec<Option<TxToken>> {
    match token {
        Some(t) => {
            let payloads: Vec<usize> = pieces
                .iter()
                .map(|p| p.len().saturating_sub(header_len))
                .collect();
            t.split(&payloads)
        }
        None => pieces.iter().map(|_| None).collect(),
    }
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
    fn qdisc_pkt_len(&self) -> usize {
        qdisc_pkt_len(&self.data, self.frags.len(), self.gso_size, self.len())
    }
    fn gso_segment_len(&self) -> Option<usize> {
        gso_segment_len(&self.data, self.frags.len(), self.gso_size)
    }
    /// [`gso_segments`]: each piece gets its share of the TX-completion token
    /// ([`split_token`]).
    fn gso_segment(self) -> Result<Vec<Transmit>, Transmit> {
        let Some((pieces, header_len)) = self.gso_size.and_then(|g| {
            let hl = gso_segment_len(&self.data, self.frags.len(), Some(g))? - usize::from(g);
            // Software GSO writes every segment out, so several pieces are joined first.
            let payload = match self.frags.as_single() {
                Some(b) => std::borrow::Cow::Borrowed(&b[..]),
                None => std::borrow::Cow::Owned(self.frags.to_vec()),
            };
            Some((gso_segments(&self.data, &payload, g)?, hl))
        }) else {
            return Err(self);
        };
        let Transmit {
            departure,
            token,
            flow,
            ..
        } = self;
        let tokens = split_token(token, &pieces, header_len);
        Ok(pieces
            .into_iter()
            .zip(tokens)
            .map(|(data, token)| Transmit {
                data,
                frags: Default::default(),
                gso_size: None,
                departure,
                token,
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
