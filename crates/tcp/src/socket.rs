//! Socket state: [`TcpState`], the per-connection control block (`Connection`, its sub-states
//! defined in the files of their rules), the write-queue buffer (`Skb`) and the receive
//! buffers. The environment a socket acts on is `env.rs`'s `Env`. Logic lives in the other
//! modules as `impl Connection` blocks.

use crate::chrono::Chrono;
pub use crate::device::{RxTruesize, SKB_OVERHEAD};
use crate::env::Env;
use crate::info::ConnStats;
use crate::input::{AckState, RxOpt, SackCompress};
use crate::mem::SockMem;
use crate::mtu::{MssCache, Mtup};
use crate::output::{CwndUse, Pacing};
use crate::packet::{OutOpt, SegOut};
use crate::payload::Frags;
pub(crate) use crate::payload::SkbData;
use crate::rack::{Rack, Tlp};
use crate::rate::{RateState, TxRate};
use crate::recovery::{Prr, RtxQueue, Undo};
use crate::recv::{RcvRttEst, RcvSeq, RcvqSpace};
use crate::rtt::Rtt;
use crate::send::SndSeq;
use crate::stack::SockLock;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::timer::Timers;
use crate::SocketId;
use bytes::Bytes;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use shallow_cc::{CaState, CcState, CongestionControl};
use shallow_wire::TcpFlags;
use std::collections::VecDeque;

/// TCP states with Linux's numbering (`tcpi_state`, `/proc/net/tcp` `st`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TcpState {
    /// TCP_ESTABLISHED.
    Established = 1,
    /// TCP_SYN_SENT.
    SynSent = 2,
    /// TCP_SYN_RECV.
    SynRecv = 3,
    /// TCP_FIN_WAIT1.
    FinWait1 = 4,
    /// TCP_FIN_WAIT2.
    FinWait2 = 5,
    /// TCP_TIME_WAIT.
    TimeWait = 6,
    /// TCP_CLOSE.
    Close = 7,
    /// TCP_CLOSE_WAIT.
    CloseWait = 8,
    /// TCP_LAST_ACK.
    LastAck = 9,
    /// TCP_LISTEN.
    Listen = 10,
    /// TCP_CLOSING.
    Closing = 11,
}

impl TcpState {
    /// Linux's upper-case name, e.g. `"ESTABLISHED"`.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTABLISHED",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::FinWait1 => "FIN_WAIT1",
            TcpState::FinWait2 => "FIN_WAIT2",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
        }
    }
}

/// Address family of a socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// AF_INET.
    V4,
    /// AF_INET6: IPv6 peers, and IPv4 peers through IPv4-mapped addresses unless
    /// `IPV6_V6ONLY` is set (dual stack, see `dualstack.rs`).
    V6,
}

impl Family {
    pub(crate) fn unspecified(self) -> IpAddr {
        match self {
            Family::V4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::V6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        }
    }
    pub(crate) fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }
}

/// One data packet handed to the layers below TCP: the substrate must call
/// [`Stack::tx_complete`](crate::Stack::tx_complete) with it exactly once, when the packet
/// leaves the host (or is dropped there). Not `Clone`, so it cannot be completed twice.
#[derive(Debug, PartialEq, Eq)]
pub struct TxToken {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
    pub(crate) truesize: u32,
    /// First sequence number of the buffer sent (to find it for `skb_still_in_host_queue`).
    pub(crate) seq: u32,
    /// The packet is cut into wire segments below TCP ([`TxToken::split`]): it charges the
    /// segments' `truesize`, and its buffer's copy left the host at the cut.
    pub(crate) segmented: bool,
    /// The zero-copy completions (serials, inclusive) this copy holds until it completes
    /// (zerocopy.rs); a cut packet's last segment holds them.
    pub(crate) zc: Option<(u32, u32)>,
}

impl TxToken {
    /// Bytes this packet charges to its socket's `sk_wmem_alloc` until completion.
    pub fn truesize(&self) -> u32 {
        self.truesize
    }

    /// The tokens of the wire segments a qdisc cut this packet into (Linux's software GSO,
    /// `tcp_gso_segment`), one per segment of `payloads[i]` bytes, in order: each charges
    /// its own `truesize` (a segment is a new buffer: its small head plus its payload,
    /// [`SKB_TX_OVERHEAD`] + payload), released when that segment completes, as each
    /// segment's destructor does. The engine charged the sum at the transmit, having been
    /// told of the cut ([`TxGate::segments`](crate::TxGate::segments)); the last token
    /// takes whatever the sum and the charge differ by, so completing every token releases
    /// exactly the charge. A packet the engine was not told would be cut (`segmented`
    /// false) keeps one token, on the last segment. Completing a segment's token never marks
    /// the buffer's copy as gone: that happened at the cut.
    pub fn split(mut self, payloads: &[usize]) -> Vec<Option<TxToken>> {
        let n = payloads.len();
        if n == 0 {
            return Vec::new();
        }
        if !self.segmented {
            let mut v: Vec<Option<TxToken>> = (1..n).map(|_| None).collect();
            v.push(Some(self));
            return v;
        }
        let mut v: Vec<Option<TxToken>> = payloads[..n - 1]
            .iter()
            .map(|&p| self.take_segment(p))
            .collect();
        v.push(Some(self));
        v
    }

    /// Carves from a segmented packet's token ([`TxToken::split`]) the token of one of its
    /// wire segments, of `payload` bytes, in order; what is left stays for the later
    /// segments, the last of which completes this token itself. `None` for a token of a
    /// packet that is not cut.
    pub fn take_segment(&mut self, payload: usize) -> Option<TxToken> {
        if !self.segmented {
            return None;
        }
        let t = (SKB_TX_OVERHEAD.saturating_add(payload as u32)).min(self.truesize);
        self.truesize -= t;
        Some(TxToken {
            idx: self.idx,
            gen: self.gen,
            truesize: t,
            seq: self.seq,
            segmented: true,
            zc: None,
        })
    }
}

