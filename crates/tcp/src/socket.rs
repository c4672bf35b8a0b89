//! Socket state: [`TcpState`], the per-connection control block (`Connection`), the write-queue
//! buffer (`Skb`) and the environment a socket acts on (`Env`: sysctls, counters, output
//! queue, wake-ups, timer set, RNG). Logic lives in the other modules as `impl Connection` blocks.

use crate::chrono::Chrono;
use crate::device::DeviceCaps;
pub use crate::device::{RxTruesize, SKB_OVERHEAD};
use crate::gate::{TxGate, TxMeta};
use crate::input::SackCompress;
use crate::mib::{Counters, Mib};
use crate::mtu::Mtup;
use crate::packet::{self, OutOpt, SegOut};
use crate::rack::{Rack, Tlp};
use crate::rate::{RateState, TxRate};
use crate::recovery::{Prr, Undo};
use crate::recv::{RcvRttEst, RcvqSpace};
use crate::rtt::Rtt;
use crate::sysctl::{Sysctl, Sysctls};
use crate::time::Instant;
use crate::timer::Probes;
use crate::SocketId;
use bytes::{Bytes, BytesMut};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use core::time::Duration;
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shallow_cc::{CaState, CcState, CongestionControl};
use shallow_wire::TcpFlags;
use std::collections::{BTreeSet, VecDeque};

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
}

impl TxToken {
    /// Bytes this packet charges to its socket's `sk_wmem_alloc` until completion.
    pub fn truesize(&self) -> u32 {
        self.truesize
    }
}

/// One outbound IP packet.
#[derive(Debug)]
pub struct Transmit {
    /// One IP packet; a TSO super-segment may exceed the MTU (its TCP checksum then left to
    /// the device if `DeviceCaps::tso_csum_offload` is on). When `frag` is not
    /// empty, only the packet's IP and TCP headers.
    pub data: Vec<u8>,
    /// The packet's payload, shared with the socket's send buffer instead of copied behind
    /// `data` (Linux's paged skb data): the packet is `data` followed by `frag`. Only data
    /// packets of a stack whose device does scatter-gather ([`crate::DeviceCaps::sg`]) carry
    /// one; otherwise empty. [`Transmit::linearize`] makes a packet contiguous.
    pub frag: Bytes,
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
    /// Length of the IP packet in bytes (`data` and `frag`).
    pub fn len(&self) -> usize {
        self.data.len() + self.frag.len()
    }
    /// True for an empty packet (never: a packet has at least its headers).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Append `frag` to `data`, so that `data` is the whole packet (Linux `skb_linearize`).
    pub fn linearize(&mut self) {
        if !self.frag.is_empty() {
            self.data.extend_from_slice(&self.frag);
            self.frag = Bytes::new();
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

/// Per-socket timers. Linux multiplexes several events on the retransmit timer
/// (`icsk_pending`); so do we ([`RtxEvent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// RTO, SYN/SYN-ACK retransmit, zero-window probe, TLP, RACK reordering timer.
    Retrans = 0,
    /// Delayed ACK.
    Delack = 1,
    /// Keepalive; also FIN_WAIT2 and TIME_WAIT expiry (Linux uses the keepalive timer / tw timer).
    Keepalive = 2,
    /// Compressed-SACK hrtimer (`tcp_compressed_ack_kick`).
    CompSack = 3,
}
pub(crate) const NTIMERS: usize = 4;

/// What the retransmit timer is armed for (`icsk_pending`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RtxEvent {
    Rto,
    Probe0,
    LossProbe,
    ReoTimeout,
}

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
/// `MAX_TCP_HEADER` (bytes reserved for headers in a TX skb).
pub(crate) const MAX_TCP_HEADER: u32 = 320;
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
/// One jiffy of the judge kernel, which is built with CONFIG_HZ=250.
pub(crate) const JIFFY: Duration = Duration::from_millis(4);
/// `TCP_TIMEOUT_MIN`: two jiffies (8 ms at HZ=250), the floor of a zero-window probe
/// clamped to TCP_USER_TIMEOUT and the slack of the loss-probe and RACK timers
/// ([`tick_timer_delay`]).
pub(crate) const TCP_TIMEOUT_MIN: Duration = Duration::from_millis(8);

/// How long after arming a Linux timer in level 0 of the timer wheel (armed less than 63
/// jiffies ahead) fires: a jiffy timer fires on a tick, so the delay is a whole number of
/// ticks less the time since the tick before arming. Measured on the loss-probe
/// (`tcp_schedule_loss_probe`, x = 2*srtt with more than one packet out) and RACK
/// reordering timers (`tcp_rack_reo_timeout`, x = the time left in the reordering window);
/// the delayed-ACK timer follows the same rule (40 ms ACKs 4.7–7.7 ms late in the
/// differential fuzzer's kernel recordings). Measured on 6.18 (HZ=250)
/// with packetdrill: the timer fires on the n-th tick after arming with
/// n = ceil((x - 2 ms) / 4 ms) + 2 (CUBIC; RACK with x = 10, 15, 20, 22.5, 25, 26, 30, 40,
/// 50 ms: n = 5, 6, 7, 8, 8, 9, 10, 12, 15, the same in every run; loss probe with x = 2.2,
/// 6.2, 10.2, 20.2, 40.3, 60.5, 100.6 ms: n = 3, 4, 5, 7, 12, 17 or 18, 27 or 28; shifting
/// the send in 1 ms steps moved the firing tick by one jiffy every 4 ms). The engine has no
/// tick grid, so it takes the mean over the phase: n ticks less half a jiffy.
pub(crate) fn tick_timer_delay(x: Duration) -> Duration {
    let j = JIFFY.as_nanos() as u64;
    let y = (x.as_nanos() as u64).saturating_sub(2_000_000);
    let n = y.div_ceil(j) + 2;
    Duration::from_nanos(n * j - j / 2)
}

/// How much later than its deadline a Linux timer on the jiffy timer wheel fires, on average
/// over the tick phase. The wheel keeps a timer armed `d` jiffies ahead in level 0 (one-tick
/// buckets) when d < 63, and otherwise in the level n whose buckets of 8^n jiffies start at
/// 63·8^(n-1) jiffies; a timer fires when its bucket does, at the first bucket boundary after
/// its deadline, so a level-n timer is late by up to 8^n jiffies (32 ms for 252 ms–2 s, 256 ms
/// for 2–16 s at HZ=250), half that on average. Measured on 6.18: retransmission and
/// persist timers of 300 and 600 ms fire 8–28 ms late, always on the same 32 ms grid
/// (crates/drill/scripts/kernel/: rto-retransmit-backoff, zero-window-probe,
/// cork-then-uncork). Zero in level 0 (see [`tick_timer_delay`]). The engine has no tick
/// grid, so it takes the mean: a timer's
/// error stays within half a bucket instead of growing with every rearm from a late firing.
/// When a Linux delayed-ACK timer armed `x` ahead fires, on average: it is armed for
/// d = ceil(x / jiffy) jiffies from the current jiffy and fires on the (d+1)-th tick after
/// arming, so (d + 1/2) jiffies later on average. Measured on 6.18 (HZ=250) with a 40 ms
/// delayed ACK repeated at 117.3 ms intervals: 5 of 6 ACKs left on the 11th tick after the
/// data (1.2–4.0 ms late, the tick grid's phase read off the ACK times), the first on the
/// 12th (7.7 ms late).
pub(crate) fn delack_timer_delay(x: Duration) -> Duration {
    let j = JIFFY.as_nanos() as u64;
    let d = (x.as_nanos() as u64).div_ceil(j);
    Duration::from_nanos(d * j + j / 2)
}

/// When a Linux timer-wheel timer armed `delay` ahead fires, on average: level 0 by the
/// measured tick rule ([`tick_timer_delay`]), the levels above half a bucket late
/// ([`wheel_slack`]). The one place the engine applies the kernel's timer granularity.
pub(crate) fn wheel_delay(delay: Duration) -> Duration {
    let slack = wheel_slack(delay);
    if slack.is_zero() {
        tick_timer_delay(delay)
    } else {
        delay + slack
    }
}

pub(crate) fn wheel_slack(delay: Duration) -> Duration {
    let j = JIFFY.as_nanos() as u64;
    let jiffies = (delay.as_nanos() as u64).div_ceil(j);
    let (mut gran, mut start) = (1u64, 63u64);
    while jiffies >= start && gran < 1 << 24 {
        gran *= 8;
        start *= 8;
    }
    if gran == 1 {
        return Duration::ZERO;
    }
    Duration::from_nanos(gran * j / 2)
}

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
    /// Number of wire segments (tcp_skb_pcount), set when sent.
    pub pcount: u32,
    /// Copies of this skb still in host queues (for `skb_still_in_host_queue`).
    pub in_host: u16,
    /// The delivery snapshot of its last transmission (`TCP_SKB_CB(skb)->tx`, rate.rs).
    pub tx: TxRate,
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
            pcount: 0,
            in_host: 0,
            tx: TxRate::default(),
        }
    }
    pub fn len(&self) -> u32 {
        self.data.len() as u32
    }
}

