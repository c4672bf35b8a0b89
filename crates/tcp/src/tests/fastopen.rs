//! TCP Fast Open (RFC 7413, fastopen.rs and stack/fastopen.rs) between two stacks: the
//! cookie round, data in the SYN on the next connection, `TCP_FASTOPEN_CONNECT`, the
//! listener's queue limit, keys, and the client's black-hole pause. The Linux packetdrill
//! scripts in `fastopen/` check the exact packets against the kernel; these check the
//! whole exchange end to end, where each side is Shallow.

use crate::harness::*;
use crate::recv::msgflags::{MSG_DONTWAIT, MSG_FASTOPEN};
use crate::*;
use core::net::SocketAddr;
use core::time::Duration;

const TCPI_OPT_SYN_DATA: u8 = 32;

fn server(p: &mut Pair, port: u16, qlen: i64) -> (SocketId, SocketAddr) {
    p.b.sysctl_set("net.ipv4.tcp_fastopen", "3").unwrap();
    p.a.sysctl_set("net.ipv4.tcp_fastopen", "3").unwrap();
    let l = p.b.socket(Family::V4).unwrap();
    let addr = SocketAddr::new(ADDR_B, port);
    p.b.bind(l, addr).unwrap();
    p.b.listen(l, 16).unwrap();
    p.b.setsockopt(p.now, l, SockOpt::TcpFastopen, &OptVal::Int(qlen))
        .unwrap();
    (l, addr)
}

/// A nonblocking `sendto(MSG_FASTOPEN)` of `data` from a fresh socket on A.
fn tfo_send(p: &mut Pair, to: SocketAddr, data: &[u8]) -> (SocketId, Result<usize, Errno>) {
    let c = p.a.socket(Family::V4).unwrap();
    p.a.set_nonblocking(c, true).unwrap();
    let r =
        p.a.sendto(p.now, c, data, MSG_FASTOPEN | MSG_DONTWAIT, Some(to));
    (c, r)
}

fn read_all(p: &mut Pair, s: SocketId) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n @ 1..) = p.b.recv(p.now, s, &mut buf, 0) {
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn counter(st: &Stack, m: Mib) -> u64 {
    st.counters().value(m)
}

#[test]
fn first_connection_gets_a_cookie_the_next_carries_data_in_its_syn() {
    let mut p = Pair::new(11, LinkConfig::default());
    let (l, addr) = server(&mut p, 80, 16);
    // No cookie yet: the SYN asks for one and carries nothing.
    let (c1, r) = tfo_send(&mut p, addr, b"hello");
    assert_eq!(r, Err(Errno::EINPROGRESS));
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c1).unwrap(), TcpState::Established);
    assert_eq!(counter(&p.b, Mib::TCPFastOpenCookieReqd), 1);
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 0);
    let info = p.a.tcp_info(p.now, c1).unwrap();
    assert_eq!(info.options & TCPI_OPT_SYN_DATA, 0);
    let (s1, _) = p.b.accept(l).unwrap();
    assert_eq!(p.a.send(p.now, c1, b"hello", 0), Ok(5));
    p.run_for(Duration::from_millis(50));
    assert_eq!(read_all(&mut p, s1), b"hello");

    // With the cookie cached, the SYN carries the data and the server takes it at once:
    // accept() returns the child before the handshake completes, with the data readable.
    let msg = vec![7u8; 1000];
    let (c2, r) = tfo_send(&mut p, addr, &msg);
    assert_eq!(r, Ok(1000));
    // The SYN has arrived (5 ms one way), the handshake's last ACK not yet.
    p.run_for(Duration::from_millis(7));
    let (s2, _) =
        p.b.accept(l)
            .expect("a Fast Open child is in the accept queue at once");
    assert_eq!(p.b.state(s2).unwrap(), TcpState::SynRecv);
    assert_eq!(read_all(&mut p, s2), msg);
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c2).unwrap(), TcpState::Established);
    assert_eq!(p.b.state(s2).unwrap(), TcpState::Established);
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 1);
    assert_eq!(counter(&p.a, Mib::TCPFastOpenActive), 1);
    let ci = p.a.tcp_info(p.now, c2).unwrap();
    let si = p.b.tcp_info(p.now, s2).unwrap();
    assert_ne!(ci.options & TCPI_OPT_SYN_DATA, 0);
    assert_ne!(si.options & TCPI_OPT_SYN_DATA, 0);
    // The data went once: no retransmission.
    assert_eq!(ci.total_retrans, 0);
    // And the connection carries on both ways.
    assert_eq!(p.b.send(p.now, s2, b"world", 0), Ok(5));
    p.run_for(Duration::from_millis(50));
    let mut buf = [0u8; 16];
    assert_eq!(p.a.recv(p.now, c2, &mut buf, 0), Ok(5));
    assert_eq!(&buf[..5], b"world");
}

