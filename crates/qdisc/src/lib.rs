//! `shallow-qdisc`: the queueing disciplines of a Shallow host's egress path, shared by the
//! emulator (`shallow-sim`, virtual time) and the Linux substrate (`shallow-os`, real time).
//!
//! A qdisc holds packets between the engine's `poll_transmit` and the device (a NIC model or a
//! TUN). The device pulls with [`Qdisc::dequeue`] while it has room; when a qdisc holds packets
//! it may not release yet (fq's earliest departure times and `maxrate`, tbf's tokens),
//! [`Qdisc::next_wakeup`] says when to try again (Linux's `qdisc_watchdog`).
//!
//! Qdiscs are generic over the packet type through [`QdiscPacket`] (length, flow hash, earliest
//! departure time, priority, and the GSO split tbf needs), so each substrate queues its own
//! packet type without conversion. Time is the workspace's one time type, `shallow-time`'s
//! [`Instant`] (nanoseconds on whatever monotonic clock the substrate uses; spans are
//! [`Duration`](core::time::Duration)s): the qdiscs only add and compare times, never read a
//! clock. Same inputs → same outputs.
//!
//! The disciplines ([`Fifo`] for `pfifo`/`bfifo`, [`PfifoFast`], [`Tbf`], [`Fq`]) follow the
//! observable rules of Linux's `sch_fifo`, `sch_generic` (`pfifo_fast`), `sch_tbf` and `sch_fq`.
//!
//! ```
//! use shallow_qdisc::{Fq, FqConfig, Instant, Qdisc, QdiscPacket};
//!
//! struct P { len: usize, flow: u32, edt: Option<Instant> }
//! impl QdiscPacket for P {
//!     fn len(&self) -> usize { self.len }
//!     fn flow_hash(&self) -> u32 { self.flow }
//!     fn departure(&self) -> Option<Instant> { self.edt }
//! }
//!
//! let (t0, t2) = (Instant::ZERO, Instant::from_micros(2));
//! let mut q = Fq::new(FqConfig::new(1500));
//! q.enqueue(t0, P { len: 1500, flow: 1, edt: Some(t2) }).ok().unwrap();
//! assert!(q.dequeue(t0).is_none());            // held until its EDT
//! assert_eq!(q.next_wakeup(t0), Some(t2));     // arm a timer for then
//! assert_eq!(q.dequeue(t2).unwrap().len, 1500);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admission;
mod fifo;
mod fq;
mod pfifo_fast;
mod tbf;

pub use admission::{Admitted, Offer};
pub use fifo::Fifo;
pub use fq::{Fq, FqConfig};
pub use pfifo_fast::{pfifo_fast_band, tos_to_priority, PfifoFast};
pub use tbf::Tbf;

/// The one time type and the one rate type of the workspace, from `shallow-time` (re-exported
/// so the qdiscs' users keep their paths).
pub use shallow_time::{Instant, Rate, NSEC_PER_SEC};

/// What a qdisc needs to know about a packet.
///
/// Only [`len`](QdiscPacket::len), [`flow_hash`](QdiscPacket::flow_hash) and
/// [`departure`](QdiscPacket::departure) are required; the others have defaults that
/// suit a packet type without priorities or GSO.
pub trait QdiscPacket: Sized {
    /// Length in bytes as the qdisc accounts it (Linux `qdisc_pkt_len`; a GSO packet counts
    /// its full length).
    fn len(&self) -> usize;
    /// True for a zero-length packet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Flow hash (Linux `skb->hash`): the key of fq's per-flow queues.
    fn flow_hash(&self) -> u32;
    /// Earliest departure time (Linux `skb->tstamp` under EDT), if stamped. fq holds the
    /// packet until then; the other qdiscs ignore it, as in Linux.
    fn departure(&self) -> Option<Instant>;
    /// Priority (Linux `skb->priority`, 0..=15; values above 15 are masked with 15 as
    /// `TC_PRIO_MAX`): picks the `pfifo_fast` band. For an IP packet whose socket set no
    /// priority, Linux uses the TOS byte's priority ([`tos_to_priority`]). Default 0
    /// (best effort, band 1).
    fn priority(&self) -> u8 {
        0
    }
    /// Length as Linux's `qdisc_pkt_len` gives it: a GSO packet counts its IP and TCP
    /// headers once per wire segment (the bytes it will put on the wire), a plain packet its
    /// length. The default is [`QdiscPacket::len`]; tbf sizes, counts and charges tokens by
    /// it.
    fn qdisc_pkt_len(&self) -> usize {
        self.len()
    }
    /// For a GSO packet (a super-segment to be cut into wire segments), the length of its
    /// largest wire segment (headers + segment size). `None` (the default) for a packet that
    /// cannot be split.
    fn gso_segment_len(&self) -> Option<usize> {
        None
    }
    /// Cut a GSO packet into its wire segments, in order (Linux `skb_gso_segment`, which tbf
    /// calls in `tbf_segment`). Whatever completion duty the whole packet had (a
    /// TX-completion token) is shared among the pieces so that completing all of them
    /// completes the packet (a qdisc never drops some pieces and keeps others).
    /// `Err(self)` if the packet cannot be split (the default).
    fn gso_segment(self) -> Result<Vec<Self>, Self> {
        Err(self)
    }
}