/// An skb's payload. Splitting (`tcp_fragment`), trimming acked bytes (`tcp_trim_head`) and
/// moving bytes between neighbours (`tcp_grow_skb`) share the buffer instead of copying it.
/// It is writable (`Open`) while it waits in the write queue; once handed to a device with
/// scatter-gather (`DeviceCaps::sg`) it is `Sent`: shared with the packet, read-only, still
/// split and trimmed without a copy (Linux writes no page of a cloned skb either).
#[derive(Debug)]
pub(crate) enum SkbData {
    /// Not yet shared: appendable, joinable with the neighbour it was carved next to.
    Open(BytesMut),
    /// Shared with packets a device may still hold.
    Sent(Bytes),
}

impl Default for SkbData {
    fn default() -> SkbData {
        SkbData::Open(BytesMut::new())
    }
}

impl core::ops::Deref for SkbData {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            SkbData::Open(b) => b,
            SkbData::Sent(b) => b,
        }
    }
}

impl SkbData {
    /// Split off the bytes from `at` on (`at` at most the length).
    pub fn split_off(&mut self, at: usize) -> SkbData {
        match self {
            SkbData::Open(b) => SkbData::Open(b.split_off(at)),
            SkbData::Sent(b) => SkbData::Sent(b.split_off(at)),
        }
    }
    /// Split off the first `at` bytes (`at` at most the length).
    pub fn split_to(&mut self, at: usize) -> SkbData {
        match self {
            SkbData::Open(b) => SkbData::Open(b.split_to(at)),
            SkbData::Sent(b) => SkbData::Sent(b.split_to(at)),
        }
    }
    /// Drop the first `n` bytes (at most the length).
    pub fn advance(&mut self, n: usize) {
        match self {
            SkbData::Open(b) => bytes::Buf::advance(b, n),
            SkbData::Sent(b) => bytes::Buf::advance(b, n),
        }
    }
    /// Append `d` (to a copy of the bytes if they were shared).
    pub fn extend_from_slice(&mut self, d: &[u8]) {
        match self {
            SkbData::Open(b) => b.extend_from_slice(d),
            SkbData::Sent(b) => {
                let mut m = BytesMut::with_capacity(b.len() + d.len());
                m.extend_from_slice(b);
                m.extend_from_slice(d);
                *self = SkbData::Open(m);
            }
        }
    }
    /// Append `other`: free when both were carved next to each other from one buffer and
    /// neither was sent, else a copy.
    pub fn unsplit(&mut self, other: SkbData) {
        match (&mut *self, other) {
            (SkbData::Open(b), SkbData::Open(o)) => b.unsplit(o),
            (_, o) => self.extend_from_slice(&o),
        }
    }
    /// The unused room after the bytes, split off as a new buffer if it holds `want` bytes
    /// (see `Connection::carve_skb_buffer`); never from sent bytes.
    pub fn spare(&mut self, want: usize) -> Option<BytesMut> {
        match self {
            SkbData::Open(b) if b.capacity() - b.len() >= want => Some(b.split_off(b.len())),
            _ => None,
        }
    }
    /// The bytes as a share for a packet; from now on they are read-only.
    pub fn share(&mut self) -> Bytes {
        let b = match std::mem::take(self) {
            SkbData::Open(b) => b.freeze(),
            SkbData::Sent(b) => b,
        };
        *self = SkbData::Sent(b.clone());
        b
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
}

/// The bytes of one receive-queue buffer, as pieces in order (Linux's linear area and page
/// fragments of an skb). Bytes copied from a contiguous packet go into an owned piece that
/// grows as later segments coalesce into the buffer; bytes a substrate handed over as
/// `Bytes` (a paged packet, [`crate::Stack::handle_packet`] with [`crate::RxBytes::Paged`]) are kept as they came, uncopied.
#[derive(Debug, Default)]
pub(crate) struct RxData {
    pieces: VecDeque<RxPiece>,
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
    /// Append a copy of `d`.
    pub fn push_slice(&mut self, d: &[u8]) {
        if d.is_empty() {
            return;
        }
        self.len += d.len();
        if let Some(RxPiece::Owned(v)) = self.pieces.back_mut() {
            v.extend_from_slice(d);
        } else {
            self.pieces.push_back(RxPiece::Owned(d.to_vec()));
        }
    }
    /// Append `b` without copying it.
    pub fn push_bytes(&mut self, b: Bytes) {
        if b.is_empty() {
            return;
        }
        self.len += b.len();
        self.pieces.push_back(RxPiece::Shared(b));
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
        for p in &self.pieces {
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
            let Some(p) = self.pieces.front() else {
                break;
            };
            let d = &p.as_slice()[self.head_off..];
            let k = d.len().min(want - n);
            if let Some(o) = out.as_deref_mut() {
                o[n..n + k].copy_from_slice(&d[..k]);
            }
            n += k;
            if k == d.len() {
                self.pieces.pop_front();
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
    pub end_seq: u32,
    pub data: Bytes,
    pub fin: bool,
    pub truesize: u32,
}

/// Listener state: SYN queue (children in SYN_RECV) and accept queue.
#[derive(Debug, Default)]
pub(crate) struct Listen {
    pub backlog: u32,
    /// Children in SYN_RECV (`reqsk` queue length).
    pub syn_queue: Vec<SocketId>,
    /// Established children waiting for accept().
    pub accept_queue: VecDeque<SocketId>,
}

/// Delayed-ACK engine state (`icsk_ack`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckState {
    pub pending: u8,
    pub quick: u8,
    pub pingpong: u8,
    /// Delayed-ACK timeout. Zero until the first data segment arrives (`tcp_event_data_recv`
    /// sets TCP_ATO_MIN): Linux 6.18 reports tcpi_ato 0 after the handshake, so an ACK
    /// delayed before any data (a bare FIN in pingpong) leaves at once.
    pub ato: Duration,
    pub timeout: Instant,
    pub lrcvtime: Instant,
    pub rcv_mss: u32,
    pub last_seg_size: u32,
}

/// The shared environment of all sockets of one stack.
/// What became of a segment the engine emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emitted {
    /// Queued for the substrate.
    Sent,
    /// Refused by the device side (NET_XMIT_DROP, [`Env::admit`]).
    Refused,
    /// Could not be built (mixed address families; a bug guard).
    Unbuilt,
}

impl Emitted {
    pub fn sent(self) -> bool {
        self == Emitted::Sent
    }
}

/// What every socket of one stack shares, grouped by what it is. Sockets get it as `&mut Env`
/// beside themselves (the split borrow of `Stack::sk_env`).
pub(crate) struct Env {
    // --- configuration
    /// The sysctl table.
    pub sysctl: Sysctls,
    /// Congestion-control module parameters.
    pub cc_params: shallow_cc::CcParams,
    /// Per-socket bound of the RTT-sample log; 0 = not recording (the default).
    pub rtt_log_cap: usize,
    // --- the device side
    /// What the device below can do (`DeviceCaps`).
    pub dev: DeviceCaps,
    /// The device side's admission rule (`crate::gate`): a packet it refuses fails with
    /// NET_XMIT_DROP, which TCP sees as a local error (`__tcp_transmit_skb` enters CWR,
    /// `tcp_write_xmit` keeps the data queued, a retransmission is not one in flight). `None`
    /// accepts everything; [`DropAll`](crate::gate::DropAll) is `pfifo limit 0`.
    pub gate: Option<Box<dyn TxGate>>,
    // --- time
    /// The latest time the stack was given (for events noticed without a `now`).
    pub clock: Instant,
    /// Armed timers: (deadline, socket slot, generation, kind).
    pub timers: BTreeSet<(Instant, u32, u32, TimerKind)>,
    // --- outputs and host-wide state
    /// What waits for the substrate.
    pub out: Outputs,
    /// Host-wide TCP memory (`mem.rs`).
    pub mem: HostMem,
    /// SNMP counters.
    pub mib: Counters,
    /// The IPv4 identification counter.
    pub ip_ident: u16,
    /// Challenge-ACK rate limiter: (second, count) (RFC 5961 §7).
    pub challenge: (u64, u32),
    // --- keyed randomness (from the stack's seed only)
    /// The stack's random stream.
    pub rng: ChaCha8Rng,
    /// The secret of its keyed hashes (ISNs, timestamp offsets, flow hashes, tables).
    pub key: (u64, u64),
}

/// The engine's outputs waiting for the substrate (`Stack::poll_transmit`,
/// `Stack::poll_wakeup`).
#[derive(Default)]
pub(crate) struct Outputs {
    /// Packets to transmit, in order.
    pub txq: VecDeque<Transmit>,
    /// Socket wake-ups, merged per socket (`Env::wake`).
    pub wakeups: VecDeque<Wakeup>,
}

/// Host-wide TCP memory accounting (Linux's `tcp_memory_allocated`, `tcp_memory_pressure`,
/// `tcp_sockets_allocated`), against `net.ipv4.tcp_mem` (`mem.rs`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct HostMem {
    /// Global TCP memory in pages (`tcp_memory_allocated`).
    pub allocated: i64,
    /// Under TCP memory pressure (`tcp_memory_pressure`).
    pub pressure: bool,
    /// When pressure was entered (for `TcpExtTCPMemoryPressuresChrono`).
    pub pressure_since: Instant,
    /// Live TCP sockets (`tcp_sockets_allocated`; our TIME_WAIT sockets are full sockets).
    pub sockets: u32,
}

impl Env {
    pub fn new(seed: u64) -> Env {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let key = (rng.next_u64(), rng.next_u64());
        Env {
            sysctl: Sysctls::default(),
            cc_params: shallow_cc::CcParams::default(),
            rtt_log_cap: 0,
            dev: DeviceCaps::default(),
            gate: None,
            clock: Instant::ZERO,
            timers: BTreeSet::new(),
            out: Outputs::default(),
            mem: HostMem {
                allocated: 0,
                pressure: false,
                pressure_since: Instant::ZERO,
                sockets: 0,
            },
            mib: Counters::default(),
            ip_ident: 0,
            challenge: (u64::MAX, 0),
            rng,
            key,
        }
    }

