//! `shallow-time`: the one time type of Shallow's interfaces.
//!
//! A point in time is an [`Instant`]: nanoseconds since the epoch of the substrate's clock —
//! virtual time in the emulator and the packetdrill runner, the monotonic clock in the Linux
//! substrate. A span of time is a [`core::time::Duration`]. Nothing here reads a clock: the
//! engine, the qdiscs and the emulator are given `now` by their caller.
//!
//! All arithmetic saturates, at the epoch below and at [`Instant::MAX`] ("never") above, so a
//! deadline computed from a huge span (a zero [`Rate`]'s serialisation time, an idle timer)
//! is "never" rather than a wrap-around or a panic. A span is counted in whole nanoseconds
//! when it meets an instant ([`nanos`]), so instants are exact integers and the same inputs
//! give the same instants, bit for bit.
//!
//! [`Rate`] is the workspace's one transmission rate (bits per second), whose serialisation
//! times round up to whole nanoseconds.
//!
//! ```
//! use core::time::Duration;
//! use shallow_time::{Instant, Rate};
//!
//! let t = Instant::from_millis(5);
//! assert_eq!(t + Duration::from_micros(12), Instant::from_nanos(5_012_000));
//! assert_eq!(t - Instant::from_millis(7), Duration::ZERO); // saturates at zero
//! assert_eq!(Rate::gbps(1).tx_time(1500), Duration::from_micros(12));
//! assert_eq!(t + Rate::bps(0).tx_time(1), Instant::MAX); // never
//! assert_eq!(t.to_string(), "0.005000000");
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![no_std]

use core::fmt;
use core::ops::{Add, AddAssign, Sub, SubAssign};
use core::time::Duration;

/// Nanoseconds per second.
pub const NSEC_PER_SEC: u64 = 1_000_000_000;

/// A span in whole nanoseconds, saturating at `u64::MAX` (about 584 years).
///
/// This is how a [`Duration`] meets an [`Instant`]: `instant + d` adds `nanos(d)`.
#[inline]
pub const fn nanos(d: Duration) -> u64 {
    match d.as_secs().checked_mul(NSEC_PER_SEC) {
        Some(s) => s.saturating_add(d.subsec_nanos() as u64),
        None => u64::MAX,
    }
}

/// A point in time: nanoseconds since the substrate's epoch (the start of a run in virtual
/// time, the host's start on a real clock).
///
/// Differences of instants are [`Duration`]s; `instant ± duration` is an instant. Both
/// saturate: below at [`Instant::ZERO`] (a difference is zero if the right side is later),
/// above at [`Instant::MAX`], which stands for "never".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch (time zero).
    pub const ZERO: Instant = Instant(0);
    /// The end of time: "never" (a deadline that does not come).
    pub const MAX: Instant = Instant(u64::MAX);

    /// An instant `ns` nanoseconds after the epoch.
    #[inline]
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    /// An instant `us` microseconds after the epoch (saturating).
    #[inline]
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us.saturating_mul(1_000))
    }
    /// An instant `ms` milliseconds after the epoch (saturating).
    #[inline]
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms.saturating_mul(1_000_000))
    }
    /// An instant `s` seconds after the epoch (saturating).
    #[inline]
    pub const fn from_secs(s: u64) -> Instant {
        Instant(s.saturating_mul(NSEC_PER_SEC))
    }
    /// Nanoseconds since the epoch.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Microseconds since the epoch (truncated), Linux's `tcp_clock_us()`.
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }
    /// Milliseconds since the epoch (truncated): the TCP timestamp clock (`tcp_time_stamp_ms`).
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }
    /// Seconds since the epoch as a float: for reports only, never for scheduling.
    #[inline]
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// The span since the epoch.
    #[inline]
    pub const fn since_epoch(self) -> Duration {
        Duration::from_nanos(self.0)
    }
    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later (same as `self - earlier`).
    #[inline]
    pub const fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// Time elapsed from `earlier` to `self`, `None` if `earlier` is later.
    #[inline]
    pub const fn checked_duration_since(self, earlier: Instant) -> Option<Duration> {
        match self.0.checked_sub(earlier.0) {
            Some(ns) => Some(Duration::from_nanos(ns)),
            None => None,
        }
    }
    /// `self + d`, saturating at [`Instant::MAX`] (same as `self + d`).
    #[inline]
    pub const fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(nanos(d)))
    }
    /// `self + Duration::from_nanos(ns)`, saturating at [`Instant::MAX`], for a span its
    /// caller already counts in whole nanoseconds (a CPU cost table's figures), without the
    /// round trip through [`Duration`].
    #[inline]
    pub const fn saturating_add_nanos(self, ns: u64) -> Instant {
        Instant(self.0.saturating_add(ns))
    }
    /// `self - d`, saturating at [`Instant::ZERO`] (same as `self - d`).
    #[inline]
    pub const fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(nanos(d)))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturating at [`Instant::MAX`].
    #[inline]
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = self.saturating_add(d);
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturating at [`Instant::ZERO`].
    #[inline]
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}

