//! TCP Fast Open (RFC 7413) through the os layer: `TcpStream::connect_fastopen` (Linux's
//! blocking `sendto(MSG_FASTOPEN)`) and `TcpListener::set_fastopen` (`TCP_FASTOPEN`).
//!
//! - In memory (no root): Shallow client → Shallow server, IPv4 and IPv6: the first
//!   connection only asks for a cookie (the server's `TcpExtTCPFastOpenCookieReqd` + 1, no data
//!   in the SYN), the next one's SYN carries data the server accepts
//!   (`TcpExtTCPFastOpenPassive` + 1, `TCPI_OPT_SYN_DATA` on both ends), every byte checked;
//!   the same between hosts of two shards each; the async counterpart; Linux's errors; the
//!   client's segments when the data does not all fit in the SYN (the rest carries the ACK
//!   of the SYN-ACK, as in packetdrill's `fastopen/client/blocking-sendto.pkt`).
//! - Against the kernel over a TUN (root, otherwise skipped unless `SHALLOW_REQUIRE_TUN=1`),
//!   `net.ipv4.tcp_fastopen=3` in the kernel's namespace: a Shallow client of a Linux
//!   `TCP_FASTOPEN` listener, and a Linux client (`sendto(MSG_FASTOPEN)`) of a Shallow one,
//!   both families; the kernel's `nstat` counters and `TCP_INFO` say it took (or sent) the
//!   SYN's data.

mod interop_harness;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use interop_harness::{can_run, nstat, peers, with_watchdog, World, ME4, ME6};
use shallow_os::{link, Device, Egress, Host, TcpListener, TcpStream};
use shallow_tcp::{OptVal, SockOpt, Stack};

const A4: Ipv4Addr = Ipv4Addr::new(10, 16, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 16, 0, 2);
const A6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x16, 0, 0, 0, 0, 0, 1);
const B6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x16, 0, 0, 0, 0, 0, 2);

/// `TCPI_OPT_SYN_DATA`: the SYN's data was acknowledged (client) or taken (server).
const SYN_DATA: u8 = 32;

/// Client host A and server host B joined by `shards` in-memory links (one shard each per
/// link); B accepts Fast Open (`net.ipv4.tcp_fastopen=3`).
fn hosts(shards: usize) -> (Host, Host) {
    let (mut da, mut db) = (Vec::new(), Vec::new());
    for _ in 0..shards {
        let (x, y) = link::pair().unwrap();
        da.push(Device::Mem(x));
        db.push(Device::Mem(y));
    }
    let mut a = Stack::new(31);
    a.add_address(IpAddr::V4(A4));
    a.add_address(IpAddr::V6(A6));
    let mut b = Stack::new(32);
    b.add_address(IpAddr::V4(B4));
    b.add_address(IpAddr::V6(B6));
    let ha = Host::start_queues(a, da, Egress::default()).unwrap();
    let hb = Host::start_queues(b, db, Egress::default()).unwrap();
    hb.sysctl_set("net.ipv4.tcp_fastopen", "3").unwrap();
    (ha, hb)
}

/// A host's counter (summed over its shards).
fn counter(h: &Host, name: &str) -> u64 {
    h.counters()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(9) as u8 ^ salt)
        .collect()
}

/// Accepts one connection and reads `n` bytes from it; with what `TCP_INFO` said of the
/// SYN's data right after the accept.
fn accept_read(l: &TcpListener, n: usize) -> (TcpStream, Vec<u8>, u8) {
    let (s, _) = l.accept().unwrap();
    let opts = s.tcp_info().unwrap().options;
    let mut got = vec![0u8; n];
    (&s).read_exact(&mut got).unwrap();
    (s, got, opts)
}

