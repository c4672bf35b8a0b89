//! The emulator: hosts (endpoint + qdisc + NIC + GRO receive path) on either side of a
//! bottleneck, driven by one event queue in virtual time.
//!
//! ```text
//!  left hosts                                                      right hosts
//!  endpoint → qdisc → NIC ring → wire ─┐                      ┌─→ RX ring → GRO → endpoint
//!                                       ├─ forward link ──────┤
//!  endpoint ← GRO ← RX ring ←──────────┤   (queue, rate,      ├─ wire ← NIC ring ← qdisc ← endpoint
//!                                       └─ reverse link ──────┘
//!                                          impairments, delay)
//! ```
//!
//! Each link routes by destination IP address to a host of the other side.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::capture::{Capture, CaptureOut, CapturePoint};
use crate::endpoint::Endpoint;
use crate::event::EventQueue;
use crate::gro::{Gro, GroStats};
use crate::metrics::{FlowBytes, PacketDelay, Summary};
use crate::packet::{Packet, Skb, TsoParent, WireSeg};
use crate::pool::{BufPool, FlowMap};
use crate::qdisc::{EgressHandle, QdiscRef};
use crate::rng::SimRng;
use crate::segment;
use crate::spec::{LinkSpec, QdiscSpec, QueueLimit, SpecError};
use crate::time::{nanos, Instant, Rate};

/// Index of a host in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HostId(pub usize);

/// Side of the bottleneck a host is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Senders: their egress goes through the forward link.
    Left,
    /// Receivers: their egress goes through the reverse link.
    Right,
}

/// Direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Left → right.
    Forward,
    /// Right → left.
    Reverse,
}

/// The NIC of a host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicConfig {
    /// Line rate.
    pub rate: Rate,
    /// TX ring byte limit (BQL-like): the NIC pulls from the qdisc while the bytes it holds
    /// (queued or sent but not yet completed) are below this.
    pub ring_bytes: usize,
    /// TX ring descriptors: at most this many packets held (one per packet, TSO or not).
    pub ring_descriptors: usize,
    /// Interrupt coalescing of TX completions (ethtool `tx-usecs`): a completion interrupt
    /// fires this long after the first packet it reports left; 0 reports each packet as its
    /// last bit leaves.
    pub tx_coalesce: Duration,
    /// Complete each packet as soon as the NIC takes it from the qdisc, as drivers that orphan
    /// the skb at xmit do (veth across namespaces, loopback): TX completions then say nothing
    /// about the wire, which makes TSQ almost inert (spec §2.9).
    pub orphan_at_xmit: bool,
    /// Extra bytes per wire packet counted for serialisation (38 for Ethernet: preamble 8,
    /// header 14, FCS 4, gap 12); 0 by default, so a wire packet is its IP packet.
    pub framing_overhead: u32,
}

impl Default for NicConfig {
    fn default() -> Self {
        NicConfig {
            rate: Rate::gbps(10),
            ring_bytes: 2 * 65536,
            ring_descriptors: 256,
            tx_coalesce: Duration::ZERO,
            orphan_at_xmit: false,
            framing_overhead: 0,
        }
    }
}

/// Configuration of one host.
pub struct HostConfig {
    /// Addresses the links route to this host. Empty: the builder assigns `10.0.0.N` (left)
    /// or `10.0.1.N` (right), N = 1, 2, ...
    pub addrs: Vec<IpAddr>,
    /// Root qdisc.
    pub qdisc: QdiscSpec,
    /// Device `txqueuelen` (pfifo_fast band limit, pfifo default).
    pub txqueuelen: usize,
    /// Device MTU (fq quanta, bfifo default).
    pub mtu: u32,
    /// NIC.
    pub nic: NicConfig,
    /// One-way delay between this host's NIC and the bottleneck router.
    pub access_delay: Duration,
    /// RX interrupt coalescing: the NAPI poll runs this long after the first packet of a batch
    /// arrives (ethtool `rx-usecs`).
    pub rx_coalesce: Duration,
    /// RX ring size in packets; arrivals beyond it are dropped.
    pub rx_ring: usize,
    /// Packets per NAPI poll (`napi budget`, 64).
    pub napi_budget: usize,
    /// GRO on the receive path.
    pub gro: bool,
    /// Capture this host's egress to a pcap.
    pub capture: Option<(CapturePoint, CaptureOut)>,
    /// Keep a [`PacketDelay`] record per packet sent (memory grows with the run).
    pub record_delays: bool,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            addrs: Vec::new(),
            qdisc: QdiscSpec::PfifoFast,
            txqueuelen: 1000,
            mtu: 1500,
            nic: NicConfig::default(),
            access_delay: Duration::ZERO,
            rx_coalesce: Duration::ZERO,
            rx_ring: 1024,
            napi_budget: 64,
            gro: true,
            capture: None,
            record_delays: false,
        }
    }
}

/// Counters of one host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Packets the endpoint sent (`poll_transmit`).
    pub tx_packets: u64,
    /// Packets dropped by the qdisc.
    pub qdisc_drops: u64,
    /// Packets the NIC took from the qdisc.
    pub nic_packets: u64,
    /// Wire segments the NIC sent (after TSO).
    pub wire_packets: u64,
    /// Wire bytes the NIC sent.
    pub wire_bytes: u64,
    /// TX completions reported (packets leaving the ring).
    pub completions: u64,
    /// Completion interrupts.
    pub tx_irqs: u64,
    /// Packets that arrived from the network.
    pub rx_packets: u64,
    /// Arrivals dropped because the RX ring was full.
    pub rx_ring_drops: u64,
    /// Packets handed to the endpoint (`input`, after GRO).
    pub delivered: u64,
    /// NAPI polls.
    pub napi_polls: u64,
    /// Times the endpoint's timer was pushed 1 µs ahead because it asked to run again at the
    /// same instant more than [`TIMER_SPIN_LIMIT`] times in a row (an endpoint bug; this keeps
    /// the run from hanging).
    pub timer_spins: u64,
    /// Wire packets larger than the MTU (sent anyway; a sign the endpoint sent a large packet
    /// without `gso_size`, or a non-TCP one).
    pub oversize: u64,
}

