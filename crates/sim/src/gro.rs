//! Receive-side GRO: coalesce in-order TCP segments of one flow into one aggregate.
//!
//! The inverse of [`crate::segment`], following the merge rules Linux's `tcp_gro_receive` /
//! `inet_gro_receive` apply (observable behaviour):
//! * same addresses, ports and IP version, no IPv4 options and no IPv6 extension headers;
//! * the segment's seq is exactly the aggregate's next seq; ack and window equal;
//! * flags equal apart from PSH/FIN (allowed on the segment that ends an aggregate); CWR,
//!   SYN, RST and URG never merge;
//! * the TCP option bytes are identical, so timestamps must be equal to merge;
//! * IPv4: same TOS, TTL and DF, identification incrementing by one; IPv6: same traffic class,
//!   flow label and hop limit;
//! * every segment but the last carries exactly the first segment's payload size (the gso
//!   size); a shorter segment, or one with PSH/FIN, closes the aggregate;
//! * the aggregate stays within 64 KiB of IP packet;
//! * a segment with a bad checksum is never merged; it is passed up on its own (the stack
//!   drops it) after the same flow's held aggregate, keeping order.
//!
//! At most 8 flows are held at once (Linux `MAX_GRO_SKBS`); all are flushed at the end of a
//! poll batch, in the order they were opened.
//!
//! An aggregate of several segments leaves with its IP length and IPv4 header checksum set
//! for the whole, and its TCP checksum field in the `CHECKSUM_PARTIAL` form (the folded
//! pseudo-header sum, not complemented), as `tcp4_gro_complete`/`tcp6_gro_complete` leave
//! it: each segment's checksum was verified here, so the aggregate goes up marked verified
//! and nobody sums its payload again; `segment::complete_tcp_checksum` turns the field into
//! the full checksum if one is needed.

use std::sync::Arc;

use crate::packet::{Packet, TsoParent};
use crate::pool::BufPool;
use crate::segment::{self, TcpView};
use shallow_wire::{tcp_field, TcpFlags};

/// Most flows held open at once (Linux `MAX_GRO_SKBS`).
pub const MAX_GRO_FLOWS: usize = 8;
/// Largest aggregate, in bytes of IP packet.
pub const GRO_MAX_SIZE: usize = 65535;

/// GRO counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroStats {
    /// Packets handed to GRO.
    pub packets_in: u64,
    /// Packets passed up (aggregates plus packets that were not merged).
    pub packets_out: u64,
    /// Segments that were appended to an existing aggregate.
    pub merged: u64,
    /// TCP packets with a bad checksum (passed up unmerged).
    pub csum_errors: u64,
}

struct Held {
    /// The aggregate so far; for a [`Run`], a packet with no bytes yet.
    pkt: Packet,
    /// The aggregate is segments `first..=last` of one TSO packet, still unwritten.
    run: Option<Run>,
    view: TcpView,
    mss: usize,
    next_seq: u32,
    last_id: u16,
    segs: u32,
}

/// Consecutive wire segments of one TSO packet held as an aggregate without writing them out
/// (see [`crate::packet::WireSeg`]).
struct Run {
    parent: Arc<TsoParent>,
    first: usize,
    last: usize,
}

impl Held {
    /// Headers to match flows on (addresses and ports).
    fn header(&self) -> &[u8] {
        match &self.run {
            Some(r) => r.parent.head(),
            None => &self.pkt.data,
        }
    }
    /// Length of the aggregate as an IP packet.
    fn len(&self) -> usize {
        self.view.payload_off + self.view.payload_len
    }
    /// True when a segment with fields `v` cannot merge, judging by the header fields alone
    /// (the first half of [`Gro::can_merge`]).
    fn refuses(&self, v: &TcpView) -> bool {
        let hv = &self.view;
        v.seq != self.next_seq
            || v.ack != hv.ack
            || v.window != hv.window
            // The flags other than PSH and FIN match (the eight of byte 13: AE and the
            // reserved bits are not compared).
            || !((v.flags ^ hv.flags)
                & !(TcpFlags::PSH | TcpFlags::FIN | TcpFlags::AE | TcpFlags::RESERVED))
                .is_empty()
            || v.tcp_len != hv.tcp_len
            || v.payload_len > self.mss
            || self.len() + v.payload_len > GRO_MAX_SIZE
    }
}