/// One outbound IP packet.
#[derive(Debug)]
pub struct Transmit {
    /// One IP packet; a TSO super-segment may exceed the MTU (its TCP checksum then left to
    /// the device if `DeviceCaps::tso_csum_offload` is on). When `frags` is not
    /// empty, only the packet's IP and TCP headers.
    pub data: Vec<u8>,
    /// The packet's payload, shared with the socket's send buffer instead of copied behind
    /// `data` (Linux's paged skb data, `skb_shinfo(skb)->frags`): the packet is `data`
    /// followed by the pieces of `frags`, almost always one; several when the bytes come
    /// from the application's buffers of zero-copy sends. Only data packets of a stack
    /// whose device does scatter-gather ([`crate::DeviceCaps::sg`]) carry any; otherwise
    /// empty. [`Transmit::linearize`] makes a packet contiguous.
    pub frags: Frags,
    /// Payload bytes per wire segment when `data` is a super-segment (None: one segment).
    pub gso_size: Option<u16>,
    /// Earliest departure time (EDT) for a pacing qdisc (`skb->tstamp`).
    pub departure: Option<Instant>,
    /// Some for data packets: call `tx_complete(token)` exactly once. None for pure ACKs/RSTs.
    pub token: Option<TxToken>,
    /// Flow hash for fq (stable per connection).
    pub flow: u32,
}

impl Transmit {
    /// Length of the IP packet in bytes (`data` and `frags`).
    pub fn len(&self) -> usize {
        self.data.len() + self.frags.len()
    }
    /// True for an empty packet (never: a packet has at least its headers).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Append `frags` to `data`, so that `data` is the whole packet (Linux `skb_linearize`).
    pub fn linearize(&mut self) {
        if !self.frags.is_empty() {
            std::mem::take(&mut self.frags).copy_to(&mut self.data);
        }
    }
}

/// poll(2) event bits (Linux values).
pub mod pollbits {
    /// Data to read.
    pub const POLLIN: u32 = 0x001;
    /// Urgent data.
    pub const POLLPRI: u32 = 0x002;
    /// Writable.
    pub const POLLOUT: u32 = 0x004;
    /// Error pending.
    pub const POLLERR: u32 = 0x008;
    /// Hang-up (both directions shut).
    pub const POLLHUP: u32 = 0x010;
    /// Normal data to read.
    pub const POLLRDNORM: u32 = 0x040;
    /// Priority band data.
    pub const POLLRDBAND: u32 = 0x080;
    /// Normal data writable.
    pub const POLLWRNORM: u32 = 0x100;
    /// Priority band writable.
    pub const POLLWRBAND: u32 = 0x200;
    /// Peer shut down writing.
    pub const POLLRDHUP: u32 = 0x2000;
}

/// A wake-up for the substrate: wake waiters on `socket` whose interest intersects `events`
/// (Linux `sk_data_ready` → POLLIN|POLLRDNORM, `sk_write_space` → POLLOUT|POLLWRNORM|POLLWRBAND,
/// `sk_state_change`/`sk_error_report` → all events). Level-triggered users re-poll;
/// edge-triggered users treat each wake-up as an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wakeup {
    /// The socket.
    pub socket: SocketId,
    /// poll bits of the wake-up ([`pollbits`]).
    pub events: u32,
}

/// Wake-up queue length beyond which wake-ups of one socket are merged.
pub const MAX_WAKEUPS: usize = 4096;

/// `sk_tsq_flags` bits (include/linux/tcp.h `enum tsq_enum`).
pub(crate) mod tsq {
    pub const THROTTLED: u8 = 1 << 0;
    pub const TSQ_DEFERRED: u8 = 1 << 2;
    pub const WRITE_TIMER_DEFERRED: u8 = 1 << 3;
    pub const DELACK_TIMER_DEFERRED: u8 = 1 << 4;
    pub const ACK_DEFERRED: u8 = 1 << 5;
}

/// `icsk_ack.pending` bits.
pub(crate) mod ackf {
    pub const SCHED: u8 = 1;
    pub const TIMER: u8 = 2;
    pub const PUSHED: u8 = 4;
    pub const PUSHED2: u8 = 8;
    pub const NOW: u8 = 16;
}

/// `TCP_SKB_CB(skb)->sacked` bits.
pub(crate) mod sacked {
    pub const ACKED: u8 = 1;
    pub const RETRANS: u8 = 2;
    pub const LOST: u8 = 4;
    pub const EVER_RETRANS: u8 = 8;
}

/// `TCP_RMEM_TO_WIN_SCALE`: the scaling ratio is payload per buffer byte in 1/256ths.
pub(crate) const TCP_RMEM_TO_WIN_SCALE: u32 = 8;

/// The scaling ratio a socket starts with (`TCP_DEFAULT_SCALING_RATIO`): half. Measured on
/// Linux 6.18: the SYN-ACK offers half of `tcp_rmem[1]` rounded down to the MSS
/// (65536 → 32120 = 22 × 1460, 87380 → 42340, 131072 → 64240) and the window right after
/// the handshake is half of it too (540000 → 268640 = 184 × 1460, 1000000 → 499320).
pub(crate) const TCP_DEFAULT_SCALING_RATIO: u8 = 128;

