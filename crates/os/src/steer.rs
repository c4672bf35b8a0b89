//! Which shard of a [`Host`](crate::Host) owns a flow: the one rule of flow ownership
//! ([`Steer::owner`]) and the packet parse that applies it to what a device queue reads
//! ([`Steer::owner_of_packet`]).
//!
//! A host over Q device queues runs Q engines (shards); a TCP 4-tuple belongs to exactly one,
//! `reciprocal_scale(hash(key, tuple), Q)` as Linux's RSS and `skb_tx_hash` scale a flow hash
//! to a queue, with a key of the host's own. Inbound, a packet is the flow's by its tuple seen
//! from this host (destination = local): IPv4 or IPv6 (hop-by-hop, routing and destination
//! options headers skipped) carrying TCP; an ICMP error (ICMPv4 destination unreachable,
//! source quench, time exceeded, parameter problem; ICMPv6 destination unreachable, packet too
//! big, time exceeded, parameter problem) by the TCP header it quotes, which is one this host
//! sent (source = local). Anything else — IP fragments, other protocols, other ICMP messages,
//! packets too short to say — goes to shard 0, whose engine answers or drops it as a one-shard
//! host would (a fragment is never TCP to the engine: it drops it).

use std::hash::Hasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use shallow_qdisc::FlowHasher;

const IPPROTO_TCP: u8 = 6;
const IPPROTO_ICMP: u8 = 1;
const IPPROTO_ICMPV6: u8 = 58;

/// The flow-ownership rule of one host: its key and its number of shards.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Steer {
    key: u64,
    shards: usize,
}

/// A 4-tuple seen from this host: (local address, local port, remote address, remote port).
pub(crate) type Tuple = (IpAddr, u16, IpAddr, u16);

impl Steer {
    /// The rule for `shards` shards with hash key `key`.
    pub fn new(key: u64, shards: usize) -> Steer {
        Steer {
            key,
            shards: shards.max(1),
        }
    }

    /// The shard that owns the flow `(local, lport, remote, rport)`.
    pub fn owner(&self, t: Tuple) -> usize {
        if self.shards == 1 {
            return 0;
        }
        let mut h = FlowHasher::default();
        h.write_u64(self.key);
        for (ip, port) in [(t.0, t.1), (t.2, t.3)] {
            match ip {
                IpAddr::V4(a) => h.write_u32(u32::from(a)),
                IpAddr::V6(a) => {
                    let v = u128::from(a);
                    h.write_u64((v >> 64) as u64);
                    h.write_u64(v as u64);
                }
            }
            h.write_u32(u32::from(port));
        }
        // The high half, scaled (`reciprocal_scale`): the multiply's high bits are its mixed
        // ones.
        let x = h.finish() >> 32;
        ((x * self.shards as u64) >> 32) as usize
    }

    /// The shard that owns a packet read from the device (see the module docs; shard 0 for
    /// anything that is not TCP or an ICMP error about TCP).
    pub fn owner_of_packet(&self, p: &[u8]) -> usize {
        if self.shards == 1 {
            return 0;
        }
        inbound_tuple(p).map_or(0, |t| self.owner(t))
    }
}

/// An IP packet's addresses, transport protocol and the offset of its transport header;
/// `None` for a fragment or a packet too short to say.
fn ip_header(p: &[u8]) -> Option<(IpAddr, IpAddr, u8, usize)> {
    match p.first()? >> 4 {
        4 => {
            let ihl = usize::from(p[0] & 0x0f) * 4;
            if ihl < 20 || p.len() < ihl {
                return None;
            }
            let frag = u16::from_be_bytes([p[6], p[7]]);
            if frag & 0x3fff != 0 {
                return None;
            }
            let a = |o: usize| IpAddr::V4(Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]));
            Some((a(12), a(16), p[9], ihl))
        }
        6 => {
            if p.len() < 40 {
                return None;
            }
            let a = |o: usize| {
                let b: [u8; 16] = p[o..o + 16].try_into().expect("16 bytes");
                IpAddr::V6(Ipv6Addr::from(b))
            };
            let mut next = p[6];
            let mut off = 40;
            // Hop-by-hop, routing, destination options; a fragment header (44) ends the parse.
            while matches!(next, 0 | 43 | 60) {
                next = *p.get(off)?;
                off += (usize::from(*p.get(off + 1)?) + 1) * 8;
            }
            Some((a(8), a(24), next, off))
        }
        _ => None,
    }
}

/// Whether `p` is an IP packet that carries TCP (after IPv6's extension headers; a
/// fragment or a packet too short to say is not).
pub(crate) fn is_tcp(p: &[u8]) -> bool {
    ip_header(p).is_some_and(|h| h.2 == 6)
}

/// The ports of the TCP header at `off`.
fn ports(p: &[u8], off: usize) -> Option<(u16, u16)> {
    let b = p.get(off..off + 4)?;
    Some((
        u16::from_be_bytes([b[0], b[1]]),
        u16::from_be_bytes([b[2], b[3]]),
    ))
}

