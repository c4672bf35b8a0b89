//! TCP Fast Open at the endpoint (RFC 7413; the rules in fastopen.rs): a listener's answer to
//! a SYN with the option or with data (`tcp_try_fastopen`, `tcp_fastopen_create_child`), its
//! Fast Open queue, and the end of a child's handshake.

use super::*;
use crate::fastopen::{self, bits, Cookie, Verdict};

/// TCP Fast Open (internal): the passive side.
impl Stack {
    /// Turn Fast Open on for a new listener without `TCP_FASTOPEN` when the sysctl says so
    /// (`TFO_SERVER_WO_SOCKOPT1`: the queue is as long as the backlog).
    pub(super) fn fastopen_listen(&mut self, s: SocketId, backlog: u32) {
        let tfo = self.env.sysint(Sysctl::tcp_fastopen);
        if tfo & bits::SERVER_WO_SOCKOPT1 == 0 || tfo & bits::SERVER_ENABLE == 0 {
            return;
        }
        let max = self.env.sysint(Sysctl::somaxconn).max(0) as u32;
        let Ok(sk) = self.sock_mut(s) else { return };
        if sk.opts.fastopen_qlen == 0 {
            sk.opts.fastopen_qlen = backlog.min(max);
            self.env.tfo_keys();
        }
    }

    /// The listener's Fast Open decision on a SYN; `None` when Fast Open has nothing to say
    /// (no option, no data, or the SYN is answered by a cookie).
    pub(super) fn fastopen_verdict(
        &mut self,
        now: Instant,
        lid: SocketId,
        seg: &SegIn<'_>,
    ) -> Option<Verdict> {
        if seg.opts.fastopen.is_none() && seg.payload.is_empty() {
            return None;
        }
        let sysctl = self.env.sysint(Sysctl::tcp_fastopen);
        let (own_keys, no_cookie, queue_ok) = {
            let l = self.sock_mut(lid).ok()?;
            let max = l.opts.fastopen_qlen;
            let (own, nc) = (l.opts.fastopen_key, l.opts.fastopen_no_cookie);
            let q = l.listen.as_mut()?;
            // tcp_fastopen_queue_check: a full queue makes room only by forgetting a child
            // reset long enough ago.
            let mut ok = max > 0;
            if ok && q.tfo_qlen >= max {
                match q.tfo_rst.front() {
                    Some(&t) if t <= now => {
                        q.tfo_rst.pop_front();
                        q.tfo_qlen = q.tfo_qlen.saturating_sub(1);
                    }
                    _ => {
                        ok = false;
                        self.env.mib.inc(Mib::TCPFastOpenListenOverflow);
                    }
                }
            }
            (own, nc, ok)
        };
        let keys = match own_keys {
            Some(k) => k,
            None => self.env.tfo_keys(),
        };
        let d = fastopen::decide(&fastopen::Syn {
            cookie: seg.opts.fastopen,
            data: !seg.payload.is_empty(),
            sysctl,
            no_cookie,
            queue_ok,
            keys: &keys,
            src: seg.src.ip(),
            dst: seg.dst.ip(),
        });
        let mib = &mut self.env.mib;
        if d.cookie_reqd {
            mib.inc(Mib::TCPFastOpenCookieReqd);
        }
        if d.passive {
            mib.inc(Mib::TCPFastOpenPassive);
        }
        if d.passive_fail {
            mib.inc(Mib::TCPFastOpenPassiveFail);
        }
        if d.alt_key {
            mib.inc(Mib::TCPFastOpenPassiveAltKey);
        }
        Some(d.verdict)
    }

    /// Make the SYN_RECV child `cid` of listener `lid` a Fast Open child
    /// (`tcp_fastopen_create_child`): it begins its transfer now, takes the SYN's data, goes
    /// straight to the accept queue and answers with a SYN-ACK that acknowledges the data.
    pub(super) fn fastopen_child(
        &mut self,
        now: Instant,
        lid: SocketId,
        cid: SocketId,
        seg: &SegIn<'_>,
        cookie: Option<Cookie>,
    ) {
        let Ok(lgen) = self.sock(lid).map(|l| l.gen) else {
            return;
        };
        let Ok((sk, env)) = self.sk_env(cid) else {
            return;
        };
        sk.fastopen.child = true;
        sk.fastopen.listener = Some((lid, lgen));
        sk.init_transfer(env, now);
        sk.fastopen_add_data(env, now, seg);
        sk.send_synack_with(env, now, cookie.as_ref());
        sk.fastopen.synack_sent = Some(now);
        // The SYN-ACK is the request's, not in the child's queue: data it sends starts
        // after it (`tcp_create_openreq_child`: snd_una = ISN + 1).
        sk.snd.una = sk.snd.iss.wrapping_add(1);
        sk.timer.rtx_event = RtxEvent::Rto;
        sk.rtt.reset_rto();
        sk.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
        env.mib.inc(Mib::PassiveOpens);
        if let Some(q) = self.sock_mut(lid).ok().and_then(|l| l.listen.as_mut()) {
            q.accept_queue.push_back(cid);
            q.tfo_qlen += 1;
        }
        self.env.out.wake(lid, POLLIN | POLLRDNORM);
    }

    /// A Fast Open child leaves SYN_RECV: its place in the listener's queue is given back,
    /// at once when its handshake completed, after [`fastopen::RST_HOLD`] when it was reset
    /// (`reqsk_fastopen_remove`).
    pub(super) fn fastopen_release(&mut self, now: Instant, id: SocketId, reset: bool) {
        let Some((lid, lgen)) = self
            .sock_mut(id)
            .ok()
            .and_then(|s| s.fastopen.listener.take())
        else {
            return;
        };
        let Ok(l) = self.sock_mut(lid) else { return };
        if l.gen != lgen {
            return;
        }
        if let Some(q) = l.listen.as_mut() {
            if reset {
                q.tfo_rst.push_back(now + fastopen::RST_HOLD);
            } else {
                q.tfo_qlen = q.tfo_qlen.saturating_sub(1);
            }
        }
    }
}
