//! The path MTU and the MSS that follows from it (`tcp_sync_mss`, `tcp_mtu_to_mss`,
//! `tcp_mss_to_mtu`, a route change picked up at the next send), and packetization-layer path
//! MTU discovery (RFC 4821; Linux's `icsk_mtup` with `tcp_mtu_probing` = 2): a binary search
//! between the MTU known to work and the largest the peer allows, one probe segment at a
//! time, its ACK raising the floor and its loss lowering the ceiling, searched again after
//! `tcp_probe_interval`.
//!
//! [`Mtup`]'s fields are private to this file.

use crate::env::Env;
use crate::mib::Mib;
use crate::seq::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use core::time::Duration;
use shallow_wire::TcpFlags;

/// MTU probing state (`icsk_mtup`): whether it is on, the search range in MTU bytes, the
/// probe in flight (its MTU size, 0 = none, and its sequence range), and when the search
/// last started or failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mtup {
    enabled: bool,
    search_high: u32,
    search_low: u32,
    probe_size: u32,
    probe_seq: (u32, u32),
    probe_ts: Instant,
}

impl Default for Mtup {
    fn default() -> Self {
        Mtup {
            enabled: false,
            search_high: 0,
            search_low: 0,
            probe_size: 0,
            probe_seq: (0, 0),
            probe_ts: Instant::ZERO,
        }
    }
}

impl Mtup {
    /// A probe is in flight and the cumulative ACK `snd_una` covers all of it
    /// (`tcp_clean_rtx_queue`'s test before `tcp_mtup_probe_success`).
    pub fn probe_acked(&self, snd_una: u32) -> bool {
        self.probe_size != 0 && !after(self.probe_seq.1, snd_una)
    }

    /// A probe is in flight and it is the head of the retransmission queue (whose loss
    /// `tcp_fastretrans_alert` takes for the probe's failure).
    pub fn probe_at_head(&self, snd_una: u32) -> bool {
        self.probe_size != 0 && snd_una == self.probe_seq.0
    }
}

impl Connection {
    /// Path MTU for this socket.
    pub fn pmtu(&self) -> u32 {
        if self.route.mtu != 0 {
            self.route.mtu
        } else {
            1500
        }
    }

    /// `tcp_sync_mss`: recompute `mss_cache` from the path MTU, the peer's MSS and options.
    /// While MTU probing, the path MTU also caps the search and the MSS stays at the last
    /// size proven to work (`search_low`).
    pub fn sync_mss(&mut self, env: &Env) {
        let pmtu = self.pmtu();
        self.mss.pmtu_cookie = pmtu;
        if self.mtup.enabled {
            self.mtup.search_high = self.mtup.search_high.min(pmtu);
        }
        let mut m = self.pmtu().saturating_sub(self.ip_hdr_len() + 20);
        m = m.min(self.rx_opt.mss_clamp);
        if self.opts.user_mss != 0 {
            m = m.min(self.opts.user_mss);
        }
        m = m.saturating_sub(self.base_opt_len());
        m = self.bound_to_half_wnd(m);
        m = m.max(env.sysint(Sysctl::tcp_min_snd_mss) as u32 - self.base_opt_len().min(40));
        if self.mtup.enabled {
            m = m.min(self.mtu_to_mss(env, self.mtup.search_low));
        }
        self.mss.cache = m.max(8);
        self.cc_st.mss_cache = self.mss.cache;
    }

    /// `tcp_mtu_to_mss`: payload of a full segment on a path of MTU `pmtu` (IP and TCP
    /// headers with our usual options, at most the peer's MSS, at least tcp_min_snd_mss).
    pub fn mtu_to_mss(&self, env: &Env, pmtu: u32) -> u32 {
        let m = pmtu
            .saturating_sub(self.ip_hdr_len() + 20)
            .min(self.rx_opt.mss_clamp)
            .max(env.sysint(Sysctl::tcp_min_snd_mss) as u32);
        m.saturating_sub(self.base_opt_len())
    }

