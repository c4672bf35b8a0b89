//! End-to-end tests over the in-memory link (`harness`).

use crate::harness::*;
use crate::*;
use core::net::SocketAddr;
use core::time::Duration;

/// Connect A→B on port 80; returns (client, server-listener, accepted server socket).
pub(crate) fn connect_pair(p: &mut Pair) -> (SocketId, SocketId, SocketId) {
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 16).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80)),
        Err(Errno::EINPROGRESS)
    );
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    let (s, peer) = p.b.accept(l).unwrap();
    assert_eq!(peer.ip(), ADDR_A);
    assert_eq!(p.b.state(s).unwrap(), TcpState::Established);
    (c, l, s)
}

/// Send `data` from `a:c` to `b:s`, reading as it arrives; returns what B read.
pub(crate) fn transfer(
    p: &mut Pair,
    c: SocketId,
    s: SocketId,
    data: &[u8],
    limit: Duration,
) -> Vec<u8> {
    let mut sent = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let deadline = p.now + limit;
    while (sent < data.len() || got.len() < data.len()) && p.now < deadline {
        if sent < data.len() {
            match p.a.send(p.now, c, &data[sent..], 0) {
                Ok(n) => sent += n,
                Err(Errno::EAGAIN) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        loop {
            match p.b.recv(p.now, s, &mut buf, 0) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(Errno::EAGAIN) => break,
                Err(e) => panic!("recv: {e}"),
            }
        }
        p.drain_wakeups();
        if !p.step() {
            break;
        }
    }
    got
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn handshake_options_and_first_ack() {
    let mut p = Pair::new(1, LinkConfig::default());
    let (c, _l, s) = connect_pair(&mut p);
    let ic = p.a.tcp_info(p.now, c).unwrap();
    let is = p.b.tcp_info(p.now, s).unwrap();
    assert_eq!(ic.options & 7, 7, "TS, SACK and wscale negotiated");
    // tcp_rmem[2] = 32 MiB → wscale 10 (ilog2(2^25) - 15).
    assert_eq!(ic.rcv_wscale, 10);
    assert_eq!(is.snd_wscale, 10);
    assert_eq!(ic.snd_mss, 1448);
    assert_eq!(p.a.counters().value(Mib::ActiveOpens), 1);
    assert_eq!(p.b.counters().value(Mib::PassiveOpens), 1);
    assert_eq!(p.a.counters().value(Mib::CurrEstab), 1);
}

#[test]
fn bulk_transfer_and_clean_close() {
    let mut p = Pair::new(
        2,
        LinkConfig {
            rate_bps: 100_000_000,
            ..Default::default()
        },
    );
    let (c, l, s) = connect_pair(&mut p);
    let data = pattern(2_000_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(30));
    assert_eq!(got.len(), data.len());
    assert!(got == data);
    p.a.close(p.now, c).unwrap();
    p.run_for(Duration::from_millis(50));
    let mut buf = [0u8; 16];
    assert_eq!(p.b.recv(p.now, s, &mut buf, 0), Ok(0));
    p.b.close(p.now, s).unwrap();
    p.b.close(p.now, l).unwrap();
    // TIME_WAIT is 60 s on the timer wheel (2 s buckets at that range).
    p.run_for(Duration::from_secs(63));
    assert_eq!(p.a.socket_count(), 0, "TIME_WAIT expired");
    assert_eq!(p.b.socket_count(), 0);
    assert_eq!(p.a.counters().value(Mib::CurrEstab), 0);
}

#[test]
fn tso_super_segments_are_emitted() {
    let mut p = Pair::new(
        3,
        LinkConfig {
            delay: Duration::from_micros(50),
            ..Default::default()
        },
    );
    let (c, _l, s) = connect_pair(&mut p);
    p.a.send(p.now, c, &pattern(200_000), 0).unwrap();
    let mut max_gso_pkt = 0;
    while let Some(t) = p.a.poll_transmit(p.now) {
        if t.gso_size.is_some() {
            max_gso_pkt = max_gso_pkt.max(t.data.len());
        }
        assert!(t.token.is_some(), "data packets carry a TX token");
        p.a.tx_complete(p.now, t.token.unwrap());
    }
    assert!(
        max_gso_pkt > 1500 * 2,
        "a multi-MSS TSO packet was sent ({max_gso_pkt})"
    );
    let _ = s;
}

/// With TSO checksum offload on, a TSO packet leaves with only the pseudo-header sum in its
/// checksum field (`CHECKSUM_PARTIAL`), every other packet with a full checksum; cut into
/// segments by the device (the harness's TSO, which checksums each), the data arrives whole.
#[test]
fn tso_checksum_offload_leaves_the_pseudo_header_sum() {
    use shallow_wire::segment as seg;
    let mut p = Pair::new(
        4,
        LinkConfig {
            delay: Duration::from_micros(50),
            ..Default::default()
        },
    );
    p.a.set_device(DeviceCaps {
        tso_csum_offload: true,
        ..p.a.device()
    });
    let (c, _l, s) = connect_pair(&mut p);
    p.a.send(p.now, c, &pattern(200_000), 0).unwrap();
    let (mut partial, mut full) = (0, 0);
    while let Some(t) = p.a.poll_transmit(p.now) {
        let v = seg::parse_tcp(&t.data).unwrap();
        let multi = t.gso_size.is_some_and(|g| v.payload_len > usize::from(g));
        if multi {
            partial += 1;
            assert!(!seg::tcp_checksum_ok(&t.data));
            let mut want = t.data.clone();
            seg::fill_tcp_csum_partial(&mut want, &v);
            assert_eq!(t.data, want, "the field holds the pseudo-header sum");
            let mut done = t.data.clone();
            seg::complete_tcp_checksum(&mut done, &v);
            assert!(seg::tcp_checksum_ok(&done));
            for s in segment(&t.data, t.gso_size.unwrap()) {
                assert!(seg::tcp_checksum_ok(&s));
            }
        } else {
            full += 1;
            assert!(seg::tcp_checksum_ok(&t.data));
        }
        if let Some(tok) = t.token {
            p.a.tx_complete(p.now, tok);
        }
    }
    assert!(partial > 0, "{partial} TSO packets, {full} others");
    // End to end over a link that cuts TSO packets (no GRO), data intact; B sums every
    // packet, so a one-segment packet left with a partial checksum would count in
    // InCsumErrors.
    let mut p = Pair::new(5, LinkConfig::default());
    p.a.set_device(DeviceCaps {
        tso_csum_offload: true,
        ..p.a.device()
    });
    let (c, _l, s2) = connect_pair(&mut p);
    let data = pattern(3_000_000);
    let got = transfer(&mut p, c, s2, &data, Duration::from_secs(20));
    assert_eq!(got, data);
    assert_eq!(p.b.counters().value(Mib::InCsumErrors), 0);
    let _ = s;
}

#[test]
fn lossy_link_delivers_everything() {
    let mut p = Pair::new(
        4,
        LinkConfig {
            loss: 0.02,
            rate_bps: 50_000_000,
            ..Default::default()
        },
    );
    let (c, _l, s) = connect_pair(&mut p);
    let data = pattern(500_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(120));
    assert_eq!(got.len(), data.len());
    assert!(got == data);
    assert!(p.a.counters().value(Mib::RetransSegs) > 0);
}

#[test]
fn connect_refused_by_rst() {
    let mut p = Pair::new(5, LinkConfig::default());
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 9)),
        Err(Errno::EINPROGRESS)
    );
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Close);
    assert_eq!(
        p.a.getsockopt(c, SockOpt::SoError).unwrap(),
        OptVal::Int(111)
    );
    assert_eq!(p.b.counters().value(Mib::OutRsts), 1);
}

