//! `shallow-workload`: netperf's workloads, defined once for every substrate.
//!
//! A workload ([`Workload`]: the [`Test`] — TCP_STREAM, TCP_MAERTS, TCP_RR, BULK — and its
//! sizes, byte count, [`Writer`] and TCP_NODELAY) gives each end of a connection a [`Role`]:
//! the connecting side (netperf's) one, the accepting side (netserver's) the other. A role is
//! played by a [`Play`], a small state machine over a socket-like [`Conn`]: each
//! [`Play::step`] makes exactly one socket call (send, receive or the write side's shutdown)
//! and says what the thread does next ([`Next`]): call again, wait inside a blocking call,
//! wait in `epoll_wait`, or stop. How many bytes a call moves, when a message or an RR
//! transaction is complete, when the run ends and what is counted ([`Counts`]) are decided
//! here and nowhere else.
//!
//! The substrates keep the execution: the emulator (`shallow-sim`) implements [`Conn`] over
//! its engine with the CPU cost of every call and turns [`Next`] into scheduling on its CPU
//! timelines; real sockets (the kernel's `std::net::TcpStream`, here, and Shallow's
//! `shallow_os::TcpStream`, in `shallow-os`) implement it over blocking or non-blocking I/O,
//! and their runners ([`Play::run_blocking`], or an epoll loop of their own) turn [`Next`]
//! into threads and pollers.
//!
//! ```
//! use shallow_workload::{Conn, Instant, Io, Next, Play, Role, Source};
//!
//! /// A peer that takes at most 10 bytes per call.
//! struct Tiny { taken: usize }
//! impl Conn for Tiny {
//!     type Error = ();
//!     fn send(&mut self, buf: &[u8]) -> Result<usize, Io<()>> {
//!         let n = buf.len().min(10);
//!         self.taken += n;
//!         Ok(n)
//!     }
//!     fn recv(&mut self, _: &mut [u8], _: bool) -> Result<usize, Io<()>> { Ok(0) }
//!     fn shutdown_write(&mut self) -> Result<(), Io<()>> { Ok(()) }
//!     fn now(&self) -> Instant { Instant::ZERO }
//! }
//!
//! // BULK's sender: 25 bytes in 16-byte messages, then a half-close.
//! let role = Role::Sender { msg: 16, writer: Default::default(), limit: Some(25), hash: true };
//! let mut p = Play::new(role);
//! let mut c = Tiny { taken: 0 };
//! let data = [7u8; 64];
//! let mut nexts = Vec::new();
//! loop {
//!     let s = p.step(&mut c, Instant::ZERO, Source::Fill(&data)).unwrap();
//!     nexts.push(s.next);
//!     if s.next == Next::Done { break; }
//! }
//! assert_eq!(c.taken, 25);
//! // 16 bytes cut short at 10 (the call sleeps for room and goes on with 6), then the last 9.
//! assert_eq!(nexts[0], Next::Block(shallow_workload::Interest::Writable));
//! assert_eq!((p.counts.send_calls, p.counts.send_full), (2, 1));
//! assert!(p.finish().is_some());
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

pub mod tstamp;
pub use shallow_time::Instant;
use std::time::Duration;

/// netperf's tests, and BULK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Test {
    /// Bulk data from the netperf side to netserver.
    #[default]
    Stream,
    /// Request/response transactions.
    Rr,
    /// Bulk data from netserver to the netperf side, which connects.
    Maerts,
    /// A fixed byte count per flow from the netperf side, SHA-256 checked at the receiver.
    Bulk,
}

impl Test {
    /// netperf's name.
    pub fn name(self) -> &'static str {
        match self {
            Test::Stream => "TCP_STREAM",
            Test::Rr => "TCP_RR",
            Test::Maerts => "TCP_MAERTS",
            Test::Bulk => "BULK",
        }
    }

    /// True when the netperf (connecting) side sends the data: TCP_STREAM, BULK, and TCP_RR
    /// (its requests start every transaction).
    pub fn netperf_sends(self) -> bool {
        self != Test::Maerts
    }
}

