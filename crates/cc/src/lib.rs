//! Congestion control for Shallow: pure arithmetic on ACK events, time and RTT samples.
//!
//! This crate holds the [`CongestionControl`] trait and two algorithms that behave like
//! Linux 6.x:
//!
//! * [`Cubic`] — CUBIC (RFC 9438) with the original HyStart slow-start exit (ACK train and
//!   delay increase), tuned and rounded the way Linux's `tcp_cubic` module does it. This is
//!   Linux's default algorithm.
//! * [`Reno`] — NewReno window arithmetic (RFC 5681), Linux's built-in `reno`.
//!
//! # Model
//!
//! The design mirrors Linux's `struct tcp_congestion_ops` (our own code and wording). The
//! engine owns the connection; on each event it hands the algorithm a [`CcState`], a small
//! struct that carries the `tcp_sock` fields a congestion controller may read (RTT, sequence
//! numbers, packets in flight) and change (`snd_cwnd`, `snd_ssthresh`, `snd_cwnd_cnt`). The
//! algorithm keeps its own private state (Linux's `inet_csk_ca()` area) inside the boxed
//! object. Nothing here reads a clock: time arrives as `now_us`, microseconds on the
//! engine's clock, and the same inputs always give the same outputs.
//!
//! The engine calls the hooks at the same points Linux calls the `tcp_congestion_ops`
//! members:
//!
//! | hook | when (Linux caller) |
//! |------|---------------------|
//! | [`init`](CongestionControl::init) | connection established (`tcp_init_congestion_control`) |
//! | [`pkts_acked`](CongestionControl::pkts_acked) | an ACK removed packets from the retransmit queue (`tcp_clean_rtx_queue`) — before `cong_avoid` |
//! | [`cong_avoid`](CongestionControl::cong_avoid) | an ACK may raise cwnd (`tcp_cong_avoid`, called from `tcp_cong_control`) |
//! | [`ssthresh`](CongestionControl::ssthresh) | loss or ECN: new ssthresh (`tcp_init_cwnd_reduction`, `tcp_enter_loss`) |
//! | [`set_state`](CongestionControl::set_state) | the `tcpi_ca_state` changes (`tcp_set_ca_state`) |
//! | [`cwnd_event`](CongestionControl::cwnd_event) | `tcp_ca_event()`: transmit after idle, cwnd restart, ECN … |
//! | [`undo_cwnd`](CongestionControl::undo_cwnd) | a reduction proved spurious (`tcp_undo_cwnd_reduction`) |
//!
//! The usual ACK path is therefore:
//!
//! ```
//! use shallow_cc::{by_name, AckSample, CcParams, CcState};
//!
//! let mut cc = by_name("cubic", &CcParams::default()).expect("built in");
//! let mut st = CcState { snd_cwnd: 10, snd_nxt: 10_001, snd_una: 1, ..CcState::default() };
//! cc.init(&mut st, 0);
//! // An ACK for 2 segments arrives 100 ms later with a 100 ms RTT sample:
//! st.snd_una = 2_001;
//! st.is_cwnd_limited = true;
//! cc.pkts_acked(&mut st, &AckSample { pkts_acked: 2, rtt_us: 100_000, in_flight: 10 }, 100_000);
//! cc.cong_avoid(&mut st, 2_001, 2, 100_000);
//! assert_eq!(st.snd_cwnd, 12); // slow start: +1 per segment acked (tcp_slow_start)
//! ```
//!
//! # Adding an algorithm
//!
//! 1. Write a type holding the algorithm's private per-connection state and derive
//!    `Clone` and `Debug` for it.
//! 2. Implement [`CongestionControl`]: at minimum `name`, `ssthresh`, `cong_avoid`,
//!    `undo_cwnd` and `clone_box`; the other hooks may stay empty. Reuse
//!    [`tcp_slow_start`] and [`tcp_cong_avoid_ai`] for the Reno-style parts — they are
//!    the same helpers Linux exports to its modules.
//! 3. Keep to the crate's rules: integer arithmetic, no clock, no global state, no panics
//!    on any input (use saturating or wrapping arithmetic where Linux relies on `u32`).
//! 4. Register it in [`by_name`] and [`available`], add its tunables to [`CcParams`], and
//!    write unit tests that cite the RFC section or Linux function each rule follows.
//!
//! [`Reno`] is the smallest complete example.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cubic;
mod params;
mod reno;

