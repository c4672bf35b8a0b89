//! Introspection: `tcp_info` (Linux field names), `SO_MEMINFO`, `tcp_poll`, and the socket
//! option handlers.

use crate::env::Env;
use crate::errno::Errno;
use crate::socket::pollbits::*;
use crate::socket::*;
use crate::sockopt::{OptVal, SockOpt};
use crate::sysctl::{Sysctl, CC_NAMES};
use crate::time::Instant;
use crate::timer::TimerKind;
use crate::Mib;

/// `struct tcp_info` (the fields Shallow fills; Linux names without the `tcpi_` prefix).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    /// TCPI_OPT_TIMESTAMPS=1, SACK=2, WSCALE=4, ECN=8, SYN_DATA=32.
    pub options: u8,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub last_data_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    /// The last delivery-rate sample was application-limited.
    pub delivery_rate_app_limited: bool,
    pub delivered: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    /// Time with data outstanding or queued, µs (`tcpi_busy_time`, includes the limited times).
    pub busy_time: u64,
    /// Time limited by the peer's receive window, µs (`tcpi_rwnd_limited`).
    pub rwnd_limited: u64,
    /// Time limited by the send buffer, µs (`tcpi_sndbuf_limited`).
    pub sndbuf_limited: u64,
    /// Reordering events seen (`tcpi_reord_seen`: SACK, timestamp or Reno detections).
    pub reord_seen: u32,
    /// Segments the peer reported received twice (`tcpi_dsack_dups`, `tcp_dsack_seen`).
    pub dsack_dups: u32,
    /// Packets delivered by ACKs that echoed congestion (`tcpi_delivered_ce`).
    pub delivered_ce: u32,
    /// Flow-hash changes (`tcpi_rehash`: after timeouts; Shallow has no PLB).
    pub rehash: u32,
}

/// `SO_MEMINFO` / `ss -m` skmem, in `SK_MEMINFO_*` order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// r: receive queue + ofo bytes (truesize).
    pub rmem_alloc: u32,
    /// rb: receive buffer limit.
    pub rcvbuf: u32,
    /// t: bytes below TCP (qdisc/NIC), without Linux's +1 bias.
    pub wmem_alloc: u32,
    /// tb: send buffer limit.
    pub sndbuf: u32,
    /// f: forward-allocated bytes (`sk_forward_alloc`: pages held minus bytes charged).
    pub fwd_alloc: u32,
    /// w: write + retransmit queue (truesize).
    pub wmem_queued: u32,
    /// o: option memory (0).
    pub optmem: u32,
    /// bl: backlog bytes.
    pub backlog: u32,
    /// d: drops.
    pub drops: u32,
}

impl MemInfo {
    /// As the `SK_MEMINFO_*` array.
    pub fn as_array(&self) -> [u32; 9] {
        [
            self.rmem_alloc,
            self.rcvbuf,
            self.wmem_alloc,
            self.sndbuf,
            self.fwd_alloc,
            self.wmem_queued,
            self.optmem,
            self.backlog,
            self.drops,
        ]
    }
}

fn ms_since(now: Instant, t: Instant) -> u32 {
    if t == Instant::ZERO {
        return 0;
    }
    (now - t).as_millis().min(u128::from(u32::MAX)) as u32
}

