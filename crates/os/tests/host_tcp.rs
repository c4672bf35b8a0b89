//! Shallow's engine on a real TUN: a blocking `TcpStream` against kernel TCP peers (socat) in
//! a fresh network namespace. Needs root, `/dev/net/tun`, iproute2 and socat; skips with a
//! printed reason otherwise, unless `SHALLOW_REQUIRE_TUN=1`, which makes a skip a failure.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use shallow_os::{Host, Netns, Offload, Peer, TcpStream, TunConfig};
use shallow_tcp::{Shutdown, Stack};

const PEER4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const ME4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);
const ME6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);

fn can_run(test: &str) -> bool {
    shallow_os::skip::can_run(test, &[("socat", "-V")])
}

/// Runs `f` on its own thread and fails the test if it has not finished after `limit`
/// (a blocking read that never returns must not hang the suite).
fn with_watchdog(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // The body panicked: re-raise its panic.
            if let Err(p) = t.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test body still running after {limit:?}"),
    }
}

struct ChildGuard(Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A namespace with the kernel peer, and a Shallow host (10.213.0.2, fd00:213::2) on its TUN.
struct World {
    host: Host,
    offload: Offload,
    ns: Netns,
}

impl World {
    fn new() -> World {
        let ns = Netns::unique("shhost").expect("namespace");
        let tun = ns
            .open_tun(&TunConfig::new("sh0"))
            .expect("TUN")
            .pop()
            .unwrap();
        let peer = Peer {
            netns: ns.name().into(),
            tun: "sh0".into(),
            ..Peer::default()
        };
        peer.configure(&ns).expect("kernel side");
        let offload = tun.offload();
        let mut stack = Stack::new(0x5eed);
        stack.add_address(IpAddr::V4(ME4));
        stack.add_address(IpAddr::V6(ME6));
        let host = Host::start(stack, tun).expect("I/O thread");
        World { host, offload, ns }
    }

    fn socat(&self, args: &[&str]) -> ChildGuard {
        ChildGuard(
            self.ns
                .command("socat")
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn socat"),
        )
    }

    /// Connects, retrying while the listener is not up yet (ECONNREFUSED).
    fn connect(&self, addr: SocketAddr) -> TcpStream {
        for _ in 0..100 {
            match TcpStream::connect_timeout(&self.host, addr, Duration::from_secs(5)) {
                Ok(s) => return s,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => panic!("connect {addr}: {e}"),
            }
        }
        panic!("listener at {addr} never came up");
    }
}

/// Bytes written to a kernel echo server (socat EXEC:cat) come back intact, over IPv4 and
/// IPv6, through the engine's send and receive paths.
#[test]
fn echo_through_kernel() {
    if !can_run("echo_through_kernel") {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new();
        for (port, ip, listen) in [
            (5003u16, IpAddr::V4(PEER4), "TCP4-LISTEN"),
            (5004, IpAddr::V6(PEER6), "TCP6-LISTEN"),
        ] {
            let _srv = w.socat(&[&format!("{listen}:{port},reuseaddr"), "EXEC:cat"]);
            let mut s = w.connect(SocketAddr::new(ip, port));
            let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 253) as u8).collect();
            let mut back = Vec::with_capacity(data.len());
            let mut buf = vec![0u8; 65536];
            for chunk in data.chunks(16 * 1024) {
                s.write_all(chunk).unwrap();
                let want = back.len() + chunk.len();
                while back.len() < want {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "EOF before the echo was complete");
                    back.extend_from_slice(&buf[..n]);
                }
            }
            assert!(back == data, "echoed bytes differ");
            s.shutdown(Shutdown::Write).unwrap();
            // socat closes after our FIN: read EOF.
            assert_eq!(s.read(&mut buf).unwrap(), 0);
        }
        let st = w.host.stats();
        eprintln!(
            "offloads {}: rx {} (gso {}), tx {} (gso {}), tx errors {}, rx dropped {}",
            w.offload,
            st.rx_packets.load(Ordering::Relaxed),
            st.rx_gso.load(Ordering::Relaxed),
            st.tx_packets.load(Ordering::Relaxed),
            st.tx_gso.load(Ordering::Relaxed),
            st.tx_errors.load(Ordering::Relaxed),
            st.rx_dropped.load(Ordering::Relaxed),
        );
        assert_eq!(st.tx_errors.load(Ordering::Relaxed), 0);
        assert_eq!(st.rx_dropped.load(Ordering::Relaxed), 0);
    });
}

