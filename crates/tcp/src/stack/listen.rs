//! The passive open: listeners' SYN and accept queues, children in SYN_RECV, SYN cookies
//! (`tcp_conn_request`, `cookie_v4_check`), ISNs and timestamp offsets (RFC 6528 / RFC 7323
//! §5.4, keyed hashes of the 4-tuple).

use super::*;
use shallow_wire::TcpFlags;

/// The passive open (internal): listeners, SYN cookies, ISNs.
impl Stack {
    pub(super) fn child_established(&mut self, now: Instant, id: SocketId) {
        if self.deferred_established(id) {
            return;
        }
        if self.sock(id).is_ok_and(|s| s.fastopen.listener.is_some()) {
            // A Fast Open child is in the accept queue (or accepted) already.
            self.fastopen_release(now, id, false);
            return;
        }
        let Some((p, gen)) = self.sock(id).ok().and_then(|s| s.parent) else {
            return; // simultaneous open: not a passive open
        };
        self.env.mib.inc(Mib::PassiveOpens);
        if let Ok(ps) = self.sock_mut(p) {
            if ps.gen == gen {
                if let Some(l) = ps.listen.as_mut() {
                    l.syn_queue.retain(|x| *x != id);
                    l.accept_queue.push_back(id);
                }
                self.env.out.wake(p, POLLIN | POLLRDNORM);
            }
        }
    }

    /// A segment for a listener (`tcp_v4_conn_request`; SYN cookies per `cookie_v4_check`).
    pub(super) fn listen_rcv(&mut self, now: Instant, lid: SocketId, seg: &SegIn<'_>) {
        if seg.has(TcpFlags::RST) {
            return;
        }
        let cookies = self.env.sysint(Sysctl::tcp_syncookies);
        if seg.has(TcpFlags::ACK) && !seg.has(TcpFlags::SYN) {
            if cookies != 0 {
                if let Some(opts) = self.cookie_check(now, seg) {
                    self.cookie_accept(now, lid, seg, opts);
                    return;
                }
            }
            self.send_reset_for(seg);
            return;
        }
        if !seg.has(TcpFlags::SYN) || seg.has(TcpFlags::ACK) {
            if seg.has(TcpFlags::ACK) {
                self.send_reset_for(seg);
            }
            return;
        }
        let mut defer = false;
        if self.forward.holds(lid) {
            match self.forward_verdict(seg) {
                ForwardVerdict::Accept => {}
                ForwardVerdict::Defer => defer = true,
                ForwardVerdict::Reset => {
                    self.send_reset_for(seg);
                    return;
                }
                ForwardVerdict::Drop => return,
            }
        }
        let (backlog, synq, accq) = match self.sock(lid).ok().and_then(|l| l.listen.as_ref()) {
            Some(l) => (
                l.backlog,
                l.syn_queue.len() as u32,
                l.accept_queue.len() as u32,
            ),
            None => return,
        };
        if accq > backlog {
            self.env.mib.inc(Mib::ListenOverflows);
            self.env.mib.inc(Mib::ListenDrops);
            return;
        }
        let max_syn = (self.env.sysint(Sysctl::tcp_max_syn_backlog) as u32).min(backlog.max(1));
        if cookies == 2 || synq >= max_syn {
            if cookies != 0 {
                self.send_cookie_synack(now, lid, seg);
            } else {
                self.env.mib.inc(Mib::ListenDrops);
            }
            return;
        }
        let iss = self.isn(now, seg.dst, seg.src);
        let tfo = if defer {
            None
        } else {
            self.fastopen_verdict(now, lid, seg)
        };
        let Some(cid) = self.new_child(now, lid, seg, iss, None) else {
            return;
        };
        let synack_cookie = match tfo {
            Some(crate::fastopen::Verdict::Child(c)) => {
                self.fastopen_child(now, lid, cid, seg, c);
                return;
            }
            Some(crate::fastopen::Verdict::Ordinary(c)) => c,
            None => None,
        };
        if defer {
            // Held unanswered: the application answers (stack/forward.rs).
            if let Ok((c, env)) = self.sk_env(cid) {
                c.deferral = Some(crate::socket::Deferral::Waiting);
                // Not taken within the initial RTO, it is forgotten (stack/forward.rs).
                c.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
            }
            if let Some(q) = self.sock_mut(lid).ok().and_then(|l| l.listen.as_mut()) {
                q.syn_queue.push(cid);
                q.requests.push_back(cid);
            }
            self.env.out.wake(lid, POLLIN | POLLRDNORM);
            return;
        }
        let (sk, env) = self.sk_env(cid).expect("just created");
        sk.send_synack_with(env, now, synack_cookie.as_ref());
        sk.timer.rtx_event = RtxEvent::Rto;
        sk.rtt.reset_rto();
        sk.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
        if let Ok(l) = self.sock_mut(lid) {
            if let Some(q) = l.listen.as_mut() {
                q.syn_queue.push(cid);
            }
        }
    }

