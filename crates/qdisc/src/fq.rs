//! `fq` (Linux `sch_fq`): per-flow fair queueing with earliest departure times and pacing.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::{Admitted, FlowMap, Instant, Offer, Qdisc, QdiscPacket, QdiscStats, Rate};

/// Parameters of [`Fq`] (Linux `sch_fq` defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FqConfig {
    /// Total packets held (`limit`, default 10000).
    pub limit: usize,
    /// Packets held per flow (`flow_limit`, default 100).
    pub flow_limit: usize,
    /// Credit added per round (`quantum`, default 2 × MTU).
    pub quantum: u32,
    /// Credit of a new flow (`initial_quantum`, default 10 × MTU).
    pub initial_quantum: u32,
    /// Per-flow rate cap (`maxrate`), `None` for unlimited.
    pub maxrate: Option<Rate>,
    /// Below this per-flow rate fq paces every packet instead of every quantum
    /// (`low_rate_threshold`, default 550 kbit/s).
    pub low_rate_threshold: Rate,
    /// A flow idle this long gets its credit topped up to `quantum` when it returns
    /// (`flow_refill_delay`, default 40 ms).
    pub flow_refill_delay: Duration,
    /// Packets whose EDT is further than this in the future are dropped (`horizon`, 10 s,
    /// with `horizon_drop` on).
    pub horizon: Duration,
}

