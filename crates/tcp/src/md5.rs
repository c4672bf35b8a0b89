//! TCP-MD5 signatures (RFC 2385), as Linux's `CONFIG_TCP_MD5SIG`: a socket's key table
//! (`TCP_MD5SIG` / `TCP_MD5SIG_EXT`, `struct tcp_md5sig`), the most specific key for a peer
//! (`tcp_md5_do_lookup`), the digest of a segment (`tcp_v4_md5_hash_skb`,
//! `tcp_v6_md5_hash_skb`) and the inbound check (`tcp_inbound_md5_hash`).
//!
//! Rules measured on Linux 6.18 (python3 and tcpdump over loopback in a network namespace):
//! - `setsockopt`: an `optlen` below `sizeof(struct tcp_md5sig)` (216) is EINVAL, a longer
//!   one is accepted; the address family must be the socket's (AF_INET on an AF_INET socket,
//!   AF_INET6 on an AF_INET6 one, where an IPv4-mapped address names an IPv4 key), else
//!   EINVAL; with `TCP_MD5SIG_EXT` and `TCP_MD5SIG_FLAG_PREFIX` a prefix longer than the
//!   address (32, or 32 for a mapped address, 128) is EINVAL, without the flag the prefix is
//!   the whole address; `TCP_MD5SIG_FLAG_IFINDEX` with a non-zero index is EINVAL (it must
//!   name an L3 master device, and Shallow has none), other flag bits are ignored; a key
//!   longer than `TCP_MD5SIG_MAXKEYLEN` (80) is EINVAL; `tcpm_keylen` 0 deletes the key of
//!   that address and prefix, ENOENT if there is none; `getsockopt` is ENOPROTOOPT.
//! - A keyed socket's SYN and SYN-ACK carry `nop,nop,md5` first, then MSS (unchanged: 1460 on
//!   a 1500-byte MTU), SACK-permitted and window scale, and no timestamps; its data
//!   segments carry 20 bytes fewer payload (1440), each signed on its own (no TSO/GSO), while
//!   both ends' `tcpi_snd_mss` stays 1460.
//! - A keyed listener answering a signed SYN that offers timestamps gives them up when SACK
//!   is on (`md5,mss,nop,nop,sackOK,nop,wscale`) and keeps them otherwise
//!   (`md5,mss,nop,nop,TS,nop,wscale`; a raw-socket client).
//! - A segment from a peer with a key but without a signature is dropped
//!   (`TcpExtTCPMD5NotFound`), one with a wrong signature too (`TcpExtTCPMD5Failure`), a
//!   signed one to a socket without a key for its peer too (`TcpExtTCPMD5Unexpected`).
//! - TIME_WAIT checks no signature (out-of-window ACKs unsigned, wrongly and rightly signed
//!   each draw its ACK, no counter moves) and signs its ACKs. RSTs are signed with the key of
//!   the socket that sends them; a signed segment that meets no socket is answered only by
//!   a listener on our address at the segment's source port holding a key under which it
//!   verifies, with a RST signed by that key (`tcp_v4_send_reset`), else not at all.

use crate::errno::Errno;
use crate::sockopt::OptVal;
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// `TCP_MD5SIG_MAXKEYLEN`: the longest key.
pub const TCP_MD5SIG_MAXKEYLEN: usize = 80;
/// `TCP_MD5SIG_FLAG_PREFIX`: `tcpm_prefixlen` is valid (`TCP_MD5SIG_EXT` only).
pub const TCP_MD5SIG_FLAG_PREFIX: u8 = 1;
/// `TCP_MD5SIG_FLAG_IFINDEX`: `tcpm_ifindex` is valid (`TCP_MD5SIG_EXT` only).
pub const TCP_MD5SIG_FLAG_IFINDEX: u8 = 2;
/// `sizeof(struct tcp_md5sig)`: a `sockaddr_storage` (128), flags, prefix length, key
/// length, interface index and the 80-byte key.
pub const TCP_MD5SIG_STRUCT_LEN: usize = 216;
/// Option kind of the signature (RFC 2385 §3.0).
pub(crate) const TCPOPT_MD5SIG: u8 = 19;
/// Bytes the signature takes in a TCP header: `nop,nop` and the 18-byte option
/// (`TCPOLEN_MD5SIG_ALIGNED`).
pub(crate) const TCPOLEN_MD5SIG_ALIGNED: u32 = 20;

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;

