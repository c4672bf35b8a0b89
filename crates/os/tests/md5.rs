//! TCP-MD5 signatures (RFC 2385) against the Linux kernel over a TUN (root, otherwise
//! skipped unless `SHALLOW_REQUIRE_TUN=1`): the kernel is the judge of Shallow's signatures.
//!
//! - A Shallow client (`TcpStream::connect_md5`) of a kernel listener holding the same key
//!   for it (`setsockopt(TCP_MD5SIG)` through libc, with the bytes of Shallow's
//!   `Md5Sig::to_bytes`, so the struct layout is checked too), IPv4, IPv6 and an AF_INET6
//!   Shallow socket with an IPv4-mapped peer: data both
//!   ways, every byte checked, and the kernel's `TcpExtTCPMD5NotFound`/`Failure`/
//!   `Unexpected` unchanged; then a client with a wrong key, which cannot connect while the
//!   kernel counts `TcpExtTCPMD5Failure` for its SYNs.
//! - A kernel client with a key (`setsockopt` then `connect`) of a Shallow listener with the
//!   key for it (`TcpListener::set_md5_key`, a /24 prefix and a wrong /32 for another
//!   host), both families: data both ways, Shallow's counters clean; an unkeyed kernel
//!   client cannot connect and Shallow counts `TcpExtTCPMD5NotFound`.

mod interop_harness;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use interop_harness::{can_run, nstat, peers, with_watchdog, World, ME4, ME6, PEER4, PEER6};
use shallow_os::{Host, TcpListener, TcpStream};
use shallow_tcp::Md5Sig;

const KEY: &[u8] = b"a key both ends share";

const MD5_COUNTERS: [&str; 3] = [
    "TcpExtTCPMD5NotFound",
    "TcpExtTCPMD5Failure",
    "TcpExtTCPMD5Unexpected",
];

fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(2654435761).rotate_left(7) as u8 ^ salt)
        .collect()
}

/// A Shallow host's counter (summed over its shards).
fn counter(h: &Host, name: &str) -> u64 {
    h.counters()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v)
        .unwrap_or(0)
}