/// Accounting overhead of one transmit buffer (write and retransmit queues):
/// `truesize = payload + SKB_TX_OVERHEAD` for `wmem_queued` and `wmem_alloc`. 832 bytes is
/// what Linux 6.18 on x86-64 charges per TX skb (a 1-byte write leaves `SO_MEMINFO`
/// wmem_queued at 833; `crates/os/tests/kernel_reference.rs` measures it). Since
/// `sk_stream_memory_free` admits a new skb while `wmem_queued < sndbuf`, this figure decides
/// where a large non-blocking write stops.
pub const SKB_TX_OVERHEAD: u32 = 832;
/// `MAX_TCP_HEADER` (bytes reserved for headers in a TX skb). A kernel build constant
/// (`L1_CACHE_ALIGN(128 + MAX_HEADER)`, larger with tunnel or Hyper-V drivers built in):
/// 192 on this project's Linux 6.18, measured through `tcp_sndbuf_expand` — an established
/// connection's SO_SNDBUF is 2 · 10 · (2048 + 256) = 46080 while the peer's MSS is at most
/// 1536 and 2 · 10 · (4096 + 256) from 1537 on, so MSS + MAX_TCP_HEADER + 320 (the aligned
/// `skb_shared_info`) reaches 2048 exactly at 1536 (kernel recording `sndbuf-per-mss.pkt`).
/// The 576-byte small-head cache behind [`SKB_TX_OVERHEAD`] is 192 + 320 + 64 as well.
pub(crate) const MAX_TCP_HEADER: u32 = 192;
/// `sk_gso_max_size` for a 64 KiB GSO device: 65536 - (MAX_TCP_HEADER + 1).
pub(crate) const GSO_MAX_SIZE: u32 = 65536 - (MAX_TCP_HEADER + 1);
/// `GSO_MAX_SEGS`.
pub(crate) const GSO_MAX_SEGS: u32 = 65535;
/// `SOCK_MIN_SNDBUF` = 2 * TCP_SKB_MIN_TRUESIZE (2048 + aligned sk_buff).
pub(crate) const SOCK_MIN_SNDBUF: u32 = 2 * (2048 + 256);
/// `SOCK_MIN_RCVBUF`.
pub(crate) const SOCK_MIN_RCVBUF: u32 = 2048 + 256;
/// Initial RTO (RFC 6298 §2.1: 1 s).
pub(crate) const TCP_TIMEOUT_INIT: Duration = Duration::from_secs(1);
/// `TCP_ATO_MIN` / `TCP_DELACK_MIN`: 40 ms.
pub(crate) const TCP_ATO_MIN: Duration = Duration::from_millis(40);
/// `TCP_DELACK_MAX`: 200 ms.
pub(crate) const TCP_DELACK_MAX: Duration = Duration::from_millis(200);
/// `TCP_MAX_QUICKACKS`.
pub(crate) const TCP_MAX_QUICKACKS: u8 = 16;
/// `TCP_TIMEWAIT_LEN`: 60 s.
pub(crate) const TCP_TIMEWAIT_LEN: Duration = Duration::from_secs(60);
/// `tp->ecn_flags` bits (Linux `TCP_ECN_*`, RFC 3168 §6.1).
pub mod ecnf {
    /// ECN was negotiated on the handshake (`TCP_ECN_OK`).
    pub const OK: u8 = 1;
    /// Send CWR on the next new data segment (`TCP_ECN_QUEUE_CWR`).
    pub const QUEUE_CWR: u8 = 2;
    /// Echo ECE until the peer sends CWR (`TCP_ECN_DEMAND_CWR`).
    pub const DEMAND_CWR: u8 = 4;
}

/// `TCP_MSS_DEFAULT`.
pub(crate) const TCP_MSS_DEFAULT: u32 = 536;
/// `TCP_MIN_MSS`: the smallest MSS Linux accepts (88).
pub(crate) const TCP_MIN_MSS: u32 = 88;
/// `TCP_INIT_CWND`.
pub(crate) const TCP_INIT_CWND: u32 = 10;
/// `TCP_RESOURCE_PROBE_INTERVAL` / max probe interval: `TCP_RTO_MAX`.
pub(crate) const TCP_RTO_MAX: Duration = Duration::from_secs(120);

/// How many full skbs one write-queue allocation holds (see `Connection::carve_skb_buffer`).
pub(crate) const SKB_CARVE_CHUNK: usize = 4;

/// A buffer of the write or retransmit queue (Linux `struct sk_buff` + `tcp_skb_cb`).
#[derive(Debug)]
pub(crate) struct Skb {
    pub seq: u32,
    /// seq + payload + SYN + FIN.
    pub end_seq: u32,
    /// TCP flags to put on the segment (SYN/FIN/PSH; ACK is added at transmit).
    pub flags: TcpFlags,
    /// Payload (see [`SkbData`]).
    pub data: SkbData,
    /// Accounting size: payload + [`SKB_TX_OVERHEAD`].
    pub truesize: u32,
    /// MSG_EOR: never append to this skb.
    pub eor: bool,
    /// `sacked` bits.
    pub sacked: u8,
    /// Last transmit time (`skb_mstamp_ns`).
    pub mstamp: Instant,
    /// First transmit time, for tcp_info/undo.
    pub first_tx: Instant,
    /// The earliest departure time of its last transmission (`tcp_wstamp_ns` at the send:
    /// later than `mstamp` under pacing); `TCP_NLA_EDT` of its timestamps.
    pub edt: Instant,
    /// Number of wire segments (tcp_skb_pcount), set when sent.
    pub pcount: u32,
    /// Copies of this skb still in host queues (for `skb_still_in_host_queue`).
    pub in_host: u16,
    /// The delivery snapshot of its last transmission (`TCP_SKB_CB(skb)->tx`, rate.rs).
    pub tx: TxRate,
    /// The transmit-timestamp request of the last write that ended in it (tstamp.rs).
    pub tstamp: Option<crate::tstamp::TsMark>,
    /// It holds bytes of a zero-copy send (zerocopy.rs): the serial of that send's
    /// completion. Such a buffer is never merged with a neighbour (`tcp_skb_can_collapse`).
    pub zc: Option<u32>,
    /// The application's buffers appended to it by zero-copy sends, in pages (at most
    /// `net.core.max_skb_frags`).
    pub frags: u8,
}

impl Skb {
    pub fn new(seq: u32, flags: TcpFlags) -> Skb {
        let fl = u32::from(flags.intersects(TcpFlags::SYN | TcpFlags::FIN));
        Skb {
            seq,
            end_seq: seq.wrapping_add(fl),
            flags,
            data: SkbData::default(),
            truesize: SKB_TX_OVERHEAD,
            eor: false,
            sacked: 0,
            mstamp: Instant::ZERO,
            first_tx: Instant::ZERO,
            edt: Instant::ZERO,
            pcount: 0,
            in_host: 0,
            tx: TxRate::default(),
            tstamp: None,
            zc: None,
            frags: 0,
        }
    }
    pub fn len(&self) -> u32 {
        self.data.len() as u32
    }
}

/// A received in-order segment waiting for recv().
#[derive(Debug)]
pub(crate) struct RxSkb {
    #[allow(dead_code)]
    pub seq: u32,
    /// The unread bytes.
    pub data: RxData,
    pub fin: bool,
    pub truesize: u32,
    /// When its last segment arrived (`skb->tstamp`), kept only while the socket asks for
    /// receive timestamps ([`Connection::rx_stamping`]); a segment coalesced into the buffer
    /// brings its own time (`tcp_try_coalesce`).
    pub tstamp: Option<Instant>,
}

