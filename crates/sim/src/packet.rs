//! Packets and the network-side interface of an endpoint.

use crate::time::Time;

/// One IP packet leaving or reaching an endpoint.
///
/// Mirrors the engine's `Transmit` field for field, so an adapter is a move of each field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// One IP packet (IPv4 or IPv6, no link-layer header). A TSO super-segment may exceed the MTU.
    pub data: Vec<u8>,
    /// Payload bytes per wire segment when `data` is a super-segment (TSO on egress, GRO on
    /// ingress). `None` for an ordinary packet.
    pub gso_size: Option<u16>,
    /// Earliest departure time (EDT, Linux `skb->tstamp`): a pacing qdisc (fq) holds the packet
    /// until then. Other qdiscs ignore it, as in Linux.
    pub departure: Option<Time>,
    /// TX-completion token: when `Some`, the host calls [`Endpoint::tx_complete`] with it
    /// exactly once, when the packet has left the NIC (or was dropped below the endpoint, as
    /// Linux's `kfree_skb` runs the skb destructor `tcp_wfree` on a drop too).
    pub token: Option<u64>,
    /// Flow hash (Linux `skb->hash`), the key of fq's per-flow queues and of per-flow metrics.
    pub flow: u32,
}

impl Packet {
    /// An ordinary packet of `data` with no offload, EDT or token.
    pub fn new(data: Vec<u8>) -> Packet {
        Packet {
            data,
            ..Packet::default()
        }
    }
    /// Length in bytes (Linux `qdisc_pkt_len` without link-layer overhead).
    pub fn len(&self) -> usize {
        self.data.len()
    }
    /// True for a zero-length packet.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// The network side of one host's stack, as the emulator drives it.
///
/// This is the engine's `Stack` network interface (`input`, `poll_transmit`, `tx_complete`,
/// `poll_timeout`, `handle_timeout`) with the emulator's types; an adapter for
/// `shallow_tcp::Stack` maps each call onto the engine's call of the same name.
pub trait Endpoint {
    /// A packet arrived from the network (after GRO: `pkt.gso_size` is `Some(mss)` when several
    /// wire segments were merged into it). The endpoint may take `pkt.data` to keep the bytes
    /// without copying them (swapping in a spare buffer or an empty one); the emulator recycles
    /// whatever buffer is left in `pkt.data`.
    fn input(&mut self, now: Time, pkt: &mut Packet);
    /// [`Endpoint::input`] for a packet whose TCP checksum the receive path has already
    /// verified (receive checksum offload, Linux `CHECKSUM_UNNECESSARY`): an endpoint may skip
    /// summing it again. The default ignores the hint.
    fn input_csum_verified(&mut self, now: Time, pkt: &mut Packet) {
        self.input(now, pkt)
    }
    /// The next packet the endpoint wants sent, if any. The host calls this until it returns
    /// `None` after every other call.
    fn poll_transmit(&mut self, now: Time) -> Option<Packet>;
    /// The packet that carried `token` has left the host (its last bit is on the wire and the
    /// NIC's completion interrupt ran) or was dropped below the endpoint.
    fn tx_complete(&mut self, now: Time, token: u64);
    /// The endpoint's next timer deadline.
    fn poll_timeout(&self) -> Option<Time>;
    /// The deadline returned by `poll_timeout` has passed.
    fn handle_timeout(&mut self, now: Time);
}

/// A packet inside the host egress path, with the bookkeeping the emulator needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skb {
    /// The packet.
    pub pkt: Packet,
    /// When it entered the qdisc (start of its host-queue delay).
    pub enqueued: Time,
    /// Bytes this skb releases from its flow's "bytes below the endpoint" account when it
    /// completes: its length, except for pieces a qdisc split off a larger packet, where the
    /// last piece carries the whole original length and the others 0.
    pub acct_len: u32,
}

impl<T: Endpoint + ?Sized> Endpoint for Box<T> {
    fn input(&mut self, now: Time, pkt: &mut Packet) {
        (**self).input(now, pkt)
    }
    fn input_csum_verified(&mut self, now: Time, pkt: &mut Packet) {
        (**self).input_csum_verified(now, pkt)
    }
    fn poll_transmit(&mut self, now: Time) -> Option<Packet> {
        (**self).poll_transmit(now)
    }
    fn tx_complete(&mut self, now: Time, token: u64) {
        (**self).tx_complete(now, token)
    }
    fn poll_timeout(&self) -> Option<Time> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Time) {
        (**self).handle_timeout(now)
    }
}

impl Skb {
    /// Wrap `pkt`, entering the egress path at `now`.
    pub fn new(pkt: Packet, now: Time) -> Skb {
        Skb {
            acct_len: u32::try_from(pkt.data.len()).unwrap_or(u32::MAX),
            enqueued: now,
            pkt,
        }
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.pkt.data.len()
    }
    /// True for an empty packet.
    pub fn is_empty(&self) -> bool {
        self.pkt.data.is_empty()
    }
}