impl std::str::FromStr for Test {
    type Err = String;
    fn from_str(s: &str) -> Result<Test, String> {
        match s.to_ascii_uppercase().as_str() {
            "TCP_STREAM" | "STREAM" => Ok(Test::Stream),
            "TCP_RR" | "RR" => Ok(Test::Rr),
            "TCP_MAERTS" | "MAERTS" => Ok(Test::Maerts),
            "BULK" => Ok(Test::Bulk),
            _ => Err(format!(
                "unknown test `{s}` (expected TCP_STREAM, TCP_RR, TCP_MAERTS or BULK)"
            )),
        }
    }
}

/// How a bulk sender writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writer {
    /// Blocking `send()` of whole messages: one call per message; a call that finds the send
    /// buffer full sleeps until write space (`sk_stream_wait_memory`) and resumes.
    #[default]
    Blocking,
    /// Non-blocking `send()` until EAGAIN, then `epoll_wait` for EPOLLOUT, as an event-loop
    /// server writes (spec §12 E3).
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

/// What a thread does with its one connected socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Bulk sender (TCP_STREAM's netperf side, TCP_MAERTS's netserver side, BULK).
    Sender {
        /// Bytes per `send()` (netperf `-m`).
        msg: usize,
        /// Blocking or epoll writer.
        writer: Writer,
        /// Stop after this many bytes and shut down the write side (BULK); `None`: until the
        /// deadline ([`Play::until`]), if any.
        limit: Option<u64>,
        /// Keep a SHA-256 of the bytes sent.
        hash: bool,
    },
    /// Bulk receiver: `recv()` of up to `buf` bytes until end of stream.
    Receiver {
        /// Bytes per `recv()` (netperf `-M`).
        buf: usize,
        /// Keep a SHA-256 of the bytes received.
        hash: bool,
    },
    /// TCP_RR client: send a request, read the whole response, repeat; times each
    /// transaction. At the deadline, if any, it shuts down the write side between two
    /// transactions.
    RrClient {
        /// Request bytes.
        req: usize,
        /// Response bytes.
        resp: usize,
    },
    /// TCP_RR server: read a whole request, send the response, repeat until end of stream.
    RrServer {
        /// Request bytes.
        req: usize,
        /// Response bytes.
        resp: usize,
    },
}

/// One workload: the test and its parameters, and from them each side's [`Role`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    /// The test.
    pub test: Test,
    /// Bytes per `send()` of a bulk sender (netperf `-m`).
    pub msg_size: usize,
    /// Bytes per `recv()` of a bulk receiver (netperf `-M`).
    pub recv_size: usize,
    /// TCP_RR request bytes.
    pub req_size: usize,
    /// TCP_RR response bytes.
    pub resp_size: usize,
    /// Bytes per flow (BULK: required; TCP_STREAM/TCP_MAERTS: each flow stops after this many).
    pub bytes: Option<u64>,
    /// How bulk senders write.
    pub writer: Writer,
    /// TCP_NODELAY on every connection, both ends.
    pub nodelay: bool,
}

impl Default for Workload {
    /// netperf's TCP_STREAM as `shallow bench` runs it by default: 16 KiB sends, 128 KiB
    /// receives (netserver's default receive size), 1-byte RR messages, blocking writes.
    fn default() -> Self {
        Workload {
            test: Test::Stream,
            msg_size: 16 * 1024,
            recv_size: 128 * 1024,
            req_size: 1,
            resp_size: 1,
            bytes: None,
            writer: Writer::Blocking,
            nodelay: false,
        }
    }
}

impl Workload {
    fn sender(&self) -> Role {
        Role::Sender {
            msg: self.msg_size,
            writer: self.writer,
            limit: self.bytes,
            hash: self.test == Test::Bulk,
        }
    }

    fn receiver(&self) -> Role {
        Role::Receiver {
            buf: self.recv_size,
            hash: self.test == Test::Bulk,
        }
    }

    /// The role of the connecting side (netperf).
    pub fn netperf_role(&self) -> Role {
        match self.test {
            Test::Stream | Test::Bulk => self.sender(),
            Test::Maerts => self.receiver(),
            Test::Rr => Role::RrClient {
                req: self.req_size,
                resp: self.resp_size,
            },
        }
    }