    /// Queue a wake-up, merging with the previous one for the same socket. If the substrate
    /// lets the queue grow past [`MAX_WAKEUPS`], wake-ups merge per socket (level-triggered
    /// waiters lose nothing; edge-triggered ones see fewer edges).
    pub fn wake(&mut self, socket: SocketId, events: u32) {
        if let Some(last) = self.out.wakeups.back_mut() {
            if last.socket == socket {
                last.events |= events;
                return;
            }
        }
        if self.out.wakeups.len() >= MAX_WAKEUPS {
            if let Some(w) = self.out.wakeups.iter_mut().find(|w| w.socket == socket) {
                w.events |= events;
                return;
            }
        }
        self.out.wakeups.push_back(Wakeup { socket, events });
    }

    pub fn sysint(&self, s: Sysctl) -> i64 {
        self.sysctl.int(s)
    }

    /// Keyed hash (SipHash-1-3) over the connection 4-tuple, for ISNs and TS offsets.
    pub fn hash4(&self, local: SocketAddr, remote: SocketAddr, salt: u8) -> u64 {
        use core::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write_u8(salt);
        match local.ip() {
            IpAddr::V4(a) => h.write(&a.octets()),
            IpAddr::V6(a) => h.write(&a.octets()),
        }
        match remote.ip() {
            IpAddr::V4(a) => h.write(&a.octets()),
            IpAddr::V6(a) => h.write(&a.octets()),
        }
        h.write_u16(local.port());
        h.write_u16(remote.port());
        h.finish()
    }

