//! Workloads with netperf's names, as roles of application threads.
//!
//! A *role* says what the thread does with its one socket; [`crate::host::TcpHost`] runs it
//! as a state machine on a CPU. Client roles connect; server roles come from a listener
//! ([`Listener`]) that accepts connections and starts one thread per connection, as
//! `netserver` does.

use std::net::SocketAddr;

/// How a bulk sender writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writer {
    /// Blocking `send()` of whole messages: one call per message; a call that finds the send
    /// buffer full sleeps until write space (`sk_stream_wait_memory`) and resumes.
    #[default]
    Blocking,
    /// Non-blocking `send()` until EAGAIN, then `epoll_wait` for EPOLLOUT (level-triggered),
    /// as an event-loop server writes (spec §12 E3).
    Epoll,
}

impl std::str::FromStr for Writer {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "blocking" => Ok(Writer::Blocking),
            "epoll" => Ok(Writer::Epoll),
            _ => Err(format!("unknown writer `{s}` (expected blocking or epoll)")),
        }
    }
}

/// What a thread does with its socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Bulk sender (TCP_STREAM's netperf side, TCP_MAERTS's netserver side, BULK).
    Sender {
        /// Bytes per `send()` (netperf `-m`).
        msg: usize,
        /// Blocking or epoll writer.
        writer: Writer,
        /// Stop after this many bytes and shut down the write side (BULK); `None`: forever.
        limit: Option<u64>,
        /// Keep a SHA-256 of the bytes sent.
        hash: bool,
    },
    /// Bulk receiver: blocking `recv()` of up to `buf` bytes until end of stream.
    Receiver {
        /// Bytes per `recv()`.
        buf: usize,
        /// Keep a SHA-256 of the bytes received.
        hash: bool,
    },
    /// TCP_RR client: send a request, read the whole response, repeat; records latency.
    RrClient {
        /// Request bytes.
        req: usize,
        /// Response bytes.
        resp: usize,
    },
    /// TCP_RR server: read a whole request, send the response, repeat.
    RrServer {
        /// Request bytes.
        req: usize,
        /// Response bytes.
        resp: usize,
    },
}

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
}
