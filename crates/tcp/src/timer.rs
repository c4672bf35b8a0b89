//! Per-connection timers (Linux `tcp_timer.c`): retransmission (with SYN/SYN-ACK
//! retransmits), zero-window probe, delayed ACK, keepalive / FIN_WAIT2 / TIME_WAIT. The
//! engine's timer wheel and its granularity are in `socket.rs` (`Connection::arm`).

use crate::errno::Errno;
use crate::mib::Mib;
use crate::seq::after;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use core::time::Duration;

/// The connection's probing state (`icsk_probes_out`, `icsk_probes_tstamp`), private to this
/// file: zero-window and keepalive probes sent and not answered (reported as `tcpi_probes`;
/// any acceptable ACK clears the count), and when the current run of zero-window probes
/// started (for TCP_USER_TIMEOUT).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Probes {
    out: u32,
    tstamp: Option<Instant>,
}

impl Probes {
    /// Probes sent and not answered (`tcpi_probes`).
    pub fn out(&self) -> u32 {
        self.out
    }

    /// An acceptable ACK arrived: the peer is alive (`tcp_ack` clears `icsk_probes_out`).
    pub fn answered(&mut self) {
        self.out = 0;
    }
}

impl Connection {
    /// Bookkeeping after a SYN or SYN-ACK retransmission (`tcp_retransmit_timer` for the
    /// handshake states): counters, exponential backoff of the RTO up to `tcp_rto_max_ms`, and
    /// the retransmit timer re-armed.
    pub(crate) fn syn_retransmitted(&mut self, env: &mut Env, now: Instant) {
        self.retransmits += 1;
        self.stats.count_retrans(1);
        env.mib.inc(Mib::TCPSynRetrans);
        env.mib.inc(Mib::RetransSegs);
        self.rtt.backoff_rto(self.rto_max(env));
        let at = now + self.rtt.rto();
        self.arm(env, TimerKind::Retrans, at);
    }

    /// Retransmit-timer expiry. Returns true if the socket (a SYN_RECV child) must be freed.
    pub(crate) fn write_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::SynSent => {
                if self.write_timeout(env, now) {
                    return false;
                }
                self.send_syn(env, now);
                self.backoff += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::SynRecv => {
                let max = env.sysint(Sysctl::tcp_synack_retries) as u32;
                if self.parent.is_some() && self.synack_retries_done >= max {
                    return true;
                }
                if self.parent.is_none() && self.write_timeout(env, now) {
                    return false;
                }
                self.send_synack(env, now);
                self.synack_retries_done += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::Close | TcpState::Listen | TcpState::TimeWait => false,
            _ => {
                match self.rtx_event {
                    RtxEvent::Rto => {
                        self.retransmit_timer(env, now);
                    }
                    RtxEvent::LossProbe => self.send_loss_probe(env, now),
                    RtxEvent::ReoTimeout => {
                        self.rack_reo_timeout(env, now);
                        if self.timers[TimerKind::Retrans as usize].is_none() {
                            self.schedule_loss_probe_or_rto(env, now, false);
                        }
                    }
                    RtxEvent::Probe0 => self.probe_timer(env, now),
                }
                false
            }
        }
    }

    /// Zero-window / persist probe timer (`tcp_probe_timer`): with TCP_USER_TIMEOUT the run
    /// of probes ends after that long (counted from the first probe, `icsk_probes_tstamp`),
    /// otherwise after `tcp_retries2` unanswered probes.
    pub(crate) fn probe_timer(&mut self, env: &mut Env, now: Instant) {
        if self.packets_out > 0 || self.write_queue.is_empty() {
            self.probes.out = 0;
            self.probes.tstamp = None;
            return;
        }
        let user_timeout = Duration::from_millis(u64::from(self.opts.user_timeout_ms));
        let timed_out = match self.probes.tstamp {
            None => {
                self.probes.tstamp = Some(now);
                false
            }
            Some(t0) => self.opts.user_timeout_ms != 0 && now - t0 >= user_timeout,
        };
        let max_probes = env.sysint(Sysctl::tcp_retries2) as u32;
        if timed_out || self.probes.out >= max_probes {
            // tcp_write_err
            self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
            env.mib.inc(Mib::TCPAbortOnTimeout);
            self.set_closed(env);
            return;
        }
        // tcp_send_probe0
        let local_drop = self.send_probe0(env, now);
        if self.packets_out > 0 || self.write_queue.is_empty() {
            self.probes.out = 0;
            self.backoff = 0;
            self.probes.tstamp = None;
            return;
        }
        self.probes.out += 1;
        let mut when = if local_drop {
            // Not sent for local congestion: retry at TCP_RESOURCE_PROBE_INTERVAL, no backoff.
            Duration::from_millis(500)
        } else {
            if self.backoff < max_probes {
                self.backoff += 1;
            }
            self.probe0_when()
        };
        when = self.clamp_probe0_to_user_timeout(now, when);
        self.rtx_event = RtxEvent::Probe0;
        self.arm(env, TimerKind::Retrans, now + when);
    }

    /// `tcp_clamp_probe0_to_user_timeout`: with TCP_USER_TIMEOUT, the next zero-window probe
    /// is due no later than the end of the user timeout (counted from the first probe), and
    /// no sooner than `TCP_TIMEOUT_MIN`.
    pub(crate) fn clamp_probe0_to_user_timeout(&self, now: Instant, when: Duration) -> Duration {
        let user_timeout = Duration::from_millis(u64::from(self.opts.user_timeout_ms));
        match (self.opts.user_timeout_ms != 0, self.probes.tstamp) {
            (true, Some(t0)) => {
                when.min(user_timeout.saturating_sub(now - t0).max(TCP_TIMEOUT_MIN))
            }
            _ => when,
        }
    }

