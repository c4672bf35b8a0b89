//! Loss recovery: SACK scoreboard (`tcp_sacktag_write_queue`), RACK-TLP (RFC 8985), PRR
//! (RFC 6937), NewReno dupack fallback, RTO (`tcp_retransmit_timer`, `tcp_enter_loss`), and the
//! retransmit queue walk (`tcp_xmit_retransmit_queue`).

use crate::env::Env;
use crate::errno::Errno;
use crate::input::{AckFlags, Rexmit};
use crate::packet::SegIn;
use crate::seq::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::timer::{RtxEvent, TimerKind, TCP_TIMEOUT_MIN_US};
use crate::Mib;
use core::time::Duration;
use shallow_cc::{CaEvent, CaState};
use shallow_wire::TcpFlags;
use std::collections::VecDeque;

/// What undoing a congestion-window reduction needs (RFC 6675 / RFC 5682 / Linux's
/// `tcp_try_undo_*`), private to this file: `undo_marker` (snd_una when the reduction
/// started; `None`: nothing to undo), `undo_retrans` (retransmissions of the episode not yet
/// shown spurious by a D-SACK; -1 before any episode), `retrans_stamp` in timestamp units (the
/// TSval of the episode's first retransmission, compared with echoed TSecr to prove a
/// retransmission spurious), cwnd and ssthresh before the reduction (`prior_cwnd`,
/// `prior_ssthresh`, which PRR also reads), and whether F-RTO (RFC 5682) is running.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Undo {
    marker: Option<u32>,
    retrans: i32,
    retrans_ts: Option<u32>,
    prior_cwnd: u32,
    prior_ssthresh: u32,
    frto: bool,
}

impl Default for Undo {
    fn default() -> Self {
        Undo {
            marker: None,
            retrans: -1,
            retrans_ts: None,
            prior_cwnd: 0,
            prior_ssthresh: 0,
            frto: false,
        }
    }
}

impl Undo {
    /// Nothing is outstanding any more: the episode's retransmission stamp is forgotten
    /// (`tp->retrans_stamp = 0`).
    pub fn forget_retrans_stamp(&mut self) {
        self.retrans_ts = None;
    }

    /// The ssthresh to restore if the reduction that follows is undone.
    pub fn save_ssthresh(&mut self, ssthresh: u32) {
        self.prior_ssthresh = ssthresh;
    }
}

/// Proportional Rate Reduction's counters for one reduction episode (RFC 6937 §3:
/// `prr_delivered`, `prr_out`), private to this file; reset when a reduction starts.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Prr {
    /// Packets delivered to the receiver since the reduction started.
    delivered: u32,
    /// Packets sent since the reduction started.
    out: u32,
}

impl Prr {
    /// `segs` packets were sent during the reduction (new data or retransmissions).
    pub fn sent(&mut self, segs: u32) {
        self.out += segs;
    }
}

impl Connection {
    fn set_ca_state(&mut self, now: Instant, st: CaState) {
        if self.ca_state != st {
            self.cc.set_state(&mut self.cc_st, st, now.as_micros());
            self.ca_state = st;
        }
    }

    /// Process SACK blocks (RFC 2018; D-SACK RFC 2883). Returns packets newly SACKed.
    pub fn sacktag(
        &mut self,
        env: &mut Env,
        now: Instant,
        seg: &SegIn<'_>,
        flag: &mut AckFlags,
    ) -> u32 {
        if !self.rx_opt.sack_ok {
            return 0;
        }
        let n = seg.opts.num_sacks as usize;
        let mut newly = 0u32;
        for (i, &(l, r)) in seg.opts.sack[..n].iter().enumerate() {
            if !after(r, l) {
                env.mib.inc(Mib::TCPSACKDiscard);
                continue;
            }
            // D-SACK: first block below the cumulative ACK, or inside the second block.
            if i == 0 {
                let is_dsack = before(l, seg.ack)
                    || (n > 1 && !before(l, seg.opts.sack[1].0) && !after(r, seg.opts.sack[1].1));
                if is_dsack {
                    self.stats
                        .count_dsack(r.wrapping_sub(l), self.mss.cache, self.snd.max_window);
                    env.mib.inc(Mib::TCPDSACKRecv);
                    flag.dsack = true;
                    env.mib.inc(Mib::TCPDSACKRecvSegs);
                    self.rack.note_dsack();
                    // tcp_check_dsack: a D-SACK for data retransmitted in this episode means
                    // the retransmission was not needed.
                    if let Some(m) = self.undo.marker {
                        if self.undo.retrans > 0 && !after(r, seg.ack) && after(r, m) {
                            let segs = r.wrapping_sub(l).div_ceil(self.mss.cache.max(1)).max(1);
                            self.undo.retrans = (self.undo.retrans - segs as i32).max(0);
                        }
                    }
                    continue;
                }
            }
            if !after(r, self.snd.una) || after(r, self.snd.nxt) {
                env.mib.inc(Mib::TCPSACKDiscard);
                continue;
            }
            newly += self.sack_range(env, now, l, r, flag);
        }
        newly
    }

