//! RACK-TLP (RFC 8985). RACK's loss detection (Linux's `tcp_recovery.c`): the time-ordered
//! record of the most recently sent delivered packet ([`Rack`], `tp->rack`), the reordering
//! window and its D-SACK-driven growth, the marking of packets sent before it as lost once an
//! RTT plus the window has passed, and the reordering timer. The tail loss probe (Linux's
//! `tcp_schedule_loss_probe`, `tcp_send_loss_probe`, `tcp_process_tlp_ack`): its timer, the
//! probe (new data, or the last segment again) and the episode it opens ([`Tlp`]). The rest
//! of recovery (SACK scoreboard, PRR, RTO, undo) is in `recovery.rs`.
//!
//! [`Rack`]'s and [`Tlp`]'s fields are private to this file.

use crate::env::Env;
use crate::seq::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::timer::{RtxEvent, TimerKind, TCP_TIMEOUT_MIN_US};
use crate::Mib;
use core::time::Duration;
use shallow_cc::CaState;

/// `tp->rack`: the most recently (re)sent packet that was delivered (its send time and end
/// sequence), the RTT measured on it, the reordering window multiplier and whether it moved
/// since loss detection last ran.
#[derive(Clone, Debug)]
pub(crate) struct Rack {
    /// Send time of the RACK packet (`rack.mstamp`); zero until a delivery is seen.
    mstamp: Instant,
    /// RTT of the last delivered packet, µs (`rack.rtt_us`).
    rtt_us: u32,
    /// End sequence of the RACK packet (`rack.end_seq`), the tie-break of equal send times.
    end_seq: u32,
    /// Reordering window in units of min_rtt/4 (`rack.reo_wnd_steps`), grown by D-SACKs.
    reo_wnd_steps: u32,
    /// The RACK packet moved since loss detection last ran (`rack.advanced`).
    advanced: bool,
}

impl Default for Rack {
    fn default() -> Self {
        Rack {
            mstamp: Instant::ZERO,
            rtt_us: 0,
            end_seq: 0,
            reo_wnd_steps: 1,
            advanced: false,
        }
    }
}

impl Rack {
    /// A D-SACK arrived: widen the reordering window (RFC 8985 §6.2 step 4). The engine
    /// widens it at each D-SACK; Linux's `rack.dsack_seen` defers the step to the next
    /// round trip (`tcp_rack_update_reo_wnd`), a difference not yet measured.
    pub fn note_dsack(&mut self) {
        self.reo_wnd_steps = (self.reo_wnd_steps + 1).min(255);
    }

    /// The RTT of the last delivered packet (RTO marking spares packets sent more recently).
    pub fn rtt(&self) -> Duration {
        Duration::from_micros(u64::from(self.rtt_us))
    }

    /// Whether the RACK packet moved since the last call (`tcp_rack_mark_lost`'s test of
    /// `rack.advanced`, which it clears).
    pub fn take_advanced(&mut self) -> bool {
        core::mem::take(&mut self.advanced)
    }
}

/// The tail loss probe's episode: the `snd_nxt` when the probe left (`tp->tlp_high_seq`;
/// `None`: no episode), whether the probe was a retransmission (`tlp_retrans`), and, while a
/// probe of new data is being sent, leave to exceed cwnd by one segment
/// (`tcp_write_xmit`'s `push_one` = 2).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tlp {
    high_seq: Option<u32>,
    retrans: bool,
    force_quota: bool,
}

impl Tlp {
    /// Ends the episode (recovery, loss or CWR take over).
    pub fn end(&mut self) {
        self.high_seq = None;
    }

    /// A probe of new data is being sent: one segment may go even when cwnd is full.
    pub fn forces_quota(&self) -> bool {
        self.force_quota
    }
}

impl Connection {
    /// RACK: remember the most recently (re)sent delivered skb (`tcp_rack_advance`).
    pub fn rack_advance(&mut self, xmit: Instant, end_seq: u32, retrans: bool, now: Instant) {
        let rtt_us = (now - xmit).as_micros() as u32;
        if retrans && self.rtt.min_rtt_us() != u32::MAX && rtt_us < self.rtt.min_rtt_us() {
            // Possibly a spurious retransmission acked by the original: ignore (RFC 8985 §6.2 step 2).
            return;
        }
        // Linux takes the RTT of every delivered skb it is called for (the last one wins,
        // so a cumulative ACK's oldest original transmission can lengthen it), but moves
        // the RACK timestamp only forward (tcp_rack_sent_after).
        self.rack.advanced = true;
        self.rack.rtt_us = rtt_us;
        if xmit > self.rack.mstamp
            || (xmit == self.rack.mstamp && after(end_seq, self.rack.end_seq))
        {
            self.rack.mstamp = xmit;
            self.rack.end_seq = end_seq;
        }
    }