    /// The role of the accepting side (netserver).
    pub fn netserver_role(&self) -> Role {
        match self.test {
            Test::Stream | Test::Bulk => self.receiver(),
            Test::Maerts => self.sender(),
            Test::Rr => Role::RrServer {
                req: self.req_size,
                resp: self.resp_size,
            },
        }
    }
}

/// Why a socket call did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io<E> {
    /// EAGAIN: a non-blocking call found no room (send) or no data (receive), or a blocking
    /// call's timeout expired before it could move a byte.
    WouldBlock,
    /// Any other error; it ends the role.
    Failed(E),
}

/// A connected socket as a role uses it. The emulator's engine sockets and real sockets
/// (blocking or not) implement it.
pub trait Conn {
    /// The substrate's error (an errno, an `io::Error`).
    type Error;
    /// `send(buf)`: the bytes accepted (a blocking call may return fewer on a timeout).
    fn send(&mut self, buf: &[u8]) -> Result<usize, Io<Self::Error>>;
    /// `recv(buf)`: the bytes read, 0 at end of stream. `keep` false: the caller never looks
    /// at the bytes, so the substrate may discard them instead of copying (`MSG_TRUNC`).
    fn recv(&mut self, buf: &mut [u8], keep: bool) -> Result<usize, Io<Self::Error>>;
    /// `shutdown(SHUT_WR)`.
    fn shutdown_write(&mut self) -> Result<(), Io<Self::Error>>;
    /// The substrate's clock (any epoch; only differences are used), as of this point of the
    /// current call: an RR transaction ends when its last `recv` returns.
    fn now(&self) -> Instant;
}

/// What a sender writes.
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// The stream's byte at offset `i` is `pattern[i % pattern.len()]`; a bulk write stops at
    /// the pattern's end (the rest of the message is the next call of the same `send`). RR
    /// messages are the pattern's first bytes. The emulator's senders write this, so BULK's
    /// SHA-256 sees a misplaced block.
    Pattern(&'a [u8]),
    /// Every write takes its bytes from the start of this buffer, which is at least as long
    /// as the largest message (the Linux runs: contents do not matter).
    Fill(&'a [u8]),
}

impl<'a> Source<'a> {
    /// The bytes of a bulk write of `len` bytes at stream offset `off`.
    fn chunk(self, off: u64, len: usize) -> &'a [u8] {
        match self {
            Source::Pattern(p) => {
                let o = (off % p.len() as u64) as usize;
                &p[o..(o + len).min(p.len())]
            }
            Source::Fill(b) => &b[..len.min(b.len())],
        }
    }

    /// The bytes of a request or response of which `len` bytes are left to send.
    fn head(self, len: usize) -> &'a [u8] {
        let (Source::Pattern(b) | Source::Fill(b)) = self;
        &b[..len.min(b.len())]
    }
}

/// Readiness a waiting thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Data or end of stream (`POLLIN | POLLRDHUP`).
    Readable,
    /// Write space (`POLLOUT`).
    Writable,
}

/// What the thread does after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Step again (the thread stays runnable).
    Run,
    /// A blocking call sleeps until the interest (`sk_stream_wait_memory`, `sk_wait_data`),
    /// then the same call goes on with the next step. A blocking socket does this inside its
    /// own call: its runner just steps again.
    Block(Interest),
    /// A non-blocking call returned EAGAIN; the thread calls `epoll_wait` for the interest
    /// (counted in [`Counts::epoll_waits`]) and steps again when it is ready.
    Poll(Interest),
    /// The role is over: end of stream read, or the write side shut down.
    Done,
}

/// The result of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// What the thread does next.
    pub next: Next,
    /// An RR client's transaction completed in this step: its latency (the request's first
    /// `send` to the response's last byte read).
    pub latency: Option<Duration>,
}

impl Step {
    fn next(next: Next) -> Step {
        Step {
            next,
            latency: None,
        }
    }
}

/// What a role did, counted the same way on every substrate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `send()` calls: per message for a blocking writer (a call that slept and resumed is
    /// one), every call for the epoll writer (those that returned EAGAIN included); RR: one
    /// per request or response.
    pub send_calls: u64,
    /// Bytes accepted by `send()`.
    pub bytes_sent: u64,
    /// `recv()` calls.
    pub recv_calls: u64,
    /// Bytes returned by `recv()`.
    pub bytes_received: u64,
    /// Bulk `send()` calls that returned EAGAIN or accepted only part of the buffer.
    pub send_full: u64,
    /// `epoll_wait` calls.
    pub epoll_waits: u64,
    /// TCP_RR transactions completed (client: response read; server: request read).
    pub transactions: u64,
}

