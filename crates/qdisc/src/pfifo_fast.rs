//! `pfifo_fast` (Linux `sch_generic.c`): three drop-tail bands in strict priority.

use std::collections::VecDeque;

use crate::{Admitted, Instant, Offer, Qdisc, QdiscPacket, QdiscStats};

/// The priority Linux gives an IP packet from its TOS byte (`rt_tos2priority`: the table
/// `ip_tos2prio` indexed by the four TOS bits `(tos & 0x1e) >> 1`).
pub fn tos_to_priority(tos: u8) -> u8 {
    const TOS2PRIO: [u8; 16] = [0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4];
    TOS2PRIO[usize::from((tos & 0x1e) >> 1)]
}

/// The `pfifo_fast` band of a priority: Linux's default priomap
/// `1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1`, indexed by `priority & TC_PRIO_MAX` (15).
pub fn pfifo_fast_band(priority: u8) -> usize {
    const PRIO2BAND: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    usize::from(PRIO2BAND[usize::from(priority & 15)])
}

/// `pfifo_fast`: three drop-tail bands served in strict priority (band 0 first), the band
/// chosen by [`QdiscPacket::priority`] through [`pfifo_fast_band`]. Each band holds up to
/// `txqueuelen` packets, as the per-band rings of Linux ≥ 4.16.
#[derive(Debug)]
pub struct PfifoFast<P> {
    bands: [VecDeque<P>; 3],
    limit: usize,
    bytes: usize,
    stats: QdiscStats,
}

impl<P> PfifoFast<P> {
    /// A `pfifo_fast` for a device with `txqueuelen` (Linux default 1000).
    pub fn new(txqueuelen: usize) -> PfifoFast<P> {
        PfifoFast {
            bands: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            limit: txqueuelen,
            bytes: 0,
            stats: QdiscStats::default(),
        }
    }
}

impl<P: QdiscPacket> Qdisc<P> for PfifoFast<P> {
    fn kind(&self) -> &'static str {
        "pfifo_fast"
    }
    fn enqueue(&mut self, _now: Instant, pkt: P) -> Result<(), P> {
        let b = pfifo_fast_band(pkt.priority());
        if self.bands[b].len() >= self.limit {
            self.stats.dropped += 1;
            return Err(pkt);
        }
        self.stats.on_enq(pkt.len());
        self.bytes += pkt.len();
        self.bands[b].push_back(pkt);
        Ok(())
    }
    fn admit(&mut self, _now: Instant, o: &Offer, admitted: &mut Admitted) -> bool {
        let b = pfifo_fast_band(o.priority);
        let ok = self.bands[b].len() + admitted.band_packets(b) < self.limit;
        if ok {
            admitted.add(o);
        } else {
            self.stats.dropped += 1;
        }
        ok
    }
    fn dequeue(&mut self, _now: Instant) -> Option<P> {
        for b in &mut self.bands {
            if let Some(p) = b.pop_front() {
                self.bytes -= p.len();
                self.stats.on_deq(p.len());
                return Some(p);
            }
        }
        None
    }
    fn next_wakeup(&self, _now: Instant) -> Option<Instant> {
        None
    }
    fn backlog_packets(&self) -> usize {
        self.bands.iter().map(VecDeque::len).sum()
    }
    fn backlog_bytes(&self) -> usize {
        self.bytes
    }
    fn stats(&self) -> &QdiscStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testpkt::{at, Pkt};

    fn with_tos(tos: u8) -> Pkt {
        Pkt {
            len: 40,
            prio: tos_to_priority(tos),
            flow: u32::from(tos),
            ..Pkt::default()
        }
    }

    /// rt_tos2priority + default priomap: IPTOS_LOWDELAY (0x10) → band 0, 0 → band 1,
    /// IPTOS_THROUGHPUT (0x08) → prio 4 (TC_PRIO_BULK) → band 2, LOWDELAY|THROUGHPUT → band 1.
    #[test]
    fn bands_by_tos() {
        let band = |tos| pfifo_fast_band(tos_to_priority(tos));
        assert_eq!(band(0x10), 0);
        assert_eq!(band(0x00), 1);
        assert_eq!(band(0x08), 2);
        assert_eq!(band(0x18), 1);
        assert_eq!(pfifo_fast_band(6), 0); // TC_PRIO_INTERACTIVE
        assert_eq!(pfifo_fast_band(16 + 6), 0); // masked with TC_PRIO_MAX
        let mut q = PfifoFast::new(10);
        q.enqueue(at(0), with_tos(0x08)).unwrap();
        q.enqueue(at(0), with_tos(0x00)).unwrap();
        q.enqueue(at(0), with_tos(0x10)).unwrap();
        let order: Vec<u32> = std::iter::from_fn(|| q.dequeue(at(0)))
            .map(|p| p.flow)
            .collect();
        assert_eq!(order, vec![0x10, 0x00, 0x08]);
    }

    #[test]
    fn limit_per_band() {
        let mut q = PfifoFast::new(2);
        for _ in 0..2 {
            q.enqueue(at(0), with_tos(0)).unwrap();
        }
        assert!(q.enqueue(at(0), with_tos(0)).is_err());
        assert!(q.enqueue(at(0), with_tos(0x10)).is_ok());
        assert_eq!(q.stats().dropped, 1);
        assert_eq!(q.backlog_packets(), 3);
        assert_eq!(q.backlog_bytes(), 120);
    }
}
