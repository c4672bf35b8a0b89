//! Talks to the Linux kernel through a TUN device in a fresh network namespace: ICMP echo
//! (v4 and v6), a RST from a closed port, a GSO aggregate read from a kernel TCP sender and a
//! GSO super-segment written to a kernel TCP receiver.
//!
//! Needs root, `/dev/net/tun`, iproute2 (and socat for the TCP tests). Without them each test
//! prints why and passes, unless `SHALLOW_REQUIRE_TUN=1`, which turns a skip into a failure.
//! Every namespace is named `shtun-PID-N` and deleted by a drop guard.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use shallow_os::{Interest, Netns, Offload, Peer, RxPacket, Tun, TunConfig};
use shallow_wire::{
    Icmpv4Repr, Icmpv6Repr, IpPacket, IpRepr, Ipv4Repr, Ipv6Repr, TcpFlags, TcpOption,
    TcpOptionRepr, TcpPacket, TcpRepr, VirtioNetHdr, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_TCP,
};

const PEER4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const ME4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);
const ME6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);
/// How long to wait for the kernel's answer before declaring the test failed.
const PATIENCE: Duration = Duration::from_secs(5);

/// Returns false (after printing why) when the test cannot run here; panics instead when
/// `SHALLOW_REQUIRE_TUN=1`.
fn can_run(test: &str, need_socat: bool) -> bool {
    let tools: &[(&str, &str)] = if need_socat { &[("socat", "-V")] } else { &[] };
    shallow_os::skip::can_run(test, tools)
}

/// A namespace with a TUN `sh0` whose kernel side is 10.213.0.1/24 and fd00:213::1/64; we are
/// .2 / ::2 on the other side of the TUN. Dropping it deletes both.
struct Fixture {
    tun: Tun,
    ns: Netns,
}

impl Fixture {
    fn new() -> Fixture {
        let ns = Netns::unique("shtun").expect("create namespace");
        let tun = ns
            .open_tun(&TunConfig::new("sh0"))
            .expect("open TUN in namespace")
            .pop()
            .expect("one queue");
        let peer = Peer {
            netns: ns.name().to_string(),
            tun: "sh0".into(),
            ..Peer::default()
        };
        peer.configure(&ns).expect("configure kernel side");
        eprintln!("{}: offloads granted: {}", ns.name(), tun.offload());
        Fixture { tun, ns }
    }

    /// Reads packets until one satisfies `pred` (others, like IPv6 MLD reports, are skipped).
    fn expect(&self, what: &str, pred: impl Fn(&RxPacket) -> bool) -> RxPacket {
        let deadline = Instant::now() + PATIENCE;
        let mut pkt = RxPacket::new();
        loop {
            let now = Instant::now();
            assert!(
                now < deadline,
                "no {what} from the kernel within {PATIENCE:?}"
            );
            if !self
                .tun
                .wait(Interest::Readable, Some(deadline - now))
                .unwrap()
            {
                continue;
            }
            match self.tun.recv(&mut pkt) {
                Ok(()) if pred(&pkt) => return pkt,
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("recv: {e}"),
            }
        }
    }
}

/// Kills a helper process (socat) on drop.
struct ChildGuard(Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ip_packet(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> Vec<u8> {
    let ip = match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            protocol: proto,
            ttl: 64,
            tos: 0,
            df: true,
            ident: 0,
            payload_len: l4.len(),
        }),
        (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
            src: s,
            dst: d,
            next_header: proto,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            payload_len: l4.len(),
        }),
        _ => unreachable!("mixed families"),
    };
    let mut buf = vec![0u8; ip.header_len() + l4.len()];
    let h = ip.emit(&mut buf).unwrap();
    buf[h..].copy_from_slice(l4);
    buf
}

fn tcp_packet(src: IpAddr, dst: IpAddr, tcp: &TcpRepr, payload: &[u8]) -> Vec<u8> {
    let mut seg = vec![0u8; tcp.header_len() + payload.len()];
    tcp.emit(&mut seg, payload, src, dst).unwrap();
    ip_packet(src, dst, IPPROTO_TCP, &seg)
}

