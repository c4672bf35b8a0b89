//! Simple endpoints for exercising the network model without the TCP engine: a source that
//! emits IPv4/TCP-shaped packets (rate-paced, EDT-stamped or window-limited) and a sink.

use std::net::Ipv4Addr;

use crate::endpoint::Endpoint;
use crate::packet::Packet;
use crate::segment::{self, build_ipv4_tcp, TcpPacketSpec};
use crate::time::{Instant, Rate};
use shallow_wire::TcpFlags;

/// How a [`Source`] decides when to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceMode {
    /// One packet every `len / rate`, released by the source's own timer.
    Rate(Rate),
    /// Everything at once, each packet stamped with an EDT `len / rate` after the previous
    /// one (what a paced TCP hands to fq).
    Edt(Rate),
    /// As fast as possible while fewer than this many bytes are below the source (sent and
    /// not yet TX-completed): a TSQ-like window.
    Window(u64),
}

/// Configuration of a [`Source`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceConfig {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Payload bytes per wire segment (the MSS).
    pub mss: u16,
    /// Wire segments per packet: > 1 emits TSO super-segments with `gso_size = mss`.
    pub segs: u16,
    /// Packets to send in total.
    pub count: u64,
    /// Pacing mode.
    pub mode: SourceMode,
    /// Flow hash put on every packet.
    pub flow: u32,
    /// IPv4 TOS byte.
    pub tos: u8,
    /// Start time.
    pub start: Instant,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 1, 1),
            sport: 40000,
            dport: 5001,
            mss: 1448,
            segs: 1,
            count: 100,
            mode: SourceMode::Window(u64::MAX),
            flow: 1,
            tos: 0,
            start: Instant::ZERO,
        }
    }
}

/// A packet generator. Every packet has a TX-completion token (its index).
#[derive(Clone, Debug)]
pub struct Source {
    /// Its configuration.
    pub cfg: SourceConfig,
    /// Packets sent so far.
    pub sent: u64,
    /// Bytes sent and not yet completed.
    pub below: u64,
    /// Largest `below` seen.
    pub max_below: u64,
    /// `(token, time)` of each TX completion, in order.
    pub completions: Vec<(u64, Instant)>,
    /// Send time of each packet (index = token).
    pub send_times: Vec<Instant>,
    lens: Vec<u32>,
    next_at: Instant,
    seq: u32,
    payload: Vec<u8>,
}

impl Source {
    /// A source with `cfg`.
    pub fn new(cfg: SourceConfig) -> Source {
        let plen = usize::from(cfg.mss) * usize::from(cfg.segs.max(1));
        Source {
            payload: (0..plen).map(|i| (i % 253) as u8).collect(),
            next_at: cfg.start,
            cfg,
            sent: 0,
            below: 0,
            max_below: 0,
            completions: Vec::new(),
            send_times: Vec::new(),
            lens: Vec::new(),
            seq: 1,
        }
    }

    fn make(&mut self, now: Instant) -> Packet {
        let spec = TcpPacketSpec {
            src: self.cfg.src.octets(),
            dst: self.cfg.dst.octets(),
            sport: self.cfg.sport,
            dport: self.cfg.dport,
            seq: self.seq,
            ack: 1,
            flags: TcpFlags::ACK,
            window: 65535,
            ip_id: (self.sent as u16).wrapping_mul(self.cfg.segs.max(1)),
            tos: self.cfg.tos,
            options: Vec::new(),
        };
        let mut data = Vec::with_capacity(40 + self.payload.len());
        build_ipv4_tcp(&spec, &self.payload, &mut data);
        self.seq = self.seq.wrapping_add(self.payload.len() as u32);
        let token = self.sent;
        self.sent += 1;
        self.send_times.push(now);
        self.lens.push(data.len() as u32);
        self.below += data.len() as u64;
        self.max_below = self.max_below.max(self.below);
        Packet {
            gso_size: (self.cfg.segs > 1).then_some(self.cfg.mss),
            departure: None,
            token: Some(token),
            flow: self.cfg.flow,
            data,
            seg: None,
            frag: Default::default(),
        }
    }
}

