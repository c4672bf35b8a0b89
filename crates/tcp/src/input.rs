//! Input path of an existing connection (RFC 9293 §3.10.7; Linux `tcp_rcv_state_process`,
//! `tcp_rcv_synsent_state_process`, `tcp_ack`, `tcp_data_queue`, `tcp_event_data_recv`,
//! `__tcp_ack_snd_check`).

use crate::env::Env;
use crate::errno::Errno;
use crate::packet::SegIn;
use crate::seq::*;
use crate::socket::pollbits::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::timer::{RtxEvent, TimerKind};
use crate::Mib;
use core::time::Duration;
use shallow_cc::{AckSample, CaState};
use shallow_wire::TcpFlags;

/// What the stack must do after a socket processed a segment.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct RcvOutcome {
    /// The socket reached CLOSE and should be unhashed (and freed if orphaned).
    pub closed: bool,
    /// A passive child just became ESTABLISHED (move to the accept queue).
    pub child_established: bool,
    /// Answer with a RST for this segment (as if no socket matched).
    pub reset: bool,
}

/// What one incoming ACK did, gathered while `tcp_ack` processes it and read further down
/// the same ACK's processing (Linux's `flag` word and `rexmit` of `tcp_ack`): a value of that
/// one call, passed to what sets or reads it, never kept in the socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AckFlags {
    /// Data never retransmitted was acked or SACKed (`FLAG_ORIG_SACK_ACKED`).
    pub orig_sack_acked: bool,
    /// New data was SACKed (`FLAG_DATA_SACKED`).
    pub data_sacked: bool,
    /// An ECN echo on an ECN connection (`FLAG_ECE`).
    pub ece: bool,
    /// The ACK carried a D-SACK block (`FLAG_DSACKING_ACK`).
    pub dsack: bool,
    /// The ACK may update the send window (`FLAG_WIN_UPDATE`: it acks new data, or is newer
    /// than the last window update).
    pub win_update: bool,
    /// What `tcp_xmit_recovery` sends once this ACK has updated cwnd.
    pub rexmit: Rexmit,
    /// After this ACK, the first unacknowledged skb is one the receiver had SACKed
    /// (`FLAG_SACK_RENEGING`, set by `tcp_clean_rtx_queue`).
    pub sack_reneging: bool,
    /// The ACK's processing armed the retransmit timer itself, so it is not restarted at
    /// the end (`tcp_check_sack_reneging` clears `FLAG_SET_XMIT_TIMER`).
    pub xmit_timer_set: bool,
    /// Send times of the oldest and newest never-retransmitted skbs this ACK newly SACKed
    /// (`first_sackt`, `last_sackt` of Linux's `tcp_sacktag_state`): the SACK RTT sample.
    pub sackt: Option<(Instant, Instant)>,
}

/// The verdict on a segment that failed PAWS ([`Connection::disordered_ack_check`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Paws {
    /// A reordered duplicate ACK: processed.
    Accept,
    /// An old pure ACK: dropped silently (`TcpExtPAWSOldAck`).
    OldAck,
    /// Dropped with a rate-limited duplicate ACK (`TcpExtPAWSEstab`).
    Reject,
}

/// `tcp_xmit_recovery`'s work after an ACK (Linux's `REXMIT_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Rexmit {
    /// Nothing (`REXMIT_NONE`).
    #[default]
    None,
    /// Retransmit the segments marked lost (`REXMIT_LOST`, the Loss state).
    Lost,
    /// F-RTO step 2.b: send new data instead of retransmitting (`REXMIT_NEW`).
    New,
}

/// SACK compression's state (Linux's `tp->compressed_ack`, `compressed_ack_rcv_nxt`,
/// `dup_ack_counter`), private to this file: while out-of-order data keeps arriving, the
/// first three duplicate ACKs for one `rcv_nxt` leave at once and the following ones are
/// counted and replaced by one ACK from the compressed-SACK timer.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SackCompress {
    /// ACKs saved so far.
    compressed: u32,
    /// The `rcv_nxt` of the current run of duplicate ACKs.
    rcv_nxt: u32,
    /// Duplicate ACKs sent at once for it.
    dup_acks: u8,
}

impl SackCompress {
    /// An ACK left: the saved ones are accounted for (`TCPAckCompressed`) and forgotten.
    /// Returns how many there were.
    pub fn take(&mut self) -> u32 {
        core::mem::take(&mut self.compressed)
    }
}

impl Connection {
    /// `tcp_sack_compress_send_ack`: if ACKs were saved by SACK compression, one is sent
    /// now (the timer's ACK, or the delayed-ACK timer's in its place). Returns whether it was.
    pub(crate) fn sack_compress_send_ack(&mut self, env: &mut Env, now: Instant) -> bool {
        if self.sack_compress.compressed == 0 {
            return false;
        }
        self.sack_compress.compressed -= 1;
        self.send_ack(env, now);
        true
    }

    /// Process one segment for this socket (not a listener).
    pub fn rcv(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>) -> RcvOutcome {
        let out = self.rcv_segment(env, now, seg);
        // An ACK (or a reset) may have released zero-copy bytes.
        if !self.zc.is_idle() {
            self.zc_complete(env);
        }
        out
    }

    fn rcv_segment(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>) -> RcvOutcome {
        let mut out = RcvOutcome::default();
        self.stats.count_segs_in(seg.gso_segs);
        match self.state {
            TcpState::Close | TcpState::Listen => {
                out.reset = !seg.has(TcpFlags::RST);
                return out;
            }
            TcpState::SynSent => {
                self.rcv_synsent(env, now, seg, &mut out);
                return out;
            }
            TcpState::TimeWait => {
                self.rcv_timewait(env, now, seg, &mut out);
                return out;
            }
            _ => {}
        }
        // PAWS (RFC 7323 §5; tcp_validate_incoming).
        if let (true, Some((tsval, _))) = (self.rx_opt.tstamp_ok, seg.opts.ts) {
            if !self.paws_check(now, tsval, 1) && !seg.has(TcpFlags::RST) {
                match self.disordered_ack_check(seg, tsval) {
                    Paws::Accept => {}
                    _ if seg.has(TcpFlags::SYN) => {
                        env.mib.inc(Mib::TCPSYNChallenge);
                        self.send_challenge_ack(env, now);
                        return out;
                    }
                    Paws::OldAck => {
                        env.mib.inc(Mib::PAWSOldAck);
                        return out;
                    }
                    Paws::Reject => {
                        env.mib.inc(Mib::PAWSEstab);
                        if !self.oow_rate_limited(env, now, seg, Mib::TCPACKSkippedPAWS) {
                            self.send_dupack(env, now, seg);
                        }
                        return out;
                    }
                }
            }
        }
        // Sequence acceptability (tcp_sequence).
        let end = seg.end_seq();
        let win_end = self.rcv.nxt.wrapping_add(self.receive_window());
        let acceptable = !before(end, self.rcv.wup) && !after(seg.seq, win_end);
        if !acceptable {
            if seg.has(TcpFlags::RST) {
                return out;
            }
            if after(seg.seq, win_end) {
                env.mib.inc(Mib::BeyondWindow);
            }
            if self.state == TcpState::SynRecv && seg.has(TcpFlags::SYN) {
                // retransmitted SYN: re-send SYN-ACK (handled by rcv_synrecv_syn)
                self.send_synack(env, now);
                return out;
            }
            // tcp_validate_incoming: the duplicate ACK for an unacceptable segment is
            // rate-limited, as the ACK of a pure ACK could loop (measured on 6.18, fuzz seed
            // 80036: an out-of-window pure ACK 140 ms after the last one answered goes
            // unanswered; one carrying data is always answered).
            if !self.oow_rate_limited(env, now, seg, Mib::TCPACKSkippedSeq) {
                self.send_dupack(env, now, seg);
            }
            return out;
        }
        // RST (RFC 5961 §3.2).
        if seg.has(TcpFlags::RST) {
            if seg.seq == self.rcv.nxt || (self.state == TcpState::SynRecv) {
                self.reset_received(env, now);
                out.closed = true;
            } else {
                self.send_challenge_ack(env, now);
            }
            return out;
        }
        // SYN in a synchronized state (RFC 5961 §4).
        // Simultaneous open: a SYN-ACK acking our SYN completes SYN_RECV (tcp_validate_incoming).
        let simopen_synack = self.state == TcpState::SynRecv
            && seg.has(TcpFlags::SYN)
            && seg.has(TcpFlags::ACK)
            && seg.seq.wrapping_add(1) == self.rcv.nxt
            && seg.ack == self.snd.nxt;
        if seg.has(TcpFlags::SYN) && !simopen_synack {
            if self.state == TcpState::SynRecv && seg.seq == self.rcv.irs {
                self.send_synack(env, now);
                return out;
            }
            env.mib.inc(Mib::TCPSYNChallenge);
            self.send_challenge_ack(env, now);
            return out;
        }
        if !seg.has(TcpFlags::ACK) {
            return out;
        }
        // ACK processing.
        if self.state == TcpState::SynRecv {
            // A Fast Open child (tcp_rcv_state_process TCP_SYN_RECV with fastopen_rsk) has no
            // SYN-ACK in its queue (snd_una is past it already): any ACK from snd_una to
            // snd_nxt completes the handshake, and tcp_ack takes what it acknowledges of the
            // data sent since. Otherwise the ACK must cover the SYN-ACK.
            let tfo = self.fastopen.child;
            let lowest = if tfo {
                self.snd.una
            } else {
                self.snd.una.wrapping_add(1)
            };
            if before(seg.ack, lowest) || after(seg.ack, self.snd.nxt) {
                out.reset = true;
                return out;
            }
            if !tfo {
                // The handshake acknowledges the SYN; data sent with it (a simultaneous open
                // under Fast Open) is tcp_ack's below.
                let syn_end = self.snd.iss.wrapping_add(1);
                self.snd.una = if after(seg.ack, syn_end) && !self.rtx.queue.is_empty() {
                    syn_end
                } else {
                    seg.ack
                };
            }
            self.snd.wnd = u32::from(seg.window) << self.rx_opt.snd_wscale;
            self.snd.wl1 = seg.seq;
            self.snd.max_window = self.snd.max_window.max(self.snd.wnd);
            self.disarm(env, TimerKind::Retrans);
            self.timer.retransmits = 0;
            self.timer.backoff = 0;
            // tcp_synack_rtt_meas: the SYN-ACK's own send time gives a µs sample unless it
            // was retransmitted (Karn); then only the timestamp echo can (tcp_ack_update_rtt).
            // A Fast Open child may have sent data since its SYN-ACK: that send time is kept.
            let synack_sent = if tfo {
                self.timer.retrans_stamp = None;
                self.rtx.delivered += 1;
                self.fastopen.synack_sent.take()
            } else {
                Some(self.lsndtime)
            };
            if let Some(t) = synack_sent {
                if self.timer.synack_retries_done == 0 {
                    let rtt = (now - t).as_micros() as u32;
                    self.rtt_sample(env, now, rtt.max(1));
                } else if let Some(rtt) = self.ts_echo_rtt_us(now, seg) {
                    self.rtt_sample(env, now, rtt as u32);
                }
            }
            self.become_established(env, now);
            // tcp_rcv_state_process (TCP_SYN_RECV): the pacing rate starts from the SYN-ACK
            // RTT sample and the initial cwnd, before any data is sent.
            self.update_pacing_rate(env);
            out.child_established = true;
        }
        let ack_ok = self.tcp_ack(env, now, seg);
        if !ack_ok {
            return out;
        }
        if simopen_synack {
            // The peer's SYN again: a duplicate for tcp_data_queue (D-SACK, immediate ACK).
            self.data_queue(env, now, seg);
        }
        // tcp_replace_ts_recent (FLAG_UPDATE_TS_RECENT): only once the ACK was validated
        // (packetdrill ts_recent/invalid_ack.pkt), for segments covering rcv_wup.
        if let (true, Some((tsval, _))) = (self.rx_opt.tstamp_ok, seg.opts.ts) {
            if !after(seg.seq, self.rcv.wup) && self.paws_check(now, tsval, 0) {
                self.rx_opt.ts_recent = tsval;
                self.rx_opt.ts_recent_stamp = now;
            }
        }
        // FIN acknowledgements (RFC 9293 §3.10.7.4 "fifth, check the ACK field").
        let fin_acked = self.snd.una == self.snd.write_seq && self.fin_queued();
        match self.state {
            TcpState::FinWait1 if fin_acked => {
                self.state = TcpState::FinWait2;
                self.shutdown |= SEND_SHUTDOWN;
                env.out.wake(self.id, POLLOUT | POLLIN | POLLHUP);
                if self.orphan {
                    let t = self.fin_timeout(env);
                    self.arm(env, TimerKind::Keepalive, now + t);
                }
            }
            TcpState::Closing if fin_acked => {
                self.enter_time_wait(env, now);
                return out;
            }
            TcpState::LastAck if fin_acked => {
                self.set_closed(env);
                out.closed = true;
                return out;
            }
            _ => {}
        }
        // RFC 1122 §4.2.2.13 / tcp_rcv_state_process step 7: new data for a socket that shut
        // down reading in FIN_WAIT1/2 → reset (TCPAbortOnData), answered from the segment.
        if matches!(self.state, TcpState::FinWait1 | TcpState::FinWait2)
            && self.shutdown & RCV_SHUTDOWN != 0
            && !seg.payload.is_empty()
            && after(seg.seq.wrapping_add(seg.payload.len() as u32), self.rcv.nxt)
        {
            env.mib.inc(Mib::TCPAbortOnData);
            self.err = Some(Errno::ECONNRESET);
            self.set_closed(env);
            out.closed = true;
            out.reset = true;
            return out;
        }
        // tcp_urg (step 6, "check the URG bit").
        if seg.has(TcpFlags::URG) || self.urg.state == crate::urg::UrgState::NotYet {
            let urg = seg.has(TcpFlags::URG).then_some(seg.urg_ptr);
            self.urg_rcv(env, seg.seq, seg.has(TcpFlags::SYN), urg, seg.payload);
        }
        // Data and FIN.
        if !seg.payload.is_empty() || seg.has(TcpFlags::FIN) {
            match self.state {
                TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2 => {
                    self.data_queue(env, now, seg);
                }
                // Data after the peer's FIN: ignore (RFC 9293), but ACK if it's new.
                TcpState::CloseWait | TcpState::Closing | TcpState::LastAck
                    if after(seg.end_seq(), self.rcv.nxt) =>
                {
                    self.send_ack(env, now);
                }
                // A duplicate (its FIN included) still goes through tcp_data_queue after the
                // peer's FIN (tcp_rcv_state_process: seq below rcv_nxt falls through): D-SACK
                // and an immediate ACK.
                TcpState::CloseWait | TcpState::Closing | TcpState::LastAck
                    if before(seg.seq, self.rcv.nxt) =>
                {
                    self.data_queue(env, now, seg);
                }
                _ => {}
            }
        }
        if self.state == TcpState::TimeWait || self.state == TcpState::Close {
            out.closed = self.state == TcpState::Close;
            return out;
        }
        // tcp_data_snd_check + tcp_ack_snd_check.
        let ng = self.nonagle();
        self.push_pending_frames(env, now, ng);
        self.check_space(env, now);
        self.ack_snd_check(env, now);
        out
    }