/// Shallow → Shallow, IPv4 and IPv6: a cookie first, then data in the SYN. The second
/// connection sends more than a SYN can carry, so the rest follows the handshake; a third
/// sends less than one segment, all of it in the SYN.
#[test]
fn cookie_then_data_in_syn() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts(1);
        for (port, ip) in [(80u16, IpAddr::V4(B4)), (81, IpAddr::V6(B6))] {
            let addr = SocketAddr::new(ip, port);
            let l = TcpListener::bind(&hb, addr).unwrap();
            assert_eq!(l.fastopen().unwrap(), 0);
            l.set_fastopen(16).unwrap();
            assert_eq!(l.fastopen().unwrap(), 16);
            let reqd0 = counter(&hb, "TcpExtTCPFastOpenCookieReqd");
            let passive0 = counter(&hb, "TcpExtTCPFastOpenPassive");
            let active0 = counter(&ha, "TcpExtTCPFastOpenActive");

            // 1: no cookie yet, the SYN asks for one and carries nothing.
            let req = pattern(700, 1);
            let c = TcpStream::connect_fastopen(&ha, addr, &req).unwrap();
            let (_s, got, sopts) = accept_read(&l, req.len());
            assert!(got == req, "{ip}: first connection's bytes");
            assert_eq!(c.tcp_info().unwrap().options & SYN_DATA, 0, "{ip}: client");
            assert_eq!(sopts & SYN_DATA, 0, "{ip}: server");
            assert_eq!(counter(&hb, "TcpExtTCPFastOpenCookieReqd"), reqd0 + 1);
            assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassive"), passive0);
            assert_eq!(counter(&ha, "TcpExtTCPFastOpenActive"), active0);

            // 2: the cookie is cached: the SYN carries what fits, the rest follows.
            let req = pattern(5000, 2);
            let c = TcpStream::connect_fastopen(&ha, addr, &req).unwrap();
            let (s, got, sopts) = accept_read(&l, req.len());
            assert!(got == req, "{ip}: second connection's bytes");
            assert_ne!(c.tcp_info().unwrap().options & SYN_DATA, 0, "{ip}: client");
            assert_ne!(sopts & SYN_DATA, 0, "{ip}: server took no SYN data");
            assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassive"), passive0 + 1);
            assert_eq!(counter(&hb, "TcpExtTCPFastOpenCookieReqd"), reqd0 + 1);
            assert_eq!(counter(&ha, "TcpExtTCPFastOpenActive"), active0 + 1);
            // Both ways work afterwards.
            (&s).write_all(b"pong").unwrap();
            let mut b = [0u8; 4];
            (&c).read_exact(&mut b).unwrap();
            assert_eq!(&b, b"pong");

            // 3: a small request, all of it in the SYN.
            let req = pattern(100, 3);
            let c = TcpStream::connect_fastopen(&ha, addr, &req).unwrap();
            let (_s, got, sopts) = accept_read(&l, req.len());
            assert!(got == req, "{ip}: third connection's bytes");
            assert_ne!(c.tcp_info().unwrap().options & SYN_DATA, 0, "{ip}: client");
            assert_ne!(sopts & SYN_DATA, 0, "{ip}: server");
            assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassive"), passive0 + 2);
        }
    });
}

/// Hosts of two shards each: every Fast Open connection to one server goes to the client
/// shard that has its cookie, and the server's shards share one key, so wherever a
/// connection lands on the server its cookie is good: one cookie request, then Fast Open
/// every time.
#[test]
fn two_shards_share_cookie_and_key() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts(2);
        let addr = SocketAddr::new(IpAddr::V4(B4), 80);
        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_fastopen(16).unwrap();
        let n = 8;
        let mut shards = std::collections::HashSet::new();
        for i in 0..n {
            let req = pattern(300, i as u8);
            let c = TcpStream::connect_fastopen(&ha, addr, &req).unwrap();
            let (s, got, sopts) = accept_read(&l, req.len());
            assert!(got == req, "connection {i}'s bytes");
            shards.insert(s.shard());
            let fast = c.tcp_info().unwrap().options & SYN_DATA != 0;
            assert_eq!(fast, i > 0, "connection {i}: data in the SYN");
            assert_eq!(sopts & SYN_DATA != 0, i > 0, "connection {i}: server");
        }
        assert_eq!(counter(&hb, "TcpExtTCPFastOpenCookieReqd"), 1);
        assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassive"), n - 1);
        assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassiveFail"), 0);
        eprintln!("server shards used: {shards:?}");
    });
}

