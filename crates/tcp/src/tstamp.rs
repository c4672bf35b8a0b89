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
//!   key reported (`ee_data`) is relative to the socket's first key with `OPT_ID`, else 0;
//! - with `OPT_STATS` each event also carries the connection's statistics at that moment
//!   ([`OptStats`], `tcp_get_timestamping_opt_stats`): the entry's bytes are their netlink
//!   blob, and with `SOFTWARE` they come as the `SCM_TIMESTAMPING_OPT_STATS` control
//!   message. Measured on 6.18 (python over loopback, 2026-11-28): `OPT_STATS` without
//!   `OPT_TSONLY` is EINVAL; 26 attributes on SCHED and SND, 27 on ACK (TTL, the ACK's
//!   TTL or hop limit), no `TCP_NLA_PAD`;
//! - `OPT_CMSG` adds `IP_PKTINFO`/`IPV6_PKTINFO` to an entry that holds the sent packet
//!   (not `OPT_TSONLY`, and only with `IP_PKTINFO`/`IPV6_RECVPKTINFO` set): with `OPT_TSONLY`
//!   it changes nothing (measured on 6.18 in both families), and an entry here is always
//!   `OPT_TSONLY`-shaped (the packet's bytes are not kept); `OPT_PKTINFO` adds
//!   `SCM_TIMESTAMPING_PKTINFO` only to data with a hardware receive stamp, so on a TCP
//!   socket with software stamps it changes nothing (measured: a read with
//!   `RX_SOFTWARE|SOFTWARE|OPT_PKTINFO|OPT_CMSG` has `SCM_TIMESTAMPING` only). Both flags
//!   are accepted and kept.

use crate::payload::Frags;
use crate::time::Instant;
use bytes::Bytes;
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
    /// The connection's statistics at that moment, with `SOF_TIMESTAMPING_OPT_STATS`
    /// (`SCM_TIMESTAMPING_OPT_STATS`; [`OptStats::encode`] gives Linux's bytes).
    pub stats: Option<OptStats>,
}

impl TxTimestamp {
    /// The statistics' netlink blob with `OPT_STATS`, else nothing: what an `OPT_TSONLY`
    /// entry's read returns as data (Linux's entry is then an skb holding only the stats,
    /// or empty). Without `OPT_TSONLY` the read returns the packet instead
    /// ([`crate::Stack::recv_errqueue_msg`]).
    pub fn payload(&self) -> Vec<u8> {
        self.stats.map(|s| s.encode()).unwrap_or_default()
    }
}

/// `TCP_NLA_*`: the attribute types of `SCM_TIMESTAMPING_OPT_STATS` (Linux's
/// `include/uapi/linux/tcp.h` numbering).
pub mod tcp_nla {
    /// Padding for 64-bit alignment (never emitted on 6.18 x86-64: measured).
    pub const PAD: u16 = 0;
    /// Time busy sending, µs.
    pub const BUSY: u16 = 1;
    /// Time limited by the receive window, µs.
    pub const RWND_LIMITED: u16 = 2;
    /// Time limited by the send buffer, µs.
    pub const SNDBUF_LIMITED: u16 = 3;
    /// Data segments sent, retransmissions included.
    pub const DATA_SEGS_OUT: u16 = 4;
    /// Segments retransmitted.
    pub const TOTAL_RETRANS: u16 = 5;
    /// Pacing rate, bytes/s.
    pub const PACING_RATE: u16 = 6;
    /// Delivery rate, bytes/s.
    pub const DELIVERY_RATE: u16 = 7;
    /// Congestion window, packets.
    pub const SND_CWND: u16 = 8;
    /// Reordering degree.
    pub const REORDERING: u16 = 9;
    /// Minimum RTT, µs.
    pub const MIN_RTT: u16 = 10;
    /// Retransmissions of the current head (`icsk_retransmits`).
    pub const RECUR_RETRANS: u16 = 11;
    /// The last delivery-rate sample was application-limited.
    pub const DELIVERY_RATE_APP_LMT: u16 = 12;
    /// Bytes written and not acknowledged (`write_seq - snd_una`).
    pub const SNDQ_SIZE: u16 = 13;
    /// Congestion-avoidance state (`icsk_ca_state`).
    pub const CA_STATE: u16 = 14;
    /// Slow-start threshold.
    pub const SND_SSTHRESH: u16 = 15;
    /// Packets delivered.
    pub const DELIVERED: u16 = 16;
    /// Packets delivered with a CE mark echoed.
    pub const DELIVERED_CE: u16 = 17;
    /// Data bytes sent, retransmissions included.
    pub const BYTES_SENT: u16 = 18;
    /// Data bytes retransmitted.
    pub const BYTES_RETRANS: u16 = 19;
    /// Segments the peer reported duplicate (D-SACK).
    pub const DSACK_DUPS: u16 = 20;
    /// Reordering events seen.
    pub const REORD_SEEN: u16 = 21;
    /// Smoothed RTT, µs.
    pub const SRTT: u16 = 22;
    /// Flow-label/hash changes after a timeout.
    pub const TIMEOUT_REHASH: u16 = 23;
    /// Bytes written and not sent (`write_seq - snd_nxt`).
    pub const BYTES_NOTSENT: u16 = 24;
    /// The buffer's departure time (`skb_mstamp_ns`), ns.
    pub const EDT: u16 = 25;
    /// The TTL or hop limit of the ACK that acknowledged the byte (ACK stamps only).
    pub const TTL: u16 = 26;
    /// Flow-hash changes in all (timeouts and PLB).
    pub const REHASH: u16 = 27;
}

