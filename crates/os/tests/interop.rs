//! Interop with the Linux kernel's TCP: Shallow over a TUN device, the kernel in a fresh
//! network namespace (`std::net` sockets on threads that entered it), IPv4 and IPv6.
//!
//! Needs root, `/dev/net/tun` and iproute2; without them each test prints why it skipped and
//! passes, unless `SHALLOW_REQUIRE_TUN=1`, which turns a skip into a failure.
//!
//! Sizes: the bulk tests move `SHALLOW_INTEROP_BYTES` each way (default 1 GiB over IPv4,
//! 256 MiB over IPv6), SHA-256 checked on both ends.

mod interop_harness;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown as StdShutdown, SocketAddr};
use std::time::Duration;

use interop_harness::*;
use shallow_os::TcpListener;
use shallow_tcp::Shutdown;

fn bulk_bytes(ip: IpAddr) -> u64 {
    let default = if ip.is_ipv4() { 1 << 30 } else { 256 << 20 };
    size_from_env("SHALLOW_INTEROP_BYTES", default)
}

/// Shallow client → Linux server: Shallow sends N bytes and half-closes (FIN), the kernel
/// reads to EOF, then sends N other bytes back and closes; both ends check SHA-256. Covers
/// the engine's send path, receive path, and half-close (RFC 9293 §3.6) against Linux.
#[test]
fn bulk_shallow_client_linux_server() {
    if !can_run("bulk_shallow_client_linux_server", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(300), || {
        let w = World::new("shiop");
        for (port, ip) in [(7001u16, peers()[0]), (7002, peers()[1])] {
            let n = bulk_bytes(ip);
            let addr = SocketAddr::new(ip, port);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (mut s, _) = l.accept().unwrap();
                let got = read_hash(&mut s, 1 << 16).unwrap();
                let sent = send_pattern(&mut s, 2, n, 1 << 16).unwrap();
                s.shutdown(StdShutdown::Write).unwrap();
                (got, sent)
            });
            let mut s = connect(&w.host, addr);
            let sent = send_pattern(&mut s, 1, n, 1 << 16).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let got = read_hash(&mut s, 1 << 16).unwrap();
            let (kgot, ksent) = kernel.join().unwrap();
            assert_eq!(kgot.0, n, "{ip}: kernel read {} of {n} bytes", kgot.0);
            assert_eq!(kgot.1, sent, "{ip}: Shallow → Linux SHA-256 differs");
            assert_eq!(got.0, n, "{ip}: Shallow read {} of {n} bytes", got.0);
            assert_eq!(got.1, ksent, "{ip}: Linux → Shallow SHA-256 differs");
            eprintln!("{ip}: {n} bytes each way, sha256 {}", hex(&sent));
        }
    });
}

/// Request/response against a kernel echo-like server: each request names the response
/// size; 2,000 transactions of varied sizes over IPv4 and IPv6, every byte checked.
#[test]
fn request_response() {
    if !can_run("request_response", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shiop");
        for (port, ip) in [(7011u16, peers()[0]), (7012, peers()[1])] {
            let addr = SocketAddr::new(ip, port);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (mut s, _) = l.accept().unwrap();
                s.set_nodelay(true).unwrap();
                let mut hdr = [0u8; 8];
                let mut n = 0u32;
                loop {
                    match s.read_exact(&mut hdr) {
                        Ok(()) => {}
                        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return n,
                        Err(e) => panic!("kernel read: {e}"),
                    }
                    let req = u32::from_le_bytes(hdr[..4].try_into().unwrap()) as u64;
                    let resp = u32::from_le_bytes(hdr[4..].try_into().unwrap()) as u64;
                    // The request body is the pattern keyed by the transaction number.
                    let h = read_exact_hash(&mut s, req, 4096).unwrap();
                    assert_eq!(h, pattern_hash(u64::from(n) * 2 + 1, req), "request {n}");
                    send_pattern(&mut s, u64::from(n) * 2 + 2, resp, 1 << 16).unwrap();
                    n += 1;
                }
            });
            let mut s = connect(&w.host, addr);
            // Header and body are separate writes: without TCP_NODELAY, Nagle's algorithm would
            // hold the body until the kernel's (delayed) ACK of the header, as Linux does.
            s.set_nodelay(true).unwrap();
            let sizes = [1u32, 100, 1448, 1449, 4000, 64 * 1024, 200_000];
            let count = 2000u32;
            for i in 0..count {
                let req = sizes[(i as usize) % sizes.len()];
                let resp = sizes[(i as usize * 3 + 1) % sizes.len()];
                let mut hdr = [0u8; 8];
                hdr[..4].copy_from_slice(&req.to_le_bytes());
                hdr[4..].copy_from_slice(&resp.to_le_bytes());
                s.write_all(&hdr).unwrap();
                send_pattern(&mut s, u64::from(i) * 2 + 1, u64::from(req), 1 << 16).unwrap();
                let h = read_exact_hash(&mut s, u64::from(resp), 1 << 16).unwrap();
                assert_eq!(
                    h,
                    pattern_hash(u64::from(i) * 2 + 2, u64::from(resp)),
                    "{ip}: response {i}"
                );
            }
            s.shutdown(Shutdown::Write).unwrap();
            assert_eq!(kernel.join().unwrap(), count);
            let mut b = [0u8; 1];
            assert_eq!(
                s.read(&mut b).unwrap(),
                0,
                "{ip}: EOF after the kernel closed"
            );
        }
    });
}

