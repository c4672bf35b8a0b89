//! Output path: MSS and window selection, option building, `tcp_write_xmit`, segment
//! transmission with TX-completion tokens, pure ACKs, RSTs, SYN/SYN-ACK and FIN.

use crate::chrono::{CHRONO_BUSY, CHRONO_RWND_LIMITED, CHRONO_SNDBUF_LIMITED};
use crate::env::{Emitted, Env};
use crate::gate::TxMeta;
use crate::packet::{self, OptBuf, OutOpt, SegOut};
use crate::payload::Payload;
use crate::seq::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::timer::{RtxEvent, TimerKind};
use crate::Mib;
use core::time::Duration;
use shallow_wire::TcpFlags;

fn len_of(s: &Skb) -> u32 {
    s.len()
}

/// `nonagle` values (`TCP_NAGLE_OFF`, `TCP_NAGLE_CORK`, `TCP_NAGLE_PUSH`).
pub(crate) const NAGLE_OFF: u8 = 1;
pub(crate) const NAGLE_CORK: u8 = 2;
pub(crate) const NAGLE_PUSH: u8 = 4;

/// Why one run of the output loop (`tcp_write_xmit`) stopped short, found while it runs and
/// read at its end (its `is_cwnd_limited` and `is_rwnd_limited`): a value local to the run.
#[derive(Clone, Copy, Debug, Default)]
struct XmitLimits {
    /// Stopped (or deferred a TSO packet) for want of congestion window.
    cwnd: bool,
    /// Stopped (or deferred) for want of the peer's receive window.
    rwnd: bool,
}

impl Connection {
    /// Socket's Nagle mode (`tp->nonagle`).
    pub fn nonagle(&self) -> u8 {
        let mut n = 0;
        if self.opts.nodelay {
            n |= NAGLE_OFF;
        }
        if self.opts.cork {
            n |= NAGLE_CORK;
        }
        n
    }

    /// Bytes of TCP options on established segments excluding SACK (`tcp_header_len - 20`).
    pub(crate) fn base_opt_len(&self) -> u32 {
        self.mss.tcp_header_len - 20
    }

    /// Bytes of the options every established segment carries: timestamps and a TCP-MD5
    /// signature (`tcp_established_options` before SACK).
    fn fixed_opt_len(&self) -> u32 {
        let ts = if self.rx_opt.tstamp_ok { 12 } else { 0 };
        ts + self.md5_opt_len()
    }

    /// Number of SACK blocks the next ACK will carry (D-SACK first), limited so all options
    /// fit in the 40 bytes (`tcp_established_options`: 3 with timestamps, 4 without, 2
    /// beside a TCP-MD5 signature and none beside both).
    fn num_sack_blocks(&self) -> usize {
        if !self.rx_opt.sack_ok {
            return 0;
        }
        let n = self.rcv.sacks.len() + usize::from(self.rcv.dsack.is_some());
        let room = 40u32.saturating_sub(self.fixed_opt_len());
        let max = if room < 12 { 0 } else { (room - 4) / 8 };
        n.min(max as usize)
    }

    /// `tcp_current_mss`: mss_cache less the difference between this segment's header
    /// (timestamps, a TCP-MD5 signature, the SACK blocks it will carry) and `tcp_header_len`.
    pub fn current_mss(&self) -> u32 {
        let n = self.num_sack_blocks() as u32;
        let sack = if n > 0 { 4 + 8 * n } else { 0 };
        let hdr = 20 + self.fixed_opt_len() + sack;
        let delta = i64::from(hdr) - i64::from(self.mss.tcp_header_len);
        (i64::from(self.mss.cache) - delta).clamp(1, i64::from(u32::MAX)) as u32
    }

    /// `tcp_bound_to_half_wnd`.
    pub fn bound_to_half_wnd(&self, x: u32) -> u32 {
        let cutoff = if self.snd.max_window > TCP_MSS_DEFAULT {
            self.snd.max_window / 2
        } else {
            self.snd.max_window
        };
        if cutoff != 0 && x > cutoff {
            cutoff.max(68u32.saturating_sub(self.mss.tcp_header_len))
        } else {
            x
        }
    }

    /// `tcp_current_ssthresh`: ssthresh, or 3/4 cwnd when larger (outside CWR/Recovery).
    pub(crate) fn current_ssthresh(&self) -> u32 {
        if matches!(
            self.ca_state,
            shallow_cc::CaState::Cwr | shallow_cc::CaState::Recovery
        ) {
            self.cc_st.snd_ssthresh
        } else {
            self.cc_st
                .snd_ssthresh
                .max((self.snd_cwnd() >> 1) + (self.snd_cwnd() >> 2))
        }
    }

    /// Advertised MSS: route advmss, else MTU - IP - 20 (`dst_metric_advmss`), clamped by TCP_MAXSEG.
    pub fn route_advmss(&self) -> u32 {
        let mut m = if self.route.advmss != 0 {
            self.route.advmss
        } else {
            self.pmtu().saturating_sub(self.ip_hdr_len() + 20)
        };
        if self.opts.user_mss != 0 {
            m = m.min(self.opts.user_mss);
        }
        m.clamp(88, 65535)
    }

    /// `tcp_xmit_size_goal` (spec §1.3): largest whole number of MSS within min(GSO max,
    /// half the largest peer window).
    pub fn size_goal(&mut self, mss_now: u32) -> u32 {
        let g = self.bound_to_half_wnd(GSO_MAX_SIZE);
        let mut cached = self.pacing.gso_segs * mss_now;
        if g < cached || g >= cached + mss_now {
            self.pacing.gso_segs = (g / mss_now).min(GSO_MAX_SEGS);
            cached = self.pacing.gso_segs * mss_now;
        }
        cached.max(mss_now)
    }

    /// The receive side of connection setup, shared by active and passive opens
    /// (`tcp_connect_init` / `tcp_openreq_init_rwin`): advertised MSS from the route, the
    /// window clamp locked to the buffer when SO_RCVBUF was set (which also caps the window
    /// scale), then `tcp_select_initial_window`. The MSS the window is rounded to is the
    /// advertised MSS; a passive open takes the timestamp option off it when timestamps were
    /// negotiated, an active open does not (it knows no timestamp yet: measured, a connect
    /// with `tcp_rmem[1]` 131072 and timestamps on sends a SYN window of 64240 = 44 × 1460,
    /// not 45 × 1448).
    pub fn init_rcv_window(&mut self, env: &Env, active: bool) {
        self.mss.advmss = self.route_advmss();
        let mss_for_win = if active {
            self.mss.advmss
        } else {
            self.mss
                .advmss
                .saturating_sub(if self.rx_opt.tstamp_ok { 12 } else { 0 })
        };
        if self.opts.rcvbuf_lock {
            let full = self.full_space(env).max(0) as u32;
            if self.rcv.window_clamp == 0 || self.rcv.window_clamp > full {
                self.rcv.window_clamp = full;
            }
        }
        let ws = self.rx_opt.wscale_ok;
        self.select_initial_window(env, mss_for_win, ws);
    }

