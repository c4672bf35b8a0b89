//! SO_LINGER with `l_linger > 0`: `Stack::close_linger` / `linger_pending` / `linger_finish`
//! (Linux `sk_stream_wait_close`).

use crate::harness::*;
use crate::tests::e2e::connect_pair;
use crate::*;
use core::time::Duration;

fn linger(p: &mut Pair, c: SocketId, secs: i32) {
    p.a.setsockopt(
        p.now,
        c,
        SockOpt::SoLinger,
        &OptVal::Linger { onoff: true, secs },
    )
    .unwrap();
}

#[test]
fn linger_close_waits_until_fin_acked() {
    let mut p = Pair::new(21, LinkConfig::default());
    let (c, l, s) = connect_pair(&mut p);
    linger(&mut p, c, 10);
    let data = vec![0x5au8; 100_000];
    let mut sent = 0;
    while sent < data.len() {
        sent += p.a.send(p.now, c, &data[sent..], 0).unwrap_or(0);
        p.step();
        let mut buf = [0u8; 65536];
        while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            if n == 0 {
                break;
            }
        }
    }
    let w = p.a.close_linger(p.now, c).unwrap().expect("must wait");
    assert_eq!(w.socket, c);
    assert_eq!(w.deadline, p.now + Duration::from_secs(10));
    assert!(p.a.linger_pending(c, p.now));
    assert_eq!(p.a.state(c).unwrap(), TcpState::FinWait1);
    // The waiter sleeps until a wake-up of its socket, then asks again.
    let mut woken_at = None;
    let mut buf = [0u8; 65536];
    while p.now < w.deadline {
        while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            if n == 0 {
                break;
            }
        }
        while p.b.poll_wakeup().is_some() {}
        let mut woke = false;
        while let Some(x) = p.a.poll_wakeup() {
            woke |= x.socket == c;
        }
        if woke && !p.a.linger_pending(c, p.now) {
            woken_at = Some(p.now);
            break;
        }
        if !p.step() {
            break;
        }
    }
    let at = woken_at.expect("the closer was woken with its FIN acked");
    assert!(at < w.deadline);
    assert_eq!(p.a.state(c).unwrap(), TcpState::FinWait2);
    assert_eq!(p.a.meminfo(c).unwrap().wmem_queued, 0, "everything acked");
    assert_eq!(p.a.sockstat().orphan, 0, "not orphaned while lingering");
    p.a.linger_finish(p.now, c);
    assert_eq!(p.a.sockstat().orphan, 1, "an orphan after the wait");
    p.b.close(p.now, s).unwrap();
    p.b.close(p.now, l).unwrap();
    p.run_for(Duration::from_secs(200));
    assert_eq!(p.a.socket_count(), 0);
    assert_eq!(p.b.socket_count(), 0);
}

#[test]
fn linger_times_out_with_data_unacked_behind_zero_window() {
    let mut p = Pair::new(22, LinkConfig::default());
    // B never reads and has a small buffer: its window closes.
    p.b.sysctl_set("net.ipv4.tcp_rmem", "4096 16384 16384")
        .unwrap();
    let (c, l, s) = connect_pair(&mut p);
    linger(&mut p, c, 3);
    let data = vec![1u8; 200_000];
    let mut sent = 0;
    for _ in 0..100 {
        if let Ok(n) = p.a.send(p.now, c, &data[sent..], 0) {
            sent += n;
        }
        p.run_for(Duration::from_millis(10));
    }
    assert_eq!(p.a.tcp_info(p.now, c).unwrap().snd_wnd, 0, "window closed");
    let w = p.a.close_linger(p.now, c).unwrap().expect("must wait");
    assert_eq!(w.deadline, p.now + Duration::from_secs(3));
    // Not finished before the linger time, whatever happens meanwhile.
    p.run_until(w.deadline - Duration::from_millis(1));
    assert!(p.a.linger_pending(c, p.now));
    assert_eq!(p.a.state(c).unwrap(), TcpState::FinWait1);
    p.run_until(w.deadline);
    assert!(!p.a.linger_pending(c, p.now), "linger time over");
    assert_eq!(
        p.a.state(c).unwrap(),
        TcpState::FinWait1,
        "FIN still unacked"
    );
    assert!(
        p.a.meminfo(c).unwrap().wmem_queued > 0,
        "data still unacked"
    );
    p.a.linger_finish(p.now, c);
    assert_eq!(p.a.sockstat().orphan, 1);
    // The orphan goes on; B's close with unread data resets it.
    p.b.close(p.now, s).unwrap();
    p.b.close(p.now, l).unwrap();
    p.run_for(Duration::from_secs(10));
    assert_eq!(p.a.socket_count(), 0);
    assert_eq!(p.a.sockstat().mem_pages, 0);
}

#[test]
fn plain_close_and_linger_without_pending_fin_do_not_wait() {
    let mut p = Pair::new(23, LinkConfig::default());
    let (c, _l, _s) = connect_pair(&mut p);
    linger(&mut p, c, 10);
    // close() never waits: orphaned at once even with SO_LINGER.
    p.a.close(p.now, c).unwrap();
    assert_eq!(p.a.sockstat().orphan, 1);
    assert!(!p.a.linger_pending(c, p.now));
    // A socket that is not connected has no FIN to wait for.
    let x = p.a.socket(Family::V4).unwrap();
    linger(&mut p, x, 10);
    assert_eq!(p.a.close_linger(p.now, x).unwrap(), None);
}