#[test]
fn failed_connect_reports_once_then_reconnects() {
    let mut p = Pair::new(6, LinkConfig::default());
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80)),
        Err(Errno::EINPROGRESS)
    );
    p.run_for(Duration::from_millis(50));
    // inet_stream_connect after an RST: the error once, then a new attempt is allowed.
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80)),
        Err(Errno::ECONNREFUSED)
    );
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 4).unwrap();
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80)),
        Err(Errno::EINPROGRESS)
    );
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    assert_eq!(
        p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80)),
        Err(Errno::EISCONN)
    );
}

/// A new SYN to a server-side TIME_WAIT 4-tuple opens a new connection
/// (`tcp_timewait_state_process` TCP_TW_SYN).
#[test]
fn syn_reopens_time_wait() {
    let mut p = Pair::new(7, LinkConfig::default());
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 4).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    p.a.setsockopt(p.now, c, SockOpt::SoReuseaddr, &OptVal::Int(1))
        .unwrap();
    p.a.bind(c, SocketAddr::new(ADDR_A, 40000)).unwrap();
    let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80));
    p.run_for(Duration::from_millis(50));
    let (s, _) = p.b.accept(l).unwrap();
    p.b.close(p.now, s).unwrap(); // server closes first → server TIME_WAIT
    p.run_for(Duration::from_millis(50));
    p.a.close(p.now, c).unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.b.socket_count(), 2, "listener + TIME_WAIT");
    assert_eq!(p.a.socket_count(), 0);
    let c2 = p.a.socket(Family::V4).unwrap();
    p.a.setsockopt(p.now, c2, SockOpt::SoReuseaddr, &OptVal::Int(1))
        .unwrap();
    p.a.bind(c2, SocketAddr::new(ADDR_A, 40000)).unwrap();
    let _ = p.a.connect(p.now, c2, SocketAddr::new(ADDR_B, 80));
    p.run_for(Duration::from_millis(50));
    assert_eq!(p.a.state(c2).unwrap(), TcpState::Established);
    assert!(p.b.accept(l).is_ok());
}