/// The bytes of one receive-queue buffer, as pieces in order (Linux's linear area and page
/// fragments of an skb). Bytes copied from a contiguous packet go into an owned piece that
/// grows as later segments coalesce into the buffer; bytes a substrate handed over as
/// `Bytes` (a paged packet, [`crate::Stack::handle_packet`] with [`crate::RxBytes::Paged`]) are kept as they came, uncopied.
#[derive(Debug, Default)]
pub(crate) struct RxData {
    /// The front piece, kept inline: a buffer nearly always has one piece, which then
    /// costs no allocation besides its bytes.
    front: Option<RxPiece>,
    /// The pieces after the front one, in order.
    more: VecDeque<RxPiece>,
    /// Bytes of the front piece already read.
    head_off: usize,
    /// Unread bytes in all pieces.
    len: usize,
}

#[derive(Debug)]
enum RxPiece {
    Owned(Vec<u8>),
    Shared(Bytes),
}

impl RxPiece {
    fn as_slice(&self) -> &[u8] {
        match self {
            RxPiece::Owned(v) => v,
            RxPiece::Shared(b) => b,
        }
    }
}

impl RxData {
    /// Unread bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// The last piece.
    fn back_mut(&mut self) -> Option<&mut RxPiece> {
        match self.more.back_mut() {
            Some(p) => Some(p),
            None => self.front.as_mut(),
        }
    }
    /// Appends a piece.
    fn push_piece(&mut self, p: RxPiece) {
        if self.front.is_none() {
            self.front = Some(p);
        } else {
            self.more.push_back(p);
        }
    }
    /// The pieces in order.
    fn pieces(&self) -> impl Iterator<Item = &RxPiece> {
        self.front.iter().chain(self.more.iter())
    }
    /// Append a copy of `d`.
    pub fn push_slice(&mut self, d: &[u8]) {
        if d.is_empty() {
            return;
        }
        self.len += d.len();
        if let Some(RxPiece::Owned(v)) = self.back_mut() {
            v.extend_from_slice(d);
        } else {
            self.push_piece(RxPiece::Owned(d.to_vec()));
        }
    }
    /// Append `b` without copying it.
    pub fn push_bytes(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.push_piece(RxPiece::Shared(b));
    }
    /// Append `d`, shared when `shared` holds it (see [`crate::packet::SegIn::share`]), else copied.
    pub fn push(&mut self, d: &[u8], shared: Option<Bytes>) {
        match shared {
            Some(b) => self.push_bytes(b),
            None => self.push_slice(d),
        }
    }
    /// Copy the first unread bytes into `out` without consuming them; returns how many.
    pub fn peek(&self, out: &mut [u8]) -> usize {
        let mut n = 0;
        let mut skip = self.head_off;
        for p in self.pieces() {
            if n == out.len() {
                break;
            }
            let d = &p.as_slice()[skip..];
            skip = 0;
            let k = d.len().min(out.len() - n);
            out[n..n + k].copy_from_slice(&d[..k]);
            n += k;
        }
        n
    }
    /// Consume up to `want` unread bytes, copying them into `out` when given (which must
    /// then hold `want`); returns how many were consumed.
    pub fn read(&mut self, mut out: Option<&mut [u8]>, want: usize) -> usize {
        let mut n = 0;
        while n < want {
            let Some(p) = self.front.as_ref() else {
                break;
            };
            let d = &p.as_slice()[self.head_off..];
            let k = d.len().min(want - n);
            if let Some(o) = out.as_deref_mut() {
                o[n..n + k].copy_from_slice(&d[..k]);
            }
            n += k;
            if k == d.len() {
                self.front = self.more.pop_front();
                self.head_off = 0;
            } else {
                self.head_off += k;
            }
        }
        self.len -= n;
        n
    }
}

/// An out-of-order segment (RFC 9293 §3.10.7.4 queueing).
#[derive(Debug)]
pub(crate) struct OfoSkb {
    pub seq: u32,
    /// End of the payload (the FIN, if any, is one more: [`OfoSkb::sack_end`]).
    pub end_seq: u32,
    pub data: Bytes,
    pub fin: bool,
    pub truesize: u32,
    /// When it arrived, as [`RxSkb::tstamp`].
    pub tstamp: Option<Instant>,
}

impl OfoSkb {
    /// The end of the sequence space the segment occupies, FIN included, as a SACK block
    /// reports it (Linux's `end_seq`).
    pub fn sack_end(&self) -> u32 {
        self.end_seq.wrapping_add(u32::from(self.fin))
    }
}

/// Listener state: SYN queue (children in SYN_RECV) and accept queue.
#[derive(Debug, Default)]
pub(crate) struct Listen {
    pub backlog: u32,
    /// Children in SYN_RECV (`reqsk` queue length).
    pub syn_queue: Vec<SocketId>,
    /// Established children waiting for accept().
    pub accept_queue: VecDeque<SocketId>,
    /// Children of a forwarding listener whose SYN waits for the application's decision
    /// (`ForwardVerdict::Defer`), not yet taken by `Stack::forward_request` (`stack/forward.rs`).
    pub requests: VecDeque<SocketId>,
    /// Fast Open children whose handshake is not complete (`fastopenq.qlen`).
    pub tfo_qlen: u32,
    /// When each Fast Open child reset before its handshake completed stops counting in
    /// `tfo_qlen` (`fastopenq.rskq_rst_head`, [`crate::fastopen::RST_HOLD`]).
    pub tfo_rst: VecDeque<crate::time::Instant>,
}

/// Where a forwarded connection whose SYN the application decides on stands
/// (`stack/forward.rs`): the SYN is held, unanswered, until `Stack::forward_complete`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferral {
    /// Held, in its listener's request queue.
    Waiting,
    /// Taken by the application (no longer the listener's), still unanswered.
    Claimed,
    /// Taken and accepted: the SYN-ACK is out; once established the connection is the
    /// application's socket (it never enters the accept queue).
    Answered,
}

/// Route attributes that matter to TCP (`ip route ... mtu N advmss N initcwnd N quickack 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RouteAttrs {
    /// Path MTU (0 = the interface MTU, 1500).
    pub mtu: u32,
    /// Advertised MSS (0 = derived from the MTU).
    pub advmss: u32,
    /// Initial cwnd in packets (0 = TCP_INIT_CWND 10).
    pub initcwnd: u32,
    /// Initial receive window in packets (0 = default).
    pub initrwnd: u32,
    /// ACK every segment at once (`dst_quick_ack`).
    pub quickack: bool,
    /// RTO minimum override in ms (0 = sysctl).
    pub rto_min_ms: u32,
}