/// The kernel's socket resets the connection mid-transfer (Linux sends RST when a socket with
/// unread data is closed, `tcp_close`): Shallow's blocked writer gets ECONNRESET (then EPIPE
/// on the next call, as Linux's `sk_err` is reported once), and a read reports the reset too.
#[test]
fn peer_rst_mid_transfer() {
    if !can_run("peer_rst_mid_transfer", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new("shiop");
        for (port, ip) in [(7021u16, peers()[0]), (7022, peers()[1])] {
            let addr = SocketAddr::new(ip, port);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = vec![0u8; 1 << 20];
                s.read_exact(&mut buf).unwrap();
                // Wait until more has arrived, so unread data remains in the receive queue
                // and close() sends RST (with an empty queue it would send FIN, and the
                // writer, then in CLOSE_WAIT, would get EPIPE from the RST that answers its
                // next segment, as Linux's tcp_reset says).
                let mut one = [0u8; 1];
                assert_eq!(s.peek(&mut one).unwrap(), 1);
                drop(s);
            });
            let mut s = connect(&w.host, addr);
            let chunk = vec![7u8; 1 << 16];
            let mut sent = 0u64;
            let err = loop {
                match s.write(&chunk) {
                    Ok(n) => sent += n as u64,
                    Err(e) => break e,
                }
                assert!(sent < 1 << 34, "{ip}: no reset after {sent} bytes");
            };
            kernel.join().unwrap();
            // Linux `tcp_sendmsg_locked`: a call that copied bytes returns their count and
            // leaves `sk_err` for the next call, which reports ECONNRESET once.
            assert_eq!(
                err.kind(),
                ErrorKind::ConnectionReset,
                "{ip}: write failed with {err}, not ECONNRESET"
            );
            assert!(
                sent >= 1 << 20,
                "{ip}: the kernel read 1 MiB before the reset"
            );
            let e = s.write(&chunk).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::BrokenPipe, "{ip}: second write: {e}");
            eprintln!("{ip}: reset after {sent} bytes: {err}");
        }
    });
}

/// 1,000 connect / transfer / close cycles against a kernel server over IPv4, then the
/// engine is back where it started: no socket left (the kernel closes first, so Shallow's
/// side ends in LAST_ACK → CLOSED rather than TIME_WAIT) and no TCP memory held (sockstat
/// pages, `sk_wmem_queued + sk_rmem_alloc + backlog`).
#[test]
fn short_connections_no_leak() {
    if !can_run("short_connections_no_leak", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shiop");
        let cycles = 1000u32;
        let addr = SocketAddr::new(peers()[0], 7031);
        let l = w.kernel_listener(addr);
        let (base_count, base_stat) = w
            .host
            .with_stack(|st, _| (st.socket_count(), st.sockstat()));
        let kernel = w.kernel(move || {
            for i in 0..cycles {
                let (mut s, _) = l.accept().unwrap();
                let mut req = [0u8; 300];
                s.read_exact(&mut req).unwrap();
                assert!(req.iter().all(|&b| b == (i % 251) as u8), "request {i}");
                s.write_all(&vec![(i % 253) as u8; 3000]).unwrap();
                // The kernel closes first: TIME_WAIT stays on its side.
            }
        });
        for i in 0..cycles {
            let mut s = connect(&w.host, addr);
            s.write_all(&[(i % 251) as u8; 300]).unwrap();
            let mut resp = Vec::new();
            s.read_to_end(&mut resp).unwrap();
            assert_eq!(resp.len(), 3000, "cycle {i}");
            assert!(resp.iter().all(|&b| b == (i % 253) as u8), "cycle {i}");
        }
        kernel.join().unwrap();
        // The last LAST_ACKs finish when the kernel's ACKs of our FINs arrive.
        let mut last = (0, Default::default());
        for _ in 0..500 {
            last = w
                .host
                .with_stack(|st, _| (st.socket_count(), st.sockstat()));
            if last.0 == base_count && last.1.mem_pages == base_stat.mem_pages {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            last.0, base_count,
            "sockets left after {cycles} cycles: {:?}",
            last.1
        );
        assert_eq!(
            last.1.mem_pages, base_stat.mem_pages,
            "TCP memory left: {:?}",
            last.1
        );
        assert_eq!(last.1.orphan, 0);
        assert_eq!(last.1.tw, 0);
    });
}

