//! Interop with the Linux kernel's TCP across a routed path: Shallow ↔ TUN ↔ router namespace
//! `R` ↔ veth ↔ server namespace `K`. The router is the kernel's IPv4/IPv6 forwarding, so it
//! sends real ICMP "fragmentation needed" / "packet too big" when the veth's MTU is lower,
//! and its qdiscs (tbf) are real bottlenecks in either direction.
//!
//! Needs root, `/dev/net/tun`, iproute2 and tc; skips with a printed reason otherwise, unless
//! `SHALLOW_REQUIRE_TUN=1`.

mod interop_harness;

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown as StdShutdown, SocketAddr};
use std::time::Duration;

use interop_harness::*;
use shallow_os::{Host, Netns, Peer, TunConfig};
use shallow_tcp::Shutdown;

/// The server namespace's addresses (behind the router).
const FAR4: Ipv4Addr = Ipv4Addr::new(10, 214, 0, 2);
const FAR6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x214, 0, 0, 0, 0, 0, 2);

/// Shallow on a TUN into router namespace `r`, which forwards over a veth (`r0` ↔ `k0`) to
/// server namespace `k`. Every link has MTU 1500, so both ends advertise an MSS of 1460; the
/// router's path to the server has MTU `route_mtu` (IPv4: `ip route ... mtu lock`, which
/// Linux's forwarding path obeys, `ip_dst_mtu_maybe_forward`; IPv6: the interface's
/// `conf/r0/mtu`), so a lower value makes the router answer larger packets with ICMP.
struct Routed {
    host: Host,
    r: Netns,
    k: Netns,
}

impl Routed {
    fn new(route_mtu: u32) -> Routed {
        let r = Netns::unique("shrt").expect("router namespace");
        let k = Netns::unique("shfar").expect("server namespace");
        let tun = r
            .open_tun(&TunConfig::new("sh0"))
            .expect("TUN")
            .pop()
            .expect("one queue");
        Peer {
            netns: r.name().into(),
            tun: "sh0".into(),
            ..Peer::default()
        }
        .configure(&r)
        .expect("kernel side of the TUN");
        r.ip(&[
            "link",
            "add",
            "r0",
            "type",
            "veth",
            "peer",
            "name",
            "k0",
            "netns",
            k.name(),
        ])
        .expect("veth");
        r.ip(&["addr", "add", "10.214.0.1/24", "dev", "r0"])
            .unwrap();
        r.ip(&["-6", "addr", "add", "fd00:214::1/64", "dev", "r0", "nodad"])
            .unwrap();
        r.ip(&["link", "set", "r0", "up"]).unwrap();
        r.sysctl_set("ipv4/ip_forward", "1").unwrap();
        r.sysctl_set("ipv6/conf/all/forwarding", "1").unwrap();
        k.ip(&["link", "set", "lo", "up"]).unwrap();
        k.ip(&["addr", "add", "10.214.0.2/24", "dev", "k0"])
            .unwrap();
        k.ip(&["-6", "addr", "add", "fd00:214::2/64", "dev", "k0", "nodad"])
            .unwrap();
        k.ip(&["link", "set", "k0", "up"]).unwrap();
        k.ip(&["route", "add", "default", "via", "10.214.0.1"])
            .unwrap();
        k.ip(&["-6", "route", "add", "default", "via", "fd00:214::1"])
            .unwrap();
        if route_mtu < 1500 {
            let m = route_mtu.to_string();
            r.ip(&[
                "route",
                "replace",
                "10.214.0.0/24",
                "dev",
                "r0",
                "mtu",
                "lock",
                &m,
            ])
            .unwrap();
            // IPv6 forwarding takes the MTU from the interface's IPv6 settings unless a route's
            // is locked (`ip6_dst_mtu_maybe_forward`); set it once the veth has carrier, which
            // resets it to the link MTU.
            r.sysctl_set("ipv6/conf/r0/mtu", &m).unwrap();
        }
        let host = Host::start(stack(0xf00d), tun).expect("I/O thread");
        Routed { host, r, k }
    }

    /// A kernel listener in the server namespace.
    fn far_listener(&self, addr: SocketAddr) -> std::net::TcpListener {
        self.k
            .run(move || std::net::TcpListener::bind(addr))
            .expect("enter namespace")
            .expect("bind")
    }

    fn tc(&self, ns: &Netns, args: &[&str]) -> String {
        run_ok(ns.command("tc").args(args))
    }
}