#[test]
fn a_wrong_cookie_gets_the_right_one_and_the_data_goes_after_the_handshake() {
    let mut p = Pair::new(12, LinkConfig::default());
    let (l, addr) = server(&mut p, 81, 16);
    let (_, r) = tfo_send(&mut p, addr, b"");
    assert_eq!(r, Err(Errno::EINPROGRESS));
    p.run_for(Duration::from_millis(50));
    let _ = p.b.accept(l).unwrap();
    // The server changes its key: the client's cookie is now wrong.
    p.b.sysctl_set(
        "net.ipv4.tcp_fastopen_key",
        "00000001-00000002-00000003-00000004",
    )
    .unwrap();
    let msg = vec![3u8; 500];
    let (c, r) = tfo_send(&mut p, addr, &msg);
    assert_eq!(r, Ok(500), "the SYN carried the data with the old cookie");
    p.run_for(Duration::from_millis(50));
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassiveFail), 1);
    assert_eq!(counter(&p.a, Mib::TCPFastOpenActiveFail), 1);
    // The SYN-ACK did not cover the data: it was sent again, and arrived.
    let (s, _) = p.b.accept(l).unwrap();
    assert_eq!(read_all(&mut p, s), msg);
    assert_eq!(
        p.a.tcp_info(p.now, c).unwrap().options & TCPI_OPT_SYN_DATA,
        0
    );
    // The SYN-ACK carried the new cookie: the next SYN with data is taken.
    let (_, r) = tfo_send(&mut p, addr, b"again");
    assert_eq!(r, Ok(5));
    p.run_for(Duration::from_millis(50));
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 1);
}

#[test]
fn fastopen_connect_defers_the_syn_to_the_first_write() {
    let mut p = Pair::new(13, LinkConfig::default());
    let (l, addr) = server(&mut p, 82, 16);
    let (_, _) = tfo_send(&mut p, addr, b"");
    p.run_for(Duration::from_millis(50));
    let _ = p.b.accept(l).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    p.a.set_nonblocking(c, true).unwrap();
    p.a.setsockopt(p.now, c, SockOpt::TcpFastopenConnect, &OptVal::Int(1))
        .unwrap();
    let syns = p.segs[0];
    assert_eq!(
        p.a.connect(p.now, c, addr),
        Ok(()),
        "a cookie is cached: no SYN yet"
    );
    p.run_for(Duration::from_millis(10));
    assert_eq!(p.segs[0], syns, "connect() sent nothing");
    assert!(p.a.connect_deferred(c).unwrap());
    assert_ne!(p.a.poll(c).unwrap() & crate::pollbits::POLLOUT, 0);
    assert_eq!(p.a.connect(p.now, c, addr), Err(Errno::EISCONN));
    assert_eq!(p.a.send(p.now, c, b"first write", 0), Ok(11));
    p.run_for(Duration::from_millis(50));
    let (s, _) = p.b.accept(l).unwrap();
    assert_eq!(read_all(&mut p, s), b"first write");
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 1);
}

