//! [`TcpHost`]: the engine adapter. One `shallow_tcp::Stack`, the host's CPUs and its
//! application threads, plugged into the emulator as an [`Endpoint`].
//!
//! Everything the host does runs on a CPU timeline ([`Cpu`]) and costs time from the
//! [`CostTable`]:
//!
//! * **Packet processing ("softirq")** runs on the softirq CPU: each packet from the network,
//!   each TX completion and each timer run is one task, run in arrival order, ahead of
//!   application threads on the same CPU (softirq preempts user work between system calls).
//! * **Application threads** run on the application CPU, one system call per scheduling
//!   step. While a thread is inside a socket call it owns the socket (`Stack::lock_sock` …
//!   `Stack::release_sock`); packets for an owned socket go to its backlog, and their
//!   processing cost is paid by the owner's CPU in `release_sock` (Linux `__release_sock`).
//!   Since the emulator is single-threaded, a socket is owned exactly while a call on it is
//!   in progress on the application CPU, i.e. between the call's start and the end of its
//!   CPU time; a packet the softirq CPU handles in that window goes to the backlog.
//! * A thread that cannot make progress blocks on an explicit wait condition (poll bits on
//!   its socket) and is woken by the engine's `poll_wakeup()` events; a wake-up costs a
//!   context switch on the woken thread's CPU. Nothing busy-waits.
//! * Packets an engine call produces leave the host when the CPU work of that call ends.
//! * **Placement** ([`CpuLayout`]): one CPU for everything (`Same`), softirq on CPU 0 and
//!   threads on CPU 1 (`Split`), or N CPUs (`Spread`) with threads placed round robin and
//!   each flow's receive and TX-completion work steered to the CPU its port pair hashes to
//!   (RSS), timers on CPU 0.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};

use shallow_tcp::{
    driver::Driver, msgflags, pollbits::*, DeviceCaps, Errno, Family, Instant, OptVal, RxPacket,
    Shutdown, SockOpt, SocketId, Stack, TcpState, TxToken,
};
use shallow_workload::{Conn, Counts, Interest, Io, Next, Play, Source};

use crate::cpu::{CostTable, Cpu, CpuLayout};
use crate::endpoint::Endpoint;
use crate::event::EventQueue;
use crate::hist::Histogram;
use crate::packet::{Packet, Skb};
use crate::pool::{BufPool, FlowMap};
use crate::rng::SimRng;
use crate::segment;
use crate::time::nanos;
use crate::workload::{Client, Listener, Role};
use shallow_workload::tstamp::{StampKind, WriteStamps};

/// Length of the repeating pseudo-random pattern senders write (a prime, so a misplaced
/// block of any power-of-two size shows up in the receiver's SHA-256).
const PATTERN_LEN: usize = 1_048_573;

/// Counters of one application thread beyond its role's ([`Thread::counts`]).
#[derive(Clone, Debug, Default)]
pub struct ThreadStats {
    /// Times the thread was woken from a blocking wait.
    pub wakeups: u64,
    /// Context switches (each wake-up is one).
    pub context_switches: u64,
    /// CPU time of the thread's system calls, ns.
    pub cpu_ns: u64,
    /// TCP_RR round-trip latency, ns (request sent → response read).
    pub latency: Histogram,
    /// When the thread finished (end of stream read, or its last byte sent).
    pub done_at: Option<Instant>,
    /// The error that ended the thread, if any.
    pub error: Option<Errno>,
    /// SHA-256 of the bytes sent or received (BULK), when finished.
    pub sha256: Option<[u8; 32]>,
    /// With `SO_TIMESTAMPING` asked ([`Client::timestamping`]): its per-write spans.
    pub tx_stamps: Option<TxStamps>,
    /// With `SO_ZEROCOPY` ([`Client::zerocopy`]): its zero-copy sends and their completions.
    pub zerocopy: Option<ZcStats>,
}

/// A zero-copy sender's sends and completions (`MSG_ZEROCOPY`), read from the socket's error
/// queue as they come, at no CPU cost, as the timestamps are ([`TxStamps`]).
#[derive(Clone, Debug, Default)]
pub struct ZcStats {
    /// Ids given (a send that took bytes got one; a blocking send that came back for the
    /// rest of its bytes kept its own).
    pub sends: u64,
    /// Ids completed.
    pub completed: u64,
    /// Ids completed as copied (`SO_EE_CODE_ZEROCOPY_COPIED`).
    pub copied: u64,
    /// Send → completion per id, ns: how long the stack held the application's buffer
    /// (ids completed after the run's end are counted, not measured).
    pub hold: Histogram,
    /// Send time of each id not yet completed, from `first`.
    sent_at: std::collections::VecDeque<Instant>,
    first: u32,
}

impl ZcStats {
    /// A send took bytes at `now`: the next id.
    fn sent(&mut self, now: Instant) {
        self.sends += 1;
        self.sent_at.push_back(now);
    }

    /// Ids `lo..=hi` completed (at `now`, if known).
    fn completed(&mut self, z: shallow_tcp::ZcNotice, now: Option<Instant>) {
        let n = u64::from(z.hi.wrapping_sub(z.lo)) + 1;
        self.completed += n;
        if z.copied {
            self.copied += n;
        }
        for id in (0..n).map(|i| z.lo.wrapping_add(i as u32)) {
            // Completions come in id order on one socket; an id out of it is only counted.
            if id == self.first {
                self.first = self.first.wrapping_add(1);
                if let (Some(at), Some(now)) = (self.sent_at.pop_front(), now) {
                    self.hold.add(nanos(now - at));
                }
            }
        }
    }
}