pub use cubic::{cube_root, Cubic, HZ};
pub use params::{CcParams, CubicParams, ParamError};
pub use reno::Reno;

/// Linux's `TCP_INFINITE_SSTHRESH`: the initial slow-start threshold ("no threshold yet").
pub const TCP_INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

/// Linux's `GSO_LEGACY_MAX_SIZE`, the default `sk_gso_max_size` (bytes).
pub const GSO_LEGACY_MAX_SIZE: u32 = 65_536;

/// Name of the default algorithm (`net.ipv4.tcp_congestion_control` on Linux).
pub const DEFAULT_CONGESTION_CONTROL: &str = "cubic";

/// The connection state a congestion controller sees, with Linux `tcp_sock` field names.
///
/// The engine keeps these values; it fills the read-only ones before each call and reads the
/// writable ones (`snd_cwnd`, `snd_ssthresh`, `snd_cwnd_cnt`) back afterwards.
/// [`Default`] gives the state of a fresh Linux socket (see each field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CcState {
    /// Congestion window in packets (`tp->snd_cwnd`). Default 10 (`TCP_INIT_CWND`).
    pub snd_cwnd: u32,
    /// Slow-start threshold in packets (`tp->snd_ssthresh`). Default
    /// [`TCP_INFINITE_SSTHRESH`].
    pub snd_ssthresh: u32,
    /// Linear-increase counter (`tp->snd_cwnd_cnt`): segments acked since cwnd last grew in
    /// congestion avoidance; see [`tcp_cong_avoid_ai`]. Default 0.
    pub snd_cwnd_cnt: u32,
    /// Upper bound on `snd_cwnd` (`tp->snd_cwnd_clamp`, set by `TCP_WINDOW_CLAMP` and route
    /// metrics). Default `u32::MAX` (Linux initialises it to `~0`).
    pub snd_cwnd_clamp: u32,
    /// Current sender MSS in bytes (`tp->mss_cache`). Default 536 (`TCP_MSS_DEFAULT`).
    pub mss_cache: u32,
    /// Packets in the network (`tcp_packets_in_flight()`: out − sacked − lost + retrans).
    pub packets_in_flight: u32,
    /// Result of Linux's `tcp_is_cwnd_limited()`: in slow start, `snd_cwnd < 2 *
    /// max_packets_out`; otherwise whether the sender used its whole cwnd in the current
    /// window. Algorithms do not grow cwnd when this is false.
    pub is_cwnd_limited: bool,
    /// Smoothed RTT in µs, scaled by 8 (Linux's `tp->srtt_us`). 0 = no sample yet.
    pub srtt_us: u32,
    /// Windowed minimum RTT in µs (`tcp_min_rtt()`); `u32::MAX` = no sample yet.
    pub min_rtt_us: u32,
    /// Total segments delivered (`tp->delivered`).
    pub delivered: u32,
    /// Next sequence number to send (`tp->snd_nxt`). HyStart ends a round when `snd_una`
    /// passes the `snd_nxt` recorded at the round's start.
    pub snd_nxt: u32,
    /// Oldest unacknowledged sequence number (`tp->snd_una`).
    pub snd_una: u32,
    /// Whether the flow is application-limited (`tp->app_limited != 0`).
    pub app_limited: bool,
    /// Time of the last data transmission, µs on the engine clock (Linux's `tp->lsndtime`,
    /// kept there in jiffies). CUBIC reads it on [`CaEvent::TxStart`] to measure the idle
    /// period, so the engine must report `TxStart` before updating it.
    pub lsndtime_us: u64,
    /// Current pacing rate in bytes per second (`sk->sk_pacing_rate`); 0 = unknown. HyStart's
    /// ACK-train detector allows for the spacing pacing adds (Linux `hystart_ack_delay()`).
    pub sk_pacing_rate: u64,
    /// Largest GSO/TSO packet the device accepts, bytes (`sk->sk_gso_max_size`). Default
    /// [`GSO_LEGACY_MAX_SIZE`].
    pub sk_gso_max_size: u32,
    /// Whether packets are paced (`sk->sk_pacing_status != SK_PACING_NONE`: the `fq` qdisc or
    /// TCP internal pacing). When false HyStart's ACK-train threshold is halved.
    pub pacing_enabled: bool,
}