/// The TCP statistics Linux attaches to a transmit timestamp with
/// `SOF_TIMESTAMPING_OPT_STATS` (`tcp_get_timestamping_opt_stats`): a snapshot of the
/// connection when the event is made. Most fields are `tcp_info`'s ([`crate::TcpInfo`]),
/// taken from it ([`OptStats::from_info`]). Encoded ([`OptStats::encode`]) as 6.18 does:
/// one netlink attribute (`nla_len`, `nla_type`, the value, padded to 4 bytes) each, in
/// the order of this struct's fields, u64 values without `TCP_NLA_PAD` (measured on 6.18
/// x86-64: 248 bytes for SCHED and SND, 256 for ACK, which adds TTL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OptStats {
    /// `TCP_NLA_BUSY`: `tcpi_busy_time`, µs.
    pub busy: u64,
    /// `TCP_NLA_RWND_LIMITED`: `tcpi_rwnd_limited`, µs.
    pub rwnd_limited: u64,
    /// `TCP_NLA_SNDBUF_LIMITED`: `tcpi_sndbuf_limited`, µs.
    pub sndbuf_limited: u64,
    /// `TCP_NLA_DATA_SEGS_OUT`: `tcpi_data_segs_out`.
    pub data_segs_out: u64,
    /// `TCP_NLA_TOTAL_RETRANS`: `tcpi_total_retrans`.
    pub total_retrans: u64,
    /// `TCP_NLA_PACING_RATE`: `sk_pacing_rate`, bytes/s (`u64::MAX` when unlimited).
    pub pacing_rate: u64,
    /// `TCP_NLA_DELIVERY_RATE`: `tcpi_delivery_rate`, bytes/s.
    pub delivery_rate: u64,
    /// `TCP_NLA_SND_CWND`.
    pub snd_cwnd: u32,
    /// `TCP_NLA_REORDERING`.
    pub reordering: u32,
    /// `TCP_NLA_MIN_RTT`: µs (`u32::MAX` before a sample).
    pub min_rtt: u32,
    /// `TCP_NLA_RECUR_RETRANS`: `icsk_retransmits`.
    pub recur_retrans: u8,
    /// `TCP_NLA_DELIVERY_RATE_APP_LMT`.
    pub delivery_rate_app_limited: bool,
    /// `TCP_NLA_SND_SSTHRESH`.
    pub snd_ssthresh: u32,
    /// `TCP_NLA_DELIVERED`.
    pub delivered: u32,
    /// `TCP_NLA_DELIVERED_CE`.
    pub delivered_ce: u32,
    /// `TCP_NLA_SNDQ_SIZE`: `write_seq - snd_una`.
    pub sndq_size: u32,
    /// `TCP_NLA_CA_STATE`.
    pub ca_state: u8,
    /// `TCP_NLA_BYTES_SENT`.
    pub bytes_sent: u64,
    /// `TCP_NLA_BYTES_RETRANS`.
    pub bytes_retrans: u64,
    /// `TCP_NLA_DSACK_DUPS`.
    pub dsack_dups: u32,
    /// `TCP_NLA_REORD_SEEN`.
    pub reord_seen: u32,
    /// `TCP_NLA_SRTT`: `srtt_us >> 3`, µs.
    pub srtt: u32,
    /// `TCP_NLA_TIMEOUT_REHASH`: retransmission timeouts that changed the flow hash (each
    /// RTO the connection survives, `sk_rethink_txhash`; Linux's u16 of its u32 counter).
    pub timeout_rehash: u16,
    /// `TCP_NLA_BYTES_NOTSENT`: `write_seq - snd_nxt`.
    pub bytes_notsent: u32,
    /// `TCP_NLA_EDT`: the buffer's earliest departure time at its last transmission
    /// (`skb_mstamp_ns`, Linux's `tcp_wstamp_ns` at the send: later than the send itself
    /// while pacing holds the flow back) on the substrate's clock, ns.
    pub edt: u64,
    /// `TCP_NLA_TTL`: the TTL / hop limit of the ACK that made an ACK stamp (absent on SCHED
    /// and SND: Linux has no ACK packet for them).
    pub ttl: Option<u8>,
    /// `TCP_NLA_REHASH`: flow-hash changes, `tcpi_rehash` (timeouts; Shallow has no PLB).
    pub rehash: u32,
}

