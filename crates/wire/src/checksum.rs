//! The internet checksum (RFC 1071) and the pseudo-headers of TCP/UDP/ICMPv6.
//!
//! A *partial sum* (`u32`) is a one's-complement sum of 16-bit big-endian words, folded to at
//! most 16 bits, not yet complemented. Partial sums of consecutive pieces can be added with
//! [`combine`], as RFC 1071 §2(B) allows (one's-complement addition is associative and
//! commutative), provided every piece but the last has an even length.

use core::net::IpAddr;

/// Folds a wide one's-complement accumulator (16-bit words added into 64 bits, carries left
/// in the high bits) down to a 16-bit partial sum (RFC 1071 §4.1, "fold 32-bit sum to 16
/// bits"); not complemented. Zero only for a zero accumulator.
pub fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// The partial sum of `data`: its 16-bit big-endian words added in one's complement; an odd
/// final byte is padded with a zero byte on the right (RFC 1071 §4.1).
///
/// Computed as RFC 1071 §2 allows for speed: words are added in the machine's byte order
/// (§2(A), byte-order independence: the sum of byte-swapped words is the byte-swapped sum),
/// 64 bits at a time into a 128-bit accumulator (an add and an add-with-carry per 8 bytes;
/// §2(C), deferred carries), since a 64-bit word is the sum of its four 16-bit words modulo
/// 2^16 - 1 (2^16 ≡ 1), and the carries out of 16 bits are folded back at the end. The
/// folded sum is the same as word by word: a one's-complement sum depends only on the
/// total modulo 2^16 - 1, and is zero only when every byte is.
pub fn sum(data: &[u8]) -> u32 {
    let word = |b: &[u8]| {
        u128::from(u64::from_ne_bytes([
            b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
        ]))
    };
    let mut acc: u128 = 0;
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        acc += word(&b[0..8]);
        acc += word(&b[8..16]);
        acc += word(&b[16..24]);
        acc += word(&b[24..32]);
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for w in &mut words {
        acc += word(w);
    }
    // The last 0 to 7 bytes, padded with zeros on the right (they start at a multiple of
    // 8, so an odd last byte is a word's first byte).
    let tail = words.remainder();
    let mut last = [0u8; 8];
    last[..tail.len()].copy_from_slice(tail);
    acc += word(&last);
    // 2^64 ≡ 1 modulo 2^16 - 1: the high half folds onto the low one (the sum of a slice
    // stays far below 2^64 words, so `acc >> 64` is small).
    let (lo, carry) = (acc as u64).overflowing_add((acc >> 64) as u64);
    let native = fold(u64::from(fold(lo)) + u64::from(carry));
    u32::from(if cfg!(target_endian = "little") {
        native.swap_bytes()
    } else {
        native
    })
}

/// The partial sum of the bytes of `parts` read in order as one run: each part's [`sum`],
/// byte-swapped when the part starts at an odd offset of the run (RFC 1071 §2(B): the sum
/// of a run shifted by one byte is the byte-swapped sum; Linux's `csum_block_add`).
pub fn sum_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    let mut total: u64 = 0;
    let mut odd = false;
    for p in parts {
        let s = sum(p) as u16;
        total += u64::from(if odd { s.swap_bytes() } else { s });
        odd ^= p.len() % 2 == 1;
    }
    u32::from(fold(total))
}

/// Adds partial sums and returns the checksum to store in a header: the one's complement of
/// their one's-complement sum (RFC 1071 §1).
pub fn combine(partials: &[u32]) -> u16 {
    let total: u64 = partials.iter().map(|&p| u64::from(p)).sum();
    !fold(total)
}

/// The checksum of `data` alone, as stored in the IPv4 header checksum (RFC 791 §3.1) or an
/// ICMPv4 message (RFC 792).
pub fn internet(data: &[u8]) -> u16 {
    combine(&[sum(data)])
}

/// True when `partials` (which cover the checksum field itself) add up to 0xffff, the check a
/// receiver does (RFC 1071 §1).
pub fn verify(partials: &[u32]) -> bool {
    combine(partials) == 0
}

/// The partial sum of the pseudo-header for an upper-layer protocol `proto` carried in an IP
/// packet from `src` to `dst` with `len` bytes of upper-layer header and data.
///
/// For IPv4 this is the 12-byte pseudo-header of RFC 9293 §3.1 (source, destination, zero,
/// protocol, TCP length); for IPv6 the 40-byte one of RFC 8200 §8.1 (source, destination,
/// 32-bit upper-layer length, three zero bytes, next header). If the two addresses are of
/// different families, both are taken as IPv6 (IPv4 ones in their IPv4-mapped form).
pub fn pseudo_header(src: IpAddr, dst: IpAddr, proto: u8, len: u32) -> u32 {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            // The twelve bytes' words added directly (the same folded sum as
            // `pseudo_header_octets`: the sum depends only on the total modulo 2^16 - 1).
            let (s, d) = (u32::from(s), u32::from(d));
            let acc = [
                s >> 16,
                s & 0xffff,
                d >> 16,
                d & 0xffff,
                len >> 16,
                len & 0xffff,
            ]
            .iter()
            .map(|&w| u64::from(w))
            .sum::<u64>()
                + u64::from(proto);
            u32::from(fold(acc))
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            pseudo_header_octets(&v6(src).octets(), &v6(dst).octets(), proto, len)
        }
    }
}