impl Default for CcState {
    fn default() -> Self {
        CcState {
            snd_cwnd: 10,
            snd_ssthresh: TCP_INFINITE_SSTHRESH,
            snd_cwnd_cnt: 0,
            snd_cwnd_clamp: u32::MAX,
            mss_cache: 536,
            packets_in_flight: 0,
            is_cwnd_limited: false,
            srtt_us: 0,
            min_rtt_us: u32::MAX,
            delivered: 0,
            snd_nxt: 0,
            snd_una: 0,
            app_limited: false,
            lsndtime_us: 0,
            sk_pacing_rate: 0,
            sk_gso_max_size: GSO_LEGACY_MAX_SIZE,
            pacing_enabled: false,
        }
    }
}

impl CcState {
    /// Linux's `tcp_in_slow_start()`: `snd_cwnd < snd_ssthresh`.
    pub fn in_slow_start(&self) -> bool {
        self.snd_cwnd < self.snd_ssthresh
    }
}

/// Congestion-avoidance state machine state (`tcpi_ca_state`, Linux `enum tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CaState {
    /// `TCP_CA_Open` (0): nothing unusual.
    Open = 0,
    /// `TCP_CA_Disorder` (1): SACKs or duplicate ACKs seen, no loss declared yet.
    Disorder = 1,
    /// `TCP_CA_CWR` (2): cwnd being reduced after ECN or a local congestion signal.
    Cwr = 2,
    /// `TCP_CA_Recovery` (3): fast recovery after a loss.
    Recovery = 3,
    /// `TCP_CA_Loss` (4): retransmission timeout, everything outstanding presumed lost.
    Loss = 4,
}

impl CaState {
    /// The numeric value Linux reports in `tcpi_ca_state`.
    pub fn as_u8(self) -> u8 {
        self as u8
    }
}

/// Events the engine reports through [`CongestionControl::cwnd_event`] (Linux `enum
/// tcp_ca_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CaEvent {
    /// `CA_EVENT_TX_START`: first transmission while nothing was in flight (after idle).
    TxStart,
    /// `CA_EVENT_CWND_RESTART`: cwnd restarted after idle (`tcp_cwnd_restart`).
    CwndRestart,
    /// `CA_EVENT_COMPLETE_CWR`: the CWR/Recovery reduction finished.
    CompleteCwr,
    /// `CA_EVENT_LOSS`: retransmission timeout (`tcp_enter_loss`).
    Loss,
    /// `CA_EVENT_ECN_NO_CE`: ECT packet received without CE after a CE one.
    EcnNoCe,
    /// `CA_EVENT_ECN_IS_CE`: CE-marked packet received.
    EcnIsCe,
}

/// What one ACK acknowledged (Linux `struct ack_sample`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckSample {
    /// Packets newly acknowledged (cumulatively or by SACK) by this ACK.
    pub pkts_acked: u32,
    /// RTT sample in µs measured from the most recently sent acked packet, or -1 when the
    /// ACK carries no usable sample (Karn's rule: only retransmitted data acked).
    pub rtt_us: i64,
    /// Packets in flight before this ACK was processed.
    pub in_flight: u32,
}

/// HyStart counters an algorithm accumulated since the last [`CongestionControl::take_mib`]
/// (Linux `TcpExt` MIB names). The engine adds them to its own MIB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CcMib {
    /// `TcpExtTCPHystartTrainDetect`: slow-start exits by the ACK-train detector.
    pub hystart_train_detect: u64,
    /// `TcpExtTCPHystartTrainCwnd`: sum of cwnd at those exits.
    pub hystart_train_cwnd: u64,
    /// `TcpExtTCPHystartDelayDetect`: slow-start exits by the delay detector.
    pub hystart_delay_detect: u64,
    /// `TcpExtTCPHystartDelayCwnd`: sum of cwnd at those exits.
    pub hystart_delay_cwnd: u64,
}