impl Endpoint for Source {
    fn input(&mut self, _now: Instant, _pkt: &mut Packet) {}
    fn poll_transmit(&mut self, now: Instant) -> Option<Packet> {
        if self.sent >= self.cfg.count || now < self.cfg.start {
            return None;
        }
        match self.cfg.mode {
            SourceMode::Rate(r) => {
                if now < self.next_at {
                    return None;
                }
                let p = self.make(now);
                self.next_at += r.tx_time(p.len() as u64);
                Some(p)
            }
            SourceMode::Edt(r) => {
                let mut p = self.make(now);
                p.departure = Some(self.next_at);
                self.next_at += r.tx_time(p.len() as u64);
                Some(p)
            }
            SourceMode::Window(w) => {
                if self.below >= w {
                    return None;
                }
                Some(self.make(now))
            }
        }
    }
    fn tx_complete(&mut self, now: Instant, token: u64) {
        // A packet cut into segments completes with its last one.
        let token = match crate::packet::piece_token::decode(token) {
            (_, Some((_, false))) => return,
            (id, _) => id,
        };
        if let Some(&l) = self.lens.get(token as usize) {
            self.below = self.below.saturating_sub(u64::from(l));
        }
        self.completions.push((token, now));
    }
    fn poll_timeout(&self) -> Option<Instant> {
        if self.sent >= self.cfg.count {
            return None;
        }
        match self.cfg.mode {
            SourceMode::Rate(_) => Some(self.next_at),
            _ if self.sent == 0 => Some(self.cfg.start),
            _ => None,
        }
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// A receiver that counts what arrives and checks checksums.
#[derive(Clone, Debug, Default)]
pub struct Sink {
    /// Packets received (aggregates count once).
    pub packets: u64,
    /// Wire segments received (an aggregate counts its segments).
    pub segments: u64,
    /// TCP payload bytes received with a good checksum.
    pub payload_bytes: u64,
    /// Packets with a bad checksum (or not TCP).
    pub bad_checksum: u64,
    /// Keep every packet received, with its arrival time.
    pub keep: bool,
    /// The packets kept.
    pub kept: Vec<(Instant, Packet)>,
}

impl Sink {
    /// Count one arrival whose checksum was `good`.
    fn count(&mut self, now: Instant, pkt: &Packet, good: bool) {
        self.packets += 1;
        if good {
            let v = segment::parse_tcp(&pkt.data);
            let pl = v.map_or(0, |v| v.payload_len);
            self.payload_bytes += pl as u64;
            self.segments += match pkt.gso_size {
                Some(g) if g > 0 => pl.div_ceil(usize::from(g)).max(1) as u64,
                _ => 1,
            };
        } else {
            self.bad_checksum += 1;
            self.segments += 1;
        }
        if self.keep {
            self.kept.push((now, pkt.clone()));
        }
    }
}

impl Endpoint for Sink {
    /// A verified packet is checked all the same: a GRO aggregate's checksum is completed
    /// from its `CHECKSUM_PARTIAL` form first, so a bad merge still shows as a bad checksum.
    fn input_csum_verified(&mut self, now: Instant, pkt: &mut Packet) {
        if pkt.gso_size.is_some() {
            if let Some(v) = segment::parse_tcp(&pkt.data) {
                let mut full = pkt.data.clone();
                segment::complete_tcp_checksum(&mut full, &v);
                let good = segment::tcp_checksum_ok(&full);
                self.count(now, pkt, good);
                return;
            }
        }
        self.input(now, pkt)
    }
    fn input(&mut self, now: Instant, pkt: &mut Packet) {
        let good = segment::tcp_checksum_ok(&pkt.data);
        self.count(now, pkt, good);
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Packet> {
        None
    }
    fn tx_complete(&mut self, _now: Instant, _token: u64) {}
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

/// Either test endpoint, so one `Sim` can hold both.
#[derive(Clone, Debug)]
pub enum TestEndpoint {
    /// A source.
    Source(Source),
    /// A sink.
    Sink(Sink),
}

impl TestEndpoint {
    /// The source, if this is one.
    pub fn source(&self) -> Option<&Source> {
        match self {
            TestEndpoint::Source(s) => Some(s),
            TestEndpoint::Sink(_) => None,
        }
    }
    /// The sink, if this is one.
    pub fn sink(&self) -> Option<&Sink> {
        match self {
            TestEndpoint::Sink(s) => Some(s),
            TestEndpoint::Source(_) => None,
        }
    }
}

impl Endpoint for TestEndpoint {
    fn input(&mut self, now: Instant, pkt: &mut Packet) {
        match self {
            TestEndpoint::Source(s) => s.input(now, pkt),
            TestEndpoint::Sink(s) => s.input(now, pkt),
        }
    }
    fn input_csum_verified(&mut self, now: Instant, pkt: &mut Packet) {
        match self {
            TestEndpoint::Source(s) => s.input_csum_verified(now, pkt),
            TestEndpoint::Sink(s) => s.input_csum_verified(now, pkt),
        }
    }
    fn poll_transmit(&mut self, now: Instant) -> Option<Packet> {
        match self {
            TestEndpoint::Source(s) => s.poll_transmit(now),
            TestEndpoint::Sink(s) => s.poll_transmit(now),
        }
    }
    fn tx_complete(&mut self, now: Instant, token: u64) {
        match self {
            TestEndpoint::Source(s) => s.tx_complete(now, token),
            TestEndpoint::Sink(s) => s.tx_complete(now, token),
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        match self {
            TestEndpoint::Source(s) => s.poll_timeout(),
            TestEndpoint::Sink(s) => s.poll_timeout(),
        }
    }
    fn handle_timeout(&mut self, now: Instant) {
        match self {
            TestEndpoint::Source(s) => s.handle_timeout(now),
            TestEndpoint::Sink(s) => s.handle_timeout(now),
        }
    }
}
