//! Transparent termination (`stack/forward.rs`): a forwarding listener takes connections to
//! destinations that are not the stack's own, with the original destination as the child's
//! local address, under the user's accept / reset / drop rule.

use crate::harness::*;
use crate::tests::e2e::transfer;
use crate::*;
use core::net::{IpAddr, SocketAddr};
use core::time::Duration;
use std::sync::Arc;

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// B forwards `family`'s destinations; A connects `c` to `dst`.
fn forwarding_pair(seed: u64, family: Family, dst: SocketAddr) -> (Pair, SocketId, SocketId) {
    let mut p = Pair::new(seed, LinkConfig::default());
    let l = p.b.socket(family).unwrap();
    p.b.listen_any(l, 128).unwrap();
    let c = p.a.socket(Family::of(dst.ip())).unwrap();
    assert_eq!(p.a.connect(p.now, c, dst), Err(Errno::EINPROGRESS));
    p.run_for(Duration::from_millis(100));
    (p, l, c)
}

/// The local address of the next connection `l` accepts on B.
fn accepted(p: &mut Pair, l: SocketId) -> SocketAddr {
    let (s, _) = p.b.accept(l).unwrap();
    p.b.local_addr(s).unwrap()
}

#[test]
fn forwarded_connection_carries_its_original_destination() {
    let dst = sa("192.0.2.7:443");
    let (mut p, l, c) = forwarding_pair(1, Family::V4, dst);
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    let (s, peer) = p.b.accept(l).unwrap();
    assert_eq!(peer, p.a.local_addr(c).unwrap());
    assert_eq!(
        p.b.local_addr(s).unwrap(),
        dst,
        "getsockname is the original destination"
    );
    assert_eq!(p.b.local_addr(l).unwrap(), sa("0.0.0.0:0"));
    assert_eq!(p.a.peer_addr(c).unwrap(), dst);
    let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    assert_eq!(transfer(&mut p, c, s, &data, Duration::from_secs(5)), data);
    // And back: the child sends from the original destination.
    let back = vec![9u8; 70_000];
    let (mut sent, mut got, mut buf) = (0, Vec::new(), vec![0u8; 65536]);
    for _ in 0..10_000 {
        if got.len() == back.len() {
            break;
        }
        if let Ok(n) = p.b.send(p.now, s, &back[sent..], 0) {
            sent += n;
        }
        while let Ok(n @ 1..) = p.a.recv(p.now, c, &mut buf, 0) {
            got.extend_from_slice(&buf[..n]);
        }
        p.drain_wakeups();
        p.step();
    }
    assert_eq!(got, back);
    assert_eq!(p.b.counters().value(Mib::PassiveOpens), 1);
}

#[test]
fn own_addresses_and_ordinary_listeners_are_not_forwarded() {
    let mut p = Pair::new(2, LinkConfig::default());
    let fl = p.b.socket(Family::V4).unwrap();
    p.b.listen_any(fl, 16).unwrap();
    // A wildcard listener sees only the stack's own addresses, as on Linux.
    let wl = p.b.socket(Family::V4).unwrap();
    p.b.bind(wl, sa("0.0.0.0:80")).unwrap();
    p.b.listen(wl, 16).unwrap();
    let to_other = p.a.socket(Family::V4).unwrap();
    let to_own = p.a.socket(Family::V4).unwrap();
    let to_closed = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, to_other, sa("198.51.100.1:80"));
    let _ = p.a.connect(p.now, to_own, SocketAddr::new(ADDR_B, 80));
    let _ = p.a.connect(p.now, to_closed, SocketAddr::new(ADDR_B, 81));
    p.run_for(Duration::from_millis(100));
    for c in [to_other, to_own] {
        assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    }
    let (s, _) = p.b.accept(fl).unwrap();
    assert_eq!(p.b.local_addr(s).unwrap(), sa("198.51.100.1:80"));
    assert_eq!(p.b.accept(fl), Err(Errno::EAGAIN));
    let (s, _) = p.b.accept(wl).unwrap();
    assert_eq!(p.b.local_addr(s).unwrap(), SocketAddr::new(ADDR_B, 80));
    // A closed port of the stack's own address is refused, not forwarded.
    assert_eq!(
        p.a.connect(p.now, to_closed, SocketAddr::new(ADDR_B, 81)),
        Err(Errno::ECONNREFUSED)
    );
}

