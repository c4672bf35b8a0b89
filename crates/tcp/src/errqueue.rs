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

use crate::payload::Frags;
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

/// One entry as `recvmsg(MSG_ERRQUEUE)` reads it ([`crate::Stack::recv_errqueue_msg`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrQueueMsg {
    /// The entry (its `sock_extended_err` and time).
    pub entry: ErrQueueEntry,
    /// What the read returns as data: for a timestamp without `OPT_TSONLY` the packet
    /// (SCHED, SND: its IP and TCP headers and payload) or the acked buffer's payload (ACK);
    /// with `OPT_TSONLY` and `OPT_STATS` the statistics' netlink blob; else nothing.
    pub bytes: Frags,
    /// `IP_PKTINFO` / `IPV6_PKTINFO` for an entry that holds the packet, when the socket
    /// has `SOF_TIMESTAMPING_OPT_CMSG` and the packet's family's option (`IP_PKTINFO`,
    /// `IPV6_RECVPKTINFO`) when it is read (Linux's `ipv4_datagram_support_cmsg` /
    /// `ip6_datagram_support_cmsg`: "to correlate timestamp with egress dev").
    pub pktinfo: Option<PktInfo>,
}

/// The packet information of a transmit timestamp (`struct in_pktinfo`, or `in6_pktinfo`
/// for an IPv6 packet), measured on 6.18 over loopback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PktInfo {
    /// The device's interface index (`ipi_ifindex`, `ipi6_ifindex`;
    /// [`crate::Stack::set_ifindex`]).
    pub ifindex: u32,
    /// The packet's source address (`ipi_spec_dst`; IPv4 only).
    pub src: core::net::IpAddr,
    /// The packet's destination address (`ipi_addr`, `ipi6_addr`).
    pub dst: core::net::IpAddr,
}

impl PktInfo {
    /// The packet information of an IP packet whose headers start `bytes`.
    pub fn of_packet(bytes: &[u8], ifindex: u32) -> Option<PktInfo> {
        use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
        let (src, dst) = match bytes.first()? >> 4 {
            4 => {
                let a = <[u8; 4]>::try_from(bytes.get(12..16)?).ok()?;
                let b = <[u8; 4]>::try_from(bytes.get(16..20)?).ok()?;
                (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))
            }
            6 => {
                let a = <[u8; 16]>::try_from(bytes.get(8..24)?).ok()?;
                let b = <[u8; 16]>::try_from(bytes.get(24..40)?).ok()?;
                (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))
            }
            _ => return None,
        };
        Some(PktInfo { ifindex, src, dst })
    }

    /// The control message's bytes as Linux writes them on x86-64: `in_pktinfo`
    /// (ifindex, spec_dst, addr) for IPv4, `in6_pktinfo` (addr, ifindex) for IPv6.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(20);
        match (self.src, self.dst) {
            (core::net::IpAddr::V4(s), core::net::IpAddr::V4(d)) => {
                v.extend_from_slice(&self.ifindex.to_le_bytes());
                v.extend_from_slice(&s.octets());
                v.extend_from_slice(&d.octets());
            }
            (_, d) => {
                let d = match d {
                    core::net::IpAddr::V6(d) => d,
                    core::net::IpAddr::V4(d) => d.to_ipv6_mapped(),
                };
                v.extend_from_slice(&d.octets());
                v.extend_from_slice(&self.ifindex.to_le_bytes());
            }
        }
        v
    }
}

/// One queued entry with its bytes and its charge.
#[derive(Debug)]
struct Queued {
    e: ErrQueueEntry,
    /// What `recvmsg(MSG_ERRQUEUE)` reads as data: a timestamp's packet or statistics, or
    /// nothing.
    bytes: Frags,
    /// `bytes` is the packet the device took (SCHED, SND without `OPT_TSONLY`).
    packet: bool,
    /// What it costs the receive buffer (0 for a zero-copy completion).
    charge: u32,
}

/// The queue, oldest first.
#[derive(Debug, Default)]
pub(crate) struct ErrQueue {
    q: VecDeque<Queued>,
    /// Receive-buffer bytes charged to the timestamp entries in `q`.
    charged: u32,
}

