//! Blocking sockets of a [`Host`], shaped like `std::net`: [`TcpStream`] and [`TcpListener`].
//!
//! Every call owns its socket for its length (see [`crate::host`] for the `lock_sock` model)
//! and returns errors as `std::io::Error` built from the engine's Linux errno
//! (`io::Error::from_raw_os_error`), so `kind()` is the kind Linux would give: `EAGAIN` →
//! `WouldBlock` (also what a read or write timeout gives, as `SO_RCVTIMEO` does on Linux),
//! `ECONNREFUSED` → `ConnectionRefused`, `EPIPE` → `BrokenPipe`, and so on. A call on a host
//! whose I/O thread has stopped fails with `ENETDOWN`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use shallow_tcp::{
    msgflags, Errno, Family, MemInfo, OptVal, Shutdown, SockOpt, SocketId, TcpInfo, TcpState,
};

use crate::host::Host;
use crate::shared::{deadline, ebadf, errno, netdown, Owned, Shared, Slot, WaitEnd, Want, CHUNK};

/// Chunks a `send` copies before it processes its backlog once on the way (Linux
/// `tcp_sendmsg_locked` calls `sk_flush_backlog` every 16 new skbs).
const FLUSH_EVERY: usize = 16;

/// The listen backlog of [`TcpListener::bind`]: Linux's `net.core.somaxconn` default.
pub const DEFAULT_BACKLOG: i32 = 4096;

/// A shutdown direction: `std::net::Shutdown` or the engine's [`Shutdown`].
pub trait ShutdownHow {
    /// The engine's direction.
    fn how(self) -> Shutdown;
}

impl ShutdownHow for Shutdown {
    fn how(self) -> Shutdown {
        self
    }
}

impl ShutdownHow for std::net::Shutdown {
    fn how(self) -> Shutdown {
        match self {
            std::net::Shutdown::Read => Shutdown::Read,
            std::net::Shutdown::Write => Shutdown::Write,
            std::net::Shutdown::Both => Shutdown::Both,
        }
    }
}

/// The application's handle on one engine socket; the socket is closed when the last handle
/// (see [`TcpStream::try_clone`]) goes.
pub(crate) struct Sock {
    pub host: Host,
    pub id: SocketId,
}

impl Sock {
    /// Creates a socket of `family`.
    pub fn new(host: &Host, family: Family) -> io::Result<Sock> {
        let mut g = host.shared.lock();
        let id = g.driver.socket(family).map_err(errno)?;
        g.add_slot(id);
        Ok(Sock {
            host: host.clone(),
            id,
        })
    }

    /// Runs a short call that owns the socket (`lock_sock` … `release_sock`).
    pub fn call<R>(
        &self,
        f: impl FnOnce(&mut shallow_tcp::Stack, shallow_tcp::Instant, SocketId) -> Result<R, Errno>,
    ) -> io::Result<R> {
        let mut o = self.host.shared.own(self.id)?;
        let now = o.now();
        f(o.stack(), now, self.id).map_err(errno)
    }

    /// Reads the socket without owning it (as `tcp_poll` and `getsockname` run without
    /// `lock_sock`).
    pub fn peek<R>(
        &self,
        f: impl FnOnce(&mut shallow_tcp::Stack, shallow_tcp::Instant, SocketId) -> Result<R, Errno>,
    ) -> io::Result<R> {
        let sh = &self.host.shared;
        let mut g = sh.lock();
        if g.slot(self.id).is_none() {
            return Err(ebadf());
        }
        let now = sh.now();
        let r = f(g.driver.stack_mut(), now, self.id).map_err(errno);
        sh.finish(g);
        r
    }

    /// Runs `f` on the socket's slot.
    pub fn with_slot<R>(&self, f: impl FnOnce(&mut Slot) -> R) -> io::Result<R> {
        let mut g = self.host.shared.lock();
        let slot = g.slot_mut(self.id).ok_or_else(ebadf)?;
        Ok(f(slot))
    }