/// The connection's statistics that `tcp_info` and `ss` report (`tcp_sock`'s `segs_in`,
/// `bytes_acked`, `total_retrans`, …, and the socket's `sk_drops`). Private to this file:
/// the engine counts each event through the method named after it, and only `tcp_info`,
/// `SO_MEMINFO` and RACK (which asks whether reordering was ever seen) read them.
#[derive(Debug, Default)]
pub(crate) struct ConnStats {
    /// `tcpi_bytes_acked`: sequence space acknowledged (an acked SYN or FIN counts one).
    bytes_acked: u64,
    /// `tcpi_bytes_received`: payload received in order.
    bytes_received: u64,
    /// `tcpi_bytes_sent`: payload transmitted, retransmissions included.
    bytes_sent: u64,
    /// `tcpi_bytes_retrans`: payload retransmitted.
    bytes_retrans: u64,
    /// `tcpi_data_segs_in`: segments received that carry data.
    data_segs_in: u32,
    /// `tcpi_data_segs_out`: wire segments transmitted that carry data.
    data_segs_out: u32,
    /// `tcpi_segs_in`: segments received (a GRO run counts its segments).
    segs_in: u32,
    /// `tcpi_segs_out`: wire segments transmitted.
    segs_out: u32,
    /// `tcpi_total_retrans`: segments retransmitted.
    total_retrans: u32,
    /// `tcpi_reord_seen`: reordering events observed.
    reord_seen: u32,
    /// `tcpi_dsack_dups`: segments D-SACKed.
    dsack_dups: u32,
    /// `tcpi_delivered_ce`: packets delivered by ACKs with ECE.
    delivered_ce: u32,
    /// `timeout_rehash`: retransmission timeouts that changed the flow hash.
    timeout_rehash: u32,
    /// `sk_drops`: segments dropped on input (backlog or receive-queue limits, bad checksums).
    drops: u32,
}

impl ConnStats {
    /// A packet of `pcount` wire segments and `len` payload bytes left (`tcp_transmit_skb`'s
    /// and `tcp_retransmit_skb`'s counters).
    pub fn count_xmit(&mut self, pcount: u32, len: u32, retrans: bool) {
        self.segs_out += pcount;
        if len > 0 {
            self.data_segs_out += pcount;
        }
        self.bytes_sent += u64::from(len);
        if retrans {
            self.bytes_retrans += u64::from(len);
        }
    }
    /// One segment without data left (an ACK, a SYN, a RST, a probe).
    pub fn count_seg_out(&mut self) {
        self.segs_out += 1;
    }
    /// Wire segments transmitted with data so far.
    pub fn data_segs_out(&self) -> u32 {
        self.data_segs_out
    }
    /// `segs` segments arrived.
    pub fn count_segs_in(&mut self, segs: u32) {
        self.segs_in += segs;
    }
    /// `segs` segments carrying data arrived.
    /// `tcpi_data_segs_in`.
    pub fn data_segs_in(&self) -> u32 {
        self.data_segs_in
    }
    pub fn count_data_segs_in(&mut self, segs: u32) {
        self.data_segs_in += segs;
    }
    /// `len` payload bytes were received in order.
    pub fn count_received(&mut self, len: u32) {
        self.bytes_received += u64::from(len);
    }
    /// `n` bytes of sequence space were acknowledged (`tcp_snd_una_update`).
    pub fn count_acked(&mut self, n: u64) {
        self.bytes_acked += n;
    }
    /// Sequence space acknowledged so far.
    pub fn bytes_acked(&self) -> u64 {
        self.bytes_acked
    }
    /// `n` segments were retransmitted.
    /// `tcpi_total_retrans`: segments retransmitted so far (SYNs included).
    pub fn total_retrans(&self) -> u32 {
        self.total_retrans
    }
    pub fn count_retrans(&mut self, n: u32) {
        self.total_retrans += n;
    }
    /// Reordering was detected once more.
    pub fn count_reordering(&mut self) {
        self.reord_seen = self.reord_seen.saturating_add(1);
    }
    /// Reordering events seen so far.
    pub fn reord_seen(&self) -> u32 {
        self.reord_seen
    }
    /// A D-SACK block of `len` bytes arrived (`tcp_dsack_seen`): it counts its segments at
    /// `mss` each, rounded up (one for a block of at most an MSS), unless it is longer than
    /// the largest window the peer offered (`max_window`: dubious, not counted).
    pub fn count_dsack(&mut self, len: u32, mss: u32, max_window: u32) {
        if len == 0 || len > max_window {
            return;
        }
        let segs = if len > mss {
            len.div_ceil(mss.max(1))
        } else {
            1
        };
        self.dsack_dups = self.dsack_dups.saturating_add(segs);
    }
    /// Segments D-SACKed so far.
    #[cfg(test)]
    pub fn dsack_dups(&self) -> u32 {
        self.dsack_dups
    }
    /// `n` packets were delivered by an ACK that echoed congestion (`tcp_count_delivered`
    /// with an ECE ACK on an RFC 3168 connection).
    pub fn count_delivered_ce(&mut self, n: u32) {
        self.delivered_ce = self.delivered_ce.saturating_add(n);
    }
    /// A retransmission timeout changed the flow hash (`sk_rethink_txhash` in
    /// `tcp_write_timeout`).
    pub fn count_timeout_rehash(&mut self) {
        self.timeout_rehash = self.timeout_rehash.saturating_add(1);
    }
    /// Timeouts that changed the flow hash so far.
    pub fn timeout_rehash(&self) -> u32 {
        self.timeout_rehash
    }
    /// A segment was dropped on input.
    pub fn count_drop(&mut self) {
        self.drops += 1;
    }
}

