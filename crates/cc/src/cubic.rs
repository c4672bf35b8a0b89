//! CUBIC (RFC 9438) with HyStart, as Linux's `tcp_cubic` module computes it.
//!
//! # The window curve
//!
//! After a congestion event at window `W_max`, CUBIC grows cwnd along
//! `W_cubic(t) = C·(t − K)³ + W_max` (RFC 9438 §4.2), with `K = ∛((W_max − cwnd_epoch)/C)`
//! the time the curve takes to come back to `W_max` from the window the epoch starts at
//! (`cwnd_epoch`, ≈ β·W_max right after a loss). The epoch starts at the first
//! congestion-avoidance ACK after slow start or a reduction. Linux works in fixed point:
//!
//! * time `t` is measured in jiffies since the epoch start (`epoch_start`), one minimum RTT
//!   is added (the target is the window one RTT from now), and the result is converted to
//!   units of 1/1024 s (`BICTCP_HZ` = 10 bits);
//! * C is `bic_scale·10/1024` (0.4004 by default): `cube_rtt_scale = bic_scale·10`, and
//!   `cube_factor = 2^40 / cube_rtt_scale` turns a window difference into `K³` in
//!   (1/1024 s)³;
//! * the target is `origin ± (cube_rtt_scale·|t − K|³) >> 40` packets;
//! * cwnd grows by one packet every `cnt = cwnd / (target − cwnd)` packets acked, with
//!   `cnt` at least 2 (at most ×1.5 per RTT), at most 20 before the first loss (+5 % per
//!   RTT), and 100·cwnd when the target is not above cwnd.
//!
//! # TCP-friendly region
//!
//! CUBIC also tracks the window an AIMD flow with the same β would have (RFC 9438 §4.3):
//! `tcp_cwnd` gains one packet every `cwnd·beta_scale/8` packets acked, where
//! `beta_scale = 8·(1024+β)/3/(1024−β)` (15 for β = 717, i.e. 3(1−β)/(1+β) ≈ 0.53
//! packets per RTT). If that estimate is ahead of cwnd, `cnt` is lowered to catch up.
//!
//! # HyStart
//!
//! In slow start, once cwnd ≥ `hystart_low_window`, every RTT sample feeds two detectors
//! (the original HyStart of Ha and Rhee, not RFC 9406's HyStart++); a round lasts until
//! `snd_una` passes the `snd_nxt` recorded when the round began:
//!
//! * ACK train (`hystart_detect & 1`): ACKs arriving within `hystart_ack_delta_us` of each
//!   other form a train; when a train has lasted longer than
//!   `(delay_min + hystart_ack_delay) / 2` (not halved when the flow is paced) slow start
//!   ends.
//! * Delay (`hystart_detect & 2`): the round's minimum RTT is tracked; from the 9th sample of
//!   a round (`HYSTART_MIN_SAMPLES` = 8), if it exceeds
//!   `delay_min + clamp(delay_min/8, 4 ms, 16 ms)`, slow start ends.
//!
//! Ending slow start sets `snd_ssthresh = snd_cwnd`.
//!
//! # Differences from Linux
//!
//! * `K` uses an exact integer cube root ([`cube_root`]); Linux uses a table lookup plus one
//!   Newton–Raphson step whose result may differ by a few 1/1024 s.
//! * "No epoch" is an explicit `None`; Linux uses `epoch_start == 0`, which a jiffies
//!   counter that is exactly 0 would confuse.
//! * Intermediate products saturate instead of wrapping (only reachable with windows of
//!   millions of packets or hours without cwnd growth).
//! * The jiffy clock is derived from `now_us` with [`HZ`] = 1000.
//! * `beta_scale`, `cube_rtt_scale` and `cube_factor` come from the [`CubicParams`] the
//!   instance was created with; Linux derives them once at module load.
//! * The curve is re-evaluated at most every `HZ/32` jiffies while cwnd is unchanged, the
//!   long-standing Linux rule that the replayed packetdrill scripts agree with (a 2024 patch
//!   proposal bounds it by the minimum RTT instead; not modelled).

use crate::params::{CubicParams, HYSTART_ACK_TRAIN, HYSTART_DELAY};
use crate::{
    tcp_cong_avoid_ai, tcp_slow_start, AckSample, CaEvent, CaState, CcMib, CcState,
    CongestionControl,
};

/// Jiffies per second of the emulated kernel (`CONFIG_HZ`). CUBIC's epoch timing runs on
/// jiffies derived from `now_us` (`tcp_jiffies32`).
pub const HZ: u32 = 1000;

/// `BICTCP_BETA_SCALE`: β is expressed in units of 1/1024.
const BETA_SCALE: u32 = 1024;
/// `BICTCP_HZ`: CUBIC time unit is 2^-10 s.
const BICTCP_HZ: u32 = 10;
/// `HYSTART_MIN_SAMPLES`: RTT samples per round before the delay detector may fire.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// Lower clamp of the delay detector's margin (µs).
const HYSTART_DELAY_MIN_US: u32 = 4000;
/// Upper clamp of the delay detector's margin (µs).
const HYSTART_DELAY_MAX_US: u32 = 16_000;
/// Cap on `cnt` before the first loss: grow at least 5 % per RTT.
const INITIAL_MAX_CNT: u32 = 20;

const USEC_PER_JIFFY: u64 = 1_000_000 / HZ as u64;

/// Linux's `tcp_jiffies32` for a µs timestamp.
fn jiffies(now_us: u64) -> u32 {
    (now_us / USEC_PER_JIFFY) as u32
}

/// Linux's `usecs_to_jiffies` (rounds up).
fn usecs_to_jiffies(us: u32) -> u32 {
    u64::from(us).div_ceil(USEC_PER_JIFFY) as u32
}