    /// True if the last skb queued carries FIN (we sent or will send FIN).
    fn fin_queued(&self) -> bool {
        self.shutdown & SEND_SHUTDOWN != 0
            || matches!(
                self.state,
                TcpState::FinWait1 | TcpState::Closing | TcpState::LastAck
            )
    }

    pub fn fin_timeout(&self, env: &Env) -> Duration {
        Duration::from_secs(env.sysint(Sysctl::tcp_fin_timeout).max(1) as u64)
    }

    /// `tcp_done`-like: move to CLOSE, stop timers, wake everyone.
    pub fn set_closed(&mut self, env: &mut Env) {
        if matches!(self.state, TcpState::Established | TcpState::CloseWait) {
            env.mib.sub(Mib::CurrEstab, 1);
        }
        self.state = TcpState::Close;
        self.shutdown = RCV_SHUTDOWN | SEND_SHUTDOWN;
        self.disarm_all(env);
        // tcp_write_queue_purge: zero-copy bytes no copy in the host holds are released.
        self.zc_complete(env);
        env.out
            .wake(self.id, POLLIN | POLLOUT | POLLERR | POLLHUP | POLLRDHUP);
    }

    /// `tcp_reset`: the peer reset the connection.
    pub fn reset_received(&mut self, env: &mut Env, _now: Instant) {
        self.err = Some(match self.state {
            TcpState::SynSent => Errno::ECONNREFUSED,
            TcpState::CloseWait => Errno::EPIPE,
            TcpState::Close => return,
            _ => Errno::ECONNRESET,
        });
        if matches!(self.state, TcpState::Established | TcpState::CloseWait) {
            env.mib.inc(Mib::EstabResets);
        }
        self.set_closed(env);
    }

    /// Enter TIME_WAIT for 60 s (`tcp_time_wait`).
    pub fn enter_time_wait(&mut self, env: &mut Env, now: Instant) {
        if matches!(self.state, TcpState::Established | TcpState::CloseWait) {
            env.mib.sub(Mib::CurrEstab, 1);
        }
        self.state = TcpState::TimeWait;
        self.shutdown = RCV_SHUTDOWN | SEND_SHUTDOWN;
        self.disarm_all(env);
        self.arm(env, TimerKind::Keepalive, now + TCP_TIMEWAIT_LEN);
        env.mib.inc(Mib::TW);
        env.out
            .wake(self.id, POLLIN | POLLOUT | POLLHUP | POLLRDHUP);
    }

    fn rcv_timewait(
        &mut self,
        env: &mut Env,
        now: Instant,
        seg: &SegIn<'_>,
        _out: &mut RcvOutcome,
    ) {
        // tcp_timewait_state_process: retransmitted FIN → re-ACK and restart the timer.
        if seg.has(TcpFlags::RST) {
            return;
        }
        if seg.has(TcpFlags::FIN) && seg.end_seq() == self.rcv.nxt {
            self.arm(env, TimerKind::Keepalive, now + TCP_TIMEWAIT_LEN);
        }
        if seg.has(TcpFlags::SYN) && !seg.has(TcpFlags::ACK) {
            return; // no TW recycling: ignore new SYNs while in TIME_WAIT
        }
        self.send_ack(env, now);
    }

    /// `become_established`: state change, counters, CC init, buffers.
    pub fn become_established(&mut self, env: &mut Env, now: Instant) {
        self.state = TcpState::Established;
        // With timestamps every segment carries 12 bytes of options, so the MSS we
        // advertised (the SYN's or SYN-ACK's option) loses them from here on: advmss is the
        // receive window's growth step and bounds the receive MSS estimate (measured on
        // 6.18: tcpi_advmss 1448 after active and passive opens with timestamps; kernel
        // recording active-ts-advmss.pkt, fuzz seed 210065's immediate ACK of 1460 bytes).
        if self.rx_opt.tstamp_ok {
            self.mss.advmss = self.mss.advmss.saturating_sub(12);
        }
        env.mib.inc(Mib::CurrEstab);
        self.lrcvtime = now;
        self.rcv_tstamp = now;
        // A Fast Open child began its transfer when it was made (stack/fastopen.rs).
        if !self.fastopen.child {
            self.init_transfer(env, now);
        }
        // tcp_initialize_rcv_mss: a conservative hint until data shows the peer's size.
        self.ack.rcv_mss = self
            .mss
            .advmss
            .min(self.mss.cache)
            .min(self.rcv.wnd / 2)
            .clamp(TCP_MIN_MSS, TCP_MSS_DEFAULT);

        if self.opts.keepalive {
            let idle = self.keepalive_time(env);
            self.arm(env, TimerKind::Keepalive, now + idle);
        }
        env.out.wake(self.id, POLLOUT | POLLWRNORM | POLLIN);
    }

    /// `tcp_init_transfer`: what a connection sets up when its handshake is done (on a Fast
    /// Open child, when it is made): the MSS and MTU probing, the initial cwnd and the
    /// congestion control, the buffers and the receive window's clamp.
    pub fn init_transfer(&mut self, env: &mut Env, now: Instant) {
        self.sync_mss(env);
        // tcp_init_transfer → tcp_mtup_init (after the MSS was synced).
        self.mtup_init(env, now);
        self.cc_st.snd_cwnd = self.init_cwnd();
        self.cwnd_use.restamp(now);
        self.cc_st.snd_nxt = self.snd.nxt;
        self.cc_st.snd_una = self.snd.una;
        let now_us = now.as_micros();
        self.cc.init(&mut self.cc_st, now_us);
        // tcp_init_buffer_space
        if !self.opts.sndbuf_lock {
            self.sndbuf_expand(env);
        }
        let maxwin = self.full_space(env).max(0) as u32;
        if self.rcv.window_clamp >= maxwin {
            self.rcv.window_clamp = maxwin;
        }
        // Force reservation of one segment (tcp_app_win).
        if env.sysint(Sysctl::tcp_app_win) != 0
            && self.rcv.window_clamp > 2 * self.mss.advmss
            && self.rcv.window_clamp + self.mss.advmss > maxwin
        {
            self.rcv.window_clamp =
                (2 * self.mss.advmss).max(maxwin.saturating_sub(self.mss.advmss));
        }
        self.rcv.ssthresh = self.rcv.ssthresh.min(self.rcv.window_clamp);
        self.init_rcvq_space(now);
    }