    /// Create a SYN_RECV child of listener `lid` for the SYN `seg` (`inet_reqsk_alloc` +
    /// `tcp_create_openreq_child`), hashed in the demux table. `opts` overrides the SYN's
    /// options, for a SYN cookie's child (the options it encodes or reconstructs).
    pub(super) fn new_child(
        &mut self,
        now: Instant,
        lid: SocketId,
        seg: &SegIn<'_>,
        iss: u32,
        opts: Option<packet::RxOpts>,
    ) -> Option<SocketId> {
        let route = self.route_lookup(seg.src.ip())?;
        let (lopts, lgen, lcc, lsnd, lrcv, family, lmd5, ltsflags) = {
            let l = self.sock(lid).ok()?;
            (
                l.opts.clone(),
                l.gen,
                l.cc.name(),
                l.mem.sndbuf,
                l.mem.rcvbuf,
                l.family,
                // tcp_v4_syn_recv_sock: the listener's key for the peer, copied to the child.
                l.md5
                    .as_ref()
                    .and_then(|t| t.lookup(seg.src.ip()))
                    .map(|k| k.key.clone()),
                l.tstamp.flags,
            )
        };
        let cid = self.alloc(family);
        let ts_off = self.ts_offset(seg.dst, seg.src);
        let cc_params = self.env.config.cc_params.clone();
        let (sk, env) = self.sk_env(cid).ok()?;
        sk.opts = lopts;
        sk.md5 = lmd5.map(|k| Box::new(crate::md5::Md5Keys::for_child(seg.src.ip(), k)));
        // The child is a copy of the listener (`sk_clone_lock`): its SO_TIMESTAMPING flags
        // too (measured on 6.18: 24 on the listener, 24 on the accepted socket). A listener
        // cannot have OPT_ID (EINVAL), so no key base comes with them.
        sk.tstamp.flags = ltsflags;
        // sk_clone_lock: a child of a socket asking for receive timestamps asks too.
        sk.rx_stamp_sync(env, false);
        sk.mem.sndbuf = lsnd;
        sk.mem.rcvbuf = lrcv;
        if let Some(cc) = shallow_cc::by_name(lcc, &cc_params) {
            sk.cc = cc;
        }
        sk.route = route;
        sk.local = seg.dst;
        sk.remote = seg.src;
        sk.bound = true;
        sk.parent = Some((lid, lgen));
        sk.snd.start(iss);
        sk.rx_opt.ts_offset = ts_off;
        sk.rcv.irs = seg.seq;
        sk.rcv.nxt = seg.seq.wrapping_add(1);
        sk.rcv.wup = sk.rcv.nxt;
        sk.rcv.copied_seq = sk.rcv.nxt;
        let syn_like = SegIn {
            opts: opts.unwrap_or(seg.opts),
            ..*seg
        };
        sk.apply_syn_options(env, &syn_like, false);
        // tcp_synack_options: a signed SYN-ACK gives timestamps up when SACK is on, but not a
        // SYN cookie's, which keeps them to carry the options (measured on 6.18:
        // `md5,mss,nop,nop,sackOK,nop,wscale`, and with tcp_syncookies=2
        // `md5,mss,sackOK,TS,nop,wscale`).
        if opts.is_none() && sk.rx_opt.sack_ok && sk.rx_opt.tstamp_ok && sk.md5_opt_len() != 0 {
            sk.rx_opt.tstamp_ok = false;
            sk.mss.tcp_header_len = 20;
        }
        // tcp_ecn_create_request (RFC 3168 §6.1.1): a not-ECT SYN with ECE|CWR asks for ECN;
        // any tcp_ecn other than 0 accepts.
        sk.ecn_flags = 0;
        if seg.flags & (TcpFlags::ECE | TcpFlags::CWR) == TcpFlags::ECE | TcpFlags::CWR
            && seg.tos & 0x3 == 0
            && env.sysint(crate::sysctl::Sysctl::tcp_ecn) != 0
        {
            sk.ecn_flags = crate::socket::ecnf::OK;
        }
        if let (true, Some((tsval, _))) = (sk.rx_opt.tstamp_ok, syn_like.opts.ts) {
            sk.rx_opt.ts_recent = tsval;
            sk.rx_opt.ts_recent_stamp = now;
        }
        sk.init_rcv_window(env, false);
        sk.snd.wnd = u32::from(seg.window);
        sk.snd.wl1 = seg.seq;
        sk.snd.max_window = sk.snd.wnd;
        sk.state = TcpState::SynRecv;
        sk.hashed = true;
        self.conns.insert((seg.dst, seg.src), cid);
        self.ports.entry(seg.dst.port()).or_default().push(cid);
        Some(cid)
    }