/// Shallow sends `n` bytes to a far kernel server and reads `back` bytes in return; both
/// checked with SHA-256. Returns the Shallow socket's `tcp_info` at the end.
fn transfer(w: &Routed, addr: SocketAddr, n: u64, back: u64) -> shallow_tcp::TcpInfo {
    let l = w.far_listener(addr);
    let kernel = in_netns(w.k.name(), move || {
        let (mut s, _) = l.accept().unwrap();
        let got = read_hash(&mut s, 1 << 16).unwrap();
        let sent = send_pattern(&mut s, 22, back, 1 << 16).unwrap();
        s.shutdown(StdShutdown::Write).unwrap();
        (got, sent)
    });
    let mut s = connect(&w.host, addr);
    let sent = send_pattern(&mut s, 21, n, 1 << 16).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let got = read_hash(&mut s, 1 << 16).unwrap();
    let (kgot, ksent) = kernel.join().unwrap();
    assert_eq!(kgot, (n, sent), "{addr}: Shallow → Linux stream differs");
    assert_eq!(got, (back, ksent), "{addr}: Linux → Shallow stream differs");
    let sock = s.socket();
    w.host
        .with_stack(|st, now| st.tcp_info(now, sock))
        .expect("tcp_info")
}

/// A router whose route to the server has MTU 1280 answers Shallow's 1500-byte DF packets (and TSO
/// super-segments, which the kernel checks per segment) with ICMP fragmentation-needed
/// (IPv4, RFC 1191) or packet-too-big (IPv6, RFC 8201); the engine lowers the path MTU to
/// 1280 and the transfer completes intact.
#[test]
fn icmp_frag_needed_lowers_mtu() {
    if !can_run("icmp_frag_needed_lowers_mtu", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = Routed::new(1280);
        for (port, ip) in [(7101u16, IpAddr::V4(FAR4)), (7102, IpAddr::V6(FAR6))] {
            let info = transfer(&w, SocketAddr::new(ip, port), 8 << 20, 1 << 20);
            eprintln!(
                "{ip}: pmtu {} snd_mss {} retrans {}",
                info.pmtu, info.snd_mss, info.total_retrans
            );
            assert_eq!(info.pmtu, 1280, "{ip}: path MTU after ICMP");
            let hdrs = if ip.is_ipv4() { 40 } else { 60 };
            assert!(
                info.snd_mss <= 1280 - hdrs,
                "{ip}: snd_mss {} above what 1280 allows",
                info.snd_mss
            );
        }
        assert!(
            nstat(&w.r, "IcmpOutDestUnreachs") > 0,
            "the router sent no ICMPv4"
        );
        assert!(
            nstat(&w.r, "Icmp6OutPktTooBigs") > 0,
            "the router sent no ICMPv6 too-big"
        );
    });
}

/// A tbf bottleneck on the router's egress in each direction (20 Mbit/s toward the server,
/// 30 Mbit/s toward Shallow, small buffers): the kernel and Shallow each send through a queue
/// that drops, and both streams arrive intact.
#[test]
fn tbf_bottleneck_both_ways() {
    if !can_run("tbf_bottleneck_both_ways", &[("tc", "-V")]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = Routed::new(1500);
        w.tc(
            &w.r,
            &[
                "qdisc", "add", "dev", "r0", "root", "tbf", "rate", "20mbit", "burst", "16kb",
                "limit", "30kb",
            ],
        );
        w.tc(
            &w.r,
            &[
                "qdisc", "add", "dev", "sh0", "root", "tbf", "rate", "30mbit", "burst", "16kb",
                "limit", "30kb",
            ],
        );
        let mut retrans = 0;
        for (port, ip) in [(7111u16, IpAddr::V4(FAR4)), (7112, IpAddr::V6(FAR6))] {
            let info = transfer(&w, SocketAddr::new(ip, port), 4 << 20, 4 << 20);
            eprintln!(
                "{ip}: retrans {} ({} bytes), cwnd {}, rtt {} us",
                info.total_retrans, info.bytes_retrans, info.snd_cwnd, info.rtt
            );
            retrans += info.total_retrans;
        }
        let stats = w.tc(&w.r, &["-s", "qdisc", "show", "dev", "r0"]);
        eprintln!("router r0: {stats}");
        let dropped: u64 = stats
            .split("dropped ")
            .nth(1)
            .and_then(|s| s.split(',').next())
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        // The bottleneck really dropped Shallow's packets, and Shallow recovered them.
        assert!(dropped > 0, "tbf on r0 dropped nothing:\n{stats}");
        assert!(retrans > 0, "drops at the bottleneck but no retransmission");
    });
}

/// The kernel's Linux → Shallow direction through the far server as well: a far kernel
/// client connects to a port the Shallow host does not listen on and gets RST (the engine
/// answers a SYN to a closed port, RFC 9293 §3.10.7.1) — i.e. routing works both ways.
#[test]
fn far_kernel_connect_to_closed_port_refused() {
    if !can_run("far_kernel_connect_to_closed_port_refused", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = Routed::new(1500);
        for ip in [IpAddr::V4(ME4), IpAddr::V6(ME6)] {
            let r =
                w.k.run(move || {
                    std::net::TcpStream::connect_timeout(
                        &SocketAddr::new(ip, 9),
                        Duration::from_secs(5),
                    )
                })
                .unwrap();
            let e = r.expect_err("connect to a closed port");
            assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{ip}: {e}");
        }
    });
}
