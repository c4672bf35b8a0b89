//! Packets, as endpoints hand them over and the network carries them.

use std::sync::Arc;

use bytes::Bytes;

use crate::pool::BufPool;
use crate::segment::{self, TcpView};
use crate::time::Instant;

/// One IP packet leaving or reaching an endpoint.
///
/// Mirrors the engine's `Transmit` field for field, so an adapter is a move of each field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// One IP packet (IPv4 or IPv6, no link-layer header). A TSO super-segment may exceed the
    /// MTU. When `frag` is not empty, only the packet's head (its headers).
    pub data: Vec<u8>,
    /// The rest of the packet's bytes, held apart from `data` (Linux's paged skb data,
    /// `skb_shinfo(skb)->frags`): the packet is `data` followed by `frag`. Two kinds of
    /// packet carry one: an endpoint's data packet sharing its socket's bytes (the engine's
    /// scatter-gather `Transmit::frag`; the NIC cuts TSO segments from it and sends anything
    /// else linearized), and GRO's aggregate of unwritten TSO segments sharing the TSO
    /// packet's payload. An endpoint that does not take paged packets
    /// ([`Endpoint::accepts_frags`](crate::Endpoint::accepts_frags)) gets them made contiguous ([`Packet::linearize`]).
    pub frag: Frag,
    /// Payload bytes per wire segment when `data` is a super-segment (TSO on egress, GRO on
    /// ingress). `None` for an ordinary packet.
    pub gso_size: Option<u16>,
    /// Earliest departure time (EDT, Linux `skb->tstamp`): a pacing qdisc (fq) holds the packet
    /// until then. Other qdiscs ignore it, as in Linux.
    pub departure: Option<Instant>,
    /// TX-completion token: when `Some`, the host calls [`Endpoint::tx_complete`](crate::Endpoint::tx_complete) with it
    /// exactly once, when the packet has left the NIC (or was dropped below the endpoint, as
    /// Linux's `kfree_skb` runs the skb destructor `tcp_wfree` on a drop too).
    pub token: Option<u64>,
    /// Flow hash (Linux `skb->hash`), the key of fq's per-flow queues and of per-flow metrics.
    pub flow: u32,
    /// A wire segment the NIC cut from a TSO packet and has not written out: when `Some`,
    /// the packet's bytes are those [`segment::write_segment_parsed`] would produce from the
    /// parent, and `data` is empty. Only the emulator's wire carries such packets; anything
    /// that reads the bytes (a capture, corruption, an endpoint) calls
    /// [`Packet::materialize`] first. Endpoints never see one.
    pub seg: Option<WireSeg>,
}

/// The TX-completion tokens of wire segments that software GSO (tbf's `tbf_segment`) cut
/// from one packet: each carries the packet's token (an index into its host's table, below
/// 2^32) with the segment's payload length and whether it is the last segment, so the host
/// completes each segment's share of the engine's token
/// ([`TxToken::take_segment`](shallow_tcp::TxToken::take_segment)) and the whole with the
/// last.
pub mod piece_token {
    const PIECE: u64 = 1 << 63;
    const LAST: u64 = 1 << 62;
    const ID: u64 = (1 << 32) - 1;

    /// The token of a segment of `payload` bytes cut from the packet of token `id`.
    pub fn encode(id: u64, payload: usize, last: bool) -> u64 {
        PIECE | if last { LAST } else { 0 } | ((payload as u64 & 0xffff) << 32) | (id & ID)
    }

    /// The packet's token and, for a segment's token, its payload length and whether it is
    /// the last.
    pub fn decode(tok: u64) -> (u64, Option<(usize, bool)>) {
        if tok & PIECE == 0 {
            return (tok, None);
        }
        (
            tok & ID,
            Some((((tok >> 32) & 0xffff) as usize, tok & LAST != 0)),
        )
    }
}

/// A packet's paged bytes ([`Packet::frag`]): a `Bytes` kept behind a pointer, so that the
/// many packets without one (ACKs, wire segments, packets of endpoints without
/// scatter-gather) stay small as they move through queues.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frag(Option<Box<Bytes>>);

impl Frag {
    /// The bytes, leaving none.
    pub fn take(&mut self) -> Bytes {
        self.0.take().map_or_else(Bytes::new, |b| *b)
    }
}

impl From<Bytes> for Frag {
    fn from(b: Bytes) -> Frag {
        Frag((!b.is_empty()).then(|| Box::new(b)))
    }
}

impl core::ops::Deref for Frag {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.as_deref().map_or(&[], |b| &b[..])
    }
}

/// A TSO packet the NIC is cutting into wire segments, shared by the segments it has cut
/// (see [`WireSeg`]).
#[derive(Debug, PartialEq, Eq)]
pub struct TsoParent {
    /// The IP and TCP headers (`view.payload_off` bytes).
    head: Vec<u8>,
    /// The `view.payload_len` payload bytes (shared with the sending socket's buffer when the
    /// packet came with a [`Packet::frag`]).
    payload: Bytes,
    view: TcpView,
    gso: u16,
    segs: usize,
}

