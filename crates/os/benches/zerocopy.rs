//! CPU per GB of a bulk send with `send_zerocopy` (the stack keeps the caller's buffers) against
//! the copying send (`write_all`), back to back in one run, either between two hosts in this
//! process joined by the in-memory link, or (`--tun`, root, iproute2 and socat) from Shallow
//! over a TUN to the Linux kernel (socat reading into /dev/null in a network namespace).
//! `cargo bench -p shallow-os --bench zerocopy [-- GIB REPS] [--tun]` (defaults: 1 GiB, 3
//! repetitions). The CPU time is this process's (with `--tun`: Shallow's I/O and application
//! threads and the kernel work of their TUN writes; the kernel's receiver is not counted),
//! from `getrusage`; it is printed per repetition with the ratio zero-copy / copy. Not a
//! test: no figure is asserted.

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

/// Sends `bytes` on `c` (copying, or zero-copy), then ends the write side.
fn send_bulk(c: &mut TcpStream, zerocopy: bool, bytes: usize) {
    let data: Vec<u8> = (0..WRITE).map(|i| (i % 251) as u8).collect();
    let shared = Bytes::from(data.clone());
    if zerocopy {
        c.set_zerocopy(true).unwrap();
    }
    let mut sent = 0usize;
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
}

/// One run over a TUN to the kernel: returns (CPU seconds, wall seconds).
fn run_tun(
    zerocopy: bool,
    bytes: usize,
    host: &Host,
    ns: &shallow_os::Netns,
    port: u16,
) -> (f64, f64) {
    let mut socat = ns
        .command("socat")
        .args([
            "-u",
            &format!("TCP4-LISTEN:{port},reuseaddr"),
            "OPEN:/dev/null",
        ])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("socat");
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 213, 0, 1)), port);
    let mut c = loop {
        match TcpStream::connect_timeout(host, addr, Duration::from_secs(5)) {
            Ok(c) => break c,
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("{e}"),
        }
    };
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    send_bulk(&mut c, zerocopy, bytes);
    c.shutdown(shallow_tcp::Shutdown::Write).unwrap();
    let mut b = [0u8; 64];
    while c.read(&mut b).unwrap_or(0) > 0 {}
    let r = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    let _ = socat.wait();
    r
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
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    send_bulk(&mut c, zerocopy, bytes);
    drop(c);
    assert!(server.join().unwrap() >= bytes);
    (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64())
}

fn main() {
    let tun = std::env::args().any(|a| a == "--tun");
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let gib: f64 = args.first().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let reps: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    let bytes = (gib * (1u64 << 30) as f64) as usize;
    let gb = bytes as f64 / 1e9;
    // With --tun: one namespace, TUN and host for every run.
    let tun_world = tun.then(|| {
        let ns = shallow_os::Netns::unique("shzcb").expect("netns (root?)");
        let dev = ns
            .open_tun(&shallow_os::TunConfig::new("sh0"))
            .expect("tun")
            .remove(0);
        shallow_os::Peer {
            netns: ns.name().into(),
            tun: "sh0".into(),
            ..shallow_os::Peer::default()
        }
        .configure(&ns)
        .expect("peer");
        let mut stack = Stack::new(7);
        stack.add_address(IpAddr::V4(Ipv4Addr::new(10, 213, 0, 2)));
        let host = Host::start(stack, dev).expect("host");
        (ns, host)
    });
    let what = if tun {
        "from Shallow over a TUN to the Linux kernel; CPU-s per GB of Shallow's process"
    } else {
        "over the in-memory link; CPU-s per GB (both ends)"
    };
    println!("send of {gib} GiB {what}, {WRITE}-byte writes");
    println!("rep  copy CPU-s/GB  Gbit/s   zerocopy CPU-s/GB  Gbit/s   zerocopy/copy CPU");
    for r in 0..reps {
        let ((cc, cw), (zc, zw)) = match &tun_world {
            Some((ns, host)) => {
                let port = 6100 + 2 * r as u16;
                (
                    run_tun(false, bytes, host, ns, port),
                    run_tun(true, bytes, host, ns, port + 1),
                )
            }
            None => (
                run(false, bytes, 10 + r as u64 * 2),
                run(true, bytes, 50 + r as u64 * 2),
            ),
        };
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