/// A role being played: the role, where it is, and what it counted (see the crate docs).
#[derive(Clone, Debug)]
pub struct Play {
    role: Role,
    /// What the role did so far.
    pub counts: Counts,
    /// Bytes of the current message still to send (or request/response bytes still to move).
    left: usize,
    /// TCP_RR: true while sending (client: the request; server: the response).
    sending: bool,
    /// TCP_RR client: when the current request's first `send` started.
    rr_start: Instant,
    deadline: Option<Instant>,
    hasher: Option<Sha256>,
    /// Receive buffer, made at the first `recv`.
    buf: Vec<u8>,
}

impl Play {
    /// The role at its start.
    pub fn new(role: Role) -> Play {
        let hash = matches!(
            role,
            Role::Sender { hash: true, .. } | Role::Receiver { hash: true, .. }
        );
        Play {
            sending: matches!(role, Role::RrClient { .. }),
            role,
            counts: Counts::default(),
            left: 0,
            rr_start: Instant::ZERO,
            deadline: None,
            hasher: hash.then(Sha256::new),
            buf: Vec::new(),
        }
    }

    /// Ends the role at `deadline` (on the clock of the `now` given to [`Play::step`]): a
    /// sender (or an RR client) due to start a new message (transaction) at or after it shuts
    /// down its write side instead. Without it a sender runs until its `limit` or forever, an
    /// RR client forever (the emulator ends the run).
    pub fn until(mut self, deadline: Instant) -> Play {
        self.deadline = Some(deadline);
        self
    }

    /// The role.
    pub fn role(&self) -> &Role {
        &self.role
    }

    /// The SHA-256 of the bytes moved, for a hashing role, once (later calls: `None`).
    pub fn finish(&mut self) -> Option<[u8; 32]> {
        self.hasher.take().map(|h| h.finalize().into())
    }

    /// One socket call of the role at `now`, writing from `src`. An error of the call ends
    /// the role (the caller records it).
    pub fn step<C: Conn>(
        &mut self,
        conn: &mut C,
        now: Instant,
        src: Source<'_>,
    ) -> Result<Step, C::Error> {
        match self.role {
            Role::Sender {
                msg, writer, limit, ..
            } => self.send_bulk(conn, now, src, msg, writer, limit),
            Role::Receiver { buf, .. } => self.recv_bulk(conn, buf),
            Role::RrClient { req, resp } => self.rr(conn, now, src, true, req, resp),
            Role::RrServer { req, resp } => self.rr(conn, now, src, false, req, resp),
        }
    }

