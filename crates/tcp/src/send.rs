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
use bytes::BytesMut;
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

    /// `tcp_sendmsg_locked` (non-blocking).
    pub(crate) fn sendmsg(
        &mut self,
        env: &mut Env,
        now: Instant,
        data: &[u8],
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
            TcpState::Close if self.remote.port() != 0 => return Err(Errno::EPIPE),
            _ => return Err(Errno::ENOTCONN),
        }
        if data.is_empty() {
            return Ok(0);
        }
        self.rate_check_app_limited();
        // tcp_send_mss → tcp_current_mss: pick up a path MTU change.
        self.refresh_mss(env);
        let mss_now = self.current_mss();
        let size_goal = if self.gso_ok(env) {
            self.size_goal(mss_now)
        } else {
            mss_now
        };
        let mut copied = 0usize;
        let mut waited = false;
        while copied < data.len() {
            let can_append = self
                .snd
                .write_queue
                .back()
                .map(|t| !t.eor && !t.flags.intersects(TcpFlags::FIN) && t.len() < size_goal)
                .unwrap_or(false);
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
            let tail_len = self.snd.write_queue.back().map_or(0, |t| t.len());
            let room = (size_goal - tail_len.min(size_goal)) as usize;
            // Bytes are charged per page fragment (at most 32 KiB, `sk_page_frag_refill`).
            let n = room.min(data.len() - copied).min(crate::mem::PAGE_FRAG);
            if !self.wmem_schedule(env, n as u32) {
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
            tail.data.extend_from_slice(&data[copied..copied + n]);
            tail.truesize += n as u32;
            tail.end_seq = tail.end_seq.wrapping_add(n as u32);
            self.mem.wmem_queued += n as u32;
            self.snd.write_seq = self.snd.write_seq.wrapping_add(n as u32);
            copied += n;
            if copied == data.len() {
                if flags & MSG_EOR != 0 {
                    tail.eor = true;
                }
                break;
            }
            if tail.len() < size_goal {
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
        if copied > 0 && (copied == data.len() || !blocking) {
            self.tstamp_mark_tail();
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
    }
}