/// Receive-buffer autotuning (`tcp_rcv_space_adjust`): a bulk receiver on a long path grows
/// rcvbuf beyond tcp_rmem[1] from its receiver-side RTT estimate.
#[test]
fn receiver_autotunes_rcvbuf() {
    let mut p = Pair::new(
        8,
        LinkConfig {
            delay: Duration::from_millis(20),
            rate_bps: 1_000_000_000,
            ..Default::default()
        },
    );
    let (c, _l, s) = connect_pair(&mut p);
    let before = p.b.meminfo(s).unwrap().rcvbuf;
    let data = pattern(8_000_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(60));
    assert_eq!(got.len(), data.len());
    let after = p.b.meminfo(s).unwrap().rcvbuf;
    assert!(after > 2 * before, "rcvbuf {before} -> {after}");
    assert!(p.b.tcp_info(p.now, s).unwrap().rcv_rtt >= 40_000);
}

/// SO_KEEPALIVE + TCP_KEEPIDLE/INTVL/CNT: probes after idle; a dead peer is reset with
/// ETIMEDOUT after `keepcnt` unanswered probes.
#[test]
fn keepalive_probes_then_timeout() {
    let mut p = Pair::new(12, LinkConfig::default());
    let (c, _l, s) = connect_pair(&mut p);
    for (o, v) in [
        (SockOpt::TcpKeepidle, 10),
        (SockOpt::TcpKeepintvl, 2),
        (SockOpt::TcpKeepcnt, 3),
    ] {
        p.a.setsockopt(p.now, c, o, &OptVal::Int(v)).unwrap();
    }
    p.a.setsockopt(p.now, c, SockOpt::SoKeepalive, &OptVal::Int(1))
        .unwrap();
    // A live peer answers: still established after a minute.
    p.run_for(Duration::from_secs(60));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Established);
    assert!(p.a.counters().value(Mib::TCPKeepAlive) >= 1);
    // The peer disappears (its stack drops everything).
    p.ab.loss = 1.0;
    p.run_for(Duration::from_secs(30));
    assert_eq!(p.a.state(c).unwrap(), TcpState::Close);
    assert_eq!(
        p.a.getsockopt(c, SockOpt::SoError).unwrap(),
        OptVal::Int(110)
    );
    let _ = s;
}

