//! `tbf` (Linux `sch_tbf`): token bucket filter.

use std::collections::VecDeque;
use std::time::Duration;

use crate::{Admitted, Instant, Offer, Qdisc, QdiscPacket, QdiscStats, Rate};

/// `tbf`: token bucket filter. Tokens are kept as transmission time at `rate`
/// (as Linux's `tbf_dequeue` does): the bucket holds at most `burst` bytes' worth, starts
/// full, and the head packet leaves once the bucket holds its transmission time. Backlog is
/// limited to `limit` bytes (drop-tail). Sizes are Linux's `qdisc_pkt_len` (a GSO packet's
/// headers counted once per wire segment, [`QdiscPacket::qdisc_pkt_len`]). A GSO packet
/// larger than `burst` is split into its wire segments at enqueue (Linux `tbf_segment`,
/// through [`QdiscPacket::gso_segment`]), all of them or, when they do not all fit the
/// limit, none (Linux's child qdisc would drop the segments that overflow one by one). A
/// packet larger than `burst` that cannot be split (or whose segments are still larger) can
/// never be sent and is dropped.
#[derive(Debug)]
pub struct Tbf<P> {
    rate: Rate,
    burst: u64,
    buffer: Duration,
    limit: usize,
    tokens: Duration,
    t_c: Instant,
    q: VecDeque<P>,
    bytes: usize,
    stats: QdiscStats,
}

impl<P: QdiscPacket> Tbf<P> {
    /// `tbf rate R burst B limit L` (B, L in bytes).
    pub fn new(rate: Rate, burst: u64, limit: usize) -> Tbf<P> {
        let buffer = rate.tx_time(burst);
        Tbf {
            rate,
            burst,
            buffer,
            limit,
            tokens: buffer,
            t_c: Instant::ZERO,
            q: VecDeque::new(),
            bytes: 0,
            stats: QdiscStats::default(),
        }
    }

    fn fits(&self, len: usize) -> bool {
        self.bytes.saturating_add(len) <= self.limit
    }

    fn push(&mut self, pkt: P) -> Result<(), P> {
        let len = pkt.qdisc_pkt_len();
        if !self.fits(len) {
            self.stats.dropped += 1;
            return Err(pkt);
        }
        self.stats.on_enq(len);
        self.bytes += len;
        self.q.push_back(pkt);
        Ok(())
    }

    /// Whether a packet of `qdisc_pkt_len` `len` and largest wire segment `seg_len` is cut
    /// at enqueue (`Some(true)`), queued whole (`Some(false)`) or can never leave (`None`).
    fn cut(&self, len: usize, seg_len: Option<usize>) -> Option<bool> {
        if len as u64 <= self.burst {
            return Some(false);
        }
        match seg_len {
            Some(l) if l as u64 <= self.burst => Some(true),
            _ => None,
        }
    }

    fn tokens_at(&self, now: Instant) -> Duration {
        self.tokens.saturating_add(now - self.t_c).min(self.buffer)
    }
}

