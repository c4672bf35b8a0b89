//! Receive side: out-of-order queue and SACK blocks (RFC 2018 §4), the application read
//! path (`tcp_recvmsg`), ACK-on-read (`tcp_cleanup_rbuf`) and receive-buffer autotuning
//! (`tcp_rcv_space_adjust`).

use crate::env::Env;
use crate::errno::Errno;
use crate::seq::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::Mib;
use bytes::Bytes;
use std::collections::VecDeque;

/// The receiver's RTT estimate (`tp->rcv_rtt_est`), for autotuning and SACK compression,
/// where the receiver sends no data of its own to time: once per window of data, or from a
/// full-sized segment's echoed timestamp. Private to this file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RcvRttEst {
    /// The estimate, µs << 3 (0: none yet).
    rtt_us: u32,
    /// The last echoed timestamp sampled (each TSecr gives one sample).
    last_tsecr: u32,
    /// The window sample ends when `rcv_nxt` passes this sequence...
    seq: u32,
    /// ...and began at this time (zero: not started).
    time: Instant,
}

impl Default for RcvRttEst {
    fn default() -> Self {
        RcvRttEst {
            rtt_us: 0,
            last_tsecr: 0,
            seq: 0,
            time: Instant::ZERO,
        }
    }
}

impl RcvRttEst {
    /// The estimate in µs << 3 (`tcpi_rcv_rtt` is this >> 3); 0 before the first sample.
    pub fn rtt_us(&self) -> u32 {
        self.rtt_us
    }
}

/// What the application consumed per receiver RTT (`tp->rcvq_space`), from which autotuning
/// sizes the receive buffer: the bytes copied in the last measured RTT, and where and when
/// this measurement started. Private to this file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RcvqSpace {
    space: u32,
    seq: u32,
    time: Instant,
}

impl Default for RcvqSpace {
    fn default() -> Self {
        RcvqSpace {
            space: 0,
            seq: 0,
            time: Instant::ZERO,
        }
    }
}

impl RcvqSpace {
    /// Bytes consumed in the last measured RTT (`tcpi_rcv_space`).
    pub fn space(&self) -> u32 {
        self.space
    }
}

/// recv() flags (Linux values).
pub mod msgflags {
    /// MSG_OOB.
    pub const MSG_OOB: u32 = 0x1;
    /// MSG_PEEK: read without consuming.
    pub const MSG_PEEK: u32 = 0x2;
    /// MSG_TRUNC: discard the bytes instead of copying.
    pub const MSG_TRUNC: u32 = 0x20;
    /// MSG_DONTWAIT: never block (our calls never block; EAGAIN instead).
    pub const MSG_DONTWAIT: u32 = 0x40;
    /// MSG_EOR: end of record; do not append later writes to this buffer.
    pub const MSG_EOR: u32 = 0x80;
    /// MSG_WAITALL: wait for the full amount.
    pub const MSG_WAITALL: u32 = 0x100;
    /// MSG_NOSIGNAL: no SIGPIPE (we never raise signals).
    pub const MSG_NOSIGNAL: u32 = 0x4000;
    /// MSG_MORE: more data coming; cork.
    pub const MSG_MORE: u32 = 0x8000;
    /// `MSG_FASTOPEN`: `sendto` connects, its data in the SYN (TCP Fast Open).
    pub const MSG_FASTOPEN: u32 = 0x2000_0000;
    /// `MSG_ZEROCOPY`: the send shares the application's buffers (`SO_ZEROCOPY`, zerocopy.rs).
    pub const MSG_ZEROCOPY: u32 = 0x400_0000;
}

/// Most out-of-order segments kept, whatever rcvbuf says (bounds work per packet).
const OFO_MAX_SEGS: usize = 4096;

/// What [`crate::Stack::recvmsg`] read: the byte count and the data's receive time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMeta {
    /// Bytes read (0: end of stream).
    pub len: usize,
    /// When the data arrived (the substrate's clock), if the socket asks for receive
    /// timestamps and the data has one.
    pub rx_time: Option<Instant>,
}

