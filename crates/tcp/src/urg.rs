//! Urgent data on receive (RFC 9293 §3.8.5, and Linux's BSD reading of it: `tcp_check_urg`,
//! `tcp_urg`, `tcp_recv_urg`). A segment with URG moves the urgent mark; the byte at the
//! mark is the "out-of-band" byte: unless `SO_OOBINLINE`, a read skips it and it is read
//! apart with `MSG_OOB`.
//!
//! Linux's rules, as 6.18 runs them:
//! - the urgent pointer points just past the urgent byte (unless `net.ipv4.tcp_stdurg`): the
//!   byte is at `seq + urg_ptr - 1`; a mark at or below what was read or received, or not
//!   beyond the current mark, changes nothing;
//! - a new mark replaces the old one; an old urgent byte still unread at the read position
//!   is dropped from the stream (it was out of band);
//! - once the segment holding the byte arrives, the byte is kept aside (`urg_data`) for
//!   `MSG_OOB` (which reads it once; EINVAL when there is none or it is inline, EAGAIN while
//!   it has not arrived) — and it stays in the receive queue;
//! - a read stops at the mark (a read that copied something returns before it); a read that
//!   starts at the mark skips the byte unless inline; `splice` (`tcp_read_sock`) also stops
//!   at the mark, and returns 0 there (the loop fix of `splice/tcp_splice_loop_test.pkt`);
//! - POLLPRI while the byte waits; a reader at the mark with only the urgent byte behind it
//!   is not readable (`tcp_poll`'s target); `SIOCATMARK` says whether the read position is
//!   at the mark.
//!
//!
//! On send, `MSG_OOB` makes the call's last byte urgent (`tcp_mark_urg`: SND.UP is set after
//! it); while SND.UP is ahead of SND.UNA (urgent mode) Nagle does not hold data back and every
//! segment that starts before SND.UP carries URG with the pointer SND.UP - SEG.SEQ, or 0xFFFF
//! when that does not fit and the segment ends far enough before SND.NXT
//! (`tcp_transmit_skb`).

use crate::seq::{after, before};
use crate::socket::Connection;

/// Where the urgent byte is (`urg_data`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum UrgState {
    /// No urgent mark.
    #[default]
    None,
    /// The mark is known, the byte has not arrived (`TCP_URG_NOTYET`).
    NotYet,
    /// The byte arrived (`TCP_URG_VALID`).
    Valid(u8),
    /// `MSG_OOB` read it (`TCP_URG_READ`).
    Read,
}

/// The receive side's urgent mark.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RcvUrg {
    /// Sequence number of the urgent byte (`urg_seq`).
    pub seq: u32,
    /// Its state (`urg_data`).
    pub state: UrgState,
}

impl Connection {
    /// Urgent mode on send (`tcp_urg_mode`): an urgent byte not yet acknowledged.
    pub(crate) fn urg_mode(&self) -> bool {
        after(self.snd.up, self.snd.una)
    }

    /// The URG flag and urgent pointer of a segment starting at `seq` (`tcp_transmit_skb`).
    pub(crate) fn urg_mark(
        &self,
        seq: u32,
        flags: shallow_wire::TcpFlags,
    ) -> (shallow_wire::TcpFlags, u16) {
        use shallow_wire::TcpFlags;
        if !self.urg_mode() || !before(seq, self.snd.up) {
            return (flags, 0);
        }
        if before(self.snd.up, seq.wrapping_add(0x10000)) {
            (flags | TcpFlags::URG, self.snd.up.wrapping_sub(seq) as u16)
        } else if after(seq.wrapping_add(0xFFFF), self.snd.nxt) {
            (flags | TcpFlags::URG, 0xFFFF)
        } else {
            (flags, 0)
        }
    }

    /// `tcp_urg` with `tcp_check_urg`: the urgent pointer of an accepted segment, and the
    /// urgent byte if this segment carries it.
    pub(crate) fn urg_rcv(
        &mut self,
        env: &crate::env::Env,
        seq: u32,
        syn: bool,
        urg: Option<u16>,
        payload: &[u8],
    ) {
        if let Some(up) = urg {
            let mut ptr = u32::from(up);
            if ptr != 0 && env.config.sysctl.int(crate::sysctl::Sysctl::tcp_stdurg) == 0 {
                ptr -= 1;
            }
            let ptr = ptr.wrapping_add(seq);
            let stale = after(self.rcv.copied_seq, ptr)
                || before(ptr, self.rcv.nxt)
                || (self.urg.state != UrgState::None && !after(ptr, self.urg.seq));
            if !stale {
                // The old urgent byte, unread at the read position, leaves the stream.
                if self.urg.seq == self.rcv.copied_seq
                    && self.urg.state != UrgState::None
                    && !self.opts.oobinline
                    && self.rcv.copied_seq != self.rcv.nxt
                {
                    self.skip_rcv_bytes(1);
                }
                self.urg = RcvUrg {
                    seq: ptr,
                    state: UrgState::NotYet,
                };
            }
        }
        if self.urg.state == UrgState::NotYet {
            let off = self.urg.seq.wrapping_sub(seq).wrapping_sub(u32::from(syn)) as usize;
            if let Some(&b) = payload.get(off) {
                self.urg.state = UrgState::Valid(b);
            }
        }
    }

    /// Bytes from `seq` to the urgent mark, when a mark is set (`urg_data` non-zero).
    pub(crate) fn urg_offset(&self, seq: u32) -> Option<u32> {
        (self.urg.state != UrgState::None).then(|| self.urg.seq.wrapping_sub(seq))
    }

    /// A read moved past the mark: the mark is gone (`tcp_recvmsg`'s end).
    pub(crate) fn urg_read_past(&mut self) {
        if self.urg.state != UrgState::None && after(self.rcv.copied_seq, self.urg.seq) {
            self.urg.state = UrgState::None;
        }
    }

    /// `SIOCATMARK`: the read position is at the urgent mark.
    pub(crate) fn at_mark(&self) -> bool {
        self.urg.state != UrgState::None && self.urg.seq == self.rcv.copied_seq
    }

    /// The urgent byte waits for `MSG_OOB` (POLLPRI).
    pub(crate) fn urg_pending(&self) -> bool {
        matches!(self.urg.state, UrgState::Valid(_))
    }

    /// `tcp_recv_urg`: `recv(MSG_OOB)`.
    pub(crate) fn recv_urg(&mut self, buf: &mut [u8], peek: bool) -> Result<usize, crate::Errno> {
        use crate::Errno;
        if self.opts.oobinline || matches!(self.urg.state, UrgState::None | UrgState::Read) {
            return Err(Errno::EINVAL);
        }
        if let UrgState::Valid(b) = self.urg.state {
            if !peek {
                self.urg.state = UrgState::Read;
            }
            return Ok(match buf.first_mut() {
                Some(x) => {
                    *x = b;
                    1
                }
                None => 0,
            });
        }
        if self.state == crate::socket::TcpState::Close
            || self.shutdown & crate::socket::RCV_SHUTDOWN != 0
        {
            return Ok(0);
        }
        Err(Errno::EAGAIN)
    }
}