impl SubAssign<Duration> for Instant {
    #[inline]
    fn sub_assign(&mut self, d: Duration) {
        *self = self.saturating_sub(d);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating difference (zero if `rhs` is later).
    #[inline]
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Display for Instant {
    /// Seconds with nine decimals, `1.500000000`: exact, as packetdrill and pcap timestamps.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}", self.0 / NSEC_PER_SEC, self.0 % NSEC_PER_SEC)
    }
}

/// A transmission rate in bits per second (a link's, tbf's `rate`, fq's `maxrate`): the one
/// rate type of the workspace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rate(pub u64);

impl Rate {
    /// `n` bits per second.
    pub const fn bps(n: u64) -> Rate {
        Rate(n)
    }
    /// `n` megabits per second (saturating).
    pub const fn mbps(n: u64) -> Rate {
        Rate(n.saturating_mul(1_000_000))
    }
    /// `n` gigabits per second (saturating).
    pub const fn gbps(n: u64) -> Rate {
        Rate(n.saturating_mul(1_000_000_000))
    }
    /// Bits per second.
    pub const fn as_bps(self) -> u64 {
        self.0
    }
    /// Time to serialise `bytes` at this rate, rounded up to whole nanoseconds so a packet
    /// never leaves earlier than the rate allows, and at most `u64::MAX` nanoseconds. A zero
    /// rate means "infinitely slow": `u64::MAX` nanoseconds, which takes any instant to
    /// [`Instant::MAX`].
    #[inline]
    pub fn tx_time(self, bytes: u64) -> Duration {
        Duration::from_nanos(self.tx_nanos(bytes))
    }
    #[inline]
    fn tx_nanos(self, bytes: u64) -> u64 {
        if self.0 == 0 {
            return u64::MAX;
        }
        let bits = u128::from(bytes) * 8 * u128::from(NSEC_PER_SEC);
        u64::try_from(bits.div_ceil(u128::from(self.0))).unwrap_or(u64::MAX)
    }
    /// When the last bit of `bytes` leaves if the first leaves at `start`: `start +
    /// self.tx_time(bytes)` (saturating: a zero rate gives [`Instant::MAX`]), without the round
    /// trip through [`Duration`].
    #[inline]
    pub fn tx_end(self, start: Instant, bytes: u64) -> Instant {
        start.saturating_add_nanos(self.tx_nanos(bytes))
    }
    /// Bytes this rate carries in `d` (rounded down, counted in whole nanoseconds of `d`,
    /// saturating).
    #[inline]
    pub fn bytes_in(self, d: Duration) -> u64 {
        let b = u128::from(self.0) * u128::from(nanos(d)) / 8 / u128::from(NSEC_PER_SEC);
        u64::try_from(b).unwrap_or(u64::MAX)
    }
}

impl fmt::Display for Rate {
    /// `tc`'s spelling in bits: `1000000bit`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}bit", self.0)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;