    fn past(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now >= d)
    }

    fn shut<C: Conn>(conn: &mut C) -> Result<Step, C::Error> {
        match conn.shutdown_write() {
            Ok(()) | Err(Io::WouldBlock) => Ok(Step::next(Next::Done)),
            Err(Io::Failed(e)) => Err(e),
        }
    }

    fn send_bulk<C: Conn>(
        &mut self,
        conn: &mut C,
        now: Instant,
        src: Source<'_>,
        msg: usize,
        writer: Writer,
        limit: Option<u64>,
    ) -> Result<Step, C::Error> {
        let sent = self.counts.bytes_sent;
        if limit.is_some_and(|l| sent >= l) || (self.left == 0 && self.past(now)) {
            return Self::shut(conn);
        }
        let epoll = writer == Writer::Epoll;
        let new_call = self.left == 0 || epoll;
        if self.left == 0 {
            let room = limit.map_or(u64::MAX, |l| l - sent);
            self.left = (msg.max(1) as u64).min(room) as usize;
        }
        if new_call {
            self.counts.send_calls += 1;
        }
        let chunk = src.chunk(sent, self.left);
        let next = match conn.send(chunk) {
            Ok(n) => {
                self.counts.bytes_sent += n as u64;
                if let Some(h) = self.hasher.as_mut() {
                    h.update(&chunk[..n]);
                }
                self.left -= n;
                if n < chunk.len() {
                    self.counts.send_full += 1;
                    if !epoll {
                        // The rest of the message once there is room (a limit cannot have
                        // been reached: the message ends at or before it).
                        return Ok(Step::next(Next::Block(Interest::Writable)));
                    }
                }
                Next::Run
            }
            Err(Io::WouldBlock) => {
                self.counts.send_full += 1;
                if epoll {
                    self.counts.epoll_waits += 1;
                    self.left = 0;
                    return Ok(Step::next(Next::Poll(Interest::Writable)));
                }
                return Ok(Step::next(Next::Block(Interest::Writable)));
            }
            Err(Io::Failed(e)) => return Err(e),
        };
        if epoll {
            // A non-blocking call is over: a partial write is retried as a new call.
            self.left = 0;
        }
        Ok(Step::next(next))
    }

    fn recv_buf(&mut self, size: usize) -> &mut [u8] {
        if self.buf.is_empty() {
            self.buf = vec![0; size.clamp(1, 1 << 24)];
        }
        &mut self.buf
    }

    fn recv_bulk<C: Conn>(&mut self, conn: &mut C, size: usize) -> Result<Step, C::Error> {
        self.counts.recv_calls += 1;
        // A receiver that does not hash what it reads never looks at the bytes.
        let keep = self.hasher.is_some();
        self.recv_buf(size);
        match conn.recv(&mut self.buf, keep) {
            Ok(0) => Ok(Step::next(Next::Done)),
            Ok(n) => {
                self.counts.bytes_received += n as u64;
                if let Some(h) = self.hasher.as_mut() {
                    h.update(&self.buf[..n]);
                }
                Ok(Step::next(Next::Run))
            }
            Err(Io::WouldBlock) => Ok(Step::next(Next::Block(Interest::Readable))),
            Err(Io::Failed(e)) => Err(e),
        }
    }

    fn rr<C: Conn>(
        &mut self,
        conn: &mut C,
        now: Instant,
        src: Source<'_>,
        client: bool,
        req: usize,
        resp: usize,
    ) -> Result<Step, C::Error> {
        if self.sending {
            if self.left == 0 {
                if client && self.past(now) {
                    return Self::shut(conn);
                }
                self.left = if client { req } else { resp }.max(1);
                self.counts.send_calls += 1;
                if client {
                    self.rr_start = now;
                }
            }
            match conn.send(src.head(self.left)) {
                Ok(k) => {
                    self.counts.bytes_sent += k as u64;
                    self.left -= k;
                    if self.left == 0 {
                        self.sending = false;
                        Ok(Step::next(Next::Run))
                    } else {
                        Ok(Step::next(Next::Block(Interest::Writable)))
                    }
                }
                Err(Io::WouldBlock) => Ok(Step::next(Next::Block(Interest::Writable))),
                Err(Io::Failed(e)) => Err(e),
            }
        } else {
            if self.left == 0 {
                self.left = if client { resp } else { req }.max(1);
            }
            self.counts.recv_calls += 1;
            let size = if client { resp } else { req };
            let want = self.left.min(self.recv_buf(size).len());
            match conn.recv(&mut self.buf[..want], true) {
                Ok(0) => Ok(Step::next(Next::Done)),
                Ok(k) => {
                    self.counts.bytes_received += k as u64;
                    self.left -= k;
                    let mut latency = None;
                    if self.left == 0 {
                        self.sending = true;
                        self.counts.transactions += 1;
                        if client {
                            latency = Some(conn.now() - self.rr_start);
                        }
                    }
                    Ok(Step {
                        next: Next::Run,
                        latency,
                    })
                }
                Err(Io::WouldBlock) => Ok(Step::next(Next::Block(Interest::Readable))),
                Err(Io::Failed(e)) => Err(e),
            }
        }
    }

    /// Plays the role to its end on a blocking socket (or one with a timeout, whose
    /// [`Io::WouldBlock`] is retried), on the clock [`Conn::now`]: steps until
    /// [`Next::Done`], an error, or `stop()` says to stop (checked before every step).
    /// `latency` gets each RR transaction's latency.
    pub fn run_blocking<C: Conn>(
        &mut self,
        conn: &mut C,
        src: Source<'_>,
        mut stop: impl FnMut(&Play) -> bool,
        mut latency: impl FnMut(Duration),
    ) -> Result<(), C::Error> {
        while !stop(self) {
            let now = conn.now();
            let s = self.step(conn, now, src)?;
            if let Some(l) = s.latency {
                latency(l);
            }
            if s.next == Next::Done {
                break;
            }
        }
        Ok(())
    }
}

