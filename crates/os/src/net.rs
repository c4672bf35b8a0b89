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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shallow_tcp::{
    msgflags, Errno, Family, MemInfo, OptVal, Shutdown, SockOpt, SocketId, TcpInfo, TcpState,
    TxTimestamp,
};

use crate::host::Host;
use crate::shared::{
    deadline, ebadf, errno, netdown, ListenWait, Shared, Slot, WaitEnd, Want, CHUNK,
};

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

/// The application's handle on one engine socket (of one shard); the socket is closed when
/// the last handle (see [`TcpStream::try_clone`]) goes.
pub(crate) struct Sock {
    pub host: Host,
    /// The shard whose engine has the socket.
    pub shard: usize,
    pub id: SocketId,
}

impl Sock {
    /// Creates a socket of `family` on shard `shard`.
    pub fn new(host: &Host, shard: usize, family: Family) -> io::Result<Sock> {
        let mut g = host.shared.lock(shard);
        let id = g.driver.socket(family).map_err(errno)?;
        g.add_slot(id);
        Ok(Sock {
            host: host.clone(),
            shard,
            id,
        })
    }

    /// Runs a short call that owns the socket (`lock_sock` … `release_sock`).
    pub fn call<R>(
        &self,
        f: impl FnOnce(&mut shallow_tcp::Stack, shallow_tcp::Instant, SocketId) -> Result<R, Errno>,
    ) -> io::Result<R> {
        let mut o = self.host.shared.own(self.shard, self.id)?;
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
        let mut g = sh.lock(self.shard);
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
        let mut g = self.host.shared.lock(self.shard);
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
        if let Ok(o) = sh.own(self.shard, self.id) {
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

    /// [`TcpStream::connect_timeout`] (or, with no timeout, [`TcpStream::connect`]) on a
    /// socket given the options `opts` first, in order — what a C program does with
    /// `socket`, `setsockopt`s, `connect`. An option the engine refuses fails the call with
    /// its errno, and nothing is sent. For TCP-MD5, [`TcpStream::connect_md5`] is the
    /// shorthand.
    pub fn connect_with_options(
        host: &Host,
        addr: SocketAddr,
        timeout: Option<Duration>,
        opts: &[(SockOpt, OptVal)],
    ) -> io::Result<TcpStream> {
        if timeout.is_some_and(|t| t.is_zero()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        Self::connect_opts(host, addr, timeout, opts)
    }

    /// Connects to `addr` signing every segment with the TCP-MD5 key `key` (RFC 2385;
    /// `setsockopt(TCP_MD5SIG)` for the peer's address, then `connect`), as BGP speakers do.
    /// The peer must hold the same key for this host's address: a Linux peer drops an
    /// unsigned or wrongly signed SYN (`TcpExtTCPMD5NotFound`, `TcpExtTCPMD5Failure`), so
    /// the connect then fails with `ETIMEDOUT` after `tcp_syn_retries`, or at `timeout`.
    /// A key longer than 80 bytes (`TCP_MD5SIG_MAXKEYLEN`) is `EINVAL`.
    pub fn connect_md5(
        host: &Host,
        addr: SocketAddr,
        key: &[u8],
        timeout: Option<Duration>,
    ) -> io::Result<TcpStream> {
        let sig = shallow_tcp::Md5Sig::new(addr.ip(), key);
        let opt = (SockOpt::TcpMd5sig, OptVal::Bytes(sig.to_bytes()));
        Self::connect_with_options(host, addr, timeout, &[opt])
    }

    fn connect_inner(
        host: &Host,
        addr: SocketAddr,
        timeout: Option<Duration>,
    ) -> io::Result<TcpStream> {
        Self::connect_opts(host, addr, timeout, &[])
    }

    fn connect_opts(
        host: &Host,
        addr: SocketAddr,
        timeout: Option<Duration>,
        opts: &[(SockOpt, OptVal)],
    ) -> io::Result<TcpStream> {
        // The connection goes to the next shard in turn; its engine picks an ephemeral port
        // whose tuple that shard owns.
        let sock = Sock::new(host, host.shared.connect_shard(), family_of(&addr))?;
        let sh = &host.shared;
        let dl = deadline(timeout);
        {
            let mut o = sh.own(sock.shard, sock.id)?;
            let now = o.now();
            for (opt, val) in opts {
                o.stack()
                    .setsockopt(now, sock.id, *opt, val)
                    .map_err(errno)?;
            }
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
            // __inet_stream_connect after the wait: a socket that reached CLOSE reports its
            // error (the handshake's, or a reset that came right after it: ECONNRESET), else
            // ECONNABORTED; any other state is a connection. (A second connect() would start
            // a new handshake on a socket reset after it was established.)
            if o.stack().state(sock.id).map_err(errno)? == TcpState::Close {
                let e = match o.stack().getsockopt(sock.id, SockOpt::SoError) {
                    Ok(OptVal::Int(e)) if e != 0 => io::Error::from_raw_os_error(e as i32),
                    _ => errno(Errno::ECONNABORTED),
                };
                return Err(e);
            }
        }
        Ok(TcpStream {
            sock: Arc::new(sock),
        })
    }

    /// Connects to `addr` with TCP Fast Open (RFC 7413) and sends `data`: Linux's blocking
    /// `sendto(fd, data, MSG_FASTOPEN, addr)` on a new socket, followed by writes of what the
    /// SYN could not carry (`tcp_sendmsg_fastopen`, then `tcp_sendmsg_locked`).
    ///
    /// When a cookie from this server is cached, the SYN carries as much of `data` as fits
    /// in one segment; the first time, the SYN carries none and asks for a cookie, which the
    /// server's SYN-ACK gives for next time (a Linux server gives one when its
    /// `net.ipv4.tcp_fastopen` has the server bit 2 and the listener has `TCP_FASTOPEN`,
    /// see [`TcpListener::set_fastopen`]). The call then waits for the handshake as
    /// [`TcpStream::connect`] does and writes the rest; when it returns `Ok`, all of `data`
    /// has been queued (blocking-write semantics). Data the server's SYN-ACK did not
    /// acknowledge is sent again after the handshake, as Linux does.
    /// `TcpStream::tcp_info().options & 32` (`TCPI_OPT_SYN_DATA`) tells whether the SYN's
    /// data was acknowledged.
    ///
    /// Errors are Linux's: `EOPNOTSUPP` when the host's `net.ipv4.tcp_fastopen` lacks the
    /// client bit 1 (it has it by default), then those of [`TcpStream::connect`]
    /// (`ECONNREFUSED`, `ETIMEDOUT`, ...) and of a write. On a host of several shards every
    /// Fast Open connection to one server address goes to the same shard, whose engine
    /// keeps that server's cookie (Linux's cookie cache is host-wide).
    ///
    /// ```no_run
    /// use std::io::Read;
    /// use shallow_os::{Host, TcpStream};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = Host::attach_default()?;
    /// let addr = "10.213.0.1:80".parse()?;
    /// let req = b"GET / HTTP/1.0\r\n\r\n";
    /// // First time: a cookie request; the request follows the handshake.
    /// drop(TcpStream::connect_fastopen(&host, addr, req)?);
    /// // Next time: the request rides in the SYN.
    /// let mut s = TcpStream::connect_fastopen(&host, addr, req)?;
    /// let in_syn = s.tcp_info()?.options & 32 != 0;
    /// let mut resp = Vec::new();
    /// s.read_to_end(&mut resp)?;
    /// # let _ = in_syn;
    /// # Ok(())
    /// # }
    /// ```
    pub fn connect_fastopen(host: &Host, addr: SocketAddr, data: &[u8]) -> io::Result<TcpStream> {
        let sh = &host.shared;
        let sock = Sock::new(host, sh.peer_shard(addr.ip()), family_of(&addr))?;
        {
            let mut o = sh.own(sock.shard, sock.id)?;
            let sent = fastopen_syn(&mut o, sock.id, addr, data)?;
            // inet_wait_for_connect (with the write bias: the SYN-ACK's ACK waits for the
            // rest of the data), the socket released while asleep.
            while !handshake_done(o.stack(), sock.id)? {
                if sh.stopped() {
                    return Err(netdown());
                }
                o.wait(Want::Any, None)?;
            }
            let mut rest = &data[sent..];
            while !rest.is_empty() {
                let n = send_owned(&mut o, sh, sock.id, rest, msgflags::MSG_NOSIGNAL, None)?;
                rest = &rest[n..];
            }
        }
        Ok(TcpStream {
            sock: Arc::new(sock),
        })
    }

    /// The engine's socket id (for [`TcpStream::with_stack`] calls this type has no wrapper
    /// for), in the engine of shard [`TcpStream::shard`].
    pub fn socket(&self) -> SocketId {
        self.sock.id
    }

    /// The shard (engine) that has the connection: the one its 4-tuple belongs to
    /// ([`Host::shard_of`]).
    pub fn shard(&self) -> usize {
        self.sock.shard
    }

    /// Runs `f` on the engine that has this connection (see [`Host::with_stack`]), e.g.
    /// `s.with_stack(|st, now| st.tcp_info(now, s.socket()))`.
    pub fn with_stack<R>(
        &self,
        f: impl FnOnce(&mut shallow_tcp::Stack, shallow_tcp::Instant) -> R,
    ) -> R {
        self.sock.host.with_shard(self.sock.shard, f)
    }

    /// The host the connection belongs to.
    pub fn host(&self) -> &Host {
        &self.sock.host
    }

    /// The address the client connected to, for a stream accepted by a forwarding listener
    /// ([`TcpListener::bind_any`]; the same as `local_addr`, as `getsockname` and
    /// `SO_ORIGINAL_DST` agree under Linux's TPROXY); for any other stream its local address.
    pub fn original_dst(&self) -> io::Result<SocketAddr> {
        self.local_addr()
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
        send_all(
            &self.sock.host.shared,
            self.sock.shard,
            self.sock.id,
            buf,
            flags,
            None,
        )
    }

    /// `recv(2)` with flags (`MSG_PEEK`, `MSG_WAITALL`, `MSG_DONTWAIT`, …).
    pub fn recv_with_flags(&self, buf: &mut [u8], flags: u32) -> io::Result<usize> {
        recv_some(
            &self.sock.host.shared,
            self.sock.shard,
            self.sock.id,
            buf,
            flags,
            None,
        )
    }

    /// `recvmsg(2)` with its receive timestamp: as [`TcpStream::recv_with_flags`], and the
    /// time the data read arrived (the host's clock, [`Host::now`]) when the socket asks for
    /// receive timestamps: [`TcpStream::set_timestamping`] with `SOFTWARE` (and
    /// `RX_SOFTWARE`), or `SO_TIMESTAMP`/`SO_TIMESTAMPNS` through
    /// [`TcpStream::set_option`]. The time is when the I/O thread handed the last segment of
    /// the last buffer read to the engine (`tcp_recv_timestamp`'s rule: a buffer's time is
    /// its last coalesced segment's); None at end of stream, without the option, or for data
    /// that arrived before it was set.
    pub fn recv_with_timestamp(
        &self,
        buf: &mut [u8],
        flags: u32,
    ) -> io::Result<(usize, Option<shallow_tcp::Instant>)> {
        recv_some_ts(
            &self.sock.host.shared,
            self.sock.shard,
            self.sock.id,
            buf,
            flags,
            None,
        )
    }

    /// `recv(MSG_PEEK)`: like std's `peek`.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.recv_with_flags(buf, msgflags::MSG_PEEK)
    }

    /// `SO_TIMESTAMPING`: asks for transmit timestamps of every later write's last byte;
    /// `flags` are `SOF_TIMESTAMPING_*` ([`shallow_tcp::tstamp::sof`]): `TX_SCHED` (the
    /// packet entered the host's egress queue), `TX_SOFTWARE` (it left the host: the TUN
    /// write or the in-memory link took it), `TX_ACK` (the peer acknowledged the byte), with
    /// `SOFTWARE` to report them and `OPT_ID` for a key per write: its last byte's offset
    /// counted from the first unacknowledged byte when `OPT_ID` was set (from the next byte
    /// written with `OPT_ID_TCP`), so on a fresh connection the `n`th byte ever written has
    /// key `n - 1`; without `OPT_ID` every key is 0.
    /// Errors as Linux's `sock_set_timestamping`: `InvalidInput` (`EINVAL`) for a bit Linux
    /// does not know, `OPT_ID_TCP` without `OPT_ID`, `OPT_STATS` without `OPT_TSONLY`, or
    /// `OPT_ID` first set on a socket that is not connected. 0 turns timestamping off
    /// (events already queued stay). With `OPT_STATS | OPT_TSONLY` every event carries the
    /// connection's TCP statistics at that moment ([`TxTimestamp::stats`], Linux's
    /// `SCM_TIMESTAMPING_OPT_STATS`; `OptStats::encode` gives the kernel's bytes).
    /// `OPT_CMSG` and `OPT_PKTINFO` are accepted and change nothing here, as on Linux for
    /// these events.
    ///
    /// SND is stamped when the host runs the packet's TX completion: just after the device
    /// write when an I/O thread wrote the packet, but at that thread's next round when the
    /// application's thread wrote it ([`Host::set_direct_transmit`], the default), so
    /// SCHED→SND then includes that delay and SND may even come after the ACK when the
    /// peer answers before the round (over a TUN, Linux can answer within the write).
    /// Read the events with [`TcpStream::recv_timestamp`], [`TcpStream::wait_timestamp`]
    /// or [`TcpStream::tx_timestamps`]; while any waits, [`TcpStream::poll`] has `POLLERR`
    /// and a [`Poller`](crate::Poller) reports the stream with `Event::is_error`.
    ///
    /// A timestamp's `time` is the host's clock ([`Host::now`]): take `host.now()` before a
    /// write and subtract it from the event's time to get a [`Duration`]:
    ///
    /// ```no_run
    /// use std::io::Write;
    /// use shallow_os::{Host, TcpStream};
    /// use shallow_tcp::tstamp::sof;
    /// use shallow_tcp::TstampKind;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = Host::attach_default()?;
    /// let mut s = TcpStream::connect(&host, "10.213.0.1:9000".parse()?)?;
    /// s.set_timestamping(
    ///     sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID,
    /// )?;
    /// let buf = vec![0u8; 65536];
    /// let before = host.now();
    /// s.write_all(&buf)?;
    /// // The key of this write is the offset of its last byte.
    /// loop {
    ///     let t = s.wait_timestamp(Some(std::time::Duration::from_secs(5)))?;
    ///     println!("{:?} of byte {} after {:?}", t.kind, t.key, t.time - before);
    ///     if t.kind == TstampKind::Ack && t.key == 65535 {
    ///         break;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_timestamping(&self, flags: u32) -> io::Result<()> {
        self.sock.set_int(SockOpt::SoTimestamping, i64::from(flags))
    }

    /// `SO_TIMESTAMPING` as `getsockopt` reports it (the flags set).
    pub fn timestamping(&self) -> io::Result<u32> {
        Ok(u32::try_from(self.sock.get_int(SockOpt::SoTimestamping)?).unwrap_or(0))
    }

    /// `recvmsg(MSG_ERRQUEUE)`: the oldest transmit timestamp of the socket's error queue
    /// (see [`TcpStream::set_timestamping`]), removed from it (zero-copy completions stay
    /// for [`TcpStream::recv_zerocopy`]). Never waits, as Linux's
    /// error-queue read does not: `WouldBlock` (`EAGAIN`) when the queue is empty, whatever
    /// `O_NONBLOCK` says. Events come in the order they happened (for one write SCHED, then
    /// SND, then ACK; a retransmission brings SCHED and SND again).
    pub fn recv_timestamp(&self) -> io::Result<TxTimestamp> {
        // Linux reads the error queue under its own lock, not lock_sock: no ownership.
        self.sock.peek(|st, _, s| st.recv_tx_timestamp(s))
    }

    /// Every transmit timestamp queued now, oldest first (empty when none): repeated
    /// [`TcpStream::recv_timestamp`].
    pub fn tx_timestamps(&self) -> io::Result<Vec<TxTimestamp>> {
        self.sock.peek(|st, _, s| {
            let mut v = Vec::new();
            loop {
                match st.recv_tx_timestamp(s) {
                    Ok(t) => v.push(t),
                    Err(Errno::EAGAIN) => return Ok(v),
                    Err(e) => return Err(e),
                }
            }
        })
    }

    /// `SO_ZEROCOPY`: let [`TcpStream::send_zerocopy`] hand buffers to the stack without a
    /// copy (Linux's `MSG_ZEROCOPY`, zerocopy.rs in the engine).
    pub fn set_zerocopy(&self, on: bool) -> io::Result<()> {
        self.set_option(SockOpt::SoZerocopy, &OptVal::Int(i64::from(on)))
    }

    /// Whether `SO_ZEROCOPY` is on.
    pub fn zerocopy(&self) -> io::Result<bool> {
        Ok(self.sock.get_int(SockOpt::SoZerocopy)? != 0)
    }

    /// `SO_BUSY_POLL`: a blocking read that finds nothing polls the device itself for up to
    /// `usec` µs before it sleeps (Linux `sk_busy_loop`), reading the TUN queue its shard
    /// owns and running the softirq work on this thread, so the reply to a request does not
    /// wait for the I/O thread to be scheduled. 0 turns it off; a new socket starts at
    /// `net.core.busy_read` ([`Host::sysctl_set`](crate::Host::sysctl_set)); accepted
    /// sockets inherit their listener's.
    ///
    /// ```no_run
    /// # fn f(s: &shallow_os::TcpStream) -> std::io::Result<()> {
    /// s.set_busy_poll(50)?; // poll for 50 µs before sleeping
    /// let mut buf = [0u8; 1];
    /// s.recv_with_flags(&mut buf, 0)?;
    /// # Ok(()) }
    /// ```
    pub fn set_busy_poll(&self, usec: u32) -> io::Result<()> {
        self.sock
            .set_int(SockOpt::SoBusyPoll, i64::from(usec.min(i32::MAX as u32)))
    }

    /// `SO_BUSY_POLL` in µs (0: off).
    pub fn busy_poll(&self) -> io::Result<u32> {
        Ok(u32::try_from(self.sock.get_int(SockOpt::SoBusyPoll)?).unwrap_or(0))
    }

    /// `SO_PREFER_BUSY_POLL`: while this socket busy-polls, its queue's I/O thread leaves
    /// the device to it (Linux defers the device's interrupts), so the packets go straight
    /// to the polling thread.
    pub fn set_prefer_busy_poll(&self, on: bool) -> io::Result<()> {
        self.sock.set_int(SockOpt::SoPreferBusyPoll, i64::from(on))
    }

    /// `send(MSG_ZEROCOPY)`: queue `buf` itself (no copy into the send buffer; the stack
    /// keeps a reference), blocking as [`TcpStream::send_with_flags`] does. With
    /// `SO_ZEROCOPY` on ([`TcpStream::set_zerocopy`]), each call that queues bytes gets the
    /// next id (from 0) and the stack reports, on the error queue
    /// ([`TcpStream::recv_zerocopy`]), the ids whose bytes it holds no more (acknowledged and
    /// out of the host): from then on the buffer is the caller's alone (`Bytes::is_unique`,
    /// `try_into_mut`). The completion says `copied` when the bytes were copied after all (the
    /// device writes of this substrate copy each packet, as Linux's tun does). Without
    /// `SO_ZEROCOPY` this is a plain send. ENOBUFS when the socket's completions fill
    /// `net.core.optmem_max`.
    ///
    /// ```no_run
    /// use shallow_os::{Host, TcpStream};
    /// use shallow_tcp::Bytes;
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = Host::attach_default()?;
    /// let s = TcpStream::connect(&host, "10.213.0.1:9000".parse()?)?;
    /// s.set_zerocopy(true)?;
    /// let chunks: Vec<Bytes> = (0..4u8).map(|i| Bytes::from(vec![i; 1 << 20])).collect();
    /// for c in &chunks {
    ///     s.send_zerocopy(c)?; // ids 0, 1, 2, 3
    /// }
    /// // Wait until the stack holds none of them: then each buffer is ours alone again.
    /// let mut done = 0;
    /// while done < chunks.len() as u32 {
    ///     let z = s.wait_zerocopy(Some(std::time::Duration::from_secs(5)))?;
    ///     done = z.hi + 1;
    /// }
    /// assert!(chunks.iter().all(|c| c.is_unique()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_zerocopy(&self, buf: &shallow_tcp::Bytes) -> io::Result<usize> {
        send_zerocopy(
            &self.sock.host.shared,
            self.sock.shard,
            self.sock.id,
            buf,
            msgflags::MSG_NOSIGNAL,
        )
    }