/// Delivery-rate estimation (tcp_rate.c): a bulk sender through a 100 Mbit/s bottleneck
/// measures about the bottleneck rate (virtual time, so the figure is exact and repeatable).
#[test]
fn delivery_rate_matches_bottleneck() {
    let mut p = Pair::new(
        13,
        LinkConfig {
            delay: Duration::from_millis(5),
            rate_bps: 100_000_000,
            ..Default::default()
        },
    );
    let (c, _l, s) = connect_pair(&mut p);
    let data = pattern(3_000_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(30));
    assert_eq!(got.len(), data.len());
    let rate = p.a.tcp_info(p.now, c).unwrap().delivery_rate;
    // 100 Mbit/s of wire bytes = 12.5 MB/s; payload share 1448/1500.
    assert!(
        rate > 9_000_000 && rate < 13_000_000,
        "delivery_rate {rate}"
    );
}

/// Many concurrent connections through one listener: every byte arrives on the right
/// connection, and everything is torn down (no leaked sockets).
#[test]
fn many_concurrent_connections() {
    let mut p = Pair::new(
        14,
        LinkConfig {
            rate_bps: 200_000_000,
            loss: 0.01,
            ..Default::default()
        },
    );
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 128).unwrap();
    let n = 60;
    let clients: Vec<SocketId> = (0..n)
        .map(|_| {
            let c = p.a.socket(Family::V4).unwrap();
            let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80));
            c
        })
        .collect();
    p.run_for(Duration::from_secs(3));
    let mut servers = std::collections::HashMap::new();
    while let Ok((s, peer)) = p.b.accept(l) {
        servers.insert(peer.port(), s);
    }
    assert_eq!(servers.len(), n);
    let mut got: std::collections::HashMap<u16, Vec<u8>> = Default::default();
    let mut buf = vec![0u8; 65536];
    for (k, &c) in clients.iter().enumerate() {
        let msg = vec![k as u8; 20_000];
        assert_eq!(p.a.send(p.now, c, &msg, 0), Ok(20_000));
        p.a.close(p.now, c).unwrap();
    }
    for _ in 0..200 {
        p.run_for(Duration::from_millis(50));
        for (&port, &s) in &servers {
            while let Ok(k) = p.b.recv(p.now, s, &mut buf, 0) {
                if k == 0 {
                    break;
                }
                got.entry(port).or_default().extend_from_slice(&buf[..k]);
            }
        }
        p.drain_wakeups();
    }
    for (k, &c) in clients.iter().enumerate() {
        let _ = c;
        let port_data = got
            .values()
            .find(|v| v.first() == Some(&(k as u8)))
            .expect("data");
        assert_eq!(port_data.len(), 20_000);
        assert!(port_data.iter().all(|&b| b == k as u8));
    }
    for &s in servers.values() {
        p.b.close(p.now, s).unwrap();
    }
    p.b.close(p.now, l).unwrap();
    p.run_for(Duration::from_secs(120));
    assert_eq!(p.a.socket_count(), 0);
    assert_eq!(p.b.socket_count(), 0);
}

/// Chronographs (`tcpi_busy_time`, `tcpi_rwnd_limited`): a bulk sender to a receiver that
/// does not read becomes receive-window limited.
#[test]
fn chrono_rwnd_limited() {
    let mut p = Pair::new(
        15,
        LinkConfig {
            rate_bps: 100_000_000,
            ..Default::default()
        },
    );
    let (c, _l, _s) = connect_pair(&mut p);
    p.a.setsockopt(p.now, c, SockOpt::SoSndbuf, &OptVal::Int(4 << 20))
        .unwrap();
    let _ = p.a.send(p.now, c, &vec![1u8; 1_000_000], 0);
    p.run_for(Duration::from_secs(2));
    let i = p.a.tcp_info(p.now, c).unwrap();
    assert!(i.busy_time >= 1_900_000, "busy {}", i.busy_time);
    assert!(
        i.rwnd_limited > 1_000_000,
        "rwnd_limited {}",
        i.rwnd_limited
    );
    assert!(i.busy_time >= i.rwnd_limited);
}