    /// Mark skbs fully inside [l, r) as SACKed, splitting partially covered skbs on MSS
    /// boundaries (`tcp_match_skb_to_sack`).
    fn sack_range(
        &mut self,
        env: &mut Env,
        now: Instant,
        l: u32,
        r: u32,
        flag: &mut AckFlags,
    ) -> u32 {
        let mss = self.mss.cache.max(1);
        let mut newly = 0;
        // First buffer that ends after the block's left edge (the queue is in seq order).
        let mut i = self.rtx.queue.partition_point(|s| !after(s.end_seq, l));
        while i < self.rtx.queue.len() {
            let (seq, end) = (self.rtx.queue[i].seq, self.rtx.queue[i].end_seq);
            if !after(end, l) {
                i += 1;
                continue;
            }
            if !before(seq, r) {
                break;
            }
            // Split so the skb lies entirely inside or outside the block
            // (`tcp_match_skb_to_sack`): a block that starts inside a multi-segment skb
            // splits it at the first MSS boundary at or above the block's start, so the
            // rest is SACKed whole (fuzz seed 200083, timestamps: `sack 5767:7810` over
            // skbs of 1976 bytes at MSS 988 SACKs 6029:7017, not 5041:6029's tail).
            if before(seq, l) {
                let len = self.rtx.queue[i].len();
                if self.rtx.queue[i].pcount > 1 {
                    let gap = l.wrapping_sub(seq);
                    let off = gap.div_ceil(mss).max(1) * mss;
                    if off < len {
                        self.split_rtx(i, off);
                    }
                }
                i += 1;
                continue;
            }
            if after(end, r) {
                let off = r.wrapping_sub(seq);
                let off = off / mss * mss;
                if off > 0 && off < self.rtx.queue[i].len() {
                    self.split_rtx(i, off);
                } else {
                    break;
                }
            }
            let skb = &mut self.rtx.queue[i];
            if skb.sacked & sacked::ACKED == 0 {
                // tcp_sacktag_one: a never-retransmitted skb's send time is a SACK RTT
                // sample (`first_sackt`, `last_sackt`: Linux tags in sequence order, which
                // for never-retransmitted data is send order, so the oldest and newest
                // whatever order the blocks came in).
                if skb.sacked & (sacked::RETRANS | sacked::EVER_RETRANS) == 0 {
                    let t = skb.mstamp;
                    flag.sackt = Some(flag.sackt.map_or((t, t), |(f, l)| (f.min(t), l.max(t))));
                }
                let p = skb.pcount.max(1);
                if skb.sacked & sacked::RETRANS != 0 {
                    self.rtx.retrans_out = self.rtx.retrans_out.saturating_sub(p);
                    skb.sacked &= !sacked::RETRANS;
                }
                if skb.sacked & sacked::LOST != 0 {
                    self.rtx.lost_out = self.rtx.lost_out.saturating_sub(p);
                    skb.sacked &= !sacked::LOST;
                }
                skb.sacked |= sacked::ACKED;
                self.rtx.sacked_out += p;
                newly += p;
                let (m, e, rt) = (
                    skb.mstamp,
                    skb.end_seq,
                    skb.sacked & sacked::EVER_RETRANS != 0,
                );
                let (sseq, send) = (skb.seq, skb.end_seq);
                let tx = skb.tx;
                self.rate_skb_delivered(&tx, m);
                flag.data_sacked = true;
                // tcp_check_sack_reordering: SACK for never-retransmitted data below the
                // highest SACKed sequence means the network reordered.
                if !rt && self.rtx.sack_seen_any && before(send, self.rtx.highest_sack_end) {
                    self.note_reordering(env, sseq);
                }
                if !self.rtx.sack_seen_any || after(send, self.rtx.highest_sack_end) {
                    self.rtx.highest_sack_end = send;
                    self.rtx.sack_seen_any = true;
                }
                if !rt && !after(e, self.high_seq) {
                    flag.orig_sack_acked = true;
                }
                // Reordering: a SACK for something sent before a hole.
                self.rack_advance(m, e, rt, now);
            }
            i += 1;
        }
        let _ = env;
        newly
    }

    /// Split `rtx_queue[i]` after `off` payload bytes (`tcp_fragment` on the rtx queue).
    pub(crate) fn split_rtx(&mut self, i: usize, off: u32) {
        let mss = self.mss.cache.max(1);
        let skb = &mut self.rtx.queue[i];
        let tail = skb.data.split_off(off as usize);
        let nlen = tail.len() as u32;
        let mut rest = Skb::new(skb.seq.wrapping_add(off), TcpFlags::empty());
        rest.flags = skb.flags & (TcpFlags::FIN | TcpFlags::PSH);
        skb.flags &= !(TcpFlags::FIN | TcpFlags::PSH);
        rest.end_seq = skb.end_seq;
        skb.end_seq = skb.seq.wrapping_add(off);
        rest.data = tail;
        rest.truesize += nlen;
        skb.truesize = skb.truesize.saturating_sub(nlen);
        rest.zc = skb.zc;
        rest.frags = skb.frags;
        rest.sacked = skb.sacked;
        rest.mstamp = skb.mstamp;
        rest.edt = skb.edt;
        rest.first_tx = skb.first_tx;
        // tcp_fragment: both parts keep the send snapshot (`TCP_SKB_CB(buff)->tx`).
        rest.tx = skb.tx;
        // tcp_fragment_tstamp: the timestamp request stays with its byte.
        crate::tstamp::split_mark(&mut skb.tstamp, &mut rest.tstamp, rest.seq);
        let old = skb.pcount;
        skb.pcount = skb.len().div_ceil(mss).max(1);
        rest.pcount = rest.len().div_ceil(mss).max(1);
        let diff = (skb.pcount + rest.pcount).saturating_sub(old);
        let fl = skb.sacked;
        self.rtx.packets_out += diff;
        if fl & sacked::LOST != 0 {
            self.rtx.lost_out += diff;
        }
        if fl & sacked::RETRANS != 0 {
            self.rtx.retrans_out += diff;
        }
        if fl & sacked::ACKED != 0 {
            self.rtx.sacked_out += diff;
        }
        self.mem.wmem_queued += SKB_TX_OVERHEAD;
        self.rtx.queue.insert(i + 1, rest);
    }

    /// Give `rtx_queue[i]` a new segment count, and the counters of what it is (in flight,
    /// lost, retransmitted, SACKed) the difference (`tcp_adjust_pcount`).
    pub(crate) fn adjust_pcount(&mut self, i: usize, new: u32) {
        let skb = &mut self.rtx.queue[i];
        let old = skb.pcount.max(1);
        if new == old {
            return;
        }
        skb.pcount = new;
        let fl = skb.sacked;
        let adj = |v: &mut u32| *v = (*v + new).saturating_sub(old);
        adj(&mut self.rtx.packets_out);
        if fl & sacked::LOST != 0 {
            adj(&mut self.rtx.lost_out);
        }
        if fl & sacked::RETRANS != 0 {
            adj(&mut self.rtx.retrans_out);
        }
        if fl & sacked::ACKED != 0 {
            adj(&mut self.rtx.sacked_out);
        }
    }

    /// Mark `rtx_queue[i]` lost (`tcp_mark_skb_lost`). A retransmission already marked lost
    /// is lost again (its retransmission no longer counts in flight); one retransmitted
    /// without having been deemed lost (a TLP probe) becomes lost and stays in flight.
    pub(crate) fn mark_lost(&mut self, i: usize) {
        let skb = &mut self.rtx.queue[i];
        let p = skb.pcount.max(1);
        if skb.sacked & sacked::ACKED != 0 {
            return;
        }
        if skb.sacked & sacked::LOST != 0 {
            if skb.sacked & sacked::RETRANS != 0 {
                skb.sacked &= !sacked::RETRANS;
                self.rtx.retrans_out = self.rtx.retrans_out.saturating_sub(p);
            }
        } else {
            skb.sacked |= sacked::LOST;
            self.rtx.lost_out += p;
        }
    }