/// Socket options kept per socket.
#[derive(Clone, Debug)]
pub(crate) struct SockOpts {
    pub nodelay: bool,
    pub cork: bool,
    pub keepalive: bool,
    pub keepidle: Option<u32>,
    pub keepintvl: Option<u32>,
    pub keepcnt: Option<u32>,
    pub linger: Option<u32>,
    pub rcvlowat: u32,
    pub reuseaddr: bool,
    pub reuseport: bool,
    pub user_timeout_ms: u32,
    pub syn_retries: Option<u32>,
    pub notsent_lowat: u32,
    /// IP_TOS (`inet->tos`): the TOS byte of IPv4 packets, those of an AF_INET6 socket
    /// with an IPv4-mapped peer included.
    pub tos: u8,
    /// IPV6_TCLASS (`np->tclass`): the traffic class of IPv6 packets (IP_TOS does not
    /// change it, nor IPV6_TCLASS the TOS byte: measured on Linux 6.18).
    pub tclass: u8,
    /// IP_MTU_DISCOVER (`inet->pmtudisc`): IP_PMTUDISC_DONT (0) … OMIT (5); default
    /// IP_PMTUDISC_WANT (1). Governs IPv4 paths.
    pub pmtudisc: u8,
    /// IPV6_MTU_DISCOVER (`np->pmtudisc`), the same values for IPv6 paths.
    pub pmtudisc6: u8,
    pub user_mss: u32,
    pub sndbuf_lock: bool,
    pub rcvbuf_lock: bool,
    pub inq: bool,
    pub nonblock: bool,
    /// IPV6_V6ONLY (`sk_ipv6only`): an AF_INET6 socket that refuses IPv4-mapped peers;
    /// initialised from `net.ipv6.bindv6only`.
    pub v6only: bool,
    /// `TCP_FASTOPEN`: the listener's Fast Open queue length (`fastopenq.max_qlen`; 0: off).
    pub fastopen_qlen: u32,
    /// `TCP_FASTOPEN_CONNECT`: connect() defers the SYN to the first write when a cookie is
    /// cached.
    pub fastopen_connect: bool,
    /// `TCP_FASTOPEN_NO_COOKIE`: data in the SYN without a cookie (either side).
    pub fastopen_no_cookie: bool,
    /// `TCP_FASTOPEN_KEY`: the listener's own keys.
    pub fastopen_key: Option<crate::fastopen::Keys>,
    /// `SO_ZEROCOPY` (`SOCK_ZEROCOPY`): `MSG_ZEROCOPY` sends share the application's
    /// buffers (zerocopy.rs).
    pub zerocopy: bool,
    /// `SO_MARK` (`sk_mark`).
    pub mark: u32,
    /// `SO_OOBINLINE` (`SOCK_URGINLINE`): the urgent byte stays in the stream (urg.rs).
    pub oobinline: bool,
    /// `IP_FREEBIND`: bind() to an address the host does not have.
    pub freebind: bool,
    /// `SO_TIMESTAMP` or `SO_TIMESTAMPNS` is on (`SOCK_RCVTSTAMP`).
    pub rcvtstamp: bool,
    /// `SO_TIMESTAMPNS` is on (`SOCK_RCVTSTAMPNS`): nanoseconds, not microseconds.
    pub rcvtstampns: bool,
    /// `SOCK_TSTAMP_NEW`: the last of the timestamp options set was a `_NEW` one, so
    /// control messages carry 64-bit times (`SCM_TIMESTAMP_NEW`, `SCM_TIMESTAMPNS_NEW`,
    /// `SCM_TIMESTAMPING_NEW`).
    pub tstamp_new: bool,
    /// `IP_PKTINFO` (IPv4 packets' control messages; errqueue.rs).
    pub pktinfo: bool,
    /// `IPV6_RECVPKTINFO` (IPv6 packets').
    pub pktinfo6: bool,
    /// `SO_BUSY_POLL` (`sk_ll_usec`): how long a blocking read polls the device itself
    /// before it sleeps, in µs (0: never); initialised from `net.core.busy_read`. The
    /// engine keeps it; a substrate that reads a device does the polling.
    pub busy_poll_us: u32,
    /// `SO_PREFER_BUSY_POLL` (`sk_prefer_busy_poll`): while the socket busy-polls, the
    /// device's own receive processing (the I/O thread, Linux's interrupts) stands aside.
    pub prefer_busy_poll: bool,
    /// `SO_BUSY_POLL_BUDGET` (`sk_busy_poll_budget`): packets per poll of the device (0:
    /// the default, 8).
    pub busy_poll_budget: u16,
}

impl Default for SockOpts {
    fn default() -> Self {
        SockOpts {
            nodelay: false,
            cork: false,
            keepalive: false,
            keepidle: None,
            keepintvl: None,
            keepcnt: None,
            linger: None,
            rcvlowat: 1,
            reuseaddr: false,
            reuseport: false,
            user_timeout_ms: 0,
            syn_retries: None,
            notsent_lowat: 0,
            tos: 0,
            tclass: 0,
            pmtudisc: 1,
            pmtudisc6: 1,
            user_mss: 0,
            sndbuf_lock: false,
            rcvbuf_lock: false,
            inq: false,
            nonblock: false,
            v6only: false,
            fastopen_qlen: 0,
            fastopen_connect: false,
            fastopen_no_cookie: false,
            fastopen_key: None,
            zerocopy: false,
            mark: 0,
            oobinline: false,
            freebind: false,
            rcvtstamp: false,
            rcvtstampns: false,
            tstamp_new: false,
            pktinfo: false,
            pktinfo6: false,
            busy_poll_us: 0,
            prefer_busy_poll: false,
            busy_poll_budget: 0,
        }
    }
}

/// `sk_shutdown` bits.
pub(crate) const RCV_SHUTDOWN: u8 = 1;
pub(crate) const SEND_SHUTDOWN: u8 = 2;