#[test]
fn a_full_fastopen_queue_falls_back_to_the_ordinary_handshake() {
    let mut p = Pair::new(14, LinkConfig::default());
    let (l, addr) = server(&mut p, 83, 1);
    let (_, _) = tfo_send(&mut p, addr, b"");
    p.run_for(Duration::from_millis(50));
    let _ = p.b.accept(l).unwrap();
    // Hold the handshakes' last ACKs back so that the first child stays in SYN_RECV.
    p.ab.loss = 1.0;
    let (_, r1) = tfo_send(&mut p, addr, b"one");
    assert_eq!(r1, Ok(3));
    p.ab.loss = 0.0;
    p.run_for(Duration::from_micros(100));
    p.ab.loss = 1.0;
    p.run_for(Duration::from_millis(20));
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 1);
    p.ab.loss = 0.0;
    let (_, r2) = tfo_send(&mut p, addr, b"two");
    assert_eq!(r2, Ok(3));
    p.run_for(Duration::from_millis(7));
    assert_eq!(counter(&p.b, Mib::TCPFastOpenListenOverflow), 1);
    assert_eq!(counter(&p.b, Mib::TCPFastOpenPassive), 1);
    // Both connections complete and both messages arrive (the second after its handshake).
    p.run_for(Duration::from_secs(5));
    let mut got = Vec::new();
    while let Ok((s, _)) = p.b.accept(l) {
        got.push(read_all(&mut p, s));
    }
    got.sort();
    assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()]);
}

#[test]
fn listener_keys_and_the_sysctl_key_format() {
    let mut p = Pair::new(15, LinkConfig::default());
    // Never set, the key is made at first use and then shown.
    assert_eq!(
        p.b.sysctl_get("net.ipv4.tcp_fastopen_key").unwrap(),
        "00000000-00000000-00000000-00000000"
    );
    let (l, _) = server(&mut p, 84, 4);
    let shown = p.b.sysctl_get("net.ipv4.tcp_fastopen_key").unwrap();
    assert_ne!(shown, "00000000-00000000-00000000-00000000");
    assert!(p
        .b
        .sysctl_set("net.ipv4.tcp_fastopen_key", "zz-1-2-3")
        .is_err());
    // TCP_FASTOPEN_KEY: 16 or 32 bytes.
    let key: Vec<u8> = (1..=16).collect();
    assert_eq!(
        p.b.setsockopt(
            p.now,
            l,
            SockOpt::TcpFastopenKey,
            &OptVal::Bytes(vec![0; 15])
        ),
        Err(Errno::EINVAL)
    );
    p.b.setsockopt(
        p.now,
        l,
        SockOpt::TcpFastopenKey,
        &OptVal::Bytes(key.clone()),
    )
    .unwrap();
    assert_eq!(
        p.b.getsockopt(l, SockOpt::TcpFastopenKey).unwrap(),
        OptVal::Bytes(key)
    );
    // TCP_FASTOPEN only on a closed or listening socket.
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 84)),
        Err(Errno::EINPROGRESS)
    );
    assert_eq!(
        p.a.setsockopt(p.now, c, SockOpt::TcpFastopen, &OptVal::Int(5)),
        Err(Errno::EINVAL)
    );
}

#[test]
fn the_client_pauses_fast_open_after_a_black_hole() {
    let mut p = Pair::new(16, LinkConfig::default());
    let (_, addr) = server(&mut p, 85, 16);
    p.a.sysctl_set("net.ipv4.tcp_fastopen_blackhole_timeout_sec", "60")
        .unwrap();
    let (_, _) = tfo_send(&mut p, addr, b"");
    p.run_for(Duration::from_millis(50));
    // A middlebox drops every SYN that carries data: the SYN times out twice.
    p.ab.loss = 1.0;
    let (c, r) = tfo_send(&mut p, addr, b"lost");
    assert_eq!(r, Ok(4));
    // The SYN times out at 1, 3 and 7 s; the third timeout (two retransmissions) is the
    // black hole (tcp_fastopen_active_detect_blackhole).
    p.run_for(Duration::from_secs(4));
    assert_eq!(counter(&p.a, Mib::TCPFastOpenBlackhole), 0);
    p.run_for(Duration::from_secs(4));
    assert_eq!(counter(&p.a, Mib::TCPFastOpenBlackhole), 1);
    p.ab.loss = 0.0;
    p.run_for(Duration::from_secs(10));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    // Paused: the next sendto sends a plain SYN, the data after the handshake.
    let (_, r) = tfo_send(&mut p, addr, b"plain");
    assert_eq!(r, Err(Errno::EINPROGRESS));
    // After the pause, Fast Open is back.
    p.run_for(Duration::from_secs(61));
    let (_, r) = tfo_send(&mut p, addr, b"back");
    assert_eq!(r, Ok(4));
}
