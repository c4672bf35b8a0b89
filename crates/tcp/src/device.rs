//! The device below the engine, as the engine sees it: what the device can do
//! ([`DeviceCaps`], given once and changed only as `ethtool -K` or `tc qdisc replace` would),
//! and how a received packet is handed over ([`RxPacket`]). The model is smoltcp's
//! `phy::DeviceCapabilities`: the substrate describes its device in one value instead of
//! flipping flags on the stack one by one.

use bytes::Bytes;

/// Accounting overhead of one received buffer: `truesize = payload + SKB_OVERHEAD` for
/// `rmem_alloc` and the backlog (a driver's receive buffer is larger than the payload;
/// spec §1.1).
pub const SKB_OVERHEAD: u32 = 1280;

/// What the device (and the egress qdisc in front of it) can do, as far as TCP's output
/// path cares. [`Stack::with_device`](crate::Stack::with_device) takes it at creation;
/// [`Stack::set_device`](crate::Stack::set_device) replaces it (a device reconfigured at
/// run time). The default is a plain NIC with TSO: `gso` on, everything else off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// The device takes TSO/GSO super-segments (`NETIF_F_GSO`/`NETIF_F_TSO`; on by
    /// default). Off, as after `ethtool -K dev tso off gso off`: `size_goal` is one MSS and
    /// every packet is one segment.
    pub gso: bool,
    /// Scatter-gather (`NETIF_F_SG`): a data packet's [`Transmit::data`](crate::Transmit)
    /// holds its headers only and [`Transmit::frags`](crate::Transmit) shares of the
    /// socket's send buffer (several pieces when the bytes come from the application's
    /// buffers of zero-copy sends), so the payload is not copied; those bytes stay read-only while
    /// any packet holds them (a later write to the socket never changes them). Off, every
    /// packet is contiguous.
    pub sg: bool,
    /// The device completes the TCP checksum of each segment it cuts from a TSO packet. On,
    /// a transmit with `gso_size: Some(g)` carrying more than `g` payload bytes leaves its
    /// checksum to the device, as Linux's `CHECKSUM_PARTIAL`: the field holds the folded
    /// pseudo-header sum (`__tcp_v4_send_check`) and the payload is not summed; the device
    /// must complete each segment's checksum (`shallow_wire::segment::write_segment`
    /// computes them from scratch, which suits). Every other packet carries a full checksum.
    pub tso_csum_offload: bool,
    /// The device orphans a packet when it is handed over (`skb_orphan` in the driver's
    /// `ndo_start_xmit`, as tun, veth and loopback do): a packet handed over with no pacing
    /// delay is completed inside the send itself, so it is never charged to `wmem_alloc`
    /// (TSQ, autocorking) nor held as "in a host queue", and its transmit carries no token.
    /// A packet an EDT qdisc must hold until a later departure still gets a token and is
    /// charged until `tx_complete`.
    pub orphan_at_xmit: bool,
    /// The qdisc below paces by earliest departure time (fq; Linux `sk_pacing_status ==
    /// SK_PACING_FQ`): each data packet's `departure` advances by its length over the
    /// pacing rate (`tcp_wstamp_ns`), and the qdisc holds it until then.
    pub edt_pacing: bool,
    /// How the device sizes received buffers ([`RxTruesize`]).
    pub rx_truesize: RxTruesize,
    /// The device copies the payload of each packet it takes instead of holding the
    /// socket's buffers (Linux's tun and loopback do, `skb_orphan_frags_rx`): a zero-copy
    /// send whose bytes went through it is reported as copied
    /// (`SO_EE_CODE_ZEROCOPY_COPIED`, zerocopy.rs). Off by default: the emulator's links and
    /// the TUN substrate's writes take the shared bytes as a NIC's DMA would.
    pub tx_copies: bool,
}

impl Default for DeviceCaps {
    fn default() -> DeviceCaps {
        DeviceCaps {
            gso: true,
            sg: false,
            tso_csum_offload: false,
            orphan_at_xmit: false,
            edt_pacing: false,
            rx_truesize: RxTruesize::Overhead,
            tx_copies: false,
        }
    }
}

