//! Test support: two [`Stack`]s, each in a [`Driver`] without qdisc, joined by an in-memory
//! link with delay, rate, loss, reordering and duplication (seeded), in virtual time. TSO super-segments are cut into
//! wire segments (GSO) before impairments; TX completions are delivered when the link has
//! serialized the packet. Available to other crates with the `test-util` feature.

use crate::driver::Driver;
use crate::socket::Transmit;
use crate::stack::Stack;
use crate::time::Instant;
use crate::{Errno, SocketId};
use core::net::{IpAddr, Ipv4Addr, SocketAddr};
use core::time::Duration;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shallow_wire::{IpPacket, IpRepr, TcpFlags, TcpPacket, TcpRepr};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Impairments of one direction of the link.
#[derive(Clone, Copy, Debug)]
pub struct LinkConfig {
    /// One-way propagation delay.
    pub delay: Duration,
    /// Serialization rate in bits/s (0 = infinite).
    pub rate_bps: u64,
    /// Probability that a wire segment is lost.
    pub loss: f64,
    /// Probability that a segment is delayed by an extra `reorder_delay` (reordering).
    pub reorder: f64,
    /// Extra delay of reordered segments.
    pub reorder_delay: Duration,
    /// Probability that a segment is duplicated.
    pub dup: f64,
    /// Deliver whole TSO packets as GRO aggregates instead of cutting them (no impairments
    /// then apply per segment).
    pub gro: bool,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            delay: Duration::from_millis(5),
            rate_bps: 0,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_millis(2),
            dup: 0.0,
            gro: false,
        }
    }
}

#[derive(Debug)]
enum Ev {
    Deliver {
        to_b: bool,
        data: Vec<u8>,
        gso: Option<u16>,
    },
    Complete {
        on_a: bool,
        token: crate::TxToken,
    },
}

/// Two stacks, `a` (10.0.0.1) and `b` (10.0.0.2), and the link between them.
pub struct Pair {
    /// Host A (its engine: the driver dereferences to its [`Stack`]).
    pub a: Driver,
    /// Host B.
    pub b: Driver,
    /// Virtual time.
    pub now: Instant,
    /// A → B impairments.
    pub ab: LinkConfig,
    /// B → A impairments.
    pub ba: LinkConfig,
    rng: ChaCha8Rng,
    events: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    slots: Vec<Option<Ev>>,
    /// Indices of empty `slots`, reused first (O(1) per packet).
    free: Vec<usize>,
    seqno: u64,
    busy_ab: Instant,
    busy_ba: Instant,
    /// Wire segments sent A→B and B→A.
    pub segs: [u64; 2],
}

/// Address of host A.
pub const ADDR_A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
/// Address of host B.
pub const ADDR_B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

impl Pair {
    /// A pair with the given link (same impairments both ways) and seed.
    pub fn new(seed: u64, link: LinkConfig) -> Pair {
        let mut a = Stack::new(seed.wrapping_mul(3).wrapping_add(1));
        let mut b = Stack::new(seed.wrapping_mul(5).wrapping_add(2));
        a.add_address(ADDR_A);
        b.add_address(ADDR_B);
        Pair {
            a: Driver::new(a),
            b: Driver::new(b),
            now: Instant::from_secs(1),
            ab: link,
            ba: link,
            rng: ChaCha8Rng::seed_from_u64(seed),
            events: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seqno: 0,
            busy_ab: Instant::ZERO,
            busy_ba: Instant::ZERO,
            segs: [0; 2],
        }
    }