/// The tuple (seen from this host) of an inbound TCP packet or of the TCP packet an inbound
/// ICMP error quotes.
pub(crate) fn inbound_tuple(p: &[u8]) -> Option<Tuple> {
    let (src, dst, proto, off) = ip_header(p)?;
    match proto {
        IPPROTO_TCP => {
            let (sport, dport) = ports(p, off)?;
            Some((dst, dport, src, sport))
        }
        IPPROTO_ICMP | IPPROTO_ICMPV6 => {
            let ty = *p.get(off)?;
            let error = if proto == IPPROTO_ICMP {
                matches!(ty, 3 | 4 | 11 | 12)
            } else {
                matches!(ty, 1..=4)
            };
            if !error {
                return None;
            }
            // The quoted packet (after the 8-byte ICMP header) is one this host sent.
            let inner = p.get(off + 8..)?;
            let (isrc, idst, iproto, ioff) = ip_header(inner)?;
            if iproto != IPPROTO_TCP {
                return None;
            }
            let (sport, dport) = ports(inner, ioff)?;
            Some((isrc, sport, idst, dport))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_tcp(src: [u8; 4], dst: [u8; 4], sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&40u16.to_be_bytes());
        p[9] = IPPROTO_TCP;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        p[20..22].copy_from_slice(&sport.to_be_bytes());
        p[22..24].copy_from_slice(&dport.to_be_bytes());
        p
    }

    fn v6_tcp(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16) -> Vec<u8> {
        let mut p = vec![0u8; 60];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&20u16.to_be_bytes());
        p[6] = IPPROTO_TCP;
        p[8..24].copy_from_slice(&src.octets());
        p[24..40].copy_from_slice(&dst.octets());
        p[40..42].copy_from_slice(&sport.to_be_bytes());
        p[42..44].copy_from_slice(&dport.to_be_bytes());
        p
    }

    const ME: [u8; 4] = [10, 0, 0, 2];
    const PEER: [u8; 4] = [10, 0, 0, 1];

    /// An inbound TCP packet's tuple is seen from this host (destination = local), and the
    /// owner of that tuple is the owner the connect filter computes for the same flow.
    #[test]
    fn tcp_packets_map_to_the_tuple_seen_from_here() {
        let p = v4_tcp(PEER, ME, 80, 40001);
        let t = inbound_tuple(&p).unwrap();
        assert_eq!(
            t,
            (IpAddr::from(ME), 40001, IpAddr::from(PEER), 80),
            "local first"
        );
        let (a, b) = (
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1),
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2),
        );
        let p6 = v6_tcp(a, b, 7, 9);
        assert_eq!(
            inbound_tuple(&p6).unwrap(),
            (IpAddr::V6(b), 9, IpAddr::V6(a), 7)
        );
        let st = Steer::new(0x1234, 4);
        assert_eq!(st.owner_of_packet(&p), st.owner(t));
    }

    /// Flows spread over the shards (every shard owns some of 64 ports' flows), one shard
    /// owns everything when there is one, and the rule is a function of the tuple and key.
    #[test]
    fn owners_spread_and_are_stable() {
        for n in [2usize, 3, 4] {
            let st = Steer::new(99, n);
            let mut seen = vec![0; n];
            for port in 40000..40064u16 {
                let t = (IpAddr::from(ME), port, IpAddr::from(PEER), 5001);
                let k = st.owner(t);
                assert_eq!(k, st.owner(t));
                seen[k] += 1;
            }
            assert!(seen.iter().all(|&c| c > 0), "{n} shards: {seen:?}");
        }
        let one = Steer::new(99, 1);
        assert_eq!(one.owner_of_packet(&[0u8; 3]), 0);
    }

    /// An ICMP error is the flow's it quotes (a packet this host sent: source = local);
    /// fragments, non-error ICMP and other protocols go to shard 0.
    #[test]
    fn icmp_errors_by_their_quote_and_the_rest_to_shard_0() {
        let quoted = v4_tcp(ME, PEER, 40001, 80);
        let mut icmp = vec![0u8; 28];
        icmp[0] = 0x45;
        icmp[9] = IPPROTO_ICMP;
        icmp[12..16].copy_from_slice(&[192, 168, 0, 1]);
        icmp[16..20].copy_from_slice(&ME);
        icmp[20] = 3; // destination unreachable
        icmp.extend_from_slice(&quoted[..28]);
        let t = inbound_tuple(&icmp).unwrap();
        assert_eq!(t, (IpAddr::from(ME), 40001, IpAddr::from(PEER), 80));
        let mut echo = icmp.clone();
        echo[20] = 8;
        assert_eq!(inbound_tuple(&echo), None);
        let mut frag = v4_tcp(PEER, ME, 80, 40001);
        frag[6] = 0x20; // more fragments
        assert_eq!(inbound_tuple(&frag), None);
        let mut udp = v4_tcp(PEER, ME, 80, 40001);
        udp[9] = 17;
        assert_eq!(inbound_tuple(&udp), None);
        let st = Steer::new(5, 4);
        assert_eq!(st.owner_of_packet(&frag), 0);
        assert_eq!(st.owner_of_packet(&udp), 0);
        assert_eq!(inbound_tuple(&[0x45, 0, 0]), None);
    }
}
