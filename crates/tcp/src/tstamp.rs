//! Transmit timestamps (`SO_TIMESTAMPING`, Linux's `Documentation/networking/timestamping`):
//! a socket asks, per write, for the time the write's last byte entered the host's queue
//! (`SCM_TSTAMP_SCHED`: handed to the qdisc), left the host (`SCM_TSTAMP_SND`: the device
//! took it, its TX completion) and was cumulatively acknowledged (`SCM_TSTAMP_ACK`). The
//! events wait in the socket's error queue (`MSG_ERRQUEUE`, POLLERR) with the byte's key.
//! SCHED to SND is the host-queue residence that TSQ bounds.
//!
//! Linux's rules, as 6.18 runs them:
//! - the flags are `SOF_TIMESTAMPING_*` ([`sof`]); bits Linux does not know are EINVAL;
//!   `OPT_ID` on a TCP socket needs a connection (EINVAL in CLOSE and LISTEN) and counts keys
//!   from `snd_una` at that moment (`write_seq` with `OPT_ID_TCP`);
//! - a write marks the buffer holding its last byte (`tcp_tx_timestamp`): its key is that
//!   byte's sequence number; a later write that appends to the same buffer moves the mark to
//!   its own last byte, so the earlier write is not reported (measured on 6.18: under
//!   TCP_CORK, writes of 100 and 100 bytes after a reported one of 1000 give SCHED for keys
//!   999 and 1199 only; our script `tstamp-corked-writes.pkt`); splitting a buffer keeps the
//!   mark with its byte, merging two keeps the later one's (`tcp_fragment_tstamp`,
//!   `tcp_skb_collapse_tstamp`);
//! - every transmission of the marked buffer (retransmissions too) reports SCHED and SND;
//!   ACK is reported once, by the ACK that covers the key (`tcp_ack_tstamp`); an SND whose
//!   completion the substrate has not reported yet when that ACK comes is reported first (on
//!   Linux the driver stamps SND as it transmits, before any ACK can come back);
//! - a write is one call: a blocking writer that copied only part and comes back with the
//!   rest (one Linux `sendmsg` that slept for space) is marked at its last call;
//! - the events wait in the error queue (errqueue.rs), bounded by the receive buffer
//!   (`sock_queue_err_skb`: an event that would take it past `sk_rcvbuf` is dropped); the
//!   key reported (`ee_data`) is relative to the socket's first key with `OPT_ID`, else 0.

use crate::time::Instant;
use std::collections::VecDeque;

/// `SOF_TIMESTAMPING_*` flags.
pub mod sof {
    /// Hardware transmit timestamps (no hardware clock here: accepted, never reported).
    pub const TX_HARDWARE: u32 = 1 << 0;
    /// Software transmit timestamp when the device takes the packet (SND).
    pub const TX_SOFTWARE: u32 = 1 << 1;
    /// Hardware receive timestamps.
    pub const RX_HARDWARE: u32 = 1 << 2;
    /// Software receive timestamps.
    pub const RX_SOFTWARE: u32 = 1 << 3;
    /// Report software timestamps.
    pub const SOFTWARE: u32 = 1 << 4;
    /// Deprecated hardware option.
    pub const SYS_HARDWARE: u32 = 1 << 5;
    /// Report hardware timestamps.
    pub const RAW_HARDWARE: u32 = 1 << 6;
    /// Give each write a key (the byte count; `ee_data`).
    pub const OPT_ID: u32 = 1 << 7;
    /// Timestamp when the packet enters the qdisc (SCHED).
    pub const TX_SCHED: u32 = 1 << 8;
    /// Timestamp when the last byte is acknowledged (ACK).
    pub const TX_ACK: u32 = 1 << 9;
    /// Control messages on every error-queue read.
    pub const OPT_CMSG: u32 = 1 << 10;
    /// Timestamps without the packet.
    pub const OPT_TSONLY: u32 = 1 << 11;
    /// `SCM_TIMESTAMPING_OPT_STATS` with each timestamp.
    pub const OPT_STATS: u32 = 1 << 12;
    /// `SCM_TIMESTAMPING_PKTINFO` on receive.
    pub const OPT_PKTINFO: u32 = 1 << 13;
    /// Both software and hardware transmit timestamps.
    pub const OPT_TX_SWHW: u32 = 1 << 14;
    /// Bind to a PHC.
    pub const BIND_PHC: u32 = 1 << 15;
    /// Keys count from `write_seq`, not `snd_una`.
    pub const OPT_ID_TCP: u32 = 1 << 16;
    /// Receive filter.
    pub const OPT_RX_FILTER: u32 = 1 << 17;
    /// Every flag Linux 6.18 knows.
    pub const MASK: u32 = (OPT_RX_FILTER << 1) - 1;
    /// The flags that ask for a transmit timestamp (`SOF_TIMESTAMPING_TX_RECORD_MASK`).
    pub const TX_RECORD_MASK: u32 = TX_HARDWARE | TX_SOFTWARE | TX_SCHED | TX_ACK;
}