/// One TCP socket (Linux `struct tcp_sock` with its `inet_connection_sock` and `sock`).
/// Its state is grouped by what it is, each group defined in the file of the rules that
/// change it (Linux's counterpart in brackets); a group's fields are private to that file
/// when its rules live there, and `pub(crate)` where every part of TCP reads and writes
/// them as Linux's `tcp_sock` fields, which its doc comment says.
pub(crate) struct Connection {
    // --- the socket (`sock`, `inet_sock`): identity, addresses, the application's view
    /// Slot in the stack's socket table.
    pub id: SocketId,
    /// Generation of the slot (a stale id or timer names an older one).
    pub gen: u32,
    /// AF_INET or AF_INET6.
    pub family: Family,
    /// TCP state (`sk_state`).
    pub state: TcpState,
    /// Local address and port on the wire.
    pub local: SocketAddr,
    /// Remote address and port on the wire.
    pub remote: SocketAddr,
    /// Has a local port.
    pub bound: bool,
    /// Port bound explicitly by bind() (vs auto-bound by connect()).
    pub userlocks_port: bool,
    /// Address bound explicitly by bind() (`SOCK_BINDADDR_LOCK`): kept when a closed
    /// socket connects again; otherwise the source address is chosen afresh.
    pub userlocks_addr: bool,
    /// In the 4-tuple demux table.
    pub hashed: bool,
    /// The application has closed its handle (`SOCK_DEAD` / orphan).
    pub orphan: bool,
    /// Listener state (SYN and accept queues), for a socket in LISTEN.
    pub listen: Option<Box<Listen>>,
    /// Listener this child belongs to until accept().
    pub parent: Option<(SocketId, u32)>,
    /// A forwarded connection whose SYN the application decides on (`stack/forward.rs`).
    pub deferral: Option<Deferral>,
    /// TCP Fast Open (fastopen.rs).
    pub fastopen: crate::fastopen::ConnFastOpen,
    /// Transmit timestamping (tstamp.rs).
    pub tstamp: crate::tstamp::SockTstamp,
    /// The error queue (errqueue.rs): timestamps and zero-copy completions.
    pub errq: crate::errqueue::ErrQueue,
    /// Zero-copy sends not yet completed (zerocopy.rs).
    pub zc: crate::zerocopy::SockZc,
    /// The receive side's urgent mark (urg.rs).
    pub urg: crate::urg::RcvUrg,
    /// TCP-MD5 keys (md5.rs; `md5sig_info`): `None` until the first `TCP_MD5SIG`, so a
    /// socket without keys pays one test per packet.
    pub md5: Option<Box<crate::md5::Md5Keys>>,
    /// Socket options.
    pub opts: SockOpts,
    /// The route's attributes in use.
    pub route: RouteAttrs,
    /// A route change not yet picked up: applied at the next transmit, as Linux revalidates
    /// the cached dst in `ip_queue_xmit` (`__sk_dst_check`).
    pub route_pending: Option<RouteAttrs>,
    /// `sk_err` (reported once by SO_ERROR / the next call).
    pub err: Option<Errno>,
    /// `sk_err_soft`: the last soft error (ICMP), reported if the connection times out.
    pub err_soft: Option<Errno>,
    /// `sk_shutdown` bits ([`RCV_SHUTDOWN`], [`SEND_SHUTDOWN`]).
    pub shutdown: u8,
    /// SOCK_NOSPACE: a writer saw no space; wake it on write space.
    pub nospace: bool,
    /// This socket is counted in [`Env::rx_tstamp_users`] (recv.rs `rx_stamp_sync`).
    pub rx_stamp_counted: bool,
    /// `sock->state == SS_CONNECTING`: a connect() is in progress or failed unreported.
    pub connecting: bool,
    /// `sk_write_pending`: a blocking writer waits for the handshake (a send on a blocking
    /// socket in SYN_SENT, or a Fast Open sendto with data left for after it). The SYN-ACK's
    /// ACK then waits for that data (`tcp_rcv_synsent_state_process`).
    pub write_pending: bool,
    /// A lingering `close()` waits until this time (SO_LINGER, `sk_stream_wait_close`);
    /// meanwhile the socket is closed but not yet orphaned.
    pub linger_until: Option<Instant>,
    /// Socket ownership and the backlog (`sk_lock`, `sk_backlog`, stack/api.rs).
    pub lock: SockLock,
    /// The socket's buffers and their memory accounting (mem.rs).
    pub mem: SockMem,
    /// `sk_tsq_flags`: bits of [`tsq`] (TSQ throttling, work deferred to `release_sock`).
    pub tsq_flags: u8,

    // --- sequence spaces, queues and options
    /// Send sequence space and the write queue (RFC 9293 §3.3.1, send.rs).
    pub snd: SndSeq,
    /// The retransmit queue and its SACK scoreboard (recovery.rs).
    pub rtx: RtxQueue,
    /// Receive sequence space, the offered window and the receive queues (recv.rs).
    pub rcv: RcvSeq,
    /// Options negotiated on the handshake and the timestamp state (`rx_opt`, input.rs).
    pub rx_opt: RxOpt,
    /// The segment sizes in use (mtu.rs).
    pub mss: MssCache,
    /// MTU probing (`icsk_mtup`, mtu.rs).
    pub mtup: Mtup,

    // --- output
    /// Pacing and TSO autosizing (output.rs).
    pub pacing: Pacing,
    /// How much of cwnd the flow used (`tcp_cwnd_validate`, output.rs).
    pub cwnd_use: CwndUse,
    /// Send-side chronographs (`tcp_chrono_*`, chrono.rs).
    pub chrono: Chrono,

    // --- input: ACKs we send
    /// Delayed-ACK state (`icsk_ack`).
    pub ack: AckState,
    /// SACK compression (input.rs).
    pub sack_compress: SackCompress,
    /// Last time we answered an invalid segment (`last_oow_ack_time`).
    pub last_oow_ack: Instant,

    // --- congestion control and loss recovery (`icsk_ca_*`, the state every part reads)
    /// The congestion-control algorithm (`icsk_ca_ops`).
    pub cc: Box<dyn CongestionControl>,
    /// The algorithm's state and what the engine fills in for it (cwnd, ssthresh, …).
    pub cc_st: CcState,
    /// The congestion state machine's state (`icsk_ca_state`).
    pub ca_state: CaState,
    /// SND.NXT when recovery or loss began (`high_seq`).
    pub high_seq: u32,
    /// Reordering degree in segments (`tp->reordering`).
    pub reordering: u32,
    /// `tp->ecn_flags` (RFC 3168): bits of [`ecnf`].
    pub ecn_flags: u8,
    /// PRR counters of the current reduction (recovery.rs).
    pub prr: Prr,
    /// What undoing a reduction needs (recovery.rs).
    pub undo: Undo,
    /// `tp->rack` (rack.rs).
    pub rack: Rack,
    /// The tail loss probe's episode (rack.rs).
    pub tlp: Tlp,
    /// Delivery-rate estimation (tcp_rate.c, rate.rs).
    pub rate: RateState,

