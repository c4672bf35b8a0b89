//! Bounded robustness test: hundreds of thousands of random and mutated inputs from a seeded
//! RNG go through every parser (see common/exercise.rs); none may panic. Mutations of valid
//! packets reach deep into the parsers (options, extension headers, ICMP) where purely random
//! bytes rarely get.

mod common;

use core::net::{Ipv4Addr, Ipv6Addr};

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shallow_wire::{
    IpRepr, Ipv4Repr, Ipv6Repr, SackBlocks, TcpFlags, TcpOptionRepr, TcpRepr, VirtioNetHdr,
    IPPROTO_TCP,
};

/// Valid packets to mutate: virtio + IPv4 + TCP with Linux's SYN options, IPv6 with
/// extension headers + TCP with SACK, ICMP errors quoting packets.
fn seeds() -> Vec<Vec<u8>> {
    let tcp = |opts: Vec<TcpOptionRepr>| TcpRepr {
        src_port: 40000,
        dst_port: 5001,
        seq: 1,
        ack: 2,
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 500,
        urgent: 0,
        options: opts,
    };
    let syn_opts = vec![
        TcpOptionRepr::Mss(1460),
        TcpOptionRepr::SackPermitted,
        TcpOptionRepr::Timestamps { tsval: 7, tsecr: 0 },
        TcpOptionRepr::Nop,
        TcpOptionRepr::WindowScale(7),
    ];
    let sack_opts = vec![
        TcpOptionRepr::Nop,
        TcpOptionRepr::Nop,
        TcpOptionRepr::Sack(SackBlocks::from_slice(&[(1, 2), (3, 4), (5, 6)]).unwrap()),
    ];
    let mut out = Vec::new();
    for (v6, opts) in [
        (false, syn_opts.clone()),
        (true, sack_opts),
        (true, syn_opts),
    ] {
        let t = tcp(opts);
        let payload = b"0123456789";
        let tl = t.header_len() + payload.len();
        let ip = if v6 {
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::LOCALHOST,
                dst: "fd00::2".parse().unwrap(),
                next_header: IPPROTO_TCP,
                hop_limit: 64,
                traffic_class: 2,
                flow_label: 5,
                payload_len: tl,
            })
        } else {
            IpRepr::V4(Ipv4Repr {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                protocol: IPPROTO_TCP,
                ttl: 64,
                tos: 1,
                df: true,
                ident: 9,
                payload_len: tl,
            })
        };
        let mut b = vec![0u8; 12 + ip.header_len() + tl];
        let vh = VirtioNetHdr {
            flags: 1,
            gso_type: 4,
            hdr_len: 74,
            gso_size: 1448,
            csum_start: 40,
            csum_offset: 16,
            num_buffers: Some(1),
        };
        let a = vh.emit(&mut b).unwrap();
        let h = ip.emit(&mut b[a..]).unwrap();
        t.emit(&mut b[a + h..], payload, ip.src(), ip.dst())
            .unwrap();
        out.push(b[a..].to_vec());
        out.push(b);
    }
    // IPv6 with hop-by-hop + routing + fragment + destination options before TCP.
    let mut v6 = out[2].clone();
    let ext: Vec<u8> = [
        &[43u8, 0, 1, 4, 0, 0, 0, 0][..],
        &[44, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[60, 0, 0, 0, 0, 0, 0, 1],
        &[6, 0, 1, 4, 0, 0, 0, 0],
    ]
    .concat();
    v6[6] = 0;
    let plen = u16::from_be_bytes([v6[4], v6[5]]) + ext.len() as u16;
    v6[4..6].copy_from_slice(&plen.to_be_bytes());
    v6.splice(40..40, ext);
    out.push(v6);
    // ICMPv4 frag-needed quoting the IPv4 packet; ICMPv6 packet-too-big quoting the IPv6 one.
    let mut icmp = vec![0u8; 20 + 8 + 28];
    let r = shallow_wire::Icmpv4Repr::DstUnreachable {
        code: 4,
        next_hop_mtu: 1400,
        invoking: &out[0][..28],
    };
    r.emit(&mut icmp[20..]).unwrap();
    Ipv4Repr {
        src: Ipv4Addr::new(10, 0, 0, 9),
        dst: Ipv4Addr::new(10, 0, 0, 1),
        protocol: 1,
        ttl: 64,
        tos: 0,
        df: false,
        ident: 0,
        payload_len: 36,
    }
    .emit(&mut icmp)
    .unwrap();
    out.push(icmp);
    let (s, d): (Ipv6Addr, Ipv6Addr) = ("fd00::9".parse().unwrap(), Ipv6Addr::LOCALHOST);
    let mut icmp6 = vec![0u8; 40 + 8 + 48];
    shallow_wire::Icmpv6Repr::PacketTooBig {
        mtu: 1280,
        invoking: &out[2][..48],
    }
    .emit(&mut icmp6[40..], s, d)
    .unwrap();
    Ipv6Repr {
        src: s,
        dst: d,
        next_header: 58,
        hop_limit: 64,
        traffic_class: 0,
        flow_label: 0,
        payload_len: 56,
    }
    .emit(&mut icmp6)
    .unwrap();
    out.push(icmp6);
    out
}

fn mutate(rng: &mut ChaCha8Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    let edits = 1 + rng.next_u32() % 4;
    for _ in 0..edits {
        if b.is_empty() {
            break;
        }
        let at = rng.next_u32() as usize % b.len();
        match rng.next_u32() % 6 {
            0 => b[at] = rng.next_u32() as u8,
            1 => b[at] ^= 1 << (rng.next_u32() % 8),
            2 => b.truncate(at),
            3 => {
                b[at] = [0, 1, 2, 3, 4, 5, 8, 0x0f, 0x40, 0x45, 0x60, 0xff]
                    [rng.next_u32() as usize % 12]
            }
            4 => {
                let extra = rng.next_u32() as usize % 64;
                let mut tail = vec![0u8; extra];
                rng.fill_bytes(&mut tail);
                b.extend_from_slice(&tail);
            }
            _ => b.insert(at, rng.next_u32() as u8),
        }
    }
    b
}

/// 200 000 inputs: half random bytes of random length (biased to start like IPv4/IPv6), half
/// mutations of valid packets. No panic, and the valid seeds parse deep (sanity check that the
/// harness reaches the option and ICMP parsers).
#[test]
fn random_and_mutated_inputs_never_panic() {
    let seeds = seeds();
    for s in &seeds {
        assert!(
            common::exercise::exercise(s) >= 2,
            "seed should parse: {s:?}"
        );
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x5A11_0000_0001);
    let mut deep = 0usize;
    for i in 0..200_000u32 {
        let input = if i % 2 == 0 {
            let len = rng.next_u32() as usize % 160;
            let mut b = vec![0u8; len];
            rng.fill_bytes(&mut b);
            if let Some(first) = b.first_mut() {
                match rng.next_u32() % 3 {
                    0 => *first = 0x45 + (*first % 11),
                    1 => *first = 0x60 | (*first & 0x0f),
                    _ => {}
                }
            }
            b
        } else {
            let s = &seeds[rng.next_u32() as usize % seeds.len()];
            mutate(&mut rng, s)
        };
        deep += common::exercise::exercise(&input);
    }
    assert!(
        deep > 100_000,
        "mutations should mostly still parse somewhere: {deep}"
    );
}