    /// `tcp_ack_probe`: an ACK arrived while nothing was in flight and data waits. If the
    /// window now takes the head, probing ends (backoff and the probe clock cleared); if not,
    /// the peer is alive but its window still closed, and the next probe is due a backed-off
    /// interval from this ACK (measured on 6.18: probes answered at 0.70 s and 1.30 s were
    /// followed by the next probe 0.6157 s after the answer, not on the old schedule).
    pub(crate) fn ack_probe(&mut self, env: &mut Env, now: Instant) {
        let Some(head) = self.write_queue.front() else {
            return;
        };
        if !after(head.end_seq, self.snd_wnd_end()) {
            self.backoff = 0;
            self.probes.tstamp = None;
            if self.rtx_event == RtxEvent::Probe0 {
                self.disarm(env, TimerKind::Retrans);
            }
        } else {
            let when = self.clamp_probe0_to_user_timeout(now, self.probe0_when());
            self.rtx_event = RtxEvent::Probe0;
            self.arm(env, TimerKind::Retrans, now + when);
        }
    }

    /// Delayed-ACK timer (`tcp_delack_timer_handler`).
    pub(crate) fn delack_timer(&mut self, env: &mut Env, now: Instant) {
        // tcp_sack_compress_send_ack
        if self.sack_compress_send_ack(env, now) {
            return;
        }
        if self.ack.pending & ackf::TIMER == 0 {
            return;
        }
        if self.ack.pending & ackf::SCHED != 0 {
            if self.ack.pingpong == 0 {
                self.ack.ato = (self.ack.ato * 2).min(self.rtt.rto());
            } else {
                self.ack.pingpong = 0;
                self.ack.ato = TCP_ATO_MIN;
            }
            self.send_ack(env, now);
            env.mib.inc(Mib::DelayedACKs);
        }
        self.ack.pending &= !ackf::TIMER;
    }

    /// The idle time before the first keepalive probe (`keepalive_time_when`):
    /// TCP_KEEPIDLE, else `tcp_keepalive_time`.
    pub(crate) fn keepalive_time(&self, env: &Env) -> Duration {
        let s = self
            .opts
            .keepidle
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_time) as u32);
        Duration::from_secs(u64::from(s))
    }

    /// The time between keepalive probes (`keepalive_intvl_when`): TCP_KEEPINTVL, else
    /// `tcp_keepalive_intvl`.
    pub(crate) fn keepalive_intvl(&self, env: &Env) -> Duration {
        let s = self
            .opts
            .keepintvl
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_intvl) as u32);
        Duration::from_secs(u64::from(s))
    }

    /// Unanswered keepalive probes before the connection is dropped (`keepalive_probes`):
    /// TCP_KEEPCNT, else `tcp_keepalive_probes`.
    pub(crate) fn keepalive_probes(&self, env: &Env) -> u32 {
        self.opts
            .keepcnt
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_probes) as u32)
    }

    /// Time since the peer was last heard from (`keepalive_time_elapsed`: the later of the
    /// last received segment and the last ACK).
    pub(crate) fn keepalive_time_elapsed(&self, now: Instant) -> Duration {
        now - self.rcv_tstamp.max(self.lrcvtime)
    }

    /// Keepalive / FIN_WAIT2 / TIME_WAIT timer. Returns true if the socket must be freed.
    pub(crate) fn keepalive_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::TimeWait => {
                self.state = TcpState::Close;
                self.orphan
            }
            TcpState::FinWait2 if self.orphan => {
                self.set_closed(env);
                true
            }
            // tcp_keepalive_timer: keepalive runs in every state but CLOSE, LISTEN and
            // SYN_SENT; its probes count in icsk_probes_out (`tcpi_probes`), which any
            // acceptable ACK clears (tcp_ack).
            TcpState::Close | TcpState::Listen | TcpState::SynSent => false,
            _ if self.opts.keepalive => {
                if self.packets_out > 0 || !self.write_queue.is_empty() {
                    let idle = self.keepalive_time(env);
                    self.arm(env, TimerKind::Keepalive, now + idle);
                    return false;
                }
                let elapsed = self.keepalive_time_elapsed(now);
                let idle = self.keepalive_time(env);
                if elapsed < idle {
                    // Something arrived since: the next probe is due an idle time after it.
                    self.arm(env, TimerKind::Keepalive, now + (idle - elapsed));
                    return false;
                }
                // With TCP_USER_TIMEOUT, that bounds the silence instead of the probe count.
                let user_timeout = u64::from(self.opts.user_timeout_ms);
                let timed_out = if user_timeout != 0 {
                    elapsed >= Duration::from_millis(user_timeout) && self.probes.out > 0
                } else {
                    self.probes.out >= self.keepalive_probes(env)
                };
                if timed_out {
                    self.send_active_reset(env, now);
                    // tcp_write_err
                    self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
                    env.mib.inc(Mib::TCPAbortOnTimeout);
                    self.set_closed(env);
                    return false;
                }
                self.send_probe_keepalive(env, now);
                self.probes.out += 1;
                let intvl = self.keepalive_intvl(env);
                self.arm(env, TimerKind::Keepalive, now + intvl);
                false
            }
            _ => false,
        }
    }

    /// The keepalive probe (`tcp_write_wakeup` with nothing to send: `tcp_xmit_probe_skb`).
    pub(crate) fn send_probe_keepalive(&mut self, env: &mut Env, now: Instant) {
        self.xmit_probe_skb(env, now, Mib::TCPKeepAlive);
    }
}
