//! The device side's verdict on an outgoing packet, given at the transmit.
//!
//! In Linux a qdisc that refuses a packet says so to the sender's transmit call:
//! `dev_queue_xmit` returns `NET_XMIT_DROP` to `__tcp_transmit_skb`, which takes it as local
//! congestion (`tcp_enter_cwr`) and reports the error to its caller, so the skb is not counted
//! as sent (`tcp_write_xmit` stops with the data still queued, `__tcp_retransmit_skb` counts
//! `TCPRetransFail`), and nothing about it looks like loss in the network. The engine builds
//! packets into an output queue that the substrate drains afterwards, so it asks the
//! substrate's admission rule instead, through a [`TxGate`] installed with
//! [`Stack::set_tx_gate`](crate::Stack::set_tx_gate), once per packet, before the packet
//! counts as sent. A substrate answers from its real qdisc (`shallow_qdisc::Qdisc::admit`)
//! and then guarantees that the packets it admitted are enqueued.
//!
//! [`DropAll`] is `tc qdisc ... pfifo limit 0` (installed with [`Stack::set_tx_gate`](crate::Stack::set_tx_gate)).

/// What the device side is told about a packet the engine is about to transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxMeta {
    /// Flow hash, as [`Transmit::flow`](crate::Transmit::flow) will carry it.
    pub flow: u32,
    /// Length of the IP packet in bytes (`data` + `frags` of the [`Transmit`](crate::Transmit)).
    pub len: usize,
    /// IP and TCP header bytes (repeated in each segment of a TSO/GSO packet).
    pub header_len: usize,
    /// Payload bytes per wire segment of a TSO/GSO packet (its `gso_size`), `None` otherwise.
    pub gso_size: Option<u16>,
    /// The TOS byte (traffic class) the packet carries, ECN bits included.
    pub tos: u8,
    /// Earliest departure time, if stamped (EDT, `Transmit::departure`).
    pub departure: Option<crate::Instant>,
    /// The time of the transmit (the engine call's `now`), on the substrate's clock.
    pub now: crate::Instant,
}

impl TxMeta {
    /// Wire segments the packet will be cut into (1 unless TSO/GSO).
    pub fn segs(&self) -> u32 {
        match self.gso_size.filter(|&g| g > 0) {
            Some(g) => {
                let payload = self.len.saturating_sub(self.header_len);
                (payload.div_ceil(usize::from(g)).max(1)) as u32
            }
            None => 1,
        }
    }
}

/// The substrate's admission rule for outgoing packets (its egress qdisc). `admit` is asked
/// synchronously, once per packet the engine transmits, in the order of the packets in the
/// output queue; `false` is `NET_XMIT_DROP`: the packet is not queued for output and the
/// engine behaves as Linux does on a local drop. An implementation that says `true` promises
/// that the packet will not be dropped by the qdisc when the substrate enqueues it, and counts
/// a refusal as that qdisc's drop. It must not call back into the [`Stack`](crate::Stack).
pub trait TxGate: Send {
    /// The verdict on one packet: `true` to accept it.
    fn admit(&mut self, pkt: &TxMeta) -> bool;
    /// The verdict with what becomes of an admitted packet: queued whole, or cut into its
    /// wire segments in software when it is enqueued (tbf's `tbf_segment`), in which case
    /// Linux's `tcp_gso_segment` frees the packet the socket sent and charges the socket each
    /// segment's own `truesize` instead (see [`TxToken::split`](crate::TxToken::split)). The
    /// engine asks this once per packet. Default: [`TxGate::admit`], never cut.
    fn verdict(&mut self, pkt: &TxMeta) -> Admission {
        if self.admit(pkt) {
            Admission::Queued
        } else {
            Admission::Refused
        }
    }
}

/// The device side's answer to a packet at the transmit ([`TxGate::verdict`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Refused (`NET_XMIT_DROP`).
    Refused,
    /// Admitted, queued as sent.
    Queued,
    /// Admitted, and the qdisc will cut it into wire segments at enqueue.
    Cut,
}

/// Refuses every packet: a qdisc with `limit 0`.
#[derive(Clone, Copy, Debug, Default)]
pub struct DropAll;

impl TxGate for DropAll {
    fn admit(&mut self, _pkt: &TxMeta) -> bool {
        false
    }
}