/// A timestamping thread's transmit timestamps, paired per write
/// (`shallow_workload::tstamp`). The emulator reads the socket's error queue as events come,
/// at no CPU cost, as a reader beside the writer would (so the events never wake a blocked
/// writer: on Linux a writer asleep in `sk_stream_wait_memory` sleeps on through them).
#[derive(Clone, Debug, Default)]
pub struct TxStamps {
    /// The pairing of events by key.
    pub writes: WriteStamps,
    /// SCHED→SND per write, ns: residence in the host's queues (qdisc and NIC).
    pub sched_to_snd: Histogram,
    /// SND→ACK per write, ns.
    pub snd_to_ack: Histogram,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sched {
    /// In its CPU's run queue.
    Runnable,
    /// Waiting for any of these poll bits on its socket.
    Blocked(u32),
    /// Finished.
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Client: create the socket and connect.
    Connect,
    /// Client: waiting for the handshake.
    Connecting,
    /// Playing the role.
    Run,
    /// Accept loop of a listener (index).
    Accept(usize),
}

/// One application thread (see the module docs).
pub struct Thread {
    /// Flow index for clients (`None` for server-side threads and acceptors).
    pub flow: Option<usize>,
    /// Its socket, once it has one.
    pub sock: Option<SocketId>,
    /// Local address once connected.
    pub local: Option<SocketAddr>,
    /// Peer address once connected.
    pub peer: Option<SocketAddr>,
    /// Counters.
    pub stats: ThreadStats,
    remote: Option<SocketAddr>,
    nodelay: bool,
    /// `SO_TIMESTAMPING` flags to set once connected.
    tstamp: u32,
    /// `SO_ZEROCOPY` to set once connected.
    zerocopy: bool,
    cpu: usize,
    sched: Sched,
    phase: Phase,
    ready_at: Instant,
    pending_cs: bool,
    /// Its role being played (acceptors: the role of the listener, never played).
    play: Play,
}

impl Thread {
    fn new(role: Role, cpu: usize, phase: Phase) -> Thread {
        Thread {
            flow: None,
            sock: None,
            local: None,
            peer: None,
            stats: ThreadStats::default(),
            remote: None,
            nodelay: false,
            tstamp: 0,
            zerocopy: false,
            cpu,
            sched: Sched::Runnable,
            phase,
            ready_at: Instant::ZERO,
            pending_cs: false,
            play: Play::new(role),
        }
    }
    /// Its role (acceptors: the role of the listener).
    pub fn role(&self) -> &Role {
        self.play.role()
    }
    /// What its role did: calls, bytes, transactions.
    pub fn counts(&self) -> &Counts {
        &self.play.counts
    }
    /// True once the thread has finished.
    pub fn is_done(&self) -> bool {
        self.sched == Sched::Done
    }
    /// The thread's scheduling state, for diagnostics: "runnable", "blocked(0x..)" or "done".
    pub fn sched_state(&self) -> String {
        match self.sched {
            Sched::Runnable => "runnable".into(),
            Sched::Blocked(m) => format!("blocked({m:#x})"),
            Sched::Done => "done".into(),
        }
    }
    /// True for an accept-loop thread.
    pub fn is_acceptor(&self) -> bool {
        matches!(self.phase, Phase::Accept(_))
    }
}

enum Task {
    /// A received packet: head, paged payload (see `Packet::frag`), GRO size, checksum verified.
    Rx(Vec<u8>, bytes::Bytes, Option<u16>, bool),
    TxDone(u64),
    Timer,
}

#[derive(Default)]
struct CpuState {
    cpu: Cpu,
    /// Softirq work finishes at this time (softirq work is never preempted).
    soft_free_at: Instant,
    softirq: VecDeque<Task>,
    run: VecDeque<usize>,
    /// A thread's socket call in progress: (thread, socket) to `release_sock` when the CPU
    /// time of the call has run. Softirq work may preempt it.
    release: Option<(usize, SocketId)>,
    /// Softirq time since its queue was last empty.
    soft_streak: u64,
    /// In "ksoftirqd" mode (streak over [`SOFTIRQ_BUDGET_NS`]): softirq and thread time
    /// since the mode began; the one with less runs next.
    ksoft_soft: u64,
    ksoft_thread: u64,
}

/// Packets that may wait for the softirq CPU (Linux `netdev_max_backlog`, 1000): arrivals
/// beyond it are dropped, so a CPU-bound receiver cannot queue without bound.
pub const RX_BACKLOG_LIMIT: usize = 1000;

/// RTT samples each socket keeps until taken (`Stack::set_rtt_log`): the engine records every
/// per-ACK sample and [`mod@crate::bench`] takes them every sample interval; at 10 Gbit/s that
/// is a few thousand per 10 ms, well under this bound (256 KiB per socket at most).
pub const RTT_LOG_PER_SOCKET: usize = 1 << 16;

/// Softirq work a CPU does ahead of application threads before the rest is handed to
/// `ksoftirqd`, which the scheduler shares fairly with them (Linux `net_rx_action`'s
/// `netdev_budget_usecs`, 2 ms by default). Without this limit a saturating packet rate
/// would starve the application forever.
pub const SOFTIRQ_BUDGET_NS: u64 = 2_000_000;

/// Counters of a host's adapter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpHostStats {
    /// Packets processed by softirq.
    pub rx_packets: u64,
    /// Of those, queued to an owned socket's backlog.
    pub rx_to_backlog: u64,
    /// TX completions processed.
    pub tx_completions: u64,
    /// Timer runs.
    pub timer_runs: u64,
    /// Packets the engine sent.
    pub tx_packets: u64,
    /// Wire segments in those packets (TSO super-segments count each segment).
    pub tx_segments: u64,
    /// Packets dropped because [`RX_BACKLOG_LIMIT`] packets were already waiting for the
    /// softirq CPU (Linux counts these as `softnet_stat` drops / RX ring overruns).
    pub rx_backlog_drops: u64,
    /// Scheduler passes cut short because nothing advanced time (zero costs and a thread that
    /// keeps being runnable); a sign of a workload bug.
    pub spin_breaks: u64,
}

