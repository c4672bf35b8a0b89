//! TCP-MD5 signatures (RFC 2385, md5.rs) between two Shallow stacks: keyed connections
//! that connect and carry data both ways, the packets' shape (as Linux 6.18 sends them:
//! `nop,nop,md5` first, no timestamps, 20 bytes less payload, no TSO), the drops a missing,
//! wrong or unexpected signature meets, the longest-prefix key, IPv6, signed RSTs, and
//! hostile kind-19 options. `crates/os/tests/md5.rs` checks the same against the kernel.

use crate::harness::*;
use crate::md5::Md5Sig;
use crate::*;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;

fn key(st: &mut Stack, s: SocketId, sig: &Md5Sig) -> Result<(), Errno> {
    st.setsockopt(
        Instant::ZERO,
        s,
        SockOpt::TcpMd5sigExt,
        &OptVal::Bytes(sig.to_bytes()),
    )
}

fn count(st: &Stack, m: Mib) -> u64 {
    st.counters().value(m)
}

/// Two bare stacks and the packets between them, recorded (`true`: A to B).
struct Wire {
    a: Stack,
    b: Stack,
    now: Instant,
    log: Vec<(bool, Vec<u8>)>,
}

impl Wire {
    fn new(a_addr: IpAddr, b_addr: IpAddr) -> Wire {
        let mut a = Stack::new(3);
        let mut b = Stack::new(5);
        a.add_address(a_addr);
        b.add_address(b_addr);
        Wire {
            a,
            b,
            now: Instant::ZERO,
            log: Vec::new(),
        }
    }

    /// Carry packets both ways until none is left, firing timers for `d` of virtual time.
    fn run(&mut self, d: Duration) {
        let end = self.now + d;
        loop {
            let mut moved = true;
            while moved {
                moved = false;
                for from_a in [true, false] {
                    let (src, dst) = if from_a {
                        (&mut self.a, &mut self.b)
                    } else {
                        (&mut self.b, &mut self.a)
                    };
                    while let Some(mut t) = src.poll_transmit(self.now) {
                        t.linearize();
                        if let Some(tok) = t.token {
                            src.tx_complete(self.now, tok);
                        }
                        dst.input(self.now, &t.data, t.gso_size);
                        self.log.push((from_a, t.data));
                        moved = true;
                    }
                }
            }
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if t <= end => {
                    self.now = t.max(self.now);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                }
                _ => break,
            }
        }
        self.now = end;
    }
}

/// A listener on B port 80 and a client on A, each given `b_key`/`a_key` for the other
/// (None: no key), connecting; returns (client, listener).
fn keyed_connect(
    w: &mut Wire,
    a_addr: IpAddr,
    b_addr: IpAddr,
    a_key: Option<&[u8]>,
    b_key: Option<&[u8]>,
) -> (SocketId, SocketId) {
    let fam = if b_addr.is_ipv4() {
        Family::V4
    } else {
        Family::V6
    };
    let l = w.b.socket(fam).unwrap();
    w.b.bind(l, SocketAddr::new(b_addr, 80)).unwrap();
    w.b.listen(l, 16).unwrap();
    if let Some(k) = b_key {
        key(&mut w.b, l, &Md5Sig::new(a_addr, k)).unwrap();
    }
    let c = w.a.socket(fam).unwrap();
    if let Some(k) = a_key {
        key(&mut w.a, c, &Md5Sig::new(b_addr, k)).unwrap();
    }
    assert_eq!(
        w.a.connect(w.now, c, SocketAddr::new(b_addr, 80)),
        Err(Errno::EINPROGRESS)
    );
    (c, l)
}

/// The TCP header of an IP packet: (header bytes, payload length).
fn tcp_of(pkt: &[u8]) -> (&[u8], usize) {
    let ihl = if pkt[0] >> 4 == 4 {
        usize::from(pkt[0] & 15) * 4
    } else {
        40
    };
    let t = &pkt[ihl..];
    let hl = usize::from(t[12] >> 4) * 4;
    (&t[..hl], t.len() - hl)
}