/// Linux's `after(a, b)` for 32-bit sequence numbers and timestamps.
fn after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// Floor of the cube root of `a`, exactly (bit-by-bit digit method).
///
/// CUBIC's `K` is `cube_root(cube_factor · (W_max − cwnd))` in 1/1024 s.
pub fn cube_root(a: u64) -> u32 {
    let mut rem = a;
    let mut y: u64 = 0;
    // 64 bits = 22 groups of 3 bits (the top group has one bit).
    let mut shift: i32 = 63;
    while shift >= 0 {
        y <<= 1;
        // (2y+1)^3 - (2y)^3 = 12y^2 + 6y + 1 = 3*y2*(y2+1) + 1 with y2 = 2y
        let b = 3 * y * (y + 1) + 1;
        if (rem >> shift) >= b {
            rem -= b << shift;
            y += 1;
        }
        shift -= 3;
    }
    y as u32
}

/// CUBIC with HyStart (Linux's default congestion control, module `tcp_cubic`).
///
/// Construct with [`Cubic::new`] or [`crate::by_name`]`("cubic", ..)`. The accessors expose
/// the private state (Linux `struct bictcp`) for tests and teaching tools.
#[derive(Clone, Debug)]
pub struct Cubic {
    params: CubicParams,
    /// `beta_scale`: 8·(1024+β)/3/(1024−β), for the Reno-friendly estimate.
    beta_scale: u32,
    /// `cube_rtt_scale`: bic_scale·10 (C in 2^-10 units).
    cube_rtt_scale: u32,
    /// `cube_factor`: 2^40 / cube_rtt_scale.
    cube_factor: u64,

    /// Packets to ack per one-packet cwnd increase.
    cnt: u32,
    /// W_max: cwnd before the last reduction (after fast convergence).
    last_max_cwnd: u32,
    /// cwnd at the last curve evaluation.
    last_cwnd: u32,
    /// Jiffies at the last curve evaluation.
    last_time: u32,
    /// Window at the curve's plateau (W_max, or cwnd if already above it).
    bic_origin_point: u32,
    /// K in 1/1024 s.
    bic_k: u32,
    /// Minimum RTT seen, µs (0 = none).
    delay_min: u32,
    /// Jiffies when the current growth epoch began.
    epoch_start: Option<u32>,
    /// Packets acked since the epoch began (for the Reno estimate).
    ack_cnt: u32,
    /// Reno-friendly window estimate.
    tcp_cwnd: u32,

    /// HyStart: RTT samples in this round.
    sample_cnt: u32,
    /// HyStart: slow-start exit found.
    found: bool,
    /// HyStart: round start time, µs (32-bit, wrapping).
    round_start: u32,
    /// HyStart: `snd_nxt` at the round's start.
    end_seq: u32,
    /// HyStart: time of the last ACK of the current train, µs.
    last_ack: u32,
    /// HyStart: minimum RTT in this round, µs.
    curr_rtt: u32,

    mib: CcMib,
}

