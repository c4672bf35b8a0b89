//! The send side of the socket API (Linux `tcp.c`): `tcp_sendmsg_locked` (write-queue skbs
//! carved from one buffer), `tcp_push` with autocorking and MSG_MORE/TCP_CORK, and
//! `tcp_close_state` + `tcp_send_fin`.

use crate::env::Env;
use crate::errno::Errno;
use crate::mib::Mib;
use crate::output::{NAGLE_CORK, NAGLE_PUSH};
use crate::recv::msgflags::*;
use crate::seq::*;
use crate::socket::pollbits::*;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use bytes::{Bytes, BytesMut};
use shallow_wire::TcpFlags;
use std::collections::VecDeque;

impl Connection {
    /// `tcp_close_state` + `tcp_send_fin`.
    pub(crate) fn close_state_and_fin(&mut self, env: &mut Env, now: Instant) {
        let next = match self.state {
            TcpState::Established | TcpState::SynRecv => TcpState::FinWait1,
            TcpState::CloseWait => TcpState::LastAck,
            TcpState::SynSent => {
                self.set_closed(env);
                return;
            }
            _ => return,
        };
        // tcp_set_state: leaving ESTABLISHED/CLOSE_WAIT decrements TcpCurrEstab.
        if self.state == TcpState::Established || self.state == TcpState::CloseWait {
            env.mib.sub(Mib::CurrEstab, 1);
        }
        self.state = next;
        self.shutdown |= SEND_SHUTDOWN;
        if self.state == TcpState::FinWait1
            && self.snd.write_queue.is_empty()
            && self.snd.una == self.snd.nxt
        {
            // nothing in flight
        }
        self.send_fin(env, now);
        env.out.wake(self.id, POLLOUT | POLLWRNORM);
    }

    /// `tcp_sendmsg_locked` (non-blocking): the bytes of `src`, copied into the send buffer,
    /// or with `zc` (a zero-copy send, zerocopy.rs) and a device with scatter-gather, the
    /// application's buffers shared. A zero-copy send the device cannot take without a
    /// copy is copied and its completion says so, as Linux's without `NETIF_F_SG`.
    pub(crate) fn sendmsg_src(
        &mut self,
        env: &mut Env,
        now: Instant,
        src: SendSrc<'_>,
        zc: Option<crate::zerocopy::ZcSend>,
        flags: u32,
    ) -> Result<usize, Errno> {
        let joined;
        let src = match (src, zc) {
            (SendSrc::Share(frags), Some(z)) if env.device.caps.sg => SendSrc::Share(frags).with(z),
            (SendSrc::Share(frags), z) => {
                if let Some(z) = z {
                    self.zc.mark_copied_serial(z.serial);
                }
                joined = frags.concat();
                SendSrc::Copy(&joined)
            }
            (SendSrc::Copy(d), z) => {
                if let Some(z) = z {
                    self.zc.mark_copied_serial(z.serial);
                }
                SendSrc::Copy(d)
            }
            (s, _) => s,
        };
        self.sendmsg_inner(env, now, src, zc.map(|z| z.serial), flags)
    }