/// Configuration of a [`TcpHost`].
#[derive(Clone, Debug)]
pub struct TcpHostConfig {
    /// The host's address (also the one the topology routes to it).
    pub addr: IpAddr,
    /// Seed of its engine (ISNs, ports) and data pattern.
    pub seed: u64,
    /// CPU costs.
    pub costs: CostTable,
    /// Where threads and softirq run.
    pub cpus: CpuLayout,
    /// Sysctls to set (Linux names).
    pub sysctls: Vec<(String, String)>,
    /// The qdisc paces by EDT (fq): tells the engine (`DeviceCaps::edt_pacing`).
    pub fq_pacing: bool,
}

/// One emulated host running the Shallow engine (see the module docs).
pub struct TcpHost {
    /// The engine with its egress (the host's qdisc, shared with the emulator, whose verdict
    /// the engine asks at the transmit); it dereferences to the engine's [`Stack`].
    pub driver: Driver<Skb>,
    costs: CostTable,
    cpus: Vec<CpuState>,
    softirq_cpu: usize,
    app_cpu: usize,
    /// Threads and softirq work spread over every CPU ([`CpuLayout::Spread`]).
    spread: bool,
    /// Threads placed so far (round robin under `spread`).
    placed: usize,
    threads: Vec<Thread>,
    listeners: Vec<Listener>,
    out: EventQueue<Packet>,
    tokens: Vec<Option<TxToken>>,
    /// The CPU each token's TX completion runs on.
    token_cpu: Vec<u16>,
    free_tokens: Vec<u64>,
    timer_queued: bool,
    /// Socket index → thread index.
    sock_thread: Vec<Option<usize>>,
    /// Backlog processing cost waiting for each socket's `release_sock`, by socket index.
    backlog_cost: Vec<u64>,
    /// (local port, remote port) → socket, for the ownership test on input.
    by_ports: BTreeMap<(u16, u16), SocketId>,
    /// Flow hash → (local port, remote port) of the packets carrying it.
    flow_ports: FlowMap<(u16, u16)>,
    pattern: Vec<u8>,
    scratch: Vec<(Packet, u64)>,
    pool: BufPool,
    /// Rx tasks waiting in softirq queues.
    rx_pending: usize,
    /// The socket the running step locked.
    cur_lock: Option<SocketId>,
    /// Adapter counters.
    pub stats: TcpHostStats,
}

/// A sysctl the engine refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sysctl {name}={value}: {why}")]
pub struct SysctlFailure {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
    /// The engine's error.
    pub why: String,
}

impl TcpHost {
    /// A host with no threads yet.
    pub fn new(cfg: &TcpHostConfig) -> Result<TcpHost, SysctlFailure> {
        let caps = DeviceCaps {
            edt_pacing: cfg.fq_pacing,
            // The emulated NIC computes every wire segment's checksum as it cuts a TSO packet.
            tso_csum_offload: true,
            // Scatter-gather: data packets share the socket's bytes instead of copying them.
            sg: true,
            ..DeviceCaps::default()
        };
        let mut stack = Stack::with_device(cfg.seed, caps);
        stack.add_address(cfg.addr);
        stack.set_rtt_log(RTT_LOG_PER_SOCKET);
        for (k, v) in &cfg.sysctls {
            stack.sysctl_set(k, v).map_err(|e| SysctlFailure {
                name: k.clone(),
                value: v.clone(),
                why: e.to_string(),
            })?;
        }
        let (n, softirq_cpu, app_cpu) = match cfg.cpus {
            CpuLayout::Same => (1, 0, 0),
            CpuLayout::Split => (2, 0, 1),
            CpuLayout::Spread { .. } => (cfg.cpus.cpu_count(), 0, 0),
        };
        let mut rng = SimRng::new(cfg.seed, "host/pattern");
        let mut pattern = Vec::with_capacity(PATTERN_LEN + 8);
        while pattern.len() < PATTERN_LEN {
            pattern.extend_from_slice(&rng.next_u64().to_le_bytes());
        }
        pattern.truncate(PATTERN_LEN);
        Ok(TcpHost {
            driver: Driver::new(stack),
            costs: cfg.costs,
            cpus: (0..n).map(|_| CpuState::default()).collect(),
            softirq_cpu,
            app_cpu,
            spread: matches!(cfg.cpus, CpuLayout::Spread { .. }),
            placed: 0,
            threads: Vec::new(),
            listeners: Vec::new(),
            out: EventQueue::new(),
            tokens: Vec::new(),
            token_cpu: Vec::new(),
            free_tokens: Vec::new(),
            timer_queued: false,
            sock_thread: Vec::new(),
            backlog_cost: Vec::new(),
            by_ports: BTreeMap::new(),
            flow_ports: FlowMap::default(),
            pattern,
            scratch: Vec::new(),
            pool: BufPool::new(256),
            rx_pending: 0,
            cur_lock: None,
            stats: TcpHostStats::default(),
        })
    }

    /// Add a client thread; it connects when the simulation starts.
    pub fn add_client(&mut self, c: Client) {
        let cpu = self.place_thread();
        let mut t = Thread::new(c.role, cpu, Phase::Connect);
        t.flow = Some(c.flow);
        t.remote = Some(c.remote);
        t.nodelay = c.nodelay;
        t.tstamp = c.timestamping;
        t.zerocopy = c.zerocopy;
        self.spawn(t, Instant::ZERO);
    }

    /// Add a listener with its accept-loop thread. Errors are the engine's (`bind`/`listen`).
    pub fn add_listener(&mut self, l: Listener) -> Result<(), Errno> {
        let v6 = matches!(self.driver.addresses().first(), Some(IpAddr::V6(_)));
        let s = self
            .driver
            .socket(if v6 { Family::V6 } else { Family::V4 })?;
        self.driver
            .setsockopt(Instant::ZERO, s, SockOpt::SoReuseaddr, &OptVal::Int(1))?;
        let any: IpAddr = match self.driver.addresses().first() {
            Some(IpAddr::V6(_)) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
            _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        };
        self.driver.bind(s, SocketAddr::new(any, l.port))?;
        self.driver.listen(s, 4096)?;
        let cpu = self.place_thread();
        let mut t = Thread::new(l.role.clone(), cpu, Phase::Accept(self.listeners.len()));
        t.sock = Some(s);
        self.listeners.push(l);
        let idx = self.spawn(t, Instant::ZERO);
        self.threads[idx].sched = Sched::Blocked(POLLIN | POLLERR | POLLHUP);
        self.cpus[cpu].run.retain(|&x| x != idx);
        self.bind_thread(s, idx);
        Ok(())
    }