    /// SYN-cookie value (our ISN) for a SYN (`secure_tcp_syn_cookie`): keyed hash of the
    /// 4-tuple, the peer's ISN, a 64-second counter in the top 8 bits and the MSS index.
    pub(super) fn cookie(
        &self,
        local: SocketAddr,
        remote: SocketAddr,
        irs: u32,
        count: u32,
        data: u32,
    ) -> u32 {
        let h1 = self.env.keys.hash4(local, remote, 4) as u32;
        let h2 = (self.env.keys.hash4(local, remote, 5) as u32)
            .wrapping_add(count.wrapping_mul(0x9e37_79b9));
        h1.wrapping_add(irs)
            .wrapping_add(count << 24)
            .wrapping_add(h2.wrapping_add(data) & 0x00ff_ffff)
    }

    /// Answer a SYN with a stateless cookie SYN-ACK (SyncookiesSent).
    pub(super) fn send_cookie_synack(&mut self, now: Instant, lid: SocketId, seg: &SegIn<'_>) {
        let peer_mss = u32::from(seg.opts.mss.unwrap_or(536));
        let idx = SYNCOOKIE_MSS
            .iter()
            .rposition(|&m| m <= peer_mss)
            .unwrap_or(0) as u32;
        let count = (now.as_nanos() / 64_000_000_000) as u32;
        let iss = self.cookie(seg.dst, seg.src, seg.seq, count, idx);
        // Build a throwaway child to render the SYN-ACK exactly as a normal one.
        let mut s2 = SegIn { ..*seg };
        s2.opts.mss = Some(SYNCOOKIE_MSS[idx as usize] as u16);
        let Some(cid) = self.new_child(now, lid, &s2, iss, Some(s2.opts)) else {
            return;
        };
        if let Ok((sk, env)) = self.sk_env(cid) {
            // With timestamps, encode wscale and SACK in the low 6 bits of TSval
            // (cookie_init_timestamp) so they survive.
            if sk.rx_opt.tstamp_ok {
                let mut o = if sk.rx_opt.wscale_ok {
                    u32::from(sk.rx_opt.snd_wscale)
                } else {
                    0xf
                };
                if sk.rx_opt.sack_ok {
                    o |= 1 << 4;
                }
                let ts = sk.tsval(now);
                let want = (ts & !0x3f) | o;
                sk.rx_opt.ts_offset = sk.rx_opt.ts_offset.wrapping_add(want.wrapping_sub(ts));
            }
            sk.send_synack(env, now);
            env.mib.inc(Mib::SyncookiesSent);
        }
        self.free(cid);
    }

