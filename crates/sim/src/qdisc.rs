//! Queueing disciplines of the host egress path (Linux `tc qdisc` semantics, simplified).
//!
//! A qdisc holds [`Skb`]s between the endpoint and the NIC. The NIC pulls with
//! [`Qdisc::dequeue`] while its TX ring has room; when a qdisc holds packets it may not release
//! yet (fq's EDT and rate limits, tbf's tokens), [`Qdisc::next_wakeup`] says when to try again
//! (Linux's `qdisc_watchdog`).

use std::collections::{BTreeSet, VecDeque};

use crate::packet::{Packet, Skb};
use crate::segment;
use crate::time::{Rate, Time};

/// Counters every qdisc keeps (`tc -s qdisc`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QdiscStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Bytes accepted.
    pub enqueued_bytes: u64,
    /// Packets handed to the NIC.
    pub dequeued: u64,
    /// Bytes handed to the NIC.
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

/// A queueing discipline.
pub trait Qdisc {
    /// The `tc` name (`"pfifo_fast"`, `"fq"`, ...).
    fn kind(&self) -> &'static str;
    /// Offer a packet. `Err` returns a dropped packet whose TX-completion token (if any) the
    /// caller must complete; other drops are counted and released inside.
    fn enqueue(&mut self, now: Time, skb: Skb) -> Result<(), Skb>;
    /// The next packet the NIC may send at `now`, if any.
    fn dequeue(&mut self, now: Time) -> Option<Skb>;
    /// When `dequeue` returned `None` but packets are held: the earliest time one may be
    /// released.
    fn next_wakeup(&self, now: Time) -> Option<Time>;
    /// Packets held.
    fn backlog_packets(&self) -> usize;
    /// Bytes held.
    fn backlog_bytes(&self) -> usize;
    /// Counters.
    fn stats(&self) -> &QdiscStats;
}

fn on_enq(st: &mut QdiscStats, len: usize) {
    st.enqueued += 1;
    st.enqueued_bytes += len as u64;
}
fn on_deq(st: &mut QdiscStats, len: usize) {
    st.dequeued += 1;
    st.dequeued_bytes += len as u64;
}

// ---------------------------------------------------------------------------------------
// pfifo / bfifo

/// `pfifo` (limit in packets) or `bfifo` (limit in bytes): one drop-tail FIFO.
#[derive(Debug)]
pub struct Fifo {
    q: VecDeque<Skb>,
    bytes: usize,
    limit: usize,
    in_bytes: bool,
    stats: QdiscStats,
}

impl Fifo {
    /// `pfifo limit N`: accepts while fewer than `limit` packets are queued (0 drops all).
    pub fn pfifo(limit: usize) -> Fifo {
        Fifo {
            q: VecDeque::new(),
            bytes: 0,
            limit,
            in_bytes: false,
            stats: QdiscStats::default(),
        }
    }
    /// `bfifo limit B`: accepts while backlog + packet ≤ `limit` bytes.
    pub fn bfifo(limit: usize) -> Fifo {
        Fifo {
            in_bytes: true,
            ..Fifo::pfifo(limit)
        }
    }
}

