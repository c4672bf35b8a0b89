//! The socket API of [`Stack`] (Linux semantics and errnos): socket, bind, listen, accept,
//! connect, send, recv, shutdown, close (with SO_LINGER), options, ioctl, poll, and socket
//! ownership (`lock_sock`/`release_sock`). Each call settles its socket's memory charges and
//! reaps it when it reached CLOSE (`Stack::call`).

use super::*;
use crate::RecvMeta;

/// **Socket calls**: the BSD socket API with Linux semantics and errnos; never blocking.
impl Stack {
    /// `socket(AF_INET|AF_INET6, SOCK_STREAM, 0)`.
    pub fn socket(&mut self, family: Family) -> Result<SocketId, Errno> {
        Ok(self.alloc(family))
    }

    pub(super) fn pick_ephemeral(
        &mut self,
        local_ip: IpAddr,
        remote: Option<SocketAddr>,
    ) -> Result<u16, Errno> {
        let r = self.env.config.sysctl.triple(Sysctl::ip_local_port_range);
        let (lo, hi) = (r[0] as u32, r[1] as u32);
        let n = hi - lo + 1;
        let start = self.env.keys.rand() % n;
        for i in 0..n {
            let port = (lo + (start + i) % n) as u16;
            let busy = match remote {
                Some(rem) => {
                    self.port_filter
                        .as_ref()
                        .is_some_and(|f| !f(SocketAddr::new(local_ip, port), rem))
                        || self
                            .conns
                            .contains_key(&(SocketAddr::new(local_ip, port), rem))
                        || self.ports.get(&port).is_some_and(|v| {
                            v.iter().any(|s| {
                                self.sock(*s)
                                    .map(|sk| sk.userlocks_port || sk.state == TcpState::Listen)
                                    .unwrap_or(false)
                            })
                        })
                }
                None => self.ports.get(&port).is_some_and(|v| !v.is_empty()),
            };
            if !busy {
                return Ok(port);
            }
        }
        Err(Errno::EADDRNOTAVAIL)
    }

    /// `bind()`. Port 0 picks an ephemeral port.
    pub fn bind(&mut self, s: SocketId, addr: SocketAddr) -> Result<(), Errno> {
        let (bound, family, reuse, v6only, freebind) = {
            let sk = self.sock(s)?;
            let o = &sk.opts;
            (sk.bound, sk.family, o.reuseaddr, o.v6only, o.freebind)
        };
        if bound {
            return Err(Errno::EINVAL);
        }
        let addr_lock = !addr.ip().is_unspecified();
        let addr = dualstack::to_wire(family, v6only, dualstack::Call::Bind, addr)?;
        let scope = BindScope::of(addr.ip(), v6only);
        if !addr.ip().is_unspecified()
            && !freebind
            && !self.addrs.is_empty()
            && !self.addrs.contains(&addr.ip())
        {
            return Err(Errno::EADDRNOTAVAIL);
        }
        let port = if addr.port() == 0 {
            self.pick_ephemeral(addr.ip(), None)?
        } else {
            if let Some(v) = self.ports.get(&addr.port()) {
                for o in v {
                    let Ok(osk) = self.sock(*o) else { continue };
                    if !BindScope::of(osk.local.ip(), osk.opts.v6only).overlaps(scope) {
                        continue;
                    }
                    let ok = reuse && osk.opts.reuseaddr && osk.state != TcpState::Listen
                        || (osk.state == TcpState::TimeWait && reuse);
                    if !ok {
                        return Err(Errno::EADDRINUSE);
                    }
                }
            }
            addr.port()
        };
        let sk = self.sock_mut(s)?;
        sk.local = SocketAddr::new(addr.ip(), port);
        sk.bound = true;
        // SOCK_BINDPORT_LOCK: an explicitly bound port is never shared by connect().
        sk.userlocks_port = true;
        sk.userlocks_addr = addr_lock;
        self.ports.entry(port).or_default().push(s);
        Ok(())
    }

    /// `listen(backlog)`.
    pub fn listen(&mut self, s: SocketId, backlog: i32) -> Result<(), Errno> {
        let (state, bound, family) = {
            let sk = self.sock(s)?;
            (sk.state, sk.bound, sk.family)
        };
        if !matches!(state, TcpState::Close | TcpState::Listen) {
            return Err(Errno::EINVAL);
        }
        if !bound {
            self.bind(s, SocketAddr::new(family.unspecified(), 0))?;
        }
        let backlog = backlog.clamp(0, 4096) as u32;
        let sk = self.sock_mut(s)?;
        if let Some(l) = sk.listen.as_mut() {
            l.backlog = backlog;
            return Ok(());
        }
        let local = sk.local;
        let scope = BindScope::of(local.ip(), sk.opts.v6only);
        if let Some(&other) = self.listeners.get(&local) {
            if other != s {
                return Err(Errno::EADDRINUSE);
            }
        }
        // inet_csk_listen_start checks the port again: binds that SO_REUSEADDR let share it
        // cannot both listen where their addresses overlap (dual-stack `::` included;
        // measured on 6.18).
        let clash = self.ports.get(&local.port()).is_some_and(|v| {
            v.iter().any(|o| {
                *o != s
                    && self.sock(*o).is_ok_and(|osk| {
                        osk.state == TcpState::Listen
                            && BindScope::of(osk.local.ip(), osk.opts.v6only).overlaps(scope)
                    })
            })
        });
        if clash {
            return Err(Errno::EADDRINUSE);
        }
        let sk = self.sock_mut(s)?;
        sk.state = TcpState::Listen;
        sk.listen = Some(Box::new(Listen {
            backlog,
            ..Default::default()
        }));
        self.listeners.insert(local, s);
        self.fastopen_listen(s, backlog);
        Ok(())
    }