    /// `tcp_timeout_mark_lost` (RTO): every un-SACKed skb is lost except ones sent so
    /// recently that RACK would not yet time them out (the head always is). A SACKed head
    /// means the receiver reneged (dropped out-of-order data it had SACKed, e.g. under memory
    /// pressure): `TcpExtTCPSACKReneging`, every SACK mark is forgotten and all is lost.
    fn timeout_mark_lost(&mut self, env: &mut Env, now: Instant) {
        let rtt = self.rack.rtt();
        let reneg = self
            .rtx
            .queue
            .front()
            .is_some_and(|h| h.sacked & sacked::ACKED != 0);
        if reneg {
            env.mib.inc(Mib::TCPSACKReneging);
            self.rtx.sacked_out = 0;
            for s in self.rtx.queue.iter_mut() {
                s.sacked &= !sacked::ACKED;
            }
        }
        for i in 0..self.rtx.queue.len() {
            if !reneg && i > 0 && now - self.rtx.queue[i].mstamp < rtt {
                continue;
            }
            self.mark_lost(i);
        }
    }

    /// `tcp_check_sack_reneging`, in every state: an ACK that advances snd_una onto an skb
    /// the receiver had SACKed says the receiver dropped data it had SACKed (or its SACKs were
    /// odd). The receiver gets max(srtt/2, 10 ms) to send ACKs that restore the scoreboard;
    /// then the retransmit timer fires and `tcp_timeout_mark_lost` forgets every SACK mark.
    /// The ACK's loss detection stops here. True when it did.
    fn check_sack_reneging(
        &mut self,
        env: &mut Env,
        now: Instant,
        prior_snd_una: u32,
        flag: &mut AckFlags,
    ) -> bool {
        if !flag.sack_reneging || !after(self.snd.una, prior_snd_una) {
            return false;
        }
        let half_srtt = Duration::from_micros(u64::from(self.rtt.srtt_us() >> 4));
        self.timer.rtx_event = RtxEvent::Rto;
        self.arm(
            env,
            TimerKind::Retrans,
            now + half_srtt.max(Duration::from_millis(10)),
        );
        flag.xmit_timer_set = true;
        true
    }

    /// NewReno: mark the head lost once dupacks reach the reordering threshold.
    fn newreno_mark_lost(&mut self) {
        if self.rtx.sacked_out >= self.reordering || (self.ca_state == CaState::Recovery) {
            if let Some(h) = self.rtx.queue.front() {
                if h.sacked & (sacked::LOST | sacked::RETRANS) == 0 {
                    // tcp_newreno_mark_lost: only the head's first MSS is deemed lost; a
                    // multi-segment head is fragmented (tcp_fragment) before marking.
                    let mss = self.mss.cache.max(1);
                    if h.pcount > 1 && h.len() > mss {
                        self.split_rtx(0, mss);
                    }
                    self.mark_lost(0);
                }
            }
        }
    }

    /// `tcp_fastretrans_alert` (simplified): detect loss, enter/exit Recovery, PRR, retransmit.
    pub fn fastretrans_alert(
        &mut self,
        env: &mut Env,
        now: Instant,
        prior_snd_una: u32,
        is_dupack: bool,
        delivered: u32,
        flag: &mut AckFlags,
    ) {
        let rack = env.sysint(Sysctl::tcp_recovery) & 1 != 0;
        if self.check_sack_reneging(env, now, prior_snd_una, flag) {
            return;
        }
        if self.ca_state == CaState::Loss {
            self.process_loss(env, now, prior_snd_una, is_dupack, flag);
            // tcp_identify_packet_loss: RACK also runs in Loss, so a retransmission that is
            // lost again (sent before the newly delivered one, older than an RTT) is resent
            // at once (FLAG_LOST_RETRANS) instead of waiting for the next RTO; and it runs
            // after an undo too, whose ACK then goes on as one in Open (measured on 6.18,
            // kernel recording frto-undo-rack.pkt: after an RTO undone by F-RTO, the tail
            // sent before the RACK skb was retransmitted when its reordering window ran
            // out, not probed or left to the RTO).
            if rack && self.rx_opt.sack_ok && self.rack.take_advanced() {
                if let Some(t) = self.rack_detect_loss(now) {
                    self.arm_reo_timeout(env, now, t, flag);
                }
                if self.ca_state == CaState::Loss
                    && flag.rexmit != Rexmit::New
                    && self.rtx.lost_out > self.rtx.retrans_out
                {
                    flag.rexmit = Rexmit::Lost;
                }
            }
            if self.ca_state == CaState::Loss {
                return;
            }
        }
        // Exit recovery.
        match self.ca_state {
            CaState::Recovery if !before(self.snd.una, self.high_seq) => {
                if self.may_undo() {
                    // tcp_try_undo_recovery / tcp_try_undo_loss.
                    env.mib.inc(if self.ca_state == CaState::Loss {
                        Mib::TCPLossUndo
                    } else {
                        Mib::TCPFullUndo
                    });
                    self.undo_cwnd_reduction(now);
                } else if self.ca_state == CaState::Recovery {
                    // tcp_end_cwnd_reduction
                    if self.cc_st.snd_ssthresh < shallow_cc::TCP_INFINITE_SSTHRESH {
                        self.cc_st.snd_cwnd = self.cc_st.snd_ssthresh.max(1);
                    }
                    self.cwnd_use.restamp(now);
                    self.cc
                        .cwnd_event(&mut self.cc_st, CaEvent::CompleteCwr, now.as_micros());
                }
                self.set_ca_state(now, CaState::Open);
            }
            _ => {}
        }
        // CWR ends once something above high_seq is acked, so the CWR bit reached the
        // receiver (tcp_fastretrans_alert, state exit conditions).
        if self.ca_state == CaState::Cwr
            && !before(self.snd.una, self.high_seq)
            && self.snd.una != self.high_seq
        {
            if self.cc_st.snd_ssthresh < shallow_cc::TCP_INFINITE_SSTHRESH {
                self.cc_st.snd_cwnd = self.cc_st.snd_ssthresh.max(1);
            }
            self.cc
                .cwnd_event(&mut self.cc_st, CaEvent::CompleteCwr, now.as_micros());
            self.set_ca_state(now, CaState::Open);
        }
        // D-SACKs covered every retransmission: undo (tcp_try_undo_dsack).
        if matches!(self.ca_state, CaState::Recovery | CaState::Disorder)
            && self.undo.marker.is_some()
            && self.undo.retrans == 0
        {
            env.mib.inc(Mib::TCPDSACKUndo);
            self.undo_cwnd_reduction(now);
        }
        // Loss detection.
        let una_advanced = after(self.snd.una, prior_snd_una);
        let lost_before = self.rtx.lost_out;
        let mut reo_timeout = None;
        if !self.rtx.queue.is_empty() {
            if !self.rx_opt.sack_ok {
                if is_dupack || self.ca_state == CaState::Recovery {
                    self.newreno_mark_lost();
                }
            } else if rack && self.rack.take_advanced() {
                reo_timeout = self.rack_detect_loss(now);
            }
        }
        if self.ca_state == CaState::Open && (self.rtx.sacked_out > 0) {
            self.set_ca_state(now, CaState::Disorder);
        } else if self.ca_state == CaState::Disorder
            && self.rtx.sacked_out == 0
            && self.rtx.lost_out == 0
        {
            self.set_ca_state(now, CaState::Open);
        }
        let newly_lost = self.rtx.lost_out.saturating_sub(lost_before);
        // MTU probe failure (tcp_fastretrans_alert): the lost head is the probe; shrink the
        // search, give back the cwnd the probe took, and resend at the current MSS without
        // a congestion response.
        if self.rtx.lost_out > 0
            && matches!(self.ca_state, CaState::Open | CaState::Disorder)
            && self.mtup.probe_at_head(self.snd.una)
        {
            self.mtup_probe_failed(env, now);
            self.cc_st.snd_cwnd += 1;
            self.simple_retransmit(env, now);
            return;
        }
        // Enter recovery on the first loss.
        if self.rtx.lost_out > 0
            && matches!(
                self.ca_state,
                CaState::Open | CaState::Disorder | CaState::Cwr
            )
        {
            self.enter_recovery(env, now, flag.ece);
        }
        // tcp_try_to_open: an ECN echo without loss starts a CWR episode.
        if flag.ece && self.rtx.lost_out == 0 {
            self.enter_cwr(now);
        }
        if matches!(self.ca_state, CaState::Recovery | CaState::Cwr) {
            self.cwnd_reduction(delivered, newly_lost, una_advanced);
        }
        let _ = prior_snd_una;
        if self.rtx.lost_out > self.rtx.retrans_out {
            self.xmit_retransmit_queue(env, now);
        }
        if let Some(t) = reo_timeout {
            self.arm_reo_timeout(env, now, t, flag);
        }
    }