/// Consecutive timer runs at one instant after which the emulator steps the timer forward.
pub const TIMER_SPIN_LIMIT: u32 = 10_000;

/// Measurements of one host's egress path.
#[derive(Clone, Debug, Default)]
pub struct HostMetrics {
    /// Host-queue delay (qdisc enqueue → last bit out of the NIC) of every packet.
    pub queue_delay: Summary,
    /// Bytes below the endpoint per flow hash.
    pub flows: FlowMap<FlowBytes>,
    /// Per-packet records, if enabled.
    pub delays: Vec<PacketDelay>,
}

/// Counters of one link direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered to the link.
    pub packets_in: u64,
    /// Bytes offered.
    pub bytes_in: u64,
    /// Dropped by the router queue (drop-tail).
    pub queue_drops: u64,
    /// Lost by independent random loss.
    pub lost: u64,
    /// Lost by the Gilbert–Elliott model.
    pub ge_lost: u64,
    /// Corrupted (one bit flipped).
    pub corrupted: u64,
    /// Duplicated.
    pub duplicated: u64,
    /// Held back for reordering.
    pub reordered: u64,
    /// No host has the destination address.
    pub no_route: u64,
    /// Packets sent towards a host (duplicates included).
    pub delivered: u64,
    /// Largest router queue seen, packets.
    pub max_queue_packets: u64,
    /// Largest router queue seen, bytes.
    pub max_queue_bytes: u64,
}

/// Kinds of trace records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TraceKind {
    /// Endpoint sent a packet (`at` = host).
    Send,
    /// Qdisc dropped a packet (`at` = host).
    QdiscDrop,
    /// NIC took a packet from the qdisc (`at` = host).
    NicDequeue,
    /// A wire segment left the NIC (`at` = host).
    Wire,
    /// TX completion reported (`at` = host, `len` = packet length).
    Complete,
    /// Router queue drop (`at` = link: 0 forward, 1 reverse).
    LinkDrop,
    /// Lost on the link (`at` = link).
    LinkLoss,
    /// Packet arrived at a host (`at` = host).
    Arrive,
    /// Packet handed to the endpoint (`at` = host).
    Deliver,
    /// Endpoint timer ran (`at` = host).
    Timer,
}

/// One trace record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceEvent {
    /// When.
    pub time: Instant,
    /// What.
    pub kind: TraceKind,
    /// Host or link index.
    pub at: u32,
    /// Packet length.
    pub len: u32,
    /// Flow hash.
    pub flow: u32,
}

enum Ev {
    QdiscWake {
        host: usize,
    },
    NicTxDone {
        host: usize,
    },
    NicIrq {
        host: usize,
    },
    /// Head of a host's delay line is due (`up`: NIC → router, else router → host).
    LineHead {
        host: usize,
        up: bool,
    },
    LinkTxDone {
        link: usize,
    },
    /// A reordered packet (off its delay line) arrives.
    Arrive {
        host: usize,
        pkt: Box<Packet>,
    },
    Napi {
        host: usize,
    },
}

struct RingEntry {
    skb: Skb,
    len: usize,
    /// The TSO packet being cut into wire segments (its bytes moved out of `skb`), or `None`
    /// for a packet sent whole.
    parent: Option<Arc<TsoParent>>,
    segs: usize,
    next_seg: usize,
}

struct Nic {
    cfg: NicConfig,
    mtu: usize,
    ring: VecDeque<RingEntry>,
    done: Vec<PacketDelay>,
    done_acct: Vec<(u32, u32, usize)>, // (flow, acct_len, ring len) parallel to `done`
    inflight_bytes: usize,
    busy: bool,
    cur: Option<Packet>,
    cur_flow: u32,
    irq_pending: bool,
    /// (flow, acct_len, token) of packets orphaned at xmit, to complete after the pull.
    orphaned: Vec<(u32, u32, Option<u64>)>,
    /// `cfg.tx_coalesce` in whole nanoseconds (see [`SpanNs`]).
    tx_coalesce: SpanNs,
}

/// A configured span (a link's delay, a coalescing time) in whole nanoseconds, as the
/// per-packet path adds it to an [`Instant`] (`Instant::saturating_add_nanos`): the same
/// instants as adding the configured [`Duration`], without converting it for every packet.
/// Made once from the configuration when the topology is built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
struct SpanNs(u64);

impl SpanNs {
    fn of(d: Duration) -> SpanNs {
        SpanNs(nanos(d))
    }
    fn after(self, t: Instant) -> Instant {
        t.saturating_add_nanos(self.0)
    }
}

impl Nic {
    fn ring_full(&self) -> bool {
        self.inflight_bytes >= self.cfg.ring_bytes
            || self.ring.len() + self.done.len() >= self.cfg.ring_descriptors
    }
}

/// Packets in propagation on one path, in arrival-time order. Keeping them here instead of
/// in the event heap keeps the heap small (one event per line, not one per packet in flight).
#[derive(Default)]
struct DelayLine {
    q: VecDeque<(Instant, Packet)>,
    armed: bool,
}

