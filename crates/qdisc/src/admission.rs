//! Admission at the transmit: whether a qdisc would take a packet that does not exist yet.
//!
//! Linux's sender learns a qdisc's verdict synchronously: `dev_queue_xmit` returns
//! `NET_XMIT_DROP` to `__tcp_transmit_skb`, which then leaves the skb unsent. A substrate whose
//! engine builds packets first and enqueues them later (after the engine call returns, or
//! after a modelled CPU delay) asks [`Qdisc::would_accept`] instead, at the moment the engine
//! transmits, and records each packet it admitted in an [`Admitted`] ledger until the packet
//! is really enqueued. The ledger counts as already queued, so a packet admitted earlier can
//! never be refused by its own enqueue: dequeues in between only make room.

use crate::FlowMap;

/// A packet offered for admission, described by what the qdiscs' drop rules look at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offer {
    /// Length in bytes as [`QdiscPacket::len`](crate::QdiscPacket::len) will report it.
    pub len: usize,
    /// Flow hash ([`QdiscPacket::flow_hash`](crate::QdiscPacket::flow_hash)).
    pub flow: u32,
    /// Priority ([`QdiscPacket::priority`](crate::QdiscPacket::priority)).
    pub priority: u8,
    /// Earliest departure time, if stamped (fq's horizon).
    pub departure: Option<crate::Instant>,
    /// Bytes of headers (IP and TCP), repeated in every wire segment of a GSO packet.
    pub header_len: usize,
    /// For a GSO packet, the payload bytes per wire segment; `None` for a plain packet.
    pub gso_size: Option<usize>,
}

impl Offer {
    /// The largest wire segment of a GSO packet (as
    /// [`QdiscPacket::gso_segment_len`](crate::QdiscPacket::gso_segment_len)).
    pub fn gso_segment_len(&self) -> Option<usize> {
        self.gso_size
            .filter(|&g| g > 0)
            .map(|g| self.header_len + g)
    }
    /// Length as Linux's `qdisc_pkt_len` ([`QdiscPacket::qdisc_pkt_len`](crate::QdiscPacket::qdisc_pkt_len)):
    /// the headers counted once per wire segment.
    pub fn qdisc_pkt_len(&self) -> usize {
        self.len + self.header_len * (self.segs() - 1)
    }
    /// Wire segments (1 for a plain packet).
    pub fn segs(&self) -> usize {
        match self.gso_size.filter(|&g| g > 0) {
            Some(g) => self.len.saturating_sub(self.header_len).div_ceil(g).max(1),
            None => 1,
        }
    }
}

/// Packets admitted by [`Qdisc::would_accept`](crate::Qdisc::would_accept) and not yet
/// enqueued: totals, per flow (fq's `flow_limit`) and per `pfifo_fast` band.
#[derive(Clone, Debug, Default)]
pub struct Admitted {
    packets: usize,
    bytes: usize,
    flows: FlowMap<usize>,
    bands: [usize; 3],
}

impl Admitted {
    /// An empty ledger.
    pub fn new() -> Admitted {
        Admitted::default()
    }
    /// Record an admitted packet.
    pub fn add(&mut self, o: &Offer) {
        self.packets += 1;
        self.bytes += o.len;
        *self.flows.entry(o.flow).or_default() += 1;
        self.bands[crate::pfifo_fast_band(o.priority)] += 1;
    }
    /// Forget an admitted packet when it is enqueued (`len`, `flow`, `priority` as at its
    /// admission). Returns false, changing nothing, when no such packet was admitted (a packet
    /// that did not come through admission).
    pub fn remove(&mut self, len: usize, flow: u32, priority: u8) -> bool {
        let Some(n) = self.flows.get_mut(&flow) else {
            return false;
        };
        let b = crate::pfifo_fast_band(priority);
        if self.packets == 0 || self.bytes < len || self.bands[b] == 0 {
            return false;
        }
        *n -= 1;
        if *n == 0 {
            self.flows.remove(&flow);
        }
        self.packets -= 1;
        self.bytes -= len;
        self.bands[b] -= 1;
        true
    }
    /// Packets admitted and not yet enqueued.
    pub fn packets(&self) -> usize {
        self.packets
    }
    /// Their bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Those of one flow.
    pub fn flow_packets(&self, flow: u32) -> usize {
        self.flows.get(&flow).copied().unwrap_or(0)
    }
    /// Those of one `pfifo_fast` band.
    pub fn band_packets(&self, band: usize) -> usize {
        self.bands.get(band).copied().unwrap_or(0)
    }
    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.packets == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testpkt::{at, pkt, Pkt};
    use crate::{Fifo, Fq, FqConfig, PfifoFast, Qdisc, QdiscPacket, Tbf};