    /// Arms RACK's reordering timer (`tcp_rack_mark_lost`): this ACK's processing then
    /// leaves the retransmit timer alone (`FLAG_SET_XMIT_TIMER` cleared), so the loss probe
    /// or RTO that an ACK of new data would set does not replace it.
    fn arm_reo_timeout(&mut self, env: &mut Env, now: Instant, t: Duration, flag: &mut AckFlags) {
        if self.rtx.packets_out > 0 {
            self.timer.rtx_event = RtxEvent::ReoTimeout;
            self.arm(env, TimerKind::Retrans, now + t + TCP_TIMEOUT_MIN_US);
            flag.xmit_timer_set = true;
        }
    }

    /// PRR (RFC 6937 §3 as updated by RFC 9937; Linux `tcp_cwnd_reduction`): set cwnd to what may be in flight
    /// after `newly_acked_sacked` packets were delivered. Below ssthresh, the slow-start
    /// reduction bound sends max(prr_delivered - prr_out, newly delivered), plus one when
    /// snd_una advanced and nothing was newly marked lost, capped by ssthresh - pipe.
    pub(crate) fn cwnd_reduction(
        &mut self,
        newly_acked_sacked: u32,
        newly_lost: u32,
        una_advanced: bool,
    ) {
        if newly_acked_sacked == 0 || self.undo.prior_cwnd == 0 {
            return;
        }
        self.prr.delivered += newly_acked_sacked;
        let in_flight = self.packets_in_flight() as i64;
        let ssthresh = i64::from(self.cc_st.snd_ssthresh);
        let delta = ssthresh - in_flight;
        let prr_out = i64::from(self.prr.out);
        let mut sndcnt = if delta < 0 {
            let dividend =
                ssthresh * i64::from(self.prr.delivered) + i64::from(self.undo.prior_cwnd) - 1;
            dividend / i64::from(self.undo.prior_cwnd) - prr_out
        } else {
            let mut n =
                (i64::from(self.prr.delivered) - prr_out).max(i64::from(newly_acked_sacked));
            // PRR-SSRB (one extra segment) on a "safe" ACK: snd_una advanced and this
            // ACK marked nothing newly lost (RFC 9937's safeACK), whether or not the
            // acked data had been retransmitted; otherwise PRR-CRB (packet conservation).
            // Measured on 6.18: an ECN echo acking one of four segments (CWR, nothing
            // retransmitted) gives cwnd 3 + 2 = 5; the same echo on a SACK-only dupack
            // (snd_una still) gives 3 + 1 = 4.
            if una_advanced && newly_lost == 0 {
                n += 1;
            }
            delta.min(n)
        };
        // Force a fast retransmit upon entering fast recovery.
        sndcnt = sndcnt.max(i64::from(self.prr.out == 0));
        self.cc_st.snd_cwnd = (in_flight + sndcnt).max(1) as u32;
    }