    /// `tcp_select_initial_window` (Linux 6.18): initial `rcv_wnd` (also `rcv_ssthresh`),
    /// `window_clamp` and `rcv_wscale`. The initial window is the full space (half of
    /// `rcvbuf`, [`TCP_DEFAULT_SCALING_RATIO`](crate::socket)) within the clamp, rounded down
    /// to the MSS, and is not held to 64 KiB: only the SYN's and SYN-ACK's own window field
    /// is (they are never scaled), unless `tcp_workaround_signed_windows` caps it at 32767.
    /// Measured: `tcp_rmem[1]` 540000 gives a SYN-ACK window of 65535 and then 268640
    /// (= 184 × 1460, window field 1050 at scale 8) before any data arrives; SO_RCVBUF 100000
    /// (clamp 100000, scale 1) gives 99280 = 68 × 1460.
    pub fn select_initial_window(&mut self, env: &Env, mss: u32, wscale_ok: bool) {
        if self.rcv.window_clamp == 0 {
            self.rcv.window_clamp = 65535u32 << 14;
        }
        let mut space = (self.full_space(env).max(0) as u32).min(self.rcv.window_clamp);
        if space > mss && mss > 0 {
            space = space / mss * mss;
        }
        // The initial rcv_wnd is the whole space (rounded down to the MSS), not 64 KiB:
        // Linux 6.18 reports tcpi_rcv_wnd 268640 right after a handshake with tcp_rmem[1]
        // 540000 and MSS 1460, with or without window scaling (only the SYN's and
        // SYN-ACK's window field stops at 65535), and an active opener's handshake ACK
        // offers it (`win 1050` at wscale 8). rcv_ssthresh starts there too and
        // tcp_init_buffer_space clamps it to window_clamp (65535 without window scaling).
        let mut rcv_wnd = if env.sysint(Sysctl::tcp_workaround_signed_windows) != 0 {
            space.min(32767)
        } else {
            space
        };
        if self.route.initrwnd != 0 {
            rcv_wnd = rcv_wnd.min(self.route.initrwnd * mss);
        }
        self.rx_opt.rcv_wscale = 0;
        if wscale_ok {
            let rmem2 = env.config.sysctl.triple(Sysctl::tcp_rmem)[2] as u32;
            let rmem_max = env.sysint(Sysctl::rmem_max) as u32;
            let s = rmem2.max(rmem_max).min(self.rcv.window_clamp).max(1);
            let ilog2 = 31 - s.leading_zeros();
            self.rx_opt.rcv_wscale = ilog2.saturating_sub(15).min(14) as u8;
        }
        self.rcv.window_clamp = self
            .rcv
            .window_clamp
            .min(65535u32 << self.rx_opt.rcv_wscale);
        self.rcv.wnd = rcv_wnd;
        self.rcv.ssthresh = rcv_wnd;
    }

    /// `__tcp_select_window`: the window we would like to offer now.
    fn raw_select_window(&mut self, env: &mut Env) -> u32 {
        let (window, tight) = self.offer_window(env);
        if tight {
            self.ack.quick = 0;
            if env.mem.pressure {
                self.rcv.ssthresh = self.rcv.ssthresh.min(4 * self.mss.advmss);
            }
        }
        window
    }

    /// `__tcp_select_window` without its side effects: the window to offer now, and whether
    /// free space is below half the full space (then Linux also leaves quickack mode and,
    /// under memory pressure, clamps rcv_ssthresh to 4 MSS, which this already assumes).
    /// Used for the window field (`tcp_select_window`) and for `__tcp_ack_snd_check`'s
    /// "offered window would not shrink" test, so both round alike.
    pub(crate) fn offer_window(&self, env: &Env) -> (u32, bool) {
        let mut mss = self.ack.rcv_mss;
        let mut free_space = self.tcp_space(env).max(0) as u32;
        let allowed_space = self.full_space(env).max(0) as u32;
        let full_space = self.rcv.window_clamp.min(allowed_space);
        let mut rcv_ssthresh = self.rcv.ssthresh;
        if mss > full_space {
            mss = full_space;
        }
        let tight = free_space < full_space / 2;
        if tight {
            if env.mem.pressure {
                rcv_ssthresh = rcv_ssthresh.min(4 * self.mss.advmss);
            }
            free_space = free_space >> self.rx_opt.rcv_wscale << self.rx_opt.rcv_wscale;
            if free_space < mss {
                return (0, true);
            }
        }
        if free_space > rcv_ssthresh {
            free_space = rcv_ssthresh;
        }
        let mut window = self.rcv.wnd;
        if self.rx_opt.rcv_wscale != 0 {
            window = free_space;
            let unit = 1u32 << self.rx_opt.rcv_wscale;
            if window % unit != 0 {
                window = (window / unit + 1) * unit;
            }
        } else if window <= free_space.saturating_sub(mss) || window > free_space {
            window = free_space.checked_div(mss).map_or(free_space, |q| q * mss);
        } else if mss == full_space && free_space > window + full_space / 2 {
            window = free_space;
        }
        (window, tight)
    }

    /// `tcp_select_window`: choose the window field for an outgoing segment and record it
    /// (`rcv_wnd`, `rcv_wup`). Never shrinks the offered window unless `tcp_shrink_window`.
    pub fn select_window(&mut self, env: &mut Env) -> u16 {
        let old_win = self.rcv.wnd;
        let cur_win = self.receive_window();
        let mut new_win = self.raw_select_window(env);
        if new_win < cur_win && !env.config.sysctl.on(Sysctl::tcp_shrink_window) {
            if new_win == 0 {
                env.mib.inc(Mib::TCPWantZeroWindowAdv);
            }
            let unit = 1u32 << self.rx_opt.rcv_wscale;
            new_win = cur_win.div_ceil(unit) * unit;
        }
        self.rcv.wnd = new_win;
        self.rcv.wup = self.rcv.nxt;
        let cap = if self.rx_opt.rcv_wscale == 0
            && env.config.sysctl.on(Sysctl::tcp_workaround_signed_windows)
        {
            32767
        } else {
            65535u32 << self.rx_opt.rcv_wscale
        };
        let w = new_win.min(cap) >> self.rx_opt.rcv_wscale;
        if w == 0 {
            if old_win != 0 {
                env.mib.inc(Mib::TCPToZeroWindowAdv);
            }
        } else if old_win == 0 {
            env.mib.inc(Mib::TCPFromZeroWindowAdv);
        }
        w as u16
    }

    /// Options of an established-state segment: TS, then SACK blocks (D-SACK first).
    pub fn established_opts(&self, now: Instant) -> OptBuf {
        let mut out = OptBuf::new();
        if self.rx_opt.tstamp_ok {
            out.push(OutOpt::Nop);
            out.push(OutOpt::Nop);
            out.push(OutOpt::Ts(self.tsval(now), self.rx_opt.ts_recent));
        }
        let n = self.num_sack_blocks();
        if n > 0 {
            let mut b = [(0u32, 0u32); 4];
            let mut i = 0;
            if let Some(d) = self.rcv.dsack {
                b[0] = d;
                i = 1;
            }
            for s in &self.rcv.sacks {
                if i >= n {
                    break;
                }
                b[i] = *s;
                i += 1;
            }
            out.push(OutOpt::Nop);
            out.push(OutOpt::Nop);
            out.push(OutOpt::Sack(b, i as u8));
        }
        out
    }

    /// SYN / SYN-ACK options in Linux's order (see the packetdrill lines:
    /// `mss,sackOK,TS,nop,wscale` / `mss,nop,nop,sackOK,nop,wscale`).
    pub fn syn_opts(&self, now: Instant, out: &mut Vec<OutOpt>, tsecr: u32) {
        out.push(OutOpt::Mss(self.mss.advmss.min(65535) as u16));
        if self.rx_opt.tstamp_ok {
            if self.rx_opt.sack_ok {
                out.push(OutOpt::SackOk);
            } else {
                out.push(OutOpt::Nop);
                out.push(OutOpt::Nop);
            }
            out.push(OutOpt::Ts(self.tsval(now), tsecr));
        } else if self.rx_opt.sack_ok {
            out.push(OutOpt::Nop);
            out.push(OutOpt::Nop);
            out.push(OutOpt::SackOk);
        }
        if self.rx_opt.wscale_ok {
            out.push(OutOpt::Nop);
            out.push(OutOpt::Wscale(self.rx_opt.rcv_wscale));
        }
    }

    /// A Fast Open option after the SYN options, padded with NOPs to 32 bits, if the 40
    /// bytes of option space have room beside them and a TCP-MD5 signature
    /// (`tcp_syn_options` / `tcp_synack_options`).
    pub(crate) fn push_fastopen(&self, out: &mut Vec<OutOpt>, c: &crate::fastopen::Cookie) {
        let used = crate::packet::opts_len(out) + self.md5_opt_len() as usize;
        if used + c.wire_len() > 40 {
            return;
        }
        out.push(OutOpt::FastOpen(*c));
        for _ in c.opt_len()..c.wire_len() {
            out.push(OutOpt::Nop);
        }
    }

    /// `tcp_event_ack_sent`: an ACK left with this segment; clear delayed-ACK state.
    fn event_ack_sent(&mut self, env: &mut Env, _pkts: u32) {
        let compressed = self.sack_compress.take();
        if compressed > 0 {
            env.mib.add(Mib::TCPAckCompressed, u64::from(compressed));
            self.disarm(env, TimerKind::CompSack);
        }
        // tcp_dec_quickack_mode: one quick ACK used if an ACK was scheduled.
        if self.ack.quick > 0 {
            let pkts = u32::from(self.ack.pending & ackf::SCHED != 0);
            let q = self.ack.quick as u32;
            if pkts >= q {
                self.ack.quick = 0;
                self.ack.ato = TCP_ATO_MIN;
            } else {
                self.ack.quick = (q - pkts) as u8;
            }
        }
        self.ack.pending = 0;
        self.disarm(env, TimerKind::Delack);
        self.rcv.dsack = None;
    }