    fn offer(p: &Pkt) -> Offer {
        Offer {
            len: p.len,
            flow: p.flow,
            priority: p.priority(),
            departure: p.edt.map(crate::Instant),
            header_len: p.hdr,
            gso_size: p.gso,
        }
    }

    /// Admit `n` packets of `flow` ahead of their enqueue, then enqueue the admitted ones:
    /// the refusals are counted as drops at admission, and no admitted packet is refused.
    fn admit_then_enqueue(q: &mut dyn Qdisc<Pkt>, pkts: Vec<Pkt>) -> (usize, usize) {
        let mut led = Admitted::new();
        let mut ok = Vec::new();
        let mut refused = 0;
        for p in pkts {
            if q.admit(at(0), &offer(&p), &mut led) {
                ok.push(p);
            } else {
                refused += 1;
            }
        }
        let admitted = ok.len();
        for p in ok {
            assert!(led.remove(p.len, p.flow, p.priority()));
            assert!(
                q.enqueue(at(0), p).is_ok(),
                "an admitted packet is never refused"
            );
        }
        assert!(led.is_empty());
        assert_eq!(q.stats().dropped, refused as u64);
        (admitted, refused)
    }

    #[test]
    fn pfifo_admits_up_to_its_limit() {
        let mut q = Fifo::pfifo(5);
        q.enqueue(at(0), pkt(100, 1)).unwrap();
        let r = admit_then_enqueue(&mut q, (0..8).map(|_| pkt(100, 1)).collect());
        assert_eq!(r, (4, 4));
        let mut z = Fifo::pfifo(0);
        assert_eq!(admit_then_enqueue(&mut z, vec![pkt(1, 1)]), (0, 1));
    }

    #[test]
    fn bfifo_and_tbf_count_bytes() {
        let mut q = Fifo::bfifo(3000);
        assert_eq!(
            admit_then_enqueue(&mut q, (0..3).map(|_| pkt(1500, 1)).collect()),
            (2, 1)
        );
        let mut t = Tbf::new(crate::Rate::mbps(10), 3000, 4000);
        let big = Pkt {
            len: 100 + 3000,
            hdr: 100,
            gso: Some(1500),
            ..pkt(0, 1)
        };
        // Cut in two segments of 1600 bytes: 3200 ≤ 4000; a second one would not fit.
        assert_eq!(admit_then_enqueue(&mut t, vec![big.clone(), big]), (1, 1));
    }

    #[test]
    fn fq_flow_limit_counts_admitted_packets_per_flow() {
        let mut cfg = FqConfig::new(1500);
        cfg.flow_limit = 3;
        let mut q = Fq::new(cfg);
        q.enqueue(at(0), pkt(100, 7)).unwrap();
        let pkts = (0..4)
            .flat_map(|_| [pkt(100, 7), pkt(100, 8)])
            .collect::<Vec<_>>();
        assert_eq!(admit_then_enqueue(&mut q, pkts), (5, 3));
        assert_eq!(q.stats().flow_limit_drops, 3);
    }

    #[test]
    fn pfifo_fast_limits_each_band() {
        let mut q = PfifoFast::new(2);
        let hi = Pkt {
            prio: 6,
            ..pkt(100, 1)
        };
        let pkts = vec![pkt(100, 1), pkt(100, 1), pkt(100, 1), hi.clone(), hi];
        assert_eq!(admit_then_enqueue(&mut q, pkts), (4, 1));
    }

    #[test]
    fn removing_an_unknown_packet_changes_nothing() {
        let mut led = Admitted::new();
        assert!(!led.remove(100, 1, 0));
        led.add(&offer(&pkt(100, 1)));
        assert!(!led.remove(100, 2, 0));
        assert_eq!((led.packets(), led.bytes()), (1, 100));
    }
}