/// Every packet carries a signature that verifies under `k`, as the first option.
fn all_signed(log: &[(bool, Vec<u8>)], k: &[u8]) {
    for (_, p) in log {
        let seg = crate::packet::parse(p, None, false).expect("valid");
        let (hdr, _) = tcp_of(p);
        assert_eq!(&hdr[20..24], &[1, 1, 19, 18], "nop,nop,md5 first");
        assert_eq!(seg.md5_expected(k).as_ref(), seg.md5_digest(), "signature");
    }
}

fn recv_all(st: &mut Stack, now: Instant, s: SocketId) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n @ 1..) = st.recv(now, s, &mut buf, 0) {
        out.extend_from_slice(&buf[..n]);
    }
    out
}

/// Matching keys: the handshake's options as Linux's (MSS 1460, SACK-permitted, window
/// scale, no timestamps), data segments of 1440 bytes with no TSO, every packet signed,
/// data both ways, a FIN exchange and TIME_WAIT's last ACK signed too, no drop counted.
#[test]
fn matching_keys_connect_and_transfer_both_ways() {
    let (aa, ba) = (ADDR_A, ADDR_B);
    let mut w = Wire::new(aa, ba);
    let (c, l) = keyed_connect(&mut w, aa, ba, Some(b"secret"), Some(b"secret"));
    w.run(Duration::from_millis(10));
    assert_eq!(w.a.state(c).unwrap(), TcpState::Established);
    let (s, _) = w.b.accept(l).unwrap();
    for (i, (_, p)) in w.log.iter().take(2).enumerate() {
        let seg = crate::packet::parse(p, None, false).unwrap();
        assert_eq!(seg.opts.mss, Some(1460), "packet {i}");
        assert!(seg.opts.sack_ok && seg.opts.wscale.is_some());
        assert_eq!(seg.opts.ts, None, "a signed SYN offers no timestamps");
        // nop,nop,md5(18), mss(4), nop,nop,sackOK(4), nop,wscale(4): 32 bytes.
        assert_eq!(tcp_of(p).0.len(), 52);
    }
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    while sent < data.len() {
        sent += w.a.send(w.now, c, &data[sent..], 0).unwrap();
        w.run(Duration::from_millis(5));
    }
    w.run(Duration::from_millis(300));
    assert_eq!(recv_all(&mut w.b, w.now, s), data);
    w.b.send(w.now, s, b"reply", 0).unwrap();
    w.run(Duration::from_millis(300));
    assert_eq!(recv_all(&mut w.a, w.now, c), b"reply");
    let sizes: Vec<usize> = w
        .log
        .iter()
        .filter(|(ab, _)| *ab)
        .map(|(_, p)| tcp_of(p).1)
        .filter(|&n| n > 0)
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), data.len());
    assert!(sizes.iter().all(|&n| n <= 1440), "no TSO: {sizes:?}");
    assert_eq!(
        sizes.iter().max(),
        Some(&1440),
        "MSS 1460 less the signature"
    );
    // Both ends' mss_cache leave the signature out, as Linux's (measured on 6.18).
    assert_eq!(w.b.tcp_info(w.now, s).unwrap().snd_mss, 1460);
    assert_eq!(w.a.tcp_info(w.now, c).unwrap().snd_mss, 1460);
    w.a.close(w.now, c).unwrap();
    w.b.close(w.now, s).unwrap();
    w.run(Duration::from_millis(300));
    assert_eq!(w.a.state(c).unwrap(), TcpState::TimeWait);
    all_signed(&w.log, b"secret");
    // TIME_WAIT checks no signature and signs its ACKs (measured on 6.18 with
    // `tcp_rfc1337=1`: out-of-window ACKs unsigned, wrongly signed and rightly signed each
    // drew a signed ACK, and no MD5 counter moved).
    let local = w.a.local_addr(c).unwrap();
    for k in [None, Some(&b"wrong"[..]), Some(&b"secret"[..])] {
        let oow = crate::packet::build(&crate::packet::SegOut {
            urgent: 0,
            local: SocketAddr::new(ba, 80),
            remote: local,
            seq: 77777,
            ack: 1,
            flags: shallow_wire::TcpFlags::ACK,
            window: 1000,
            tos: 0,
            ttl: 64,
            ident: 0,
            opts: &[],
            payload: crate::payload::Payload::EMPTY,
            md5: k.map(Into::into),
        })
        .unwrap();
        w.now += Duration::from_secs(1);
        w.a.input(w.now, &oow, None);
        let t = w.a.poll_transmit(w.now).expect("TIME_WAIT's ACK");
        all_signed(&[(true, t.data)], b"secret");
    }
    assert_eq!(w.a.state(c).unwrap(), TcpState::TimeWait);
    for st in [&w.a, &w.b] {
        for m in [
            Mib::TCPMD5NotFound,
            Mib::TCPMD5Failure,
            Mib::TCPMD5Unexpected,
        ] {
            assert_eq!(count(st, m), 0, "{m:?}");
        }
    }
}