    /// `accept()`: the next established child and its peer address, or EAGAIN.
    pub fn accept(&mut self, s: SocketId) -> Result<(SocketId, SocketAddr), Errno> {
        let sk = self.sock_mut(s)?;
        let Some(l) = sk.listen.as_mut() else {
            return Err(Errno::EINVAL);
        };
        let Some(c) = l.accept_queue.pop_front() else {
            return Err(Errno::EAGAIN);
        };
        let child = self.sock_mut(c)?;
        child.parent = None;
        Ok((c, dualstack::to_api(child.family, child.remote)))
    }

    /// Give a closed, previously connected socket a fresh control block (keeps options and
    /// an explicit bind).
    pub(super) fn reinit_closed(&mut self, s: SocketId) -> Result<(), Errno> {
        let old = self.sock(s)?;
        let (gen, family, opts, local, locked, addr_locked) = (
            old.gen,
            old.family,
            old.opts.clone(),
            old.local,
            old.userlocks_port,
            old.userlocks_addr,
        );
        let (osnd, orcv) = (old.mem.sndbuf, old.mem.rcvbuf);
        let counted = old.rx_stamp_counted;
        if !locked {
            if let Some(v) = self.ports.get_mut(&local.port()) {
                v.retain(|x| *x != s);
            }
        }
        let mut fresh = Connection::new(s, gen, family, &self.env);
        fresh.opts = opts;
        if locked {
            // tcp_disconnect keeps the source address only if bind() chose it
            // (SOCK_BINDADDR_LOCK): a dual-stack socket bound to `::` that reached an IPv4
            // peer may reach an IPv6 one next.
            fresh.local = if addr_locked {
                local
            } else {
                SocketAddr::new(family.unspecified(), local.port())
            };
            fresh.bound = true;
            fresh.userlocks_port = true;
            fresh.userlocks_addr = addr_locked;
        }
        let sndbuf_lock = fresh.opts.sndbuf_lock;
        let rcvbuf_lock = fresh.opts.rcvbuf_lock;
        if sndbuf_lock {
            fresh.mem.sndbuf = osnd;
        }
        if rcvbuf_lock {
            fresh.mem.rcvbuf = orcv;
        }
        // The same socket as far as the host's receive-timestamp count goes.
        fresh.rx_stamp_counted = counted;
        fresh.rx_stamp_sync(&mut self.env, false);
        self.socks[s.0 as usize] = Some(Box::new(fresh));
        Ok(())
    }

    /// Non-blocking `connect()`: sends the SYN and returns `Err(EINPROGRESS)`; completion is
    /// reported by POLLOUT (then SO_ERROR). A second call gives EALREADY, then EISCONN.
    /// With `TCP_FASTOPEN_CONNECT` and a cookie cached for the peer, it sends nothing and
    /// returns `Ok(())`: the first write sends the SYN with its data (`tcp_fastopen_defer_connect`);
    /// without a cookie the SYN asks for one.
    pub fn connect(&mut self, now: Instant, s: SocketId, remote: SocketAddr) -> Result<(), Errno> {
        self.open_active(now, s, remote, None).map(|_| ())
    }