    fn sendmsg_inner(
        &mut self,
        env: &mut Env,
        now: Instant,
        src: SendSrc<'_>,
        zc: Option<u32>,
        flags: u32,
    ) -> Result<usize, Errno> {
        if let Some(e) = self.err.take() {
            return Err(e);
        }
        if self.shutdown & SEND_SHUTDOWN != 0 {
            return Err(Errno::EPIPE);
        }
        match self.state {
            TcpState::Established | TcpState::CloseWait => {}
            // A passive Fast Open child may send before its handshake completes.
            TcpState::SynRecv if self.fastopen.child => {}
            TcpState::SynSent | TcpState::SynRecv => {
                // sk_stream_wait_connect: a blocking writer sleeps until the handshake ends.
                if !self.opts.nonblock && flags & MSG_DONTWAIT == 0 {
                    self.write_pending = true;
                }
                return Err(Errno::EAGAIN);
            }
            // sk_stream_wait_connect: any other state is EPIPE (a socket never connected and
            // a listener too, measured on 6.18).
            _ => return Err(Errno::EPIPE),
        }
        let total = src.len();
        if total == 0 {
            return Ok(0);
        }
        let max_frags = env.sysint(Sysctl::max_skb_frags).clamp(1, 17) as u8;
        let mut cursor = src.cursor();
        self.rate_check_app_limited();
        // tcp_send_mss → tcp_current_mss: pick up a path MTU change.
        self.refresh_mss(env);
        let mss_now = self.current_mss();
        // tcp_send_mss: an urgent write is cut into single-MSS buffers (no large goal).
        let size_goal = if self.gso_ok(env) && flags & MSG_OOB == 0 {
            self.size_goal(mss_now)
        } else {
            mss_now
        };
        let mut copied = 0usize;
        let mut waited = false;
        while copied < total {
            let open_tail = self.snd.write_queue.back().is_some_and(|t| {
                !t.eor && !t.flags.intersects(TcpFlags::FIN) && t.len() < size_goal
            });
            // A zero-copy send appends only to a buffer of its own send (or one without
            // any), while it has fragments to spare (skb_zerocopy_iter_stream's EEXIST and
            // EMSGSIZE); copied bytes behind an application's buffer need a fragment of
            // their own too (tcp_sendmsg_locked's `i >= max_frags`). A full one is pushed.
            let can_append = open_tail
                && self
                    .snd
                    .write_queue
                    .back()
                    .is_some_and(|t| match cursor.zc() {
                        None => !t.data.copy_starts_frag() || t.frags < max_frags,
                        Some(z) => t.zc.is_none_or(|s| s == z.serial) && t.frags < max_frags,
                    });
            if open_tail && !can_append {
                self.mark_push();
            }
            if !can_append {
                if !self.sk_stream_memory_free(env, 0) {
                    waited = true;
                    break;
                }
                // tcp_stream_alloc_skb: charged by force when both queues are empty.
                let first = self.snd.write_queue.is_empty() && self.rtx.queue.is_empty();
                if !first && !self.wmem_schedule(env, SKB_TX_OVERHEAD) {
                    self.mem.wait_for_memory();
                    waited = true;
                    break;
                }
                self.slow_start_after_idle_check(env, now);
                let mut skb = Skb::new(self.snd.write_seq, TcpFlags::empty());
                skb.data = SkbData::Open(self.carve_skb_buffer(size_goal as usize));
                self.mem.wmem_queued += skb.truesize;
                self.snd.write_queue.push_back(skb);
            }
            let (tail_len, tail_frags) = self
                .snd
                .write_queue
                .back()
                .map_or((0, 0), |t| (t.len(), t.frags));
            let room = (size_goal - tail_len.min(size_goal)) as usize;
            let n = match cursor.zc() {
                // Bytes are charged per page fragment (at most 32 KiB, `sk_page_frag_refill`).
                None => room.min(total - copied).min(crate::mem::PAGE_FRAG),
                // The rest of the current buffer, within the fragments left.
                Some(_) => {
                    let pages_left = u32::from(max_frags.saturating_sub(tail_frags)).max(1);
                    room.min(cursor.piece_left())
                        .min((pages_left * crate::zerocopy::ZC_PAGE) as usize)
                }
            };
            // Shared bytes are not charged to the memory budget (a pure zero-copy buffer,
            // `skb_zcopy_pure`); bytes copied are, a shared buffer joined to others included.
            let charge = cursor.zc().is_none() || tail_len > 0;
            if charge && !self.wmem_schedule(env, n as u32) {
                // wait_for_space; an skb left empty goes (tcp_remove_empty_skb).
                if tail_len == 0 {
                    if let Some(t) = self.snd.write_queue.pop_back() {
                        self.mem.wmem_queued = self.mem.wmem_queued.saturating_sub(t.truesize);
                    }
                }
                if !(self.snd.write_queue.is_empty() && self.rtx.queue.is_empty()) {
                    self.mem.wait_for_memory();
                }
                waited = true;
                break;
            }
            let tail = self.snd.write_queue.back_mut().expect("tail exists");
            if copied == 0 {
                tail.flags &= !TcpFlags::PSH;
            }
            let mut cost = n as u32;
            match cursor.take(n) {
                Piece::Copy(d) => {
                    // Behind an application's buffer, copied bytes take a fragment of their
                    // own; the application's bytes stay where they are.
                    if tail.zc.is_some() {
                        if tail.data.copy_starts_frag() {
                            tail.frags = tail.frags.saturating_add(1);
                        }
                        tail.data.append_copy(d);
                    } else {
                        tail.data.extend_from_slice(d);
                    }
                }
                Piece::Share(b, z) => {
                    // Bytes copied before it become a fragment of their own.
                    if !tail.data.is_empty() && !tail.data.copy_starts_frag() {
                        tail.frags = tail.frags.saturating_add(1);
                    }
                    tail.data.append_shared(b);
                    tail.zc = Some(z.serial);
                    // Each page the application's buffer spans is charged whole.
                    let pages = crate::zerocopy::pages(n as u32);
                    tail.frags = tail.frags.saturating_add(pages.min(255) as u8);
                    cost = pages * crate::zerocopy::ZC_PAGE;
                }
            }
            tail.truesize += cost;
            tail.end_seq = tail.end_seq.wrapping_add(n as u32);
            self.mem.wmem_queued += cost;
            self.snd.write_seq = self.snd.write_seq.wrapping_add(n as u32);
            // The zero-copy send's completion covers these bytes from now on (a copy of them
            // pushed during the call holds it).
            if let Some(z) = zc {
                self.zc.grow(z, n as u32, self.snd.write_seq);
            }
            copied += n;
            if copied == total {
                if flags & MSG_EOR != 0 {
                    tail.eor = true;
                }
                break;
            }
            // An urgent write is pushed only at its end, once its last byte is marked.
            if tail.len() < size_goal || flags & MSG_OOB != 0 {
                continue;
            }
            if self.forced_push() {
                self.mark_push();
                self.push_pending_frames(env, now, NAGLE_PUSH);
            } else if self.snd.write_queue.len() == 1 {
                // tcp_push_one
                self.write_xmit(env, now, NAGLE_PUSH, true);
            }
        }
        // tcp_tx_timestamp: the write's last byte carries its timestamp request, once the
        // call ends: a blocking writer that got only part in comes back with the rest (one
        // Linux sendmsg that slept), so the mark waits for its last call.
        let blocking = !self.opts.nonblock && flags & MSG_DONTWAIT == 0;
        if copied > 0 && (copied == total || !blocking) {
            self.tstamp_mark_tail();
        }
        // tcp_mark_urg: MSG_OOB makes the call's last byte the urgent one.
        if copied > 0 && flags & MSG_OOB != 0 {
            self.snd.up = self.snd.write_seq;
        }
        if waited {
            self.nospace = true;
            if copied > 0 {
                self.tcp_push(env, now, flags & !MSG_MORE, mss_now, NAGLE_PUSH, size_goal);
                return Ok(copied);
            }
            if self.snd.write_queue.is_empty() && self.rtx.queue.is_empty() {
                env.out.wake(self.id, POLLOUT | POLLWRNORM | POLLWRBAND);
            }
            return Err(Errno::EAGAIN);
        }
        let ng = self.nonagle();
        self.tcp_push(env, now, flags, mss_now, ng, size_goal);
        Ok(copied)
    }