    /// The oldest zero-copy completion of the error queue (ids `lo..=hi`), leaving
    /// timestamps in place. Never waits: `WouldBlock` when none is queued.
    pub fn recv_zerocopy(&self) -> io::Result<shallow_tcp::ZcNotice> {
        self.sock.peek(|st, _, s| st.recv_zerocopy(s))
    }

    /// The oldest zero-copy completion, waiting for one up to `timeout` (`None`: no limit);
    /// `WouldBlock` when the timeout passes first, `ENETDOWN` when the host stops.
    pub fn wait_zerocopy(&self, timeout: Option<Duration>) -> io::Result<shallow_tcp::ZcNotice> {
        self.wait_errq(timeout, |st, s| st.recv_zerocopy(s))
    }

    /// An error-queue read (`take`), waiting for POLLERR up to `timeout` until it gives
    /// something: the one loop of [`TcpStream::wait_timestamp`] and
    /// [`TcpStream::wait_zerocopy`].
    fn wait_errq<T>(
        &self,
        timeout: Option<Duration>,
        take: impl Fn(&mut shallow_tcp::Stack, SocketId) -> Result<T, Errno>,
    ) -> io::Result<T> {
        let sh = &self.sock.host.shared;
        let mut o = sh.own(self.sock.shard, self.sock.id)?;
        let dl = deadline(timeout);
        loop {
            match take(o.stack(), self.sock.id) {
                Ok(t) => return Ok(t),
                Err(Errno::EAGAIN) => {}
                Err(e) => return Err(errno(e)),
            }
            if sh.stopped() {
                return Err(netdown());
            }
            if let WaitEnd::TimedOut = o.wait(Want::Read, dl)? {
                return take(o.stack(), self.sock.id).map_err(errno);
            }
        }
    }