impl CcMib {
    /// Adds `other` into `self` (saturating).
    pub fn add(&mut self, other: &CcMib) {
        self.hystart_train_detect = self
            .hystart_train_detect
            .saturating_add(other.hystart_train_detect);
        self.hystart_train_cwnd = self
            .hystart_train_cwnd
            .saturating_add(other.hystart_train_cwnd);
        self.hystart_delay_detect = self
            .hystart_delay_detect
            .saturating_add(other.hystart_delay_detect);
        self.hystart_delay_cwnd = self
            .hystart_delay_cwnd
            .saturating_add(other.hystart_delay_cwnd);
    }
}

/// A congestion-control algorithm (Linux `struct tcp_congestion_ops`).
///
/// One boxed instance lives in each connection and holds that connection's private
/// algorithm state. See the [crate documentation](crate) for when each hook is called.
/// Every hook must accept any input without panicking.
pub trait CongestionControl: Send + core::fmt::Debug {
    /// The algorithm's name as Linux spells it (`"cubic"`, `"reno"`): the value of
    /// `TCP_CONGESTION` and `net.ipv4.tcp_congestion_control`.
    fn name(&self) -> &'static str;

    /// Resets the private state when the connection is established (`ops->init`). May set
    /// `snd_ssthresh` (CUBIC's `initial_ssthresh`).
    fn init(&mut self, st: &mut CcState, now_us: u64);

    /// Returns the slow-start threshold to use after a loss or ECN signal (`ops->ssthresh`).
    /// The engine stores it in `snd_ssthresh`; the algorithm may update its own state.
    fn ssthresh(&mut self, st: &CcState) -> u32;

    /// Grows cwnd on an ACK (`ops->cong_avoid`). `ack` is the cumulative ACK number, `acked`
    /// the number of packets newly delivered (`acked_sacked`).
    fn cong_avoid(&mut self, st: &mut CcState, ack: u32, acked: u32, now_us: u64);

    /// Called before the engine changes `tcpi_ca_state` to `new_state` (`ops->set_state`).
    fn set_state(&mut self, st: &mut CcState, new_state: CaState, now_us: u64);

    /// Reports an event (`ops->cwnd_event`).
    fn cwnd_event(&mut self, st: &mut CcState, ev: CaEvent, now_us: u64);

    /// Reports the packets an ACK acknowledged and its RTT sample (`ops->pkts_acked`).
    /// Called before [`cong_avoid`](Self::cong_avoid) for the same ACK.
    fn pkts_acked(&mut self, st: &mut CcState, sample: &AckSample, now_us: u64);

    /// Returns the cwnd to restore when a reduction is undone (`ops->undo_cwnd`, F-RTO /
    /// DSACK / timestamp undo). `prior_cwnd` is the cwnd before the reduction
    /// (`tp->prior_cwnd`).
    fn undo_cwnd(&mut self, st: &CcState, prior_cwnd: u32) -> u32;

    /// Minimum TSO segments per packet the algorithm wants (`ops->min_tso_segs`); `None` =
    /// use `net.ipv4.tcp_min_tso_segs`.
    fn min_tso_segs(&self) -> Option<u32> {
        None
    }

    /// Send-buffer expansion factor (`ops->sndbuf_expand`); `None` = Linux's default of 2.
    fn sndbuf_expand(&self) -> Option<u32> {
        None
    }

    /// Returns and clears the MIB counters the algorithm accumulated (HyStart exits). The
    /// default has none. (Shallow addition: Linux bumps the global MIB directly.)
    fn take_mib(&mut self) -> CcMib {
        CcMib::default()
    }

    /// Clones the algorithm with its current state.
    fn clone_box(&self) -> Box<dyn CongestionControl>;
}