/// Linux client → Shallow server: the kernel connects to Shallow's listener, sends N bytes
/// and half-closes; Shallow reads to EOF, sends N other bytes back and closes; SHA-256 on both
/// ends, IPv4 and IPv6. Covers the passive open (SYN queue, accept queue) against Linux.
#[test]
fn bulk_linux_client_shallow_server() {
    if !can_run("bulk_linux_client_shallow_server", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(300), || {
        let w = World::new("shiop");
        for (port, me) in [(7041u16, IpAddr::V4(ME4)), (7042, IpAddr::V6(ME6))] {
            let n = bulk_bytes(me);
            let addr = SocketAddr::new(me, port);
            let l = TcpListener::bind(&w.host, addr).unwrap();
            let kernel = w.kernel(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                let sent = send_pattern(&mut s, 3, n, 1 << 16).unwrap();
                s.shutdown(StdShutdown::Write).unwrap();
                let got = read_hash(&mut s, 1 << 16).unwrap();
                (sent, got)
            });
            let (mut s, peer) = l.accept().unwrap();
            assert_eq!(
                peer.ip(),
                if me.is_ipv4() { peers()[0] } else { peers()[1] }
            );
            let got = read_hash(&mut s, 1 << 16).unwrap();
            let sent = send_pattern(&mut s, 4, n, 1 << 16).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let (ksent, kgot) = kernel.join().unwrap();
            assert_eq!(got, (n, ksent), "{me}: Linux → Shallow stream differs");
            assert_eq!(kgot, (n, sent), "{me}: Shallow → Linux stream differs");
            eprintln!("{me}: {n} bytes each way, sha256 {}", hex(&sent));
        }
    });
}

/// 1,000 cycles of a kernel client connecting to Shallow's listener, sending a request,
/// reading the reply and closing first (so TIME_WAIT is the kernel's); Shallow's accepted
/// sockets end in LAST_ACK → CLOSED and the engine is back to its baseline: only the
/// listener left, no TCP memory held.
#[test]
fn short_connections_to_shallow_server_no_leak() {
    if !can_run("short_connections_to_shallow_server_no_leak", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shiop");
        let cycles = 1000u32;
        let addr = SocketAddr::new(IpAddr::V6(ME6), 7051);
        let l = TcpListener::bind(&w.host, addr).unwrap();
        let (base_count, base_stat) = w
            .host
            .with_stack(|st, _| (st.socket_count(), st.sockstat()));
        let kernel = w.kernel(move || {
            for i in 0..cycles {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.write_all(&[(i % 251) as u8; 200]).unwrap();
                let mut resp = [0u8; 2000];
                s.read_exact(&mut resp).unwrap();
                assert!(resp.iter().all(|&b| b == (i % 241) as u8), "cycle {i}");
                // Kernel closes first.
            }
        });
        for i in 0..cycles {
            let (mut s, _) = l.accept().unwrap();
            let mut req = [0u8; 200];
            s.read_exact(&mut req).unwrap();
            assert!(req.iter().all(|&b| b == (i % 251) as u8), "cycle {i}");
            s.write_all(&[(i % 241) as u8; 2000]).unwrap();
            let mut rest = Vec::new();
            s.read_to_end(&mut rest).unwrap();
            assert!(rest.is_empty());
        }
        kernel.join().unwrap();
        let mut last = (0, Default::default());
        for _ in 0..500 {
            last = w
                .host
                .with_stack(|st, _| (st.socket_count(), st.sockstat()));
            if last.0 == base_count && last.1.mem_pages == base_stat.mem_pages {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            last.0, base_count,
            "sockets left after {cycles} cycles: {:?}",
            last.1
        );
        assert_eq!(
            last.1.mem_pages, base_stat.mem_pages,
            "TCP memory left: {:?}",
            last.1
        );
        assert_eq!((last.1.orphan, last.1.tw), (0, 0));
    });
}

