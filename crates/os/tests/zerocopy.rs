//! `MSG_ZEROCOPY` through the blocking API (`TcpStream::set_zerocopy`, `send_zerocopy`,
//! `recv_zerocopy`, `wait_zerocopy`): the stack keeps the caller's buffer (no copy into its
//! send buffer) and completes every id once the bytes are acknowledged and written out,
//! between two hosts joined by an in-memory link (no root) and to the Linux kernel over a
//! TUN (`zerocopy_against_linux`: needs root, `/dev/net/tun` and iproute2; skipped with a
//! printed reason without them, unless `SHALLOW_REQUIRE_TUN=1`).

mod interop_harness;

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use interop_harness::{can_run, connect, peers, with_watchdog, World};
use shallow_os::{link, Egress, Host, TcpListener, TcpStream};
use shallow_tcp::{Bytes, Stack};

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(41);
    a.add_address(IpAddr::V4(A4));
    let mut b = Stack::new(42);
    b.add_address(IpAddr::V4(B4));
    (
        Host::start_with(a, la, Egress::Fq).unwrap(),
        Host::start_with(b, lb, Egress::Fq).unwrap(),
    )
}

/// A pattern that tells every byte's offset apart (mod 251).
fn pattern(len: usize, salt: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| ((i + salt) % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// `sends` buffers of `len` bytes through `c`, each sent with `send_zerocopy`; waits until
/// every id is completed and checks each buffer is then the caller's alone. Returns the
/// buffers sent.
fn send_and_complete(c: &TcpStream, sends: usize, len: usize) -> Vec<Bytes> {
    let mut bufs = Vec::new();
    for i in 0..sends {
        let b = pattern(len, i);
        assert_eq!(c.send_zerocopy(&b).unwrap(), len);
        bufs.push(b);
    }
    // Every id 0..sends is completed, in ranges.
    let mut next = 0u32;
    while (next as usize) < sends {
        let z = c.wait_zerocopy(Some(Duration::from_secs(20))).unwrap();
        assert_eq!(z.lo, next, "completions in order, each id once: {z:?}");
        assert!(z.hi >= z.lo);
        // This substrate's device writes copy each packet: the completion says so.
        assert!(z.copied, "{z:?}");
        next = z.hi + 1;
    }
    assert_eq!(next as usize, sends);
    assert_eq!(c.recv_zerocopy().unwrap_err().kind(), ErrorKind::WouldBlock);
    for b in &bufs {
        assert!(b.is_unique(), "the stack still holds a completed buffer");
    }
    bufs
}

#[test]
fn zerocopy_between_two_hosts() {
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B4), 80);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        });
        let c = TcpStream::connect(&ha, addr).unwrap();
        assert!(!c.zerocopy().unwrap());
        c.set_zerocopy(true).unwrap();
        assert!(c.zerocopy().unwrap());
        // Larger than the send buffer: the blocking call sleeps for room and stays one id.
        let bufs = send_and_complete(&c, 8, 1 << 20);
        drop(c);
        let got = server.join().unwrap();
        assert_eq!(got, bufs.concat());
    });
}

#[test]
fn zerocopy_against_linux() {
    if !can_run("zerocopy_against_linux", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shzc");
        for (n, ip) in peers().into_iter().enumerate() {
            let addr = SocketAddr::new(ip, 7400 + n as u16);
            let l = w.kernel_listener(addr);
            let kernel = w.kernel(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).unwrap();
                got
            });
            let c = connect(&w.host, addr);
            c.set_zerocopy(true).unwrap();
            let bufs = send_and_complete(&c, 16, 256 << 10);
            drop(c);
            assert_eq!(kernel.join().unwrap(), bufs.concat(), "{ip}");
        }
    });
}

#[test]
fn zerocopy_send_that_times_out_is_completed() {
    // A blocking send that gives up (SO_SNDTIMEO) with part of its bytes queued is over:
    // its completion comes once those bytes are acknowledged, without another send.
    with_watchdog(Duration::from_secs(60), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B4), 81);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let c = TcpStream::connect(&ha, addr).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.set_zerocopy(true).unwrap();
        c.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        // The peer reads nothing yet: 32 MiB cannot all be queued before the timeout.
        let b = pattern(32 << 20, 0);
        let n = c.send_zerocopy(&b).unwrap();
        assert!(n > 0 && n < b.len(), "{n}");
        let mut got = vec![0u8; n];
        s.read_exact(&mut got).unwrap();
        assert_eq!(got, b[..n]);
        let z = c.wait_zerocopy(Some(Duration::from_secs(20))).unwrap();
        assert_eq!((z.lo, z.hi), (0, 0));
        assert!(b.is_unique(), "the stack still holds the buffer");
    });
}