/// A decoded `struct tcp_md5sig`, the value of `TCP_MD5SIG`/`TCP_MD5SIG_EXT`. On the wire of
/// `setsockopt` it is Linux's layout on a little-endian host (x86-64, aarch64): the
/// `sockaddr_storage` family in host order, port and address in network order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Md5Sig {
    /// `tcpm_addr`: the peer's address (`None` for a family other than AF_INET/AF_INET6).
    pub addr: Option<IpAddr>,
    /// `tcpm_flags` (`TCP_MD5SIG_FLAG_*`, read with `TCP_MD5SIG_EXT` only).
    pub flags: u8,
    /// `tcpm_prefixlen` (read with `TCP_MD5SIG_EXT` and `TCP_MD5SIG_FLAG_PREFIX`).
    pub prefixlen: u8,
    /// `tcpm_keylen`: 0 deletes the key.
    pub keylen: u16,
    /// `tcpm_ifindex` (read with `TCP_MD5SIG_FLAG_IFINDEX`).
    pub ifindex: i32,
    /// `tcpm_key` (80 bytes; the first `keylen` are the key).
    pub key: [u8; TCP_MD5SIG_MAXKEYLEN],
}

impl Md5Sig {
    /// A key for the peer `addr` (a whole address, as `TCP_MD5SIG`); an empty key deletes.
    /// A key longer than 80 bytes keeps its length in `keylen` (the struct holds its first
    /// 80 bytes), so `setsockopt` refuses it with EINVAL as Linux does.
    pub fn new(addr: IpAddr, key: &[u8]) -> Md5Sig {
        let mut k = [0u8; TCP_MD5SIG_MAXKEYLEN];
        let n = key.len().min(TCP_MD5SIG_MAXKEYLEN);
        k[..n].copy_from_slice(&key[..n]);
        Md5Sig {
            addr: Some(addr),
            flags: 0,
            prefixlen: 0,
            keylen: key.len().min(usize::from(u16::MAX)) as u16,
            ifindex: 0,
            key: k,
        }
    }

    /// A key for every peer in `addr/prefixlen` (`TCP_MD5SIG_EXT` with
    /// `TCP_MD5SIG_FLAG_PREFIX`).
    pub fn with_prefix(addr: IpAddr, prefixlen: u8, key: &[u8]) -> Md5Sig {
        Md5Sig {
            flags: TCP_MD5SIG_FLAG_PREFIX,
            prefixlen,
            ..Md5Sig::new(addr, key)
        }
    }

    /// The 216 bytes of `struct tcp_md5sig` (see the type's layout note).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut b = vec![0u8; TCP_MD5SIG_STRUCT_LEN];
        match self.addr {
            Some(IpAddr::V4(a)) => {
                b[0..2].copy_from_slice(&AF_INET.to_le_bytes());
                b[4..8].copy_from_slice(&a.octets());
            }
            Some(IpAddr::V6(a)) => {
                b[0..2].copy_from_slice(&AF_INET6.to_le_bytes());
                b[8..24].copy_from_slice(&a.octets());
            }
            None => {}
        }
        b[128] = self.flags;
        b[129] = self.prefixlen;
        b[130..132].copy_from_slice(&self.keylen.to_le_bytes());
        b[132..136].copy_from_slice(&self.ifindex.to_le_bytes());
        b[136..216].copy_from_slice(&self.key);
        b
    }

    /// Decode `optval` (`tcp_v4_parse_md5_keys` / `tcp_v6_parse_md5_keys`): shorter than 216
    /// bytes is EINVAL; bytes past 216 are ignored.
    pub fn from_bytes(b: &[u8]) -> Result<Md5Sig, Errno> {
        if b.len() < TCP_MD5SIG_STRUCT_LEN {
            return Err(Errno::EINVAL);
        }
        let addr = match u16::from_le_bytes([b[0], b[1]]) {
            AF_INET => Some(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7]))),
            AF_INET6 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(&b[8..24]);
                Some(IpAddr::V6(Ipv6Addr::from(o)))
            }
            _ => None,
        };
        let mut key = [0u8; TCP_MD5SIG_MAXKEYLEN];
        key.copy_from_slice(&b[136..216]);
        Ok(Md5Sig {
            addr,
            flags: b[128],
            prefixlen: b[129],
            keylen: u16::from_le_bytes([b[130], b[131]]),
            ifindex: i32::from_le_bytes([b[132], b[133], b[134], b[135]]),
            key,
        })
    }
}