    /// The active open of `connect()` and of `sendto(MSG_FASTOPEN)` (`tcp_v4_connect` →
    /// `tcp_connect`): with `fastopen` data, the SYN carries what it can of it (fastopen.rs)
    /// and the count is returned when not zero; otherwise `Err(EINPROGRESS)` (or `Ok(0)` for
    /// a deferred `TCP_FASTOPEN_CONNECT`).
    pub(super) fn open_active(
        &mut self,
        now: Instant,
        s: SocketId,
        remote: SocketAddr,
        fastopen: Option<&[u8]>,
    ) -> Result<usize, Errno> {
        self.tick(now);
        let (state, connecting, had_peer) = {
            let sk = self.sock(s)?;
            (sk.state, sk.connecting, sk.remote.port() != 0)
        };
        match state {
            // A deferred TCP_FASTOPEN_CONNECT counts as connected (inet_stream_connect).
            TcpState::SynSent if self.sock(s)?.fastopen.defer_connect => {
                return Err(Errno::EISCONN)
            }
            TcpState::SynSent | TcpState::SynRecv => return Err(Errno::EALREADY),
            TcpState::Listen => return Err(Errno::EINVAL),
            TcpState::Close => {
                // inet_stream_connect: a connect that failed (RST, timeout) reports its error
                // once (or ECONNABORTED) and leaves the socket unconnected.
                if connecting {
                    let sk = self.sock_mut(s)?;
                    sk.connecting = false;
                    return Err(sk.err.take().unwrap_or(Errno::ECONNABORTED));
                }
                if had_peer {
                    self.reinit_closed(s)?;
                }
            }
            _ => return Err(Errno::EISCONN),
        }
        let (family, bound, local, v6only) = {
            let sk = self.sock(s)?;
            (sk.family, sk.bound, sk.local, sk.opts.v6only)
        };
        let remote = dualstack::to_wire(family, v6only, dualstack::Call::Connect, remote)?;
        dualstack::connect_check(bound.then_some(local.ip()), remote.ip())?;
        let route = self.route_lookup(remote.ip()).ok_or(Errno::ENETUNREACH)?;
        let src_ip = if bound && !local.ip().is_unspecified() {
            local.ip()
        } else {
            self.addrs
                .iter()
                .copied()
                .find(|a| a.is_ipv4() == remote.is_ipv4())
                .ok_or(Errno::ENETUNREACH)?
        };
        let port = if bound {
            local.port()
        } else {
            self.pick_ephemeral(src_ip, Some(remote))?
        };
        let local = SocketAddr::new(src_ip, port);
        if self.conns.contains_key(&(local, remote)) {
            return Err(Errno::EADDRNOTAVAIL);
        }
        let iss = self.isn(now, local, remote);
        let ts_off = self.ts_offset(local, remote);
        if !bound {
            self.ports.entry(port).or_default().push(s);
        }
        self.conns.insert((local, remote), s);
        let (sk, env) = self.sk_env(s)?;
        sk.connecting = true;
        sk.bound = true;
        sk.local = local;
        sk.remote = remote;
        sk.route = route;
        sk.hashed = true;
        sk.snd.start(iss);
        sk.rx_opt.ts_offset = ts_off;
        // tcp_syn_options: a signed SYN offers no timestamps (measured on 6.18).
        sk.rx_opt.tstamp_ok = env.sysint(Sysctl::tcp_timestamps) != 0 && sk.md5_opt_len() == 0;
        sk.rx_opt.sack_ok = env.config.sysctl.on(Sysctl::tcp_sack);
        sk.rx_opt.wscale_ok = env.config.sysctl.on(Sysctl::tcp_window_scaling);
        sk.init_rcv_window(env, true);
        sk.state = TcpState::SynSent;
        let tfo_connect = sk.opts.fastopen_connect
            && env.sysint(Sysctl::tcp_fastopen) & crate::fastopen::bits::CLIENT_ENABLE != 0;
        let sent = match fastopen {
            Some(data) => sk.send_syn_data(env, now, data),
            None if tfo_connect => {
                if sk.fastopen_cookie_check(env).0 {
                    // The first write sends the SYN, with data (DEFER_CONNECT).
                    sk.fastopen.defer_connect = true;
                    return Ok(0);
                }
                sk.send_syn_data(env, now, &[])
            }
            None => {
                sk.send_syn(env, now);
                0
            }
        };
        sk.syn_armed(env, now);
        if sent > 0 {
            Ok(sent)
        } else {
            Err(Errno::EINPROGRESS)
        }
    }