/// The GRO engine of one host's receive path.
#[derive(Default)]
pub struct Gro {
    held: Vec<Held>,
    /// For each packet passed up since the last batch began: whether its checksum was verified.
    verified: Vec<bool>,
    /// Counters.
    pub stats: GroStats,
}

fn same_flow(a: &[u8], va: &TcpView, b: &[u8], vb: &TcpView) -> bool {
    va.ip_version == vb.ip_version
        && va.sport == vb.sport
        && va.dport == vb.dport
        && segment::src_addr(a) == segment::src_addr(b)
        && segment::dst_addr(a) == segment::dst_addr(b)
}

fn ip_id(d: &[u8]) -> u16 {
    u16::from_be_bytes([d[4], d[5]])
}

impl Gro {
    /// A GRO engine with nothing held.
    pub fn new() -> Gro {
        Gro::default()
    }

    /// Coalesce one poll batch: consumes `batch` in order, appends what is passed up to `out`,
    /// returns buffers of merged-away segments to `pool`.
    pub fn receive_batch(
        &mut self,
        batch: impl IntoIterator<Item = Packet>,
        out: &mut Vec<Packet>,
        pool: &mut BufPool,
    ) {
        for p in batch {
            self.receive(p, out, pool);
        }
        self.flush_all(out, pool);
        self.verified.clear();
    }

    /// [`Gro::receive_batch`] that also appends to `verified`, for each packet appended to
    /// `out`, whether the receive path verified its TCP checksum (the NIC's receive checksum
    /// offload, Linux `CHECKSUM_UNNECESSARY`): true for every TCP packet whose checksum was
    /// right, aggregates included; false for non-TCP packets and ones with a bad checksum,
    /// which the stack must check itself.
    pub fn receive_batch_verified(
        &mut self,
        batch: impl IntoIterator<Item = Packet>,
        out: &mut Vec<Packet>,
        verified: &mut Vec<bool>,
        pool: &mut BufPool,
    ) {
        self.verified.clear();
        for p in batch {
            self.receive(p, out, pool);
        }
        self.flush_all(out, pool);
        verified.append(&mut self.verified);
    }

