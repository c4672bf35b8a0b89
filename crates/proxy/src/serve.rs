//! The proxy: forwarding listeners on a Shallow host (IPv4 and IPv6 destinations) and one
//! relay task per accepted connection, on the caller's tokio runtime.

use std::io;
use std::sync::Arc;

use shallow_os::{AsyncTcpListener, AsyncTcpStream, Family, ForwardVerdict, Forwarded, Host};
use tokio::task::JoinHandle;

use crate::relay::{relay_request, relay_stream};
use crate::{Config, Stats};

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
    /// an AF_INET6 one for IPv6 (`EADDRINUSE` if the host already has either), and a forward
    /// rule that holds every SYN until the destination answers (it replaces the host's rule).
    /// Must be called within a tokio runtime.
    pub fn start(host: &Host, cfg: Config) -> io::Result<Proxy> {
        let cfg = Arc::new(cfg);
        let stats = Arc::new(Stats::default());
        let pending = Arc::new(tokio::sync::Semaphore::new(cfg.max_pending.max(1)));
        // Every SYN waits for the destination's answer (relay_request).
        host.set_forward_filter(Some(Arc::new(|_, _| ForwardVerdict::Defer)));
        let v4 = AsyncTcpListener::bind_any(host, Family::V4, cfg.backlog)?;
        let v6 = AsyncTcpListener::bind_any(host, Family::V6, cfg.backlog)?;
        let accept = [v4, v6]
            .into_iter()
            .map(|l| {
                let (cfg, stats) = (Arc::clone(&cfg), Arc::clone(&stats));
                let pending = Arc::clone(&pending);
                tokio::spawn(async move {
                    // An error means the host is down: nothing more will come.
                    while let Ok(f) = l.next_forwarded().await {
                        let (cfg, stats) = (Arc::clone(&cfg), Arc::clone(&stats));
                        match f {
                            Forwarded::Request(r) => {
                                // At most `max_pending` destinations tried at once: beyond,
                                // held SYNs stay in the SYN queue, which, once full, answers
                                // with SYN cookies (a flood of spoofed SYNs then costs no
                                // upstream connection at all).
                                let Ok(permit) = Arc::clone(&pending).acquire_owned().await else {
                                    break;
                                };
                                tokio::spawn(relay_request(r, permit, cfg, stats))
                            }
                            Forwarded::Stream(s, _) => {
                                tokio::spawn(relay_stream(AsyncTcpStream::from_std(s), cfg, stats))
                            }
                        };
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
