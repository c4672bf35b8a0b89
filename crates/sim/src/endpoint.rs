//! The network side of one host's stack, as the emulator drives it ([`Endpoint`]).

use crate::packet::Packet;
use crate::qdisc::EgressHandle;
use crate::time::Instant;

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
    fn input(&mut self, now: Instant, pkt: &mut Packet);
    /// [`Endpoint::input`] for a packet whose TCP checksum the receive path has already
    /// verified (receive checksum offload, Linux `CHECKSUM_UNNECESSARY`): an endpoint may skip
    /// summing it again. The default ignores the hint.
    fn input_csum_verified(&mut self, now: Instant, pkt: &mut Packet) {
        self.input(now, pkt)
    }
    /// True if [`Endpoint::input`] takes packets with a [`Packet::frag`] (a device with
    /// scatter-gather); the emulator linearizes packets for an endpoint that does not. The
    /// default is false.
    fn accepts_frags(&self) -> bool {
        false
    }
    /// The next packet the endpoint wants sent, if any. The host calls this until it returns
    /// `None` after every other call.
    fn poll_transmit(&mut self, now: Instant) -> Option<Packet>;
    /// The packet that carried `token` has left the host (its last bit is on the wire and the
    /// NIC's completion interrupt ran) or was dropped below the endpoint. A packet that
    /// software GSO cut into wire segments (tbf's `tbf_segment`) completes once per segment,
    /// each with its own [`piece_token`](crate::packet::piece_token) (the packet's token, the
    /// segment's payload, whether it is the last); an endpoint that only counts whole packets
    /// acts on the last one.
    fn tx_complete(&mut self, now: Instant, token: u64);
    /// The emulator gives the endpoint its host's egress qdisc once, when the topology is
    /// built, so that it can learn the qdisc's verdict on a packet at the transmit
    /// ([`EgressGate`](crate::qdisc::EgressGate), Linux's `NET_XMIT_DROP`). An endpoint whose
    /// gate admitted a packet (recorded in its queue's ledger, `TxQueue::admitted`) must then
    /// release that packet through [`Endpoint::poll_transmit`]. The default ignores it: every
    /// packet is offered to the qdisc only when it is released.
    fn attach_egress(&mut self, egress: &EgressHandle) {
        let _ = egress;
    }
    /// The endpoint's next timer deadline.
    fn poll_timeout(&self) -> Option<Instant>;
    /// The deadline returned by `poll_timeout` has passed.
    fn handle_timeout(&mut self, now: Instant);
}

impl<T: Endpoint + ?Sized> Endpoint for Box<T> {
    fn input(&mut self, now: Instant, pkt: &mut Packet) {
        (**self).input(now, pkt)
    }
    fn input_csum_verified(&mut self, now: Instant, pkt: &mut Packet) {
        (**self).input_csum_verified(now, pkt)
    }
    fn accepts_frags(&self) -> bool {
        (**self).accepts_frags()
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Packet> {
        (**self).poll_transmit(now)
    }
    fn attach_egress(&mut self, egress: &EgressHandle) {
        (**self).attach_egress(egress)
    }
    fn tx_complete(&mut self, now: Instant, token: u64) {
        (**self).tx_complete(now, token)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}
