//! Transparent termination and non-TCP packets on the Linux substrate's API, between two
//! hosts joined by an in-memory link (no root): `TcpListener::bind_any` with
//! `original_dst` and the forward filter, and the raw handler with its `RawSender`.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use shallow_os::{link, Family, ForwardVerdict, Host, TcpListener, TcpStream};
use shallow_tcp::Stack;

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(31);
    a.add_address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let mut b = Stack::new(32);
    b.add_address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    (Host::start(a, la).unwrap(), Host::start(b, lb).unwrap())
}

#[test]
fn forwarding_listener_accepts_any_destination_and_filters() {
    let (a, b) = hosts();
    let l = TcpListener::bind_any(&b, Family::V4, 64).unwrap();
    assert_eq!(
        TcpListener::bind_any(&b, Family::V4, 64)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EADDRINUSE)
    );
    b.set_forward_filter(Some(Arc::new(|_src, dst: SocketAddr| {
        if dst.port() == 25 {
            ForwardVerdict::Reset
        } else {
            ForwardVerdict::Accept
        }
    })));
    let l2 = l.try_clone().unwrap();
    let server = std::thread::spawn(move || {
        let l = l2;
        let mut seen = Vec::new();
        for _ in 0..2 {
            let (mut s, peer) = l.accept().unwrap();
            let dst = s.original_dst().unwrap();
            seen.push((peer, dst));
            // Echo until the client's FIN.
            let mut buf = vec![0u8; 65536];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).unwrap();
            }
        }
        seen
    });
    let mut locals = Vec::new();
    for dst in ["198.51.100.4:8080", "203.0.113.9:443"] {
        let dst: SocketAddr = dst.parse().unwrap();
        let mut c = TcpStream::connect(&a, dst).unwrap();
        assert_eq!(c.peer_addr().unwrap(), dst);
        locals.push((c.local_addr().unwrap(), dst));
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = c.try_clone().unwrap();
        let d2 = data.clone();
        let writer = std::thread::spawn(move || {
            w.write_all(&d2).unwrap();
            w.shutdown(std::net::Shutdown::Write).unwrap();
        });
        let mut back = Vec::new();
        c.read_to_end(&mut back).unwrap();
        writer.join().unwrap();
        assert_eq!(back, data);
    }
    assert_eq!(server.join().unwrap(), locals);
    let refused = TcpStream::connect(&a, "198.51.100.4:25".parse().unwrap()).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
    drop(l);
}

/// An IPv4 UDP packet from `src` to `dst` (checksum 0: none, as RFC 768 allows over IPv4).
fn udp4(src: SocketAddrV4, dst: SocketAddrV4, payload: &[u8]) -> Vec<u8> {
    let total = 28 + payload.len();
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.ip().octets());
    p[16..20].copy_from_slice(&dst.ip().octets());
    let mut sum = 0u32;
    for c in p[..20].chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p[20..22].copy_from_slice(&src.port().to_be_bytes());
    p[22..24].copy_from_slice(&dst.port().to_be_bytes());
    p[24..26].copy_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p[28..].copy_from_slice(payload);
    p
}

#[test]
fn raw_handler_sees_non_tcp_packets_and_answers_through_raw_sender() {
    let (la, lb) = link::pair().unwrap();
    let mut st = Stack::new(33);
    st.add_address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let host = Host::start(st, lb).unwrap();
    let sender = host.raw_sender();
    assert_eq!(
        sender.send(&[0x45, 0, 0]).unwrap_err().raw_os_error(),
        Some(libc::EINVAL)
    );
    let (tx, rx) = mpsc::channel();
    let answer = host.raw_sender();
    host.set_raw_handler(Some(Box::new(move |p: &[u8]| {
        let _ = tx.send(p.to_vec());
        // Echo the datagram back with the addresses swapped.
        let src = SocketAddrV4::new(Ipv4Addr::new(p[16], p[17], p[18], p[19]), 53);
        let dst = SocketAddrV4::new(Ipv4Addr::new(p[12], p[13], p[14], p[15]), 5353);
        answer.send(&udp4(src, dst, &p[28..])).unwrap();
    })));
    let q = udp4(
        "10.0.0.1:5353".parse().unwrap(),
        "192.0.2.53:53".parse().unwrap(),
        b"who is there",
    );
    la.send(&q, None).unwrap();
    let got = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(got, q);
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    while out.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no answer");
        la.recv_batch(&mut out, 8).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    let (p, gso) = &out[0];
    assert_eq!(*gso, None);
    assert_eq!(&p[12..16], &[192, 0, 2, 53]);
    assert_eq!(&p[28..], b"who is there");
    assert_eq!(host.stats().rx_raw.load(Ordering::SeqCst), 1);
    // A TCP segment is the engine's, not the handler's (no listener: it answers RST).
    let mut client = Stack::new(34);
    client.add_address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    let c = client.socket(Family::V4).unwrap();
    let _ = client.connect(shallow_tcp::Instant::ZERO, c, "10.0.0.2:9".parse().unwrap());
    let syn = client.poll_transmit(shallow_tcp::Instant::ZERO).unwrap();
    la.send(&syn.data, None).unwrap();
    out.clear();
    let t0 = std::time::Instant::now();
    while out.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no RST");
        la.recv_batch(&mut out, 8).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(out[0].0[9], 6, "TCP");
    assert_eq!(out[0].0[33] & 0x04, 0x04, "RST");
    assert!(rx.try_recv().is_err());
    assert_eq!(host.stats().rx_raw.load(Ordering::SeqCst), 1);
    host.shutdown();
    assert_eq!(
        sender.send(&q).unwrap_err().raw_os_error(),
        Some(libc::ENETDOWN)
    );
}