    /// Send a pure ACK now (`tcp_send_ack`). Carries no TX token.
    pub fn send_ack(&mut self, env: &mut Env, now: Instant) {
        if self.state == TcpState::Close || self.state == TcpState::Listen {
            return;
        }
        let opts = self.established_opts(now);
        let win = self.select_window(env);
        let seg = self.seg(
            env,
            self.acceptable_seq(),
            TcpFlags::ACK,
            win,
            &opts,
            Payload::EMPTY,
        );
        let departure = self.edt_stamp(now);
        env.emit(&seg, None, Some(departure), None);
        self.stats.count_seg_out();
        self.event_ack_sent(env, 1);
    }

    /// The earliest departure time of a segment leaving now (`__tcp_transmit_skb`:
    /// `tcp_wstamp_ns` = max(`tcp_wstamp_ns`, now), the skb's delivery time). Every segment
    /// of the connection carries it, pure ACKs, probes and RSTs included, so behind an EDT
    /// qdisc (fq) a pure ACK does not pass the paced data before it (measured on 6.18 with
    /// an egress filter on the stamp: with SO_MAX_PACING_RATE putting the stamp 2 s ahead,
    /// the pure ACK's stamp is as far ahead as the data's). Only data moves the stamp on by
    /// its pacing time.
    pub(crate) fn edt_stamp(&mut self, now: Instant) -> Instant {
        if self.pacing.wstamp < now {
            self.pacing.wstamp = now;
        }
        self.pacing.wstamp
    }

    /// The sequence number of a segment that carries no data (`tcp_acceptable_seq`):
    /// snd_nxt while it is inside the peer's window, else the window's right edge, so a
    /// peer that shrank its window (to zero, or below data already sent) still finds the
    /// ACK or RST acceptable (RFC 9293 3.10.7.4). With window scaling, snd_nxt stands when it
    /// is past the edge by less than one unit of our receive scale. Measured on 6.18: after
    /// 1000 bytes out and `ack 84 win 0`, the kernel's ACKs carry seq 84, not 1001.
    pub fn acceptable_seq(&self) -> u32 {
        let end = self.snd_wnd_end();
        let over = self.snd.nxt.wrapping_sub(end);
        if !before(end, self.snd.nxt)
            || (self.rx_opt.wscale_ok && over < 1u32 << self.rx_opt.rcv_wscale)
        {
            self.snd.nxt
        } else {
            end
        }
    }

    /// Send a RST for this connection (`tcp_send_active_reset`), seq = [`Self::acceptable_seq`].
    /// It carries the options of any established segment (`tcp_established_options`):
    /// timestamps, and the SACK blocks of data still held out of order (fuzz seed 60122:
    /// `R. ... <nop,nop,sack 1501:2501>` after `close()`).
    pub fn send_active_reset(&mut self, env: &mut Env, now: Instant) {
        let opts = self.established_opts(now);
        let win = self.select_window(env);
        let seg = self.seg(
            env,
            self.acceptable_seq(),
            TcpFlags::RST | TcpFlags::ACK,
            win,
            &opts,
            Payload::EMPTY,
        );
        let departure = self.edt_stamp(now);
        env.emit(&seg, None, Some(departure), None);
        env.mib.inc(Mib::OutRsts);
    }

    /// Send the SYN (active open) from the head of the retransmit queue.
    pub fn send_syn(&mut self, env: &mut Env, now: Instant) {
        self.send_syn_with(env, now, None, &[]);
    }

    /// The SYN of an active open is out: its retransmission timer runs from the initial RTO
    /// (`tcp_connect`), and the open counts (`TcpActiveOpens`).
    pub fn syn_armed(&mut self, env: &mut Env, now: Instant) {
        self.timer.rtx_event = RtxEvent::Rto;
        self.rtt.reset_rto();
        self.timer.retrans_stamp = Some(now);
        self.arm(env, TimerKind::Retrans, now + TCP_TIMEOUT_INIT);
        env.mib.inc(Mib::ActiveOpens);
    }

    /// [`Self::send_syn`] with a Fast Open option and data (`tcp_send_syn_data`); only the
    /// first SYN carries them, a retransmitted one is plain.
    pub fn send_syn_with(
        &mut self,
        env: &mut Env,
        now: Instant,
        cookie: Option<&crate::fastopen::Cookie>,
        payload: &[u8],
    ) {
        let mut opts = Vec::with_capacity(8);
        self.syn_opts(now, &mut opts, 0);
        if let Some(c) = cookie {
            self.push_fastopen(&mut opts, c);
        }
        let win = self.rcv.wnd.min(65535) as u16;
        // tcp_ecn_send_syn (RFC 3168 §6.1.1): with tcp_ecn=1 the SYN asks for ECN with
        // ECE|CWR; a retransmitted SYN drops them (tcp_ecn_clear_syn, tcp_ecn_fallback=1).
        let mut fl = TcpFlags::SYN;
        if self.timer.retransmits == 0 {
            self.ecn_flags = 0;
            if env.sysint(Sysctl::tcp_ecn) == 1 {
                self.ecn_flags = ecnf::OK;
                fl |= TcpFlags::ECE | TcpFlags::CWR;
            }
        }
        let seg = self.seg(env, self.snd.iss, fl, win, &opts, Payload::Flat(payload));
        env.emit(&seg, None, None, None);
        self.stats.count_seg_out();
        self.lsndtime = now;
    }

    /// Send the SYN-ACK. On a passive open Linux sends it from the request socket
    /// (`tcp_v4_send_synack`), so it is not one of the connection's `segs_out` (measured on
    /// 6.18: a child that sent two keepalive probes reports `tcpi_segs_out` 2); the
    /// simultaneous open counts it at the caller.
    pub fn send_synack(&mut self, env: &mut Env, now: Instant) {
        self.send_synack_with(env, now, None);
    }

    /// [`Self::send_synack`] with a Fast Open cookie option (only the first SYN-ACK of a
    /// passive open carries one: `tcp_conn_request`; retransmissions do not).
    pub fn send_synack_with(
        &mut self,
        env: &mut Env,
        now: Instant,
        cookie: Option<&crate::fastopen::Cookie>,
    ) {
        let mut opts = Vec::with_capacity(8);
        let ecr = self.rx_opt.ts_recent;
        self.syn_opts(now, &mut opts, ecr);
        if let Some(c) = cookie {
            self.push_fastopen(&mut opts, c);
        }
        let win = self.rcv.wnd.min(65535) as u16;
        // tcp_ecn_make_synack: ECE on the SYN-ACK when the request was ECN-capable.
        let fl = if self.ecn_flags & ecnf::OK != 0 {
            TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE
        } else {
            TcpFlags::SYN | TcpFlags::ACK
        };
        let seg = self.seg(env, self.snd.iss, fl, win, &opts, Payload::EMPTY);
        env.emit(&seg, None, None, None);
        self.lsndtime = now;
    }

    /// `tcp_tso_autosize` / `tcp_tso_segs` (spec §2.7): segments per TSO packet.
    pub fn tso_segs(&self, env: &Env, mss: u32) -> u32 {
        let min_segs = self
            .cc
            .min_tso_segs()
            .unwrap_or(env.sysint(Sysctl::tcp_min_tso_segs) as u32)
            .max(1);
        let mut bytes = self.pacing.rate >> 10;
        let log = env.sysint(Sysctl::tcp_tso_rtt_log) as u32;
        if log > 0 && self.rtt.min_rtt_us() != u32::MAX {
            let r = self.rtt.min_rtt_us() >> log.min(31);
            if r < 32 {
                bytes += u64::from(GSO_MAX_SIZE >> r);
            }
        }
        let bytes = bytes.min(u64::from(GSO_MAX_SIZE)) as u32;
        (bytes / mss.max(1)).max(min_segs).min(GSO_MAX_SEGS)
    }