/// One key of a socket (`struct tcp_md5sig_key`): the peers it covers, as the wire addresses
/// them (an IPv4-mapped address is kept as IPv4), and the key.
#[derive(Clone, Debug)]
pub(crate) struct Md5Key {
    addr: IpAddr,
    prefixlen: u8,
    /// The key bytes, shared with the packets being signed.
    pub key: Arc<[u8]>,
}

impl Md5Key {
    /// True when `peer` (a wire address) lies in this key's prefix.
    fn covers(&self, peer: IpAddr) -> bool {
        match (self.addr, peer) {
            (IpAddr::V4(k), IpAddr::V4(p)) => prefix_eq(&k.octets(), &p.octets(), self.prefixlen),
            (IpAddr::V6(k), IpAddr::V6(p)) => prefix_eq(&k.octets(), &p.octets(), self.prefixlen),
            _ => false,
        }
    }
}

/// The first `bits` bits of `a` and `b` are equal.
fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let bits = usize::from(bits).min(a.len() * 8);
    let (whole, rest) = (bits / 8, bits % 8);
    if a[..whole] != b[..whole] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[whole] & mask == b[whole] & mask
}

/// A socket's TCP-MD5 keys (`struct tcp_md5sig_info`). Once a socket has had a key it keeps
/// this table, and stays without TSO/GSO, even when the last key is deleted (Linux's
/// `sk_gso_disable` is not undone). A table holds at most [`Md5Keys::MAX_KEYS`] keys: the
/// kernel bounds them by `optmem_max`; a further add is ENOMEM there, as here.
#[derive(Clone, Debug, Default)]
pub(crate) struct Md5Keys {
    keys: Vec<Md5Key>,
}

impl Md5Keys {
    /// Keys per socket: what the default `net.core.optmem_max` (131072) holds of the
    /// kernel's ~136-byte key allocations would be ~960; we keep a smaller, round bound.
    pub const MAX_KEYS: usize = 256;

    /// The key for `peer` (a wire address): of the keys covering it, the one with the longest
    /// prefix (`tcp_md5_do_lookup`).
    pub fn lookup(&self, peer: IpAddr) -> Option<&Md5Key> {
        self.keys
            .iter()
            .filter(|k| k.covers(peer))
            .max_by_key(|k| k.prefixlen)
    }

    /// A table holding only `key` for exactly `peer` (`tcp_v4_syn_recv_sock` copies the
    /// listener's key for the peer into the child as a whole-address key).
    pub fn for_child(peer: IpAddr, key: Arc<[u8]>) -> Md5Keys {
        let prefixlen = if peer.is_ipv4() { 32 } else { 128 };
        Md5Keys {
            keys: vec![Md5Key {
                addr: peer,
                prefixlen,
                key,
            }],
        }
    }
}

