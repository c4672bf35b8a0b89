//! [`Stack`]: one host's TCP — addresses, routes, the socket table, demux, listeners, timers,
//! and the socket API with Linux semantics and errnos.
//!
//! # Driving a stack (what a substrate does)
//!
//! ```text
//! loop {
//!     for each inbound IP packet:      stack.input(now, &pkt, gro_segment_size);
//!     for each packet that left host:  stack.tx_complete(now, token);      // exactly once
//!     if now >= stack.poll_timeout():  stack.handle_timeout(now);
//!     while let Some(t) = stack.poll_transmit(now) { qdisc.enqueue(t) }  // t.departure = EDT
//!     while let Some(w) = stack.poll_wakeup()       { wake waiters on w.socket for w.events }
//! }
//! ```
//!
//! * Every data packet carries a [`TxToken`]; until it is completed its
//!   `truesize` stays in the socket's `wmem_alloc`, which TSQ and autocorking read. A
//!   substrate that frees packets at once (loopback-like) completes immediately.
//! * A TSO packet (`gso_size` is Some) is one IP packet whose payload exceeds the MTU; its
//!   TCP checksum covers the whole payload. A substrate that cuts it into wire segments
//!   rewrites seq/flags/checksums per segment (see `harness::segment`).
//! * Socket calls never block. A blocking call is: try, on `EAGAIN`/`EINPROGRESS` wait for
//!   a [`Wakeup`] of that socket (or the timeout), try again. `connect`
//!   returns `EINPROGRESS`; completion is POLLOUT plus `SO_ERROR` (or the next `connect`).
//! * Between [`Stack::lock_sock`] and [`Stack::release_sock`] inbound packets of that
//!   socket go to its backlog and timers/TX completions defer their work, as in Linux.

use bytes::{Bytes, BytesMut};

use crate::dualstack::{self, BindScope};
use crate::errno::{Errno, SocketId};
use crate::info::{MemInfo, TcpInfo};
use crate::input::RcvOutcome;
use crate::mib::{Counters, Mib};
use crate::output::{NAGLE_CORK, NAGLE_PUSH};
use crate::packet::{self, OutOpt, SegIn, SegOut};
use crate::recv::msgflags::*;
use crate::seq::*;
use crate::socket::pollbits::*;
use crate::socket::*;
use crate::sockopt::{OptVal, SockOpt};
use crate::sysctl::{Sysctl, SysctlError};
use crate::time::Instant;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use shallow_wire::TcpFlags;
use std::collections::HashMap;

/// `/proc/net/sockstat` TCP line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockStat {
    /// Sockets with an owner (not orphaned, not TIME_WAIT).
    pub inuse: u32,
    /// Orphaned sockets (closed by the application, still finishing).
    pub orphan: u32,
    /// Sockets in TIME_WAIT.
    pub tw: u32,
    /// All socket slots in use.
    pub alloc: u32,
    /// TCP memory in 4 KiB pages (the `mem` column: `tcp_memory_allocated`, charged per
    /// socket in whole pages against `net.ipv4.tcp_mem`).
    pub mem_pages: u64,
    /// The stack is under TCP memory pressure (the `press` column of `/proc/net/protocols`).
    pub pressure: bool,
}

/// A `close()` that has to wait: SO_LINGER with `l_linger > 0` on a socket whose FIN is not
/// acknowledged yet (Linux `tcp_close` → `sk_stream_wait_close`). The engine never blocks:
/// the caller sleeps until a wake-up of `socket` or `deadline`, asks
/// [`Stack::linger_pending`], and ends the close with [`Stack::linger_finish`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LingerWait {
    /// The socket being closed (still valid until `linger_finish`).
    pub socket: SocketId,
    /// `now + l_linger` at the close.
    pub deadline: Instant,
}

/// The TCP row of `/proc/net/protocols`: sockets, memory pages, pressure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProtoMem {
    /// `tcp_sockets_allocated` (the `sockets` column).
    pub sockets: u32,
    /// `tcp_memory_allocated` in pages (the `memory` column).
    pub memory_pages: u64,
    /// `tcp_memory_pressure` (the `press` column: yes/no).
    pub pressure: bool,
    /// `net.ipv4.tcp_mem` [min, pressure, max] in pages.
    pub limits: [i64; 3],
}

/// One row of [`Stack::sockets`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketRow {
    /// Socket handle.
    pub id: SocketId,
    /// Local address.
    pub local: SocketAddr,
    /// Remote address (unspecified for listeners).
    pub remote: SocketAddr,
    /// TCP state.
    pub state: TcpState,
    /// `write_seq - snd_una`.
    pub tx_queue: u32,
    /// Readable bytes.
    pub rx_queue: u32,
}

/// MSS values a SYN cookie can encode (`msstab`).
const SYNCOOKIE_MSS: [u32; 4] = [536, 1300, 1440, 1460];

/// `shutdown()` direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shutdown {
    /// SHUT_RD.
    Read,
    /// SHUT_WR.
    Write,
    /// SHUT_RDWR.
    Both,
}

/// ioctl requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ioctl {
    /// SIOCINQ / FIONREAD: bytes readable.
    SiocInq,
    /// SIOCOUTQ: bytes not yet acknowledged (`write_seq - snd_una`).
    SiocOutq,
    /// SIOCOUTQNSD: bytes not yet sent (`write_seq - snd_nxt`).
    SiocOutqNsd,
}

#[derive(Clone, Copy, Debug)]
struct Route {
    dst: IpAddr,
    prefix: u8,
    attrs: RouteAttrs,
}

/// One host's TCP/IP stack (see the crate docs).
pub struct Stack {
    pub(crate) env: Env,
    socks: Vec<Option<Box<Sock>>>,
    /// Free slots, lowest first (file-descriptor-like reuse).
    free_slots: std::collections::BinaryHeap<core::cmp::Reverse<u32>>,
    next_gen: u32,
    conns: HashMap<(SocketAddr, SocketAddr), SocketId, TableHasher>,
    listeners: HashMap<SocketAddr, SocketId, TableHasher>,
    ports: HashMap<u16, Vec<SocketId>, TableHasher>,
    addrs: Vec<IpAddr>,
    routes: Vec<Route>,
}

fn prefix_match(a: IpAddr, b: IpAddr, len: u8) -> bool {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let len = u32::from(len.min(32));
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(b) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let len = u32::from(len.min(128));
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(b) & mask
        }
        _ => false,
    }
}

/// The hasher of the stack's lookup tables (connections by 4-tuple, listeners, ports):
/// SipHash-1-3, as std's `RandomState`, so peers cannot aim packets at one bucket, but keyed
/// from the stack's seed instead of from the operating system, so the engine draws no
/// randomness it was not given. Nothing iterates these tables, so their order never shows.
#[derive(Clone, Debug)]
struct TableHasher(u64, u64);

impl TableHasher {
    /// Keys derived one-way from the stack's secret, distinct from its other uses.
    fn new(key: (u64, u64)) -> TableHasher {
        use core::hash::Hasher;
        let derive = |label: &[u8]| {
            let mut h = siphasher::sip::SipHasher13::new_with_keys(key.0, key.1);
            h.write(label);
            h.finish()
        };
        TableHasher(derive(b"shallow tables k0"), derive(b"shallow tables k1"))
    }
}

impl core::hash::BuildHasher for TableHasher {
    type Hasher = siphasher::sip::SipHasher13;
    fn build_hasher(&self) -> Self::Hasher {
        siphasher::sip::SipHasher13::new_with_keys(self.0, self.1)
    }
}