/// Runs one bulk flow for 3 s behind a 20 Mbit/s link that completes packets only when they
/// are serialized; returns (max bytes below TCP, bytes acked).
fn tsq_run(tsq_on: bool) -> (u32, u64) {
    let mut p = Pair::new(
        16,
        LinkConfig {
            delay: Duration::from_millis(1),
            rate_bps: 20_000_000,
            ..Default::default()
        },
    );
    if !tsq_on {
        p.a.sysctl_set("shallow.tcp_tsq", "0").unwrap();
    }
    let (c, _l, s) = connect_pair(&mut p);
    p.a.setsockopt(p.now, c, SockOpt::SoSndbuf, &OptVal::Int(4 << 20))
        .unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut max_t = 0;
    let mut buf = vec![0u8; 1 << 16];
    let end = p.now + Duration::from_secs(3);
    while p.now < end {
        let _ = p.a.send(p.now, c, &chunk, 0);
        while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            if n == 0 {
                break;
            }
        }
        p.drain_wakeups();
        max_t = max_t.max(p.a.meminfo(c).unwrap().wmem_alloc);
        if !p.step() {
            break;
        }
    }
    (max_t, p.a.tcp_info(p.now, c).unwrap().bytes_acked)
}

/// TSQ end to end (spec §2, E1): bytes below TCP stay around two TSO packets while the link
/// stays busy; with the Shallow switch `shallow.tcp_tsq = 0` they grow with cwnd instead.
#[test]
fn tsq_keeps_host_queue_short() {
    let (max_t, acked) = tsq_run(true);
    assert!(max_t <= 140_000, "max bytes below TCP {max_t}");
    // ...and the link stays busy: at least 90% of 3 s × 20 Mbit/s of payload delivered.
    assert!(acked >= 6_750_000 * 9 / 10, "acked {acked}");
    let (max_off, acked_off) = tsq_run(false);
    assert!(
        max_off >= 3 * max_t,
        "TSQ off: max bytes below TCP {max_off}, on: {max_t}"
    );
    assert!(acked_off >= 6_750_000 * 9 / 10, "acked {acked_off}");
}

/// The engine can move between threads (the Linux substrate runs it on an I/O thread).
#[test]
fn stack_is_send() {
    fn assert_send<T: Send>() {}
    assert_send::<Stack>();
    assert_send::<Transmit>();
}

/// `tcp_initialize_rcv_mss` starts from a conservative 536-byte hint; the first full-sized
/// segment raises it to the peer's segment size (1448 with timestamps), never above advmss.
#[test]
fn rcv_mss_starts_at_536_and_learns_the_segment_size() {
    let mut p = Pair::new(31, LinkConfig::default());
    let (c, _l, s) = connect_pair(&mut p);
    assert_eq!(p.b.tcp_info(p.now, s).unwrap().rcv_mss, 536);
    let data = pattern(20_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(5));
    assert_eq!(got, data);
    let i = p.b.tcp_info(p.now, s).unwrap();
    assert_eq!(i.rcv_mss, 1448);
    assert!(i.rcv_mss <= i.advmss);
}

