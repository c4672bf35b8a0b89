//! The runner: drives one [`shallow_tcp::Stack`] through a script in virtual time, in the
//! [`shallow_tcp::Driver`] every substrate runs the engine with.
//!
//! Each script gets a fresh stack. Events run in script order on a virtual clock (ns); time
//! only moves forward, by jumping to the next thing that happens (a stack timer, a packet
//! the qdisc releases, a delayed TX completion, a poll timeout, or the next event).
//!
//! * `<` lines become IP packets given to [`Stack::input`] (one GSO aggregate with
//!   `gso_size = --mss` when the payload does not fit the MTU).
//! * Every packet the stack transmits goes through the host qdisc the script chose with
//!   `tc` (a real one from `shallow-qdisc` in the driver's egress, `egress.rs`: pfifo, bfifo,
//!   fq; `limit 0` refuses every packet at the transmit) onto the "wire", where it waits for a `>` line. As on
//!   packetdrill's tun device, which orphans every packet in its xmit routine, a packet
//!   that leaves at once is completed inside the engine's send
//!   (`DeviceCaps::orphan_at_xmit`); one fq holds is completed when it leaves, and
//!   `shallow_tx_delay` turns the orphaning off and delays completions.
//! * `>` lines take the next wire packet (advancing time up to the end of the tolerance
//!   window) and compare it strictly (flags, sequence numbers, window, options, length; see the crate README). A packet still on the wire
//!   at a later event, sent before that event's time minus the tolerance, is an unexpected
//!   packet and fails the script when another `>` line follows (packetdrill's rule: the next
//!   sniffed packet must match the next `>` line; packets after the last `>` line go
//!   unchecked).
//! * System calls run against the stack; a call that would block on a blocking fd (or a
//!   poll/epoll_wait with a timeout) becomes a pending operation retried whenever the stack
//!   did something, and must return at the scripted end time (`a...b`).
//! * Backtick commands become [`EnvAction`]s applied to the stack; `%{ }%` snippets run in
//!   [`crate::python`] with `tcpi_*` values from [`Stack::tcp_info`] of the socket under test
//!   and `sk_meminfo_*` values from [`Stack::meminfo`] (`SO_MEMINFO`; the snippet language
//!   has no subscripts, so `sk_meminfo_wmem_queued` stands for `meminfo[SK_MEMINFO_WMEM_QUEUED]`).

mod cmsg;
mod egress;
pub(crate) mod pkt;
mod sys;

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use shallow_tcp::{DeviceCaps, Driver, Instant, RouteAttrs, SocketId, Stack, TxToken};
use shallow_wire::{SackBlocks, TcpOptionRepr, TcpRepr};

use crate::ast::*;
use crate::env::{self, EnvAction};
use crate::expectations::{unsupported_features, Status};
use crate::outcome::FailKind;
use crate::python::{self, PyEnv, PyError};

use egress::QdiscSpec;
use pkt::{flags_str, opt_str, IpFields, Live};

/// How to run scripts.
#[derive(Debug, Clone, Default)]
pub struct RunConfig {
    /// Run over IPv6 (local fd3d:fa7b:d17d::1, remote 2001:db8::1) unless the script sets
    /// `--ip_version`.
    pub ipv6: bool,
    /// Run over IPv4-mapped IPv6 unless the script sets `--ip_version` (packetdrill's
    /// `--ip_version=ipv4-mapped-ipv6`): AF_INET6 sockets, IPv4 packets (local 192.168.0.1,
    /// remote 192.0.2.1, MTU 1500), and the addresses the script's `bind`/`connect` default
    /// to in their IPv4-mapped form (`::ffff:192.168.0.1`, `::ffff:192.0.2.1`). Takes
    /// precedence over `ipv6`.
    pub mapped: bool,
    /// Record a trace of every event, packet and call in [`Report::log`].
    pub verbose: bool,
}

/// The outcome of one script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// pass, fail or skip.
    pub status: Status,
    /// Script line of the failure (0 when not tied to a line).
    pub line: u32,
    /// What kind of check failed (`Some` exactly when the status is `fail`).
    pub kind: Option<FailKind>,
    /// Why it failed or was skipped (empty on pass).
    pub reason: String,
    /// Trace lines (only with [`RunConfig::verbose`]).
    pub log: Vec<String>,
}

/// Parses and runs a script file. Parse errors are failures at the error's line.
pub fn run_file(path: &Path, cfg: &RunConfig) -> Report {
    match crate::parse_file(path) {
        Ok(script) => run_script(&script, cfg),
        Err(e) => Report {
            status: Status::Fail,
            line: e.line,
            kind: Some(FailKind::Script),
            reason: format!("parse error: {}", e.message),
            log: Vec::new(),
        },
    }
}

/// Runs a parsed script on a fresh stack.
pub fn run_script(script: &Script, cfg: &RunConfig) -> Report {
    let feats = unsupported_features(script);
    if !feats.is_empty() {
        return Report {
            status: Status::Skip,
            line: 0,
            kind: None,
            reason: format!("needs {}", feats.join(", ")),
            log: Vec::new(),
        };
    }
    let mut r = Runner::new(script, cfg);
    let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let res = r.run();
        (res, std::mem::take(&mut r.log))
    }));
    let (res, log) = match res {
        Ok(x) => x,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Report {
                status: Status::Fail,
                line: 0,
                kind: Some(FailKind::Other),
                reason: format!("engine panicked: {msg}"),
                log: Vec::new(),
            };
        }
    };
    match res {
        Ok(()) => Report {
            status: Status::Pass,
            line: 0,
            kind: None,
            reason: String::new(),
            log,
        },
        Err(Stop::Fail { line, kind, reason }) => Report {
            status: Status::Fail,
            line,
            kind: Some(kind),
            reason,
            log,
        },
        Err(Stop::Skip { line, reason }) => Report {
            status: Status::Skip,
            line,
            kind: None,
            reason,
            log,
        },
    }
}

/// Why a run stopped early.
#[derive(Debug)]
pub(crate) enum Stop {
    Fail {
        line: u32,
        kind: FailKind,
        reason: String,
    },
    Skip {
        line: u32,
        reason: String,
    },
}

type R<T> = Result<T, Stop>;

/// A packet on the wire, waiting for a `>` line.
#[derive(Debug)]
struct Sent {
    at: u64,
    data: Vec<u8>,
}

/// One connection as the script sees it: ports and the stack's ISN.
#[derive(Debug, Clone)]
struct Flow {
    local_port: Option<u16>,
    remote_port: u16,
    /// The stack's initial sequence number (script seq 0).
    isn: Option<u32>,
    /// Opened by connect() (vs. by an inbound SYN).
    active: bool,
    /// Sequence number of the inbound SYN that opened it.
    syn_seq: Option<u32>,
    /// A non-SYN packet was injected on it.
    saw_non_syn: bool,
    /// The peer's initial sequence number: the script's SYN or SYN-ACK sequence number.
    /// As in packetdrill, the peer's later sequence numbers, and our acknowledgements of
    /// them, are written relative to it.
    remote_isn: u32,
    /// `remote_isn` was taken.
    remote_isn_set: bool,
}

/// What a script fd stands for.
#[derive(Debug)]
enum Fd {
    Sock(SocketId),
    Epoll(Vec<EpollItem>),
    /// A file the script made (`dd if=/dev/zero`): its path and read position.
    File {
        path: String,
        pos: u64,
    },
    /// An end of a pipe (`pipe()`): the pipe's index in `Runner::pipes`, and whether this is
    /// the write end.
    Pipe {
        pipe: usize,
        write: bool,
    },
}