    /// The buffer of a new write-queue skb of up to `want` bytes.
    ///
    /// Linux fills skbs from the socket's page fragment (`sk_page_frag`), so neighbouring
    /// skbs sit in the same pages and `tcp_grow_skb` moves fragments, never bytes. The model:
    /// a new skb is carved from the spare room behind the previous tail's bytes, and when that
    /// room is too small a chunk for [`SKB_CARVE_CHUNK`] skbs is allocated. Neighbours are then
    /// contiguous and [`Connection::grow_head`]'s `unsplit` joins them in O(1). Accounting is not
    /// affected: an skb charges its payload and overhead (`truesize`), never the chunk.
    pub(crate) fn carve_skb_buffer(&mut self, want: usize) -> BytesMut {
        let prev = match self.snd.write_queue.back_mut() {
            Some(t) => Some(t),
            None => self.rtx.queue.back_mut(),
        };
        if let Some(spare) = prev.and_then(|p| p.data.spare(want)) {
            return spare;
        }
        BytesMut::with_capacity(want * SKB_CARVE_CHUNK)
    }

    /// `forced_push`: more than half the max window written since the last PSH.
    pub(crate) fn forced_push(&self) -> bool {
        after(
            self.snd.write_seq,
            self.snd.pushed_seq.wrapping_add(self.snd.max_window / 2),
        )
    }