/// `setsockopt(TCP_MD5SIG or TCP_MD5SIG_EXT)` on a socket of family `v6` (AF_INET6 when true),
/// on its table `keys` (created at the first key).
pub(crate) fn setsockopt(
    keys: &mut Option<Box<Md5Keys>>,
    v6: bool,
    ext: bool,
    val: &OptVal,
) -> Result<(), Errno> {
    let bytes = match val {
        OptVal::Bytes(b) => b.as_slice(),
        OptVal::Str(s) => s.as_bytes(),
        _ => return Err(Errno::EINVAL),
    };
    let cmd = Md5Sig::from_bytes(bytes)?;
    // The family must be the socket's; an AF_INET6 key for an IPv4-mapped address is an
    // IPv4 key (taken on an IPv6-only socket too: measured).
    let addr = match (cmd.addr, v6) {
        (Some(IpAddr::V4(a)), false) => IpAddr::V4(a),
        (Some(IpAddr::V6(a)), true) => match a.to_ipv4_mapped() {
            Some(m) => IpAddr::V4(m),
            None => IpAddr::V6(a),
        },
        _ => return Err(Errno::EINVAL),
    };
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let prefixlen = if ext && cmd.flags & TCP_MD5SIG_FLAG_PREFIX != 0 {
        if cmd.prefixlen > full {
            return Err(Errno::EINVAL);
        }
        cmd.prefixlen
    } else {
        full
    };
    // An interface index must name an L3 master (VRF) device; Shallow has none.
    if ext && cmd.flags & TCP_MD5SIG_FLAG_IFINDEX != 0 && cmd.ifindex != 0 {
        return Err(Errno::EINVAL);
    }
    let same = |k: &Md5Key| k.addr == addr && k.prefixlen == prefixlen;
    if cmd.keylen == 0 {
        let t = keys.as_mut().ok_or(Errno::ENOENT)?;
        let at = t.keys.iter().position(same).ok_or(Errno::ENOENT)?;
        t.keys.remove(at);
        return Ok(());
    }
    let n = usize::from(cmd.keylen);
    if n > TCP_MD5SIG_MAXKEYLEN {
        return Err(Errno::EINVAL);
    }
    let key: Arc<[u8]> = Arc::from(&cmd.key[..n]);
    let t = keys.get_or_insert_with(Default::default);
    if let Some(k) = t.keys.iter_mut().find(|k| same(k)) {
        k.key = key;
        return Ok(());
    }
    if t.keys.len() >= Md5Keys::MAX_KEYS {
        return Err(Errno::ENOMEM);
    }
    t.keys.push(Md5Key {
        addr,
        prefixlen,
        key,
    });
    Ok(())
}

/// The RFC 2385 §2.0 digest of a segment from `src` to `dst`: the pseudo-header (IPv4's
/// 12 bytes, or IPv6's 40 as `tcp_v6_md5_hash_headers`), the 20-byte TCP header without
/// options and with a zero checksum (`fixed`, whose checksum bytes are ignored), the payload
/// and the key. `tcp_len` is the TCP length (header with options, and payload).
pub(crate) fn digest<'a>(
    src: IpAddr,
    dst: IpAddr,
    fixed: &[u8],
    tcp_len: u32,
    payload: impl IntoIterator<Item = &'a [u8]>,
    key: &[u8],
) -> [u8; 16] {
    use ::md5::{Digest, Md5};
    let mut h = Md5::new();
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.update(s.octets());
            h.update(d.octets());
            h.update([0, shallow_wire::IPPROTO_TCP]);
            h.update((tcp_len as u16).to_be_bytes());
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped(),
                IpAddr::V6(a) => a,
            };
            h.update(v6(src).octets());
            h.update(v6(dst).octets());
            h.update(tcp_len.to_be_bytes());
            h.update([0, 0, 0, shallow_wire::IPPROTO_TCP]);
        }
    }
    let mut hdr = [0u8; 20];
    let n = fixed.len().min(20);
    hdr[..n].copy_from_slice(&fixed[..n]);
    hdr[16] = 0;
    hdr[17] = 0;
    h.update(hdr);
    for p in payload {
        h.update(p);
    }
    h.update(key);
    h.finalize().into()
}