    /// The oldest transmit timestamp, waiting for one (`poll(POLLERR)` then
    /// `recvmsg(MSG_ERRQUEUE)`) up to `timeout` (`None`: no limit); `WouldBlock` when the
    /// timeout passes first, `ENETDOWN` when the host stops. Any wake-up of the socket's
    /// readers ends a sleep, so data arriving meanwhile costs a retry, not an error.
    pub fn wait_timestamp(&self, timeout: Option<Duration>) -> io::Result<TxTimestamp> {
        self.wait_errq(timeout, |st, s| st.recv_tx_timestamp(s))
    }
}

/// The SYN of a Fast Open `sendto` on the unconnected socket `s`: the bytes of `data` it
/// carries (0 when none went: no cookie yet, only a request).
pub(crate) fn fastopen_syn(
    o: &mut crate::shared::Owned<'_>,
    s: SocketId,
    addr: SocketAddr,
    data: &[u8],
) -> io::Result<usize> {
    let now = o.now();
    match o
        .stack()
        .sendto(now, s, data, msgflags::MSG_FASTOPEN, Some(addr))
    {
        Ok(n) => Ok(n),
        Err(Errno::EINPROGRESS) => Ok(0),
        Err(e) => Err(errno(e)),
    }
}

/// Whether the handshake of an active open has ended: `false` while in SYN_SENT or
/// SYN_RECV, `true` once connected, and the socket's error when it closed instead
/// (`__inet_stream_connect`'s `sock_error`: `SO_ERROR`, else `ECONNABORTED`).
pub(crate) fn handshake_done(st: &mut shallow_tcp::Stack, s: SocketId) -> io::Result<bool> {
    match st.state(s).map_err(errno)? {
        TcpState::SynSent | TcpState::SynRecv => Ok(false),
        TcpState::Close => {
            let e = st.getsockopt(s, SockOpt::SoError).map_err(errno)?.int();
            let e = e.ok().filter(|v| *v != 0);
            Err(e.map_or(errno(Errno::ECONNABORTED), |v| {
                io::Error::from_raw_os_error(v as i32)
            }))
        }
        _ => Ok(true),
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

/// A listening socket of a [`Host`], with `std::net::TcpListener`'s shape. On a host of
/// several shards it listens on every shard (one engine socket each, same address and port),
/// since a connecting peer's tuple may belong to any of them; `accept` takes a connection
/// from whichever shard has one.
pub struct TcpListener {
    pub(crate) inner: Arc<Listener>,
}

/// The state of a [`TcpListener`]: its socket on each shard (index = shard), the host-level
/// wait a blocking `accept` sleeps on, and the options it applies to all of them.
pub(crate) struct Listener {
    pub socks: Vec<Sock>,
    pub wait: Arc<ListenWait>,
    nonblocking: AtomicBool,
    /// The shard the next `accept` looks at first (round-robin, so no shard starves).
    next: AtomicUsize,
}

impl Listener {
    pub fn host(&self) -> &Host {
        &self.socks[0].host
    }

    /// Whether `accept` (and `next_forwarded`) return `WouldBlock` instead of waiting.
    pub fn is_nonblocking(&self) -> bool {
        self.nonblocking.load(Ordering::Relaxed)
    }

    /// The shard to look at first (round-robin, so no shard starves).
    pub fn next_shard(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.socks.len()
    }

    /// One non-blocking `accept` on shard `k`'s socket (owned for the call); with `waker`, a
    /// call that finds nothing registers it as that socket's read waker before releasing it.
    pub fn try_accept(
        &self,
        k: usize,
        waker: Option<&std::task::Waker>,
    ) -> io::Result<Option<(TcpStream, SocketAddr)>> {
        let ls = &self.socks[k];
        let sh = &ls.host.shared;
        let mut o = sh.own(k, ls.id)?;
        match o.stack().accept(ls.id) {
            Ok((c, peer)) => {
                o.inner().add_slot(c);
                drop(o);
                let sock = Sock {
                    host: ls.host.clone(),
                    shard: k,
                    id: c,
                };
                Ok(Some((
                    TcpStream {
                        sock: Arc::new(sock),
                    },
                    peer,
                )))
            }
            Err(Errno::EAGAIN) => {
                if let Some(w) = waker {
                    o.slot()?.read_waker = Some(w.clone());
                }
                Ok(None)
            }
            Err(e) => Err(errno(e)),
        }
    }

    /// Tries every shard once, starting at the next in turn.
    pub fn accept_any(
        &self,
        waker: Option<&std::task::Waker>,
    ) -> io::Result<Option<(TcpStream, SocketAddr)>> {
        let n = self.socks.len();
        let start = self.next_shard();
        for i in 0..n {
            if let Some(c) = self.try_accept((start + i) % n, waker)? {
                return Ok(Some(c));
            }
        }
        Ok(None)
    }
}

impl std::fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpListener")
            .field(
                "socks",
                &self.inner.socks.iter().map(|s| s.id).collect::<Vec<_>>(),
            )
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
    /// Linux `sk_max_ack_backlog`; each shard's socket has this backlog).
    pub fn bind_with_backlog(
        host: &Host,
        addr: SocketAddr,
        backlog: i32,
    ) -> io::Result<TcpListener> {
        // Port 0: shard 0 picks the port, the others bind the same; should one of them have
        // it in use (by a connection of its own), start again with another.
        let tries = if addr.port() == 0 { 8 } else { 1 };
        let mut last = None;
        for _ in 0..tries {
            match Self::bind_all(host, addr, backlog) {
                Ok(l) => return Ok(l),
                Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| errno(Errno::EADDRINUSE)))
    }

    /// A listener for TCP connections to *any* destination that is not one of the host's
    /// addresses (transparent termination, as a TUN-based proxy or VPN needs; gVisor's
    /// `tcp.Forwarder`, Linux's TPROXY with `IP_TRANSPARENT`): `family` `V4` takes IPv4
    /// destinations, `V6` IPv6 ones and IPv4 ones too (dual stack). Each accepted stream's
    /// [`TcpStream::original_dst`] is the address the client connected to. A rule may accept,
    /// reset or drop connections by destination ([`Host::set_forward_filter`]); SYN queue,
    /// backlog and SYN cookies are an ordinary listener's. `EADDRINUSE` if the family already
    /// has one. See `shallow_tcp::Stack::listen_any`.
    pub fn bind_any(host: &Host, family: Family, backlog: i32) -> io::Result<TcpListener> {
        let wait = Arc::new(ListenWait::default());
        let mut socks = Vec::with_capacity(host.shards());
        for k in 0..host.shards() {
            let sock = Sock::new(host, k, family)?;
            sock.with_slot(|sl| sl.listen = Some(Arc::clone(&wait)))?;
            sock.call(|st, _, s| st.listen_any(s, backlog))?;
            socks.push(sock);
        }
        Ok(TcpListener::of(socks, wait))
    }

    /// The listener over its shards' sockets, which wake `wait`.
    fn of(socks: Vec<Sock>, wait: Arc<ListenWait>) -> TcpListener {
        TcpListener {
            inner: Arc::new(Listener {
                socks,
                wait,
                nonblocking: AtomicBool::new(false),
                next: AtomicUsize::new(0),
            }),
        }
    }

    fn bind_all(host: &Host, addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
        let wait = Arc::new(ListenWait::default());
        let mut socks = Vec::with_capacity(host.shards());
        let mut addr = addr;
        for k in 0..host.shards() {
            let sock = Sock::new(host, k, family_of(&addr))?;
            sock.with_slot(|sl| sl.listen = Some(Arc::clone(&wait)))?;
            let bound = sock.call(|st, now, s| {
                st.setsockopt(now, s, SockOpt::SoReuseaddr, &OptVal::Int(1))?;
                st.bind(s, addr)?;
                st.listen(s, backlog)?;
                st.local_addr(s)
            });
            socks.push(sock);
            // The other shards bind the port shard 0 got.
            addr.set_port(bound?.port());
        }
        Ok(TcpListener::of(socks, wait))
    }

    /// Accepts a connection: blocks until one is established on any shard (unless
    /// non-blocking). The wait is the listener's host-level one: its generation is read before
    /// the shards are tried, and any shard's wake-up of the listener bumps it, so a
    /// connection that arrives on a shard already tried ends the wait.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let l = &self.inner;
        let sh = &l.host().shared;
        loop {
            let gen0 = l.wait.gen();
            if let Some(c) = l.accept_any(None)? {
                return Ok(c);
            }
            if l.nonblocking.load(Ordering::Relaxed) {
                return Err(errno(Errno::EAGAIN));
            }
            if sh.stopped() {
                return Err(netdown());
            }
            crate::shared::bump(&sh.stats.sleeps);
            l.wait.wait(gen0, &sh.stop, None);
        }
    }

    /// An iterator of accepted connections (never `None`), like std's `incoming`.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.socks[0].peek(|st, _, s| st.local_addr(s))
    }

    /// `O_NONBLOCK`: `accept` fails with `WouldBlock` when no connection waits.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.inner.nonblocking.store(on, Ordering::Relaxed);
        for s in &self.inner.socks {
            s.set_nonblocking(on)?;
        }
        Ok(())
    }

    /// The engine's socket id of shard 0's socket (the listener has one per shard, see
    /// [`TcpListener::sockets`]).
    pub fn socket(&self) -> SocketId {
        self.inner.socks[0].id
    }

    /// The listener's socket on each shard: `(shard, socket id)`.
    pub fn sockets(&self) -> Vec<(usize, SocketId)> {
        self.inner.socks.iter().map(|s| (s.shard, s.id)).collect()
    }

    /// The host the listener belongs to.
    pub fn host(&self) -> &Host {
        self.inner.host()
    }

    /// `SO_ERROR`: the pending error, cleared (the first shard's that has one).
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        for sock in &self.inner.socks {
            let v = sock.call(|st, _, s| st.getsockopt(s, SockOpt::SoError)?.int())?;
            if v != 0 {
                return Ok(Some(io::Error::from_raw_os_error(v as i32)));
            }
        }
        Ok(None)
    }

    /// `TCP_FASTOPEN` on the listener (its socket on every shard): accept data in the SYN
    /// of clients that present a valid cookie (TCP Fast Open, RFC 7413), with at most `qlen`
    /// such connections whose handshake has not completed at once (`min(qlen, somaxconn)`;
    /// 0 turns it off). As on Linux the host must also have the server bit 2 in
    /// `net.ipv4.tcp_fastopen` (default 1: client only), e.g.
    /// `host.sysctl_set("net.ipv4.tcp_fastopen", "3")`. The cookie key is the host's
    /// (`net.ipv4.tcp_fastopen_key`, random until set, one for all shards) unless
    /// `TCP_FASTOPEN_KEY` is set with [`TcpListener::set_option`]. The counters
    /// `TcpExtTCPFastOpenPassive` and `TcpExtTCPFastOpenCookieReqd` ([`Host::counters`]) and
    /// the accepted stream's `tcp_info().options & 32` tell what happened.
    ///
    /// ```no_run
    /// use std::io::Read;
    /// use shallow_os::{Host, TcpListener};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let host = Host::attach_default()?;
    /// host.sysctl_set("net.ipv4.tcp_fastopen", "3")?;
    /// let l = TcpListener::bind(&host, "10.213.0.2:80".parse()?)?;
    /// l.set_fastopen(16)?;
    /// let (mut s, _) = l.accept()?; // may hold the SYN's data already
    /// let mut req = [0u8; 512];
    /// let n = s.read(&mut req)?;
    /// # let _ = n;
    /// # Ok(())
    /// # }
    /// ```
    pub fn set_fastopen(&self, qlen: u32) -> io::Result<()> {
        self.set_option(SockOpt::TcpFastopen, &OptVal::Int(i64::from(qlen)))
    }

    /// `TCP_FASTOPEN`: the listener's Fast Open queue length (0: off).
    pub fn fastopen(&self) -> io::Result<u32> {
        let v = self.option(SockOpt::TcpFastopen)?.int().map_err(errno)?;
        Ok(u32::try_from(v).unwrap_or(0))
    }

    /// Gives the listener the TCP-MD5 key `key` for peers in `peer/prefixlen`
    /// (`setsockopt(TCP_MD5SIG_EXT)` with `TCP_MD5SIG_FLAG_PREFIX`; `prefixlen` 32 or 128 is
    /// one address). Connections it accepts from those peers are signed with the key and
    /// take only segments signed with it; of several keys covering a peer, the longest
    /// prefix wins. An empty `key` deletes the key of that prefix (`ENOENT` if none). On
    /// an AF_INET6 listener an IPv4 peer is given as its IPv4-mapped address. Errors as
    /// Linux's: `EINVAL` for a key over 80 bytes, a prefix longer than the address or an
    /// address of the other family.
    pub fn set_md5_key(&self, peer: IpAddr, prefixlen: u8, key: &[u8]) -> io::Result<()> {
        let sig = shallow_tcp::Md5Sig::with_prefix(peer, prefixlen, key);
        self.set_option(SockOpt::TcpMd5sigExt, &OptVal::Bytes(sig.to_bytes()))
    }

    /// Any `setsockopt` the engine supports, on the listener's socket of every shard (e.g.
    /// `TCP_FASTOPEN_KEY` with `OptVal::Bytes` of 16 or 32 bytes, or
    /// `TCP_FASTOPEN_NO_COOKIE`); stops at the first shard that refuses it.
    pub fn set_option(&self, opt: SockOpt, val: &OptVal) -> io::Result<()> {
        for sock in &self.inner.socks {
            sock.call(|st, now, s| st.setsockopt(now, s, opt, val))?;
        }
        Ok(())
    }

    /// Any `getsockopt` the engine supports, of shard 0's socket (the shards' sockets have
    /// the same options when set through [`TcpListener::set_option`]).
    pub fn option(&self, opt: SockOpt) -> io::Result<OptVal> {
        self.inner.socks[0].call(|st, _, s| st.getsockopt(s, opt))
    }

    /// Another handle on the same listener.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        Ok(TcpListener {
            inner: Arc::clone(&self.inner),
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

