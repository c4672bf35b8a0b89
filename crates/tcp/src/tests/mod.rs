//! The engine's scenario tests: stacks driven by hand or over `harness`'s impaired link.
//! Unit tests of one rule stay beside the rule (`#[cfg(test)] mod tests` in its file).
//!
//! - `drill_like`: packetdrill-style scenarios (scripted packets in, exact packets out),
//!   mostly behaviour measured on Linux 6.18.
//! - `e2e`: two stacks end to end (handshake, transfer, loss, TSO, paged packets).
//! - `dualstack`, `fastopen`, `gate`, `linger`, `mem`, `rwnd`, `rxstamp`, `tstamp`: one mechanism each (IPv4-mapped
//!   sockets, TCP Fast Open, local drops at the transmit, SO_LINGER, TCP memory accounting, the receive
//!   window, receive timestamps, transmit timestamps).
//! - `prop`: property tests (hostile packets, random impairments).

mod drill_like;
mod dualstack;
pub(crate) mod e2e;
mod fastopen;
mod forward;
mod gate;
mod linger;
mod mem;
mod prop;
mod rwnd;
mod rxstamp;
mod tstamp;