    fn set_int(&self, opt: SockOpt, v: i64) -> io::Result<()> {
        self.call(|st, now, s| st.setsockopt(now, s, opt, &OptVal::Int(v)))
    }

    fn get_int(&self, opt: SockOpt) -> io::Result<i64> {
        self.peek(|st, _, s| st.getsockopt(s, opt)?.int())
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.with_slot(|sl| sl.nonblocking = on)?;
        self.peek(|st, _, s| st.set_nonblocking(s, on))
    }
}

impl Drop for Sock {
    fn drop(&mut self) {
        let sh = &self.host.shared;
        // close() owns the socket (Linux tcp_close runs under lock_sock), then releases it
        // so that its backlog is processed before it is orphaned.
        // All under one hold of the mutex, so the engine cannot reuse the id (for a new
        // connection that another thread accepts) before the slot is gone.
        if let Ok(o) = sh.own(self.id) {
            o.close();
        }
    }
}

pub(crate) fn family_of(addr: &SocketAddr) -> Family {
    match addr.ip() {
        IpAddr::V4(_) => Family::V4,
        IpAddr::V6(_) => Family::V6,
    }
}

/// A TCP connection of a [`Host`], with `std::net::TcpStream`'s shape: blocking by default,
/// `Read`/`Write` on the stream and on `&TcpStream` (so one thread can read while another
/// writes).
pub struct TcpStream {
    pub(crate) sock: Arc<Sock>,
}

impl std::fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpStream")
            .field("sock", &self.sock.id)
            .finish()
    }
}

impl TcpStream {
    /// Connects to `addr`, blocking until the handshake completes or fails with the errno
    /// Linux gives (`ECONNREFUSED` on RST, `ETIMEDOUT` after `tcp_syn_retries`).
    pub fn connect(host: &Host, addr: SocketAddr) -> io::Result<TcpStream> {
        Self::connect_inner(host, addr, None)
    }