struct Host<E> {
    ep: E,
    uplink: DelayLine,
    downlink: DelayLine,
    side: Side,
    addrs: Vec<IpAddr>,
    /// The egress qdisc, shared with the endpoint's admission at the transmit.
    egress: EgressHandle,
    nic: Nic,
    access_delay: SpanNs,
    rx: VecDeque<Packet>,
    rx_ring: usize,
    rx_coalesce: SpanNs,
    napi_budget: usize,
    napi_scheduled: bool,
    gro: Option<Gro>,
    timer_at: Option<Instant>,
    /// Time of the pending (valid) timer event, if any. A later deadline does not move it:
    /// it fires, finds the deadline not yet due, and re-arms (keeps the event heap small
    /// when an endpoint's deadline moves often).
    /// The host's armed timer event as (time, sequence number): kept here rather than in the
    /// event queue so re-arming replaces it instead of leaving stale entries behind (a
    /// socket's RTO deadline is re-armed on nearly every event). [`Sim::step`] merges it
    /// with the queue in the queue's own (time, sequence) order.
    timer_event: Option<(Instant, u64)>,
    timer_last: Instant,
    timer_repeats: u32,
    wake_at: Option<Instant>,
    stats: HostStats,
    metrics: HostMetrics,
    record_delays: bool,
    capture: Option<Capture>,
}

struct Link {
    spec: LinkSpec,
    /// The spec's delay, jitter and reorder delay in whole nanoseconds.
    delay: SpanNs,
    jitter: SpanNs,
    reorder_delay: SpanNs,
    rng: SimRng,
    to: Side,
    queue: VecDeque<Packet>,
    qbytes: usize,
    busy: bool,
    in_service: Option<Packet>,
    ge_bad: bool,
    last_arrival: Instant,
    stats: LinkStats,
}

/// Builds a [`Sim`]: hosts on two sides of a bottleneck with per-direction link settings.
pub struct TopologyBuilder<E> {
    seed: u64,
    hosts: Vec<(Side, HostConfig, E)>,
    forward: LinkSpec,
    reverse: LinkSpec,
    trace: bool,
}

/// A misconfigured topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// Two hosts share an address.
    #[error("address {0} is assigned to two hosts")]
    DuplicateAddress(IpAddr),
    /// A zero NIC rate or ring.
    #[error("host {0}: NIC rate, ring_bytes and ring_descriptors must be non-zero")]
    BadNic(usize),
    /// A link spec is invalid.
    #[error("link spec: {0}")]
    Spec(#[from] SpecError),
}

impl<E: Endpoint> TopologyBuilder<E> {
    /// A topology whose randomness derives from `seed`.
    pub fn new(seed: u64) -> Self {
        TopologyBuilder {
            seed,
            hosts: Vec::new(),
            forward: LinkSpec::default(),
            reverse: LinkSpec::default(),
            trace: false,
        }
    }
    /// Add a host on the left (sender) side.
    pub fn sender(&mut self, cfg: HostConfig, ep: E) -> HostId {
        self.hosts.push((Side::Left, cfg, ep));
        HostId(self.hosts.len() - 1)
    }
    /// Add a host on the right (receiver) side.
    pub fn receiver(&mut self, cfg: HostConfig, ep: E) -> HostId {
        self.hosts.push((Side::Right, cfg, ep));
        HostId(self.hosts.len() - 1)
    }
    /// Settings of the left → right direction.
    pub fn forward(&mut self, spec: LinkSpec) -> &mut Self {
        self.forward = spec;
        self
    }
    /// Settings of the right → left direction.
    pub fn reverse(&mut self, spec: LinkSpec) -> &mut Self {
        self.reverse = spec;
        self
    }
    /// Record a [`TraceEvent`] list (the digest is always kept).
    pub fn trace(&mut self, on: bool) -> &mut Self {
        self.trace = on;
        self
    }
    /// Build the simulation at time zero.
    pub fn build(self) -> Result<Sim<E>, TopologyError> {
        let mut hosts = Vec::with_capacity(self.hosts.len());
        let (mut nl, mut nr) = (0u8, 0u8);
        let mut seen: Vec<IpAddr> = Vec::new();
        for (i, (side, cfg, ep)) in self.hosts.into_iter().enumerate() {
            let mut addrs = cfg.addrs;
            if addrs.is_empty() {
                let (net, n) = match side {
                    Side::Left => (0, &mut nl),
                    Side::Right => (1, &mut nr),
                };
                *n = n.wrapping_add(1);
                addrs.push(IpAddr::from([10, 0, net, *n]));
            }
            for a in &addrs {
                if seen.contains(a) {
                    return Err(TopologyError::DuplicateAddress(*a));
                }
                seen.push(*a);
            }
            if cfg.nic.rate.as_bps() == 0
                || cfg.nic.ring_bytes == 0
                || cfg.nic.ring_descriptors == 0
            {
                return Err(TopologyError::BadNic(i));
            }
            let egress = EgressHandle::single(Some(cfg.qdisc.build(cfg.mtu, cfg.txqueuelen)));
            let mut ep = ep;
            ep.attach_egress(&egress);
            hosts.push(Host {
                ep,
                uplink: DelayLine::default(),
                downlink: DelayLine::default(),
                side,
                addrs,
                egress,
                nic: Nic {
                    tx_coalesce: SpanNs::of(cfg.nic.tx_coalesce),
                    cfg: cfg.nic,
                    mtu: cfg.mtu as usize,
                    ring: VecDeque::new(),
                    done: Vec::new(),
                    done_acct: Vec::new(),
                    inflight_bytes: 0,
                    busy: false,
                    cur: None,
                    cur_flow: 0,
                    irq_pending: false,
                    orphaned: Vec::new(),
                },
                access_delay: SpanNs::of(cfg.access_delay),
                rx: VecDeque::new(),
                rx_ring: cfg.rx_ring,
                rx_coalesce: SpanNs::of(cfg.rx_coalesce),
                napi_budget: cfg.napi_budget.max(1),
                napi_scheduled: false,
                gro: cfg.gro.then(Gro::new),
                timer_at: None,
                timer_event: None,
                timer_last: Instant::MAX,
                timer_repeats: 0,
                wake_at: None,
                stats: HostStats::default(),
                metrics: HostMetrics::default(),
                record_delays: cfg.record_delays,
                capture: cfg.capture.map(|(p, out)| Capture::new(out, p)),
            });
        }
        let mk = |spec: LinkSpec, name: &str, to: Side| Link {
            rng: SimRng::new(self.seed, name),
            delay: SpanNs::of(spec.delay),
            jitter: SpanNs::of(spec.jitter),
            reorder_delay: SpanNs::of(spec.reorder_delay),
            spec,
            to,
            queue: VecDeque::new(),
            qbytes: 0,
            busy: false,
            in_service: None,
            ge_bad: false,
            last_arrival: Instant::ZERO,
            stats: LinkStats::default(),
        };
        let links = [
            mk(self.forward, "link/forward", Side::Right),
            mk(self.reverse, "link/reverse", Side::Left),
        ];
        Ok(Sim {
            now: Instant::ZERO,
            events: EventQueue::new(),
            hosts,
            links,
            pool: BufPool::new(1024),
            trace: self.trace.then(Vec::new),
            digest: 0xcbf2_9ce4_8422_2325,
            started: false,
            scratch: Vec::new(),
            batch: Vec::new(),
            verified: Vec::new(),
            events_run: 0,
        })
    }
}