/// `RxBytes::Paged`: data packets handed over as headers + a shared payload (a device with
/// scatter-gather) arrive whole and in order, through the out-of-order queue too, whether the
/// checksum was verified by the device or is summed over both parts here; peeking and reads
/// of odd sizes cross the pieces; a payload shared with the receiver is not copied; corrupt
/// or inconsistent packets are counted and dropped.
#[test]
fn paged_packets_are_received_whole() {
    use shallow_wire::segment as seg;
    let mut p = Pair::new(6, LinkConfig::default());
    let (c, _l, s) = connect_pair(&mut p);
    let data = pattern(400_000);
    let (mut sent, mut got) = (0, Vec::new());
    let mut held: Option<(Vec<u8>, Bytes, Option<u16>)> = None;
    let mut k = 0u32;
    let mut shared_seen = false;
    let mut buf = vec![0u8; 7777];
    for _ in 0..20_000 {
        if got.len() == data.len() {
            break;
        }
        if sent < data.len() {
            if let Ok(n) = p.a.send(p.now, c, &data[sent..], 0) {
                sent += n;
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now) {
            if let Some(tok) = t.token {
                p.a.tx_complete(p.now, tok);
            }
            let v = seg::parse_tcp(&t.data).unwrap();
            if v.payload_len == 0 {
                p.b.input(p.now, &t.data, t.gso_size);
                continue;
            }
            let head = t.data[..v.payload_off].to_vec();
            let frag = Bytes::copy_from_slice(&t.data[v.payload_off..]);
            k += 1;
            // Every seventh data packet comes one packet late: out of order.
            if k % 7 == 0 && held.is_none() {
                held = Some((head, frag, t.gso_size));
                continue;
            }
            p.b.handle_packet(
                p.now,
                RxPacket::paged(&head, &frag)
                    .gso(t.gso_size)
                    .csum_verified(k % 2 == 0),
            );
            if let Some((h, f, g)) = held.take() {
                p.b.handle_packet(p.now, RxPacket::paged(&h, &f).gso(g).csum_verified(false));
            }
            // The receive queue holds a share of the last payload, not a copy, unless it
            // was already read.
            shared_seen |= !frag.is_unique();
        }
        if let Some((h, f, g)) = held.take() {
            p.b.handle_packet(p.now, RxPacket::paged(&h, &f).gso(g).csum_verified(true));
        }
        while let Some(t) = p.b.poll_transmit(p.now) {
            p.a.input(p.now, &t.data, t.gso_size);
        }
        let mut peek = vec![0u8; 150_000];
        if let Ok(n) = p.b.recv(p.now, s, &mut peek, msgflags::MSG_PEEK) {
            assert!(
                peek[..n] == data[got.len()..got.len() + n],
                "peek of {n} bytes at {}",
                got.len()
            );
        }
        // A few reads per round, so reads often stop inside a buffer.
        for _ in 0..3 {
            match p.b.recv(p.now, s, &mut buf, 0) {
                Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        p.drain_wakeups();
        if p.a
            .poll_timeout()
            .is_some_and(|t| t <= p.now + Duration::from_millis(1))
        {
            p.now = p.a.poll_timeout().unwrap().max(p.now);
            p.a.handle_timeout(p.now);
        }
        p.now += Duration::from_micros(100);
        p.b.handle_timeout(p.now);
    }
    assert_eq!(got.len(), data.len());
    assert!(got == data, "bytes differ");
    assert!(shared_seen, "the receive queue copied every payload");
    assert!(
        p.b.counters().value(Mib::TCPOFOQueue) > 0,
        "no out-of-order packet"
    );
    assert_eq!(p.b.counters().value(Mib::InErrs), 0);

    // A corrupted payload is caught when the checksum was not verified by the device.
    p.a.send(p.now, c, &pattern(1000), 0).unwrap();
    let t = p.a.poll_transmit(p.now).unwrap();
    let v = seg::parse_tcp(&t.data).unwrap();
    let head = t.data[..v.payload_off].to_vec();
    let mut bad = t.data[v.payload_off..].to_vec();
    bad[10] ^= 0x40;
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&head, &Bytes::from(bad))
            .gso(None)
            .csum_verified(false),
    );
    assert_eq!(p.b.counters().value(Mib::InCsumErrors), 1);
    // Parts that do not add up to the length fields: one byte short, one byte over, the
    // payload left in the head.
    let frag = Bytes::copy_from_slice(&t.data[v.payload_off..]);
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&head, &frag.slice(1..))
            .gso(None)
            .csum_verified(true),
    );
    let mut over = frag.to_vec();
    over.push(0);
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&head, &Bytes::from(over))
            .gso(None)
            .csum_verified(true),
    );
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&t.data, &Bytes::new())
            .gso(None)
            .csum_verified(true),
    );
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&[], &frag).gso(None).csum_verified(true),
    );
    assert_eq!(p.b.counters().value(Mib::InErrs), 1 + 4);
    assert_eq!(p.b.recv(p.now, s, &mut buf, 0), Err(Errno::EAGAIN));
    // The good one is taken.
    p.b.handle_packet(
        p.now,
        RxPacket::paged(&head, &frag).gso(None).csum_verified(false),
    );
    assert_eq!(p.b.recv(p.now, s, &mut buf, 0), Ok(1000));
}