    /// [`TcpStream::connect`] giving up after `timeout` (`ETIMEDOUT`, the socket closed).
    pub fn connect_timeout(
        host: &Host,
        addr: SocketAddr,
        timeout: Duration,
    ) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        Self::connect_inner(host, addr, Some(timeout))
    }

    fn connect_inner(
        host: &Host,
        addr: SocketAddr,
        timeout: Option<Duration>,
    ) -> io::Result<TcpStream> {
        let sock = Sock::new(host, family_of(&addr))?;
        let sh = &host.shared;
        let dl = deadline(timeout);
        {
            let mut o = sh.own(sock.id)?;
            let now = o.now();
            match o.stack().connect(now, sock.id, addr) {
                Ok(()) | Err(Errno::EINPROGRESS) => {}
                Err(e) => return Err(errno(e)),
            }
            // inet_wait_for_connect: sleep (socket released) until the state leaves SYN_SENT.
            loop {
                if o.stack().state(sock.id).map_err(errno)? != TcpState::SynSent {
                    break;
                }
                if sh.stopped() {
                    return Err(netdown());
                }
                if let WaitEnd::TimedOut = o.wait(Want::Any, dl)? {
                    return Err(errno(Errno::ETIMEDOUT));
                }
            }
            // A second connect reports the outcome (EISCONN, or the error once).
            let now = o.now();
            match o.stack().connect(now, sock.id, addr) {
                Ok(()) | Err(Errno::EISCONN) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        Ok(TcpStream {
            sock: Arc::new(sock),
        })
    }

    /// The engine's socket id (for `Host::with_stack` calls this type has no wrapper for).
    pub fn socket(&self) -> SocketId {
        self.sock.id
    }

    /// The host the connection belongs to.
    pub fn host(&self) -> &Host {
        &self.sock.host
    }

    /// The remote address (`getpeername`; `ENOTCONN` when there is none).
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peek(|st, _, s| st.peer_addr(s))
    }

    /// The local address (`getsockname`).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peek(|st, _, s| st.local_addr(s))
    }

    /// `shutdown(2)`: takes `std::net::Shutdown` or `shallow_tcp::Shutdown`.
    pub fn shutdown(&self, how: impl ShutdownHow) -> io::Result<()> {
        let how = how.how();
        self.sock.call(|st, now, s| st.shutdown(now, s, how))
    }

    /// Another handle on the same connection (the socket closes when the last one drops).
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        Ok(TcpStream {
            sock: Arc::clone(&self.sock),
        })
    }

    /// `TCP_NODELAY`: disables Nagle's algorithm (RFC 896; Linux `tcp_nagle_check`).
    pub fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.sock.set_int(SockOpt::TcpNodelay, i64::from(on))
    }

    /// Whether `TCP_NODELAY` is set.
    pub fn nodelay(&self) -> io::Result<bool> {
        Ok(self.sock.get_int(SockOpt::TcpNodelay)? != 0)
    }

    /// `TCP_NOTSENT_LOWAT`: the most unsent bytes the socket queues before `send` blocks; it
    /// polls writable again only when unsent bytes fall below half of it (write-space
    /// hysteresis, Linux `tcp_stream_memory_free` / `sk_stream_write_space`).
    pub fn set_notsent_lowat(&self, bytes: u32) -> io::Result<()> {
        self.sock
            .set_int(SockOpt::TcpNotsentLowat, i64::from(bytes))
    }

    /// `TCP_NOTSENT_LOWAT` (the sysctl `tcp_notsent_lowat` when unset).
    pub fn notsent_lowat(&self) -> io::Result<u32> {
        Ok(u32::try_from(self.sock.get_int(SockOpt::TcpNotsentLowat)?).unwrap_or(u32::MAX))
    }

    /// `SO_SNDBUF` (Linux doubles the value for bookkeeping overhead, capped by `wmem_max`).
    pub fn set_send_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.sock
            .set_int(SockOpt::SoSndbuf, i64::try_from(bytes).unwrap_or(i64::MAX))
    }

    /// `SO_SNDBUF` as `getsockopt` reports it.
    pub fn send_buffer_size(&self) -> io::Result<usize> {
        Ok(usize::try_from(self.sock.get_int(SockOpt::SoSndbuf)?).unwrap_or(0))
    }

    /// `SO_RCVBUF` (doubled as Linux does, capped by `rmem_max`; disables autotuning).
    pub fn set_recv_buffer_size(&self, bytes: usize) -> io::Result<()> {
        self.sock
            .set_int(SockOpt::SoRcvbuf, i64::try_from(bytes).unwrap_or(i64::MAX))
    }

    /// `SO_RCVBUF` as `getsockopt` reports it.
    pub fn recv_buffer_size(&self) -> io::Result<usize> {
        Ok(usize::try_from(self.sock.get_int(SockOpt::SoRcvbuf)?).unwrap_or(0))
    }

    /// `SO_RCVTIMEO`: a blocking read that waits longer fails with `WouldBlock` (`EAGAIN`).
    /// `Some(0)` is an `InvalidInput` error, as in std.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.sock.with_slot(|sl| sl.rcvtimeo = t)
    }

    /// `SO_RCVTIMEO`.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        self.sock.with_slot(|sl| sl.rcvtimeo)
    }

    /// `SO_SNDTIMEO`: a blocking write that waits longer returns what it sent, or fails with
    /// `WouldBlock` when it sent nothing.
    pub fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        check_timeout(t)?;
        self.sock.with_slot(|sl| sl.sndtimeo = t)
    }

    /// `SO_SNDTIMEO`.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        self.sock.with_slot(|sl| sl.sndtimeo)
    }

    /// `O_NONBLOCK`: calls that would wait fail with `WouldBlock` instead (use a
    /// [`Poller`](crate::Poller) to wait).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock.set_nonblocking(on)
    }

    /// `TCP_INFO`.
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        self.sock.peek(|st, now, s| st.tcp_info(now, s))
    }

    /// `SO_MEMINFO`.
    pub fn meminfo(&self) -> io::Result<MemInfo> {
        self.sock.peek(|st, _, s| st.meminfo(s))
    }

    /// `SO_ERROR`: the pending error, cleared.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        if let Some(e) = self.sock.with_slot(|sl| sl.pending_err.take())? {
            return Ok(Some(errno(e)));
        }
        let v = self
            .sock
            .call(|st, _, s| st.getsockopt(s, SockOpt::SoError)?.int())?;
        Ok((v != 0).then(|| io::Error::from_raw_os_error(v as i32)))
    }

    /// Any `setsockopt` the engine supports.
    pub fn set_option(&self, opt: SockOpt, val: &OptVal) -> io::Result<()> {
        self.sock.call(|st, now, s| st.setsockopt(now, s, opt, val))
    }

    /// Any `getsockopt` the engine supports.
    pub fn option(&self, opt: SockOpt) -> io::Result<OptVal> {
        self.sock.call(|st, _, s| st.getsockopt(s, opt))
    }

    /// `poll(2)` readiness bits now (`tcp_poll`; see `shallow_tcp::pollbits`).
    pub fn poll(&self) -> io::Result<u32> {
        self.sock.peek(|st, _, s| st.poll(s))
    }

    /// `send(2)` with flags (`MSG_MORE`, `MSG_DONTWAIT`, `MSG_NOSIGNAL`, …): blocks until
    /// all of `buf` is queued unless non-blocking, `MSG_DONTWAIT` or the write timeout says
    /// otherwise.
    pub fn send_with_flags(&self, buf: &[u8], flags: u32) -> io::Result<usize> {
        send_all(&self.sock.host.shared, self.sock.id, buf, flags, None)
    }

    /// `recv(2)` with flags (`MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT`, …).
    pub fn recv_with_flags(&self, buf: &mut [u8], flags: u32) -> io::Result<usize> {
        recv_some(&self.sock.host.shared, self.sock.id, buf, flags, None)
    }

    /// `recv(MSG_PEEK)`: like std's `peek`.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_with_flags(buf, msgflags::MSG_PEEK)
    }
}