    fn receive(&mut self, mut p: Packet, out: &mut Vec<Packet>, pool: &mut BufPool) {
        self.stats.packets_in += 1;
        if p.seg.is_some() {
            match self.receive_seg(p, out, pool) {
                Some(back) => p = back,
                None => return,
            }
            p.materialize(pool);
        }
        let Some(v) = segment::parse_tcp(&p.data) else {
            self.pass(p, out, false);
            return;
        };
        let end = v.payload_off + v.payload_len;
        let psum = segment::csum_add(0, &p.data[v.payload_off..end]);
        let hsum = segment::csum_add(
            segment::pseudo_sum(&p.data, &v, end - v.tcp_off),
            &p.data[v.tcp_off..v.payload_off],
        );
        let csum_ok = segment::ipv4_checksum_ok(&p.data)
            && segment::csum_fold(segment::csum_combine(hsum, psum)) == 0;
        if !csum_ok {
            self.stats.csum_errors += 1;
            self.flush_flow(&p.data, &v, out, pool);
            self.pass(p, out, false);
            return;
        }
        let mergeable_kind = v.payload_len > 0
            && !v
                .flags
                .intersects(TcpFlags::SYN | TcpFlags::RST | TcpFlags::URG | TcpFlags::CWR)
            && p.data.len() == v.payload_off + v.payload_len
            && (if v.ip_version == 4 {
                v.tcp_off == 20
            } else {
                v.tcp_off == 40
            });
        let pos = self
            .held
            .iter()
            .position(|h| same_flow(h.header(), &h.view, &p.data, &v));
        if let Some(i) = pos {
            self.write_out_run(i, pool);
        }
        if !mergeable_kind {
            if let Some(i) = pos {
                self.flush_at(i, out, pool);
            }
            self.pass(p, out, true);
            return;
        }
        if let Some(i) = pos {
            if Self::can_merge(&self.held[i], &p.data, &v) {
                let h = &mut self.held[i];
                h.pkt
                    .data
                    .extend_from_slice(&p.data[v.payload_off..v.payload_off + v.payload_len]);
                h.next_seq = h.next_seq.wrapping_add(v.payload_len as u32);
                h.segs += 1;
                if v.ip_version == 4 {
                    h.last_id = ip_id(&p.data);
                }
                // PSH/FIN of the closing segment go on the aggregate.
                h.view.flags |= v.flags & (TcpFlags::PSH | TcpFlags::FIN);
                segment::set_tcp_flags(&mut h.pkt.data, &h.view, h.view.flags);
                h.view.payload_len += v.payload_len;
                self.stats.merged += 1;
                let closes =
                    v.payload_len < h.mss || v.flags.intersects(TcpFlags::PSH | TcpFlags::FIN);
                pool.put(p.data);
                if closes {
                    self.flush_at(i, out, pool);
                }
                return;
            }
            self.flush_at(i, out, pool);
        }
        if v.flags.intersects(TcpFlags::PSH | TcpFlags::FIN) {
            self.pass(p, out, true);
            return;
        }
        if self.held.len() >= MAX_GRO_FLOWS {
            self.flush_at(0, out, pool);
        }
        let mut pkt = p;
        if pkt.data.capacity() < GRO_MAX_SIZE {
            // A fresh buffer: growing this one would copy its whole old allocation.
            let mut big = Vec::with_capacity(GRO_MAX_SIZE);
            big.extend_from_slice(&pkt.data);
            pool.put(std::mem::replace(&mut pkt.data, big));
        }
        let last_id = if v.ip_version == 4 {
            ip_id(&pkt.data)
        } else {
            0
        };
        self.held.push(Held {
            run: None,
            view: v,
            mss: v.payload_len,
            next_seq: v.seq.wrapping_add(v.payload_len as u32),
            last_id,
            segs: 1,
            pkt,
        });
    }

    fn can_merge(h: &Held, d: &[u8], v: &TcpView) -> bool {
        let hd = &h.pkt.data;
        let hv = &h.view;
        // The held bytes are the aggregate (`h.len()` is their length).
        debug_assert_eq!(hd.len(), h.len());
        if h.refuses(v) {
            return false;
        }
        // Identical TCP options (timestamps included).
        let opts = tcp_field::OPTIONS;
        if hd[hv.tcp_off + opts..hv.tcp_off + hv.tcp_len]
            != d[v.tcp_off + opts..v.tcp_off + v.tcp_len]
        {
            return false;
        }
        if v.ip_version == 4 {
            // TOS, TTL, DF equal; id increments by one.
            hd[1] == d[1]
                && hd[8] == d[8]
                && (hd[6] & 0x40) == (d[6] & 0x40)
                && ip_id(d) == h.last_id.wrapping_add(1)
        } else {
            hd[0..4] == d[0..4] && hd[7] == d[7]
        }
    }

    /// Pass `p` up; `verified`: its TCP checksum was checked here (and the aggregate's is
    /// consistent with the merged segments'), Linux `CHECKSUM_UNNECESSARY`.
    fn pass(&mut self, p: Packet, out: &mut Vec<Packet>, verified: bool) {
        self.stats.packets_out += 1;
        out.push(p);
        self.verified.push(verified);
    }

    fn flush_flow(&mut self, d: &[u8], v: &TcpView, out: &mut Vec<Packet>, pool: &mut BufPool) {
        if let Some(i) = self
            .held
            .iter()
            .position(|h| same_flow(h.header(), &h.view, d, v))
        {
            self.flush_at(i, out, pool);
        }
    }