    /// `tcp_fastopen_add_skb`: the data (and FIN) of the SYN a Fast Open child was made from,
    /// queued as it came; the SYN-ACK acknowledges it.
    pub fn fastopen_add_data(&mut self, env: &mut Env, now: Instant, syn: &SegIn<'_>) {
        let seg = SegIn {
            seq: syn.seq.wrapping_add(1),
            flags: syn.flags & !TcpFlags::SYN,
            ..*syn
        };
        let fin = seg.has(TcpFlags::FIN);
        if seg.payload.is_empty() && !fin {
            return;
        }
        let truesize = self.rx_truesize(env, &seg, seg.payload.len() as u32);
        self.queue_rcv(env, now, seg.seq, seg.payload, fin, &seg, truesize);
        self.fastopen.syn_data_acked = true;
        if fin {
            self.process_fin(env, now);
        }
        env.out.wake(self.id, POLLIN | POLLRDNORM);
    }

    /// SYN_SENT processing (`tcp_rcv_synsent_state_process`, RFC 9293 §3.10.7.3).
    fn rcv_synsent(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>, out: &mut RcvOutcome) {
        if seg.has(TcpFlags::ACK) && (!after(seg.ack, self.snd.iss) || after(seg.ack, self.snd.nxt))
        {
            if !seg.has(TcpFlags::RST) {
                out.reset = true;
            }
            return;
        }
        if seg.has(TcpFlags::RST) {
            if seg.has(TcpFlags::ACK) {
                self.reset_received(env, now);
                env.mib.inc(Mib::AttemptFails);
                out.closed = true;
            }
            return;
        }
        if !seg.has(TcpFlags::SYN) {
            return;
        }
        // A SYN-ACK whose TSecr echoes no TSval of our SYNs is refused with a reset, and the
        // connection keeps waiting (tcp_rcv_synsent_state_process, PAWSActiveRejected).
        if let (true, Some((_, ecr)), Some(t0)) = (
            seg.has(TcpFlags::ACK) && self.rx_opt.tstamp_ok,
            seg.opts.ts,
            self.timer.retrans_stamp,
        ) {
            if ecr != 0 && !between(ecr, self.tsval(t0), self.tsval(now)) {
                env.mib.inc(Mib::PAWSActive);
                out.reset = true;
                return;
            }
        }
        self.rcv.irs = seg.seq;
        self.rcv.nxt = seg.seq.wrapping_add(1);
        self.rcv.wup = self.rcv.nxt;
        self.rcv.copied_seq = self.rcv.nxt;
        self.apply_syn_options(env, seg, true);
        // tcp_ecn_rcv_synack (RFC 3168 §6.1.1): ECN is on only if the SYN-ACK has ECE
        // without CWR.
        if seg.has(TcpFlags::ACK) && (!seg.has(TcpFlags::ECE) || seg.has(TcpFlags::CWR)) {
            self.ecn_flags &= !crate::socket::ecnf::OK;
        }
        if let Some((tsval, _)) = seg.opts.ts {
            if self.rx_opt.tstamp_ok {
                self.rx_opt.ts_recent = tsval;
                self.rx_opt.ts_recent_stamp = now;
            }
        }
        if seg.has(TcpFlags::ACK) {
            // With data behind the SYN (Fast Open), the SYN-ACK acknowledges the SYN here and
            // tcp_ack below takes what it acknowledges of the data.
            let syn_data = self.fastopen.syn_data;
            let syn_end = self.snd.iss.wrapping_add(1);
            let acked_to = if syn_data { syn_end } else { seg.ack };
            // tcp_ack → tcp_snd_una_update: the acked SYN counts in tcpi_bytes_acked, and
            // as one delivered packet (tcp_clean_rtx_queue).
            self.stats
                .count_acked(u64::from(acked_to.wrapping_sub(self.snd.una)));
            self.rtx.delivered += 1;
            env.mib.inc(Mib::TCPDelivered);
            self.snd.una = acked_to;
            // RFC 7323 §2.2: the window of a SYN (or SYN-ACK) is never scaled
            // (tcp_rcv_synsent_state_process).
            self.snd.wnd = u32::from(seg.window);
            self.snd.wl1 = seg.seq;
            self.snd.max_window = self.snd.wnd;
            self.disarm(env, TimerKind::Retrans);
            if !syn_data {
                self.rtx.packets_out = 0;
            }
            // RTT from the SYN (tcp_clean_rtx_queue → tcp_ack_update_rtt): its send time
            // unless it was retransmitted (Karn), else the timestamp echo. SYN data the
            // SYN-ACK covers gives that sample in tcp_ack.
            let data_acked = syn_data && after(seg.ack, syn_end);
            // Karn: no sample from a SYN that was sent again (by the timer, or at once after
            // an ICMP error under Fast Open).
            if self.timer.retransmits == 0 && self.stats.total_retrans() == 0 {
                let rtt = (now - self.lsndtime).as_micros() as u32;
                self.rtt_sample(env, now, rtt.max(1));
            } else if let Some(rtt) = self.ts_echo_rtt_us(now, seg) {
                self.rtt_sample(env, now, rtt as u32);
            }
            self.timer.retransmits = 0;
            self.timer.backoff = 0;
            self.timer.retrans_stamp = None;
            self.become_established(env, now);
            if data_acked {
                // Linux's tcp_ack runs before tcp_finish_connect sets the initial cwnd, so
                // the data the SYN-ACK covers does not grow it.
                // One RTT sample for the SYN and its data, the SYN's (above).
                let cwnd = self.cc_st.snd_cwnd;
                self.rtx.syn_acked_sampled = true;
                self.tcp_ack(env, now, seg);
                self.rtx.syn_acked_sampled = false;
                self.cc_st.snd_cwnd = cwnd;
            }
            // The SYN was outstanding: tcp_ack's tcp_cong_control sets the pacing rate.
            self.update_pacing_rate(env);
            self.connecting = false;
            // tcp_finish_connect: the SYN-ACK is the last segment received.
            self.ack.lrcvtime = now;
            let resent =
                (self.fastopen.syn_fastopen || syn_data) && self.rcv_fastopen_synack(env, now, seg);
            let writer = std::mem::take(&mut self.write_pending);
            if !resent {
                if writer {
                    // A writer waits: save the ACK for its data, in quickack mode, at most
                    // TCP_DELACK_MAX from now.
                    self.ack.pending |= ackf::SCHED;
                    self.enter_quickack(TCP_MAX_QUICKACKS);
                    self.arm(env, TimerKind::Delack, now + TCP_DELACK_MAX);
                } else {
                    self.send_ack(env, now);
                }
            }
            // Data or FIN on the SYN-ACK (under Fast Open, rcv_fastopen_synack took it).
            let tfo = self.fastopen.syn_fastopen || syn_data;
            if !tfo && (!seg.payload.is_empty() || seg.has(TcpFlags::FIN)) {
                let s2 = SegIn {
                    seq: seg.seq.wrapping_add(1),
                    flags: seg.flags & !TcpFlags::SYN,
                    ..*seg
                };
                self.data_queue(env, now, &s2);
                self.ack_snd_check(env, now);
            }
            let ng = self.nonagle();
            self.push_pending_frames(env, now, ng);
        } else {
            // Simultaneous open (RFC 9293 §3.5 figure 8).
            self.state = TcpState::SynRecv;
            self.snd.wnd = u32::from(seg.window);
            self.snd.max_window = self.snd.wnd;
            // tcp_send_synack: from the connection itself, so it counts.
            self.send_synack(env, now);
            self.stats.count_seg_out();
        }
    }

    /// Negotiate SYN options from a peer's SYN or SYN-ACK (`tcp_parse_options` +
    /// `tcp_openreq_init` / synsent handling). `active`: we sent the SYN with our options.
    pub fn apply_syn_options(&mut self, env: &Env, seg: &SegIn<'_>, active: bool) {
        let o = &seg.opts;
        let want_ts = env.sysint(Sysctl::tcp_timestamps) != 0;
        let want_sack = env.config.sysctl.on(Sysctl::tcp_sack);
        let want_ws = env.config.sysctl.on(Sysctl::tcp_window_scaling);
        let _ = active;
        self.rx_opt.tstamp_ok = want_ts && o.ts.is_some();
        self.rx_opt.sack_ok = want_sack && o.sack_ok;
        self.rx_opt.dsack_ok = self.rx_opt.sack_ok && env.config.sysctl.on(Sysctl::tcp_dsack);
        if want_ws && o.wscale.is_some() {
            self.rx_opt.wscale_ok = true;
            self.rx_opt.snd_wscale = o.wscale.unwrap_or(0).min(14);
        } else {
            self.rx_opt.wscale_ok = false;
            self.rx_opt.snd_wscale = 0;
            self.rx_opt.rcv_wscale = 0;
            self.rcv.window_clamp = self.rcv.window_clamp.min(65535);
        }
        let peer_mss = u32::from(o.mss.unwrap_or(TCP_MSS_DEFAULT as u16));
        let min_mss = env.sysint(Sysctl::tcp_min_snd_mss) as u32;
        self.rx_opt.mss_clamp = peer_mss.max(min_mss);
        if self.opts.user_mss != 0 {
            self.rx_opt.mss_clamp = self.rx_opt.mss_clamp.min(self.opts.user_mss);
        }
        // A TCP-MD5 signature is not counted in: `current_mss` takes it off per segment
        // (measured on 6.18: a keyed connection's two ends report `tcpi_snd_mss` 1460 on a
        // 1500-byte MTU and carry 1440 bytes per segment).
        self.mss.tcp_header_len = if self.rx_opt.tstamp_ok { 32 } else { 20 };
    }

    /// Send an ACK for an unacceptable segment (`tcp_send_dupack`): old data gets a D-SACK
    /// and quickack.
    fn send_dupack(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>) {
        let end = seg.end_seq();
        if end != seg.seq && before(seg.seq, self.rcv.nxt) {
            env.mib.inc(Mib::DelayedACKLost);
            self.enter_quickack(TCP_MAX_QUICKACKS);
            if self.rx_opt.dsack_ok {
                let r = if after(end, self.rcv.nxt) {
                    self.rcv.nxt
                } else {
                    end
                };
                self.rcv.dsack = Some((seg.seq, r));
                env.mib.inc(Mib::TCPDSACKOldSent);
            }
        }
        self.send_ack(env, now);
    }

    /// RFC 5961 challenge ACK, rate-limited per socket by `tcp_invalid_ratelimit` and globally
    /// by `tcp_challenge_ack_limit` (`tcp_send_challenge_ack`).
    pub fn send_challenge_ack(&mut self, env: &mut Env, now: Instant) {
        if self.oow_ack_limited(env, now, Mib::TCPACKSkippedChallenge) {
            return;
        }
        if !env
            .limits
            .challenge_ack_allowed(now, env.sysint(Sysctl::tcp_challenge_ack_limit))
        {
            return;
        }
        env.mib.inc(Mib::TCPChallengeACK);
        self.send_ack(env, now);
    }