fn check_timeout(t: Option<Duration>) -> io::Result<()> {
    if t == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    Ok(())
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_with_flags(buf, 0)
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.send_with_flags(buf, msgflags::MSG_NOSIGNAL)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The socket of netperf's workloads (`shallow-workload`'s roles), as the kernel's
/// `std::net::TcpStream` is: blocking or not as set, every byte read is copied.
impl shallow_workload::Conn for &TcpStream {
    type Error = io::Error;
    fn send(&mut self, buf: &[u8]) -> Result<usize, shallow_workload::Io<io::Error>> {
        shallow_workload::io_send(*self, buf)
    }
    fn recv(
        &mut self,
        buf: &mut [u8],
        _keep: bool,
    ) -> Result<usize, shallow_workload::Io<io::Error>> {
        shallow_workload::io_recv(*self, buf)
    }
    fn shutdown_write(&mut self) -> Result<(), shallow_workload::Io<io::Error>> {
        self.shutdown(std::net::Shutdown::Write)
            .map_err(shallow_workload::Io::Failed)
    }
    fn now(&self) -> shallow_tcp::Instant {
        shallow_workload::wall_clock()
    }
}

/// A listening socket of a [`Host`], with `std::net::TcpListener`'s shape.
pub struct TcpListener {
    pub(crate) sock: Arc<Sock>,
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field("sock", &self.sock.id)
            .finish()
    }
}

impl TcpListener {
    /// Binds `addr` with `SO_REUSEADDR` (as std does on Unix) and listens with a backlog of
    /// [`DEFAULT_BACKLOG`]. Port 0 picks an ephemeral port (see [`TcpListener::local_addr`]).
    pub fn bind(host: &Host, addr: SocketAddr) -> io::Result<TcpListener> {
        Self::bind_with_backlog(host, addr, DEFAULT_BACKLOG)
    }

