//! System calls: the script's calls mapped onto the stack's socket API, with Linux return
//! values and errnos, output-argument checks, script fds, poll/epoll and blocking calls.

use shallow_tcp::{
    DeviceCaps, Errno, Family, Ioctl, OptVal, Shutdown, SockOpt, SocketId, TcpInfo, TcpState,
};

use super::{EpollItem, Fd, Pending, Runner, R};
use crate::ast::{Expr, SyscallSpec};
use crate::outcome::FailKind;
use crate::symbols;

pub(crate) const EPOLLERR: u32 = 0x008;
pub(crate) const EPOLLHUP: u32 = 0x010;
const EPOLLONESHOT: u32 = 1 << 30;
const EPOLLET: u32 = 1 << 31;
const POLLNVAL: u32 = 0x020;
const O_RDWR: i64 = 0o2;
const O_NONBLOCK: i64 = 0o4000;
const MSG_DONTWAIT: u32 = 0x40;
const MSG_FASTOPEN: u32 = 0x2000_0000;
const MSG_ERRQUEUE: u32 = 0x2000;
const SOL_TCP: i64 = 6;
const TCP_CM_INQ: i64 = 36;
const EFAULT: i64 = 14;
const EPIPE: i64 = 32;
const EOPNOTSUPP: i64 = 95;
const EBADF: i64 = 9;
const ENOTSOCK: i64 = 88;
const EINVAL: i64 = 22;
const EEXIST: i64 = 17;
const ENOENT: i64 = 2;

/// Progress of a call across retries.
#[derive(Debug, Default)]
pub(crate) struct CallState {
    /// Bytes a blocking write has sent so far.
    written: usize,
    /// A blocking connect() is waiting for the handshake.
    connecting: bool,
    /// A close() with SO_LINGER waits for its FIN's ACK until this time (ns).
    lingering: Option<u64>,
    /// A blocking Fast Open send (sendto with MSG_FASTOPEN, or the first write after a
    /// deferred TCP_FASTOPEN_CONNECT) waits for the handshake before it goes on.
    fastopen: bool,
}

/// What one attempt at a call gave.
pub(crate) enum Res {
    /// Returned: value or errno.
    Done(Result<i64, i64>),
    /// Would block; retry later (optionally give up at a deadline, e.g. a poll timeout).
    Blocked(Option<u64>),
}

fn code(e: Errno) -> i64 {
    i64::from(e.code())
}

fn errno_str(e: i64) -> String {
    symbols::errno_name(e)
        .map(str::to_string)
        .unwrap_or_else(|| format!("errno {e}"))
}

/// A `tcpi_*` variable from a TCP_INFO snapshot.
pub(crate) fn tcpi(i: &TcpInfo, name: &str) -> Option<i64> {
    let v: i64 = match name.strip_prefix("tcpi_")? {
        "state" => i.state.into(),
        "ca_state" => i.ca_state.into(),
        "retransmits" => i.retransmits.into(),
        "probes" => i.probes.into(),
        "backoff" => i.backoff.into(),
        "options" => i.options.into(),
        "snd_wscale" => i.snd_wscale.into(),
        "rcv_wscale" => i.rcv_wscale.into(),
        "rto" => i.rto.into(),
        "ato" => i.ato.into(),
        "snd_mss" => i.snd_mss.into(),
        "rcv_mss" => i.rcv_mss.into(),
        "unacked" => i.unacked.into(),
        "sacked" => i.sacked.into(),
        "lost" => i.lost.into(),
        "retrans" => i.retrans.into(),
        "last_data_sent" => i.last_data_sent.into(),
        "last_data_recv" => i.last_data_recv.into(),
        "last_ack_recv" => i.last_ack_recv.into(),
        "pmtu" => i.pmtu.into(),
        "rcv_ssthresh" => i.rcv_ssthresh.into(),
        "rtt" => i.rtt.into(),
        "rttvar" => i.rttvar.into(),
        "snd_ssthresh" => i.snd_ssthresh.into(),
        "snd_cwnd" => i.snd_cwnd.into(),
        "advmss" => i.advmss.into(),
        "reordering" => i.reordering.into(),
        "rcv_rtt" => i.rcv_rtt.into(),
        "rcv_space" => i.rcv_space.into(),
        "total_retrans" => i.total_retrans.into(),
        "pacing_rate" => i64::try_from(i.pacing_rate).ok()?,
        "max_pacing_rate" => i64::try_from(i.max_pacing_rate).ok()?,
        "bytes_acked" => i64::try_from(i.bytes_acked).ok()?,
        "bytes_received" => i64::try_from(i.bytes_received).ok()?,
        "segs_out" => i.segs_out.into(),
        "segs_in" => i.segs_in.into(),
        "notsent_bytes" => i.notsent_bytes.into(),
        "min_rtt" => i.min_rtt.into(),
        "data_segs_in" => i.data_segs_in.into(),
        "data_segs_out" => i.data_segs_out.into(),
        "delivery_rate" => i64::try_from(i.delivery_rate).ok()?,
        "delivered" => i.delivered.into(),
        "bytes_sent" => i64::try_from(i.bytes_sent).ok()?,
        "bytes_retrans" => i64::try_from(i.bytes_retrans).ok()?,
        "snd_wnd" => i.snd_wnd.into(),
        "rcv_wnd" => i.rcv_wnd.into(),
        "busy_time" => i64::try_from(i.busy_time).ok()?,
        "rwnd_limited" => i64::try_from(i.rwnd_limited).ok()?,
        "sndbuf_limited" => i64::try_from(i.sndbuf_limited).ok()?,
        "reord_seen" => i.reord_seen.into(),
        _ => return None,
    };
    Some(v)
}

/// An `sk_meminfo_*` variable (`SK_MEMINFO_*` index names in lower case) from `SO_MEMINFO`.
pub(crate) fn sk_meminfo(m: &shallow_tcp::MemInfo, name: &str) -> Option<i64> {
    const NAMES: [&str; 9] = [
        "rmem_alloc",
        "rcvbuf",
        "wmem_alloc",
        "sndbuf",
        "fwd_alloc",
        "wmem_queued",
        "optmem",
        "backlog",
        "drops",
    ];
    let field = name.strip_prefix("sk_meminfo_")?;
    let i = NAMES.iter().position(|n| *n == field)?;
    Some(i64::from(m.as_array()[i]))
}

macro_rules! sock_or_done {
    ($self:ident, $fd:expr) => {
        match $self.sock($fd) {
            Ok(s) => s,
            Err(e) => return Ok(Res::Done(Err(e))),
        }
    };
}