#[test]
fn filter_accepts_resets_or_drops_by_destination() {
    let mut p = Pair::new(3, LinkConfig::default());
    let l = p.b.socket(Family::V4).unwrap();
    p.b.listen_any(l, 16).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    p.b.set_forward_filter(Some(Arc::new(move |src, dst: SocketAddr| {
        log.lock().unwrap().push((src, dst));
        match dst.port() {
            25 => ForwardVerdict::Reset,
            137 => ForwardVerdict::Drop,
            _ => ForwardVerdict::Accept,
        }
    })));
    let ok = p.a.socket(Family::V4).unwrap();
    let refused = p.a.socket(Family::V4).unwrap();
    let dropped = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, ok, sa("203.0.113.5:443"));
    let _ = p.a.connect(p.now, refused, sa("203.0.113.5:25"));
    let _ = p.a.connect(p.now, dropped, sa("203.0.113.5:137"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.state(ok).unwrap(), TcpState::Established);
    assert_eq!(
        p.a.connect(p.now, refused, sa("203.0.113.5:25")),
        Err(Errno::ECONNREFUSED)
    );
    assert_eq!(p.a.state(dropped).unwrap(), TcpState::SynSent);
    // The dropped SYN is retried after the initial RTO (1 s) and asked again.
    p.run_for(Duration::from_millis(1100));
    assert_eq!(p.a.state(dropped).unwrap(), TcpState::SynSent);
    let seen = seen.lock().unwrap();
    let src = p.a.local_addr(ok).unwrap();
    assert!(seen.contains(&(src, sa("203.0.113.5:443"))));
    assert_eq!(seen.iter().filter(|(_, d)| d.port() == 137).count(), 2);
    let (s, _) = p.b.accept(l).unwrap();
    assert_eq!(p.b.accept(l), Err(Errno::EAGAIN));
    assert_eq!(p.b.local_addr(s).unwrap(), sa("203.0.113.5:443"));
}