    /// [`TcpListener::bind`] with an explicit `listen(2)` backlog (the accept queue's limit,
    /// Linux `sk_max_ack_backlog`).
    pub fn bind_with_backlog(
        host: &Host,
        addr: SocketAddr,
        backlog: i32,
    ) -> io::Result<TcpListener> {
        let sock = Sock::new(host, family_of(&addr))?;
        sock.call(|st, now, s| {
            st.setsockopt(now, s, SockOpt::SoReuseaddr, &OptVal::Int(1))?;
            st.bind(s, addr)?;
            st.listen(s, backlog)
        })?;
        Ok(TcpListener {
            sock: Arc::new(sock),
        })
    }

    /// Accepts a connection: blocks until one is established (unless non-blocking).
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let host = &self.sock.host;
        let (id, peer) = blocking(&host.shared, self.sock.id, Want::Read, |o| {
            let s = self.sock.id;
            let r = o.stack().accept(s);
            if let Ok((c, _)) = r {
                o.inner().add_slot(c);
            }
            r
        })?;
        let sock = Sock {
            host: host.clone(),
            id,
        };
        Ok((
            TcpStream {
                sock: Arc::new(sock),
            },
            peer,
        ))
    }

    /// An iterator of accepted connections (never `None`), like std's `incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peek(|st, _, s| st.local_addr(s))
    }

    /// `O_NONBLOCK`: `accept` fails with `WouldBlock` when no connection waits.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.sock.set_nonblocking(on)
    }

    /// The engine's socket id.
    pub fn socket(&self) -> SocketId {
        self.sock.id
    }

    /// The host the listener belongs to.
    pub fn host(&self) -> &Host {
        &self.sock.host
    }

    /// `SO_ERROR`: the pending error, cleared.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        let v = self
            .sock
            .call(|st, _, s| st.getsockopt(s, SockOpt::SoError)?.int())?;
        Ok((v != 0).then(|| io::Error::from_raw_os_error(v as i32)))
    }

    /// Another handle on the same listener.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        Ok(TcpListener {
            sock: Arc::clone(&self.sock),
        })
    }
}

/// Iterator of [`TcpListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;
    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        Some(self.listener.accept().map(|(s, _)| s))
    }
}

