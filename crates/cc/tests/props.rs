//! Property tests: whatever sequence of events the engine delivers, the window stays sane.
//!
//! Invariants (Linux keeps them through `tcp_snd_cwnd_set`, `tcp_slow_start`,
//! `tcp_cong_avoid_ai` and the `ssthresh` hooks):
//! * `1 <= snd_cwnd <= snd_cwnd_clamp`;
//! * `ssthresh()` never returns less than 2, and `snd_ssthresh` never drops below 2 (HyStart
//!   sets it to cwnd, which is at least `hystart_low_window`; the generated parameters keep
//!   `hystart_low_window` and `initial_ssthresh` at 2 or more, as Linux would otherwise
//!   store them unchecked);
//! * no hook panics (overflow checks are on in test builds).

use proptest::prelude::*;
use shallow_cc::{
    AckSample, CaEvent, CaState, CcState, CongestionControl, Cubic, CubicParams, Reno,
};

#[derive(Clone, Debug)]
enum Op {
    /// An ACK: packets acked, RTT sample, time since the previous event, whether the sender
    /// is cwnd-limited, how far snd_una/snd_nxt move.
    Ack {
        acked: u32,
        rtt_us: i64,
        dt_us: u64,
        limited: bool,
        seq_adv: u32,
    },
    /// Fast recovery: ssthresh from the algorithm, cwnd reduced to it (PRR's end result).
    Recovery,
    /// Retransmission timeout: `tcp_enter_loss`.
    Rto,
    /// A reduction proved spurious: `tcp_undo_cwnd_reduction`.
    Undo,
    /// Idle, then a transmission with nothing in flight.
    IdleRestart { idle_us: u64 },
    /// Any other event.
    Event(u8),
    /// Back to Open.
    Open,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (
            prop_oneof![4 => 0u32..64, 1 => any::<u32>()],
            prop_oneof![1 => Just(-1i64), 4 => 0i64..2_000_000, 1 => any::<i64>()],
            prop_oneof![4 => 0u64..200_000, 1 => 0u64..100_000_000],
            any::<bool>(),
            any::<u32>(),
        )
            .prop_map(|(acked, rtt_us, dt_us, limited, seq_adv)| Op::Ack { acked, rtt_us, dt_us, limited, seq_adv }),
        1 => Just(Op::Recovery),
        1 => Just(Op::Rto),
        1 => Just(Op::Undo),
        1 => (0u64..1_000_000_000).prop_map(|idle_us| Op::IdleRestart { idle_us }),
        1 => (0u8..6).prop_map(Op::Event),
        1 => Just(Op::Open),
    ]
}

fn params() -> impl Strategy<Value = CubicParams> {
    (
        any::<bool>(),
        0u32..1024,
        prop_oneof![Just(0u32), 2u32..10_000],
        1u32..10_000,
        any::<bool>(),
        any::<bool>(),
        0u32..4,
        2u32..100,
        0u32..100_000,
    )
        .prop_map(
            |(fc, beta, iss, bic, fr, hy, det, low, delta)| CubicParams {
                fast_convergence: fc,
                beta,
                initial_ssthresh: iss,
                bic_scale: bic,
                tcp_friendliness: fr,
                hystart: hy,
                hystart_detect: det,
                hystart_low_window: low,
                hystart_ack_delta_us: delta,
            },
        )
}

fn check(st: &CcState, what: &str) -> Result<(), TestCaseError> {
    prop_assert!(st.snd_cwnd >= 1, "cwnd < 1 after {}", what);
    prop_assert!(
        st.snd_cwnd <= st.snd_cwnd_clamp,
        "cwnd {} > clamp {} after {}",
        st.snd_cwnd,
        st.snd_cwnd_clamp,
        what
    );
    prop_assert!(
        st.snd_ssthresh >= 2,
        "ssthresh {} < 2 after {}",
        st.snd_ssthresh,
        what
    );
    Ok(())
}

fn run(
    mut cc: Box<dyn CongestionControl>,
    clamp: u32,
    cwnd0: u32,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let mut st = CcState {
        snd_cwnd: cwnd0.clamp(1, clamp),
        snd_cwnd_clamp: clamp,
        mss_cache: 1448,
        ..CcState::default()
    };
    let mut now: u64 = 1_000;
    let mut prior_cwnd = st.snd_cwnd;
    cc.init(&mut st, now);
    check(&st, "init")?;
    for op in ops {
        match *op {
            Op::Ack {
                acked,
                rtt_us,
                dt_us,
                limited,
                seq_adv,
            } => {
                now += dt_us;
                st.snd_una = st.snd_una.wrapping_add(seq_adv / 2);
                st.snd_nxt = st.snd_una.wrapping_add(seq_adv / 2);
                st.is_cwnd_limited = limited;
                let sample = AckSample {
                    pkts_acked: acked,
                    rtt_us,
                    in_flight: st.snd_cwnd,
                };
                cc.pkts_acked(&mut st, &sample, now);
                check(&st, "pkts_acked")?;
                let ack = st.snd_una;
                cc.cong_avoid(&mut st, ack, acked, now);
                st.lsndtime_us = now;
            }
            Op::Recovery => {
                prior_cwnd = st.snd_cwnd;
                let ss = cc.ssthresh(&st);
                prop_assert!(ss >= 2);
                st.snd_ssthresh = ss;
                cc.set_state(&mut st, CaState::Recovery, now);
                st.snd_cwnd = ss.min(st.snd_cwnd_clamp).max(1);
            }
            Op::Rto => {
                prior_cwnd = st.snd_cwnd;
                let ss = cc.ssthresh(&st);
                prop_assert!(ss >= 2);
                st.snd_ssthresh = ss;
                cc.cwnd_event(&mut st, CaEvent::Loss, now);
                st.snd_cwnd = 1;
                st.snd_cwnd_cnt = 0;
                cc.set_state(&mut st, CaState::Loss, now);
            }
            Op::Undo => {
                st.snd_cwnd = cc.undo_cwnd(&st, prior_cwnd);
                prop_assert!(st.snd_cwnd >= prior_cwnd);
            }
            Op::IdleRestart { idle_us } => {
                now += idle_us;
                cc.cwnd_event(&mut st, CaEvent::TxStart, now);
                st.lsndtime_us = now;
            }
            Op::Event(e) => {
                let ev = [
                    CaEvent::TxStart,
                    CaEvent::CwndRestart,
                    CaEvent::CompleteCwr,
                    CaEvent::Loss,
                    CaEvent::EcnNoCe,
                    CaEvent::EcnIsCe,
                ][usize::from(e) % 6];
                cc.cwnd_event(&mut st, ev, now);
            }
            Op::Open => cc.set_state(&mut st, CaState::Open, now),
        }
        check(&st, &format!("{op:?}"))?;
        let _ = cc.take_mib();
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn cubic_window_invariants(
        p in params(),
        clamp in prop_oneof![1u32..100, 100u32..100_000, Just(u32::MAX)],
        cwnd0 in 1u32..1_000,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(Box::new(Cubic::new(p)), clamp, cwnd0, &ops)?;
    }

    #[test]
    fn reno_window_invariants(
        clamp in prop_oneof![1u32..100, 100u32..100_000, Just(u32::MAX)],
        cwnd0 in 1u32..1_000,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        run(Box::new(Reno::new()), clamp, cwnd0, &ops)?;
    }
}