    /// The threads (clients, acceptors, and one per accepted connection).
    pub fn threads(&self) -> &[Thread] {
        &self.threads
    }

    /// The CPU a new application thread runs on: the layout's application CPU, or round
    /// robin over all CPUs under [`CpuLayout::Spread`].
    fn place_thread(&mut self) -> usize {
        if !self.spread {
            return self.app_cpu;
        }
        let c = self.placed % self.cpus.len();
        self.placed += 1;
        c
    }

    /// The CPU that does softirq work for the connection (local port, remote port): the
    /// softirq CPU, or under [`CpuLayout::Spread`] the one its port pair hashes to (RSS).
    fn flow_cpu(&self, local: u16, remote: u16) -> usize {
        if !self.spread {
            return self.softirq_cpu;
        }
        let key = (u64::from(local) << 16) | u64::from(remote);
        let h = key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32;
        (h % self.cpus.len() as u64) as usize
    }

    /// The CPUs (index 0 does softirq; with the split layout, 1 runs the threads; with the
    /// spread layout, all do both).
    pub fn cpus(&self) -> Vec<Cpu> {
        self.cpus.iter().map(|c| c.cpu).collect()
    }

    /// The (local port, remote port) of the connection whose packets carry flow hash `flow`.
    pub fn flow_ports(&self, flow: u32) -> Option<(u16, u16)> {
        self.flow_ports.get(&flow).copied()
    }

    /// Every flow hash seen, with its ports, sorted by hash.
    pub fn flows(&self) -> Vec<(u32, (u16, u16))> {
        let mut v: Vec<_> = self.flow_ports.iter().map(|(k, v)| (*k, *v)).collect();
        v.sort_unstable();
        v
    }

    fn spawn(&mut self, mut t: Thread, at: Instant) -> usize {
        t.ready_at = at;
        t.sched = Sched::Runnable;
        let idx = self.threads.len();
        let cpu = t.cpu;
        self.threads.push(t);
        self.cpus[cpu].run.push_back(idx);
        idx
    }

    fn bind_thread(&mut self, s: SocketId, t: usize) {
        let i = s.0 as usize;
        if self.sock_thread.len() <= i {
            self.sock_thread.resize(i + 1, None);
            self.backlog_cost.resize(i + 1, 0);
        }
        self.sock_thread[i] = Some(t);
    }

    fn alloc_token(&mut self, tok: TxToken, cpu: usize) -> u64 {
        let cpu = u16::try_from(cpu).unwrap_or(0);
        match self.free_tokens.pop() {
            Some(i) => {
                self.tokens[i as usize] = Some(tok);
                self.token_cpu[i as usize] = cpu;
                i
            }
            None => {
                self.tokens.push(Some(tok));
                self.token_cpu.push(cpu);
                (self.tokens.len() - 1) as u64
            }
        }
    }

    /// Drain the engine's output: packets leave at `release + tx cost`. Returns the tx cost.
    fn drain_output(&mut self, now: Instant, base: u64) -> u64 {
        let mut scratch = std::mem::take(&mut self.scratch);
        let (mut packets, mut segs) = (0u64, 0u64);
        while let Some(tx) = self.driver.poll_transmit(now) {
            let view = segment::parse_tcp_split(&tx.data, tx.frags.len());
            let n = match (tx.gso_size, view) {
                (Some(g), Some(v)) if g > 0 => v.payload_len.div_ceil(usize::from(g)).max(1),
                _ => 1,
            } as u64;
            if let std::collections::hash_map::Entry::Vacant(e) = self.flow_ports.entry(tx.flow) {
                if let Some(v) = view {
                    e.insert((v.sport, v.dport));
                }
            }
            packets += 1;
            segs += n;
            let cpu = match self.flow_ports.get(&tx.flow) {
                Some(&(l, r)) => self.flow_cpu(l, r),
                None => self.softirq_cpu,
            };
            let token = tx.token.map(|t| self.alloc_token(t, cpu));
            let pkt = Packet {
                data: tx.data,
                // The emulated NIC gathers a packet of several pieces (the application's
                // buffers of zero-copy sends) into one buffer, as a NIC's DMA reads its
                // gather list; the emulated CPU is not charged for it (a real host's is not).
                frag: tx.frags.join().into(),
                gso_size: tx.gso_size,
                departure: tx.departure,
                token,
                flow: tx.flow,
                seg: None,
            };
            scratch.push((pkt, n));
        }
        self.stats.tx_packets += packets;
        self.stats.tx_segments += segs;
        let cost = self.costs.tx(packets, segs);
        let release = now.saturating_add_nanos(base + cost);
        for (p, _) in scratch.drain(..) {
            self.out.push(release, p);
        }
        self.scratch = scratch;
        cost
    }

    /// Deliver the engine's wake-ups: blocked threads whose wait condition matches become
    /// runnable at `at` and pay a context switch.
    fn drain_wakeups(&mut self, at: Instant) {
        while let Some(w) = self.driver.poll_wakeup() {
            let Some(Some(t)) = self.sock_thread.get(w.socket.0 as usize).copied() else {
                continue;
            };
            let mut events = w.events;
            if events & POLLERR != 0 && self.read_errq(w.socket, Some(at)) {
                // Error-queue events were read by the timestamp reader: only a socket
                // error (sk_err) still wakes the thread.
                if !self.driver.poll(w.socket).is_ok_and(|ev| ev & POLLERR != 0) {
                    events &= !POLLERR;
                }
            }
            let th = &mut self.threads[t];
            if let Sched::Blocked(mask) = th.sched {
                if mask & events != 0 {
                    th.sched = Sched::Runnable;
                    // The switch is counted with its wake-up (a run that ends before the
                    // thread gets its CPU still saw both); its cost is paid when it runs.
                    th.pending_cs = true;
                    th.stats.wakeups += 1;
                    th.stats.context_switches += 1;
                    th.ready_at = at;
                    self.cpus[th.cpu].run.push_back(t);
                }
            }
        }
    }

