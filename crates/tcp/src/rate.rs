//! Delivery-rate estimation (Linux's `tcp_rate.c`, after draft-cheng-iccrg-delivery-rate-
//! estimation): each transmitted buffer carries a snapshot of the connection's delivery
//! state ([`TxRate`], `TCP_SKB_CB(skb)->tx`); when it is delivered (cumulatively acked or
//! SACKed) the snapshot of the most recently sent delivered buffer opens a sample, which the
//! ACK closes ([`Connection::rate_gen`]): packets delivered over the longer of the send and the ACK
//! intervals. The sample feeds `tcpi_delivery_rate` and congestion control's `app_limited`.
//!
//! The state ([`RateState`]) is private to this file: the rest of the connection reads it
//! through the methods here.

use crate::seq::after;
use crate::socket::Connection;
use crate::time::Instant;

/// A buffer's delivery snapshot at its (last) transmission (`TCP_SKB_CB(skb)->tx` and
/// `->delivered`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TxRate {
    /// `tp->delivered` when sent.
    delivered: u32,
    /// Start of the send window the buffer was sent in (`first_tx_mstamp`).
    first_tx: Instant,
    /// When the connection last delivered a packet, as of the send (`delivered_mstamp`).
    delivered_mstamp: Instant,
    /// Sent while the application was not keeping the pipe full (`is_app_limited`).
    app_limited: bool,
}

/// A connection's delivery-rate state: the current send window and application-limited mark,
/// the sample being built for the ACK in progress (`struct rate_sample`), and the last valid
/// sample (`tp->rate_delivered`, `rate_interval_us`, `rate_app_limited`).
#[derive(Clone, Debug)]
pub(crate) struct RateState {
    /// Time of the most recent delivery (`tp->delivered_mstamp`).
    delivered_mstamp: Instant,
    /// Start of the current send window (`tp->first_tx_mstamp`).
    first_tx_mstamp: Instant,
    /// `tp->app_limited`: the delivered count at which the application-limited period ends
    /// (0: not application-limited).
    app_limited: u32,
    /// The last valid sample: packets delivered, over this interval, and whether the
    /// application limited it.
    rate_delivered: u32,
    rate_interval_us: u64,
    rate_app_limited: bool,
    /// The sample of this ACK (`rs->prior_delivered`, `prior_mstamp`, `interval_us`,
    /// `is_app_limited`), opened by the newest delivered buffer's snapshot.
    prior_delivered: Option<u32>,
    prior_mstamp: Instant,
    interval_us: u64,
    is_app_limited: bool,
}

impl Default for RateState {
    /// A new socket: no sample yet, and the "last sample" marked application-limited
    /// (`tcp_init_sock` sets `rate_app_limited`; measured on 6.18: `tcpi_delivery_rate_app_limited`
    /// is 1 after the handshake, and so is `TCP_NLA_DELIVERY_RATE_APP_LMT` on the first
    /// write's stamps).
    fn default() -> Self {
        RateState {
            delivered_mstamp: Instant::ZERO,
            first_tx_mstamp: Instant::ZERO,
            app_limited: 0,
            rate_delivered: 0,
            rate_interval_us: 0,
            rate_app_limited: true,
            prior_delivered: None,
            prior_mstamp: Instant::ZERO,
            interval_us: 0,
            is_app_limited: false,
        }
    }
}

impl RateState {
    /// Whether the connection is in an application-limited period (`tp->app_limited != 0`).
    pub fn app_limited(&self) -> bool {
        self.app_limited != 0
    }

    /// Whether the last valid sample was application-limited (`tcpi_delivery_rate_app_limited`).
    pub fn sample_app_limited(&self) -> bool {
        self.rate_app_limited
    }
}

impl Connection {
    /// `tcp_rate_skb_sent`: the snapshot of a buffer being (re)transmitted at `now`. A fresh
    /// send window starts when nothing is in flight.
    pub fn rate_skb_sent(&mut self, now: Instant) -> TxRate {
        if self.rtx.packets_out == 0 {
            self.rate.first_tx_mstamp = now;
            self.rate.delivered_mstamp = now;
        }
        TxRate {
            delivered: self.rtx.delivered,
            first_tx: self.rate.first_tx_mstamp,
            delivered_mstamp: self.rate.delivered_mstamp,
            app_limited: self.rate.app_limited != 0,
        }
    }

    /// `tcp_rate_skb_delivered`: a buffer sent at `sent` with snapshot `tx` was delivered;
    /// the most recently sent delivered buffer opens this ACK's sample.
    pub fn rate_skb_delivered(&mut self, tx: &TxRate, sent: Instant) {
        if tx.delivered_mstamp == Instant::ZERO {
            return;
        }
        let newer = match self.rate.prior_delivered {
            None => true,
            Some(p) => after(tx.delivered, p) || tx.delivered == p,
        };
        if newer {
            let r = &mut self.rate;
            r.prior_delivered = Some(tx.delivered);
            r.prior_mstamp = tx.delivered_mstamp;
            r.is_app_limited = tx.app_limited;
            r.interval_us = (sent - tx.first_tx).as_micros() as u64;
            r.first_tx_mstamp = sent;
        }
    }

    /// `tcp_rate_gen`: close the sample of this ACK; keep it if valid and not app-limited
    /// (or faster than the last one). Feeds `tcpi_delivery_rate`.
    pub fn rate_gen(&mut self, now: Instant, delivered_now: u32) {
        let delivered = self.rtx.delivered;
        let min_rtt_us = self.rtt.min_rtt_us();
        let r = &mut self.rate;
        if r.app_limited != 0 && after(delivered, r.app_limited) {
            r.app_limited = 0;
        }
        if delivered_now > 0 {
            r.delivered_mstamp = now;
        }
        let Some(prior) = r.prior_delivered.take() else {
            return;
        };
        let d = delivered.wrapping_sub(prior);
        let ack_us = (now - r.prior_mstamp).as_micros() as u64;
        let interval = r.interval_us.max(ack_us);
        if interval == 0 || (min_rtt_us != u32::MAX && interval < u64::from(min_rtt_us)) {
            return;
        }
        let better =
            u64::from(d) * r.rate_interval_us.max(1) >= u64::from(r.rate_delivered) * interval;
        if !r.is_app_limited || better || r.rate_interval_us == 0 {
            r.rate_delivered = d;
            r.rate_interval_us = interval;
            r.rate_app_limited = r.is_app_limited;
        }
    }

    /// `tcp_rate_check_app_limited`: the application is not keeping the pipe full.
    pub fn rate_check_app_limited(&mut self) {
        if self.snd.write_seq.wrapping_sub(self.snd.nxt) < self.mss.cache
            && self.mem.wmem_alloc == 0
            && self.packets_in_flight() < self.snd_cwnd()
            && self.rtx.lost_out <= self.rtx.retrans_out
        {
            let v = self.rtx.delivered.wrapping_add(self.packets_in_flight());
            self.rate.app_limited = if v == 0 { 1 } else { v };
        }
    }

    /// `tcpi_delivery_rate`, bytes/s.
    pub fn delivery_rate(&self) -> u64 {
        let r = &self.rate;
        if r.rate_interval_us == 0 {
            return 0;
        }
        u64::from(r.rate_delivered) * u64::from(self.mss.cache) * 1_000_000 / r.rate_interval_us
    }
}
