//! One proxied connection: reach the original destination, then carry bytes both ways.
//!
//! Rules (as a Linux router between the client and the destination would let the client
//! see it, then as a host that terminates and re-originates the connection):
//! - the client's SYN is answered only once the destination (or the SOCKS5 server) has
//!   answered: a refusal becomes a RST (the client sees `ECONNREFUSED`), no route or no host
//!   an ICMP destination-unreachable (`ENETUNREACH`, `EHOSTUNREACH`), no answer in time
//!   nothing (the client's next SYN tries again); counted in
//!   [`Stats::upstream_failures`](crate::Stats::upstream_failures). A connection accepted
//!   without asking (SYN cookies under a flood) is reset instead;
//! - end of stream on one side shuts down the write side of the other (a FIN for a FIN):
//!   half-closed connections keep carrying the other direction;
//! - a reset (or any error) on one side resets the other (`SO_LINGER` 0, then close) and
//!   ends the relay;
//! - each direction reads only when the other side's socket took the previous chunk, so
//!   the proxy holds at most one chunk per direction, and none while a direction is idle.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use shallow_os::{AsyncTcpStream, ForwardRequest, Unreachable};
use shallow_tcp::{OptVal, SockOpt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::{socks5, Config, Stats, Upstream};

/// A run of reads from upstream without an idle gap that carried this much is bulk.
const BULK_RUN: usize = 256 * 1024;
/// In bulk, upstream reports readable only from this many bytes (`SO_RCVLOWAT`).
const BULK_LOWAT: i32 = 64 * 1024;
/// In bulk, the longest a read waits for `BULK_LOWAT` bytes; a gap this long ends a run.
const MODERATION: std::time::Duration = std::time::Duration::from_millis(1);

/// Receive moderation of the upstream socket (as a NIC's interrupt moderation): during a
/// bulk transfer from upstream, read it once 64 KiB are queued (or after 1 ms) instead of at
/// every arrival. An upstream that writes in small pieces (microsocks copies 1 KiB at a
/// time) then costs one wake-up and one Shallow write per 64 KiB, not per piece; a
/// request/response exchange never reaches a bulk run and is read at once.
struct Moderation {
    bulk: bool,
    run: usize,
    last: std::time::Instant,
}

impl Moderation {
    fn new() -> Moderation {
        Moderation {
            bulk: false,
            run: 0,
            last: std::time::Instant::now(),
        }
    }

    /// `n` bytes were read from `sock`.
    fn read(&mut self, sock: &TcpStream, n: usize) {
        let now = std::time::Instant::now();
        if now.duration_since(self.last) < MODERATION {
            self.run += n;
        } else {
            self.run = n;
        }
        self.last = now;
        if !self.bulk && self.run >= BULK_RUN {
            self.bulk = shallow_os::kernel_sock::set_rcvlowat(sock, BULK_LOWAT).is_ok();
        }
    }

    /// A read found nothing queued: the run is over.
    fn idle(&mut self, sock: &TcpStream) {
        self.run = 0;
        if self.bulk {
            self.bulk = false;
            let _ = shallow_os::kernel_sock::set_rcvlowat(sock, 1);
        }
    }
}

/// Which side of the relay failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// The client's connection (Shallow's socket toward the TUN).
    Client,
    /// The upstream connection (the kernel's socket).
    Upstream,
}

/// Relays one held SYN: tries the original destination first, then answers the client as a
/// router on the way would have let it see the destination — the handshake (and the relay),
/// a RST when it refused, an ICMP unreachable error when there is no route or host, nothing
/// when it did not answer in time (the client's SYN retransmission asks again).
/// `permit` is one of the proxy's places for destinations being tried; it is given back once
/// the client has its answer.
pub async fn relay_request(
    req: ForwardRequest,
    permit: tokio::sync::OwnedSemaphorePermit,
    cfg: Arc<Config>,
    stats: Arc<Stats>,
) {
    let dst = req.original_dst();
    let tried = tokio::time::timeout(cfg.connect_timeout, connect(&cfg, dst)).await;
    let upstream = match tried {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
            // Linux errno numbers (the SOCKS5 replies map to them, `socks5::reply_error`).
            let _ = match e.raw_os_error() {
                Some(101) => req.unreachable(Unreachable::Net),
                Some(113) => req.unreachable(Unreachable::Host),
                Some(110) => req.ignore(),
                _ => req.reset(),
            };
            return;
        }
        Err(_) => {
            stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
            let _ = req.ignore();
            return;
        }
    };
    let client = req.accept().await;
    drop(permit);
    let Ok(client) = client else {
        return; // the client went away meanwhile: the upstream socket closes
    };
    run(client, upstream, &cfg, &stats).await;
}

/// Relays one connection the listener accepted without asking (an accept-all rule, or SYN
/// cookies under a flood): the client is already connected, so a destination that cannot
/// be reached resets it.
pub async fn relay_stream(client: AsyncTcpStream, cfg: Arc<Config>, stats: Arc<Stats>) {
    let Ok(dst) = client.original_dst() else {
        return;
    };
    let upstream = match tokio::time::timeout(cfg.connect_timeout, connect(&cfg, dst)).await {
        Ok(Ok(s)) => s,
        Ok(Err(_)) | Err(_) => {
            stats.upstream_failures.fetch_add(1, Ordering::Relaxed);
            abort_client(client);
            return;
        }
    };
    run(client, upstream, &cfg, &stats).await;
}