/// A wrong key, no key, and a key the other side does not expect: the SYN (or SYN-ACK) is
/// dropped and counted where it arrives, and no connection forms.
#[test]
fn mismatched_keys_drop_and_count() {
    type Key = Option<&'static [u8]>;
    let cases: [(Key, Key, Mib); 3] = [
        (Some(b"wrong"), Some(b"secret"), Mib::TCPMD5Failure),
        (None, Some(b"secret"), Mib::TCPMD5NotFound),
        (Some(b"secret"), None, Mib::TCPMD5Unexpected),
    ];
    for (ak, bk, m) in cases {
        let mut w = Wire::new(ADDR_A, ADDR_B);
        let (c, l) = keyed_connect(&mut w, ADDR_A, ADDR_B, ak, bk);
        w.run(Duration::from_secs(4));
        assert_eq!(w.a.state(c).unwrap(), TcpState::SynSent, "{m:?}");
        assert_eq!(w.b.accept(l), Err(Errno::EAGAIN));
        let syns = w.log.iter().filter(|(ab, _)| *ab).count() as u64;
        assert!(syns >= 3, "the SYN is retransmitted: {syns}");
        assert_eq!(count(&w.b, m), syns, "{m:?}: every SYN dropped");
        assert!(w.log.iter().all(|(ab, _)| *ab), "B never answers");
    }
}

/// The longest covering prefix chooses the key (`tcp_md5_do_lookup`): a listener with a
/// wrong key for 10.0.0.0/8 and the right one for 10.0.0.0/24 accepts 10.0.0.1, and a
/// deleted /24 leaves the /8, whose key then fails.
#[test]
fn longest_prefix_key_applies() {
    let net = |s: &str| s.parse::<IpAddr>().unwrap();
    for delete in [false, true] {
        let mut w = Wire::new(ADDR_A, ADDR_B);
        let (c, l) = keyed_connect(&mut w, ADDR_A, ADDR_B, Some(b"right"), None);
        key(
            &mut w.b,
            l,
            &Md5Sig::with_prefix(net("10.0.0.0"), 8, b"wrong"),
        )
        .unwrap();
        key(
            &mut w.b,
            l,
            &Md5Sig::with_prefix(net("10.0.0.0"), 24, b"right"),
        )
        .unwrap();
        key(
            &mut w.b,
            l,
            &Md5Sig::with_prefix(net("10.0.0.2"), 32, b"other"),
        )
        .unwrap();
        if delete {
            key(&mut w.b, l, &Md5Sig::with_prefix(net("10.0.0.0"), 24, b"")).unwrap();
        }
        w.run(Duration::from_millis(50));
        let st = w.a.state(c).unwrap();
        if delete {
            assert_eq!(st, TcpState::SynSent);
            assert!(count(&w.b, Mib::TCPMD5Failure) > 0);
        } else {
            assert_eq!(st, TcpState::Established);
            let (s, _) = w.b.accept(l).unwrap();
            w.a.send(w.now, c, b"hello", 0).unwrap();
            w.run(Duration::from_millis(50));
            assert_eq!(recv_all(&mut w.b, w.now, s), b"hello");
            all_signed(&w.log, b"right");
        }
    }
}