    /// A wire segment the NIC has not written out ([`Packet::seg`]): merged into a run of
    /// its TSO packet's segments when it continues one, or held as a new run, or passed up;
    /// the same decisions the byte path below makes, taken from the header fields. Returns
    /// the packet when only the byte path can decide (it then writes the segment out).
    fn receive_seg(
        &mut self,
        p: Packet,
        out: &mut Vec<Packet>,
        pool: &mut BufPool,
    ) -> Option<Packet> {
        let ws = p.seg.as_ref()?;
        let (parent, index) = (ws.parent(), ws.index());
        let pv = *parent.view();
        let plain_ip = if pv.ip_version == 4 {
            pv.tcp_off == 20
        } else {
            pv.tcp_off == 40
        };
        // Segments of a TSO packet are checksummed right by the NIC; what is not mergeable
        // (CWR, SYN, RST, URG, IP options) takes the byte path, which handles it.
        if pv
            .flags
            .intersects(TcpFlags::SYN | TcpFlags::RST | TcpFlags::URG | TcpFlags::CWR)
            || !plain_ip
        {
            return Some(p);
        }
        let v = parent.seg_view(index);
        let header = parent.head();
        let pos = self
            .held
            .iter()
            .position(|h| same_flow(h.header(), &h.view, header, &v));
        if let Some(i) = pos {
            let h = &mut self.held[i];
            let continues = h
                .run
                .as_ref()
                .is_some_and(|r| Arc::ptr_eq(&r.parent, parent) && r.last + 1 == index);
            if continues && !h.refuses(&v) {
                if let Some(r) = h.run.as_mut() {
                    r.last = index;
                }
                h.next_seq = h.next_seq.wrapping_add(v.payload_len as u32);
                h.segs += 1;
                h.last_id = h.last_id.wrapping_add(1);
                h.view.payload_len += v.payload_len;
                self.stats.merged += 1;
                let closes =
                    v.payload_len < h.mss || v.flags.intersects(TcpFlags::PSH | TcpFlags::FIN);
                if closes {
                    self.flush_at(i, out, pool);
                }
                return None;
            }
            if !h.refuses(&v) {
                // Another TSO packet (or written-out bytes) that may merge: compare bytes.
                return Some(p);
            }
            self.flush_at(i, out, pool);
        }
        if v.flags.intersects(TcpFlags::PSH | TcpFlags::FIN) {
            // Passed up alone, as a run of one: its headers and a share of the payload.
            let (head, frag) = parent.take_run(index, index, pool);
            let p = Packet {
                data: head,
                frag: frag.into(),
                flow: p.flow,
                ..Packet::default()
            };
            self.pass(p, out, true);
            return None;
        }
        if self.held.len() >= MAX_GRO_FLOWS {
            self.flush_at(0, out, pool);
        }
        let last_id = if pv.ip_version == 4 {
            ip_id(parent.head()).wrapping_add(index as u16)
        } else {
            0
        };
        let run = Run {
            parent: Arc::clone(parent),
            first: index,
            last: index,
        };
        self.held.push(Held {
            pkt: Packet {
                flow: p.flow,
                ..Packet::default()
            },
            run: Some(run),
            view: v,
            mss: v.payload_len,
            next_seq: v.seq.wrapping_add(v.payload_len as u32),
            last_id,
            segs: 1,
        });
        None
    }

    /// Write held entry `i` out if it is a [`Run`], as the byte path would have built it
    /// segment by segment: the first segment's bytes followed by the others' payloads.
    fn write_out_run(&mut self, i: usize, pool: &mut BufPool) {
        let h = &mut self.held[i];
        let Some(r) = h.run.take() else {
            return;
        };
        let mut buf = pool.get();
        if buf.capacity() < GRO_MAX_SIZE {
            buf = Vec::with_capacity(GRO_MAX_SIZE);
        }
        r.parent.write_run(r.first, r.last, &mut buf);
        pool.put(std::mem::replace(&mut h.pkt.data, buf));
    }

    fn flush_at(&mut self, i: usize, out: &mut Vec<Packet>, pool: &mut BufPool) {
        if let Some(r) = self.held[i].run.take() {
            let h = self.held.remove(i);
            let mut pkt = h.pkt;
            let (head, frag) = r.parent.take_run(r.first, r.last, pool);
            (pkt.data, pkt.frag) = (head, frag.into());
            if h.segs > 1 {
                pkt.gso_size = Some(h.mss as u16);
            }
            self.pass(pkt, out, true);
            return;
        }
        let h = self.held.remove(i);
        let mut pkt = h.pkt;
        if h.segs > 1 {
            segment::complete_aggregate(&mut pkt.data, &h.view);
            pkt.gso_size = Some(h.mss as u16);
        }
        self.pass(pkt, out, true);
    }