/// A blocking socket call's loop: run `op` while owning the socket; on `EAGAIN` wait for a
/// wake-up of the socket (unless non-blocking), up to `timeout`.
pub(crate) fn blocking<R>(
    sh: &Shared,
    s: SocketId,
    want: Want,
    mut op: impl FnMut(&mut Owned<'_>) -> Result<R, Errno>,
) -> io::Result<R> {
    let mut o = sh.own(s)?;
    let (nonblocking, timeout) = {
        let slot = o.slot()?;
        let t = if want == Want::Write {
            slot.sndtimeo
        } else {
            slot.rcvtimeo
        };
        (slot.nonblocking, t)
    };
    let dl = deadline(timeout);
    loop {
        match op(&mut o) {
            Err(Errno::EAGAIN) if !nonblocking => {
                if sh.stopped() {
                    return Err(netdown());
                }
                if let WaitEnd::TimedOut = o.wait(want, dl)? {
                    return Err(errno(Errno::EAGAIN));
                }
            }
            r => return r.map_err(errno),
        }
    }
}

/// `send` of a whole buffer as Linux's blocking `tcp_sendmsg`: copies in [`CHUNK`]s, dropping
/// the mutex between chunks, waits for write space when the buffer is full (`sk_stream_wait_memory`),
/// and returns the bytes accepted (partial only on timeout, error or `O_NONBLOCK`).
///
/// With `waker` (an async caller, which passes `MSG_DONTWAIT`), a call that would block
/// registers it as the socket's write waker before it releases the socket, so no wake-up can
/// fall between the failed attempt and the registration.
pub(crate) fn send_all(
    sh: &Shared,
    s: SocketId,
    buf: &[u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<usize> {
    let mut o = sh.own(s)?;
    let (nonblocking, timeout) = {
        let slot = o.slot()?;
        if let Some(e) = slot.pending_err.take() {
            return Err(errno(e));
        }
        (slot.nonblocking, slot.sndtimeo)
    };
    if sh.stopped() {
        // Nothing queued now would ever leave the host.
        return Err(netdown());
    }
    let dl = deadline(timeout);
    let mut sent = 0usize;
    let mut chunks = 0usize;
    while sent < buf.len() {
        let end = buf.len().min(sent + CHUNK);
        // MSG_MORE on every chunk but the last: the call as a whole is one sendmsg.
        let more = if end < buf.len() {
            shallow_tcp::msgflags::MSG_MORE
        } else {
            0
        };
        let now = o.now();
        match o.stack().send(now, s, &buf[sent..end], flags | more) {
            Ok(n) => {
                sent += n;
                chunks += 1;
                if sent < buf.len() {
                    if chunks % FLUSH_EVERY == 0 {
                        o.flush_backlog();
                    }
                    o.yield_now();
                }
            }
            Err(Errno::EAGAIN) => {
                if sh.stopped() && sent == 0 {
                    return Err(netdown());
                }
                if nonblocking || flags & shallow_tcp::msgflags::MSG_DONTWAIT != 0 {
                    if let (0, Some(w)) = (sent, waker) {
                        o.slot()?.write_waker = Some(w.clone());
                    }
                    break;
                }
                if sh.stopped() {
                    if sent > 0 {
                        break;
                    }
                    return Err(netdown());
                }
                if let WaitEnd::TimedOut = o.wait(Want::Write, dl)? {
                    break;
                }
            }
            Err(e) => {
                if sent > 0 {
                    o.slot()?.pending_err = Some(e);
                    break;
                }
                return Err(errno(e));
            }
        }
    }
    if sent == 0 && !buf.is_empty() {
        return Err(errno(Errno::EAGAIN));
    }
    Ok(sent)
}

/// `recv` as Linux's `tcp_recvmsg`: copies in [`CHUNK`]s (mutex dropped between chunks), and
/// once the receive queue is empty processes the backlog (`__sk_flush_backlog`) and copies
/// what it brought before returning; waits only while nothing has been copied.
///
/// With `waker` (an async caller, which passes `MSG_DONTWAIT`), a call that would block
/// registers it as the socket's read waker before it releases the socket.
pub(crate) fn recv_some(
    sh: &Shared,
    s: SocketId,
    buf: &mut [u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<usize> {
    if buf.is_empty() {
        return Ok(0);
    }
    let mut o = sh.own(s)?;
    let (nonblocking, timeout) = {
        let slot = o.slot()?;
        if let Some(e) = slot.pending_err.take() {
            return Err(errno(e));
        }
        (slot.nonblocking, slot.rcvtimeo)
    };
    let dl = deadline(timeout);
    let peek = flags & shallow_tcp::msgflags::MSG_PEEK != 0;
    let mut copied = 0usize;
    let mut flushed = false;
    loop {
        let end = buf.len().min(copied + CHUNK);
        let now = o.now();
        match o.stack().recv(now, s, &mut buf[copied..end], flags) {
            Ok(0) => break,
            Ok(n) => {
                copied += n;
                if peek || copied == buf.len() {
                    break;
                }
                flushed = false;
                if copied == end {
                    o.yield_now();
                }
            }
            Err(Errno::EAGAIN) if copied > 0 => {
                if flushed {
                    break;
                }
                o.flush_backlog();
                flushed = true;
            }
            Err(Errno::EAGAIN) => {
                if sh.stopped() {
                    return Err(netdown());
                }
                if nonblocking || flags & shallow_tcp::msgflags::MSG_DONTWAIT != 0 {
                    if let Some(w) = waker {
                        o.slot()?.read_waker = Some(w.clone());
                    }
                    return Err(errno(Errno::EAGAIN));
                }
                if sh.stopped() {
                    return Err(netdown());
                }
                if let WaitEnd::TimedOut = o.wait(Want::Read, dl)? {
                    return Err(errno(Errno::EAGAIN));
                }
            }
            Err(e) if copied > 0 => {
                o.slot()?.pending_err = Some(e);
                break;
            }
            Err(e) => return Err(errno(e)),
        }
    }
    Ok(copied)
}
