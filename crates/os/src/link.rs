//! An in-memory link joining two [`Host`](crate::Host)s in one process: no TUN, no root.
//!
//! Each direction is a bounded packet queue (like a veth pair's `txqueuelen`, default 1,000
//! packets; an overflow is dropped and counted) with an `eventfd(2)` that is readable while
//! the queue holds packets, so the receiving host's I/O thread waits on it exactly as it
//! waits on a TUN. TSO super-segments cross whole and arrive as GRO aggregates with their
//! `gso_size` (a veth with GSO/GRO on both ends does the same), so both engines run their
//! offload paths.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{IpAddr, Ipv4Addr, SocketAddr};
//! use shallow_os::{link, Host, TcpListener, TcpStream};
//! use shallow_tcp::Stack;
//!
//! let (a, b) = link::pair()?;
//! let ip_a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
//! let ip_b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
//! let mut sa = Stack::new(1);
//! sa.add_address(ip_a);
//! let mut sb = Stack::new(2);
//! sb.add_address(ip_b);
//! let (ha, hb) = (Host::start(sa, a)?, Host::start(sb, b)?);
//! let l = TcpListener::bind(&hb, SocketAddr::new(ip_b, 80))?;
//! let mut c = TcpStream::connect(&ha, SocketAddr::new(ip_b, 80))?;
//! let (mut s, _) = l.accept()?;
//! c.write_all(b"hello")?;
//! let mut buf = [0u8; 5];
//! s.read_exact(&mut buf)?;
//! assert_eq!(&buf, b"hello");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::wake::Waker;

/// Settings of an in-memory link (both directions alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// MTU of the link (fq's quantum is derived from it).
    pub mtu: usize,
    /// Packets a direction holds before it drops (`txqueuelen`).
    pub limit: usize,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            mtu: 1500,
            limit: 1000,
        }
    }
}

/// Buffers kept for reuse per direction.
const POOL: usize = 256;

struct Queue {
    q: Mutex<QState>,
    /// Readable while `q` holds packets.
    ready: Waker,
    limit: usize,
    sent: AtomicU64,
    drops: AtomicU64,
}

struct QState {
    pkts: VecDeque<(Vec<u8>, Option<u16>)>,
    pool: Vec<Vec<u8>>,
}

impl Queue {
    fn new(limit: usize) -> io::Result<Arc<Queue>> {
        Ok(Arc::new(Queue {
            q: Mutex::new(QState {
                pkts: VecDeque::new(),
                pool: Vec::new(),
            }),
            ready: Waker::new()?,
            limit: limit.max(1),
            sent: AtomicU64::new(0),
            drops: AtomicU64::new(0),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QState> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// One end of an in-memory link: what it sends arrives at the other end.
pub struct MemLink {
    tx: Arc<Queue>,
    rx: Arc<Queue>,
    mtu: usize,
}

impl std::fmt::Debug for MemLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemLink")
            .field("mtu", &self.mtu)
            .field("sent", &self.sent())
            .field("drops", &self.drops())
            .finish()
    }
}

/// Two ends of a link with the default settings.
pub fn pair() -> io::Result<(MemLink, MemLink)> {
    pair_with(LinkConfig::default())
}

/// Two ends of a link with `cfg`.
pub fn pair_with(cfg: LinkConfig) -> io::Result<(MemLink, MemLink)> {
    let ab = Queue::new(cfg.limit)?;
    let ba = Queue::new(cfg.limit)?;
    Ok((
        MemLink {
            tx: Arc::clone(&ab),
            rx: Arc::clone(&ba),
            mtu: cfg.mtu,
        },
        MemLink {
            tx: ba,
            rx: ab,
            mtu: cfg.mtu,
        },
    ))
}

impl MemLink {
    /// The link's MTU.
    pub fn mtu(&self) -> usize {
        self.mtu
    }

    /// Packets this end has sent (accepted by the link).
    pub fn sent(&self) -> u64 {
        self.tx.sent.load(Ordering::Relaxed)
    }

    /// Packets this end sent that the link dropped (queue full).
    pub fn drops(&self) -> u64 {
        self.tx.drops.load(Ordering::Relaxed)
    }

    /// Sends one IP packet (a super-segment with its `gso_size`). A full queue drops it and
    /// returns `ENOBUFS`.
    pub fn send(&self, data: &[u8], gso_size: Option<u16>) -> io::Result<()> {
        self.send_parts(std::iter::once(data), gso_size)
    }

    /// [`MemLink::send`] for a packet held in pieces (headers, then payload pieces), which
    /// the link copies into one buffer in order.
    pub fn send_parts<'a>(
        &self,
        parts: impl IntoIterator<Item = &'a [u8]>,
        gso_size: Option<u16>,
    ) -> io::Result<()> {
        let mut q = self.tx.lock();
        if q.pkts.len() >= self.tx.limit {
            drop(q);
            self.tx.drops.fetch_add(1, Ordering::Relaxed);
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        let mut buf = q.pool.pop().unwrap_or_default();
        buf.clear();
        for p in parts {
            buf.extend_from_slice(p);
        }
        let was_empty = q.pkts.is_empty();
        q.pkts.push_back((buf, gso_size));
        if was_empty {
            // Under the queue lock: the reader drains the eventfd under it too, so the
            // eventfd is readable whenever packets are queued.
            self.tx.ready.wake()?;
        }
        drop(q);
        self.tx.sent.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Moves up to `max` received packets into `out`; returns how many.
    pub fn recv_batch(
        &self,
        out: &mut Vec<(Vec<u8>, Option<u16>)>,
        max: usize,
    ) -> io::Result<usize> {
        let mut q = self.rx.lock();
        let n = q.pkts.len().min(max);
        out.extend(q.pkts.drain(..n));
        if q.pkts.is_empty() {
            self.rx.ready.drain()?;
        }
        Ok(n)
    }

    /// Gives a received packet's buffer back for reuse by the sender.
    pub fn recycle(&self, buf: Vec<u8>) {
        let mut q = self.rx.lock();
        if q.pool.len() < POOL {
            q.pool.push(buf);
        }
    }
}

/// Readable while packets wait to be received at this end.
impl AsFd for MemLink {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.rx.ready.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wake::wait_readable;
    use std::time::Duration;

    /// Packets cross in order with their gso_size; the receiving end is readable exactly
    /// while packets wait; the queue limit drops and counts (txqueuelen).
    #[test]
    fn order_readiness_and_limit() {
        let (a, b) = pair_with(LinkConfig {
            mtu: 1500,
            limit: 2,
        })
        .unwrap();
        let idle = Waker::new().unwrap();
        let ready = |l: &MemLink| {
            wait_readable(Some(l.as_fd()), &idle, Some(Duration::ZERO))
                .unwrap()
                .device
        };
        assert!(!ready(&b));
        a.send(b"one", None).unwrap();
        a.send(b"two", Some(1000)).unwrap();
        let e = a.send(b"three", None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS));
        assert_eq!((a.sent(), a.drops()), (2, 1));
        assert!(ready(&b));
        assert!(!ready(&a));
        let mut out = Vec::new();
        assert_eq!(b.recv_batch(&mut out, 1).unwrap(), 1);
        assert!(ready(&b), "one packet still queued");
        assert_eq!(b.recv_batch(&mut out, 8).unwrap(), 1);
        assert!(!ready(&b));
        assert_eq!(out[0], (b"one".to_vec(), None));
        assert_eq!(out[1], (b"two".to_vec(), Some(1000)));
    }
}
