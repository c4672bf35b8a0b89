//! The readiness API (`Poller`) over two hosts joined by an in-memory link: level- and
//! edge-triggered semantics as epoll(7) defines them, listener readiness, and the
//! write-space hysteresis of TCP_NOTSENT_LOWAT as a poller sees it.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::mpsc;
use std::time::Duration;

use shallow_os::poller::Interest;
use shallow_os::{link, Events, Host, Poller, TcpListener, TcpStream, Trigger};
use shallow_tcp::{Ioctl, Stack};

const A: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 2, 0, 2);
const SHORT: Option<Duration> = Some(Duration::from_millis(30));
const LONG: Option<Duration> = Some(Duration::from_secs(10));

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(5);
    a.add_address(IpAddr::V4(A));
    let mut b = Stack::new(6);
    b.add_address(IpAddr::V4(B));
    (Host::start(a, la).unwrap(), Host::start(b, lb).unwrap())
}

fn with_watchdog(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("still running after {limit:?}"),
    }
}

/// A connected pair (client on A, server on B) on `port`.
fn connected(ha: &Host, hb: &Host, port: u16) -> (TcpStream, TcpStream) {
    let addr = SocketAddr::new(IpAddr::V4(B), port);
    let l = TcpListener::bind(hb, addr).unwrap();
    let c = TcpStream::connect(ha, addr).unwrap();
    let (s, _) = l.accept().unwrap();
    (c, s)
}

/// Level-triggered (epoll's default): a listener polls readable while a connection waits
/// to be accepted; a stream is reported by every wait while data is queued, and no longer
/// once it is read.
#[test]
fn level_triggered() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B), 100);
        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_nonblocking(true).unwrap();
        let p = Poller::new(&hb);
        let mut ev = Events::with_capacity(8);
        p.register(&l, 1, Interest::READABLE, Trigger::Level)
            .unwrap();
        assert_eq!(p.wait(&mut ev, Some(Duration::ZERO)).unwrap(), 0);
        let c = TcpStream::connect(&ha, addr).unwrap();
        assert_eq!(p.wait(&mut ev, LONG).unwrap(), 1);
        let e = *ev.iter().next().unwrap();
        assert_eq!(e.token, 1);
        assert!(e.is_readable());
        // Still pending: reported again.
        assert_eq!(p.wait(&mut ev, Some(Duration::ZERO)).unwrap(), 1);
        let (s, _) = l.accept().unwrap();
        assert_eq!(p.wait(&mut ev, Some(Duration::ZERO)).unwrap(), 0);
        assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);

        s.set_nonblocking(true).unwrap();
        p.register(&s, 2, Interest::READABLE, Trigger::Level)
            .unwrap();
        assert_eq!(p.wait(&mut ev, SHORT).unwrap(), 0);
        (&c).write_all(b"level").unwrap();
        for _ in 0..3 {
            assert_eq!(p.wait(&mut ev, LONG).unwrap(), 1);
            let e = *ev.iter().next().unwrap();
            assert_eq!(e.token, 2);
            assert!(e.is_readable() && !e.is_read_closed());
        }
        let mut buf = [0u8; 16];
        assert_eq!((&s).read(&mut buf).unwrap(), 5);
        assert_eq!(p.wait(&mut ev, SHORT).unwrap(), 0);
        // EPOLL_CTL_ADD twice is EEXIST; DEL of an unknown socket is ENOENT.
        let e = p
            .register(&s, 3, Interest::READABLE, Trigger::Level)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(17));
        p.deregister(&s).unwrap();
        assert_eq!(p.deregister(&s).unwrap_err().raw_os_error(), Some(2));
        // The peer's FIN: readable with RDHUP, and read gives EOF.
        p.register(&s, 4, Interest::READABLE, Trigger::Level)
            .unwrap();
        drop(c);
        assert_eq!(p.wait(&mut ev, LONG).unwrap(), 1);
        assert!(ev.iter().next().unwrap().is_read_closed());
        assert_eq!((&s).read(&mut buf).unwrap(), 0);
    });
}