/// What the device says of a received packet's TCP checksum (Linux `skb->ip_summed`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxChecksum {
    /// Not checked (`CHECKSUM_NONE`): the engine sums the packet (`tcp_checksum_complete`).
    #[default]
    None,
    /// The device verified it since the packet last changed (`CHECKSUM_UNNECESSARY`): the
    /// engine trusts it and does not sum again. Every other check still runs, so a hostile
    /// packet is handled as with [`RxChecksum::None`]; only say this of packets whose
    /// checksum really was checked.
    Unnecessary,
}

/// The bytes of a received IP packet, as the device holds them.
#[derive(Clone, Copy, Debug)]
pub enum RxBytes<'a> {
    /// One contiguous buffer: IP header, TCP header, payload (a linear skb).
    Linear(&'a [u8]),
    /// Headers and payload apart, as a device with scatter-gather hands over an skb with
    /// paged data: `head` holds exactly the IP and TCP headers and `frag` the whole payload,
    /// which the receive queues keep a share of instead of copying it (the application's
    /// `recv` is then the only copy). A packet whose parts do not add up to its length
    /// fields counts as `InErrs` and is dropped.
    Paged {
        /// IP and TCP headers.
        head: &'a [u8],
        /// The payload.
        frag: &'a Bytes,
    },
}

/// One received IP packet, the engine's only network input
/// ([`Stack::handle_packet`](crate::Stack::handle_packet)): its bytes, its GRO segment size
/// when it is an aggregate of several wire segments (`skb_shinfo(skb)->gso_size`), and what
/// the device says of its checksum.
#[derive(Clone, Copy, Debug)]
pub struct RxPacket<'a> {
    /// The packet's bytes.
    pub bytes: RxBytes<'a>,
    /// For a GRO aggregate, the size of the segments it was built from.
    pub gso_size: Option<u16>,
    /// Checksum state.
    pub checksum: RxChecksum,
}

impl<'a> RxPacket<'a> {
    /// A contiguous packet, not an aggregate, checksum not verified.
    pub fn linear(packet: &'a [u8]) -> RxPacket<'a> {
        RxPacket {
            bytes: RxBytes::Linear(packet),
            gso_size: None,
            checksum: RxChecksum::None,
        }
    }

    /// A packet in two parts ([`RxBytes::Paged`]), not an aggregate, checksum not verified.
    pub fn paged(head: &'a [u8], frag: &'a Bytes) -> RxPacket<'a> {
        RxPacket {
            bytes: RxBytes::Paged { head, frag },
            gso_size: None,
            checksum: RxChecksum::None,
        }
    }

    /// The same packet as a GRO aggregate of `gso_size`-byte segments (or not, with `None`).
    pub fn gso(mut self, gso_size: Option<u16>) -> RxPacket<'a> {
        self.gso_size = gso_size;
        self
    }

    /// The same packet with its checksum verified by the device when `verified` is true
    /// ([`RxChecksum::Unnecessary`]).
    pub fn csum_verified(mut self, verified: bool) -> RxPacket<'a> {
        self.checksum = if verified {
            RxChecksum::Unnecessary
        } else {
            RxChecksum::None
        };
        self
    }
}

