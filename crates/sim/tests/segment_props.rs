//! Properties of TSO segmentation and GRO: GRO(segment(p)) == p, every segment valid, and
//! arbitrary bytes never panic either.

use std::sync::Arc;

use proptest::prelude::*;

use shallow_sim::gro::Gro;
use shallow_sim::packet::{Packet, TsoParent, WireSeg};
use shallow_sim::pool::BufPool;
use shallow_sim::segment::{self, build_ipv4_tcp, TcpPacketSpec};
use shallow_wire::TcpFlags;

fn ipv6_tcp(payload: &[u8], seq: u32, fl: TcpFlags, opts: &[u8]) -> Vec<u8> {
    let tcp_len = 20 + opts.len();
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&((tcp_len + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[segment::IPPROTO_TCP, 64]);
    p.extend_from_slice(&[0xfd; 16]);
    p.extend_from_slice(&[0xfe; 16]);
    p.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p.extend_from_slice(&((((tcp_len / 4) as u16) << 12) | fl.bits()).to_be_bytes());
    p.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    p.extend_from_slice(opts);
    p.extend_from_slice(payload);
    let v = segment::parse_tcp(&p).unwrap();
    segment::fill_tcp_checksum(&mut p, &v);
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn gro_inverts_segmentation(
        v6 in any::<bool>(),
        mss in 1u16..3000,
        len in 1usize..20_000,
        seq in any::<u32>(),
        ip_id in any::<u16>(),
        psh in any::<bool>(),
        fin in any::<bool>(),
        ts in any::<bool>(),
        seed in any::<u8>(),
    ) {
        let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
        let mut fl = TcpFlags::ACK;
        fl.set(TcpFlags::PSH, psh);
        fl.set(TcpFlags::FIN, fin);
        let opts: Vec<u8> = if ts { vec![1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8] } else { vec![] };
        let orig = if v6 {
            ipv6_tcp(&payload, seq, fl, &opts)
        } else {
            let spec = TcpPacketSpec { seq, ip_id, flags: fl, options: opts, ..TcpPacketSpec::default() };
            let mut o = Vec::new();
            build_ipv4_tcp(&spec, &payload, &mut o);
            o
        };
        prop_assume!(orig.len() <= 65535);
        let segs = segment::segment(&orig, mss).unwrap();
        prop_assert_eq!(segs.len(), len.div_ceil(usize::from(mss)));
        let mut next = seq;
        for (i, s) in segs.iter().enumerate() {
            prop_assert!(segment::tcp_checksum_ok(s));
            let v = segment::parse_tcp(s).unwrap();
            prop_assert_eq!(v.seq, next);
            next = next.wrapping_add(v.payload_len as u32);
            let last = i + 1 == segs.len();
            prop_assert_eq!(v.flags.intersects(TcpFlags::PSH | TcpFlags::FIN), last && (psh || fin));
            prop_assert!(v.payload_len <= usize::from(mss));
        }
        let mut g = Gro::new();
        let mut out = Vec::new();
        let mut pool = BufPool::new(8);
        g.receive_batch(segs.into_iter().map(Packet::new), &mut out, &mut pool);
        prop_assert_eq!(out.len(), 1);
        let want_gso = (len > usize::from(mss)).then_some(mss);
        prop_assert_eq!(out[0].gso_size, want_gso);
        let mut got = out[0].data.clone();
        if want_gso.is_some() {
            // An aggregate's TCP checksum is left in the CHECKSUM_PARTIAL form; completed,
            // the aggregate is the original.
            let v = segment::parse_tcp(&got).unwrap();
            let mut partial = orig.clone();
            segment::fill_tcp_csum_partial(&mut partial, &v);
            prop_assert_eq!(&got, &partial);
            segment::complete_tcp_checksum(&mut got, &v);
        }
        prop_assert_eq!(&got, &orig);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        batch in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..120), 0..20),
        gso in 0u16..100,
    ) {
        let mut g = Gro::new();
        let mut out = Vec::new();
        let mut pool = BufPool::new(8);
        for d in &batch {
            let _ = segment::parse_tcp(d);
            let _ = segment::parse_tcp_split(d, usize::from(gso) * 10);
            let _ = segment::tcp_checksum_ok(d);
            let _ = segment::segment(d, gso);
        }
        let n = batch.len();
        g.receive_batch(batch.into_iter().map(Packet::new), &mut out, &mut pool);
        prop_assert_eq!(out.len(), n);
    }
}

