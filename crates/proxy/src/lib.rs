//! Shallow as the TCP stack of a TUN-based proxy (VPN clients, tun2socks-style proxies):
//! every TCP connection that arrives on a Shallow host's device, to any destination, is
//! accepted by a forwarding listener ([`shallow_os::TcpListener::bind_any`]) and relayed to
//! its original destination through the host's kernel ([`Upstream::Direct`]) or through a
//! SOCKS5 server ([`Upstream::Socks5`], RFC 1928 with RFC 1929 username/password).
//!
//! The relay keeps no unbounded buffer: toward the TUN it reads from upstream only while
//! the Shallow socket takes more (its writes wait under `TCP_NOTSENT_LOWAT` and TSQ, the
//! shallow-queue send path), toward upstream only while the kernel socket does (its own
//! `TCP_NOTSENT_LOWAT`); an idle connection holds no buffer at all (it waits for
//! readability, then borrows one). The client's SYN is answered only once the destination
//! has answered, so a refused, unreachable or silent destination looks to the client as it
//! would through a router (RST, ICMP unreachable, nothing); half-close is carried both ways
//! (FIN for FIN) and a reset on one side resets the other ([`relay`]).
//!
//! # Example: a SOCKS5 proxy for the TUN of `shallow netns up`
//!
//! ```no_run
//! use shallow_os::{Host, HostConfig};
//! use shallow_proxy::{Config, Proxy, Upstream};
//! let host = Host::attach(&HostConfig::default())?;
//! let cfg = Config {
//!     upstream: Upstream::Socks5 { server: "127.0.0.1:1080".parse()?, auth: None },
//!     ..Config::default()
//! };
//! let rt = tokio::runtime::Runtime::new()?;
//! rt.block_on(async {
//!     let proxy = Proxy::start(&host, cfg)?;
//!     // Relay for an hour, then print the counters and ten open connections.
//!     tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
//!     println!("{}", proxy.stats().report(10));
//!     Ok::<_, std::io::Error>(())
//! })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod relay;
pub mod serve;
pub mod socks5;
pub mod stats;

use std::net::SocketAddr;
use std::time::Duration;

pub use serve::Proxy;
pub use stats::{ConnRow, Stats};

/// Where the relay takes a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// Straight to the original destination, through the host's kernel.
    Direct,
    /// Through a SOCKS5 server (RFC 1928 `CONNECT`).
    Socks5 {
        /// The server's address.
        server: SocketAddr,
        /// Username and password (RFC 1929); `None` offers "no authentication" only.
        auth: Option<(String, String)>,
    },
}

/// How the proxy relays.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where connections go.
    pub upstream: Upstream,
    /// `TCP_NOTSENT_LOWAT` of the Shallow sockets toward the TUN (`None`: not set, the
    /// `net.ipv4.tcp_notsent_lowat` sysctl's default applies). Default 128 KiB.
    pub notsent_lowat: Option<u32>,
    /// `TCP_NOTSENT_LOWAT` of the kernel's upstream sockets (`None`: not set). Default 128 KiB.
    pub upstream_notsent_lowat: Option<u32>,
    /// The forwarding listener's backlog (`listen(2)`'s).
    pub backlog: i32,
    /// Largest read of one relay step (the buffer a busy direction borrows).
    pub chunk: usize,
    /// How long the connection to upstream (and the SOCKS5 exchange) may take.
    pub connect_timeout: Duration,
    /// Most held SYNs whose destination is being tried at once; beyond, SYNs wait in the
    /// SYN queue, and SYN cookies answer once it is full.
    pub max_pending: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            upstream: Upstream::Direct,
            notsent_lowat: Some(128 * 1024),
            upstream_notsent_lowat: Some(128 * 1024),
            backlog: 4096,
            chunk: 64 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_pending: 256,
        }
    }
}

/// Errors of the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The SOCKS5 server broke the protocol (RFC 1928).
    #[error("SOCKS5 server: {0}")]
    Protocol(&'static str),
    /// The SOCKS5 server refused the credentials (RFC 1929 status not 0).
    #[error("SOCKS5 server refused the username/password")]
    AuthFailed,
    /// The SOCKS5 server accepts none of the methods offered.
    #[error("SOCKS5 server accepts none of the offered authentication methods")]
    NoMethod,
    /// The SOCKS5 server answered CONNECT with a failure (RFC 1928 §6 `REP`).
    #[error("SOCKS5 CONNECT failed: reply {0:#04x}")]
    Reply(u8),
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<ProxyError> for std::io::Error {
    fn from(e: ProxyError) -> std::io::Error {
        match e {
            ProxyError::Io(e) => e,
            ProxyError::Reply(r) => socks5::reply_error(r),
            e => std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
        }
    }
}