/// `write` on a socket of std's shape, as [`Conn::send`]: EINTR is retried; EAGAIN and an
/// expired `SO_SNDTIMEO` are [`Io::WouldBlock`].
pub fn io_send(mut w: impl Write, buf: &[u8]) -> Result<usize, Io<io::Error>> {
    io_call(|| w.write(buf))
}

/// `read` on a socket of std's shape, as [`Conn::recv`] (every byte is copied), with the same
/// errors as [`io_send`].
pub fn io_recv(mut r: impl Read, buf: &mut [u8]) -> Result<usize, Io<io::Error>> {
    io_call(|| r.read(buf))
}

fn io_call(mut call: impl FnMut() -> io::Result<usize>) -> Result<usize, Io<io::Error>> {
    loop {
        match call() {
            Ok(n) => return Ok(n),
            Err(e) => match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => return Err(Io::WouldBlock),
                _ => return Err(Io::Failed(e)),
            },
        }
    }
}

/// The monotonic clock as an [`Instant`] since this process first asked: the clock of the
/// real sockets' [`Conn::now`].
pub fn wall_clock() -> Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    Instant::ZERO + EPOCH.get_or_init(std::time::Instant::now).elapsed()
}

/// The kernel's sockets.
impl Conn for &std::net::TcpStream {
    type Error = io::Error;
    fn send(&mut self, buf: &[u8]) -> Result<usize, Io<io::Error>> {
        io_send(*self, buf)
    }
    fn recv(&mut self, buf: &mut [u8], _keep: bool) -> Result<usize, Io<io::Error>> {
        io_recv(*self, buf)
    }
    fn shutdown_write(&mut self) -> Result<(), Io<io::Error>> {
        self.shutdown(std::net::Shutdown::Write).map_err(Io::Failed)
    }
    fn now(&self) -> Instant {
        wall_clock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted peer: each send takes up to `take.pop()` bytes (None: EAGAIN), each recv
    /// returns up to `give.pop()` bytes (0: end of stream).
    #[derive(Default)]
    struct Script {
        take: Vec<Option<usize>>,
        give: Vec<Option<usize>>,
        sent: Vec<usize>,
        shut: bool,
        clock: Instant,
    }
    impl Conn for Script {
        type Error = ();
        fn send(&mut self, buf: &[u8]) -> Result<usize, Io<()>> {
            match self.take.pop().unwrap_or(Some(usize::MAX)) {
                Some(n) => {
                    let n = n.min(buf.len());
                    self.sent.push(n);
                    Ok(n)
                }
                None => Err(Io::WouldBlock),
            }
        }
        fn recv(&mut self, buf: &mut [u8], _: bool) -> Result<usize, Io<()>> {
            match self.give.pop().unwrap_or(Some(0)) {
                Some(n) => Ok(n.min(buf.len())),
                None => Err(Io::WouldBlock),
            }
        }
        fn shutdown_write(&mut self) -> Result<(), Io<()>> {
            self.shut = true;
            Ok(())
        }
        fn now(&self) -> Instant {
            self.clock
        }
    }

    fn sender(writer: Writer, limit: Option<u64>) -> Play {
        Play::new(Role::Sender {
            msg: 100,
            writer,
            limit,
            hash: false,
        })
    }

    /// The blocking writer finishes a message cut short in the same call; the epoll writer
    /// starts a new call, and after EAGAIN waits in epoll_wait.
    #[test]
    fn blocking_resumes_epoll_starts_over() {
        let data = [0u8; 100];
        let src = Source::Fill(&data);
        let mut c = Script {
            take: vec![None, Some(70), Some(30)],
            ..Script::default()
        };
        let mut p = sender(Writer::Blocking, None);
        let n1 = p.step(&mut c, Instant(0), src).unwrap().next;
        let n2 = p.step(&mut c, Instant(0), src).unwrap().next;
        assert_eq!(n1, Next::Block(Interest::Writable));
        assert_eq!(n2, Next::Run);
        assert_eq!(c.sent, vec![30, 70]);
        assert_eq!((p.counts.send_calls, p.counts.send_full), (1, 1));

        let mut c = Script {
            take: vec![None, Some(30)],
            ..Script::default()
        };
        let mut e = sender(Writer::Epoll, None);
        assert_eq!(e.step(&mut c, Instant(0), src).unwrap().next, Next::Run);
        assert_eq!(
            e.step(&mut c, Instant(0), src).unwrap().next,
            Next::Poll(Interest::Writable)
        );
        assert_eq!(c.sent, vec![30]);
        let k = e.counts;
        assert_eq!((k.send_calls, k.send_full, k.epoll_waits), (2, 2, 1));
    }

    /// A byte limit ends the last message early, then the sender shuts down its write side;
    /// a deadline stops it between messages.
    #[test]
    fn limit_and_deadline_end_a_sender() {
        let data = [0u8; 100];
        let src = Source::Fill(&data);
        let mut c = Script::default();
        let mut p = sender(Writer::Blocking, Some(250));
        while p.step(&mut c, Instant(0), src).unwrap().next != Next::Done {}
        assert_eq!(c.sent, vec![100, 100, 50]);
        assert!(c.shut);

        let mut c = Script::default();
        let mut p = sender(Writer::Blocking, None).until(Instant(10));
        assert_eq!(p.step(&mut c, Instant(9), src).unwrap().next, Next::Run);
        assert_eq!(p.step(&mut c, Instant(10), src).unwrap().next, Next::Done);
        assert_eq!((c.sent.len(), c.shut), (1, true));
    }

    /// The pattern source wraps: a message that crosses the pattern's end is two sends of
    /// one call.
    #[test]
    fn pattern_wraps_within_a_call() {
        let pat = [1u8, 2, 3, 4, 5, 6, 7];
        let mut c = Script::default();
        let mut p = Play::new(Role::Sender {
            msg: 5,
            writer: Writer::Blocking,
            limit: None,
            hash: false,
        });
        for _ in 0..3 {
            p.step(&mut c, Instant(0), Source::Pattern(&pat)).unwrap();
        }
        assert_eq!(c.sent, vec![5, 2, 3]);
        assert_eq!(p.counts.send_calls, 2);
    }

    /// An RR client times a transaction from its request's first send to its response's
    /// last byte, across partial reads.
    #[test]
    fn rr_client_times_transactions() {
        let data = [0u8; 8];
        let src = Source::Fill(&data);
        let mut c = Script {
            give: vec![Some(6), Some(2)],
            ..Script::default()
        };
        let mut p = Play::new(Role::RrClient { req: 4, resp: 8 });
        assert_eq!(p.step(&mut c, Instant(100), src).unwrap().latency, None);
        assert_eq!(p.step(&mut c, Instant(110), src).unwrap().latency, None);
        c.clock = Instant(150);
        let s = p.step(&mut c, Instant(140), src).unwrap();
        assert_eq!(s.latency, Some(Duration::from_nanos(50)));
        assert_eq!(p.counts.transactions, 1);
        assert_eq!((p.counts.send_calls, p.counts.recv_calls), (1, 2));
    }

    /// Each side's role follows netperf: the connecting side sends for TCP_STREAM and BULK,
    /// receives for TCP_MAERTS, is the RR client.
    #[test]
    fn roles_of_each_test() {
        let mut w = Workload {
            test: Test::Maerts,
            ..Workload::default()
        };
        assert!(matches!(
            w.netperf_role(),
            Role::Receiver { hash: false, .. }
        ));
        assert!(matches!(w.netserver_role(), Role::Sender { .. }));
        w.test = Test::Bulk;
        assert!(matches!(w.netperf_role(), Role::Sender { hash: true, .. }));
        assert!(matches!(
            w.netserver_role(),
            Role::Receiver { hash: true, .. }
        ));
        w.test = Test::Rr;
        assert!(matches!(
            w.netserver_role(),
            Role::RrServer { req: 1, resp: 1 }
        ));
        assert_eq!("tcp_maerts".parse::<Test>(), Ok(Test::Maerts));
        assert_eq!("epoll".parse::<Writer>(), Ok(Writer::Epoll));
    }
}