    /// Run everything due at `now` on every CPU.
    fn run(&mut self, now: Instant) {
        let mut guard = 0u32;
        loop {
            if !self.timer_queued && self.driver.poll_timeout().is_some_and(|t| t <= now) {
                self.timer_queued = true;
                self.cpus[self.softirq_cpu].softirq.push_back(Task::Timer);
            }
            let mut did = false;
            for c in 0..self.cpus.len() {
                let cs = &self.cpus[c];
                if cs.release.is_some() && cs.cpu.free_at <= now {
                    self.run_release(c, now);
                    did = true;
                    continue;
                }
                let ksoftirqd = cs.soft_streak >= SOFTIRQ_BUDGET_NS;
                let thread_turn = ksoftirqd
                    && cs.ksoft_thread <= cs.ksoft_soft
                    && cs.release.is_none()
                    && cs.cpu.free_at <= now
                    && cs.run.iter().any(|&t| self.threads[t].ready_at <= now);
                // Softirq runs when the CPU is idle, or preempts a thread's socket call
                // (not once it has become ksoftirqd, a thread like the others).
                if !cs.softirq.is_empty()
                    && !thread_turn
                    && cs.soft_free_at <= now
                    && (cs.cpu.free_at <= now || (cs.release.is_some() && !ksoftirqd))
                {
                    if let Some(task) = self.cpus[c].softirq.pop_front() {
                        self.run_softirq(c, task, now);
                        did = true;
                    }
                    continue;
                }
                if cs.cpu.free_at > now || cs.release.is_some() {
                    continue;
                }
                let pos = {
                    let threads = &self.threads;
                    cs.run.iter().position(|&t| threads[t].ready_at <= now)
                };
                if let Some(pos) = pos {
                    if let Some(t) = self.cpus[c].run.remove(pos) {
                        self.run_thread(c, t, now);
                        did = true;
                    }
                }
            }
            if !did {
                break;
            }
            guard += 1;
            if guard > 1_000_000 {
                self.stats.spin_breaks += 1;
                break;
            }
        }
    }

    fn run_softirq(&mut self, c: usize, task: Task, now: Instant) {
        let base = match task {
            Task::Rx(data, frag, gso, csum_ok) => {
                self.rx_pending -= 1;
                self.stats.rx_packets += 1;
                let view = segment::parse_tcp_split(&data, frag.len());
                let (payload, segs) = match view {
                    Some(v) => {
                        let segs = match gso {
                            Some(g) if g > 0 => v.payload_len.div_ceil(usize::from(g)).max(1),
                            _ => 1,
                        };
                        (v.payload_len > 0, segs as u64)
                    }
                    None => (false, 1),
                };
                // The socket this packet is for, when a thread owns it (its call is running).
                let owner = view
                    .and_then(|v| self.by_ports.get(&(v.dport, v.sport)).copied())
                    .filter(|s| self.driver.is_owned(*s));
                let rx_cost = self.costs.rx(payload, segs);
                let rx = if frag.is_empty() {
                    RxPacket::linear(&data)
                } else {
                    RxPacket::paged(&data, &frag)
                };
                self.driver
                    .handle_packet(now, rx.gso(gso).csum_verified(csum_ok));
                self.pool.put(data);
                if let Some(s) = owner {
                    self.stats.rx_to_backlog += 1;
                    if let Some(b) = self.backlog_cost.get_mut(s.0 as usize) {
                        *b += rx_cost;
                    }
                    self.costs.backlog_enqueue_ns
                } else {
                    rx_cost
                }
            }
            Task::TxDone(tok) => {
                self.stats.tx_completions += 1;
                let (id, piece) = crate::packet::piece_token::decode(tok);
                let slot = self.tokens.get_mut(id as usize);
                match piece {
                    // A segment but the last of a packet software GSO cut: its share.
                    Some((payload, false)) => {
                        if let Some(t) = slot.and_then(|s| s.as_mut()?.take_segment(payload)) {
                            self.driver.tx_complete(now, t);
                        }
                    }
                    _ => {
                        if let Some(t) = slot.and_then(Option::take) {
                            self.free_tokens.push(id);
                            self.driver.tx_complete(now, t);
                        }
                    }
                }
                self.costs.tx_completion_ns
            }
            Task::Timer => {
                self.stats.timer_runs += 1;
                self.timer_queued = false;
                self.driver.handle_timeout(now);
                self.costs.timer_ns
            }
        };
        let tx = self.drain_output(now, base);
        let total = base + tx;
        let cs = &mut self.cpus[c];
        cs.cpu.run(now, total, true);
        cs.soft_free_at = now.saturating_add_nanos(total);
        cs.soft_streak += total;
        if cs.soft_streak >= SOFTIRQ_BUDGET_NS {
            cs.ksoft_soft += total;
        }
        if cs.softirq.is_empty() {
            cs.soft_streak = 0;
            cs.ksoft_soft = 0;
            cs.ksoft_thread = 0;
        }
        self.drain_wakeups(now.saturating_add_nanos(total));
    }