    /// `tcp_oow_rate_limited`: whether the ACK answering this unacceptable segment must be
    /// skipped. A segment carrying data (and no SYN) is always answered and does not start
    /// the interval: only an ACK answering a pure ACK could start an ACK loop.
    fn oow_rate_limited(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>, mib: Mib) -> bool {
        if seg.end_seq() != seg.seq && !seg.has(TcpFlags::SYN) {
            return false;
        }
        self.oow_ack_limited(env, now, mib)
    }

    /// `__tcp_oow_rate_limited`: at most one answer to invalid segments per
    /// `tcp_invalid_ratelimit` (`last_oow_ack_time`); a skipped one counts in `mib`.
    fn oow_ack_limited(&mut self, env: &mut Env, now: Instant, mib: Mib) -> bool {
        let rl = Duration::from_millis(env.sysint(Sysctl::tcp_invalid_ratelimit) as u64);
        if self.last_oow_ack != Instant::ZERO && now - self.last_oow_ack < rl {
            env.mib.inc(mib);
            return true;
        }
        self.last_oow_ack = now;
        false
    }

    /// `tcp_incr_quickack`: allow up to `max` immediate ACKs (rcv_wnd / 2 rcv_mss, or 2).
    pub fn incr_quickack(&mut self, max: u8) {
        let mut q = self.rcv.wnd / (2 * self.ack.rcv_mss.max(1));
        if q == 0 {
            q = 2;
        }
        let q = q.min(u32::from(max)) as u8;
        if q > self.ack.quick {
            self.ack.quick = q;
        }
    }

    /// `tcp_enter_quickack_mode`: quickacks, leave pingpong, ato back to the minimum.
    pub fn enter_quickack(&mut self, max: u8) {
        self.incr_quickack(max);
        self.ack.pingpong = 0;
        self.ack.ato = TCP_ATO_MIN;
    }

    fn in_quickack_mode(&self) -> bool {
        self.route.quickack || (self.ack.quick > 0 && self.ack.pingpong == 0)
    }

    /// `tcp_paws_check`: a TSval at most `win` behind `ts_recent` passes, as does any when
    /// `ts_recent` is older than 24 days or zero (some stacks send 0 on the handshake).
    pub(crate) fn paws_check(&self, now: Instant, tsval: u32, win: i32) -> bool {
        self.rx_opt.ts_recent.wrapping_sub(tsval) as i32 <= win
            || now - self.rx_opt.ts_recent_stamp >= Duration::from_secs(24 * 86400)
            || self.rx_opt.ts_recent == 0
    }

    /// What becomes of a segment that failed PAWS (`tcp_disordered_ack_check`, Linux 6.18): a
    /// pure ACK below `rcv_nxt` is an old ACK, dropped without an answer; a pure duplicate
    /// ACK at `rcv_nxt` that updates no window and whose TSval is within the replay window
    /// (`tcp_tsval_replay`: the RTO read as 1,200 ticks a second) was only reordered and is
    /// processed; anything else is rejected with a (rate-limited) duplicate ACK.
    fn disordered_ack_check(&self, seg: &SegIn<'_>, tsval: u32) -> Paws {
        if !seg.has(TcpFlags::ACK) || seg.end_seq() != seg.seq {
            return Paws::Reject;
        }
        if seg.seq != self.rcv.nxt {
            return if before(seg.seq, self.rcv.nxt) {
                Paws::OldAck
            } else {
                Paws::Reject
            };
        }
        if seg.ack != self.snd.una {
            return Paws::Reject;
        }
        let nwin = u32::from(seg.window) << self.rx_opt.snd_wscale;
        let may_update = after(seg.ack, self.snd.una)
            || after(seg.seq, self.snd.wl1)
            || (seg.seq == self.snd.wl1 && (nwin > self.snd.wnd || nwin == 0));
        if may_update {
            return Paws::Reject;
        }
        let jiffy = crate::timer::JIFFY.as_nanos();
        let jiffies = self.rtt.rto().as_nanos().div_ceil(jiffy) as u64;
        let replay = jiffies * 1200 / (1_000_000_000 / jiffy) as u64;
        if i64::from(self.rx_opt.ts_recent.wrapping_sub(tsval) as i32) > replay as i64 {
            return Paws::Reject;
        }
        Paws::Accept
    }

    /// `tcp_ack`: process the acknowledgment field. Returns false if the segment must be dropped.
    fn tcp_ack(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>) -> bool {
        let ack = seg.ack;
        let prior_snd_una = self.snd.una;
        // The segment's TSecr, for every path below (Linux parses it with the options, so
        // an old ACK's undo checks read its own echo, not the previous ACK's).
        self.rx_opt.rcv_tsecr = seg.opts.ts.map(|t| t.1).unwrap_or(0);
        if after(ack, self.snd.nxt) {
            // RFC 9293 §3.10.7.4 / RFC 5961 §5.2: ACK of unsent data: drop the segment
            // (its FIN, data and timestamp too) and answer with a rate-limited challenge
            // ACK, in every state. Measured on Linux 6.18 (ts_recent/invalid_ack.pkt
            // variants): in ESTABLISHED, CLOSE_WAIT and FIN_WAIT1 an ACK, FIN or data
            // segment acking beyond snd_nxt gets `ack rcv_nxt` echoing the old ts_recent at
            // once (TcpExtTCPChallengeACK), the next ones within tcp_invalid_ratelimit count
            // TcpExtTCPACKSkippedChallenge.
            self.send_challenge_ack(env, now);
            return false;
        }
        if before(ack, prior_snd_una) {
            // RFC 5961 §5.2: an ACK older than snd_una - max_window is dropped with a
            // challenge ACK, and the window reaches back no further than the bytes acked
            // so far, so an ACK of something never sent is "too old". Measured on Linux
            // 6.18 (gro/gro-mss-option.pkt variants): on a passive connection (tcpi_bytes_acked
            // 0) a segment acking the ISS gets `ack rcv_nxt` (TcpExtTCPChallengeACK) and
            // its data is dropped, with or without GSO; once 1000 bytes were acked, ack
            // snd_una - 1000 is accepted and snd_una - 1001 challenged; an active opener
            // (its SYN counts, bytes_acked 1) accepts data acking the ISS.
            let reach = u64::from(self.snd.max_window).min(self.stats.bytes_acked()) as u32;
            if before(ack, prior_snd_una.wrapping_sub(reach)) {
                self.send_challenge_ack(env, now);
                return false;
            }
            // Old ACK (tcp_ack's old_ack exit): its SACK blocks still count. Newly SACKed
            // data drives loss detection and PRR as on any ACK (tcp_fastretrans_alert,
            // tcp_xmit_recovery), so a reordered ACK below snd_una can release
            // retransmissions; data on the segment is processed.
            if seg.opts.num_sacks > 0 {
                let mut flag = AckFlags::default();
                let newly = self.sacktag(env, now, seg, &mut flag);
                self.rtx.delivered += newly;
                env.mib.add(Mib::TCPDelivered, u64::from(newly));
                self.fastretrans_alert(env, now, prior_snd_una, false, newly, &mut flag);
                self.frto_xmit_new(env, now, &flag);
            }
            return true;
        }
        // tcp_ack: any acceptable ACK shows the peer alive: the unanswered-probe count
        // (zero-window and keepalive probes, `tcpi_probes`) starts again.
        self.timer.probes.answered();
        self.rcv_tstamp = now;
        let mut flag = AckFlags::default();
        let prior_in_flight = self.packets_in_flight();
        let prior_packets = self.rtx.packets_out;
        // Window update (tcp_ack_update_window); a SYN's window is never scaled.
        let nwin = if seg.has(TcpFlags::SYN) {
            u32::from(seg.window)
        } else {
            u32::from(seg.window) << self.rx_opt.snd_wscale
        };
        if after(ack, self.snd.una)
            || after(seg.seq, self.snd.wl1)
            || (seg.seq == self.snd.wl1 && (nwin > self.snd.wnd || nwin == 0))
        {
            flag.win_update = true;
            self.snd.wl1 = seg.seq;
            if self.snd.wnd != nwin {
                self.snd.wnd = nwin;
                // tcp_ack_update_window: a window change with data queued is a restart point
                // for the idle check (tcp_slow_start_after_idle_check).
                if !self.snd.write_queue.is_empty() {
                    self.slow_start_after_idle_check(env, now);
                }
                if nwin > self.snd.max_window {
                    self.snd.max_window = nwin;
                    self.sync_mss(env);
                }
            }
        }
        // prior_fack: the highest SACKed sequence before this ACK's SACK blocks (snd_una when
        // nothing is SACKed), for tcp_clean_rtx_queue's reordering check.
        let prior_fack = if self.rtx.sack_seen_any && self.rtx.sacked_out > 0 {
            self.rtx.highest_sack_end
        } else {
            prior_snd_una
        };
        let sack_newly = if seg.opts.num_sacks > 0 {
            self.sacktag(env, now, seg, &mut flag)
        } else {
            0
        };
        let is_dupack = ack == prior_snd_una
            && seg.payload.is_empty()
            && !seg.has(TcpFlags::FIN)
            && nwin == self.snd.wnd
            && prior_packets > 0;
        if after(ack, prior_snd_una) {
            if seg.payload.is_empty() {
                env.mib.inc(Mib::TCPHPAcks);
            }
        } else if seg.payload.is_empty() {
            env.mib.inc(Mib::TCPPureAcks);
        }
        self.snd.una = ack;
        // tcp_ack: an ACK that moves snd_una restarts the retransmission count before the
        // acked buffers are freed (measured on 6.18: the ACK stamp after three RTOs has
        // TCP_NLA_RECUR_RETRANS 0).
        if after(ack, prior_snd_una) {
            self.timer.retransmits = 0;
        }
        // Urgent mode ends once the urgent byte is acknowledged.
        if !after(self.snd.up, ack) {
            self.snd.up = ack;
        }
        let (acked_pkts, rtt_us) = self.clean_rtx_queue(env, now, prior_fack, seg, &mut flag);
        // tcp_clean_rtx_queue: the MTU probe was cumulatively acked.
        if self.mtup.probe_acked(self.snd.una) {
            self.mtup_probe_success(env);
        }
        // TLP: an ACK above tlp_high_seq ends the episode.
        self.tlp_process_ack(ack);
        if acked_pkts > 0 || rtt_us >= 0 {
            self.timer.backoff = 0;
            self.timer.retransmits = 0;
        }
        if self.rtx.retrans_out == 0 && self.rtx.lost_out == 0 && self.ca_state == CaState::Open {
            self.timer.retrans_stamp = None;
            self.undo.forget_retrans_stamp();
        }
        let mut delivered = acked_pkts + sack_newly;
        // Reno dupack counting (no SACK): each dupack is "one more packet received" and is
        // delivered when it arrives (tcp_add_reno_sack); the cumulative ACK that follows
        // delivers only what the dupacks did not already count, at least one
        // (tcp_remove_reno_sacks).
        if !self.rx_opt.sack_ok {
            if is_dupack {
                let prior = self.rtx.sacked_out;
                if self.rtx.sacked_out + 1 < self.rtx.packets_out {
                    self.rtx.sacked_out += 1;
                }
                delivered = self.rtx.sacked_out - prior;
            } else if acked_pkts > 0 {
                delivered = acked_pkts.saturating_sub(self.rtx.sacked_out).max(1);
                self.rtx.sacked_out = self
                    .rtx
                    .sacked_out
                    .saturating_sub(acked_pkts.saturating_sub(1));
                if ack == self.snd.nxt {
                    self.rtx.sacked_out = 0;
                }
            }
        }
        self.rtx.delivered += delivered;
        // tcp_count_delivered: an ECE ACK on an ECN connection delivered them marked.
        if seg.has(TcpFlags::ECE)
            && !seg.has(TcpFlags::SYN)
            && self.ecn_flags & crate::socket::ecnf::OK != 0
        {
            self.stats.count_delivered_ce(delivered);
        }
        self.rate_gen(now, delivered);
        self.cc_st.app_limited = self.rate.app_limited();
        env.mib.add(Mib::TCPDelivered, u64::from(delivered));
        // Congestion control.
        self.sync_cc_state(now);
        let now_us = now.as_micros();
        if delivered > 0 || rtt_us >= 0 {
            let sample = AckSample {
                pkts_acked: delivered,
                rtt_us,
                in_flight: prior_in_flight,
            };
            self.cc.pkts_acked(&mut self.cc_st, &sample, now_us);
        }
        // tcp_ecn_rcv_ecn_echo: ECE on a non-SYN segment of an ECN connection.
        flag.ece = seg.has(TcpFlags::ECE)
            && !seg.has(TcpFlags::SYN)
            && self.ecn_flags & crate::socket::ecnf::OK != 0;
        // tcp_ack_is_dubious: loss detection and the state machine run only for an ACK that
        // is a duplicate (no data, no window update, nothing acked), carries SACK news, an
        // ECN echo or a D-SACK, or arrives outside the Open state. An ordinary ACK in Open
        // leaves RACK's record for the next dubious one (measured on 6.18, fuzz seed 100038:
        // after an RTO undone by F-RTO, a data segment acking nothing new did not make the
        // kernel mark the tail lost, though RACK's record would have).
        // FLAG_DATA: the segment occupies sequence space, a bare FIN too (measured on 6.18,
        // fuzz seed 160189: a FIN acking nothing new, just after an F-RTO undo, left the tail
        // to its RTO; the engine had let RACK mark it lost and resent it at once).
        let not_dup =
            !seg.payload.is_empty() || seg.has(TcpFlags::FIN) || flag.win_update || acked_pkts > 0;
        let dubious = !not_dup
            || flag.data_sacked
            || flag.ece
            || flag.dsack
            || self.ca_state != CaState::Open;
        if dubious {
            self.fastretrans_alert(env, now, prior_snd_una, is_dupack, delivered, &mut flag);
        }
        // tcp_may_raise_cwnd: grow only on cumulative (in-order) delivery (RFC 5681), or on
        // any forward progress (SACKed data too) once reordering was measured above the
        // sysctl's. Open, Disorder and Loss grow cwnd (slow start after an RTO); Recovery/CWR
        // use PRR.
        let may_raise = acked_pkts > 0
            || (sack_newly > 0 && self.reordering > env.sysint(Sysctl::tcp_reordering) as u32);
        if may_raise && !matches!(self.ca_state, CaState::Recovery | CaState::Cwr) {
            self.cc_st.is_cwnd_limited = self.is_cwnd_limited_now();
            if self.cc_st.is_cwnd_limited {
                self.cc.cong_avoid(&mut self.cc_st, ack, delivered, now_us);
            }
        }
        let mib = self.cc.take_mib();
        let _ = mib;
        // tcp_cong_control → tcp_update_pacing_rate, only when something was outstanding
        // (an ACK with nothing in flight takes tcp_ack's no_queue exit).
        if prior_packets > 0 {
            self.update_pacing_rate(env);
        }
        // F-RTO step 2.b: new data goes out after cwnd was updated (tcp_xmit_recovery).
        self.frto_xmit_new(env, now, &flag);
        // tcp_ack's no_queue exit: nothing was in flight, so the ACK answers a zero-window
        // probe (or opens the window) when data waits.
        if prior_packets == 0 {
            self.ack_probe(env, now);
        }
        // Timers: restart RTO/TLP, or clear when nothing is outstanding.
        if self.rtx.packets_out == 0 {
            if self.timer.rtx_event != RtxEvent::Probe0 {
                self.disarm(env, TimerKind::Retrans);
            }
            if !self.snd.write_queue.is_empty() {
                self.check_probe_timer(env, now);
            }
        } else if flag.xmit_timer_set {
            // tcp_check_sack_reneging or RACK's reordering timer armed it.
        } else if acked_pkts > 0 || self.timer.rtx_event == RtxEvent::Probe0 {
            // FLAG_SET_XMIT_TIMER comes with FLAG_ACKED: a whole segment acked. A partial
            // ACK of one segment advances snd_una but leaves the timer as it was (measured
            // on 6.18: `ack 84` of a 100-byte segment 30 ms after it left, and the timer
            // still fired 214 ms after the send).
            self.schedule_loss_probe_or_rto(env, now, true);
        }
        true
    }

