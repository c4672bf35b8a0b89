//! A socket's error queue (`sk_error_queue`, read with `recvmsg(MSG_ERRQUEUE)`): what the
//! stack reports about data the application sent, out of band — transmit timestamps
//! (`SO_TIMESTAMPING`, tstamp.rs) and zero-copy completions (`MSG_ZEROCOPY`, zerocopy.rs).
//! While it holds anything, poll reports POLLERR.
//!
//! The two kinds are charged to different budgets, as on Linux: a timestamp entry to the
//! receive buffer (`sock_queue_err_skb` refuses one that would take `sk_rmem_alloc` past
//! `sk_rcvbuf`), a zero-copy completion to the option memory its send allocated
//! (`sk_omem_alloc`, bounded by `net.core.optmem_max`, zerocopy.rs). A completion whose ids
//! follow the newest queued completion's extends that entry instead of queueing another
//! (`skb_zerocopy_notify_extend`), so a reader that falls behind finds one range.

use crate::tstamp::TxTimestamp;
use crate::zerocopy::ZcNotice;
use std::collections::VecDeque;

/// One entry of the error queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrQueueEntry {
    /// A transmit timestamp (`SO_EE_ORIGIN_TIMESTAMPING`).
    Timestamp(TxTimestamp),
    /// Zero-copy sends the stack is done with (`SO_EE_ORIGIN_ZEROCOPY`).
    Zerocopy(ZcNotice),
}

impl ErrQueueEntry {
    /// The timestamp, if this entry is one.
    pub fn timestamp(self) -> Option<TxTimestamp> {
        match self {
            ErrQueueEntry::Timestamp(t) => Some(t),
            ErrQueueEntry::Zerocopy(_) => None,
        }
    }

    /// The zero-copy completion, if this entry is one.
    pub fn zerocopy(self) -> Option<ZcNotice> {
        match self {
            ErrQueueEntry::Zerocopy(z) => Some(z),
            ErrQueueEntry::Timestamp(_) => None,
        }
    }
}

/// What a timestamp entry costs the receive buffer (the truesize of Linux's `OPT_TSONLY`
/// skb). Measured on 6.18 over loopback (2026-11-28): 4, 9 and 19 entries fit receive
/// buffers of 4096, 8192 and 16384 bytes, with or without `OPT_STATS` statistics, and ten
/// fit from 8336 bytes on but not at 8320: 832 bytes each (`sock_queue_err_skb` refuses
/// one that would reach the buffer's size).
pub(crate) const ERRQ_TRUESIZE: u32 = 832;

/// The queue, oldest first.
#[derive(Debug, Default)]
pub(crate) struct ErrQueue {
    q: VecDeque<ErrQueueEntry>,
    /// Timestamp entries in `q` (each charged [`ERRQ_TRUESIZE`] to the receive buffer).
    tstamps: u32,
}

impl ErrQueue {
    /// Nothing waits (no POLLERR from the queue).
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Queue a timestamp unless it would take the receive buffer (`rmem` already charged)
    /// past `rcvbuf`. Returns whether it was queued.
    pub fn push_tstamp(&mut self, t: TxTimestamp, rmem: u32, rcvbuf: u32) -> bool {
        let charged = (self.tstamps + 1).saturating_mul(ERRQ_TRUESIZE);
        if rmem.saturating_add(charged) >= rcvbuf {
            return false;
        }
        self.tstamps += 1;
        self.q.push_back(ErrQueueEntry::Timestamp(t));
        true
    }

    /// Queue a zero-copy completion, or extend the newest entry when it is a completion
    /// whose range ends just before this one's (the extended entry keeps its own code).
    /// Returns true when a new entry was queued, false when it extended one (the caller
    /// then frees the completion's option memory).
    pub fn push_zc(&mut self, n: ZcNotice) -> bool {
        if let Some(ErrQueueEntry::Zerocopy(tail)) = self.q.back_mut() {
            let sum = u64::from(tail.hi.wrapping_sub(tail.lo))
                + 1
                + u64::from(n.hi.wrapping_sub(n.lo))
                + 1;
            if n.lo == tail.hi.wrapping_add(1) && sum < (1u64 << 32) {
                tail.hi = n.hi;
                return false;
            }
        }
        self.q.push_back(ErrQueueEntry::Zerocopy(n));
        true
    }

    /// Take the oldest entry.
    pub fn pop(&mut self) -> Option<ErrQueueEntry> {
        let e = self.q.pop_front()?;
        if matches!(e, ErrQueueEntry::Timestamp(_)) {
            self.tstamps -= 1;
        }
        Some(e)
    }

    /// Take the oldest entry of one kind (`timestamps`: a timestamp, else a completion),
    /// leaving the others in order.
    pub fn pop_kind(&mut self, timestamps: bool) -> Option<ErrQueueEntry> {
        let i = self
            .q
            .iter()
            .position(|e| matches!(e, ErrQueueEntry::Timestamp(_)) == timestamps)?;
        let e = self.q.remove(i)?;
        if timestamps {
            self.tstamps -= 1;
        }
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Instant;
    use crate::tstamp::TstampKind;

    fn ts(key: u32) -> TxTimestamp {
        TxTimestamp {
            kind: TstampKind::Sched,
            key,
            time: Instant::ZERO,
            stats: None,
        }
    }

    #[test]
    fn timestamps_are_bounded_by_the_receive_buffer_and_completions_coalesce() {
        let mut q = ErrQueue::default();
        assert!(q.push_tstamp(ts(1), 0, 2000));
        assert!(q.push_tstamp(ts(2), 0, 2000));
        // A third would charge 2496 bytes to a 2000-byte buffer.
        assert!(!q.push_tstamp(ts(3), 0, 2000));
        let zc = |lo, hi| ZcNotice {
            lo,
            hi,
            copied: false,
        };
        assert!(q.push_zc(zc(0, 0)));
        // Contiguous: extends the tail entry.
        assert!(!q.push_zc(zc(1, 2)));
        // A gap: a new entry.
        assert!(q.push_zc(zc(4, 4)));
        // Completions do not count against the receive buffer.
        assert_eq!(q.pop_kind(false), Some(ErrQueueEntry::Zerocopy(zc(0, 2))));
        assert_eq!(q.pop(), Some(ErrQueueEntry::Timestamp(ts(1))));
        assert!(q.push_tstamp(ts(3), 0, 2000));
        assert_eq!(q.pop_kind(true), Some(ErrQueueEntry::Timestamp(ts(2))));
        assert_eq!(q.pop(), Some(ErrQueueEntry::Zerocopy(zc(4, 4))));
        assert_eq!(q.pop(), Some(ErrQueueEntry::Timestamp(ts(3))));
        assert!(q.is_empty());
    }
}
