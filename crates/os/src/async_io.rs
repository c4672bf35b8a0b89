//! Async sockets for tokio (cargo feature `tokio`): [`AsyncTcpStream`] implements tokio's
//! `AsyncRead`/`AsyncWrite`, [`AsyncTcpListener`] accepts.
//!
//! They run on the same machinery as the blocking API, with no thread of their own: each
//! poll makes one non-blocking attempt while owning the socket, and when it would block it
//! stores the task's waker in the socket's slot *before* releasing the socket (the slot is
//! guarded by the engine mutex), so the wake-up that makes the socket ready — drained from the
//! engine by the I/O thread or by whichever thread releases the socket — always finds it.
//! Readers are woken by `POLLIN`/`POLLRDHUP`/`POLLHUP`/`POLLERR` wake-ups, writers by
//! `POLLOUT`/`POLLHUP`/`POLLERR` (so the write-space hysteresis of `TCP_NOTSENT_LOWAT`
//! applies to async writers as it does to blocking ones). A task waiting for a transmit
//! timestamp ([`AsyncTcpStream::recv_timestamp`]) has a waker of its own, woken by
//! `POLLERR`/`POLLHUP` (a new error-queue event), so one task may read while another waits
//! for timestamps.
//!
//! Any runtime works (the types only need a `Waker`); tokio is needed for the traits.

use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use shallow_tcp::{msgflags, Errno, TcpInfo, TcpState, TxTimestamp};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::forward::{ForwardRequest, Forwarded};
use crate::host::Host;
use crate::net::{family_of, Sock, TcpListener, TcpStream};
use crate::shared::{errno, netdown};

fn would_block<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

/// A TCP connection for async code: tokio's `AsyncRead` + `AsyncWrite`.
#[derive(Debug)]
pub struct AsyncTcpStream {
    inner: TcpStream,
}