/// Scatter-gather (`DeviceCaps::sg`): data packets carry their payload as a share of the send buffer
/// (`Transmit::frag`) behind a header-only `data`; linearized, every packet is byte for byte
/// the packet the same stack sends without scatter-gather (retransmissions after losses,
/// split and trimmed skbs included), with a valid checksum; and bytes a packet shares never
/// change afterwards, whatever the socket does next.
#[test]
fn scatter_gather_shares_the_send_buffer_read_only() {
    use shallow_wire::segment as seg;
    fn run(sg: bool) -> (Vec<Vec<u8>>, usize) {
        let mut p = Pair::new(8, LinkConfig::default());
        p.a.set_device(DeviceCaps { sg, ..p.a.device() });
        let (c, _l, s) = connect_pair(&mut p);
        let data = pattern(1_500_000);
        let (mut sent, mut got) = (0, Vec::new());
        let mut out = Vec::new();
        let mut held: Vec<(crate::Frags, Vec<u8>)> = Vec::new();
        let mut k = 0u32;
        let mut buf = vec![0u8; 65536];
        for _ in 0..200_000 {
            if got.len() == data.len() {
                break;
            }
            if sent < data.len() {
                // Odd-sized writes, so the tail skb is appended to while earlier ones fly.
                let n = (data.len() - sent).min(10_007);
                if let Ok(n) = p.a.send(p.now, c, &data[sent..sent + n], 0) {
                    sent += n;
                }
            }
            while let Some(mut t) = p.a.poll_transmit(p.now) {
                if let Some(tok) = t.token.take() {
                    p.a.tx_complete(p.now, tok);
                }
                let v = seg::parse_tcp_split(&t.data, t.frags.len()).unwrap();
                assert_eq!(sg && v.payload_len > 0, !t.frags.is_empty());
                if !t.frags.is_empty() {
                    assert_eq!(t.data.len(), v.payload_off, "headers only");
                    if held.len() < 64 {
                        held.push((t.frags.clone(), t.frags.to_vec()));
                    }
                }
                t.linearize();
                assert!(seg::tcp_checksum_ok(&t.data));
                out.push(t.data.clone());
                k += 1;
                // Every 17th data packet is lost.
                if v.payload_len > 0 && k % 17 == 0 {
                    continue;
                }
                p.b.input(p.now, &t.data, t.gso_size);
            }
            while let Some(t) = p.b.poll_transmit(p.now) {
                p.a.input(p.now, &t.data, t.gso_size);
            }
            while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
            p.drain_wakeups();
            p.now += Duration::from_micros(200);
            p.a.handle_timeout(p.now);
            p.b.handle_timeout(p.now);
        }
        assert!(got == data, "{} of {} bytes arrived", got.len(), data.len());
        for (i, (shared, then)) in held.iter().enumerate() {
            assert!(
                shared.to_vec()[..] == then[..],
                "shared bytes of packet {i} changed"
            );
        }
        assert!(!sg || held.len() == 64);
        let retrans = p.a.counters().value(Mib::RetransSegs) as usize;
        (out, retrans)
    }
    let (plain, r1) = run(false);
    let (paged, r2) = run(true);
    assert!(r1 > 0, "no retransmission");
    assert_eq!((plain.len(), r1), (paged.len(), r2));
    for (i, (a, b)) in plain.iter().zip(&paged).enumerate() {
        assert!(a == b, "packet {i} differs");
    }
}

/// `recv` with MSG_TRUNC (the bytes discarded, not copied) consumes exactly as a copying
/// `recv` does: the same return values, the same ACKs and window updates on the wire, the same
/// counters. The emulator's TCP_STREAM receivers rely on it.
#[test]
fn msg_trunc_consumes_like_a_copying_read() {
    fn run(flags: u32) -> (Vec<usize>, Vec<Vec<u8>>, Vec<u64>) {
        let mut p = Pair::new(
            9,
            LinkConfig {
                loss: 0.01,
                ..Default::default()
            },
        );
        let (c, _l, s) = connect_pair(&mut p);
        let data = pattern(3_000_000);
        let (mut sent, mut reads, mut wire) = (0, Vec::new(), Vec::new());
        let mut buf = vec![0u8; 40_000];
        let mut total = 0;
        for _ in 0..400_000 {
            if total == data.len() {
                break;
            }
            if sent < data.len() {
                if let Ok(n) = p.a.send(p.now, c, &data[sent..], 0) {
                    sent += n;
                }
            }
            if let Ok(n) = p.b.recv(p.now, s, &mut buf, flags) {
                reads.push(n);
                total += n;
            }
            p.drain_wakeups();
            while let Some(t) = p.b.poll_transmit(p.now) {
                wire.push(t.data.clone());
                p.a.input(p.now, &t.data, t.gso_size);
            }
            if !p.step() {
                break;
            }
        }
        assert_eq!(total, data.len());
        let counters = [
            Mib::InSegs,
            Mib::OutSegs,
            Mib::DelayedACKs,
            Mib::TCPRcvCoalesce,
        ]
        .iter()
        .map(|&m| p.b.counters().value(m))
        .collect();
        (reads, wire, counters)
    }
    let copied = run(0);
    let discarded = run(msgflags::MSG_TRUNC);
    assert!(copied.0.len() > 10 && copied.1.len() > 10);
    assert_eq!(copied.0, discarded.0, "read sizes");
    assert!(copied.1 == discarded.1, "B's packets differ");
    assert_eq!(copied.2, discarded.2, "counters");
}