impl Connection {
    pub(crate) fn tcp_info(&self, _env: &crate::env::Env, now: Instant) -> TcpInfo {
        let mut o = 0u8;
        if self.rx_opt.tstamp_ok {
            o |= 1;
        }
        if self.rx_opt.sack_ok {
            o |= 2;
        }
        if self.rx_opt.wscale_ok {
            o |= 4;
        }
        // TCPI_OPT_SYN_DATA: data in our SYN was acknowledged, or a Fast Open child took
        // the data of its SYN.
        if self.fastopen.syn_data_acked {
            o |= 32;
        }
        let chrono = self.chrono.totals(now);
        TcpInfo {
            state: self.state as u8,
            ca_state: self.ca_state.as_u8(),
            retransmits: self.timer.retransmits.min(255) as u8,
            probes: self.timer.probes.out().min(255) as u8,
            backoff: self.timer.backoff.min(255) as u8,
            options: o,
            snd_wscale: self.rx_opt.snd_wscale,
            rcv_wscale: self.rx_opt.rcv_wscale,
            rto: self.rtt.rto().as_micros() as u32,
            ato: self.ack.ato.as_micros() as u32,
            snd_mss: self.mss.cache,
            rcv_mss: self.ack.rcv_mss,
            unacked: self.rtx.packets_out,
            sacked: self.rtx.sacked_out,
            lost: self.rtx.lost_out,
            retrans: self.rtx.retrans_out,
            last_data_sent: ms_since(now, self.lsndtime),
            // icsk_ack.lrcvtime: also stamped when the connection is established
            // (tcp_finish_connect / tcp_create_openreq_child), so it counts from the
            // handshake until the first data arrives (tcp_info/tcp-info-last_data_recv.pkt).
            last_data_recv: ms_since(now, self.lrcvtime),
            last_ack_recv: ms_since(now, self.rcv_tstamp),
            pmtu: self.pmtu(),
            rcv_ssthresh: self.rcv.ssthresh,
            rtt: self.rtt.srtt_us() >> 3,
            rttvar: self.rtt.mdev_us() >> 2,
            snd_ssthresh: self.cc_st.snd_ssthresh,
            snd_cwnd: self.cc_st.snd_cwnd,
            advmss: self.mss.advmss,
            reordering: self.reordering,
            rcv_rtt: self.rcv_rtt.rtt_us() >> 3,
            rcv_space: self.rcvq.space(),
            total_retrans: self.stats.total_retrans,
            pacing_rate: self.pacing.rate(),
            max_pacing_rate: u64::MAX,
            bytes_acked: self.stats.bytes_acked,
            bytes_received: self.stats.bytes_received,
            segs_out: self.stats.segs_out,
            segs_in: self.stats.segs_in,
            notsent_bytes: self.notsent_bytes(),
            min_rtt: if self.rtt.min_rtt_us() == u32::MAX {
                u32::MAX
            } else {
                self.rtt.min_rtt_us()
            },
            data_segs_in: self.stats.data_segs_in,
            data_segs_out: self.stats.data_segs_out,
            delivery_rate: self.delivery_rate(),
            delivery_rate_app_limited: self.rate.sample_app_limited(),
            delivered: self.rtx.delivered,
            bytes_sent: self.stats.bytes_sent,
            bytes_retrans: self.stats.bytes_retrans,
            snd_wnd: self.snd.wnd,
            rcv_wnd: self.rcv.wnd,
            busy_time: chrono.iter().map(|d| d.as_micros() as u64).sum(),
            rwnd_limited: chrono[1].as_micros() as u64,
            sndbuf_limited: chrono[2].as_micros() as u64,
            reord_seen: self.stats.reord_seen,
            dsack_dups: self.stats.dsack_dups,
            delivered_ce: self.stats.delivered_ce,
            rehash: self.stats.timeout_rehash,
        }
    }