    /// Validate the ACK of a cookie SYN-ACK (`cookie_v4_check`); returns the reconstructed
    /// SYN options.
    pub(super) fn cookie_check(&mut self, now: Instant, seg: &SegIn<'_>) -> Option<packet::RxOpts> {
        let cookie = seg.ack.wrapping_sub(1);
        let irs = seg.seq.wrapping_sub(1);
        let h1 = self.env.keys.hash4(seg.dst, seg.src, 4) as u32;
        let c = cookie.wrapping_sub(h1).wrapping_sub(irs);
        let enc = c >> 24;
        let cur = (now.as_nanos() / 64_000_000_000) as u32;
        let age = (cur.wrapping_sub(enc)) & 0xff;
        if age > 2 {
            self.env.mib.inc(Mib::SyncookiesFailed);
            return None;
        }
        let count = cur.wrapping_sub(age);
        let h2 = (self.env.keys.hash4(seg.dst, seg.src, 5) as u32)
            .wrapping_add(count.wrapping_mul(0x9e37_79b9));
        let data = (c.wrapping_sub(count << 24).wrapping_sub(h2)) & 0x00ff_ffff;
        if data as usize >= SYNCOOKIE_MSS.len() {
            self.env.mib.inc(Mib::SyncookiesFailed);
            return None;
        }
        let mut o = packet::RxOpts {
            mss: Some(SYNCOOKIE_MSS[data as usize] as u16),
            ..Default::default()
        };
        if let Some((tsval, tsecr)) = seg.opts.ts {
            o.ts = Some((tsval, 0));
            let bits = tsecr & 0x3f;
            if bits & 0xf != 0xf {
                o.wscale = Some((bits & 0xf) as u8);
            }
            o.sack_ok = bits & (1 << 4) != 0;
        }
        self.env.mib.inc(Mib::SyncookiesRecv);
        Some(o)
    }

    /// A valid cookie ACK: create the child and complete the handshake with this ACK.
    pub(super) fn cookie_accept(
        &mut self,
        now: Instant,
        lid: SocketId,
        seg: &SegIn<'_>,
        opts: packet::RxOpts,
    ) {
        let accq_full = self
            .sock(lid)
            .ok()
            .and_then(|l| l.listen.as_ref())
            .map(|l| l.accept_queue.len() as u32 > l.backlog)
            .unwrap_or(true);
        if accq_full {
            self.env.mib.inc(Mib::ListenOverflows);
            self.env.mib.inc(Mib::ListenDrops);
            return;
        }
        let syn = SegIn {
            seq: seg.seq.wrapping_sub(1),
            flags: TcpFlags::SYN,
            payload: &[],
            ..*seg
        };
        let iss = seg.ack.wrapping_sub(1);
        let Some(cid) = self.new_child(now, lid, &syn, iss, Some(opts)) else {
            return;
        };
        if let Ok(sk) = self.sock_mut(cid) {
            // Keep the timestamp clock continuous with the cookie SYN-ACK's TSval.
            if let (true, Some((_, ecr))) = (sk.rx_opt.tstamp_ok, seg.opts.ts) {
                let ts = sk.tsval(now);
                if after(ecr, ts) {
                    sk.rx_opt.ts_offset = sk.rx_opt.ts_offset.wrapping_add(ecr.wrapping_sub(ts));
                }
            }
            sk.timer.synack_retries_done = 1; // no RTT sample from the SYN-ACK
        }
        self.rcv_conn(now, cid, seg);
    }

    /// ISN per RFC 6528: keyed hash of the 4-tuple plus a 64 ns clock.
    pub(super) fn isn(&self, now: Instant, local: SocketAddr, remote: SocketAddr) -> u32 {
        let h = self.env.keys.hash4(local, remote, 1) as u32;
        h.wrapping_add((now.as_nanos() >> 6) as u32)
    }

    /// Per-connection timestamp offset (Linux `secure_tcp_ts_off`).
    pub(super) fn ts_offset(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        self.env.keys.hash4(local, remote, 2) as u32
    }
}