impl Runner<'_> {
    // ------------------------------------------------------------------ argument helpers

    pub(super) fn int_of(&self, e: &Expr) -> Option<i64> {
        match e {
            Expr::Int(v) => Some(*v),
            // A `-D` name stands for a number or for another symbol (CMSG_LEVEL_IP=SOL_IP).
            Expr::Symbol(s) => self
                .defines
                .get(s)
                .and_then(|v| parse_int(v).or_else(|| symbols::lookup(v)))
                .or_else(|| symbols::lookup(s)),
            Expr::BitOr(parts) => parts
                .iter()
                .try_fold(0i64, |acc, p| self.int_of(p).map(|v| acc | v)),
            Expr::List(v) if v.len() == 1 => self.int_of(&v[0]),
            Expr::Call { name, args } if matches!(name.as_str(), "htons" | "htonl" | "ntohs") => {
                args.first().and_then(|a| self.int_of(a))
            }
            _ => None,
        }
    }

    fn int(&self, call: &SyscallSpec, i: usize) -> R<i64> {
        let Some(e) = call.args.get(i) else {
            return self.fail(
                FailKind::Script,
                format!("{}(): missing argument {}", call.name, i + 1),
            );
        };
        match self.int_of(e) {
            Some(v) => Ok(v),
            None => self.skip(format!(
                "{}(): cannot evaluate argument {} ({e:?})",
                call.name,
                i + 1
            )),
        }
    }

    fn arg<'c>(&self, call: &'c SyscallSpec, i: usize) -> R<&'c Expr> {
        match call.args.get(i) {
            Some(e) => Ok(e),
            None => self.fail(
                FailKind::Script,
                format!("{}(): missing argument {}", call.name, i + 1),
            ),
        }
    }

    fn sock(&self, fd: i64) -> Result<SocketId, i64> {
        match self.fds.get(&fd) {
            Some(Fd::Sock(s)) => Ok(*s),
            Some(Fd::Epoll(_) | Fd::File { .. } | Fd::Pipe { .. }) => Err(ENOTSOCK),
            None => Err(EBADF),
        }
    }

    fn blocking(&self, fd: i64) -> bool {
        match self.fds.get(&fd) {
            Some(Fd::Sock(s)) => !self.st.is_nonblocking(*s).unwrap_or(false),
            _ => !self.nonblock_epoll.get(&fd).copied().unwrap_or(false),
        }
    }

    /// The fd for a new socket / epoll instance: like packetdrill, the number the script
    /// expects becomes the script's name for the new descriptor (scripts may start at 4);
    /// otherwise the lowest free number from 3.
    /// The script's number for a new fd: the one the script expects, as packetdrill maps the
    /// script's fd to whatever live fd the call returned (an older socket the script
    /// numbered so and never closed stays open, out of the script's reach).
    fn new_fd(&self, call: &SyscallSpec) -> i64 {
        match self.int_of(&call.result) {
            Some(want) if want >= 0 => want,
            _ => self.alloc_fd(),
        }
    }

    fn alloc_fd(&self) -> i64 {
        let mut fd = 3;
        while self.fds.contains_key(&fd) {
            fd += 1;
        }
        fd
    }

    pub(super) fn family(&self) -> Family {
        if self.local_ip.is_ipv6() || self.mapped {
            Family::V6
        } else {
            Family::V4
        }
    }

    /// An address as the script's sockets see it: in the IPv4-mapped-IPv6 variant an IPv4
    /// address becomes `::ffff:a.b.c.d` (what packetdrill passes to bind and connect there).
    fn api_addr(&self, a: std::net::SocketAddr) -> std::net::SocketAddr {
        match a.ip() {
            std::net::IpAddr::V4(v4) if self.mapped => {
                std::net::SocketAddr::new(std::net::IpAddr::V6(v4.to_ipv6_mapped()), a.port())
            }
            _ => a,
        }
    }

    /// A sockaddr argument: `...` is the default address; a struct names port/address.
    fn sockaddr(
        &self,
        e: &Expr,
        ip: std::net::IpAddr,
        port: u16,
    ) -> R<Result<std::net::SocketAddr, i64>> {
        Ok(self.sockaddr_wire(e, ip, port)?.map(|a| self.api_addr(a)))
    }

    fn sockaddr_wire(
        &self,
        e: &Expr,
        ip: std::net::IpAddr,
        port: u16,
    ) -> R<Result<std::net::SocketAddr, i64>> {
        match e {
            Expr::Ellipsis => Ok(Ok(std::net::SocketAddr::new(ip, port))),
            Expr::Null => Ok(Err(EFAULT)),
            Expr::Struct(_) => {
                let port = ["sin_port", "sin6_port"]
                    .iter()
                    .find_map(|f| e.field(f))
                    .and_then(|f| self.int_of(&f.value))
                    .map(|p| p as u16)
                    .unwrap_or(port);
                let addr = ["sin_addr", "sin6_addr"]
                    .iter()
                    .find_map(|f| e.field(f))
                    .map(|f| &f.value);
                let ip = match addr {
                    None => ip,
                    Some(Expr::Call { args, .. }) => match args.first() {
                        Some(Expr::Str(s)) => {
                            match String::from_utf8_lossy(s).parse::<std::net::IpAddr>() {
                                Ok(a) if a.is_ipv6() == self.local_ip.is_ipv6() => {
                                    if a.is_ipv4() && a == std::net::IpAddr::from([192, 0, 2, 1]) {
                                        self.remote_ip
                                    } else {
                                        a
                                    }
                                }
                                Ok(a) if a == std::net::IpAddr::from([192, 0, 2, 1]) => {
                                    self.remote_ip
                                }
                                _ => ip,
                            }
                        }
                        _ => ip,
                    },
                    Some(other) if self.int_of(other) == Some(0) => match self.family() {
                        Family::V4 => std::net::IpAddr::from([0u8; 4]),
                        Family::V6 => std::net::IpAddr::from([0u8; 16]),
                    },
                    Some(other) => {
                        return self.skip(format!("sockaddr address {other:?} not understood"))
                    }
                };
                Ok(Ok(std::net::SocketAddr::new(ip, port)))
            }
            other => self.skip(format!("sockaddr argument {other:?} not understood")),
        }
    }

    // ------------------------------------------------------------------ entry points

    pub(super) fn syscall(&mut self, ev: usize, call: &SyscallSpec, end: u64) -> R<()> {
        let start = self.now;
        let mut state = CallState::default();
        let res = self.exec(call, &mut state, start, false)?;
        match res {
            Res::Done(r) => self.finish(call, start, end, r),
            Res::Blocked(deadline) => {
                self.trace(|| format!("{}() blocks", call.name));
                let (socks, interest) = self.wait_queue(call);
                self.pending.push(Pending {
                    ev,
                    start,
                    end,
                    state,
                    deadline,
                    socks,
                    interest,
                    woken: false,
                });
                Ok(())
            }
        }
    }

    /// Retries every pending call; true if one returned.
    pub(super) fn retry_pending(&mut self) -> R<bool> {
        let script = self.script;
        let mut any = false;
        let mut i = 0;
        while i < self.pending.len() {
            let ev = &script.events[self.pending[i].ev];
            let crate::ast::EventKind::Syscall(call) = &ev.kind else {
                i += 1;
                continue;
            };
            let due = self.pending[i].deadline.is_some_and(|d| d <= self.now);
            if !self.pending[i].woken && !due {
                i += 1;
                continue;
            }
            self.pending[i].woken = false;
            let saved = self.line;
            self.line = ev.line;
            let mut state = std::mem::take(&mut self.pending[i].state);
            let start = self.pending[i].start;
            let res = self.exec(call, &mut state, start, true)?;
            match res {
                Res::Done(r) => {
                    let p = self.pending.remove(i);
                    self.finish(call, p.start, p.end, r)?;
                    any = true;
                }
                Res::Blocked(d) => {
                    self.pending[i].state = state;
                    self.pending[i].deadline = d;
                    i += 1;
                }
            }
            self.line = saved;
        }
        Ok(any)
    }

    /// What a blocked call waits on: the sockets whose wake-ups can end it and the poll bits
    /// that matter (a writer sleeps until `sk_write_space`, a reader or accept() until
    /// `sk_data_ready`; errors and state changes wake everyone).
    fn wait_queue(&self, call: &SyscallSpec) -> (Vec<SocketId>, u32) {
        use shallow_tcp::pollbits::*;
        let fd = |e: Option<&Expr>| e.and_then(|e| self.int_of(e));
        let sock_of = |fd: Option<i64>| fd.and_then(|f| self.sock(f).ok());
        let errs = POLLERR | POLLHUP | POLLRDHUP;
        match call.name.as_str() {
            "write" | "send" | "sendto" | "sendmsg" | "writev" => (
                sock_of(fd(call.args.first())).into_iter().collect(),
                POLLOUT | POLLWRNORM | POLLWRBAND | errs,
            ),
            "read" | "recv" | "recvfrom" | "recvmsg" | "readv" | "accept" | "accept4" => (
                sock_of(fd(call.args.first())).into_iter().collect(),
                POLLIN | POLLRDNORM | errs,
            ),
            "poll" => {
                let socks = match call.args.first() {
                    Some(Expr::List(items)) => items
                        .iter()
                        .filter_map(|it| {
                            sock_of(it.field("fd").and_then(|f| self.int_of(&f.value)))
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                (socks, 0)
            }
            "epoll_wait" => {
                let socks = match fd(call.args.first()).and_then(|f| self.fds.get(&f)) {
                    Some(Fd::Epoll(items)) => items
                        .iter()
                        .filter_map(|it| self.sock(it.fd).ok())
                        .collect(),
                    _ => Vec::new(),
                };
                (socks, 0)
            }
            _ => (sock_of(fd(call.args.first())).into_iter().collect(), 0),
        }
    }

    fn finish(&mut self, call: &SyscallSpec, start: u64, end: u64, r: Result<i64, i64>) -> R<()> {
        let tol = self.tolerance(end, start);
        self.trace(|| {
            format!(
                "{}() = {}",
                call.name,
                match r {
                    Ok(v) => v.to_string(),
                    Err(e) => format!("-1 {}", errno_str(e)),
                }
            )
        });
        if self.now + tol < end {
            return self.fail(
                FailKind::Timing,
                format!(
                    "{}() returned at {}, script expects it to block until {}",
                    call.name,
                    super::secs(self.now),
                    super::secs(end)
                ),
            );
        }
        let Some(want) = self.int_of(&call.result) else {
            return self.skip(format!(
                "{}(): cannot evaluate the expected result",
                call.name
            ));
        };
        match r {
            Ok(v) if v == want => Ok(()),
            Ok(v) => self.fail(
                FailKind::Syscall,
                format!(
                    "{}() returned {v}, script expects {want}{}",
                    call.name,
                    call.errno
                        .as_ref()
                        .map(|e| format!(" {e}"))
                        .unwrap_or_default()
                ),
            ),
            Err(e) if want != -1 => self.fail(
                FailKind::Syscall,
                format!(
                    "{}() failed with {}, script expects {want}",
                    call.name,
                    errno_str(e)
                ),
            ),
            Err(e) => match &call.errno {
                Some(sym) => match symbols::lookup(sym) {
                    Some(w) if w == e => Ok(()),
                    Some(_) => self.fail(
                        FailKind::Syscall,
                        format!(
                            "{}() failed with {}, script expects {sym}",
                            call.name,
                            errno_str(e)
                        ),
                    ),
                    None => self.skip(format!("unknown errno symbol {sym}")),
                },
                None => Ok(()),
            },
        }
    }

    fn exec(
        &mut self,
        call: &SyscallSpec,
        state: &mut CallState,
        start: u64,
        retry: bool,
    ) -> R<Res> {
        let now = self.inst();
        match call.name.as_str() {
            "socket" => {
                let ty = self.int(call, 1)?;
                if ty & 0xf != 1 {
                    return self.skip("only SOCK_STREAM sockets are supported");
                }
                if let Some(p) = call.args.get(2).and_then(|e| self.int_of(e)) {
                    if p != 0 && p != 6 {
                        return self.skip(format!("socket protocol {p} not supported"));
                    }
                }
                let family = self.family();
                match self.st.socket(family) {
                    Ok(s) => {
                        let fd = self.new_fd(call);
                        self.fds.insert(fd, Fd::Sock(s));
                        if ty & O_NONBLOCK != 0 {
                            let _ = self.st.set_nonblocking(s, true);
                        }
                        self.sut = Some(fd);
                        self.listener_under_test = false;
                        // packetdrill: the new socket is the one under test; packets of the
                        // earlier connections no longer count.
                        self.cur_flow = None;
                        Ok(Res::Done(Ok(fd)))
                    }
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            "bind" => {
                let s = sock_or_done!(self, self.int(call, 0)?);
                let addr = match self.sockaddr(self.arg(call, 1)?, self.local_ip, self.bind_port)? {
                    Ok(a) => a,
                    Err(e) => return Ok(Res::Done(Err(e))),
                };
                match self.st.bind(s, addr) {
                    Ok(()) => {
                        self.listen_port = addr.port();
                        Ok(Res::Done(Ok(0)))
                    }
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            "listen" => {
                let s = sock_or_done!(self, self.int(call, 0)?);
                let backlog = self.int(call, 1)?;
                let r = self.st.listen(s, backlog as i32);
                if r.is_ok() {
                    if let Ok(a) = self.st.local_addr(s) {
                        self.listen_port = a.port();
                    }
                    self.listener_under_test = true;
                }
                Ok(Res::Done(r.map(|()| 0).map_err(code)))
            }
            "accept" | "accept4" => {
                let fd = self.int(call, 0)?;
                let s = sock_or_done!(self, fd);
                match self.st.accept(s) {
                    Ok((c, _)) => {
                        let nfd = self.new_fd(call);
                        self.fds.insert(nfd, Fd::Sock(c));
                        self.sut = Some(nfd);
                        Ok(Res::Done(Ok(nfd)))
                    }
                    Err(Errno::EAGAIN) if self.blocking(fd) => Ok(Res::Blocked(None)),
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            "connect" => {
                let fd = self.int(call, 0)?;
                let s = sock_or_done!(self, fd);
                if retry && state.connecting {
                    return Ok(match self.st.state(s) {
                        Ok(shallow_tcp::TcpState::SynSent | shallow_tcp::TcpState::SynRecv) => {
                            Res::Blocked(None)
                        }
                        Ok(shallow_tcp::TcpState::Close) => {
                            let addr = self.api_addr(std::net::SocketAddr::new(
                                self.remote_ip,
                                self.connect_port,
                            ));
                            match self.st.connect(now, s, addr) {
                                Ok(()) => Res::Done(Ok(0)),
                                Err(e) => Res::Done(Err(code(e))),
                            }
                        }
                        Ok(_) => Res::Done(Ok(0)),
                        Err(e) => Res::Done(Err(code(e))),
                    });
                }
                let addr =
                    match self.sockaddr(self.arg(call, 1)?, self.remote_ip, self.connect_port)? {
                        Ok(a) => a,
                        Err(e) => return Ok(Res::Done(Err(e))),
                    };
                let fresh = matches!(self.st.state(s), Ok(shallow_tcp::TcpState::Close));
                if fresh {
                    self.new_active_flow(addr.port());
                }
                match self.st.connect(now, s, addr) {
                    Ok(()) => Ok(Res::Done(Ok(0))),
                    Err(Errno::EINPROGRESS) if self.blocking(fd) => {
                        state.connecting = true;
                        Ok(Res::Blocked(None))
                    }
                    Err(e) => {
                        if fresh && e != Errno::EINPROGRESS {
                            self.flows.pop();
                            self.cur_flow = self.flows.len().checked_sub(1);
                        }
                        Ok(Res::Done(Err(code(e))))
                    }
                }
            }
            "write" | "send" | "sendto" | "sendmsg" | "writev" => self.do_send(call, state),
            "read" | "recv" | "recvfrom" | "recvmsg" | "readv" => self.do_recv(call),
            "close" => {
                let fd = self.int(call, 0)?;
                if let (Some(d), Some(Fd::Sock(s))) = (state.lingering, self.fds.get(&fd)) {
                    // sk_stream_wait_close: until the FIN is acked or the linger time is over.
                    let s = *s;
                    if self.st.linger_pending(s, now) {
                        return Ok(Res::Blocked(Some(d)));
                    }
                    self.fds.remove(&fd);
                    self.st.linger_finish(now, s);
                    return Ok(Res::Done(Ok(0)));
                }
                match self.fds.remove(&fd) {
                    Some(Fd::Sock(s)) => {
                        for f in self.fds.values_mut() {
                            if let Fd::Epoll(items) = f {
                                items.retain(|it| it.fd != fd);
                            }
                        }
                        match self.st.close_linger(now, s) {
                            Ok(Some(w)) => {
                                // The fd stays until the wait ends (its wake-ups end it).
                                self.fds.insert(fd, Fd::Sock(s));
                                let d = w.deadline.as_nanos();
                                state.lingering = Some(d);
                                Ok(Res::Blocked(Some(d)))
                            }
                            r => Ok(Res::Done(r.map(|_| 0).map_err(code))),
                        }
                    }
                    Some(Fd::Epoll(_) | Fd::File { .. } | Fd::Pipe { .. }) => Ok(Res::Done(Ok(0))),
                    None => Ok(Res::Done(Err(EBADF))),
                }
            }
            "shutdown" => {
                let s = sock_or_done!(self, self.int(call, 0)?);
                let how = match self.int(call, 1)? {
                    0 => Shutdown::Read,
                    1 => Shutdown::Write,
                    2 => Shutdown::Both,
                    _ => return Ok(Res::Done(Err(EINVAL))),
                };
                Ok(Res::Done(
                    self.st.shutdown(now, s, how).map(|()| 0).map_err(code),
                ))
            }
            "fcntl" => {
                let fd = self.int(call, 0)?;
                let cmd = self.int(call, 1)?;
                if !self.fds.contains_key(&fd) {
                    return Ok(Res::Done(Err(EBADF)));
                }
                match cmd {
                    3 => Ok(Res::Done(Ok(
                        O_RDWR | if self.blocking(fd) { 0 } else { O_NONBLOCK }
                    ))),
                    4 => {
                        let flags = self.int(call, 2)?;
                        let nb = flags & O_NONBLOCK != 0;
                        match self.fds.get(&fd) {
                            Some(Fd::Sock(s)) => {
                                let _ = self.st.set_nonblocking(*s, nb);
                            }
                            _ => {
                                self.nonblock_epoll.insert(fd, nb);
                            }
                        }
                        Ok(Res::Done(Ok(0)))
                    }
                    _ => self.skip(format!("fcntl command {cmd} not supported")),
                }
            }
            "ioctl" => {
                let s = sock_or_done!(self, self.int(call, 0)?);
                let req = match self.int(call, 1)? {
                    0x541B => Ioctl::SiocInq,
                    0x5411 => Ioctl::SiocOutq,
                    0x894B => Ioctl::SiocOutqNsd,
                    0x8905 => Ioctl::SiocAtmark,
                    r => return self.skip(format!("ioctl request {r:#x} not supported")),
                };
                match self.st.ioctl(s, req) {
                    Ok(v) => {
                        if let Some(want) = call.args.get(2).and_then(|e| self.int_of(e)) {
                            if want != i64::from(v) {
                                return self.fail(
                                    FailKind::Syscall,
                                    format!("ioctl({req:?}) gave {v}, script expects {want}"),
                                );
                            }
                        }
                        Ok(Res::Done(Ok(0)))
                    }
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            "setsockopt" | "getsockopt" => self.do_sockopt(call),
            // Files the script's commands made (dd): open them for sendfile().
            "open" => {
                let path = match self.arg(call, 0)? {
                    Expr::Str(b) => String::from_utf8_lossy(b).into_owned(),
                    other => return self.skip(format!("open() path {other:?} not understood")),
                };
                if !self.files.contains_key(&path) {
                    return Ok(Res::Done(Err(ENOENT)));
                }
                let fd = self.new_fd(call);
                self.fds.insert(fd, Fd::File { path, pos: 0 });
                Ok(Res::Done(Ok(fd)))
            }
            "sendfile" => self.do_sendfile(call, state),
            "pipe" | "pipe2" => {
                let ends: Vec<i64> = match self.arg(call, 0)? {
                    Expr::List(v) => v.iter().filter_map(|e| self.int_of(e)).collect(),
                    other => return self.skip(format!("pipe() array {other:?} not understood")),
                };
                let [r, w] = ends[..] else {
                    return self.skip("pipe() wants two descriptors");
                };
                self.pipes.push(0);
                let pipe = self.pipes.len() - 1;
                self.fds.insert(r, Fd::Pipe { pipe, write: false });
                self.fds.insert(w, Fd::Pipe { pipe, write: true });
                Ok(Res::Done(Ok(0)))
            }
            "splice" => self.do_splice(call),
            "poll" => self.do_poll(call, start),
            "epoll_create" | "epoll_create1" => {
                if call.name == "epoll_create" && self.int(call, 0)? <= 0 {
                    return Ok(Res::Done(Err(EINVAL)));
                }
                let fd = self.new_fd(call);
                self.fds.insert(fd, Fd::Epoll(Vec::new()));
                Ok(Res::Done(Ok(fd)))
            }
            "epoll_ctl" => self.do_epoll_ctl(call),
            "epoll_wait" => self.do_epoll_wait(call, start),
            "shallow_own" | "shallow_release" => {
                let s = sock_or_done!(self, self.int(call, 0)?);
                if call.name == "shallow_own" {
                    self.st.lock_sock(s);
                } else {
                    self.st.release_sock(now, s);
                }
                Ok(Res::Done(Ok(0)))
            }
            "shallow_tx_delay" => {
                let us = self.int(call, 0)?;
                self.tx_delay = (us > 0).then_some(us as u64 * 1000);
                // A device that holds packets until completion no longer orphans them.
                self.st.set_device(DeviceCaps {
                    orphan_at_xmit: us <= 0,
                    ..self.st.device()
                });
                Ok(Res::Done(Ok(0)))
            }
            "shallow_tx_complete" => {
                for (_, tok) in std::mem::take(&mut self.held) {
                    self.st.tx_complete(now, tok);
                }
                Ok(Res::Done(Ok(0)))
            }
            other => self.skip(format!("system call {other}() is not supported")),
        }
    }

    /// Sum of the lengths of an iovec list (`[{..., 1000}, {..., 2000}]`).
    fn iov_len(&self, e: &Expr) -> R<usize> {
        Ok(self.iov_pieces(e)?.iter().sum())
    }

    /// The lengths of an iovec's entries, in order.
    fn iov_pieces(&self, e: &Expr) -> R<Vec<usize>> {
        let Expr::List(items) = e else {
            return self.skip(format!("iovec {e:?} not understood"));
        };
        let mut pieces = Vec::with_capacity(items.len());
        for it in items {
            let Expr::Struct(fields) = it else {
                return self.skip("iovec entry not understood");
            };
            let len = fields
                .iter()
                .find(|f| f.name.as_deref() == Some("iov_len"))
                .or_else(|| fields.last())
                .and_then(|f| self.int_of(&f.value));
            match len {
                Some(n) if n >= 0 => pieces.push(n as usize),
                _ => return self.skip("iovec length not understood"),
            }
        }
        Ok(pieces)
    }

    /// The buffers a send call writes (zeros), as its iovec cuts them: one for
    /// write/send/sendto, the entries of writev's iovec and sendmsg's `msg_iov`.
    fn send_pieces(&self, call: &SyscallSpec, buf: &Expr, total: usize) -> R<Vec<usize>> {
        match call.name.as_str() {
            "writev" => self.iov_pieces(buf),
            "sendmsg" => match buf.field("msg_iov") {
                Some(f) => self.iov_pieces(&f.value),
                None => self.skip("msghdr without msg_iov"),
            },
            _ => Ok(vec![total]),
        }
    }

    fn msg_iov_len(&self, msg: &Expr) -> R<usize> {
        match msg.field("msg_iov") {
            Some(f) => self.iov_len(&f.value),
            None => self.skip("msghdr without msg_iov"),
        }
    }

    /// Byte count and flags of a data call, by its argument layout: `write`/`read`
    /// (fd, buf, len), `send*`/`recv*` (fd, buf, len, flags), `writev`/`readv` (fd, iov, n),
    /// `sendmsg`/`recvmsg` (fd, msghdr, flags). `None` for a NULL buffer (the call fails
    /// with EFAULT, as Linux's copy from or to user memory does).
    fn io_len_flags(&self, call: &SyscallSpec, buf: &Expr) -> R<Option<(usize, u32)>> {
        if matches!(buf, Expr::Null) {
            return Ok(None);
        }
        Ok(Some(match call.name.as_str() {
            "write" | "read" => (self.int(call, 2)? as usize, 0),
            "send" | "sendto" | "recv" | "recvfrom" => {
                (self.int(call, 2)? as usize, self.int(call, 3)? as u32)
            }
            "writev" | "readv" => (self.iov_len(buf)?, 0),
            _ => (self.msg_iov_len(buf)?, self.int(call, 2)? as u32),
        }))
    }

    /// The destination of a sendto (its fifth argument) or sendmsg (`msg_name`): `None` for
    /// none, `Err` for AF_UNSPEC (which only Fast Open looks at: EOPNOTSUPP).
    fn send_dest(&self, call: &SyscallSpec) -> R<Result<Option<std::net::SocketAddr>, i64>> {
        let e = match call.name.as_str() {
            "sendto" => call.args.get(4),
            "sendmsg" => call
                .args
                .get(1)
                .and_then(|m| m.field("msg_name"))
                .map(|f| &f.value),
            _ => None,
        };
        match e {
            None | Some(Expr::Null) => Ok(Ok(None)),
            Some(Expr::Symbol(n)) if n == "AF_UNSPEC" => Ok(Err(EOPNOTSUPP)),
            Some(e) => Ok(self
                .sockaddr(e, self.remote_ip, self.connect_port)?
                .map(Some)),
        }
    }

    fn do_send(&mut self, call: &SyscallSpec, state: &mut CallState) -> R<Res> {
        let fd = self.int(call, 0)?;
        let s = sock_or_done!(self, fd);
        let buf = self.arg(call, 1)?;
        let Some((total, flags)) = self.io_len_flags(call, buf)? else {
            return Ok(Res::Done(Err(EFAULT)));
        };
        let nonblock = !self.blocking(fd) || flags & MSG_DONTWAIT != 0;
        let now = self.inst();
        if state.fastopen {
            // inet_wait_for_connect: the handshake decides; an error then is the call's
            // (the bytes the SYN carried are not reported).
            match self.st.state(s) {
                Ok(TcpState::SynSent | TcpState::SynRecv) => return Ok(Res::Blocked(None)),
                Ok(TcpState::Close) => {
                    let e = match self.st.getsockopt(s, SockOpt::SoError) {
                        Ok(OptVal::Int(e)) if e != 0 => e,
                        _ => EPIPE,
                    };
                    return Ok(Res::Done(Err(e)));
                }
                _ => state.fastopen = false,
            }
            if state.written >= total {
                return Ok(Res::Done(Ok(state.written as i64)));
            }
        } else if state.written == 0
            && (flags & MSG_FASTOPEN != 0 || self.st.connect_deferred(s).unwrap_or(false))
        {
            let dest = match self.send_dest(call)? {
                Ok(d) => d,
                Err(e) if flags & MSG_FASTOPEN != 0 => return Ok(Res::Done(Err(e))),
                Err(_) => None,
            };
            if flags & MSG_FASTOPEN != 0 && matches!(self.st.state(s), Ok(TcpState::Close)) {
                self.new_active_flow(dest.map_or(self.connect_port, |d| d.port()));
            }
            let bufs = bufs_from(&self.send_pieces(call, buf, total)?, 0);
            let r = self.st.sendmsg_bufs(now, s, &bufs, flags, dest);
            return Ok(self.fastopen_sent(r, total, nonblock, state));
        }
        // The buffers (a zero-copy send shares them, cut as the iovec cuts them), from the
        // first byte not yet written.
        let bufs = bufs_from(&self.send_pieces(call, buf, total)?, state.written);
        // What a Fast Open send did not put in the SYN goes as ordinary data.
        match self
            .st
            .sendmsg_bufs(now, s, &bufs, flags & !MSG_FASTOPEN, None)
        {
            Ok(n) => {
                state.written += n;
                if state.written >= total || nonblock {
                    Ok(Res::Done(Ok(state.written as i64)))
                } else {
                    Ok(Res::Blocked(None))
                }
            }
            Err(Errno::EAGAIN) if !nonblock => Ok(Res::Blocked(None)),
            Err(_) if state.written > 0 => Ok(Res::Done(Ok(state.written as i64))),
            Err(e) => Ok(Res::Done(Err(code(e)))),
        }
    }

    /// `sendfile(out, in, offset, count)`: the file's bytes (zeros) from `*offset` (the
    /// offset given as `[N]`; NULL: the file's position, which moves on) written to the
    /// socket as write() would, blocking as it does.
    fn do_sendfile(&mut self, call: &SyscallSpec, state: &mut CallState) -> R<Res> {
        let out = self.int(call, 0)?;
        let s = sock_or_done!(self, out);
        let in_fd = self.int(call, 1)?;
        let count = self.int(call, 3)?.max(0) as u64;
        let explicit = match self.arg(call, 2)? {
            Expr::Null => None,
            e => match self.int_of(e) {
                Some(o) => Some(o.max(0) as u64),
                None => return self.skip(format!("sendfile offset {e:?} not understood")),
            },
        };
        let (path, pos) = match self.fds.get(&in_fd) {
            Some(Fd::File { path, pos }) => (path.clone(), *pos),
            Some(_) => return Ok(Res::Done(Err(EINVAL))),
            None => return Ok(Res::Done(Err(EBADF))),
        };
        let len = self.files.get(&path).copied().unwrap_or(0);
        let from = explicit.unwrap_or(pos) + state.written as u64;
        let total = count.min(len.saturating_sub(explicit.unwrap_or(pos))) as usize;
        if total == 0 || from >= len {
            return Ok(Res::Done(Ok(state.written as i64)));
        }
        let nonblock = !self.blocking(out);
        let data = vec![0u8; total - state.written];
        let now = self.inst();
        let r = self.st.send(now, s, &data, 0);
        let res = match r {
            Ok(n) => {
                state.written += n;
                if state.written >= total || nonblock {
                    Res::Done(Ok(state.written as i64))
                } else {
                    Res::Blocked(None)
                }
            }
            Err(Errno::EAGAIN) if !nonblock => Res::Blocked(None),
            Err(_) if state.written > 0 => Res::Done(Ok(state.written as i64)),
            Err(e) => Res::Done(Err(code(e))),
        };
        if explicit.is_none() {
            if let (Res::Done(Ok(n)), Some(Fd::File { pos, .. })) = (&res, self.fds.get_mut(&in_fd))
            {
                *pos += *n as u64;
            }
        }
        Ok(res)
    }

    /// `splice(in, NULL, out, NULL, len, flags)` from a socket into a pipe (Linux's
    /// `tcp_splice_read`: up to the pipe's room, 64 KiB, stopping at the urgent mark and
    /// returning 0 there; waits for data unless the socket is non-blocking or
    /// `SPLICE_F_NONBLOCK`), or from a pipe into a socket (a write of the pipe's bytes).
    fn do_splice(&mut self, call: &SyscallSpec) -> R<Res> {
        const PIPE_SIZE: usize = 65_536;
        const SPLICE_F_NONBLOCK: i64 = 2;
        let (fd_in, fd_out) = (self.int(call, 0)?, self.int(call, 2)?);
        for i in [1, 3] {
            if !matches!(self.arg(call, i)?, Expr::Null) {
                return self.skip("splice() with an offset is not modelled");
            }
        }
        let len = self.int(call, 4)?.max(0) as usize;
        let flags = self.int(call, 5)?;
        let now = self.inst();
        match (self.fds.get(&fd_in), self.fds.get(&fd_out)) {
            (Some(Fd::Sock(s)), Some(&Fd::Pipe { pipe, write: true })) => {
                let s = *s;
                let room = PIPE_SIZE.saturating_sub(self.pipes[pipe]);
                let mut tmp = vec![0u8; len.min(room)];
                match self.st.read_sock(now, s, &mut tmp) {
                    Ok(n) => {
                        self.pipes[pipe] += n;
                        Ok(Res::Done(Ok(n as i64)))
                    }
                    Err(Errno::EAGAIN)
                        if self.blocking(fd_in) && flags & SPLICE_F_NONBLOCK == 0 =>
                    {
                        Ok(Res::Blocked(None))
                    }
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            (Some(&Fd::Pipe { pipe, write: false }), Some(Fd::Sock(s))) => {
                let s = *s;
                let data = vec![0u8; len.min(self.pipes[pipe])];
                match self.st.send(now, s, &data, 0) {
                    Ok(n) => {
                        self.pipes[pipe] -= n;
                        Ok(Res::Done(Ok(n as i64)))
                    }
                    Err(Errno::EAGAIN) if self.blocking(fd_out) => Ok(Res::Blocked(None)),
                    Err(e) => Ok(Res::Done(Err(code(e)))),
                }
            }
            (None, _) | (_, None) => Ok(Res::Done(Err(EBADF))),
            _ => Ok(Res::Done(Err(EINVAL))),
        }
    }

    /// A fresh active open (connect(), or sendto(MSG_FASTOPEN)): the flow under test, the
    /// one the script's packets now name.
    fn new_active_flow(&mut self, remote_port: u16) {
        self.listener_under_test = false;
        self.flows.push(super::Flow {
            local_port: None,
            remote_port,
            isn: None,
            active: true,
            syn_seq: None,
            saw_non_syn: false,
            remote_isn: 0,
            remote_isn_set: false,
        });
        self.cur_flow = Some(self.flows.len() - 1);
    }

    /// What a send that may have opened a Fast Open connection returns: the bytes the SYN
    /// carried or the call's error when it does not wait (EINPROGRESS with none); a blocking
    /// call that opened the connection waits for the handshake first.
    fn fastopen_sent(
        &mut self,
        r: Result<usize, Errno>,
        total: usize,
        nonblock: bool,
        state: &mut CallState,
    ) -> Res {
        match r {
            Ok(n) => {
                state.written = n.min(total);
                if nonblock {
                    Res::Done(Ok(n as i64))
                } else {
                    state.fastopen = true;
                    Res::Blocked(None)
                }
            }
            Err(Errno::EINPROGRESS) if !nonblock => {
                state.fastopen = true;
                Res::Blocked(None)
            }
            Err(Errno::EAGAIN) if !nonblock => Res::Blocked(None),
            Err(e) => Res::Done(Err(code(e))),
        }
    }

    fn do_recv(&mut self, call: &SyscallSpec) -> R<Res> {
        let fd = self.int(call, 0)?;
        let s = sock_or_done!(self, fd);
        let buf = self.arg(call, 1)?;
        let Some((len, flags)) = self.io_len_flags(call, buf)? else {
            return Ok(Res::Done(Err(EFAULT)));
        };
        if flags & MSG_ERRQUEUE != 0 {
            // The error queue: transmit timestamps and zero-copy completions; never blocks
            // (EAGAIN when empty).
            return match self.st.recv_errqueue_msg(s) {
                Ok(shallow_tcp::ErrQueueMsg {
                    entry: ev, bytes, ..
                }) => {
                    let sof = match self.st.getsockopt(s, SockOpt::SoTimestamping) {
                        Ok(OptVal::Int(f)) => f as u32,
                        _ => 0,
                    };
                    // The entry's bytes (the packet or the acked bytes without OPT_TSONLY,
                    // the statistics' blob with OPT_STATS, nothing for a completion), cut to
                    // the buffer with MSG_TRUNC, as Linux's sock_recv_errqueue.
                    let trunc = bytes.len() > len;
                    let n = bytes.len().min(len);
                    // SO_TIMESTAMPING_NEW: SCM_TIMESTAMPING_NEW (65) with 64-bit times.
                    let new = self.st.timestamp_new(s).unwrap_or(false);
                    if call.name == "recvmsg" {
                        match ev {
                            shallow_tcp::ErrQueueEntry::Timestamp(t) if t.stats.is_some() => {
                                self.check_errqueue_cmsgs(buf, &t, sof, trunc, new)?
                            }
                            _ => self.check_errqueue_msghdr(buf, &ev, trunc, new)?,
                        }
                    }
                    Ok(Res::Done(Ok(n as i64)))
                }
                Err(e) => Ok(Res::Done(Err(code(e)))),
            };
        }
        let nonblock = !self.blocking(fd) || flags & MSG_DONTWAIT != 0;
        let mut data = vec![0u8; len];
        let now = self.inst();
        match self.st.recvmsg(now, s, &mut data, flags) {
            Ok(m) => {
                if call.name == "recvmsg" {
                    self.check_msghdr(buf, s, m.rx_time)?;
                }
                Ok(Res::Done(Ok(m.len as i64)))
            }
            Err(Errno::EAGAIN) if !nonblock => Ok(Res::Blocked(None)),
            Err(e) => Ok(Res::Done(Err(code(e)))),
        }
    }

    /// A msghdr's control messages as the script writes them: (cmsg_level, cmsg_type, the
    /// cmsg), none for `...` or NULL.
    pub(super) fn cmsgs<'e>(&self, msg: &'e Expr) -> Vec<(Option<i64>, Option<i64>, &'e Expr)> {
        let items: Vec<&Expr> = match msg.field("msg_control").map(|f| &f.value) {
            None | Some(Expr::Ellipsis | Expr::Null) => Vec::new(),
            Some(Expr::List(v)) => v.iter().collect(),
            Some(other) => vec![other],
        };
        items
            .into_iter()
            .map(|c| {
                let level = c.field("cmsg_level").and_then(|f| self.int_of(&f.value));
                let ty = c.field("cmsg_type").and_then(|f| self.int_of(&f.value));
                (level, ty, c)
            })
            .collect()
    }

    /// An error-queue recvmsg's output fields: `msg_flags` (MSG_ERRQUEUE, and MSG_TRUNC when
    /// the entry's bytes did not fit the buffer) and the control messages:
    /// `SCM_TIMESTAMPING` (the software time, from the script's start, within the
    /// tolerance) and the `IP_RECVERR`/`IPV6_RECVERR` `sock_extended_err` (ENOMSG,
    /// `SO_EE_ORIGIN_TIMESTAMPING`, the kind in `ee_info`, the key in `ee_data`).
    fn check_errqueue_msghdr(
        &mut self,
        msg: &Expr,
        ev: &shallow_tcp::ErrQueueEntry,
        trunc: bool,
        new: bool,
    ) -> R<()> {
        // (ee_errno, ee_origin, ee_code, ee_info, ee_data) and the time, if a timestamp.
        let (ee, time) = match *ev {
            shallow_tcp::ErrQueueEntry::Timestamp(t) => (
                [42, 4, 0, i64::from(t.kind.scm()), i64::from(t.key)],
                Some(t.time),
            ),
            // SO_EE_ORIGIN_ZEROCOPY: the ids in ee_info..ee_data, SO_EE_CODE_ZEROCOPY_COPIED.
            shallow_tcp::ErrQueueEntry::Zerocopy(z) => (
                [0, 5, i64::from(z.copied), i64::from(z.lo), i64::from(z.hi)],
                None,
            ),
        };
        let got_flags = i64::from(MSG_ERRQUEUE) | if trunc { 0x20 } else { 0 };
        if let Some(want) = msg.field("msg_flags").and_then(|f| self.int_of(&f.value)) {
            if want != got_flags {
                return self.fail(
                    FailKind::Syscall,
                    format!("recvmsg msg_flags {got_flags:#x}, script expects {want:#x}"),
                );
            }
        }
        for (level, ty, c) in self.cmsgs(msg) {
            let Some(data) = c.field("cmsg_data").map(|f| &f.value) else {
                continue;
            };
            let num = |name: &str| data.field(name).and_then(|f| self.int_of(&f.value));
            match (level, ty) {
                (Some(1), Some(ty @ (37 | 65))) => {
                    let Some(time) = time else {
                        return self.fail(
                            FailKind::Syscall,
                            "recvmsg: a zero-copy completion carries no SCM_TIMESTAMPING",
                        );
                    };
                    self.check_scm_timestamping(new, ty, data, time)?;
                }
                (Some(0), Some(11)) | (Some(41), Some(25)) => {
                    let fields = [
                        ("ee_errno", ee[0]),
                        ("ee_origin", ee[1]),
                        ("ee_type", 0),
                        ("ee_code", ee[2]),
                        ("ee_info", ee[3]),
                        ("ee_data", ee[4]),
                    ];
                    for (name, got) in fields {
                        if let Some(want) = num(name) {
                            if want != got {
                                return self.fail(
                                    FailKind::Syscall,
                                    format!("recvmsg {name} is {got}, script expects {want}"),
                                );
                            }
                        }
                    }
                }
                _ => return self.skip("recvmsg control message not modelled"),
            }
        }
        Ok(())
    }

    /// recvmsg's output fields: msg_flags (the engine reports none, so only 0 can be
    /// checked), TCP_CM_INQ control messages (Linux `tcp_inq_hint`: bytes left to read,
    /// or 1 at end of stream when nothing is left) and the receive timestamp (`SCM_TIMESTAMPING`, or `SCM_TIMESTAMPING_NEW` after
    /// `SO_TIMESTAMPING_NEW`: `tcp_recv_timestamp`, the time the data read arrived, from
    /// the script's start, within the tolerance) when the socket reports software stamps.
    fn check_msghdr(
        &mut self,
        msg: &Expr,
        s: SocketId,
        rx_time: Option<shallow_tcp::Instant>,
    ) -> R<()> {
        if let Some(f) = msg.field("msg_flags") {
            match self.int_of(&f.value) {
                Some(0) | None => {}
                Some(v) => {
                    return self.skip(format!(
                        "recvmsg msg_flags {v:#x} expected but the engine's recv does not report msg_flags"
                    ))
                }
            }
        }
        for (level, ty, c) in self.cmsgs(msg) {
            if let (Some(1), Some(ty @ (37 | 65))) = (level, ty) {
                self.check_rx_timestamping(s, ty, c, rx_time)?;
                continue;
            }
            if level != Some(SOL_TCP) || ty != Some(TCP_CM_INQ) {
                return self
                    .skip("recvmsg control message other than TCP_CM_INQ and SCM_TIMESTAMPING");
            }
            let want = c.field("cmsg_data").and_then(|f| self.int_of(&f.value));
            let mut inq = i64::from(self.st.ioctl(s, Ioctl::SiocInq).unwrap_or(0));
            // SOCK_DONE: the peer's FIN (or a reset) was received.
            let done = matches!(
                self.st.state(s),
                Ok(TcpState::CloseWait
                    | TcpState::LastAck
                    | TcpState::Closing
                    | TcpState::TimeWait
                    | TcpState::Close)
            );
            if inq == 0 && done {
                inq = 1;
            }
            if let Some(w) = want {
                if w != inq {
                    return self.fail(
                        FailKind::Syscall,
                        format!("recvmsg TCP_CM_INQ is {inq}, script expects {w}"),
                    );
                }
            }
        }
        Ok(())
    }

    /// A receive `SCM_TIMESTAMPING` the script expects (`ty` 37, or 65 for the `_NEW` form):
    /// Linux puts one when the socket's `SO_TIMESTAMPING` has `SOFTWARE` and the data read
    /// had a receive time; its first time is that time (the others zero).
    fn check_rx_timestamping(
        &mut self,
        s: SocketId,
        ty: i64,
        c: &Expr,
        rx_time: Option<shallow_tcp::Instant>,
    ) -> R<()> {
        let sof = match self.st.getsockopt(s, SockOpt::SoTimestamping) {
            Ok(OptVal::Int(f)) => f as u32,
            _ => 0,
        };
        let Some(t) = rx_time.filter(|_| sof & shallow_tcp::tstamp::sof::SOFTWARE != 0) else {
            return self.fail(
                FailKind::Syscall,
                "recvmsg: no SCM_TIMESTAMPING (the socket does not report software receive stamps, or the data has no time)",
            );
        };
        let new = self.st.timestamp_new(s).unwrap_or(false);
        match c.field("cmsg_data").map(|f| &f.value) {
            Some(data) => self.check_scm_timestamping(new, ty, data, t),
            None => Ok(()),
        }
    }

    /// An `SCM_TIMESTAMPING` message the script expects (type `ty`, data `data`) against
    /// the one Linux puts: its type (`SCM_TIMESTAMPING_NEW`, 65, after
    /// `SO_TIMESTAMPING_NEW`, else 37) and its first time (`time`, from the script's start,
    /// within the tolerance; packetdrill ignores an expected time of zero).
    fn check_scm_timestamping(
        &mut self,
        new: bool,
        ty: i64,
        data: &Expr,
        time: shallow_tcp::Instant,
    ) -> R<()> {
        let linux = if new { 65 } else { 37 };
        if ty != linux {
            return self.fail(
                FailKind::Syscall,
                format!(
                    "recvmsg cmsg_type {linux} (the socket's timestamp form), script expects {ty}"
                ),
            );
        }
        let num = |name: &str| data.field(name).and_then(|f| self.int_of(&f.value));
        let (Some(sec), Some(nsec)) = (num("scm_sec"), num("scm_nsec")) else {
            return self.skip("SCM_TIMESTAMPING data not understood");
        };
        if sec == 0 && nsec == 0 {
            return Ok(());
        }
        let want = (sec * 1_000_000_000 + nsec).max(0) as u64;
        let got = time.as_nanos();
        if got.abs_diff(want) > self.tol_ns {
            return self.fail(
                FailKind::Syscall,
                format!(
                    "SCM_TIMESTAMPING is {}, script expects {} (tolerance {} us)",
                    super::secs(got),
                    super::secs(want),
                    self.tol_ns / 1000
                ),
            );
        }
        Ok(())
    }

    fn sockopt_name(call: &SyscallSpec) -> String {
        match call.args.get(2) {
            Some(Expr::Symbol(s)) => s.clone(),
            Some(e) => format!("{e:?}"),
            None => "?".into(),
        }
    }

    fn do_sockopt(&mut self, call: &SyscallSpec) -> R<Res> {
        let s = sock_or_done!(self, self.int(call, 0)?);
        let level = self.int(call, 1)?;
        let name = self.int(call, 2)?;
        let Some(opt) = SockOpt::from_linux(level as i32, name as i32) else {
            return self.skip(format!(
                "engine lacks socket option {}",
                Self::sockopt_name(call)
            ));
        };
        let val = self.arg(call, 3)?;
        if matches!(val, Expr::Null) {
            return Ok(Res::Done(Err(EFAULT)));
        }
        if call.name == "setsockopt" {
            let v = match val {
                Expr::Str(b) if opt == SockOpt::TcpFastopenKey => OptVal::Bytes(b.clone()),
                // `struct tcp_md5sig` as raw bytes, `optlen` of them (a packetdrill string
                // stops at a NUL byte, so only malformed values can be written).
                Expr::Str(b) if matches!(opt, SockOpt::TcpMd5sig | SockOpt::TcpMd5sigExt) => {
                    let n = self
                        .arg(call, 4)
                        .ok()
                        .and_then(|l| self.int_of(l))
                        .map_or(b.len(), |l| (l.max(0) as usize).min(b.len()));
                    OptVal::Bytes(b[..n].to_vec())
                }
                Expr::Str(b) => OptVal::Str(String::from_utf8_lossy(b).into_owned()),
                Expr::Struct(_) => {
                    let onoff = val
                        .field("onoff")
                        .or_else(|| val.field("l_onoff"))
                        .and_then(|f| self.int_of(&f.value));
                    let secs = val
                        .field("linger")
                        .or_else(|| val.field("l_linger"))
                        .and_then(|f| self.int_of(&f.value));
                    match (onoff, secs) {
                        (Some(o), Some(l)) => OptVal::Linger {
                            onoff: o != 0,
                            secs: l as i32,
                        },
                        _ => return self.skip("setsockopt struct value not understood"),
                    }
                }
                Expr::List(v) if matches!(v.first(), Some(Expr::Str(_))) => match &v[0] {
                    Expr::Str(b) => OptVal::Str(String::from_utf8_lossy(b).into_owned()),
                    _ => unreachable!(),
                },
                other => match self.int_of(other) {
                    Some(i) => OptVal::Int(i),
                    None => return self.skip(format!("setsockopt value {other:?} not understood")),
                },
            };
            let now = self.inst();
            Ok(Res::Done(
                self.st
                    .setsockopt(now, s, opt, &v)
                    .map(|()| 0)
                    .map_err(code),
            ))
        } else {
            match self.st.getsockopt(s, opt) {
                Ok(got) => {
                    let ok = match (&got, val) {
                        (_, Expr::Ellipsis) => true,
                        (OptVal::Str(g), Expr::Str(w)) => g.as_bytes() == w.as_slice(),
                        (OptVal::Bytes(g), Expr::Str(w)) => g == w,
                        (OptVal::Linger { onoff, secs }, Expr::Struct(_)) => {
                            let o = val
                                .field("onoff")
                                .or_else(|| val.field("l_onoff"))
                                .and_then(|f| self.int_of(&f.value));
                            let l = val
                                .field("linger")
                                .or_else(|| val.field("l_linger"))
                                .and_then(|f| self.int_of(&f.value));
                            o == Some(i64::from(*onoff)) && l == Some(i64::from(*secs))
                        }
                        (OptVal::Int(g), w) => match self.int_of(w) {
                            Some(w) => {
                                w == *g || (w as u32 as i64 == *g) || (*g as u32 as i64 == w)
                            }
                            None => {
                                return self.skip(format!("getsockopt value {w:?} not understood"))
                            }
                        },
                        _ => false,
                    };
                    if !ok {
                        return self.fail(
                            FailKind::Syscall,
                            format!(
                                "getsockopt {} gave {got:?}, script expects {val:?}",
                                Self::sockopt_name(call)
                            ),
                        );
                    }
                    Ok(Res::Done(Ok(0)))
                }
                Err(e) => Ok(Res::Done(Err(code(e)))),
            }
        }
    }

    fn do_poll(&mut self, call: &SyscallSpec, start: u64) -> R<Res> {
        let Expr::List(items) = self.arg(call, 0)? else {
            return self.skip("poll() fd list not understood");
        };
        let timeout = self.int(call, 2)?;
        let mut revents = Vec::new();
        for it in items {
            let fd = it.field("fd").and_then(|f| self.int_of(&f.value));
            let events = it.field("events").and_then(|f| self.int_of(&f.value));
            let (Some(fd), Some(events)) = (fd, events) else {
                return self.skip("pollfd not understood");
            };
            let r = match self.sock(fd) {
                Ok(s) => {
                    self.st.poll(s).unwrap_or(0)
                        & (events as u32
                            | shallow_tcp::pollbits::POLLERR
                            | shallow_tcp::pollbits::POLLHUP)
                }
                Err(_) => POLLNVAL,
            };
            revents.push(r);
        }
        let n = revents.iter().filter(|r| **r != 0).count() as i64;
        if n == 0 && timeout != 0 {
            let deadline = (timeout > 0).then(|| start + timeout as u64 * 1_000_000);
            if deadline.is_none_or(|d| self.now < d) {
                return Ok(Res::Blocked(deadline));
            }
        }
        for (it, got) in items.iter().zip(&revents) {
            if let Some(w) = it.field("revents").and_then(|f| self.int_of(&f.value)) {
                if w as u32 != *got {
                    return self.fail(
                        FailKind::Syscall,
                        format!("poll revents {got:#x}, script expects {w:#x}"),
                    );
                }
            }
        }
        Ok(Res::Done(Ok(n)))
    }

    fn epoll_items(&mut self, epfd: i64) -> Result<&mut Vec<EpollItem>, i64> {
        match self.fds.get_mut(&epfd) {
            Some(Fd::Epoll(v)) => Ok(v),
            Some(_) => Err(EINVAL),
            None => Err(EBADF),
        }
    }

    fn ready_now(&mut self, fd: i64, events: u32) -> bool {
        match self.sock(fd) {
            Ok(s) => self.st.poll(s).unwrap_or(0) & (events | EPOLLERR | EPOLLHUP) != 0,
            Err(_) => false,
        }
    }

    fn do_epoll_ctl(&mut self, call: &SyscallSpec) -> R<Res> {
        let epfd = self.int(call, 0)?;
        let op = self.int(call, 1)?;
        let fd = self.int(call, 2)?;
        if let Err(e) = self.sock(fd) {
            return Ok(Res::Done(Err(e)));
        }
        let ev = call.args.get(3);
        let events = ev
            .and_then(|e| e.field("events"))
            .and_then(|f| self.int_of(&f.value))
            .unwrap_or(0) as u32;
        let data = ev
            .and_then(|e| ["fd", "ptr", "u64", "u32"].iter().find_map(|n| e.field(n)))
            .and_then(|f| self.int_of(&f.value))
            .unwrap_or(fd) as u64;
        let rdy = self.ready_now(fd, events);
        let items = match self.epoll_items(epfd) {
            Ok(v) => v,
            Err(e) => return Ok(Res::Done(Err(e))),
        };
        let pos = items.iter().position(|it| it.fd == fd);
        let r = match (op, pos) {
            (1, Some(_)) => Err(EEXIST),
            (1, None) => {
                items.push(EpollItem {
                    fd,
                    events,
                    data,
                    rdy,
                    disabled: false,
                });
                Ok(0)
            }
            (2, Some(i)) => {
                items.remove(i);
                Ok(0)
            }
            (3, Some(i)) => {
                items[i] = EpollItem {
                    fd,
                    events,
                    data,
                    rdy,
                    disabled: false,
                };
                Ok(0)
            }
            (2 | 3, None) => Err(ENOENT),
            _ => Err(EINVAL),
        };
        Ok(Res::Done(r))
    }

    fn do_epoll_wait(&mut self, call: &SyscallSpec, start: u64) -> R<Res> {
        let epfd = self.int(call, 0)?;
        let max = self.int(call, 2)?.max(1) as usize;
        let timeout = self.int(call, 3)?;
        let mut items = match self.epoll_items(epfd) {
            Ok(v) => v.clone(),
            Err(e) => return Ok(Res::Done(Err(e))),
        };
        let mut out: Vec<(u32, u64)> = Vec::new();
        for it in items.iter_mut() {
            if it.disabled || out.len() >= max {
                continue;
            }
            let mask = (it.events & !(EPOLLET | EPOLLONESHOT)) | EPOLLERR | EPOLLHUP;
            let rev = match self.sock(it.fd) {
                Ok(s) => self.st.poll(s).unwrap_or(0) & mask,
                Err(_) => 0,
            };
            if it.events & EPOLLET != 0 {
                if !it.rdy {
                    continue;
                }
                it.rdy = false;
            }
            if rev == 0 {
                continue;
            }
            out.push((rev, it.data));
            if it.events & EPOLLONESHOT != 0 {
                it.disabled = true;
            }
        }
        if let Ok(v) = self.epoll_items(epfd) {
            *v = items;
        }
        if out.is_empty() && timeout != 0 {
            let deadline = (timeout > 0).then(|| start + timeout as u64 * 1_000_000);
            if deadline.is_none_or(|d| self.now < d) {
                return Ok(Res::Blocked(deadline));
            }
        }
        let expected: Vec<&Expr> = match self.arg(call, 1)? {
            Expr::List(v) => v.iter().collect(),
            e @ Expr::Struct(_) => vec![e],
            _ => Vec::new(),
        };
        for (i, (rev, data)) in out.iter().enumerate() {
            let Some(w) = expected.get(i) else { break };
            if let Some(we) = w.field("events").and_then(|f| self.int_of(&f.value)) {
                if we as u32 != *rev {
                    return self.fail(
                        FailKind::Syscall,
                        format!("epoll_wait events {rev:#x}, script expects {we:#x}"),
                    );
                }
            }
            let wd = ["fd", "ptr", "u64", "u32"]
                .iter()
                .find_map(|n| w.field(n))
                .and_then(|f| self.int_of(&f.value));
            if let Some(wd) = wd {
                if wd as u64 != *data {
                    return self.fail(
                        FailKind::Syscall,
                        format!("epoll_wait data {data}, script expects {wd}"),
                    );
                }
            }
        }
        Ok(Res::Done(Ok(out.len() as i64)))
    }
}

fn parse_int(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else {
        s.parse().ok()
    }
}

/// Zeroed buffers of the given lengths, from byte `from` of their concatenation on.
fn bufs_from(pieces: &[usize], from: usize) -> Vec<shallow_tcp::Bytes> {
    let mut skip = from;
    let mut out = Vec::with_capacity(pieces.len());
    for &n in pieces {
        let take = n.saturating_sub(skip);
        skip = skip.saturating_sub(n);
        if take > 0 {
            out.push(shallow_tcp::Bytes::from(vec![0u8; take]));
        }
    }
    out
}