    fn push(&mut self, at: Instant, ev: Ev) {
        let slot = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(ev);
        self.seqno += 1;
        self.events.push(Reverse((at, self.seqno, slot)));
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() as f64 / u64::MAX as f64) < p
    }

    /// A connection from a new socket of A to a new listener of B on `port` (IPv4), after
    /// 50 ms of the link: (A's socket, B's accepted socket).
    pub fn connected(&mut self, port: u16) -> (SocketId, SocketId) {
        let addr = SocketAddr::new(ADDR_B, port);
        let l = self.b.socket(crate::Family::V4).expect("socket");
        self.b.bind(l, addr).expect("bind");
        self.b.listen(l, 4).expect("listen");
        let c = self.a.socket(crate::Family::V4).expect("socket");
        assert_eq!(self.a.connect(self.now, c, addr), Err(Errno::EINPROGRESS));
        self.run_for(Duration::from_millis(50));
        let (s, _) = self.b.accept(l).expect("accept");
        (c, s)
    }

    /// Move every pending transmit of both stacks onto the link (the driver's egress step,
    /// then what its queue releases: without a qdisc, everything in order).
    pub fn pump(&mut self) {
        let now = self.now;
        for from_a in [true, false] {
            self.host(from_a).transmit(now, |_| {});
            while let Some(t) = self.host(from_a).poll_release(0, now) {
                self.send(from_a, t);
            }
        }
    }

    fn host(&mut self, a: bool) -> &mut Driver {
        if a {
            &mut self.a
        } else {
            &mut self.b
        }
    }

    fn send(&mut self, from_a: bool, mut t: Transmit) {
        // The in-memory link carries contiguous packets.
        t.linearize();
        let cfg = if from_a { self.ab } else { self.ba };
        let pieces = if cfg.gro || t.gso_size.is_none() {
            vec![(t.data, t.gso_size)]
        } else {
            segment(&t.data, t.gso_size.unwrap_or(0))
                .into_iter()
                .map(|d| (d, None))
                .collect()
        };
        let busy = if from_a { self.busy_ab } else { self.busy_ba };
        let mut start = if busy > self.now { busy } else { self.now };
        if let Some(dep) = t.departure {
            if dep > start {
                start = dep;
            }
        }
        for (data, gso) in pieces {
            let ser = if cfg.rate_bps > 0 {
                Duration::from_nanos(
                    (data.len() as u64 * 8)
                        .saturating_mul(1_000_000_000)
                        .checked_div(cfg.rate_bps)
                        .unwrap_or(0),
                )
            } else {
                Duration::ZERO
            };
            start += ser;
            self.segs[usize::from(!from_a)] += 1;
            if self.chance(cfg.loss) {
                continue;
            }
            let mut at = start + cfg.delay;
            if self.chance(cfg.reorder) {
                at += cfg.reorder_delay;
            }
            if self.chance(cfg.dup) {
                self.push(
                    at,
                    Ev::Deliver {
                        to_b: from_a,
                        data: data.clone(),
                        gso,
                    },
                );
            }
            self.push(
                at,
                Ev::Deliver {
                    to_b: from_a,
                    data,
                    gso,
                },
            );
        }
        if from_a {
            self.busy_ab = start;
        } else {
            self.busy_ba = start;
        }
        if let Some(token) = t.token {
            self.push(
                start,
                Ev::Complete {
                    on_a: from_a,
                    token,
                },
            );
        }
    }

    /// The next instant something happens (event or timer), if any.
    pub fn next_event(&self) -> Option<Instant> {
        let e = self.events.peek().map(|r| r.0 .0);
        [e, self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Advance to the next event and process it. False if nothing is pending.
    pub fn step(&mut self) -> bool {
        self.pump();
        let Some(t) = self.next_event() else {
            return false;
        };
        if t > self.now {
            self.now = t;
        }
        // Link events due now.
        while let Some(Reverse((at, _, slot))) = self.events.peek().copied() {
            if at > self.now {
                break;
            }
            self.events.pop();
            self.free.push(slot);
            match self.slots[slot].take() {
                Some(Ev::Deliver { to_b, data, gso }) => {
                    if to_b {
                        self.b.input(self.now, &data, gso);
                    } else {
                        self.a.input(self.now, &data, gso);
                    }
                }
                Some(Ev::Complete { on_a, token }) => {
                    if on_a {
                        self.a.tx_complete(self.now, token);
                    } else {
                        self.b.tx_complete(self.now, token);
                    }
                }
                None => {}
            }
            self.pump();
        }
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        self.pump();
        true
    }

    /// Run until virtual time `t` (or until nothing is pending).
    pub fn run_until(&mut self, t: Instant) {
        self.pump();
        while let Some(n) = self.next_event() {
            if n > t {
                break;
            }
            self.step();
        }
        if self.now < t {
            self.now = t;
        }
    }

    /// Run for `d` of virtual time.
    pub fn run_for(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    /// Drain wake-ups of both stacks (tests that do not model waiters).
    pub fn drain_wakeups(&mut self) -> usize {
        let mut n = 0;
        while self.a.poll_wakeup().is_some() {
            n += 1;
        }
        while self.b.poll_wakeup().is_some() {
            n += 1;
        }
        n
    }
}

/// Cut a TSO super-segment into wire segments of `gso_size` payload bytes (what a NIC's TSO
/// or the kernel's GSO does): PSH and FIN only on the last one.
pub fn segment(pkt: &[u8], gso_size: u16) -> Vec<Vec<u8>> {
    let Ok(ip) = IpPacket::parse(pkt) else {
        return vec![pkt.to_vec()];
    };
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
        return vec![pkt.to_vec()];
    };
    let Ok(repr) = TcpRepr::parse(&tcp) else {
        return vec![pkt.to_vec()];
    };
    let Ok(iprepr) = IpRepr::parse(&ip) else {
        return vec![pkt.to_vec()];
    };
    let payload = tcp.payload();
    let g = usize::from(gso_size).max(1);
    if payload.len() <= g {
        return vec![pkt.to_vec()];
    }
    let chunks: Vec<&[u8]> = payload.chunks(g).collect();
    let n = chunks.len();
    let mut out = Vec::with_capacity(n);
    let mut seq = repr.seq;
    for (i, c) in chunks.into_iter().enumerate() {
        let mut r = repr.clone();
        r.seq = seq;
        if i + 1 < n {
            r.flags &= !(TcpFlags::PSH | TcpFlags::FIN);
        }
        seq = seq.wrapping_add(c.len() as u32);
        let tl = r.header_len() + c.len();
        let mut ipr = iprepr;
        match &mut ipr {
            IpRepr::V4(v) => v.payload_len = tl,
            IpRepr::V6(v) => v.payload_len = tl,
        }
        let hl = ipr.header_len();
        let mut buf = vec![0u8; hl + tl];
        if ipr.emit(&mut buf).is_err() || r.emit(&mut buf[hl..], c, ipr.src(), ipr.dst()).is_err() {
            return vec![pkt.to_vec()];
        }
        out.push(buf);
    }
    out
}
