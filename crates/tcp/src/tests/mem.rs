//! Stack-wide TCP memory (`mem.rs`) driven over the in-memory link with a tiny `tcp_mem`.

use crate::harness::*;
use crate::tests::e2e::connect_pair;
use crate::*;
use core::time::Duration;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + i / 509) as u8).collect()
}

/// Run the pair, B reading everything, until `want` bytes arrived and A has nothing queued.
fn drain(p: &mut Pair, c: SocketId, s: SocketId, got: &mut Vec<u8>, want: usize) {
    let mut buf = vec![0u8; 65536];
    let deadline = p.now + Duration::from_secs(120);
    while p.now < deadline {
        loop {
            match p.b.recv(p.now, s, &mut buf, 0) {
                Ok(0) | Err(Errno::EAGAIN) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("recv: {e}"),
            }
        }
        p.drain_wakeups();
        if got.len() >= want && p.a.meminfo(c).unwrap().wmem_queued == 0 {
            break;
        }
        if !p.step() {
            break;
        }
    }
}

/// Close everything and let both stacks finish: no socket and no page may remain.
/// Writes `data[*sent..]` without letting time pass until the send gets EAGAIN (true) or
/// 100 calls went through (false); `*sent` counts what was accepted.
fn send_until_eagain(p: &mut Pair, c: SocketId, data: &[u8], sent: &mut usize) -> bool {
    for _ in 0..100 {
        match p.a.send(p.now, c, &data[*sent..], 0) {
            Ok(n) => *sent += n,
            Err(Errno::EAGAIN) => return true,
            Err(e) => panic!("send: {e}"),
        }
    }
    false
}

fn close_all(p: &mut Pair, c: SocketId, l: SocketId, s: SocketId) {
    p.a.close(p.now, c).unwrap();
    p.run_for(Duration::from_secs(1));
    p.b.close(p.now, s).unwrap();
    p.b.close(p.now, l).unwrap();
    p.run_for(Duration::from_secs(200));
    assert_eq!(p.a.socket_count(), 0);
    assert_eq!(p.b.socket_count(), 0);
    assert_eq!(p.a.sockstat().mem_pages, 0, "A returned every page");
    assert_eq!(p.b.sockstat().mem_pages, 0, "B returned every page");
    assert_eq!(p.a.proto_mem().sockets, 0);
}

#[test]
fn sender_pressure_entered_and_left_moderates_sndbuf() {
    let mut p = Pair::new(3, LinkConfig::default());
    p.a.sysctl_set("net.ipv4.tcp_mem", "4 8 16").unwrap();
    p.a.sysctl_set("net.ipv4.tcp_wmem", "4096 1048576 4194304")
        .unwrap();
    let (c, l, s) = connect_pair(&mut p);
    assert_eq!(p.a.proto_mem().memory_pages, 0);
    assert_eq!(p.a.proto_mem().sockets, 1);
    let data = pattern(400_000);
    let mut sent = 0;
    // Write without letting time pass: memory, not sndbuf (1 MiB), stops the writer.
    let eagain = send_until_eagain(&mut p, c, &data, &mut sent);
    assert!(eagain, "the writer is stopped");
    assert!(sent < 200_000, "stopped by tcp_mem, not by sndbuf: {sent}");
    let pm = p.a.proto_mem();
    assert!(pm.pressure, "pressure entered: {pm:?}");
    assert!(pm.memory_pages > 8);
    assert_eq!(p.a.counters().value(Mib::TCPMemoryPressures), 1);
    assert!(p.a.sockstat().pressure);
    let m = p.a.meminfo(c).unwrap();
    assert!(m.sndbuf < 1048576, "sndbuf moderated: {}", m.sndbuf);
    assert_eq!(p.a.poll(c).unwrap() & pollbits::POLLOUT, 0, "no POLLOUT");
    // Pages held cover what is charged, with less than a page spare.
    let charged = i64::from(m.wmem_queued + m.rmem_alloc);
    assert_eq!(
        pm.memory_pages as i64 * 4096,
        charged + i64::from(m.fwd_alloc)
    );
    assert!(m.fwd_alloc < 4096);
    // ACKs free the memory: pressure ends, its duration is counted, writing works again.
    let mut got = Vec::new();
    drain(&mut p, c, s, &mut got, sent);
    assert_eq!(got, data[..sent]);
    let pm = p.a.proto_mem();
    assert!(!pm.pressure, "pressure left: {pm:?}");
    assert_eq!(pm.memory_pages, 0, "empty queues hold no page");
    assert!(p.a.counters().value(Mib::TCPMemoryPressuresChrono) > 0);
    let n = p.a.send(p.now, c, &data[sent..sent + 1000], 0).unwrap();
    assert_eq!(n, 1000);
    sent += n;
    drain(&mut p, c, s, &mut got, sent);
    assert_eq!(got, data[..sent]);
    close_all(&mut p, c, l, s);
}