/// Held SYNs through the async API: the client's connect completes only once the
/// application accepts, a reset refuses it, and a held SYN that is never answered leaves the
/// client waiting.
#[cfg(feature = "tokio")]
#[test]
fn held_syns_are_answered_by_the_application() {
    let (a, b) = hosts();
    b.set_forward_filter(Some(Arc::new(|_, _| ForwardVerdict::Defer)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let l = shallow_os::AsyncTcpListener::bind_any(&b, Family::V4, 64).unwrap();
        let a2 = a.clone();
        let client = tokio::task::spawn_blocking(move || {
            let ok = TcpStream::connect(&a2, "198.51.100.7:80".parse().unwrap());
            let refused = TcpStream::connect(&a2, "198.51.100.7:81".parse().unwrap());
            (
                ok.map(|mut s| {
                    let mut b = [0u8; 5];
                    s.read_exact(&mut b).unwrap();
                    b
                }),
                refused.map(|_| ()),
            )
        });
        let shallow_os::Forwarded::Request(r) = l.next_forwarded().await.unwrap() else {
            panic!("a held SYN first");
        };
        assert_eq!(r.original_dst(), "198.51.100.7:80".parse().unwrap());
        // Not answered yet: the client is still connecting a while later.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!client.is_finished());
        let mut s = r.accept().await.unwrap();
        use tokio::io::AsyncWriteExt;
        s.write_all(b"hello").await.unwrap();
        let shallow_os::Forwarded::Request(r) = l.next_forwarded().await.unwrap() else {
            panic!("the second SYN is held too");
        };
        r.reset().unwrap();
        let (ok, refused) = client.await.unwrap();
        assert_eq!(&ok.unwrap(), b"hello");
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::ConnectionRefused);
    });
}

/// The blocking forms: `next_forwarded` and `accept_blocking`; and an ICMP unreachable
/// answer, which Shallow's own client takes as a hard error in SYN_SENT.
#[test]
fn held_syns_blocking_and_unreachable() {
    let (a, b) = hosts();
    b.set_forward_filter(Some(Arc::new(|_, _| ForwardVerdict::Defer)));
    let l = TcpListener::bind_any(&b, Family::V4, 64).unwrap();
    let a2 = a.clone();
    let client = std::thread::spawn(move || {
        let e = TcpStream::connect(&a2, "203.0.113.1:443".parse().unwrap()).unwrap_err();
        let mut s = TcpStream::connect(&a2, "203.0.113.2:443".parse().unwrap()).unwrap();
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).unwrap();
        (e, buf)
    });
    let shallow_os::Forwarded::Request(r) = l.next_forwarded().unwrap() else {
        panic!("a held SYN");
    };
    r.unreachable(shallow_os::Unreachable::Host).unwrap();
    let shallow_os::Forwarded::Request(r) = l.next_forwarded().unwrap() else {
        panic!("a held SYN");
    };
    assert_eq!(r.original_dst(), "203.0.113.2:443".parse().unwrap());
    let mut s = r.accept_blocking().unwrap();
    s.write_all(b"ok").unwrap();
    let (e, buf) = client.join().unwrap();
    assert_eq!(e.raw_os_error(), Some(libc::EHOSTUNREACH), "{e}");
    assert_eq!(&buf, b"ok");
    l.set_nonblocking(true).unwrap();
    assert_eq!(
        l.next_forwarded().unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
}