/// Loss and reordering between the TUN and the engine (the host's packet hook; 1% loss and
/// 2% one-place reordering each way, one segment per packet): bulk both ways completes intact
/// over IPv4 and IPv6, Shallow retransmits what was lost, and the kernel does too.
#[test]
fn loss_and_reordering_both_ways() {
    if !can_run("loss_and_reordering_both_ways", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(180), || {
        let w = LossyWorld::new(
            "shloss",
            Impair {
                loss: 0.01,
                reorder: 0.02,
            },
            0x1055,
        );
        let n = size_from_env("SHALLOW_INTEROP_LOSSY_BYTES", 8 << 20);
        for (port, ip) in [(7061u16, peers()[0]), (7062, peers()[1])] {
            let addr = SocketAddr::new(ip, port);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (mut s, _) = l.accept().unwrap();
                let got = read_hash(&mut s, 1 << 16).unwrap();
                let sent = send_pattern(&mut s, 6, n, 1 << 16).unwrap();
                s.shutdown(StdShutdown::Write).unwrap();
                (got, sent)
            });
            let mut s = connect(&w.host, addr);
            let sent = send_pattern(&mut s, 5, n, 1 << 16).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
            let got = read_hash(&mut s, 1 << 16).unwrap();
            let (kgot, ksent) = kernel.join().unwrap();
            assert_eq!(kgot, (n, sent), "{ip}: Shallow → Linux stream differs");
            assert_eq!(got, (n, ksent), "{ip}: Linux → Shallow stream differs");
            let info = s.tcp_info().unwrap();
            eprintln!(
                "{ip}: Shallow retransmitted {} segments ({} bytes), reordering {}",
                info.total_retrans, info.bytes_retrans, info.reordering
            );
            assert!(info.total_retrans > 0, "{ip}: losses but no retransmission");
        }
        let c = &w.counts;
        let ld = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "hook: to engine {} dropped {} reordered, to kernel {} dropped {} reordered",
            ld(&c.rx_dropped),
            ld(&c.rx_reordered),
            ld(&c.tx_dropped),
            ld(&c.tx_reordered)
        );
        assert!(ld(&c.rx_dropped) > 0 && ld(&c.tx_dropped) > 0);
        assert!(ld(&c.rx_reordered) > 0 && ld(&c.tx_reordered) > 0);
        let kretx = nstat(&w.ns, "TcpRetransSegs");
        eprintln!("kernel: TcpRetransSegs {kretx}");
        assert!(kretx > 0, "the kernel lost segments but retransmitted none");
    });
}

/// Both directions at once on one connection (one Shallow thread writes while another reads,
/// as `shallow nc` does), each ending with a half-close: 20 connections of 1 MB each way,
/// every byte checked at both ends.
#[test]
fn full_duplex_with_half_close() {
    if !can_run("full_duplex_with_half_close", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shiop");
        for round in 0..20u16 {
            let n = (1 << 20) + u64::from(round) * 4099;
            let addr = SocketAddr::new(peers()[usize::from(round % 2)], 7070 + round);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (s, _) = l.accept().unwrap();
                let mut r = s.try_clone().unwrap();
                let reader = std::thread::spawn(move || read_hash(&mut r, 1 << 16).unwrap());
                let mut wr = s;
                let sent = send_pattern(&mut wr, 8, n, 1 << 16).unwrap();
                wr.shutdown(StdShutdown::Write).unwrap();
                (reader.join().unwrap(), sent)
            });
            let s = connect(&w.host, addr);
            let wr = s.try_clone().unwrap();
            let writer = std::thread::spawn(move || {
                let mut w = &wr;
                let h = send_pattern(&mut w, 7, n, 1 << 16).unwrap();
                wr.shutdown(Shutdown::Write).unwrap();
                h
            });
            let got = read_hash(&mut &s, 1 << 16).unwrap();
            let sent = writer.join().unwrap();
            let (kgot, ksent) = kernel.join().unwrap();
            assert_eq!(
                got,
                (n, ksent),
                "round {round}: Linux → Shallow stream differs"
            );
            assert_eq!(
                kgot,
                (n, sent),
                "round {round}: Shallow → Linux stream differs"
            );
        }
    });
}