/// IPv6 and an IPv4-mapped peer: the IPv6 pseudo-header for IPv6 packets, the IPv4 one for
/// a mapped connection (whose key was given as `::ffff:a.b.c.d` on an AF_INET6 socket).
#[test]
fn ipv6_and_mapped_peers() {
    let a6: IpAddr = "fd00::1".parse().unwrap();
    let b6: IpAddr = "fd00::2".parse().unwrap();
    let mut w = Wire::new(a6, b6);
    let (c, l) = keyed_connect(&mut w, a6, b6, Some(b"six"), Some(b"six"));
    w.run(Duration::from_millis(20));
    assert_eq!(w.a.state(c).unwrap(), TcpState::Established);
    let (s, _) = w.b.accept(l).unwrap();
    w.a.send(w.now, c, &[7u8; 3000], 0).unwrap();
    w.run(Duration::from_millis(300));
    assert_eq!(recv_all(&mut w.b, w.now, s).len(), 3000);
    // An IPv6 SYN on a 1500-byte MTU: MSS 1440, data 1420 per segment.
    let max = w.log.iter().map(|(_, p)| tcp_of(p).1).max();
    assert_eq!(max, Some(1420));
    all_signed(&w.log, b"six");

    // A dual-stack listener and client with keys for each other's mapped address.
    let mut w = Wire::new(ADDR_A, ADDR_B);
    let mapped = |a: IpAddr| match a {
        IpAddr::V4(v) => IpAddr::V6(v.to_ipv6_mapped()),
        v6 => v6,
    };
    let l = w.b.socket(Family::V6).unwrap();
    w.b.bind(l, "[::]:80".parse().unwrap()).unwrap();
    w.b.listen(l, 4).unwrap();
    key(&mut w.b, l, &Md5Sig::new(mapped(ADDR_A), b"four")).unwrap();
    let c = w.a.socket(Family::V6).unwrap();
    key(&mut w.a, c, &Md5Sig::new(mapped(ADDR_B), b"four")).unwrap();
    let dst = SocketAddr::new(mapped(ADDR_B), 80);
    assert_eq!(w.a.connect(w.now, c, dst), Err(Errno::EINPROGRESS));
    w.run(Duration::from_millis(20));
    assert_eq!(w.a.state(c).unwrap(), TcpState::Established);
    assert!(
        w.log.iter().all(|(_, p)| p[0] >> 4 == 4),
        "IPv4 on the wire"
    );
    all_signed(&w.log, b"four");
}

