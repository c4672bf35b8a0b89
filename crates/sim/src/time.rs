//! Virtual time and rates.
//!
//! The emulator never reads a clock: [`Time`] is a count of nanoseconds since the start of a
//! run, advanced only by the event queue.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A point in virtual time, in nanoseconds since the start of the simulation.
///
/// Also used for durations (the difference of two points), as the engine's `Instant` is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(pub u64);

impl Time {
    /// Time zero: the start of a run.
    pub const ZERO: Time = Time(0);
    /// The largest representable time ("never").
    pub const MAX: Time = Time(u64::MAX);

    /// `n` nanoseconds.
    pub const fn from_nanos(n: u64) -> Time {
        Time(n)
    }
    /// `n` microseconds.
    pub const fn from_micros(n: u64) -> Time {
        Time(n.saturating_mul(1_000))
    }
    /// `n` milliseconds.
    pub const fn from_millis(n: u64) -> Time {
        Time(n.saturating_mul(1_000_000))
    }
    /// `n` seconds.
    pub const fn from_secs(n: u64) -> Time {
        Time(n.saturating_mul(1_000_000_000))
    }
    /// Nanoseconds.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Seconds as a float (for reports only; never used for scheduling).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// `self - other`, or zero if `other` is later.
    pub const fn saturating_sub(self, other: Time) -> Time {
        Time(self.0.saturating_sub(other.0))
    }
    /// `self + other`, capped at [`Time::MAX`].
    pub const fn saturating_add(self, other: Time) -> Time {
        Time(self.0.saturating_add(other.0))
    }
}

impl Add for Time {
    type Output = Time;
    fn add(self, rhs: Time) -> Time {
        self.saturating_add(rhs)
    }
}

impl AddAssign for Time {
    fn add_assign(&mut self, rhs: Time) {
        *self = *self + rhs;
    }
}

impl Sub for Time {
    type Output = Time;
    fn sub(self, rhs: Time) -> Time {
        self.saturating_sub(rhs)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A transmission rate in bits per second: the qdiscs' type, the one `Rate` of the
/// workspace ([`RateExt`] gives it the emulator's time type).
pub use shallow_qdisc::Rate;

/// [`Rate`] in the emulator's [`Time`].
pub trait RateExt {
    /// Time to serialise `bytes` at this rate, rounded up to whole nanoseconds so a packet
    /// never leaves earlier than the rate allows. A zero rate means "infinitely slow" and
    /// returns [`Time::MAX`].
    fn tx_time(self, bytes: u64) -> Time;
    /// Bytes this rate carries in `t` (rounded down).
    fn bytes_in(self, t: Time) -> u64;
}

impl RateExt for Rate {
    fn tx_time(self, bytes: u64) -> Time {
        Time(self.tx_time_ns(bytes))
    }
    fn bytes_in(self, t: Time) -> u64 {
        self.bytes_in_ns(t.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tx_time_rounds_up() {
        // 1500 bytes at 1 Gbit/s = 12 µs exactly.
        assert_eq!(Rate::gbps(1).tx_time(1500), Time::from_micros(12));
        // 1 byte at 3 bit/s = 8/3 s → rounded up.
        assert_eq!(Rate::bps(3).tx_time(1), Time(2_666_666_667));
        assert_eq!(Rate::bps(0).tx_time(1), Time::MAX);
        assert_eq!(Rate::mbps(8).bytes_in(Time::from_secs(1)), 1_000_000);
    }

    #[test]
    fn time_arith_saturates() {
        assert_eq!(Time(5) - Time(7), Time::ZERO);
        assert_eq!(Time::MAX + Time(1), Time::MAX);
        assert_eq!(format!("{}", Time::from_millis(1500)), "1.500000000");
    }
}
