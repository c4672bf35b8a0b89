//! Reno: RFC 5681 window arithmetic as Linux's built-in `reno` (`tcp_reno_*` functions).

use crate::{
    tcp_cong_avoid_ai, tcp_slow_start, AckSample, CaEvent, CaState, CcState, CongestionControl,
};

/// NewReno congestion control (RFC 5681 §3.1 growth, RFC 6582 recovery in the engine),
/// behaving like Linux's `reno`.
///
/// * Slow start: +1 packet per packet acked up to `snd_ssthresh` ([`tcp_slow_start`]).
/// * Congestion avoidance: +1 packet per `snd_cwnd` packets acked ([`tcp_cong_avoid_ai`]
///   with `w = snd_cwnd`).
/// * No growth when the sender is not cwnd-limited.
/// * On loss: `ssthresh = max(cwnd / 2, 2)` (`tcp_reno_ssthresh`).
/// * Undo: `max(cwnd, prior_cwnd)` (`tcp_reno_undo_cwnd`).
///
/// Reno keeps no private state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reno;

impl Reno {
    /// Creates the algorithm.
    pub fn new() -> Reno {
        Reno
    }
}

impl CongestionControl for Reno {
    fn name(&self) -> &'static str {
        "reno"
    }

    fn init(&mut self, _st: &mut CcState, _now_us: u64) {}

    /// Linux `tcp_reno_ssthresh`: half the window, at least 2.
    fn ssthresh(&mut self, st: &CcState) -> u32 {
        (st.snd_cwnd >> 1).max(2)
    }

    /// Linux `tcp_reno_cong_avoid`.
    fn cong_avoid(&mut self, st: &mut CcState, _ack: u32, acked: u32, _now_us: u64) {
        if !st.is_cwnd_limited {
            return;
        }
        let mut acked = acked;
        if st.in_slow_start() {
            acked = tcp_slow_start(st, acked);
            if acked == 0 {
                return;
            }
        }
        let w = st.snd_cwnd;
        tcp_cong_avoid_ai(st, w, acked);
    }

    fn set_state(&mut self, _st: &mut CcState, _new_state: CaState, _now_us: u64) {}

    fn cwnd_event(&mut self, _st: &mut CcState, _ev: CaEvent, _now_us: u64) {}

    fn pkts_acked(&mut self, _st: &mut CcState, _sample: &AckSample, _now_us: u64) {}

    /// Linux `tcp_reno_undo_cwnd`.
    fn undo_cwnd(&mut self, st: &CcState, prior_cwnd: u32) -> u32 {
        st.snd_cwnd.max(prior_cwnd)
    }

    fn clone_box(&self) -> Box<dyn CongestionControl> {
        Box::new(*self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(cwnd: u32, ssthresh: u32) -> CcState {
        CcState {
            snd_cwnd: cwnd,
            snd_ssthresh: ssthresh,
            is_cwnd_limited: true,
            ..CcState::default()
        }
    }

    /// RFC 5681 §3.1 / `tcp_reno_cong_avoid`: slow start doubles cwnd per window of ACKs.
    #[test]
    fn slow_start_doubles_per_round() {
        let mut r = Reno::new();
        let mut s = st(10, 1000);
        for i in 0..10 {
            r.cong_avoid(&mut s, i, 1, 0);
        }
        assert_eq!(s.snd_cwnd, 20);
    }

    /// RFC 5681 §3.1: in congestion avoidance cwnd grows by one MSS per RTT (cwnd acks).
    #[test]
    fn congestion_avoidance_one_per_window() {
        let mut r = Reno::new();
        let mut s = st(20, 10);
        for _ in 0..19 {
            r.cong_avoid(&mut s, 0, 1, 0);
        }
        assert_eq!(s.snd_cwnd, 20);
        r.cong_avoid(&mut s, 0, 1, 0);
        assert_eq!(s.snd_cwnd, 21);
        assert_eq!(s.snd_cwnd_cnt, 0);
    }

    /// `tcp_reno_cong_avoid`: the part of a stretch ACK beyond ssthresh goes to AI.
    #[test]
    fn leftover_from_slow_start_feeds_ai() {
        let mut r = Reno::new();
        let mut s = st(8, 10);
        r.cong_avoid(&mut s, 0, 5, 0);
        assert_eq!(s.snd_cwnd, 10);
        assert_eq!(s.snd_cwnd_cnt, 3);
    }

    /// `tcp_reno_cong_avoid` returns early when `!tcp_is_cwnd_limited()`.
    #[test]
    fn no_growth_when_not_cwnd_limited() {
        let mut r = Reno::new();
        let mut s = st(10, 1000);
        s.is_cwnd_limited = false;
        r.cong_avoid(&mut s, 0, 10, 0);
        assert_eq!(s.snd_cwnd, 10);
    }

    /// RFC 5681 eq. (4) as Linux `tcp_reno_ssthresh`: max(cwnd/2, 2).
    #[test]
    fn ssthresh_halves_with_floor_two() {
        let mut r = Reno::new();
        assert_eq!(r.ssthresh(&st(21, 5)), 10);
        assert_eq!(r.ssthresh(&st(3, 5)), 2);
        assert_eq!(r.ssthresh(&st(1, 5)), 2);
    }

    /// `tcp_reno_undo_cwnd`: never shrink on undo.
    #[test]
    fn undo_restores_larger_window() {
        let mut r = Reno::new();
        assert_eq!(r.undo_cwnd(&st(7, 7), 14), 14);
        assert_eq!(r.undo_cwnd(&st(16, 7), 14), 16);
    }
}