#[test]
fn syn_cookies_work_for_forwarded_connections() {
    let mut p = Pair::new(4, LinkConfig::default());
    // tcp_syncookies = 2: every SYN is answered with a cookie, no state kept.
    p.b.sysctl_set("net.ipv4.tcp_syncookies", "2").unwrap();
    let l = p.b.socket(Family::V4).unwrap();
    p.b.listen_any(l, 16).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, sa("192.0.2.200:8080"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    assert!(p.b.counters().value(Mib::SyncookiesSent) >= 1);
    let (s, _) = p.b.accept(l).unwrap();
    assert_eq!(p.b.local_addr(s).unwrap(), sa("192.0.2.200:8080"));
    let data = vec![5u8; 100_000];
    assert_eq!(transfer(&mut p, c, s, &data, Duration::from_secs(5)), data);
}

#[test]
fn ipv6_and_dual_stack_forwarding() {
    let mut p = Pair::new(5, LinkConfig::default());
    p.a.add_address("fd00::1".parse::<IpAddr>().unwrap());
    p.b.add_address("fd00::2".parse::<IpAddr>().unwrap());
    let l6 = p.b.socket(Family::V6).unwrap();
    p.b.listen_any(l6, 16).unwrap();
    let c6 = p.a.socket(Family::V6).unwrap();
    let c4 = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c6, sa("[2001:db8::9]:443"));
    let _ = p.a.connect(p.now, c4, sa("192.0.2.9:443"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.state(c6).unwrap(), TcpState::Established);
    assert_eq!(p.a.state(c4).unwrap(), TcpState::Established);
    let mut locals = vec![accepted(&mut p, l6), accepted(&mut p, l6)];
    locals.sort();
    // The dual-stack listener names the IPv4 destination mapped, as accept does.
    assert_eq!(
        locals,
        vec![sa("[::ffff:192.0.2.9]:443"), sa("[2001:db8::9]:443")]
    );
    // An AF_INET forwarding listener takes IPv4 over from the dual-stack one, and gives it
    // back when it closes.
    let l4 = p.b.socket(Family::V4).unwrap();
    p.b.listen_any(l4, 16).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, sa("192.0.2.10:80"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(accepted(&mut p, l4), sa("192.0.2.10:80"));
    p.b.close(p.now, l4).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, sa("192.0.2.11:80"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(accepted(&mut p, l6), sa("[::ffff:192.0.2.11]:80"));
}

#[test]
fn listen_any_misuse_gets_linux_errnos() {
    let mut st = Stack::new(6);
    st.add_address(ADDR_B);
    let bound = st.socket(Family::V4).unwrap();
    st.bind(bound, sa("0.0.0.0:0")).unwrap();
    assert_eq!(st.listen_any(bound, 8), Err(Errno::EINVAL));
    let a = st.socket(Family::V4).unwrap();
    st.listen_any(a, 8).unwrap();
    assert_eq!(st.listen_any(a, 8), Err(Errno::EINVAL), "already listening");
    let b = st.socket(Family::V4).unwrap();
    assert_eq!(st.listen_any(b, 8), Err(Errno::EADDRINUSE));
    // A closed forwarding listener frees its place.
    st.close(Instant::ZERO, a).unwrap();
    st.listen_any(b, 8).unwrap();
    // Without one, segments to other destinations are ignored: no RST answers them.
    st.close(Instant::ZERO, b).unwrap();
    while st.poll_transmit(Instant::ZERO).is_some() {}
    let mut a_st = Stack::new(7);
    a_st.add_address(ADDR_A);
    let c = a_st.socket(Family::V4).unwrap();
    let _ = a_st.connect(Instant::ZERO, c, sa("192.0.2.1:80"));
    let syn = a_st.poll_transmit(Instant::ZERO).unwrap();
    st.input(Instant::ZERO, &syn.data, None);
    assert!(st.poll_transmit(Instant::ZERO).is_none());
}

/// B defers every forwarded SYN; A connects `c` to `dst`.
fn deferring_pair(seed: u64, dst: &str) -> (Pair, SocketId, SocketId) {
    let mut p = Pair::new(seed, LinkConfig::default());
    let l = p.b.socket(Family::V4).unwrap();
    p.b.listen_any(l, 16).unwrap();
    p.b.set_forward_filter(Some(Arc::new(|_, _| ForwardVerdict::Defer)));
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(p.a.connect(p.now, c, sa(dst)), Err(Errno::EINPROGRESS));
    p.run_for(Duration::from_millis(50));
    (p, l, c)
}

#[test]
fn deferred_syn_waits_for_the_application_then_connects() {
    let (mut p, l, c) = deferring_pair(7, "192.0.2.33:8080");
    // Held: no SYN-ACK, nothing to accept, one request.
    assert_eq!(p.a.state(c).unwrap(), TcpState::SynSent);
    assert_eq!(p.b.accept(l), Err(Errno::EAGAIN));
    let held = p.b.forward_request(l).unwrap();
    let s = held.socket;
    assert_eq!(p.b.forward_request(l), Err(Errno::EAGAIN));
    assert_eq!(held.source, p.a.local_addr(c).unwrap());
    assert_eq!(held.original_dst, sa("192.0.2.33:8080"));
    assert_eq!(
        held.client_isn.wrapping_add(1),
        p.a.seqs(c).1,
        "the SYN's sequence"
    );
    // The client's SYN retransmission (1 s) is ignored while the application decides.
    p.run_for(Duration::from_millis(1500));
    assert_eq!(p.a.state(c).unwrap(), TcpState::SynSent);
    assert_eq!(p.b.forward_request(l), Err(Errno::EAGAIN));
    p.b.forward_complete(p.now, s, ForwardCompletion::Accept)
        .unwrap();
    assert_eq!(
        p.b.forward_complete(p.now, s, ForwardCompletion::Accept),
        Err(Errno::EINVAL)
    );
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    assert_eq!(p.b.state(s).unwrap(), TcpState::Established);
    // It is the application's socket: not in the accept queue, counted as a passive open.
    assert_eq!(p.b.accept(l), Err(Errno::EAGAIN));
    assert_eq!(p.b.counters().value(Mib::PassiveOpens), 1);
    assert_eq!(p.b.local_addr(s).unwrap(), sa("192.0.2.33:8080"));
    let data = vec![3u8; 200_000];
    assert_eq!(transfer(&mut p, c, s, &data, Duration::from_secs(5)), data);
}

#[test]
fn deferred_syn_answered_with_reset_or_dropped() {
    let (mut p, l, c) = deferring_pair(8, "192.0.2.34:25");
    let s = p.b.forward_request(l).unwrap().socket;
    p.b.forward_complete(p.now, s, ForwardCompletion::Reset)
        .unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(
        p.a.connect(p.now, c, sa("192.0.2.34:25")),
        Err(Errno::ECONNREFUSED)
    );
    p.b.close(p.now, s).unwrap();
    // Dropped: the client's retransmitted SYN is a new request.
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, sa("192.0.2.35:80"));
    p.run_for(Duration::from_millis(50));
    let s = p.b.forward_request(l).unwrap().socket;
    p.b.forward_complete(p.now, s, ForwardCompletion::Drop)
        .unwrap();
    p.b.close(p.now, s).unwrap();
    p.run_for(Duration::from_millis(1100));
    assert_eq!(p.a.state(c).unwrap(), TcpState::SynSent);
    let held = p.b.forward_request(l).unwrap();
    let s2 = held.socket;
    assert_eq!(held.original_dst, sa("192.0.2.35:80"));
    // Closing a taken request without an answer forgets it too (no FIN, no RST).
    p.b.close(p.now, s2).unwrap();
    assert!(
        p.b.poll_transmit(p.now).is_none(),
        "closing an unanswered request sent a packet"
    );
}

#[test]
fn client_reset_ends_a_held_connection() {
    let (mut p, l, c) = deferring_pair(9, "192.0.2.36:80");
    let s = p.b.forward_request(l).unwrap().socket;
    // The client gives up with a RST at its SYN's next sequence.
    let (_, snd_nxt, _) = p.a.seqs(c);
    let rst = crate::packet::build(&crate::packet::SegOut {
        urgent: 0,
        local: p.a.local_addr(c).unwrap(),
        remote: sa("192.0.2.36:80"),
        seq: snd_nxt,
        ack: 0,
        flags: shallow_wire::TcpFlags::RST,
        window: 0,
        tos: 0,
        ttl: 64,
        ident: 0,
        opts: &[],
        payload: crate::payload::Payload::EMPTY,
        md5: None,
    })
    .unwrap();
    p.b.input(p.now, &rst, None);
    assert_eq!(
        p.b.forward_complete(p.now, s, ForwardCompletion::Accept),
        Err(Errno::ECONNRESET)
    );
    // Gone from the listener too.
    assert_eq!(p.b.forward_request(l), Err(Errno::EAGAIN));
}

#[test]
fn a_held_syn_nobody_takes_is_forgotten_after_the_initial_rto() {
    let (mut p, l, c) = deferring_pair(10, "192.0.2.37:80");
    let inuse = |p: &Pair| p.b.sockstat().inuse;
    let held_now = inuse(&p);
    // Untaken, it goes at 1 s (the client's retransmission, due about then, may bring it
    // back as a new request, never as two).
    p.run_for(Duration::from_millis(1500));
    let mut taken = None;
    for _ in 0..400 {
        match p.b.forward_request(l) {
            Ok(h) => {
                taken = Some(h);
                break;
            }
            Err(Errno::EAGAIN) => p.run_for(Duration::from_millis(10)),
            Err(e) => panic!("{e}"),
        }
    }
    let held = taken.expect("the client's retransmitted SYN is a new request");
    assert_eq!(
        p.b.forward_request(l),
        Err(Errno::EAGAIN),
        "one request, not two"
    );
    p.b.forward_complete(p.now, held.socket, ForwardCompletion::Accept)
        .unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    // Left alone, requests expire: nothing piles up while the client retries.
    let c2 = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c2, sa("192.0.2.38:80"));
    p.run_for(Duration::from_millis(100));
    assert_eq!(inuse(&p), held_now + 1, "one more held child");
    p.run_for(Duration::from_millis(1000));
    assert_eq!(inuse(&p), held_now, "forgotten");
}