    // --- RTT, timers and activity
    /// RTT estimator and RTO (rtt.rs).
    pub rtt: Rtt,
    /// Receiver RTT estimate (`rcv_rtt_est`, recv.rs).
    pub rcv_rtt: RcvRttEst,
    /// Autotuning's per-RTT measurement (`rcvq_space`, recv.rs).
    pub rcvq: RcvqSpace,
    /// The connection's timers and their retry bookkeeping (timer.rs).
    pub timer: Timers,
    /// Last time data was sent (`lsndtime`).
    pub lsndtime: Instant,
    /// Last time data was received (`icsk_ack.lrcvtime` as `tcp_info` reports it).
    pub lrcvtime: Instant,
    /// Last time an ACK was received (`rcv_tstamp`).
    pub rcv_tstamp: Instant,
    /// Counters `tcp_info` reports (info.rs).
    pub stats: ConnStats,
}

use crate::Errno;

impl Connection {
    pub fn new(id: SocketId, gen: u32, family: Family, env: &Env) -> Connection {
        let wmem = env.config.sysctl.triple(Sysctl::tcp_wmem);
        let rmem = env.config.sysctl.triple(Sysctl::tcp_rmem);
        let cc = shallow_cc::by_name(
            env.config.sysctl.str(Sysctl::tcp_congestion_control),
            &env.config.cc_params,
        )
        .or_else(|| shallow_cc::by_name("reno", &env.config.cc_params))
        .expect("reno is always available");
        let unspec = SocketAddr::new(family.unspecified(), 0);
        Connection {
            id,
            gen,
            family,
            state: TcpState::Close,
            local: unspec,
            remote: unspec,
            bound: false,
            userlocks_port: false,
            userlocks_addr: false,
            hashed: false,
            orphan: false,
            listen: None,
            parent: None,
            deferral: None,
            fastopen: Default::default(),
            tstamp: Default::default(),
            errq: Default::default(),
            zc: Default::default(),
            urg: Default::default(),
            md5: None,
            opts: SockOpts {
                v6only: family == Family::V6 && env.config.sysctl.on(Sysctl::bindv6only),
                busy_poll_us: env.sysint(Sysctl::busy_read).clamp(0, i64::from(i32::MAX)) as u32,
                ..SockOpts::default()
            },
            route: RouteAttrs::default(),
            err: None,
            err_soft: None,
            shutdown: 0,
            nospace: false,
            rx_stamp_counted: false,
            sack_compress: SackCompress::default(),
            connecting: false,
            write_pending: false,
            tsq_flags: 0,
            route_pending: None,
            mtup: Mtup::default(),
            cc,
            cc_st: CcState::default(),
            ca_state: CaState::Open,
            undo: Undo::default(),
            high_seq: 0,
            reordering: env.sysint(Sysctl::tcp_reordering) as u32,
            prr: Prr::default(),
            ecn_flags: 0,
            tlp: Tlp::default(),
            rtt: Rtt::default(),
            lsndtime: Instant::ZERO,
            lrcvtime: Instant::ZERO,
            rcv_tstamp: Instant::ZERO,
            rack: Rack::default(),
            linger_until: None,
            ack: AckState {
                pending: 0,
                quick: 0,
                pingpong: 0,
                ato: Duration::ZERO,
                timeout: Instant::ZERO,
                lrcvtime: Instant::ZERO,
                rcv_mss: TCP_MSS_DEFAULT,
                last_seg_size: 0,
            },
            rcvq: RcvqSpace::default(),
            rcv_rtt: RcvRttEst::default(),
            last_oow_ack: Instant::ZERO,
            stats: ConnStats::default(),
            chrono: Chrono::default(),
            rate: RateState::default(),
            mem: SockMem::new(wmem[1] as u32, rmem[1] as u32),
            rx_opt: RxOpt {
                tstamp_ok: false,
                sack_ok: false,
                wscale_ok: false,
                dsack_ok: false,
                snd_wscale: 0,
                rcv_wscale: 0,
                mss_clamp: TCP_MSS_DEFAULT,
                ts_recent: 0,
                ts_recent_stamp: Instant::ZERO,
                rcv_tsecr: 0,
                ts_offset: 0,
            },
            timer: Timers::new(),
            snd: SndSeq {
                iss: 0,
                una: 0,
                nxt: 0,
                write_seq: 0,
                pushed_seq: 0,
                up: 0,
                sml: 0,
                wnd: 0,
                wl1: 0,
                max_window: 0,
                write_queue: VecDeque::new(),
            },
            rtx: RtxQueue {
                syn_acked_sampled: false,
                queue: VecDeque::new(),
                packets_out: 0,
                sacked_out: 0,
                lost_out: 0,
                retrans_out: 0,
                delivered: 0,
                highest_sack_end: 0,
                sack_seen_any: false,
            },
            rcv: RcvSeq {
                irs: 0,
                nxt: 0,
                wup: 0,
                wnd: 0,
                copied_seq: 0,
                window_clamp: 0,
                ssthresh: 0,
                scaling_ratio: TCP_DEFAULT_SCALING_RATIO,
                rx_queue: VecDeque::new(),
                ofo_queue: Vec::new(),
                fin_received: false,
                sacks: Vec::new(),
                dsack: None,
            },
            mss: MssCache::default(),
            cwnd_use: CwndUse::default(),
            pacing: Pacing::default(),
            lock: SockLock::default(),
        }
    }

    pub fn snd_cwnd(&self) -> u32 {
        self.cc_st.snd_cwnd
    }

    /// `tcp_packets_in_flight()`: packets_out - (sacked_out + lost_out) + retrans_out.
    pub fn packets_in_flight(&self) -> u32 {
        self.rtx.in_flight()
    }