    /// The device side's verdict on a packet about to be transmitted (`crate::gate`): the one
    /// place where a local drop (NET_XMIT_DROP) is decided.
    pub fn admit(&mut self, meta: &TxMeta) -> bool {
        self.gate.as_mut().is_none_or(|g| g.admit(meta))
    }

    /// The flow hash of a connection (`skb->hash`, fq's key): [`Transmit::flow`].
    pub fn flow_hash(&self, local: SocketAddr, remote: SocketAddr) -> u32 {
        (self.hash4(local, remote, 3) & 0xffff_ffff) as u32
    }

    /// Build and queue a segment, after asking the device side ([`Env::admit`]).
    pub fn emit(
        &mut self,
        seg: &SegOut<'_>,
        gso_size: Option<u16>,
        departure: Option<Instant>,
        token: Option<TxToken>,
    ) -> Emitted {
        self.emit_inner(seg, None, gso_size, departure, token, false)
    }

    /// [`Env::emit`] for a segment whose payload (`seg.payload`) is `frag`'s bytes: when the
    /// device does scatter-gather, the packet carries a share of them instead of a copy.
    /// `admitted`: the caller already had the packet admitted ([`Env::admit`], with the
    /// length [`packet::header_len`] gives), so it is not asked again.
    pub fn emit_frag(
        &mut self,
        seg: &SegOut<'_>,
        frag: Option<Bytes>,
        gso_size: Option<u16>,
        departure: Option<Instant>,
        token: Option<TxToken>,
        admitted: bool,
    ) -> Emitted {
        self.emit_inner(seg, frag, gso_size, departure, token, admitted)
    }