/// RSTs: an abort on a keyed connection is signed, and the peer takes it; a signed segment
/// for no connection is answered with a signed RST only when the listener's key verifies
/// it, and not at all otherwise (`tcp_v4_send_reset`).
#[test]
fn resets_are_signed() {
    let mut w = Wire::new(ADDR_A, ADDR_B);
    let (c, l) = keyed_connect(&mut w, ADDR_A, ADDR_B, Some(b"k"), Some(b"k"));
    w.run(Duration::from_millis(20));
    let (s, _) = w.b.accept(l).unwrap();
    w.a.send(w.now, c, b"unread", 0).unwrap();
    w.run(Duration::from_millis(50));
    // Closing with unread data aborts with a RST.
    let before = w.log.len();
    w.b.close(w.now, s).unwrap();
    w.run(Duration::from_millis(50));
    let rst = &w.log[before];
    assert_eq!(tcp_of(&rst.1).0[13] & 4, 4, "a RST");
    all_signed(&w.log[before..], b"k");
    assert_eq!(w.a.state(c).unwrap(), TcpState::Close, "the peer took it");

    // Signed ACKs from A that meet no connection on B, whose listener on port 80 holds
    // the key "k" for A.
    let stray = |sport: u16, dport: u16, k: &[u8]| {
        crate::packet::build(&crate::packet::SegOut {
            urgent: 0,
            local: SocketAddr::new(ADDR_A, sport),
            remote: SocketAddr::new(ADDR_B, dport),
            seq: 1,
            ack: 1,
            flags: shallow_wire::TcpFlags::ACK,
            window: 100,
            tos: 0,
            ttl: 64,
            ident: 0,
            opts: &[],
            payload: crate::payload::Payload::EMPTY,
            md5: Some(k.into()),
        })
        .unwrap()
    };
    let signed_rst = |w: &mut Wire, k: &[u8]| {
        let t = w.b.poll_transmit(w.now).expect("a RST");
        let seg = crate::packet::parse(&t.data, None, false).unwrap();
        assert!(seg.has(shallow_wire::TcpFlags::RST));
        assert_eq!(seg.md5_expected(k).as_ref(), seg.md5_digest(), "signed");
    };
    // To the listener's port: the listener checks it (a bad signature is a Failure, no RST)
    // and answers a good one's stray ACK with a RST signed by its key.
    w.b.input(w.now, &stray(4000, 80, b"bad"), None);
    assert!(
        w.b.poll_transmit(w.now).is_none(),
        "no RST for a bad signature"
    );
    assert_eq!(count(&w.b, Mib::TCPMD5Failure), 1);
    w.b.input(w.now, &stray(4000, 80, b"k"), None);
    signed_rst(&mut w, b"k");
    // To a closed port, from the port B listens on: the listener's key verifies it and
    // signs the RST; a bad signature, or a source port with no listener, gets nothing.
    let rsts = count(&w.b, Mib::OutRsts);
    w.b.input(w.now, &stray(80, 5555, b"bad"), None);
    w.b.input(w.now, &stray(4000, 5555, b"k"), None);
    assert!(w.b.poll_transmit(w.now).is_none(), "no RST");
    assert_eq!(count(&w.b, Mib::OutRsts), rsts);
    w.b.input(w.now, &stray(80, 5555, b"k"), None);
    signed_rst(&mut w, b"k");
    assert_eq!(count(&w.b, Mib::OutRsts), rsts + 1);
}

/// A keyed listener's SYN-ACK to a signed SYN offering timestamps: it gives timestamps up
/// when SACK is on, keeps them otherwise, and a SYN cookie's keeps them always
/// (`tcp_synack_options`; measured on 6.18 with a raw-socket client:
/// `md5,mss,nop,nop,sackOK,nop,wscale`, `md5,mss,nop,nop,TS,nop,wscale`, and with
/// `tcp_syncookies=2` `md5,mss,sackOK,TS,nop,wscale`).
#[test]
fn synack_timestamps_beside_a_signature() {
    use crate::packet::OutOpt;
    for (sack, cookies) in [(true, false), (false, false), (true, true)] {
        let mut w = Wire::new(ADDR_A, ADDR_B);
        if cookies {
            w.b.sysctl_set("net.ipv4.tcp_syncookies", "2").unwrap();
        }
        let l = w.b.socket(Family::V4).unwrap();
        w.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
        w.b.listen(l, 4).unwrap();
        key(&mut w.b, l, &Md5Sig::new(ADDR_A, b"secret")).unwrap();
        let mut opts = vec![OutOpt::Mss(1460)];
        if sack {
            opts.push(OutOpt::SackOk);
        } else {
            opts.extend([OutOpt::Nop, OutOpt::Nop]);
        }
        opts.extend([OutOpt::Ts(12345, 0), OutOpt::Nop, OutOpt::Wscale(7)]);
        let syn = crate::packet::build(&crate::packet::SegOut {
            urgent: 0,
            local: SocketAddr::new(ADDR_A, 40001),
            remote: SocketAddr::new(ADDR_B, 80),
            seq: 1000,
            ack: 0,
            flags: shallow_wire::TcpFlags::SYN,
            window: 65535,
            tos: 0,
            ttl: 64,
            ident: 0,
            opts: &opts,
            payload: crate::payload::Payload::EMPTY,
            md5: Some((&b"secret"[..]).into()),
        })
        .unwrap();
        w.b.input(w.now, &syn, None);
        let t = w.b.poll_transmit(w.now).expect("a SYN-ACK");
        let seg = crate::packet::parse(&t.data, None, false).unwrap();
        assert_eq!(seg.md5_expected(b"secret").as_ref(), seg.md5_digest());
        assert_eq!(seg.opts.sack_ok, sack);
        assert_eq!(seg.opts.ts.is_some(), !sack || cookies, "sack {sack}");
        assert_eq!(count(&w.b, Mib::SyncookiesSent), u64::from(cookies));
    }
}