/// A connection's side of TCP-MD5.
impl crate::socket::Connection {
    /// The key this connection signs with: its table's key for the peer
    /// (`tp->af_specific->md5_lookup(sk, sk)`), looked up per segment as Linux does, so a key
    /// changed on a connected socket applies at once.
    pub(crate) fn md5_key(&self) -> Option<Arc<[u8]>> {
        let t = self.md5.as_ref()?;
        t.lookup(self.remote.ip()).map(|k| k.key.clone())
    }

    /// Bytes the signature adds to each segment's header: 20 when the peer has a key, else 0.
    pub(crate) fn md5_opt_len(&self) -> u32 {
        match &self.md5 {
            Some(t) if t.lookup(self.remote.ip()).is_some() => TCPOLEN_MD5SIG_ALIGNED,
            _ => 0,
        }
    }

    /// The device may cut this socket's packets (TSO/GSO): not once the socket has had a
    /// TCP-MD5 key, since each segment carries its own signature (`sk_gso_disable` in
    /// `tcp_md5_do_add` and at the passive open).
    pub(crate) fn gso_ok(&self, env: &crate::env::Env) -> bool {
        env.device.caps.gso && self.md5.is_none()
    }

    /// `tcp_inbound_md5_hash` for a segment to this connection (or listener).
    pub(crate) fn md5_inbound(&self, seg: &crate::packet::SegIn<'_>) -> Verdict {
        inbound(self.md5.as_deref(), seg)
    }
}

/// What `tcp_inbound_md5_hash` decides for a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Neither a key nor a signature, or a signature that verifies: go on.
    Pass,
    /// A key for the peer but no signature (`TcpExtTCPMD5NotFound`).
    NotFound,
    /// A signature but no key for the peer (`TcpExtTCPMD5Unexpected`).
    Unexpected,
    /// A signature that does not verify (`TcpExtTCPMD5Failure`).
    Failure,
}

impl Verdict {
    /// The counter a drop raises (`None` for [`Verdict::Pass`]).
    pub fn mib(self) -> Option<crate::Mib> {
        match self {
            Verdict::Pass => None,
            Verdict::NotFound => Some(crate::Mib::TCPMD5NotFound),
            Verdict::Unexpected => Some(crate::Mib::TCPMD5Unexpected),
            Verdict::Failure => Some(crate::Mib::TCPMD5Failure),
        }
    }
}