    fn emit_inner(
        &mut self,
        seg: &SegOut<'_>,
        frag: Option<Bytes>,
        gso_size: Option<u16>,
        departure: Option<Instant>,
        token: Option<TxToken>,
        admitted: bool,
    ) -> Emitted {
        let flow = self.flow_hash(seg.local, seg.remote);
        if !admitted {
            let header_len = packet::header_len(seg);
            let meta = TxMeta {
                flow,
                len: header_len + seg.payload.len(),
                header_len,
                gso_size,
                tos: seg.tos,
                departure,
                now: self.clock,
            };
            if !self.admit(&meta) {
                return Emitted::Refused;
            }
        }
        let partial = self.dev.tso_csum_offload
            && gso_size.is_some_and(|g| g > 0 && seg.payload.len() > usize::from(g));
        // `frag` must be the very bytes of `seg.payload` (a share of the same buffer).
        let frag = frag.filter(|f| {
            self.dev.sg
                && !f.is_empty()
                && f.as_ptr() == seg.payload.as_ptr()
                && f.len() == seg.payload.len()
        });
        match packet::build_with(seg, partial, frag.is_some()) {
            Some(data) => {
                self.mib.inc(Mib::OutSegs);
                self.out.txq.push_back(Transmit {
                    data,
                    frag: frag.unwrap_or_default(),
                    gso_size,
                    departure,
                    token,
                    flow,
                });
                Emitted::Sent
            }
            None => Emitted::Unbuilt,
        }
    }

    pub fn next_ident(&mut self) -> u16 {
        self.ip_ident = self.ip_ident.wrapping_add(1);
        self.ip_ident
    }

    /// RFC 5961 §7 / Linux `tcp_send_challenge_ack` global limit: true if one may be sent now.
    pub fn challenge_ack_allowed(&mut self, now: Instant) -> bool {
        let limit = self.sysint(Sysctl::tcp_challenge_ack_limit);
        if limit >= i32::MAX as i64 {
            return true;
        }
        let sec = now.as_nanos() / 1_000_000_000;
        if self.challenge.0 != sec {
            self.challenge = (sec, 0);
        }
        if i64::from(self.challenge.1) < limit {
            self.challenge.1 += 1;
            true
        } else {
            false
        }
    }
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
        }
    }
}

/// `sk_shutdown` bits.
pub(crate) const RCV_SHUTDOWN: u8 = 1;
pub(crate) const SEND_SHUTDOWN: u8 = 2;

/// One TCP socket (Linux `struct tcp_sock` with its `inet_connection_sock` and `sock`).
pub(crate) struct Connection {
    pub id: SocketId,
    pub gen: u32,
    pub family: Family,
    pub state: TcpState,
    pub local: SocketAddr,
    pub remote: SocketAddr,
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
    pub listen: Option<Box<Listen>>,
    /// Listener this child belongs to until accept().
    pub parent: Option<(SocketId, u32)>,
    pub opts: SockOpts,
    pub route: RouteAttrs,
    /// `sk_err` (reported once by SO_ERROR / the next call).
    pub err: Option<Errno>,
    pub err_soft: Option<Errno>,
    pub shutdown: u8,
    /// SOCK_NOSPACE: a writer saw no space; wake it on write space.
    pub nospace: bool,
    /// SACK compression (input.rs).
    pub sack_compress: SackCompress,
    /// `sock->state == SS_CONNECTING`: a connect() is in progress or failed unreported.
    pub connecting: bool,
    /// `sk_lock.owned`.
    pub owned: bool,
    /// Segments that arrived while owned; `backlog_len` in truesize bytes.
    pub backlog: VecDeque<crate::packet::OwnedSeg>,
    pub backlog_len: u32,
    pub tsq_flags: u8,
    pub timers: [Option<Instant>; NTIMERS],
    pub rtx_event: RtxEvent,

    // --- sequence space (RFC 9293 §3.3.1) ---
    pub iss: u32,
    pub irs: u32,
    pub snd_una: u32,
    pub snd_nxt: u32,
    /// Sequence after the last byte queued by the application.
    pub write_seq: u32,
    /// `pushed_seq`: last sequence marked with PSH (forced_push).
    pub pushed_seq: u32,
    /// End of the last small (< MSS) segment sent (Minshall's Nagle variant).
    pub snd_sml: u32,
    pub snd_wnd: u32,
    pub snd_wl1: u32,
    pub max_window: u32,
    pub snd_wscale: u8,
    pub rcv_wscale: u8,
    pub rcv_nxt: u32,
    pub rcv_wup: u32,
    pub rcv_wnd: u32,
    /// Next byte the application will read.
    pub copied_seq: u32,
    pub window_clamp: u32,
    pub rcv_ssthresh: u32,
    /// Bytes of payload per byte of receive buffer, in 1/256ths (`tp->scaling_ratio`): the
    /// share of `rcvbuf` the window may offer ([`Connection::win_from_space`]). Starts at
    /// [`TCP_DEFAULT_SCALING_RATIO`] and is learnt from received buffers' `len / truesize`
    /// (`tcp_measure_rcv_mss`).
    pub scaling_ratio: u8,

    // --- options / MSS ---
    pub mss_cache: u32,
    pub advmss: u32,
    /// Peer's MSS (`rx_opt.mss_clamp`).
    pub mss_clamp: u32,
    /// Path MTU `mss_cache` was last computed for (`icsk_pmtu_cookie`).
    pub pmtu_cookie: u32,
    /// A route change not yet picked up: applied at the next transmit, as Linux revalidates
    /// the cached dst in `ip_queue_xmit` (`__sk_dst_check`).
    pub route_pending: Option<RouteAttrs>,
    /// MTU probing (`icsk_mtup`, mtu.rs).
    pub mtup: Mtup,
    /// Segment size for the next `transmit_skb` instead of the current MSS (an MTU probe
    /// leaves as one segment larger than the MSS).
    pub xmit_mss_override: u32,
    pub tcp_header_len: u32,
    pub tstamp_ok: bool,
    pub sack_ok: bool,
    pub wscale_ok: bool,
    pub dsack_ok: bool,
    pub ts_recent: u32,
    pub ts_recent_stamp: Instant,
    pub ts_offset: u32,
    /// Pending D-SACK block to send (`duplicate_sack`).
    pub dsack: Option<(u32, u32)>,
    /// SACK blocks we advertise (`selective_acks`), most recent first.
    pub sacks: Vec<(u32, u32)>,
    pub gso_segs_cache: u32,

