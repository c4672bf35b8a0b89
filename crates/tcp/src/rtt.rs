//! RTT estimation and RTO (RFC 6298 with Linux's `tcp_rtt_estimator` / `tcp_set_rto`), and the
//! windowed min-RTT filter.

use crate::env::Env;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use core::time::Duration;

/// The connection's RTT estimator and retransmission timeout (RFC 6298 §2 in Linux's scaled
/// form): smoothed RTT `srtt_us` (µs << 3), mean deviation `mdev_us` (µs << 2), its maximum
/// over the current RTT `mdev_max_us`, the variance used for the RTO `rttvar_us`, the
/// sequence that ends the current RTT `rtt_seq`, the RTO, the windowed minimum RTT, and the
/// per-ACK sample log of the substrate ([`Stack::set_rtt_log`](crate::Stack::set_rtt_log)).
/// Its fields are private to this file.
#[derive(Clone, Debug)]
pub(crate) struct Rtt {
    srtt_us: u32,
    mdev_us: u32,
    mdev_max_us: u32,
    rttvar_us: u32,
    rtt_seq: u32,
    rto: Duration,
    min_rtt_us: u32,
    min_rtt_stamp: Instant,
    /// Samples (µs) recorded and not yet taken; at most `Env::rtt_log_cap`.
    log: Vec<u32>,
    /// Samples not recorded because `log` was full.
    log_dropped: u64,
}

impl Default for Rtt {
    fn default() -> Self {
        Rtt {
            srtt_us: 0,
            mdev_us: 0,
            mdev_max_us: 0,
            rttvar_us: 0,
            rtt_seq: 0,
            rto: TCP_TIMEOUT_INIT,
            min_rtt_us: u32::MAX,
            min_rtt_stamp: Instant::ZERO,
            log: Vec::new(),
            log_dropped: 0,
        }
    }
}

impl Rtt {
    /// Smoothed RTT in µs << 3 (`tp->srtt_us`; 0 before the first sample).
    pub fn srtt_us(&self) -> u32 {
        self.srtt_us
    }

    /// Mean deviation in µs << 2 (`tp->mdev_us`).
    pub fn mdev_us(&self) -> u32 {
        self.mdev_us
    }

    /// The windowed minimum RTT in µs (`tcp_min_rtt`; `u32::MAX` before the first sample).
    pub fn min_rtt_us(&self) -> u32 {
        self.min_rtt_us
    }

    /// The current retransmission timeout (`icsk_rto`).
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Exponential backoff of the RTO after a retransmission timeout, capped at `max`.
    pub fn backoff_rto(&mut self, max: Duration) {
        self.rto = (self.rto * 2).min(max);
    }

    /// Back to the initial RTO (`TCP_TIMEOUT_INIT`, 1 s), as a new connection starts.
    pub fn reset_rto(&mut self) {
        self.rto = TCP_TIMEOUT_INIT;
    }

    /// Moves the logged samples into `out`; returns how many were not logged (log full)
    /// since the last call.
    pub fn take_log(&mut self, out: &mut Vec<u32>) -> u64 {
        out.append(&mut self.log);
        core::mem::take(&mut self.log_dropped)
    }
}

impl Connection {
    /// Minimum RTO: route `rto_min`, else `tcp_rto_min_us` (200 ms).
    pub fn rto_min(&self, env: &Env) -> Duration {
        if self.route.rto_min_ms != 0 {
            Duration::from_millis(u64::from(self.route.rto_min_ms))
        } else {
            Duration::from_micros(env.sysint(Sysctl::tcp_rto_min_us) as u64)
        }
    }

    /// Maximum RTO (`tcp_rto_max_ms`).
    pub fn rto_max(&self, env: &Env) -> Duration {
        Duration::from_millis(env.sysint(Sysctl::tcp_rto_max_ms) as u64)
    }

    /// Feed one RTT sample in µs to the min-RTT filter and the estimator alike (the
    /// handshake's samples, where both are the same).
    pub fn rtt_sample(&mut self, env: &Env, now: Instant, mrtt_us: u32) {
        self.rtt_samples(env, now, mrtt_us, mrtt_us);
    }