#[derive(Debug, Clone)]
struct EpollItem {
    fd: i64,
    events: u32,
    data: u64,
    /// On the ready list (a wake-up or the ADD/MOD found it ready).
    rdy: bool,
    /// EPOLLONESHOT fired: no more events until EPOLL_CTL_MOD.
    disabled: bool,
}

/// A blocking call waiting to return.
#[derive(Debug)]
struct Pending {
    ev: usize,
    start: u64,
    end: u64,
    state: sys::CallState,
    deadline: Option<u64>,
    /// Sockets whose wake-ups can end the wait (a wait queue, `sk_sleep`).
    socks: Vec<SocketId>,
    /// poll bits that wake this waiter (0 = any).
    interest: u32,
    /// A matching wake-up arrived since the last attempt.
    woken: bool,
}

const MAX_STEPS: u64 = 2_000_000;
/// How far past a missing packet's window the runner looks to report what came instead.
const LOOK_AHEAD: u64 = 5_000_000_000;
/// Virtual time after which a run is abandoned (a script never lasts this long).
const MAX_TIME: u64 = 3_600 * 1_000_000_000;

pub(crate) struct Runner<'a> {
    script: &'a Script,
    /// The engine and its egress: the host qdisc between the stack and the wire.
    st: Driver,
    now: u64,
    line: u32,
    /// Local and remote addresses on the wire (IPv4 in the IPv4-mapped-IPv6 variant).
    local_ip: IpAddr,
    remote_ip: IpAddr,
    /// IPv4-mapped-IPv6 variant: sockets are AF_INET6 and their addresses mapped.
    mapped: bool,
    bind_port: u16,
    connect_port: u16,
    listen_port: u16,
    mss: u16,
    mtu: u32,
    tol_ns: u64,
    tol_pct: f64,
    strict_segments: bool,
    defines: BTreeMap<String, String>,
    /// Files the script's commands made (`dd`), by path: their length (all zeros).
    files: BTreeMap<String, u64>,
    /// Bytes waiting in each pipe the script made (their contents are not modelled).
    pipes: Vec<usize>,
    fds: BTreeMap<i64, Fd>,
    nonblock_epoll: BTreeMap<i64, bool>,
    flows: Vec<Flow>,
    cur_flow: Option<usize>,
    next_remote_port: u16,
    /// packetdrill's "socket under test is listening": a SYN opens a new passive connection
    /// (a new remote port) only then, or before any connection exists; set by `listen()`,
    /// cleared by `socket()`, `connect()` and the SYN that opens one. Other SYNs go to the
    /// current connection's 4-tuple, as packetdrill sends them.
    listener_under_test: bool,
    wire: VecDeque<Sent>,
    held: Vec<(Option<u64>, TxToken)>,
    tx_delay: Option<u64>,
    tso: bool,
    gso: bool,
    pending: Vec<Pending>,
    nstat_base: BTreeMap<String, u64>,
    ts_map: BTreeMap<u32, u32>,
    last_tsval: Option<u32>,
    /// The first outbound timestamp matched against the script: (script TSval, live TSval),
    /// packetdrill's base for translating an inbound `ecr` that names no sent value.
    ts_first: Option<(u32, u32)>,
    py: PyEnv,
    sut: Option<i64>,
    last_out_event: Option<usize>,
    steps: u64,
    verbose: bool,
    log: Vec<String>,
}

fn secs(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1000)
}

/// Time from an inbound packet's scripted time to its processing by the stack (the tun
/// write and receive path of packetdrill on Linux), in ns.
const INJECT_LATENCY_NS: u64 = 1_000;