impl Cubic {
    /// Creates CUBIC with the given module parameters. Out-of-range values that
    /// [`CubicParams::set_param`] would refuse are clamped into range (β ≤ 1023,
    /// bic_scale ≥ 1).
    pub fn new(params: CubicParams) -> Cubic {
        let mut params = params;
        params.beta = params.beta.min(BETA_SCALE - 1);
        params.bic_scale = params.bic_scale.clamp(1, u32::MAX / 10);
        let beta = u64::from(params.beta);
        let beta_scale =
            (8 * (u64::from(BETA_SCALE) + beta) / 3 / (u64::from(BETA_SCALE) - beta)) as u32;
        let cube_rtt_scale = params.bic_scale * 10;
        let cube_factor = (1u64 << (10 + 3 * BICTCP_HZ)) / u64::from(cube_rtt_scale);
        Cubic {
            params,
            beta_scale,
            cube_rtt_scale,
            cube_factor,
            cnt: 0,
            last_max_cwnd: 0,
            last_cwnd: 0,
            last_time: 0,
            bic_origin_point: 0,
            bic_k: 0,
            delay_min: 0,
            epoch_start: None,
            ack_cnt: 0,
            tcp_cwnd: 0,
            sample_cnt: 0,
            found: false,
            round_start: 0,
            end_seq: 0,
            last_ack: 0,
            curr_rtt: u32::MAX,
            mib: CcMib::default(),
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &CubicParams {
        &self.params
    }

    /// W_max (`last_max_cwnd`): the window before the last reduction, possibly lowered by
    /// fast convergence; 0 before the first loss.
    pub fn last_max_cwnd(&self) -> u32 {
        self.last_max_cwnd
    }

    /// K (`bic_K`) of the current epoch, in 1/1024 s.
    pub fn k(&self) -> u32 {
        self.bic_k
    }

    /// The current increase divisor (`cnt`): packets to ack per +1 cwnd.
    pub fn cnt(&self) -> u32 {
        self.cnt
    }

    /// Minimum RTT CUBIC has seen, µs (`delay_min`); 0 = none.
    pub fn delay_min_us(&self) -> u32 {
        self.delay_min
    }

    /// Jiffy at which the current epoch began, if one is running.
    pub fn epoch_start(&self) -> Option<u32> {
        self.epoch_start
    }

    /// The Reno-friendly window estimate (`tcp_cwnd`).
    pub fn reno_cwnd(&self) -> u32 {
        self.tcp_cwnd
    }

    /// Whether HyStart has ended slow start (`found`).
    pub fn hystart_found(&self) -> bool {
        self.found
    }

    /// The curve's target window one minimum RTT after `now_us` in the current epoch
    /// (`bic_target`), or `None` when no epoch is running.
    pub fn target_cwnd(&self, now_us: u64) -> Option<u32> {
        let epoch = self.epoch_start?;
        Some(self.target_at(epoch, jiffies(now_us)))
    }

    /// `bictcp_reset`: forget the epoch, W_max, delay_min and HyStart's verdict.
    fn reset(&mut self) {
        self.cnt = 0;
        self.last_max_cwnd = 0;
        self.last_cwnd = 0;
        self.last_time = 0;
        self.bic_origin_point = 0;
        self.bic_k = 0;
        self.delay_min = 0;
        self.epoch_start = None;
        self.ack_cnt = 0;
        self.tcp_cwnd = 0;
        self.found = false;
    }

    /// `bictcp_hystart_reset`: start a new HyStart round now.
    fn hystart_reset(&mut self, st: &CcState, now_us: u64) {
        let now = now_us as u32;
        self.round_start = now;
        self.last_ack = now;
        self.end_seq = st.snd_nxt;
        self.curr_rtt = u32::MAX;
        self.sample_cnt = 0;
    }

    /// Evaluates the cubic curve at jiffy `now_j` for an epoch that began at `epoch`.
    fn target_at(&self, epoch: u32, now_j: u32) -> u32 {
        // Elapsed time plus one minimum RTT, in 1/1024 s.
        let elapsed = i64::from(now_j.wrapping_sub(epoch) as i32).max(0);
        let t_j = elapsed as u64 + u64::from(usecs_to_jiffies(self.delay_min));
        let t = (t_j << BICTCP_HZ) / u64::from(HZ);
        let k = u64::from(self.bic_k);
        let offs = t.abs_diff(k);
        let cube = u64::from(self.cube_rtt_scale)
            .saturating_mul(offs)
            .saturating_mul(offs)
            .saturating_mul(offs);
        let delta = (cube >> (10 + 3 * BICTCP_HZ)).min(u64::from(u32::MAX)) as u32;
        if t < k {
            self.bic_origin_point.saturating_sub(delta)
        } else {
            self.bic_origin_point.saturating_add(delta)
        }
    }

    /// `bictcp_update`: recompute `cnt` for the current cwnd.
    fn update(&mut self, cwnd: u32, acked: u32, now_us: u64) {
        let now_j = jiffies(now_us);
        self.ack_cnt = self.ack_cnt.wrapping_add(acked);

        // Re-evaluate at most every HZ/32 while cwnd is unchanged.
        if self.last_cwnd == cwnd && (now_j.wrapping_sub(self.last_time) as i32) <= (HZ / 32) as i32
        {
            return;
        }
        // The curve changes at most once per jiffy; an epoch reset forces a recomputation.
        let same_jiffy = self.epoch_start.is_some() && now_j == self.last_time;
        if !same_jiffy {
            self.last_cwnd = cwnd;
            self.last_time = now_j;
            let epoch = match self.epoch_start {
                Some(e) => e,
                None => {
                    self.epoch_start = Some(now_j);
                    self.ack_cnt = acked;
                    self.tcp_cwnd = cwnd;
                    if self.last_max_cwnd <= cwnd {
                        self.bic_k = 0;
                        self.bic_origin_point = cwnd;
                    } else {
                        let diff = u64::from(self.last_max_cwnd - cwnd);
                        self.bic_k = cube_root(self.cube_factor.saturating_mul(diff));
                        self.bic_origin_point = self.last_max_cwnd;
                    }
                    now_j
                }
            };
            let target = self.target_at(epoch, now_j);
            self.cnt = if target > cwnd {
                cwnd / (target - cwnd)
            } else {
                cwnd.saturating_mul(100)
            };
            if self.last_max_cwnd == 0 && self.cnt > INITIAL_MAX_CNT {
                self.cnt = INITIAL_MAX_CNT;
            }
        }

        if self.params.tcp_friendliness {
            let per_pkt = ((u64::from(cwnd) * u64::from(self.beta_scale)) >> 3)
                .clamp(1, u64::from(u32::MAX)) as u32;
            if self.ack_cnt > per_pkt {
                // Linux subtracts per_pkt while ack_cnt > per_pkt.
                let steps = (self.ack_cnt - 1) / per_pkt;
                self.ack_cnt -= steps * per_pkt;
                self.tcp_cwnd = self.tcp_cwnd.saturating_add(steps);
            }
            if self.tcp_cwnd > cwnd {
                let max_cnt = cwnd / (self.tcp_cwnd - cwnd);
                self.cnt = self.cnt.min(max_cnt);
            }
        }

        // Never faster than +1 per 2 packets acked (×1.5 per RTT).
        self.cnt = self.cnt.max(2);
    }

    /// `hystart_ack_delay`: the extra ACK spacing pacing may cause, µs (at most 1 ms).
    fn hystart_ack_delay(st: &CcState) -> u32 {
        if st.sk_pacing_rate == 0 {
            return 0;
        }
        let d = u64::from(st.sk_gso_max_size) * 4 * 1_000_000 / st.sk_pacing_rate;
        d.min(1000) as u32
    }

    /// `hystart_update`: feed one RTT sample to the HyStart detectors.
    fn hystart_update(&mut self, st: &mut CcState, delay: u32, now_us: u64) {
        if after(st.snd_una, self.end_seq) {
            self.hystart_reset(st, now_us);
        }

        if self.params.hystart_detect & HYSTART_ACK_TRAIN != 0 {
            let now = now_us as u32;
            if i64::from(now.wrapping_sub(self.last_ack) as i32)
                <= i64::from(self.params.hystart_ack_delta_us)
            {
                self.last_ack = now;
                let mut threshold = self.delay_min.saturating_add(Self::hystart_ack_delay(st));
                if !st.pacing_enabled {
                    threshold >>= 1;
                }
                if now.wrapping_sub(self.round_start) > threshold {
                    self.found = true;
                    self.mib.hystart_train_detect += 1;
                    self.mib.hystart_train_cwnd += u64::from(st.snd_cwnd);
                    st.snd_ssthresh = st.snd_cwnd;
                }
            }
        }

        if self.params.hystart_detect & HYSTART_DELAY != 0 {
            self.curr_rtt = self.curr_rtt.min(delay);
            if self.sample_cnt < HYSTART_MIN_SAMPLES {
                self.sample_cnt += 1;
            } else {
                let margin =
                    (self.delay_min >> 3).clamp(HYSTART_DELAY_MIN_US, HYSTART_DELAY_MAX_US);
                if self.curr_rtt > self.delay_min.saturating_add(margin) {
                    self.found = true;
                    self.mib.hystart_delay_detect += 1;
                    self.mib.hystart_delay_cwnd += u64::from(st.snd_cwnd);
                    st.snd_ssthresh = st.snd_cwnd;
                }
            }
        }
    }
}

impl Default for Cubic {
    fn default() -> Self {
        Cubic::new(CubicParams::default())
    }
}

impl CongestionControl for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    /// `cubictcp_init`: reset, start a HyStart round, apply `initial_ssthresh` when HyStart
    /// is off.
    fn init(&mut self, st: &mut CcState, now_us: u64) {
        self.reset();
        if self.params.hystart {
            self.hystart_reset(st, now_us);
        }
        if !self.params.hystart && self.params.initial_ssthresh != 0 {
            st.snd_ssthresh = self.params.initial_ssthresh;
        }
    }

    /// `cubictcp_recalc_ssthresh` (RFC 9438 §4.6, §4.7): end the epoch, remember W_max
    /// (reduced by fast convergence when cwnd fell short of the previous W_max) and return
    /// `max(cwnd·β/1024, 2)`.
    fn ssthresh(&mut self, st: &CcState) -> u32 {
        let cwnd = u64::from(st.snd_cwnd);
        self.epoch_start = None;
        self.last_max_cwnd = if st.snd_cwnd < self.last_max_cwnd && self.params.fast_convergence {
            (cwnd * u64::from(BETA_SCALE + self.params.beta) / u64::from(2 * BETA_SCALE)) as u32
        } else {
            st.snd_cwnd
        };
        ((cwnd * u64::from(self.params.beta) / u64::from(BETA_SCALE)) as u32).max(2)
    }

    /// `cubictcp_cong_avoid`: slow start while below ssthresh, then follow the curve; no
    /// growth unless cwnd-limited.
    fn cong_avoid(&mut self, st: &mut CcState, _ack: u32, acked: u32, now_us: u64) {
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
        self.update(st.snd_cwnd, acked, now_us);
        tcp_cong_avoid_ai(st, self.cnt, acked);
    }

    /// `cubictcp_state`: entering Loss (RTO) forgets everything and restarts HyStart.
    fn set_state(&mut self, st: &mut CcState, new_state: CaState, now_us: u64) {
        if new_state == CaState::Loss {
            self.reset();
            self.hystart_reset(st, now_us);
        }
    }

    /// `cubictcp_cwnd_event`: on `TxStart` after idle, shift the epoch forward by the idle
    /// time (never past now) so idle time earns no growth.
    fn cwnd_event(&mut self, st: &mut CcState, ev: CaEvent, now_us: u64) {
        if ev != CaEvent::TxStart {
            return;
        }
        let now_j = jiffies(now_us);
        let idle = now_j.wrapping_sub(jiffies(st.lsndtime_us)) as i32;
        if let Some(epoch) = self.epoch_start {
            if idle > 0 {
                let mut e = epoch.wrapping_add(idle as u32);
                if after(e, now_j) {
                    e = now_j;
                }
                self.epoch_start = Some(e);
            }
        }
    }

    /// `cubictcp_acked`: track the minimum RTT and run HyStart in slow start.
    fn pkts_acked(&mut self, st: &mut CcState, sample: &AckSample, now_us: u64) {
        if sample.rtt_us < 0 {
            return;
        }
        // Discard samples during the first second of an epoch (right after recovery).
        if let Some(epoch) = self.epoch_start {
            if (jiffies(now_us).wrapping_sub(epoch) as i32) < HZ as i32 {
                return;
            }
        }
        let delay = u32::try_from(sample.rtt_us).unwrap_or(u32::MAX).max(1);
        if self.delay_min == 0 || self.delay_min > delay {
            self.delay_min = delay;
        }
        if !self.found
            && st.in_slow_start()
            && self.params.hystart
            && st.snd_cwnd >= self.params.hystart_low_window
        {
            self.hystart_update(st, delay, now_us);
        }
    }

    /// `tcp_reno_undo_cwnd`, which Linux's CUBIC uses: `max(cwnd, prior_cwnd)`.
    fn undo_cwnd(&mut self, st: &CcState, prior_cwnd: u32) -> u32 {
        st.snd_cwnd.max(prior_cwnd)
    }

    fn take_mib(&mut self) -> CcMib {
        core::mem::take(&mut self.mib)
    }

    fn clone_box(&self) -> Box<dyn CongestionControl> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TCP_INFINITE_SSTHRESH;

    const MS: u64 = 1000;

    fn ca_state(cwnd: u32, ssthresh: u32) -> CcState {
        CcState {
            snd_cwnd: cwnd,
            snd_ssthresh: ssthresh,
            is_cwnd_limited: true,
            ..CcState::default()
        }
    }

    fn sample(rtt_us: i64) -> AckSample {
        AckSample {
            pkts_acked: 1,
            rtt_us,
            in_flight: 0,
        }
    }

    /// Drives congestion avoidance for `rounds` RTTs: each round acks the whole window one
    /// packet at a time, evenly spread over the RTT, with an RTT sample of `rtt_us`.
    /// `observe` sees the state at each round start. Returns the time at the end.
    fn run_rounds(
        c: &mut Cubic,
        st: &mut CcState,
        start_us: u64,
        rtt_us: u64,
        rounds: u32,
        mut observe: impl FnMut(u64, &CcState, &Cubic),
    ) -> u64 {
        let mut t = start_us;
        for _ in 0..rounds {
            observe(t, st, c);
            let n = st.snd_cwnd.max(1);
            for i in 0..n {
                let now = t + rtt_us * u64::from(i) / u64::from(n);
                c.pkts_acked(st, &sample(rtt_us as i64), now);
                c.cong_avoid(st, 0, 1, now);
            }
            t += rtt_us;
        }
        t
    }

    /// Puts `c` into congestion avoidance after a loss at `w_max` with a known delay_min.
    fn after_loss(c: &mut Cubic, w_max: u32, rtt_us: i64) -> CcState {
        let mut st = ca_state(w_max, TCP_INFINITE_SSTHRESH);
        c.init(&mut st, 0);
        c.pkts_acked(&mut st, &sample(rtt_us), 0);
        st.snd_ssthresh = c.ssthresh(&st);
        st.snd_cwnd = st.snd_ssthresh;
        st
    }

    #[test]
    fn cube_root_is_exact_floor() {
        for a in [
            0u64,
            1,
            2,
            7,
            8,
            9,
            26,
            27,
            28,
            63,
            64,
            999,
            1000,
            1001,
            u64::MAX,
        ] {
            let y = u64::from(cube_root(a));
            assert!(y.pow(3) <= a, "{a}");
            assert!((y + 1).checked_pow(3).is_none_or(|c| c > a), "{a}");
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x >> (x % 64);
            let y = u64::from(cube_root(a));
            assert!(
                y.pow(3) <= a && (y + 1).checked_pow(3).is_none_or(|c| c > a),
                "{a}"
            );
        }
        assert_eq!(cube_root(u64::MAX), 2_642_245);
    }

    /// The fixed-point constants Linux derives from beta = 717 and bic_scale = 41.
    #[test]
    fn derived_constants() {
        let c = Cubic::default();
        assert_eq!(c.beta_scale, 15);
        assert_eq!(c.cube_rtt_scale, 410);
        assert_eq!(c.cube_factor, (1u64 << 40) / 410);
    }

    /// RFC 9438 §4.6 / `cubictcp_recalc_ssthresh`: ssthresh = max(cwnd·717/1024, 2),
    /// W_max = cwnd.
    #[test]
    fn loss_sets_ssthresh_and_w_max() {
        let mut c = Cubic::default();
        let mut st = ca_state(100, 50);
        c.init(&mut st, 0);
        assert_eq!(c.ssthresh(&st), 70);
        assert_eq!(c.last_max_cwnd(), 100);
        assert_eq!(c.epoch_start(), None);
        assert_eq!(c.ssthresh(&ca_state(10, 5)), 7);
        assert_eq!(c.ssthresh(&ca_state(2, 5)), 2);
        assert_eq!(c.ssthresh(&ca_state(1, 5)), 2);
    }

    /// RFC 9438 §4.7 fast convergence: a loss below the previous W_max remembers
    /// W_max = cwnd·(1+β)/2 (cwnd·1741/2048); disabled, it remembers cwnd.
    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut c = Cubic::default();
        let _ = c.ssthresh(&ca_state(100, 50));
        assert_eq!(c.ssthresh(&ca_state(80, 50)), 56);
        assert_eq!(c.last_max_cwnd(), 80 * 1741 / 2048);
        // At or above W_max: plain.
        let _ = c.ssthresh(&ca_state(90, 50));
        assert_eq!(c.last_max_cwnd(), 90);

        let p = CubicParams {
            fast_convergence: false,
            ..CubicParams::default()
        };
        let mut c = Cubic::new(p);
        let _ = c.ssthresh(&ca_state(100, 50));
        let _ = c.ssthresh(&ca_state(80, 50));
        assert_eq!(c.last_max_cwnd(), 80);
    }