/// Carries a connected pair until both directions are done or one side fails.
async fn run(client: AsyncTcpStream, upstream: TcpStream, cfg: &Config, stats: &Stats) {
    let (Ok(dst), Ok(peer), Ok(handle)) = (
        client.original_dst(),
        client.peer_addr(),
        client.get_ref().try_clone(),
    ) else {
        return;
    };
    let (id, up_bytes, down_bytes) = stats.add(peer, dst, handle);
    if let Some(v) = cfg.notsent_lowat {
        let _ = client.get_ref().set_notsent_lowat(v);
    }
    let _ = upstream.set_nodelay(true);
    if let Some(v) = cfg.upstream_notsent_lowat {
        let _ = socket2::SockRef::from(&upstream).set_tcp_notsent_lowat(v);
    }
    let failed = carry(&client, upstream, cfg, &up_bytes, &down_bytes, stats).await;
    stats.remove(id);
    if failed.is_some() {
        stats.resets.fetch_add(1, Ordering::Relaxed);
    }
    if failed == Some(Side::Upstream) {
        abort_client(client);
    }
}

/// Connects to `dst` as the configuration says.
async fn connect(cfg: &Config, dst: SocketAddr) -> io::Result<TcpStream> {
    match &cfg.upstream {
        Upstream::Direct => TcpStream::connect(shallow_tcp::dualstack::unmapped(dst)).await,
        Upstream::Socks5 { server, auth } => {
            let mut s = TcpStream::connect(server).await?;
            s.set_nodelay(true)?;
            let auth = auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
            socks5::connect(&mut s, dst, auth).await?;
            Ok(s)
        }
    }
}

/// Resets the client's connection: `SO_LINGER` {on, 0} and close.
fn abort_client(client: AsyncTcpStream) {
    let _ = client.get_ref().set_option(
        SockOpt::SoLinger,
        &OptVal::Linger {
            onoff: true,
            secs: 0,
        },
    );
    drop(client);
}

/// Carries both directions; returns the side that failed, if one did (the upstream
/// socket, owned here, is reset before returning when the client failed).
async fn carry(
    client: &AsyncTcpStream,
    upstream: TcpStream,
    cfg: &Config,
    up_bytes: &AtomicU64,
    down_bytes: &AtomicU64,
    stats: &Stats,
) -> Option<Side> {
    let Ok(mut client_w) = client.try_clone() else {
        return Some(Side::Client);
    };
    let mut client_r = match client.try_clone() {
        Ok(c) => c,
        Err(_) => return Some(Side::Client),
    };
    let (up_r, mut up_w) = upstream.into_split();
    let chunk = cfg.chunk.max(1);
    let failed = {
        let to_upstream = async {
            let mut buf: Vec<u8> = Vec::new();
            loop {
                if client_r.readable().await.is_err() {
                    return Err(Side::Client);
                }
                buf.resize(chunk, 0);
                let n = match client_r.read(&mut buf).await {
                    Ok(n) => n,
                    Err(_) => return Err(Side::Client),
                };
                if n == 0 {
                    let _ = up_w.shutdown().await;
                    return Ok(());
                }
                if up_w.write_all(&buf[..n]).await.is_err() {
                    return Err(Side::Upstream);
                }
                up_bytes.fetch_add(n as u64, Ordering::Relaxed);
                stats.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
                if n < chunk {
                    // Drained for now: hold no buffer while idle.
                    buf = Vec::new();
                }
            }
        };
        let to_client = async {
            let mut buf: Vec<u8> = Vec::new();
            let mut pace = Moderation::new();
            loop {
                let ready = if pace.bulk {
                    tokio::select! {
                        r = up_r.readable() => r,
                        _ = tokio::time::sleep(MODERATION) => Ok(()),
                    }
                } else {
                    up_r.readable().await
                };
                if ready.is_err() {
                    return Err(Side::Upstream);
                }
                buf.resize(chunk, 0);
                let mut n = match up_r.try_read(&mut buf) {
                    Ok(n) => n,
                    // Readiness left over from an earlier read (tokio clears it only on
                    // WouldBlock; the SOCKS5 reply was read exactly), or a moderation timer
                    // that found nothing: no buffer while idle, and no more moderation.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        buf = Vec::new();
                        pace.idle(up_r.as_ref());
                        continue;
                    }
                    Err(_) => return Err(Side::Upstream),
                };
                // Take what else is already queued (an upstream that writes in small pieces,
                // as microsocks does, would otherwise cost one Shallow write per piece); no
                // waiting: only bytes that are there.
                let (mut eof, mut failed) = (n == 0, false);
                while !eof && n < chunk {
                    match up_r.try_read(&mut buf[n..]) {
                        Ok(0) => eof = true,
                        Ok(k) => n += k,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {
                            failed = true;
                            break;
                        }
                    }
                }
                if n > 0 {
                    pace.read(up_r.as_ref(), n);
                    if client_w.write_all(&buf[..n]).await.is_err() {
                        return Err(Side::Client);
                    }
                    down_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    stats.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
                }
                if failed {
                    return Err(Side::Upstream);
                }
                if eof {
                    if client_w.shutdown().await.is_err() {
                        return Err(Side::Client);
                    }
                    return Ok(());
                }
                if n < chunk {
                    buf = Vec::new();
                }
            }
        };
        tokio::pin!(to_upstream, to_client);
        let (mut up_done, mut down_done) = (false, false);
        loop {
            tokio::select! {
                r = &mut to_upstream, if !up_done => match r {
                    Ok(()) => up_done = true,
                    Err(side) => break Some(side),
                },
                r = &mut to_client, if !down_done => match r {
                    Ok(()) => down_done = true,
                    Err(side) => break Some(side),
                },
            }
            if up_done && down_done {
                break None;
            }
        }
    };
    if failed == Some(Side::Client) {
        // Reset upstream: SO_LINGER 0 on the kernel socket, closed as the halves drop.
        if let Ok(s) = up_r.reunite(up_w) {
            let _ = socket2::SockRef::from(&s).set_linger(Some(std::time::Duration::ZERO));
        }
    }
    failed
}