    /// `tcp_ack_update_rtt` with a sample: `ca_rtt_us` (the newest acked skb's) feeds the
    /// windowed min-RTT (`tcp_update_rtt_min`), `seq_rtt_us` (the oldest's) the estimator
    /// (`tcp_rtt_estimator`, RFC 6298 §2 with Linux's mdev_max smoothing so RTO >= srtt +
    /// rto_min), then the RTO is recomputed (`tcp_set_rto`).
    pub fn rtt_samples(&mut self, env: &Env, now: Instant, seq_rtt_us: u32, ca_rtt_us: u32) {
        let mrtt = seq_rtt_us.max(1);
        if env.config.rtt_log_cap > 0 {
            if self.rtt.log.len() < env.config.rtt_log_cap {
                self.rtt.log.push(mrtt);
            } else {
                self.rtt.log_dropped += 1;
            }
        }
        self.update_min_rtt(env, now, ca_rtt_us.max(1));
        let rto_min_us = self.rto_min(env).as_micros() as u32;
        let mut m = mrtt as i64;
        if self.rtt.srtt_us != 0 {
            m -= i64::from(self.rtt.srtt_us >> 3);
            self.rtt.srtt_us = (i64::from(self.rtt.srtt_us) + m).max(1) as u32;
            if m < 0 {
                m = -m;
                m -= i64::from(self.rtt.mdev_us >> 2);
                if m > 0 {
                    m >>= 3;
                }
            } else {
                m -= i64::from(self.rtt.mdev_us >> 2);
            }
            self.rtt.mdev_us = (i64::from(self.rtt.mdev_us) + m).max(0) as u32;
            if self.rtt.mdev_us > self.rtt.mdev_max_us {
                self.rtt.mdev_max_us = self.rtt.mdev_us;
                if self.rtt.mdev_max_us > self.rtt.rttvar_us {
                    self.rtt.rttvar_us = self.rtt.mdev_max_us;
                }
            }
            if crate::seq::after(self.snd.una, self.rtt.rtt_seq) {
                if self.rtt.mdev_max_us < self.rtt.rttvar_us {
                    self.rtt.rttvar_us -= (self.rtt.rttvar_us - self.rtt.mdev_max_us) >> 2;
                }
                self.rtt.rtt_seq = self.snd.nxt;
                self.rtt.mdev_max_us = rto_min_us;
            }
        } else {
            self.rtt.srtt_us = mrtt << 3;
            self.rtt.mdev_us = mrtt << 1;
            self.rtt.rttvar_us = self.rtt.mdev_us.max(rto_min_us);
            self.rtt.mdev_max_us = self.rtt.rttvar_us;
            self.rtt.rtt_seq = self.snd.nxt;
        }
        self.cc_st.srtt_us = self.rtt.srtt_us;
        self.set_rto(env);
    }

    /// `tcp_set_rto`: RTO = srtt + rttvar (rttvar >= rto_min), bounded by tcp_rto_max_ms.
    /// Linux keeps the RTO in jiffies (`icsk_rto`, `__tcp_set_rto` rounds up with
    /// `usecs_to_jiffies`), so it is a whole number of the judge kernel's 4 ms jiffies:
    /// srtt 21.4 ms + rttvar 200 ms is an RTO of 224 ms, which shows where the RTO is
    /// counted from a packet's send time (`tcp_rto_delta_us`) and in every backoff
    /// (measured on 6.18, fuzz seed 140198: the RTO a loss probe re-armed fired at the head's
    /// send time + 224 ms, a tick later than + 221.4 ms), and in `tcpi_rto`.
    pub fn set_rto(&mut self, env: &Env) {
        let us = u64::from(self.rtt.srtt_us >> 3) + u64::from(self.rtt.rttvar_us);
        let j = crate::timer::JIFFY.as_micros() as u64;
        let us = us.div_ceil(j) * j;
        self.rtt.rto = Duration::from_micros(us).min(self.rto_max(env));
    }

