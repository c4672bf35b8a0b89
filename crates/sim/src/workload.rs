//! The emulator's application threads of netperf's workloads: where they connect or listen.
//!
//! What a thread does with its one socket is its [`Role`], defined once for every substrate
//! in `shallow-workload` and played by its state machine ([`shallow_workload::Play`]);
//! [`crate::host::TcpHost`] runs it on a CPU. Client roles connect; server roles come from a
//! listener ([`Listener`]) that accepts connections and starts one thread per connection, as
//! `netserver` does.

use std::net::SocketAddr;

pub use shallow_workload::{Role, Test, Workload, Writer};

/// A client thread: connects to `remote`, then plays `role`. `flow` names it in reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Client {
    /// Flow index (reports).
    pub flow: usize,
    /// Where to connect.
    pub remote: SocketAddr,
    /// What to do once connected.
    pub role: Role,
    /// Set TCP_NODELAY.
    pub nodelay: bool,
    /// `SO_TIMESTAMPING` flags set once connected (0: none); the thread's
    /// [`ThreadStats::tx_stamps`](crate::host::ThreadStats::tx_stamps) gets the per-write
    /// spans.
    pub timestamping: u32,
    /// `SO_ZEROCOPY` once connected, and every send `MSG_ZEROCOPY`; the thread's
    /// [`ThreadStats::zerocopy`](crate::host::ThreadStats::zerocopy) gets the completions.
    pub zerocopy: bool,
}

/// A listening socket whose accepted connections each get a thread playing `role`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    /// Port to listen on (all addresses).
    pub port: u16,
    /// Role of each accepted connection's thread.
    pub role: Role,
    /// Set TCP_NODELAY on accepted sockets.
    pub nodelay: bool,
    /// `SO_TIMESTAMPING` flags set on accepted sockets (0: none).
    pub timestamping: u32,
    /// `SO_ZEROCOPY` on accepted sockets, their sends `MSG_ZEROCOPY`.
    pub zerocopy: bool,
}