    /// RFC 9438 §4.2: W_cubic(t) = C(t−K)³ + W_max with K = ∛((W_max − cwnd_epoch)/C),
    /// evaluated one RTT ahead (Linux adds delay_min). The fixed-point target stays within
    /// rounding (≤ 1.25 packets) of the real-valued curve with C = 0.4 over 10 s.
    #[test]
    fn curve_matches_rfc9438_formula() {
        let rtt = 100 * MS;
        let mut c = Cubic::default();
        let mut st = after_loss(&mut c, 100, rtt as i64);
        assert_eq!(st.snd_cwnd, 70);
        let t0 = 1_000 * MS;
        c.cong_avoid(&mut st, 0, 1, t0);
        // Linux's C is bic_scale·10/1024 = 0.40039; K is floored to 1/1024 s.
        let k_linux = ((100.0 - 70.0) / (410.0 / 1024.0f64)).cbrt() * 1024.0;
        assert!(
            k_linux - f64::from(c.k()) < 1.0 && f64::from(c.k()) <= k_linux,
            "K = {}",
            c.k()
        );
        // RFC 9438's C = 0.4 puts K within 3 ms of that.
        let k_real = ((100.0 - 70.0) / 0.4f64).cbrt();
        assert!(
            (f64::from(c.k()) / 1024.0 - k_real).abs() < 0.003,
            "K = {}",
            c.k()
        );
        for step in 0..=100u64 {
            let now = t0 + step * 100 * MS;
            let t = (now - t0 + rtt) as f64 / 1e6;
            let w = 0.4 * (t - k_real).powi(3) + 100.0;
            let target = c.target_cwnd(now).unwrap();
            assert!(
                (f64::from(target) - w).abs() < 1.25,
                "t={t}: target {target} vs W_cubic {w:.2}"
            );
        }
    }