    // --- congestion control ---
    pub cc: Box<dyn CongestionControl>,
    pub cc_st: CcState,
    pub ca_state: CaState,
    /// What undoing a reduction needs (recovery.rs).
    pub undo: Undo,
    pub high_seq: u32,
    /// TSecr of the segment being processed (`rx_opt.rcv_tsecr`).
    pub rcv_tsecr: u32,
    pub reordering: u32,
    pub snd_cwnd_stamp: Instant,
    pub max_packets_out: u32,
    pub is_cwnd_limited: bool,
    /// Set by the output loop when it stopped on cwnd (tcp_write_xmit's `is_cwnd_limited`).
    pub cwnd_limited_now: bool,
    /// Set by the output loop when it stopped on the peer's window (`is_rwnd_limited`).
    pub rwnd_limited_now: bool,
    pub cwnd_usage_seq: u32,
    /// PRR counters of the current reduction (recovery.rs).
    pub prr: Prr,
    /// `tp->ecn_flags` (RFC 3168): bits of [`ecnf`].
    pub ecn_flags: u8,
    /// The tail loss probe's episode (rack.rs).
    pub tlp: Tlp,

    // --- RTT / RTO (RFC 6298) ---
    /// RTT estimator and RTO (rtt.rs).
    pub rtt: Rtt,
    pub backoff: u32,
    pub retransmits: u32,
    pub total_retrans: u32,
    pub retrans_stamp: Option<Instant>,
    /// Zero-window and keepalive probing (timer.rs).
    pub probes: Probes,
    pub lsndtime: Instant,
    pub lrcvtime: Instant,
    pub rcv_tstamp: Instant,
    pub synack_retries_done: u32,

    // --- RACK (RFC 8985) ---
    /// `tp->rack` (rack.rs).
    pub rack: Rack,
    /// Reordering events observed (`tp->reord_seen`, reported as `tcpi_reord_seen`).
    pub reord_seen: u32,
    /// End of the highest SACKed sequence (`tcp_highest_sack_seq`).
    pub highest_sack_end: u32,
    pub sack_seen_any: bool,

    // --- queues and memory ---
    pub write_queue: VecDeque<Skb>,
    pub rtx_queue: VecDeque<Skb>,
    pub packets_out: u32,
    pub sacked_out: u32,
    pub lost_out: u32,
    pub retrans_out: u32,
    pub delivered: u32,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub segs_in: u32,
    pub segs_out: u32,
    pub wmem_queued: u32,
    pub wmem_alloc: u32,
    pub sndbuf: u32,
    pub rcvbuf: u32,
    pub rmem_alloc: u32,
    /// Pages of the stack-wide TCP memory this socket holds (see `mem.rs`).
    pub mem_pages: i64,
    /// `wmem_queued` when a send-side memory allocation failed (0: none pending); the
    /// socket is not writable until the queues shrink below it.
    pub mem_wait: u32,
    /// A lingering `close()` waits until this time (SO_LINGER, `sk_stream_wait_close`);
    /// meanwhile the socket is closed but not yet orphaned.
    pub linger_until: Option<Instant>,
    pub rx_queue: VecDeque<RxSkb>,
    pub ofo_queue: Vec<OfoSkb>,
    pub fin_received: bool,
    pub drops: u32,
    pub ack: AckState,
    pub pacing_rate: u64,
    pub wstamp: Instant,
    /// Autotuning's per-RTT measurement (`rcvq_space`, recv.rs).
    pub rcvq: RcvqSpace,
    /// Receiver RTT estimate (`rcv_rtt_est`, recv.rs).
    pub rcv_rtt: RcvRttEst,
    #[allow(dead_code)]
    pub urg_data: bool,
    /// Delivery-rate estimation (tcp_rate.c, rate.rs).
    pub rate: RateState,
    /// Send-side chronographs (`tcp_chrono_*`, chrono.rs).
    pub chrono: Chrono,
    /// Last time we answered an invalid segment (`last_oow_ack_time`).
    pub last_oow_ack: Instant,
}

use crate::Errno;