    pub(crate) fn meminfo(&self) -> MemInfo {
        MemInfo {
            rmem_alloc: self.mem.rmem_alloc,
            rcvbuf: self.mem.rcvbuf,
            wmem_alloc: self.mem.wmem_alloc,
            sndbuf: self.mem.sndbuf,
            fwd_alloc: self.forward_alloc().clamp(0, i64::from(u32::MAX)) as u32,
            wmem_queued: self.mem.wmem_queued,
            optmem: self.zc.omem,
            backlog: self.lock.backlog_len,
            drops: self.stats.drops,
        }
    }

    /// `tcp_poll`.
    pub(crate) fn poll(&mut self, env: &mut Env) -> u32 {
        let mut mask = 0;
        if self.state == TcpState::Listen {
            return match &self.listen {
                Some(l) if !l.accept_queue.is_empty() => POLLIN | POLLRDNORM,
                _ => 0,
            };
        }
        if self.shutdown == RCV_SHUTDOWN | SEND_SHUTDOWN || self.state == TcpState::Close {
            mask |= POLLHUP;
        }
        if self.shutdown & RCV_SHUTDOWN != 0 {
            mask |= POLLIN | POLLRDNORM | POLLRDHUP;
        }
        // Connected, or a passive Fast Open child (readable and writable in SYN_RECV).
        if self.state != TcpState::SynSent
            && (self.state != TcpState::SynRecv || self.fastopen.child)
        {
            let mut target = self.opts.rcvlowat.max(1);
            // At the urgent mark, the out-of-band byte is not readable data.
            if self.at_mark() && !self.opts.oobinline {
                target += 1;
            }
            if self.inq() >= target || self.rcv.rx_queue.iter().any(|r| r.fin) {
                mask |= POLLIN | POLLRDNORM;
            }
            if self.urg_pending() {
                mask |= POLLPRI;
            }
            if self.shutdown & SEND_SHUTDOWN == 0 {
                if self.stream_is_writeable(env, 1) {
                    mask |= POLLOUT | POLLWRNORM;
                } else {
                    self.nospace = true;
                    if self.stream_is_writeable(env, 1) {
                        mask |= POLLOUT | POLLWRNORM;
                    }
                }
            } else {
                mask |= POLLOUT | POLLWRNORM;
            }
        } else if self.state == TcpState::SynSent && self.fastopen.defer_connect {
            // TCP_FASTOPEN_CONNECT deferred the SYN: writable, so the first write sends it.
            mask |= POLLOUT | POLLWRNORM;
        }
        if self.err.is_some() || !self.errq.is_empty() {
            mask |= POLLERR;
        }
        mask
    }