/// [`pseudo_header`] for addresses given as they sit in the IP header: `src` and `dst` both
/// 4 bytes (IPv4, RFC 9293 §3.1) or both 16 (IPv6, RFC 8200 §8.1). Both layouts sum to the
/// addresses plus the protocol plus the length, so one rule serves both. The IPv4
/// pseudo-header holds a 16-bit length; larger values only occur with GSO super-segments
/// whose checksum is finished per segment, so they are folded in whole.
pub fn pseudo_header_octets(src: &[u8], dst: &[u8], proto: u8, len: u32) -> u32 {
    let mut acc = u64::from(sum(src)) + u64::from(sum(dst));
    acc += u64::from(len >> 16) + u64::from(len & 0xffff);
    acc += u64::from(proto);
    u32::from(fold(acc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::net::{Ipv4Addr, Ipv6Addr};

    /// A run cut into pieces at any offsets, odd ones included, sums as the whole run.
    #[test]
    fn sum_parts_equals_the_sum_of_the_joined_bytes() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 37 + 11) as u8).collect();
        for cuts in [
            vec![0, 1001],
            vec![0, 1, 1001],
            vec![0, 3, 4, 9, 500, 1001],
            vec![0, 2, 7, 7, 8, 1000, 1001],
        ] {
            let parts: Vec<&[u8]> = cuts.windows(2).map(|w| &data[w[0]..w[1]]).collect();
            assert_eq!(
                combine(&[sum_parts(parts.iter().copied())]),
                combine(&[sum(&data)]),
                "cuts {cuts:?}"
            );
        }
    }

    /// The worked example of RFC 1071 §3: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(sum(&data), 0xddf2);
        assert_eq!(internet(&data), !0xddf2);
    }

    /// RFC 1071 §4.1: an odd trailing byte is padded with zero on the right.
    #[test]
    fn odd_length_pads_right() {
        assert_eq!(sum(&[0x12]), 0x1200);
        assert_eq!(sum(&[0x12, 0x34, 0x56]), 0x1234 + 0x5600);
    }

    /// Splitting at an even offset gives the same checksum as summing the whole (RFC 1071 §2(B)).
    #[test]
    fn combine_is_associative() {
        let data: Vec<u8> = (0..=255u8).cycle().take(1001).collect();
        let whole = internet(&data);
        for split in (0..data.len()).step_by(2) {
            assert_eq!(combine(&[sum(&data[..split]), sum(&data[split..])]), whole);
        }
    }

    /// The fast sum equals the plain RFC 1071 §4.1 loop (16-bit big-endian words, end-around
    /// carry, odd byte padded on the right) for every length and offset.
    #[test]
    fn sum_matches_reference_loop() {
        fn reference(data: &[u8]) -> u32 {
            let mut acc: u32 = 0;
            for w in data.chunks(2) {
                let word = u32::from(w[0]) << 8 | u32::from(*w.get(1).unwrap_or(&0));
                acc += word;
                acc = (acc & 0xffff) + (acc >> 16);
            }
            acc
        }
        let mut x: u32 = 0x1234_5678;
        let data: Vec<u8> = (0..(1 << 20) + 40)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        for start in 0..4 {
            for len in (0..200).chain([1499, 1500, 32 * 1024 + 1, 65535, 70_000, (1 << 20) + 33]) {
                let d = &data[start..start + len];
                assert_eq!(sum(d), reference(d), "start {start} len {len}");
            }
        }
        assert_eq!(sum(&[0xff; 64]), 0xffff);
        assert_eq!(sum(&[0; 64]), 0);
    }

    /// A message with its checksum filled in verifies (RFC 1071 §1).
    #[test]
    fn verify_after_fill() {
        let mut data = vec![
            0x45, 0, 0, 40, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let c = internet(&data);
        data[10..12].copy_from_slice(&c.to_be_bytes());
        assert!(verify(&[sum(&data)]));
        data[0] ^= 1;
        assert!(!verify(&[sum(&data)]));
    }

    /// The IPv4 pseudo-header of RFC 9293 §3.1 equals the sum of its 12 bytes laid out.
    #[test]
    fn pseudo_header_v4_layout() {
        let s = Ipv4Addr::new(192, 0, 2, 1);
        let d = Ipv4Addr::new(198, 51, 100, 7);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&s.octets());
        bytes.extend_from_slice(&d.octets());
        bytes.extend_from_slice(&[0, 6, 0x05, 0xdc]);
        assert_eq!(pseudo_header(s.into(), d.into(), 6, 1500), sum(&bytes));
    }

    /// The IPv6 pseudo-header of RFC 8200 §8.1 equals the sum of its 40 bytes laid out.
    #[test]
    fn pseudo_header_v6_layout() {
        let s: Ipv6Addr = "2001:db8::1".parse().unwrap();
        let d: Ipv6Addr = "2001:db8::ffff:2".parse().unwrap();
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&s.octets());
        bytes.extend_from_slice(&d.octets());
        bytes.extend_from_slice(&70000u32.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 58]);
        assert_eq!(pseudo_header(s.into(), d.into(), 58, 70000), sum(&bytes));
    }
}
