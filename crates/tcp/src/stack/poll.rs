//! The engine's outputs and time: transmits, TX completions, timers, wake-ups (the
//! `poll_*`/`handle_*` half of the driving loop in the module docs of [`super`]).

use super::*;

/// **Outputs** (`poll_*`) and the other inputs (`tx_complete`, `handle_timeout`): what the
/// substrate drains after every input, and time.
impl Stack {
    /// Next packet to send, if any.
    pub fn poll_transmit(&mut self, _now: Instant) -> Option<Transmit> {
        self.env.out.txq.pop_front()
    }

    /// TX completion of a data packet (`tcp_wfree`): return its bytes to the socket and, if
    /// TSQ or autocork throttled the socket, push more data (or defer to `release_sock`).
    pub fn tx_complete(&mut self, now: Instant, token: TxToken) {
        self.tick(now);
        let id = SocketId(token.idx);
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        if sk.gen != token.gen {
            return;
        }
        sk.mem.wmem_alloc = sk.mem.wmem_alloc.saturating_sub(token.truesize);
        // The buffer this packet came from (if not yet acked): its copy left the host
        // (a segmented packet's copy left at the cut, TxToken::split).
        let i = if token.segmented {
            usize::MAX
        } else {
            sk.rtx
                .queue
                .partition_point(|s| !after(s.end_seq, token.seq))
        };
        if let Some(s) = sk.rtx.queue.get_mut(i) {
            // A head trimmed by a partial ACK starts after the token's sequence.
            if !before(token.seq, s.seq) || i == 0 {
                s.in_host = s.in_host.saturating_sub(1);
            }
        }
        // The device took a packet that carried a marked byte: its SND timestamp.
        if let Some((key, bytes)) = sk.tstamp.take_snd(token.seq) {
            sk.tstamp_event(env, crate::tstamp::TstampKind::Snd, key, now, bytes);
        }
        // Its copy of zero-copy bytes is gone: their completions may be due.
        if let Some(r) = token.zc {
            sk.zc.put_tx(r);
            sk.zc_complete(env);
        }
        if sk.tsq_flags & tsq::THROTTLED != 0 {
            sk.tsq_flags &= !tsq::THROTTLED;
            if sk.lock.owned {
                sk.tsq_flags |= tsq::TSQ_DEFERRED;
            } else {
                sk.tsq_write(env, now);
            }
        }
        self.reap(id);
    }

    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.env.timers.next_deadline()
    }

    /// Run every timer due at or before `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.tick(now);
        while let Some((at, idx, gen, kind)) = self.env.timers.pop_due(now) {
            let id = SocketId(idx);
            let valid = match self.sock_mut(id) {
                Ok(sk) => sk.gen == gen && sk.timer.fire(kind, at),
                _ => false,
            };
            if valid {
                self.fire(now, id, kind);
                self.reap(id);
            }
        }
    }

    pub(super) fn fire(&mut self, now: Instant, id: SocketId, kind: TimerKind) {
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        match kind {
            TimerKind::Retrans if sk.deferral == Some(crate::socket::Deferral::Waiting) => {
                // A held SYN nobody took in time (stack/forward.rs): forgotten; the client's
                // retransmission brings it back.
                self.free(id);
            }
            TimerKind::Retrans => {
                if sk.lock.owned {
                    sk.tsq_flags |= tsq::WRITE_TIMER_DEFERRED;
                    return;
                }
                let drop_child = sk.write_timer(env, now);
                if drop_child {
                    self.free(id);
                }
            }
            TimerKind::Delack => {
                if sk.lock.owned {
                    env.mib.inc(Mib::DelayedACKLocked);
                    sk.tsq_flags |= tsq::DELACK_TIMER_DEFERRED;
                    return;
                }
                sk.delack_timer(env, now);
            }
            TimerKind::Keepalive => {
                if sk.keepalive_timer(env, now) {
                    self.free(id);
                }
            }
            TimerKind::CompSack => {
                // tcp_compressed_ack_kick
                if sk.lock.owned {
                    sk.tsq_flags |= tsq::DELACK_TIMER_DEFERRED;
                    return;
                }
                sk.sack_compress_send_ack(env, now);
            }
        }
    }

    /// Next wake-up for application waiters.
    pub fn poll_wakeup(&mut self) -> Option<Wakeup> {
        self.env.out.wakeups.pop_front()
    }
}