/// Counters every qdisc keeps (`tc -s qdisc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Bytes accepted.
    pub enqueued_bytes: u64,
    /// Packets handed to the device.
    pub dequeued: u64,
    /// Bytes handed to the device.
    pub dequeued_bytes: u64,
    /// Packets dropped (all reasons).
    pub dropped: u64,
    /// Times a dequeue found packets it could not release yet (tbf out of tokens, fq flow
    /// throttled): Linux `overlimits` / fq `throttled`.
    pub overlimits: u64,
    /// fq: packets dropped because their flow had `flow_limit` packets queued.
    pub flow_limit_drops: u64,
    /// fq: packets dropped because their EDT was beyond the horizon.
    pub horizon_drops: u64,
    /// tbf: GSO packets larger than the burst that were split into segments.
    pub segmented: u64,
}

impl QdiscStats {
    fn on_enq(&mut self, len: usize) {
        self.enqueued += 1;
        self.enqueued_bytes += len as u64;
    }
    fn on_deq(&mut self, len: usize) {
        self.dequeued += 1;
        self.dequeued_bytes += len as u64;
    }
}

/// A queueing discipline over packets of type `P`, with time on the caller's clock.
pub trait Qdisc<P: QdiscPacket> {
    /// The `tc` name (`"pfifo_fast"`, `"fq"`, ...).
    fn kind(&self) -> &'static str;
    /// Offer a packet at time `now`. `Err` hands a dropped packet back, so the caller can
    /// complete its TX-completion duty (Linux runs the skb destructor on a drop); the drop is
    /// already counted.
    fn enqueue(&mut self, now: Instant, pkt: P) -> Result<(), P>;
    /// The next packet the device may send at `now`, if any.
    fn dequeue(&mut self, now: Instant) -> Option<P>;
    /// Admission at the transmit (Linux's `NET_XMIT_DROP` returned to the sender, see
    /// [`Admitted`]): would [`enqueue`](Qdisc::enqueue) at `now` take the packet `offer`
    /// describes if the packets of `admitted` were queued first? If yes, the offer is added to
    /// `admitted` (the caller removes it when it enqueues the packet, which then cannot be
    /// refused); if no, the refusal is counted as the drop it stands for.
    fn admit(&mut self, now: Instant, offer: &Offer, admitted: &mut Admitted) -> bool;
    /// Whether this qdisc will cut the packet `offer` describes into its wire segments when
    /// it is enqueued (tbf's `tbf_segment`, for a GSO packet above its burst). The sender
    /// learns it at the transmit: Linux's software GSO frees the packet the socket sent and
    /// charges the socket for each segment instead (`tcp_gso_segment`). Default: never.
    fn segments(&self, _offer: &Offer) -> bool {
        false
    }
    /// When `dequeue` returned `None` but packets are held: the earliest time one may be
    /// released (arm a timer for then). `None` when nothing is held back by time.
    fn next_wakeup(&self, now: Instant) -> Option<Instant>;
    /// Packets held.
    fn backlog_packets(&self) -> usize;
    /// Bytes held.
    fn backlog_bytes(&self) -> usize;
    /// Counters.
    fn stats(&self) -> &QdiscStats;
}

/// A small, fast, deterministic hasher for `u32` flow keys (multiply–rotate, in the style of
/// FxHash), the one flow-keyed hasher of the substrates (fq's flow table, the emulator's
/// per-flow maps). Flow hashes come from the host's own stack, not from the network, so
/// HashDoS resistance is not needed here.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowHasher(u64);

impl std::hash::Hasher for FlowHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// `BuildHasher` for [`FlowHasher`].
pub type FlowBuildHasher = std::hash::BuildHasherDefault<FlowHasher>;

/// A map keyed by flow hash.
pub type FlowMap<V> = std::collections::HashMap<u32, V, FlowBuildHasher>;

#[cfg(test)]
pub(crate) mod testpkt {
    use super::{Instant, QdiscPacket};

    /// The instant `ns` nanoseconds after the epoch.
    pub fn at(ns: u64) -> Instant {
        Instant(ns)
    }

    /// A test packet: `len` bytes, of which `hdr` are headers; `gso` payload bytes per wire
    /// segment when a super-segment; `token` stands for a completion duty.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct Pkt {
        pub len: usize,
        pub hdr: usize,
        pub flow: u32,
        pub edt: Option<u64>,
        pub prio: u8,
        pub gso: Option<usize>,
        pub token: Option<u64>,
    }

    pub fn pkt(len: usize, flow: u32) -> Pkt {
        Pkt {
            len,
            flow,
            ..Pkt::default()
        }
    }

    impl QdiscPacket for Pkt {
        fn len(&self) -> usize {
            self.len
        }
        fn flow_hash(&self) -> u32 {
            self.flow
        }
        fn departure(&self) -> Option<Instant> {
            self.edt.map(crate::Instant)
        }
        fn priority(&self) -> u8 {
            self.prio
        }
        fn qdisc_pkt_len(&self) -> usize {
            match self.gso.filter(|&g| g > 0) {
                Some(g) => self.len + self.hdr * ((self.len - self.hdr).div_ceil(g).max(1) - 1),
                None => self.len,
            }
        }
        fn gso_segment_len(&self) -> Option<usize> {
            self.gso.map(|g| self.hdr + g)
        }
        fn gso_segment(self) -> Result<Vec<Pkt>, Pkt> {
            let Some(g) = self.gso.filter(|&g| g > 0) else {
                return Err(self);
            };
            let payload = self.len - self.hdr;
            let n = payload.div_ceil(g).max(1);
            Ok((0..n)
                .map(|i| Pkt {
                    len: self.hdr + g.min(payload - i * g),
                    gso: None,
                    token: if i + 1 == n { self.token } else { None },
                    ..self.clone()
                })
                .collect())
        }
    }
}