impl Stack {
    /// A stack with no addresses; `seed` keys ISNs, timestamps offsets and port choice.
    pub fn new(seed: u64) -> Stack {
        let env = Env::new(seed);
        let tables = TableHasher::new(env.key);
        Stack {
            env,
            socks: Vec::new(),
            free_slots: std::collections::BinaryHeap::new(),
            next_gen: 1,
            conns: HashMap::with_hasher(tables.clone()),
            listeners: HashMap::with_hasher(tables.clone()),
            ports: HashMap::with_hasher(tables),
            addrs: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// Set a sysctl by Linux name.
    pub fn sysctl_set(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        self.env.sysctl.set(name, value)
    }

    /// Read a sysctl by Linux name.
    pub fn sysctl_get(&self, name: &str) -> Result<String, SysctlError> {
        self.env.sysctl.get(name)
    }

    /// Congestion-control module parameters (`/sys/module/tcp_cubic/parameters/...`).
    pub fn cc_params_mut(&mut self) -> &mut shallow_cc::CcParams {
        &mut self.env.cc_params
    }

    /// Tell the engine whether the substrate's qdisc paces by EDT (Linux `sk_pacing_status
    /// == SK_PACING_FQ`). When on, each data packet's `departure` advances by len/pacing_rate.
    pub fn set_fq_pacing(&mut self, on: bool) {
        self.env.fq_pacing = on;
    }

    /// Whether the device below orphans packets at transmit (default off). On, as for Linux's
    /// tun, veth or loopback (`skb_orphan` in `ndo_start_xmit`): a packet handed over with no
    /// pacing delay is completed inside the send itself, so it is never charged to
    /// `wmem_alloc` (TSQ, autocorking) nor held as "in a host queue", and its `Transmit` has no
    /// token. A packet that an EDT qdisc (fq) must hold until a later departure still gets a
    /// token and is charged until `tx_complete`.
    pub fn set_tx_orphan(&mut self, on: bool) {
        self.env.tx_orphan = on;
    }

    /// Record every RTT sample the estimator takes (`tcp_rtt_estimator`'s input: one per ACK
    /// that gives one, as `tcp_ack_update_rtt` picks it, plus the SYN / SYN-ACK samples), for
    /// substrates that report RTT percentiles. Each socket keeps at most `per_socket` samples
    /// until [`Stack::take_rtt_samples`] takes them; further ones are counted and dropped, so
    /// memory stays bounded. 0 (the default) stops recording.
    pub fn set_rtt_log(&mut self, per_socket: usize) {
        self.env.rtt_log_cap = per_socket;
    }

    /// Move socket `s`'s recorded RTT samples (µs, oldest first; see [`Stack::set_rtt_log`])
    /// to the end of `out`, and return how many were dropped since the last call because its
    /// log was full.
    pub fn take_rtt_samples(&mut self, s: SocketId, out: &mut Vec<u32>) -> Result<u64, Errno> {
        let (sk, _) = self.sk_env(s)?;
        out.append(&mut sk.rtt_log);
        Ok(std::mem::take(&mut sk.rtt_log_dropped))
    }

    /// Whether the qdisc below drops every packet (default off), as `tc qdisc add dev D root
    /// pfifo limit 0` does: [`Stack::set_tx_gate`] with [`DropAll`](crate::DropAll) (on) or
    /// with none (off, which removes any gate). On: every transmit fails locally
    /// (NET_XMIT_DROP): data stays in the write queue, a retransmission is not counted as
    /// sent, the flow enters CWR, and a persist probe that fails retries every
    /// `TCP_RESOURCE_PROBE_INTERVAL` (500 ms).
    pub fn set_tx_drop(&mut self, on: bool) {
        self.set_tx_gate(on.then(|| Box::new(crate::DropAll) as Box<dyn crate::TxGate>));
    }

    /// Install the device side's admission rule (`crate::gate`; `None`, the default, accepts
    /// every packet). The gate is asked once per packet, synchronously, before the packet
    /// counts as sent; a refusal is Linux's `NET_XMIT_DROP` from `dev_queue_xmit`: the flow
    /// enters CWR, refused new data stays unsent in the write queue (snd_nxt does not move)
    /// and is sent later, a refused retransmission counts `TCPRetransFail` and is not a
    /// retransmission in flight, a refused persist probe retries after 500 ms — a local drop
    /// is never taken for a loss in the network.
    pub fn set_tx_gate(&mut self, gate: Option<Box<dyn crate::TxGate>>) {
        self.env.gate = gate;
    }

    /// Whether the output device takes TSO/GSO super-segments (default on). Off (as with
    /// `ethtool -K dev tso off gso off`): `size_goal` is one MSS and every packet is one segment.
    pub fn set_gso(&mut self, on: bool) {
        self.env.gso = on;
    }

    /// Whether the device completes the TCP checksum of the segments it cuts from a TSO
    /// packet (default off). On, a [`Transmit`] with `gso_size: Some(g)` carrying more than
    /// `g` payload bytes leaves its checksum to the device, as Linux's `CHECKSUM_PARTIAL`:
    /// the field holds the folded pseudo-header sum (`__tcp_v4_send_check`) and the payload
    /// is not summed; the device must complete each segment's checksum
    /// (`shallow_wire::segment::write_segment` computes them from scratch, which suits).
    /// Every other packet still carries a full checksum.
    pub fn set_tso_csum_offload(&mut self, on: bool) {
        self.env.tso_csum_offload = on;
    }

    /// Whether the device takes a packet's payload apart from its headers (scatter-gather,
    /// Linux `NETIF_F_SG`; default off). On, a data packet's [`Transmit::data`] holds its
    /// headers only and [`Transmit::frag`] a share of the socket's send buffer, so the
    /// payload is not copied; the bytes stay read-only while any packet holds them (a later
    /// write to the socket never changes them). Off, every packet is contiguous.
    pub fn set_sg(&mut self, on: bool) {
        self.env.sg = on;
    }

    /// How the device sizes received buffers ([`RxTruesize`]; the default is
    /// [`RxTruesize::Overhead`]). The packetdrill runner stands in for a tun device.
    pub fn set_rx_truesize(&mut self, model: RxTruesize) {
        self.env.rx_truesize = model;
    }

    /// The SNMP counters.
    pub fn counters(&self) -> &Counters {
        &self.env.mib
    }

    /// Add a local address.
    pub fn add_address(&mut self, ip: IpAddr) {
        if !self.addrs.contains(&ip) {
            self.addrs.push(ip);
        }
    }

    /// Local addresses.
    pub fn addresses(&self) -> &[IpAddr] {
        &self.addrs
    }

    /// Add or replace a route to `dst/prefix` with TCP attributes (`ip route ... mtu N advmss N
    /// initcwnd N quickack 1`). With no routes at all, every destination uses default attributes.
    pub fn set_route(&mut self, dst: IpAddr, prefix: u8, attrs: RouteAttrs) {
        self.routes
            .retain(|r| !(r.dst == dst && r.prefix == prefix));
        self.routes.push(Route { dst, prefix, attrs });
        // A route change invalidates connected sockets' cached routes; each picks up its new
        // route at its next transmit (ip_queue_xmit → __sk_dst_check).
        let ids: Vec<u32> = (0..self.socks.len() as u32).collect();
        for i in ids {
            let remote = match self.socks[i as usize].as_deref() {
                Some(sk) if sk.remote.port() != 0 => sk.remote.ip(),
                _ => continue,
            };
            let Some(r) = self.route_lookup(remote) else {
                continue;
            };
            if let Some(sk) = self.socks[i as usize].as_deref_mut() {
                if sk.route != r {
                    sk.route_pending = Some(r);
                }
            }
        }
    }

    fn route_lookup(&self, dst: IpAddr) -> Option<RouteAttrs> {
        if self.routes.is_empty() {
            return Some(RouteAttrs::default());
        }
        self.routes
            .iter()
            .filter(|r| prefix_match(r.dst, dst, r.prefix))
            .max_by_key(|r| r.prefix)
            .map(|r| r.attrs)
    }

    pub(crate) fn sock(&self, s: SocketId) -> Result<&Sock, Errno> {
        self.socks
            .get(s.0 as usize)
            .and_then(|x| x.as_deref())
            .ok_or(Errno::EBADF)
    }

    fn sock_mut(&mut self, s: SocketId) -> Result<&mut Sock, Errno> {
        self.socks
            .get_mut(s.0 as usize)
            .and_then(|x| x.as_deref_mut())
            .ok_or(Errno::EBADF)
    }

    /// Split borrow: socket and environment.
    fn sk_env(&mut self, s: SocketId) -> Result<(&mut Sock, &mut Env), Errno> {
        let sk = self
            .socks
            .get_mut(s.0 as usize)
            .and_then(|x| x.as_deref_mut())
            .ok_or(Errno::EBADF)?;
        Ok((sk, &mut self.env))
    }

    fn alloc(&mut self, family: Family) -> SocketId {
        let idx = loop {
            match self.free_slots.pop() {
                Some(core::cmp::Reverse(i))
                    if self.socks.get(i as usize).is_some_and(|s| s.is_none()) =>
                {
                    break i as usize;
                }
                Some(_) => continue,
                None => {
                    self.socks.push(None);
                    break self.socks.len() - 1;
                }
            }
        };
        let id = SocketId(idx as u32);
        let gen = self.next_gen;
        self.next_gen = self.next_gen.wrapping_add(1).max(1);
        self.socks[idx] = Some(Box::new(Sock::new(id, gen, family, &self.env)));
        self.env.sockets_allocated += 1;
        id
    }

    /// Number of live sockets (including TIME_WAIT and unaccepted children).
    pub fn socket_count(&self) -> usize {
        self.socks.iter().filter(|s| s.is_some()).count()
    }

    /// Release a socket slot entirely.
    fn free(&mut self, s: SocketId) {
        let Some(mut sk) = self.socks.get_mut(s.0 as usize).and_then(|x| x.take()) else {
            return;
        };
        self.free_slots.push(core::cmp::Reverse(s.0));
        sk.disarm_all(&mut self.env);
        sk.mem_release(&mut self.env);
        self.env.sockets_allocated = self.env.sockets_allocated.saturating_sub(1);
        if sk.hashed && self.conns.get(&(sk.local, sk.remote)) == Some(&s) {
            self.conns.remove(&(sk.local, sk.remote));
        }
        if self.listeners.get(&sk.local) == Some(&s) {
            self.listeners.remove(&sk.local);
        }
        if let Some(v) = self.ports.get_mut(&sk.local.port()) {
            v.retain(|x| *x != s);
            if v.is_empty() {
                self.ports.remove(&sk.local.port());
            }
        }
        if let Some((p, gen)) = sk.parent {
            if let Some(ps) = self
                .socks
                .get_mut(p.0 as usize)
                .and_then(|x| x.as_deref_mut())
            {
                if ps.gen == gen {
                    if let Some(l) = ps.listen.as_mut() {
                        l.syn_queue.retain(|x| *x != s);
                        l.accept_queue.retain(|x| *x != s);
                    }
                }
            }
        }
        if matches!(sk.state, TcpState::Established | TcpState::CloseWait) {
            self.env.mib.sub(Mib::CurrEstab, 1);
        }
    }

    /// Settle a socket's memory charges of this engine call (see `mem.rs`).
    fn mem_sync(&mut self, s: SocketId) {
        if let Ok((sk, env)) = self.sk_env(s) {
            sk.mem_sync(env);
        }
    }

    /// Note the time of an engine call (`Env::clock`).
    fn tick(&mut self, now: Instant) {
        if now > self.env.clock {
            self.env.clock = now;
        }
    }

    /// After a state change: free orphans that reached CLOSE; unhash closed sockets.
    fn reap(&mut self, s: SocketId) {
        self.mem_sync(s);
        let Ok(sk) = self.sock(s) else { return };
        if sk.state == TcpState::Close {
            if sk.orphan || sk.parent.is_some() {
                // Orphans go away; so do unaccepted children that died.
                self.free(s);
            } else if sk.hashed {
                let key = (sk.local, sk.remote);
                if self.conns.get(&key) == Some(&s) {
                    self.conns.remove(&key);
                }
                if let Ok(sk) = self.sock_mut(s) {
                    sk.hashed = false;
                }
            }
        }
    }

    // ------------------------------------------------------------------ network side

    /// Feed one inbound IP packet (a GRO aggregate when `gso_size` is Some). The TCP
    /// checksum is verified here (a NIC without receive checksum offload, `CHECKSUM_NONE`).
    pub fn input(&mut self, now: Instant, packet: &[u8], gso_size: Option<u16>) {
        self.input_offload(now, packet, gso_size, false);
    }

    /// [`Stack::input`] for a packet whose TCP checksum the NIC has already verified when
    /// `csum_verified` is true (Linux `CHECKSUM_UNNECESSARY`, which `tcp_checksum_complete`
    /// trusts): the checksum is not summed again. Every other check still runs, so a hostile
    /// packet is handled as by `input`; only pass true for packets whose checksum really was
    /// checked since they last changed.
    pub fn input_offload(
        &mut self,
        now: Instant,
        packet: &[u8],
        gso_size: Option<u16>,
        csum_verified: bool,
    ) {
        self.tick(now);
        let seg = packet::parse(packet, gso_size, csum_verified);
        if let Err(packet::ParseError::NotTcp) = seg {
            if let Some(icmp) = packet::parse_icmp(packet) {
                self.icmp_err(now, icmp);
            }
        }
        self.input_seg(now, seg);
    }

    /// [`Stack::input_offload`] for a packet in two parts, as a device with scatter-gather
    /// hands over an skb with paged data: `head` holds exactly its IP and TCP headers, and
    /// `frag` its whole payload, which the receive queues keep a share of instead of copying
    /// it (the application's `recv` is then the only copy). A packet whose parts do not add
    /// up to its length fields counts as `InErrs` and is dropped; a non-TCP packet is ignored.
    pub fn input_frag(
        &mut self,
        now: Instant,
        head: &[u8],
        frag: &Bytes,
        gso_size: Option<u16>,
        csum_verified: bool,
    ) {
        self.tick(now);
        self.input_seg(now, packet::parse_frag(head, frag, gso_size, csum_verified));
    }

    /// The common part of the input calls: count, then demultiplex a parsed segment.
    fn input_seg(&mut self, now: Instant, seg: Result<SegIn<'_>, packet::ParseError>) {
        let seg = match seg {
            Ok(s) => s,
            Err(packet::ParseError::Checksum) => {
                self.env.mib.inc(Mib::InCsumErrors);
                self.env.mib.inc(Mib::InErrs);
                return;
            }
            Err(packet::ParseError::NotTcp) => return,
            Err(packet::ParseError::Malformed) => {
                self.env.mib.inc(Mib::InErrs);
                return;
            }
        };
        self.env.mib.add(Mib::InSegs, u64::from(seg.gso_segs));
        if !self.addrs.is_empty() && !self.addrs.contains(&seg.dst.ip()) {
            return;
        }
        if let Some(&id) = self.conns.get(&(seg.dst, seg.src)) {
            let owned = self.sock(id).map(|s| s.owned).unwrap_or(false);
            if owned {
                self.add_backlog(id, &seg);
                return;
            }
            self.rcv_conn(now, id, &seg);
            return;
        }
        if let Some(l) = self.listener_for(seg.dst) {
            self.listen_rcv(now, l, &seg);
            return;
        }
        self.send_reset_for(&seg);
    }

    /// The listener a SYN to `dst` reaches (`__inet_lookup_listener`): one bound to the
    /// address itself, else one bound to its family's wildcard, else — for an IPv4 `dst` —
    /// a dual-stack AF_INET6 listener on `::` (not `IPV6_V6ONLY`; see `dualstack`).
    fn listener_for(&self, dst: SocketAddr) -> Option<SocketId> {
        if let Some(&l) = self.listeners.get(&dst) {
            return Some(l);
        }
        let any = SocketAddr::new(Family::of(dst.ip()).unspecified(), dst.port());
        if let Some(&l) = self.listeners.get(&any) {
            return Some(l);
        }
        if dst.is_ipv4() {
            let any6 = SocketAddr::new(Family::V6.unspecified(), dst.port());
            if let Some(&l) = self.listeners.get(&any6) {
                let sk = self.sock(l).ok()?;
                if BindScope::of(sk.local.ip(), sk.opts.v6only).receives(dst.ip()) {
                    return Some(l);
                }
            }
        }
        None
    }

    /// An ICMP error for one of our connections (`tcp_v4_err`): path-MTU reduction
    /// (RFC 1191 / RFC 8201) or a destination-unreachable error (hard in SYN states, soft
    /// otherwise). Errors quoting a sequence outside snd_una..snd_nxt count as
    /// OutOfWindowIcmps and are ignored (RFC 5927 §4.1).
    fn icmp_err(&mut self, now: Instant, icmp: packet::IcmpIn) {
        let Some(&id) = self.conns.get(&(icmp.local, icmp.remote)) else {
            return;
        };
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        if !matches!(sk.state, TcpState::SynSent | TcpState::SynRecv)
            && !between(icmp.seq, sk.snd_una, sk.snd_nxt)
        {
            env.mib.inc(Mib::OutOfWindowIcmps);
            return;
        }
        match icmp.kind {
            packet::IcmpKind::FragNeeded(mtu) => {
                // The wire's family decides (an IPv4-mapped peer is an IPv4 path).
                let (min, pmtudisc) = if sk.local.is_ipv4() {
                    (68, sk.opts.pmtudisc)
                } else {
                    (1280, sk.opts.pmtudisc6)
                };
                // tcp_v4_mtu_reduced: IP_PMTUDISC_DONT opts out of path-MTU discovery.
                if mtu < min || mtu >= sk.pmtu() || pmtudisc == 0 {
                    return;
                }
                sk.route.mtu = mtu;
                let old = sk.mss_cache;
                sk.sync_mss(env);
                if sk.mss_cache < old {
                    sk.simple_retransmit(env, now);
                }
            }
            packet::IcmpKind::Unreach(e) => {
                if matches!(sk.state, TcpState::SynSent | TcpState::SynRecv) && !sk.owned {
                    sk.err = Some(e);
                    if sk.state == TcpState::SynSent {
                        env.mib.inc(Mib::AttemptFails);
                    }
                    sk.set_closed(env);
                    self.reap(id);
                } else {
                    sk.err_soft = Some(e);
                }
            }
        }
    }

    /// `tcp_add_backlog`: queue a packet for an owned socket, within 2*rcvbuf + sndbuf/2 + 64K.
    fn add_backlog(&mut self, id: SocketId, seg: &SegIn<'_>) {
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        if let Some(tail) = sk
            .backlog
            .back_mut()
            .filter(|_| env.rx_truesize.coalesces())
        {
            if tail.try_coalesce(seg) {
                sk.backlog_len += seg.payload.len() as u32;
                env.mib.inc(Mib::TCPBacklogCoalesce);
                return;
            }
        }
        let limit = 2u64 * u64::from(sk.rcvbuf) + u64::from(sk.sndbuf / 2) + 65536;
        if u64::from(sk.backlog_len) + u64::from(sk.rmem_alloc) > limit {
            env.mib.inc(Mib::TCPBacklogDrop);
            sk.drops += 1;
            return;
        }
        sk.backlog_len += sk.rx_truesize(env, seg, seg.payload.len() as u32);
        sk.backlog.push_back(packet::OwnedSeg::from_seg(seg));
    }

    fn rcv_conn(&mut self, now: Instant, id: SocketId, seg: &SegIn<'_>) {
        // tcp_timewait_state_process TCP_TW_SYN: a new SYN above the old sequence space
        // reopens the 4-tuple through the listener.
        if let Ok(sk) = self.sock(id) {
            if sk.state == TcpState::TimeWait
                && seg.has(TcpFlags::SYN)
                && !seg.has(TcpFlags::ACK)
                && !seg.has(TcpFlags::RST)
                && after(seg.seq, sk.rcv_nxt)
            {
                if let Some(l) = self.listener_for(seg.dst) {
                    if sk.orphan {
                        self.free(id);
                    } else {
                        let key = (sk.local, sk.remote);
                        self.conns.remove(&key);
                        if let Ok((sk, env)) = self.sk_env(id) {
                            sk.hashed = false;
                            sk.disarm_all(env);
                            sk.state = TcpState::Close;
                        }
                    }
                    self.listen_rcv(now, l, seg);
                    return;
                }
            }
        }
        // Accept-queue overflow at the third ACK (tcp_check_req → syn_recv_sock).
        let parent = {
            let Ok(sk) = self.sock(id) else { return };
            if sk.state == TcpState::SynRecv
                && seg.has(TcpFlags::ACK)
                && !seg.has(TcpFlags::RST)
                && !seg.has(TcpFlags::SYN)
            {
                sk.parent
            } else {
                None
            }
        };
        if let Some((p, gen)) = parent {
            let full = match self.sock(p) {
                Ok(ps) if ps.gen == gen => ps
                    .listen
                    .as_ref()
                    // sk_acceptq_is_full: ack_backlog > max_ack_backlog.
                    .map(|l| l.accept_queue.len() as u32 > l.backlog)
                    .unwrap_or(true),
                _ => true,
            };
            if full {
                self.env.mib.inc(Mib::ListenOverflows);
                self.env.mib.inc(Mib::ListenDrops);
                if self.env.sysctl.on(Sysctl::tcp_abort_on_overflow) {
                    self.send_reset_for(seg);
                    self.free(id);
                }
                return;
            }
        }
        let out: RcvOutcome = {
            let Ok((sk, env)) = self.sk_env(id) else {
                return;
            };
            sk.rcv(env, now, seg)
        };
        if out.reset {
            self.send_reset_for(seg);
        }
        if out.child_established {
            self.child_established(id);
        }
        self.reap(id);
    }

    fn child_established(&mut self, id: SocketId) {
        let Some((p, gen)) = self.sock(id).ok().and_then(|s| s.parent) else {
            return; // simultaneous open: not a passive open
        };
        self.env.mib.inc(Mib::PassiveOpens);
        if let Ok(ps) = self.sock_mut(p) {
            if ps.gen == gen {
                if let Some(l) = ps.listen.as_mut() {
                    l.syn_queue.retain(|x| *x != id);
                    l.accept_queue.push_back(id);
                }
                self.env.wake(p, POLLIN | POLLRDNORM);
            }
        }
    }

    /// Answer a segment that matched no connection with a RST (`tcp_v4_send_reset`).
    fn send_reset_for(&mut self, seg: &SegIn<'_>) {
        if seg.has(TcpFlags::RST) {
            return;
        }
        let (seq, ack, fl) = if seg.has(TcpFlags::ACK) {
            (seg.ack, 0, TcpFlags::RST)
        } else {
            (0, seg.end_seq(), TcpFlags::RST | TcpFlags::ACK)
        };
        let ident = self.env.next_ident();
        let out = SegOut {
            local: seg.dst,
            remote: seg.src,
            seq,
            ack,
            flags: fl,
            window: 0,
            tos: 0,
            ttl: 64,
            ident,
            opts: &[],
            payload: &[],
        };
        self.env.emit(&out, None, None, None);
        self.env.mib.inc(Mib::OutRsts);
    }

    /// A segment for a listener (`tcp_v4_conn_request`; SYN cookies per `cookie_v4_check`).
    fn listen_rcv(&mut self, now: Instant, lid: SocketId, seg: &SegIn<'_>) {
        if seg.has(TcpFlags::RST) {
            return;
        }
        let cookies = self.env.sysint(Sysctl::tcp_syncookies);
        if seg.has(TcpFlags::ACK) && !seg.has(TcpFlags::SYN) {
            if cookies != 0 {
                if let Some(opts) = self.cookie_check(now, seg) {
                    self.cookie_accept(now, lid, seg, opts);
                    return;
                }
            }
            self.send_reset_for(seg);
            return;
        }
        if !seg.has(TcpFlags::SYN) || seg.has(TcpFlags::ACK) {
            if seg.has(TcpFlags::ACK) {
                self.send_reset_for(seg);
            }
            return;
        }
        let (backlog, synq, accq) = match self.sock(lid).ok().and_then(|l| l.listen.as_ref()) {
            Some(l) => (
                l.backlog,
                l.syn_queue.len() as u32,
                l.accept_queue.len() as u32,
            ),
            None => return,
        };
        if accq > backlog {
            self.env.mib.inc(Mib::ListenOverflows);
            self.env.mib.inc(Mib::ListenDrops);
            return;
        }
        let max_syn = (self.env.sysint(Sysctl::tcp_max_syn_backlog) as u32).min(backlog.max(1));
        if cookies == 2 || synq >= max_syn {
            if cookies != 0 {
                self.send_cookie_synack(now, lid, seg);
            } else {
                self.env.mib.inc(Mib::ListenDrops);
            }
            return;
        }
        let iss = self.isn(now, seg.dst, seg.src);
        let Some(cid) = self.new_child(now, lid, seg, iss, None) else {
            return;
        };
        let (sk, env) = self.sk_env(cid).expect("just created");
        sk.send_synack(env, now);
        sk.rtx_event = RtxEvent::Rto;
        sk.rto = TCP_TIMEOUT_INIT;
        sk.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
        if let Ok(l) = self.sock_mut(lid) {
            if let Some(q) = l.listen.as_mut() {
                q.syn_queue.push(cid);
            }
        }
    }

    /// Create a SYN_RECV child of listener `lid` for the SYN `seg` (`inet_reqsk_alloc` +
    /// `tcp_create_openreq_child`), hashed in the demux table. `opts` overrides the SYN's
    /// options (reconstructed from a SYN cookie).
    fn new_child(
        &mut self,
        now: Instant,
        lid: SocketId,
        seg: &SegIn<'_>,
        iss: u32,
        opts: Option<packet::RxOpts>,
    ) -> Option<SocketId> {
        let route = self.route_lookup(seg.src.ip())?;
        let (lopts, lgen, lcc, lsnd, lrcv, family) = {
            let l = self.sock(lid).ok()?;
            (
                l.opts.clone(),
                l.gen,
                l.cc.name(),
                l.sndbuf,
                l.rcvbuf,
                l.family,
            )
        };
        let cid = self.alloc(family);
        let ts_off = self.ts_offset(seg.dst, seg.src);
        let cc_params = self.env.cc_params.clone();
        let (sk, env) = self.sk_env(cid).ok()?;
        sk.opts = lopts;
        sk.sndbuf = lsnd;
        sk.rcvbuf = lrcv;
        if let Some(cc) = shallow_cc::by_name(lcc, &cc_params) {
            sk.cc = cc;
        }
        sk.route = route;
        sk.local = seg.dst;
        sk.remote = seg.src;
        sk.bound = true;
        sk.parent = Some((lid, lgen));
        sk.iss = iss;
        sk.ts_offset = ts_off;
        sk.snd_una = iss;
        sk.snd_nxt = iss.wrapping_add(1);
        sk.write_seq = sk.snd_nxt;
        sk.pushed_seq = sk.write_seq;
        sk.irs = seg.seq;
        sk.rcv_nxt = seg.seq.wrapping_add(1);
        sk.rcv_wup = sk.rcv_nxt;
        sk.copied_seq = sk.rcv_nxt;
        let syn_like = SegIn {
            opts: opts.unwrap_or(seg.opts),
            ..*seg
        };
        sk.apply_syn_options(env, &syn_like, false);
        // tcp_ecn_create_request (RFC 3168 §6.1.1): a not-ECT SYN with ECE|CWR asks for ECN;
        // any tcp_ecn other than 0 accepts.
        sk.ecn_flags = 0;
        if seg.flags & (TcpFlags::ECE | TcpFlags::CWR) == TcpFlags::ECE | TcpFlags::CWR
            && seg.tos & 0x3 == 0
            && env.sysint(crate::sysctl::Sysctl::tcp_ecn) != 0
        {
            sk.ecn_flags = crate::socket::ecnf::OK;
        }
        if let (true, Some((tsval, _))) = (sk.tstamp_ok, syn_like.opts.ts) {
            sk.ts_recent = tsval;
            sk.ts_recent_stamp = now;
        }
        sk.init_rcv_window(env, false);
        sk.snd_wnd = u32::from(seg.window);
        sk.snd_wl1 = seg.seq;
        sk.max_window = sk.snd_wnd;
        sk.state = TcpState::SynRecv;
        sk.hashed = true;
        self.conns.insert((seg.dst, seg.src), cid);
        self.ports.entry(seg.dst.port()).or_default().push(cid);
        Some(cid)
    }

    /// SYN-cookie value (our ISN) for a SYN (`secure_tcp_syn_cookie`): keyed hash of the
    /// 4-tuple, the peer's ISN, a 64-second counter in the top 8 bits and the MSS index.
    fn cookie(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        irs: u32,
        count: u32,
        data: u32,
    ) -> u32 {
        let h1 = self.env.hash4(local, remote, 4) as u32;
        let h2 =
            (self.env.hash4(local, remote, 5) as u32).wrapping_add(count.wrapping_mul(0x9e37_79b9));
        h1.wrapping_add(irs)
            .wrapping_add(count << 24)
            .wrapping_add(h2.wrapping_add(data) & 0x00ff_ffff)
    }

    /// Answer a SYN with a stateless cookie SYN-ACK (SyncookiesSent).
    fn send_cookie_synack(&mut self, now: Instant, lid: SocketId, seg: &SegIn<'_>) {
        let peer_mss = u32::from(seg.opts.mss.unwrap_or(536));
        let idx = SYNCOOKIE_MSS
            .iter()
            .rposition(|&m| m <= peer_mss)
            .unwrap_or(0) as u32;
        let count = (now.as_nanos() / 64_000_000_000) as u32;
        let iss = self.cookie(seg.dst, seg.src, seg.seq, count, idx);
        // Build a throwaway child to render the SYN-ACK exactly as a normal one.
        let mut s2 = SegIn { ..*seg };
        s2.opts.mss = Some(SYNCOOKIE_MSS[idx as usize] as u16);
        let Some(cid) = self.new_child(now, lid, &s2, iss, None) else {
            return;
        };
        if let Ok((sk, env)) = self.sk_env(cid) {
            // With timestamps, encode wscale and SACK in the low 6 bits of TSval
            // (cookie_init_timestamp) so they survive.
            if sk.tstamp_ok {
                let mut o = if sk.wscale_ok {
                    u32::from(sk.snd_wscale)
                } else {
                    0xf
                };
                if sk.sack_ok {
                    o |= 1 << 4;
                }
                let ts = sk.tsval(now);
                let want = (ts & !0x3f) | o;
                sk.ts_offset = sk.ts_offset.wrapping_add(want.wrapping_sub(ts));
            }
            sk.send_synack(env, now);
            env.mib.inc(Mib::SyncookiesSent);
        }
        self.free(cid);
    }

    /// Validate the ACK of a cookie SYN-ACK (`cookie_v4_check`); returns the reconstructed
    /// SYN options.
    fn cookie_check(&mut self, now: Instant, seg: &SegIn<'_>) -> Option<packet::RxOpts> {
        let cookie = seg.ack.wrapping_sub(1);
        let irs = seg.seq.wrapping_sub(1);
        let h1 = self.env.hash4(seg.dst, seg.src, 4) as u32;
        let c = cookie.wrapping_sub(h1).wrapping_sub(irs);
        let enc = c >> 24;
        let cur = (now.as_nanos() / 64_000_000_000) as u32;
        let age = (cur.wrapping_sub(enc)) & 0xff;
        if age > 2 {
            self.env.mib.inc(Mib::SyncookiesFailed);
            return None;
        }
        let count = cur.wrapping_sub(age);
        let h2 = (self.env.hash4(seg.dst, seg.src, 5) as u32)
            .wrapping_add(count.wrapping_mul(0x9e37_79b9));
        let data = (c.wrapping_sub(count << 24).wrapping_sub(h2)) & 0x00ff_ffff;
        if data as usize >= SYNCOOKIE_MSS.len() {
            self.env.mib.inc(Mib::SyncookiesFailed);
            return None;
        }
        let mut o = packet::RxOpts {
            mss: Some(SYNCOOKIE_MSS[data as usize] as u16),
            ..Default::default()
        };
        if let Some((tsval, tsecr)) = seg.opts.ts {
            o.ts = Some((tsval, 0));
            let bits = tsecr & 0x3f;
            if bits & 0xf != 0xf {
                o.wscale = Some((bits & 0xf) as u8);
            }
            o.sack_ok = bits & (1 << 4) != 0;
        }
        self.env.mib.inc(Mib::SyncookiesRecv);
        Some(o)
    }

    /// A valid cookie ACK: create the child and complete the handshake with this ACK.
    fn cookie_accept(
        &mut self,
        now: Instant,
        lid: SocketId,
        seg: &SegIn<'_>,
        opts: packet::RxOpts,
    ) {
        let accq_full = self
            .sock(lid)
            .ok()
            .and_then(|l| l.listen.as_ref())
            .map(|l| l.accept_queue.len() as u32 > l.backlog)
            .unwrap_or(true);
        if accq_full {
            self.env.mib.inc(Mib::ListenOverflows);
            self.env.mib.inc(Mib::ListenDrops);
            return;
        }
        let syn = SegIn {
            seq: seg.seq.wrapping_sub(1),
            flags: TcpFlags::SYN,
            payload: &[],
            ..*seg
        };
        let iss = seg.ack.wrapping_sub(1);
        let Some(cid) = self.new_child(now, lid, &syn, iss, Some(opts)) else {
            return;
        };
        if let Ok(sk) = self.sock_mut(cid) {
            // Keep the timestamp clock continuous with the cookie SYN-ACK's TSval.
            if let (true, Some((_, ecr))) = (sk.tstamp_ok, seg.opts.ts) {
                let ts = sk.tsval(now);
                if after(ecr, ts) {
                    sk.ts_offset = sk.ts_offset.wrapping_add(ecr.wrapping_sub(ts));
                }
            }
            sk.synack_retries_done = 1; // no RTT sample from the SYN-ACK
        }
        self.rcv_conn(now, cid, seg);
    }

    /// ISN per RFC 6528: keyed hash of the 4-tuple plus a 64 ns clock.
    fn isn(&self, now: Instant, local: SocketAddr, remote: SocketAddr) -> u32 {
        let h = self.env.hash4(local, remote, 1) as u32;
        h.wrapping_add((now.as_nanos() >> 6) as u32)
    }

    /// Per-connection timestamp offset (Linux `secure_tcp_ts_off`).
    fn ts_offset(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.env.hash4(local, remote, 2) as u32
    }

    /// Next packet to send, if any.
    pub fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.env.txq.pop_front()
    }

    /// TX completion of a data packet (`tcp_wfree`): return its bytes to the socket and, if
    /// TSQ or autocork throttled the socket, push more data (or defer to `release_sock`).
    pub fn tx_complete(&mut self, now: Instant, token: TxToken) {
        self.tick(now);
        let id = SocketId(token.idx);
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        if sk.gen != token.gen {
            return;
        }
        sk.wmem_alloc = sk.wmem_alloc.saturating_sub(token.truesize);
        // The buffer this packet came from (if not yet acked): its copy left the host.
        let i = sk
            .rtx_queue
            .partition_point(|s| !after(s.end_seq, token.seq));
        if let Some(s) = sk.rtx_queue.get_mut(i) {
            // A head trimmed by a partial ACK starts after the token's sequence.
            if !before(token.seq, s.seq) || i == 0 {
                s.in_host = s.in_host.saturating_sub(1);
            }
        }
        if sk.tsq_flags & tsq::THROTTLED != 0 {
            sk.tsq_flags &= !tsq::THROTTLED;
            if sk.owned {
                sk.tsq_flags |= tsq::TSQ_DEFERRED;
            } else {
                sk.tsq_write(env, now);
            }
        }
        self.reap(id);
    }

    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.env.timers.first().map(|t| t.0)
    }