/// One wire segment of a [`TsoParent`], not yet written out.
///
/// The emulator's model of TSO with checksum offload: the NIC writes headers and checksums
/// as it sends, so segment bytes only need to exist when something looks at them. Keeping
/// the segment as (parent, index) until then saves copying each payload byte and summing it
/// once at the NIC and once more at the receiver's GRO, which verified the checksums the NIC
/// had just computed. Every observable byte is unchanged: [`Packet::materialize`] produces
/// exactly what the NIC used to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireSeg {
    parent: Arc<TsoParent>,
    index: usize,
}

impl TsoParent {
    /// A TSO packet `data` (parsed as `view`) to be cut into `gso`-byte segments; `data`
    /// comes back as the error unless it makes at least two segments.
    pub fn new(data: Vec<u8>, view: TcpView, gso: u16) -> Result<Arc<TsoParent>, Vec<u8>> {
        let (off, end) = (view.payload_off, view.payload_off + view.payload_len);
        if !Self::cuts(&view, gso) || data.len() < end {
            return Err(data);
        }
        let head = data[..off].to_vec();
        let payload = Bytes::from(data).slice(off..end);
        Ok(Self::make(head, payload, view, gso))
    }
    /// [`TsoParent::new`] for a packet in two parts (a [`Packet`] with a `frag`): `head` is
    /// exactly its headers and `payload` its payload, as `view` (from
    /// [`segment::parse_tcp_split`]) says; both come back unless that holds and the packet
    /// makes at least two segments.
    #[allow(clippy::result_large_err)]
    pub fn from_parts(
        head: Vec<u8>,
        payload: Bytes,
        view: TcpView,
        gso: u16,
    ) -> Result<Arc<TsoParent>, (Vec<u8>, Bytes)> {
        if !Self::cuts(&view, gso)
            || head.len() != view.payload_off
            || payload.len() != view.payload_len
        {
            return Err((head, payload));
        }
        Ok(Self::make(head, payload, view, gso))
    }
    fn cuts(view: &TcpView, gso: u16) -> bool {
        gso > 0 && view.payload_len > usize::from(gso)
    }
    fn make(head: Vec<u8>, payload: Bytes, view: TcpView, gso: u16) -> Arc<TsoParent> {
        Arc::new(TsoParent {
            head,
            payload,
            view,
            gso,
            segs: view.payload_len.div_ceil(usize::from(gso)),
        })
    }
    /// Number of wire segments.
    pub fn segs(&self) -> usize {
        self.segs
    }
    /// The TSO packet's IP and TCP headers.
    pub fn head(&self) -> &[u8] {
        &self.head
    }
    /// The parsed TSO packet.
    pub fn view(&self) -> &TcpView {
        &self.view
    }
    /// Write segments `first..=last` into `out` (cleared first) the way GRO builds an
    /// aggregate from them: segment `first`'s bytes, the others' payloads appended, and the
    /// PSH/FIN of segment `last`. Headers keep segment `first`'s lengths and checksums (GRO
    /// fixes them when it passes the aggregate up: see [`TsoParent::take_run`]).
    pub fn write_run(&self, first: usize, last: usize, out: &mut Vec<u8>) {
        // Cannot fail: first < segs and gso > 0 were checked when the parent was made.
        let _ = segment::write_segment_parts(
            &self.head,
            &self.payload,
            &self.view,
            self.gso,
            first,
            out,
        );
        if last > first {
            let (a, _) = self.payload_range(first + 1);
            let (b, blen) = self.payload_range(last);
            out.extend_from_slice(&self.payload[a..b + blen]);
            let fl = segment::run_flags(self.view.flags, first, last, self.segs);
            segment::set_tcp_flags(out, &self.view, fl);
        }
    }
    /// The aggregate GRO passes up for segments `first..=last`, as a head (written into a
    /// buffer from `pool`) and the payload shared with this TSO packet, uncopied: the head is
    /// what the byte path builds ([`segment::write_run_head`]: the IP length and IPv4 header
    /// checksum of the whole and, for more than one segment, the TCP checksum field in the
    /// `CHECKSUM_PARTIAL` form; see [`crate::gro`]).
    pub fn take_run(&self, first: usize, last: usize, pool: &mut BufPool) -> (Vec<u8>, Bytes) {
        let mut head = pool.get();
        // Cannot fail: first <= last < segs and gso > 0 were checked by the caller and when
        // the parent was made.
        let frag = match segment::write_run_head_parts(
            &self.head,
            &self.payload,
            &self.view,
            self.gso,
            first,
            last,
            &mut head,
        ) {
            Ok(range) => self.payload.slice(range),
            Err(_) => Bytes::new(),
        };
        #[cfg(debug_assertions)]
        {
            let mut check = Vec::new();
            self.build_run(first, last, &mut check);
            let mut got = head.clone();
            got.extend_from_slice(&frag);
            debug_assert!(
                got == check,
                "a run's head and payload differ from its merged segments"
            );
        }
        (head, frag)
    }
    /// The aggregate's bytes the way the byte path builds them, to check [`TsoParent::take_run`].
    #[cfg(debug_assertions)]
    fn build_run(&self, first: usize, last: usize, out: &mut Vec<u8>) {
        self.write_run(first, last, out);
        if last == first {
            return;
        }
        let mut v = self.seg_view(first);
        v.payload_len = out.len() - v.payload_off;
        crate::segment::complete_aggregate(out, &v);
    }
    /// Segment `index`'s payload: offset into the parent's payload and length.
    fn payload_range(&self, index: usize) -> (usize, usize) {
        let mss = usize::from(self.gso);
        let start = index * mss;
        (
            start,
            mss.min(self.view.payload_len - start.min(self.view.payload_len)),
        )
    }
    /// The header fields of segment `index` as [`segment::write_segment_parsed`] sets them.
    pub fn seg_view(&self, index: usize) -> TcpView {
        let (start, len) = self.payload_range(index);
        let fl = segment::run_flags(self.view.flags, index, index, self.segs);
        TcpView {
            payload_len: len,
            seq: self.view.seq.wrapping_add(start as u32),
            flags: fl,
            ..self.view
        }
    }
}