    /// ACK processing in the Loss state (`tcp_process_loss`) with F-RTO (RFC 5682 §3.1, the
    /// SACK-enhanced variant Linux uses with `tcp_frto` = 2).
    fn process_loss(
        &mut self,
        env: &mut Env,
        now: Instant,
        prior_snd_una: u32,
        is_dupack: bool,
        flag: &mut AckFlags,
    ) {
        let una_advanced = after(self.snd.una, prior_snd_una);
        let recovered = !before(self.snd.una, self.high_seq);
        if una_advanced && self.may_undo() {
            // tcp_try_undo_loss(sk, false): timestamps show the original got through.
            env.mib.inc(Mib::TCPLossUndo);
            self.undo_cwnd_reduction(now);
            return;
        }
        let mut send_new = false;
        if self.undo.frto {
            // Step 3.b: never-retransmitted data was (s)acked → the RTO was spurious.
            if flag.orig_sack_acked {
                env.mib.inc(Mib::TCPSpuriousRTOs);
                env.mib.inc(Mib::TCPLossUndo);
                self.undo_cwnd_reduction(now);
                return;
            }
            if after(self.snd.nxt, self.high_seq) {
                if flag.data_sacked || is_dupack {
                    self.undo.frto = false; // step 3.a: the loss was real
                }
            } else if una_advanced && !recovered {
                self.high_seq = self.snd.nxt;
                // Step 2.b: send new data instead of retransmitting, if any fits.
                if !self.snd.write_queue.is_empty() && after(self.snd_wnd_end(), self.snd.nxt) {
                    send_new = true;
                } else {
                    self.undo.frto = false;
                }
            }
        }
        if recovered && !send_new {
            // Step 2.a: everything acked; end the episode (tcp_try_undo_recovery).
            if self.may_undo() {
                env.mib.inc(Mib::TCPLossUndo);
                self.undo_cwnd_reduction(now);
            } else {
                self.set_ca_state(now, CaState::Open);
            }
            return;
        }
        if !self.rx_opt.sack_ok && is_dupack {
            self.newreno_mark_lost();
        }
        if send_new {
            // tcp_xmit_recovery with REXMIT_NEW (after cwnd was updated by this ACK).
            flag.rexmit = Rexmit::New;
            return;
        }
        // tcp_xmit_recovery with REXMIT_LOST, after this ACK's slow-start growth.
        if self.rtx.lost_out > self.rtx.retrans_out {
            flag.rexmit = Rexmit::Lost;
        }
        let _ = env;
    }

    /// `tcp_xmit_recovery`, run by an ACK once cwnd is updated: the deferred F-RTO "send new
    /// data" step, or the Loss state's retransmissions.
    pub fn frto_xmit_new(&mut self, env: &mut Env, now: Instant, flag: &AckFlags) {
        if flag.rexmit == Rexmit::Lost && self.rtx.lost_out > self.rtx.retrans_out {
            self.xmit_retransmit_queue(env, now);
        }
        if flag.rexmit != Rexmit::New {
            return;
        }
        self.push_pending_frames(env, now, crate::output::NAGLE_OFF);
        if after(self.snd.nxt, self.high_seq) {
            return;
        }
        self.undo.frto = false;
        if self.rtx.lost_out > self.rtx.retrans_out {
            self.xmit_retransmit_queue(env, now);
        }
    }

    /// `tcp_simple_retransmit`: after a path-MTU drop, resend everything larger than the new
    /// MSS (entering Loss without a cwnd reduction beyond ssthresh).
    pub fn simple_retransmit(&mut self, env: &mut Env, now: Instant) {
        let mss = self.mss.cache;
        let prior_lost = self.rtx.lost_out;
        for i in 0..self.rtx.queue.len() {
            let s = &self.rtx.queue[i];
            if s.len() > mss && s.sacked & sacked::ACKED == 0 {
                self.rtx.queue[i].in_host = 0;
                self.mark_lost(i);
            }
        }
        if prior_lost == self.rtx.lost_out {
            return;
        }
        self.non_congestion_loss_retransmit(env, now);
    }

    /// `tcp_non_congestion_loss_retransmit`: resend what is marked lost, in Loss but without
    /// a congestion response beyond `tcp_current_ssthresh` (a path-MTU drop, SYN data the
    /// SYN-ACK did not cover).
    pub fn non_congestion_loss_retransmit(&mut self, env: &mut Env, now: Instant) {
        if self.ca_state != CaState::Loss {
            self.high_seq = self.snd.nxt;
            self.cc_st.snd_ssthresh = self
                .cc_st
                .snd_ssthresh
                .max((self.snd_cwnd() >> 1) + (self.snd_cwnd() >> 2));
            self.undo.prior_ssthresh = 0;
            self.undo.marker = None;
            self.set_ca_state(now, CaState::Loss);
        }
        self.xmit_retransmit_queue(env, now);
    }

    /// Reordering detected for data starting at `seq` (`tcp_check_sack_reordering`): raise
    /// the dupthresh-like `reordering` (capped by `tcp_max_reordering`) and let RACK keep its
    /// reordering window.
    pub fn note_reordering(&mut self, env: &mut Env, seq: u32) {
        let mss = self.mss.cache.max(1);
        let metric = self.rtx.highest_sack_end.wrapping_sub(seq);
        let max = env.sysint(Sysctl::tcp_max_reordering) as u32;
        if metric > self.reordering.saturating_mul(mss) {
            self.reordering = metric.div_ceil(mss).min(max);
        }
        self.stats.count_reordering();
        env.mib.inc(if self.rx_opt.sack_ok {
            Mib::TCPSACKReorder
        } else {
            Mib::TCPRenoReorder
        });
    }

    /// `tcp_init_undo`.
    fn init_undo(&mut self) {
        self.undo.marker = Some(self.snd.una);
        self.undo.retrans = if self.rtx.retrans_out > 0 {
            self.rtx.retrans_out as i32
        } else {
            -1
        };
    }

    /// `tcp_packet_delayed`: the ACK echoes a timestamp older than our first retransmission,
    /// so the original transmission got through.
    fn packet_delayed(&self) -> bool {
        match self.undo.retrans_ts {
            Some(t) => {
                self.rx_opt.tstamp_ok
                    && self.rx_opt.rcv_tsecr != 0
                    && before(self.rx_opt.rcv_tsecr, t)
            }
            None => false,
        }
    }

    /// `tcp_may_undo`.
    fn may_undo(&self) -> bool {
        self.undo.marker.is_some() && (self.undo.retrans == 0 || self.packet_delayed())
    }

    /// `tcp_undo_cwnd_reduction`: restore cwnd/ssthresh, forget LOST marks, back to Open.
    fn undo_cwnd_reduction(&mut self, now: Instant) {
        for s in self.rtx.queue.iter_mut() {
            s.sacked &= !sacked::LOST;
        }
        self.rtx.lost_out = 0;
        if self.undo.prior_ssthresh > 0 {
            let c = self.cc.undo_cwnd(&self.cc_st, self.undo.prior_cwnd);
            self.cc_st.snd_cwnd = self.cc_st.snd_cwnd.max(c);
            if self.undo.prior_ssthresh > self.cc_st.snd_ssthresh {
                self.cc_st.snd_ssthresh = self.undo.prior_ssthresh;
            }
        }
        self.undo.marker = None;
        self.undo.retrans_ts = None;
        self.cwnd_use.restamp(now);
        self.set_ca_state(now, CaState::Open);
    }