    /// `bictcp_update` + `tcp_cong_avoid_ai`: with the Reno-friendly estimate off, cwnd
    /// follows the curve (concave up to W_max, flat near K, convex beyond), staying between
    /// W_cubic(t) − 1 and W_cubic(t + 2·RTT) + 1: the target is one RTT ahead and cwnd
    /// reaches it within the next RTT.
    #[test]
    fn cwnd_follows_curve_in_congestion_avoidance() {
        let rtt = 100 * MS;
        let p = CubicParams {
            tcp_friendliness: false,
            ..CubicParams::default()
        };
        let mut c = Cubic::new(p);
        let mut st = after_loss(&mut c, 100, rtt as i64);
        let t0 = 1_000 * MS;
        let k_real = (30.0 / 0.4f64).cbrt();
        let w = |secs: f64| 0.4 * (secs - k_real).powi(3) + 100.0;
        let mut checked = 0;
        run_rounds(&mut c, &mut st, t0, rtt, 80, |now, st, _| {
            let secs = (now - t0) as f64 / 1e6;
            let cwnd = f64::from(st.snd_cwnd);
            assert!(
                cwnd >= w(secs) - 1.0,
                "t={secs}: cwnd {cwnd} below W_cubic {:.1}",
                w(secs)
            );
            assert!(
                cwnd <= w(secs + 0.2) + 1.0,
                "t={secs}: cwnd {cwnd} above W_cubic {:.1}",
                w(secs + 0.2)
            );
            checked += 1;
        });
        assert_eq!(checked, 80);
        assert!(st.snd_cwnd > 100, "convex region reached");
    }