    /// `tcp_mss_to_mtu`: the packet size of a full segment of `mss` payload bytes.
    pub fn mss_to_mtu(&self, mss: u32) -> u32 {
        mss + self.mss.tcp_header_len + self.ip_hdr_len()
    }

    /// `tcp_mtup_init` (RFC 4821): probing on with `tcp_mtu_probing` = 2; the search runs from
    /// the MTU of `tcp_base_mss` up to what the peer's MSS allows.
    pub fn mtup_init(&mut self, env: &Env, now: Instant) {
        self.mtup.enabled = env.sysint(Sysctl::tcp_mtu_probing) > 1;
        self.mtup.search_high = self.rx_opt.mss_clamp + 20 + self.ip_hdr_len();
        self.mtup.search_low = self.mss_to_mtu(env.sysint(Sysctl::tcp_base_mss) as u32);
        self.mtup.probe_size = 0;
        self.mtup.probe_ts = now;
    }

    /// `tcp_current_mss`'s route check: if the path MTU changed since `mss_cache` was
    /// computed, recompute it.
    pub fn refresh_mss(&mut self, env: &Env) {
        if self.pmtu() != self.mss.pmtu_cookie {
            self.sync_mss(env);
        }
    }

    /// `tcp_mtu_check_reprobe`: after `tcp_probe_interval` seconds, search again from the
    /// current MSS up to the peer's MSS.
    fn mtu_check_reprobe(&mut self, env: &Env, now: Instant) {
        let interval = Duration::from_secs(env.sysint(Sysctl::tcp_probe_interval).max(0) as u64);
        if now - self.mtup.probe_ts >= interval {
            let mss = self.current_mss();
            self.mtup.probe_size = 0;
            self.mtup.search_high = self.rx_opt.mss_clamp + 20 + self.ip_hdr_len();
            self.mtup.search_low = self.mss_to_mtu(mss);
            self.mtup.probe_ts = now;
        }
    }

    /// `tcp_mtu_probe` (RFC 4821 §7): send one segment halfway between the MTU known to work
    /// and the largest one possible, built from the head of the write queue, if enough data
    /// waits behind it to detect its loss by dupthresh and cwnd has room for it and one more.
    /// Returns 1 if a probe left, 0 to wait for cwnd or window, -1 not to probe now.
    pub(crate) fn mtu_probe(&mut self, env: &mut Env, now: Instant) -> i32 {
        if !self.mtup.enabled
            || self.mtup.probe_size != 0
            || self.ca_state != shallow_cc::CaState::Open
            || self.snd_cwnd() < 11
            || !self.rcv.sacks.is_empty()
            || self.rcv.dsack.is_some()
        {
            return -1;
        }
        let mss_now = self.current_mss();
        let probe = self.mtu_to_mss(env, (self.mtup.search_high + self.mtup.search_low) >> 1);
        let size_needed = probe + (self.reordering + 1) * self.mss.cache;
        let interval = self.mtup.search_high.saturating_sub(self.mtup.search_low);
        if probe > self.mtu_to_mss(env, self.mtup.search_high)
            || (interval as i64) < env.sysint(Sysctl::tcp_probe_threshold)
        {
            self.mtu_check_reprobe(env, now);
            return -1;
        }
        if self.snd.write_seq.wrapping_sub(self.snd.nxt) < size_needed || self.snd.wnd < size_needed
        {
            return -1;
        }
        if after(self.snd.nxt.wrapping_add(size_needed), self.snd_wnd_end()) {
            return 0;
        }
        let in_flight = self.packets_in_flight();
        if in_flight + 2 > self.snd_cwnd() {
            return if in_flight == 0 { -1 } else { 0 };
        }
        // tcp_can_coalesce_send_queue_head: the skbs the probe covers may be merged.
        let mut covered = 0;
        for s in &self.snd.write_queue {
            if covered >= probe {
                break;
            }
            covered += s.len();
            if covered < probe && (s.eor || s.flags.intersects(TcpFlags::FIN)) {
                return -1;
            }
        }
        // Build the probe: grow the head to probe bytes, then cut it there.
        while self
            .snd
            .write_queue
            .front()
            .is_some_and(|h| h.len() < probe)
        {
            let before = self.snd.write_queue.len();
            let need = probe - self.snd.write_queue[0].len();
            self.grow_head(need);
            if self.snd.write_queue.len() == before && self.snd.write_queue[0].len() < probe {
                break;
            }
        }
        if self.snd.write_queue.front().map_or(0, |h| h.len()) < probe {
            return -1;
        }
        self.split_write_head(probe);
        let Some(skb) = self.snd.write_queue.pop_front() else {
            return -1;
        };
        self.rtx.queue.push_back(skb);
        let idx = self.rtx.queue.len() - 1;
        let sent = self.transmit_skb_mss(env, now, idx, false, Some(probe));
        if !sent {
            if let Some(skb) = self.rtx.queue.pop_back() {
                self.snd.write_queue.push_front(skb);
            }
            return -1;
        }
        // Two packets' worth leave as one: take one back from cwnd.
        self.cc_st.snd_cwnd = self.snd_cwnd().saturating_sub(1).max(1);
        self.event_new_data_sent(env, now, idx);
        let (seq, end) = (self.rtx.queue[idx].seq, self.rtx.queue[idx].end_seq);
        self.mtup.probe_size = self.mss_to_mtu(end.wrapping_sub(seq));
        self.mtup.probe_seq = (seq, end);
        let _ = mss_now;
        1
    }