    /// Enter fast recovery (`tcp_enter_recovery` + `tcp_init_cwnd_reduction`).
    pub(crate) fn enter_recovery(&mut self, env: &mut Env, now: Instant, ece: bool) {
        env.mib.inc(if self.rx_opt.sack_ok {
            Mib::TCPSackRecovery
        } else {
            Mib::TCPRenoRecovery
        });
        self.high_seq = self.snd.nxt;
        self.init_undo();
        // tcp_enter_recovery: a reduction already under way (CWR after ECE) is kept.
        if self.ca_state != CaState::Cwr {
            self.undo.prior_ssthresh = if ece { 0 } else { self.cc_st.snd_ssthresh };
            self.init_cwnd_reduction(now);
        }
        self.set_ca_state(now, CaState::Recovery);
    }

    /// `tcp_init_cwnd_reduction`: start a PRR episode (ssthresh from CC, prior_cwnd, PRR
    /// counters) and queue CWR for the peer when ECN is on (`tcp_ecn_queue_cwr`).
    fn init_cwnd_reduction(&mut self, now: Instant) {
        self.high_seq = self.snd.nxt;
        self.undo.prior_cwnd = self.snd_cwnd();
        self.sync_cc_state(now);
        self.cc_st.snd_ssthresh = self.cc.ssthresh(&self.cc_st);
        self.prr = Prr::default();
        if self.ecn_flags & crate::socket::ecnf::OK != 0 {
            self.ecn_flags |= crate::socket::ecnf::QUEUE_CWR;
        }
    }

    /// `tcp_enter_cwr` (RFC 3168 §6.1.2): an ECN echo reduces cwnd once per window through
    /// PRR in the CWR state; the reduction cannot be undone.
    pub(crate) fn enter_cwr(&mut self, now: Instant) {
        self.undo.prior_ssthresh = 0;
        if matches!(self.ca_state, CaState::Open | CaState::Disorder) {
            self.undo.marker = None;
            self.tlp.end();
            self.init_cwnd_reduction(now);
            self.set_ca_state(now, CaState::Cwr);
        }
    }

    /// Retransmit lost skbs as cwnd allows (`tcp_xmit_retransmit_queue`). Resending the
    /// head of the retransmit queue restarts the RTO from now, unless RACK's reordering timer
    /// is the one pending (measured on 6.18, fuzz seed 140195: after an RTO, the head resent
    /// at 0.716 s in the loss state was next resent at 1.160 s, the backed-off RTO counted
    /// from that resend; the engine had kept the RTO an earlier ACK armed and resent at 0.906 s).
    pub fn xmit_retransmit_queue(&mut self, env: &mut Env, now: Instant) {
        let head_seq = self.rtx.queue.front().map(|s| s.seq);
        let mut rearm = false;
        let mut i = 0;
        while i < self.rtx.queue.len() {
            if self.packets_in_flight() >= self.snd_cwnd() {
                break;
            }
            let s = &self.rtx.queue[i];
            if s.sacked & sacked::LOST == 0 || s.sacked & (sacked::RETRANS | sacked::ACKED) != 0 {
                i += 1;
                continue;
            }
            // Double TSQ limit for retransmits.
            let limit = (2 * u64::from(s.truesize))
                .max(self.pacing.rate() >> 10)
                .min(env.sysint(Sysctl::tcp_limit_output_bytes) as u64)
                << 1;
            if u64::from(self.wmem_alloc_biased()) > limit && self.rtx.queue.len() > 1 {
                self.tsq_flags |= tsq::THROTTLED;
                break;
            }
            let resent_head = Some(self.rtx.queue[i].seq) == head_seq;
            if !self.retransmit_skb(env, now, i, 0) {
                break;
            }
            if resent_head
                && !(self.timer.armed(TimerKind::Retrans)
                    && self.timer.rtx_event == RtxEvent::ReoTimeout)
            {
                rearm = true;
            }
            if self.ca_state == CaState::Recovery {
                self.prr.sent(self.rtx.queue[i].pcount);
                env.mib.inc(Mib::TCPFastRetrans);
            } else if self.ca_state == CaState::Loss {
                env.mib.inc(Mib::TCPSlowStartRetrans);
            }
            i += 1;
        }
        if rearm {
            self.timer.rtx_event = RtxEvent::Rto;
            let at = now + self.rtt.rto();
            self.arm(env, TimerKind::Retrans, at);
        }
    }

    /// `tcp_retransmit_skb`: resend `rtx_queue[i]` (split to what cwnd allows) and count it
    /// as a retransmission in flight (`TCPCB_SACKED_RETRANS`, `retrans_out`, undo state).
    /// `segs_limit`: 0 = cwnd decides.
    /// Returns whether it was sent.
    pub fn retransmit_skb(
        &mut self,
        env: &mut Env,
        now: Instant,
        i: usize,
        segs_limit: u32,
    ) -> bool {
        if !self.resend_skb(env, now, i, segs_limit) {
            return false;
        }
        let s = &mut self.rtx.queue[i];
        let p = s.pcount.max(1);
        if s.sacked & sacked::RETRANS == 0 {
            s.sacked |= sacked::RETRANS;
            self.rtx.retrans_out += p;
        }
        if self.timer.retrans_stamp.is_none() {
            self.timer.retrans_stamp = Some(s.first_tx);
        }
        if self.undo.retrans_ts.is_none() {
            self.undo.retrans_ts = Some(self.tsval(now));
        }
        if self.undo.retrans < 0 {
            self.undo.retrans = 0;
        }
        self.undo.retrans += p as i32;
        true
    }