    /// The end of a socket call: `release_sock` processes the backlog (paying each queued
    /// packet's receive cost) and the deferred work, on the caller's CPU.
    fn run_release(&mut self, c: usize, now: Instant) {
        let Some((t, s)) = self.cpus[c].release.take() else {
            return;
        };
        self.driver.release_sock(now, s);
        self.read_errq(s, Some(now));
        // sk_wait_event: a thread about to sleep releases the socket first, then re-checks
        // its condition; what the backlog brought in lets it go on without sleeping.
        if let Sched::Blocked(mask) = self.threads[t].sched {
            if self.driver.poll(s).is_ok_and(|ev| ev & mask != 0) {
                self.threads[t].sched = Sched::Runnable;
                self.threads[t].ready_at = now;
                self.cpus[c].run.push_back(t);
            }
        }
        let base = self
            .backlog_cost
            .get_mut(s.0 as usize)
            .map_or(0, std::mem::take);
        let tx = self.drain_output(now, base);
        let total = base + tx;
        self.cpus[c].cpu.run(now, total, false);
        if self.cpus[c].soft_streak >= SOFTIRQ_BUDGET_NS {
            self.cpus[c].ksoft_thread += total;
        }
        self.threads[t].stats.cpu_ns += total;
        self.drain_wakeups(now.saturating_add_nanos(total));
    }

    fn run_thread(&mut self, c: usize, t: usize, now: Instant) {
        let mut cost = 0;
        if std::mem::take(&mut self.threads[t].pending_cs) {
            cost += self.costs.context_switch_ns;
        }
        self.cur_lock = None;
        let next = self.step(t, now, &mut cost);
        let tx = self.drain_output(now, cost);
        let total = cost + tx;
        self.cpus[c].cpu.run(now, total, false);
        if self.cpus[c].soft_streak >= SOFTIRQ_BUDGET_NS {
            self.cpus[c].ksoft_thread += total;
        }
        if let Some(s) = self.cur_lock.take() {
            self.cpus[c].release = Some((t, s));
        }
        let th = &mut self.threads[t];
        th.stats.cpu_ns += total;
        th.sched = next;
        match next {
            Sched::Runnable => {
                th.ready_at = now;
                self.cpus[c].run.push_back(t);
            }
            Sched::Done => {
                if th.stats.done_at.is_none() {
                    th.stats.done_at = Some(now.saturating_add_nanos(total));
                }
                if th.stats.sha256.is_none() {
                    th.stats.sha256 = th.play.finish();
                }
            }
            Sched::Blocked(_) => {}
        }
        self.drain_wakeups(now.saturating_add_nanos(total));
    }

    /// Block on `mask` unless the socket already reports one of its bits (`tcp_poll`).
    fn wait(&mut self, s: SocketId, mask: u32, now: Instant) -> Sched {
        self.read_errq(s, Some(now));
        let mask = mask | POLLERR | POLLHUP;
        match self.driver.poll(s) {
            Ok(ev) if ev & mask != 0 => Sched::Runnable,
            Ok(_) => Sched::Blocked(mask),
            Err(_) => Sched::Done,
        }
    }

    /// Turn on `SO_TIMESTAMPING` with `flags` on thread `t`'s connected socket `s` (nothing
    /// for 0); a failure ends the thread's timestamps, not the thread.
    fn start_tstamps(&mut self, t: usize, s: SocketId, flags: u32, now: Instant) {
        if flags == 0 {
            return;
        }
        let ok = self
            .driver
            .setsockopt(
                now,
                s,
                SockOpt::SoTimestamping,
                &OptVal::Int(i64::from(flags)),
            )
            .is_ok();
        if ok {
            self.threads[t].stats.tx_stamps = Some(TxStamps::default());
        }
    }

    /// `SO_ZEROCOPY` on a data sender's socket, and its [`ZcStats`].
    fn start_zerocopy(&mut self, t: usize, s: SocketId, on: bool, now: Instant) {
        if on
            && self
                .driver
                .setsockopt(now, s, SockOpt::SoZerocopy, &OptVal::Int(1))
                .is_ok()
        {
            self.threads[t].stats.zerocopy = Some(ZcStats::default());
        }
    }

    /// Read the error queue of `s` into its thread's [`TxStamps`] and [`ZcStats`], if that
    /// thread asked for them (`now`: the time of the read, None at the run's end). Returns
    /// whether it did.
    fn read_errq(&mut self, s: SocketId, now: Option<Instant>) -> bool {
        let Some(Some(t)) = self.sock_thread.get(s.0 as usize).copied() else {
            return false;
        };
        let stats = &mut self.threads[t].stats;
        let stack = self.driver.stack_mut();
        if let Some(zc) = stats.zerocopy.as_mut() {
            while let Ok(z) = stack.recv_zerocopy(s) {
                zc.completed(z, now);
            }
        }
        let Some(ts) = stats.tx_stamps.as_mut() else {
            return stats.zerocopy.is_some();
        };
        while let Ok(e) = stack.recv_tx_timestamp(s) {
            let Some(kind) = StampKind::from_scm(e.kind.scm()) else {
                ts.writes.unknown += 1;
                continue;
            };
            if let Some(sp) = ts.writes.add(kind, e.key, e.time) {
                ts.sched_to_snd.add(nanos(sp.sched_to_snd));
                ts.snd_to_ack.add(nanos(sp.snd_to_ack));
            }
        }
        true
    }

    /// Read every timestamping thread's error queue now (the end of a run).
    pub fn read_all_tstamps(&mut self) {
        let socks: Vec<SocketId> = self
            .threads
            .iter()
            .filter(|t| t.stats.tx_stamps.is_some() || t.stats.zerocopy.is_some())
            .filter_map(|t| t.sock)
            .collect();
        for s in socks {
            self.read_errq(s, None);
        }
    }

    fn fail(&mut self, t: usize, e: Errno) -> Sched {
        self.threads[t].stats.error = Some(e);
        Sched::Done
    }

    fn register(&mut self, t: usize, s: SocketId) {
        let local = self.driver.local_addr(s).ok();
        let peer = self.driver.peer_addr(s).ok();
        if let (Some(l), Some(p)) = (local, peer) {
            self.by_ports.insert((l.port(), p.port()), s);
        }
        let th = &mut self.threads[t];
        th.local = local;
        th.peer = peer;
    }