    /// RFC 9438 §4.3 / Linux `tcp_friendliness`: on a short RTT the AIMD estimate
    /// (α = 3(1−β)/(1+β) ≈ 0.53 packets per RTT) outgrows the cubic curve and cwnd follows
    /// it; without it cwnd stays on the (still concave) curve below W_max.
    #[test]
    fn tcp_friendly_region() {
        let rtt = 10 * MS;
        let beta = 717.0 / 1024.0;
        let alpha = 3.0 * (1.0 - beta) / (1.0 + beta);
        let mut c = Cubic::default();
        let mut st = after_loss(&mut c, 20, rtt as i64);
        assert_eq!(st.snd_cwnd, 14);
        run_rounds(&mut c, &mut st, 1_000 * MS, rtt, 100, |_, _, _| {});
        let w_est = 14.0 + alpha * 100.0;
        assert!(
            (f64::from(st.snd_cwnd) - w_est).abs() <= 3.0,
            "cwnd {} vs W_est {w_est:.1}",
            st.snd_cwnd
        );
        assert!(c.reno_cwnd() >= st.snd_cwnd);

        let p = CubicParams {
            tcp_friendliness: false,
            ..CubicParams::default()
        };
        let mut c = Cubic::new(p);
        let mut st = after_loss(&mut c, 20, rtt as i64);
        run_rounds(&mut c, &mut st, 1_000 * MS, rtt, 100, |_, _, _| {});
        assert!(
            st.snd_cwnd <= 20,
            "cubic alone stays below W_max before K: {}",
            st.snd_cwnd
        );
    }

    /// `bictcp_update`: before any loss (W_max = 0) cnt is at most 20; it is never below 2.
    #[test]
    fn cnt_bounds() {
        let mut c = Cubic::default();
        let mut st = ca_state(50, 50);
        c.init(&mut st, 0);
        c.cong_avoid(&mut st, 0, 1, 5_000 * MS);
        assert_eq!(c.cnt(), 20);
        // Far along the convex curve the target is way above cwnd: cnt floors at 2.
        let mut st = ca_state(50, 50);
        let mut c = Cubic::default();
        c.init(&mut st, 0);
        c.cong_avoid(&mut st, 0, 1, 1_000 * MS);
        c.cong_avoid(&mut st, 0, 1, 60_000 * MS);
        assert_eq!(c.cnt(), 2);
    }

    /// `bictcp_update`: with cwnd unchanged the curve is re-evaluated at most every HZ/32
    /// jiffies (31 ms); within the jiffy of the last evaluation never, even if cwnd changed.
    /// Acked packets are counted for the Reno estimate either way.
    #[test]
    fn update_rate_limit() {
        let mut c = Cubic::default();
        let mut st = after_loss(&mut c, 100, 100_000);
        let t0 = 1_000 * MS;
        c.cong_avoid(&mut st, 0, 1, t0);
        assert_eq!((c.last_time, c.last_cwnd), (1000, 70));
        c.cong_avoid(&mut st, 0, 1, t0 + 31 * MS);
        assert_eq!(c.last_time, 1000, "31 jiffies is not more than HZ/32");
        c.cong_avoid(&mut st, 0, 1, t0 + 32 * MS);
        assert_eq!(c.last_time, 1032);
        st.snd_cwnd = 71;
        c.cong_avoid(&mut st, 0, 1, t0 + 32 * MS + 500);
        assert_eq!(
            (c.last_time, c.last_cwnd),
            (1032, 70),
            "same jiffy: no re-evaluation"
        );
        c.cong_avoid(&mut st, 0, 1, t0 + 33 * MS);
        assert_eq!((c.last_time, c.last_cwnd), (1033, 71));
        assert_eq!(c.ack_cnt, 5);
    }

    /// `cubictcp_cong_avoid`: no growth when not cwnd-limited; slow start first, leftover
    /// to the curve.
    #[test]
    fn cong_avoid_gates_and_slow_start() {
        let mut c = Cubic::default();
        let mut st = ca_state(10, 12);
        c.init(&mut st, 0);
        st.is_cwnd_limited = false;
        c.cong_avoid(&mut st, 0, 4, 0);
        assert_eq!(st.snd_cwnd, 10);
        st.is_cwnd_limited = true;
        c.cong_avoid(&mut st, 0, 4, 0);
        assert_eq!(st.snd_cwnd, 12);
        assert_eq!(
            st.snd_cwnd_cnt, 2,
            "leftover counted toward the next increase"
        );
        assert!(c.epoch_start().is_some());
    }

    /// `cubictcp_cwnd_event(CA_EVENT_TX_START)`: the epoch moves forward by the idle time
    /// (now − lsndtime), never past now; without an epoch nothing happens.
    #[test]
    fn idle_restart_shifts_epoch() {
        let mut c = Cubic::default();
        let mut st = ca_state(40, 40);
        c.init(&mut st, 0);
        c.cong_avoid(&mut st, 0, 1, 10_000 * MS);
        assert_eq!(c.epoch_start(), Some(10_000));
        // Last send at 12 s, restart at 15 s: 3 s idle.
        st.lsndtime_us = 12_000 * MS;
        c.cwnd_event(&mut st, CaEvent::TxStart, 15_000 * MS);
        assert_eq!(c.epoch_start(), Some(13_000));
        // Idle longer than the epoch's age: clamped to now.
        st.lsndtime_us = 12_000 * MS;
        c.cwnd_event(&mut st, CaEvent::TxStart, 30_000 * MS);
        assert_eq!(c.epoch_start(), Some(30_000));
        // Other events leave it alone.
        st.lsndtime_us = 0;
        c.cwnd_event(&mut st, CaEvent::CwndRestart, 40_000 * MS);
        assert_eq!(c.epoch_start(), Some(30_000));

        let mut c = Cubic::default();
        c.init(&mut st, 0);
        c.cwnd_event(&mut st, CaEvent::TxStart, 40_000 * MS);
        assert_eq!(c.epoch_start(), None);
    }