    /// Pass up everything held (end of a poll batch, Linux `napi_gro_flush`).
    pub fn flush_all(&mut self, out: &mut Vec<Packet>, pool: &mut BufPool) {
        while !self.held.is_empty() {
            self.flush_at(0, out, pool);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{build_ipv4_tcp, segment, tcp_checksum_ok, TcpPacketSpec};

    fn original(len: usize, fl: TcpFlags) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let spec = TcpPacketSpec {
            seq: 1000,
            flags: fl,
            ip_id: 77,
            options: vec![1, 1, 8, 10, 0, 0, 1, 0, 0, 0, 2, 0],
            ..TcpPacketSpec::default()
        };
        let mut out = Vec::new();
        build_ipv4_tcp(&spec, &payload, &mut out);
        out
    }

    /// Check that every aggregate left with its TCP checksum in the `CHECKSUM_PARTIAL` form,
    /// then complete it (as a NIC would when forwarding), so tests compare full packets.
    fn complete(out: &mut [Packet]) {
        for p in out.iter_mut().filter(|p| p.gso_size.is_some()) {
            let v = segment::parse_tcp(&p.data).unwrap();
            let mut q = p.data.clone();
            segment::fill_tcp_csum_partial(&mut q, &v);
            assert_eq!(q, p.data, "an aggregate carries the pseudo-header sum");
            segment::complete_tcp_checksum(&mut p.data, &v);
        }
    }

    fn run(pkts: Vec<Vec<u8>>) -> (Vec<Packet>, GroStats) {
        let mut g = Gro::new();
        let mut out = Vec::new();
        let mut pool = BufPool::new(16);
        g.receive_batch(pkts.into_iter().map(Packet::new), &mut out, &mut pool);
        complete(&mut out);
        (out, g.stats)
    }

    #[test]
    fn gro_coalesces_back_to_the_original() {
        let orig = original(10 * 1448 + 100, TcpFlags::ACK | TcpFlags::PSH);
        let segs = segment(&orig, 1448).unwrap();
        assert_eq!(segs.len(), 11);
        let (out, st) = run(segs);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, orig);
        assert_eq!(out[0].gso_size, Some(1448));
        assert!(tcp_checksum_ok(&out[0].data));
        assert_eq!(st.merged, 10);
    }