impl Connection {
    pub fn new(id: SocketId, gen: u32, family: Family, env: &Env) -> Connection {
        let wmem = env.sysctl.triple(Sysctl::tcp_wmem);
        let rmem = env.sysctl.triple(Sysctl::tcp_rmem);
        let cc = shallow_cc::by_name(
            env.sysctl.str(Sysctl::tcp_congestion_control),
            &env.cc_params,
        )
        .or_else(|| shallow_cc::by_name("reno", &env.cc_params))
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
            opts: SockOpts {
                v6only: family == Family::V6 && env.sysctl.on(Sysctl::bindv6only),
                ..SockOpts::default()
            },
            route: RouteAttrs::default(),
            err: None,
            err_soft: None,
            shutdown: 0,
            nospace: false,
            sack_compress: SackCompress::default(),
            connecting: false,
            owned: false,
            backlog: VecDeque::new(),
            backlog_len: 0,
            tsq_flags: 0,
            timers: [None; NTIMERS],
            rtx_event: RtxEvent::Rto,
            iss: 0,
            irs: 0,
            snd_una: 0,
            snd_nxt: 0,
            write_seq: 0,
            pushed_seq: 0,
            snd_sml: 0,
            snd_wnd: 0,
            snd_wl1: 0,
            max_window: 0,
            snd_wscale: 0,
            rcv_wscale: 0,
            rcv_nxt: 0,
            rcv_wup: 0,
            rcv_wnd: 0,
            copied_seq: 0,
            window_clamp: 0,
            rcv_ssthresh: 0,
            scaling_ratio: TCP_DEFAULT_SCALING_RATIO,
            mss_cache: TCP_MSS_DEFAULT,
            advmss: TCP_MSS_DEFAULT,
            mss_clamp: TCP_MSS_DEFAULT,
            pmtu_cookie: 0,
            route_pending: None,
            mtup: Mtup::default(),
            xmit_mss_override: 0,
            tcp_header_len: 20,
            tstamp_ok: false,
            sack_ok: false,
            wscale_ok: false,
            dsack_ok: false,
            ts_recent: 0,
            ts_recent_stamp: Instant::ZERO,
            ts_offset: 0,
            dsack: None,
            sacks: Vec::new(),
            gso_segs_cache: 0,
            cc,
            cc_st: CcState::default(),
            ca_state: CaState::Open,
            undo: Undo::default(),
            high_seq: 0,
            rcv_tsecr: 0,
            reordering: env.sysint(Sysctl::tcp_reordering) as u32,
            snd_cwnd_stamp: Instant::ZERO,
            max_packets_out: 0,
            is_cwnd_limited: false,
            cwnd_limited_now: false,
            rwnd_limited_now: false,
            cwnd_usage_seq: 0,
            prr: Prr::default(),
            ecn_flags: 0,
            tlp: Tlp::default(),
            rtt: Rtt::default(),
            backoff: 0,
            retransmits: 0,
            total_retrans: 0,
            retrans_stamp: None,
            probes: Probes::default(),
            lsndtime: Instant::ZERO,
            lrcvtime: Instant::ZERO,
            rcv_tstamp: Instant::ZERO,
            synack_retries_done: 0,
            rack: Rack::default(),
            reord_seen: 0,
            highest_sack_end: 0,
            sack_seen_any: false,
            write_queue: VecDeque::new(),
            rtx_queue: VecDeque::new(),
            packets_out: 0,
            sacked_out: 0,
            lost_out: 0,
            retrans_out: 0,
            delivered: 0,
            bytes_acked: 0,
            bytes_received: 0,
            bytes_sent: 0,
            bytes_retrans: 0,
            data_segs_in: 0,
            data_segs_out: 0,
            segs_in: 0,
            segs_out: 0,
            wmem_queued: 0,
            wmem_alloc: 0,
            sndbuf: wmem[1] as u32,
            rcvbuf: rmem[1] as u32,
            rmem_alloc: 0,
            mem_pages: 0,
            mem_wait: 0,
            linger_until: None,
            rx_queue: VecDeque::new(),
            ofo_queue: Vec::new(),
            fin_received: false,
            drops: 0,
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
            // sk_pacing_rate starts at ~0 (unlimited) until the first ACK of data.
            pacing_rate: u64::MAX,
            wstamp: Instant::ZERO,
            rcvq: RcvqSpace::default(),
            rcv_rtt: RcvRttEst::default(),
            urg_data: false,
            last_oow_ack: Instant::ZERO,
            chrono: Chrono::default(),
            rate: RateState::default(),
        }
    }

    /// Arm (or re-arm) a timer for `at`; a timer-wheel timer fires when [`wheel_delay`] (or,
    /// for the delayed ACK, [`delack_timer_delay`]) says.
    pub fn arm(&mut self, env: &mut Env, kind: TimerKind, at: Instant) {
        // The retransmit (RTO, persist, SYN, loss probe, RACK), delayed-ACK and keepalive
        // (FIN_WAIT2, TIME_WAIT) timers live on the jiffy timer wheel (`sk_reset_timer`);
        // the compressed-SACK timer is an hrtimer and fires on time.
        // A timer due at once is the engine's "at the end of this step" and stays so, but
        // for a delayed ACK due at once (`ato` 0: a bare FIN before any data): Linux arms
        // the wheel for the current jiffy, which runs at a later tick (kernel recordings of
        // fuzz seeds 60046, 60057, 60105: 4.7 to 5.7 ms after the FIN of an active opener;
        // a passive child's within 4 ms, close-remote-fin-then-close), so it leaves half a
        // jiffy later, as `delack_timer_delay` gives for a zero delay.
        let at = if kind == TimerKind::Delack && at <= env.clock {
            env.clock + delack_timer_delay(Duration::ZERO)
        } else if at <= env.clock {
            at
        } else if kind == TimerKind::Delack {
            env.clock + delack_timer_delay(at - env.clock)
        } else if matches!(kind, TimerKind::Retrans | TimerKind::Keepalive) {
            env.clock + wheel_delay(at - env.clock)
        } else {
            at
        };
        if let Some(old) = self.timers[kind as usize].take() {
            env.timers.remove(&(old, self.id.0, self.gen, kind));
        }
        self.timers[kind as usize] = Some(at);
        env.timers.insert((at, self.id.0, self.gen, kind));
    }

    /// Cancel a timer.
    pub fn disarm(&mut self, env: &mut Env, kind: TimerKind) {
        if let Some(old) = self.timers[kind as usize].take() {
            env.timers.remove(&(old, self.id.0, self.gen, kind));
        }
    }

    pub fn disarm_all(&mut self, env: &mut Env) {
        for k in [
            TimerKind::Retrans,
            TimerKind::Delack,
            TimerKind::Keepalive,
            TimerKind::CompSack,
        ] {
            self.disarm(env, k);
        }
    }

    pub fn snd_cwnd(&self) -> u32 {
        self.cc_st.snd_cwnd
    }

    /// `tcp_packets_in_flight()`: packets_out - (sacked_out + lost_out) + retrans_out.
    pub fn packets_in_flight(&self) -> u32 {
        self.packets_out
            .saturating_sub(self.sacked_out + self.lost_out)
            .saturating_add(self.retrans_out)
    }

    /// TCP timestamp clock value for `now` (ms clock + per-connection offset).
    pub fn tsval(&self, now: Instant) -> u32 {
        (now.as_millis() as u32).wrapping_add(self.ts_offset)
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
        self.wmem_alloc + 1
    }

    /// Unsent bytes in the write queue (`write_seq - snd_nxt`).
    pub fn notsent_bytes(&self) -> u32 {
        let n = self.write_seq.wrapping_sub(self.snd_nxt) as i32;
        n.max(0) as u32
    }

    /// `tcp_stream_memory_free(sk, wake)`: `(notsent << wake) < lowat`. The extension sysctl
    /// `shallow.tcp_notsent_lowat_wake_half = 0` drops the shift (wake at X, not X/2).
    pub fn stream_memory_free(&self, env: &Env, wake: u32) -> bool {
        let wake = if env.sysctl.on(Sysctl::shallow_tcp_notsent_lowat_wake_half) {
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
        self.mem_wait == 0 && self.wmem_queued < self.sndbuf && self.stream_memory_free(env, wake)
    }

    /// `__sk_stream_is_writeable(sk, wake)`: wspace >= wmem_queued/2 && memory free.
    pub fn stream_is_writeable(&self, env: &Env, wake: u32) -> bool {
        let wspace = self.sndbuf as i64 - self.wmem_queued as i64;
        wspace >= (self.wmem_queued / 2) as i64 && self.sk_stream_memory_free(env, wake)
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
            .rcv_wup
            .wrapping_add(self.rcv_wnd)
            .wrapping_sub(self.rcv_nxt) as i32;
        w.max(0) as u32
    }

    /// `tcp_win_from_space` (Linux 6.6+): the share of buffer space usable for payload,
    /// `space × scaling_ratio / 256`. `tcp_adv_win_scale` no longer plays a part (measured:
    /// setting it to 2 leaves every window of the 540000-byte scenario unchanged).
    pub fn win_from_space(&self, space: i64) -> i64 {
        (space * i64::from(self.scaling_ratio)) >> TCP_RMEM_TO_WIN_SCALE
    }

    /// `tcp_space_from_win`: the buffer that yields a window of `win` at the current ratio.
    pub fn space_from_win(&self, win: u64) -> u64 {
        (win << TCP_RMEM_TO_WIN_SCALE) / u64::from(self.scaling_ratio.max(1))
    }

    /// `tcp_space`: window we could offer now.
    pub fn tcp_space(&self, _env: &Env) -> i64 {
        self.win_from_space(self.rcvbuf as i64 - self.backlog_len as i64 - self.rmem_alloc as i64)
    }

    /// `tcp_full_space`.
    pub fn full_space(&self, _env: &Env) -> i64 {
        self.win_from_space(self.rcvbuf as i64)
    }

    /// Random u32 from the stack RNG.
    pub fn rand(env: &mut Env) -> u32 {
        env.rng.next_u32()
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
        payload: &'a [u8],
    ) -> SegOut<'a> {
        SegOut {
            local: self.local,
            remote: self.remote,
            seq,
            ack: if flags.intersects(TcpFlags::ACK) {
                self.rcv_nxt
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
            ident: env.next_ident(),
            opts,
            payload,
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
        s.snd_nxt = 1000;
        s.write_seq = 1000 + 3000; // 3000 unsent: X/2 <= notsent < X
        assert!(s.stream_memory_free(&env, 0), "may queue more");
        assert!(!s.stream_memory_free(&env, 1), "not woken at 3000 >= X/2");
        env.sysctl
            .set("shallow.tcp_notsent_lowat_wake_half", "0")
            .unwrap();
        assert!(
            s.stream_memory_free(&env, 1),
            "woken below X with the switch off"
        );
        s.write_seq = 1000 + 4000;
        assert!(!s.stream_memory_free(&env, 1));
    }
}

#[cfg(test)]
mod skb_data_tests {
    use super::*;

    /// Open bytes carved from one buffer join for free and give their spare room; once shared,
    /// the bytes a packet holds never change: appending or joining writes to a copy, and the
    /// spare room is not handed out.
    #[test]
    fn shared_bytes_are_copied_on_write() {
        let mut chunk = BytesMut::with_capacity(64);
        chunk.extend_from_slice(b"abcdef");
        let rest = chunk.split_off(6);
        let mut a = SkbData::Open(chunk);
        let mut b = SkbData::Open(rest);
        b.extend_from_slice(b"ghij");
        let b_ptr = b.as_ptr();
        a.unsplit(b);
        assert_eq!(&a[..], b"abcdefghij");
        assert_eq!(a.as_ptr().wrapping_add(6), b_ptr, "joined in place");
        assert!(a.spare(16).is_some());
        let shared = a.share();
        assert_eq!(&shared[..], b"abcdefghij");
        assert!(
            a.spare(1).is_none(),
            "room after shared bytes is not handed out"
        );
        a.extend_from_slice(b"k");
        a.unsplit(SkbData::Open(BytesMut::from(&b"lm"[..])));
        assert_eq!(&a[..], b"abcdefghijklm");
        assert_eq!(
            &shared[..],
            b"abcdefghij",
            "the packet's bytes are unchanged"
        );
        // Splitting and trimming shared bytes share them still.
        let mut c = SkbData::Sent(shared.clone());
        let tail = c.split_off(4);
        c.advance(1);
        assert_eq!((&c[..], &tail[..]), (&b"bcd"[..], &b"efghij"[..]));
        assert_eq!(tail.as_ptr(), shared[4..].as_ptr());
        let mut d = SkbData::Sent(shared.clone());
        let head = d.split_to(3);
        assert_eq!((&head[..], &d[..]), (&b"abc"[..], &b"defghij"[..]));
    }
}