    /// `tcp_update_pacing_rate` (spec §2.8).
    pub fn update_pacing_rate(&mut self, env: &Env) {
        let mss = u64::from(self.mss.cache);
        let mut rate = mss * (1_000_000u64 << 3);
        let cwnd = self.snd_cwnd();
        if cwnd < self.cc_st.snd_ssthresh / 2 {
            rate = rate * env.sysint(Sysctl::tcp_pacing_ss_ratio) as u64 / 100;
        } else {
            rate = rate * env.sysint(Sysctl::tcp_pacing_ca_ratio) as u64 / 100;
        }
        rate *= u64::from(cwnd.max(self.rtx.packets_out));
        if self.rtt.srtt_us() != 0 {
            rate /= u64::from(self.rtt.srtt_us());
        }
        self.pacing.rate = rate;
        self.cc_st.sk_pacing_rate = rate;
    }

    /// `tcp_snd_wnd_test` end: right edge of the peer's window.
    pub fn snd_wnd_end(&self) -> u32 {
        self.snd.una.wrapping_add(self.snd.wnd)
    }

    /// `tcp_snd_wnd_test`: whether the first segment of `skb` (its first MSS, or the whole
    /// skb with its FIN, which takes a sequence number) fits in the peer's window. So a bare
    /// FIN, or one on a segment that ends at the window's edge, waits for the window to open
    /// while the persist timer probes (measured on 6.18: close() into a zero window sends
    /// window probes `. 0:0(0)`, no FIN).
    pub(crate) fn snd_wnd_test(&self, skb: &Skb, mss: u32) -> bool {
        let end = if skb.len() > mss {
            skb.seq.wrapping_add(mss)
        } else {
            skb.end_seq
        };
        !after(end, self.snd_wnd_end())
    }

    /// `tcp_cwnd_test`: how many packets cwnd lets us send now.
    fn cwnd_quota(&self) -> u32 {
        let in_flight = self.packets_in_flight();
        let cwnd = self.snd_cwnd();
        if in_flight >= cwnd {
            return 0;
        }
        // "ensure at least 2 GSO packets in flight": at most half of cwnd per skb.
        (cwnd / 2).max(1).min(cwnd - in_flight)
    }

    /// `tcp_nagle_check` (with Minshall's rule): true = hold a partial segment.
    fn nagle_check(&self, partial: bool, nonagle: u8) -> bool {
        // tcp_nagle_test: never for urgent data.
        !self.urg_mode()
            && partial
            && (nonagle & NAGLE_CORK != 0
                || (nonagle == 0 && self.rtx.packets_out > 0 && self.minshall_check()))
    }

    /// Minshall: a small segment is still unacknowledged (`tcp_minshall_check`).
    fn minshall_check(&self) -> bool {
        after(self.snd.sml, self.snd.una) && !after(self.snd.sml, self.snd.nxt)
    }

    /// `tcp_small_queue_check` (spec §2.5): true = stop, too many bytes below TCP.
    fn small_queue_check(&mut self, env: &Env, truesize: u32, factor: u32) -> bool {
        if !env.config.sysctl.on(Sysctl::shallow_tcp_tsq) {
            return false;
        }
        let mut limit = (2 * u64::from(truesize)).max(self.pacing.rate >> 10);
        limit = limit.min(env.sysint(Sysctl::tcp_limit_output_bytes) as u64);
        limit <<= factor;
        if u64::from(self.wmem_alloc_biased()) <= limit {
            return false;
        }
        if self.rtx.queue.len() <= 1 {
            return false;
        }
        self.tsq_flags |= tsq::THROTTLED;
        u64::from(self.wmem_alloc_biased()) > limit
    }

    /// Split the write-queue head so it holds at most `len` payload bytes (`tso_fragment`):
    /// the remainder gets a new buffer (and its own overhead); FIN/PSH stay on the remainder.
    pub(crate) fn split_write_head(&mut self, len: u32) {
        let Some(skb) = self.snd.write_queue.front_mut() else {
            return;
        };
        if skb.len() <= len {
            return;
        }
        let tail = skb.data.split_off(len as usize);
        let nlen = tail.len() as u32;
        let mut rest = Skb::new(skb.seq.wrapping_add(len), TcpFlags::empty());
        rest.flags = skb.flags & (TcpFlags::FIN | TcpFlags::PSH);
        skb.flags &= !(TcpFlags::FIN | TcpFlags::PSH);
        rest.end_seq = skb.end_seq;
        skb.end_seq = skb.seq.wrapping_add(len);
        rest.data = tail;
        rest.eor = skb.eor;
        rest.zc = skb.zc;
        rest.frags = skb.frags;
        skb.eor = false;
        skb.truesize = skb.truesize.saturating_sub(nlen);
        rest.truesize += nlen;
        // tcp_fragment_tstamp: the timestamp request stays with its byte.
        crate::tstamp::split_mark(&mut skb.tstamp, &mut rest.tstamp, rest.seq);
        self.mem.wmem_queued += SKB_TX_OVERHEAD;
        self.snd.write_queue.insert(1, rest);
    }

    /// `tcp_grow_skb`: pull up to `amount` bytes from the next write-queue skb into the head so
    /// one TSO packet can fill the cwnd quota (6.x). An emptied next skb is freed and its
    /// flags (PSH/FIN) and EOR move to the head.
    pub(crate) fn grow_head(&mut self, amount: u32) {
        if self.snd.write_queue.len() < 2 || amount == 0 {
            return;
        }
        let (head_eor, next_len) = (self.snd.write_queue[0].eor, self.snd.write_queue[1].len());
        if head_eor || self.snd.write_queue[0].flags.intersects(TcpFlags::FIN) {
            return;
        }
        // Zero-copy buffers are never merged (tcp_skb_can_collapse).
        if self.snd.write_queue[0].zc.is_some() || self.snd.write_queue[1].zc.is_some() {
            return;
        }
        let nlen = amount.min(next_len);
        if nlen == 0 {
            return;
        }
        let moved = self.snd.write_queue[1].data.split_to(nlen as usize);
        {
            let next = &mut self.snd.write_queue[1];
            next.seq = next.seq.wrapping_add(nlen);
            next.truesize = next.truesize.saturating_sub(nlen);
        }
        let head = &mut self.snd.write_queue[0];
        // O(1) when the two were split from one buffer, else a copy.
        head.data.unsplit(moved);
        head.end_seq = head.end_seq.wrapping_add(nlen);
        head.truesize += nlen;
        if self.snd.write_queue[1].data.is_empty() {
            let next = self.snd.write_queue.remove(1).expect("checked length");
            let head = &mut self.snd.write_queue[0];
            head.end_seq = next.end_seq;
            head.flags |= next.flags;
            head.eor = next.eor;
            // tcp_skb_collapse_tstamp: the eaten buffer's request (the later write) wins.
            if next.tstamp.is_some() {
                head.tstamp = next.tstamp;
            }
            self.mem.wmem_queued = self.mem.wmem_queued.saturating_sub(next.truesize);
        }
    }

    /// `tcp_tso_should_defer`: hold a partial TSO packet when more room is expected soon;
    /// a deferral for want of cwnd or of the peer's window is noted in `limits`.
    fn tso_should_defer(
        &self,
        env: &Env,
        now: Instant,
        max_segs: u32,
        is_tail: bool,
        limits: &mut XmitLimits,
    ) -> bool {
        if matches!(
            self.ca_state,
            shallow_cc::CaState::Recovery | shallow_cc::CaState::Loss
        ) {
            return false;
        }
        // Defer only if the last transmit was recent (1 ms).
        if now > self.pacing.wstamp + Duration::from_millis(1) {
            return false;
        }
        let Some(head) = self.snd.write_queue.front() else {
            return false;
        };
        let (seq, len, fin, eor) = (
            head.seq,
            head.len(),
            head.flags.intersects(TcpFlags::FIN),
            head.eor,
        );
        let in_flight = self.packets_in_flight();
        let cwnd = self.snd_cwnd();
        let mss = self.mss.cache;
        let send_win = self.snd_wnd_end().wrapping_sub(seq);
        let cong_win = cwnd.saturating_sub(in_flight) * mss;
        let limit = send_win.min(cong_win);
        if limit >= max_segs * mss {
            return false;
        }
        if !is_tail && limit >= len {
            return false;
        }
        let div = env.sysint(Sysctl::tcp_tso_win_divisor) as u32;
        match self.snd.wnd.min(cwnd * mss).checked_div(div) {
            Some(chunk) if limit >= chunk => return false,
            Some(_) => {}
            None if limit > 3 * mss => return false,
            None => {}
        }
        let Some(rhead) = self.rtx.queue.front() else {
            return false;
        };
        // If the next ACK is likely to come too late, in more than min(half srtt, 1 ms)
        // from now, do not defer (measured on 6.18, fuzz seed 150127: srtt 9.9 ms, the head
        // sent 2, 5 and 8 ms before, and the kernel sent the last segment cwnd allowed at once;
        // 9.5 ms before, it deferred).
        let srtt = Duration::from_micros(u64::from(self.rtt.srtt_us() >> 3));
        let expected_ack = rhead.mstamp + srtt;
        let threshold = (srtt / 2).min(Duration::from_millis(1));
        if expected_ack > now + threshold {
            return false;
        }
        if cong_win < send_win {
            if cong_win <= len {
                limits.cwnd = true;
                return true;
            }
        } else if send_win <= len {
            limits.rwnd = true;
            return true;
        }
        if fin || eor {
            return false;
        }
        true
    }