impl Clone for Box<dyn CongestionControl> {
    fn clone(&self) -> Self {
        self.clone_box()
    }
}

/// Slow start (RFC 5681 §3.1, Linux `tcp_slow_start`): grows `snd_cwnd` by one packet per
/// packet acked, but not beyond `snd_ssthresh` nor `snd_cwnd_clamp`.
///
/// Returns the part of `acked` left over once cwnd reached ssthresh, which the caller feeds
/// to congestion avoidance. Called only in slow start; if `snd_cwnd >= snd_ssthresh` this
/// changes nothing and returns `acked` (where Linux's `u32` arithmetic would wrap).
pub fn tcp_slow_start(st: &mut CcState, acked: u32) -> u32 {
    if st.snd_cwnd >= st.snd_ssthresh {
        return acked;
    }
    let cwnd = st.snd_cwnd.saturating_add(acked).min(st.snd_ssthresh);
    let used = cwnd - st.snd_cwnd;
    st.snd_cwnd = cwnd.min(st.snd_cwnd_clamp);
    acked - used
}

/// Additive increase (RFC 5681 §3.1, Linux `tcp_cong_avoid_ai`): grows `snd_cwnd` by one
/// packet per `w` packets acked, counting in `snd_cwnd_cnt`, and never beyond
/// `snd_cwnd_clamp`.
///
/// Credits accumulated under a larger `w` are applied gently: if the counter already
/// reached `w`, cwnd grows by one and the counter restarts before `acked` is added. A `w`
/// of 0 is treated as 1 (Linux would divide by zero).
pub fn tcp_cong_avoid_ai(st: &mut CcState, w: u32, acked: u32) {
    let w = w.max(1);
    if st.snd_cwnd_cnt >= w {
        st.snd_cwnd_cnt = 0;
        st.snd_cwnd = st.snd_cwnd.saturating_add(1);
    }
    st.snd_cwnd_cnt = st.snd_cwnd_cnt.saturating_add(acked);
    if st.snd_cwnd_cnt >= w {
        let delta = st.snd_cwnd_cnt / w;
        st.snd_cwnd_cnt -= delta * w;
        st.snd_cwnd = st.snd_cwnd.saturating_add(delta);
    }
    st.snd_cwnd = st.snd_cwnd.min(st.snd_cwnd_clamp);
}

/// Creates the algorithm called `name` (as in `net.ipv4.tcp_congestion_control` and
/// `setsockopt(TCP_CONGESTION)`), configured by `params`. `None` if unknown (the engine
/// reports `ENOENT`, like Linux).
pub fn by_name(name: &str, params: &CcParams) -> Option<Box<dyn CongestionControl>> {
    match name {
        "cubic" => Some(Box::new(Cubic::new(params.cubic.clone()))),
        "reno" => Some(Box::new(Reno::new())),
        _ => None,
    }
}