    /// Run every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        while let Some(&(at, idx, gen, kind)) = self.env.timers.first() {
            if at > now {
                break;
            }
            self.env.timers.pop_first();
            let id = SocketId(idx);
            let valid = match self.sock_mut(id) {
                Ok(sk) if sk.gen == gen && sk.timers[kind as usize] == Some(at) => {
                    sk.timers[kind as usize] = None;
                    true
                }
                _ => false,
            };
            if valid {
                self.fire(now, id, kind);
                self.reap(id);
            }
        }
    }

    fn fire(&mut self, now: Instant, id: SocketId, kind: TimerKind) {
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        match kind {
            TimerKind::Retrans => {
                if sk.owned {
                    sk.tsq_flags |= tsq::WRITE_TIMER_DEFERRED;
                    return;
                }
                let drop_child = sk.write_timer(env, now);
                if drop_child {
                    self.free(id);
                }
            }
            TimerKind::Delack => {
                if sk.owned {
                    env.mib.inc(Mib::DelayedACKLocked);
                    sk.tsq_flags |= tsq::DELACK_TIMER_DEFERRED;
                    return;
                }
                sk.delack_timer(env, now);
            }
            TimerKind::Keepalive => {
                if sk.keepalive_timer(env, now) {
                    self.free(id);
                }
            }
            TimerKind::CompSack => {
                // tcp_compressed_ack_kick
                if sk.owned {
                    sk.tsq_flags |= tsq::DELACK_TIMER_DEFERRED;
                    return;
                }
                if sk.compressed_ack > 0 {
                    sk.compressed_ack -= 1;
                    sk.send_ack(env, now);
                }
            }
        }
    }

    /// Next wake-up for application waiters.
    pub fn poll_wakeup(&mut self) -> Option<Wakeup> {
        self.env.wakeups.pop_front()
    }

    // ------------------------------------------------------------------ application side

    /// `socket(AF_INET|AF_INET6, SOCK_STREAM, 0)`.
    pub fn socket(&mut self, family: Family) -> Result<SocketId, Errno> {
        Ok(self.alloc(family))
    }

    fn pick_ephemeral(
        &mut self,
        local_ip: IpAddr,
        remote: Option<SocketAddr>,
    ) -> Result<u16, Errno> {
        let r = self.env.sysctl.triple(Sysctl::ip_local_port_range);
        let (lo, hi) = (r[0] as u32, r[1] as u32);
        let n = hi - lo + 1;
        let start = Sock::rand(&mut self.env) % n;
        for i in 0..n {
            let port = (lo + (start + i) % n) as u16;
            let busy = match remote {
                Some(rem) => {
                    self.conns
                        .contains_key(&(SocketAddr::new(local_ip, port), rem))
                        || self.ports.get(&port).is_some_and(|v| {
                            v.iter().any(|s| {
                                self.sock(*s)
                                    .map(|sk| sk.userlocks_port || sk.state == TcpState::Listen)
                                    .unwrap_or(false)
                            })
                        })
                }
                None => self.ports.get(&port).is_some_and(|v| !v.is_empty()),
            };
            if !busy {
                return Ok(port);
            }
        }
        Err(Errno::EADDRNOTAVAIL)
    }

    /// `bind()`. Port 0 picks an ephemeral port.
    pub fn bind(&mut self, s: SocketId, addr: SocketAddr) -> Result<(), Errno> {
        let (bound, family, reuse, v6only) = {
            let sk = self.sock(s)?;
            (sk.bound, sk.family, sk.opts.reuseaddr, sk.opts.v6only)
        };
        if bound {
            return Err(Errno::EINVAL);
        }
        let addr_lock = !addr.ip().is_unspecified();
        let addr = dualstack::to_wire(family, v6only, dualstack::Call::Bind, addr)?;
        let scope = BindScope::of(addr.ip(), v6only);
        if !addr.ip().is_unspecified() && !self.addrs.is_empty() && !self.addrs.contains(&addr.ip())
        {
            return Err(Errno::EADDRNOTAVAIL);
        }
        let port = if addr.port() == 0 {
            self.pick_ephemeral(addr.ip(), None)?
        } else {
            if let Some(v) = self.ports.get(&addr.port()) {
                for o in v {
                    let Ok(osk) = self.sock(*o) else { continue };
                    if !BindScope::of(osk.local.ip(), osk.opts.v6only).overlaps(scope) {
                        continue;
                    }
                    let ok = reuse && osk.opts.reuseaddr && osk.state != TcpState::Listen
                        || (osk.state == TcpState::TimeWait && reuse);
                    if !ok {
                        return Err(Errno::EADDRINUSE);
                    }
                }
            }
            addr.port()
        };
        let sk = self.sock_mut(s)?;
        sk.local = SocketAddr::new(addr.ip(), port);
        sk.bound = true;
        // SOCK_BINDPORT_LOCK: an explicitly bound port is never shared by connect().
        sk.userlocks_port = true;
        sk.userlocks_addr = addr_lock;
        self.ports.entry(port).or_default().push(s);
        Ok(())
    }

    /// `listen(backlog)`.
    pub fn listen(&mut self, s: SocketId, backlog: i32) -> Result<(), Errno> {
        let (state, bound, family) = {
            let sk = self.sock(s)?;
            (sk.state, sk.bound, sk.family)
        };
        if !matches!(state, TcpState::Close | TcpState::Listen) {
            return Err(Errno::EINVAL);
        }
        if !bound {
            self.bind(s, SocketAddr::new(family.unspecified(), 0))?;
        }
        let backlog = backlog.clamp(0, 4096) as u32;
        let sk = self.sock_mut(s)?;
        if let Some(l) = sk.listen.as_mut() {
            l.backlog = backlog;
            return Ok(());
        }
        let local = sk.local;
        let scope = BindScope::of(local.ip(), sk.opts.v6only);
        if let Some(&other) = self.listeners.get(&local) {
            if other != s {
                return Err(Errno::EADDRINUSE);
            }
        }
        // inet_csk_listen_start checks the port again: binds that SO_REUSEADDR let share it
        // cannot both listen where their addresses overlap (dual-stack `::` included;
        // measured on 6.18).
        let clash = self.ports.get(&local.port()).is_some_and(|v| {
            v.iter().any(|o| {
                *o != s
                    && self.sock(*o).is_ok_and(|osk| {
                        osk.state == TcpState::Listen
                            && BindScope::of(osk.local.ip(), osk.opts.v6only).overlaps(scope)
                    })
            })
        });
        if clash {
            return Err(Errno::EADDRINUSE);
        }
        let sk = self.sock_mut(s)?;
        sk.state = TcpState::Listen;
        sk.listen = Some(Box::new(Listen {
            backlog,
            ..Default::default()
        }));
        self.listeners.insert(local, s);
        Ok(())
    }

    /// `accept()`: the next established child and its peer address, or EAGAIN.
    pub fn accept(&mut self, s: SocketId) -> Result<(SocketId, SocketAddr), Errno> {
        let sk = self.sock_mut(s)?;
        let Some(l) = sk.listen.as_mut() else {
            return Err(Errno::EINVAL);
        };
        let Some(c) = l.accept_queue.pop_front() else {
            return Err(Errno::EAGAIN);
        };
        let child = self.sock_mut(c)?;
        child.parent = None;
        Ok((c, dualstack::to_api(child.family, child.remote)))
    }

    /// Give a closed, previously connected socket a fresh control block (keeps options and
    /// an explicit bind).
    fn reinit_closed(&mut self, s: SocketId) -> Result<(), Errno> {
        let old = self.sock(s)?;
        let (gen, family, opts, local, locked, addr_locked) = (
            old.gen,
            old.family,
            old.opts.clone(),
            old.local,
            old.userlocks_port,
            old.userlocks_addr,
        );
        let (osnd, orcv) = (old.sndbuf, old.rcvbuf);
        if !locked {
            if let Some(v) = self.ports.get_mut(&local.port()) {
                v.retain(|x| *x != s);
            }
        }
        let mut fresh = Sock::new(s, gen, family, &self.env);
        fresh.opts = opts;
        if locked {
            // tcp_disconnect keeps the source address only if bind() chose it
            // (SOCK_BINDADDR_LOCK): a dual-stack socket bound to `::` that reached an IPv4
            // peer may reach an IPv6 one next.
            fresh.local = if addr_locked {
                local
            } else {
                SocketAddr::new(family.unspecified(), local.port())
            };
            fresh.bound = true;
            fresh.userlocks_port = true;
            fresh.userlocks_addr = addr_locked;
        }
        let sndbuf_lock = fresh.opts.sndbuf_lock;
        let rcvbuf_lock = fresh.opts.rcvbuf_lock;
        if sndbuf_lock {
            fresh.sndbuf = osnd;
        }
        if rcvbuf_lock {
            fresh.rcvbuf = orcv;
        }
        self.socks[s.0 as usize] = Some(Box::new(fresh));
        Ok(())
    }

    /// Non-blocking `connect()`: sends the SYN and returns `Err(EINPROGRESS)`; completion is
    /// reported by POLLOUT (then SO_ERROR). A second call gives EALREADY, then EISCONN.
    pub fn connect(&mut self, now: Instant, s: SocketId, remote: SocketAddr) -> Result<(), Errno> {
        let (state, connecting, had_peer) = {
            let sk = self.sock(s)?;
            (sk.state, sk.connecting, sk.remote.port() != 0)
        };
        match state {
            TcpState::SynSent | TcpState::SynRecv => return Err(Errno::EALREADY),
            TcpState::Listen => return Err(Errno::EINVAL),
            TcpState::Close => {
                // inet_stream_connect: a connect that failed (RST, timeout) reports its error
                // once (or ECONNABORTED) and leaves the socket unconnected.
                if connecting {
                    let sk = self.sock_mut(s)?;
                    sk.connecting = false;
                    return Err(sk.err.take().unwrap_or(Errno::ECONNABORTED));
                }
                if had_peer {
                    self.reinit_closed(s)?;
                }
            }
            _ => return Err(Errno::EISCONN),
        }
        let (family, bound, local, v6only) = {
            let sk = self.sock(s)?;
            (sk.family, sk.bound, sk.local, sk.opts.v6only)
        };
        let remote = dualstack::to_wire(family, v6only, dualstack::Call::Connect, remote)?;
        dualstack::connect_check(bound.then_some(local.ip()), remote.ip())?;
        let route = self.route_lookup(remote.ip()).ok_or(Errno::ENETUNREACH)?;
        let src_ip = if bound && !local.ip().is_unspecified() {
            local.ip()
        } else {
            self.addrs
                .iter()
                .copied()
                .find(|a| a.is_ipv4() == remote.is_ipv4())
                .ok_or(Errno::ENETUNREACH)?
        };
        let port = if bound {
            local.port()
        } else {
            self.pick_ephemeral(src_ip, Some(remote))?
        };
        let local = SocketAddr::new(src_ip, port);
        if self.conns.contains_key(&(local, remote)) {
            return Err(Errno::EADDRNOTAVAIL);
        }
        let iss = self.isn(now, local, remote);
        let ts_off = self.ts_offset(local, remote);
        if !bound {
            self.ports.entry(port).or_default().push(s);
        }
        self.conns.insert((local, remote), s);
        let (sk, env) = self.sk_env(s)?;
        sk.connecting = true;
        sk.bound = true;
        sk.local = local;
        sk.remote = remote;
        sk.route = route;
        sk.hashed = true;
        sk.iss = iss;
        sk.ts_offset = ts_off;
        sk.snd_una = iss;
        sk.snd_nxt = iss.wrapping_add(1);
        sk.write_seq = sk.snd_nxt;
        sk.pushed_seq = sk.write_seq;
        sk.tstamp_ok = env.sysint(Sysctl::tcp_timestamps) != 0;
        sk.sack_ok = env.sysctl.on(Sysctl::tcp_sack);
        sk.wscale_ok = env.sysctl.on(Sysctl::tcp_window_scaling);
        sk.init_rcv_window(env, true);
        sk.state = TcpState::SynSent;
        sk.send_syn(env, now);
        sk.rtx_event = RtxEvent::Rto;
        sk.rto = TCP_TIMEOUT_INIT;
        sk.retrans_stamp = Some(now);
        sk.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
        env.mib.inc(Mib::ActiveOpens);
        Err(Errno::EINPROGRESS)
    }

    /// `send()`/`write()` (never blocks): bytes accepted, or EAGAIN/EPIPE/… (spec §1.2, §3.3).
    /// Flags: MSG_DONTWAIT, MSG_MORE, MSG_EOR, MSG_NOSIGNAL.
    pub fn send(
        &mut self,
        now: Instant,
        s: SocketId,
        data: &[u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        self.tick(now);
        let (sk, env) = self.sk_env(s)?;
        let r = sk.sendmsg(env, now, data, flags);
        self.reap(s);
        r
    }

    /// `recv()`/`read()` (never blocks): Ok(0) is end of stream. MSG_PEEK, MSG_TRUNC,
    /// MSG_WAITALL (returns EAGAIN until the full amount or EOF is there), MSG_DONTWAIT.
    pub fn recv(
        &mut self,
        now: Instant,
        s: SocketId,
        buf: &mut [u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        self.tick(now);
        let (sk, env) = self.sk_env(s)?;
        let r = sk.recvmsg(env, now, buf, flags);
        self.mem_sync(s);
        r
    }

    /// `shutdown()`.
    pub fn shutdown(&mut self, now: Instant, s: SocketId, how: Shutdown) -> Result<(), Errno> {
        self.tick(now);
        let (sk, env) = self.sk_env(s)?;
        match sk.state {
            TcpState::Close | TcpState::Listen | TcpState::SynSent => {
                if sk.state == TcpState::Listen && how != Shutdown::Write {
                    return Ok(());
                }
                if sk.state != TcpState::SynSent {
                    return Err(Errno::ENOTCONN);
                }
            }
            _ => {}
        }
        if matches!(how, Shutdown::Read | Shutdown::Both) {
            sk.shutdown |= RCV_SHUTDOWN;
            env.wake(s, POLLIN | POLLRDNORM | POLLRDHUP);
        }
        if matches!(how, Shutdown::Write | Shutdown::Both) && sk.shutdown & SEND_SHUTDOWN == 0 {
            sk.close_state_and_fin(env, now);
        }
        self.reap(s);
        Ok(())
    }

    /// `close()`: FIN (or RST when unread data remains / SO_LINGER 0), then the socket is
    /// orphaned and goes away when the connection finishes. Never waits: SO_LINGER with a
    /// time is honoured only by [`Stack::close_linger`].
    pub fn close(&mut self, now: Instant, s: SocketId) -> Result<(), Errno> {
        self.close_inner(now, s, false).map(|_| ())
    }

    /// `close()` for a caller that can wait (a blocking application thread; Linux waits even
    /// on a non-blocking socket): as [`Stack::close`], but with SO_LINGER `l_linger > 0` and
    /// the FIN not yet acknowledged (FIN_WAIT1, CLOSING, LAST_ACK) the socket is not
    /// orphaned and a [`LingerWait`] is returned (`sk_stream_wait_close`).
    pub fn close_linger(&mut self, now: Instant, s: SocketId) -> Result<Option<LingerWait>, Errno> {
        self.close_inner(now, s, true)
    }

    /// Whether a lingering close of `s` must still wait at `now`: the FIN is not acked
    /// (`sk_stream_closing`) and the linger time has not passed. False for unknown sockets.
    pub fn linger_pending(&self, s: SocketId, now: Instant) -> bool {
        self.sock(s)
            .is_ok_and(|sk| sk.linger_until.is_some_and(|d| now < d) && sk.stream_closing())
    }

    /// End a lingering close (acknowledged FIN or linger time over): the socket becomes an
    /// orphan that finishes on its own, as after [`Stack::close`] (`tcp_close` after the
    /// wait: FIN_WAIT2 gets its `tcp_fin_timeout`).
    pub fn linger_finish(&mut self, now: Instant, s: SocketId) {
        self.tick(now);
        let Ok((sk, env)) = self.sk_env(s) else {
            return;
        };
        if sk.linger_until.take().is_none() {
            return;
        }
        sk.orphan = true;
        if sk.state == TcpState::FinWait2 {
            let t = sk.fin_timeout(env);
            sk.arm(env, TimerKind::Keepalive, now + t);
        }
        self.reap(s);
    }

    fn close_inner(
        &mut self,
        now: Instant,
        s: SocketId,
        may_linger: bool,
    ) -> Result<Option<LingerWait>, Errno> {
        self.tick(now);
        let state = self.sock(s)?.state;
        if state == TcpState::Listen {
            let (children, local) = {
                let sk = self.sock_mut(s)?;
                let l = sk.listen.take().unwrap_or_default();
                let mut v: Vec<SocketId> = l.syn_queue.clone();
                v.extend(l.accept_queue.iter().copied());
                (v, sk.local)
            };
            for c in children {
                if let Ok((ck, env)) = self.sk_env(c) {
                    if matches!(ck.state, TcpState::Established | TcpState::CloseWait) {
                        ck.send_active_reset(env, now);
                    }
                    ck.set_closed(env);
                }
                self.free(c);
            }
            self.listeners.remove(&local);
            self.free(s);
            return Ok(None);
        }
        let mut wait = None;
        {
            let (sk, env) = self.sk_env(s)?;
            sk.orphan = true;
            sk.shutdown |= RCV_SHUTDOWN;
            let unread = sk.inq() > 0;
            let linger0 = sk.opts.linger == Some(0);
            match sk.state {
                TcpState::Close | TcpState::SynSent => {
                    sk.set_closed(env);
                }
                _ if unread => {
                    env.mib.inc(Mib::TCPAbortOnClose);
                    sk.send_active_reset(env, now);
                    sk.set_closed(env);
                }
                TcpState::TimeWait => {}
                _ if linger0 => {
                    env.mib.inc(Mib::TCPAbortOnData);
                    sk.send_active_reset(env, now);
                    sk.set_closed(env);
                }
                _ => {
                    if sk.shutdown & SEND_SHUTDOWN == 0 {
                        sk.close_state_and_fin(env, now);
                    }
                    if sk.state == TcpState::FinWait2 {
                        let t = sk.fin_timeout(env);
                        sk.arm(env, TimerKind::Keepalive, now + t);
                    }
                }
            }
            sk.rx_queue.clear();
            sk.rmem_alloc = 0;
            // sk_stream_wait_close: wait for the FIN's ACK before orphaning.
            if let Some(t) = sk.opts.linger.filter(|&t| t > 0 && may_linger) {
                if sk.stream_closing() {
                    sk.orphan = false;
                    let deadline = now + Duration::from_secs(u64::from(t));
                    sk.linger_until = Some(deadline);
                    wait = Some(LingerWait {
                        socket: s,
                        deadline,
                    });
                }
            }
        }
        self.reap(s);
        Ok(wait)
    }

    /// Current TCP state.
    pub fn state(&self, s: SocketId) -> Result<TcpState, Errno> {
        Ok(self.sock(s)?.state)
    }

    /// Local address (`getsockname`).
    pub fn local_addr(&self, s: SocketId) -> Result<SocketAddr, Errno> {
        let sk = self.sock(s)?;
        Ok(dualstack::to_api(sk.family, sk.local))
    }

    /// Peer address (`getpeername`), ENOTCONN if none.
    pub fn peer_addr(&self, s: SocketId) -> Result<SocketAddr, Errno> {
        let sk = self.sock(s)?;
        if sk.remote.port() == 0 || !sk.is_synchronized() && sk.state != TcpState::SynSent {
            return Err(Errno::ENOTCONN);
        }
        Ok(dualstack::to_api(sk.family, sk.remote))
    }

    /// Set O_NONBLOCK (recorded for substrates; engine calls never block).
    pub fn set_nonblocking(&mut self, s: SocketId, on: bool) -> Result<(), Errno> {
        self.sock_mut(s)?.opts.nonblock = on;
        Ok(())
    }

    /// Whether O_NONBLOCK is set.
    pub fn is_nonblocking(&self, s: SocketId) -> Result<bool, Errno> {
        Ok(self.sock(s)?.opts.nonblock)
    }

    /// `setsockopt()`.
    pub fn setsockopt(
        &mut self,
        now: Instant,
        s: SocketId,
        opt: SockOpt,
        val: &OptVal,
    ) -> Result<(), Errno> {
        let (sk, env) = self.sk_env(s)?;
        sk.setsockopt(env, now, opt, val)
    }

    /// `getsockopt()`.
    pub fn getsockopt(&mut self, s: SocketId, opt: SockOpt) -> Result<OptVal, Errno> {
        let (sk, env) = self.sk_env(s)?;
        sk.getsockopt(env, opt)
    }

    /// `ioctl()`.
    pub fn ioctl(&self, s: SocketId, req: Ioctl) -> Result<u32, Errno> {
        let sk = self.sock(s)?;
        if sk.state == TcpState::Listen {
            return Err(Errno::EINVAL);
        }
        Ok(match req {
            Ioctl::SiocInq => sk.inq(),
            Ioctl::SiocOutq => sk.write_seq.wrapping_sub(sk.snd_una),
            Ioctl::SiocOutqNsd => sk.notsent_bytes(),
        })
    }

    /// `poll()` readiness with `tcp_poll`'s conditions. May arm SOCK_NOSPACE (so a later
    /// write-space wake-up is produced), as Linux does.
    pub fn poll(&mut self, s: SocketId) -> Result<u32, Errno> {
        let (sk, env) = self.sk_env(s)?;
        Ok(sk.poll(env))
    }

    /// `TCP_INFO`.
    pub fn tcp_info(&self, now: Instant, s: SocketId) -> Result<TcpInfo, Errno> {
        Ok(self.sock(s)?.tcp_info(&self.env, now))
    }

    /// `SO_MEMINFO` (`sk_get_meminfo` order).
    pub fn meminfo(&self, s: SocketId) -> Result<MemInfo, Errno> {
        Ok(self.sock(s)?.meminfo())
    }

    /// `lock_sock`: the application owns the socket; inbound packets go to its backlog and
    /// timers/TX completions defer their work.
    pub fn lock_sock(&mut self, s: SocketId) {
        if let Ok(sk) = self.sock_mut(s) {
            sk.owned = true;
        }
    }

    /// `release_sock`: process the backlog, run deferred work (`tcp_release_cb`: TSQ write,
    /// write timer, delack timer, deferred ACK), then drop ownership.
    pub fn release_sock(&mut self, now: Instant, s: SocketId) {
        self.tick(now);
        loop {
            let batch = match self.sock_mut(s) {
                Ok(sk) if !sk.backlog.is_empty() => std::mem::take(&mut sk.backlog),
                _ => break,
            };
            for o in batch {
                let seg = o.as_seg();
                if self.conns.get(&(seg.dst, seg.src)) == Some(&s) {
                    self.rcv_conn(now, s, &seg);
                }
            }
        }
        let Ok((sk, env)) = self.sk_env(s) else {
            return;
        };
        sk.backlog_len = 0;
        let flags = sk.tsq_flags;
        sk.tsq_flags &= !(tsq::TSQ_DEFERRED
            | tsq::WRITE_TIMER_DEFERRED
            | tsq::DELACK_TIMER_DEFERRED
            | tsq::ACK_DEFERRED);
        let mut drop = false;
        if flags & tsq::TSQ_DEFERRED != 0 {
            sk.tsq_write(env, now);
        }
        if flags & tsq::WRITE_TIMER_DEFERRED != 0 {
            drop = sk.write_timer(env, now);
        }
        if !drop && flags & tsq::DELACK_TIMER_DEFERRED != 0 {
            sk.delack_timer(env, now);
        }
        if !drop && flags & tsq::ACK_DEFERRED != 0 && sk.ack.pending & ackf::SCHED != 0 {
            sk.send_ack(env, now);
        }
        sk.owned = false;
        if drop {
            self.free(s);
        } else {
            self.reap(s);
        }
    }

    /// (snd_una, snd_nxt, rcv_nxt) of a socket, for tests.
    #[cfg(test)]
    pub(crate) fn seqs(&self, s: SocketId) -> (u32, u32, u32) {
        let sk = self.sock(s).expect("socket");
        (sk.snd_una, sk.snd_nxt, sk.rcv_nxt)
    }

    /// `/proc/net/sockstat`-style totals: sockets in use, orphans, TIME_WAIT, and TCP memory
    /// in pages (`tcp_memory_allocated`: the pages the sockets hold, see `mem.rs`).
    pub fn sockstat(&self) -> SockStat {
        let mut st = SockStat::default();
        for sk in self.socks.iter().flatten() {
            st.alloc += 1;
            match sk.state {
                TcpState::TimeWait => st.tw += 1,
                _ => {
                    if sk.orphan {
                        st.orphan += 1;
                    } else {
                        st.inuse += 1;
                    }
                }
            }
        }
        st.mem_pages = self.env.memory_allocated.max(0) as u64;
        st.pressure = self.env.memory_pressure;
        st
    }

    /// The TCP row of `/proc/net/protocols` (`sockets`, `memory`, `press`).
    pub fn proto_mem(&self) -> ProtoMem {
        ProtoMem {
            sockets: self.env.sockets_allocated,
            memory_pages: self.env.memory_allocated.max(0) as u64,
            pressure: self.env.memory_pressure,
            limits: self.env.sysctl.triple(Sysctl::tcp_mem),
        }
    }

    /// Live sockets (like the rows of `/proc/net/tcp`): id, local and remote address, state,
    /// bytes not yet acknowledged (tx_queue) and bytes readable (rx_queue).
    pub fn sockets(&self) -> Vec<SocketRow> {
        self.socks
            .iter()
            .flatten()
            .map(|sk| SocketRow {
                id: sk.id,
                local: dualstack::to_api(sk.family, sk.local),
                remote: dualstack::to_api(sk.family, sk.remote),
                state: sk.state,
                tx_queue: sk.write_seq.wrapping_sub(sk.snd_una),
                rx_queue: sk.inq(),
            })
            .collect()
    }

    /// Whether `s` is currently owned by the application.
    pub fn is_owned(&self, s: SocketId) -> bool {
        self.sock(s).map(|s| s.owned).unwrap_or(false)
    }
}

impl Sock {
    /// `tcp_close_state` + `tcp_send_fin`.
    pub(crate) fn close_state_and_fin(&mut self, env: &mut Env, now: Instant) {
        let next = match self.state {
            TcpState::Established | TcpState::SynRecv => TcpState::FinWait1,
            TcpState::CloseWait => TcpState::LastAck,
            TcpState::SynSent => {
                self.set_closed(env);
                return;
            }
            _ => return,
        };
        // tcp_set_state: leaving ESTABLISHED/CLOSE_WAIT decrements TcpCurrEstab.
        if self.state == TcpState::Established || self.state == TcpState::CloseWait {
            env.mib.sub(Mib::CurrEstab, 1);
        }
        self.state = next;
        self.shutdown |= SEND_SHUTDOWN;
        if self.state == TcpState::FinWait1
            && self.write_queue.is_empty()
            && self.snd_una == self.snd_nxt
        {
            // nothing in flight
        }
        self.send_fin(env, now);
        env.wake(self.id, POLLOUT | POLLWRNORM);
    }

    /// `tcp_sendmsg_locked` (non-blocking).
    pub(crate) fn sendmsg(
        &mut self,
        env: &mut Env,
        now: Instant,
        data: &[u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        if self.shutdown & SEND_SHUTDOWN != 0 {
            return Err(Errno::EPIPE);
        }
        match self.state {
            TcpState::Established | TcpState::CloseWait => {}
            TcpState::SynSent | TcpState::SynRecv => return Err(Errno::EAGAIN),
            TcpState::Close if self.remote.port() != 0 => return Err(Errno::EPIPE),
            _ => return Err(Errno::ENOTCONN),
        }
        if data.is_empty() {
            return Ok(0);
        }
        self.rate_check_app_limited();
        // tcp_send_mss → tcp_current_mss: pick up a path MTU change.
        self.refresh_mss(env);
        let mss_now = self.current_mss();
        let size_goal = if env.gso {
            self.size_goal(mss_now)
        } else {
            mss_now
        };
        let mut copied = 0usize;
        let mut waited = false;
        while copied < data.len() {
            let can_append = self
                .write_queue
                .back()
                .map(|t| !t.eor && !t.flags.intersects(TcpFlags::FIN) && t.len() < size_goal)
                .unwrap_or(false);
            if !can_append {
                if !self.sk_stream_memory_free(env, 0) {
                    waited = true;
                    break;
                }
                // tcp_stream_alloc_skb: charged by force when both queues are empty.
                let first = self.write_queue.is_empty() && self.rtx_queue.is_empty();
                if !first && !self.wmem_schedule(env, SKB_TX_OVERHEAD) {
                    self.mem_wait = self.wmem_queued.max(1);
                    waited = true;
                    break;
                }
                self.slow_start_after_idle_check(env, now);
                let mut skb = Skb::new(self.write_seq, TcpFlags::empty());
                skb.data = SkbData::Open(self.carve_skb_buffer(size_goal as usize));
                self.wmem_queued += skb.truesize;
                self.write_queue.push_back(skb);
            }
            let tail_len = self.write_queue.back().map_or(0, |t| t.len());
            let room = (size_goal - tail_len.min(size_goal)) as usize;
            // Bytes are charged per page fragment (at most 32 KiB, `sk_page_frag_refill`).
            let n = room.min(data.len() - copied).min(crate::mem::PAGE_FRAG);
            if !self.wmem_schedule(env, n as u32) {
                // wait_for_space; an skb left empty goes (tcp_remove_empty_skb).
                if tail_len == 0 {
                    if let Some(t) = self.write_queue.pop_back() {
                        self.wmem_queued = self.wmem_queued.saturating_sub(t.truesize);
                    }
                }
                if !(self.write_queue.is_empty() && self.rtx_queue.is_empty()) {
                    self.mem_wait = self.wmem_queued.max(1);
                }
                waited = true;
                break;
            }
            let tail = self.write_queue.back_mut().expect("tail exists");
            if copied == 0 {
                tail.flags &= !TcpFlags::PSH;
            }
            tail.data.extend_from_slice(&data[copied..copied + n]);
            tail.truesize += n as u32;
            tail.end_seq = tail.end_seq.wrapping_add(n as u32);
            self.wmem_queued += n as u32;
            self.write_seq = self.write_seq.wrapping_add(n as u32);
            copied += n;
            if copied == data.len() {
                if flags & MSG_EOR != 0 {
                    tail.eor = true;
                }
                break;
            }
            if tail.len() < size_goal {
                continue;
            }
            if self.forced_push() {
                self.mark_push();
                self.push_pending_frames(env, now, NAGLE_PUSH);
            } else if self.write_queue.len() == 1 {
                // tcp_push_one
                self.write_xmit(env, now, NAGLE_PUSH, true);
            }
        }
        if waited {
            self.nospace = true;
            if copied > 0 {
                self.tcp_push(env, now, flags & !MSG_MORE, mss_now, NAGLE_PUSH, size_goal);
                return Ok(copied);
            }
            if self.write_queue.is_empty() && self.rtx_queue.is_empty() {
                env.wake(self.id, POLLOUT | POLLWRNORM | POLLWRBAND);
            }
            return Err(Errno::EAGAIN);
        }
        let ng = self.nonagle();
        self.tcp_push(env, now, flags, mss_now, ng, size_goal);
        Ok(copied)
    }

    /// The buffer of a new write-queue skb of up to `want` bytes.
    ///
    /// Linux fills skbs from the socket's page fragment (`sk_page_frag`), so neighbouring
    /// skbs sit in the same pages and `tcp_grow_skb` moves fragments, never bytes. The model:
    /// a new skb is carved from the spare room behind the previous tail's bytes, and when that
    /// room is too small a chunk for [`SKB_CARVE_CHUNK`] skbs is allocated. Neighbours are then
    /// contiguous and [`Sock::grow_head`]'s `unsplit` joins them in O(1). Accounting is not
    /// affected: an skb charges its payload and overhead (`truesize`), never the chunk.
    fn carve_skb_buffer(&mut self, want: usize) -> BytesMut {
        let prev = match self.write_queue.back_mut() {
            Some(t) => Some(t),
            None => self.rtx_queue.back_mut(),
        };
        if let Some(spare) = prev.and_then(|p| p.data.spare(want)) {
            return spare;
        }
        BytesMut::with_capacity(want * SKB_CARVE_CHUNK)
    }

    /// `tcp_slow_start_after_idle_check` → `tcp_cwnd_restart` (RFC 5681 §4.1): after an idle
    /// period longer than the RTO, cwnd is halved per RTO idle, down to the initial window.
    pub(crate) fn slow_start_after_idle_check(&mut self, env: &Env, now: Instant) {
        if !env.sysctl.on(Sysctl::tcp_slow_start_after_idle) || self.packets_out > 0 {
            return;
        }
        if self.lsndtime == Instant::ZERO
            || self.state != TcpState::Established && self.state != TcpState::CloseWait
        {
            return;
        }
        let mut delta = now - self.lsndtime;
        if delta <= self.rto {
            return;
        }
        let initcwnd = if self.route.initcwnd != 0 {
            self.route.initcwnd
        } else {
            TCP_INIT_CWND
        };
        self.sync_cc_state(now);
        self.cc.cwnd_event(
            &mut self.cc_st,
            shallow_cc::CaEvent::CwndRestart,
            now.as_micros(),
        );
        // tcp_current_ssthresh
        let cur = if matches!(
            self.ca_state,
            shallow_cc::CaState::Cwr | shallow_cc::CaState::Recovery
        ) {
            self.cc_st.snd_ssthresh
        } else {
            self.cc_st
                .snd_ssthresh
                .max((self.snd_cwnd() >> 1) + (self.snd_cwnd() >> 2))
        };
        self.cc_st.snd_ssthresh = cur;
        let mut cwnd = self.snd_cwnd();
        let restart = initcwnd.min(cwnd);
        while delta > self.rto && cwnd > restart {
            delta -= self.rto;
            cwnd >>= 1;
        }
        self.cc_st.snd_cwnd = cwnd.max(restart);
        self.snd_cwnd_stamp = now;
    }

    /// `forced_push`: more than half the max window written since the last PSH.
    fn forced_push(&self) -> bool {
        after(
            self.write_seq,
            self.pushed_seq.wrapping_add(self.max_window / 2),
        )
    }

    fn mark_push(&mut self) {
        if let Some(t) = self.write_queue.back_mut() {
            t.flags |= TcpFlags::PSH;
        }
        self.pushed_seq = self.write_seq;
    }

    /// `tcp_push` with autocorking (spec §5.2).
    fn tcp_push(
        &mut self,
        env: &mut Env,
        now: Instant,
        flags: u32,
        _mss: u32,
        nonagle: u8,
        size_goal: u32,
    ) {
        let Some(tail) = self.write_queue.back() else {
            return;
        };
        let _ = tail;
        if flags & MSG_MORE == 0 || self.forced_push() {
            self.mark_push();
        }
        let (tlen, ttrue, teor) = {
            let t = self.write_queue.back().expect("tail");
            (t.len(), t.truesize, t.eor)
        };
        let autocork = tlen < size_goal
            && env.sysctl.on(Sysctl::tcp_autocorking)
            && !self.rtx_queue.is_empty()
            && self.wmem_alloc_biased() > ttrue
            && !teor;
        if autocork {
            if self.tsq_flags & tsq::THROTTLED == 0 {
                env.mib.inc(Mib::TCPAutoCorking);
                self.tsq_flags |= tsq::THROTTLED;
            }
            if self.wmem_alloc_biased() > ttrue {
                return;
            }
        }
        let ng = if flags & MSG_MORE != 0 {
            NAGLE_CORK
        } else {
            nonagle
        };
        self.push_pending_frames(env, now, ng);
    }

    /// `tcp_tsq_write` (spec §2.6): after a TX completion, retransmit lost data then push.
    pub(crate) fn tsq_write(&mut self, env: &mut Env, now: Instant) {
        if matches!(
            self.state,
            TcpState::Established
                | TcpState::FinWait1
                | TcpState::Closing
                | TcpState::CloseWait
                | TcpState::LastAck
        ) {
            if self.lost_out > self.retrans_out && self.snd_cwnd() > self.packets_in_flight() {
                self.xmit_retransmit_queue(env, now);
            }
            let ng = self.nonagle();
            self.write_xmit(env, now, ng, false);
        }
    }

    /// Bookkeeping after a SYN or SYN-ACK retransmission (`tcp_retransmit_timer` for the
    /// handshake states): counters, exponential backoff of the RTO up to `tcp_rto_max_ms`, and
    /// the retransmit timer re-armed.
    fn syn_retransmitted(&mut self, env: &mut Env, now: Instant) {
        self.retransmits += 1;
        self.total_retrans += 1;
        env.mib.inc(Mib::TCPSynRetrans);
        env.mib.inc(Mib::RetransSegs);
        self.rto = (self.rto * 2).min(self.rto_max(env));
        let at = now + self.rto;
        self.arm(env, TimerKind::Retrans, at);
    }

    /// Retransmit-timer expiry. Returns true if the socket (a SYN_RECV child) must be freed.
    pub(crate) fn write_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::SynSent => {
                if self.write_timeout(env, now) {
                    return false;
                }
                self.send_syn(env, now);
                self.backoff += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::SynRecv => {
                let max = env.sysint(Sysctl::tcp_synack_retries) as u32;
                if self.parent.is_some() && self.synack_retries_done >= max {
                    return true;
                }
                if self.parent.is_none() && self.write_timeout(env, now) {
                    return false;
                }
                self.send_synack(env, now);
                self.synack_retries_done += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::Close | TcpState::Listen | TcpState::TimeWait => false,
            _ => {
                match self.rtx_event {
                    RtxEvent::Rto => {
                        self.retransmit_timer(env, now);
                    }
                    RtxEvent::LossProbe => self.send_loss_probe(env, now),
                    RtxEvent::ReoTimeout => {
                        self.rack_reo_timeout(env, now);
                        if self.timers[TimerKind::Retrans as usize].is_none() {
                            self.schedule_loss_probe_or_rto(env, now, false);
                        }
                    }
                    RtxEvent::Probe0 => self.probe_timer(env, now),
                }
                false
            }
        }
    }

    /// Zero-window / persist probe timer (`tcp_probe_timer`): with TCP_USER_TIMEOUT the run
    /// of probes ends after that long (counted from the first probe, `icsk_probes_tstamp`),
    /// otherwise after `tcp_retries2` unanswered probes.
    fn probe_timer(&mut self, env: &mut Env, now: Instant) {
        if self.packets_out > 0 || self.write_queue.is_empty() {
            self.probes_out = 0;
            self.probes_tstamp = None;
            return;
        }
        let user_timeout = Duration::from_millis(u64::from(self.opts.user_timeout_ms));
        let timed_out = match self.probes_tstamp {
            None => {
                self.probes_tstamp = Some(now);
                false
            }
            Some(t0) => self.opts.user_timeout_ms != 0 && now - t0 >= user_timeout,
        };
        let max_probes = env.sysint(Sysctl::tcp_retries2) as u32;
        if timed_out || self.probes_out >= max_probes {
            // tcp_write_err
            self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
            env.mib.inc(Mib::TCPAbortOnTimeout);
            self.set_closed(env);
            return;
        }
        // tcp_send_probe0
        let local_drop = self.send_probe0(env, now);
        if self.packets_out > 0 || self.write_queue.is_empty() {
            self.probes_out = 0;
            self.backoff = 0;
            self.probes_tstamp = None;
            return;
        }
        self.probes_out += 1;
        let mut when = if local_drop {
            // Not sent for local congestion: retry at TCP_RESOURCE_PROBE_INTERVAL, no backoff.
            Duration::from_millis(500)
        } else {
            if self.backoff < max_probes {
                self.backoff += 1;
            }
            self.probe0_when()
        };
        // tcp_clamp_probe0_to_user_timeout
        if let (true, Some(t0)) = (self.opts.user_timeout_ms != 0, self.probes_tstamp) {
            let remaining = user_timeout.saturating_sub(now - t0).max(TCP_TIMEOUT_MIN);
            when = when.min(remaining);
        }
        self.rtx_event = RtxEvent::Probe0;
        self.arm(env, TimerKind::Retrans, now + when);
    }

    /// Delayed-ACK timer (`tcp_delack_timer_handler`).
    pub(crate) fn delack_timer(&mut self, env: &mut Env, now: Instant) {
        // tcp_sack_compress_send_ack
        if self.compressed_ack > 0 {
            self.compressed_ack -= 1;
            self.send_ack(env, now);
            return;
        }
        if self.ack.pending & ackf::TIMER == 0 {
            return;
        }
        if self.ack.pending & ackf::SCHED != 0 {
            if self.ack.pingpong == 0 {
                self.ack.ato = (self.ack.ato * 2).min(self.rto);
            } else {
                self.ack.pingpong = 0;
                self.ack.ato = TCP_ATO_MIN;
            }
            self.send_ack(env, now);
            env.mib.inc(Mib::DelayedACKs);
        }
        self.ack.pending &= !ackf::TIMER;
    }

    /// Keepalive / FIN_WAIT2 / TIME_WAIT timer. Returns true if the socket must be freed.
    pub(crate) fn keepalive_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::TimeWait => {
                self.state = TcpState::Close;
                self.orphan
            }
            TcpState::FinWait2 if self.orphan => {
                self.set_closed(env);
                true
            }
            TcpState::Established | TcpState::CloseWait if self.opts.keepalive => {
                let idle = Duration::from_secs(u64::from(
                    self.opts
                        .keepidle
                        .unwrap_or(env.sysint(Sysctl::tcp_keepalive_time) as u32),
                ));
                let intvl = Duration::from_secs(u64::from(
                    self.opts
                        .keepintvl
                        .unwrap_or(env.sysint(Sysctl::tcp_keepalive_intvl) as u32),
                ));
                let cnt = self
                    .opts
                    .keepcnt
                    .unwrap_or(env.sysint(Sysctl::tcp_keepalive_probes) as u32);
                if self.packets_out > 0 || !self.write_queue.is_empty() {
                    self.arm(env, TimerKind::Keepalive, now + idle);
                    return false;
                }
                let last = self.rcv_tstamp.max(self.lrcvtime);
                let elapsed = now - last;
                if elapsed >= idle {
                    if self.keepalive_probes_out >= cnt {
                        self.err = Some(Errno::ETIMEDOUT);
                        env.mib.inc(Mib::TCPAbortOnTimeout);
                        self.send_active_reset(env, now);
                        self.set_closed(env);
                        return false;
                    }
                    self.send_probe_keepalive(env, now);
                    self.keepalive_probes_out += 1;
                    self.arm(env, TimerKind::Keepalive, now + intvl);
                } else {
                    self.keepalive_probes_out = 0;
                    self.arm(env, TimerKind::Keepalive, last + idle);
                }
                false
            }
            _ => false,
        }
    }

    fn send_probe_keepalive(&mut self, env: &mut Env, now: Instant) {
        let mut opts: Vec<OutOpt> = Vec::with_capacity(4);
        self.established_opts(now, &mut opts);
        let win = self.select_window(env);
        let seg = self.seg(
            env,
            self.snd_una.wrapping_sub(1),
            TcpFlags::ACK,
            win,
            &opts,
            &[],
        );
        env.emit(&seg, None, None, None);
        env.mib.inc(Mib::TCPKeepAlive);
    }
}

#[cfg(test)]
mod table_hasher_tests {
    use super::*;
    use core::hash::BuildHasher;

    /// The lookup tables' hash depends on the seed alone: equal for two stacks of one seed
    /// (built on different threads, where std's `RandomState` would differ), different for
    /// another seed.
    #[test]
    fn table_hash_is_keyed_by_the_seed() {
        let key: (SocketAddr, SocketAddr) = (
            "10.0.0.1:80".parse().unwrap(),
            "10.0.0.2:40000".parse().unwrap(),
        );
        let hash = move |seed: u64| TableHasher::new(Env::new(seed).key).hash_one(key);
        let here = hash(7);
        let there = std::thread::spawn(move || hash(7)).join().unwrap();
        assert_eq!(here, there);
        assert_ne!(here, hash(8));
    }
}