    /// `tcp_cwnd_validate`: remember whether the flow used its whole cwnd in this window;
    /// while it does not, track the most it used, and once that has lasted an RTO (with
    /// `tcp_slow_start_after_idle` on) apply RFC 2861's slow part.
    fn cwnd_validate(&mut self, env: &Env, now: Instant, is_cwnd_limited: bool) {
        let (una, nxt, out) = (self.snd.una, self.snd.nxt, self.rtx.packets_out);
        self.cwnd_use.record(una, nxt, out, is_cwnd_limited);
        let in_ss = self.snd_cwnd() < self.cc_st.snd_ssthresh;
        if self.cwnd_use.limited(self.snd_cwnd(), in_ss) {
            self.cwnd_use.used = 0;
            self.cwnd_use.stamp = now;
            return;
        }
        self.cwnd_use.used = self.cwnd_use.used.max(out);
        if env.config.sysctl.on(Sysctl::tcp_slow_start_after_idle)
            && now - self.cwnd_use.stamp >= self.rtt.rto()
        {
            self.cwnd_application_limited(now);
        }
    }

    /// `tcp_cwnd_application_limited` (RFC 2861 §3, the slow part): a cwnd the flow has not
    /// filled for an RTO, while the state is Open and the writer has not run out of send
    /// buffer, falls halfway to what the flow used (at least the initial window); ssthresh
    /// becomes at least 3/4 of the old cwnd (`tcp_current_ssthresh`).
    fn cwnd_application_limited(&mut self, now: Instant) {
        if self.ca_state == shallow_cc::CaState::Open && !self.nospace {
            let win_used = self.cwnd_use.used.max(self.init_cwnd());
            if win_used < self.snd_cwnd() {
                self.cc_st.snd_ssthresh = self.current_ssthresh();
                self.cc_st.snd_cwnd = (self.snd_cwnd() + win_used) >> 1;
            }
            self.cwnd_use.used = 0;
        }
        self.cwnd_use.stamp = now;
    }

    /// The initial congestion window: the route's `initcwnd`, else `TCP_INIT_CWND`
    /// (`tcp_init_cwnd`).
    pub(crate) fn init_cwnd(&self) -> u32 {
        if self.route.initcwnd != 0 {
            self.route.initcwnd
        } else {
            TCP_INIT_CWND
        }
    }

    /// `tcp_write_xmit`: send new data from the write queue as cwnd, rwnd, Nagle, TSO
    /// deferral and TSQ allow. Returns true if nothing could be sent while data is pending and
    /// nothing is in flight (the caller arms the zero-window probe).
    pub fn write_xmit(&mut self, env: &mut Env, now: Instant, nonagle: u8, push_one: bool) -> bool {
        let fastopen_child = self.state == TcpState::SynRecv && self.fastopen.child;
        if !fastopen_child
            && !matches!(
                self.state,
                TcpState::Established
                    | TcpState::CloseWait
                    | TcpState::FinWait1
                    | TcpState::Closing
                    | TcpState::LastAck
            )
        {
            return false;
        }
        self.refresh_mss(env);
        let mss_now = self.current_mss();
        let mut sent_pkts = 0u32;
        let mut sent_segs = 0u32;
        let mut limits = XmitLimits::default();
        // What tcp_event_new_data_sent will do with the timer if anything goes out.
        let rto_rearm_due =
            self.rtx.packets_out == 0 || self.timer.rtx_event == RtxEvent::LossProbe;
        if !push_one {
            match self.mtu_probe(env, now) {
                0 => return false,
                r if r > 0 => {
                    sent_pkts = 1;
                    sent_segs = 1;
                }
                _ => {}
            }
        }
        let max_segs = if self.gso_ok(env) {
            self.tso_segs(env, mss_now)
        } else {
            1
        };
        while let Some(head) = self.snd.write_queue.front() {
            let head_len = head.len();
            let head_fin = head.flags.intersects(TcpFlags::FIN);
            let mut cwnd_quota = self.cwnd_quota();
            if cwnd_quota == 0 {
                // tcp_cwnd_test: a loss probe's new segment (push_one = 2) may go out when
                // cwnd is full; a lone FIN may not (Linux 6.18: with 10 segments out and
                // cwnd 10, shutdown()'s or close()'s FIN waits and leaves as the loss probe;
                // with 9 out it leaves at once).
                if !self.tlp.forces_quota() {
                    limits.cwnd = true;
                    break;
                }
                cwnd_quota = 1;
            }
            // tcp_write_xmit grows the head before it tests the peer's window, so a head
            // that the window holds back still absorbs its neighbour (freeing that buffer's
            // overhead from sk_wmem_queued: a large write then fits more bytes).
            cwnd_quota = cwnd_quota.min(max_segs);
            let missing = (cwnd_quota * mss_now).saturating_sub(head_len);
            // In urgent mode segments keep their single-MSS buffers (measured on 6.18: an
            // urgent write of 1.5 MSS leaves as two packets, each with its own pointer).
            if missing > 0 && !self.urg_mode() {
                self.grow_head(missing);
            }
            let Some(head) = self.snd.write_queue.front() else {
                break;
            };
            if !self.snd_wnd_test(head, mss_now) {
                limits.rwnd = true;
                break;
            }
            let head_len = head.len();
            let is_tail = self.snd.write_queue.len() == 1;
            let tso_segs = head_len.div_ceil(mss_now).max(1);
            if tso_segs == 1 {
                // tcp_nagle_test: only the tail is subject to Nagle.
                let partial = head_len < mss_now;
                let ng = if is_tail { nonagle } else { NAGLE_PUSH };
                if ng & NAGLE_PUSH == 0 && !head_fin && self.nagle_check(partial, ng) {
                    break;
                }
            } else if !push_one && self.tso_should_defer(env, now, max_segs, is_tail, &mut limits) {
                break;
            }
            // tcp_mss_split_point
            let Some(head) = self.snd.write_queue.front() else {
                break;
            };
            let window = self.snd_wnd_end().wrapping_sub(head.seq);
            let max_len = mss_now * cwnd_quota;
            // tcp_write_xmit: in urgent mode a packet is one MSS (no split point).
            let limit = if self.urg_mode() {
                mss_now
            } else if max_len <= window && !is_tail {
                max_len
            } else {
                let needed = head_len.min(window);
                if max_len <= needed {
                    max_len
                } else {
                    let partial = needed % mss_now;
                    if partial != 0 && needed > partial && self.nagle_check(true, nonagle) {
                        needed - partial
                    } else {
                        needed
                    }
                }
            };
            if head_len > limit {
                if limit == 0 {
                    break;
                }
                self.split_write_head(limit);
            }
            let truesize = self
                .snd
                .write_queue
                .front()
                .map(|s| s.truesize)
                .unwrap_or(0);
            if self.small_queue_check(env, truesize, 0) {
                break;
            }
            let Some(skb) = self.snd.write_queue.pop_front() else {
                break;
            };
            self.rtx.queue.push_back(skb);
            let idx = self.rtx.queue.len() - 1;
            if !self.transmit_skb(env, now, idx, false) {
                // tcp_write_xmit: a failed transmit leaves the skb at the send head.
                if let Some(skb) = self.rtx.queue.pop_back() {
                    self.snd.write_queue.push_front(skb);
                }
                break;
            }
            self.event_new_data_sent(env, now, idx);
            sent_pkts += 1;
            sent_segs += self.rtx.queue.get(idx).map_or(1, |s| s.pcount);
            if push_one {
                break;
            }
        }
        if limits.rwnd {
            self.chrono.start(now, CHRONO_RWND_LIMITED);
        } else {
            self.chrono_stop(now, CHRONO_RWND_LIMITED);
        }
        if self.snd.write_queue.is_empty() && self.nospace {
            self.chrono.start(now, CHRONO_SNDBUF_LIMITED);
        }
        let limited = limits.cwnd || self.packets_in_flight() >= self.snd_cwnd();
        if sent_pkts > 0 {
            // tcp_write_xmit: new data sent during a cwnd reduction counts towards PRR's
            // prr_out (tcp_in_cwnd_reduction: CWR or Recovery).
            if matches!(
                self.ca_state,
                shallow_cc::CaState::Cwr | shallow_cc::CaState::Recovery
            ) {
                self.prr.sent(sent_segs);
            }
            self.cwnd_validate(env, now, limited);
            // tcp_event_new_data_sent re-arms the RTO only when nothing was in flight or the
            // pending timer was the loss probe's (a pending RTO or RACK reordering timer
            // stays: fuzz seed 200083, timestamps, where new data sent right after a SACK
            // must not push back the reordering timer that retransmits 11 ms later); then
            // tcp_schedule_loss_probe, which replaces it with a probe where one is allowed.
            // Data in flight is never watched by a persist timer armed while nothing was out.
            if !self.schedule_loss_probe(env, now, false) && rto_rearm_due {
                self.rearm_rto(env, now);
            }
            return false;
        }
        if limited {
            self.cwnd_validate(env, now, true);
        }
        !self.snd.write_queue.is_empty() && self.rtx.packets_out == 0
    }

