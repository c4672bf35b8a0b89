//! Sysctls by their Linux names, with Linux 6.18 defaults and validation.
//!
//! One table ([`TABLE`]) holds every knob: name, default, and the kind of value it takes.
//! Adding a sysctl is one line in the `sysctls!` invocation. Values are read on the hot path by
//! enum index ([`Sysctl`]), never by string.

use thiserror::Error;

/// Errors from [`Sysctls::set`] / [`Sysctls::get`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SysctlError {
    /// No sysctl has this name.
    #[error("unknown sysctl {0:?}")]
    Unknown(String),
    /// The value does not parse or is out of range.
    #[error("invalid value {value:?} for {name}: {reason}")]
    Invalid {
        /// Sysctl name.
        name: String,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: String,
    },
}

/// What values a sysctl accepts.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// One integer in `min..=max`.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// Three integers, each `>= min` (tcp_wmem, tcp_rmem, tcp_mem).
    Triple {
        /// Smallest accepted value for each element.
        min: i64,
    },
    /// A congestion-control name (checked against the algorithms we have).
    CcName,
    /// A qdisc name (recorded for the substrate; the engine does not use it).
    Qdisc,
    /// TCP Fast Open keys (`net.ipv4.tcp_fastopen_key`'s text).
    TfoKey,
}

/// One row of the sysctl table.
#[derive(Clone, Copy, Debug)]
pub struct SysctlDef {
    /// Linux name, e.g. `net.ipv4.tcp_wmem`.
    pub name: &'static str,
    /// Default value as Linux prints it.
    pub default: &'static str,
    /// Accepted values.
    pub kind: Kind,
}

const I32MAX: i64 = i32::MAX as i64;
const U32MAX: i64 = u32::MAX as i64;

const fn int(min: i64, max: i64) -> Kind {
    Kind::Int { min, max }
}
const BOOL: Kind = Kind::Int { min: 0, max: 1 };