    pub(crate) fn setsockopt(
        &mut self,
        env: &mut Env,
        now: Instant,
        opt: SockOpt,
        val: &OptVal,
    ) -> Result<(), Errno> {
        if opt.is_ipv6_level() && self.family == crate::socket::Family::V4 {
            return Err(Errno::ENOPROTOOPT);
        }
        use SockOpt::*;
        match opt {
            TcpCongestion => {
                let OptVal::Str(name) = val else {
                    return Err(Errno::EINVAL);
                };
                if !CC_NAMES.contains(&name.as_str()) {
                    return Err(Errno::ENOENT);
                }
                let cc = shallow_cc::by_name(name, &env.config.cc_params).ok_or(Errno::ENOENT)?;
                self.cc = cc;
                if self.state == TcpState::Established {
                    self.sync_cc_state(now);
                    self.cc.init(&mut self.cc_st, now.as_micros());
                }
                return Ok(());
            }
            TcpFastopenKey => {
                // do_tcp_setsockopt: 16 or 32 bytes (a primary and a backup key).
                let b = match val {
                    OptVal::Bytes(b) => b.as_slice(),
                    OptVal::Str(s) => s.as_bytes(),
                    _ => return Err(Errno::EINVAL),
                };
                self.opts.fastopen_key =
                    Some(crate::fastopen::Keys::from_sockopt(b).ok_or(Errno::EINVAL)?);
                return Ok(());
            }
            TcpMd5sig | TcpMd5sigExt => {
                return crate::md5::setsockopt(
                    &mut self.md5,
                    self.family == crate::socket::Family::V6,
                    opt == TcpMd5sigExt,
                    val,
                );
            }
            SoLinger => {
                let OptVal::Linger { onoff, secs } = val else {
                    return Err(Errno::EINVAL);
                };
                self.opts.linger = if *onoff {
                    Some((*secs).max(0) as u32)
                } else {
                    None
                };
                return Ok(());
            }
            _ => {}
        }
        let v = val.int()?;
        let on = v != 0;
        match opt {
            SoReuseaddr => self.opts.reuseaddr = on,
            SoReuseport => self.opts.reuseport = on,
            // The packets' firewall mark (`sk_mark`): kept and reported; Shallow has no
            // policy routing or packet filter that reads it.
            SoMark => self.opts.mark = v as u32,
            IpPktinfo => self.opts.pktinfo = on,
            Ipv6Recvpktinfo => self.opts.pktinfo6 = on,
            // sk_setsockopt (measured on 6.18): SO_BUSY_POLL takes 0..=INT_MAX µs (negative:
            // EINVAL; raising it needs CAP_NET_ADMIN, which Shallow's caller has);
            // SO_PREFER_BUSY_POLL any value as a flag; SO_BUSY_POLL_BUDGET 0..=65535.
            SoBusyPoll => {
                if v < 0 {
                    return Err(Errno::EINVAL);
                }
                self.opts.busy_poll_us = v as u32;
            }
            SoPreferBusyPoll => self.opts.prefer_busy_poll = on,
            SoBusyPollBudget => {
                self.opts.busy_poll_budget = u16::try_from(v).map_err(|_| Errno::EINVAL)?;
            }
            SoOobinline => self.opts.oobinline = on,
            // IP_FREEBIND / IPV6_FREEBIND (one flag, `inet->freebind`): bind() may name an
            // address the host does not have.
            IpFreebind => self.opts.freebind = on,
            // sk_setsockopt: 0 or 1 on a TCP socket in any state (measured on 6.18).
            SoZerocopy => {
                if !(0..=1).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.zerocopy = on;
            }
            SoKeepalive => {
                // tcp_set_keepalive: turning it on (not again) arms the timer an idle time
                // from now, in every state but CLOSE and LISTEN.
                let was = self.opts.keepalive;
                self.opts.keepalive = on;
                if on && !was && !matches!(self.state, TcpState::Close | TcpState::Listen) {
                    let idle = self.keepalive_time(env);
                    self.arm(env, TimerKind::Keepalive, now + idle);
                }
            }
            SoSndbuf | SoSndbufforce => {
                let max = if opt == SoSndbuf {
                    env.sysint(Sysctl::wmem_max)
                } else {
                    i64::from(i32::MAX)
                };
                let v = v.clamp(0, max) as u32;
                self.opts.sndbuf_lock = true;
                self.mem.sndbuf = (v.saturating_mul(2)).max(SOCK_MIN_SNDBUF);
                self.check_space(env, now);
            }
            SoRcvbuf | SoRcvbufforce => {
                let max = if opt == SoRcvbuf {
                    env.sysint(Sysctl::rmem_max)
                } else {
                    i64::from(i32::MAX)
                };
                let v = v.clamp(0, max) as u32;
                self.opts.rcvbuf_lock = true;
                self.mem.rcvbuf = (v.saturating_mul(2)).max(SOCK_MIN_RCVBUF);
            }
            SoRcvlowat => {
                self.opts.rcvlowat = (v.clamp(0, i64::from(i32::MAX)) as u32).max(1);
            }
            TcpNodelay => {
                self.opts.nodelay = on;
                if on {
                    self.push_pending_frames(env, now, crate::output::NAGLE_PUSH);
                }
            }
            TcpCork => {
                // __tcp_sock_set_cork: only a socket that was corked pushes on uncork, and
                // past Nagle only with TCP_NODELAY (measured on 6.18: TCP_CORK 0 on a socket
                // never corked leaves a Nagle-held write in place).
                let was = self.opts.cork;
                self.opts.cork = on;
                if !on && was {
                    let mut ng = self.nonagle();
                    if self.opts.nodelay {
                        ng |= crate::output::NAGLE_PUSH;
                    }
                    self.push_pending_frames(env, now, ng);
                }
            }
            TcpMaxseg => {
                if v != 0 && !(88..=65535).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.user_mss = v as u32;
            }
            TcpKeepidle => {
                if !(1..=32767).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.keepidle = Some(v as u32);
                // tcp_sock_set_keepidle_locked: a running keepalive is re-armed for the new
                // idle time, counted from when the peer was last heard from.
                if self.opts.keepalive && !matches!(self.state, TcpState::Close | TcpState::Listen)
                {
                    let left = self
                        .keepalive_time(env)
                        .saturating_sub(self.keepalive_time_elapsed(now));
                    self.arm(env, TimerKind::Keepalive, now + left);
                }
            }
            TcpKeepintvl => {
                if !(1..=32767).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.keepintvl = Some(v as u32);
            }
            TcpKeepcnt => {
                if !(1..=127).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.keepcnt = Some(v as u32);
            }
            TcpSyncnt => {
                if !(1..=127).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.syn_retries = Some(v as u32);
            }
            TcpUserTimeout => {
                if v < 0 {
                    return Err(Errno::EINVAL);
                }
                self.opts.user_timeout_ms = v as u32;
            }
            TcpQuickack => {
                if on {
                    self.ack.pingpong = 0;
                    if self.ack.pending & ackf::SCHED != 0 {
                        self.send_ack(env, now);
                    }
                } else {
                    self.ack.pingpong = 1;
                }
            }
            TcpNotsentLowat => {
                self.opts.notsent_lowat = v.clamp(0, i64::from(u32::MAX)) as u32;
                // sk_write_space at once (spec §3.2).
                self.check_space_force(env);
            }
            TcpInq => self.opts.inq = on,
            // sock_set_timestamp: SO_TIMESTAMP on clears the nanosecond form, SO_TIMESTAMPNS
            // sets both, either off clears both (measured on 6.18: getsockopt after each);
            // turning one on also says whether times are 64-bit (`_NEW`, one flag with
            // SO_TIMESTAMPING_NEW's); off leaves that as it was.
            SoTimestamp | SoTimestampns | SoTimestampNew | SoTimestampnsNew => {
                self.opts.rcvtstamp = on;
                self.opts.rcvtstampns = on && matches!(opt, SoTimestampns | SoTimestampnsNew);
                if on {
                    self.opts.tstamp_new = matches!(opt, SoTimestampNew | SoTimestampnsNew);
                }
                self.rx_stamp_sync(env, false);
            }
            // sock_set_timestamping: known flags only; OPT_ID needs a connection (its keys
            // count from snd_una, or write_seq with OPT_ID_TCP); OPT_STATS needs OPT_TSONLY.
            // SO_TIMESTAMPING_NEW sets the 64-bit flag, SO_TIMESTAMPING clears it, whatever
            // the value.
            SoTimestamping | SoTimestampingNew => {
                use crate::tstamp::sof;
                let v = u32::try_from(v).map_err(|_| Errno::EINVAL)?;
                // OPT_STATS without OPT_TSONLY: EINVAL (measured on 6.18).
                if v & !sof::MASK != 0
                    || (v & sof::OPT_ID_TCP != 0 && v & sof::OPT_ID == 0)
                    || (v & sof::OPT_STATS != 0 && v & sof::OPT_TSONLY == 0)
                {
                    return Err(Errno::EINVAL);
                }
                if v & sof::OPT_ID != 0 && self.tstamp.flags & sof::OPT_ID == 0 {
                    if matches!(self.state, TcpState::Close | TcpState::Listen) {
                        return Err(Errno::EINVAL);
                    }
                    self.tstamp.key_base = if v & sof::OPT_ID_TCP != 0 {
                        self.snd.write_seq
                    } else {
                        self.snd.una
                    };
                }
                self.tstamp.flags = v;
                self.opts.tstamp_new = opt == SoTimestampingNew;
                self.rx_stamp_sync(env, false);
            }
            // Only on a closed or listening socket; the queue is min(val, somaxconn)
            // (fastopen_queue_tune), and the stack's keys are made if missing.
            TcpFastopen => {
                if !matches!(self.state, TcpState::Close | TcpState::Listen) {
                    return Err(Errno::EINVAL);
                }
                if v < 0 {
                    return Err(Errno::EINVAL);
                }
                env.tfo_keys();
                self.opts.fastopen_qlen =
                    (v as u64).min(env.sysint(Sysctl::somaxconn) as u64) as u32;
            }
            // Only before connect() (tcp_fastopen_connect: EINVAL once not closed).
            TcpFastopenConnect => {
                if self.state != TcpState::Close || self.remote.port() != 0 {
                    return Err(Errno::EINVAL);
                }
                if env.sysint(Sysctl::tcp_fastopen) & crate::fastopen::bits::CLIENT_ENABLE == 0 {
                    return Err(Errno::EOPNOTSUPP);
                }
                self.opts.fastopen_connect = on;
            }
            TcpFastopenNoCookie => {
                if !(0..=1).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                if !matches!(self.state, TcpState::Close | TcpState::Listen) {
                    return Err(Errno::EINVAL);
                }
                self.opts.fastopen_no_cookie = on;
            }
            IpTos => self.opts.tos = (v & 0xff) as u8,
            // do_ipv6_setsockopt: -1 is the default (0).
            Ipv6Tclass => {
                if !(-1..=0xff).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                self.opts.tclass = v.max(0) as u8;
            }
            // Only before a port is bound.
            Ipv6V6only => {
                if self.bound {
                    return Err(Errno::EINVAL);
                }
                self.opts.v6only = on;
            }
            // do_ip_setsockopt / do_ipv6_setsockopt: IP_PMTUDISC_DONT..IP_PMTUDISC_OMIT.
            IpMtuDiscover | Ipv6MtuDiscover => {
                if !(0..=5).contains(&v) {
                    return Err(Errno::EINVAL);
                }
                if opt == IpMtuDiscover {
                    self.opts.pmtudisc = v as u8;
                } else {
                    self.opts.pmtudisc6 = v as u8;
                }
            }
            SoError | SoType | TcpInfo => return Err(Errno::ENOPROTOOPT),
            TcpCongestion | SoLinger | TcpFastopenKey | TcpMd5sig | TcpMd5sigExt => {
                unreachable!("handled above")
            }
        }
        Ok(())
    }

