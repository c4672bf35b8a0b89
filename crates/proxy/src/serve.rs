//! The proxy: forwarding listeners on a Shallow host (IPv4 and IPv6 destinations) and one
//! relay task per accepted connection, on the caller's tokio runtime.

use std::io;
use std::sync::Arc;

use shallow_os::{AsyncTcpListener, Family, Host};
use tokio::task::JoinHandle;

use crate::{relay::relay, Config, Stats};

/// A running proxy. Dropping it (or [`Proxy::stop`]) stops accepting; connections being
/// relayed go on until they end.
#[derive(Debug)]
pub struct Proxy {
    stats: Arc<Stats>,
    accept: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Starts relaying every TCP connection that arrives on `host`'s device for a destination
    /// that is not one of its addresses: an AF_INET forwarding listener for IPv4 destinations,
    /// an AF_INET6 one for IPv6 (`EADDRINUSE` if the host already has either). Must be called
    /// within a tokio runtime.
    pub fn start(host: &Host, cfg: Config) -> io::Result<Proxy> {
        let cfg = Arc::new(cfg);
        let stats = Arc::new(Stats::default());
        let v4 = AsyncTcpListener::bind_any(host, Family::V4, cfg.backlog)?;
        let v6 = AsyncTcpListener::bind_any(host, Family::V6, cfg.backlog)?;
        let accept = [v4, v6]
            .into_iter()
            .map(|l| {
                let (cfg, stats) = (Arc::clone(&cfg), Arc::clone(&stats));
                tokio::spawn(async move {
                    // An accept error means the host is down: nothing more will come.
                    while let Ok((s, _)) = l.accept().await {
                        tokio::spawn(relay(s, Arc::clone(&cfg), Arc::clone(&stats)));
                    }
                })
            })
            .collect();
        Ok(Proxy { stats, accept })
    }

    /// The proxy's counters and connection table.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Stops accepting (the forwarding listeners close; new SYNs are then ignored).
    pub fn stop(&mut self) {
        for t in self.accept.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}