    /// `tcp_mtup_probe_success`: the probe was acked; its size is the new floor of the
    /// search, cwnd is rescaled to the same bytes in larger packets, and the MSS grows.
    pub fn mtup_probe_success(&mut self, env: &mut Env) {
        let cur = self.current_ssthresh();
        self.undo.save_ssthresh(cur);
        let cwnd = u64::from(self.snd_cwnd()) * u64::from(self.mss_to_mtu(self.mss.cache))
            / u64::from(self.mtup.probe_size.max(1));
        self.cc_st.snd_cwnd = (cwnd as u32).max(1);
        self.cc_st.snd_cwnd_cnt = 0;
        self.cc_st.snd_ssthresh = self.current_ssthresh();
        self.mtup.search_low = self.mtup.probe_size;
        self.mtup.probe_size = 0;
        self.sync_mss(env);
        env.mib.inc(Mib::TCPMTUPSuccess);
    }

    /// `tcp_mtup_probe_failed`: the probe was lost; nothing that large goes through.
    pub fn mtup_probe_failed(&mut self, env: &mut Env, now: Instant) {
        self.mtup.search_high = self.mtup.probe_size.saturating_sub(1);
        self.mtup.probe_size = 0;
        self.mtup.probe_ts = now;
        env.mib.inc(Mib::TCPMTUPFail);
    }
}

/// The segment sizes the connection works with (`tcp_sock`'s `mss_cache`, `advmss`,
/// `tcp_header_len`, `icsk_pmtu_cookie`): what `tcp_sync_mss` here computed from the path MTU
/// and the options, and what we advertised. `pmtu_cookie` is private to this file (only
/// `tcp_sync_mss` and its check use it); the sizes are `pub(crate)`, as in Linux: the output
/// sizes segments with them, the input learns from them, and `tcp_info` reports them.
#[derive(Debug)]
pub(crate) struct MssCache {
    /// The current send MSS without SACK blocks (`mss_cache`).
    pub cache: u32,
    /// The MSS we advertised (`advmss`).
    pub advmss: u32,
    /// TCP header length with the options every segment carries (`tcp_header_len`).
    pub tcp_header_len: u32,
    /// Path MTU `mss_cache` was last computed for (`icsk_pmtu_cookie`).
    pmtu_cookie: u32,
}

impl Default for MssCache {
    fn default() -> MssCache {
        MssCache {
            cache: TCP_MSS_DEFAULT,
            advmss: TCP_MSS_DEFAULT,
            tcp_header_len: 20,
            pmtu_cookie: 0,
        }
    }
}