#[test]
fn sender_with_locked_sndbuf_gets_eagain_at_hard_limit() {
    let mut p = Pair::new(4, LinkConfig::default());
    p.a.sysctl_set("net.ipv4.tcp_mem", "4 8 16").unwrap();
    let (c, l, s) = connect_pair(&mut p);
    p.a.setsockopt(p.now, c, SockOpt::SoSndbuf, &OptVal::Int(1 << 20))
        .unwrap();
    let sndbuf = p.a.meminfo(c).unwrap().sndbuf;
    let data = pattern(300_000);
    let mut sent = 0;
    let eagain = send_until_eagain(&mut p, c, &data, &mut sent);
    assert!(eagain);
    // The first skb of empty queues is charged by force; nothing else passes the limit.
    let pm = p.a.proto_mem();
    assert!(pm.memory_pages <= 16 + 17, "{pm:?}");
    assert!(sent < 140_000, "{sent}");
    assert_eq!(
        p.a.poll(c).unwrap() & pollbits::POLLOUT,
        0,
        "wait: no POLLOUT"
    );
    // SO_SNDBUF locks the buffer: no moderation.
    assert_eq!(p.a.meminfo(c).unwrap().sndbuf, sndbuf);
    // Once ACKs free queued bytes the writer is woken and may write again.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut woke = false;
    let deadline = p.now + Duration::from_secs(60);
    while sent < data.len() && p.now < deadline {
        while let Some(w) = p.a.poll_wakeup() {
            woke |= w.socket == c && w.events & pollbits::POLLOUT != 0;
        }
        if p.a.poll(c).unwrap() & pollbits::POLLOUT != 0 {
            match p.a.send(p.now, c, &data[sent..], 0) {
                Ok(n) => sent += n,
                Err(Errno::EAGAIN) => {}
                Err(e) => panic!("send: {e}"),
            }
        }
        while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        while p.b.poll_wakeup().is_some() {}
        if !p.step() {
            break;
        }
    }
    assert!(woke, "POLLOUT wake-up after memory was freed");
    if sent != data.len() {
        eprintln!(
            "A {:?}\nA {:?}\n{:?} poll {:x} {:?}",
            p.a.tcp_info(p.now, c),
            p.a.meminfo(c),
            p.a.proto_mem(),
            p.a.poll(c).unwrap(),
            p.a.send(p.now, c, &data[sent..], 0)
        );
    }
    assert_eq!(sent, data.len());
    drain(&mut p, c, s, &mut got, sent);
    assert_eq!(got, data);
    close_all(&mut p, c, l, s);
}

#[test]
fn receiver_drops_at_hard_limit_then_retransmission_gets_through() {
    let mut p = Pair::new(5, LinkConfig::default());
    p.b.sysctl_set("net.ipv4.tcp_mem", "4 8 16").unwrap();
    let (c, l, s) = connect_pair(&mut p);
    let data = pattern(300_000);
    let mut sent = 0;
    let mut peak = 0;
    // B does not read for a while: its receive queue grows into the hard limit.
    let until = p.now + Duration::from_secs(2);
    while p.now < until {
        if sent < data.len() {
            if let Ok(n) = p.a.send(p.now, c, &data[sent..], 0) {
                sent += n;
            }
        }
        peak = peak.max(p.b.proto_mem().memory_pages);
        p.drain_wakeups();
        if !p.step() {
            break;
        }
    }
    assert!(p.b.counters().value(Mib::TCPRcvQDrop) > 0, "in-order drops");
    assert!(p.b.counters().value(Mib::PruneCalled) > 0);
    assert_eq!(p.b.counters().value(Mib::TCPMemoryPressures), 1);
    // Over the hard limit only the first skb of an empty queue is charged by force.
    assert!(peak <= 16 + 17, "peak {peak} pages");
    let m = p.b.meminfo(s).unwrap();
    assert!(m.rmem_alloc < 16 * 4096 + 65536 + 1280, "{m:?}");
    // B reads: the sender's retransmissions fill the gap, nothing is lost.
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    let deadline = p.now + Duration::from_secs(300);
    while (sent < data.len() || got.len() < data.len()) && p.now < deadline {
        if sent < data.len() {
            if let Ok(n) = p.a.send(p.now, c, &data[sent..], 0) {
                sent += n;
            }
        }
        while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        p.drain_wakeups();
        if !p.step() {
            break;
        }
    }
    if got.len() != data.len() {
        eprintln!(
            "A {:?}\nB {:?}\nA {:?}\nB {:?}\n{:?}",
            p.a.tcp_info(p.now, c),
            p.b.tcp_info(p.now, s),
            p.a.meminfo(c),
            p.b.meminfo(s),
            p.b.proto_mem()
        );
        eprintln!("{}", p.b.counters().nstat(false));
    }
    assert_eq!(got.len(), data.len());
    assert!(got == data, "byte stream differs");
    assert!(p.a.counters().value(Mib::RetransSegs) > 0);
    p.run_for(Duration::from_secs(1));
    assert!(!p.b.proto_mem().pressure);
    close_all(&mut p, c, l, s);
}
