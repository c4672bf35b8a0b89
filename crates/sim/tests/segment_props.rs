//! Properties of TSO segmentation and GRO: GRO(segment(p)) == p, every segment valid, and
//! arbitrary bytes never panic either.

use proptest::prelude::*;

use shallow_sim::gro::Gro;
use shallow_sim::packet::Packet;
use shallow_sim::pool::BufPool;
use shallow_sim::segment::{self, build_ipv4_tcp, flags, TcpPacketSpec};

fn ipv6_tcp(payload: &[u8], seq: u32, fl: u8, opts: &[u8]) -> Vec<u8> {
    let tcp_len = 20 + opts.len();
    let mut p = vec![0x60, 0, 0, 0];
    p.extend_from_slice(&((tcp_len + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[segment::IPPROTO_TCP, 64]);
    p.extend_from_slice(&[0xfd; 16]);
    p.extend_from_slice(&[0xfe; 16]);
    p.extend_from_slice(&[0x9c, 0x40, 0x13, 0x89]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&[
        0,
        0,
        0,
        1,
        ((tcp_len / 4) as u8) << 4,
        fl,
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ]);
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
        let fl = flags::ACK | if psh { flags::PSH } else { 0 } | if fin { flags::FIN } else { 0 };
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
            prop_assert_eq!(v.flags & (flags::PSH | flags::FIN) != 0, last && (psh || fin));
            prop_assert!(v.payload_len <= usize::from(mss));
        }
        let mut g = Gro::new();
        let mut out = Vec::new();
        let mut pool = BufPool::new(8);
        g.receive_batch(segs.into_iter().map(Packet::new), &mut out, &mut pool);
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(&out[0].data, &orig);
        let want_gso = (len > usize::from(mss)).then_some(mss);
        prop_assert_eq!(out[0].gso_size, want_gso);
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
            let _ = segment::tcp_checksum_ok(d);
            let _ = segment::segment(d, gso);
        }
        let n = batch.len();
        g.receive_batch(batch.into_iter().map(Packet::new), &mut out, &mut pool);
        prop_assert_eq!(out.len(), n);
    }
}