/// Which moment a transmit timestamp records (`SCM_TSTAMP_*`, `ee_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TstampKind {
    /// The device took the packet (`SCM_TSTAMP_SND` = 0).
    Snd,
    /// The packet entered the qdisc (`SCM_TSTAMP_SCHED` = 1).
    Sched,
    /// The last byte was cumulatively acknowledged (`SCM_TSTAMP_ACK` = 2).
    Ack,
}

impl TstampKind {
    /// Linux's `SCM_TSTAMP_*` number (`ee_info`).
    pub fn scm(self) -> u32 {
        match self {
            TstampKind::Snd => 0,
            TstampKind::Sched => 1,
            TstampKind::Ack => 2,
        }
    }
}

/// A transmit timestamp from the error queue: what `recvmsg(MSG_ERRQUEUE)` returns as
/// `SCM_TIMESTAMPING` (the time) and `sock_extended_err` (`ee_origin` =
/// `SO_EE_ORIGIN_TIMESTAMPING`, `ee_errno` = ENOMSG, `ee_info` = the kind, `ee_data` = the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxTimestamp {
    /// Which moment.
    pub kind: TstampKind,
    /// The write's key (`ee_data`): its last byte's offset from the socket's first key with
    /// `SOF_TIMESTAMPING_OPT_ID`, else 0.
    pub key: u32,
    /// When (the substrate's clock: the software timestamp).
    pub time: Instant,
}

/// The mark a write leaves on the buffer holding its last byte (`tx_flags`, `tskey`,
/// `txstamp_ack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TsMark {
    /// Report SCHED.
    pub sched: bool,
    /// Report SND.
    pub snd: bool,
    /// Report ACK.
    pub ack: bool,
    /// Sequence number of the write's last byte.
    pub key: u32,
}

/// Split a buffer at `seq`: its request moves to `rest` when its byte does
/// (`tcp_fragment_tstamp`).
pub(crate) fn split_mark(mark: &mut Option<TsMark>, rest: &mut Option<TsMark>, seq: u32) {
    if mark.is_some_and(|m| !crate::seq::before(m.key, seq)) {
        *rest = mark.take();
    }
}

/// A socket's transmit timestamping: its flags, its first key and the SND timestamps owed
/// (the events wait in the socket's error queue, errqueue.rs).
#[derive(Debug, Default)]
pub(crate) struct SockTstamp {
    /// `SOF_TIMESTAMPING_*` (`sk_tsflags`).
    pub flags: u32,
    /// The first key (`sk_tskey`, a sequence number) with `OPT_ID`.
    pub key_base: u32,
    /// SND timestamps owed at the TX completion of a packet (its first sequence number) that
    /// carried a marked byte: (packet seq, key).
    pub snd_pending: VecDeque<(u32, u32)>,
}