    /// `tcp_event_new_data_sent`: snd_nxt advanced.
    pub(crate) fn event_new_data_sent(&mut self, env: &mut Env, now: Instant, idx: usize) {
        let (end, pcount) = {
            let s = &self.rtx.queue[idx];
            (s.end_seq, s.pcount)
        };
        self.snd.nxt = end;
        self.rtx.packets_out += pcount;
        env.mib.add(Mib::TCPOrigDataSent, u64::from(pcount));
        // tcp_rearm_rto when nothing was in flight (the retransmission timer then takes the
        // place of whatever the shared timer held, the persist timer included, armed by
        // tcp_check_probe_timer while data waited under TCP_CORK or Nagle) is the caller's:
        // `write_xmit` after its loop, the window probe at once.
        self.chrono.start(now, CHRONO_BUSY);
        // tcp_check_space from the output path (4bfe744ff164).
        self.check_space(env, now);
    }

    /// Transmit `rtx_queue[idx]` (first transmission or retransmission) as one packet,
    /// possibly a TSO super-segment. Charges `wmem_alloc` and issues a TX token. Returns false
    /// when the device side refused it (`crate::gate`, NET_XMIT_DROP): nothing about the skb
    /// changes, `__tcp_transmit_skb` takes the local congestion as a CWR signal, and the
    /// attempt is counted as Linux counts it before its `queue_xmit` (OutSegs for new data,
    /// RetransSegs for a retransmission; the caller adds TCPRetransFail).
    pub fn transmit_skb(&mut self, env: &mut Env, now: Instant, idx: usize, retrans: bool) -> bool {
        self.transmit_skb_mss(env, now, idx, retrans, None)
    }

    /// [`Connection::transmit_skb`] with the segment size given (`mss_override`: an MTU probe
    /// leaves as one segment larger than the current MSS) instead of the current MSS.
    pub fn transmit_skb_mss(
        &mut self,
        env: &mut Env,
        now: Instant,
        idx: usize,
        retrans: bool,
        mss_override: Option<u32>,
    ) -> bool {
        // ip_queue_xmit: a stale cached route is looked up again for this packet; the MSS
        // follows at the next tcp_current_mss.
        if let Some(r) = self.route_pending.take() {
            self.route = r;
        }
        let mss = match mss_override {
            Some(m) => m,
            None => self.current_mss(),
        };
        let opts = self.established_opts(now);
        let (seq, fl, len, truesize) = {
            let s = &self.rtx.queue[idx];
            (s.seq, s.flags, s.len(), s.truesize)
        };
        let pcount = len.div_ceil(mss).max(1);
        let gso = if len > mss {
            Some(mss.min(65535) as u16)
        } else {
            None
        };
        let ecn_ok = self.ecn_flags & ecnf::OK != 0;
        let ect = ecn_ok && len > 0 && !retrans;
        // The device side's verdict, before anything about the skb changes (the header
        // length is that of the segment built below: same options, same addresses).
        let header_len = packet::header_len(&SegOut {
            urgent: 0,
            local: self.local,
            remote: self.remote,
            seq,
            ack: 0,
            flags: fl,
            window: 0,
            tos: 0,
            ttl: 0,
            ident: 0,
            opts: &opts,
            payload: Payload::EMPTY,
            md5: self.md5_key(),
        });
        let flow = env.keys.flow_hash(self.local, self.remote);
        let meta = TxMeta {
            flow,
            len: header_len + len as usize,
            header_len,
            gso_size: gso,
            tos: if ecn_ok {
                (self.opts.tos & !0x3) | if ect { 0x2 } else { 0 }
            } else {
                self.opts.tos
            },
            departure: Some(self.pacing.wstamp.max(now)),
            now,
        };
        let verdict = env.device.verdict(&meta);
        if verdict == crate::gate::Admission::Refused {
            if !matches!(
                self.ca_state,
                shallow_cc::CaState::Cwr
                    | shallow_cc::CaState::Recovery
                    | shallow_cc::CaState::Loss
            ) {
                self.enter_cwr(now);
            }
            if retrans {
                env.mib.add(Mib::RetransSegs, u64::from(pcount));
            } else {
                env.mib.add(Mib::OutSegs, u64::from(pcount));
            }
            return false;
        }
        let win = self.select_window(env);
        let prior_wstamp = self.pacing.wstamp;
        let departure = self.edt_stamp(now);
        if len_of(&self.rtx.queue[idx]) > 0 {
            // tcp_event_data_sent: CA_EVENT_TX_START after idle; a reply within ato of the
            // last received segment counts towards pingpong (interactive) mode.
            if self.packets_in_flight() == 0 {
                self.sync_cc_state(now);
                self.cc.cwnd_event(
                    &mut self.cc_st,
                    shallow_cc::CaEvent::TxStart,
                    now.as_micros(),
                );
            }
            if self.ack.lrcvtime != Instant::ZERO && now - self.ack.lrcvtime < self.ack.ato {
                self.ack.pingpong = self.ack.pingpong.saturating_add(1);
            }
        }
        // An orphaning device (Env::tx_orphan) frees the packet inside the send unless an EDT
        // qdisc holds it for a later departure.
        let orphan =
            env.device.caps.orphan_at_xmit && !(env.device.caps.edt_pacing && departure > now);
        // A qdisc that will cut this GSO packet into wire segments (tbf_segment): the socket
        // is charged each segment as its own buffer (tcp_gso_segment), and the copy of the
        // skb it sent is freed at the cut.
        let segmented = !orphan && pcount > 1 && verdict == crate::gate::Admission::Cut;
        let charge = if segmented {
            pcount * SKB_TX_OVERHEAD + len
        } else {
            truesize
        };
        // Zero-copy bytes in this copy: a device that copies what it takes makes their
        // completion say so; a copy left in the host holds it until its TX completion.
        let end_seq = self.rtx.queue[idx].end_seq;
        let zc = if self.zc.is_idle() {
            None
        } else {
            if env.device.caps.tx_copies {
                self.zc.mark_copied(seq, end_seq);
            }
            if orphan {
                None
            } else {
                self.zc.hold_tx(seq, end_seq)
            }
        };
        let token = (!orphan).then_some(TxToken {
            idx: self.id.0,
            gen: self.gen,
            truesize: charge,
            seq,
            segmented,
            zc,
        });
        let tx_rate = self.rate_skb_sent(now);
        {
            let s = &mut self.rtx.queue[idx];
            s.tx = tx_rate;
            s.pcount = pcount;
            s.mstamp = now;
            s.edt = departure;
            if !retrans {
                s.first_tx = now;
            }
            if !orphan && !segmented {
                s.in_host = s.in_host.saturating_add(1);
            }
        }
        // __tcp_transmit_skb: every GSO packet (pcount > 1) carries PSH, to expedite the GRO
        // flush at the receiver; single-MSS packets keep the skb's own flags. Only the
        // transmitted copy is marked, not the queued skb.
        let mut flags = fl
            | TcpFlags::ACK
            | if pcount > 1 {
                TcpFlags::PSH
            } else {
                TcpFlags::empty()
            };
        // tcp_ecn_send (RFC 3168 §6.1.2, §6.1.5): new data carries ECT(0) (and a queued CWR);
        // retransmissions and pure ACKs are not ECN-capable; ECE is echoed while demanded.
        if ecn_ok {
            if ect && self.ecn_flags & ecnf::QUEUE_CWR != 0 {
                self.ecn_flags &= !ecnf::QUEUE_CWR;
                flags |= TcpFlags::CWR;
            }
            if self.ecn_flags & ecnf::DEMAND_CWR != 0 {
                flags |= TcpFlags::ECE;
            }
        }
        // With scatter-gather the packet shares the skb's bytes (which become read-only);
        // without, they are copied behind the headers.
        let frags = (env.device.caps.sg && len > 0).then(|| self.rtx.queue[idx].data.share());
        let payload = std::mem::take(&mut self.rtx.queue[idx].data);
        let mut seg = self.seg(env, seq, flags, win, &opts, payload.view());
        if ecn_ok {
            seg.tos = (seg.tos & !0x3) | if ect { 0x2 } else { 0 };
        }
        let completes_later = token.is_some();
        let ok = env
            .emit_frag(&seg, frags, gso, Some(departure), token, Some(flow))
            .sent();
        self.rtx.queue[idx].data = payload;
        // tcp_minshall_update: remember the end of a packet of new data with a short last
        // segment (tcp_write_xmit's; a retransmission does not count).
        if !retrans && len < pcount * mss {
            self.snd.sml = seq.wrapping_add(len);
        }
        if ok {
            // OutSegs counts wire segments.
            env.mib.add(Mib::OutSegs, u64::from(pcount) - 1);
            if !orphan {
                self.mem.wmem_alloc += charge;
            }
            self.stats.count_xmit(pcount, len, retrans);
            if retrans {
                env.mib.add(Mib::RetransSegs, u64::from(pcount));
            }
            // A marked byte went down: SCHED now (the qdisc takes it), SND when the device
            // does (at once on a device that orphans at its transmit, else at completion).
            if let Some(m) = self.rtx.queue[idx].tstamp {
                // Without OPT_TSONLY each entry carries the packet (a clone of the skb).
                let bytes = match env.out.txq.back() {
                    Some(t) if (m.sched || m.snd) && self.tstamp.wants_bytes() => {
                        crate::tstamp::ErrqBytes::packet(&t.data, &t.frags, len)
                    }
                    _ => Default::default(),
                };
                if m.sched {
                    self.tstamp_event(
                        env,
                        crate::tstamp::TstampKind::Sched,
                        m.key,
                        now,
                        bytes.clone(),
                    );
                }
                if m.snd {
                    if !completes_later {
                        self.tstamp_event(env, crate::tstamp::TstampKind::Snd, m.key, now, bytes);
                    } else {
                        self.tstamp.owe_snd(seq, m.key, bytes);
                    }
                }
            }
        }
        self.lsndtime = now;
        self.event_ack_sent(env, pcount);
        // EDT: with a pacing qdisc (fq), advance the departure stamp by len / rate
        // (tcp_update_skb_after_send), after the first 10 data segments. A send that found
        // the stamp in the past (the flow was late, e.g. ACK-clocked after a gap) takes that
        // lateness as credit against OS jitter, up to half of this packet's time.
        if env.device.caps.edt_pacing
            && self.pacing.rate > 0
            && self.stats.data_segs_out() >= 10
            && len > 0
        {
            let len_ns = u64::from(len) * 1_000_000_000 / self.pacing.rate.max(1);
            let credit = (departure - prior_wstamp).as_nanos() as u64;
            let ns = len_ns - (len_ns / 2).min(credit);
            self.pacing.wstamp += Duration::from_nanos(ns);
        }
        true
    }

