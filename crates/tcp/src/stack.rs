//! [`Stack`]: one host's TCP — addresses, routes, the socket table, demux, listeners, timers,
//! and the socket API with Linux semantics and errnos.
//!
//! # Driving a stack (what a substrate does)
//!
//! ```text
//! loop {
//!     for each inbound IP packet:      stack.handle_packet(now, RxPacket::linear(&pkt).gso(gro));
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

mod api;
pub use api::BusyPoll;
/// TCP Fast Open at the endpoint.
mod fastopen;
pub(crate) use api::SockLock;
mod forward;
pub use forward::{ForwardCompletion, ForwardFilter, ForwardVerdict, HeldSyn};
mod listen;
mod poll;
mod rx;

use crate::device::{DeviceCaps, RxBytes, RxChecksum, RxPacket};
use crate::dualstack::{self, BindScope};
use crate::env::Env;
use crate::errno::{Errno, SocketId};
use crate::info::{MemInfo, TcpInfo};
use crate::input::RcvOutcome;
use crate::mib::{Counters, Mib};
use crate::packet::{self, SegIn, SegOut};
use crate::seq::*;
use crate::socket::pollbits::*;
use crate::socket::*;
use crate::sockopt::{OptVal, SockOpt};
use crate::sysctl::{Sysctl, SysctlError};
use crate::time::Instant;
use crate::timer::{RtxEvent, TimerKind};
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
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
    /// A listener's (accept queue length, backlog): what `ss` shows as its Recv-Q and Send-Q.
    pub listen_queue: Option<(u32, u32)>,
    /// The congestion control's name (`TCP_CONGESTION`).
    pub cc: &'static str,
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
    /// SIOCATMARK: 1 when the read position is at the urgent mark (urg.rs).
    SiocAtmark,
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
    socks: Vec<Option<Box<Connection>>>,
    /// Free slots, lowest first (file-descriptor-like reuse).
    free_slots: std::collections::BinaryHeap<core::cmp::Reverse<u32>>,
    next_gen: u32,
    conns: HashMap<(SocketAddr, SocketAddr), SocketId, TableHasher>,
    listeners: HashMap<SocketAddr, SocketId, TableHasher>,
    ports: HashMap<u16, Vec<SocketId>, TableHasher>,
    addrs: Vec<IpAddr>,
    routes: Vec<Route>,
    /// Which 4-tuples an ephemeral port of `connect` may give ([`Stack::set_connect_port_filter`]).
    port_filter: Option<PortFilter>,
    /// The listeners for connections to any destination, and their rule (`forward.rs`).
    forward: forward::Forward,
}

/// A rule on the 4-tuples `connect` may pick an ephemeral port for: called with (local,
/// remote), true when the port may be used. See [`Stack::set_connect_port_filter`].
pub type PortFilter = std::sync::Arc<dyn Fn(SocketAddr, SocketAddr) -> bool + Send + Sync>;

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

/// The hasher of the stack's lookup tables (connections by 4-tuple, listeners, ports),
/// looked up on every packet: a keyed multiply-and-fold hash (each word written is mixed
/// into the state by a 64×64→128-bit multiply by the secret whose halves are xored), in the
/// class of Linux's `inet_ehashfn` (jhash with a boot-time secret) rather than a
/// cryptographic one, so peers that do not know the secret cannot aim packets at one bucket,
/// keyed from the stack's seed instead of from the operating system, so the engine draws no
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
        TableHasher(
            derive(b"shallow tables k0"),
            derive(b"shallow tables k1") | 1,
        )
    }
}

impl core::hash::BuildHasher for TableHasher {
    type Hasher = TableHash;
    fn build_hasher(&self) -> TableHash {
        TableHash {
            acc: self.0,
            key: self.1,
        }
    }
}

/// One [`TableHasher`] hash in progress.
struct TableHash {
    acc: u64,
    key: u64,
}

impl TableHash {
    /// The 128-bit product of `a` and `b`, its halves xored.
    fn fold_mul(a: u64, b: u64) -> u64 {
        let p = u128::from(a) * u128::from(b);
        (p as u64) ^ ((p >> 64) as u64)
    }
}