/// `setsockopt(fd, IPPROTO_TCP, TCP_MD5SIG, sig)` on a kernel socket.
fn kernel_set_md5(fd: i32, sig: &Md5Sig) -> std::io::Result<()> {
    let b = sig.to_bytes();
    // SAFETY: `fd` is a socket the caller keeps open for the call; `b` is a live buffer
    // whose pointer and length are passed together, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_MD5SIG,
            b.as_ptr().cast(),
            b.len() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A kernel client in the calling thread's namespace: `socket`, `TCP_MD5SIG` with `key`
/// for the peer (none when `None`), a 3-second `SO_SNDTIMEO` bounding the connect, and a
/// blocking `connect` to `addr`.
fn kernel_connect(addr: SocketAddr, key: Option<&[u8]>) -> std::io::Result<std::net::TcpStream> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: a plain syscall with integer arguments.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` was just opened and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(k) = key {
        kernel_set_md5(fd.as_raw_fd(), &Md5Sig::new(addr.ip(), k))?;
    }
    let tv = libc::timeval {
        tv_sec: 3,
        tv_usec: 0,
    };
    // SAFETY: the descriptor is open for the call; `tv` is a live local passed with its
    // size, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_SNDTIMEO: {}", std::io::Error::last_os_error());
    let (ss, len) = interop_harness::sockaddr(addr);
    // SAFETY: the descriptor is open for the call; `ss` is live and passed with its
    // length, and the kernel only reads it.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&ss as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(std::net::TcpStream::from(fd))
}

/// Sends `out` and reads `n` bytes on a kernel or Shallow stream (writes first, then
/// reads: both ends' buffers hold what the tests send).
fn exchange(mut s: impl Read + Write, out: &[u8], n: usize) -> Vec<u8> {
    s.write_all(out).unwrap();
    let mut got = vec![0u8; n];
    s.read_exact(&mut got).unwrap();
    got
}

/// Shallow client, kernel server with the same key, both families; then a wrong key.
#[test]
fn shallow_client_linux_server() {
    if !can_run("md5 shallow_client_linux_server", &[("nstat", "-V")]) {
        return;
    }
    with_watchdog(Duration::from_secs(90), || {
        let w = World::new("shmd5");
        // The third: an AF_INET6 Shallow socket to the kernel's IPv4 address in its
        // IPv4-mapped form (its key given as the mapped address too), IPv4 on the wire.
        let mapped = match peers()[0] {
            IpAddr::V4(a) => IpAddr::V6(a.to_ipv6_mapped()),
            v6 => v6,
        };
        for (port, ip, me) in [
            (7701u16, peers()[0], IpAddr::V4(ME4)),
            (7702, peers()[1], IpAddr::V6(ME6)),
            (7703, mapped, IpAddr::V4(ME4)),
        ] {
            let addr = SocketAddr::new(ip, port);
            let kaddr = SocketAddr::new(ip.to_canonical(), port);
            let l = w.kernel_listener(kaddr);
            kernel_set_md5(l.as_raw_fd(), &Md5Sig::new(me, KEY)).unwrap();
            let (up, down) = (pattern(200_000, 1), pattern(150_000, 2));
            let (kup, kdown) = (up.len(), down.clone());
            let kernel = w.kernel(move || {
                let (s, _) = l.accept().unwrap();
                // Read all of the client's bytes first, then answer.
                let mut got = vec![0u8; kup];
                (&s).read_exact(&mut got).unwrap();
                (&s).write_all(&kdown).unwrap();
                (got, l)
            });
            let before: Vec<u64> = MD5_COUNTERS.iter().map(|c| nstat(&w.ns, c)).collect();
            let c =
                TcpStream::connect_md5(&w.host, addr, KEY, Some(Duration::from_secs(10))).unwrap();
            (&c).write_all(&up).unwrap();
            let mut got = vec![0u8; down.len()];
            (&c).read_exact(&mut got).unwrap();
            let (kgot, l) = kernel.join().unwrap();
            assert!(kgot == up, "{ip}: the kernel got every byte");
            assert!(got == down, "{ip}: Shallow got every byte");
            let info = c.tcp_info().unwrap();
            eprintln!(
                "{ip}: Shallow snd_mss {} (the signature is taken per segment), {} bytes up, {} down",
                info.snd_mss,
                up.len(),
                down.len()
            );
            for (name, b) in MD5_COUNTERS.iter().zip(&before) {
                assert_eq!(nstat(&w.ns, name), *b, "{ip}: kernel {name}");
                assert_eq!(counter(&w.host, name), 0, "{ip}: Shallow {name}");
            }
            let info = c.tcp_info().unwrap();
            let v4 = ip.to_canonical().is_ipv4();
            assert_eq!(info.snd_mss, if v4 { 1460 } else { 1440 });
            drop(c);

            // A wrong key: every SYN fails the kernel's check; no connection.
            let fail0 = nstat(&w.ns, "TcpExtTCPMD5Failure");
            let r =
                TcpStream::connect_md5(&w.host, addr, b"not the key", Some(Duration::from_secs(3)));
            let e = r.expect_err("a wrong key connects");
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{ip}: {e}");
            let fails = nstat(&w.ns, "TcpExtTCPMD5Failure") - fail0;
            eprintln!("{ip}: wrong key: kernel TcpExtTCPMD5Failure +{fails}");
            assert!(fails >= 2, "{ip}: the kernel counted the bad SYNs: {fails}");
            drop(l);
        }
    });
}

/// Kernel client with a key, Shallow listener with the key for its /24 (and a wrong key
/// for another host), both families; then an unkeyed kernel client.
#[test]
fn linux_client_shallow_server() {
    if !can_run("md5 linux_client_shallow_server", &[("nstat", "-V")]) {
        return;
    }
    with_watchdog(Duration::from_secs(90), || {
        let w = World::new("shmd5");
        let (p4, p6) = (IpAddr::V4(PEER4), IpAddr::V6(PEER6));
        for (port, me, peer, prefix) in [
            (7711u16, IpAddr::V4(ME4), p4, 24u8),
            (7712, IpAddr::V6(ME6), p6, 64),
        ] {
            let addr = SocketAddr::new(me, port);
            let l = TcpListener::bind(&w.host, addr).unwrap();
            l.set_md5_key(peer, prefix, KEY).unwrap();
            l.set_md5_key(peer, if peer.is_ipv4() { 32 } else { 128 }, KEY)
                .unwrap();
            // The /32 (/128) for the peer itself is the one used: make it right, and a
            // shorter wrong one must not matter.
            l.set_md5_key(peer, prefix.saturating_sub(8), b"shorter, wrong")
                .unwrap();
            for (prefix, key) in [(129, KEY), (8, &[1u8; 81][..])] {
                let e = l.set_md5_key(peer, prefix, key).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
            }
            let e = TcpStream::connect_md5(&w.host, addr, &[1u8; 81], None).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "a long key");
            let (up, down) = (pattern(120_000, 3), pattern(90_000, 4));
            let (kup, kdown_len) = (up.clone(), down.len());
            let kernel = w.kernel(move || {
                let s = kernel_connect(addr, Some(KEY)).expect("keyed kernel connect");
                exchange(&s, &kup, kdown_len)
            });
            let before: Vec<u64> = MD5_COUNTERS.iter().map(|c| counter(&w.host, c)).collect();
            let (s, _) = l.accept().unwrap();
            let mut got = vec![0u8; up.len()];
            (&s).read_exact(&mut got).unwrap();
            (&s).write_all(&down).unwrap();
            let kgot = kernel.join().unwrap();
            let mss = s.tcp_info().unwrap().snd_mss;
            assert_eq!(mss, if me.is_ipv4() { 1460 } else { 1440 }, "{me}: snd_mss");
            assert!(got == up, "{me}: Shallow got every byte");
            assert!(kgot == down, "{me}: the kernel got every byte");
            for (name, b) in MD5_COUNTERS.iter().zip(&before) {
                assert_eq!(counter(&w.host, name), *b, "{me}: Shallow {name}");
            }
            let nf0 = counter(&w.host, "TcpExtTCPMD5NotFound");
            let kernel = w.kernel(move || kernel_connect(addr, None).map(drop));
            let r = kernel.join().unwrap();
            let e = r.expect_err("an unkeyed kernel client connects");
            assert!(
                [libc::EINPROGRESS, libc::ETIMEDOUT, libc::EAGAIN]
                    .contains(&e.raw_os_error().unwrap_or(0)),
                "{me}: {e}"
            );
            let nf = counter(&w.host, "TcpExtTCPMD5NotFound") - nf0;
            eprintln!("{me}: unkeyed kernel client: Shallow TcpExtTCPMD5NotFound +{nf}");
            assert!(nf >= 2, "{me}: {nf}");
        }
    });
}