/// Linux's errors: `EOPNOTSUPP` when the client bit of `net.ipv4.tcp_fastopen` is off;
/// `ECONNREFUSED` when nothing listens (the cookie request is answered by a reset). A
/// listener's options: `TCP_FASTOPEN_KEY` set on it makes its cookies (a client with a cookie
/// of another key gets no Fast Open, the server counts a failure).
#[test]
fn errors_and_listener_key() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts(1);
        let addr = SocketAddr::new(IpAddr::V4(B4), 80);
        let e = TcpStream::connect_fastopen(&ha, addr, b"x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");

        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_fastopen(4).unwrap();
        for i in 0..2u8 {
            let c = TcpStream::connect_fastopen(&ha, addr, &[i; 10]).unwrap();
            let (_s, got, _) = accept_read(&l, 10);
            assert_eq!(got, [i; 10]);
            assert_eq!(c.tcp_info().unwrap().options & SYN_DATA != 0, i == 1);
        }
        // A new key: the cached cookie no longer opens; the data follows the handshake.
        let key: Vec<u8> = (1..=16).collect();
        l.set_option(SockOpt::TcpFastopenKey, &OptVal::Bytes(key.clone()))
            .unwrap();
        assert_eq!(
            l.option(SockOpt::TcpFastopenKey).unwrap(),
            OptVal::Bytes(key)
        );
        let fail0 = counter(&hb, "TcpExtTCPFastOpenPassiveFail");
        let c = TcpStream::connect_fastopen(&ha, addr, b"stale cookie").unwrap();
        let (_s, got, sopts) = accept_read(&l, 12);
        assert_eq!(&got, b"stale cookie");
        assert_eq!(c.tcp_info().unwrap().options & SYN_DATA, 0);
        assert_eq!(sopts & SYN_DATA, 0);
        assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassiveFail"), fail0 + 1);
        // The SYN-ACK gave the new cookie: Fast Open again.
        let c = TcpStream::connect_fastopen(&ha, addr, b"new cookie").unwrap();
        let (_s, got, _) = accept_read(&l, 10);
        assert_eq!(&got, b"new cookie");
        assert_ne!(c.tcp_info().unwrap().options & SYN_DATA, 0);

        // Nothing to send: a SYN with the cookie and no data, as Linux's empty sendto.
        let c = TcpStream::connect_fastopen(&ha, addr, &[]).unwrap();
        let (s, _) = l.accept().unwrap();
        (&c).write_all(b"after").unwrap();
        let mut b = [0u8; 5];
        (&s).read_exact(&mut b).unwrap();
        assert_eq!(&b, b"after");

        ha.sysctl_set("net.ipv4.tcp_fastopen", "0").unwrap();
        let e = TcpStream::connect_fastopen(&ha, addr, b"x").unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EOPNOTSUPP), "{e}");
    });
}

/// The async counterpart: `AsyncTcpStream::connect_fastopen`, a cookie first, then data in
/// the SYN (more than fits, so the future also writes the rest).
#[cfg(feature = "tokio")]
#[test]
fn async_connect_fastopen() {
    use shallow_os::AsyncTcpStream;
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts(1);
        let addr = SocketAddr::new(IpAddr::V6(B6), 80);
        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_fastopen(16).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        for (i, n) in [(0u8, 3000usize), (1, 3000)] {
            let req = pattern(n, 10 + i);
            let r = req.clone();
            let h = ha.clone();
            let c = rt
                .block_on(async move { AsyncTcpStream::connect_fastopen(&h, addr, &r).await })
                .unwrap();
            let (_s, got, sopts) = accept_read(&l, n);
            assert!(got == req, "connection {i}'s bytes");
            assert_eq!(c.tcp_info().unwrap().options & SYN_DATA != 0, i == 1);
            assert_eq!(sopts & SYN_DATA != 0, i == 1);
        }
        assert_eq!(counter(&hb, "TcpExtTCPFastOpenPassive"), 1);
    });
}

// ---- Against the kernel ----

/// `setsockopt(TCP_FASTOPEN, qlen)` on a kernel listener.
fn kernel_set_fastopen(l: &std::net::TcpListener, qlen: i32) {
    // SAFETY: the descriptor is the listener's, open for the whole call; `qlen` is a live
    // local whose address and size are passed together, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN,
            (&qlen as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "setsockopt(TCP_FASTOPEN): {}",
        std::io::Error::last_os_error()
    );
}

/// `tcpi_options` of a kernel socket's `TCP_INFO`.
fn kernel_tcpi_options(s: &std::net::TcpStream) -> u8 {
    // SAFETY: `tcp_info` is plain integers; all zeros is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is the stream's, open for the whole call; `info` and `len` are
    // live locals and `len` holds `info`'s size, so the kernel writes inside `info`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO: {}", std::io::Error::last_os_error());
    info.tcpi_options
}

/// Linux's blocking `sendto(fd, data, MSG_FASTOPEN, addr)` on a new socket (in the calling
/// thread's namespace): the connected stream once all of `data` is sent.
fn kernel_fastopen_client(addr: SocketAddr, data: &[u8]) -> std::net::TcpStream {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a plain syscall with integer arguments.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let (ss, len) = interop_harness::sockaddr(addr);
    // SAFETY: the descriptor is open for the whole call; `data` and `ss` are live, their
    // pointers passed with their lengths, and the kernel only reads them.
    let n = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            data.as_ptr().cast(),
            data.len(),
            libc::MSG_FASTOPEN,
            (&ss as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    };
    assert_eq!(
        n,
        data.len() as isize,
        "sendto(MSG_FASTOPEN) to {addr}: {}",
        std::io::Error::last_os_error()
    );
    std::net::TcpStream::from(fd)
}