/// An attribute's value as a netlink attribute carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NlaValue {
    /// `nla_put_u8`.
    U8(u8),
    /// `nla_put_u16`.
    U16(u16),
    /// `nla_put_u32`.
    U32(u32),
    /// `nla_put_u64_64bit`.
    U64(u64),
}

impl NlaValue {
    /// The value's size in bytes.
    pub fn size(self) -> usize {
        match self {
            NlaValue::U8(_) => 1,
            NlaValue::U16(_) => 2,
            NlaValue::U32(_) => 4,
            NlaValue::U64(_) => 8,
        }
    }

    /// The value widened.
    pub fn get(self) -> u64 {
        match self {
            NlaValue::U8(v) => v.into(),
            NlaValue::U16(v) => v.into(),
            NlaValue::U32(v) => v.into(),
            NlaValue::U64(v) => v,
        }
    }
}

/// The netlink attribute header's size (`NLA_HDRLEN`).
pub const NLA_HDRLEN: usize = 4;

/// A netlink blob's attributes: (type, `nla_len`, value bytes), stopping at the first
/// malformed header.
pub fn nla_attrs(blob: &[u8]) -> Vec<(u16, u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 0usize;
    while off + NLA_HDRLEN <= blob.len() {
        let len = u16::from_le_bytes([blob[off], blob[off + 1]]);
        let ty = u16::from_le_bytes([blob[off + 2], blob[off + 3]]);
        let l = usize::from(len);
        if l < NLA_HDRLEN || off + l > blob.len() {
            break;
        }
        out.push((ty, len, &blob[off + NLA_HDRLEN..off + l]));
        off += (l + 3) & !3;
    }
    out
}