    /// One scheduling step of thread `t`: one system call (an accept loop or a blocking
    /// call's continuation counts as one). Adds its CPU time to `cost`.
    fn step(&mut self, t: usize, now: Instant, cost: &mut u64) -> Sched {
        let sc = self.costs.syscall_ns;
        match self.threads[t].phase {
            Phase::Connect => {
                *cost += 3 * sc; // socket, setsockopt, connect
                let remote = match self.threads[t].remote {
                    Some(r) => r,
                    None => return Sched::Done,
                };
                let fam = match remote {
                    SocketAddr::V4(_) => Family::V4,
                    SocketAddr::V6(_) => Family::V6,
                };
                let s = match self.driver.socket(fam) {
                    Ok(s) => s,
                    Err(e) => return self.fail(t, e),
                };
                self.threads[t].sock = Some(s);
                self.bind_thread(s, t);
                if self.threads[t].nodelay {
                    let _ = self
                        .driver
                        .setsockopt(now, s, SockOpt::TcpNodelay, &OptVal::Int(1));
                }
                match self.driver.connect(now, s, remote) {
                    Err(Errno::EINPROGRESS) | Ok(()) => {}
                    Err(e) => return self.fail(t, e),
                }
                self.threads[t].phase = Phase::Connecting;
                self.wait(s, POLLOUT, now)
            }
            Phase::Connecting => {
                let Some(s) = self.threads[t].sock else {
                    return Sched::Done;
                };
                match self.driver.state(s) {
                    Ok(TcpState::SynSent) | Ok(TcpState::SynRecv) => {
                        Sched::Blocked(POLLOUT | POLLERR | POLLHUP)
                    }
                    Ok(TcpState::Established) => {
                        self.threads[t].phase = Phase::Run;
                        let (flags, zc) = (self.threads[t].tstamp, self.threads[t].zerocopy);
                        self.start_tstamps(t, s, flags, now);
                        self.start_zerocopy(t, s, zc, now);
                        self.register(t, s);
                        Sched::Runnable
                    }
                    _ => {
                        // A failed connect reports its error to the next connect() call.
                        *cost += sc;
                        let e = match self.threads[t].remote {
                            Some(r) => match self.driver.connect(now, s, r) {
                                Err(e) => e,
                                Ok(()) => Errno::ECONNABORTED,
                            },
                            None => Errno::ECONNABORTED,
                        };
                        self.fail(t, e)
                    }
                }
            }
            Phase::Accept(li) => self.step_accept(t, li, now, cost),
            Phase::Run => self.step_play(t, now, cost),
        }
    }

    fn step_accept(&mut self, t: usize, li: usize, now: Instant, cost: &mut u64) -> Sched {
        let Some(ls) = self.threads[t].sock else {
            return Sched::Done;
        };
        loop {
            *cost += self.costs.syscall_ns;
            match self.driver.accept(ls) {
                Ok((child, _peer)) => {
                    let l = &self.listeners[li];
                    let (role, nodelay, flags, zc) =
                        (l.role.clone(), l.nodelay, l.timestamping, l.zerocopy);
                    if nodelay {
                        let _ = self.driver.setsockopt(
                            now,
                            child,
                            SockOpt::TcpNodelay,
                            &OptVal::Int(1),
                        );
                    }
                    let cpu = self.place_thread();
                    let mut th = Thread::new(role, cpu, Phase::Run);
                    th.sock = Some(child);
                    let idx = self.spawn(th, now);
                    self.bind_thread(child, idx);
                    self.start_tstamps(idx, child, flags, now);
                    self.start_zerocopy(idx, child, zc, now);
                    self.register(idx, child);
                }
                Err(Errno::EAGAIN) => return self.wait(ls, POLLIN, now),
                Err(e) => return self.fail(t, e),
            }
        }
    }

    /// One step of the thread's role ([`Play::step`]): its one socket call through
    /// [`SimConn`], which charges the call's CPU time; the role's next move becomes the
    /// thread's scheduling state (`epoll_wait` costs a system call).
    fn step_play(&mut self, t: usize, now: Instant, cost: &mut u64) -> Sched {
        let Some(s) = self.threads[t].sock else {
            return Sched::Done;
        };
        let th = &mut self.threads[t];
        let mut conn = SimConn {
            stack: self.driver.stack_mut(),
            costs: &self.costs,
            s,
            now,
            cost,
            lock: &mut self.cur_lock,
            zc: th.stats.zerocopy.as_mut(),
        };
        let step = th.play.step(&mut conn, now, Source::Pattern(&self.pattern));
        let next = match step {
            Ok(step) => {
                if let Some(l) = step.latency {
                    th.stats.latency.add(nanos(l));
                }
                step.next
            }
            Err(e) => return self.fail(t, e),
        };
        let mask = |i| match i {
            Interest::Readable => POLLIN | POLLRDHUP,
            Interest::Writable => POLLOUT,
        };
        match next {
            Next::Run => Sched::Runnable,
            Next::Block(i) => self.wait(s, mask(i), now),
            Next::Poll(i) => {
                *cost += self.costs.syscall_ns;
                self.wait(s, mask(i), now)
            }
            Next::Done => Sched::Done,
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut best = self.out.peek_time();
        let mut take = |t: Instant| {
            best = Some(best.map_or(t, |b: Instant| b.min(t)));
        };
        if !self.timer_queued {
            if let Some(t) = self.driver.poll_timeout() {
                take(t);
            }
        }
        for c in &self.cpus {
            if c.release.is_some() {
                take(c.cpu.free_at);
                if !c.softirq.is_empty() && c.soft_streak < SOFTIRQ_BUDGET_NS {
                    // Softirq may preempt the call (not once it is ksoftirqd).
                    take(c.soft_free_at);
                }
            } else if !c.softirq.is_empty() {
                take(c.cpu.free_at.max(c.soft_free_at));
            } else if let Some(r) = c.run.iter().map(|&t| self.threads[t].ready_at).min() {
                take(r.max(c.cpu.free_at));
            }
        }
        best
    }
}

impl TcpHost {
    /// A packet from the network onto a softirq queue; `csum_ok`: the NIC verified its TCP
    /// checksum (`CHECKSUM_UNNECESSARY`), so the stack does not sum it again.
    fn rx(&mut self, now: Instant, pkt: &mut Packet, csum_ok: bool) {
        if self.rx_pending >= RX_BACKLOG_LIMIT {
            self.stats.rx_backlog_drops += 1;
            self.run(now);
            return;
        }
        self.rx_pending += 1;
        // Keep the packet's buffer (no copy); the emulator gets a spare one back.
        let ports = if self.spread {
            segment::parse_tcp_split(&pkt.data, pkt.frag.len()).map(|v| (v.dport, v.sport))
        } else {
            None
        };
        let cpu = ports.map_or(self.softirq_cpu, |(l, r)| self.flow_cpu(l, r));
        let data = std::mem::replace(&mut pkt.data, self.pool.get());
        let frag = pkt.frag.take();
        self.cpus[cpu]
            .softirq
            .push_back(Task::Rx(data, frag, pkt.gso_size, csum_ok));
        self.run(now);
    }
}

impl Endpoint for TcpHost {
    fn input(&mut self, now: Instant, pkt: &mut Packet) {
        self.rx(now, pkt, false);
    }