impl FqConfig {
    /// Linux defaults for a device of `mtu` bytes (quantum = 2 MTU, initial quantum = 10 MTU).
    pub fn new(mtu: u32) -> FqConfig {
        FqConfig {
            limit: 10_000,
            flow_limit: 100,
            quantum: 2 * mtu,
            initial_quantum: 10 * mtu,
            maxrate: None,
            low_rate_threshold: Rate::bps(550_000),
            flow_refill_delay: Duration::from_millis(40),
            horizon: Duration::from_secs(10),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowState {
    Detached,
    New,
    Old,
    Throttled,
}

#[derive(Debug)]
struct FqFlow<P> {
    key: u32,
    q: VecDeque<P>,
    credit: i64,
    /// When the flow may send again under `maxrate` (`ZERO`: not paced yet).
    time_next_packet: Instant,
    state: FlowState,
    /// When the flow detached (`MAX` marks a free slot).
    age: Instant,
}

/// `fq`: per-flow queues keyed by [`QdiscPacket::flow_hash`], served round robin with byte
/// credits (new flows before old ones), each packet held until its earliest departure time
/// ([`QdiscPacket::departure`]) and each flow limited to `maxrate` (Linux `sch_fq`, without
/// priority bands).
#[derive(Debug)]
pub struct Fq<P> {
    cfg: FqConfig,
    flows: Vec<FqFlow<P>>,
    index: FlowMap<usize>,
    free: Vec<usize>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    throttled: BTreeSet<(Instant, usize)>,
    qlen: usize,
    bytes: usize,
    stats: QdiscStats,
}

impl<P: QdiscPacket> Fq<P> {
    /// An fq with the given parameters.
    pub fn new(cfg: FqConfig) -> Fq<P> {
        Fq {
            cfg,
            flows: Vec::new(),
            index: FlowMap::default(),
            free: Vec::new(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            throttled: BTreeSet::new(),
            qlen: 0,
            bytes: 0,
            stats: QdiscStats::default(),
        }
    }

    /// The parameters.
    pub fn config(&self) -> &FqConfig {
        &self.cfg
    }

    /// Number of flows with state (queued, throttled or recently idle).
    pub fn flow_count(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Forget flows detached for more than 3 s (Linux `fq_gc`), when the table grows.
    fn gc(&mut self, now: Instant) {
        if self.flow_count() < 1024 {
            return;
        }
        for i in 0..self.flows.len() {
            let f = &self.flows[i];
            if f.state == FlowState::Detached
                && f.q.is_empty()
                && now - f.age > Duration::from_secs(3)
                && self.index.get(&f.key) == Some(&i)
            {
                self.index.remove(&f.key);
                self.free.push(i);
                self.flows[i].key = u32::MAX;
                self.flows[i].state = FlowState::Detached;
                self.flows[i].age = Instant::MAX; // marks a free slot
            }
        }
    }

    fn flow_for(&mut self, key: u32, now: Instant) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.gc(now);
        let f = FqFlow {
            key,
            q: VecDeque::new(),
            credit: i64::from(self.cfg.initial_quantum),
            time_next_packet: Instant::ZERO,
            state: FlowState::Detached,
            age: now,
        };
        let i = if let Some(i) = self.free.pop() {
            self.flows[i] = f;
            i
        } else {
            self.flows.push(f);
            self.flows.len() - 1
        };
        self.index.insert(key, i);
        i
    }

    fn unthrottle(&mut self, now: Instant) {
        while let Some(&(t, i)) = self.throttled.first() {
            if t > now {
                break;
            }
            self.throttled.pop_first();
            self.flows[i].state = FlowState::Old;
            self.old_flows.push_back(i);
        }
    }
}

impl<P: QdiscPacket> Qdisc<P> for Fq<P> {
    fn kind(&self) -> &'static str {
        "fq"
    }
    fn enqueue(&mut self, now: Instant, pkt: P) -> Result<(), P> {
        if self.qlen >= self.cfg.limit {
            self.stats.dropped += 1;
            return Err(pkt);
        }
        if let Some(d) = pkt.departure() {
            if d > now + self.cfg.horizon {
                self.stats.dropped += 1;
                self.stats.horizon_drops += 1;
                return Err(pkt);
            }
        }
        let i = self.flow_for(pkt.flow_hash(), now);
        let f = &mut self.flows[i];
        if f.q.len() >= self.cfg.flow_limit {
            self.stats.dropped += 1;
            self.stats.flow_limit_drops += 1;
            return Err(pkt);
        }
        if f.state == FlowState::Detached {
            if now - f.age > self.cfg.flow_refill_delay {
                f.credit = f.credit.max(i64::from(self.cfg.quantum));
            }
            f.state = FlowState::New;
            self.new_flows.push_back(i);
        }
        self.stats.on_enq(pkt.len());
        self.qlen += 1;
        self.bytes += pkt.len();
        f.q.push_back(pkt);
        Ok(())
    }

    fn admit(&mut self, now: Instant, o: &Offer, admitted: &mut Admitted) -> bool {
        // The rules of `enqueue`, in its order, with the admitted packets counted as queued.
        if self.qlen + admitted.packets() >= self.cfg.limit {
            self.stats.dropped += 1;
            return false;
        }
        if o.departure.is_some_and(|d| d > now + self.cfg.horizon) {
            self.stats.dropped += 1;
            self.stats.horizon_drops += 1;
            return false;
        }
        let queued = self
            .index
            .get(&o.flow)
            .map_or(0, |&i| self.flows[i].q.len());
        if queued + admitted.flow_packets(o.flow) >= self.cfg.flow_limit {
            self.stats.dropped += 1;
            self.stats.flow_limit_drops += 1;
            return false;
        }
        admitted.add(o);
        true
    }
    fn dequeue(&mut self, now: Instant) -> Option<P> {
        self.unthrottle(now);
        loop {
            let (from_new, i) = if let Some(&i) = self.new_flows.front() {
                (true, i)
            } else if let Some(&i) = self.old_flows.front() {
                (false, i)
            } else {
                return None;
            };
            let quantum = i64::from(self.cfg.quantum);
            let f = &mut self.flows[i];
            if f.credit <= 0 {
                f.credit += quantum;
                if from_new {
                    self.new_flows.pop_front();
                } else {
                    self.old_flows.pop_front();
                }
                f.state = FlowState::Old;
                self.old_flows.push_back(i);
                continue;
            }
            let Some(head) = f.q.front() else {
                // Empty flow: a new flow passes through old_flows once more (so a flow that
                // keeps sending one packet cannot starve old ones); otherwise it detaches.
                if from_new {
                    self.new_flows.pop_front();
                } else {
                    self.old_flows.pop_front();
                }
                if from_new && !self.old_flows.is_empty() {
                    f.state = FlowState::Old;
                    self.old_flows.push_back(i);
                } else {
                    f.state = FlowState::Detached;
                    f.age = now;
                }
                continue;
            };
            let send_at = f
                .time_next_packet
                .max(head.departure().unwrap_or(Instant::ZERO));
            if send_at > now {
                if from_new {
                    self.new_flows.pop_front();
                } else {
                    self.old_flows.pop_front();
                }
                f.state = FlowState::Throttled;
                self.throttled.insert((send_at, i));
                self.stats.overlimits += 1;
                continue;
            }
            let pkt = f.q.pop_front()?;
            let len = pkt.len() as u64;
            f.credit -= len as i64;
            if let Some(rate) = self.cfg.maxrate {
                let mut plen = len;
                let mut pace = true;
                if rate <= self.cfg.low_rate_threshold {
                    f.credit = 0;
                } else {
                    plen = plen.max(u64::from(self.cfg.quantum));
                    pace = f.credit <= 0;
                }
                if pace && rate.as_bps() > 0 {
                    let mut delay = rate.tx_time(plen).min(Duration::from_secs(1));
                    if f.time_next_packet > Instant::ZERO {
                        // Credit for timer slack, at most half the delay (Linux fq does the same).
                        let late = now - f.time_next_packet;
                        delay -= late.min(delay / 2);
                    }
                    f.time_next_packet = now + delay;
                }
            }
            self.qlen -= 1;
            self.bytes -= pkt.len();
            self.stats.on_deq(pkt.len());
            return Some(pkt);
        }
    }

    fn next_wakeup(&self, _now: Instant) -> Option<Instant> {
        self.throttled.first().map(|&(t, _)| t)
    }
    fn backlog_packets(&self) -> usize {
        self.qlen
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

    /// fq round robin: two backlogged flows with equal packet sizes alternate in quantum-sized
    /// turns once the initial quantum is spent (Linux `fq_dequeue`).
    #[test]
    fn round_robin_between_flows() {
        let mut cfg = FqConfig::new(1000);
        cfg.initial_quantum = 1000; // one packet of credit to start
        cfg.quantum = 2000; // two packets per round
        let mut q = Fq::new(cfg);
        for _ in 0..6 {
            q.enqueue(at(0), pkt(1000, 1)).unwrap();
            q.enqueue(at(0), pkt(1000, 2)).unwrap();
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.dequeue(at(0)))
            .map(|p| p.flow)
            .collect();
        assert_eq!(order, vec![1, 2, 1, 1, 2, 2, 1, 1, 2, 2, 1, 2]);
    }

    /// fq honours EDT: a packet stamped for t = 5 ms is not released before, the flow is
    /// throttled and the watchdog time is its departure; other flows are not blocked.
    #[test]
    fn honours_edt() {
        let mut q = Fq::new(FqConfig::new(1500));
        let a = Pkt {
            edt: Some(5 * MS),
            ..pkt(1000, 1)
        };
        q.enqueue(at(0), a).unwrap();
        q.enqueue(at(0), pkt(1000, 2)).unwrap();
        assert_eq!(q.dequeue(at(0)).unwrap().flow, 2);
        assert!(q.dequeue(at(0)).is_none());
        assert_eq!(q.next_wakeup(at(0)), Some(at(5 * MS)));
        assert!(q.dequeue(at(5 * MS - 1000)).is_none());
        assert_eq!(q.dequeue(at(5 * MS)).unwrap().flow, 1);
        assert_eq!(q.stats().overlimits, 1);
    }

    /// fq maxrate paces a flow at quantum granularity once its credit is spent.
    #[test]
    fn maxrate_spacing() {
        let mut cfg = FqConfig::new(1000);
        cfg.maxrate = Some(Rate::mbps(8)); // 1 µs per byte
        cfg.initial_quantum = 1000;
        cfg.quantum = 2000;
        let mut q = Fq::new(cfg);
        for _ in 0..5 {
            q.enqueue(at(0), pkt(1000, 7)).unwrap();
        }
        let mut now = 0;
        let mut times = Vec::new();
        while q.backlog_packets() > 0 {
            match q.dequeue(at(now)) {
                Some(_) => times.push(now),
                None => now = q.next_wakeup(at(now)).unwrap().as_nanos(),
            }
        }
        // First packet spends the initial credit → next allowed after max(len, quantum)/rate
        // = 2 ms; then each refill of 2000 credit covers two packets.
        assert_eq!(times, vec![0, 2 * MS, 2 * MS, 4 * MS, 4 * MS]);
    }

    /// Below `low_rate_threshold` every packet is paced at its own length.
    #[test]
    fn low_rate_paces_every_packet() {
        let mut cfg = FqConfig::new(1000);
        cfg.maxrate = Some(Rate::bps(80_000)); // 100 µs per byte
        let mut q = Fq::new(cfg);
        for _ in 0..3 {
            q.enqueue(at(0), pkt(100, 7)).unwrap();
        }
        let mut now = 0;
        let mut times = Vec::new();
        while q.backlog_packets() > 0 {
            match q.dequeue(at(now)) {
                Some(_) => times.push(now),
                None => now = q.next_wakeup(at(now)).unwrap().as_nanos(),
            }
        }
        assert_eq!(times, vec![0, 10 * MS, 20 * MS]);
    }

    #[test]
    fn limits() {
        let mut cfg = FqConfig::new(1500);
        cfg.flow_limit = 2;
        cfg.limit = 3;
        let mut q = Fq::new(cfg);
        assert!(q.enqueue(at(0), pkt(10, 1)).is_ok());
        assert!(q.enqueue(at(0), pkt(10, 1)).is_ok());
        assert!(q.enqueue(at(0), pkt(10, 1)).is_err());
        assert!(q.enqueue(at(0), pkt(10, 2)).is_ok());
        assert!(q.enqueue(at(0), pkt(10, 3)).is_err());
        let far = Pkt {
            edt: Some(11 * 1_000 * MS),
            ..pkt(10, 4)
        };
        let mut q2 = Fq::new(FqConfig::new(1500));
        assert!(q2.enqueue(at(0), far).is_err());
        assert_eq!(q2.stats().horizon_drops, 1);
        assert_eq!(q.stats().flow_limit_drops, 1);
        assert_eq!(q.stats().dropped, 2);
        assert_eq!(q.flow_count(), 2);
    }

    /// fq_gc: once the table holds 1024 flows, flows idle for more than 3 s are forgotten and
    /// their slots reused.
    #[test]
    fn gc_reuses_idle_flows() {
        let mut q = Fq::new(FqConfig::new(1500));
        for k in 0..1024 {
            q.enqueue(at(0), pkt(10, k)).unwrap();
        }
        while q.dequeue(at(0)).is_some() {}
        assert_eq!(q.flow_count(), 1024);
        q.enqueue(at(4 * 1_000 * MS), pkt(10, 5000)).unwrap();
        assert_eq!(q.flow_count(), 1);
    }
}