impl OptStats {
    /// The snapshot from `tcp_info` (the one statement of each value's rule) and what
    /// `tcp_info` does not hold: the send queue, the timeouts that changed the flow hash, the
    /// buffer's departure time and the ACK's TTL.
    pub fn from_info(
        info: &crate::TcpInfo,
        sndq_size: u32,
        timeout_rehash: u32,
        edt: Instant,
        ttl: Option<u8>,
    ) -> OptStats {
        OptStats {
            busy: info.busy_time,
            rwnd_limited: info.rwnd_limited,
            sndbuf_limited: info.sndbuf_limited,
            data_segs_out: info.data_segs_out.into(),
            total_retrans: info.total_retrans.into(),
            pacing_rate: info.pacing_rate,
            delivery_rate: info.delivery_rate,
            snd_cwnd: info.snd_cwnd,
            reordering: info.reordering,
            min_rtt: info.min_rtt,
            recur_retrans: info.retransmits,
            delivery_rate_app_limited: info.delivery_rate_app_limited,
            snd_ssthresh: info.snd_ssthresh,
            delivered: info.delivered,
            delivered_ce: info.delivered_ce,
            sndq_size,
            ca_state: info.ca_state,
            bytes_sent: info.bytes_sent,
            bytes_retrans: info.bytes_retrans,
            dsack_dups: info.dsack_dups,
            reord_seen: info.reord_seen,
            srtt: info.rtt,
            timeout_rehash: timeout_rehash as u16,
            bytes_notsent: info.notsent_bytes,
            edt: edt.as_nanos(),
            ttl,
            rehash: info.rehash,
        }
    }

    /// The attributes in Linux 6.18's order (measured: SND_SSTHRESH, DELIVERED and
    /// DELIVERED_CE come before SNDQ_SIZE and CA_STATE; TTL only on ACK stamps).
    pub fn attrs(&self) -> Vec<(u16, NlaValue)> {
        use tcp_nla::*;
        use NlaValue::*;
        let mut v = vec![
            (BUSY, U64(self.busy)),
            (RWND_LIMITED, U64(self.rwnd_limited)),
            (SNDBUF_LIMITED, U64(self.sndbuf_limited)),
            (DATA_SEGS_OUT, U64(self.data_segs_out)),
            (TOTAL_RETRANS, U64(self.total_retrans)),
            (PACING_RATE, U64(self.pacing_rate)),
            (DELIVERY_RATE, U64(self.delivery_rate)),
            (SND_CWND, U32(self.snd_cwnd)),
            (REORDERING, U32(self.reordering)),
            (MIN_RTT, U32(self.min_rtt)),
            (RECUR_RETRANS, U8(self.recur_retrans)),
            (
                DELIVERY_RATE_APP_LMT,
                U8(u8::from(self.delivery_rate_app_limited)),
            ),
            (SND_SSTHRESH, U32(self.snd_ssthresh)),
            (DELIVERED, U32(self.delivered)),
            (DELIVERED_CE, U32(self.delivered_ce)),
            (SNDQ_SIZE, U32(self.sndq_size)),
            (CA_STATE, U8(self.ca_state)),
            (BYTES_SENT, U64(self.bytes_sent)),
            (BYTES_RETRANS, U64(self.bytes_retrans)),
            (DSACK_DUPS, U32(self.dsack_dups)),
            (REORD_SEEN, U32(self.reord_seen)),
            (SRTT, U32(self.srtt)),
            (TIMEOUT_REHASH, U16(self.timeout_rehash)),
            (BYTES_NOTSENT, U32(self.bytes_notsent)),
            (EDT, U64(self.edt)),
        ];
        if let Some(t) = self.ttl {
            v.push((TTL, U8(t)));
        }
        v.push((REHASH, U32(self.rehash)));
        v
    }