/// Shallow's Fast Open client against a Linux `TCP_FASTOPEN` listener
/// (`net.ipv4.tcp_fastopen=3` in its namespace), IPv4 and IPv6: the first connection gets a
/// cookie (the kernel's `TcpExtTCPFastOpenCookieReqd` + 1), the second one's SYN carries
/// data the kernel takes (`TcpExtTCPFastOpenPassive` + 1, `TCPI_OPT_SYN_DATA` on the
/// kernel's accepted socket and on Shallow's); every byte checked, both ways.
#[test]
fn shallow_client_linux_server() {
    if !can_run("shallow_client_linux_server", &[("nstat", "-V")]) {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new("shtfo");
        w.ns.sysctl_set("ipv4/tcp_fastopen", "3").unwrap();
        for (port, ip) in [(7601u16, peers()[0]), (7602, peers()[1])] {
            let addr = SocketAddr::new(ip, port);
            let l = w.kernel_listener(addr);
            kernel_set_fastopen(&l, 16);
            let reqs = [pattern(600, 1), pattern(4000, 2)];
            let sizes: Vec<usize> = reqs.iter().map(Vec::len).collect();
            let kernel = w.kernel(move || {
                let mut out = Vec::new();
                for n in sizes {
                    let (mut s, _) = l.accept().unwrap();
                    let mut got = vec![0u8; n];
                    s.read_exact(&mut got).unwrap();
                    let opts = kernel_tcpi_options(&s);
                    s.write_all(b"ok").unwrap();
                    out.push((got, opts));
                }
                out
            });
            let reqd0 = nstat(&w.ns, "TcpExtTCPFastOpenCookieReqd");
            let passive0 = nstat(&w.ns, "TcpExtTCPFastOpenPassive");
            let mut copts = Vec::new();
            for req in &reqs {
                let c = TcpStream::connect_fastopen(&w.host, addr, req).unwrap();
                let mut b = [0u8; 2];
                (&c).read_exact(&mut b).unwrap();
                assert_eq!(&b, b"ok");
                copts.push(c.tcp_info().unwrap().options);
            }
            let got = kernel.join().unwrap();
            for (i, ((g, kopts), req)) in got.iter().zip(&reqs).enumerate() {
                assert!(g == req, "{ip}: connection {i}'s bytes");
                let fast = i == 1;
                assert_eq!(kopts & SYN_DATA != 0, fast, "{ip} {i}: kernel tcpi_options");
                assert_eq!(copts[i] & SYN_DATA != 0, fast, "{ip} {i}: Shallow's");
            }
            let reqd = nstat(&w.ns, "TcpExtTCPFastOpenCookieReqd") - reqd0;
            let passive = nstat(&w.ns, "TcpExtTCPFastOpenPassive") - passive0;
            eprintln!("{ip}: kernel CookieReqd +{reqd}, Passive +{passive}");
            assert_eq!((reqd, passive), (1, 1), "{ip}: kernel counters");
        }
    });
}

