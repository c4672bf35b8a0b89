//! A Shallow host on Linux: one `shallow_tcp::Stack` driven by an I/O thread over a TUN queue,
//! and blocking [`TcpStream`]s for application threads.
//!
//! The I/O thread is the substrate loop of ARCHITECTURE.md with a real clock:
//! wait (`poll` on the TUN and a [`Waker`], until the engine's next timer) → read a batch and
//! feed `Stack::input` (GRO aggregates with their `gso_size`) → `handle_timeout` when the
//! deadline passed → drain `poll_transmit` into the TUN (super-segments as GSO writes) and call
//! `tx_complete` as soon as the kernel took the packet (the write to a TUN is synchronous,
//! so the packet has left this host) → drain `poll_wakeup` and wake application threads.
//!
//! The engine sits behind one mutex. Application threads call it directly (`send`, `recv`, …)
//! and then wake the I/O thread so that what the call queued is transmitted; a call that
//! would block waits on a condition variable that the I/O thread signals after every round
//! that produced socket wake-ups. Time is `std::time::Instant` since the host started, in ns.
//!
//! This is a skeleton: no socket ownership (`lock_sock`) across calls, one TUN queue, and
//! TX completion at write time (so TSQ never throttles on this substrate yet).

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use shallow_tcp::{Errno, Family, Instant, Shutdown, SocketId, Stack, TcpState};

use crate::tun::{RxBatch, Tun};
use crate::wake::{wait_readable, Waker};

/// Packets read per batch by the I/O thread.
const RX_BATCH: usize = 64;

/// Counters of the I/O thread (not engine MIBs: what happened at the TUN).
#[derive(Debug, Default)]
pub struct HostStats {
    /// Packets read from the TUN and given to the engine.
    pub rx_packets: AtomicU64,
    /// Of those, GSO aggregates (`gso_size` set).
    pub rx_gso: AtomicU64,
    /// Packets dropped on read (malformed virtio-net header).
    pub rx_dropped: AtomicU64,
    /// Packets written to the TUN.
    pub tx_packets: AtomicU64,
    /// Of those, GSO super-segments.
    pub tx_gso: AtomicU64,
    /// Packets the TUN refused (counted, completed, dropped).
    pub tx_errors: AtomicU64,
}

struct Shared {
    stack: Mutex<Stack>,
    cond: Condvar,
    waker: Waker,
    stop: AtomicBool,
    epoch: std::time::Instant,
    stats: HostStats,
}