    fn check_space_force(&mut self, env: &mut Env) {
        if self.stream_is_writeable(env, 1) {
            self.nospace = false;
            env.out.wake(self.id, POLLOUT | POLLWRNORM | POLLWRBAND);
        }
    }

    pub(crate) fn getsockopt(&mut self, env: &mut Env, opt: SockOpt) -> Result<OptVal, Errno> {
        use SockOpt::*;
        let i = |v: u32| Ok(OptVal::Int(i64::from(v)));
        if opt.is_ipv6_level() && self.family == crate::socket::Family::V4 {
            return Err(Errno::EOPNOTSUPP);
        }
        match opt {
            SoReuseaddr => i(u32::from(self.opts.reuseaddr)),
            SoReuseport => i(u32::from(self.opts.reuseport)),
            SoZerocopy => i(u32::from(self.opts.zerocopy)),
            SoMark => i(self.opts.mark),
            IpPktinfo => i(u32::from(self.opts.pktinfo)),
            Ipv6Recvpktinfo => i(u32::from(self.opts.pktinfo6)),
            SoBusyPoll => i(self.opts.busy_poll_us),
            SoPreferBusyPoll => i(u32::from(self.opts.prefer_busy_poll)),
            // Write-only on 6.18.
            SoBusyPollBudget => Err(Errno::ENOPROTOOPT),
            SoOobinline => i(u32::from(self.opts.oobinline)),
            IpFreebind => i(u32::from(self.opts.freebind)),
            SoError => {
                let e = self.err.take().map(|e| e.code()).unwrap_or(0);
                Ok(OptVal::Int(i64::from(e)))
            }
            SoType => i(1),
            SoSndbuf | SoSndbufforce => i(self.mem.sndbuf),
            SoRcvbuf | SoRcvbufforce => i(self.mem.rcvbuf),
            SoKeepalive => i(u32::from(self.opts.keepalive)),
            SoLinger => Ok(OptVal::Linger {
                onoff: self.opts.linger.is_some(),
                secs: self.opts.linger.unwrap_or(0) as i32,
            }),
            SoRcvlowat => i(self.opts.rcvlowat),
            TcpNodelay => i(u32::from(self.opts.nodelay)),
            TcpCork => i(u32::from(self.opts.cork)),
            TcpMaxseg => {
                if self.is_synchronized() {
                    i(self.mss.cache)
                } else if self.opts.user_mss != 0 {
                    i(self.opts.user_mss)
                } else {
                    i(TCP_MSS_DEFAULT)
                }
            }
            TcpKeepidle => i(self.keepalive_time(env).as_secs() as u32),
            TcpKeepintvl => i(self.keepalive_intvl(env).as_secs() as u32),
            TcpKeepcnt => i(self.keepalive_probes(env)),
            TcpSyncnt => i(self
                .opts
                .syn_retries
                .unwrap_or(env.sysint(Sysctl::tcp_syn_retries) as u32)),
            TcpUserTimeout => i(self.opts.user_timeout_ms),
            TcpQuickack => i(u32::from(self.ack.pingpong == 0)),
            TcpCongestion => Ok(OptVal::Str(self.cc.name().to_string())),
            TcpNotsentLowat => i(self.opts.notsent_lowat),
            TcpInq => i(u32::from(self.opts.inq)),
            // sk_getsockopt (measured on 6.18): the old forms report only what is not `_NEW`,
            // but SO_TIMESTAMPING, which reports its flags either way; SO_TIMESTAMP_NEW is on
            // with the nanosecond form too.
            SoTimestamping => i(self.tstamp.flags),
            SoTimestampingNew => i(if self.opts.tstamp_new {
                self.tstamp.flags
            } else {
                0
            }),
            SoTimestamp => i(u32::from(
                self.opts.rcvtstamp && !self.opts.rcvtstampns && !self.opts.tstamp_new,
            )),
            SoTimestampns => i(u32::from(self.opts.rcvtstampns && !self.opts.tstamp_new)),
            SoTimestampNew => i(u32::from(self.opts.rcvtstamp && self.opts.tstamp_new)),
            SoTimestampnsNew => i(u32::from(self.opts.rcvtstampns && self.opts.tstamp_new)),
            TcpFastopen => i(self.opts.fastopen_qlen),
            TcpFastopenConnect => i(u32::from(self.opts.fastopen_connect)),
            TcpFastopenNoCookie => i(u32::from(self.opts.fastopen_no_cookie)),
            TcpFastopenKey => {
                let k = match self.opts.fastopen_key {
                    Some(k) => k,
                    None => env.tfo_keys(),
                };
                Ok(OptVal::Bytes(k.to_sockopt()))
            }
            IpTos => i(u32::from(self.opts.tos)),
            Ipv6Tclass => i(u32::from(self.opts.tclass)),
            IpMtuDiscover => i(u32::from(self.opts.pmtudisc)),
            Ipv6MtuDiscover => i(u32::from(self.opts.pmtudisc6)),
            Ipv6V6only => i(u32::from(self.opts.v6only)),
            // do_tcp_getsockopt has no case for them (measured on 6.18).
            TcpMd5sig | TcpMd5sigExt => Err(Errno::ENOPROTOOPT),
            TcpInfo => {
                env.mib.add(Mib::InSegs, 0);
                Err(Errno::EOPNOTSUPP)
            }
        }
    }
}