/// `SO_BUSY_POLL` and its companions as Linux 6.18 takes them (measured with python3 as
/// root): a new socket starts at `net.core.busy_read`; 0..=INT_MAX µs, negative EINVAL;
/// `SO_PREFER_BUSY_POLL` a flag; `SO_BUSY_POLL_BUDGET` 0..=65535 and write-only; an
/// accepted socket inherits its listener's.
#[test]
fn busy_poll_options_as_linux() {
    let mut p = Pair::new(47, LinkConfig::default());
    let s = p.a.socket(Family::V4).unwrap();
    assert_eq!(p.a.getsockopt(s, SockOpt::SoBusyPoll), Ok(OptVal::Int(0)));
    p.a.sysctl_set("net.core.busy_read", "30").unwrap();
    assert!(p.a.sysctl_set("net.core.busy_read", "-1").is_err());
    let s2 = p.a.socket(Family::V4).unwrap();
    assert_eq!(p.a.getsockopt(s2, SockOpt::SoBusyPoll), Ok(OptVal::Int(30)));
    assert_eq!(p.a.getsockopt(s, SockOpt::SoBusyPoll), Ok(OptVal::Int(0)));
    let set = |p: &mut Pair, o, v| p.a.setsockopt(p.now, s, o, &OptVal::Int(v));
    assert_eq!(set(&mut p, SockOpt::SoBusyPoll, -1), Err(Errno::EINVAL));
    assert_eq!(
        set(&mut p, SockOpt::SoBusyPoll, i64::from(i32::MAX)),
        Ok(())
    );
    assert_eq!(set(&mut p, SockOpt::SoBusyPoll, 50), Ok(()));
    assert_eq!(set(&mut p, SockOpt::SoPreferBusyPoll, 2), Ok(()));
    assert_eq!(
        p.a.getsockopt(s, SockOpt::SoPreferBusyPoll),
        Ok(OptVal::Int(1))
    );
    assert_eq!(
        set(&mut p, SockOpt::SoBusyPollBudget, 65536),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        set(&mut p, SockOpt::SoBusyPollBudget, -1),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        p.a.getsockopt(s, SockOpt::SoBusyPollBudget),
        Err(Errno::ENOPROTOOPT)
    );
    assert_eq!(
        p.a.busy_poll(s),
        Ok(BusyPoll {
            usec: 50,
            prefer: true,
            budget: BusyPoll::DEFAULT_BUDGET
        })
    );
    assert_eq!(set(&mut p, SockOpt::SoBusyPollBudget, 64), Ok(()));
    assert_eq!(p.a.busy_poll(s).unwrap().budget, 64);
    // Inherited by an accepted socket.
    let l = p.b.socket(Family::V4).unwrap();
    p.b.setsockopt(p.now, l, SockOpt::SoBusyPoll, &OptVal::Int(77))
        .unwrap();
    let addr = SocketAddr::new(ADDR_B, 80);
    p.b.bind(l, addr).unwrap();
    p.b.listen(l, 4).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(p.a.connect(p.now, c, addr), Err(Errno::EINPROGRESS));
    p.run_for(Duration::from_millis(50));
    let (child, _) = p.b.accept(l).unwrap();
    assert_eq!(
        p.b.getsockopt(child, SockOpt::SoBusyPoll),
        Ok(OptVal::Int(77))
    );
}
