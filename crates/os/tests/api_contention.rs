//! The socket-ownership hand-off under contention: many threads calling send and recv on
//! many sockets of two hosts (joined by an in-memory link) while both I/O threads deliver
//! input. A lost wake-up or a deadlock hangs a thread: the watchdog turns that into a
//! failure instead of a hung suite. Every byte is checked.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use shallow_os::{link, Host, TcpListener, TcpStream};
use shallow_tcp::Stack;

const A: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 1, 0, 2);

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(3);
    a.add_address(IpAddr::V4(A));
    let mut b = Stack::new(4);
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
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("still running after {limit:?}: deadlock or lost wake-up")
        }
    }
}

/// A small deterministic generator of sizes (xorshift).
struct Sizes(u64);
impl Sizes {
    fn next(&mut self, max: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        1 + (self.0 % max as u64) as usize
    }
}

fn byte(stream: u64, i: u64) -> u8 {
    (i.wrapping_mul(0x9e37_79b9).wrapping_add(stream * 131) >> 3) as u8
}

/// Writes `total` bytes of stream `id`'s pattern in writes of varied sizes (1 B to 300 KB:
/// both sides of the 64 KiB chunking), then half-closes.
fn writer(s: Arc<TcpStream>, id: u64, total: u64, seed: u64) {
    let mut sz = Sizes(seed | 1);
    let mut off = 0u64;
    let mut buf = Vec::new();
    while off < total {
        let n = (sz.next(300_000) as u64).min(total - off);
        buf.clear();
        buf.extend((off..off + n).map(|i| byte(id, i)));
        (&*s).write_all(&buf).unwrap();
        off += n;
    }
    s.shutdown(Shutdown::Write).unwrap();
}

/// Reads to EOF in reads of varied sizes, checking every byte against stream `id`'s pattern.
fn reader(s: Arc<TcpStream>, id: u64, total: u64, seed: u64) {
    let mut sz = Sizes(seed | 1);
    let mut off = 0u64;
    let mut buf = vec![0u8; 300_000];
    loop {
        let want = sz.next(buf.len());
        let n = (&*s).read(&mut buf[..want]).unwrap();
        if n == 0 {
            break;
        }
        for (k, b) in buf[..n].iter().enumerate() {
            let i = off + k as u64;
            assert_eq!(*b, byte(id, i), "stream {id}: byte {i} differs");
        }
        off += n as u64;
    }
    assert_eq!(off, total, "stream {id}: EOF after {off} of {total} bytes");
}

/// 8 connections, data both ways on each, a reader and a writer thread per end (32
/// application threads on 2 cores): exact bytes, EOF both ways, no hang.
#[test]
fn many_threads_many_sockets_exact_bytes() {
    with_watchdog(Duration::from_secs(180), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B), 5000);
        let l = TcpListener::bind(&hb, addr).unwrap();
        const CONNS: u64 = 8;
        const BYTES: u64 = 4_000_000;
        let mut threads = Vec::new();
        for c in 0..CONNS {
            let client = Arc::new(TcpStream::connect(&ha, addr).unwrap());
            let (server, _) = l.accept().unwrap();
            let server = Arc::new(server);
            let (up, down) = (2 * c, 2 * c + 1);
            for (s, wid, rid) in [(client, up, down), (server, down, up)] {
                let w = Arc::clone(&s);
                threads.push(std::thread::spawn(move || writer(w, wid, BYTES, wid + 7)));
                threads.push(std::thread::spawn(move || reader(s, rid, BYTES, rid + 99)));
            }
        }
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// Request/response with one-byte messages: every exchange needs a wake-up of a sleeping
/// reader (data ready) on each side, so a single lost wake-up hangs. 4 connections × 1,000
/// exchanges in parallel.
#[test]
fn ping_pong_never_loses_a_wakeup() {
    with_watchdog(Duration::from_secs(120), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B), 5001);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let mut threads = Vec::new();
        for _ in 0..4 {
            let mut c = TcpStream::connect(&ha, addr).unwrap();
            let (mut s, _) = l.accept().unwrap();
            c.set_nodelay(true).unwrap();
            s.set_nodelay(true).unwrap();
            threads.push(std::thread::spawn(move || {
                let mut b = [0u8; 1];
                while s.read(&mut b).unwrap() == 1 {
                    b[0] = b[0].wrapping_add(1);
                    s.write_all(&b).unwrap();
                }
            }));
            threads.push(std::thread::spawn(move || {
                let mut b = [0u8; 1];
                for i in 0..1000u32 {
                    c.write_all(&[i as u8]).unwrap();
                    c.read_exact(&mut b).unwrap();
                    assert_eq!(b[0], (i as u8).wrapping_add(1));
                }
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
    });
}

/// Several threads write to the *same* socket at once. Each `write_all` is one owned call,
/// but as in Linux a blocking send that waits for memory releases the socket
/// (`sk_stream_wait_memory`), so writes may interleave at any byte: what must hold is that
/// every byte of every writer arrives exactly once (each writer's bytes carry its id).
#[test]
fn concurrent_writers_on_one_socket() {
    with_watchdog(Duration::from_secs(120), || {
        let (ha, hb) = hosts();
        let addr = SocketAddr::new(IpAddr::V4(B), 5002);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let c = Arc::new(TcpStream::connect(&ha, addr).unwrap());
        let (mut s, _) = l.accept().unwrap();
        const WRITERS: u8 = 6;
        const RECORDS: usize = 200;
        const LEN: usize = 20_000;
        let ws: Vec<_> = (0..WRITERS)
            .map(|w| {
                let c = Arc::clone(&c);
                std::thread::spawn(move || {
                    for _ in 0..RECORDS {
                        (&*c).write_all(&[w; LEN]).unwrap();
                    }
                })
            })
            .collect();
        let rd = std::thread::spawn(move || {
            let mut count = [0usize; WRITERS as usize];
            let mut buf = vec![0u8; 100_000];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                for &b in &buf[..n] {
                    assert!(b < WRITERS, "byte {b} written by nobody");
                    count[b as usize] += 1;
                }
            }
            count
        });
        for w in ws {
            w.join().unwrap();
        }
        c.shutdown(Shutdown::Write).unwrap();
        let count = rd.join().unwrap();
        assert_eq!(count, [RECORDS * LEN; WRITERS as usize]);
    });
}