    /// Odd-sized payloads (so later segments land at odd offsets) still give a correct
    /// aggregate checksum.
    #[test]
    fn odd_mss_aggregate_checksum() {
        let orig = original(5 * 999 + 3, TcpFlags::ACK);
        let segs = segment(&orig, 999).unwrap();
        let (out, _) = run(segs);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, orig);
        assert!(tcp_checksum_ok(&out[0].data));
    }

    #[test]
    fn gap_and_timestamp_change_stop_merging() {
        let orig = original(4 * 1000, TcpFlags::ACK);
        let mut segs = segment(&orig, 1000).unwrap();
        // Drop segment 1: 0 | 2,3 → two aggregates (0 alone is not marked gso).
        segs.remove(1);
        let (out, _) = run(segs.clone());
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].gso_size, None);
        assert_eq!(out[1].gso_size, Some(1000));
        // Change the TS value in segment 2 (refresh its checksum): no merge across it.
        let mut segs = segment(&orig, 1000).unwrap();
        segs[2][20 + 20 + 7] ^= 1;
        let v = segment::parse_tcp(&segs[2]).unwrap();
        segment::fill_tcp_checksum(&mut segs[2], &v);
        let (out, _) = run(segs);
        // [0+1] [2] [3]: segment 3 carries the old timestamp again, unequal to segment 2's.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].gso_size, Some(1000));
        assert!(out.iter().all(|p| tcp_checksum_ok(&p.data)));
    }

    #[test]
    fn corrupted_segment_is_not_merged_and_order_kept() {
        let orig = original(3 * 1000, TcpFlags::ACK);
        let mut segs = segment(&orig, 1000).unwrap();
        segs[1][60] ^= 0x10;
        let (out, st) = run(segs);
        assert_eq!(st.csum_errors, 1);
        assert_eq!(out.len(), 3);
        assert!(tcp_checksum_ok(&out[0].data));
        assert!(!tcp_checksum_ok(&out[1].data));
        assert!(tcp_checksum_ok(&out[2].data));
    }

    #[test]
    fn only_packets_with_a_good_checksum_are_marked_verified() {
        let orig = original(4 * 1000, TcpFlags::ACK);
        let mut segs = segment(&orig, 1000).unwrap();
        segs[2][60] ^= 0x10;
        let mut batch: Vec<Packet> = segs.into_iter().map(Packet::new).collect();
        batch.push(Packet::new(vec![0x45, 0, 0, 20]));
        let (mut g, mut out, mut ok, mut pool) =
            (Gro::new(), Vec::new(), Vec::new(), BufPool::new(8));
        g.receive_batch_verified(batch, &mut out, &mut ok, &mut pool);
        complete(&mut out);
        // [0+1] (aggregate), [2] (corrupted), [3], the non-TCP packet (in some order).
        assert_eq!(out.len(), 4);
        assert_eq!(ok.len(), 4);
        assert_eq!(ok.iter().filter(|&&v| v).count(), 2);
        assert!(out
            .iter()
            .zip(&ok)
            .any(|(p, &v)| v && p.gso_size == Some(1000)));
        for (p, &v) in out.iter().zip(&ok) {
            assert_eq!(tcp_checksum_ok(&p.data), v);
        }
        // The next batch starts afresh.
        let mut ok2 = Vec::new();
        let more = segment(&original(1000, TcpFlags::ACK), 1000).unwrap();
        g.receive_batch_verified(
            more.into_iter().map(Packet::new),
            &mut out,
            &mut ok2,
            &mut pool,
        );
        assert_eq!(ok2, vec![true]);
    }

    #[test]
    fn interleaved_flows_and_pure_acks() {
        let a = segment(&original(3000, TcpFlags::ACK), 1000).unwrap();
        let mut spec = TcpPacketSpec {
            sport: 40001,
            ..TcpPacketSpec::default()
        };
        let mut b_orig = Vec::new();
        build_ipv4_tcp(&spec, &[5u8; 2000], &mut b_orig);
        let b = segment(&b_orig, 1000).unwrap();
        spec.sport = 40002;
        let mut ack = Vec::new();
        build_ipv4_tcp(&spec, &[], &mut ack);
        let batch = vec![
            a[0].clone(),
            b[0].clone(),
            a[1].clone(),
            ack.clone(),
            b[1].clone(),
            a[2].clone(),
        ];
        let (out, _) = run(batch);
        // The pure ACK passes straight up; the two aggregates are flushed at the end.
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].data, ack);
        assert_eq!(out[1].gso_size, Some(1000));
        assert_eq!(out[1].data.len(), 52 + 3000); // 20 IP + 32 TCP with TS option
        assert_eq!(out[2].data, b_orig);
    }

    #[test]
    fn ipv6_round_trip() {
        let payload = vec![0x5au8; 4000];
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&((20 + payload.len()) as u16).to_be_bytes());
        p.extend_from_slice(&[segment::IPPROTO_TCP, 64]);
        p.extend_from_slice(&[0xfd; 16]);
        p.extend_from_slice(&[0xfe; 16]);
        p.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89, 0, 0, 0, 1, 0, 0, 0, 1, 0x50, 0x18]);
        p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
        p.extend_from_slice(&payload);
        let v = segment::parse_tcp(&p).unwrap();
        segment::fill_tcp_checksum(&mut p, &v);
        let (out, st) = run(segment(&p, 1000).unwrap());
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data, p);
        assert_eq!(out[0].gso_size, Some(1000));
        assert_eq!(st.merged, 3);
    }

    #[test]
    fn garbage_never_panics() {
        let orig = original(3000, TcpFlags::ACK);
        let mut batch = Vec::new();
        for cut in 0..orig.len().min(120) {
            batch.push(orig[..cut].to_vec());
        }
        let (out, st) = run(batch);
        assert_eq!(out.len() as u64, st.packets_in);
    }
}