/// Edge-triggered (EPOLLET): reported once per wake-up, not again while the data stays
/// unread; new data is a new edge.
#[test]
fn edge_triggered() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts();
        let (c, s) = connected(&ha, &hb, 101);
        c.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        let p = Poller::new(&hb);
        let mut ev = Events::with_capacity(8);
        p.register(&s, 7, Interest::READABLE, Trigger::Edge)
            .unwrap();
        // Registration polls once: nothing to read yet.
        assert_eq!(p.wait(&mut ev, SHORT).unwrap(), 0);
        (&c).write_all(b"one").unwrap();
        assert_eq!(p.wait(&mut ev, LONG).unwrap(), 1);
        assert_eq!(ev.iter().next().unwrap().token, 7);
        assert_eq!(p.wait(&mut ev, SHORT).unwrap(), 0, "ET reported twice");
        let before = p.stats().wakeups;
        (&c).write_all(b"two").unwrap();
        assert_eq!(p.wait(&mut ev, LONG).unwrap(), 1);
        assert!(p.stats().wakeups > before);
        let mut buf = [0u8; 16];
        assert_eq!((&s).read(&mut buf).unwrap(), 6);
        assert_eq!(&buf[..6], b"onetwo");
    });
}

/// TCP_NOTSENT_LOWAT with a poller: a non-blocking writer fills its not-sent budget until
/// `EAGAIN`, then waits for an edge-triggered WRITABLE event, 20 times over while the peer
/// reads. Each time the event comes, unsent bytes are below half the lowat (Linux `tcp_poll`
/// → `__sk_stream_is_writeable(sk, 1)`: the write-space hysteresis), never merely below it.
#[test]
fn notsent_lowat_write_space_hysteresis() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts();
        let (c, s) = connected(&ha, &hb, 102);
        const LOWAT: u32 = 128 * 1024;
        c.set_notsent_lowat(LOWAT).unwrap();
        c.set_nonblocking(true).unwrap();
        let rd = std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            let mut got = 0usize;
            loop {
                let n = (&s).read(&mut buf).unwrap();
                if n == 0 {
                    return got;
                }
                got += n;
            }
        });
        let p = Poller::new(&ha);
        let mut ev = Events::with_capacity(4);
        p.register(&c, 9, Interest::WRITABLE, Trigger::Edge)
            .unwrap();
        let chunk = vec![0x5a; 16 * 1024];
        let mut sent = 0usize;
        for round in 0..20 {
            loop {
                match (&c).write(&chunk) {
                    Ok(n) => sent += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            loop {
                assert!(
                    p.wait(&mut ev, LONG).unwrap() > 0,
                    "round {round}: no wake-up"
                );
                if ev.iter().any(|e| e.is_writable()) {
                    break;
                }
            }
            let nsd = ha.with_stack(|st, _| st.ioctl(c.socket(), Ioctl::SiocOutqNsd).unwrap());
            assert!(
                nsd * 2 < LOWAT,
                "round {round}: writable with {nsd} bytes unsent, lowat {LOWAT}"
            );
        }
        assert!(p.stats().wakeups >= 20);
        c.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(rd.join().unwrap(), sent);
    });
}

/// `notify` ends a wait from another thread with no events.
#[test]
fn notify_wakes_a_waiter() {
    with_watchdog(Duration::from_secs(30), || {
        let (ha, _hb) = hosts();
        let p = std::sync::Arc::new(Poller::new(&ha));
        let p2 = std::sync::Arc::clone(&p);
        let t = std::thread::spawn(move || {
            let mut ev = Events::with_capacity(1);
            p2.wait(&mut ev, None).unwrap()
        });
        while p.stats().sleeps == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        p.notify();
        assert_eq!(t.join().unwrap(), 0);
    });
}