    /// `tcp_is_cwnd_limited`.
    fn is_cwnd_limited_now(&self) -> bool {
        self.cwnd_use
            .limited(self.snd_cwnd(), self.cc_st.in_slow_start())
    }

    /// Copy engine fields the CC reads into its state.
    pub fn sync_cc_state(&mut self, now: Instant) {
        self.cc_st.mss_cache = self.mss.cache;
        self.cc_st.packets_in_flight = self.packets_in_flight();
        self.cc_st.srtt_us = self.rtt.srtt_us();
        self.cc_st.min_rtt_us = self.rtt.min_rtt_us();
        self.cc_st.delivered = self.rtx.delivered;
        self.cc_st.snd_nxt = self.snd.nxt;
        self.cc_st.snd_una = self.snd.una;
        self.cc_st.lsndtime_us = self.lsndtime.as_micros();
        self.cc_st.sk_pacing_rate = if self.pacing.rate() == u64::MAX {
            0
        } else {
            self.pacing.rate()
        };
        let _ = now;
    }

    /// `tcp_clean_rtx_queue`: free acked buffers, RTT sample (Karn / timestamps). Returns
    /// (packets newly cumulatively acked, rtt µs or -1). `prior_fack` is the highest SACKed
    /// sequence before this ACK (reordering is data acked below it).
    fn clean_rtx_queue(
        &mut self,
        env: &mut Env,
        now: Instant,
        prior_fack: u32,
        seg: &SegIn<'_>,
        flag: &mut AckFlags,
    ) -> (u32, i64) {
        let ack = self.snd.una;
        let mut acked = 0u32;
        // Send times of the oldest and newest acked skbs that were never retransmitted nor
        // SACKed (Linux's `first_ackt`, `last_ackt`), and whether retransmitted data was
        // acked (FLAG_RETRANS_DATA_ACKED: then no sequence sample at all, Karn).
        let mut first_ackt: Option<Instant> = None;
        let mut last_ackt: Option<Instant> = None;
        let mut retrans_acked = false;
        let mut note_ackt = |t: Instant| {
            first_ackt.get_or_insert(t);
            last_ackt = Some(t);
        };
        // Lowest start of a never-retransmitted, not-SACKed skb acked below the highest SACK:
        // one reordering event per ACK (tcp_clean_rtx_queue → tcp_check_sack_reordering).
        let mut reord: Option<u32> = None;
        let lower = |r: Option<u32>, seq: u32| match r {
            Some(x) if !after(x, seq) => Some(x),
            _ => Some(seq),
        };
        while let Some(head) = self.rtx.queue.front_mut() {
            if !after(ack, head.seq) {
                break;
            }
            if before(ack, head.end_seq) {
                // Partially acked TSO skb: trim the head (tcp_trim_head).
                let cut = ack.wrapping_sub(head.seq) as usize;
                let cut = cut.min(head.data.len());
                if cut == 0 {
                    break;
                }
                let mss = self.mss.cache.max(1);
                let old_pcount = head.pcount;
                let start_seq = head.seq;
                head.data.advance(cut);
                self.stats.count_acked(cut as u64);
                head.seq = ack;
                head.truesize = head.truesize.saturating_sub(cut as u32);
                self.mem.wmem_queued = self.mem.wmem_queued.saturating_sub(cut as u32);
                // tcp_trim_head counts what is left by the size the skb was sent with, so a
                // trim never raises its count (a smaller MSS since then applies when it is
                // sent again: tcp_retransmit_skb).
                let new_pcount = head.len().div_ceil(mss).max(1).min(old_pcount.max(1));
                let diff = old_pcount.saturating_sub(new_pcount);
                head.pcount = new_pcount;
                self.rtx.packets_out = self.rtx.packets_out.saturating_sub(diff);
                if head.sacked & sacked::RETRANS != 0 {
                    self.rtx.retrans_out = self.rtx.retrans_out.saturating_sub(diff);
                }
                if head.sacked & sacked::LOST != 0 {
                    self.rtx.lost_out = self.rtx.lost_out.saturating_sub(diff);
                }
                acked += diff;
                // Only whole MSSes acked count (tcp_clean_rtx_queue stops at an skb with no
                // fully acked segment): a partial ACK of a never-retransmitted segment is
                // no RTT sample and not FLAG_ORIG_SACK_ACKED, so F-RTO does not call the
                // RTO spurious on it.
                if diff > 0 && head.sacked & (sacked::EVER_RETRANS | sacked::RETRANS) != 0 {
                    retrans_acked = true;
                } else if diff > 0 && head.sacked & sacked::ACKED == 0 {
                    note_ackt(head.mstamp);
                }
                if diff > 0
                    && head.sacked & sacked::EVER_RETRANS == 0
                    && !after(head.end_seq, self.high_seq)
                {
                    flag.orig_sack_acked = true;
                }
                // tcp_clean_rtx_queue treats the acked MSSes of a partially acked TSO skb
                // (tcp_tso_acked) like whole skbs: a never-retransmitted hole below the
                // highest SACK is reordering, and RACK advances with the skb's send time.
                let (mstamp, end_seq, sk) = (head.mstamp, head.end_seq, head.sacked);
                if diff > 0 {
                    if sk & (sacked::EVER_RETRANS | sacked::ACKED) == 0 {
                        reord = lower(reord, start_seq);
                    }
                    self.rack_advance(mstamp, end_seq, sk & sacked::EVER_RETRANS != 0, now);
                }
                break;
            }
            let mut skb = self.rtx.queue.pop_front().expect("front exists");
            if let Some(m) = skb.tstamp {
                // The device's SND stamp comes before the peer can ACK on Linux (it is taken
                // in the driver's transmit); a completion the substrate reports after the ACK
                // is reported now, before the ACK.
                let at = crate::tstamp::StatsAt {
                    edt: skb.edt,
                    ..Default::default()
                };
                if let Some((k, bytes)) = self.tstamp.take_snd_key(m.key) {
                    self.tstamp_event_at(env, crate::tstamp::TstampKind::Snd, k, now, at, bytes);
                }
                // tcp_ack_tstamp: the ACK covers a marked byte. With SACK, Linux has counted
                // this buffer and the ones before it delivered (tcp_clean_rtx_queue).
                if m.ack {
                    let mut done = acked;
                    if self.rx_opt.sack_ok && skb.sacked & sacked::ACKED == 0 {
                        done += skb.pcount.max(1);
                    }
                    let at = crate::tstamp::StatsAt {
                        ttl: Some(seg.ttl),
                        delivered: Some(if self.rx_opt.sack_ok {
                            self.rtx.delivered.wrapping_add(done)
                        } else {
                            self.rtx.delivered
                        }),
                        ..at
                    };
                    // Without OPT_TSONLY the entry carries the acked buffer's payload.
                    let bytes = if self.tstamp.wants_bytes() {
                        crate::tstamp::ErrqBytes {
                            payload: skb.len(),
                            data: skb.data.share(),
                        }
                    } else {
                        Default::default()
                    };
                    self.tstamp_event_at(
                        env,
                        crate::tstamp::TstampKind::Ack,
                        m.key,
                        now,
                        at,
                        bytes,
                    );
                }
            }
            let p = skb.pcount.max(1);
            if skb.sacked & sacked::ACKED != 0 {
                self.rtx.sacked_out = self.rtx.sacked_out.saturating_sub(p);
            } else {
                acked += p;
            }
            if skb.sacked & sacked::RETRANS != 0 {
                self.rtx.retrans_out = self.rtx.retrans_out.saturating_sub(p);
            }
            if skb.sacked & sacked::LOST != 0 {
                self.rtx.lost_out = self.rtx.lost_out.saturating_sub(p);
            }
            if skb.sacked & (sacked::EVER_RETRANS | sacked::RETRANS) != 0 {
                retrans_acked = true;
            } else if skb.sacked & sacked::ACKED == 0 {
                note_ackt(skb.mstamp);
            }
            self.rtx.packets_out = self.rtx.packets_out.saturating_sub(p);
            self.mem.wmem_queued = self.mem.wmem_queued.saturating_sub(skb.truesize);
            // tcpi_bytes_acked counts sequence space (tcp_snd_una_update): an acked SYN or FIN
            // counts one.
            self.stats
                .count_acked(u64::from(skb.end_seq.wrapping_sub(skb.seq)));
            if skb.sacked & sacked::ACKED == 0 {
                self.rate_skb_delivered(&skb.tx, skb.mstamp);
                if skb.sacked & sacked::EVER_RETRANS == 0 {
                    // Only data sent before the loss episode began says the RTO was
                    // spurious (F-RTO's "never retransmitted" data, below high_seq).
                    if !after(skb.end_seq, self.high_seq) {
                        flag.orig_sack_acked = true;
                    }
                    reord = lower(reord, skb.seq);
                }
            }
            // RACK: the most recently sent delivered skb.
            self.rack_advance(
                skb.mstamp,
                skb.end_seq,
                skb.sacked & sacked::EVER_RETRANS != 0,
                now,
            );
        }
        if let Some(r) = reord.filter(|&r| before(r, prior_fack)) {
            self.note_reordering(env, r);
        }
        // Without SACK a cumulative ACK that covers any retransmitted segment cannot show
        // that the never-retransmitted ones it also covers arrived as originals (there are
        // no per-segment SACK bits), so it is not FLAG_ORIG_SACK_ACKED (tcp_clean_rtx_queue
        // for a Reno connection). Measured on 6.18: after an RTO, a first ACK covering the
        // retransmitted head and original data makes F-RTO send new data (step 2.b), and
        // only a later ACK of original data undoes (TCPSpuriousRTOs); with SACK the first
        // ACK undoes.
        if !self.rx_opt.sack_ok && retrans_acked {
            flag.orig_sack_acked = false;
        }
        if self.rtx.packets_out == 0 {
            self.rtx.sacked_out = 0;
            self.rtx.lost_out = 0;
            self.rtx.retrans_out = 0;
        }
        flag.sack_reneging = self
            .rtx
            .queue
            .front()
            .is_some_and(|h| h.sacked & sacked::ACKED != 0);
        if self.rtx.queue.is_empty() && self.snd.write_queue.is_empty() {
            self.chrono_stop(now, crate::chrono::CHRONO_BUSY);
        }
        if self.rtx.sack_seen_any && !before(self.snd.una, self.rtx.highest_sack_end) {
            self.rtx.sack_seen_any = false;
        }
        // RTT (tcp_clean_rtx_queue, tcp_ack_update_rtt): the sequence sample is the oldest
        // newly acked skb's send time, and there is none when the ACK covers retransmitted
        // data (Karn's rule); the
        // newest one's is the congestion control's sample (`ca_rtt_us`, also the min-RTT
        // filter's). Without a sequence sample, the timestamp echo gives both (RFC 7323 §4)
        // when the ACK acked something.
        let us = |t: Instant| (now - t).as_micros().min(u128::from(u32::MAX)) as i64;
        let (mut seq_rtt_us, mut ca_rtt_us) = match (first_ackt, last_ackt) {
            (Some(f), Some(l)) if !retrans_acked => (us(f), us(l)),
            _ => (-1, -1),
        };
        // Newly SACKed data gives a sample too (the SACK's newest skb is then the congestion
        // control's), used when the cumulative ACK gave none.
        if let Some((f, l)) = flag.sackt {
            ca_rtt_us = us(l);
            if seq_rtt_us < 0 {
                seq_rtt_us = us(f);
            }
        }
        if seq_rtt_us < 0 && acked > 0 {
            if let Some(ts) = self.ts_echo_rtt_us(now, seg) {
                seq_rtt_us = ts;
                ca_rtt_us = ts;
            }
        }
        if seq_rtt_us >= 0 && !self.rtx.syn_acked_sampled {
            self.rtt_samples(env, now, seq_rtt_us as u32, ca_rtt_us as u32);
        }
        (acked, ca_rtt_us)
    }