    /// `__tcp_retransmit_skb`: resend `rtx_queue[i]`, split to what cwnd allows, marking it
    /// `TCPCB_EVER_RETRANS` only. Used alone by the tail loss probe, whose copy is not a
    /// retransmission in flight. Returns whether it was sent.
    pub(crate) fn resend_skb(
        &mut self,
        env: &mut Env,
        now: Instant,
        i: usize,
        segs_limit: u32,
    ) -> bool {
        let mss = self.current_mss();
        let avail = self
            .snd_cwnd()
            .saturating_sub(self.packets_in_flight())
            .max(1);
        let segs = if segs_limit > 0 { segs_limit } else { avail };
        // tcp_xmit_retransmit_queue: no more than a TSO packet's worth (tcp_tso_segs), so a
        // segment marked lost for a smaller MTU goes out as autosized TSO packets (measured
        // on 6.18: 2920 bytes resent at MSS 1160 with a slow pacing rate as 2320 + 600).
        let segs = if self.gso_ok(env) {
            segs.min(self.tso_segs(env, mss))
        } else {
            1
        };
        // Only what the peer's window takes: a segment past the window's edge is cut to it;
        // one wholly past it goes out (one MSS) only at snd_una, else not at all (-EAGAIN).
        // Measured on 6.18: with `ack 707 win 1`, the retransmission is `. 707:708(1)`.
        let seq = self.rtx.queue[i].seq;
        let wnd_end = self.snd_wnd_end();
        let avail_wnd = if after(wnd_end, seq) {
            wnd_end.wrapping_sub(seq)
        } else if seq == self.snd.una {
            mss
        } else {
            env.mib.add(
                Mib::TCPRetransFail,
                u64::from(self.rtx.queue[i].pcount.max(1)),
            );
            return false;
        };
        // Cut to the window in whole segments, a partial one only when not one whole fits
        // (measured on 6.18, fuzz seed 150032: 1,071 bytes to resend into 1,280 bytes of window
        // with cwnd for two went out as 1,000 + 71, not as one packet).
        let mut max_len = segs.saturating_mul(mss);
        if max_len > avail_wnd {
            max_len = avail_wnd / mss.max(1) * mss;
            if max_len == 0 {
                max_len = avail_wnd;
            }
        }
        if self.rtx.queue[i].len() > max_len && max_len > 0 {
            self.split_rtx(i, max_len);
        } else {
            // The segments it makes at the current MSS (tcp_set_skb_tso_segs, with
            // tcp_adjust_pcount keeping the counters true).
            let new = self.rtx.queue[i].len().div_ceil(mss.max(1)).max(1);
            self.adjust_pcount(i, new);
        }
        if self.rtx.queue[i].in_host > 0 {
            // skb_still_in_host_queue: the original is still below us.
            env.mib.inc(Mib::TCPSpuriousRtxHostQueues);
            self.tsq_flags |= tsq::THROTTLED;
            return false;
        }
        // __tcp_retransmit_skb counts the retransmission before it transmits (measured on
        // 6.18: the retransmission's own SCHED stamp has TCP_NLA_TOTAL_RETRANS 1), and
        // keeps the count when the transmit fails.
        self.stats.count_retrans(self.rtx.queue[i].pcount.max(1));
        if !self.transmit_skb(env, now, i, true) {
            // __tcp_retransmit_skb: a failed attempt is counted, and the skb is still marked
            // EVER_RETRANS so that no RTT sample is taken from a send that never happened.
            env.mib.add(
                Mib::TCPRetransFail,
                u64::from(self.rtx.queue[i].pcount.max(1)),
            );
            self.rtx.queue[i].sacked |= sacked::EVER_RETRANS;
            return false;
        }
        self.rtx.queue[i].sacked |= sacked::EVER_RETRANS;
        true
    }

    /// `tcp_rearm_rto`: the retransmission timer for the head of the retransmit queue
    /// (nothing when no packet is out).
    pub(crate) fn rearm_rto(&mut self, env: &mut Env, now: Instant) {
        if self.rtx.packets_out == 0 {
            return;
        }
        self.timer.rtx_event = RtxEvent::Rto;
        let at = self.rto_deadline(now, false);
        self.arm(env, TimerKind::Retrans, at);
    }

    /// When the RTO would fire: head skb's send time + rto (`tcp_rearm_rto` with
    /// `tcp_rto_delta_us`), or now + rto.
    pub(crate) fn rto_deadline(&self, now: Instant, advancing: bool) -> Instant {
        let rto = self.rtt.rto();
        if advancing {
            return now + rto;
        }
        self.head_rto_at()
            .filter(|&at| at > now)
            .unwrap_or(now + rto)
    }

    /// The head skb's send time + rto (`tcp_rto_delta_us`), if the head was sent.
    fn head_rto_at(&self) -> Option<Instant> {
        let h = self.rtx.queue.front()?;
        (h.mstamp != Instant::ZERO).then(|| h.mstamp + self.rtt.rto())
    }

    /// The RTO re-armed by a timer that was the loss probe's or RACK's (`tcp_rearm_rto`
    /// with `tcp_rto_delta_us`): the head's send time + rto, and when that has passed, at
    /// once (a microsecond, which the jiffy rule makes the next tick but one).
    pub(crate) fn rto_deadline_from_head(&self, now: Instant) -> Instant {
        match self.head_rto_at() {
            Some(at) => at.max(now + Duration::from_micros(1)),
            None => now + self.rtt.rto(),
        }
    }

