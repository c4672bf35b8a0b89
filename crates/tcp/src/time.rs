//! Engine time: [`Instant`] is nanoseconds on the substrate's clock (virtual or real).
//!
//! The engine never reads a clock; every entry point that needs time takes `now: Instant`.
//! Only differences and comparisons of instants are meaningful.

use core::ops::{Add, AddAssign, Sub};
use core::time::Duration;

/// A point in time: nanoseconds since the substrate's epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch (time zero).
    pub const ZERO: Instant = Instant(0);

    /// An instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    /// An instant `us` microseconds after the epoch.
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us.saturating_mul(1_000))
    }
    /// An instant `ms` milliseconds after the epoch.
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }
    /// An instant `s` seconds after the epoch.
    pub const fn from_secs(s: u64) -> Instant {
        Instant(s.saturating_mul(1_000_000_000))
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Microseconds since the epoch (truncated), Linux's `tcp_clock_us()`.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }
    /// Milliseconds since the epoch (truncated): the TCP timestamp clock (`tcp_time_stamp_ms`).
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(dur_ns(d)))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX`.
pub(crate) fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    fn sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(dur_ns(d)))
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating difference (zero if `rhs` is later).
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl core::fmt::Display for Instant {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_millis(6));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::from_millis(2), Duration::from_millis(3));
        assert_eq!(
            Instant(u64::MAX) + Duration::from_secs(1),
            Instant(u64::MAX)
        );
        assert_eq!(Instant::from_micros(1500).as_millis(), 1);
        assert_eq!(format!("{}", Instant::from_millis(1500)), "1.500000000");
    }
}
