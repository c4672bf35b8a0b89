//! Measurements of the host egress path.

use std::time::Duration;

use crate::time::{nanos, Instant};

/// Count, sum, min and max of a series of durations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Samples.
    pub count: u64,
    /// Sum of samples, ns.
    pub sum: u128,
    /// Smallest sample.
    pub min: Duration,
    /// Largest sample.
    pub max: Duration,
}

impl Summary {
    /// Add a sample.
    pub fn add(&mut self, t: Duration) {
        if self.count == 0 || t < self.min {
            self.min = t;
        }
        self.max = self.max.max(t);
        self.count += 1;
        self.sum += u128::from(nanos(t));
    }
    /// Mean, or zero without samples.
    pub fn mean(&self) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((self.sum / u128::from(self.count)) as u64)
    }
}

/// Bytes a flow has below its endpoint (in the qdisc, the NIC ring, or sent but not yet
/// completed): the emulator's view of Linux's `sk_wmem_alloc` for that flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowBytes {
    /// Bytes now.
    pub current: u64,
    /// Largest value seen.
    pub max: u64,
    /// Number of changes (samples for the plain mean).
    pub samples: u64,
    /// Sum of the values after each change.
    pub sample_sum: u128,
    /// Integral of bytes over time, byte·ns, up to `last_change`.
    pub integral: u128,
    /// Time of the first change.
    pub first: Instant,
    /// Time of the last change.
    pub last_change: Instant,
}

impl FlowBytes {
    fn set(&mut self, now: Instant, value: u64) {
        if self.samples == 0 {
            self.first = now;
        } else {
            self.integral += u128::from(self.current) * u128::from(nanos(now - self.last_change));
        }
        self.current = value;
        self.last_change = now;
        self.max = self.max.max(value);
        self.samples += 1;
        self.sample_sum += u128::from(value);
    }
    /// Add bytes at `now`.
    pub fn add(&mut self, now: Instant, n: u64) {
        self.set(now, self.current.saturating_add(n));
    }
    /// Remove bytes at `now`.
    pub fn sub(&mut self, now: Instant, n: u64) {
        self.set(now, self.current.saturating_sub(n));
    }
    /// Mean of the values after each change.
    pub fn mean(&self) -> f64 {
        if self.samples == 0 {
            return 0.0;
        }
        self.sample_sum as f64 / self.samples as f64
    }
    /// Time-weighted mean from the first change until `now`.
    pub fn time_weighted_mean(&self, now: Instant) -> f64 {
        let span = nanos(now - self.first);
        if span == 0 {
            return self.current as f64;
        }
        let total =
            self.integral + u128::from(self.current) * u128::from(nanos(now - self.last_change));
        total as f64 / span as f64
    }
}

/// One packet's trip through the host egress path (recorded when enabled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketDelay {
    /// Flow hash.
    pub flow: u32,
    /// Bytes (the packet as the endpoint sent it; a TSO super-segment counts whole).
    pub len: u32,
    /// Its TX-completion token.
    pub token: Option<u64>,
    /// Entered the qdisc.
    pub enqueued: Instant,
    /// Last bit of its last wire segment left the NIC.
    pub left: Instant,
}

impl PacketDelay {
    /// Host-queue delay: from qdisc enqueue until the last bit left the NIC.
    pub fn host_queue_delay(&self) -> Duration {
        self.left - self.enqueued
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_bytes_time_weighting() {
        let mut f = FlowBytes::default();
        f.add(Instant(0), 100); // 100 for 10 ns
        f.add(Instant(10), 100); // 200 for 10 ns
        f.sub(Instant(20), 200); // 0 for 20 ns
        assert_eq!(f.max, 200);
        assert!((f.time_weighted_mean(Instant(40)) - (1000.0 + 2000.0) / 40.0).abs() < 1e-9);
        assert!((f.mean() - 100.0).abs() < 1e-9);
        let mut s = Summary::default();
        s.add(Duration::from_nanos(3));
        s.add(Duration::from_nanos(5));
        let ns = Duration::from_nanos;
        assert_eq!((s.min, s.max, s.mean()), (ns(3), ns(5), ns(4)));
    }
}
