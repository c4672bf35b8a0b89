//! The proxy's counters and its table of open connections, for `--stats` and `SIGUSR1`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use shallow_os::TcpStream;

/// Counters of a running proxy (all monotonic but `open`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Connections accepted from the TUN.
    pub accepted: AtomicU64,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections whose upstream could not be reached (the client got a RST).
    pub upstream_failures: AtomicU64,
    /// Connections that ended with a reset carried from one side to the other.
    pub resets: AtomicU64,
    /// Bytes relayed from clients to upstream.
    pub bytes_up: AtomicU64,
    /// Bytes relayed from upstream to clients.
    pub bytes_down: AtomicU64,
    conns: Mutex<BTreeMap<u64, Conn>>,
    next: AtomicU64,
}

/// One open connection in the table.
#[derive(Debug)]
struct Conn {
    client: SocketAddr,
    dst: SocketAddr,
    /// A handle on the Shallow socket, for its `TCP_INFO` (taken out before the relay
    /// closes the socket, so it never keeps it open).
    stream: TcpStream,
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

/// One row of the connection table: where it goes, what it moved, and the Shallow socket's
/// queues toward the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnRow {
    /// The client (the kernel's side of the TUN).
    pub client: SocketAddr,
    /// Its original destination.
    pub dst: SocketAddr,
    /// Bytes relayed client → upstream.
    pub bytes_up: u64,
    /// Bytes relayed upstream → client.
    pub bytes_down: u64,
    /// Bytes written toward the client and not yet sent (`tcpi_notsent_bytes`).
    pub notsent: u32,
    /// Segments sent toward the client and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Congestion window toward the client, segments.
    pub cwnd: u32,
    /// Smoothed RTT toward the client, µs.
    pub srtt_us: u32,
}

/// A connection's place in the table; [`Stats::remove`] takes it out.
#[derive(Debug)]
pub struct ConnId(u64);

impl Stats {
    /// Enters an accepted connection; returns its id and its two byte counters
    /// (client → upstream, upstream → client).
    pub fn add(
        &self,
        client: SocketAddr,
        dst: SocketAddr,
        stream: TcpStream,
    ) -> (ConnId, Arc<AtomicU64>, Arc<AtomicU64>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (up, down) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        self.table().insert(
            id,
            Conn {
                client,
                dst,
                stream,
                up: Arc::clone(&up),
                down: Arc::clone(&down),
            },
        );
        (ConnId(id), up, down)
    }

    /// Takes a connection out of the table (dropping the table's handle on its socket).
    pub fn remove(&self, id: ConnId) {
        if self.table().remove(&id.0).is_some() {
            self.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Conn>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open connections, oldest first, at most `max`.
    pub fn rows(&self, max: usize) -> Vec<ConnRow> {
        self.table()
            .values()
            .take(max)
            .map(|c| {
                let info = c.stream.tcp_info().ok();
                ConnRow {
                    client: c.client,
                    dst: c.dst,
                    bytes_up: c.up.load(Ordering::Relaxed),
                    bytes_down: c.down.load(Ordering::Relaxed),
                    notsent: info.as_ref().map_or(0, |i| i.notsent_bytes),
                    unacked: info.as_ref().map_or(0, |i| i.unacked),
                    cwnd: info.as_ref().map_or(0, |i| i.snd_cwnd),
                    srtt_us: info.as_ref().map_or(0, |i| i.rtt),
                }
            })
            .collect()
    }

    /// The counters and up to `max_rows` open connections, as text.
    pub fn report(&self, max_rows: usize) -> String {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut s = format!(
            "connections: {} open, {} accepted, {} upstream failures, {} resets\n\
             bytes: {} up (client -> upstream), {} down (upstream -> client)\n",
            g(&self.open),
            g(&self.accepted),
            g(&self.upstream_failures),
            g(&self.resets),
            g(&self.bytes_up),
            g(&self.bytes_down),
        );
        let rows = self.rows(max_rows);
        if !rows.is_empty() {
            s.push_str(&format!(
                "{:<24} {:<24} {:>12} {:>12} {:>9} {:>7} {:>6} {:>8}\n",
                "client", "destination", "up", "down", "notsent", "unacked", "cwnd", "srtt_us"
            ));
            for r in rows {
                s.push_str(&format!(
                    "{:<24} {:<24} {:>12} {:>12} {:>9} {:>7} {:>6} {:>8}\n",
                    r.client.to_string(),
                    r.dst.to_string(),
                    r.bytes_up,
                    r.bytes_down,
                    r.notsent,
                    r.unacked,
                    r.cwnd,
                    r.srtt_us
                ));
            }
        }
        s
    }
}