/// Hostile kind-19 options never panic: one of the wrong length is no signature (a keyed
/// socket counts it NotFound, an unkeyed one takes the segment), one cut short by the
/// header's end is malformed options (ignored), and a signature on a GRO-sized or
/// random segment fails cleanly.
#[test]
fn hostile_md5_options() {
    let mut w = Wire::new(ADDR_A, ADDR_B);
    let l = w.b.socket(Family::V4).unwrap();
    w.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    w.b.listen(l, 4).unwrap();
    key(&mut w.b, l, &Md5Sig::new(ADDR_A, b"k")).unwrap();
    let syn = |opt: &[u8]| {
        let mut tcp = vec![0u8; 20];
        tcp[0..2].copy_from_slice(&4000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&1u32.to_be_bytes());
        tcp.extend_from_slice(opt);
        while tcp.len() % 4 != 0 {
            tcp.push(0);
        }
        tcp[12] = ((tcp.len() / 4) as u8) << 4;
        tcp[13] = 2; // SYN
        tcp[14] = 0xff;
        let mut ip = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0];
        let len = (20 + tcp.len()) as u16;
        ip[2..4].copy_from_slice(&len.to_be_bytes());
        let (IpAddr::V4(s), IpAddr::V4(d)) = (ADDR_A, ADDR_B) else {
            unreachable!()
        };
        ip.extend_from_slice(&s.octets());
        ip.extend_from_slice(&d.octets());
        let c = shallow_wire::checksum::internet(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        let sum = shallow_wire::checksum::combine(&[
            shallow_wire::checksum::pseudo_header(ADDR_A, ADDR_B, 6, tcp.len() as u32),
            shallow_wire::checksum::sum(&tcp),
        ]);
        tcp[16..18].copy_from_slice(&sum.to_be_bytes());
        ip.extend_from_slice(&tcp);
        ip
    };
    let nf = count(&w.b, Mib::TCPMD5NotFound);
    // Kind 19 of length 10, 2, 0, and 40 (past the end).
    for opt in [
        &[19u8, 10, 1, 2, 3, 4, 5, 6, 7, 8][..],
        &[19, 2],
        &[19, 0, 0, 0],
        &[19, 40, 0, 0],
        &[19],
    ] {
        w.b.input(w.now, &syn(opt), None);
    }
    assert_eq!(count(&w.b, Mib::TCPMD5NotFound), nf + 5);
    // A well-formed but random signature fails.
    let mut o = vec![1, 1, 19, 18];
    o.extend_from_slice(&[0xab; 16]);
    w.b.input(w.now, &syn(&o), None);
    assert_eq!(count(&w.b, Mib::TCPMD5Failure), 1);
    // Two signatures: the first decides.
    o.extend_from_slice(&[1, 1, 19, 18]);
    o.extend_from_slice(&[0xcd; 16]);
    w.b.input(w.now, &syn(&o[..40]), None);
    assert_eq!(count(&w.b, Mib::TCPMD5Failure), 2);
    assert!(w.b.poll_transmit(w.now).is_none());
    // A wrong-length kind 19 to an unkeyed listener is no signature: a SYN-ACK answers.
    let l2 = w.b.socket(Family::V4).unwrap();
    w.b.bind(l2, SocketAddr::new(ADDR_B, 81)).unwrap();
    w.b.listen(l2, 4).unwrap();
    let mut p = syn(&[19, 10, 1, 2, 3, 4, 5, 6, 7, 8]);
    p[22..24].copy_from_slice(&81u16.to_be_bytes());
    // Fix the checksum for the new port: rebuild from the bytes.
    p[36..38].copy_from_slice(&[0, 0]);
    let sum = shallow_wire::checksum::combine(&[
        shallow_wire::checksum::pseudo_header(ADDR_A, ADDR_B, 6, (p.len() - 20) as u32),
        shallow_wire::checksum::sum(&p[20..]),
    ]);
    p[36..38].copy_from_slice(&sum.to_be_bytes());
    w.b.input(w.now, &p, None);
    assert!(w.b.poll_transmit(w.now).is_some(), "a SYN-ACK");
}