    /// `tcp_send_fin`: append FIN to the tail skb, or queue a FIN-only skb, and push.
    pub fn send_fin(&mut self, env: &mut Env, now: Instant) {
        if let Some(tail) = self.snd.write_queue.back_mut() {
            tail.flags |= TcpFlags::FIN;
            tail.end_seq = tail.end_seq.wrapping_add(1);
        } else {
            let mut skb = Skb::new(self.snd.write_seq, TcpFlags::FIN);
            skb.truesize = SKB_TX_OVERHEAD;
            self.mem.wmem_queued += skb.truesize;
            self.snd.write_queue.push_back(skb);
        }
        self.snd.write_seq = self.snd.write_seq.wrapping_add(1);
        self.push_pending_frames(env, now, NAGLE_OFF);
    }

    /// `__tcp_push_pending_frames`: write_xmit, and arm the zero-window probe if stuck.
    pub fn push_pending_frames(&mut self, env: &mut Env, now: Instant, nonagle: u8) {
        if self.snd.write_queue.is_empty() {
            return;
        }
        if self.write_xmit(env, now, nonagle, false) {
            self.check_probe_timer(env, now);
        }
    }

    /// `tcp_check_probe_timer`: arm the persist timer when nothing is in flight and no
    /// timer is pending.
    pub fn check_probe_timer(&mut self, env: &mut Env, now: Instant) {
        if self.rtx.packets_out == 0 && !self.timer.armed(TimerKind::Retrans) {
            self.timer.rtx_event = RtxEvent::Probe0;
            let when = self.probe0_when();
            self.arm(env, TimerKind::Retrans, now + when);
        }
    }

    /// Persist-timer interval: RTO backed off by `backoff`, capped at TCP_RTO_MAX.
    pub fn probe0_when(&self) -> Duration {
        let base = self.rtt.rto().max(Duration::from_millis(200));
        let d = base.saturating_mul(1u32 << self.timer.backoff.min(20));
        d.min(TCP_RTO_MAX)
    }

    /// Send a zero-window probe (`tcp_write_wakeup` / `tcp_xmit_probe_skb`): an old-sequence
    /// segment with no data (seq = snd_una - 1) that makes the peer answer with its window.
    /// Returns true when the qdisc below dropped it (a local error, `err > 0` in
    /// `tcp_send_probe0`).
    pub fn send_probe0(&mut self, env: &mut Env, now: Instant) -> bool {
        // tcp_write_wakeup: if the window allows, send (part of) the head with PSH, ignoring
        // Nagle, cork and cwnd.
        if let Some(head) = self.snd.write_queue.front() {
            let wnd_end = self.snd_wnd_end();
            if before(head.seq, wnd_end) && self.snd.wnd > 0 {
                let mss = self.current_mss();
                let seg_size = wnd_end.wrapping_sub(head.seq).min(mss);
                if head.len() > seg_size {
                    self.split_write_head(seg_size);
                }
                if let Some(skb) = self.snd.write_queue.pop_front() {
                    let mut skb = skb;
                    skb.flags |= TcpFlags::PSH;
                    self.rtx.queue.push_back(skb);
                    let idx = self.rtx.queue.len() - 1;
                    if !self.transmit_skb(env, now, idx, false) {
                        if let Some(skb) = self.rtx.queue.pop_back() {
                            self.snd.write_queue.push_front(skb);
                        }
                        return true;
                    }
                    self.event_new_data_sent(env, now, idx);
                    // tcp_event_new_data_sent's tcp_rearm_rto, and no loss probe: only
                    // tcp_write_xmit schedules one (measured on 6.18: after a persist probe
                    // sent 10 bytes into a 10-byte window, the next copies left at +216 ms
                    // and +436 ms, RTO and backed-off RTO).
                    self.rearm_rto(env, now);
                }
                return false;
            }
        }
        match self.xmit_probe_skb(env, now, Mib::TCPWinProbe) {
            Emitted::Refused => true,
            Emitted::Sent | Emitted::Unbuilt => false,
        }
    }