impl AsyncTcpStream {
    /// Connects to `addr` (`ECONNREFUSED` on RST, `ETIMEDOUT` after the SYN retries).
    pub async fn connect(host: &Host, addr: SocketAddr) -> io::Result<AsyncTcpStream> {
        let sock = Sock::new(host, host.shared.connect_shard(), family_of(&addr))?;
        let (k, id) = (sock.shard, sock.id);
        let sh = &host.shared;
        {
            let mut o = sh.own(k, id)?;
            let now = o.now();
            match o.stack().connect(now, id, addr) {
                Ok(()) | Err(Errno::EINPROGRESS) => {}
                Err(e) => return Err(errno(e)),
            }
        }
        poll_fn(|cx| {
            let mut o = sh.own(k, id)?;
            if o.stack().state(id).map_err(errno)? == TcpState::SynSent {
                if sh.stopped() {
                    return Poll::Ready(Err(netdown()));
                }
                o.slot()?.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            let now = o.now();
            Poll::Ready(match o.stack().connect(now, id, addr) {
                Ok(()) | Err(Errno::EISCONN) => Ok(()),
                Err(e) => Err(errno(e)),
            })
        })
        .await?;
        Ok(AsyncTcpStream {
            inner: TcpStream {
                sock: Arc::new(sock),
            },
        })
    }

    /// Connects to `addr` with TCP Fast Open and sends `data`, as
    /// [`TcpStream::connect_fastopen`] does (Linux's `sendto(MSG_FASTOPEN)` then writes of
    /// the rest): the SYN carries what the cached cookie allows, the future waits for the
    /// handshake and then for all of `data` to be queued.
    ///
    /// ```no_run
    /// use shallow_os::{AsyncTcpStream, Host};
    /// # async fn f(host: Host) -> std::io::Result<()> {
    /// let addr = "10.213.0.1:80".parse().unwrap();
    /// let s = AsyncTcpStream::connect_fastopen(&host, addr, b"hello").await?;
    /// let in_syn = s.tcp_info()?.options & 32 != 0;
    /// # let _ = in_syn;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect_fastopen(
        host: &Host,
        addr: SocketAddr,
        data: &[u8],
    ) -> io::Result<AsyncTcpStream> {
        let sh = &host.shared;
        let sock = Sock::new(host, sh.peer_shard(addr.ip()), family_of(&addr))?;
        let (k, id) = (sock.shard, sock.id);
        // No MSG_DONTWAIT: the engine then holds the SYN-ACK's ACK for the rest of the data
        // this future writes as soon as it is woken (a blocking sendto's write bias).
        let mut sent = {
            let mut o = sh.own(k, id)?;
            crate::net::fastopen_syn(&mut o, id, addr, data)?
        };
        poll_fn(|cx| {
            let mut o = sh.own(k, id)?;
            if !crate::net::handshake_done(o.stack(), id)? {
                if sh.stopped() {
                    return Poll::Ready(Err(netdown()));
                }
                o.slot()?.write_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(Ok(()))
        })
        .await?;
        poll_fn(|cx| {
            while sent < data.len() {
                match would_block(crate::net::send_all(
                    sh,
                    k,
                    id,
                    &data[sent..],
                    msgflags::MSG_DONTWAIT | msgflags::MSG_NOSIGNAL,
                    Some(cx.waker()),
                )) {
                    Poll::Ready(Ok(n)) => sent += n,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            Poll::Ready(Ok(()))
        })
        .await?;
        Ok(AsyncTcpStream {
            inner: TcpStream {
                sock: Arc::new(sock),
            },
        })
    }

    /// Wraps a connected blocking stream (its blocking mode no longer matters: every async
    /// call is non-blocking).
    pub fn from_std(s: TcpStream) -> AsyncTcpStream {
        AsyncTcpStream { inner: s }
    }

    /// The blocking stream, for socket options (`set_nodelay`, `set_notsent_lowat`, ...).
    pub fn get_ref(&self) -> &TcpStream {
        &self.inner
    }

    /// Unwraps the blocking stream.
    pub fn into_std(self) -> TcpStream {
        self.inner
    }

    /// The remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// The address the client connected to ([`TcpStream::original_dst`]).
    pub fn original_dst(&self) -> io::Result<SocketAddr> {
        self.inner.original_dst()
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// `TCP_INFO`.
    pub fn tcp_info(&self) -> io::Result<TcpInfo> {
        self.inner.tcp_info()
    }

    fn sock(&self) -> &Sock {
        &self.inner.sock
    }

    /// `SO_TIMESTAMPING` ([`TcpStream::set_timestamping`]: flags, errors and what each
    /// timestamp means).
    pub fn set_timestamping(&self, flags: u32) -> io::Result<()> {
        self.inner.set_timestamping(flags)
    }

    /// The oldest transmit timestamp of the error queue, taken; registers `cx`'s waker when
    /// the queue is empty (the next event's `POLLERR` wakes it). `ENETDOWN` once the host
    /// stopped.
    pub fn poll_recv_timestamp(&self, cx: &mut Context<'_>) -> Poll<io::Result<TxTimestamp>> {
        let s = self.sock();
        let sh = &s.host.shared;
        let mut o = sh.own(s.shard, s.id)?;
        match o.stack().recv_tx_timestamp(s.id) {
            Ok(t) => Poll::Ready(Ok(t)),
            Err(Errno::EAGAIN) => {
                if sh.stopped() {
                    return Poll::Ready(Err(netdown()));
                }
                // Stored while the socket is owned: the wake-up of an event queued after
                // this check finds the waker.
                o.slot()?.err_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            Err(e) => Poll::Ready(Err(errno(e))),
        }
    }

    /// `recvmsg(MSG_ERRQUEUE)` for async code: the oldest transmit timestamp, waiting for one
    /// as `poll(POLLERR)` would ([`TcpStream::wait_timestamp`] without a thread).
    pub async fn recv_timestamp(&self) -> io::Result<TxTimestamp> {
        poll_fn(|cx| self.poll_recv_timestamp(cx)).await
    }

    /// A read with its receive timestamp ([`TcpStream::recv_with_timestamp`]), waiting for
    /// data as `poll_read` does.
    pub fn poll_recv_with_timestamp(
        &self,
        cx: &mut Context<'_>,
        buf: &mut [u8],
    ) -> Poll<io::Result<(usize, Option<shallow_tcp::Instant>)>> {
        let s = self.sock();
        would_block(crate::net::recv_some_ts(
            &s.host.shared,
            s.shard,
            s.id,
            buf,
            msgflags::MSG_DONTWAIT,
            Some(cx.waker()),
        ))
    }

    /// `recvmsg` with its receive timestamp for async code: bytes read (0: end of stream) and
    /// the time they arrived, if the socket asks ([`TcpStream::recv_with_timestamp`]).
    pub async fn recv_with_timestamp(
        &self,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<shallow_tcp::Instant>)> {
        poll_fn(|cx| self.poll_recv_with_timestamp(cx, buf)).await
    }

    /// Polls until a read would not block — data, end of stream or an error — without
    /// taking any data (a `MSG_PEEK` of one byte); registers `cx`'s waker otherwise. With
    /// it a relay can wait on many idle streams without a buffer for each.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let s = self.sock();
        let mut one = [0u8; 1];
        match would_block(crate::net::recv_some(
            &s.host.shared,
            s.shard,
            s.id,
            &mut one,
            msgflags::MSG_PEEK | msgflags::MSG_DONTWAIT,
            Some(cx.waker()),
        )) {
            Poll::Ready(Ok(_)) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Waits until a read would not block ([`AsyncTcpStream::poll_read_ready`]).
    pub async fn readable(&self) -> io::Result<()> {
        poll_fn(|cx| self.poll_read_ready(cx)).await
    }

    /// Another handle on the same connection (`dup`): one task may read through one handle
    /// while another writes through the other.
    pub fn try_clone(&self) -> io::Result<AsyncTcpStream> {
        Ok(AsyncTcpStream {
            inner: self.inner.try_clone()?,
        })
    }
}

impl AsyncRead for AsyncTcpStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let s = self.sock();
        let dst = buf.initialize_unfilled();
        let r = crate::net::recv_some(
            &s.host.shared,
            s.shard,
            s.id,
            dst,
            msgflags::MSG_DONTWAIT,
            Some(cx.waker()),
        );
        match would_block(r) {
            Poll::Ready(Ok(n)) => {
                buf.advance(n);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for AsyncTcpStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let s = self.sock();
        would_block(crate::net::send_all(
            &s.host.shared,
            s.shard,
            s.id,
            buf,
            msgflags::MSG_DONTWAIT | msgflags::MSG_NOSIGNAL,
            Some(cx.waker()),
        ))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// `shutdown(SHUT_WR)`: sends FIN after the queued data.
    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.inner.shutdown(std::net::Shutdown::Write))
    }
}

impl ForwardRequest {
    /// Sends the SYN-ACK and waits for the handshake to complete: the connection, as an
    /// async stream. Fails with the socket's error (`ECONNRESET` when the client reset it,
    /// `ETIMEDOUT` when the SYN-ACK retries ran out).
    pub async fn accept(self) -> io::Result<AsyncTcpStream> {
        let s = self.into_stream()?;
        let (k, id) = (s.sock.shard, s.sock.id);
        let sh = &s.sock.host.shared;
        poll_fn(|cx| {
            let mut o = sh.own(k, id)?;
            match o.stack().state(id).map_err(errno)? {
                TcpState::SynRecv => {
                    if sh.stopped() {
                        return Poll::Ready(Err(netdown()));
                    }
                    o.slot()?.write_waker = Some(cx.waker().clone());
                    Poll::Pending
                }
                TcpState::Close => Poll::Ready(Err(crate::forward::closed_error(o.stack(), id))),
                _ => Poll::Ready(Ok(())),
            }
        })
        .await?;
        Ok(AsyncTcpStream { inner: s })
    }
}

/// A listening socket for async code.
#[derive(Debug)]
pub struct AsyncTcpListener {
    inner: TcpListener,
}

impl AsyncTcpListener {
    /// Binds and listens as [`TcpListener::bind`] does.
    pub fn bind(host: &Host, addr: SocketAddr) -> io::Result<AsyncTcpListener> {
        Ok(AsyncTcpListener {
            inner: TcpListener::bind(host, addr)?,
        })
    }

    /// A listener for connections to any destination, as [`TcpListener::bind_any`].
    pub fn bind_any(
        host: &Host,
        family: shallow_tcp::Family,
        backlog: i32,
    ) -> io::Result<AsyncTcpListener> {
        Ok(AsyncTcpListener {
            inner: TcpListener::bind_any(host, family, backlog)?,
        })
    }

    /// Wraps a blocking listener.
    pub fn from_std(l: TcpListener) -> AsyncTcpListener {
        AsyncTcpListener { inner: l }
    }

    /// The blocking listener.
    pub fn get_ref(&self) -> &TcpListener {
        &self.inner
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Accepts a connection when one is established.
    pub async fn accept(&self) -> io::Result<(AsyncTcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// The next thing a forwarding listener ([`AsyncTcpListener::bind_any`]) has: a held SYN
    /// to decide on ([`Forwarded::Request`], under a [`ForwardVerdict::Defer`] rule) or an
    /// established connection ([`Forwarded::Stream`]: one the rule accepted at once, or one
    /// SYN cookies answered under a flood). Use this instead of `accept` on such a listener.
    ///
    /// [`ForwardVerdict::Defer`]: shallow_tcp::ForwardVerdict::Defer
    pub async fn next_forwarded(&self) -> io::Result<Forwarded> {
        poll_fn(|cx| {
            let l = &self.inner.inner;
            match l.forwarded_any(Some(cx.waker())) {
                Ok(Some(f)) => Poll::Ready(Ok(f)),
                Ok(None) if l.host().shared.stopped() => Poll::Ready(Err(netdown())),
                Ok(None) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            }
        })
        .await
    }

    /// Polls for a connection; registers `cx`'s waker when none waits. On a host of several
    /// shards each shard's socket is tried in turn, and one that has nothing gets the waker
    /// in the same hold of its shard's mutex, so no connection that arrives meanwhile on any
    /// shard is missed.
    pub fn poll_accept(
        &self,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<(AsyncTcpStream, SocketAddr)>> {
        let l = &self.inner.inner;
        match l.accept_any(Some(cx.waker())) {
            Ok(Some((s, peer))) => Poll::Ready(Ok((AsyncTcpStream { inner: s }, peer))),
            Ok(None) if l.host().shared.stopped() => Poll::Ready(Err(netdown())),
            Ok(None) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}