impl Qdisc for Fifo {
    fn kind(&self) -> &'static str {
        if self.in_bytes {
            "bfifo"
        } else {
            "pfifo"
        }
    }
    fn enqueue(&mut self, _now: Time, skb: Skb) -> Result<(), Skb> {
        let ok = if self.in_bytes {
            self.bytes + skb.len() <= self.limit
        } else {
            self.q.len() < self.limit
        };
        if !ok {
            self.stats.dropped += 1;
            return Err(skb);
        }
        on_enq(&mut self.stats, skb.len());
        self.bytes += skb.len();
        self.q.push_back(skb);
        Ok(())
    }
    fn dequeue(&mut self, _now: Time) -> Option<Skb> {
        let s = self.q.pop_front()?;
        self.bytes -= s.len();
        on_deq(&mut self.stats, s.len());
        Some(s)
    }
    fn next_wakeup(&self, _now: Time) -> Option<Time> {
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

// ---------------------------------------------------------------------------------------
// pfifo_fast

/// Band of a packet in `pfifo_fast`: the IP TOS → priority map (Linux `ip_tos2prio`, indexed
/// by the four TOS bits `(tos & 0x1e) >> 1`) followed by the default priomap
/// `1 2 2 2 1 2 0 0 1 1 1 1 1 1 1 1`. Non-IP packets go to band 1.
pub fn pfifo_fast_band(data: &[u8]) -> usize {
    const TOS2PRIO: [u8; 16] = [0, 0, 0, 0, 2, 2, 2, 2, 6, 6, 6, 6, 4, 4, 4, 4];
    const PRIO2BAND: [u8; 16] = [1, 2, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    match segment::tos(data) {
        Some(tos) => {
            let prio = TOS2PRIO[usize::from((tos & 0x1e) >> 1)];
            usize::from(PRIO2BAND[usize::from(prio)])
        }
        None => 1,
    }
}

/// `pfifo_fast`: three drop-tail bands served in strict priority (band 0 first). Each band
/// holds up to `txqueuelen` packets, as the per-band rings of Linux ≥ 4.16.
#[derive(Debug)]
pub struct PfifoFast {
    bands: [VecDeque<Skb>; 3],
    limit: usize,
    bytes: usize,
    stats: QdiscStats,
}

impl PfifoFast {
    /// A `pfifo_fast` for a device with `txqueuelen` (Linux default 1000).
    pub fn new(txqueuelen: usize) -> PfifoFast {
        PfifoFast {
            bands: Default::default(),
            limit: txqueuelen,
            bytes: 0,
            stats: QdiscStats::default(),
        }
    }
}

impl Qdisc for PfifoFast {
    fn kind(&self) -> &'static str {
        "pfifo_fast"
    }
    fn enqueue(&mut self, _now: Time, skb: Skb) -> Result<(), Skb> {
        let b = pfifo_fast_band(&skb.pkt.data);
        if self.bands[b].len() >= self.limit {
            self.stats.dropped += 1;
            return Err(skb);
        }
        on_enq(&mut self.stats, skb.len());
        self.bytes += skb.len();
        self.bands[b].push_back(skb);
        Ok(())
    }
    fn dequeue(&mut self, _now: Time) -> Option<Skb> {
        for b in &mut self.bands {
            if let Some(s) = b.pop_front() {
                self.bytes -= s.len();
                on_deq(&mut self.stats, s.len());
                return Some(s);
            }
        }
        None
    }
    fn next_wakeup(&self, _now: Time) -> Option<Time> {
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

// ---------------------------------------------------------------------------------------
// tbf

/// `tbf`: token bucket filter. Tokens are kept in nanoseconds of transmission time at `rate`
/// (as Linux's `tbf_dequeue` does): the bucket holds at most `burst` bytes' worth, starts
/// full, and the head packet leaves once the bucket holds its transmission time. Backlog is
/// limited to `limit` bytes (drop-tail). A GSO packet larger than `burst` is split into its
/// wire segments at enqueue (Linux `tbf_segment`); the TX-completion token rides on the last
/// segment, which leaves last. A non-GSO packet larger than `burst` can never be sent and is
/// dropped.
#[derive(Debug)]
pub struct Tbf {
    rate: Rate,
    burst: u64,
    buffer: Time,
    limit: usize,
    tokens: Time,
    t_c: Time,
    q: VecDeque<Skb>,
    bytes: usize,
    stats: QdiscStats,
    seg_buf: Vec<u8>,
}

impl Tbf {
    /// `tbf rate R burst B limit L` (B, L in bytes).
    pub fn new(rate: Rate, burst: u64, limit: usize) -> Tbf {
        let buffer = rate.tx_time(burst);
        Tbf {
            rate,
            burst,
            buffer,
            limit,
            tokens: buffer,
            t_c: Time::ZERO,
            q: VecDeque::new(),
            bytes: 0,
            stats: QdiscStats::default(),
            seg_buf: Vec::new(),
        }
    }

    fn push(&mut self, skb: Skb) -> Result<(), Skb> {
        if self.bytes + skb.len() > self.limit {
            self.stats.dropped += 1;
            return Err(skb);
        }
        on_enq(&mut self.stats, skb.len());
        self.bytes += skb.len();
        self.q.push_back(skb);
        Ok(())
    }

    fn tokens_at(&self, now: Time) -> Time {
        (self.tokens + (now - self.t_c)).min(self.buffer)
    }
}

impl Qdisc for Tbf {
    fn kind(&self) -> &'static str {
        "tbf"
    }
    fn enqueue(&mut self, _now: Time, skb: Skb) -> Result<(), Skb> {
        if skb.len() as u64 <= self.burst {
            return self.push(skb);
        }
        let gso = skb.pkt.gso_size.unwrap_or(0);
        let Some(v) = segment::parse_tcp(&skb.pkt.data).filter(|_| gso > 0) else {
            self.stats.dropped += 1;
            return Err(skb);
        };
        let n = v.payload_len.div_ceil(usize::from(gso)).max(1);
        if (v.payload_off + usize::from(gso)) as u64 > self.burst {
            self.stats.dropped += 1;
            return Err(skb);
        }
        self.stats.segmented += 1;
        let mut result = Ok(());
        for i in 0..n {
            let mut out = Vec::new();
            if segment::write_segment_parsed(&skb.pkt.data, &v, gso, i, &mut out).is_err() {
                break;
            }
            let last = i + 1 == n;
            let piece = Skb {
                pkt: Packet {
                    data: out,
                    gso_size: None,
                    departure: skb.pkt.departure,
                    token: if last { skb.pkt.token } else { None },
                    flow: skb.pkt.flow,
                },
                enqueued: skb.enqueued,
                acct_len: if last { skb.acct_len } else { 0 },
            };
            if let Err(d) = self.push(piece) {
                if last {
                    result = Err(d);
                }
            }
        }
        self.seg_buf.clear();
        result
    }
    fn dequeue(&mut self, now: Time) -> Option<Skb> {
        let len = self.q.front()?.len();
        let need = self.rate.tx_time(len as u64);
        let toks = self.tokens_at(now);
        if toks < need {
            self.stats.overlimits += 1;
            return None;
        }
        self.tokens = toks - need;
        self.t_c = now;
        let s = self.q.pop_front()?;
        self.bytes -= s.len();
        on_deq(&mut self.stats, s.len());
        Some(s)
    }
    fn next_wakeup(&self, now: Time) -> Option<Time> {
        let len = self.q.front()?.len();
        let need = self.rate.tx_time(len as u64);
        let toks = self.tokens_at(now);
        Some(now + (need - toks))
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

// ---------------------------------------------------------------------------------------
// fq

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
    pub flow_refill_delay: Time,
    /// Packets whose EDT is further than this in the future are dropped (`horizon`, 10 s,
    /// with `horizon_drop` on).
    pub horizon: Time,
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
            flow_refill_delay: Time::from_millis(40),
            horizon: Time::from_secs(10),
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
struct FqFlow {
    key: u32,
    q: VecDeque<Skb>,
    credit: i64,
    time_next_packet: Time,
    state: FlowState,
    age: Time,
}

/// `fq`: per-flow queues keyed by the packet's flow hash, served round robin with byte credits
/// (new flows before old ones), each packet held until its earliest departure time (EDT) and
/// each flow limited to `maxrate` (Linux `sch_fq`, without priority bands).
#[derive(Debug)]
pub struct Fq {
    cfg: FqConfig,
    flows: Vec<FqFlow>,
    index: crate::pool::FlowMap<usize>,
    free: Vec<usize>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    throttled: BTreeSet<(Time, usize)>,
    qlen: usize,
    bytes: usize,
    stats: QdiscStats,
}

impl Fq {
    /// An fq with the given parameters.
    pub fn new(cfg: FqConfig) -> Fq {
        Fq {
            cfg,
            flows: Vec::new(),
            index: crate::pool::FlowMap::default(),
            free: Vec::new(),
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            throttled: BTreeSet::new(),
            qlen: 0,
            bytes: 0,
            stats: QdiscStats::default(),
        }
    }

    /// Number of flows with state (queued, throttled or recently idle).
    pub fn flow_count(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Forget flows detached for more than 3 s (Linux `fq_gc`), when the table grows.
    fn gc(&mut self, now: Time) {
        if self.flow_count() < 1024 {
            return;
        }
        for i in 0..self.flows.len() {
            let f = &self.flows[i];
            if f.state == FlowState::Detached
                && f.q.is_empty()
                && now - f.age > Time::from_secs(3)
                && self.index.get(&f.key) == Some(&i)
            {
                self.index.remove(&f.key);
                self.free.push(i);
                self.flows[i].key = u32::MAX;
                self.flows[i].state = FlowState::Detached;
                self.flows[i].age = Time::MAX; // marks a free slot
            }
        }
    }

    fn flow_for(&mut self, key: u32, now: Time) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.gc(now);
        let f = FqFlow {
            key,
            q: VecDeque::new(),
            credit: i64::from(self.cfg.initial_quantum),
            time_next_packet: Time::ZERO,
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

    fn unthrottle(&mut self, now: Time) {
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

impl Qdisc for Fq {
    fn kind(&self) -> &'static str {
        "fq"
    }
    fn enqueue(&mut self, now: Time, skb: Skb) -> Result<(), Skb> {
        if self.qlen >= self.cfg.limit {
            self.stats.dropped += 1;
            return Err(skb);
        }
        if let Some(d) = skb.pkt.departure {
            if d > now + self.cfg.horizon {
                self.stats.dropped += 1;
                self.stats.horizon_drops += 1;
                return Err(skb);
            }
        }
        let i = self.flow_for(skb.pkt.flow, now);
        let f = &mut self.flows[i];
        if f.q.len() >= self.cfg.flow_limit {
            self.stats.dropped += 1;
            self.stats.flow_limit_drops += 1;
            return Err(skb);
        }
        if f.state == FlowState::Detached {
            if now - f.age > self.cfg.flow_refill_delay {
                f.credit = f.credit.max(i64::from(self.cfg.quantum));
            }
            f.state = FlowState::New;
            self.new_flows.push_back(i);
        }
        on_enq(&mut self.stats, skb.len());
        self.qlen += 1;
        self.bytes += skb.len();
        f.q.push_back(skb);
        Ok(())
    }

    fn dequeue(&mut self, now: Time) -> Option<Skb> {
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
                .max(head.pkt.departure.unwrap_or(Time::ZERO));
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
            let skb = f.q.pop_front()?;
            let len = skb.len() as u64;
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
                    let mut delay = rate.tx_time(plen).min(Time::from_secs(1));
                    if f.time_next_packet > Time::ZERO {
                        // Credit for timer slack, at most half the delay (Linux fq does the same).
                        let late = now - f.time_next_packet;
                        delay = delay - late.min(Time(delay.0 / 2));
                    }
                    f.time_next_packet = now + delay;
                }
            }
            self.qlen -= 1;
            self.bytes -= skb.len();
            on_deq(&mut self.stats, skb.len());
            return Some(skb);
        }
    }

    fn next_wakeup(&self, _now: Time) -> Option<Time> {
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

    fn pkt(len: usize, flow: u32) -> Skb {
        let mut p = Packet::new(vec![0; len]);
        p.flow = flow;
        Skb::new(p, Time::ZERO)
    }

    fn with_tos(tos: u8) -> Skb {
        let mut d = vec![0u8; 40];
        d[0] = 0x45;
        d[1] = tos;
        Skb::new(Packet::new(d), Time::ZERO)
    }

    #[test]
    fn pfifo_limit_zero_drops_everything() {
        let mut q = Fifo::pfifo(0);
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_err());
        assert_eq!(q.stats().dropped, 1);
        let mut q = Fifo::pfifo(2);
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_err());
    }

    #[test]
    fn bfifo_limit_in_bytes() {
        let mut q = Fifo::bfifo(250);
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(150, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(1, 0)).is_err());
        assert_eq!(q.backlog_bytes(), 250);
        assert_eq!(q.dequeue(Time::ZERO).unwrap().len(), 100);
        assert!(q.enqueue(Time::ZERO, pkt(100, 0)).is_ok());
    }

    /// ip_tos2prio + default priomap: IPTOS_LOWDELAY (0x10) → band 0, IPTOS_THROUGHPUT (0x08)
    /// → band 1, 0 → band 1, IPTOS_MINCOST (0x02) → band 1, IPTOS_RELIABILITY (0x04) → band 1,
    /// bulk (0x08|0x04... via prio 2) → band 2.
    #[test]
    fn pfifo_fast_bands_by_tos() {
        assert_eq!(pfifo_fast_band(&with_tos(0x10).pkt.data), 0);
        assert_eq!(pfifo_fast_band(&with_tos(0x00).pkt.data), 1);
        assert_eq!(pfifo_fast_band(&with_tos(0x08).pkt.data), 2);
        assert_eq!(pfifo_fast_band(&with_tos(0x18).pkt.data), 1);
        assert_eq!(pfifo_fast_band(&[0x00, 0x10]), 1);
        let mut q = PfifoFast::new(10);
        q.enqueue(Time::ZERO, with_tos(0x08)).unwrap();
        q.enqueue(Time::ZERO, with_tos(0x00)).unwrap();
        q.enqueue(Time::ZERO, with_tos(0x10)).unwrap();
        let order: Vec<u8> = std::iter::from_fn(|| q.dequeue(Time::ZERO))
            .map(|s| s.pkt.data[1])
            .collect();
        assert_eq!(order, vec![0x10, 0x00, 0x08]);
    }

    #[test]
    fn pfifo_fast_limit_per_band() {
        let mut q = PfifoFast::new(2);
        for _ in 0..2 {
            q.enqueue(Time::ZERO, with_tos(0)).unwrap();
        }
        assert!(q.enqueue(Time::ZERO, with_tos(0)).is_err());
        assert!(q.enqueue(Time::ZERO, with_tos(0x10)).is_ok());
        assert_eq!(q.stats().dropped, 1);
    }

    /// tbf arithmetic: 8 Mbit/s = 1 µs per byte; 1000-byte packets; burst 3000 bytes. The
    /// full bucket releases 3 packets at t = 0, then one every 1 ms.
    #[test]
    fn tbf_release_times_match_rate_and_burst() {
        let mut q = Tbf::new(Rate::mbps(8), 3000, 100_000);
        for _ in 0..6 {
            q.enqueue(Time::ZERO, pkt(1000, 0)).unwrap();
        }
        let mut now = Time::ZERO;
        let mut times = Vec::new();
        while q.backlog_packets() > 0 {
            match q.dequeue(now) {
                Some(_) => times.push(now),
                None => now = q.next_wakeup(now).unwrap(),
            }
        }
        let ms = Time::from_millis;
        assert_eq!(times, vec![ms(0), ms(0), ms(0), ms(1), ms(2), ms(3)]);
        // Idle for 10 ms refills only up to the burst.
        for _ in 0..4 {
            q.enqueue(now, pkt(1000, 0)).unwrap();
        }
        let t0 = now + ms(10);
        assert!(q.dequeue(t0).is_some());
        assert!(q.dequeue(t0).is_some());
        assert!(q.dequeue(t0).is_some());
        assert!(q.dequeue(t0).is_none());
        assert_eq!(q.next_wakeup(t0), Some(t0 + ms(1)));
    }

    #[test]
    fn tbf_limit_and_oversize() {
        let mut q = Tbf::new(Rate::mbps(8), 3000, 2500);
        assert!(q.enqueue(Time::ZERO, pkt(1000, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(1000, 0)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(1000, 0)).is_err());
        assert!(q.enqueue(Time::ZERO, pkt(4000, 0)).is_err()); // non-GSO > burst
        assert_eq!(q.stats().dropped, 2);
    }

    #[test]
    fn tbf_segments_gso_larger_than_burst() {
        use crate::segment::{build_ipv4_tcp, TcpPacketSpec};
        let mut d = Vec::new();
        build_ipv4_tcp(&TcpPacketSpec::default(), &[1u8; 5000], &mut d);
        let mut p = Packet::new(d);
        p.gso_size = Some(1000);
        p.token = Some(9);
        let mut q = Tbf::new(Rate::gbps(1), 3000, 1_000_000);
        q.enqueue(Time::ZERO, Skb::new(p, Time::ZERO)).unwrap();
        assert_eq!(q.backlog_packets(), 5);
        assert_eq!(q.stats().segmented, 1);
        let mut tokens = Vec::new();
        let mut now = Time::ZERO;
        while q.backlog_packets() > 0 {
            match q.dequeue(now) {
                Some(s) => tokens.push(s.pkt.token),
                None => now = q.next_wakeup(now).unwrap(),
            }
        }
        assert_eq!(tokens, vec![None, None, None, None, Some(9)]);
    }

    /// fq round robin: two backlogged flows with equal packet sizes alternate in quantum-sized
    /// turns once the initial quantum is spent.
    #[test]
    fn fq_round_robin_between_flows() {
        let mut cfg = FqConfig::new(1000);
        cfg.initial_quantum = 1000; // one packet of credit to start
        cfg.quantum = 2000; // two packets per round
        let mut q = Fq::new(cfg);
        for _ in 0..6 {
            q.enqueue(Time::ZERO, pkt(1000, 1)).unwrap();
            q.enqueue(Time::ZERO, pkt(1000, 2)).unwrap();
        }
        let order: Vec<u32> = std::iter::from_fn(|| q.dequeue(Time::ZERO))
            .map(|s| s.pkt.flow)
            .collect();
        assert_eq!(order, vec![1, 2, 1, 1, 2, 2, 1, 1, 2, 2, 1, 2]);
    }

    /// fq honours EDT: a packet stamped for t = 5 ms is not released before, the flow is
    /// throttled and the watchdog time is its departure; other flows are not blocked.
    #[test]
    fn fq_honours_edt() {
        let mut q = Fq::new(FqConfig::new(1500));
        let mut a = pkt(1000, 1);
        a.pkt.departure = Some(Time::from_millis(5));
        q.enqueue(Time::ZERO, a).unwrap();
        q.enqueue(Time::ZERO, pkt(1000, 2)).unwrap();
        assert_eq!(q.dequeue(Time::ZERO).unwrap().pkt.flow, 2);
        assert!(q.dequeue(Time::ZERO).is_none());
        assert_eq!(q.next_wakeup(Time::ZERO), Some(Time::from_millis(5)));
        assert!(q.dequeue(Time::from_micros(4999)).is_none());
        assert_eq!(q.dequeue(Time::from_millis(5)).unwrap().pkt.flow, 1);
        assert_eq!(q.stats().overlimits, 1);
    }

    /// fq maxrate paces a flow at quantum granularity once its credit is spent.
    #[test]
    fn fq_maxrate_spacing() {
        let mut cfg = FqConfig::new(1000);
        cfg.maxrate = Some(Rate::mbps(8)); // 1 µs per byte
        cfg.initial_quantum = 1000;
        cfg.quantum = 2000;
        let mut q = Fq::new(cfg);
        for _ in 0..5 {
            q.enqueue(Time::ZERO, pkt(1000, 7)).unwrap();
        }
        let mut now = Time::ZERO;
        let mut times = Vec::new();
        while q.backlog_packets() > 0 {
            match q.dequeue(now) {
                Some(_) => times.push(now),
                None => now = q.next_wakeup(now).unwrap(),
            }
        }
        // First packet spends the initial credit → next allowed after max(len, quantum)/rate
        // = 2 ms; then each refill of 2000 credit covers two packets.
        let ms = Time::from_millis;
        assert_eq!(times, vec![ms(0), ms(2), ms(2), ms(4), ms(4)]);
    }

    #[test]
    fn fq_limits() {
        let mut cfg = FqConfig::new(1500);
        cfg.flow_limit = 2;
        cfg.limit = 3;
        let mut q = Fq::new(cfg);
        assert!(q.enqueue(Time::ZERO, pkt(10, 1)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(10, 1)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(10, 1)).is_err());
        assert!(q.enqueue(Time::ZERO, pkt(10, 2)).is_ok());
        assert!(q.enqueue(Time::ZERO, pkt(10, 3)).is_err());
        let mut far = pkt(10, 4);
        far.pkt.departure = Some(Time::from_secs(11));
        let mut q2 = Fq::new(FqConfig::new(1500));
        assert!(q2.enqueue(Time::ZERO, far).is_err());
        assert_eq!(q2.stats().horizon_drops, 1);
        assert_eq!(q.stats().flow_limit_drops, 1);
        assert_eq!(q.stats().dropped, 2);
    }
}