    /// `tcp_xmit_probe_skb`: an ACK with sequence `snd_una - 1`, which the peer cannot accept
    /// and must answer with its current window and ACK; the zero-window probe and the
    /// keepalive probe. Counted in `mib` when it leaves.
    pub(crate) fn xmit_probe_skb(&mut self, env: &mut Env, now: Instant, mib: Mib) -> Emitted {
        let opts = self.established_opts(now);
        let win = self.select_window(env);
        let seg = self.seg(
            env,
            self.snd.una.wrapping_sub(1),
            TcpFlags::ACK,
            win,
            &opts,
            Payload::EMPTY,
        );
        let departure = self.edt_stamp(now);
        let sent = env.emit(&seg, None, Some(departure), None);
        if sent == Emitted::Sent {
            env.mib.inc(mib);
            self.stats.count_seg_out();
        }
        sent
    }

    /// `tcp_check_space` → `tcp_new_space` → `sk_stream_write_space` (spec §4.2): if a writer
    /// armed SOCK_NOSPACE and the socket is now writeable with the wake=1 hysteresis, wake it.
    pub fn check_space(&mut self, env: &mut Env, now: Instant) {
        if !self.nospace {
            return;
        }
        if self.should_expand_sndbuf(env) {
            self.sndbuf_expand(env);
            self.cwnd_use.restamp(now);
        }
        if self.stream_is_writeable(env, 1) {
            self.nospace = false;
            self.chrono_stop(now, CHRONO_SNDBUF_LIMITED);
            env.out.wake(
                self.id,
                crate::socket::pollbits::POLLOUT
                    | crate::socket::pollbits::POLLWRNORM
                    | crate::socket::pollbits::POLLWRBAND,
            );
        }
    }

    /// `tcp_should_expand_sndbuf`.
    fn should_expand_sndbuf(&self, env: &Env) -> bool {
        if self.opts.sndbuf_lock || env.mem.pressure {
            return false;
        }
        if env.mem.allocated >= env.config.sysctl.triple(Sysctl::tcp_mem)[0] {
            return false;
        }
        self.packets_in_flight() < self.snd_cwnd()
    }

    /// `tcp_sndbuf_expand` (spec §4.2).
    pub fn sndbuf_expand(&mut self, env: &Env) {
        if self.opts.sndbuf_lock {
            return;
        }
        let per_mss = (self.rx_opt.mss_clamp.max(self.mss.cache) + MAX_TCP_HEADER + 320)
            .next_power_of_two()
            + 256;
        let nr_segs = TCP_INIT_CWND.max(self.snd_cwnd()).max(self.reordering + 1);
        let factor = self.cc.sndbuf_expand().unwrap_or(2);
        let sndmem = u64::from(factor) * u64::from(nr_segs) * u64::from(per_mss);
        let max = env.config.sysctl.triple(Sysctl::tcp_wmem)[2] as u64;
        let s = sndmem.min(max) as u32;
        if s > self.mem.sndbuf {
            self.mem.sndbuf = s;
        }
    }
}

impl Connection {
    /// `tcp_slow_start_after_idle_check` → `tcp_cwnd_restart` (RFC 5681 §4.1): after an idle
    /// period longer than the RTO, cwnd is halved per RTO idle, down to the initial window.
    pub(crate) fn slow_start_after_idle_check(&mut self, env: &Env, now: Instant) {
        if !env.config.sysctl.on(Sysctl::tcp_slow_start_after_idle) || self.rtx.packets_out > 0 {
            return;
        }
        if self.lsndtime == Instant::ZERO
            || self.state != TcpState::Established && self.state != TcpState::CloseWait
        {
            return;
        }
        let mut delta = now - self.lsndtime;
        if delta <= self.rtt.rto() {
            return;
        }
        let initcwnd = self.init_cwnd();
        self.sync_cc_state(now);
        self.cc.cwnd_event(
            &mut self.cc_st,
            shallow_cc::CaEvent::CwndRestart,
            now.as_micros(),
        );
        self.cc_st.snd_ssthresh = self.current_ssthresh();
        let mut cwnd = self.snd_cwnd();
        let restart = initcwnd.min(cwnd);
        while delta > self.rtt.rto() && cwnd > restart {
            delta -= self.rtt.rto();
            cwnd >>= 1;
        }
        self.cc_st.snd_cwnd = cwnd.max(restart);
        self.cwnd_use.restamp(now);
    }

    /// `tcp_tsq_write` (spec §2.6): after a TX completion, retransmit lost data then push.
    pub(crate) fn tsq_write(&mut self, env: &mut Env, now: Instant) {
        if matches!(
            self.state,
            TcpState::Established
                | TcpState::FinWait1
                | TcpState::Closing
                | TcpState::CloseWait
                | TcpState::LastAck
        ) {
            if self.rtx.lost_out > self.rtx.retrans_out
                && self.snd_cwnd() > self.packets_in_flight()
            {
                self.xmit_retransmit_queue(env, now);
            }
            let ng = self.nonagle();
            self.write_xmit(env, now, ng, false);
        }
    }
}

/// How much of its congestion window the flow used (`tcp_sock`'s `is_cwnd_limited`,
/// `max_packets_out`, `cwnd_usage_seq`, `snd_cwnd_used`, `snd_cwnd_stamp`): recorded by
/// `tcp_cwnd_validate` after each run of the output loop and read by `tcp_is_cwnd_limited`,
/// which lets cwnd grow only while it is used, and by RFC 2861's slow part, which shrinks a
/// cwnd left unused for an RTO. Private to this file.
#[derive(Debug, Default)]
pub(crate) struct CwndUse {
    /// The flow was cwnd-limited in the last window of data (`is_cwnd_limited`).
    is_cwnd_limited: bool,
    /// Most segments in flight in that window (`max_packets_out`).
    max_packets_out: u32,
    /// SND.NXT when the window began (`cwnd_usage_seq`).
    cwnd_usage_seq: u32,
    /// Most segments in flight since cwnd was last full or last validated (`snd_cwnd_used`).
    used: u32,
    /// When cwnd was last full, or last changed by a rule that restarts the clock
    /// (`snd_cwnd_stamp`).
    stamp: Instant,
}

impl CwndUse {
    /// `tcp_cwnd_validate`'s record: start a new window of data when SND.UNA passed the last
    /// one, or the flow was limited, or more is in flight than the window saw.
    fn record(&mut self, una: u32, nxt: u32, packets_out: u32, is_cwnd_limited: bool) {
        if !before(una, self.cwnd_usage_seq)
            || is_cwnd_limited
            || (!self.is_cwnd_limited && packets_out > self.max_packets_out)
        {
            self.is_cwnd_limited = is_cwnd_limited;
            self.max_packets_out = packets_out;
            self.cwnd_usage_seq = nxt;
        }
    }

    /// Restarts the clock of RFC 2861's validation (`snd_cwnd_stamp = now`): cwnd was just
    /// set by a rule of its own (the transfer's start, the end or undo of a reduction, a
    /// timeout, a restart after idle, a send-buffer expansion).
    pub(crate) fn restamp(&mut self, now: Instant) {
        self.stamp = now;
    }

    /// `tcp_is_cwnd_limited`: in slow start, cwnd is used while it is less than twice the
    /// most in flight; otherwise as the last window recorded.
    pub fn limited(&self, snd_cwnd: u32, in_slow_start: bool) -> bool {
        if in_slow_start {
            return snd_cwnd < 2 * self.max_packets_out;
        }
        self.is_cwnd_limited
    }
}

/// Pacing and TSO autosizing state (`sk_pacing_rate`, `tcp_wstamp_ns`, and the cached
/// segment count of `tcp_tso_autosize`). Private to this file: the rate is set by
/// `tcp_update_pacing_rate` here and read elsewhere through [`Pacing::rate`].
#[derive(Debug)]
pub(crate) struct Pacing {
    /// `sk_pacing_rate` in bytes per second; `u64::MAX` (unlimited) until the first ACK of
    /// data.
    rate: u64,
    /// `tcp_wstamp_ns`: the departure time of the latest segment.
    wstamp: Instant,
    /// Segments per TSO packet last computed by `tcp_tso_autosize`, for `mss_now` (0: none).
    gso_segs: u32,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            rate: u64::MAX,
            wstamp: Instant::ZERO,
            gso_segs: 0,
        }
    }
}

impl Pacing {
    /// `sk_pacing_rate`.
    pub fn rate(&self) -> u64 {
        self.rate
    }
}
