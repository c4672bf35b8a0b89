//! CPU per GB of a bulk send with `send_zerocopy` (the stack keeps the caller's buffers) against
//! the copying send (`write_all`), between two hosts in this process joined by the in-memory
//! link, back to back in one run. `cargo bench -p shallow-os --bench zerocopy [-- GIB REPS]`
//! (defaults: 1 GiB, 3 repetitions). The CPU time is the process's (both hosts' I/O threads
//! and the two application threads), from `getrusage`; it is printed per repetition with the
//! ratio zero-copy / copy. Not a test: no figure is asserted.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use shallow_os::{link, Egress, Host, TcpListener, TcpStream};
use shallow_tcp::{Bytes, Stack};

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const WRITE: usize = 1 << 20;

fn cpu_seconds() -> f64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let ru = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr());
        ru.assume_init()
    };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

/// One run: `bytes` sent from a to b; returns (CPU seconds, wall seconds).
fn run(zerocopy: bool, bytes: usize, seed: u64) -> (f64, f64) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(seed);
    a.add_address(IpAddr::V4(A4));
    let mut b = Stack::new(seed + 1);
    b.add_address(IpAddr::V4(B4));
    let ha = Host::start_with(a, la, Egress::Fq).unwrap();
    let hb = Host::start_with(b, lb, Egress::Fq).unwrap();
    let addr = SocketAddr::new(IpAddr::V4(B4), 80);
    let l = TcpListener::bind(&hb, addr).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 256 << 10];
        let mut got = 0usize;
        loop {
            match s.read(&mut buf) {
                Ok(0) => return got,
                Ok(n) => got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => panic!("{e}"),
            }
        }
    });
    let mut c = TcpStream::connect(&ha, addr).unwrap();
    let data: Vec<u8> = (0..WRITE).map(|i| (i % 251) as u8).collect();
    let shared = Bytes::from(data.clone());
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut sent = 0usize;
    if zerocopy {
        c.set_zerocopy(true).unwrap();
    }
    while sent < bytes {
        if zerocopy {
            match c.send_zerocopy(&shared) {
                Ok(n) => sent += n,
                // Completions fill the option memory: read them.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    c.wait_zerocopy(Some(Duration::from_secs(5))).unwrap();
                }
                Err(e) => panic!("{e}"),
            }
            while c.recv_zerocopy().is_ok() {}
        } else {
            c.write_all(&data).unwrap();
            sent += WRITE;
        }
    }
    drop(c);
    assert!(server.join().unwrap() >= bytes);
    (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64())
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let gib: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let bytes = (gib * (1u64 << 30) as f64) as usize;
    let gb = bytes as f64 / 1e9;
    println!(
        "send of {gib} GiB over the in-memory link, {WRITE}-byte writes; CPU-s per GB (both ends)"
    );
    println!("rep  copy CPU-s/GB  Gbit/s   zerocopy CPU-s/GB  Gbit/s   zerocopy/copy CPU");
    for r in 0..reps {
        let (cc, cw) = run(false, bytes, 10 + r as u64 * 2);
        let (zc, zw) = run(true, bytes, 50 + r as u64 * 2);
        println!(
            "{:>3}  {:>13.3}  {:>6.2}   {:>17.3}  {:>6.2}   {:>17.2}",
            r + 1,
            cc / gb,
            gb * 8.0 / cw,
            zc / gb,
            gb * 8.0 / zw,
            zc / cc
        );
    }
}