    /// The RTT the segment's timestamp echo gives, in µs (`tcp_rtt_tsopt_us`): our TS clock
    /// minus the echoed value, in whole milliseconds, at least one; `None` without an echo
    /// (or a zero one) or when the difference is not below `INT_MAX / 1000` ticks (an echo
    /// from the future or garbage).
    fn ts_echo_rtt_us(&self, now: Instant, seg: &SegIn<'_>) -> Option<i64> {
        let (true, Some((_, ecr))) = (self.rx_opt.tstamp_ok, seg.opts.ts) else {
            return None;
        };
        if ecr == 0 {
            return None;
        }
        let d = self.tsval(now).wrapping_sub(ecr);
        (d < i32::MAX as u32 / 1000).then(|| i64::from(d.max(1)) * 1000)
    }

    /// Queue in-window data (`tcp_data_queue`); handles FIN (`tcp_fin`).
    pub fn data_queue(&mut self, env: &mut Env, now: Instant, seg: &SegIn<'_>) {
        let mut seq = seg.seq;
        let mut payload = seg.payload;
        let fin = seg.has(TcpFlags::FIN);
        if self.shutdown & RCV_SHUTDOWN != 0 && !payload.is_empty() && !self.orphan {
            // SHUT_RD: Linux still queues; keep queueing (data is discarded on read).
        }
        // Trim what we already have.
        if before(seq, self.rcv.nxt) {
            let dup = self.rcv.nxt.wrapping_sub(seq) as usize;
            if dup >= payload.len() && !(fin && seg.end_seq() == self.rcv.nxt.wrapping_add(1)) {
                // Entirely duplicate (retransmission): D-SACK + quickack.
                env.mib.inc(Mib::DelayedACKLost);
                self.enter_quickack(TCP_MAX_QUICKACKS);
                // tcp_dsack_set(seq, end_seq): the block covers the FIN too, so a
                // retransmitted bare FIN is reported as `sack SEQ:SEQ+1` (fuzz seed 70152).
                if self.rx_opt.dsack_ok && seg.end_seq() != seg.seq {
                    self.rcv.dsack = Some((seg.seq, seg.end_seq()));
                    env.mib.inc(Mib::TCPDSACKOldSent);
                }
                self.ack.pending |= ackf::NOW;
                self.ack.pending |= ackf::SCHED;
                return;
            }
            let dup = dup.min(payload.len());
            if dup > 0 && self.rx_opt.dsack_ok {
                self.rcv.dsack = Some((seq, self.rcv.nxt));
            }
            payload = &payload[dup..];
            seq = self.rcv.nxt;
        }
        // Receive window: never accept beyond what we offered.
        let win_end = self.rcv.nxt.wrapping_add(self.receive_window());
        if !payload.is_empty() && self.receive_window() == 0 && seq == self.rcv.nxt {
            env.mib.inc(Mib::TCPZeroWindowDrop);
            self.stats.count_drop();
            self.ack.pending |= ackf::NOW | ackf::SCHED;
            return;
        }
        let mut fin = fin;
        if after(seq.wrapping_add(payload.len() as u32), win_end) {
            let keep = win_end.wrapping_sub(seq) as usize;
            payload = &payload[..keep.min(payload.len())];
            fin = false;
        }
        if seq == self.rcv.nxt {
            if payload.is_empty() && !fin {
                return;
            }
            // Memory check (tcp_try_rmem_schedule): refuse beyond rcvbuf, then charge the
            // stack-wide TCP memory (by force when the receive queue is empty). The buffer is
            // the whole packet's, bytes already received included (a partly duplicate
            // segment is queued as it came: fuzz seed 70031).
            let truesize = self.rx_truesize(env, seg, seg.payload.len() as u32);
            if !payload.is_empty()
                && ((self.mem.rmem_alloc + truesize
                    > self.mem.rcvbuf.saturating_mul(2).max(self.mem.rcvbuf)
                    && !self.prune_ofo(env))
                    || (!self.rcv.rx_queue.is_empty() && !self.try_rmem_schedule(env, truesize)))
            {
                env.mib.inc(Mib::TCPRcvQDrop);
                self.stats.count_drop();
                self.ack.pending |= ackf::NOW | ackf::SCHED;
                return;
            }
            self.queue_rcv(env, now, seq, payload, fin, seg, truesize);
            // A bare FIN is no data for the delayed-ACK estimator (`tcp_data_queue` calls
            // tcp_event_data_recv only for a non-empty skb). The skb is the segment as it came,
            // a duplicate head included: its whole length feeds rcv_mss and the window's
            // growth (measured on 6.18, fuzz seed 160000: 1:1461 over a received 1:501 grew
            // the offered window as 1,460 bytes would, to 1,061 << 8, not as the new 960).
            if !payload.is_empty() {
                self.event_data_recv(env, now, seg, seg.payload.len() as u32, truesize);
            }
            if !self.rcv.ofo_queue.is_empty() {
                self.ofo_drain(env);
                if self.rcv.ofo_queue.is_empty() {
                    // Filling the last hole: ACK now (RFC 5681 §4.2).
                    self.ack.pending |= ackf::NOW;
                }
            }
            if self.rcv.fin_received {
                self.process_fin(env, now);
            }
            if !self.rcv.sacks.is_empty() {
                self.sacks_trim();
            }
            env.out.wake(self.id, POLLIN | POLLRDNORM);
            return;
        }
        // Out of order (tcp_data_queue_ofo).
        if payload.is_empty() && !fin {
            return;
        }
        // tcp_data_queue_ofo measures the segment as in-order data is measured (rcv_mss and
        // the scaling ratio, hence the window clamp): measured on 6.18, an active opener
        // that receives only out-of-order 1460-byte segments raises its offered window with
        // each (1050, 1062, 1073, 1085, 1096 << 8), past the clamp its first buffer size gave.
        let len = payload.len() as u32;
        let truesize = self.rx_truesize(env, seg, len);
        if len > 0 {
            self.measure_rcv_mss(env, seg, len, truesize);
        }
        // tcp_data_queue_ofo: schedule an ACK; __tcp_ack_snd_check decides (SACK compression).
        let tstamp = Connection::rx_stamp(env, now);
        self.ofo_insert(env, seq, payload, seg.share(payload), fin, truesize, tstamp);
        self.ack.pending |= ackf::SCHED;
        self.stats.count_data_segs_in(seg.gso_segs);
    }