    /// RACK reordering window (RFC 8985 §6.2 step 4; Linux `tcp_rack_reo_wnd`).
    pub(crate) fn rack_reo_wnd(&self) -> Duration {
        if self.rtt.min_rtt_us() == u32::MAX {
            return Duration::ZERO;
        }
        if self.stats.reord_seen() == 0
            && (matches!(self.ca_state, CaState::Recovery | CaState::Loss)
                || self.rtx.sacked_out >= self.reordering)
        {
            return Duration::ZERO;
        }
        let w = u64::from(self.rtt.min_rtt_us() / 4) * u64::from(self.rack.reo_wnd_steps);
        Duration::from_micros(w.min(u64::from(self.rtt.srtt_us() >> 3)))
    }

    /// RACK loss detection (`tcp_rack_detect_loss`). Returns the earliest pending timeout.
    pub(crate) fn rack_detect_loss(&mut self, now: Instant) -> Option<Duration> {
        if self.rack.mstamp == Instant::ZERO {
            return None;
        }
        let reo = self.rack_reo_wnd();
        let rtt = Duration::from_micros(u64::from(self.rack.rtt_us));
        let mut timeout: Option<Duration> = None;
        for i in 0..self.rtx.queue.len() {
            let skb = &self.rtx.queue[i];
            if skb.sacked & sacked::ACKED != 0 {
                continue;
            }
            if skb.sacked & sacked::LOST != 0 && skb.sacked & sacked::RETRANS == 0 {
                continue;
            }
            // Sent after the RACK skb? Then nothing more to decide.
            let sent_before = skb.mstamp < self.rack.mstamp
                || (skb.mstamp == self.rack.mstamp && before(skb.end_seq, self.rack.end_seq));
            if !sent_before {
                continue;
            }
            let elapsed = now - skb.mstamp;
            let deadline = rtt + reo;
            if elapsed >= deadline {
                self.mark_lost(i);
            } else {
                let rem = deadline - elapsed;
                timeout = Some(timeout.map_or(rem, |t: Duration| t.max(rem)));
            }
        }
        timeout
    }

    /// RACK reordering-timer expiry (`tcp_rack_reo_timeout`): re-run loss detection; if it
    /// marked anything lost, enter Recovery (one PRR step as if one packet was delivered,
    /// when not in Recovery yet) and retransmit; re-arm the reordering timer if packets are
    /// still within the window.
    pub(crate) fn rack_reo_timeout(&mut self, env: &mut Env, now: Instant) {
        let prior_inflight = self.packets_in_flight();
        let lost_before = self.rtx.lost_out;
        let timeout = self.rack_detect_loss(now);
        if prior_inflight != self.packets_in_flight() {
            if self.ca_state != CaState::Recovery {
                self.enter_recovery(env, now, false); // a timer: no ACK, no ECE
                let newly_lost = self.rtx.lost_out.saturating_sub(lost_before);
                self.cwnd_reduction(1, newly_lost, false);
            }
            self.xmit_retransmit_queue(env, now);
        }
        if let Some(t) = timeout {
            if self.rtx.packets_out > 0 {
                self.timer.rtx_event = RtxEvent::ReoTimeout;
                self.arm(env, TimerKind::Retrans, now + t + TCP_TIMEOUT_MIN_US);
            }
        }
    }

    /// `tcp_process_tlp_ack`'s end of the episode: an ACK above `tlp_high_seq`, or at it
    /// when the probe was new data.
    pub(crate) fn tlp_process_ack(&mut self, ack: u32) {
        if let Some(h) = self.tlp.high_seq {
            if after(ack, h) || (ack == h && !self.tlp.retrans) {
                self.tlp.high_seq = None;
            }
        }
    }

    /// Arm TLP if allowed, else the RTO (`tcp_schedule_loss_probe` / `tcp_rearm_rto`).
    pub fn schedule_loss_probe_or_rto(&mut self, env: &mut Env, now: Instant, advancing: bool) {
        if self.rtx.packets_out == 0 {
            return;
        }
        if !self.schedule_loss_probe(env, now, advancing) {
            self.timer.rtx_event = RtxEvent::Rto;
            let at = self.rto_deadline(now, advancing);
            self.arm(env, TimerKind::Retrans, at);
        }
    }