impl Shared {
    fn now(&self) -> Instant {
        let ns = self.epoch.elapsed().as_nanos();
        Instant::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    fn lock(&self) -> MutexGuard<'_, Stack> {
        // A panic while holding the lock leaves the engine in an unknown state; going on with
        // it is still better than poisoning every socket of the host.
        self.stack.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn kick(&self) {
        // An eventfd write only fails if the descriptor is gone, i.e. the host is shutting down.
        let _ = self.waker.wake();
    }
}

/// A Shallow host over a TUN queue: the engine plus its I/O thread. Dropping it stops the
/// thread.
pub struct Host {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

impl Host {
    /// Starts the I/O thread for `stack` (addresses and sysctls already set) over `tun`.
    pub fn start(stack: Stack, tun: Tun) -> io::Result<Host> {
        let shared = Arc::new(Shared {
            stack: Mutex::new(stack),
            cond: Condvar::new(),
            waker: Waker::new()?,
            stop: AtomicBool::new(false),
            epoch: std::time::Instant::now(),
            stats: HostStats::default(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("shallow-io-{}", tun.name()))
            .spawn(move || io_loop(&s, &tun))?;
        Ok(Host {
            shared,
            thread: Some(thread),
        })
    }

    /// Runs `f` on the engine (under its lock) at the current time, then lets the I/O thread
    /// transmit what the call queued.
    pub fn with_stack<R>(&self, f: impl FnOnce(&mut Stack, Instant) -> R) -> R {
        let r = {
            let mut st = self.shared.lock();
            f(&mut st, self.shared.now())
        };
        self.shared.kick();
        r
    }

    /// False once the I/O thread has stopped (dropped host, or the TUN device went away).
    pub fn is_running(&self) -> bool {
        !self.shared.stop.load(Ordering::SeqCst)
    }

    /// The I/O thread's counters.
    pub fn stats(&self) -> &HostStats {
        &self.shared.stats
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.cond.notify_all();
    }
}

fn io_loop(sh: &Shared, tun: &Tun) {
    let mut batch = RxBatch::new(RX_BATCH);
    let mut dropped_seen = 0u64;
    while !sh.stop.load(Ordering::SeqCst) {
        let timeout = {
            let st = sh.lock();
            st.poll_timeout()
                .map(|t| Duration::from_nanos(t.as_nanos().saturating_sub(sh.now().as_nanos())))
        };
        // A poll error (EINTR is already absorbed) is not recoverable by waiting: stop.
        let Ok(ready) = wait_readable(tun.as_fd(), &sh.waker, timeout) else {
            break;
        };
        if ready.woken {
            let _ = sh.waker.drain();
        }
        let mut woke = false;
        loop {
            let n = if ready.device {
                match tun.recv_batch(&mut batch) {
                    Ok(n) => n,
                    // The device is gone (deleted with its namespace) or broken: a poll that
                    // keeps reporting it would spin, so the host stops and blocked calls
                    // return ENETDOWN.
                    Err(_) => {
                        sh.stop.store(true, Ordering::SeqCst);
                        break;
                    }
                }
            } else {
                0
            };
            let mut st = sh.lock();
            let now = sh.now();
            for p in batch.packets().iter().take(n) {
                st.input(now, p.packet(), p.gso_size());
                sh.stats.rx_packets.fetch_add(1, Ordering::Relaxed);
                if p.gso_size().is_some() {
                    sh.stats.rx_gso.fetch_add(1, Ordering::Relaxed);
                }
            }
            if batch.dropped != dropped_seen {
                sh.stats
                    .rx_dropped
                    .fetch_add(batch.dropped - dropped_seen, Ordering::Relaxed);
                dropped_seen = batch.dropped;
            }
            if st.poll_timeout().is_some_and(|t| t <= now) {
                st.handle_timeout(now);
            }
            flush(sh, &mut st, tun, now);
            while st.poll_wakeup().is_some() {
                woke = true;
            }
            drop(st);
            if n < batch.capacity() {
                break;
            }
        }
        if woke {
            sh.cond.notify_all();
        }
    }
    sh.cond.notify_all();
}

/// Drains `poll_transmit` into the TUN; completes each data packet once the kernel has it
/// (or refused it: a drop below TCP still completes, as `kfree_skb` runs the destructor).
fn flush(sh: &Shared, st: &mut Stack, tun: &Tun, now: Instant) {
    while let Some(tx) = st.poll_transmit(now) {
        match tun.send(&tx.data, tx.gso_size) {
            Ok(()) => {
                sh.stats.tx_packets.fetch_add(1, Ordering::Relaxed);
                if tx.gso_size.is_some() {
                    sh.stats.tx_gso.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(_) => {
                sh.stats.tx_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        if let Some(token) = tx.token {
            st.tx_complete(now, token);
        }
    }
}

fn errno(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// A blocking TCP connection of a [`Host`], with `std::net::TcpStream`'s shape.
pub struct TcpStream {
    shared: Arc<Shared>,
    sock: SocketId,
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("sock", &self.sock)
            .finish()
    }
}

impl TcpStream {
    /// Connects to `addr`, blocking until the handshake completes or fails (with the errno
    /// Linux gives: `ECONNREFUSED` on RST, `ETIMEDOUT` after the SYN retries), or until
    /// `timeout` passes (`ETIMEDOUT`, the socket closed).
    pub fn connect_timeout(host: &Host, addr: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let sh = Arc::clone(&host.shared);
        let family = match addr.ip() {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        };
        let sock = {
            let mut st = sh.lock();
            let s = st.socket(family).map_err(errno)?;
            match st.connect(sh.now(), s, addr) {
                Ok(()) | Err(Errno::EINPROGRESS) => s,
                Err(e) => {
                    let _ = st.close(sh.now(), s);
                    return Err(errno(e));
                }
            }
        };
        sh.kick();
        let stream = TcpStream { shared: sh, sock };
        let deadline = std::time::Instant::now() + timeout;
        let sh = &stream.shared;
        let mut st = sh.lock();
        loop {
            let state = st.state(sock).map_err(errno)?;
            if state != TcpState::SynSent {
                // inet_stream_connect: a second connect reports the outcome.
                return match st.connect(sh.now(), sock, addr) {
                    Err(Errno::EISCONN) | Ok(()) => {
                        drop(st);
                        Ok(stream)
                    }
                    Err(e) => Err(errno(e)),
                };
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || sh.stop.load(Ordering::SeqCst) {
                return Err(errno(Errno::ETIMEDOUT));
            }
            st = sh
                .cond
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The engine's socket id.
    pub fn socket(&self) -> SocketId {
        self.sock
    }

    /// `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        let r = {
            let mut st = self.shared.lock();
            st.shutdown(self.shared.now(), self.sock, how)
        };
        self.shared.kick();
        r.map_err(errno)
    }

    /// Blocks until `op` stops returning `EAGAIN`.
    fn blocking<R>(
        &self,
        mut op: impl FnMut(&mut Stack, Instant) -> Result<R, Errno>,
    ) -> io::Result<R> {
        let sh = &self.shared;
        let mut st = sh.lock();
        loop {
            match op(&mut st, sh.now()) {
                Err(Errno::EAGAIN) => {
                    if sh.stop.load(Ordering::SeqCst) {
                        return Err(io::Error::from_raw_os_error(libc::ENETDOWN));
                    }
                    // Let the I/O thread send what the call queued (window updates, data).
                    sh.kick();
                    st = sh.cond.wait(st).unwrap_or_else(|p| p.into_inner());
                }
                r => {
                    drop(st);
                    sh.kick();
                    return r.map_err(errno);
                }
            }
        }
    }

    /// `poll(2)` readiness bits of the socket (`tcp_poll`; see `shallow_tcp::pollbits`).
    pub fn poll(&self) -> io::Result<u32> {
        self.shared.lock().poll(self.sock).map_err(errno)
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let sock = self.sock;
        self.blocking(|st, now| st.recv(now, sock, buf, 0))
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sock = self.sock;
        self.blocking(|st, now| st.send(now, sock, buf, 0))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for TcpStream {
    fn drop(&mut self) {
        {
            let mut st = self.shared.lock();
            let _ = st.close(self.shared.now(), self.sock);
        }
        self.shared.kick();
    }
}