    /// The statistics a Linux `SCM_TIMESTAMPING_OPT_STATS` blob holds (the kernel's own
    /// sockets, read by `os`): each known attribute by its type, whatever the order; an
    /// attribute of another size, or an unknown one, is ignored; `None` when the blob holds
    /// no attribute at all.
    pub fn decode(blob: &[u8]) -> Option<OptStats> {
        use tcp_nla::*;
        let attrs = nla_attrs(blob);
        if attrs.is_empty() {
            return None;
        }
        let mut s = OptStats::default();
        for (ty, _, v) in attrs {
            let n = |size: usize| {
                (v.len() == size).then(|| {
                    let mut b = [0u8; 8];
                    b[..size].copy_from_slice(v);
                    u64::from_le_bytes(b)
                })
            };
            let (u64v, u32v, u16v, u8v) = (n(8), n(4).map(|x| x as u32), n(2), n(1));
            match ty {
                BUSY => s.busy = u64v.unwrap_or(s.busy),
                RWND_LIMITED => s.rwnd_limited = u64v.unwrap_or(s.rwnd_limited),
                SNDBUF_LIMITED => s.sndbuf_limited = u64v.unwrap_or(s.sndbuf_limited),
                DATA_SEGS_OUT => s.data_segs_out = u64v.unwrap_or(s.data_segs_out),
                TOTAL_RETRANS => s.total_retrans = u64v.unwrap_or(s.total_retrans),
                PACING_RATE => s.pacing_rate = u64v.unwrap_or(s.pacing_rate),
                DELIVERY_RATE => s.delivery_rate = u64v.unwrap_or(s.delivery_rate),
                SND_CWND => s.snd_cwnd = u32v.unwrap_or(s.snd_cwnd),
                REORDERING => s.reordering = u32v.unwrap_or(s.reordering),
                MIN_RTT => s.min_rtt = u32v.unwrap_or(s.min_rtt),
                RECUR_RETRANS => s.recur_retrans = u8v.map_or(s.recur_retrans, |x| x as u8),
                DELIVERY_RATE_APP_LMT => {
                    s.delivery_rate_app_limited =
                        u8v.map_or(s.delivery_rate_app_limited, |x| x != 0)
                }
                SND_SSTHRESH => s.snd_ssthresh = u32v.unwrap_or(s.snd_ssthresh),
                DELIVERED => s.delivered = u32v.unwrap_or(s.delivered),
                DELIVERED_CE => s.delivered_ce = u32v.unwrap_or(s.delivered_ce),
                SNDQ_SIZE => s.sndq_size = u32v.unwrap_or(s.sndq_size),
                CA_STATE => s.ca_state = u8v.map_or(s.ca_state, |x| x as u8),
                BYTES_SENT => s.bytes_sent = u64v.unwrap_or(s.bytes_sent),
                BYTES_RETRANS => s.bytes_retrans = u64v.unwrap_or(s.bytes_retrans),
                DSACK_DUPS => s.dsack_dups = u32v.unwrap_or(s.dsack_dups),
                REORD_SEEN => s.reord_seen = u32v.unwrap_or(s.reord_seen),
                SRTT => s.srtt = u32v.unwrap_or(s.srtt),
                TIMEOUT_REHASH => s.timeout_rehash = u16v.map_or(s.timeout_rehash, |x| x as u16),
                BYTES_NOTSENT => s.bytes_notsent = u32v.unwrap_or(s.bytes_notsent),
                EDT => s.edt = u64v.unwrap_or(s.edt),
                TTL => s.ttl = u8v.map(|x| x as u8).or(s.ttl),
                REHASH => s.rehash = u32v.unwrap_or(s.rehash),
                _ => {}
            }
        }
        Some(s)
    }

    /// The `SCM_TIMESTAMPING_OPT_STATS` bytes: each attribute as `nla_len` (header and
    /// value, unpadded), `nla_type`, the value little-endian, zero-padded to 4 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(256);
        for (ty, v) in self.attrs() {
            let len = NLA_HDRLEN + v.size();
            b.extend_from_slice(&(len as u16).to_le_bytes());
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(&v.get().to_le_bytes()[..v.size()]);
            b.resize((b.len() + 3) & !3, 0);
        }
        b
    }
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
    /// carried a marked byte: (packet seq, key, the packet's bytes for the entry).
    pub snd_pending: VecDeque<(u32, u32, ErrqBytes)>,
}

/// The bytes a timestamp entry carries without `OPT_TSONLY` (Linux queues a clone of the
/// skb): for SCHED and SND the packet as the device took it (IP and TCP headers and the
/// payload; the engine has no link-layer header, as a TUN has none), for ACK the acked
/// buffer's payload (measured on 6.18 over loopback: 1066 bytes for a 1000-byte write's
/// SCHED and SND there, with lo's 14-byte Ethernet header, and 1000 for its ACK). The entry
/// is charged `ERRQ_TRUESIZE` plus the payload (errqueue.rs).
#[derive(Clone, Debug, Default)]
pub(crate) struct ErrqBytes {
    /// The bytes, as pieces.
    pub data: Frags,
    /// The TCP payload among them (what the clone's truesize adds).
    pub payload: u32,
}