    pub(crate) fn mark_push(&mut self) {
        if let Some(t) = self.snd.write_queue.back_mut() {
            t.flags |= TcpFlags::PSH;
        }
        self.snd.pushed_seq = self.snd.write_seq;
    }

    /// `tcp_push` with autocorking (spec §5.2).
    pub(crate) fn tcp_push(
        &mut self,
        env: &mut Env,
        now: Instant,
        flags: u32,
        _mss: u32,
        nonagle: u8,
        size_goal: u32,
    ) {
        let Some(tail) = self.snd.write_queue.back() else {
            return;
        };
        let _ = tail;
        if flags & MSG_MORE == 0 || self.forced_push() {
            self.mark_push();
        }
        let (tlen, ttrue, teor) = {
            let t = self.snd.write_queue.back().expect("tail");
            (t.len(), t.truesize, t.eor)
        };
        let autocork = tlen < size_goal
            && env.config.sysctl.on(Sysctl::tcp_autocorking)
            && !self.rtx.queue.is_empty()
            && self.wmem_alloc_biased() > ttrue
            && !teor;
        if autocork {
            if self.tsq_flags & tsq::THROTTLED == 0 {
                env.mib.inc(Mib::TCPAutoCorking);
                self.tsq_flags |= tsq::THROTTLED;
            }
            if self.wmem_alloc_biased() > ttrue {
                return;
            }
        }
        let ng = if flags & MSG_MORE != 0 {
            NAGLE_CORK
        } else {
            nonagle
        };
        self.push_pending_frames(env, now, ng);
    }
}

/// The send side's sequence space (RFC 9293 §3.3.1's send sequence variables, named as
/// the RFC names them: `snd.una` is SND.UNA, Linux's `tp->snd_una`) and the write queue of
/// bytes not yet sent (`sk_write_queue`). `pub(crate)` fields, as in Linux's `tcp_sock`:
/// `sendmsg` here appends, the output (output.rs) moves `nxt` and takes from the queue, the
/// ACK processing (input.rs) moves `una` and the window, and every part of TCP compares
/// sequence numbers against them.
#[derive(Debug)]
pub(crate) struct SndSeq {
    /// ISS: our initial sequence number.
    pub iss: u32,
    /// SND.UNA: oldest unacknowledged sequence number (`snd_una`).
    pub una: u32,
    /// SND.NXT: next sequence number to send (`snd_nxt`).
    pub nxt: u32,
    /// Sequence after the last byte queued by the application (`write_seq`).
    pub write_seq: u32,
    /// `pushed_seq`: last sequence marked with PSH (forced_push).
    pub pushed_seq: u32,
    /// SND.UP (`snd_up`): the sequence after the last urgent byte sent with `MSG_OOB`;
    /// urgent mode while it is ahead of SND.UNA (urg.rs).
    pub up: u32,
    /// End of the last small (< MSS) segment sent (`snd_sml`, Minshall's Nagle variant).
    pub sml: u32,
    /// SND.WND: the peer's receive window, scaled (`snd_wnd`).
    pub wnd: u32,
    /// SND.WL1: the segment sequence number of the last window update (`snd_wl1`).
    pub wl1: u32,
    /// Largest window the peer offered (`max_window`).
    pub max_window: u32,
    /// Buffers queued by the application and not yet sent (`sk_write_queue`).
    pub write_queue: VecDeque<Skb>,
}