/// `send` of a whole buffer as Linux's blocking `tcp_sendmsg`: copies in [`CHUNK`]s, dropping
/// the mutex between chunks, waits for write space when the buffer is full (`sk_stream_wait_memory`),
/// and returns the bytes accepted (partial only on timeout, error or `O_NONBLOCK`).
///
/// With `waker` (an async caller, which passes `MSG_DONTWAIT`), a call that would block
/// registers it as the socket's write waker before it releases the socket, so no wake-up can
/// fall between the failed attempt and the registration.
pub(crate) fn send_all(
    sh: &Shared,
    k: usize,
    s: SocketId,
    buf: &[u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<usize> {
    let mut o = sh.own(k, s)?;
    send_owned(&mut o, sh, s, buf, flags, waker)
}

/// [`send_all`] by a call that already owns the socket (the rest of a Fast Open `sendto`).
pub(crate) fn send_owned(
    o: &mut crate::shared::Owned<'_>,
    sh: &Shared,
    s: SocketId,
    buf: &[u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<usize> {
    send_loop(o, sh, buf.len(), CHUNK, flags, waker, |st, now, r, f| {
        st.send(now, s, &buf[r], f)
    })
}

/// A blocking or non-blocking send of `total` bytes as Linux's one `sendmsg` runs it: calls
/// of at most `chunk` bytes (`send` makes each, given the bytes' range and the flags), every
/// chunk but the last with MSG_MORE, sleeping for room as the socket's timeouts and
/// `O_NONBLOCK` say.
fn send_loop(
    o: &mut crate::shared::Owned<'_>,
    sh: &Shared,
    total: usize,
    chunk: usize,
    flags: u32,
    waker: Option<&std::task::Waker>,
    mut send: impl FnMut(
        &mut shallow_tcp::Stack,
        shallow_tcp::Instant,
        std::ops::Range<usize>,
        u32,
    ) -> Result<usize, Errno>,
) -> io::Result<usize> {
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
    while sent < total {
        let end = total.min(sent.saturating_add(chunk));
        // MSG_MORE on every chunk but the last: the call as a whole is one sendmsg.
        let more = if end < total {
            shallow_tcp::msgflags::MSG_MORE
        } else {
            0
        };
        let now = o.now();
        match send(o.stack(), now, sent..end, flags | more) {
            Ok(n) => {
                sent += n;
                chunks += 1;
                if sent < total {
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
    if sent == 0 && total > 0 {
        return Err(errno(Errno::EAGAIN));
    }
    Ok(sent)
}

/// [`TcpStream::send_zerocopy`]: the buffer handed to the engine in one call (nothing is
/// copied, so there is nothing to cut into chunks); a blocking call that finds the send
/// buffer full sleeps and continues the same send (one id).
pub(crate) fn send_zerocopy(
    sh: &Shared,
    k: usize,
    s: SocketId,
    buf: &shallow_tcp::Bytes,
    flags: u32,
) -> io::Result<usize> {
    let mut o = sh.own(k, s)?;
    let r = send_loop(
        &mut o,
        sh,
        buf.len(),
        usize::MAX,
        flags,
        None,
        |st, now, r, f| st.sendmsg_bufs(now, s, &[buf.slice(r)], f | msgflags::MSG_ZEROCOPY, None),
    );
    // The call is over, whether all of it went or it gave up (a send timeout): the
    // engine's completion of this send is not held for a continuation any more.
    let _ = o.stack().zerocopy_send_end(s);
    r
}

/// `recv` as Linux's `tcp_recvmsg`: copies in [`CHUNK`]s (mutex dropped between chunks), and
/// once the receive queue is empty processes the backlog (`__sk_flush_backlog`) and copies
/// what it brought before returning; waits only while nothing has been copied.
///
/// With `waker` (an async caller, which passes `MSG_DONTWAIT`), a call that would block
/// registers it as the socket's read waker before it releases the socket.
pub(crate) fn recv_some(
    sh: &Shared,
    k: usize,
    s: SocketId,
    buf: &mut [u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<usize> {
    recv_some_ts(sh, k, s, buf, flags, waker).map(|(n, _)| n)
}

/// [`recv_some`] with the receive time of the data read (`Stack::recvmsg`): that of the last
/// engine read that had one (a blocking read that copies in several rounds reports the
/// latest, as Linux's `tcp_recvmsg` keeps the last buffer's).
pub(crate) fn recv_some_ts(
    sh: &Shared,
    k: usize,
    s: SocketId,
    buf: &mut [u8],
    flags: u32,
    waker: Option<&std::task::Waker>,
) -> io::Result<(usize, Option<shallow_tcp::Instant>)> {
    if buf.is_empty() {
        return Ok((0, None));
    }
    let mut rx_time = None;
    let mut o = sh.own(k, s)?;
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
        match o.stack().recvmsg(now, s, &mut buf[copied..end], flags) {
            Ok(m) if m.len == 0 => break,
            Ok(m) => {
                let n = m.len;
                rx_time = m.rx_time.or(rx_time);
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
                if let WaitEnd::TimedOut = o.wait_read_busy(dl)? {
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
    Ok((copied, rx_time))
}