impl ErrQueue {
    /// Nothing waits (no POLLERR from the queue).
    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Queue a timestamp with its bytes, charged [`ERRQ_TRUESIZE`] plus `extra` (the payload
    /// of a packet it carries), unless that would take the receive buffer (`rmem` already
    /// charged) to `rcvbuf`. Returns whether it was queued.
    #[allow(clippy::too_many_arguments)]
    pub fn push_tstamp(
        &mut self,
        t: TxTimestamp,
        bytes: Frags,
        packet: bool,
        extra: u32,
        rmem: u32,
        rcvbuf: u32,
    ) -> bool {
        let charge = ERRQ_TRUESIZE.saturating_add(extra);
        if rmem.saturating_add(self.charged).saturating_add(charge) >= rcvbuf {
            return false;
        }
        self.charged += charge;
        self.q.push_back(Queued {
            e: ErrQueueEntry::Timestamp(t),
            bytes,
            packet,
            charge,
        });
        true
    }

    /// Queue a zero-copy completion, or extend the newest entry when it is a completion
    /// whose range ends just before this one's (the extended entry keeps its own code).
    /// Returns true when a new entry was queued, false when it extended one (the caller
    /// then frees the completion's option memory).
    pub fn push_zc(&mut self, n: ZcNotice) -> bool {
        if let Some(Queued {
            e: ErrQueueEntry::Zerocopy(tail),
            ..
        }) = self.q.back_mut()
        {
            let sum = u64::from(tail.hi.wrapping_sub(tail.lo))
                + 1
                + u64::from(n.hi.wrapping_sub(n.lo))
                + 1;
            if n.lo == tail.hi.wrapping_add(1) && sum < (1u64 << 32) {
                tail.hi = n.hi;
                return false;
            }
        }
        self.q.push_back(Queued {
            e: ErrQueueEntry::Zerocopy(n),
            bytes: Frags::default(),
            packet: false,
            charge: 0,
        });
        true
    }

    /// Take the oldest entry with its bytes and whether they are the packet.
    pub fn pop(&mut self) -> Option<(ErrQueueEntry, Frags, bool)> {
        let x = self.q.pop_front()?;
        self.charged -= x.charge;
        Some((x.e, x.bytes, x.packet))
    }

    /// Take the oldest entry of one kind (`timestamps`: a timestamp, else a completion),
    /// leaving the others in order.
    pub fn pop_kind(&mut self, timestamps: bool) -> Option<ErrQueueEntry> {
        let i = self
            .q
            .iter()
            .position(|x| matches!(x.e, ErrQueueEntry::Timestamp(_)) == timestamps)?;
        let x = self.q.remove(i)?;
        self.charged -= x.charge;
        Some(x.e)
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

    fn push(q: &mut ErrQueue, key: u32, extra: u32, rcvbuf: u32) -> bool {
        q.push_tstamp(ts(key), Frags::default(), false, extra, 0, rcvbuf)
    }

    #[test]
    fn timestamps_are_bounded_by_the_receive_buffer_and_completions_coalesce() {
        let mut q = ErrQueue::default();
        assert!(push(&mut q, 1, 0, 2000));
        assert!(push(&mut q, 2, 0, 2000));
        // A third would charge 2496 bytes to a 2000-byte buffer.
        assert!(!push(&mut q, 3, 0, 2000));
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
        assert_eq!(q.pop().map(|x| x.0), Some(ErrQueueEntry::Timestamp(ts(1))));
        assert!(push(&mut q, 3, 0, 2000));
        assert_eq!(q.pop_kind(true), Some(ErrQueueEntry::Timestamp(ts(2))));
        assert_eq!(
            q.pop().map(|x| x.0),
            Some(ErrQueueEntry::Zerocopy(zc(4, 4)))
        );
        assert_eq!(q.pop().map(|x| x.0), Some(ErrQueueEntry::Timestamp(ts(3))));
        assert!(q.is_empty());
    }

    /// An entry that carries a packet is charged its payload too (measured on 6.18: 8, 4
    /// and 0 entries of 100-, 1000- and 10000-byte writes fit an 8192-byte buffer).
    #[test]
    fn an_entry_with_a_packet_costs_its_payload_too() {
        for (payload, fits) in [(100, 8), (1000, 4), (10_000, 0)] {
            let mut q = ErrQueue::default();
            let mut n = 0;
            while push(&mut q, n, payload, 8192) {
                n += 1;
            }
            assert_eq!(n, fits, "{payload}-byte writes");
        }
        let mut q = ErrQueue::default();
        let bytes = Frags::from(bytes::Bytes::from_static(b"packet"));
        assert!(q.push_tstamp(ts(9), bytes.clone(), true, 6, 0, 8192));
        assert_eq!(
            q.pop(),
            Some((ErrQueueEntry::Timestamp(ts(9)), bytes, true))
        );
    }
}