impl SndSeq {
    /// The send sequence space of a connection whose SYN (or SYN-ACK) takes `iss`
    /// (RFC 9293 §3.4): SND.UNA = ISS, the SYN's one sequence number sent, nothing queued
    /// or pushed after it.
    pub fn start(&mut self, iss: u32) {
        self.iss = iss;
        self.una = iss;
        self.nxt = iss.wrapping_add(1);
        self.write_seq = self.nxt;
        self.pushed_seq = self.write_seq;
        self.up = iss;
    }
}

/// What a send takes ([`Connection::sendmsg_src`]).
#[derive(Clone, Copy)]
pub(crate) enum SendSrc<'a> {
    /// Bytes to copy into the send buffer.
    Copy(&'a [u8]),
    /// The application's buffers (`msg_iov`), shared when the send is zero-copy.
    Share(&'a [Bytes]),
    /// Shared buffers of a zero-copy send.
    ShareZc(&'a [Bytes], crate::zerocopy::ZcSend),
}

impl<'a> SendSrc<'a> {
    fn with(self, z: crate::zerocopy::ZcSend) -> SendSrc<'a> {
        match self {
            SendSrc::Share(f) => SendSrc::ShareZc(f, z),
            s => s,
        }
    }

    /// The bytes, joined (a copy).
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            SendSrc::Copy(d) => d.to_vec(),
            SendSrc::Share(f) | SendSrc::ShareZc(f, _) => f.concat(),
        }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        match self {
            SendSrc::Copy(d) => d.len(),
            SendSrc::Share(f) | SendSrc::ShareZc(f, _) => f.iter().map(|b| b.len()).sum(),
        }
    }

    fn cursor(self) -> Cursor<'a> {
        Cursor {
            src: self,
            piece: 0,
            off: 0,
        }
    }
}

/// A position in a send's bytes.
struct Cursor<'a> {
    src: SendSrc<'a>,
    /// Current buffer (shared sources).
    piece: usize,
    /// Offset in it (or in the copied bytes).
    off: usize,
}

/// The next bytes a send appends.
enum Piece<'a> {
    Copy(&'a [u8]),
    Share(Bytes, crate::zerocopy::ZcSend),
}

impl<'a> Cursor<'a> {
    /// The zero-copy send, if the bytes are shared.
    fn zc(&self) -> Option<crate::zerocopy::ZcSend> {
        match self.src {
            SendSrc::ShareZc(_, z) => Some(z),
            _ => None,
        }
    }

    /// Bytes left in the current shared buffer (empty buffers skipped).
    fn piece_left(&mut self) -> usize {
        let (SendSrc::ShareZc(f, _) | SendSrc::Share(f)) = self.src else {
            return usize::MAX;
        };
        while self.piece < f.len() && self.off >= f[self.piece].len() {
            self.piece += 1;
            self.off = 0;
        }
        f.get(self.piece).map_or(0, |b| b.len() - self.off)
    }

    /// Take the next `n` bytes (at most what [`Cursor::piece_left`] said for a shared
    /// source).
    fn take(&mut self, n: usize) -> Piece<'a> {
        match self.src {
            SendSrc::Copy(d) => {
                let p = &d[self.off..self.off + n];
                self.off += n;
                Piece::Copy(p)
            }
            SendSrc::ShareZc(f, z) => {
                self.piece_left();
                let b = f[self.piece].slice(self.off..self.off + n);
                self.off += n;
                Piece::Share(b, z)
            }
            // Shared buffers without a zero-copy send are joined first (sendmsg_src).
            SendSrc::Share(_) => Piece::Copy(&[]),
        }
    }
}