    /// `cubictcp_state`: entering Loss forgets W_max, delay_min and HyStart's verdict and
    /// starts a new HyStart round at snd_nxt; other states change nothing.
    #[test]
    fn loss_state_resets() {
        let mut c = Cubic::default();
        let mut st = ca_state(100, TCP_INFINITE_SSTHRESH);
        c.init(&mut st, 0);
        c.pkts_acked(&mut st, &sample(50_000), 0);
        let _ = c.ssthresh(&st);
        c.set_state(&mut st, CaState::Recovery, 0);
        assert_eq!((c.last_max_cwnd(), c.delay_min_us()), (100, 50_000));
        st.snd_nxt = 123_456;
        c.set_state(&mut st, CaState::Loss, 7 * MS);
        assert_eq!((c.last_max_cwnd(), c.delay_min_us()), (0, 0));
        assert!(!c.hystart_found());
        assert_eq!(c.end_seq, 123_456);
        assert_eq!(c.round_start, 7_000);
    }

    /// `cubictcp_acked`: RTT samples in the first second of an epoch are ignored; samples of
    /// 0 count as 1 µs; negative means none.
    #[test]
    fn delay_min_sampling() {
        let mut c = Cubic::default();
        let mut st = ca_state(20, 10);
        c.init(&mut st, 0);
        c.pkts_acked(&mut st, &sample(-1), 0);
        assert_eq!(c.delay_min_us(), 0);
        c.pkts_acked(&mut st, &sample(0), 0);
        assert_eq!(c.delay_min_us(), 1);
        c.pkts_acked(&mut st, &sample(30_000), 0);
        assert_eq!(c.delay_min_us(), 1);

        let mut c = Cubic::default();
        c.init(&mut st, 0);
        c.pkts_acked(&mut st, &sample(30_000), 0);
        c.cong_avoid(&mut st, 0, 1, 2_000 * MS); // epoch starts at 2 s
        c.pkts_acked(&mut st, &sample(10_000), 2_999 * MS);
        assert_eq!(
            c.delay_min_us(),
            30_000,
            "ignored within 1 s of the epoch start"
        );
        c.pkts_acked(&mut st, &sample(10_000), 3_000 * MS);
        assert_eq!(c.delay_min_us(), 10_000);
    }

    /// Slow-start state for HyStart tests: cwnd 16, delay_min `rtt`, a round begun at
    /// `start` (the first sample after `snd_una` passed the initial end_seq).
    fn hystart_setup(params: CubicParams, rtt: u32) -> (Cubic, CcState) {
        let mut c = Cubic::new(params);
        let mut st = CcState {
            snd_cwnd: 10,
            snd_nxt: 1,
            snd_una: 1,
            is_cwnd_limited: true,
            ..CcState::default()
        };
        c.init(&mut st, 0);
        // A sample below the low window only sets delay_min.
        c.pkts_acked(&mut st, &sample(i64::from(rtt)), 0);
        st.snd_cwnd = 16;
        st.snd_una = 1001;
        st.snd_nxt = 1_000_001;
        (c, st)
    }

    /// HyStart ACK train (`hystart_detect & 1`): ACKs 1 ms apart; the train passes
    /// delay_min/2 = 5 ms after the round start and slow start ends with ssthresh = cwnd.
    #[test]
    fn hystart_ack_train_exit() {
        let (mut c, mut st) = hystart_setup(CubicParams::default(), 10_000);
        let start = 100 * MS;
        for i in 0..=5u64 {
            c.pkts_acked(&mut st, &sample(10_000), start + i * MS);
            assert!(!c.hystart_found(), "no exit at {i} ms");
            st.snd_cwnd += 1;
        }
        c.pkts_acked(&mut st, &sample(10_000), start + 6 * MS);
        assert!(c.hystart_found());
        assert_eq!(st.snd_ssthresh, 22);
        let mib = c.take_mib();
        assert_eq!(
            (
                mib.hystart_train_detect,
                mib.hystart_train_cwnd,
                mib.hystart_delay_detect
            ),
            (1, 22, 0)
        );
        // Once found, HyStart stays quiet.
        st.snd_cwnd = 30;
        st.snd_ssthresh = TCP_INFINITE_SSTHRESH;
        c.pkts_acked(&mut st, &sample(10_000), start + 7 * MS);
        assert_eq!(st.snd_ssthresh, TCP_INFINITE_SSTHRESH);
    }

    /// A gap above `hystart_ack_delta_us` breaks the train; `hystart_detect = 2` disables it.
    #[test]
    fn hystart_ack_train_needs_close_acks() {
        let (mut c, mut st) = hystart_setup(CubicParams::default(), 10_000);
        for i in 0..20u64 {
            c.pkts_acked(&mut st, &sample(10_000), 100 * MS + i * 3 * MS);
        }
        assert!(!c.hystart_found());

        let p = CubicParams {
            hystart_detect: 2,
            ..CubicParams::default()
        };
        let (mut c, mut st) = hystart_setup(p, 10_000);
        for i in 0..20u64 {
            c.pkts_acked(&mut st, &sample(10_000), 100 * MS + i * MS);
        }
        assert!(!c.hystart_found());
    }

