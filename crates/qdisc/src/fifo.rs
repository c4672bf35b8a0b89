//! `pfifo` / `bfifo` (Linux `sch_fifo`): one drop-tail FIFO.

use std::collections::VecDeque;

use crate::{Admitted, Instant, Offer, Qdisc, QdiscPacket, QdiscStats};

/// `pfifo` (limit in packets) or `bfifo` (limit in bytes): one drop-tail FIFO.
#[derive(Debug)]
pub struct Fifo<P> {
    q: VecDeque<P>,
    bytes: usize,
    limit: usize,
    in_bytes: bool,
    stats: QdiscStats,
}

impl<P> Fifo<P> {
    /// `pfifo limit N`: accepts while fewer than `limit` packets are queued (0 drops all).
    pub fn pfifo(limit: usize) -> Fifo<P> {
        Fifo {
            q: VecDeque::new(),
            bytes: 0,
            limit,
            in_bytes: false,
            stats: QdiscStats::default(),
        }
    }
    /// `bfifo limit B`: accepts while backlog + packet ≤ `limit` bytes.
    pub fn bfifo(limit: usize) -> Fifo<P> {
        Fifo {
            in_bytes: true,
            ..Fifo::pfifo(limit)
        }
    }
}

impl<P: QdiscPacket> Qdisc<P> for Fifo<P> {
    fn kind(&self) -> &'static str {
        if self.in_bytes {
            "bfifo"
        } else {
            "pfifo"
        }
    }
    fn enqueue(&mut self, _now: Instant, pkt: P) -> Result<(), P> {
        let ok = if self.in_bytes {
            self.bytes.saturating_add(pkt.len()) <= self.limit
        } else {
            self.q.len() < self.limit
        };
        if !ok {
            self.stats.dropped += 1;
            return Err(pkt);
        }
        self.stats.on_enq(pkt.len());
        self.bytes += pkt.len();
        self.q.push_back(pkt);
        Ok(())
    }
    fn admit(&mut self, _now: Instant, o: &Offer, admitted: &mut Admitted) -> bool {
        let ok = if self.in_bytes {
            self.bytes
                .saturating_add(admitted.bytes())
                .saturating_add(o.len)
                <= self.limit
        } else {
            self.q.len() + admitted.packets() < self.limit
        };
        if ok {
            admitted.add(o);
        } else {
            self.stats.dropped += 1;
        }
        ok
    }
    fn dequeue(&mut self, _now: Instant) -> Option<P> {
        let p = self.q.pop_front()?;
        self.bytes -= p.len();
        self.stats.on_deq(p.len());
        Some(p)
    }
    fn next_wakeup(&self, _now: Instant) -> Option<Instant> {
        None
    }
    fn backlog_packets(&self) -> usize {
        self.q.len()
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
    use crate::testpkt::{at, pkt, Pkt};

    #[test]
    fn pfifo_limit_zero_drops_everything() {
        let mut q = Fifo::<Pkt>::pfifo(0);
        assert!(q.enqueue(at(0), pkt(100, 0)).is_err());
        assert_eq!(q.stats().dropped, 1);
        let mut q = Fifo::pfifo(2);
        assert!(q.enqueue(at(0), pkt(100, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(100, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(100, 0)).is_err());
        assert_eq!(q.kind(), "pfifo");
    }

    #[test]
    fn bfifo_limit_in_bytes() {
        let mut q = Fifo::bfifo(250);
        assert!(q.enqueue(at(0), pkt(100, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(150, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(1, 0)).is_err());
        assert_eq!(q.backlog_bytes(), 250);
        assert_eq!(q.dequeue(at(0)).unwrap().len, 100);
        assert!(q.enqueue(at(0), pkt(100, 0)).is_ok());
        assert_eq!(q.kind(), "bfifo");
        assert_eq!(q.stats().dequeued_bytes, 100);
    }
}