    /// Append in-order bytes to the receive queue, coalescing into the tail (`tcp_queue_rcv`).
    /// `truesize` is the received buffer's, the whole packet's ([`Connection::rx_truesize`]).
    /// The buffer's receive time is `now` when the socket asks for receive timestamps.
    #[allow(clippy::too_many_arguments)]
    fn queue_rcv(
        &mut self,
        env: &mut Env,
        now: Instant,
        seq: u32,
        payload: &[u8],
        fin: bool,
        seg: &SegIn<'_>,
        truesize: u32,
    ) {
        let len = payload.len() as u32;
        if len > 0 {
            let coalesce = env.device.caps.rx_truesize.coalesces()
                && self
                    .rcv
                    .rx_queue
                    .back()
                    .map(|t| !t.fin && t.data.len() + payload.len() <= 65536)
                    .unwrap_or(false);
            let shared = seg.share(payload);
            let tstamp = Connection::rx_stamp(env, now);
            if coalesce {
                let t = self.rcv.rx_queue.back_mut().expect("checked");
                t.data.push(payload, shared);
                // tcp_try_coalesce: the buffer takes the later segment's time.
                if tstamp.is_some() {
                    t.tstamp = tstamp;
                }
                t.truesize += len;
                self.mem.rmem_alloc += len;
                env.mib.inc(Mib::TCPRcvCoalesce);
            } else {
                self.mem.rmem_alloc += truesize;
                let mut data = RxData::default();
                data.push(payload, shared);
                self.rcv.rx_queue.push_back(RxSkb {
                    seq,
                    data,
                    fin: false,
                    truesize,
                    tstamp,
                });
            }
        }
        self.rcv.nxt = seq.wrapping_add(len);
        self.stats.count_received(len);
        self.stats.count_data_segs_in(seg.gso_segs);
        if fin {
            self.rcv.nxt = self.rcv.nxt.wrapping_add(1);
            self.rcv.fin_received = true;
            // A zero-length marker so readers see EOF in order.
            self.rcv.rx_queue.push_back(RxSkb {
                seq: seq.wrapping_add(len),
                data: RxData::default(),
                fin: true,
                truesize: 0,
                tstamp: None,
            });
        }
    }

    /// `tcp_fin`: the peer closed its sending side.
    fn process_fin(&mut self, env: &mut Env, now: Instant) {
        if self.shutdown & RCV_SHUTDOWN != 0
            && self.state != TcpState::Established
            && self.state != TcpState::FinWait1
            && self.state != TcpState::FinWait2
        {
            return;
        }
        self.shutdown |= RCV_SHUTDOWN;
        self.fastopen_path_works(env);
        // A FIN only schedules an ACK; on ESTABLISHED it also enters pingpong, so the
        // ACK goes out by the delayed-ACK rule. Linux 6.18 (`tcp_fin`) ACKs data+FIN,
        // and a bare FIN after earlier data, ~40 ms late (ato); a bare FIN on a
        // connection that never received data is ACKed at once only because its ato is
        // still zero, so the delayed-ACK timer is armed for "now".
        self.ack.pending |= ackf::SCHED;
        match self.state {
            TcpState::SynRecv | TcpState::Established => {
                self.state = TcpState::CloseWait;
                self.ack.pingpong = 1;
            }
            TcpState::FinWait1 => {
                // Simultaneous close.
                self.send_ack(env, now);
                self.state = TcpState::Closing;
            }
            TcpState::FinWait2 => {
                self.send_ack(env, now);
                self.enter_time_wait(env, now);
            }
            _ => {}
        }
        // Data queued beyond the FIN is dropped, and with it the SACK blocks and any pending
        // D-SACK (`tcp_fin`: skb_rbtree_purge, tcp_sack_reset). Measured on 6.18: the ACK of
        // a FIN with 1001:1101 queued out of order carries no SACK option.
        for o in self.rcv.ofo_queue.drain(..) {
            self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(o.truesize);
        }
        self.rcv.sacks.clear();
        self.rcv.dsack = None;
        env.out.wake(self.id, POLLIN | POLLRDNORM | POLLRDHUP);
    }

    /// `tcp_measure_rcv_mss`: learn the peer's segment size from data (the GRO segment size
    /// for an aggregate). A segment at least rcv_mss raises it (up to advmss); smaller ones
    /// set it only when two in a row have the same size without PSH (small-MTU paths), else
    /// they mark the ACK as pushed.
    /// `tcp_measure_rcv_mss`: the peer's segment size (`rcv_mss`), and the scaling ratio.
    /// Whenever a segment at least as large as `rcv_mss` differs from it, the ratio becomes
    /// this buffer's `len × 256 / truesize`; if that changes it, the window clamp becomes
    /// `win_from_space(rcvbuf)` (SO_RCVBUF or not) and `rcv_ssthresh` stays within it.
    /// Measured on Linux 6.18 through tun (`tcp_rmem[1]` 65536): a 1000-byte segment of
    /// truesize 2304 after a 100-byte one sets the ratio to 111, rcv_ssthresh 31308 → 28416
    /// (= 65536 × 111 / 256); the next, 1460 bytes, sets 162 and the clamp 41472, so
    /// rcv_ssthresh rises to the window last offered (31488) before growing.
    fn measure_rcv_mss(&mut self, env: &Env, seg: &SegIn<'_>, len: u32, truesize: u32) {
        let lss = self.ack.last_seg_size;
        self.ack.last_seg_size = 0;
        let seg_size = match seg.gso_size {
            Some(g) if g > 0 && len > u32::from(g) => u32::from(g),
            _ => len,
        };
        if seg_size == 0 {
            return;
        }
        if seg_size >= self.ack.rcv_mss {
            if seg_size != self.ack.rcv_mss && truesize > 0 {
                let ratio = ((u64::from(len) << TCP_RMEM_TO_WIN_SCALE) / u64::from(truesize))
                    .clamp(1, 255) as u8;
                let old = self.rcv.scaling_ratio;
                self.rcv.scaling_ratio = ratio;
                if ratio != old {
                    let clamp = self.full_space(env).max(0) as u32;
                    self.set_window_clamp(clamp);
                    self.rcv.ssthresh = self.rcv.ssthresh.min(self.rcv.window_clamp);
                }
            }
            self.ack.rcv_mss = seg_size.min(self.mss.advmss);
            if seg.has(TcpFlags::PSH) {
                self.ack.pending |= ackf::PUSHED;
            }
            return;
        }
        // Invariant length with the TCP header, free of SACK-block jitter.
        let hdr = u32::from(seg.opts.hdr_len).max(20);
        let with_hdr = seg_size + hdr;
        let remnant = seg
            .flags
            .intersects(TcpFlags::FIN | TcpFlags::URG | TcpFlags::SYN | TcpFlags::PSH);
        if with_hdr >= TCP_MSS_DEFAULT + 20 || (with_hdr >= TCP_MIN_MSS + 20 && !remnant) {
            let tcp_header_len = 20 + if self.rx_opt.tstamp_ok { 12 } else { 0 };
            let l = with_hdr.saturating_sub(tcp_header_len);
            self.ack.last_seg_size = l;
            if l == lss {
                self.ack.rcv_mss = l;
                return;
            }
        }
        if self.ack.pending & ackf::PUSHED != 0 {
            self.ack.pending |= ackf::PUSHED2;
        }
        self.ack.pending |= ackf::PUSHED;
    }

    /// `tcp_event_data_recv`: delayed-ACK estimator (spec §6.4), rcv_mss, window growth.
    fn event_data_recv(
        &mut self,
        env: &mut Env,
        now: Instant,
        seg: &SegIn<'_>,
        len: u32,
        truesize: u32,
    ) {
        self.ack.pending |= ackf::SCHED;
        self.rcv_rtt_measure(now);
        if let Some((_, ecr)) = seg.opts.ts {
            self.rcv_rtt_measure_ts(now, ecr, len);
        }
        self.measure_rcv_mss(env, seg, len, truesize);
        let rto = self.rtt.rto();
        if self.ack.lrcvtime == Instant::ZERO || self.ack.ato == Duration::ZERO {
            // First data: allow quickacks (pingpong is kept).
            self.incr_quickack(TCP_MAX_QUICKACKS);
            self.ack.ato = TCP_ATO_MIN;
        } else {
            let m = now - self.ack.lrcvtime;
            if m <= TCP_ATO_MIN / 2 {
                self.ack.ato = self.ack.ato / 2 + TCP_ATO_MIN / 2;
            } else if m < self.ack.ato {
                self.ack.ato = (self.ack.ato / 2 + m).min(rto).min(TCP_DELACK_MAX);
            } else if m > rto {
                self.incr_quickack(TCP_MAX_QUICKACKS);
            }
        }
        self.ack.lrcvtime = now;
        self.lrcvtime = now;
        if len >= 128 {
            self.grow_window(env, len, truesize);
        }
    }

    /// `truesize` of the received buffer that carried `len` bytes of `seg` (the device's
    /// sizing, [`crate::RxTruesize`]).
    pub(crate) fn rx_truesize(&self, env: &Env, seg: &SegIn<'_>, len: u32) -> u32 {
        let headers = self.ip_hdr_len() + u32::from(seg.opts.hdr_len).max(20);
        env.device.caps.rx_truesize.truesize(len, headers)
    }