/// `tcp_inbound_md5_hash`: check `seg` against the key `keys` hold for its source.
pub(crate) fn inbound(keys: Option<&Md5Keys>, seg: &crate::packet::SegIn<'_>) -> Verdict {
    let key = keys.and_then(|k| k.lookup(seg.src.ip()));
    match (key, seg.md5_digest()) {
        (None, None) => Verdict::Pass,
        (Some(_), None) => Verdict::NotFound,
        (None, Some(_)) => Verdict::Unexpected,
        (Some(k), Some(got)) => {
            if seg.md5_expected(&k.key) == Some(*got) {
                Verdict::Pass
            } else {
                Verdict::Failure
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Packets Linux 6.18 sent over loopback with the key "secret" (tcpdump): a SYN, the
    /// third ACK (IPv4), and an IPv6 SYN. The digest recomputed from each packet is the one
    /// it carries.
    #[test]
    fn digest_matches_linux_packets() {
        let pkts = [
            "45000048a7cc4000400694e17f0000017f000001e61a1388f33a388d00000000d002faf0fe3c00000101131203228272b4aed9468794cc9cf26967b4020405b4010104020103030a",
            "4500003ca7cd4000400694ec7f0000017f000001e61a1388f33a388e3b72eea2a010003ffe300000010113123e3ceca58c52727837a3758aea01aaea",
            "600871d90034064000000000000000000000000000000001000000000000000000000000000000019fc213887fd51bff00000000d002fd20003c00000101131268140e479883621a7299a57a0bda97ab020405a0010104020103030a",
        ];
        // And a data segment: its header, then 1440 bytes of 'x'.
        let data = format!(
            "{}{}",
            "450005dca7ce400040068f4b7f0000017f000001e61a1388f33a388e3b72eea2a010003f03d100000101131262f446dc6009fadeaff53f9e75af015f",
            "78".repeat(1440)
        );
        for p in pkts.iter().copied().chain([data.as_str()]) {
            let b = hex(p);
            // Loopback leaves the TCP checksum to a device that never computes it.
            let seg = crate::packet::parse(&b, None, true).expect("a valid packet");
            let got = *seg.md5_digest().expect("signed");
            assert_eq!(seg.md5_expected(b"secret"), Some(got), "{p}");
            assert_ne!(seg.md5_expected(b"secreT"), Some(got));
            let mut keys = None;
            let addr = seg.src.ip();
            setsockopt(
                &mut keys,
                addr.is_ipv6(),
                false,
                &OptVal::Bytes(Md5Sig::new(addr, b"secret").to_bytes()),
            )
            .unwrap();
            assert_eq!(inbound(keys.as_deref(), &seg), Verdict::Pass);
            assert_eq!(inbound(None, &seg), Verdict::Unexpected);
        }
    }

    fn add(keys: &mut Option<Box<Md5Keys>>, v6: bool, ext: bool, s: &Md5Sig) -> Result<(), Errno> {
        setsockopt(keys, v6, ext, &OptVal::Bytes(s.to_bytes()))
    }

    /// The errnos measured on 6.18 (see the module comment).
    #[test]
    fn setsockopt_errnos_as_linux() {
        let a4: IpAddr = "10.0.0.1".parse().unwrap();
        let a6: IpAddr = "2001:db8::1".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.0".parse().unwrap();
        let mut k = None;
        let good = Md5Sig::new(a4, b"key").to_bytes();
        let short = OptVal::Bytes(good[..215].to_vec());
        assert_eq!(setsockopt(&mut k, false, false, &short), Err(Errno::EINVAL));
        let mut long = good.clone();
        long.extend_from_slice(&[0; 84]);
        assert_eq!(
            setsockopt(&mut k, false, false, &OptVal::Bytes(long)),
            Ok(())
        );
        assert_eq!(
            setsockopt(&mut k, false, false, &OptVal::Int(1)),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            add(&mut k, false, false, &Md5Sig::new(a4, &[7; 80])),
            Ok(())
        );
        let too_long = Md5Sig::new(a4, &[7; 81]);
        assert_eq!(too_long.keylen, 81);
        assert_eq!(add(&mut k, false, false, &too_long), Err(Errno::EINVAL));
        // Delete: present, then absent; never-keyed socket.
        assert_eq!(add(&mut k, false, false, &Md5Sig::new(a4, b"")), Ok(()));
        assert_eq!(
            add(&mut k, false, false, &Md5Sig::new(a4, b"")),
            Err(Errno::ENOENT)
        );
        assert_eq!(
            add(&mut None, false, false, &Md5Sig::new(a4, b"")),
            Err(Errno::ENOENT)
        );
        // Families.
        assert_eq!(
            add(&mut k, false, false, &Md5Sig::new(a6, b"k")),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            add(&mut k, true, false, &Md5Sig::new(a4, b"k")),
            Err(Errno::EINVAL)
        );
        let mut unspec = Md5Sig::new(a4, b"k");
        unspec.addr = None;
        assert_eq!(add(&mut k, false, false, &unspec), Err(Errno::EINVAL));
        assert_eq!(add(&mut k, true, false, &Md5Sig::new(a6, b"k")), Ok(()));
        assert_eq!(add(&mut k, true, false, &Md5Sig::new(mapped, b"k")), Ok(()));
        // Prefixes.
        let net: IpAddr = "10.0.0.0".parse().unwrap();
        assert_eq!(
            add(&mut k, false, true, &Md5Sig::with_prefix(net, 24, b"k")),
            Ok(())
        );
        assert_eq!(
            add(&mut k, false, true, &Md5Sig::with_prefix(net, 33, b"k")),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            add(&mut k, false, false, &Md5Sig::with_prefix(net, 33, b"k")),
            Ok(()),
            "TCP_MD5SIG ignores the prefix"
        );
        assert_eq!(
            add(&mut k, true, true, &Md5Sig::with_prefix(a6, 129, b"k")),
            Err(Errno::EINVAL)
        );
        assert_eq!(
            add(&mut k, true, true, &Md5Sig::with_prefix(mapped, 24, b"k")),
            Ok(())
        );
        assert_eq!(
            add(&mut k, true, true, &Md5Sig::with_prefix(mapped, 33, b"k")),
            Err(Errno::EINVAL)
        );
        // Interface index: only 0 (no L3 master devices); unknown flags are ignored.
        let mut dev = Md5Sig::new(a4, b"k");
        dev.flags = TCP_MD5SIG_FLAG_IFINDEX;
        dev.ifindex = 1;
        assert_eq!(add(&mut k, false, true, &dev), Err(Errno::EINVAL));
        assert_eq!(
            add(&mut k, false, false, &dev),
            Ok(()),
            "TCP_MD5SIG ignores the flags"
        );
        dev.ifindex = 0;
        assert_eq!(add(&mut k, false, true, &dev), Ok(()));
        dev.flags = 0x84;
        assert_eq!(add(&mut k, false, true, &dev), Ok(()));
    }

    /// `tcp_md5_do_lookup`: the longest covering prefix wins, whatever the order of adds;
    /// a key replaces the key of the same address and prefix; families never mix.
    #[test]
    fn lookup_longest_prefix() {
        let mut k = None;
        let p = |s: &str| s.parse::<IpAddr>().unwrap();
        add(
            &mut k,
            false,
            true,
            &Md5Sig::with_prefix(p("10.1.2.3"), 32, b"host"),
        )
        .unwrap();
        add(
            &mut k,
            false,
            true,
            &Md5Sig::with_prefix(p("0.0.0.0"), 0, b"all"),
        )
        .unwrap();
        add(
            &mut k,
            false,
            true,
            &Md5Sig::with_prefix(p("10.1.0.0"), 16, b"net16"),
        )
        .unwrap();
        add(
            &mut k,
            false,
            true,
            &Md5Sig::with_prefix(p("10.1.2.0"), 24, b"net24"),
        )
        .unwrap();
        let t = k.as_deref().unwrap();
        let key = |a: &str| t.lookup(p(a)).map(|k| k.key.to_vec());
        assert_eq!(key("10.1.2.3").as_deref(), Some(&b"host"[..]));
        assert_eq!(key("10.1.2.4").as_deref(), Some(&b"net24"[..]));
        assert_eq!(key("10.1.3.4").as_deref(), Some(&b"net16"[..]));
        assert_eq!(key("192.0.2.1").as_deref(), Some(&b"all"[..]));
        assert_eq!(key("2001:db8::1"), None);
        add(
            &mut k,
            false,
            true,
            &Md5Sig::with_prefix(p("10.1.2.0"), 24, b"new24"),
        )
        .unwrap();
        let t = k.as_deref().unwrap();
        assert_eq!(t.lookup(p("10.1.2.9")).unwrap().key.as_ref(), b"new24");
        assert_eq!(t.keys.len(), 4);
        // A /25 with host bits set still covers by its prefix.
        assert!(prefix_eq(&[10, 1, 2, 200], &[10, 1, 2, 129], 25));
        assert!(!prefix_eq(&[10, 1, 2, 200], &[10, 1, 2, 1], 25));
    }

    /// The table is bounded; a hostile sequence of adds cannot grow it without end.
    #[test]
    fn table_is_bounded() {
        let mut k = None;
        for i in 0..Md5Keys::MAX_KEYS {
            let a = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i as u32));
            add(&mut k, false, false, &Md5Sig::new(a, b"k")).unwrap();
        }
        let a = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(
            add(&mut k, false, false, &Md5Sig::new(a, b"k")),
            Err(Errno::ENOMEM)
        );
    }
}