    /// `send()`/`write()` (never blocks): bytes accepted, or EAGAIN/EPIPE/… (spec §1.2, §3.3).
    /// Flags: MSG_DONTWAIT, MSG_MORE, MSG_EOR, MSG_NOSIGNAL, MSG_FASTOPEN (as [`Stack::sendto`]
    /// without an address). On a socket whose `TCP_FASTOPEN_CONNECT` connect was deferred,
    /// the first write sends the SYN with the data.
    pub fn send(
        &mut self,
        now: Instant,
        s: SocketId,
        data: &[u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        // One place decides between a plain send and a Fast Open connect: sendto.
        self.sendto(now, s, data, flags, None)
    }

    /// `recvmsg(MSG_ERRQUEUE)` (errqueue.rs): the oldest entry — a transmit timestamp
    /// (`SO_TIMESTAMPING`, tstamp.rs) or a zero-copy completion (`MSG_ZEROCOPY`,
    /// zerocopy.rs) — or EAGAIN when none waits (the call never blocks, as on Linux).
    pub fn recv_errqueue(&mut self, s: SocketId) -> Result<crate::ErrQueueEntry, Errno> {
        self.recv_errqueue_msg(s).map(|m| m.entry)
    }

    /// [`Stack::recv_errqueue`] as `recvmsg(MSG_ERRQUEUE)` reads it: the entry, its bytes
    /// (for a transmit timestamp without `OPT_TSONLY` the packet, or the acked buffer's
    /// payload, as Linux queues a clone of the skb; with `OPT_TSONLY` and `OPT_STATS` the
    /// statistics' blob; else nothing) and, for an entry holding the packet on a socket
    /// with `SOF_TIMESTAMPING_OPT_CMSG` and `IP_PKTINFO` (an IPv4 packet) or
    /// `IPV6_RECVPKTINFO` (an IPv6 one), the packet information ([`Stack::set_ifindex`]).
    pub fn recv_errqueue_msg(&mut self, s: SocketId) -> Result<crate::ErrQueueMsg, Errno> {
        let ifindex = self.env.device.ifindex;
        let sk = self.sock_mut(s)?;
        let (entry, bytes, packet) = sk.errq.pop().ok_or(Errno::EAGAIN)?;
        if matches!(entry, crate::ErrQueueEntry::Zerocopy(_)) {
            sk.zc.free_omem();
        }
        let cmsg = sk.tstamp.flags & crate::tstamp::sof::OPT_CMSG != 0;
        let pktinfo = bytes
            .iter()
            .next()
            .filter(|_| packet && cmsg)
            .and_then(|head| crate::errqueue::PktInfo::of_packet(head, ifindex))
            .filter(|p| match p.dst {
                core::net::IpAddr::V4(_) => sk.opts.pktinfo,
                core::net::IpAddr::V6(_) => sk.opts.pktinfo6,
            });
        Ok(crate::ErrQueueMsg {
            entry,
            bytes,
            pktinfo,
        })
    }

    /// The oldest transmit timestamp of the error queue, leaving zero-copy completions in
    /// their place (for an application that reads the two apart); EAGAIN when none waits.
    pub fn recv_tx_timestamp(&mut self, s: SocketId) -> Result<crate::TxTimestamp, Errno> {
        let sk = self.sock_mut(s)?;
        match sk.errq.pop_kind(true) {
            Some(crate::ErrQueueEntry::Timestamp(t)) => Ok(t),
            _ => Err(Errno::EAGAIN),
        }
    }

    /// The oldest zero-copy completion of the error queue, leaving timestamps in their
    /// place; EAGAIN when none waits.
    pub fn recv_zerocopy(&mut self, s: SocketId) -> Result<crate::ZcNotice, Errno> {
        let sk = self.sock_mut(s)?;
        match sk.errq.pop_kind(false) {
            Some(crate::ErrQueueEntry::Zerocopy(z)) => {
                sk.zc.free_omem();
                Ok(z)
            }
            _ => Err(Errno::EAGAIN),
        }
    }

    /// A blocking zero-copy send returns to its caller: the end of Linux's
    /// `tcp_sendmsg_locked` (`net_zcopy_put`, or `net_zcopy_put_abort` when it took
    /// nothing). A blocking send that took part of its bytes (or none, yet) leaves its
    /// completion open for its caller to come back with the rest after sleeping for room
    /// (zerocopy.rs); a caller that gives up instead (a send timeout) calls this, so that the
    /// completion is reported once its bytes are released and an id the send held without
    /// taking a byte is given back. Does nothing when no send is open.
    pub fn zerocopy_send_end(&mut self, s: SocketId) -> Result<(), Errno> {
        let (sk, env) = self.sk_env(s)?;
        if sk.zc.close_open() {
            sk.zc_complete(env);
        }
        Ok(())
    }

    /// The id the socket's next zero-copy send will get (`sk_zckey`): ids are given in
    /// order from 0, one per `MSG_ZEROCOPY` send that takes bytes (a blocking send that
    /// sleeps for room and comes back keeps its id).
    pub fn zerocopy_next_id(&self, s: SocketId) -> Result<u32, Errno> {
        Ok(self.sock(s)?.zc.next_id())
    }

    /// Whether the socket's timestamp control messages carry 64-bit times (`SOCK_TSTAMP_NEW`:
    /// the last timestamp option turned on was `SO_TIMESTAMP_NEW`, `SO_TIMESTAMPNS_NEW` or
    /// `SO_TIMESTAMPING_NEW`), so a substrate that writes control messages uses
    /// `SCM_TIMESTAMP_NEW` (63), `SCM_TIMESTAMPNS_NEW` (64), `SCM_TIMESTAMPING_NEW` (65).
    pub fn timestamp_new(&self, s: SocketId) -> Result<bool, Errno> {
        Ok(self.sock(s)?.opts.tstamp_new)
    }

    /// The socket's busy-polling settings (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`,
    /// `SO_BUSY_POLL_BUDGET`), for a substrate that polls its device from a blocking read
    /// (Linux `sk_busy_loop`). The engine does no polling itself.
    pub fn busy_poll(&self, s: SocketId) -> Result<BusyPoll, Errno> {
        let o = &self.sock(s)?.opts;
        Ok(BusyPoll {
            usec: o.busy_poll_us,
            prefer: o.prefer_busy_poll,
            budget: if o.busy_poll_budget == 0 {
                BusyPoll::DEFAULT_BUDGET
            } else {
                o.busy_poll_budget
            },
        })
    }

    /// `sendmsg()` of the application's buffers (`msg_iov`, in order), with a destination
    /// as [`Stack::sendto`]. With `MSG_ZEROCOPY` on a socket with `SO_ZEROCOPY` (zerocopy.rs)
    /// the stack keeps the buffers themselves, without copying them into its send buffer,
    /// when the device does scatter-gather ([`crate::DeviceCaps::sg`]); the send gets the
    /// next id and its completion comes on the error queue ([`Stack::recv_errqueue`]) when
    /// the stack holds its bytes no more (`SO_EE_CODE_ZEROCOPY_COPIED` if they were
    /// copied after all: a Fast Open SYN's data, a device without scatter-gather or one
    /// that copies). ENOBUFS when the socket's completions fill
    /// `net.core.optmem_max`. Otherwise the bytes are copied, as [`Stack::sendto`].
    pub fn sendmsg_bufs(
        &mut self,
        now: Instant,
        s: SocketId,
        bufs: &[bytes::Bytes],
        flags: u32,
        to: Option<SocketAddr>,
    ) -> Result<usize, Errno> {
        self.send_src(now, s, crate::send::SendSrc::Share(bufs), flags, to)
    }

    /// Whether a `TCP_FASTOPEN_CONNECT` connect() on `s` waits for the first write to send
    /// its SYN (`DEFER_CONNECT`).
    pub fn connect_deferred(&self, s: SocketId) -> Result<bool, Errno> {
        Ok(self.sock(s)?.fastopen.defer_connect)
    }

    /// `sendto()` / `sendmsg()` with a destination (`tcp_sendmsg_fastopen`). Without
    /// MSG_FASTOPEN (and no deferred `TCP_FASTOPEN_CONNECT`) it is [`Stack::send`]: TCP
    /// ignores the address. With it, on an unconnected socket, it connects to `to` and the
    /// SYN carries what it can of `data` (TCP Fast Open, RFC 7413): the bytes sent are
    /// returned, or `Err(EINPROGRESS)` when none went (no cookie yet: the SYN asks for one).
    /// A blocking caller then waits for the connection (POLLOUT) and sends the rest with
    /// [`Stack::send`]. Errors as Linux: EOPNOTSUPP when `net.ipv4.tcp_fastopen` has no
    /// client bit (an `AF_UNSPEC` address, which this call cannot express, is EOPNOTSUPP
    /// too), EINVAL without an address, EALREADY while connecting, EISCONN on a listener;
    /// once connected MSG_FASTOPEN is ignored.
    pub fn sendto(
        &mut self,
        now: Instant,
        s: SocketId,
        data: &[u8],
        flags: u32,
        to: Option<SocketAddr>,
    ) -> Result<usize, Errno> {
        self.send_src(now, s, crate::send::SendSrc::Copy(data), flags, to)
    }

    /// Every send: a zero-copy send's completion is taken (or ENOBUFS) before the send and
    /// settled after it (`msg_zerocopy_realloc` … `net_zcopy_put[_abort]`).
    fn send_src(
        &mut self,
        now: Instant,
        s: SocketId,
        src: crate::send::SendSrc<'_>,
        flags: u32,
        to: Option<SocketAddr>,
    ) -> Result<usize, Errno> {
        let size = src.len();
        let optmem = self.env.sysint(Sysctl::optmem_max).max(0) as u32;
        let zc = {
            let sk = self.sock_mut(s)?;
            if flags & crate::recv::msgflags::MSG_ZEROCOPY != 0 && sk.opts.zerocopy && size > 0 {
                let tail = sk.snd.write_queue.back().and_then(|t| t.zc);
                Some(
                    sk.zc
                        .begin(size as u32, tail, optmem)
                        .ok_or(Errno::ENOBUFS)?,
                )
            } else {
                None
            }
        };
        let r = self.send_inner(now, s, src, zc, flags, to);
        if let (Some(z), Ok(sk)) = (zc, self.sock_mut(s)) {
            let taken = *r.as_ref().unwrap_or(&0) as u32;
            let blocking = !sk.opts.nonblock && flags & crate::recv::msgflags::MSG_DONTWAIT == 0;
            // A blocking writer that got part in (or nothing, this time) sleeps for room and
            // comes back with the rest: one send, one id.
            let open =
                blocking && (taken as usize) < size && matches!(r, Ok(_) | Err(Errno::EAGAIN));
            sk.zc.end(z, taken, open);
        }
        r
    }

    fn send_inner(
        &mut self,
        now: Instant,
        s: SocketId,
        src: crate::send::SendSrc<'_>,
        zc: Option<crate::zerocopy::ZcSend>,
        flags: u32,
        to: Option<SocketAddr>,
    ) -> Result<usize, Errno> {
        self.tick(now);
        let defer = self.sock(s)?.fastopen.defer_connect;
        if flags & crate::recv::msgflags::MSG_FASTOPEN == 0 && !defer {
            return self.call(now, s, |sk, env| sk.sendmsg_src(env, now, src, zc, flags));
        }
        // A Fast Open connect copies its data into the SYN (tcp_send_syn_data).
        let joined;
        let data: &[u8] = match src {
            crate::send::SendSrc::Copy(d) => d,
            other => {
                joined = other.to_vec();
                &joined
            }
        };
        let r = self.send_fastopen(now, s, data, flags, to);
        // Its bytes were copied (into the SYN, or as ordinary data once connected).
        if let (Some(z), Ok(sk)) = (zc, self.sock_mut(s)) {
            sk.zc.mark_copied_serial(z.serial);
            if let Ok(&n) = r.as_ref() {
                let end = sk.snd.write_seq;
                sk.zc.grow(z.serial, n as u32, end);
            }
        }
        r
    }

    /// [`Stack::sendto`] with `MSG_FASTOPEN` or after a deferred `TCP_FASTOPEN_CONNECT`.
    fn send_fastopen(
        &mut self,
        now: Instant,
        s: SocketId,
        data: &[u8],
        flags: u32,
        to: Option<SocketAddr>,
    ) -> Result<usize, Errno> {
        let (state, defer) = {
            let sk = self.sock(s)?;
            (sk.state, sk.fastopen.defer_connect)
        };
        if self.env.sysint(Sysctl::tcp_fastopen) & crate::fastopen::bits::CLIENT_ENABLE == 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if defer {
            let (sk, env) = self.sk_env(s)?;
            sk.fastopen.defer_connect = false;
            let sent = sk.send_syn_data(env, now, data);
            sk.syn_armed(env, now);
            if !sk.opts.nonblock
                && flags & crate::recv::msgflags::MSG_DONTWAIT == 0
                && sent < data.len()
            {
                sk.write_pending = true;
            }
            return if sent > 0 {
                Ok(sent)
            } else {
                Err(Errno::EINPROGRESS)
            };
        }
        match state {
            TcpState::Close => {
                let to = to.ok_or(Errno::EINVAL)?;
                let r = self.open_active(now, s, to, Some(data));
                // A blocking caller waits for the handshake with the rest of its data
                // (inet_wait_for_connect's write bias).
                let sent = *r.as_ref().unwrap_or(&0);
                let sk = self.sock_mut(s)?;
                let blocking =
                    !sk.opts.nonblock && flags & crate::recv::msgflags::MSG_DONTWAIT == 0;
                if blocking && matches!(r, Ok(_) | Err(Errno::EINPROGRESS)) && sent < data.len() {
                    sk.write_pending = true;
                }
                r
            }
            TcpState::SynSent | TcpState::SynRecv => Err(Errno::EALREADY),
            TcpState::Listen => Err(Errno::EISCONN),
            // Once connected, MSG_FASTOPEN is ignored (measured on 6.18:
            // fastopen/client/nonblocking-sendto.pkt passes on the kernel).
            _ => self.call(now, s, |sk, env| {
                sk.sendmsg_src(env, now, crate::send::SendSrc::Copy(data), None, flags)
            }),
        }
    }

    /// `recv()`/`read()` (never blocks): Ok(0) is end of stream. MSG_PEEK, MSG_TRUNC,
    /// MSG_WAITALL (returns EAGAIN until the full amount or EOF is there), MSG_DONTWAIT.
    pub fn recv(
        &mut self,
        now: Instant,
        s: SocketId,
        buf: &mut [u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        self.call(now, s, |sk, env| sk.recvmsg(env, now, buf, flags))
    }

    /// The reading `splice(2)` does from a TCP socket (`tcp_splice_read` → `tcp_read_sock`):
    /// up to `buf.len()` bytes, as [`Stack::recv`] but stopping at the urgent mark and
    /// returning Ok(0) there, with the urgent byte still unread (urg.rs); never blocks.
    pub fn read_sock(&mut self, now: Instant, s: SocketId, buf: &mut [u8]) -> Result<usize, Errno> {
        let flags = crate::recv::msgflags::MSG_DONTWAIT;
        self.call(now, s, |sk, env| {
            sk.recvmsg_ts(env, now, buf, flags, true).map(|(n, _)| n)
        })
    }

    /// `recvmsg()` with its receive timestamp: as [`Stack::recv`], and the time the data read
    /// arrived when the socket asks for it (`SO_TIMESTAMPING` with `SOFTWARE`, or
    /// `SO_TIMESTAMP`/`SO_TIMESTAMPNS`: the `SCM_TIMESTAMPING` / `SCM_TIMESTAMP(NS)` control
    /// message of Linux's `tcp_recv_timestamp`). The time is the `now` of the input call that
    /// brought the last segment of the last buffer read from (see
    /// `Connection::recvmsg_ts`); None at end of stream or for data that arrived before the
    /// socket asked.
    pub fn recvmsg(
        &mut self,
        now: Instant,
        s: SocketId,
        buf: &mut [u8],
        flags: u32,
    ) -> Result<RecvMeta, Errno> {
        self.call(now, s, |sk, env| {
            sk.recvmsg_ts(env, now, buf, flags, false)
                .map(|(len, rx_time)| RecvMeta { len, rx_time })
        })
    }

    /// `shutdown()`.
    pub fn shutdown(&mut self, now: Instant, s: SocketId, how: Shutdown) -> Result<(), Errno> {
        self.call(now, s, |sk, env| {
            match sk.state {
                TcpState::Close | TcpState::Listen | TcpState::SynSent => {
                    if sk.state == TcpState::Listen && how != Shutdown::Write {
                        return Ok(());
                    }
                    if sk.state != TcpState::SynSent {
                        return Err(Errno::ENOTCONN);
                    }
                }
                _ => {}
            }
            if matches!(how, Shutdown::Read | Shutdown::Both) {
                sk.shutdown |= RCV_SHUTDOWN;
                env.out.wake(s, POLLIN | POLLRDNORM | POLLRDHUP);
            }
            if matches!(how, Shutdown::Write | Shutdown::Both) && sk.shutdown & SEND_SHUTDOWN == 0 {
                sk.close_state_and_fin(env, now);
            }
            Ok(())
        })
    }

    /// `close()`: FIN (or RST when unread data remains / SO_LINGER 0), then the socket is
    /// orphaned and goes away when the connection finishes. Never waits: SO_LINGER with a
    /// time is honoured only by [`Stack::close_linger`].
    pub fn close(&mut self, now: Instant, s: SocketId) -> Result<(), Errno> {
        self.close_inner(now, s, false).map(|_| ())
    }

    /// `close()` for a caller that can wait (a blocking application thread; Linux waits even
    /// on a non-blocking socket): as [`Stack::close`], but with SO_LINGER `l_linger > 0` and
    /// the FIN not yet acknowledged (FIN_WAIT1, CLOSING, LAST_ACK) the socket is not
    /// orphaned and a [`LingerWait`] is returned (`sk_stream_wait_close`).
    pub fn close_linger(&mut self, now: Instant, s: SocketId) -> Result<Option<LingerWait>, Errno> {
        self.close_inner(now, s, true)
    }

    /// Whether a lingering close of `s` must still wait at `now`: the FIN is not acked
    /// (`sk_stream_closing`) and the linger time has not passed. False for unknown sockets.
    pub fn linger_pending(&self, s: SocketId, now: Instant) -> bool {
        self.sock(s)
            .is_ok_and(|sk| sk.linger_until.is_some_and(|d| now < d) && sk.stream_closing())
    }

    /// End a lingering close (acknowledged FIN or linger time over): the socket becomes an
    /// orphan that finishes on its own, as after [`Stack::close`] (`tcp_close` after the
    /// wait: FIN_WAIT2 gets its `tcp_fin_timeout`).
    pub fn linger_finish(&mut self, now: Instant, s: SocketId) {
        self.tick(now);
        let Ok((sk, env)) = self.sk_env(s) else {
            return;
        };
        if sk.linger_until.take().is_none() {
            return;
        }
        sk.orphan = true;
        if sk.state == TcpState::FinWait2 {
            let t = sk.fin_timeout(env);
            sk.arm(env, TimerKind::Keepalive, now + t);
        }
        self.reap(s);
    }

    pub(super) fn close_inner(
        &mut self,
        now: Instant,
        s: SocketId,
        may_linger: bool,
    ) -> Result<Option<LingerWait>, Errno> {
        self.tick(now);
        if matches!(
            self.sock(s)?.deferral,
            Some(crate::socket::Deferral::Claimed)
        ) {
            // A held SYN the application never answered: forgotten without a word.
            self.forward_complete(now, s, super::ForwardCompletion::Drop)?;
        }
        let state = self.sock(s)?.state;
        if state == TcpState::Listen {
            let (children, local) = {
                let sk = self.sock_mut(s)?;
                let l = sk.listen.take().unwrap_or_default();
                let mut v: Vec<SocketId> = l.syn_queue.clone();
                v.extend(l.accept_queue.iter().copied());
                (v, sk.local)
            };
            for c in children {
                if let Ok((ck, env)) = self.sk_env(c) {
                    // inet_child_forget → tcp_disconnect: a reset for every state that
                    // needs one (tcp_need_reset), a Fast Open child's SYN_RECV included.
                    let tfo_recv = ck.fastopen.child && ck.state == TcpState::SynRecv;
                    if tfo_recv || matches!(ck.state, TcpState::Established | TcpState::CloseWait) {
                        ck.send_active_reset(env, now);
                    }
                    ck.set_closed(env);
                }
                self.free(c);
            }
            self.listeners.remove(&local);
            self.free(s);
            return Ok(None);
        }
        let mut wait = None;
        {
            let (sk, env) = self.sk_env(s)?;
            sk.orphan = true;
            sk.shutdown |= RCV_SHUTDOWN;
            let unread = sk.inq() > 0;
            // tcp_close purges the receive queue first: a RST for unread data already offers
            // the window of the emptied buffer (fuzz seed 70199). The out-of-order queue stays
            // charged until the socket goes.
            let purged: u32 = sk.rcv.rx_queue.drain(..).map(|b| b.truesize).sum();
            sk.mem.rmem_alloc = sk.mem.rmem_alloc.saturating_sub(purged);
            let linger0 = sk.opts.linger == Some(0);
            match sk.state {
                TcpState::Close | TcpState::SynSent => {
                    sk.set_closed(env);
                }
                _ if unread => {
                    env.mib.inc(Mib::TCPAbortOnClose);
                    sk.send_active_reset(env, now);
                    sk.set_closed(env);
                }
                TcpState::TimeWait => {}
                _ if linger0 => {
                    env.mib.inc(Mib::TCPAbortOnData);
                    sk.send_active_reset(env, now);
                    sk.set_closed(env);
                }
                _ => {
                    if sk.shutdown & SEND_SHUTDOWN == 0 {
                        sk.close_state_and_fin(env, now);
                    }
                    if sk.state == TcpState::FinWait2 {
                        let t = sk.fin_timeout(env);
                        sk.arm(env, TimerKind::Keepalive, now + t);
                    }
                }
            }
            // sk_stream_wait_close: wait for the FIN's ACK before orphaning.
            if let Some(t) = sk.opts.linger.filter(|&t| t > 0 && may_linger) {
                if sk.stream_closing() {
                    sk.orphan = false;
                    let deadline = now + Duration::from_secs(u64::from(t));
                    sk.linger_until = Some(deadline);
                    wait = Some(LingerWait {
                        socket: s,
                        deadline,
                    });
                }
            }
        }
        self.reap(s);
        Ok(wait)
    }

    /// Current TCP state.
    pub fn state(&self, s: SocketId) -> Result<TcpState, Errno> {
        Ok(self.sock(s)?.state)
    }

    /// Local address (`getsockname`).
    pub fn local_addr(&self, s: SocketId) -> Result<SocketAddr, Errno> {
        let sk = self.sock(s)?;
        Ok(dualstack::to_api(sk.family, sk.local))
    }

    /// Peer address (`getpeername`), ENOTCONN if none.
    pub fn peer_addr(&self, s: SocketId) -> Result<SocketAddr, Errno> {
        let sk = self.sock(s)?;
        if sk.remote.port() == 0 || !sk.is_synchronized() && sk.state != TcpState::SynSent {
            return Err(Errno::ENOTCONN);
        }
        Ok(dualstack::to_api(sk.family, sk.remote))
    }

    /// Set O_NONBLOCK (recorded for substrates; engine calls never block).
    pub fn set_nonblocking(&mut self, s: SocketId, on: bool) -> Result<(), Errno> {
        self.sock_mut(s)?.opts.nonblock = on;
        Ok(())
    }

    /// Whether O_NONBLOCK is set.
    pub fn is_nonblocking(&self, s: SocketId) -> Result<bool, Errno> {
        Ok(self.sock(s)?.opts.nonblock)
    }

    /// `setsockopt()`.
    pub fn setsockopt(
        &mut self,
        now: Instant,
        s: SocketId,
        opt: SockOpt,
        val: &OptVal,
    ) -> Result<(), Errno> {
        self.call(now, s, |sk, env| sk.setsockopt(env, now, opt, val))
    }

    /// `getsockopt()`.
    pub fn getsockopt(&mut self, s: SocketId, opt: SockOpt) -> Result<OptVal, Errno> {
        let (sk, env) = self.sk_env(s)?;
        sk.getsockopt(env, opt)
    }

    /// `ioctl()`.
    pub fn ioctl(&self, s: SocketId, req: Ioctl) -> Result<u32, Errno> {
        let sk = self.sock(s)?;
        if sk.state == TcpState::Listen {
            return Err(Errno::EINVAL);
        }
        Ok(match req {
            Ioctl::SiocInq => sk.inq(),
            Ioctl::SiocOutq => sk.snd.write_seq.wrapping_sub(sk.snd.una),
            Ioctl::SiocOutqNsd => sk.notsent_bytes(),
            Ioctl::SiocAtmark => u32::from(sk.at_mark()),
        })
    }

    /// `poll()` readiness with `tcp_poll`'s conditions. May arm SOCK_NOSPACE (so a later
    /// write-space wake-up is produced), as Linux does.
    pub fn poll(&mut self, s: SocketId) -> Result<u32, Errno> {
        let (sk, env) = self.sk_env(s)?;
        Ok(sk.poll(env))
    }

    /// `TCP_INFO`.
    pub fn tcp_info(&self, now: Instant, s: SocketId) -> Result<TcpInfo, Errno> {
        Ok(self.sock(s)?.tcp_info(&self.env, now))
    }

    /// `SO_MEMINFO` (`sk_get_meminfo` order).
    pub fn meminfo(&self, s: SocketId) -> Result<MemInfo, Errno> {
        Ok(self.sock(s)?.meminfo())
    }

    /// `lock_sock`: the application owns the socket; inbound packets go to its backlog and
    /// timers/TX completions defer their work.
    pub fn lock_sock(&mut self, s: SocketId) {
        if let Ok(sk) = self.sock_mut(s) {
            sk.lock.owned = true;
        }
    }

    /// `release_sock`: process the backlog, run deferred work (`tcp_release_cb`: TSQ write,
    /// write timer, delack timer, deferred ACK), then drop ownership.
    pub fn release_sock(&mut self, now: Instant, s: SocketId) {
        self.tick(now);
        loop {
            let batch = match self.sock_mut(s) {
                Ok(sk) if !sk.lock.backlog.is_empty() => std::mem::take(&mut sk.lock.backlog),
                _ => break,
            };
            for o in batch {
                let seg = o.as_seg();
                if self.conns.get(&(seg.dst, seg.src)) == Some(&s) {
                    self.rcv_conn(now, s, &seg);
                }
            }
        }
        let Ok((sk, env)) = self.sk_env(s) else {
            return;
        };
        sk.lock.backlog_len = 0;
        let flags = sk.tsq_flags;
        sk.tsq_flags &= !(tsq::TSQ_DEFERRED
            | tsq::WRITE_TIMER_DEFERRED
            | tsq::DELACK_TIMER_DEFERRED
            | tsq::ACK_DEFERRED);
        let mut drop = false;
        if flags & tsq::TSQ_DEFERRED != 0 {
            sk.tsq_write(env, now);
        }
        if flags & tsq::WRITE_TIMER_DEFERRED != 0 {
            drop = sk.write_timer(env, now);
        }
        if !drop && flags & tsq::DELACK_TIMER_DEFERRED != 0 {
            sk.delack_timer(env, now);
        }
        if !drop && flags & tsq::ACK_DEFERRED != 0 && sk.ack.pending & ackf::SCHED != 0 {
            sk.send_ack(env, now);
        }
        sk.lock.owned = false;
        if drop {
            self.free(s);
        } else {
            self.reap(s);
        }
    }
}

/// Socket ownership (`sk_lock.owned`) and the backlog of segments that arrived while the
/// application owned the socket (`sk_backlog`, its length in truesize bytes). `lock_sock` and
/// `release_sock` here take and give ownership and drain the backlog; the `pub(crate)` fields
/// are read where Linux reads them: the network input (stack/rx.rs) queues to the backlog
/// while owned, the ACK-deferral and TSQ rules (input.rs, stack/poll.rs) ask whether the
/// socket is owned, and the window and `SO_MEMINFO` count the backlog.
#[derive(Debug, Default)]
pub(crate) struct SockLock {
    /// `sk_lock.owned`.
    pub owned: bool,
    /// Segments that arrived while owned (`sk_backlog`).
    pub backlog: std::collections::VecDeque<crate::packet::OwnedSeg>,
    /// The backlog's length in truesize bytes (`sk_backlog.len`).
    pub backlog_len: u32,
}

/// A socket's busy-polling settings ([`Stack::busy_poll`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusyPoll {
    /// µs a blocking read polls the device before it sleeps (`sk_ll_usec`; 0: never).
    pub usec: u32,
    /// The device's own receive processing stands aside while the socket polls
    /// (`SO_PREFER_BUSY_POLL`).
    pub prefer: bool,
    /// Packets per poll of the device (`SO_BUSY_POLL_BUDGET`, or the default).
    pub budget: u16,
}

impl BusyPoll {
    /// Linux's `BUSY_POLL_BUDGET`: packets per poll when the socket sets none.
    pub const DEFAULT_BUDGET: u16 = 8;
}