/// How many SND timestamps may wait for TX completions (a substrate that never completes
/// costs no more than this; the oldest is forgotten).
pub(crate) const SND_PENDING_MAX: usize = 1024;

impl SockTstamp {
    /// An SND timestamp is owed at the completion of the packet starting at `seq`.
    pub fn owe_snd(&mut self, seq: u32, key: u32) {
        if self.snd_pending.len() >= SND_PENDING_MAX {
            self.snd_pending.pop_front();
        }
        self.snd_pending.push_back((seq, key));
    }

    /// An SND timestamp still owed for `key` (its packet's completion not yet reported),
    /// taken out.
    pub fn take_snd_key(&mut self, key: u32) -> Option<u32> {
        let i = self.snd_pending.iter().position(|&(_, k)| k == key)?;
        self.snd_pending.remove(i).map(|(_, k)| k)
    }

    /// The key whose SND timestamp the completion of the packet starting at `seq` brings.
    pub fn take_snd(&mut self, seq: u32) -> Option<u32> {
        let i = self.snd_pending.iter().position(|&(s, _)| s == seq)?;
        self.snd_pending.remove(i).map(|(_, k)| k)
    }

    /// The mark a write of this socket leaves, if its flags ask for any transmit timestamp.
    pub fn mark(&self, key: u32) -> Option<TsMark> {
        (self.flags & sof::TX_RECORD_MASK != 0).then_some(TsMark {
            sched: self.flags & sof::TX_SCHED != 0,
            snd: self.flags & sof::TX_SOFTWARE != 0,
            ack: self.flags & sof::TX_ACK != 0,
            key,
        })
    }

    /// The event reported for the byte `key`: its key relative to the first with `OPT_ID`,
    /// else 0.
    pub fn event(&self, kind: TstampKind, key: u32, time: Instant) -> TxTimestamp {
        let key = if self.flags & sof::OPT_ID != 0 {
            key.wrapping_sub(self.key_base)
        } else {
            0
        };
        TxTimestamp { kind, key, time }
    }
}

/// Transmit timestamps on a connection.
impl crate::socket::Connection {
    /// `tcp_tx_timestamp`: mark the write queue's last buffer with this socket's request.
    pub(crate) fn tstamp_mark_tail(&mut self) {
        if self.tstamp.flags & sof::TX_RECORD_MASK == 0 {
            return;
        }
        if let Some(tail) = self.snd.write_queue.back_mut() {
            tail.tstamp = self.tstamp.mark(tail.end_seq.wrapping_sub(1));
        }
    }

    /// Queue a transmit timestamp for the byte `key` and wake the socket's error readers
    /// (`__skb_complete_tx_timestamp` → `sock_queue_err_skb`).
    pub(crate) fn tstamp_event(
        &mut self,
        env: &mut crate::env::Env,
        kind: TstampKind,
        key: u32,
        now: Instant,
    ) {
        let (rmem, rcvbuf) = (self.mem.rmem_alloc, self.mem.rcvbuf);
        let ev = self.tstamp.event(kind, key, now);
        if self.errq.push_tstamp(ev, rmem, rcvbuf) {
            env.out.wake(self.id, crate::socket::pollbits::POLLERR);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_relative_with_opt_id() {
        let mut t = SockTstamp {
            flags: sof::TX_SCHED | sof::TX_SOFTWARE | sof::OPT_ID,
            key_base: 1000,
            ..Default::default()
        };
        let m = t.mark(1999).unwrap();
        assert!(m.sched && m.snd && !m.ack);
        assert_eq!(t.event(TstampKind::Sched, 1999, Instant::ZERO).key, 999);
        t.flags &= !sof::OPT_ID;
        assert_eq!(t.event(TstampKind::Snd, 1999, Instant::ZERO).key, 0);
        assert!(SockTstamp::default().mark(1).is_none());
    }
}