impl<P: QdiscPacket> Qdisc<P> for Tbf<P> {
    fn kind(&self) -> &'static str {
        "tbf"
    }
    fn enqueue(&mut self, _now: Instant, pkt: P) -> Result<(), P> {
        let len = pkt.qdisc_pkt_len();
        match self.cut(len, pkt.gso_segment_len()) {
            Some(false) => return self.push(pkt),
            Some(true) if self.fits(len) => {}
            _ => {
                self.stats.dropped += 1;
                return Err(pkt);
            }
        }
        let pieces = match pkt.gso_segment() {
            Ok(v) => v,
            Err(p) => {
                self.stats.dropped += 1;
                return Err(p);
            }
        };
        self.stats.segmented += 1;
        for piece in pieces {
            // The pieces' lengths add up to `len`, which fits.
            let plen = piece.qdisc_pkt_len();
            self.stats.on_enq(plen);
            self.bytes += plen;
            self.q.push_back(piece);
        }
        Ok(())
    }
    fn admit(&mut self, _now: Instant, o: &Offer, admitted: &mut Admitted) -> bool {
        // A packet within the burst is queued whole; a larger GSO packet is cut into
        // segments that each carry the headers (tbf_segment), all of which must fit: either
        // way it needs its qdisc_pkt_len.
        let need = o.qdisc_pkt_len();
        let ok = self.cut(need, o.gso_segment_len()).is_some()
            && self
                .bytes
                .saturating_add(admitted.bytes())
                .saturating_add(need)
                <= self.limit;
        if ok {
            admitted.add(o);
        } else {
            self.stats.dropped += 1;
        }
        ok
    }
    fn segments(&self, o: &Offer) -> bool {
        self.cut(o.qdisc_pkt_len(), o.gso_segment_len()) == Some(true)
    }
    fn dequeue(&mut self, now: Instant) -> Option<P> {
        let len = self.q.front()?.qdisc_pkt_len();
        let need = self.rate.tx_time(len as u64);
        let toks = self.tokens_at(now);
        if toks < need {
            self.stats.overlimits += 1;
            return None;
        }
        self.tokens = toks - need;
        self.t_c = now;
        let p = self.q.pop_front()?;
        self.bytes -= len;
        self.stats.on_deq(len);
        Some(p)
    }
    fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let len = self.q.front()?.qdisc_pkt_len();
        let need = self.rate.tx_time(len as u64);
        let toks = self.tokens_at(now);
        Some(now + need.saturating_sub(toks))
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

    const MS: u64 = 1_000_000;

    /// tbf arithmetic: 8 Mbit/s = 1 µs per byte; 1000-byte packets; burst 3000 bytes. The
    /// full bucket releases 3 packets at t = 0, then one every 1 ms.
    #[test]
    fn release_times_match_rate_and_burst() {
        let mut q = Tbf::new(Rate::mbps(8), 3000, 100_000);
        for _ in 0..6 {
            q.enqueue(at(0), pkt(1000, 0)).unwrap();
        }
        let mut now = 0;
        let mut times = Vec::new();
        while q.backlog_packets() > 0 {
            match q.dequeue(at(now)) {
                Some(_) => times.push(now),
                None => now = q.next_wakeup(at(now)).unwrap().as_nanos(),
            }
        }
        assert_eq!(times, vec![0, 0, 0, MS, 2 * MS, 3 * MS]);
        // Idle for 10 ms refills only up to the burst.
        for _ in 0..4 {
            q.enqueue(at(now), pkt(1000, 0)).unwrap();
        }
        let t0 = now + 10 * MS;
        assert!(q.dequeue(at(t0)).is_some());
        assert!(q.dequeue(at(t0)).is_some());
        assert!(q.dequeue(at(t0)).is_some());
        assert!(q.dequeue(at(t0)).is_none());
        assert_eq!(q.next_wakeup(at(t0)), Some(at(t0 + MS)));
    }

    #[test]
    fn limit_and_oversize() {
        let mut q = Tbf::new(Rate::mbps(8), 3000, 2500);
        assert!(q.enqueue(at(0), pkt(1000, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(1000, 0)).is_ok());
        assert!(q.enqueue(at(0), pkt(1000, 0)).is_err());
        assert!(q.enqueue(at(0), pkt(4000, 0)).is_err()); // non-GSO > burst
        assert_eq!(q.stats().dropped, 2);
    }

    /// tbf_segment: a GSO packet larger than the burst is cut into its wire segments; the
    /// completion token rides on the last.
    #[test]
    fn segments_gso_larger_than_burst() {
        let big = Pkt {
            len: 40 + 5000,
            hdr: 40,
            gso: Some(1000),
            token: Some(9),
            ..Pkt::default()
        };
        let mut q = Tbf::new(Rate::gbps(1), 3000, 1_000_000);
        q.enqueue(at(0), big.clone()).unwrap();
        assert_eq!(q.backlog_packets(), 5);
        assert_eq!(q.backlog_bytes(), 5 * 1040);
        assert_eq!(q.stats().segmented, 1);
        let mut tokens = Vec::new();
        let mut now = 0;
        while q.backlog_packets() > 0 {
            match q.dequeue(at(now)) {
                Some(p) => tokens.push(p.token),
                None => now = q.next_wakeup(at(now)).unwrap().as_nanos(),
            }
        }
        assert_eq!(tokens, vec![None, None, None, None, Some(9)]);
        // Segments still larger than the burst: dropped whole.
        let mut q = Tbf::new(Rate::gbps(1), 1000, 1_000_000);
        assert_eq!(q.enqueue(at(0), big).unwrap_err().token, Some(9));
        assert_eq!(q.stats().dropped, 1);
    }

    /// Segments that would not all fit the limit are not queued at all: the packet comes
    /// back whole to the caller (who owes its completion).
    #[test]
    fn segments_all_or_none() {
        let big = Pkt {
            len: 40 + 3000,
            hdr: 40,
            gso: Some(1000),
            token: Some(4),
            ..Pkt::default()
        };
        let mut q = Tbf::new(Rate::gbps(1), 2000, 3119);
        assert_eq!(q.enqueue(at(0), big.clone()).unwrap_err().token, Some(4));
        assert_eq!(q.backlog_packets(), 0);
        assert_eq!(q.stats().dropped, 1);
        let mut q = Tbf::new(Rate::gbps(1), 2000, 3120);
        assert!(q.enqueue(at(0), big).is_ok());
        assert_eq!((q.backlog_packets(), q.backlog_bytes()), (3, 3120));
    }

    /// Whether a packet is cut is decided on its `qdisc_pkt_len`, headers counted per wire
    /// segment: 2 x 1000 bytes behind 40 bytes of headers is 2040 bytes sent whole but 2080
    /// on the wire, above a 2050-byte burst.
    #[test]
    fn cut_on_qdisc_pkt_len() {
        let p = Pkt {
            len: 40 + 2000,
            hdr: 40,
            gso: Some(1000),
            ..Pkt::default()
        };
        let offer = Offer {
            len: p.len,
            flow: 0,
            priority: 0,
            departure: None,
            header_len: 40,
            gso_size: Some(1000),
        };
        let q: Tbf<Pkt> = Tbf::new(Rate::gbps(1), 2050, 100_000);
        assert!(q.segments(&offer));
        let q: Tbf<Pkt> = Tbf::new(Rate::gbps(1), 2080, 100_000);
        assert!(!q.segments(&offer));
        let mut q = Tbf::new(Rate::gbps(1), 2050, 100_000);
        q.enqueue(at(0), p).unwrap();
        assert_eq!((q.backlog_packets(), q.stats().segmented), (2, 1));
    }
}
