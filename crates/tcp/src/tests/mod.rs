//! The engine's scenario tests: stacks driven by hand or over `harness`'s impaired link.
//! Unit tests of one rule stay beside the rule (`#[cfg(test)] mod tests` in its file).
//!
//! - `drill_like`: packetdrill-style scenarios (scripted packets in, exact packets out),
//!   mostly behaviour measured on Linux 6.18.
//! - `e2e`: two stacks end to end (handshake, transfer, loss, TSO, paged packets).
//! - `dualstack`, `fastopen`, `gate`, `linger`, `md5`, `mem`, `rwnd`, `rxstamp`, `tstamp`,
//!   `urg`, `zerocopy`: one mechanism each (IPv4-mapped sockets, TCP Fast Open, local drops at
//!   the transmit, SO_LINGER, TCP-MD5 signatures, TCP memory accounting, the receive window,
//!   receive timestamps, transmit timestamps, urgent data, MSG_ZEROCOPY).
//! - `prop`: property tests (hostile packets, random impairments).

mod drill_like;
mod dualstack;
pub(crate) mod e2e;
mod fastopen;
mod forward;
mod gate;
mod linger;
mod md5;
mod mem;
mod prop;
mod rwnd;
mod rxstamp;
mod tstamp;
mod urg;
mod zerocopy;