impl ErrqBytes {
    /// The packet the device took: `head` (its headers, or the whole packet) then `frags`.
    pub fn packet(head: &[u8], frags: &Frags, payload: u32) -> ErrqBytes {
        let mut data = Frags::from(Bytes::copy_from_slice(head));
        for p in frags.iter() {
            data.push(p.clone());
        }
        ErrqBytes { data, payload }
    }
}

/// How many SND timestamps may wait for TX completions (a substrate that never completes
/// costs no more than this; the oldest is forgotten).
pub(crate) const SND_PENDING_MAX: usize = 1024;

impl SockTstamp {
    /// An SND timestamp is owed at the completion of the packet starting at `seq`.
    pub fn owe_snd(&mut self, seq: u32, key: u32, bytes: ErrqBytes) {
        if self.snd_pending.len() >= SND_PENDING_MAX {
            self.snd_pending.pop_front();
        }
        self.snd_pending.push_back((seq, key, bytes));
    }

    /// An SND timestamp still owed for `key` (its packet's completion not yet reported),
    /// taken out, with its packet's bytes.
    pub fn take_snd_key(&mut self, key: u32) -> Option<(u32, ErrqBytes)> {
        let i = self.snd_pending.iter().position(|(_, k, _)| *k == key)?;
        self.snd_pending.remove(i).map(|(_, k, b)| (k, b))
    }

    /// The key whose SND timestamp the completion of the packet starting at `seq` brings,
    /// with the packet's bytes.
    pub fn take_snd(&mut self, seq: u32) -> Option<(u32, ErrqBytes)> {
        let i = self.snd_pending.iter().position(|(s, _, _)| *s == seq)?;
        self.snd_pending.remove(i).map(|(_, k, b)| (k, b))
    }

    /// Entries carry the packet's bytes (no `OPT_TSONLY`).
    pub fn wants_bytes(&self) -> bool {
        self.flags & sof::OPT_TSONLY == 0
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
        TxTimestamp {
            kind,
            key,
            time,
            stats: None,
        }
    }
}

