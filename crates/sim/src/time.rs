//! Virtual time and rates: the workspace's one time type.
//!
//! The emulator never reads a clock: a point in virtual time is an [`Instant`], nanoseconds
//! since the start of a run, advanced only by the event queue; a span (a link's delay, a
//! serialisation time, a run's length) is a [`Duration`]. Both come from `shallow-time`, as
//! the engine's and the qdiscs' do, so the emulator hands its `now` to them unconverted.

use std::time::Duration;

pub use shallow_time::{nanos, Instant, Rate};

/// `d` in seconds as `nanoseconds / 1e9`, the one float conversion of the emulator's reports
/// (the same float as [`Instant::as_secs_f64`] of an instant `d` after the epoch).
pub fn secs_f64(d: Duration) -> f64 {
    nanos(d) as f64 / 1e9
}