    /// RTO expiry for an established connection (`tcp_retransmit_timer`).
    pub fn retransmit_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        if self.rtx.packets_out == 0 || self.rtx.queue.is_empty() {
            return false;
        }
        if self.write_timeout(env, now) {
            return true;
        }
        // tcp_enter_loss
        env.mib.inc(Mib::TCPTimeouts);
        let new_recovery = matches!(
            self.ca_state,
            CaState::Open | CaState::Disorder | CaState::Cwr
        );
        self.undo.frto =
            env.sysint(Sysctl::tcp_frto) != 0 && (new_recovery || self.timer.retransmits > 0);
        if !matches!(self.ca_state, CaState::Loss) {
            self.undo.prior_ssthresh = self.cc_st.snd_ssthresh;
            self.undo.prior_cwnd = self.snd_cwnd();
            self.init_undo();
            self.sync_cc_state(now);
            self.cc_st.snd_ssthresh = self.cc.ssthresh(&self.cc_st);
            self.cc
                .cwnd_event(&mut self.cc_st, CaEvent::Loss, now.as_micros());
        }
        self.timeout_mark_lost(env, now);
        // tcp_enter_loss: cwnd = what is still in flight (retransmissions not yet deemed
        // lost) plus one.
        self.cc_st.snd_cwnd = self.packets_in_flight() + 1;
        self.cc_st.snd_cwnd_cnt = 0;
        self.cwnd_use.restamp(now);
        // Timeout in Disorder after many dupacks: reordering was over-estimated.
        let sysctl_reo = env.sysint(Sysctl::tcp_reordering) as u32;
        if matches!(self.ca_state, CaState::Open | CaState::Disorder)
            && self.rtx.sacked_out >= sysctl_reo
        {
            self.reordering = self.reordering.min(sysctl_reo);
        }
        self.high_seq = self.snd.nxt;
        self.tlp.end();
        self.set_ca_state(now, CaState::Loss);
        // tcp_update_rto_stats: the timeout is counted before the head goes out (measured on
        // 6.18: the first RTO's retransmission is stamped with TCP_NLA_RECUR_RETRANS 1).
        self.timer.retransmits += 1;
        // Retransmit the head.
        if let Some(h) = self.rtx.queue.front() {
            if h.sacked & sacked::ACKED == 0 {
                self.rtx.queue[0].in_host = 0;
                self.retransmit_skb(env, now, 0, 1);
            }
        }
        self.timer.backoff += 1;
        self.rtt.backoff_rto(self.rto_max(env));
        self.timer.rtx_event = RtxEvent::Rto;
        let at = now + self.rtt.rto();
        self.arm(env, TimerKind::Retrans, at);
        false
    }

    /// `tcp_write_timeout`: too many retransmissions → ETIMEDOUT. Returns true if the
    /// connection was killed.
    pub fn write_timeout(&mut self, env: &mut Env, now: Instant) -> bool {
        let syn = matches!(self.state, TcpState::SynSent | TcpState::SynRecv);
        let (boundary, base) = if syn {
            let r = self
                .opts
                .syn_retries
                .unwrap_or(env.sysint(Sysctl::tcp_syn_retries) as u32);
            (r, TCP_TIMEOUT_INIT)
        } else {
            let mut r = env.sysint(Sysctl::tcp_retries2) as u32;
            if self.orphan {
                let o = env.sysint(Sysctl::tcp_orphan_retries) as u32;
                r = if o == 0 { 8 } else { o };
            }
            (r, self.rto_min(env))
        };
        let start = self.timer.retrans_stamp.unwrap_or(now);
        let elapsed = now - start;
        let expired = if self.opts.user_timeout_ms != 0 && !syn {
            elapsed >= Duration::from_millis(u64::from(self.opts.user_timeout_ms))
        } else if syn {
            self.timer.retransmits >= boundary
        } else {
            elapsed >= retrans_timeout(base, boundary)
        };
        self.fastopen_detect_blackhole(env, now, expired);
        if expired {
            self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
            env.mib.inc(Mib::TCPAbortOnTimeout);
            if self.state == TcpState::SynSent {
                env.mib.inc(Mib::AttemptFails);
            }
            self.set_closed(env);
            return true;
        }
        // sk_rethink_txhash: a timeout the connection survives picks a new flow hash
        // (`net.core.txrehash`, on by default), counted in `timeout_rehash` (measured on 6.18:
        // three RTOs of one write, TCP_NLA_TIMEOUT_REHASH 1, 2, 3 on their SCHED stamps; a
        // tail loss probe counts none).
        self.stats.count_timeout_rehash();
        false
    }
}

/// Total time of `boundary` exponential retransmissions from `base`, capped at TCP_RTO_MAX per
/// step (`retransmits_timed_out`'s timeout computation).
fn retrans_timeout(base: Duration, boundary: u32) -> Duration {
    let base_ms = base.as_millis().max(1) as u64;
    let max_ms = TCP_RTO_MAX.as_millis() as u64;
    let thresh = 63 - (max_ms / base_ms).max(1).leading_zeros();
    let ms = if boundary <= thresh {
        ((2u64 << boundary) - 1) * base_ms
    } else {
        ((2u64 << thresh) - 1) * base_ms + u64::from(boundary - thresh) * max_ms
    };
    Duration::from_millis(ms)
}

/// The retransmit queue (`tcp_rtx_queue`: sent buffers not yet cumulatively acknowledged)
/// and the scoreboard over it (`tcp_sock`'s `packets_out`, `sacked_out`, `lost_out`,
/// `retrans_out`, `delivered`, the highest SACKed sequence). `pub(crate)` fields, as in
/// Linux's `tcp_sock`: the output (output.rs) appends and counts what it sends, the ACK
/// processing (input.rs) removes what is acked, the SACK and loss rules here and in rack.rs
/// mark buffers and move the counters, and rate.rs, the congestion control and `tcp_info` read
/// them. Each counter counts segments (`pcount`): `packets_out` of all the queue's buffers,
/// the others of those in its state.
#[derive(Debug)]
pub(crate) struct RtxQueue {
    /// Sent buffers in sequence order (`tcp_rtx_queue`).
    pub queue: VecDeque<Skb>,
    /// The ACK being processed is a SYN-ACK covering Fast Open data: the SYN gave its RTT
    /// sample, so the data it was sent with gives none (one sample per ACK).
    pub syn_acked_sampled: bool,
    /// Segments sent and not cumulatively acked (`packets_out`).
    pub packets_out: u32,
    /// Of those, SACKed (`sacked_out`).
    pub sacked_out: u32,
    /// Of those, marked lost (`lost_out`).
    pub lost_out: u32,
    /// Of those, retransmitted and not yet acked or lost again (`retrans_out`).
    pub retrans_out: u32,
    /// Segments delivered, cumulatively or by SACK (`tp->delivered`, rate.rs's clock).
    pub delivered: u32,
    /// End of the highest SACKed sequence (`tcp_highest_sack_seq`).
    pub highest_sack_end: u32,
    /// `highest_sack_end` holds a SACKed sequence above SND.UNA.
    pub sack_seen_any: bool,
}

impl RtxQueue {
    /// `tcp_packets_in_flight()`: packets_out - (sacked_out + lost_out) + retrans_out.
    pub fn in_flight(&self) -> u32 {
        self.packets_out
            .saturating_sub(self.sacked_out + self.lost_out)
            .saturating_add(self.retrans_out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn retries2_timeout_is_924_6_s() {
        // tcp_retries2 = 15 with 200 ms base: Linux documents ~924.6 s.
        assert_eq!(
            retrans_timeout(Duration::from_millis(200), 15),
            Duration::from_millis(924_600)
        );
    }
}