/// A Linux Fast Open client (`sendto(MSG_FASTOPEN)`, `net.ipv4.tcp_fastopen=3` in its
/// namespace) against Shallow's Fast Open listener, IPv4 and IPv6: Shallow counts the cookie
/// request, then takes the second SYN's data (`TcpExtTCPFastOpenPassive` + 1); the kernel
/// counts `TcpExtTCPFastOpenActive` + 1 and its socket has `TCPI_OPT_SYN_DATA`.
#[test]
fn linux_client_shallow_server() {
    if !can_run("linux_client_shallow_server", &[("nstat", "-V")]) {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new("shtfo");
        w.ns.sysctl_set("ipv4/tcp_fastopen", "3").unwrap();
        w.host.sysctl_set("net.ipv4.tcp_fastopen", "3").unwrap();
        for (port, ip) in [(7611u16, IpAddr::V4(ME4)), (7612, IpAddr::V6(ME6))] {
            let addr = SocketAddr::new(ip, port);
            let l = TcpListener::bind(&w.host, addr).unwrap();
            l.set_fastopen(16).unwrap();
            let reqs = [pattern(800, 3), pattern(900, 4)];
            let reqd0 = counter(&w.host, "TcpExtTCPFastOpenCookieReqd");
            let passive0 = counter(&w.host, "TcpExtTCPFastOpenPassive");
            let active0 = nstat(&w.ns, "TcpExtTCPFastOpenActive");
            let kreqs = reqs.clone();
            let kernel = w.kernel(move || {
                let mut opts = Vec::new();
                for req in &kreqs {
                    let mut s = kernel_fastopen_client(addr, req);
                    let mut b = [0u8; 2];
                    s.read_exact(&mut b).unwrap();
                    assert_eq!(&b, b"ok");
                    opts.push(kernel_tcpi_options(&s));
                }
                opts
            });
            for (i, req) in reqs.iter().enumerate() {
                let (s, got, sopts) = accept_read(&l, req.len());
                assert!(&got == req, "{ip}: connection {i}'s bytes");
                assert_eq!(
                    sopts & SYN_DATA != 0,
                    i == 1,
                    "{ip} {i}: Shallow's TCP_INFO"
                );
                (&s).write_all(b"ok").unwrap();
            }
            let kopts = kernel.join().unwrap();
            for (i, o) in kopts.iter().enumerate() {
                assert_eq!(o & SYN_DATA != 0, i == 1, "{ip} {i}: kernel tcpi_options");
            }
            let reqd = counter(&w.host, "TcpExtTCPFastOpenCookieReqd") - reqd0;
            let passive = counter(&w.host, "TcpExtTCPFastOpenPassive") - passive0;
            let active = nstat(&w.ns, "TcpExtTCPFastOpenActive") - active0;
            eprintln!(
                "{ip}: Shallow CookieReqd +{reqd}, Passive +{passive}; kernel Active +{active}"
            );
            assert_eq!((reqd, passive), (1, 1), "{ip}: Shallow's counters");
            assert_eq!(active, 1, "{ip}: kernel's TcpExtTCPFastOpenActive");
        }
    });
}

/// The client's segments of a Fast Open connection whose data does not all fit in the SYN
/// (IPv4): the SYN carries data, and the first segment after the SYN-ACK already carries the
/// rest; no bare ACK of the SYN-ACK goes first (the blocking sendto's write bias,
/// `inet_wait_for_connect`: the ACK waits for the writer's data).
#[test]
fn ack_of_synack_rides_with_the_rest() {
    use std::sync::{Arc, Mutex};
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts(1);
        let addr = SocketAddr::new(IpAddr::V4(B4), 80);
        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_fastopen(16).unwrap();
        let req = pattern(10, 0);
        drop(TcpStream::connect_fastopen(&ha, addr, &req).unwrap());
        drop(accept_read(&l, req.len()));
        // (flags, payload length) of each TCP segment A sends on the next connection (the
        // first SYN's source port; the last one's teardown may still be under way).
        let segs = Arc::new(Mutex::new(Vec::<(u8, usize)>::new()));
        let seen = Arc::clone(&segs);
        let mut port = None;
        ha.set_packet_hook(Some(Box::new(move |dir, p, _| {
            if dir == shallow_os::Dir::Tx && p.len() >= 40 && p[0] >> 4 == 4 && p[9] == 6 {
                let ihl = usize::from(p[0] & 15) * 4;
                let t = &p[ihl..];
                let sport = u16::from_be_bytes([t[0], t[1]]);
                if t[13] & 0x02 != 0 && port.is_none() {
                    port = Some(sport);
                }
                if port == Some(sport) {
                    let doff = usize::from(t[12] >> 4) * 4;
                    let total = usize::from(u16::from_be_bytes([p[2], p[3]]));
                    seen.lock().unwrap().push((t[13], total - ihl - doff));
                }
            }
            shallow_os::Verdict::Pass
        })));
        let req = pattern(3000, 5);
        let c = TcpStream::connect_fastopen(&ha, addr, &req).unwrap();
        let (_s, got, _) = accept_read(&l, req.len());
        assert!(got == req);
        assert_ne!(c.tcp_info().unwrap().options & SYN_DATA, 0);
        let segs = segs.lock().unwrap().clone();
        eprintln!("client segments (flags, bytes): {segs:?}");
        const SYN: u8 = 0x02;
        assert_eq!(segs[0].0 & SYN, SYN, "the SYN first");
        assert!(segs[0].1 > 0, "the SYN carries data");
        assert!(segs[1].1 > 0, "a bare ACK before the rest: {segs:?}");
        assert_eq!(
            segs[1].0 & 0x10,
            0x10,
            "the rest carries the ACK of the SYN-ACK"
        );
        let sent: usize = segs.iter().map(|s| s.1).sum();
        assert_eq!(sent, req.len(), "each byte sent once");
    });
}
