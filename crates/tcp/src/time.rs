//! Engine time: [`Instant`] is nanoseconds on the substrate's clock (virtual or real), spans
//! are [`core::time::Duration`]; both come from `shallow-time`, the workspace's one time type.
//!
//! The engine never reads a clock; every entry point that needs time takes `now: Instant`.
//! Only differences and comparisons of instants are meaningful.

pub use shallow_time::Instant;
