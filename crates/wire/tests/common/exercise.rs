//! Feeds one byte string to every parser of `shallow_wire` and every accessor of what they
//! return; used by the random-input test and by the cargo-fuzz target. Any panic is a bug.
//! Whatever parses into a `Repr` must emit again and parse back to the same `Repr`.

use core::net::{IpAddr, Ipv6Addr};

use shallow_wire::{Icmpv4Repr, Icmpv6Repr, IpPacket, IpRepr, TcpPacket, TcpRepr, VirtioNetHdr};

/// Exercises every parser on `data`; returns how many layers parsed (for statistics).
pub fn exercise(data: &[u8]) -> usize {
    let mut parsed = 0;
    // virtio-net header, then the packet after it.
    for len in [VirtioNetHdr::LEN, VirtioNetHdr::LEN_MRG, 11] {
        if let Ok(h) = VirtioNetHdr::parse(data, len) {
            parsed += 1;
            let mut b = [0u8; 12];
            let n = h.emit(&mut b).expect("emit parsed virtio header");
            assert_eq!(VirtioNetHdr::parse(&b, n), Ok(h));
            let _ = (h.needs_csum(), h.gso_kind());
            parsed += exercise_ip(&data[len..]);
        }
    }
    parsed += exercise_ip(data);
    // Transport parsers on the raw bytes too, as if the IP layer had been stripped.
    let any = IpAddr::from(Ipv6Addr::LOCALHOST);
    parsed += exercise_tcp(data, any, any);
    let _ = Icmpv4Repr::parse(data);
    let _ = Icmpv6Repr::parse(data, Ipv6Addr::LOCALHOST, Ipv6Addr::UNSPECIFIED);
    parsed
}

fn exercise_ip(data: &[u8]) -> usize {
    let mut parsed = 0;
    for snapped in [false, true] {
        let ip = if snapped {
            IpPacket::parse_snapped(data)
        } else {
            IpPacket::parse(data)
        };
        let Ok(ip) = ip else { continue };
        parsed += 1;
        let _ = (
            ip.src(),
            ip.dst(),
            ip.protocol(),
            ip.ecn(),
            ip.tos(),
            ip.ttl(),
        );
        let _ = (ip.is_fragment(), ip.payload_len(), ip.is_snapped());
        match &ip {
            IpPacket::V4(p) => {
                let _ = (
                    p.header_len(),
                    p.dscp(),
                    p.total_len(),
                    p.ident(),
                    p.df(),
                    p.mf(),
                );
                let _ = (
                    p.reserved_flag(),
                    p.frag_offset(),
                    p.checksum(),
                    p.checksum_valid(),
                );
                let _ = (p.options(), p.header(), p.payload(), p.as_bytes());
            }
            IpPacket::V6(p) => {
                let _ = (
                    p.traffic_class(),
                    p.flow_label(),
                    p.payload_len(),
                    p.next_header(),
                );
                let _ = (
                    p.hop_limit(),
                    p.ext_headers_len(),
                    p.fragment(),
                    p.upper_len(),
                );
                let _ = (p.payload(), p.as_bytes());
            }
        }
        if let Ok(r) = IpRepr::parse(&ip) {
            let mut b = [0u8; 40];
            let n = r.emit(&mut b).expect("emit parsed IP header");
            assert_eq!(n, r.header_len());
            let _ = (r.src(), r.dst(), r.protocol(), r.payload_len());
        }
        parsed += exercise_tcp(ip.payload(), ip.src(), ip.dst());
        if let IpPacket::V6(p) = &ip {
            if let Ok(r) = Icmpv6Repr::parse(ip.payload(), p.src(), p.dst()) {
                parsed += 1;
                let mut b = vec![0u8; r.buffer_len()];
                r.emit(&mut b, p.src(), p.dst())
                    .expect("emit parsed ICMPv6");
                assert_eq!(Icmpv6Repr::parse(&b, p.src(), p.dst()), Ok(r));
            }
        } else if let Ok(r) = Icmpv4Repr::parse(ip.payload()) {
            parsed += 1;
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut b).expect("emit parsed ICMPv4");
            let back = Icmpv4Repr::parse(&b).expect("re-parse ICMPv4");
            // Destination-unreachable keeps only the low 16 bits of the second word.
            assert_eq!(back.type_code(), r.type_code());
        }
    }
    parsed
}

fn exercise_tcp(data: &[u8], src: IpAddr, dst: IpAddr) -> usize {
    let Ok(t) = TcpPacket::new_checked(data) else {
        return 0;
    };
    let _ = (
        t.src_port(),
        t.dst_port(),
        t.seq(),
        t.ack(),
        t.header_len(),
        t.flags(),
    );
    let _ = (
        t.window(),
        t.checksum(),
        t.urgent(),
        t.payload(),
        t.seg_len(),
    );
    let _ = t.flags().to_string();
    let _ = t.checksum_valid(src, dst);
    let mut n = 0;
    for o in t.options() {
        n += 1;
        assert!(n <= 40, "at most one option per byte");
        if let Ok(o) = o {
            let _ = o.kind();
        }
    }
    let r = TcpRepr::parse(&t).expect("TcpRepr::parse is lenient");
    let mut b = vec![0u8; 60 + t.payload().len()];
    match r.emit(&mut b, t.payload(), src, dst) {
        Ok(len) => {
            let back = TcpPacket::new_checked(&b[..len]).expect("re-parse emitted TCP");
            assert!(back.checksum_valid(src, dst));
            let again = TcpRepr::parse(&back).expect("re-parse");
            // Unknown options whose bytes happen to be a valid known option re-parse as that
            // option, so compare the emitted bytes instead of the Reprs.
            let mut b2 = vec![0u8; 60 + t.payload().len()];
            let len2 = again
                .emit(&mut b2, t.payload(), src, dst)
                .expect("emit again");
            assert_eq!(&b[..len], &b2[..len2]);
        }
        Err(_) => {
            // Only possible for a zero-length SACK option, which parse never produces.
            panic!("emit of a parsed TcpRepr failed: {r:?}");
        }
    }
    1
}