/// A running emulation.
pub struct Sim<E> {
    now: Instant,
    events: EventQueue<Ev>,
    hosts: Vec<Host<E>>,
    links: [Link; 2],
    pool: BufPool,
    trace: Option<Vec<TraceEvent>>,
    digest: u64,
    started: bool,
    scratch: Vec<Packet>,
    batch: Vec<Packet>,
    /// Per packet of `scratch` in a NAPI poll: GRO verified its checksum.
    verified: Vec<bool>,
    events_run: u64,
}

fn flow_of(p: &Packet) -> u32 {
    p.flow
}

impl<E: Endpoint> Sim<E> {
    // ----------------------------------------------------------------- public API

    /// The current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }
    /// Number of hosts.
    pub fn host_count(&self) -> usize {
        self.hosts.len()
    }
    /// A host's endpoint.
    pub fn endpoint(&self, h: HostId) -> &E {
        &self.hosts[h.0].ep
    }
    /// A host's endpoint, mutably, for taking what it logged (RTT samples, say). Anything that
    /// acts on the network (a socket call) goes through [`Sim::with_endpoint`] instead.
    pub fn endpoint_mut(&mut self, h: HostId) -> &mut E {
        &mut self.hosts[h.0].ep
    }
    /// Act on a host's endpoint at the current time (a socket call, say); afterwards the host
    /// drains `poll_transmit` and re-reads `poll_timeout`.
    pub fn with_endpoint<R>(&mut self, h: HostId, f: impl FnOnce(&mut E, Instant) -> R) -> R {
        self.start();
        let r = f(&mut self.hosts[h.0].ep, self.now);
        self.service(h.0);
        r
    }
    /// A host's addresses.
    pub fn addrs(&self, h: HostId) -> &[IpAddr] {
        &self.hosts[h.0].addrs
    }
    /// A host's counters.
    pub fn host_stats(&self, h: HostId) -> &HostStats {
        &self.hosts[h.0].stats
    }
    /// Take the per-packet delay records gathered so far (when `record_delays` is on), so a
    /// long run can stream them out instead of keeping them all.
    pub fn take_delays(&mut self, h: HostId) -> Vec<PacketDelay> {
        std::mem::take(&mut self.hosts[h.0].metrics.delays)
    }
    /// Run for `d` from the current time.
    pub fn run_for(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(until);
    }
    /// A host's egress measurements.
    pub fn host_metrics(&self, h: HostId) -> &HostMetrics {
        &self.hosts[h.0].metrics
    }
    /// A host's qdisc (stats, backlog).
    pub fn qdisc(&self, h: HostId) -> QdiscRef<'_> {
        QdiscRef(self.hosts[h.0].egress.lock())
    }
    /// Bytes held by a host's NIC ring (sent or not, not yet completed).
    pub fn nic_inflight_bytes(&self, h: HostId) -> usize {
        self.hosts[h.0].nic.inflight_bytes
    }
    /// Packets held by a host's NIC ring (not yet completed).
    pub fn nic_inflight_packets(&self, h: HostId) -> usize {
        let n = &self.hosts[h.0].nic;
        n.ring.len() + n.done.len()
    }
    /// A host's GRO counters.
    pub fn gro_stats(&self, h: HostId) -> GroStats {
        self.hosts[h.0]
            .gro
            .as_ref()
            .map(|g| g.stats)
            .unwrap_or_default()
    }
    /// Counters of one link direction.
    pub fn link_stats(&self, d: Dir) -> &LinkStats {
        &self.links[d as usize].stats
    }
    /// Packets in the router queue of a link direction (including the one being sent).
    pub fn link_queue_packets(&self, d: Dir) -> usize {
        let l = &self.links[d as usize];
        l.queue.len() + usize::from(l.in_service.is_some())
    }
    /// Events still scheduled (packets in flight on links and wires, timers).
    pub fn pending_events(&self) -> usize {
        self.events.len()
            + self
                .hosts
                .iter()
                .filter(|h| h.timer_event.is_some())
                .count()
    }
    /// Events processed so far.
    pub fn events_run(&self) -> u64 {
        self.events_run
    }
    /// The trace, if enabled.
    pub fn trace(&self) -> Option<&[TraceEvent]> {
        self.trace.as_deref()
    }
    /// A digest of every trace record so far (kept even when the trace list is off): two runs
    /// behaved identically iff (with overwhelming probability) their digests are equal.
    pub fn digest(&self) -> u64 {
        self.digest
    }
    /// Stop a host's capture and return its output (`CaptureOut::Memory` holds the pcap bytes).
    pub fn finish_capture(&mut self, h: HostId) -> Option<CaptureOut> {
        self.hosts[h.0].capture.take()?.finish()
    }
    /// Time of the next scheduled event.
    pub fn next_event_time(&self) -> Option<Instant> {
        let timer = self.earliest_timer().map(|((t, _), _)| t);
        match (self.events.peek_time(), timer) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Run every event up to and including `until`, then set the clock to `until`.
    pub fn run_until(&mut self, until: Instant) {
        self.start();
        while self.step_until(until) {}
        self.now = self.now.max(until);
    }

    /// Run until no event is left or `limit` is reached; returns true if the queue emptied.
    pub fn run_until_idle(&mut self, limit: Instant) -> bool {
        self.run_until(limit);
        self.pending_events() == 0
    }

    /// Run the next event; false if there is none.
    pub fn step(&mut self) -> bool {
        self.step_until(Instant::MAX)
    }

    /// Run the next event if it is due by `until`; false if there is none.
    fn step_until(&mut self, until: Instant) -> bool {
        self.start();
        let queued = self.events.peek_key();
        if let Some((key, host)) = self.earliest_timer() {
            if queued.is_none_or(|k| key < k) {
                if key.0 > until {
                    return false;
                }
                self.now = self.now.max(key.0);
                self.events_run += 1;
                self.timer_fired(host);
                return true;
            }
        }
        if queued.is_none_or(|(t, _)| t > until) {
            return false;
        }
        let Some((t, ev)) = self.events.pop() else {
            return false;
        };
        self.now = self.now.max(t);
        self.events_run += 1;
        match ev {
            Ev::QdiscWake { host } => {
                let hs = &mut self.hosts[host];
                if hs.wake_at.is_some_and(|w| w <= self.now) {
                    hs.wake_at = None;
                }
                self.service(host);
            }
            Ev::NicTxDone { host } => self.nic_tx_done(host),
            Ev::NicIrq { host } => {
                self.hosts[host].nic.irq_pending = false;
                self.complete_done(host);
            }
            Ev::LineHead { host, up } => self.line_head(host, up),
            Ev::LinkTxDone { link } => {
                let l = &mut self.links[link];
                l.busy = false;
                if let Some(p) = l.in_service.take() {
                    self.link_depart(link, p);
                }
                self.link_start(link);
            }
            Ev::Arrive { host, pkt } => self.arrive(host, *pkt),
            Ev::Napi { host } => self.napi(host),
        }
        true
    }

    // ----------------------------------------------------------------- internals

    /// The earliest armed host timer: its (time, sequence) key and host.
    fn earliest_timer(&self) -> Option<((Instant, u64), usize)> {
        self.hosts
            .iter()
            .enumerate()
            .filter_map(|(h, hs)| hs.timer_event.map(|k| (k, h)))
            .min()
    }

    /// A host's timer event: run the endpoint's timeout if its deadline has come.
    fn timer_fired(&mut self, host: usize) {
        let hs = &mut self.hosts[host];
        hs.timer_event = None;
        if hs.timer_at.is_some_and(|d| d <= self.now) {
            hs.timer_at = None;
            if hs.timer_last == self.now {
                hs.timer_repeats += 1;
            } else {
                hs.timer_last = self.now;
                hs.timer_repeats = 0;
            }
            self.record(TraceKind::Timer, host, 0, 0);
            let now = self.now;
            self.hosts[host].ep.handle_timeout(now);
        }
        self.service(host);
    }

    fn start(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        for h in 0..self.hosts.len() {
            self.service(h);
        }
    }

    fn record(&mut self, kind: TraceKind, at: usize, len: usize, flow: u32) {
        let ev = TraceEvent {
            time: self.now,
            kind,
            at: at as u32,
            len: len as u32,
            flow,
        };
        let mut d = self.digest;
        for w in [
            ev.time.0,
            kind as u64,
            u64::from(ev.at),
            u64::from(ev.len),
            u64::from(flow),
        ] {
            d ^= w;
            d = d.wrapping_mul(0x0000_0100_0000_01b3).rotate_left(17);
        }
        self.digest = d;
        if let Some(t) = self.trace.as_mut() {
            t.push(ev);
        }
    }

    /// Drain the endpoint's transmit queue into the qdisc, let the NIC pull, re-arm the timer.
    fn service(&mut self, h: usize) {
        let now = self.now;
        loop {
            while let Some(pkt) = self.hosts[h].ep.poll_transmit(now) {
                self.host_enqueue(h, pkt);
            }
            self.nic_pull(h);
            // Packets orphaned at xmit complete now; the endpoint may then send more.
            if self.hosts[h].nic.orphaned.is_empty() {
                break;
            }
            let orphaned = std::mem::take(&mut self.hosts[h].nic.orphaned);
            for &(flow, acct, token) in &orphaned {
                let hs = &mut self.hosts[h];
                if let Some(f) = hs.metrics.flows.get_mut(&flow) {
                    f.sub(now, u64::from(acct));
                }
                if let Some(tok) = token {
                    hs.ep.tx_complete(now, tok);
                }
            }
            let mut orphaned = orphaned;
            orphaned.clear();
            self.hosts[h].nic.orphaned = orphaned;
        }
        let hs = &mut self.hosts[h];
        // Packets the qdisc refused at the transmit are its drops too.
        hs.stats.qdisc_drops += hs.egress.lock().take_refused();
        let t = hs.ep.poll_timeout();
        hs.timer_at = t;
        if let Some(t) = t {
            let mut at = t.max(now);
            if at == hs.timer_last && hs.timer_repeats >= TIMER_SPIN_LIMIT {
                at = now + Duration::from_micros(1);
            }
            if hs.timer_event.is_none_or(|(e, _)| at < e) {
                if at > t.max(now) {
                    hs.stats.timer_spins += 1;
                    hs.timer_repeats = 0;
                }
                hs.timer_event = Some((at, self.events.take_seq()));
            }
        }
    }

    fn host_enqueue(&mut self, h: usize, pkt: Packet) {
        let now = self.now;
        let (len, flow) = (pkt.len(), flow_of(&pkt));
        self.record(TraceKind::Send, h, len, flow);
        let hs = &mut self.hosts[h];
        hs.stats.tx_packets += 1;
        hs.metrics
            .flows
            .entry(flow)
            .or_default()
            .add(now, len as u64);
        let skb = Skb::new(pkt, now);
        // A packet admitted at the transmit has its place held: it moves from the ledger
        // into the queue (and cannot be refused there).
        let r = hs.egress.lock().enqueue(0, now, skb);
        if let Err(skb) = r {
            hs.stats.qdisc_drops += 1;
            if let Some(f) = hs.metrics.flows.get_mut(&skb.pkt.flow) {
                f.sub(now, u64::from(skb.acct_len));
            }
            let token = skb.pkt.token;
            self.pool.put(skb.pkt.data);
            self.record(TraceKind::QdiscDrop, h, len, flow);
            if let Some(tok) = token {
                // kfree_skb runs the destructor (tcp_wfree) on a drop too.
                self.hosts[h].ep.tx_complete(now, tok);
            }
        }
    }

    fn nic_pull(&mut self, h: usize) {
        let now = self.now;
        loop {
            let hs = &mut self.hosts[h];
            if hs.nic.ring_full() {
                break;
            }
            let deq = hs.egress.lock().dequeue(0, now);
            match deq {
                Some(skb) => {
                    let len = skb.len();
                    if let Some(c) = hs.capture.as_mut() {
                        if c.point == CapturePoint::HostTx {
                            c.write_parts(now, &skb.pkt.data, &skb.pkt.frag);
                        }
                    }
                    let gso = skb.pkt.gso_size.unwrap_or(0);
                    let flow = skb.pkt.flow;
                    let mut skb = skb;
                    let mut parent = None;
                    let mut segs = 1;
                    if gso > 0 {
                        let p = &mut skb.pkt;
                        if let Some(v) = segment::parse_tcp_split(&p.data, p.frag.len()) {
                            let data = std::mem::take(&mut p.data);
                            let made = if p.frag.is_empty() {
                                TsoParent::new(data, v, gso).map_err(|d| (d, Bytes::new()))
                            } else {
                                TsoParent::from_parts(data, p.frag.take(), v, gso)
                            };
                            match made {
                                Ok(t) => {
                                    segs = t.segs();
                                    parent = Some(t);
                                }
                                Err((data, frag)) => (p.data, p.frag) = (data, frag.into()),
                            }
                        }
                    }
                    // What the NIC sends whole goes on the wire as one buffer (the DMA reads
                    // the parts in turn).
                    skb.pkt.linearize();
                    if hs.nic.cfg.orphan_at_xmit {
                        hs.nic
                            .orphaned
                            .push((flow, skb.acct_len, skb.pkt.token.take()));
                        skb.acct_len = 0;
                    }
                    hs.nic.inflight_bytes += len;
                    hs.stats.nic_packets += 1;
                    hs.nic.ring.push_back(RingEntry {
                        skb,
                        len,
                        parent,
                        segs,
                        next_seg: 0,
                    });
                    self.record(TraceKind::NicDequeue, h, len, flow);
                }
                None => {
                    let wake = hs.egress.lock().next_wakeup(0, now);
                    if let Some(t) = wake {
                        if hs.wake_at.is_none_or(|w| t < w) {
                            hs.wake_at = Some(t);
                            self.events.push(t.max(now), Ev::QdiscWake { host: h });
                        }
                    }
                    break;
                }
            }
        }
        self.nic_start(h);
    }

    fn nic_start(&mut self, h: usize) {
        let now = self.now;
        let hs = &mut self.hosts[h];
        if hs.nic.busy {
            return;
        }
        let Some(e) = hs.nic.ring.front_mut() else {
            return;
        };
        let seg = match &e.parent {
            // TSO with checksum offload: the segment's bytes are written when read.
            Some(p) => Packet {
                seg: Some(WireSeg::new(Arc::clone(p), e.next_seg)),
                flow: e.skb.pkt.flow,
                ..Packet::default()
            },
            None => Packet {
                data: std::mem::take(&mut e.skb.pkt.data),
                flow: e.skb.pkt.flow,
                ..Packet::default()
            },
        };
        if seg.len() > hs.nic.mtu {
            hs.stats.oversize += 1;
        }
        let wire = seg.len() as u64 + u64::from(hs.nic.cfg.framing_overhead);
        hs.nic.cur_flow = e.skb.pkt.flow;
        hs.nic.cur = Some(seg);
        hs.nic.busy = true;
        let done = hs.nic.cfg.rate.tx_end(now, wire);
        self.events.push(done, Ev::NicTxDone { host: h });
    }

    fn nic_tx_done(&mut self, h: usize) {
        let now = self.now;
        let hs = &mut self.hosts[h];
        hs.nic.busy = false;
        let Some(seg) = hs.nic.cur.take() else {
            return;
        };
        let flow = hs.nic.cur_flow;
        hs.stats.wire_packets += 1;
        hs.stats.wire_bytes += seg.len() as u64;
        if let Some(c) = hs.capture.as_mut() {
            if c.point == CapturePoint::Wire {
                match &seg.seg {
                    Some(s) => {
                        let mut buf = self.pool.get();
                        s.write(&mut buf);
                        c.write(now, &buf);
                        self.pool.put(buf);
                    }
                    None => c.write(now, &seg.data),
                }
            }
        }
        let mut finished = false;
        if let Some(e) = hs.nic.ring.front_mut() {
            e.next_seg += 1;
            if e.next_seg >= e.segs {
                finished = true;
            }
        }
        if finished {
            if let Some(e) = hs.nic.ring.pop_front() {
                let rec = PacketDelay {
                    flow: e.skb.pkt.flow,
                    len: e.len as u32,
                    token: e.skb.pkt.token,
                    enqueued: e.skb.enqueued,
                    left: now,
                };
                hs.metrics.queue_delay.add(rec.host_queue_delay());
                if hs.record_delays {
                    hs.metrics.delays.push(rec);
                }
                hs.nic.done.push(rec);
                hs.nic
                    .done_acct
                    .push((e.skb.pkt.flow, e.skb.acct_len, e.len));
                self.pool.put(e.skb.pkt.data);
                // The segments on the wire keep the TSO packet alive; the buffer is freed with
                // the last of them (or reused by GRO).
                drop(e.parent);
            }
        }
        let (side, access) = (hs.side, hs.access_delay);
        let coalesce = hs.nic.tx_coalesce;
        let len = seg.len();
        self.record(TraceKind::Wire, h, len, flow);
        let link = match side {
            Side::Left => 0,
            Side::Right => 1,
        };
        let pkt = seg;
        if access > SpanNs(0) {
            self.line_push(h, true, access.after(now), pkt);
        } else {
            self.link_input(link, pkt);
        }
        self.nic_start(h);
        if finished {
            if coalesce == SpanNs(0) {
                self.complete_done(h);
            } else if !self.hosts[h].nic.irq_pending {
                self.hosts[h].nic.irq_pending = true;
                self.events
                    .push(coalesce.after(now), Ev::NicIrq { host: h });
            }
        }
    }

    /// The TX completion interrupt: free every finished packet from the ring, report tokens,
    /// then let the endpoint and the NIC make progress.
    fn complete_done(&mut self, h: usize) {
        let now = self.now;
        let hs = &mut self.hosts[h];
        hs.stats.tx_irqs += 1;
        let done = std::mem::take(&mut hs.nic.done);
        let acct = std::mem::take(&mut hs.nic.done_acct);
        for (rec, (flow, acct_len, len)) in done.iter().zip(acct.iter()) {
            let hs = &mut self.hosts[h];
            hs.nic.inflight_bytes -= len;
            hs.stats.completions += 1;
            if let Some(f) = hs.metrics.flows.get_mut(flow) {
                f.sub(now, u64::from(*acct_len));
            }
            self.record(TraceKind::Complete, h, *len, *flow);
            if let Some(tok) = rec.token {
                self.hosts[h].ep.tx_complete(now, tok);
            }
        }
        // Give the vectors back (keeps their capacity).
        let hs = &mut self.hosts[h];
        let (mut done, mut acct) = (done, acct);
        done.clear();
        acct.clear();
        if hs.nic.done.is_empty() {
            hs.nic.done = done;
            hs.nic.done_acct = acct;
        }
        self.service(h);
    }

    fn link_input(&mut self, link: usize, pkt: Packet) {
        let now = self.now;
        let l = &mut self.links[link];
        l.stats.packets_in += 1;
        l.stats.bytes_in += pkt.len() as u64;
        if l.spec.rate.is_none() {
            self.link_depart(link, pkt);
            return;
        }
        let fits = match l.spec.queue {
            QueueLimit::Packets(n) => l.queue.len() < n,
            QueueLimit::Bytes(n) => l.qbytes + pkt.len() <= n,
        };
        if !fits {
            l.stats.queue_drops += 1;
            let (len, flow) = (pkt.len(), pkt.flow);
            self.pool.put(pkt.data);
            self.record(TraceKind::LinkDrop, link, len, flow);
            return;
        }
        l.qbytes += pkt.len();
        l.queue.push_back(pkt);
        l.stats.max_queue_packets = l.stats.max_queue_packets.max(l.queue.len() as u64);
        l.stats.max_queue_bytes = l.stats.max_queue_bytes.max(l.qbytes as u64);
        let _ = now;
        self.link_start(link);
    }

    fn link_start(&mut self, link: usize) {
        let now = self.now;
        let l = &mut self.links[link];
        if l.busy {
            return;
        }
        let Some(rate) = l.spec.rate else {
            return;
        };
        let Some(p) = l.queue.pop_front() else {
            return;
        };
        l.qbytes -= p.len();
        let t = rate.tx_end(now, p.len() as u64);
        l.in_service = Some(p);
        l.busy = true;
        self.events.push(t, Ev::LinkTxDone { link });
    }

    fn route(&self, to: Side, data: &[u8]) -> Option<usize> {
        let dst = segment::dst_addr(data)?;
        self.hosts.iter().position(|h| {
            h.side == to
                && h.addrs.iter().any(|a| match a {
                    IpAddr::V4(v4) => dst == v4.octets().as_slice(),
                    IpAddr::V6(v6) => dst == v6.octets().as_slice(),
                })
        })
    }

    /// The packet's last bit left the router: impairments, then propagation to its host.
    fn link_depart(&mut self, link: usize, mut pkt: Packet) {
        let now = self.now;
        let (len, flow) = (pkt.len(), pkt.flow);
        let to = self.links[link].to;
        let Some(host) = self.route(to, pkt.header()) else {
            self.links[link].stats.no_route += 1;
            self.pool.put(pkt.data);
            self.record(TraceKind::LinkLoss, link, len, flow);
            return;
        };
        let l = &mut self.links[link];
        let s = &l.spec;
        let mut lost = false;
        if l.rng.chance(s.loss) {
            l.stats.lost += 1;
            lost = true;
        }
        if let Some(g) = s.gilbert {
            if l.ge_bad {
                if l.rng.chance(g.r) {
                    l.ge_bad = false;
                }
            } else if l.rng.chance(g.p) {
                l.ge_bad = true;
            }
            let p_loss = if l.ge_bad { 1.0 - g.h } else { 1.0 - g.k };
            if l.rng.chance(p_loss) && !lost {
                l.stats.ge_lost += 1;
                lost = true;
            }
        }
        if lost {
            self.pool.put(pkt.data);
            self.record(TraceKind::LinkLoss, link, len, flow);
            return;
        }
        if l.rng.chance(s.corrupt) && !pkt.is_empty() {
            let bit = l.rng.below(pkt.len() as u64 * 8) as usize;
            pkt.materialize(&mut self.pool);
            let l = &mut self.links[link];
            pkt.data[bit / 8] ^= 1 << (bit % 8);
            l.stats.corrupted += 1;
        }
        let l = &mut self.links[link];
        let s = &l.spec;
        let dup = l.rng.chance(s.dup);
        let mut delay = l.delay;
        if l.jitter > SpanNs(0) {
            let j = l.rng.below(2 * l.jitter.0 + 1);
            delay = SpanNs((l.delay.0 + j).saturating_sub(l.jitter.0));
        }
        let mut arrival = delay.after(now);
        let reordered = l.rng.chance(s.reorder);
        if reordered {
            l.stats.reordered += 1;
            arrival = l.reorder_delay.after(arrival);
        } else {
            arrival = arrival.max(l.last_arrival);
            l.last_arrival = arrival;
        }
        arrival = self.hosts[host].access_delay.after(arrival);
        let l = &mut self.links[link];
        l.stats.delivered += 1 + u64::from(dup);
        l.stats.duplicated += u64::from(dup);
        if dup {
            let c = match &pkt.seg {
                Some(s) => Packet {
                    seg: Some(s.clone()),
                    flow,
                    ..Packet::default()
                },
                None => {
                    let mut copy = self.pool.get();
                    copy.extend_from_slice(&pkt.data);
                    Packet {
                        data: copy,
                        flow,
                        ..Packet::default()
                    }
                }
            };
            if reordered {
                self.events.push(
                    arrival,
                    Ev::Arrive {
                        host,
                        pkt: Box::new(c),
                    },
                );
            } else {
                self.line_push(host, false, arrival, c);
            }
        }
        if reordered {
            self.events.push(
                arrival,
                Ev::Arrive {
                    host,
                    pkt: Box::new(pkt),
                },
            );
        } else {
            self.line_push(host, false, arrival, pkt);
        }
    }

    fn line_push(&mut self, h: usize, up: bool, t: Instant, pkt: Packet) {
        let hs = &mut self.hosts[h];
        let line = if up { &mut hs.uplink } else { &mut hs.downlink };
        let t = line.q.back().map_or(t, |b| t.max(b.0));
        line.q.push_back((t, pkt));
        if !line.armed {
            line.armed = true;
            self.events.push(t, Ev::LineHead { host: h, up });
        }
    }

    fn line_head(&mut self, h: usize, up: bool) {
        let now = self.now;
        let link = match self.hosts[h].side {
            Side::Left => 0,
            Side::Right => 1,
        };
        loop {
            let hs = &mut self.hosts[h];
            let line = if up { &mut hs.uplink } else { &mut hs.downlink };
            match line.q.front() {
                Some((t, _)) if *t <= now => {}
                Some((t, _)) => {
                    let t = *t;
                    self.events.push(t, Ev::LineHead { host: h, up });
                    return;
                }
                None => {
                    line.armed = false;
                    return;
                }
            }
            let Some((_, pkt)) = line.q.pop_front() else {
                return;
            };
            if up {
                self.link_input(link, pkt);
            } else {
                self.arrive(h, pkt);
            }
        }
    }

    fn arrive(&mut self, h: usize, pkt: Packet) {
        let now = self.now;
        let (len, flow) = (pkt.len(), pkt.flow);
        self.record(TraceKind::Arrive, h, len, flow);
        let hs = &mut self.hosts[h];
        hs.stats.rx_packets += 1;
        if hs.rx.len() >= hs.rx_ring {
            hs.stats.rx_ring_drops += 1;
            self.pool.put(pkt.data);
            return;
        }
        hs.rx.push_back(pkt);
        if !hs.napi_scheduled {
            hs.napi_scheduled = true;
            let t = hs.rx_coalesce.after(now);
            self.events.push(t, Ev::Napi { host: h });
        }
    }

    fn napi(&mut self, h: usize) {
        let now = self.now;
        let mut batch = std::mem::take(&mut self.batch);
        let mut out = std::mem::take(&mut self.scratch);
        let hs = &mut self.hosts[h];
        hs.napi_scheduled = false;
        hs.stats.napi_polls += 1;
        let n = hs.napi_budget.min(hs.rx.len());
        batch.extend(hs.rx.drain(..n));
        let mut verified = std::mem::take(&mut self.verified);
        verified.clear();
        match hs.gro.as_mut() {
            Some(g) => {
                g.receive_batch_verified(batch.drain(..), &mut out, &mut verified, &mut self.pool)
            }
            None => {
                for mut p in batch.drain(..) {
                    p.materialize(&mut self.pool);
                    out.push(p);
                }
            }
        }
        for (i, mut p) in out.drain(..).enumerate() {
            let (len, flow) = (p.len(), p.flow);
            self.record(TraceKind::Deliver, h, len, flow);
            let hs = &mut self.hosts[h];
            hs.stats.delivered += 1;
            if !p.frag.is_empty() && !hs.ep.accepts_frags() {
                p.linearize();
            }
            if verified.get(i).copied().unwrap_or(false) {
                hs.ep.input_csum_verified(now, &mut p);
            } else {
                hs.ep.input(now, &mut p);
            }
            self.pool.put(p.data);
        }
        self.verified = verified;
        self.batch = batch;
        self.scratch = out;
        let hs = &mut self.hosts[h];
        if !hs.rx.is_empty() && !hs.napi_scheduled {
            hs.napi_scheduled = true;
            self.events.push(now, Ev::Napi { host: h });
        }
        self.service(h);
    }
}