/// Keys on a connection through the harness link with loss and reordering: the transfer
/// completes signed, with retransmissions and SACK (at most 2 blocks beside a signature).
#[test]
fn keyed_transfer_over_a_lossy_link() {
    let link = LinkConfig {
        loss: 0.02,
        reorder: 0.02,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(21, link);
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 4).unwrap();
    key(&mut p.b, l, &Md5Sig::new(ADDR_A, b"lossy")).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    key(&mut p.a, c, &Md5Sig::new(ADDR_B, b"lossy")).unwrap();
    let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80));
    p.run_for(Duration::from_secs(3));
    let (s, _) = p.b.accept(l).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 256) as u8).collect();
    let got = crate::tests::e2e::transfer(&mut p, c, s, &data, Duration::from_secs(60));
    assert_eq!(got.len(), data.len());
    assert!(got == data);
    assert!(count(&p.a, Mib::RetransSegs) > 0, "losses were repaired");
    for st in [&p.a, &p.b] {
        assert_eq!(count(st, Mib::TCPMD5Failure), 0);
        assert_eq!(count(st, Mib::TCPMD5NotFound), 0);
    }
}

/// A key added to an established connection applies from its next segment, which the
/// unkeyed peer drops (measured on 6.18: `setsockopt(TCP_MD5SIG)` on an established socket
/// succeeds, and its data then counts `TcpExtTCPMD5Unexpected` at the peer, unread).
#[test]
fn key_added_after_connect_applies_at_once() {
    let mut w = Wire::new(ADDR_A, ADDR_B);
    let (c, l) = keyed_connect(&mut w, ADDR_A, ADDR_B, None, None);
    w.run(Duration::from_millis(20));
    let (s, _) = w.b.accept(l).unwrap();
    key(&mut w.a, c, &Md5Sig::new(ADDR_B, b"late")).unwrap();
    let before = w.log.len();
    w.a.send(w.now, c, &[1u8; 3000], 0).unwrap();
    w.run(Duration::from_millis(100));
    assert!(recv_all(&mut w.b, w.now, s).is_empty());
    assert!(count(&w.b, Mib::TCPMD5Unexpected) >= 2);
    let sent: Vec<usize> = w.log[before..]
        .iter()
        .filter(|(ab, _)| *ab)
        .map(|(_, p)| tcp_of(p).1)
        .collect();
    // Timestamps were negotiated (1448 a segment): 20 bytes less, and no TSO.
    assert_eq!(sent.iter().max(), Some(&1428), "{sent:?}");
    all_signed(&w.log[before..], b"late");
}