macro_rules! sysctls {
    ($( $(#[$doc:meta])* $variant:ident = $name:literal, $default:literal, $kind:expr; )*) => {
        /// Index of a sysctl in [`TABLE`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum Sysctl { $( $(#[$doc])* $variant, )* }
        /// Every sysctl the engine knows, in [`Sysctl`] order.
        pub const TABLE: &[SysctlDef] = &[ $( SysctlDef { name: $name, default: $default, kind: $kind }, )* ];
    };
}

sysctls! {
    /// Send buffer min / initial sk_sndbuf / max for autotuning (bytes).
    tcp_wmem = "net.ipv4.tcp_wmem", "4096 16384 4194304", Kind::Triple { min: 1 };
    /// New AF_INET6 sockets start with IPV6_V6ONLY set (no IPv4-mapped peers).
    bindv6only = "net.ipv6.bindv6only", "0", BOOL;
    /// Receive buffer min / initial sk_rcvbuf / max for autotuning (bytes); `[2]` sets the window scale.
    tcp_rmem = "net.ipv4.tcp_rmem", "4096 131072 33554432", Kind::Triple { min: 1 };
    /// Global TCP memory thresholds in pages (min, pressure, max); default computed for 4 GiB RAM.
    tcp_mem = "net.ipv4.tcp_mem", "49152 65536 98304", Kind::Triple { min: 0 };
    /// RFC 7323 timestamps on SYNs we send (1 = on, with random offset).
    tcp_timestamps = "net.ipv4.tcp_timestamps", "1", int(0, 2);
    /// RFC 2018 SACK.
    tcp_sack = "net.ipv4.tcp_sack", "1", BOOL;
    /// RFC 2883 D-SACK.
    tcp_dsack = "net.ipv4.tcp_dsack", "1", BOOL;
    /// RFC 7323 window scaling.
    tcp_window_scaling = "net.ipv4.tcp_window_scaling", "1", BOOL;
    /// Default congestion control for new sockets.
    tcp_congestion_control = "net.ipv4.tcp_congestion_control", "cubic", Kind::CcName;
    /// Reset cwnd after an idle period (RFC 5681 §4.1).
    tcp_slow_start_after_idle = "net.ipv4.tcp_slow_start_after_idle", "1", BOOL;
    /// SYN retransmissions before connect() fails with ETIMEDOUT.
    tcp_syn_retries = "net.ipv4.tcp_syn_retries", "6", int(1, 127);
    /// SYN-ACK retransmissions for a passive open.
    tcp_synack_retries = "net.ipv4.tcp_synack_retries", "5", int(0, 255);
    /// SYN cookies (1 = when the SYN queue overflows). Cookies are not implemented: full queue drops.
    tcp_syncookies = "net.ipv4.tcp_syncookies", "1", int(0, 2);
    /// Orphaned FIN_WAIT2 lifetime, seconds.
    tcp_fin_timeout = "net.ipv4.tcp_fin_timeout", "60", int(0, I32MAX);
    /// Loss detection: bit 0 = RACK.
    tcp_recovery = "net.ipv4.tcp_recovery", "1", int(0, 7);
    /// Early retransmit / TLP mode (3 = TLP on).
    tcp_early_retrans = "net.ipv4.tcp_early_retrans", "3", int(0, 4);
    /// F-RTO (RFC 5682), 2 = SACK-enhanced.
    tcp_frto = "net.ipv4.tcp_frto", "2", int(0, 2);
    /// Initial reordering degree (dupthresh).
    tcp_reordering = "net.ipv4.tcp_reordering", "3", int(1, 1024);
    /// Upper bound on the reordering degree.
    tcp_max_reordering = "net.ipv4.tcp_max_reordering", "300", int(1, I32MAX);
    /// Minimum TSO segments per super-segment (tcp_tso_autosize).
    tcp_min_tso_segs = "net.ipv4.tcp_min_tso_segs", "2", int(1, 255);
    /// Fraction of cwnd one TSO frame may defer for (tcp_tso_should_defer).
    tcp_tso_win_divisor = "net.ipv4.tcp_tso_win_divisor", "3", int(0, 255);
    /// min_rtt bonus for TSO sizing: log2 of the µs unit (0 disables).
    tcp_tso_rtt_log = "net.ipv4.tcp_tso_rtt_log", "9", int(0, 255);
    /// Pacing ratio (%) in slow start.
    tcp_pacing_ss_ratio = "net.ipv4.tcp_pacing_ss_ratio", "200", int(0, 1000);
    /// Pacing ratio (%) in congestion avoidance.
    tcp_pacing_ca_ratio = "net.ipv4.tcp_pacing_ca_ratio", "120", int(0, 1000);
    /// Max SACK-compression delay, ns.
    tcp_comp_sack_delay_ns = "net.ipv4.tcp_comp_sack_delay_ns", "1000000", int(0, I32MAX);
    /// SACK-compression timer slack, ns.
    tcp_comp_sack_slack_ns = "net.ipv4.tcp_comp_sack_slack_ns", "100000", int(0, I32MAX);
    /// Max compressed SACKs in a row.
    tcp_comp_sack_nr = "net.ipv4.tcp_comp_sack_nr", "44", int(0, 255);
    /// Receive-buffer autotuning.
    tcp_moderate_rcvbuf = "net.ipv4.tcp_moderate_rcvbuf", "1", BOOL;
    /// Packetization-layer path-MTU probing (RFC 4821, `tcp_mtu_probe`): 0 off, 1 only after
    /// an ICMP black hole is suspected (not modelled), 2 always.
    tcp_mtu_probing = "net.ipv4.tcp_mtu_probing", "0", int(0, 2);
    /// Starting MSS for MTU probing (the low end of the search, `search_low`).
    tcp_base_mss = "net.ipv4.tcp_base_mss", "1024", int(1, 65535);
    /// Stop probing when the search range is narrower than this many bytes.
    tcp_probe_threshold = "net.ipv4.tcp_probe_threshold", "8", int(0, I32MAX);
    /// Seconds before a finished MTU search starts over (`tcp_mtu_check_reprobe`).
    tcp_probe_interval = "net.ipv4.tcp_probe_interval", "600", int(0, I32MAX);
    /// Smallest MSS we accept from a peer.
    tcp_min_snd_mss = "net.ipv4.tcp_min_snd_mss", "48", int(48, 65535);
    /// Allow the advertised window to shrink.
    tcp_shrink_window = "net.ipv4.tcp_shrink_window", "0", BOOL;
    /// Maximum RTO, ms.
    tcp_rto_max_ms = "net.ipv4.tcp_rto_max_ms", "120000", int(1000, 120000);
    /// Minimum RTO, µs.
    tcp_rto_min_us = "net.ipv4.tcp_rto_min_us", "200000", int(1, I32MAX);
    /// TSQ cap on bytes below TCP per socket.
    tcp_limit_output_bytes = "net.ipv4.tcp_limit_output_bytes", "4194304", int(0, I32MAX);
    /// Default TCP_NOTSENT_LOWAT (bytes of unsent data).
    tcp_notsent_lowat = "net.ipv4.tcp_notsent_lowat", "4294967295", int(0, U32MAX);
    /// Autocorking of small writes while earlier packets sit in host queues.
    tcp_autocorking = "net.ipv4.tcp_autocorking", "1", BOOL;
    /// Defer regular ACKs while processing the socket backlog (6.7+).
    tcp_backlog_ack_defer = "net.ipv4.tcp_backlog_ack_defer", "1", BOOL;
    /// Shallow extension, not in Linux: 0 turns TCP Small Queues off entirely
    /// (`tcp_small_queue_check` never stops the flow), to measure what TSQ buys.
    shallow_tcp_tsq = "shallow.tcp_tsq", "1", BOOL;
    /// Shallow extension, not in Linux: 0 wakes writers and reports POLLOUT as soon as
    /// notsent < TCP_NOTSENT_LOWAT (X), the behaviour before a74f0fa082b7 / 8ba3c9d1c6d7;
    /// 1 (Linux today) only below X/2.
    shallow_tcp_notsent_lowat_wake_half = "shallow.tcp_notsent_lowat_wake_half", "1", BOOL;
    /// Replies within ato needed to enter pingpong (interactive) mode.
    tcp_pingpong_thresh = "net.ipv4.tcp_pingpong_thresh", "1", int(1, 255);
    /// Window reserved for the application buffer (1/2^n).
    tcp_app_win = "net.ipv4.tcp_app_win", "31", int(0, 31);
    /// Overhead share of rcvbuf; obsolete since 6.6 (the window follows each socket's
    /// scaling ratio, `Connection::win_from_space`): accepted and never read.
    tcp_adv_win_scale = "net.ipv4.tcp_adv_win_scale", "1", int(-31, 31);
    /// Idle time before keepalive probes, seconds.
    tcp_keepalive_time = "net.ipv4.tcp_keepalive_time", "7200", int(1, I32MAX);
    /// Interval between keepalive probes, seconds.
    tcp_keepalive_intvl = "net.ipv4.tcp_keepalive_intvl", "75", int(1, I32MAX);
    /// Unanswered keepalive probes before reset.
    tcp_keepalive_probes = "net.ipv4.tcp_keepalive_probes", "9", int(1, 127);
    /// Retransmissions before reporting to the network layer.
    tcp_retries1 = "net.ipv4.tcp_retries1", "3", int(0, 255);
    /// Retransmissions before the connection is killed (ETIMEDOUT).
    tcp_retries2 = "net.ipv4.tcp_retries2", "15", int(0, 255);
    /// Retransmissions of orphaned sockets (0 means 8).
    tcp_orphan_retries = "net.ipv4.tcp_orphan_retries", "0", int(0, 255);
    /// Cap on half-open connections per listener.
    tcp_max_syn_backlog = "net.ipv4.tcp_max_syn_backlog", "4096", int(1, I32MAX);
    /// Reset connections that overflow the accept queue.
    tcp_abort_on_overflow = "net.ipv4.tcp_abort_on_overflow", "0", BOOL;
    /// RFC 5961 challenge ACKs per second (per netns).
    tcp_challenge_ack_limit = "net.ipv4.tcp_challenge_ack_limit", "2147483647", int(0, I32MAX);
    /// Minimum interval between ACKs answering invalid segments, ms.
    tcp_invalid_ratelimit = "net.ipv4.tcp_invalid_ratelimit", "500", int(0, I32MAX);
    /// ECN (2 = accept when the peer asks). We never negotiate ECN.
    tcp_ecn = "net.ipv4.tcp_ecn", "2", int(0, 5);
    /// TCP Fast Open (RFC 7413, fastopen.rs): 1 client, 2 server, 4 client data without a
    /// cookie, 0x200 server data without one, 0x400 listeners without `TCP_FASTOPEN`.
    tcp_fastopen = "net.ipv4.tcp_fastopen", "1", int(0, I32MAX);
    /// Seconds the client's Fast Open pauses after a SYN with data or its first data timed
    /// out (a middlebox black hole), doubling on each new one up to 64 times; 0: never
    /// paused (the default since Linux 5.14).
    tcp_fastopen_blackhole_timeout_sec = "net.ipv4.tcp_fastopen_blackhole_timeout_sec", "0", int(0, I32MAX);
    /// The longest listen queue (a listen backlog and a Fast Open queue are clamped to it).
    somaxconn = "net.core.somaxconn", "4096", int(0, I32MAX);
    /// TCP Fast Open server keys, `xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx[,backup]` (fastopen.rs);
    /// all zero until set (a random key is made at first use, and then shown here).
    tcp_fastopen_key = "net.ipv4.tcp_fastopen_key", "00000000-00000000-00000000-00000000", Kind::TfoKey;
    /// Linear RTO backoff for thin streams.
    tcp_thin_linear_timeouts = "net.ipv4.tcp_thin_linear_timeouts", "0", BOOL;
    /// Work around peers that treat the window as signed.
    tcp_workaround_signed_windows = "net.ipv4.tcp_workaround_signed_windows", "0", BOOL;
    /// Do not cache per-destination metrics.
    tcp_no_metrics_save = "net.ipv4.tcp_no_metrics_save", "0", BOOL;
    /// RFC 793 urgent-pointer interpretation.
    tcp_stdurg = "net.ipv4.tcp_stdurg", "0", BOOL;
    /// RFC 1337 TIME_WAIT assassination hazards fix.
    tcp_rfc1337 = "net.ipv4.tcp_rfc1337", "0", BOOL;
    /// Window of the min-RTT filter, seconds.
    tcp_min_rtt_wlen = "net.ipv4.tcp_min_rtt_wlen", "300", int(0, 86400);
    /// Cap for SO_SNDBUF (bytes; kernel default, not a distro's).
    wmem_max = "net.core.wmem_max", "212992", int(1, I32MAX);
    /// Cap for SO_RCVBUF (bytes; kernel default).
    rmem_max = "net.core.rmem_max", "212992", int(1, I32MAX);
    /// A socket's option memory (`sk_omem_alloc`): zero-copy sends wait for their
    /// completions in it (zerocopy.rs); a send finding it full fails with ENOBUFS.
    optmem_max = "net.core.optmem_max", "131072", int(0, I32MAX);
    /// The most page fragments a buffer holds (`MAX_SKB_FRAGS`): a zero-copy send's buffers
    /// beyond it start a new one.
    max_skb_frags = "net.core.max_skb_frags", "17", int(1, 17);
    /// `SO_BUSY_POLL` of a new socket (µs a blocking read polls the device before it
    /// sleeps; 0: off). Host-wide in Linux (not per network namespace).
    busy_read = "net.core.busy_read", "0", int(0, I32MAX);
    /// µs `poll`/`epoll` wait polls the devices of its busy-polling sockets before it sleeps
    /// (0: off). Host-wide in Linux.
    busy_poll = "net.core.busy_poll", "0", int(0, I32MAX);
    /// Default qdisc name, for the substrate.
    default_qdisc = "net.core.default_qdisc", "pfifo_fast", Kind::Qdisc;
    /// Local port range for ephemeral ports.
    ip_local_port_range = "net.ipv4.ip_local_port_range", "32768 60999", Kind::Triple { min: 1 };
}

/// Congestion control names accepted by `tcp_congestion_control` / TCP_CONGESTION.
pub const CC_NAMES: &[&str] = &["cubic", "reno"];

/// A parsed sysctl value.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Int(i64),
    Triple([i64; 3]),
    Str(String),
}

/// The current sysctl values of one stack.
#[derive(Clone, Debug)]
pub struct Sysctls {
    values: Vec<Value>,
}

impl Default for Sysctls {
    fn default() -> Self {
        let values = TABLE
            .iter()
            .map(|d| parse(d, d.default).expect("default sysctl values parse"))
            .collect();
        Sysctls { values }
    }
}

fn invalid(d: &SysctlDef, value: &str, reason: &str) -> SysctlError {
    SysctlError::Invalid {
        name: d.name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn parse(d: &SysctlDef, value: &str) -> Result<Value, SysctlError> {
    let v = value.trim();
    match d.kind {
        Kind::Int { min, max } => {
            let n: i64 = v.parse().map_err(|_| invalid(d, value, "not an integer"))?;
            if n < min || n > max {
                return Err(invalid(d, value, &format!("out of range {min}..={max}")));
            }
            Ok(Value::Int(n))
        }
        Kind::Triple { min } => {
            let parts: Vec<&str> = v.split_whitespace().collect();
            if d.name == "net.ipv4.ip_local_port_range" {
                if parts.len() != 2 {
                    return Err(invalid(d, value, "expected two integers"));
                }
                let lo: i64 = parts[0]
                    .parse()
                    .map_err(|_| invalid(d, value, "not an integer"))?;
                let hi: i64 = parts[1]
                    .parse()
                    .map_err(|_| invalid(d, value, "not an integer"))?;
                if !(1..=65535).contains(&lo) || !(1..=65535).contains(&hi) || lo > hi {
                    return Err(invalid(d, value, "need 1 <= low <= high <= 65535"));
                }
                return Ok(Value::Triple([lo, hi, 0]));
            }
            if parts.len() != 3 {
                return Err(invalid(d, value, "expected three integers"));
            }
            let mut out = [0i64; 3];
            for (o, p) in out.iter_mut().zip(parts) {
                *o = p.parse().map_err(|_| invalid(d, value, "not an integer"))?;
                if *o < min || *o > I32MAX {
                    return Err(invalid(
                        d,
                        value,
                        &format!("each value must be in {min}..={I32MAX}"),
                    ));
                }
            }
            Ok(Value::Triple(out))
        }
        Kind::CcName => {
            if CC_NAMES.contains(&v) {
                Ok(Value::Str(v.to_string()))
            } else {
                Err(invalid(d, value, "no such congestion control algorithm"))
            }
        }
        Kind::TfoKey => match crate::fastopen::Keys::parse_sysctl(v) {
            Some(k) => Ok(Value::Str(k.sysctl_text())),
            None => Err(invalid(
                d,
                value,
                "expected xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx[,...]",
            )),
        },
        Kind::Qdisc => {
            if ["pfifo_fast", "pfifo", "fq", "fq_codel", "noqueue"].contains(&v) {
                Ok(Value::Str(v.to_string()))
            } else {
                Err(invalid(d, value, "unknown qdisc"))
            }
        }
    }
}

fn lookup(name: &str) -> Option<usize> {
    let name = name.trim();
    // Accept both dotted names and /proc/sys paths.
    let name = name.strip_prefix("/proc/sys/").unwrap_or(name);
    TABLE
        .iter()
        .position(|d| d.name == name || d.name.replace('.', "/") == name)
}

impl Sysctls {
    /// Set a sysctl by Linux name (`net.ipv4.tcp_wmem` or `/proc/sys/net/ipv4/tcp_wmem`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        let i = lookup(name).ok_or_else(|| SysctlError::Unknown(name.to_string()))?;
        self.values[i] = parse(&TABLE[i], value)?;
        Ok(())
    }

    /// Read a sysctl by Linux name, formatted as Linux prints it (triples tab-separated).
    pub fn get(&self, name: &str) -> Result<String, SysctlError> {
        let i = lookup(name).ok_or_else(|| SysctlError::Unknown(name.to_string()))?;
        Ok(match &self.values[i] {
            Value::Int(n) => n.to_string(),
            Value::Triple(t) if TABLE[i].name == "net.ipv4.ip_local_port_range" => {
                format!("{}\t{}", t[0], t[1])
            }
            Value::Triple(t) => format!("{}\t{}\t{}", t[0], t[1], t[2]),
            Value::Str(s) => s.clone(),
        })
    }

    /// Integer value of a scalar sysctl (0 for non-scalars).
    #[inline]
    pub fn int(&self, s: Sysctl) -> i64 {
        match &self.values[s as usize] {
            Value::Int(n) => *n,
            _ => 0,
        }
    }

    /// A boolean sysctl (non-zero = on).
    #[inline]
    pub fn on(&self, s: Sysctl) -> bool {
        self.int(s) != 0
    }

    /// The three values of a triple sysctl.
    #[inline]
    pub fn triple(&self, s: Sysctl) -> [i64; 3] {
        match &self.values[s as usize] {
            Value::Triple(t) => *t,
            _ => [0; 3],
        }
    }

    /// A string sysctl.
    pub fn str(&self, s: Sysctl) -> &str {
        match &self.values[s as usize] {
            Value::Str(v) => v,
            _ => "",
        }
    }

    /// Iterate `(name, value)` over all sysctls.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        TABLE
            .iter()
            .map(move |d| (d.name, self.get(d.name).unwrap_or_default()))
    }
}

/// Linux's boot-time `tcp_mem` for a machine with `mem_bytes` of free buffer memory
/// (tcp_init_mem: L = pages/16, at least 128; result `[L*3/4, L, 2*(L*3/4)]`, in pages).
pub fn tcp_mem_for_memory(mem_bytes: u64) -> [i64; 3] {
    let pages = (mem_bytes / 4096) as i64;
    let l = (pages / 16).max(128);
    let lo = l / 4 * 3;
    [lo, l, lo * 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_linux_6_18() {
        let s = Sysctls::default();
        assert_eq!(s.get("net.ipv4.tcp_wmem").unwrap(), "4096\t16384\t4194304");
        assert_eq!(s.triple(Sysctl::tcp_rmem), [4096, 131072, 33554432]);
        assert_eq!(s.str(Sysctl::tcp_congestion_control), "cubic");
        assert_eq!(s.int(Sysctl::tcp_notsent_lowat), 4294967295);
        assert_eq!(s.int(Sysctl::tcp_limit_output_bytes), 4194304);
        assert_eq!(s.int(Sysctl::tcp_syn_retries), 6);
        assert_eq!(s.int(Sysctl::tcp_challenge_ack_limit), i32::MAX as i64);
        assert_eq!(tcp_mem_for_memory(4 << 30), s.triple(Sysctl::tcp_mem));
    }

    #[test]
    fn set_validates() {
        let mut s = Sysctls::default();
        s.set("net.ipv4.tcp_wmem", "4096 16384 4194304").unwrap();
        s.set("/proc/sys/net/ipv4/tcp_timestamps", "0").unwrap();
        assert!(!s.on(Sysctl::tcp_timestamps));
        assert!(matches!(
            s.set("net.ipv4.tcp_bogus", "1"),
            Err(SysctlError::Unknown(_))
        ));
        assert!(matches!(
            s.set("net.ipv4.tcp_sack", "2"),
            Err(SysctlError::Invalid { .. })
        ));
        assert!(matches!(
            s.set("net.ipv4.tcp_wmem", "1 2"),
            Err(SysctlError::Invalid { .. })
        ));
        assert!(matches!(
            s.set("net.ipv4.tcp_congestion_control", "bbr9"),
            Err(SysctlError::Invalid { .. })
        ));
        s.set("net.ipv4.tcp_congestion_control", "reno").unwrap();
        s.set("net.ipv4.ip_local_port_range", "40000 40010")
            .unwrap();
        assert_eq!(
            s.get("net.ipv4.ip_local_port_range").unwrap(),
            "40000\t40010"
        );
    }

    #[test]
    fn table_names_unique() {
        for (i, a) in TABLE.iter().enumerate() {
            for b in &TABLE[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
    }
}

/// The stack's configuration: the sysctl table and what else an administrator sets for all
/// sockets. `pub(crate)` fields: every rule reads them, and only the `Stack`'s configuration
/// calls (`sysctl_set`, `cc_params_mut`, `set_rtt_log`) write them.
#[derive(Default)]
pub(crate) struct Config {
    /// The sysctl table.
    pub sysctl: Sysctls,
    /// Congestion-control module parameters.
    pub cc_params: shallow_cc::CcParams,
    /// Per-socket bound of the RTT-sample log; 0 = not recording (the default).
    pub rtt_log_cap: usize,
}