/// Names of the built-in algorithms, in Linux's registration order
/// (`net.ipv4.tcp_available_congestion_control` reads "reno cubic").
pub fn available() -> &'static [&'static str] {
    &["reno", "cubic"]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(cwnd: u32, ssthresh: u32) -> CcState {
        CcState {
            snd_cwnd: cwnd,
            snd_ssthresh: ssthresh,
            ..CcState::default()
        }
    }

    /// Linux `tcp_slow_start`: +1 per packet acked, capped at ssthresh, leftover returned.
    #[test]
    fn slow_start_grows_by_acked_up_to_ssthresh() {
        let mut s = st(10, 100);
        assert_eq!(tcp_slow_start(&mut s, 2), 0);
        assert_eq!(s.snd_cwnd, 12);
        let mut s = st(10, 13);
        assert_eq!(tcp_slow_start(&mut s, 5), 2);
        assert_eq!(s.snd_cwnd, 13);
    }

    /// Linux `tcp_slow_start` applies `snd_cwnd_clamp` after computing the leftover.
    #[test]
    fn slow_start_respects_clamp() {
        let mut s = st(10, 100);
        s.snd_cwnd_clamp = 11;
        assert_eq!(tcp_slow_start(&mut s, 4), 0);
        assert_eq!(s.snd_cwnd, 11);
    }

    /// Outside slow start the helper is a no-op instead of wrapping.
    #[test]
    fn slow_start_outside_slow_start_is_noop() {
        let mut s = st(20, 10);
        assert_eq!(tcp_slow_start(&mut s, 3), 3);
        assert_eq!(s.snd_cwnd, 20);
    }

    /// Linux `tcp_cong_avoid_ai`: one packet per w acked, the remainder kept in snd_cwnd_cnt.
    #[test]
    fn cong_avoid_ai_counts_in_cwnd_cnt() {
        let mut s = st(10, 5);
        for _ in 0..9 {
            tcp_cong_avoid_ai(&mut s, 10, 1);
        }
        assert_eq!((s.snd_cwnd, s.snd_cwnd_cnt), (10, 9));
        tcp_cong_avoid_ai(&mut s, 10, 1);
        assert_eq!((s.snd_cwnd, s.snd_cwnd_cnt), (11, 0));
        // A stretch ACK of 25 packets at w = 10 adds two and keeps 5.
        tcp_cong_avoid_ai(&mut s, 10, 25);
        assert_eq!((s.snd_cwnd, s.snd_cwnd_cnt), (13, 5));
    }

    /// Linux `tcp_cong_avoid_ai`: credits earned under a larger w are applied as +1 first.
    #[test]
    fn cong_avoid_ai_applies_stale_credit_gently() {
        let mut s = st(10, 5);
        s.snd_cwnd_cnt = 15;
        tcp_cong_avoid_ai(&mut s, 4, 1);
        // 15 >= 4: +1 and counter reset, then 1 < 4.
        assert_eq!((s.snd_cwnd, s.snd_cwnd_cnt), (11, 1));
    }

    #[test]
    fn cong_avoid_ai_clamps_and_survives_zero_w() {
        let mut s = st(10, 5);
        s.snd_cwnd_clamp = 10;
        tcp_cong_avoid_ai(&mut s, 1, 100);
        assert_eq!(s.snd_cwnd, 10);
        let mut s = st(10, 5);
        tcp_cong_avoid_ai(&mut s, 0, 3);
        assert_eq!(s.snd_cwnd, 13);
    }

    #[test]
    fn registry_knows_linux_names() {
        assert_eq!(available(), &["reno", "cubic"]);
        for name in available() {
            let cc = by_name(name, &CcParams::default()).expect("listed algorithm exists");
            assert_eq!(cc.name(), *name);
            assert_eq!(cc.clone().name(), *name);
        }
        assert!(by_name("bbr", &CcParams::default()).is_none());
        assert!(by_name(DEFAULT_CONGESTION_CONTROL, &CcParams::default()).is_some());
    }

    #[test]
    fn ca_state_values_match_tcpi_ca_state() {
        let all = [
            CaState::Open,
            CaState::Disorder,
            CaState::Cwr,
            CaState::Recovery,
            CaState::Loss,
        ];
        for (i, s) in all.iter().enumerate() {
            assert_eq!(s.as_u8() as usize, i);
        }
    }

    #[test]
    fn default_state_is_a_fresh_linux_socket() {
        let s = CcState::default();
        assert_eq!(s.snd_ssthresh, TCP_INFINITE_SSTHRESH);
        assert!(s.in_slow_start());
        assert_eq!(s.snd_cwnd_clamp, u32::MAX);
        assert_eq!(s.min_rtt_us, u32::MAX);
    }

    #[test]
    fn mib_add_sums() {
        let mut a = CcMib {
            hystart_train_detect: 1,
            hystart_train_cwnd: 20,
            ..CcMib::default()
        };
        a.add(&CcMib {
            hystart_delay_detect: 2,
            hystart_delay_cwnd: 70,
            hystart_train_detect: 1,
            ..CcMib::default()
        });
        assert_eq!(
            a,
            CcMib {
                hystart_train_detect: 2,
                hystart_train_cwnd: 20,
                hystart_delay_detect: 2,
                hystart_delay_cwnd: 70
            }
        );
    }
}