/// A kernel bulk sender's stream arrives complete (1 MB then EOF) over IPv4 and IPv6; with
/// TSO granted on the TUN, the kernel hands some of it over as GSO aggregates that the engine
/// takes whole.
#[test]
fn bulk_from_kernel() {
    if !can_run("bulk_from_kernel") {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new();
        for (port, ip, listen) in [
            (5005u16, IpAddr::V4(PEER4), "TCP4-LISTEN"),
            (5006, IpAddr::V6(PEER6), "TCP6-LISTEN"),
        ] {
            let before = w.host.stats().rx_gso.load(Ordering::Relaxed);
            let _srv = w.socat(&[
                "-u",
                "OPEN:/dev/zero,readbytes=1000000",
                &format!("{listen}:{port},reuseaddr"),
            ]);
            let mut s = w.connect(SocketAddr::new(ip, port));
            let mut total = 0usize;
            let mut buf = vec![1u8; 65536];
            loop {
                let n = s.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                assert!(buf[..n].iter().all(|&b| b == 0));
                total += n;
            }
            assert_eq!(total, 1_000_000);
            let gso = w.host.stats().rx_gso.load(Ordering::Relaxed) - before;
            eprintln!(
                "{ip}: offloads {}: {gso} GSO aggregates received",
                w.offload
            );
            let tso = if ip.is_ipv4() {
                Offload::TSO4
            } else {
                Offload::TSO6
            };
            if w.offload.contains(tso) {
                assert!(gso > 0, "{tso} granted but no aggregate in 1 MB");
            }
        }
    });
}

/// A connect to a closed kernel port fails with ECONNREFUSED (the kernel's RST, RFC 9293
/// §3.10.7.3; Linux `tcp_reset` sets ECONNREFUSED in SYN_SENT).
#[test]
fn connect_refused() {
    if !can_run("connect_refused") {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new();
        let e = TcpStream::connect_timeout(
            &w.host,
            SocketAddr::new(IpAddr::V4(PEER4), 9),
            Duration::from_secs(5),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
        assert!(w.host.is_running());
    });
}

/// `Host::attach` joins the persistent TUN that `shallow netns up` (`Peer::up`) made, with
/// the default addresses (10.213.0.2, fd00:213::2): a kernel echo server in that namespace
/// answers over both families. Attaching to a namespace that does not exist is a clear error.
#[test]
fn attach_to_netns_up_peer() {
    if !can_run("attach_to_netns_up_peer") {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let name = format!("shattach-{}", std::process::id());
        struct Down(Peer);
        impl Drop for Down {
            fn drop(&mut self) {
                let _ = self.0.down();
            }
        }
        let peer = Peer {
            netns: name.clone(),
            tun: "sha0".into(),
            ..Peer::default()
        };
        peer.up().expect("netns up");
        let _down = Down(peer.clone());
        let missing = shallow_os::HostConfig {
            netns: Some(format!("{name}-nosuch")),
            tun: "sha0".into(),
            ..Default::default()
        };
        assert!(matches!(
            Host::attach(&missing),
            Err(shallow_os::OsError::NoSuchNetns(_))
        ));
        let host = Host::attach(&shallow_os::HostConfig {
            netns: Some(name.clone()),
            tun: "sha0".into(),
            ..Default::default()
        })
        .expect("attach");
        let ns = Netns::open(&name).unwrap();
        for (port, ip, listen) in [
            (5013u16, IpAddr::V4(PEER4), "TCP4-LISTEN"),
            (5014, IpAddr::V6(PEER6), "TCP6-LISTEN"),
        ] {
            let _srv = ChildGuard(
                ns.command("socat")
                    .args([&format!("{listen}:{port},reuseaddr"), "EXEC:cat"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("spawn socat"),
            );
            let addr = SocketAddr::new(ip, port);
            let mut s = None;
            for _ in 0..100 {
                match TcpStream::connect_timeout(&host, addr, Duration::from_secs(5)) {
                    Ok(c) => {
                        s = Some(c);
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    Err(e) => panic!("connect {addr}: {e}"),
                }
            }
            let mut s = s.expect("listener never came up");
            let me = s.local_addr().unwrap().ip();
            assert_eq!(
                me,
                if ip.is_ipv4() {
                    IpAddr::V4(ME4)
                } else {
                    IpAddr::V6(ME6)
                }
            );
            s.write_all(b"through shallow0").unwrap();
            let mut buf = [0u8; 16];
            s.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"through shallow0");
        }
    });
}