    /// `hystart_ack_delay` and pacing: with the flow paced the threshold is not halved and
    /// includes min(1 ms, 4·gso_max_size/pacing_rate): 10 ms + 1 ms here.
    #[test]
    fn hystart_ack_train_paced_threshold() {
        let (mut c, mut st) = hystart_setup(CubicParams::default(), 10_000);
        st.pacing_enabled = true;
        st.sk_pacing_rate = 1_000_000; // 65536·4 / 1 MB/s = 262 ms → capped at 1 ms
        let start = 100 * MS;
        for i in 0..=11u64 {
            c.pkts_acked(&mut st, &sample(10_000), start + i * MS);
            assert!(!c.hystart_found(), "no exit at {i} ms");
        }
        c.pkts_acked(&mut st, &sample(10_000), start + 12 * MS);
        assert!(c.hystart_found());
    }

    /// HyStart delay detector (`hystart_detect & 2`): 8 samples are collected, the 9th
    /// compares the round minimum with delay_min + clamp(delay_min/8, 4 ms, 16 ms).
    #[test]
    fn hystart_delay_exit_and_threshold_clamp() {
        // delay_min 20 ms → margin clamps up to 4 ms: 24 ms is not enough, 24.001 ms is.
        for (rtt_in_round, exits) in [(24_000, false), (24_001, true)] {
            let p = CubicParams {
                hystart_detect: 2,
                ..CubicParams::default()
            };
            let (mut c, mut st) = hystart_setup(p, 20_000);
            for i in 0..8u64 {
                c.pkts_acked(&mut st, &sample(rtt_in_round), 100 * MS + i * 10 * MS);
                assert!(!c.hystart_found());
            }
            c.pkts_acked(&mut st, &sample(rtt_in_round), 200 * MS);
            assert_eq!(c.hystart_found(), exits, "round min {rtt_in_round}");
            if exits {
                assert_eq!(st.snd_ssthresh, 16);
                assert_eq!(c.take_mib().hystart_delay_detect, 1);
            }
        }
        // delay_min 200 ms → margin clamps down to 16 ms.
        for (rtt_in_round, exits) in [(216_000, false), (216_001, true)] {
            let (mut c, mut st) = hystart_setup(CubicParams::default(), 200_000);
            for i in 0..9u64 {
                c.pkts_acked(&mut st, &sample(rtt_in_round), 300 * MS + i * 10 * MS);
            }
            assert_eq!(c.hystart_found(), exits, "round min {rtt_in_round}");
        }
        // In between the margin is delay_min/8: 80 ms → 10 ms.
        for (rtt_in_round, exits) in [(90_000, false), (90_001, true)] {
            let (mut c, mut st) = hystart_setup(CubicParams::default(), 80_000);
            for i in 0..9u64 {
                c.pkts_acked(&mut st, &sample(rtt_in_round), 300 * MS + i * 10 * MS);
            }
            assert_eq!(c.hystart_found(), exits, "round min {rtt_in_round}");
        }
    }

    /// A new round (snd_una past end_seq) restarts the sample count, so 8 high samples
    /// split across two rounds do not exit.
    #[test]
    fn hystart_delay_rounds_restart_count() {
        let (mut c, mut st) = hystart_setup(CubicParams::default(), 20_000);
        for i in 0..8u64 {
            c.pkts_acked(&mut st, &sample(40_000), 100 * MS + i * 10 * MS);
        }
        st.snd_una = st.snd_nxt.wrapping_add(1);
        st.snd_nxt = st.snd_una.wrapping_add(100_000);
        c.pkts_acked(&mut st, &sample(40_000), 200 * MS);
        assert!(!c.hystart_found());
        assert_eq!(c.sample_cnt, 1);
    }

    /// HyStart works only in slow start, with `hystart` on and cwnd ≥ hystart_low_window.
    #[test]
    fn hystart_gates() {
        let p = CubicParams {
            hystart: false,
            ..CubicParams::default()
        };
        let (mut c, mut st) = hystart_setup(p, 10_000);
        for i in 0..20u64 {
            c.pkts_acked(&mut st, &sample(50_000), 100 * MS + i * MS);
        }
        assert!(!c.hystart_found());

        let (mut c, mut st) = hystart_setup(CubicParams::default(), 10_000);
        st.snd_cwnd = 15;
        for i in 0..20u64 {
            c.pkts_acked(&mut st, &sample(50_000), 100 * MS + i * MS);
        }
        assert!(!c.hystart_found());
    }

    /// `cubictcp_init`: `initial_ssthresh` applies only when HyStart is off.
    #[test]
    fn initial_ssthresh_only_without_hystart() {
        let p = CubicParams {
            initial_ssthresh: 30,
            ..CubicParams::default()
        };
        let mut st = CcState::default();
        Cubic::new(p.clone()).init(&mut st, 0);
        assert_eq!(st.snd_ssthresh, TCP_INFINITE_SSTHRESH);
        Cubic::new(CubicParams {
            hystart: false,
            ..p
        })
        .init(&mut st, 0);
        assert_eq!(st.snd_ssthresh, 30);
    }

    /// Linux CUBIC undoes with `tcp_reno_undo_cwnd`: max(cwnd, prior_cwnd).
    #[test]
    fn undo_restores_prior_cwnd() {
        let mut c = Cubic::default();
        let st = ca_state(70, 70);
        assert_eq!(c.undo_cwnd(&st, 100), 100);
        assert_eq!(c.undo_cwnd(&ca_state(120, 70), 100), 120);
    }

    /// Parameters out of the accepted range are clamped at construction (no division by
    /// zero).
    #[test]
    fn new_clamps_params() {
        let p = CubicParams {
            beta: 5000,
            bic_scale: 0,
            ..CubicParams::default()
        };
        let mut c = Cubic::new(p);
        assert_eq!(c.params().beta, 1023);
        assert_eq!(c.params().bic_scale, 1);
        let mut st = ca_state(100, 10);
        c.init(&mut st, 0);
        c.cong_avoid(&mut st, 0, 1_000_000, 10 * MS);
        assert!(st.snd_cwnd > 100);
    }
}