impl WireSeg {
    /// Segment `index` of `parent`.
    pub fn new(parent: Arc<TsoParent>, index: usize) -> WireSeg {
        debug_assert!(index < parent.segs);
        WireSeg { parent, index }
    }
    /// The TSO packet this segment is cut from.
    pub fn parent(&self) -> &Arc<TsoParent> {
        &self.parent
    }
    /// Which segment of it (from 0).
    pub fn index(&self) -> usize {
        self.index
    }
    /// Length of the segment in bytes.
    pub fn len(&self) -> usize {
        self.parent.view.payload_off + self.parent.payload_range(self.index).1
    }
    /// True for a segment of no bytes (never: a segment has at least its headers).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The parent's headers: addresses, ports and options are the segment's.
    pub fn parent_header(&self) -> &[u8] {
        &self.parent.head
    }
    /// Write the segment's bytes into `out` (cleared first).
    pub fn write(&self, out: &mut Vec<u8>) {
        let p = &self.parent;
        // Cannot fail: index < segs and gso > 0 were checked when the parent was made.
        let _ = segment::write_segment_parts(&p.head, &p.payload, &p.view, p.gso, self.index, out);
    }
}

impl Packet {
    /// An ordinary packet of `data` with no offload, EDT or token.
    pub fn new(data: Vec<u8>) -> Packet {
        Packet {
            data,
            ..Packet::default()
        }
    }
    /// Length in bytes (Linux `qdisc_pkt_len` without link-layer overhead).
    pub fn len(&self) -> usize {
        match &self.seg {
            Some(s) => s.len(),
            None => self.data.len() + self.frag.len(),
        }
    }
    /// True for a zero-length packet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Write out a [`WireSeg`] into `data` (a buffer from `pool`); no-op otherwise.
    pub fn materialize(&mut self, pool: &mut BufPool) {
        if let Some(s) = self.seg.take() {
            let mut buf = pool.get();
            s.write(&mut buf);
            pool.put(std::mem::replace(&mut self.data, buf));
        }
    }
    /// Append `frag` to `data`, so that `data` holds the whole packet (Linux
    /// `skb_linearize`); no-op without a `frag`.
    pub fn linearize(&mut self) {
        if !self.frag.is_empty() {
            let frag = self.frag.take();
            self.data.extend_from_slice(&frag);
        }
    }
    /// The IP and TCP headers' bytes as far as addresses and ports go (for routing and flow
    /// matching): the packet's own bytes, or a wire segment's parent's.
    pub fn header(&self) -> &[u8] {
        match &self.seg {
            Some(s) => s.parent_header(),
            None => &self.data,
        }
    }
}

/// A packet inside the host egress path, with the bookkeeping the emulator needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skb {
    /// The packet.
    pub pkt: Packet,
    /// When it entered the qdisc (start of its host-queue delay).
    pub enqueued: Instant,
    /// Bytes this skb releases from its flow's "bytes below the endpoint" account when it
    /// completes: its length, except for pieces a qdisc split off a larger packet, where the
    /// last piece carries the whole original length and the others 0.
    pub acct_len: u32,
}

impl Skb {
    /// Wrap `pkt`, entering the egress path at `now`.
    pub fn new(pkt: Packet, now: Instant) -> Skb {
        Skb {
            acct_len: u32::try_from(pkt.data.len() + pkt.frag.len()).unwrap_or(u32::MAX),
            enqueued: now,
            pkt,
        }
    }
    /// Length in bytes.
    /// (A packet in the egress path is never a [`WireSeg`]: the NIC cuts those.)
    #[inline]
    pub fn len(&self) -> usize {
        self.pkt.data.len() + self.pkt.frag.len()
    }
    /// True for an empty packet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