impl core::hash::Hasher for TableHash {
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes([
                w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7],
            ]));
        }
        let tail = words.remainder();
        if !tail.is_empty() {
            let mut last = [0u8; 8];
            last[..tail.len()].copy_from_slice(tail);
            self.write_u64(u64::from_le_bytes(last));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.acc = TableHash::fold_mul(self.acc ^ v, self.key);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    fn finish(&self) -> u64 {
        TableHash::fold_mul(self.acc, self.key.rotate_left(32))
    }
}

/// **Configuration and getters**: the device, sysctls, addresses and routes; counters and
/// `/proc`-style views. The other classes of methods are in `stack/`: inputs
/// (`handle_packet`), outputs (`poll_*`, `tx_complete`, `handle_timeout`), socket calls.
impl Stack {
    /// A stack with no addresses over a default device ([`DeviceCaps::default`]: TSO, no
    /// scatter-gather, no offloads); `seed` keys ISNs, timestamps offsets and port choice.
    pub fn new(seed: u64) -> Stack {
        Stack::with_device(seed, DeviceCaps::default())
    }

    /// A stack with no addresses over a device that can do what `caps` says.
    pub fn with_device(seed: u64, caps: DeviceCaps) -> Stack {
        let mut env = Env::new(seed);
        env.device.caps = caps;
        let tables = TableHasher::new(env.keys.key());
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
            port_filter: None,
            forward: forward::Forward::default(),
        }
    }

    /// A new stack with this one's configuration and none of its state, keyed by a seed
    /// derived one-way from this stack's secret and `n` (so forks `0, 1, …` of one stack are
    /// distinct, and the same for two stacks of one seed): the
    /// sysctls (the Fast Open keys in force with them), congestion-control parameters,
    /// RTT-log bound, device description, addresses and routes are copied; sockets, timers, counters, memory accounting, the TX gate and the
    /// connect port filter are not. For a substrate that runs one host as several engines
    /// (one per device queue, each owning the flows its queue's hash gives it), as Linux runs
    /// one host's flows on several CPUs.
    pub fn fork(&self, n: u64) -> Stack {
        use core::hash::Hasher;
        let key = self.env.keys.key();
        let mut h = siphasher::sip::SipHasher13::new_with_keys(key.0, key.1);
        h.write(b"shallow fork");
        h.write_u64(n);
        let mut s = Stack::with_device(h.finish(), self.env.device.caps);
        s.env.config.sysctl = self.env.config.sysctl.clone();
        s.env.config.cc_params = self.env.config.cc_params.clone();
        s.env.config.rtt_log_cap = self.env.config.rtt_log_cap;
        // The Fast Open keys in force, as the sysctl shows them (a written key is the
        // engine's own state beside the sysctl text).
        s.env.tfo.keys = self.env.tfo.keys;
        s.addrs = self.addrs.clone();
        s.routes = self.routes.clone();
        s
    }

    /// Restricts the ephemeral ports `connect` picks (an unbound socket's port, chosen from
    /// `net.ipv4.ip_local_port_range` as Linux's `__inet_hash_connect` does: a keyed random
    /// start, then every port of the range in turn) to those whose 4-tuple (local, remote)
    /// `filter` accepts; a port it refuses counts as taken. `None` (the default) accepts
    /// every port, and then the choice is exactly Linux's. Linux has no such rule; a substrate
    /// that splits a host's flows between engines by 4-tuple hash gives each engine the ports
    /// whose tuples it owns, so that two engines never pick the same connected tuple.
    pub fn set_connect_port_filter(&mut self, filter: Option<PortFilter>) {
        self.port_filter = filter;
    }

    /// Set a sysctl by Linux name.
    pub fn sysctl_set(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        self.env.config.sysctl.set(name, value)?;
        if name.ends_with("tcp_fastopen_key") {
            // Written, the keys are in force (proc_tcp_fastopen_key), zero keys included.
            let text = self.env.config.sysctl.str(Sysctl::tcp_fastopen_key);
            self.env.tfo.keys = crate::fastopen::Keys::parse_sysctl(text);
        }
        Ok(())
    }

    /// Forget the client's Fast Open cookies (`ip tcp_metrics flush all`).
    pub fn tcp_metrics_flush(&mut self) {
        self.env.tfo.cache.flush();
    }

    /// Read a sysctl by Linux name.
    pub fn sysctl_get(&self, name: &str) -> Result<String, SysctlError> {
        self.env.config.sysctl.get(name)
    }

    /// Congestion-control module parameters (`/sys/module/tcp_cubic/parameters/...`).
    pub fn cc_params_mut(&mut self) -> &mut shallow_cc::CcParams {
        &mut self.env.config.cc_params
    }

    /// Record every RTT sample the estimator takes (`tcp_rtt_estimator`'s input: one per ACK
    /// that gives one, as `tcp_ack_update_rtt` picks it, plus the SYN / SYN-ACK samples), for
    /// substrates that report RTT percentiles. Each socket keeps at most `per_socket` samples
    /// until [`Stack::take_rtt_samples`] takes them; further ones are counted and dropped, so
    /// memory stays bounded. 0 (the default) stops recording.
    pub fn set_rtt_log(&mut self, per_socket: usize) {
        self.env.config.rtt_log_cap = per_socket;
    }

    /// Move socket `s`'s recorded RTT samples (µs, oldest first; see [`Stack::set_rtt_log`])
    /// to the end of `out`, and return how many were dropped since the last call because its
    /// log was full.
    pub fn take_rtt_samples(&mut self, s: SocketId, out: &mut Vec<u32>) -> Result<u64, Errno> {
        let (sk, _) = self.sk_env(s)?;
        Ok(sk.rtt.take_log(out))
    }

    /// Install the device side's admission rule (`crate::gate`; `None`, the default, accepts
    /// every packet). The gate is asked once per packet, synchronously, before the packet
    /// counts as sent; a refusal is Linux's `NET_XMIT_DROP` from `dev_queue_xmit`: the flow
    /// enters CWR, refused new data stays unsent in the write queue (snd_nxt does not move)
    /// and is sent later, a refused retransmission counts `TCPRetransFail` and is not a
    /// retransmission in flight, a refused persist probe retries after 500 ms — a local drop
    /// is never taken for a loss in the network.
    pub fn set_tx_gate(&mut self, gate: Option<Box<dyn crate::TxGate>>) {
        self.env.device.set_gate(gate);
    }

    /// The device's description (what [`Stack::set_device`] last gave).
    pub fn device(&self) -> DeviceCaps {
        self.env.device.caps
    }

    /// Describe the device anew, as `ethtool -K` or `tc qdisc replace` changes it at run
    /// time; packets already handed over keep what they were built with.
    pub fn set_device(&mut self, caps: DeviceCaps) {
        self.env.device.caps = caps;
    }

    /// A tick of the Linux jiffy grid (HZ=250) whose timing the engine reproduces, when the
    /// substrate knows where the grid lies: then each timer on the kernel's timer wheel
    /// (retransmission, loss probe, RACK, delayed ACK, keepalive) armed less than 63 jiffies
    /// ahead fires on the tick the kernel's would, instead of at the mean over the tick
    /// phase (`None`, the default). `drill` sets it because packetdrill starts a script
    /// 250 µs after a jiffy edge (`schedule_start_time_usecs`), so script time −250 µs is
    /// a tick.
    pub fn set_jiffy_phase(&mut self, tick: Option<Instant>) {
        self.env.timers.jiffy_phase = tick;
    }

    /// The interface index of the device below (`dev->ifindex`; 0, the default, when the
    /// substrate has none to give): what `IP_PKTINFO`/`IPV6_PKTINFO` report with a transmit
    /// timestamp ([`Stack::recv_errqueue_msg`]).
    pub fn set_ifindex(&mut self, ifindex: u32) {
        self.env.device.ifindex = ifindex;
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

    pub(crate) fn sock(&self, s: SocketId) -> Result<&Connection, Errno> {
        self.socks
            .get(s.0 as usize)
            .and_then(|x| x.as_deref())
            .ok_or(Errno::EBADF)
    }

    fn sock_mut(&mut self, s: SocketId) -> Result<&mut Connection, Errno> {
        self.socks
            .get_mut(s.0 as usize)
            .and_then(|x| x.as_deref_mut())
            .ok_or(Errno::EBADF)
    }

    /// Split borrow: socket and environment.
    fn sk_env(&mut self, s: SocketId) -> Result<(&mut Connection, &mut Env), Errno> {
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
        self.socks[idx] = Some(Box::new(Connection::new(id, gen, family, &self.env)));
        self.env.mem.sockets += 1;
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
        sk.rx_stamp_sync(&mut self.env, true);
        sk.disarm_all(&mut self.env);
        sk.mem_release(&mut self.env);
        self.env.mem.sockets = self.env.mem.sockets.saturating_sub(1);
        if sk.hashed && self.conns.get(&(sk.local, sk.remote)) == Some(&s) {
            self.conns.remove(&(sk.local, sk.remote));
        }
        if self.listeners.get(&sk.local) == Some(&s) {
            self.listeners.remove(&sk.local);
        }
        if self.forward.holds(s) {
            self.forward_forget(s);
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
                        l.requests.retain(|x| *x != s);
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

    /// One socket call (the prologue and epilogue every call on a socket shares, in one
    /// place): note the time, run `op` on socket `s` and the stack's environment, then
    /// settle the socket's memory charges of this call and, when it reached CLOSE, free it
    /// (an orphan or an unaccepted child) or unhash it ([`Stack::reap`]). `EBADF` for an
    /// unknown socket.
    fn call<R>(
        &mut self,
        now: Instant,
        s: SocketId,
        op: impl FnOnce(&mut Connection, &mut Env) -> Result<R, Errno>,
    ) -> Result<R, Errno> {
        self.tick(now);
        let (sk, env) = self.sk_env(s)?;
        let r = op(sk, env);
        self.reap(s);
        r
    }

    /// After a state change: free orphans that reached CLOSE; unhash closed sockets.
    fn reap(&mut self, s: SocketId) {
        self.mem_sync(s);
        let Ok(sk) = self.sock(s) else { return };
        if sk.state == TcpState::Close && sk.fastopen.listener.is_some() {
            // A Fast Open child died before its handshake completed (`tcp_done` →
            // `reqsk_fastopen_remove`): it still holds its place in the listener's queue a while.
            let now = self.env.clock;
            self.fastopen_release(now, s, true);
        }
        let Ok(sk) = self.sock(s) else { return };
        if sk.state == TcpState::Close {
            // A child in the accept queue stays there when it dies (a reset before accept():
            // accept() returns it, with its data and its error); one still in the SYN queue
            // goes, as a request socket would.
            let queued = sk.parent.is_some_and(|(p, gen)| {
                self.sock(p).is_ok_and(|l| {
                    l.gen == gen
                        && l.listen
                            .as_ref()
                            .is_some_and(|q| q.accept_queue.contains(&s))
                })
            });
            let Ok(sk) = self.sock(s) else { return };
            if sk.orphan || (sk.parent.is_some() && !queued) {
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

    /// (snd_una, snd_nxt, rcv_nxt) of a socket, for tests.
    #[cfg(test)]
    pub(crate) fn seqs(&self, s: SocketId) -> (u32, u32, u32) {
        let sk = self.sock(s).expect("socket");
        (sk.snd.una, sk.snd.nxt, sk.rcv.nxt)
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
        st.mem_pages = self.env.mem.allocated.max(0) as u64;
        st.pressure = self.env.mem.pressure;
        st
    }

    /// The TCP row of `/proc/net/protocols` (`sockets`, `memory`, `press`).
    pub fn proto_mem(&self) -> ProtoMem {
        ProtoMem {
            sockets: self.env.mem.sockets,
            memory_pages: self.env.mem.allocated.max(0) as u64,
            pressure: self.env.mem.pressure,
            limits: self.env.config.sysctl.triple(Sysctl::tcp_mem),
        }
    }

    /// Live sockets (like the rows of `/proc/net/tcp`): id, local and remote address, state,
    /// bytes not yet acknowledged (tx_queue), bytes readable (rx_queue), a listener's queues,
    /// the congestion control. With [`Stack::meminfo`] and [`Stack::tcp_info`] it is what
    /// `ss -tmi` shows (`shallow nc --ss` prints it so).
    pub fn sockets(&self) -> Vec<SocketRow> {
        self.socks
            .iter()
            .flatten()
            .map(|sk| SocketRow {
                id: sk.id,
                local: dualstack::to_api(sk.family, sk.local),
                remote: dualstack::to_api(sk.family, sk.remote),
                state: sk.state,
                tx_queue: sk.snd.write_seq.wrapping_sub(sk.snd.una),
                rx_queue: sk.inq(),
                listen_queue: sk
                    .listen
                    .as_ref()
                    .map(|l| (l.accept_queue.len() as u32, l.backlog)),
                cc: sk.cc.name(),
            })
            .collect()
    }

    /// Whether `s` is currently owned by the application.
    pub fn is_owned(&self, s: SocketId) -> bool {
        self.sock(s).map(|s| s.lock.owned).unwrap_or(false)
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
        let hash = move |seed: u64| TableHasher::new(Env::new(seed).keys.key()).hash_one(key);
        let here = hash(7);
        let there = std::thread::spawn(move || hash(7)).join().unwrap();
        assert_eq!(here, there);
        assert_ne!(here, hash(8));
    }
}

#[cfg(test)]
mod port_filter_tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn stack(seed: u64) -> Stack {
        let mut s = Stack::new(seed);
        s.add_address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
        s
    }

    /// `connect` picks only ports whose 4-tuple the filter accepts (here: even ports), from
    /// `ip_local_port_range`, and fails with `EADDRNOTAVAIL` (as `__inet_hash_connect` does
    /// when the range is used up) when the filter refuses every port of the range.
    #[test]
    fn connect_port_filter_limits_the_ephemeral_choice() {
        let remote = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 80);
        let mut st = stack(7);
        st.sysctl_set("net.ipv4.ip_local_port_range", "40000 40009")
            .unwrap();
        st.set_connect_port_filter(Some(std::sync::Arc::new(move |l, r| {
            assert_eq!(r, remote);
            l.port() % 2 == 0
        })));
        let mut ports = Vec::new();
        for _ in 0..5 {
            let s = st.socket(Family::V4).unwrap();
            assert_eq!(
                st.connect(Instant::ZERO, s, remote),
                Err(Errno::EINPROGRESS)
            );
            let p = st.local_addr(s).unwrap().port();
            assert!(p % 2 == 0 && (40000..=40009).contains(&p), "port {p}");
            ports.push(p);
        }
        ports.sort_unstable();
        assert_eq!(ports, vec![40000, 40002, 40004, 40006, 40008]);
        let s = st.socket(Family::V4).unwrap();
        assert_eq!(
            st.connect(Instant::ZERO, s, remote),
            Err(Errno::EADDRNOTAVAIL)
        );
        // Without a filter the same stack takes an odd port again.
        st.set_connect_port_filter(None);
        let s = st.socket(Family::V4).unwrap();
        assert_eq!(
            st.connect(Instant::ZERO, s, remote),
            Err(Errno::EINPROGRESS)
        );
        assert_eq!(st.local_addr(s).unwrap().port() % 2, 1);
    }

    /// `fork` copies the configuration (sysctls, addresses) and none of the state.
    #[test]
    fn fork_copies_configuration_only() {
        let mut st = stack(1);
        st.sysctl_set("net.ipv4.tcp_wmem", "4096 16384 1048576")
            .unwrap();
        let s = st.socket(Family::V4).unwrap();
        let remote = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 80);
        let _ = st.connect(Instant::ZERO, s, remote);
        let f = st.fork(2);
        assert_eq!(
            f.sysctl_get("net.ipv4.tcp_wmem").unwrap(),
            st.sysctl_get("net.ipv4.tcp_wmem").unwrap()
        );
        assert_eq!(f.addresses(), st.addresses());
        assert_eq!(f.socket_count(), 0);
        // The Fast Open key in force goes along (a cookie one engine gave is valid on the
        // other), not only the sysctl's text.
        let mut st2 = stack(3);
        st2.sysctl_set(
            "net.ipv4.tcp_fastopen_key",
            "00000001-00000002-00000003-00000004",
        )
        .unwrap();
        let mut f2 = st2.fork(1);
        let l = f2.socket(Family::V4).unwrap();
        assert_eq!(
            f2.getsockopt(l, SockOpt::TcpFastopenKey).unwrap(),
            OptVal::Bytes(vec![1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
        );
        assert_eq!(f.device(), st.device());
        // Forks are keyed apart from each other and from the original.
        let isn = |st: &mut Stack| {
            let s = st.socket(Family::V4).unwrap();
            let _ = st.connect(Instant::ZERO, s, remote);
            st.seqs(s).1
        };
        let (mut a, mut b, mut a2) = (st.fork(1), st.fork(2), stack(1).fork(1));
        assert_ne!(isn(&mut a), isn(&mut b));
        let mut a1 = st.fork(1);
        assert_eq!(isn(&mut a1), isn(&mut a2));
    }
}