/// One wire segment as the link delivers it in the lazy-vs-bytes property below.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Deliver,
    Drop,
    Duplicate,
    Corrupt(u16),
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        20 => Just(Fate::Deliver),
        1 => Just(Fate::Drop),
        1 => Just(Fate::Duplicate),
        1 => any::<u16>().prop_map(Fate::Corrupt),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// GRO over wire segments the NIC left unwritten (`Packet::seg`) passes up exactly what it
    /// passes up over the same segments written out: the same bytes, gso sizes, verified marks
    /// and counters, across TSO packet boundaries, batch boundaries, losses, duplicates,
    /// corruption, CWR and PSH/FIN, whether the sender offloaded the TSO packet's checksum
    /// or not.
    #[test]
    fn unwritten_segments_give_the_same_aggregates(
        v6 in any::<bool>(),
        mss in prop_oneof![Just(1448u16), 100u16..2000],
        // (segments, bytes short of full): a TSO packet of whole segments leaves GRO's
        // aggregate open for the next one.
        shapes in prop::collection::vec((1usize..25, prop_oneof![Just(0usize), 0usize..3000]), 1..4),
        seq in any::<u32>(),
        ip_id in any::<u16>(),
        cwr in any::<bool>(),
        psh_last in any::<bool>(),
        offloaded in any::<bool>(),
        paged in any::<bool>(),
        fates in prop::collection::vec(fate(), 200),
        cuts in prop::collection::vec(1usize..70, 1..6),
    ) {
        // Consecutive TSO packets of one flow, as a sender's NIC would get them.
        let m = usize::from(mss);
        let lens: Vec<usize> = shapes.iter().map(|&(n, short)| n * m - short.min(m - 1)).collect();
        let mut parents = Vec::new();
        let (mut s, mut id) = (seq, ip_id);
        for (k, &len) in lens.iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ (k as u8).wrapping_mul(31)).collect();
            let mut fl = TcpFlags::ACK;
            if cwr && k == 0 {
                fl |= TcpFlags::CWR;
            }
            if psh_last && k + 1 == lens.len() {
                fl |= TcpFlags::PSH;
            }
            let opts = vec![1, 1, 8, 10, 1, 2, 3, 4, 5, 6, 7, 8];
            let data = if v6 {
                ipv6_tcp(&payload, s, fl, &opts)
            } else {
                let spec = TcpPacketSpec { seq: s, ip_id: id, flags: fl, options: opts, ..TcpPacketSpec::default() };
                let mut o = Vec::new();
                build_ipv4_tcp(&spec, &payload, &mut o);
                o
            };
            prop_assume!(data.len() <= 65535);
            let mut data = data;
            if offloaded && len > m {
                // A sender with TSO checksum offload leaves the pseudo-header sum only.
                let v = segment::parse_tcp(&data).unwrap();
                segment::fill_tcp_csum_partial(&mut data, &v);
            }
            s = s.wrapping_add(len as u32);
            id = id.wrapping_add(len.div_ceil(usize::from(mss)) as u16);
            parents.push(data);
        }
        // The wire: (lazy, written-out) pairs after each segment's fate.
        let mut wire: Vec<(Packet, Packet)> = Vec::new();
        let mut f = fates.iter().cycle();
        for data in parents {
            let v = segment::parse_tcp(&data).unwrap();
            // A paged packet (headers, then the payload apart) cuts into the same segments.
            let made = if paged {
                let payload = bytes::Bytes::copy_from_slice(&data[v.payload_off..]);
                let head = data[..v.payload_off].to_vec();
                let pv = segment::parse_tcp_split(&head, payload.len()).unwrap();
                prop_assert_eq!(pv, v);
                TsoParent::from_parts(head, payload, pv, mss).map_err(|_| data.clone())
            } else {
                TsoParent::new(data.clone(), v, mss)
            };
            let lazy_parent = match made {
                Ok(p) => p,
                Err(whole) => {
                    wire.push((Packet::new(whole.clone()), Packet::new(whole)));
                    continue;
                }
            };
            for i in 0..lazy_parent.segs() {
                let lazy = Packet { seg: Some(WireSeg::new(Arc::clone(&lazy_parent), i)), ..Packet::default() };
                let mut bytes = Vec::new();
                segment::write_segment(&data, mss, i, &mut bytes).unwrap();
                prop_assert_eq!(lazy.len(), bytes.len());
                match *f.next().unwrap() {
                    Fate::Deliver => wire.push((lazy, Packet::new(bytes))),
                    Fate::Drop => {}
                    Fate::Duplicate => {
                        wire.push((lazy.clone(), Packet::new(bytes.clone())));
                        wire.push((lazy, Packet::new(bytes)));
                    }
                    Fate::Corrupt(bit) => {
                        let mut l = lazy;
                        let mut pool = BufPool::new(1);
                        l.materialize(&mut pool);
                        prop_assert_eq!(&l.data, &bytes);
                        let at = usize::from(bit) % (bytes.len() * 8);
                        l.data[at / 8] ^= 1 << (at % 8);
                        let mut b = bytes;
                        b[at / 8] ^= 1 << (at % 8);
                        wire.push((l, Packet::new(b)));
                    }
                }
            }
        }
        // Poll batches of varying size.
        let (mut gl, mut gb) = (Gro::new(), Gro::new());
        let (mut pl, mut pb) = (BufPool::new(8), BufPool::new(8));
        let mut rest = &wire[..];
        let mut c = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*c.next().unwrap()).min(rest.len());
            let (batch, more) = rest.split_at(n);
            rest = more;
            let (mut ol, mut vl, mut ob, mut vb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            gl.receive_batch_verified(batch.iter().map(|(l, _)| l.clone()), &mut ol, &mut vl, &mut pl);
            gb.receive_batch_verified(batch.iter().map(|(_, b)| b.clone()), &mut ob, &mut vb, &mut pb);
            prop_assert_eq!(ol.len(), ob.len());
            for (a, b) in ol.iter().zip(&ob) {
                prop_assert!(a.seg.is_none());
                prop_assert!(b.frag.is_empty());
                // A run of unwritten segments comes up as headers + the shared payload.
                let mut a = a.clone();
                if !a.frag.is_empty() {
                    prop_assert_eq!(Some(a.data.len()), segment::parse_tcp_split(&a.data, a.frag.len()).map(|v| v.payload_off));
                }
                a.linearize();
                prop_assert_eq!(&a.data, &b.data);
                prop_assert_eq!(a.gso_size, b.gso_size);
            }
            prop_assert_eq!(vl, vb);
        }
        prop_assert_eq!(gl.stats, gb.stats);
    }
}