/// How the substrate's device sizes a received buffer (its `truesize`), which decides
/// `rmem_alloc`, and through `len / truesize` the socket's scaling ratio
/// (`Connection::scaling_ratio`): the receive window follows from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RxTruesize {
    /// `payload + SKB_OVERHEAD`, and a buffer whose data is appended to the receive queue's
    /// tail only adds its payload (a NIC driver's page-fragment buffers, whose heads TCP can
    /// steal when it coalesces). The emulator's model.
    #[default]
    Overhead,
    /// A tun device's buffers (`tun_get_user` on an `IFF_TUN` device without a virtio-net
    /// header, as packetdrill writes them): a packet under a page is copied into one linear
    /// buffer of `NET_SKB_PAD` (64) + the IP packet, cache-aligned, plus the 320-byte shared
    /// info, taken from the 576-byte small-head cache when it fits and from the
    /// power-of-two kmalloc caches otherwise; `truesize` adds the 256-byte `sk_buff`. A
    /// larger packet is a 576-byte head plus whole pages. Such a head cannot be stolen, so
    /// queued buffers never coalesce. Measured on Linux 6.18 through `SO_MEMINFO`
    /// (`rmem_alloc` after each segment): 100 bytes of payload (140-byte packet) charge 832,
    /// 1000 and 1460 bytes charge 2304 each.
    TunKmalloc,
}

impl RxTruesize {
    /// `truesize` of one received buffer of `payload` bytes behind `headers` bytes of IP and
    /// TCP header.
    pub fn truesize(self, payload: u32, headers: u32) -> u32 {
        match self {
            RxTruesize::Overhead => payload + SKB_OVERHEAD,
            RxTruesize::TunKmalloc => {
                const NET_SKB_PAD: u32 = 64;
                const SHINFO: u32 = 320;
                const SKB: u32 = 256;
                const SMALL_HEAD: u32 = 576;
                const PAGE: u32 = 4096;
                let len = payload + headers;
                if NET_SKB_PAD + len >= PAGE {
                    return SMALL_HEAD + SKB + len.div_ceil(PAGE) * PAGE;
                }
                let want = (NET_SKB_PAD + len).div_ceil(64) * 64 + SHINFO;
                let obj = if want <= SMALL_HEAD {
                    SMALL_HEAD
                } else {
                    want.next_power_of_two()
                };
                obj + SKB
            }
        }
    }

    /// Whether in-order data may be appended to the receive queue's tail buffer
    /// (`skb_try_coalesce` succeeds only for stealable heads or paged data).
    pub fn coalesces(self) -> bool {
        self == RxTruesize::Overhead
    }
}

/// The device side as TCP sees it: what the device can do and the admission rule of the
/// qdisc in front of it. `caps` is read by the output and receive rules (the engine reads
/// device properties only from here); the gate is private: it is asked only through
/// [`DeviceSide::admit`].
#[derive(Default)]
pub(crate) struct DeviceSide {
    /// What the device below can do.
    pub caps: DeviceCaps,
    /// The device side's admission rule (`crate::gate`): a packet it refuses fails with
    /// NET_XMIT_DROP, which TCP sees as a local error (`__tcp_transmit_skb` enters CWR,
    /// `tcp_write_xmit` keeps the data queued, a retransmission is not one in flight). `None`
    /// accepts everything; [`DropAll`](crate::gate::DropAll) is `pfifo limit 0`.
    gate: Option<Box<dyn crate::gate::TxGate>>,
    /// The device's interface index (`dev->ifindex`, 0 when unknown), reported in
    /// `IP_PKTINFO`/`IPV6_PKTINFO` (errqueue.rs).
    pub ifindex: u32,
}

impl DeviceSide {
    /// The device side's verdict on a packet about to be transmitted (`crate::gate`): the one
    /// place where a local drop (NET_XMIT_DROP) is decided.
    pub fn admit(&mut self, meta: &crate::gate::TxMeta) -> bool {
        self.verdict(meta) != crate::gate::Admission::Refused
    }

    /// The same verdict with what becomes of an admitted packet
    /// ([`TxGate::verdict`](crate::gate::TxGate::verdict)): queued whole, or cut at enqueue.
    pub fn verdict(&mut self, meta: &crate::gate::TxMeta) -> crate::gate::Admission {
        self.gate
            .as_mut()
            .map_or(crate::gate::Admission::Queued, |g| g.verdict(meta))
    }

    /// Replace the admission rule (`Stack::set_tx_gate`).
    pub fn set_gate(&mut self, gate: Option<Box<dyn crate::gate::TxGate>>) {
        self.gate = gate;
    }
}