    /// TCP timestamp clock value for `now` (ms clock + per-connection offset).
    pub fn tsval(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.rx_opt.ts_offset)
    }

    /// `tcp_notsent_lowat`: per-socket value or the sysctl.
    pub fn notsent_lowat(&self, env: &Env) -> u32 {
        if self.opts.notsent_lowat != 0 {
            self.opts.notsent_lowat
        } else {
            env.sysint(Sysctl::tcp_notsent_lowat) as u32
        }
    }

    /// `sk_wmem_alloc` as Linux compares it: bytes below TCP plus the reference bias of 1
    /// (`SK_WMEM_ALLOC_BIAS`), so one queued packet of size X counts as "more than X".
    pub fn wmem_alloc_biased(&self) -> u32 {
        self.mem.wmem_alloc + 1
    }

    /// Unsent bytes in the write queue (`write_seq - snd_nxt`).
    pub fn notsent_bytes(&self) -> u32 {
        let n = self.snd.write_seq.wrapping_sub(self.snd.nxt) as i32;
        n.max(0) as u32
    }

    /// `tcp_stream_memory_free(sk, wake)`: `(notsent << wake) < lowat`. The extension sysctl
    /// `shallow.tcp_notsent_lowat_wake_half = 0` drops the shift (wake at X, not X/2).
    pub fn stream_memory_free(&self, env: &Env, wake: u32) -> bool {
        let wake = if env
            .config
            .sysctl
            .on(Sysctl::shallow_tcp_notsent_lowat_wake_half)
        {
            wake
        } else {
            0
        };
        (self.notsent_bytes() << wake) < self.notsent_lowat(env)
    }

    /// `__sk_stream_memory_free(sk, wake)`.
    /// Also false while a send-side TCP memory allocation failed and no queued byte has
    /// been freed since (`mem_wait`; Linux sleeps a short random time instead).
    pub fn sk_stream_memory_free(&self, env: &Env, wake: u32) -> bool {
        !self.mem.waiting()
            && self.mem.wmem_queued < self.mem.sndbuf
            && self.stream_memory_free(env, wake)
    }

    /// `__sk_stream_is_writeable(sk, wake)`: wspace >= wmem_queued/2 && memory free.
    pub fn stream_is_writeable(&self, env: &Env, wake: u32) -> bool {
        let wspace = self.mem.sndbuf as i64 - self.mem.wmem_queued as i64;
        wspace >= (self.mem.wmem_queued / 2) as i64 && self.sk_stream_memory_free(env, wake)
    }

    /// `sk_stream_closing`: our FIN is sent but not yet acknowledged.
    pub fn stream_closing(&self) -> bool {
        matches!(
            self.state,
            TcpState::FinWait1 | TcpState::Closing | TcpState::LastAck
        )
    }

    pub fn is_synchronized(&self) -> bool {
        !matches!(
            self.state,
            TcpState::Close | TcpState::Listen | TcpState::SynSent
        )
    }

    /// Sequence-space receive window still offered (`tcp_receive_window`).
    pub fn receive_window(&self) -> u32 {
        let w = self
            .rcv
            .wup
            .wrapping_add(self.rcv.wnd)
            .wrapping_sub(self.rcv.nxt) as i32;
        w.max(0) as u32
    }

    /// `tcp_win_from_space` (Linux 6.6+): the share of buffer space usable for payload,
    /// `space × scaling_ratio / 256`. `tcp_adv_win_scale` no longer plays a part (measured:
    /// setting it to 2 leaves every window of the 540000-byte scenario unchanged).
    pub fn win_from_space(&self, space: i64) -> i64 {
        (space * i64::from(self.rcv.scaling_ratio)) >> TCP_RMEM_TO_WIN_SCALE
    }

    /// `tcp_space_from_win`: the buffer that yields a window of `win` at the current ratio.
    pub fn space_from_win(&self, win: u64) -> u64 {
        (win << TCP_RMEM_TO_WIN_SCALE) / u64::from(self.rcv.scaling_ratio.max(1))
    }

    /// `tcp_space`: window we could offer now.
    pub fn tcp_space(&self, _env: &Env) -> i64 {
        self.win_from_space(
            self.mem.rcvbuf as i64 - self.lock.backlog_len as i64 - self.mem.rmem_alloc as i64,
        )
    }

    /// `tcp_full_space`.
    pub fn full_space(&self, _env: &Env) -> i64 {
        self.win_from_space(self.mem.rcvbuf as i64)
    }

    /// IPv4/IPv6 header length of the connection's packets: of the wire, not of the
    /// socket's family (an AF_INET6 socket with an IPv4-mapped peer sends IPv4 packets, as
    /// Linux's `ipv6_mapped` operations do: `net_header_len` is an IPv4 header's).
    pub fn ip_hdr_len(&self) -> u32 {
        if self.local.is_ipv4() {
            20
        } else {
            40
        }
    }

    /// Build the header fields shared by all segments of this connection.
    pub fn seg<'a>(
        &self,
        env: &mut Env,
        seq: u32,
        flags: TcpFlags,
        window: u16,
        opts: &'a [OutOpt],
        payload: crate::payload::Payload<'a>,
    ) -> SegOut<'a> {
        let (flags, urgent) = self.urg_mark(seq, flags);
        SegOut {
            urgent,
            local: self.local,
            remote: self.remote,
            seq,
            ack: if flags.intersects(TcpFlags::ACK) {
                self.rcv.nxt
            } else {
                0
            },
            flags,
            window,
            tos: if self.local.is_ipv4() {
                self.opts.tos
            } else {
                self.opts.tclass
            },
            ttl: 64,
            ident: env.limits.next_ident(),
            opts,
            payload,
            md5: self.md5_key(),
        }
    }
}

#[cfg(test)]
mod writable_tests {
    use super::*;

    /// a74f0fa082b7: with lowat X, writers may fill to X (wake=0) but are woken only below X/2
    /// (wake=1); the Shallow extension switch restores waking at X.
    #[test]
    fn notsent_lowat_wake_half_and_its_switch() {
        let mut env = Env::new(1);
        let mut s = Connection::new(SocketId(0), 1, Family::V4, &env);
        s.opts.notsent_lowat = 4000;
        s.snd.nxt = 1000;
        s.snd.write_seq = 1000 + 3000; // 3000 unsent: X/2 <= notsent < X
        assert!(s.stream_memory_free(&env, 0), "may queue more");
        assert!(!s.stream_memory_free(&env, 1), "not woken at 3000 >= X/2");
        env.config
            .sysctl
            .set("shallow.tcp_notsent_lowat_wake_half", "0")
            .unwrap();
        assert!(
            s.stream_memory_free(&env, 1),
            "woken below X with the switch off"
        );
        s.snd.write_seq = 1000 + 4000;
        assert!(!s.stream_memory_free(&env, 1));
    }
}