impl Connection {
    /// Insert an out-of-order segment whose received buffer is `truesize` bytes (the device's
    /// sizing, computed once by the caller), merging overlaps (`tcp_data_queue_ofo`);
    /// `tstamp`: its receive time, if the socket asks for them.
    #[allow(clippy::too_many_arguments)]
    pub fn ofo_insert(
        &mut self,
        env: &mut Env,
        seq: u32,
        payload: &[u8],
        shared: Option<Bytes>,
        fin: bool,
        truesize: u32,
        tstamp: Option<Instant>,
    ) {
        let end = seq.wrapping_add(payload.len() as u32);
        // A FIN occupies one more sequence number, in the queue's overlap rules and in the
        // SACK and D-SACK blocks (kernel recording ofo-fin-sack.pkt: a bare FIN above a hole
        // is reported as `sack 101:102`, and data that then covers it as the D-SACK
        // `101:102`; fuzz seed 200040).
        let sack_end = end.wrapping_add(u32::from(fin));
        let over = self.mem.rmem_alloc + truesize > self.mem.rcvbuf
            || self.rcv.ofo_queue.len() >= OFO_MAX_SEGS;
        if (over && !(self.prune_ofo(env) && self.mem.rmem_alloc + truesize <= self.mem.rcvbuf))
            || !self.try_rmem_schedule(env, truesize)
        {
            env.mib.inc(Mib::TCPOFODrop);
            self.stats.count_drop();
            return;
        }
        env.mib.inc(Mib::TCPOFOQueue);
        // Find insertion point (queue sorted by seq).
        let pos = self
            .rcv
            .ofo_queue
            .iter()
            .position(|o| after(o.seq, seq))
            .unwrap_or(self.rcv.ofo_queue.len());
        // Overlaps with queued data are duplicates, reported as D-SACK (RFC 2883): the
        // segment wholly inside the previous one is dropped; one that overlaps its tail
        // reports the overlap; one that starts where it starts and covers it replaces it.
        let mut pos = pos;
        if pos > 0 {
            let (p_seq, p_end) = (
                self.rcv.ofo_queue[pos - 1].seq,
                self.rcv.ofo_queue[pos - 1].sack_end(),
            );
            if !after(sack_end, p_end) && !before(seq, p_seq) {
                self.dsack_ofo_set(env, seq, sack_end);
                env.mib.inc(Mib::TCPOFOMerge);
                self.update_sack_blocks(seq, sack_end);
                return;
            }
            if before(seq, p_end) {
                if after(seq, p_seq) {
                    self.dsack_ofo_set(env, seq, p_end);
                } else {
                    let o = self.rcv.ofo_queue.remove(pos - 1);
                    self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(o.truesize);
                    self.dsack_extend(env, o.seq, o.sack_end());
                    env.mib.inc(Mib::TCPOFOMerge);
                    pos -= 1;
                }
            }
        }
        self.mem.rmem_alloc += truesize;
        self.rcv.ofo_queue.insert(
            pos,
            OfoSkb {
                seq,
                end_seq: end,
                data: shared.unwrap_or_else(|| Bytes::copy_from_slice(payload)),
                fin,
                truesize,
                tstamp,
            },
        );
        // Later segments: those the new one covers are dropped, the first it only overlaps
        // ends the walk; each overlap extends the D-SACK block.
        let j = pos + 1;
        while j < self.rcv.ofo_queue.len() {
            let (o_seq, o_end) = (self.rcv.ofo_queue[j].seq, self.rcv.ofo_queue[j].sack_end());
            if !after(sack_end, o_seq) {
                break;
            }
            if before(sack_end, o_end) {
                self.dsack_extend(env, o_seq, sack_end);
                break;
            }
            let o = self.rcv.ofo_queue.remove(j);
            self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(o.truesize);
            self.dsack_extend(env, o_seq, o_end);
            env.mib.inc(Mib::TCPOFOMerge);
        }
        self.update_sack_blocks(seq, sack_end);
        // tcp_data_queue_ofo: a queued out-of-order segment grows the window as in-order
        // data does, on SACK connections only (without SACK the window stays put, so the
        // sender sees duplicate ACKs). Measured on 6.18: 1460 bytes out of order on a fresh
        // passive connection raised the offered window from 1050 to 1061 (<< 8), fuzz seed
        // 80194; each further one by about 2 × 1460 bytes.
        if self.rx_opt.sack_ok {
            self.grow_window(env, payload.len() as u32, truesize);
        }
    }