impl<'a> Runner<'a> {
    fn new(script: &'a Script, cfg: &RunConfig) -> Runner<'a> {
        let caps = DeviceCaps {
            // packetdrill's tun device orphans each packet in its xmit routine (skb_orphan),
            // so TSQ and autocorking see the bytes leave during the send itself.
            orphan_at_xmit: true,
            // packetdrill writes inbound packets into that tun device: each arrives in a
            // linear kmalloc'd buffer, which sets its truesize (and so the receive window).
            rx_truesize: shallow_tcp::RxTruesize::TunKmalloc,
            // The tun device does scatter-gather (NETIF_F_SG: a zero-copy send's buffers
            // stay apart, up to MAX_SKB_FRAGS per skb) and copies what it takes (skb_orphan_frags_rx): zero-copy sends
            // through it complete as copied.
            tx_copies: true,
            sg: true,
            ..DeviceCaps::default()
        };
        let mut stack = Stack::with_device(0x5eed_d411, caps);
        // packetdrill starts a script 250 µs after a jiffy edge (HZ=250), and runs an event
        // at an absolute time at that start plus its time, so in a script of absolute times
        // the kernel's timers fire on ticks at script time 3.75 ms + 4k ms. A relative time
        // counts from when the previous event ended on the live system, which lags the
        // script by the kernel's and packetdrill's own processing (0.3–0.7 ms per event
        // measured with tcpdump), so there the grid's place is unknown and the engine takes
        // the mean over it.
        let absolute = script
            .events
            .iter()
            .all(|e| matches!(e.time, EventTime::Absolute(_) | EventTime::Any));
        if absolute {
            stack.set_jiffy_phase(Some(shallow_tcp::Instant::from_micros(3750)));
        }
        let mut st: Driver = Driver::new(stack);
        st.set_qdisc(0, Some(QdiscSpec::Default.build()));
        // The script's --ip_version wins over the run's variant, as packetdrill parses a
        // script's options after its command line.
        let (ipv6, mapped) = match script.option("ip_version") {
            Some(Some("ipv6")) => (true, false),
            Some(Some("ipv4-mapped-ipv6")) => (false, true),
            Some(Some(_)) => (false, false),
            _ if cfg.mapped => (false, true),
            _ => (cfg.ipv6, false),
        };
        // The addresses are those Linux's runner gives packetdrill on its command line for
        // the variant, which overwrite a script's own `--local_ip`/`--remote_ip`
        // (`parse_and_finalize_config`): the Fast Open cookies the kernel hands out depend
        // on them.
        let variant = match (ipv6, mapped) {
            (_, true) => crate::judge::Variant::Ipv4MappedIpv6,
            (true, _) => crate::judge::Variant::Ipv6,
            _ => crate::judge::Variant::Ipv4,
        };
        let fallback = if ipv6 {
            IpAddr::V6(Ipv6Addr::LOCALHOST)
        } else {
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        };
        let local_ip = variant.address("local_ip").unwrap_or(fallback);
        let remote_ip = variant.address("remote_ip").unwrap_or(fallback);
        st.add_address(local_ip);
        let num = |name: &str| {
            script
                .option(name)
                .flatten()
                .and_then(|v| v.parse::<u64>().ok())
        };
        // Like the kernel selftests' runner, IPv6 runs use a 1520-byte MTU so that the MSS
        // the scripts write (1460) is the same for both families.
        let mtu = num("mtu").unwrap_or(if ipv6 { 1520 } else { 1500 }) as u32;
        let default_mss = mtu.saturating_sub(if ipv6 { 60 } else { 40 });
        let mut attrs = RouteAttrs::default();
        if mtu != 1500 {
            attrs.mtu = mtu;
        }
        st.set_route(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0, attrs);
        st.set_route(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0, attrs);
        // The definitions Linux's runner passes for the variant, then the script's own.
        let mut defines: BTreeMap<String, String> = variant
            .defines()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        for (k, v) in script.defines() {
            defines.insert(k.to_string(), v.to_string());
        }
        let last_out_event = script.events.iter().rposition(
            |e| matches!(&e.kind, EventKind::Packet(p) if p.direction == Direction::Outbound),
        );
        Runner {
            script,
            st,
            now: 0,
            line: 0,
            local_ip,
            remote_ip,
            mapped,
            bind_port: num("bind_port").unwrap_or(8080) as u16,
            connect_port: num("connect_port").unwrap_or(8080) as u16,
            listen_port: num("bind_port").unwrap_or(8080) as u16,
            mss: num("mss").unwrap_or(u64::from(default_mss)) as u16,
            mtu,
            tol_ns: num("tolerance_usecs").unwrap_or(4000) * 1000,
            tol_pct: script
                .option("tolerance_percent")
                .flatten()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(12.5),
            strict_segments: script.option("strict_segments").is_some(),
            defines,
            files: BTreeMap::new(),
            pipes: Vec::new(),
            fds: BTreeMap::new(),
            nonblock_epoll: BTreeMap::new(),
            flows: Vec::new(),
            cur_flow: None,
            next_remote_port: 48_000,
            listener_under_test: false,
            wire: VecDeque::new(),
            held: Vec::new(),
            tx_delay: None,
            tso: true,
            gso: true,
            pending: Vec::new(),
            nstat_base: BTreeMap::new(),
            ts_map: BTreeMap::new(),
            last_tsval: None,
            ts_first: None,
            py: PyEnv::new(),
            sut: None,
            last_out_event,
            steps: 0,
            verbose: cfg.verbose,
            log: Vec::new(),
        }
    }

    fn fail<T>(&self, kind: FailKind, reason: impl Into<String>) -> R<T> {
        Err(Stop::Fail {
            line: self.line,
            kind,
            reason: reason.into(),
        })
    }

    fn skip<T>(&self, reason: impl Into<String>) -> R<T> {
        Err(Stop::Skip {
            line: self.line,
            reason: reason.into(),
        })
    }

    fn trace(&mut self, f: impl FnOnce() -> String) {
        if self.verbose {
            let s = f();
            self.log.push(format!("{} {}", secs(self.now), s));
        }
    }

    fn inst(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    // ------------------------------------------------------------------ main loop

    /// The script sets `--name` (with or without a value).
    fn has_option(&self, name: &str) -> bool {
        self.script.options.iter().any(|(n, _)| n == name)
    }

    /// packetdrill resolves every ICMP line's type and code when it parses the script (for
    /// the run's family, `-D` names first): one it cannot resolve fails the run at its line
    /// before the first event.
    fn check_icmp_lines(&mut self) -> R<()> {
        for ev in &self.script.events {
            let EventKind::Packet(p) = &ev.kind else {
                continue;
            };
            let PacketBody::Icmp(i) = &p.body else {
                continue;
            };
            let err = self.icmp_error(i);
            if let Err(e) = pkt::icmp_known(self.remote_ip.is_ipv6(), &err) {
                self.line = ev.line;
                return self.fail(FailKind::Script, e);
            }
        }
        Ok(())
    }

    /// The ICMP error a script line asks for; a `-D` name (the IPv4 variants define `CODE`)
    /// stands for its value.
    fn icmp_error(&self, i: &IcmpSpec) -> pkt::IcmpError {
        pkt::IcmpError {
            type_name: i.icmp_type.clone(),
            code: i
                .code
                .as_ref()
                .map(|c| self.defines.get(c).cloned().unwrap_or_else(|| c.clone())),
            mtu: i.mtu,
        }
    }

    fn check_options(&self) -> R<()> {
        for (name, value) in &self.script.options {
            match name.as_str() {
                "tolerance_usecs" | "tolerance_percent" | "mss" | "mtu" | "local_ip"
                | "remote_ip" | "bind_port" | "connect_port" | "strict_segments" | "define"
                | "tcp_ts_tick_usecs" | "tcp_ts_ecr_scaled" | "verbose" | "send_omit_free"
                | "gateway_ip" | "netmask_ip" | "speed" | "init_scripts" => {}
                "ip_version"
                    if matches!(value.as_deref(), Some("ipv4" | "ipv6" | "ipv4-mapped-ipv6")) => {}
                _ => {
                    return self.skip(format!(
                        "unsupported option --{name}{}",
                        value.as_ref().map(|v| format!("={v}")).unwrap_or_default()
                    ))
                }
            }
        }
        Ok(())
    }

    fn run(&mut self) -> R<()> {
        self.check_options()?;
        self.check_icmp_lines()?;
        if let Some(c) = &self.script.init_command {
            self.line = c.line;
            let text = c.text.clone();
            self.command(&text)?;
        }
        let mut prev = 0u64;
        for idx in 0..self.script.events.len() {
            let ev = &self.script.events[idx];
            self.line = ev.line;
            let (lo, hi) = match ev.time {
                EventTime::Absolute(t) => (t, t),
                EventTime::Relative(d) => (prev + d, prev + d),
                EventTime::Range {
                    lo,
                    lo_relative,
                    hi,
                    hi_relative,
                } => (
                    if lo_relative { prev + lo } else { lo },
                    if hi_relative { prev + hi } else { hi },
                ),
                EventTime::Any => (self.now, u64::MAX),
            };
            match &ev.kind {
                EventKind::Packet(p) if p.direction == Direction::Outbound => {
                    let any = ev.time == EventTime::Any;
                    prev = self.expect_packet(p, prev, lo, hi, any)?;
                }
                kind => {
                    let t = lo.max(self.now);
                    self.advance_to(t)?;
                    self.check_stale(idx)?;
                    match kind {
                        EventKind::Packet(p) => self.inject(p)?,
                        EventKind::Syscall(call) => {
                            let end = ev.end_time.map(|e| match ev.time {
                                EventTime::Relative(_) => prev + e,
                                _ => e,
                            });
                            self.syscall(idx, call, end.unwrap_or(t).max(t))?
                        }
                        EventKind::Command(text) => self.command(text)?,
                        EventKind::Code(code) => self.code(code)?,
                    }
                    self.pump()?;
                    prev = t;
                }
            }
        }
        // Blocking calls still pending must return by their end time.
        while let Some(end) = self.pending.iter().map(|p| p.end).min() {
            let limit = end + self.tolerance(end, end);
            self.advance_to(limit + 1)?;
        }
        if let Some(c) = &self.script.cleanup_command {
            self.line = c.line;
            let text = c.text.clone();
            self.command(&text)?;
        }
        for s in std::mem::take(&mut self.wire) {
            let at = s.at;
            self.trace(|| {
                format!(
                    "(unchecked after the last `>` line, sent at {}) {}",
                    secs(at),
                    describe_raw(&s.data)
                )
            });
        }
        Ok(())
    }

    fn tolerance(&self, expected: u64, prev: u64) -> u64 {
        let pct = (expected.saturating_sub(prev) as f64 * self.tol_pct / 100.0) as u64;
        self.tol_ns.max(pct)
    }

    /// The next instant something happens by itself.
    fn next_deadline(&self) -> Option<u64> {
        // The engine's timers and the qdisc's watchdog (fq's EDT hold).
        let mut n: Option<u64> = self.st.poll_deadline(0, self.inst()).map(|i| i.as_nanos());
        let mut take = |x: u64| n = Some(n.map_or(x, |m| m.min(x)));
        for (due, _) in &self.held {
            if let Some(d) = due {
                take(*d);
            }
        }
        for p in &self.pending {
            if let Some(d) = p.deadline {
                take(d);
            }
            take(p.end + self.tolerance(p.end, p.start) + 1);
        }
        n
    }

    /// Moves the clock to `t`, running everything due on the way.
    fn advance_to(&mut self, t: u64) -> R<()> {
        loop {
            match self.next_deadline() {
                Some(n) if n <= t => self.step_to(n)?,
                _ => break,
            }
        }
        self.step_to(t)
    }

    fn step_to(&mut self, t: u64) -> R<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS || t > MAX_TIME {
            return self.fail(
                FailKind::Other,
                "runaway run: too many steps (a timer keeps firing?)",
            );
        }
        self.now = self.now.max(t);
        let now = self.inst();
        self.st.run_timers(now);
        self.release();
        let (due, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(d, _)| d.is_some_and(|d| d <= self.now));
        self.held = rest;
        for (_, tok) in due {
            self.st.tx_complete(now, tok);
        }
        self.pump()?;
        self.check_overdue()
    }

    fn check_overdue(&self) -> R<()> {
        for p in &self.pending {
            let limit = p.end + self.tolerance(p.end, p.start);
            if self.now > limit {
                let ev = &self.script.events[p.ev];
                return Err(Stop::Fail {
                    line: ev.line,
                    kind: FailKind::Timing,
                    reason: format!(
                        "blocking call {} did not return by {} (expected at {})",
                        call_name(&ev.kind),
                        secs(limit),
                        secs(p.end)
                    ),
                });
            }
        }
        Ok(())
    }

    /// Drains transmits and wake-ups and retries pending calls until nothing changes.
    fn pump(&mut self) -> R<()> {
        loop {
            let mut progress = false;
            if self.egress() {
                progress = true;
            }
            while let Some(w) = self.st.poll_wakeup() {
                progress = true;
                self.on_wakeup(w.socket, w.events);
            }
            if self.retry_pending()? {
                progress = true;
            }
            if !progress {
                return Ok(());
            }
            self.steps += 1;
            if self.steps > MAX_STEPS {
                return self.fail(
                    FailKind::Other,
                    "runaway run: the stack keeps producing work",
                );
            }
        }
    }

    fn on_wakeup(&mut self, s: SocketId, events: u32) {
        for p in self.pending.iter_mut() {
            if p.socks.contains(&s) && (events == 0 || p.interest == 0 || events & p.interest != 0)
            {
                p.woken = true;
            }
        }
        let fds: Vec<i64> = self
            .fds
            .iter()
            .filter(|(_, f)| matches!(f, Fd::Sock(x) if *x == s))
            .map(|(k, _)| *k)
            .collect();
        for f in self.fds.values_mut() {
            if let Fd::Epoll(items) = f {
                for it in items.iter_mut() {
                    let interest = it.events | sys::EPOLLERR | sys::EPOLLHUP;
                    if fds.contains(&it.fd) && (events == 0 || events & interest != 0) {
                        it.rdy = true;
                    }
                }
            }
        }
    }

    /// Fails on a packet still on the wire that was sent well before the current event,
    /// when a later `>` line exists.
    fn check_stale(&mut self, idx: usize) -> R<()> {
        if self.last_out_event.is_none_or(|l| l < idx) {
            return Ok(());
        }
        // A socket() before the next `>` line makes a new socket the one under test, and
        // packetdrill then lets the older connections' packets go unchecked.
        let new_socket_first = self.script.events[idx..]
            .iter()
            .take_while(
                |e| !matches!(&e.kind, EventKind::Packet(p) if p.direction == Direction::Outbound),
            )
            .any(|e| matches!(&e.kind, EventKind::Syscall(c) if c.name == "socket"));
        if new_socket_first {
            return Ok(());
        }
        while let Some(s) = self.wire.front() {
            let flow = pkt::parse_live(&s.data).and_then(|l| self.flow_of(&l));
            let under_test = flow.is_some() && flow == self.cur_flow;
            if !under_test {
                // packetdrill ignores packets of flows the script does not know, and those of
                // connections no longer under test.
                self.wire.pop_front();
                continue;
            }
            if s.at + self.tol_ns < self.now {
                let d = self.describe_live(&s.data);
                return self.fail(FailKind::Packet, format!(
                    "unexpected outbound packet {d} (sent at {}, no `>` line expects it before this event at {})",
                    secs(s.at),
                    secs(self.now)
                ));
            }
            break;
        }
        Ok(())
    }

    // ------------------------------------------------------------------ flows and mapping

    fn flow_of(&self, l: &Live) -> Option<usize> {
        if l.dst.ip() != self.remote_ip || l.src.ip() != self.local_ip {
            return None;
        }
        self.flows
            .iter()
            .rposition(|f| f.local_port == Some(l.src.port()) && f.remote_port == l.dst.port())
            .or_else(|| {
                self.flows
                    .iter()
                    .rposition(|f| f.local_port.is_none() && f.remote_port == l.dst.port())
            })
    }

    /// When the script injects a packet before any `>` line showed the stack's SYN (or
    /// SYN-ACK), take the ISN (and local port) from that packet, still on the wire.
    fn learn_isn_from_wire(&mut self, fi: usize) {
        let found = self.wire.iter().find_map(|s| {
            let l = pkt::parse_live(&s.data)?;
            (l.flags.contains(TcpFlags::SYN) && self.flow_of(&l) == Some(fi)).then_some(l)
        });
        if let Some(l) = found {
            self.flows[fi].local_port = Some(l.src.port());
            self.flows[fi].isn = Some(l.seq);
        }
    }

    fn describe_live(&self, data: &[u8]) -> String {
        let Some(mut l) = pkt::parse_live(data) else {
            return describe_raw(data);
        };
        let fi = self.flow_of(&l);
        if let Some(f) = fi {
            self.relative_ack(f, &mut l);
        }
        let isn = fi.and_then(|i| self.flows[i].isn).unwrap_or(0);
        describe(&l, isn)
    }

    /// The acknowledgement number of a live packet as the script writes it: relative to the
    /// peer's ISN, except on a SYN (packetdrill's `local_seq_script_to_live_offset` mirror).
    fn relative_ack(&self, fi: usize, l: &mut Live) {
        let isn = self.flows[fi].remote_isn;
        if !l.flags.contains(TcpFlags::SYN) {
            l.ack = l.ack.wrapping_sub(isn);
        }
        // SACK blocks name the peer's sequence numbers too.
        for o in l.opts.iter_mut() {
            if let TcpOptionRepr::Sack(b) = o {
                let rel: Vec<(u32, u32)> = b
                    .iter()
                    .map(|(a, z)| (a.wrapping_sub(isn), z.wrapping_sub(isn)))
                    .collect();
                if let Ok(nb) = SackBlocks::from_slice(&rel) {
                    *b = nb;
                }
            }
        }
    }

    // ------------------------------------------------------------------ outbound

    /// Waits for the next wire packet of a known flow, up to `deadline`.
    fn next_wire(&mut self, deadline: u64) -> R<Option<(Sent, Live, usize)>> {
        loop {
            if let Some(s) = self.wire.pop_front() {
                match pkt::parse_live(&s.data) {
                    Some(mut l) => match self.flow_of(&l) {
                        // As packetdrill sniffs, only the connection under test's packets
                        // count; an older connection's are let go.
                        Some(f) if self.cur_flow != Some(f) => {
                            let d = describe_raw(&s.data);
                            self.trace(|| format!("ignored packet of an earlier connection: {d}"));
                        }
                        Some(f) => {
                            self.relative_ack(f, &mut l);
                            return Ok(Some((s, l, f)));
                        }
                        None => {
                            let d = describe_raw(&s.data);
                            self.trace(|| format!("ignored packet of an unknown flow: {d}"));
                        }
                    },
                    None => {
                        let d = describe_raw(&s.data);
                        self.trace(|| format!("ignored non-TCP packet: {d}"));
                    }
                }
                continue;
            }
            match self.next_deadline() {
                Some(n) if n <= deadline => self.step_to(n)?,
                _ => return Ok(None),
            }
        }
    }

    fn expect_packet(&mut self, p: &PacketSpec, prev: u64, lo: u64, hi: u64, any: bool) -> R<u64> {
        let t = match &p.body {
            PacketBody::Tcp(t) => t,
            PacketBody::Udp { .. } => return self.skip("UDP packets are not supported"),
            PacketBody::Icmp(_) => {
                return self.skip("outbound ICMP is not supported (the engine sends none)")
            }
        };
        let tol = if any { 0 } else { self.tolerance(hi, prev) };
        let deadline = if any {
            self.now + 10_000_000_000
        } else {
            hi.saturating_add(tol)
        };
        let expected = describe_spec(t);
        let Some((first, mut live, fi)) = self.next_wire(deadline)? else {
            // Look ahead (the run fails anyway) to say what came instead, and when. As in
            // packetdrill, which waits past the window: a late packet that matches is a
            // timing failure, one that does not (or none) a packet failure.
            let (late, kind) = match self.next_wire(deadline.saturating_add(LOOK_AHEAD)) {
                Ok(Some((s, l, f))) => {
                    let isn = self.flows[f].isn.unwrap_or(0);
                    let kind = match self.compare(t, &p.ip, &l, isn) {
                        Ok(()) => FailKind::Timing,
                        Err(_) => FailKind::Packet,
                    };
                    let d = self.describe_live(&s.data);
                    (format!("; the next packet was {d} at {}", secs(s.at)), kind)
                }
                _ => (String::new(), FailKind::Packet),
            };
            return self.fail(
                kind,
                format!(
                    "expected outbound packet `{expected}` at {} but none was sent by {}{late}",
                    secs(lo),
                    secs(deadline)
                ),
            );
        };
        let mut at = first.at;
        if self.flows[fi].local_port.is_none() {
            self.flows[fi].local_port = Some(live.src.port());
        }
        if self.flows[fi].isn.is_none() {
            // A SYN's sequence number is our ISN whatever the script writes there (packetdrill
            // maps the script's SYN sequence number to the live one and checks nothing).
            let written = if live.flags.contains(TcpFlags::SYN) {
                0
            } else {
                t.seq_start
            };
            self.flows[fi].isn = Some(live.seq.wrapping_sub(written));
        }
        // Concatenate consecutive segments up to the expected (TSO-sized) length.
        let mut pieces = 1;
        if !self.strict_segments && live.len < t.len && !live.flags.contains(TcpFlags::SYN) {
            while live.len < t.len {
                let Some((next, nl, nf)) = self.next_wire(deadline)? else {
                    break;
                };
                if nf != fi || nl.seq != live.seq.wrapping_add(live.len) {
                    self.wire.push_front(next);
                    break;
                }
                at = next.at;
                pieces += 1;
                live.len += nl.len;
                live.flags = nl.flags;
                live.ack = nl.ack;
                live.csum_ok &= nl.csum_ok;
            }
        }
        let isn = self.flows[fi].isn.unwrap_or(0);
        let mut got = describe(&live, isn);
        if pieces > 1 {
            got += &format!(" (concatenated from {pieces} packets)");
        }
        self.trace(|| format!("> {got}"));
        if let Err(why) = self.compare(t, &p.ip, &live, isn) {
            return self.fail(
                FailKind::Packet,
                format!("{why}: expected `{expected}`, got `{got}`"),
            );
        }
        // Time is checked after the fields, as packetdrill does.
        if !any && first.at + tol < lo {
            let d = self.describe_live(&first.data);
            return self.fail(FailKind::Timing, format!(
                "outbound packet {d} sent at {}, too early for `{expected}` expected at {} (tolerance {} us)",
                secs(first.at),
                secs(lo),
                tol / 1000
            ));
        }
        self.cur_flow = Some(fi);
        Ok(at)
    }

    /// Strict comparison of an outbound packet with its `>` line (packetdrill's rules).
    fn compare(&mut self, t: &TcpSpec, ip: &IpInfo, l: &Live, isn: u32) -> Result<(), String> {
        if !l.csum_ok {
            return Err("bad checksum".into());
        }
        if l.flags != t.flags {
            return Err("flags differ".into());
        }
        if !l.flags.contains(TcpFlags::SYN) && l.seq.wrapping_sub(isn) != t.seq_start {
            return Err("sequence number differs".into());
        }
        if l.len != t.len {
            return Err("payload length differs".into());
        }
        if l.flags.contains(TcpFlags::ACK) && l.ack != t.ack.unwrap_or(0) {
            return Err("ack number differs".into());
        }
        if let Some(w) = t.win {
            if u32::from(l.win) != w {
                return Err("window differs".into());
            }
        }
        if let Some(u) = t.urg {
            if u32::from(l.urg) != u {
                return Err("urgent pointer differs".into());
            }
        }
        if let TcpOptions::List(want) = &t.options {
            let got: Vec<&TcpOptionRepr> = l.opts.iter().collect();
            let want: Vec<&TcpOption> = want
                .iter()
                .filter(|o| !matches!(o, TcpOption::Eol))
                .collect();
            if got.len() != want.len() {
                return Err("options differ".into());
            }
            let mut ts = None;
            for (g, w) in got.iter().zip(&want) {
                let ok = match (g, w) {
                    (TcpOptionRepr::Nop, TcpOption::Nop) => true,
                    (TcpOptionRepr::Mss(a), TcpOption::Mss(b)) => a == b,
                    (TcpOptionRepr::WindowScale(a), TcpOption::WindowScale(b)) => a == b,
                    (TcpOptionRepr::SackPermitted, TcpOption::SackPermitted) => true,
                    (TcpOptionRepr::Sack(a), TcpOption::Sack(b)) => a.as_slice() == b.as_slice(),
                    (TcpOptionRepr::Timestamps { tsval, .. }, TcpOption::Timestamp { val, .. }) => {
                        ts = Some((*val, *tsval));
                        true
                    }
                    (
                        TcpOptionRepr::Unknown { kind, data },
                        TcpOption::Unknown { kind: k, data: d },
                    ) => kind == k && data == d,
                    (TcpOptionRepr::Unknown { kind: 34, data }, TcpOption::FastOpen(c)) => {
                        self.cookie_matches(data, c.as_deref())
                    }
                    (TcpOptionRepr::Unknown { kind: 254, data }, TcpOption::FastOpenExp(c)) => {
                        data.len() >= 2
                            && data[..2] == [0xf9, 0x89]
                            && self.cookie_matches(&data[2..], c.as_deref())
                    }
                    _ => false,
                };
                if !ok {
                    return Err("options differ".into());
                }
            }
            if let Some((script, live)) = ts {
                self.ts_map.insert(script, live);
                self.ts_first.get_or_insert((script, live));
            }
        }
        for o in &l.opts {
            if let TcpOptionRepr::Timestamps { tsval, .. } = o {
                self.last_tsval = Some(*tsval);
            }
        }
        if let Some(e) = ip.ecn {
            let bits = l.tos & 3;
            let ok = match e {
                Ecn::NotEct => bits == 0,
                Ecn::Ect1 => bits == 1,
                Ecn::Ect0 => bits == 2,
                Ecn::Ce => bits == 3,
                Ecn::Ect01 => bits == 1 || bits == 2,
            };
            if !ok {
                return Err(format!("ECN codepoint differs (got {bits:#04b})"));
            }
        }
        if let Some(tos) = ip.tos {
            if l.tos != tos {
                return Err(format!("TOS differs (got {:#04x})", l.tos));
            }
        }
        if let Some(ttl) = ip.ttl {
            if l.ttl != ttl {
                return Err(format!("TTL differs (got {})", l.ttl));
            }
        }
        if let (Some(fl), Some(got)) = (ip.flowlabel, l.flowlabel) {
            if fl != got {
                return Err(format!("flow label differs (got {got:#x})"));
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ inbound

    fn inbound_flow(&mut self, t: &TcpSpec) -> R<usize> {
        let syn_only = t.flags.contains(TcpFlags::SYN) && !t.flags.contains(TcpFlags::ACK);
        if syn_only {
            let reuse = self.cur_flow.filter(|&i| {
                let f = &self.flows[i];
                !f.active && !f.saw_non_syn && f.syn_seq == Some(t.seq_start)
            });
            if let Some(i) = reuse {
                return Ok(i);
            }
            if let (Some(i), false) = (self.cur_flow, self.listener_under_test) {
                self.flows[i].saw_non_syn = true;
                return Ok(i);
            }
            self.listener_under_test = false;
            let port = self.next_remote_port;
            self.next_remote_port = self.next_remote_port.wrapping_add(1).max(1024);
            self.flows.push(Flow {
                local_port: Some(self.listen_port),
                remote_port: port,
                isn: None,
                active: false,
                syn_seq: Some(t.seq_start),
                saw_non_syn: false,
                remote_isn: 0,
                remote_isn_set: false,
            });
            self.cur_flow = Some(self.flows.len() - 1);
            return Ok(self.flows.len() - 1);
        }
        match self.cur_flow {
            Some(i) => {
                self.flows[i].saw_non_syn = true;
                Ok(i)
            }
            None => self.fail(
                FailKind::Script,
                "inbound packet but no connection exists (no SYN and no connect())",
            ),
        }
    }

    /// The bytes of a Fast Open cookie as the script writes it: hex, a `-D` name, or none.
    fn cookie_of(&self, text: Option<&str>) -> R<Vec<u8>> {
        let Some(t) = text else {
            return Ok(Vec::new());
        };
        let t = self.defines.get(t).map(String::as_str).unwrap_or(t);
        match crate::ast::cookie_bytes(t) {
            Some(b) => Ok(b),
            None => self.skip(format!("Fast Open cookie {t:?} is not hex")),
        }
    }

    /// Whether the cookie bytes a packet carries are the ones the script writes.
    fn cookie_matches(&self, got: &[u8], want: Option<&str>) -> bool {
        match want {
            None => got.is_empty(),
            Some(t) => {
                let t = self.defines.get(t).map(String::as_str).unwrap_or(t);
                crate::ast::cookie_bytes(t).is_some_and(|b| b == got)
            }
        }
    }

    fn inject(&mut self, p: &PacketSpec) -> R<()> {
        let t = match &p.body {
            PacketBody::Tcp(t) => t,
            PacketBody::Udp { .. } => return self.skip("UDP packets are not supported"),
            PacketBody::Icmp(i) => return self.inject_icmp(i),
        };
        let fi = self.inbound_flow(t)?;
        if self.flows[fi].isn.is_none() {
            self.learn_isn_from_wire(fi);
        }
        // packetdrill takes the peer's ISN once per connection: from the SYN that opens a
        // passive one, from the first SYN-ACK of an active one (a later SYN, such as one
        // answered by a challenge ACK, changes nothing).
        if t.flags.contains(TcpFlags::SYN) && !self.flows[fi].remote_isn_set {
            self.flows[fi].remote_isn = t.seq_start;
            self.flows[fi].remote_isn_set = true;
        }
        let flow = self.flows[fi].clone();
        let Some(local_port) = flow.local_port else {
            return self.fail(
                FailKind::Script,
                "inbound packet before the stack's SYN revealed its port",
            );
        };
        let needs_isn = t.flags.contains(TcpFlags::ACK)
            || matches!(&t.options, TcpOptions::List(o) if o.iter().any(|x| matches!(x, TcpOption::Sack(_))));
        let isn = match (flow.isn, needs_isn) {
            (Some(i), _) => i,
            (None, false) => 0,
            (None, true) => {
                return self.fail(FailKind::Script, "inbound packet acknowledges data but the stack's ISN is unknown (no outbound SYN seen)")
            }
        };
        let ack = if t.flags.contains(TcpFlags::ACK) {
            isn.wrapping_add(t.ack.unwrap_or(0))
        } else {
            t.ack.unwrap_or(0)
        };
        let mut options = Vec::new();
        if let TcpOptions::List(list) = &t.options {
            for o in list {
                options.push(match o {
                    TcpOption::Nop => TcpOptionRepr::Nop,
                    TcpOption::Eol => TcpOptionRepr::Eol,
                    TcpOption::Mss(m) => TcpOptionRepr::Mss(*m),
                    TcpOption::WindowScale(w) => TcpOptionRepr::WindowScale(*w),
                    TcpOption::SackPermitted => TcpOptionRepr::SackPermitted,
                    TcpOption::Sack(blocks) => {
                        let mapped: Vec<(u32, u32)> = blocks
                            .iter()
                            .map(|(l, r)| (isn.wrapping_add(*l), isn.wrapping_add(*r)))
                            .collect();
                        match SackBlocks::from_slice(&mapped) {
                            Ok(b) => TcpOptionRepr::Sack(b),
                            Err(e) => {
                                return self.fail(FailKind::Script, format!("bad SACK option: {e}"))
                            }
                        }
                    }
                    TcpOption::Timestamp { val, ecr } => {
                        let live_ecr = if *ecr == 0 {
                            0
                        } else if let Some(v) = self.ts_map.get(ecr) {
                            *v
                        } else if let Some((script, live)) = self
                            .ts_first
                            .filter(|_| self.has_option("tcp_ts_ecr_scaled"))
                        {
                            // packetdrill's --tcp_ts_ecr_scaled: the script's value as an
                            // offset from the first sent TSval.
                            ecr.wrapping_sub(script).wrapping_add(live)
                        } else if let Some(v) = self.last_tsval {
                            // packetdrill errors out here; we echo the latest TSval we saw.
                            v
                        } else {
                            *ecr
                        };
                        TcpOptionRepr::Timestamps {
                            tsval: *val,
                            tsecr: live_ecr,
                        }
                    }
                    TcpOption::Unknown { kind, data } => TcpOptionRepr::Unknown {
                        kind: *kind,
                        data: data.clone(),
                    },
                    TcpOption::FastOpen(c) => TcpOptionRepr::Unknown {
                        kind: 34,
                        data: self.cookie_of(c.as_deref())?,
                    },
                    // A TCP-MD5 signature (RFC 2385) as written: up to 16 bytes of hex, the
                    // option 2 bytes longer (packetdrill's `new_md5_option`; one shorter
                    // than 16 is no signature to the receiver).
                    TcpOption::Md5(hex) => match crate::ast::cookie_bytes(hex) {
                        Some(d) if d.len() <= 16 => TcpOptionRepr::Unknown { kind: 19, data: d },
                        _ => return self.fail(FailKind::Script, format!("bad md5 digest {hex}")),
                    },
                    TcpOption::FastOpenExp(c) => {
                        let mut data = vec![0xf9, 0x89];
                        data.extend(self.cookie_of(c.as_deref())?);
                        TcpOptionRepr::Unknown { kind: 254, data }
                    }
                });
            }
        }
        let Ok(window) = u16::try_from(t.win.unwrap_or(65535)) else {
            return self.fail(FailKind::Script, "window does not fit in 16 bits");
        };
        let seq = if t.flags.contains(TcpFlags::SYN) {
            t.seq_start
        } else {
            t.seq_start.wrapping_add(self.flows[fi].remote_isn)
        };
        let repr = TcpRepr {
            src_port: flow.remote_port,
            dst_port: local_port,
            seq,
            ack,
            flags: t.flags,
            window,
            urgent: t.urg.unwrap_or(0) as u16,
            options,
        };
        let mut tos = p.ip.tos.unwrap_or(0);
        if let Some(e) = p.ip.ecn {
            tos = (tos & !3)
                | match e {
                    Ecn::NotEct => 0,
                    Ecn::Ect1 => 1,
                    Ecn::Ect0 | Ecn::Ect01 => 2,
                    Ecn::Ce => 3,
                };
        }
        let fields = IpFields {
            tos,
            ttl: p.ip.ttl.unwrap_or(64),
            flowlabel: p.ip.flowlabel.unwrap_or(0),
            ident: 0,
        };
        let src = SocketAddr::new(self.remote_ip, flow.remote_port);
        let dst = SocketAddr::new(self.local_ip, local_port);
        let ip_hdr = if self.local_ip.is_ipv6() { 40 } else { 20 };
        let total = ip_hdr + repr.header_len() + t.len as usize;
        if total > 65_535 {
            return self.skip(format!(
                "inbound payload of {} bytes does not fit one IP packet",
                t.len
            ));
        }
        let data = match pkt::build_tcp(src, dst, &repr, t.len as usize, fields) {
            Ok(d) => d,
            Err(e) => return self.fail(FailKind::Script, e),
        };
        let gso = (total > self.mtu as usize).then_some(self.mss);
        self.trace(|| {
            format!(
                "< {}{}",
                describe_spec(t),
                gso.map(|g| format!(" (GSO {g})")).unwrap_or_default()
            )
        });
        // packetdrill writes the packet to tun and the kernel's receive path runs after it,
        // so TCP sees it a little after the scripted time (a syscall reaches TCP sooner).
        self.step_to(self.now + INJECT_LATENCY_NS)?;
        let now = self.inst();
        self.st.input(now, &data, gso);
        Ok(())
    }

    /// An inbound ICMP error about the current connection, as packetdrill builds it: it
    /// quotes an IP header from us to the peer and the first 8 bytes of a TCP header (the
    /// ports and the script's `[start:...]` as our sequence number, mapped to the live one).
    fn inject_icmp(&mut self, i: &IcmpSpec) -> R<()> {
        let Some(fi) = self.cur_flow else {
            return self.fail(
                FailKind::Script,
                "inbound ICMP but no connection exists (no SYN and no connect())",
            );
        };
        let flow = self.flows[fi].clone();
        let Some(local_port) = flow.local_port else {
            return self.fail(
                FailKind::Script,
                "inbound ICMP before the stack's SYN revealed its port",
            );
        };
        let start = i.echoed.map_or(0, |(s, _, _)| s);
        let seq = flow.isn.unwrap_or(0).wrapping_add(start);
        let quoted_tcp = TcpRepr {
            src_port: local_port,
            dst_port: flow.remote_port,
            seq,
            ack: 0,
            flags: TcpFlags::ACK,
            window: 0,
            urgent: 0,
            options: Vec::new(),
        };
        let fields = IpFields {
            tos: 0,
            ttl: 64,
            flowlabel: 0,
            ident: 0,
        };
        let from = SocketAddr::new(self.local_ip, local_port);
        let to = SocketAddr::new(self.remote_ip, flow.remote_port);
        let quoted = match pkt::build_tcp(from, to, &quoted_tcp, 0, fields) {
            Ok(d) => d,
            Err(e) => return self.fail(FailKind::Script, e),
        };
        let ip_hdr = if self.local_ip.is_ipv6() { 40 } else { 20 };
        let err = self.icmp_error(i);
        let data =
            match pkt::build_icmp_error(self.remote_ip, self.local_ip, &err, &quoted[..ip_hdr + 8])
            {
                Ok(d) => d,
                Err(e) => return self.fail(FailKind::Script, e),
            };
        self.trace(|| {
            format!(
                "< icmp {} {} mtu {:?} seq {start}",
                i.icmp_type,
                i.code.as_deref().unwrap_or(""),
                i.mtu
            )
        });
        self.step_to(self.now + INJECT_LATENCY_NS)?;
        let now = self.inst();
        self.st.input(now, &data, None);
        Ok(())
    }

    // ------------------------------------------------------------------ environment

    fn command(&mut self, text: &str) -> R<()> {
        for a in env::parse_command(text) {
            self.trace(|| format!("env: {a:?}"));
            self.apply(&a)?;
        }
        Ok(())
    }

    fn apply(&mut self, a: &EnvAction) -> R<()> {
        match a {
            EnvAction::Defaults => {
                for &(name, value) in env::DEFAULT_SYSCTLS {
                    if let Err(e) = self.st.sysctl_set(name, &sysctl_value(value)) {
                        // tcp_fack is gone from Linux since 4.15; nothing reads it.
                        if name != "net.ipv4.tcp_fack" {
                            return self.skip(format!(
                                "defaults: engine rejects sysctl {name}={value}: {e}"
                            ));
                        }
                    }
                }
                // defaults.sh ends with `tc qdisc add dev tun0 root pfifo`.
                self.set_qdisc(QdiscSpec::Pfifo(egress::TUN_TXQUEUELEN));
            }
            EnvAction::Sysctl { name, value } => {
                if let Err(e) = self.st.sysctl_set(name, &sysctl_value(value)) {
                    return self.skip(format!("engine rejects sysctl {name}={value}: {e}"));
                }
            }
            EnvAction::MetricsFlush => self.st.tcp_metrics_flush(),
            EnvAction::SysctlRestore => {}
            EnvAction::LinkMtu { dev, mtu } => {
                if dev != "tun0" {
                    return self.skip(format!("no device {dev} (the run has tun0)"));
                }
                // The device MTU is what the default routes carry (see Runner::new).
                self.mtu = *mtu;
                let attrs = RouteAttrs {
                    mtu: *mtu,
                    ..RouteAttrs::default()
                };
                self.st
                    .set_route(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0, attrs);
                self.st
                    .set_route(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 0, attrs);
            }
            EnvAction::Qdisc {
                kind,
                limit,
                params,
                ..
            } => match QdiscSpec::from_tc(kind, *limit, params, self.mtu) {
                Ok(spec) => self.set_qdisc(spec),
                Err(why) => return self.skip(why),
            },
            EnvAction::QdiscDelete { .. } => self.set_qdisc(QdiscSpec::Default),
            EnvAction::Offload { features, .. } => {
                for (f, on) in features {
                    match f.as_str() {
                        "tso" => self.tso = *on,
                        "gso" => self.gso = *on,
                        other => {
                            return self.skip(format!("ethtool feature {other} is not emulated"))
                        }
                    }
                }
            }
            EnvAction::Route(r) => {
                let dst = match r.dst.parse::<IpAddr>() {
                    Ok(a) if a.is_ipv6() == self.remote_ip.is_ipv6() => a,
                    Ok(_) => self.remote_ip,
                    Err(_) => {
                        return self.skip(format!("route destination {} not understood", r.dst))
                    }
                };
                let attrs = RouteAttrs {
                    mtu: r.mtu.unwrap_or(0),
                    advmss: r.advmss.unwrap_or(0),
                    initcwnd: r.initcwnd.unwrap_or(0),
                    quickack: r.quickack.unwrap_or(0) != 0,
                    ..RouteAttrs::default()
                };
                let prefix = if dst.is_ipv6() { 128 } else { 32 };
                self.st.set_route(dst, prefix, attrs);
            }
            EnvAction::ModuleParam {
                module,
                param,
                value,
            } => {
                if let Err(e) = self
                    .st
                    .cc_params_mut()
                    .set_module_param(module, param, value)
                {
                    return self.skip(format!("module parameter {module}/{param}: {e}"));
                }
            }
            EnvAction::NstatReset => self.nstat_reset(),
            EnvAction::FileZeros { path, len } => {
                self.files.insert(path.clone(), *len);
            }
            EnvAction::FileRemove { path } => {
                self.files.remove(path);
            }
            EnvAction::ProcNetTcp { state, port } => {
                let found = self.st.sockets().iter().any(|r| {
                    r.state as u8 == *state && (r.local.port() == *port || r.remote.port() == *port)
                });
                if !found {
                    return self.fail(
                        FailKind::Command,
                        format!("no socket in state {state:#04x} on port {port} (/proc/net/tcp)"),
                    );
                }
            }
            EnvAction::CounterCheck(c) => {
                let Some(v) = self.st.counters().get(&c.name) else {
                    return self.skip(format!("engine has no counter {}", c.name));
                };
                let base = self.nstat_base.get(&c.name).copied().unwrap_or(0);
                let delta = v.saturating_sub(base);
                self.nstat_reset();
                if !c.op.holds(delta, c.value) {
                    return self.fail(
                        FailKind::Command,
                        format!(
                            "counter {} changed by {delta} since the last nstat (check {:?} {})",
                            c.name, c.op, c.value
                        ),
                    );
                }
            }
            EnvAction::Fallback { first, otherwise } => {
                let mut ok = true;
                for x in first {
                    match self.apply(x) {
                        Ok(()) => {}
                        Err(Stop::Skip { .. }) => {
                            ok = false;
                            break;
                        }
                        Err(e) => return Err(e),
                    }
                }
                if !ok {
                    for x in otherwise {
                        self.apply(x)?;
                    }
                }
            }
            EnvAction::Unsupported(r) => return self.skip(r.clone()),
        }
        Ok(())
    }

    fn nstat_reset(&mut self) {
        self.nstat_base = self
            .st
            .counters()
            .iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect();
    }

    // ------------------------------------------------------------------ python

    fn code(&mut self, code: &str) -> R<()> {
        let program = match python::parse(code) {
            Ok(p) => p,
            Err(e) => return self.skip(format!("python snippet: {e}")),
        };
        let Some(fd) = self.sut else {
            return self.skip("python snippet but no socket under test");
        };
        let Some(Fd::Sock(s)) = self.fds.get(&fd) else {
            return self.fail(
                FailKind::Script,
                format!("python snippet: socket under test fd {fd} is closed"),
            );
        };
        let s = *s;
        let info = match self.st.tcp_info(self.inst(), s) {
            Ok(i) => i,
            Err(e) => return self.fail(FailKind::Other, format!("tcp_info: {e}")),
        };
        let mem = match self.st.meminfo(s) {
            Ok(m) => m,
            Err(e) => return self.fail(FailKind::Other, format!("meminfo: {e}")),
        };
        for name in program.free_names() {
            if name.starts_with("tcpi_") && sys::tcpi(&info, &name).is_none() {
                return self.skip(format!("engine's tcp_info lacks {name}"));
            }
        }
        let lookup = |n: &str| sys::tcpi(&info, n).or_else(|| sys::sk_meminfo(&mem, n));
        match self.py.run(&program, &lookup) {
            Ok(()) => {
                self.trace(|| format!("%{{ {} }}% holds", code.trim()));
                Ok(())
            }
            Err(e @ (PyError::AssertionFailed { .. } | PyError::Type(_))) => {
                self.fail(FailKind::Assertion, format!("python: {e}"))
            }
            Err(e) => self.skip(format!("python snippet: {e}")),
        }
    }
}

/// Sysctl text as the kernel reads it: `proc_dointvec` parses each number with base 0, so
/// `0x70403` is 459779. Hex numbers are given to the engine in decimal.
fn sysctl_value(v: &str) -> String {
    v.split_whitespace()
        .map(
            |w| match w.strip_prefix("0x").or_else(|| w.strip_prefix("0X")) {
                Some(h) => u64::from_str_radix(h, 16)
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| w.to_string()),
                None => w.to_string(),
            },
        )
        .collect::<Vec<_>>()
        .join(" ")
}

fn call_name(k: &EventKind) -> String {
    match k {
        EventKind::Syscall(c) => format!("{}()", c.name),
        _ => "?".into(),
    }
}

/// A script line for a TCP spec as written.
fn describe_spec(t: &TcpSpec) -> String {
    let mut s = format!(
        "{} {}:{}({})",
        flags_str(t.flags),
        t.seq_start,
        t.seq_end,
        t.len
    );
    if let Some(a) = t.ack {
        s += &format!(" ack {a}");
    }
    if let Some(w) = t.win {
        s += &format!(" win {w}");
    }
    if let Some(u) = t.urg {
        s += &format!(" urg {u}");
    }
    match &t.options {
        TcpOptions::Unchecked => s += " <...>",
        TcpOptions::List(l) if l.is_empty() => {}
        TcpOptions::List(l) => {
            let parts: Vec<String> = l
                .iter()
                .map(|o| match o {
                    TcpOption::Nop => "nop".into(),
                    TcpOption::Eol => "eol".into(),
                    TcpOption::Mss(m) => format!("mss {m}"),
                    TcpOption::WindowScale(w) => format!("wscale {w}"),
                    TcpOption::SackPermitted => "sackOK".into(),
                    TcpOption::Sack(b) => format!(
                        "sack {}",
                        b.iter()
                            .map(|(l, r)| format!("{l}:{r}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    ),
                    TcpOption::Timestamp { val, ecr } => format!("TS val {val} ecr {ecr}"),
                    other => format!("{other:?}"),
                })
                .collect();
            s += &format!(" <{}>", parts.join(","));
        }
    }
    s
}

/// A live packet in script syntax, sequence numbers relative to the stack's ISN.
pub(crate) fn describe(l: &Live, isn: u32) -> String {
    let seq = l.seq.wrapping_sub(isn);
    let mut s = format!(
        "{} {}:{}({})",
        flags_str(l.flags),
        seq,
        seq.wrapping_add(l.len),
        l.len
    );
    if l.flags.contains(TcpFlags::ACK) {
        s += &format!(" ack {}", l.ack);
    }
    s += &format!(" win {}", l.win);
    if !l.opts.is_empty() {
        let parts: Vec<String> = l.opts.iter().map(opt_str).collect();
        s += &format!(" <{}>", parts.join(","));
    }
    s
}

fn describe_raw(data: &[u8]) -> String {
    match pkt::parse_live(data) {
        Some(l) => format!("{} > {}: {}", l.src, l.dst, describe(&l, 0)),
        None => format!("non-TCP packet of {} bytes", data.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `proc_dointvec` reads numbers with base 0 (`0x70403` is hex).
    #[test]
    fn sysctl_values_are_read_like_the_kernel() {
        assert_eq!(sysctl_value("0x70403"), "459779");
        assert_eq!(sysctl_value("4096 0x10 15"), "4096 16 15");
        assert_eq!(sysctl_value("cubic"), "cubic");
    }

    #[test]
    fn tolerance_is_the_larger_of_the_fixed_and_relative_parts() {
        let s =
            crate::parse_script("t", "--tolerance_usecs=1000\n0 close(3) = -1 EBADF\n").unwrap();
        let r = Runner::new(&s, &RunConfig::default());
        // 12.5 % of 100 ms = 12.5 ms > 1 ms.
        assert_eq!(r.tolerance(100_000_000, 0), 12_500_000);
        assert_eq!(r.tolerance(1_000_000, 0), 1_000_000);
    }
}