fn tcp_of(p: &RxPacket) -> Option<(IpPacket<'_>, TcpPacket<'_>)> {
    let ip = IpPacket::parse(p.packet()).ok()?;
    if ip.protocol() != IPPROTO_TCP {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    Some((ip, tcp))
}

fn syn(sport: u16, dport: u16, isn: u32) -> TcpRepr {
    TcpRepr {
        src_port: sport,
        dst_port: dport,
        seq: isn,
        ack: 0,
        flags: TcpFlags::SYN,
        window: 65535,
        urgent: 0,
        options: vec![
            TcpOptionRepr::Mss(1460),
            TcpOptionRepr::Nop,
            TcpOptionRepr::WindowScale(7),
        ],
    }
}

/// The kernel answers an ICMP echo request to its own address (RFC 792 echo), through the TUN.
#[test]
fn icmpv4_echo_through_tun() {
    if !can_run("icmpv4_echo_through_tun", false) {
        return;
    }
    let f = Fixture::new();
    let data = b"shallow ping v4";
    let req = Icmpv4Repr::EchoRequest {
        ident: 0x5a11,
        seq: 7,
        data,
    };
    let mut icmp = vec![0u8; req.buffer_len()];
    req.emit(&mut icmp).unwrap();
    f.tun
        .send(
            &ip_packet(ME4.into(), PEER4.into(), IPPROTO_ICMP, &icmp),
            None,
        )
        .unwrap();
    let reply = f.expect("ICMP echo reply", |p| {
        let Ok(ip) = IpPacket::parse(p.packet()) else {
            return false;
        };
        ip.protocol() == IPPROTO_ICMP
            && matches!(
                Icmpv4Repr::parse(ip.payload()),
                Ok(Icmpv4Repr::EchoReply {
                    ident: 0x5a11,
                    seq: 7,
                    ..
                })
            )
    });
    let ip = IpPacket::parse(reply.packet()).unwrap();
    assert_eq!(ip.src(), IpAddr::from(PEER4));
    assert_eq!(ip.dst(), IpAddr::from(ME4));
    match Icmpv4Repr::parse(ip.payload()).unwrap() {
        Icmpv4Repr::EchoReply { data: d, .. } => assert_eq!(d, data),
        other => panic!("{other:?}"),
    }
    assert_eq!(reply.gso_size(), None);
}

/// The same over IPv6 (RFC 4443 §4); the kernel's address was added with `nodad`, so it answers
/// at once instead of after duplicate address detection.
#[test]
fn icmpv6_echo_through_tun() {
    if !can_run("icmpv6_echo_through_tun", false) {
        return;
    }
    let f = Fixture::new();
    let data = b"shallow ping v6";
    let req = Icmpv6Repr::EchoRequest {
        ident: 0x6a11,
        seq: 9,
        data,
    };
    let mut icmp = vec![0u8; req.buffer_len()];
    req.emit(&mut icmp, ME6, PEER6).unwrap();
    f.tun
        .send(
            &ip_packet(ME6.into(), PEER6.into(), IPPROTO_ICMPV6, &icmp),
            None,
        )
        .unwrap();
    let reply = f.expect("ICMPv6 echo reply", |p| {
        let Ok(IpPacket::V6(ip)) = IpPacket::parse(p.packet()) else {
            return false;
        };
        ip.upper_protocol() == IPPROTO_ICMPV6
            && matches!(
                Icmpv6Repr::parse(ip.payload(), ip.src(), ip.dst()),
                Ok(Icmpv6Repr::EchoReply {
                    ident: 0x6a11,
                    seq: 9,
                    ..
                })
            )
    });
    let ip = IpPacket::parse(reply.packet()).unwrap();
    assert_eq!(ip.src(), IpAddr::from(PEER6));
    assert_eq!(ip.dst(), IpAddr::from(ME6));
}

/// A SYN to a closed port gets RST|ACK acknowledging the SYN (RFC 9293 §3.10.7.1), with a
/// checksum that verifies after our NEEDS_CSUM completion.
#[test]
fn syn_to_closed_port_gets_rst() {
    if !can_run("syn_to_closed_port_gets_rst", false) {
        return;
    }
    let f = Fixture::new();
    for (me, peer) in [
        (IpAddr::from(ME4), IpAddr::from(PEER4)),
        (ME6.into(), PEER6.into()),
    ] {
        let s = syn(40001, 9, 1_000_000);
        f.tun.send(&tcp_packet(me, peer, &s, &[]), None).unwrap();
        let rst = f.expect("RST", |p| {
            tcp_of(p).is_some_and(|(ip, t)| ip.src() == peer && t.flags().contains(TcpFlags::RST))
        });
        let (ip, t) = tcp_of(&rst).unwrap();
        assert!(t.checksum_valid(ip.src(), ip.dst()));
        assert_eq!(t.flags(), TcpFlags::RST | TcpFlags::ACK);
        assert_eq!(t.ack(), 1_000_001);
        assert_eq!((t.src_port(), t.dst_port()), (9, 40001));
    }
}

/// Sends SYNs to `port` until the kernel listener answers with a SYN-ACK; returns its ISN.
fn handshake(f: &Fixture, port: u16, sport: u16, isn: u32) -> u32 {
    let me: IpAddr = ME4.into();
    let peer: IpAddr = PEER4.into();
    let deadline = Instant::now() + PATIENCE;
    loop {
        assert!(
            Instant::now() < deadline,
            "listener on {port} never came up"
        );
        f.tun
            .send(&tcp_packet(me, peer, &syn(sport, port, isn), &[]), None)
            .unwrap();
        let p = f.expect("SYN-ACK or RST", |p| {
            tcp_of(p).is_some_and(|(_, t)| t.dst_port() == sport)
        });
        let (_, t) = tcp_of(&p).unwrap();
        if t.flags().contains(TcpFlags::SYN | TcpFlags::ACK) {
            assert_eq!(t.ack(), isn.wrapping_add(1));
            let ack = TcpRepr {
                seq: isn.wrapping_add(1),
                ack: t.seq().wrapping_add(1),
                flags: TcpFlags::ACK,
                options: vec![],
                ..syn(sport, port, isn)
            };
            f.tun.send(&tcp_packet(me, peer, &ack, &[]), None).unwrap();
            return t.seq();
        }
        // RST: socat is not listening yet; try again shortly.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn socat(f: &Fixture, args: &[&str]) -> ChildGuard {
    let child =
        f.ns.command("socat")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn socat in the namespace");
    ChildGuard(child)
}

/// With TSO offload granted, a kernel TCP sender hands the TUN reader whole aggregates:
/// `gso_type` TCPV4 with `gso_size` = the MSS, checksum partial (completed by us).
#[test]
fn kernel_sender_gives_gso_aggregates() {
    if !can_run("kernel_sender_gives_gso_aggregates", true) {
        return;
    }
    let f = Fixture::new();
    let _srv = socat(
        &f,
        &[
            "-u",
            "OPEN:/dev/zero,readbytes=2000000",
            "TCP-LISTEN:5001,reuseaddr",
        ],
    );
    let peer_isn = handshake(&f, 5001, 40002, 77);
    // Collect the kernel's first flight (its initial window: 10 segments; we do not ACK).
    let mut seen = 0usize;
    let mut aggregates = 0usize;
    while seen < 10 * 1460 {
        let p = f.expect("data", |p| {
            tcp_of(p).is_some_and(|(_, t)| t.dst_port() == 40002 && !t.payload().is_empty())
        });
        let (ip, t) = tcp_of(&p).unwrap();
        assert!(
            t.checksum_valid(ip.src(), ip.dst()),
            "checksum after completion"
        );
        let offset = t.seq().wrapping_sub(peer_isn.wrapping_add(1)) as usize;
        let len = t.payload().len();
        if offset < seen {
            // A retransmission (RTO): the first flight is over; it is smaller than 10 full
            // segments when the sender's writes left a short segment in the middle.
            break;
        }
        assert_eq!(offset, seen, "no gap in the kernel's first flight");
        match p.gso_size() {
            Some(g) => {
                assert_eq!(g, 1460, "gso_size is the MSS we announced");
                assert!(p.vnet_hdr().needs_csum());
                assert_eq!(p.vnet_hdr().gso_kind(), VirtioNetHdr::GSO_TCPV4);
                aggregates += 1;
            }
            None => assert!(len <= 1460, "{len} bytes without gso_size"),
        }
        seen += len;
    }
    if f.tun.offload().contains(Offload::TSO4) {
        assert!(
            aggregates > 0,
            "TSO4 granted but no aggregate in the first flight"
        );
    } else {
        eprintln!(
            "TSO4 not granted ({}): aggregates not checked",
            f.tun.offload()
        );
    }
}

/// A super-segment we write (GSO TCPV4, NEEDS_CSUM with the pseudo-header sum) is accepted by
/// the kernel as 10 segments: its cumulative ACK covers all of them.
#[test]
fn kernel_receiver_accepts_gso_writes() {
    if !can_run("kernel_receiver_accepts_gso_writes", true) {
        return;
    }
    let f = Fixture::new();
    let _srv = socat(&f, &["-u", "TCP-LISTEN:5002,reuseaddr", "OPEN:/dev/null"]);
    let isn = 5000u32;
    let peer_isn = handshake(&f, 5002, 40003, isn);
    let payload: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    let seg = TcpRepr {
        src_port: 40003,
        dst_port: 5002,
        seq: isn.wrapping_add(1),
        ack: peer_isn.wrapping_add(1),
        flags: TcpFlags::ACK | TcpFlags::PSH,
        window: 65535,
        urgent: 0,
        options: vec![],
    };
    let pkt = tcp_packet(ME4.into(), PEER4.into(), &seg, &payload);
    f.tun.send(&pkt, Some(1000)).unwrap();
    let want = isn.wrapping_add(1).wrapping_add(payload.len() as u32);
    let ack = f.expect("ACK of the super-segment", |p| {
        tcp_of(p).is_some_and(|(_, t)| t.dst_port() == 40003 && t.ack() == want)
    });
    let (_, t) = tcp_of(&ack).unwrap();
    assert!(t.flags().contains(TcpFlags::ACK));
    // The kernel's SACK/MSS options are not expected on a plain ACK.
    assert!(t.options().all(|o| !matches!(o, Ok(TcpOption::Mss(_)))));
}

/// Deletes a namespace by name on drop (for `Peer::up`, which keeps what it makes).
struct NsCleanup(String);
impl Drop for NsCleanup {
    fn drop(&mut self) {
        if Netns::exists(&self.0) {
            let _ = shallow_os::netns::ip(&["netns", "delete", &self.0]);
        }
    }
}

fn ping4(tun: &Tun, seq: u16) {
    let req = Icmpv4Repr::EchoRequest {
        ident: 0x7a11,
        seq,
        data: b"x",
    };
    let mut icmp = vec![0u8; req.buffer_len()];
    req.emit(&mut icmp).unwrap();
    tun.send(
        &ip_packet(ME4.into(), PEER4.into(), IPPROTO_ICMP, &icmp),
        None,
    )
    .unwrap();
}

fn is_echo_reply4(p: &RxPacket, want_seq: u16) -> bool {
    let Ok(ip) = IpPacket::parse(p.packet()) else {
        return false;
    };
    ip.protocol() == IPPROTO_ICMP
        && matches!(Icmpv4Repr::parse(ip.payload()),
            Ok(Icmpv4Repr::EchoReply { ident: 0x7a11, seq, .. }) if seq == want_seq)
}

/// `shallow netns up` leaves a persistent TUN in the namespace; a later process attaches to it
/// from inside the namespace and talks to the kernel; `down` removes it, and a second `down`
/// reports what is missing.
#[test]
fn peer_up_attach_down() {
    if !can_run("peer_up_attach_down", false) {
        return;
    }
    let name = format!("shpeer-{}", std::process::id());
    let _cleanup = NsCleanup(name.clone());
    let peer = Peer {
        netns: name.clone(),
        tun: "shp0".into(),
        ..Peer::default()
    };
    let granted = peer.up().expect("netns up");
    eprintln!("peer up, offloads granted at creation: {granted}");
    assert!(Netns::exists(&name));
    // Attaching to a device that is not there is a clear error.
    let missing = Peer {
        tun: "nosuch0".into(),
        ..peer.clone()
    };
    assert!(matches!(
        missing.attach(&TunConfig::new("x")),
        Err(shallow_os::OsError::NoSuchTun { .. })
    ));
    let tun = peer
        .attach(&TunConfig::new("ignored"))
        .expect("attach")
        .pop()
        .unwrap();
    assert_eq!(tun.name(), "shp0");
    let f = Fixture {
        tun,
        ns: Netns::open(&name).unwrap(),
    };
    ping4(&f.tun, 1);
    f.expect("echo reply via the persistent TUN", |p| {
        is_echo_reply4(p, 1)
    });
    drop(f);
    peer.down().expect("netns down");
    assert!(!Netns::exists(&name));
    assert!(matches!(
        peer.down(),
        Err(shallow_os::OsError::NoSuchNetns(_))
    ));
}

/// A multi-queue device (`IFF_MULTI_QUEUE`) opens one descriptor per queue; the kernel's answer
/// arrives on one of them.
#[test]
fn multi_queue_tun() {
    if !can_run("multi_queue_tun", false) {
        return;
    }
    let ns = Netns::unique("shtun").unwrap();
    let mut cfg = TunConfig::new("shmq0");
    cfg.queues = 2;
    cfg.multi_queue = true;
    let queues = ns.open_tun(&cfg).expect("open 2 queues");
    assert_eq!(queues.len(), 2);
    assert!(queues.iter().all(|q| q.name() == "shmq0"));
    assert_eq!(queues[1].queue(), 1);
    let peer = Peer {
        netns: ns.name().into(),
        tun: "shmq0".into(),
        ..Peer::default()
    };
    peer.configure(&ns).unwrap();
    ping4(&queues[0], 2);
    let deadline = Instant::now() + PATIENCE;
    let mut batch = shallow_os::RxBatch::new(8);
    'outer: loop {
        assert!(Instant::now() < deadline, "no echo reply on any queue");
        for q in &queues {
            q.wait(Interest::Readable, Some(Duration::from_millis(20)))
                .unwrap();
            q.recv_batch(&mut batch).unwrap();
            if batch.packets().iter().any(|p| is_echo_reply4(p, 2)) {
                break 'outer;
            }
        }
    }
    assert_eq!(batch.dropped, 0);
}