    #[test]
    fn instant_saturates_at_both_ends() {
        let t = Instant::from_millis(5);
        assert_eq!(t + Duration::from_millis(1), Instant::from_millis(6));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::from_millis(2), Duration::from_millis(3));
        assert_eq!(Instant::MAX + Duration::from_nanos(1), Instant::MAX);
        assert_eq!(Instant(u64::MAX - 1) + Duration::from_secs(1), Instant::MAX);
        assert_eq!(Instant(7) + Duration::MAX, Instant::MAX);
        assert_eq!(Instant(7) - Duration::MAX, Instant::ZERO);
        let mut m = t;
        m += Duration::from_nanos(3);
        m -= Duration::from_nanos(1);
        assert_eq!(m, Instant(5_000_002));
        assert_eq!(t.saturating_add_nanos(7), t + Duration::from_nanos(7));
        assert_eq!(Instant(u64::MAX - 1).saturating_add_nanos(2), Instant::MAX);
        assert_eq!(t.checked_duration_since(Instant::from_millis(6)), None);
        assert_eq!(
            t.checked_duration_since(Instant::from_millis(4)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(Instant::from_secs(u64::MAX), Instant::MAX);
        assert_eq!(Instant::from_millis(u64::MAX), Instant::MAX);
        assert_eq!(Instant::from_micros(u64::MAX), Instant::MAX);
    }

    #[test]
    fn conversions() {
        assert_eq!(nanos(Duration::new(3, 7)), 3_000_000_007);
        assert_eq!(nanos(Duration::MAX), u64::MAX);
        assert_eq!(nanos(Duration::from_nanos(u64::MAX)), u64::MAX);
        assert_eq!(
            nanos(Duration::new(u64::MAX / NSEC_PER_SEC, 999_999_999)),
            u64::MAX
        );
        assert_eq!(
            nanos(Duration::new(u64::MAX / NSEC_PER_SEC + 1, 0)),
            u64::MAX
        );
        for ns in [0, 1, 999_999_999, 1_000_000_000, u64::MAX - 1, u64::MAX] {
            assert_eq!(nanos(Duration::from_nanos(ns)), ns);
            assert_eq!(
                Instant::from_nanos(ns).since_epoch(),
                Duration::from_nanos(ns)
            );
            assert_eq!(Instant::ZERO + Duration::from_nanos(ns), Instant(ns));
        }
        assert_eq!(Instant::from_micros(1500).as_millis(), 1);
        assert_eq!(Instant::from_micros(1500).as_micros(), 1500);
        assert_eq!(Instant::from_nanos(2_500_000_000).as_secs_f64(), 2.5);
    }

    #[test]
    fn display() {
        assert_eq!(format!("{}", Instant::from_millis(1500)), "1.500000000");
        assert_eq!(format!("{}", Instant::ZERO), "0.000000000");
        assert_eq!(format!("{}", Instant::MAX), "18446744073.709551615");
        assert_eq!(format!("{}", Rate::mbps(1)), "1000000bit");
    }

    #[test]
    fn rate_rounds_up_and_saturates() {
        // 1500 bytes at 1 Gbit/s = 12 µs exactly.
        assert_eq!(Rate::gbps(1).tx_time(1500), Duration::from_micros(12));
        // 1 byte at 3 bit/s = 8/3 s → rounded up.
        assert_eq!(Rate::bps(3).tx_time(1), Duration::from_nanos(2_666_666_667));
        assert_eq!(Rate::bps(0).tx_time(1), Duration::from_nanos(u64::MAX));
        assert_eq!(
            Rate::bps(1).tx_time(u64::MAX),
            Duration::from_nanos(u64::MAX)
        );
        assert_eq!(Rate::mbps(8).bytes_in(Duration::from_secs(1)), 1_000_000);
        let t = Instant::from_millis(1);
        for bytes in [0, 1, 1500, 65536, u64::MAX] {
            for r in [Rate::bps(0), Rate::bps(3), Rate::gbps(1), Rate::gbps(400)] {
                assert_eq!(r.tx_end(t, bytes), t + r.tx_time(bytes));
            }
        }
        assert_eq!(Rate::bps(u64::MAX).bytes_in(Duration::MAX), u64::MAX);
        assert_eq!(Rate::gbps(u64::MAX), Rate(u64::MAX));
    }
}