    /// `tcp_schedule_loss_probe`: arm the loss probe when the connection may send one (SACK,
    /// Open or CWR); false, leaving the timer as it is, when not. A probe still outstanding
    /// does not stop the timer being armed: [`send_loss_probe`](Self::send_loss_probe)
    /// sends no second one, it re-arms the RTO from the head's send time (measured on 6.18:
    /// an ACK of part of the flight 101 ms after the send, while the probe was out, and the
    /// RTO fired at the head's send time + rto, 0.34 s, not at the ACK's time + rto; with the
    /// ACK at 189 ms it fired one tick after the probe timer).
    pub fn schedule_loss_probe(&mut self, env: &mut Env, now: Instant, advancing: bool) -> bool {
        if self.rtx.packets_out == 0 {
            return false;
        }
        let er = env.sysint(Sysctl::tcp_early_retrans);
        let tlp_ok = (er == 3 || er == 4)
            && self.rx_opt.sack_ok
            && matches!(self.ca_state, CaState::Open | CaState::Cwr);
        let rto_at = self.rto_deadline(now, advancing);
        if tlp_ok {
            let mut pto = if self.rtt.srtt_us() != 0 {
                let t = Duration::from_micros(u64::from(self.rtt.srtt_us() >> 2));
                if self.rtx.packets_out == 1 {
                    t + self.rto_min(env)
                } else {
                    t + TCP_TIMEOUT_MIN_US
                }
            } else {
                TCP_TIMEOUT_INIT
            };
            let rto_delta = rto_at - now;
            if rto_delta > Duration::ZERO {
                pto = pto.min(rto_delta);
            }
            self.timer.rtx_event = RtxEvent::LossProbe;
            self.arm(env, TimerKind::Retrans, now + pto);
            return true;
        }
        false
    }

    /// `tcp_send_loss_probe`: send new data if the window allows the head of the write
    /// queue, else retransmit the last skb. A probe that could not be sent (the new data or
    /// the retransmission refused by the qdisc below, or held back by TSQ) is no probe: it is
    /// not counted, sets no `tlp_high_seq`, and the RTO is re-armed from the head's send time
    /// (`goto rearm_timer`), so a local drop never turns into a retransmission of the tail.
    pub fn send_loss_probe(&mut self, env: &mut Env, now: Instant) {
        if self.tlp.high_seq.is_some() {
            // At most one probe out: no probe, the RTO from the head's send time.
            self.timer.rtx_event = RtxEvent::Rto;
            let at = self.rto_deadline_from_head(now);
            self.arm(env, TimerKind::Retrans, at);
            return;
        }
        let before_nxt = self.snd.nxt;
        self.tlp.retrans = false;
        let mss = self.current_mss();
        let head_fits = self
            .snd
            .write_queue
            .front()
            .is_some_and(|h| self.snd_wnd_test(h, mss));
        let sent = if head_fits {
            // New data, even with cwnd full.
            self.tlp.force_quota = true;
            self.write_xmit(env, now, crate::output::NAGLE_PUSH, true);
            self.tlp.force_quota = false;
            self.snd.nxt != before_nxt
        } else if let Some(last) = self.rtx.queue.len().checked_sub(1) {
            let len = self.rtx.queue[last].len();
            if len > mss {
                // Probe with the last MSS only.
                let off = (len - 1) / mss * mss;
                if off > 0 {
                    self.split_rtx(last, off);
                }
            }
            let last = self.rtx.queue.len() - 1;
            // tcp_send_loss_probe resends with __tcp_retransmit_skb: the probe is not
            // counted in retrans_out, so an RTO still deems that segment lost.
            if self.rtx.queue[last].sacked & sacked::ACKED != 0 {
                true
            } else if self.resend_skb(env, now, last, 1) {
                self.tlp.retrans = true;
                true
            } else {
                false
            }
        } else {
            true
        };
        self.timer.rtx_event = RtxEvent::Rto;
        if !sent {
            let at = self.rto_deadline_from_head(now);
            self.arm(env, TimerKind::Retrans, at);
            return;
        }
        env.mib.inc(Mib::TCPLossProbes);
        self.tlp.high_seq = Some(self.snd.nxt);
        let at = self.rto_deadline(now, true);
        self.arm(env, TimerKind::Retrans, at);
    }
}