    /// `tcp_grow_window`: raise `rcv_ssthresh` (the window we are willing to offer) towards
    /// what the buffer allows, on in-order data of at least 128 bytes. The room is
    /// min(window clamp, free space) − rcv_ssthresh; a buffer whose payload fills its
    /// windowed share (`win_from_space(truesize) ≤ len`) earns 2 × advmss, a wasteful one
    /// earns 2 × rcv_mss only while rcv_ssthresh is small enough (`__tcp_grow_window`:
    /// halve the buffer's share and a quarter of `tcp_rmem[2]`'s until the share fits the
    /// payload), and at least twice the payload; never more than the room. Measured on
    /// Linux 6.18 (`tcp_rmem[1]` 100000, ratio 162/256 after a 1460-byte segment of
    /// truesize 2304): rcv_ssthresh 48896 → 51816 → 54736 → 56963 (room-bound) on three
    /// segments.
    pub(crate) fn grow_window(&mut self, env: &Env, len: u32, truesize: u32) {
        let room = i64::from(self.rcv.window_clamp).min(self.tcp_space(env))
            - i64::from(self.rcv.ssthresh);
        if room <= 0 || env.mem.pressure {
            return;
        }
        let incr = if self.win_from_space(i64::from(truesize)) <= i64::from(len) {
            2 * self.mss.advmss
        } else {
            let mut share = self.win_from_space(i64::from(truesize)) >> 1;
            let rmem2 = env.config.sysctl.triple(Sysctl::tcp_rmem)[2];
            let mut window = self.win_from_space(rmem2) >> 1;
            let mut incr = 0;
            while i64::from(self.rcv.ssthresh) <= window {
                if share <= i64::from(len) {
                    incr = 2 * self.ack.rcv_mss;
                    break;
                }
                share >>= 1;
                window >>= 1;
            }
            incr
        };
        if incr > 0 {
            let incr = incr.max(2 * len);
            self.rcv.ssthresh += (incr as i64).min(room) as u32;
            self.ack.quick |= 1;
        }
    }

    /// `tcp_set_window_clamp`: a new clamp; a smaller one pulls `rcv_ssthresh` down
    /// (`__tcp_adjust_rcv_ssthresh`), a larger one lets it rise to the window last offered.
    /// The clamp is never below half of `SOCK_MIN_RCVBUF`.
    pub(crate) fn set_window_clamp(&mut self, val: u32) {
        let old = self.rcv.window_clamp;
        let new = val.max(SOCK_MIN_RCVBUF / 2);
        if new == old {
            return;
        }
        self.rcv.window_clamp = new;
        if new < old {
            self.rcv.ssthresh = self.rcv.ssthresh.min(new);
        } else {
            self.rcv.ssthresh = self.rcv.ssthresh.max(self.rcv.wnd.min(new));
        }
    }

    /// `tcp_ack_snd_check` / `__tcp_ack_snd_check` (spec §6.2).
    pub fn ack_snd_check(&mut self, env: &mut Env, now: Instant) {
        if self.ack.pending & ackf::SCHED == 0 {
            return;
        }
        let unacked = self.rcv.nxt.wrapping_sub(self.rcv.wup);
        let lowat_wants = self.rcv.nxt.wrapping_sub(self.rcv.copied_seq) < self.opts.rcvlowat;
        let immediate = (unacked > self.ack.rcv_mss
            && (lowat_wants || {
                let (w, _) = self.offer_window(env);
                w >= self.rcv.wnd
            }))
            || self.in_quickack_mode()
            || self.ack.pending & ackf::NOW != 0;
        if immediate {
            if self.lock.owned && env.config.sysctl.on(Sysctl::tcp_backlog_ack_defer) {
                self.tsq_flags |= tsq::ACK_DEFERRED;
                return;
            }
            self.send_ack(env, now);
            return;
        }
        if self.rcv.ofo_queue.is_empty() {
            self.send_delayed_ack(env, now);
            return;
        }
        // Out-of-order data: SACK compression (spec §6.2). Never deferred.
        let nr = env.sysint(Sysctl::tcp_comp_sack_nr) as u32;
        let sc = &mut self.sack_compress;
        if !self.rx_opt.sack_ok || sc.compressed >= nr {
            self.send_ack(env, now);
            return;
        }
        if sc.rcv_nxt != self.rcv.nxt {
            sc.rcv_nxt = self.rcv.nxt;
            sc.dup_acks = 0;
        }
        if sc.dup_acks < 3 {
            sc.dup_acks += 1;
            self.send_ack(env, now);
            return;
        }
        sc.compressed += 1;
        if self.timer.armed(TimerKind::CompSack) {
            return;
        }
        let mut rtt_us = u64::from(self.rcv_rtt.rtt_us() >> 3);
        let srtt = u64::from(self.rtt.srtt_us() >> 3);
        if srtt != 0 && (rtt_us == 0 || srtt < rtt_us) {
            rtt_us = srtt;
        }
        let delay_ns = (env.sysint(Sysctl::tcp_comp_sack_delay_ns) as u64).min(rtt_us * 1000 / 20);
        let slack = env.sysint(Sysctl::tcp_comp_sack_slack_ns) as u64;
        self.arm(
            env,
            TimerKind::CompSack,
            now + Duration::from_nanos(delay_ns + slack),
        );
    }

    /// `tcp_send_delayed_ack`.
    pub fn send_delayed_ack(&mut self, env: &mut Env, now: Instant) {
        let mut ato = self.ack.ato;
        if ato > TCP_ATO_MIN {
            let max_ato = if self.ack.pingpong > 0 || self.ack.pending & ackf::PUSHED != 0 {
                TCP_DELACK_MAX
            } else {
                Duration::from_millis(500)
            };
            let mut max_ato = max_ato;
            if self.rtt.srtt_us() != 0 {
                let rtt =
                    Duration::from_micros(u64::from(self.rtt.srtt_us() >> 3)).max(TCP_ATO_MIN);
                max_ato = max_ato.min(rtt);
            }
            ato = ato.min(max_ato);
        }
        let delack_max = self.rto_min(env).saturating_sub(Duration::from_millis(1));
        ato = ato.min(delack_max);
        let mut timeout = now + ato;
        if self.ack.pending & ackf::TIMER != 0 {
            if self.ack.timeout <= now + ato / 4 {
                self.send_ack(env, now);
                return;
            }
            if self.ack.timeout < timeout {
                timeout = self.ack.timeout;
            }
        }
        self.ack.pending |= ackf::SCHED | ackf::TIMER;
        self.ack.timeout = timeout;
        self.arm(env, TimerKind::Delack, timeout);
    }
}

/// Delayed-ACK state (`icsk_ack`): whether an ACK is owed and how soon (the quick-ACK
/// budget, pingpong, the ACK timeout `ato`), and the receiver's view of the segment size.
/// `pub(crate)` fields, as Linux's `icsk_ack`: the segment processing here schedules ACKs,
/// the output (output.rs) clears them when one leaves, and the delayed-ACK timer (timer.rs)
/// and `tcp_info` read them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckState {
    /// `icsk_ack.pending`: bits of [`ackf`].
    pub pending: u8,
    /// ACKs still to send at once (quick-ACK mode, `icsk_ack.quick`).
    pub quick: u8,
    /// Interactive-flow mode (`icsk_ack.pingpong`): ACKs ride on replies.
    pub pingpong: u8,
    /// Delayed-ACK timeout. Zero until the first data segment arrives (`tcp_event_data_recv`
    /// sets TCP_ATO_MIN): Linux 6.18 reports tcpi_ato 0 after the handshake, so an ACK
    /// delayed before any data (a bare FIN in pingpong) leaves at once.
    pub ato: Duration,
    /// When the delayed-ACK timer is due (`icsk_ack.timeout`).
    pub timeout: Instant,
    /// Last time data arrived (`icsk_ack.lrcvtime`), for the `ato` estimate.
    pub lrcvtime: Instant,
    /// The peer's segment size as we estimate it (`icsk_ack.rcv_mss`).
    pub rcv_mss: u32,
    /// Payload of the last data segment (`icsk_ack.last_seg_size`).
    pub last_seg_size: u32,
}

/// What the handshake negotiated and the peer's timestamps (Linux's `tp->rx_opt`, `struct
/// tcp_options_received`, with `tp->tsoffset`): the options in use, the window scales, the
/// peer's MSS and the PAWS state. `pub(crate)` fields, as Linux's `rx_opt`: the handshake
/// (input.rs, stack/listen.rs) sets the options once, the segment processing here keeps the
/// timestamps, and every builder and reader of a segment reads them (output.rs's options and
/// window, recv.rs's SACK blocks, recovery.rs's undo).
#[derive(Debug)]
pub(crate) struct RxOpt {
    /// Timestamps (RFC 7323) in use.
    pub tstamp_ok: bool,
    /// SACK (RFC 2018) in use.
    pub sack_ok: bool,
    /// Window scaling in use.
    pub wscale_ok: bool,
    /// D-SACK (RFC 2883) blocks may be sent (`net.ipv4.tcp_dsack`).
    pub dsack_ok: bool,
    /// The peer's window scale (applied to the windows it sends).
    pub snd_wscale: u8,
    /// Our window scale (applied to the windows we send).
    pub rcv_wscale: u8,
    /// Peer's MSS (`rx_opt.mss_clamp`).
    pub mss_clamp: u32,
    /// TS.Recent (RFC 7323 §4.3): the peer's TSval to echo.
    pub ts_recent: u32,
    /// When `ts_recent` was stored (PAWS's 24-day rule).
    pub ts_recent_stamp: Instant,
    /// TSecr of the segment being processed (`rx_opt.rcv_tsecr`).
    pub rcv_tsecr: u32,
    /// Offset added to our timestamp clock (`tp->tsoffset`, keyed per connection).
    pub ts_offset: u32,
}

/// Host-wide rules that count packets: the global challenge-ACK limiter (RFC 5961 §7, Linux's
/// `tcp_send_challenge_ack` limit of `tcp_challenge_ack_limit` per second) and the IPv4
/// identification counter. Private: used through their methods.
pub(crate) struct Limits {
    /// The IPv4 identification counter.
    ip_ident: u16,
    /// Challenge ACKs sent in the current second: (second, count).
    challenge: (u64, u32),
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            ip_ident: 0,
            challenge: (u64::MAX, 0),
        }
    }
}

impl Limits {
    /// The next IPv4 identification.
    pub fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// RFC 5961 §7 / Linux `tcp_send_challenge_ack` global limit: true if one may be sent now.
    pub fn challenge_ack_allowed(&mut self, now: Instant, limit: i64) -> bool {
        if limit >= i32::MAX as i64 {
            return true;
        }
        let sec = now.as_nanos() / 1_000_000_000;
        if self.challenge.0 != sec {
            self.challenge = (sec, 0);
        }
        if i64::from(self.challenge.1) < limit {
            self.challenge.1 += 1;
            true
        } else {
            false
        }
    }
}