/// What an event's statistics need beyond the connection: the marked buffer's departure
/// time, and for an ACK stamp the ACK's TTL and the packets delivered up to this buffer
/// (Linux counts each acked buffer delivered in `tcp_clean_rtx_queue` before
/// `tcp_ack_tstamp`: measured, DELIVERED is 2 on the ACK stamp of a connection's first
/// write).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StatsAt {
    /// The buffer's `skb_mstamp_ns`.
    pub edt: Instant,
    /// The ACK's TTL / hop limit.
    pub ttl: Option<u8>,
    /// `tp->delivered` as Linux has it at the stamp, when not the connection's yet.
    pub delivered: Option<u32>,
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
    /// (`__skb_complete_tx_timestamp` → `sock_queue_err_skb`). The marked buffer is still
    /// in the retransmit queue (SCHED, and SND at a TX completion).
    pub(crate) fn tstamp_event(
        &mut self,
        env: &mut crate::env::Env,
        kind: TstampKind,
        key: u32,
        now: Instant,
        bytes: ErrqBytes,
    ) {
        let edt = self
            .rtx
            .queue
            .iter()
            .find(|s| s.tstamp.is_some_and(|m| m.key == key))
            .map_or(Instant::ZERO, |s| s.edt);
        self.tstamp_event_at(
            env,
            kind,
            key,
            now,
            StatsAt {
                edt,
                ..Default::default()
            },
            bytes,
        );
    }

    /// [`Connection::tstamp_event`] for a buffer the ACK `at` describes (taken out of the
    /// retransmit queue: its departure time, the ACK's TTL, what it delivered so far).
    pub(crate) fn tstamp_event_at(
        &mut self,
        env: &mut crate::env::Env,
        kind: TstampKind,
        key: u32,
        now: Instant,
        at: StatsAt,
        bytes: ErrqBytes,
    ) {
        let (rmem, rcvbuf) = (self.mem.rmem_alloc, self.mem.rcvbuf);
        let mut ev = self.tstamp.event(kind, key, now);
        if self.tstamp.flags & sof::OPT_STATS != 0 {
            let mut info = self.tcp_info(env, now);
            if let Some(d) = at.delivered {
                info.delivered = d;
            }
            let sndq = self.snd.write_seq.wrapping_sub(self.snd.una);
            let rehash = self.stats.timeout_rehash();
            ev.stats = Some(OptStats::from_info(&info, sndq, rehash, at.edt, at.ttl));
        }
        // The entry's bytes: with OPT_TSONLY the statistics' blob or nothing, else the
        // packet's (or the acked buffer's) bytes, which its truesize counts.
        let packet = self.tstamp.wants_bytes() && kind != TstampKind::Ack && !bytes.data.is_empty();
        let (data, extra) = if self.tstamp.wants_bytes() {
            (bytes.data, bytes.payload)
        } else {
            let blob = ev.payload();
            (Frags::from(Bytes::from(blob)), 0)
        };
        if self.errq.push_tstamp(ev, data, packet, extra, rmem, rcvbuf) {
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

    /// The netlink layout 6.18 writes (measured: 248 bytes without TTL, 256 with; u8
    /// attributes `nla_len` 5, u16 6, padded to 4; u64 12 with no `TCP_NLA_PAD` before).
    #[test]
    fn opt_stats_encode_as_linux_netlink_attributes() {
        let st = OptStats {
            busy: 0x0102_0304_0506_0708,
            pacing_rate: u64::MAX,
            snd_cwnd: 10,
            recur_retrans: 3,
            delivery_rate_app_limited: true,
            ca_state: 4,
            timeout_rehash: 0x1234,
            edt: 5,
            rehash: 7,
            ..Default::default()
        };
        let b = st.encode();
        assert_eq!(b.len(), 248);
        assert_eq!(&b[..12], &[12, 0, 1, 0, 8, 7, 6, 5, 4, 3, 2, 1]);
        let a = nla_attrs(&b);
        assert_eq!(a.len(), 26);
        let get = |t: u16| a.iter().find(|x| x.0 == t).copied().unwrap();
        assert_eq!(get(tcp_nla::PACING_RATE).2, &[0xff; 8]);
        assert_eq!(get(tcp_nla::SND_CWND), (8, 8, &[10u8, 0, 0, 0][..]));
        assert_eq!(get(tcp_nla::RECUR_RETRANS), (11, 5, &[3u8][..]));
        assert_eq!(get(tcp_nla::DELIVERY_RATE_APP_LMT).2, &[1]);
        assert_eq!(get(tcp_nla::CA_STATE).2, &[4]);
        assert_eq!(get(tcp_nla::TIMEOUT_REHASH), (23, 6, &[0x34u8, 0x12][..]));
        assert_eq!(
            a.last().unwrap(),
            &(tcp_nla::REHASH, 8, &[7u8, 0, 0, 0][..])
        );
        // The padding after a u8 is zero.
        let at = b.windows(4).position(|w| w == [5, 0, 11, 0]).unwrap();
        assert_eq!(&b[at + 5..at + 8], &[0, 0, 0]);
        let with_ttl = OptStats {
            ttl: Some(64),
            ..st
        };
        let b = with_ttl.encode();
        assert_eq!(b.len(), 256);
        let a = nla_attrs(&b);
        assert_eq!(a[a.len() - 2], (tcp_nla::TTL, 5, &[64u8][..]));
        assert_eq!(OptStats::decode(&b), Some(with_ttl));
        assert_eq!(OptStats::decode(&st.encode()), Some(st));
        assert_eq!(OptStats::decode(&[]), None);
        // A truncated or malformed blob stops the walk, never panics.
        assert_eq!(nla_attrs(&b[..10]).len(), 0);
        assert_eq!(nla_attrs(&[3, 0, 1, 0, 0, 0]).len(), 0);
    }
}