    /// Windowed min-RTT (`tcp_update_rtt_min`, window `tcp_min_rtt_wlen` seconds).
    fn update_min_rtt(&mut self, env: &Env, now: Instant, rtt_us: u32) {
        let wlen = Duration::from_secs(env.sysint(Sysctl::tcp_min_rtt_wlen) as u64);
        if rtt_us <= self.rtt.min_rtt_us || now - self.rtt.min_rtt_stamp > wlen {
            self.rtt.min_rtt_us = rtt_us;
            self.rtt.min_rtt_stamp = now;
        }
        self.cc_st.min_rtt_us = self.rtt.min_rtt_us;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SocketId;

    #[test]
    fn rfc6298_first_sample_and_min_rto() {
        let env = Env::new(1);
        let mut s = Connection::new(SocketId(0), 1, Family::V4, &env);
        s.rtt_sample(&env, Instant::from_secs(1), 100_000);
        assert_eq!(s.rtt.srtt_us >> 3, 100_000);
        // RTO = srtt + max(2*rtt, rto_min) = 100 ms + 200 ms.
        assert_eq!(s.rtt.rto, Duration::from_millis(300));
        // Steady samples keep RTO >= srtt + 200 ms (Linux mdev_max floor).
        for i in 0..50 {
            s.snd.una = s.snd.una.wrapping_add(1000);
            s.rtt_sample(&env, Instant::from_secs(2 + i), 100_000);
        }
        assert!(s.rtt.rto >= Duration::from_millis(300));
        assert_eq!(s.rtt.min_rtt_us, 100_000);
    }

    /// The RTT-sample log records each estimator input, only when enabled, and never holds
    /// more than its bound (the rest is counted as dropped).
    #[test]
    fn rtt_log_is_off_by_default_and_bounded() {
        let mut env = Env::new(1);
        let mut s = Connection::new(SocketId(0), 1, Family::V4, &env);
        s.rtt_sample(&env, Instant::from_secs(1), 100);
        assert!(s.rtt.log.is_empty());
        env.config.rtt_log_cap = 3;
        for (i, us) in [0, 200, 300, 400, 500].into_iter().enumerate() {
            s.rtt_sample(&env, Instant::from_secs(2 + i as u64), us);
        }
        // A 0 µs measurement is fed to the estimator as 1 µs.
        assert_eq!(s.rtt.log, vec![1, 200, 300]);
        assert_eq!(s.rtt.log_dropped, 2);
    }

    /// Over a real transfer, the sender's log holds one sample per RTT-giving ACK, each at
    /// least the path's round trip; the receiver, not enabled, records nothing.
    #[test]
    fn stack_rtt_log_per_ack() {
        use crate::harness::{LinkConfig, Pair};
        use crate::tests::e2e::{connect_pair, transfer};
        let link = LinkConfig {
            delay: Duration::from_millis(5),
            ..LinkConfig::default()
        };
        let mut p = Pair::new(3, link);
        p.a.set_rtt_log(100_000);
        let (c, _l, s) = connect_pair(&mut p);
        let data = vec![7u8; 1 << 20];
        assert_eq!(
            transfer(&mut p, c, s, &data, Duration::from_secs(10)).len(),
            data.len()
        );
        let mut v = Vec::new();
        assert_eq!(p.a.take_rtt_samples(c, &mut v), Ok(0));
        assert!(v.len() > 10, "{} samples", v.len());
        assert!(v.iter().all(|&us| us >= 10_000), "{v:?}");
        let info = p.a.tcp_info(p.now, c).unwrap();
        assert!(v.iter().any(|&us| us <= info.rtt));
        let mut w = Vec::new();
        assert_eq!(p.b.take_rtt_samples(s, &mut w), Ok(0));
        assert!(w.is_empty());
        // Taken: the log is empty again.
        v.clear();
        assert_eq!(p.a.take_rtt_samples(c, &mut v), Ok(0));
        assert!(v.is_empty());
    }
}