    /// `tcp_dsack_set` for out-of-order data: the duplicate range goes first in the next
    /// ACK's SACK option (RFC 2883), when D-SACK is on.
    fn dsack_ofo_set(&mut self, env: &mut Env, seq: u32, end: u32) {
        if self.rx_opt.dsack_ok {
            self.rcv.dsack = Some((seq, end));
            env.mib.inc(if before(seq, self.rcv.nxt) {
                Mib::TCPDSACKOldSent
            } else {
                Mib::TCPDSACKOfoSent
            });
        }
    }

    /// `tcp_dsack_extend`: widen the pending D-SACK block by an adjacent or overlapping
    /// duplicate range, or start one.
    fn dsack_extend(&mut self, env: &mut Env, seq: u32, end: u32) {
        match self.rcv.dsack {
            None => self.dsack_ofo_set(env, seq, end),
            Some((l, r)) => {
                if !after(seq, r) && !after(l, end) {
                    self.rcv.dsack = Some((seq_min(l, seq), seq_max(r, end)));
                }
            }
        }
    }

    /// Maintain our SACK blocks: the block containing the newest segment goes first
    /// (RFC 2018 §4), merged with neighbours.
    fn update_sack_blocks(&mut self, seq: u32, end: u32) {
        if !self.rx_opt.sack_ok {
            return;
        }
        // Recompute the block containing [seq, end) from the ofo queue.
        let (mut l, mut r) = (seq, end);
        loop {
            let mut changed = false;
            for o in &self.rcv.ofo_queue {
                if !after(o.seq, r) && !before(o.sack_end(), l) {
                    if before(o.seq, l) {
                        l = o.seq;
                        changed = true;
                    }
                    if after(o.sack_end(), r) {
                        r = o.sack_end();
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        self.rcv.sacks.retain(|&(a, b)| after(a, r) || before(b, l));
        self.rcv.sacks.insert(0, (l, r));
        self.rcv.sacks.truncate(4);
    }

    /// Drop SACK blocks now below rcv_nxt (`tcp_sack_remove`).
    pub fn sacks_trim(&mut self) {
        let n = self.rcv.nxt;
        self.rcv.sacks.retain(|&(_, r)| after(r, n));
    }

    /// Move segments that became in-order from the ofo queue (`tcp_ofo_queue`).
    pub fn ofo_drain(&mut self, env: &mut Env) {
        // Queued data below what the in-order segment brought is a duplicate (D-SACK,
        // `tcp_ofo_queue`'s dsack_high). The block is the queued segment's part below
        // dsack_high: measured on 6.18, a segment 1:2001 arriving over queued 1001:1101
        // and 1201:1301 is answered `sack 1001:1101`, not 1001:2001 (kernel recording
        // ofo-dsack-covered.pkt).
        let mut dsack_high = self.rcv.nxt;
        while let Some(first) = self.rcv.ofo_queue.first() {
            if after(first.seq, self.rcv.nxt) {
                break;
            }
            let (f_seq, f_end) = (first.seq, first.end_seq);
            if before(f_seq, dsack_high) {
                let dsack = if before(f_end, dsack_high) {
                    f_end
                } else {
                    dsack_high
                };
                dsack_high = dsack;
                self.dsack_extend(env, f_seq, dsack);
            }
            let o = self.rcv.ofo_queue.remove(0);
            self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(o.truesize);
            if !after(o.end_seq, self.rcv.nxt) && (!o.fin || o.end_seq != self.rcv.nxt) {
                continue;
            }
            let skip = self.rcv.nxt.wrapping_sub(o.seq) as usize;
            let data = o.data.slice(skip.min(o.data.len())..);
            let len = data.len() as u32;
            if len > 0 {
                // The buffer moves to the receive queue as it is (`tcp_ofo_queue`), so a tun
                // device's keeps its kmalloc truesize; the emulator's model charges the moved
                // bytes anew (it is the same figure unless the buffer was trimmed).
                let truesize = match env.device.caps.rx_truesize {
                    RxTruesize::TunKmalloc => o.truesize,
                    RxTruesize::Overhead => len + SKB_OVERHEAD,
                };
                self.mem.rmem_alloc += truesize;
                let mut rx = RxData::default();
                rx.push_bytes(data);
                // The buffer keeps its own receive time (`tcp_ofo_queue`).
                self.rcv.rx_queue.push_back(RxSkb {
                    seq: self.rcv.nxt,
                    data: rx,
                    fin: false,
                    truesize,
                    tstamp: o.tstamp,
                });
                self.stats.count_received(len);
            }
            self.rcv.nxt = self.rcv.nxt.wrapping_add(len);
            if o.fin {
                self.rcv.nxt = self.rcv.nxt.wrapping_add(1);
                self.rcv.fin_received = true;
                self.rcv.rx_queue.push_back(RxSkb {
                    seq: self.rcv.nxt,
                    data: RxData::default(),
                    fin: true,
                    truesize: 0,
                    tstamp: None,
                });
                break;
            }
        }
        self.sacks_trim();
        let _ = env;
    }

    /// `tcp_prune_ofo_queue`: drop out-of-order data from the far end. True if memory was freed.
    pub fn prune_ofo(&mut self, env: &mut Env) -> bool {
        if self.rcv.ofo_queue.is_empty() {
            return false;
        }
        let goal = self.mem.rcvbuf / 8;
        let mut freed = 0;
        while let Some(o) = self.rcv.ofo_queue.pop() {
            self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(o.truesize);
            freed += o.truesize;
            env.mib.inc(Mib::TCPOFODrop);
            if freed >= goal {
                break;
            }
        }
        env.mib.inc(Mib::TCPRcvPruned);
        // SACK blocks must not claim data we dropped (reneging is allowed but avoid lying).
        self.rcv.sacks.clear();
        let mut blocks = Vec::new();
        for o in &self.rcv.ofo_queue {
            match blocks.last_mut() {
                Some((_, r)) if !after(o.seq, *r) => *r = seq_max(*r, o.sack_end()),
                _ => blocks.push((o.seq, o.sack_end())),
            }
        }
        blocks.reverse();
        blocks.truncate(4);
        self.rcv.sacks = blocks;
        true
    }

    /// Bytes readable now (`tcp_inq`).
    pub fn inq(&self) -> u32 {
        self.rcv.rx_queue.iter().map(|r| r.data.len() as u32).sum()
    }

    /// Consume `n` bytes at the read position without copying them (an urgent byte out of
    /// the stream, urg.rs).
    pub(crate) fn skip_rcv_bytes(&mut self, n: u32) {
        let mut left = n as usize;
        while left > 0 {
            let Some(r) = self.rcv.rx_queue.front_mut() else {
                break;
            };
            let k = r.data.read(None, left);
            left -= k;
            self.rcv.copied_seq = self.rcv.copied_seq.wrapping_add(k as u32);
            if r.data.len() == 0 {
                let r = self.rcv.rx_queue.pop_front().expect("front exists");
                self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(r.truesize);
            }
            if k == 0 {
                break;
            }
        }
    }

    /// Whether the socket asks for receive timestamps (`tcp_recv_timestamp` reports them):
    /// `SO_TIMESTAMP`/`SO_TIMESTAMPNS`, or `SO_TIMESTAMPING` with `SOFTWARE` and either
    /// `RX_SOFTWARE` or no `OPT_RX_FILTER`.
    pub fn rx_stamping(&self) -> bool {
        use crate::tstamp::sof;
        let f = self.tstamp.flags;
        self.opts.rcvtstamp
            || (f & sof::SOFTWARE != 0
                && (f & sof::RX_SOFTWARE != 0 || f & sof::OPT_RX_FILTER == 0))
    }

    /// `tcp_recvmsg` (non-blocking): copy up to `buf.len()` bytes. Ok(0) = EOF. A read
    /// stops at the urgent mark and skips the urgent byte (urg.rs); `splice` reads
    /// (`tcp_read_sock`) stop there too and return 0 at it.
    pub fn recvmsg(
        &mut self,
        env: &mut Env,
        now: Instant,
        buf: &mut [u8],
        flags: u32,
    ) -> Result<usize, Errno> {
        self.recvmsg_ts(env, now, buf, flags, false).map(|(n, _)| n)
    }

    /// Keeps the stack's count of sockets asking for receive timestamps
    /// ([`Env::rx_tstamp_users`]) in step with this one (`net_enable_timestamp` when a
    /// socket starts asking or a child of one is made, `net_disable_timestamp` when it stops
    /// or is freed, `gone`). While the count is above zero every arriving segment is
    /// stamped, so data that came before a socket asked has a time when another socket of
    /// the host was asking then (Linux's host-wide switch; measured on 6.18); with none
    /// asking, no segment pays for a time.
    pub(crate) fn rx_stamp_sync(&mut self, env: &mut Env, gone: bool) {
        let want = !gone && self.rx_stamping();
        if want != self.rx_stamp_counted {
            if want {
                env.rx_tstamp_users += 1;
            } else {
                env.rx_tstamp_users = env.rx_tstamp_users.saturating_sub(1);
            }
            self.rx_stamp_counted = want;
        }
    }

    /// The receive time to keep with a segment arriving at `now`: while any socket of the
    /// stack asks for receive timestamps ([`Connection::rx_stamp_sync`]).
    pub(crate) fn rx_stamp(env: &Env, now: Instant) -> Option<Instant> {
        (env.rx_tstamp_users > 0).then_some(now)
    }

    /// [`Connection::recvmsg`] with the receive time of the data read: that of the last
    /// buffer it copied from that has one (`tcp_update_recv_tstamps`; a buffer's time is its
    /// last coalesced segment's, so a read of part of a buffer reports the time of a later
    /// segment merged into it: measured on 6.18 over loopback). None without bytes read
    /// (end of stream: no control message on Linux either) or without a stamped buffer.
    /// With `splice`, the reading of `tcp_splice_read` (it stops at the urgent mark).
    pub fn recvmsg_ts(
        &mut self,
        env: &mut Env,
        now: Instant,
        buf: &mut [u8],
        flags: u32,
        splice: bool,
    ) -> Result<(usize, Option<Instant>), Errno> {
        use msgflags::*;
        if self.state == TcpState::Listen {
            return Err(Errno::ENOTCONN);
        }
        if flags & MSG_OOB != 0 {
            return self.recv_urg(buf, flags & MSG_PEEK != 0).map(|n| (n, None));
        }
        if buf.is_empty() {
            return Ok((0, None));
        }
        let peek = flags & MSG_PEEK != 0;
        let trunc = flags & MSG_TRUNC != 0;
        let avail = self.inq() as usize;
        // sock_rcvlowat: a blocking reader waits for MSG_WAITALL's full length or SO_RCVLOWAT;
        // a non-blocking one (O_NONBLOCK / MSG_DONTWAIT) takes whatever is there.
        let nonblock = self.opts.nonblock || flags & MSG_DONTWAIT != 0;
        let target = if nonblock {
            1
        } else if flags & MSG_WAITALL != 0 {
            buf.len().max(1)
        } else {
            (self.opts.rcvlowat as usize).min(buf.len()).max(1)
        };
        let eof = self.rcv.rx_queue.iter().any(|r| r.fin) || self.shutdown & RCV_SHUTDOWN != 0;
        if avail < target && !eof {
            if let Some(e) = self.err.take() {
                return Err(e);
            }
            if self.state == TcpState::Close {
                return Ok((0, None));
            }
            // The caller waits for a data-ready wake-up and retries.
            return Err(Errno::EAGAIN);
        }
        if avail == 0 {
            if let Some(e) = self.err.take() {
                return Err(e);
            }
            return Ok((0, None));
        }
        let mut copied = 0usize;
        let inline = self.opts.oobinline;
        let mut tstamp = None;
        if peek {
            // Up to the urgent mark, past an out-of-band byte at the read position.
            let seq = self.rcv.copied_seq;
            let mut limit = buf.len();
            let mut skip = 0usize;
            if let Some(off) = self.urg_offset(seq) {
                let off = off as usize;
                if off == 0 && !inline && !splice {
                    skip = 1;
                } else if off < limit {
                    limit = off;
                }
            }
            let mut tmp = vec![0u8; (limit + skip).min(avail)];
            let mut n = 0;
            for r in &self.rcv.rx_queue {
                if n >= tmp.len() {
                    break;
                }
                let k = r.data.peek(&mut tmp[n..]);
                if k > 0 && r.tstamp.is_some() {
                    tstamp = r.tstamp;
                }
                n += k;
            }
            let got = n.saturating_sub(skip).min(limit);
            if !trunc {
                buf[..got].copy_from_slice(&tmp[skip..skip + got]);
            }
            return Ok((got, tstamp.filter(|_| self.rx_stamping())));
        }
        let mut skipped = 0u32;
        while copied < buf.len() {
            let seq = self
                .rcv
                .copied_seq
                .wrapping_add(copied as u32)
                .wrapping_add(skipped);
            let off = self.urg_offset(seq);
            // tcp_recvmsg: stop at the mark once something was read.
            if off == Some(0) && (copied > 0 || splice) {
                break;
            }
            let Some(r) = self.rcv.rx_queue.front_mut() else {
                break;
            };
            if r.fin {
                break;
            }
            let mut used = r.data.len();
            match off {
                Some(0) if !inline => {
                    // The out-of-band byte leaves the stream.
                    r.data.read(None, 1);
                    skipped += 1;
                    used -= 1;
                }
                Some(o) if (o as usize) < used && o > 0 => used = o as usize,
                _ => {}
            }
            let want = used.min(buf.len() - copied);
            let out = (!trunc).then(|| &mut buf[copied..copied + want]);
            if want > 0 && r.tstamp.is_some() {
                tstamp = r.tstamp;
            }
            copied += r.data.read(out, want);
            if r.data.len() == 0 {
                let r = self.rcv.rx_queue.pop_front().expect("front exists");
                self.mem.rmem_alloc = self.mem.rmem_alloc.saturating_sub(r.truesize);
            }
        }
        self.rcv.copied_seq = self
            .rcv
            .copied_seq
            .wrapping_add(copied as u32)
            .wrapping_add(skipped);
        self.urg_read_past();
        if copied == 0 && skipped > 0 && !eof {
            // Only the out-of-band byte was there.
            return Err(Errno::EAGAIN);
        }
        self.rcv_space_adjust(env, now);
        self.cleanup_rbuf(env, now, copied as u32);
        // tcp_recv_timestamp: reported only to a socket that asks now.
        Ok((copied, tstamp.filter(|_| self.rx_stamping())))
    }

    /// `tcp_cleanup_rbuf` (spec §6.4 "ACK on read").
    pub fn cleanup_rbuf(&mut self, env: &mut Env, now: Instant, copied: u32) {
        if !matches!(
            self.state,
            TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
        ) {
            return;
        }
        let mut time_to_ack = false;
        if self.ack.pending & ackf::SCHED != 0 {
            let unacked = self.rcv.nxt.wrapping_sub(self.rcv.wup);
            if unacked > self.ack.rcv_mss
                || (copied > 0
                    && (self.ack.pending & ackf::PUSHED2 != 0
                        || (self.ack.pending & ackf::PUSHED != 0 && self.ack.pingpong == 0))
                    && self.rcv.rx_queue.is_empty())
            {
                time_to_ack = true;
            }
        }
        if copied > 0 && !time_to_ack && self.shutdown & RCV_SHUTDOWN == 0 {
            let rcv_window_now = self.receive_window();
            if 2 * rcv_window_now <= self.rcv.window_clamp {
                let mut probe = self.clone_window_probe(env);
                probe = probe.max(0);
                if probe as u32 >= 2 * rcv_window_now {
                    time_to_ack = true;
                }
            }
        }
        if time_to_ack {
            self.send_ack(env, now);
        }
    }

    fn clone_window_probe(&self, env: &Env) -> i64 {
        let free = self.tcp_space(env).min(i64::from(self.rcv.ssthresh));
        if self.rx_opt.rcv_wscale != 0 {
            free >> self.rx_opt.rcv_wscale << self.rx_opt.rcv_wscale
        } else {
            free
        }
    }

    /// The end of `tcp_init_buffer_space`: autotuning's first measurement starts with the
    /// initial window (at most ten segments) at `rcv_nxt`, now.
    pub fn init_rcvq_space(&mut self, now: Instant) {
        self.rcvq = RcvqSpace {
            space: self.rcv.wnd.min(10 * self.mss.advmss),
            seq: self.rcv.nxt,
            time: now,
        };
    }

    /// Receive-buffer autotuning (`tcp_rcv_space_adjust`, dynamic right-sizing): once per
    /// receiver RTT, size rcvbuf for twice the bytes the application consumed in the last
    /// RTT plus the growth seen (slow start), up to `tcp_rmem[2]`; the window clamp follows.
    fn rcv_space_adjust(&mut self, env: &mut Env, now: Instant) {
        let rtt = u64::from(self.rcv_rtt.rtt_us >> 3);
        if self.rcv_rtt.rtt_us == 0 || ((now - self.rcvq.time).as_micros() as u64) < rtt {
            return;
        }
        let copied = self.rcv.copied_seq.wrapping_sub(self.rcvq.seq);
        if copied > self.rcvq.space {
            if env.config.sysctl.on(Sysctl::tcp_moderate_rcvbuf) && !self.opts.rcvbuf_lock {
                let space = u64::from(self.rcvq.space.max(1));
                let mut rcvwin = (u64::from(copied) << 1) + 16 * u64::from(self.mss.advmss);
                let grow = rcvwin * (u64::from(copied) - space) / space;
                rcvwin += grow << 1;
                let rmem2 = env.config.sysctl.triple(Sysctl::tcp_rmem)[2] as u64;
                // tcp_space_from_win: the buffer that yields this window at the socket's
                // scaling ratio; the clamp follows the buffer (`tcp_win_from_space`).
                let rcvbuf = self
                    .space_from_win(rcvwin)
                    .min(rmem2)
                    .min(u64::from(u32::MAX)) as u32;
                if rcvbuf > self.mem.rcvbuf {
                    self.mem.rcvbuf = rcvbuf;
                    self.rcv.window_clamp = self.win_from_space(i64::from(rcvbuf)).max(0) as u32;
                }
            }
            self.rcvq.space = copied;
        }
        self.rcvq.seq = self.rcv.copied_seq;
        self.rcvq.time = now;
    }

    /// `tcp_rcv_rtt_update`: receiver-side RTT (µs << 3). Window-based samples only lower it.
    pub fn rcv_rtt_update(&mut self, sample_us: u32, win_dep: bool) {
        let m = sample_us.max(1).saturating_mul(8);
        let old = self.rcv_rtt.rtt_us;
        if old == 0 || m < old {
            self.rcv_rtt.rtt_us = m;
        } else if !win_dep {
            self.rcv_rtt.rtt_us = old - (old >> 3) + sample_us;
        }
    }

    /// `tcp_rcv_rtt_measure`: one sample per window of data (no timestamps needed).
    pub fn rcv_rtt_measure(&mut self, now: Instant) {
        if self.rcv_rtt.time != Instant::ZERO {
            if before(self.rcv.nxt, self.rcv_rtt.seq) {
                return;
            }
            let d = (now - self.rcv_rtt.time).as_micros().max(1) as u32;
            self.rcv_rtt_update(d, true);
        }
        self.rcv_rtt.seq = self.rcv.nxt.wrapping_add(self.rcv.wnd);
        self.rcv_rtt.time = now;
    }

    /// `tcp_rcv_rtt_measure_ts`: a full-sized segment echoing our timestamp.
    pub fn rcv_rtt_measure_ts(&mut self, now: Instant, tsecr: u32, seg_len: u32) {
        if !self.rx_opt.tstamp_ok || tsecr == 0 || tsecr == self.rcv_rtt.last_tsecr {
            return;
        }
        self.rcv_rtt.last_tsecr = tsecr;
        if seg_len >= self.ack.rcv_mss {
            let d = self.tsval(now).wrapping_sub(tsecr);
            if d < 0x7fff_ffff && d > 0 {
                self.rcv_rtt_update(d.saturating_mul(1000), false);
            }
        }
    }
}

/// The receive side's sequence space (RFC 9293 §3.3.1's receive sequence variables, named
/// as the RFC names them: `rcv.nxt` is RCV.NXT, Linux's `tp->rcv_nxt`), the window we offer and
/// its clamps, the receive and out-of-order queues, and the SACK blocks we report. `pub(crate)`
/// fields, as in Linux's `tcp_sock`: the segment processing (input.rs) advances `nxt` and
/// queues, `recvmsg` and the queues' rules here consume, the output (output.rs) reads and
/// updates the offered window, and the memory rules (mem.rs) clamp it.
#[derive(Debug)]
pub(crate) struct RcvSeq {
    /// IRS: the peer's initial sequence number.
    pub irs: u32,
    /// RCV.NXT: next sequence number expected (`rcv_nxt`).
    pub nxt: u32,
    /// RCV.NXT when the window was last advertised (`rcv_wup`).
    pub wup: u32,
    /// RCV.WND: the window last advertised, unscaled (`rcv_wnd`).
    pub wnd: u32,
    /// Next byte the application will read (`copied_seq`).
    pub copied_seq: u32,
    /// Largest window we will offer (`window_clamp`).
    pub window_clamp: u32,
    /// Current window threshold of receive-window growth (`rcv_ssthresh`).
    pub ssthresh: u32,
    /// Bytes of payload per byte of receive buffer, in 1/256ths (`tp->scaling_ratio`): the
    /// share of `rcvbuf` the window may offer ([`Connection::win_from_space`]). Starts at
    /// [`TCP_DEFAULT_SCALING_RATIO`] and is learnt from received buffers' `len / truesize`
    /// (`tcp_measure_rcv_mss`).
    pub scaling_ratio: u8,
    /// In-order data waiting for `recvmsg` (`sk_receive_queue`).
    pub rx_queue: VecDeque<RxSkb>,
    /// Out-of-order segments in sequence order (`out_of_order_queue`).
    pub ofo_queue: Vec<OfoSkb>,
    /// The peer's FIN was received in order.
    pub fin_received: bool,
    /// SACK blocks we advertise (`selective_acks`), most recent first.
    pub sacks: Vec<(u32, u32)>,
    /// Pending D-SACK block to send (`duplicate_sack`).
    pub dsack: Option<(u32, u32)>,
}