    fn input_csum_verified(&mut self, now: Instant, pkt: &mut Packet) {
        self.rx(now, pkt, true);
    }

    fn accepts_frags(&self) -> bool {
        true
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Packet> {
        if self.out.peek_time()? <= now {
            self.out.pop().map(|(_, p)| p)
        } else {
            None
        }
    }

    /// The engine learns the qdisc's verdict at the transmit (NET_XMIT_DROP), as Linux's
    /// TCP does from `dev_queue_xmit`.
    fn attach_egress(&mut self, egress: &crate::qdisc::EgressHandle) {
        self.driver.set_egress(egress.clone());
    }

    fn tx_complete(&mut self, now: Instant, token: u64) {
        let cpu = self
            .token_cpu
            .get(crate::packet::piece_token::decode(token).0 as usize)
            .map_or(self.softirq_cpu, |&c| {
                usize::from(c).min(self.cpus.len() - 1)
            });
        self.cpus[cpu].softirq.push_back(Task::TxDone(token));
        self.run(now);
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.next_deadline()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.run(now);
    }
}

/// A thread's socket as its role uses it: every call costs a system call and the copy of the
/// bytes it moves, and runs owning the socket (`lock_sock` now; `release_sock` when the
/// call's CPU time is over, [`TcpHost::run_release`]).
struct SimConn<'a> {
    stack: &'a mut Stack,
    costs: &'a CostTable,
    s: SocketId,
    /// When the step started.
    now: Instant,
    /// CPU time of the step so far.
    cost: &'a mut u64,
    /// The socket the step locked.
    lock: &'a mut Option<SocketId>,
    /// A zero-copy sender's completions ([`ZcStats`]): its sends are `MSG_ZEROCOPY`.
    zc: Option<&'a mut ZcStats>,
}

impl SimConn<'_> {
    fn call<R>(&mut self, f: impl FnOnce(&mut Stack, SocketId, Instant) -> R) -> R {
        *self.cost += self.costs.syscall_ns;
        self.stack.lock_sock(self.s);
        *self.lock = Some(self.s);
        f(self.stack, self.s, self.now)
    }

    fn moved(&mut self, r: Result<usize, Errno>) -> Result<usize, Io<Errno>> {
        match r {
            Ok(n) => {
                *self.cost += self.costs.copy(n);
                Ok(n)
            }
            Err(Errno::EAGAIN) => Err(Io::WouldBlock),
            Err(e) => Err(Io::Failed(e)),
        }
    }
}

impl Conn for SimConn<'_> {
    type Error = Errno;
    fn send(&mut self, buf: &[u8]) -> Result<usize, Io<Errno>> {
        if self.zc.is_none() {
            let r = self.call(|st, s, n| st.send(n, s, buf, 0));
            return self.moved(r);
        }
        // The application hands its buffer over (the emulator makes it a shared buffer; the
        // CPU charged is the copying send's: the emulator does not model zero-copy's saving,
        // which `cargo bench -p shallow-os --bench zerocopy` measures on Linux).
        let b = shallow_tcp::Bytes::copy_from_slice(buf);
        let before = self.stack.zerocopy_next_id(self.s).unwrap_or(0);
        let r = self.call(|st, s, n| st.sendmsg_bufs(n, s, &[b], msgflags::MSG_ZEROCOPY, None));
        // The ids this call took (none when a blocking send continues its own).
        let after = self.stack.zerocopy_next_id(self.s).unwrap_or(before);
        if let Some(zc) = self.zc.as_deref_mut() {
            for _ in 0..after.wrapping_sub(before) {
                zc.sent(self.now);
            }
        }
        self.moved(r)
    }
    fn recv(&mut self, buf: &mut [u8], keep: bool) -> Result<usize, Io<Errno>> {
        // Bytes nobody looks at are discarded (MSG_TRUNC) instead of copied: the engine's
        // receive path is the same, and the copy is charged anyway.
        let flags = if keep { 0 } else { msgflags::MSG_TRUNC };
        let r = self.call(|st, s, n| st.recv(n, s, buf, flags));
        self.moved(r)
    }
    /// The emulated sender ignores the result of its half-close.
    fn shutdown_write(&mut self) -> Result<(), Io<Errno>> {
        let _ = self.call(|st, s, n| st.shutdown(n, s, Shutdown::Write));
        Ok(())
    }
    fn now(&self) -> Instant {
        self.now.saturating_add_nanos(*self.cost)
    }
}
