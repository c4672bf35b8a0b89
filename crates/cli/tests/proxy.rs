//! `shallow proxy` end to end, as a user runs it: a client namespace whose kernel TCP reaches
//! destinations through the TUN of `shallow netns up`, a server namespace holding those
//! destinations (on its loopback), and `shallow proxy` running in the server namespace,
//! attached to the client's TUN, relaying directly or through microsocks (SOCKS5).
//!
//! Needs root, `/dev/net/tun`, iproute2, curl, python3 and microsocks; skips with a printed
//! reason otherwise, unless `SHALLOW_REQUIRE_TUN=1`.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use shallow_os::Netns;

const D4: &str = "10.216.0.2";
const D6: &str = "fd00:216::2";

fn shallow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shallow"))
}

fn can_run(test: &str) -> bool {
    shallow_os::skip::can_run(
        test,
        &[
            ("curl", "--version"),
            ("python3", "--version"),
            ("microsocks", "-h"),
        ],
    )
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The two namespaces, the TUN and a running `shallow proxy`; all removed on drop.
struct Net {
    client: String,
    server: String,
    tun: String,
    proxy: Option<Child>,
    extra: Vec<Child>,
}

impl Net {
    /// Builds the namespaces and starts `shallow proxy PROXY_ARGS` in the server namespace.
    fn up(tag: &str, proxy_args: &[&str], before_proxy: impl FnOnce(&mut Net)) -> Net {
        let pid = std::process::id();
        let mut net = Net {
            client: format!("shpx-c{tag}-{pid}"),
            server: format!("shpx-s{tag}-{pid}"),
            tun: format!("shpx{tag}{}", pid % 100_000),
            proxy: None,
            extra: Vec::new(),
        };
        let out = shallow()
            .args(["netns", "up", "--name", &net.client, "--tun", &net.tun])
            .args(["--addr", "10.217.0.1/24", "--addr6", "fd00:217::1/64"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        ip(&["netns", "add", &net.server]);
        ip(&["-n", &net.server, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &net.server,
            "addr",
            "add",
            &format!("{D4}/32"),
            "dev",
            "lo",
        ]);
        ip(&[
            "-n",
            &net.server,
            "addr",
            "add",
            &format!("{D6}/128"),
            "dev",
            "lo",
        ]);
        ip(&[
            "-n",
            &net.client,
            "route",
            "add",
            "10.216.0.0/24",
            "dev",
            &net.tun,
        ]);
        // A network the server namespace has no route to.
        ip(&[
            "-n",
            &net.client,
            "route",
            "add",
            "10.99.0.0/24",
            "dev",
            &net.tun,
        ]);
        ip(&[
            "-n",
            &net.client,
            "-6",
            "route",
            "add",
            "fd00:216::/64",
            "dev",
            &net.tun,
        ]);
        before_proxy(&mut net);
        let mut child = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.server,
                env!("CARGO_BIN_EXE_shallow"),
                "proxy",
            ])
            .args(["--tun", &net.tun, "--netns", &net.client])
            .args(["--addr", "10.217.0.2", "--addr", "fd00:217::2"])
            .args(proxy_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait for "ready".
        let mut out = child.stdout.take().unwrap();
        let mut seen = Vec::new();
        let mut b = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("ready") {
            let n = out.read(&mut b).unwrap();
            if n == 0 {
                let mut err = String::new();
                let _ = child.stderr.take().unwrap().read_to_string(&mut err);
                panic!("shallow proxy exited: {err}");
            }
            seen.extend_from_slice(&b[..n]);
        }
        child.stdout = Some(out);
        net.proxy = Some(child);
        net
    }

    fn ns(name: &str) -> Netns {
        Netns::open(name).unwrap()
    }

    /// A kernel listener in the server namespace.
    fn listen(&self, addr: &str) -> TcpListener {
        let a: SocketAddr = addr.parse().unwrap();
        Net::ns(&self.server)
            .run(|| TcpListener::bind(a))
            .unwrap()
            .unwrap()
    }

    /// A kernel connection from the client namespace (through the TUN and the proxy).
    fn connect(&self, addr: &str) -> std::io::Result<TcpStream> {
        let a: SocketAddr = addr.parse().unwrap();
        Net::ns(&self.client)
            .run(|| TcpStream::connect_timeout(&a, Duration::from_secs(10)))
            .unwrap()
    }

    /// Waits (at most 10 s) until the proxy reports no open connection (SIGUSR1 makes it
    /// print its stats, which end with the non-TCP line).
    fn wait_closed(&mut self) {
        let child = self.proxy.as_mut().unwrap();
        let pid = child.id().to_string();
        let out = child.stdout.as_mut().unwrap();
        let t0 = Instant::now();
        loop {
            let _ = Command::new("kill").args(["-USR1", &pid]).status();
            let mut text = Vec::new();
            let mut b = [0u8; 4096];
            while !String::from_utf8_lossy(&text).contains("non-TCP") {
                let n = out.read(&mut b).unwrap();
                assert!(n > 0, "shallow proxy exited");
                text.extend_from_slice(&b[..n]);
            }
            let text = String::from_utf8_lossy(&text).to_string();
            if open_accepted(&text).0 == 0 {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "connections stay open: {text}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the proxy; returns what it printed (its stats at exit).
    fn stop(&mut self) -> String {
        let mut child = self.proxy.take().unwrap();
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let mut s = String::new();
        child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
        assert!(child.wait().unwrap().success());
        s
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        if let Some(mut c) = self.proxy.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for c in &mut self.extra {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = shallow()
            .args(["netns", "down", "--name", &self.client, "--tun", &self.tun])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.server])
            .output();
    }
}

/// The "N open, M accepted" of the proxy's stats.
fn open_accepted(stats: &str) -> (u64, u64) {
    let line = stats
        .lines()
        .find(|l| l.starts_with("connections:"))
        .expect(stats);
    let nums: Vec<u64> = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

fn pattern(i: u64) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// Writes `n` pattern bytes; returns their SHA-256.
fn send_pattern(s: &mut TcpStream, n: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0u64;
    while off < n {
        let k = ((n - off) as usize).min(buf.len());
        for (j, b) in buf[..k].iter_mut().enumerate() {
            *b = pattern(off + j as u64);
        }
        s.write_all(&buf[..k]).unwrap();
        h.update(&buf[..k]);
        off += k as u64;
    }
    h.finalize().into()
}

/// Reads to end of stream; returns (bytes, SHA-256).
fn recv_all(s: &mut TcpStream) -> (u64, [u8; 32]) {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = s.read(&mut buf).unwrap();
        if k == 0 {
            return (n, h.finalize().into());
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
}

/// Reads exactly `n` bytes; returns their SHA-256.
fn recv_exact(s: &mut TcpStream, n: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut left = n;
    while left > 0 {
        let k = (left as usize).min(buf.len());
        s.read_exact(&mut buf[..k]).unwrap();
        h.update(&buf[..k]);
        left -= k as u64;
    }
    h.finalize().into()
}

/// `bytes` each way through the proxy, checked by SHA-256: the client uploads, the server
/// reads it all, then sends as much back. With `half_close` each side ends its direction
/// with a FIN (the client's upload ends while the download is still to come); without, the
/// lengths delimit the data (for microsocks, which closes both directions at the first FIN).
fn both_ways(net: &Net, addr: &str, bytes: u64, half_close: bool) {
    let l = net.listen(addr);
    let server = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let got = if half_close {
            recv_all(&mut s)
        } else {
            (bytes, recv_exact(&mut s, bytes))
        };
        let sent = send_pattern(&mut s, bytes);
        (got, sent)
    });
    let mut c = net.connect(addr).unwrap();
    let up = send_pattern(&mut c, bytes);
    let down = if half_close {
        c.shutdown(Shutdown::Write).unwrap();
        recv_all(&mut c)
    } else {
        (bytes, recv_exact(&mut c, bytes))
    };
    let (got, sent) = server.join().unwrap();
    assert_eq!(got, (bytes, up), "upload");
    assert_eq!(down, (bytes, sent), "download");
}

#[test]
fn curl_and_a_gibibyte_each_way_through_the_direct_proxy() {
    if !can_run("curl_and_a_gibibyte_each_way_through_the_direct_proxy") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("shpx-www-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let body: Vec<u8> = (0..20_000_000u64).map(pattern).collect();
    std::fs::write(dir.join("f"), &body).unwrap();
    let mut net = Net::up("a", &["--direct"], |net| {
        let http = Command::new("ip")
            .args(["netns", "exec", &net.server, "python3", "-m", "http.server"])
            .args(["--bind", "::", "8080"])
            .current_dir(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        net.extra.push(http);
    });
    for url in [
        format!("http://{D4}:8080/f"),
        format!("http://[{D6}]:8080/f"),
    ] {
        let t0 = Instant::now();
        let out = loop {
            let out = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &net.client,
                    "curl",
                    "-sS",
                    "--max-time",
                    "60",
                    &url,
                ])
                .output()
                .unwrap();
            // The server may not listen yet: curl then sees the proxy's reset.
            if out.status.success() || t0.elapsed() > Duration::from_secs(20) {
                break out;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.stdout == body,
            "{url}: body differs ({} bytes)",
            out.stdout.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    both_ways(&net, &format!("{D4}:9000"), 1 << 30, true);
    both_ways(&net, &format!("[{D6}]:9001"), 64 << 20, true);
    net.wait_closed();
    let stats = net.stop();
    assert_eq!(open_accepted(&stats).0, 0, "{stats}");
}

#[test]
fn short_connections_half_close_resets_and_refusal() {
    if !can_run("short_connections_half_close_resets_and_refusal") {
        return;
    }
    // Few destinations tried at once, to check that a relayed connection does not keep
    // its place (more connections below stay open at once than there are places).
    let mut net = Net::up("b", &["--direct", "--max-pending", "4"], |_| {});
    // 1,000 short connections: request, half-close, response, close.
    let l = net.listen(&format!("{D4}:7000"));
    let server = std::thread::spawn(move || {
        for _ in 0..1000 {
            let (mut s, _) = l.accept().unwrap();
            let mut req = Vec::new();
            s.read_to_end(&mut req).unwrap();
            s.write_all(&req).unwrap();
        }
    });
    for i in 0..1000u32 {
        let mut c = net.connect(&format!("{D4}:7000")).unwrap();
        let req = format!("request {i}");
        c.write_all(req.as_bytes()).unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut back = String::new();
        c.read_to_string(&mut back).unwrap();
        assert_eq!(back, req);
    }
    server.join().unwrap();
    // 32 connections open at once (8 times the places), each used after all are open.
    let l = net.listen(&format!("{D4}:7002"));
    let server = std::thread::spawn(move || {
        let mut held = Vec::new();
        for _ in 0..32 {
            held.push(l.accept().unwrap().0);
        }
        for s in &mut held {
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
        }
    });
    let mut open: Vec<TcpStream> = (0..32)
        .map(|_| net.connect(&format!("{D4}:7002")).unwrap())
        .collect();
    for (i, c) in open.iter_mut().enumerate() {
        c.write_all(&[i as u8]).unwrap();
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        assert_eq!(b[0], i as u8);
    }
    server.join().unwrap();
    drop(open);
    // The server resets: the client sees the reset.
    let l = net.listen(&format!("{D4}:7001"));
    let mut c = net.connect(&format!("{D4}:7001")).unwrap();
    let (s, _) = l.accept().unwrap();
    socket2::SockRef::from(&s)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(s);
    let mut b = [0u8; 16];
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        c.read(&mut b).unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    // The client resets: the server sees the reset.
    let mut c = net.connect(&format!("{D4}:7001")).unwrap();
    let (mut s, _) = l.accept().unwrap();
    c.write_all(b"x").unwrap();
    let mut one = [0u8; 1];
    s.read_exact(&mut one).unwrap();
    socket2::SockRef::from(&c)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(c);
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(
        s.read(&mut b).unwrap_err().kind(),
        ErrorKind::ConnectionReset
    );
    // The client's SYN is answered once the destination has answered, as through a router:
    // a refusing destination refuses the client, one without a route is unreachable.
    let e = net.connect(&format!("{D4}:7999")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    let e = net.connect("10.99.0.1:80").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(101), "ENETUNREACH: {e}");
    net.wait_closed();
    let stats = net.stop();
    let (open, accepted) = open_accepted(&stats);
    assert_eq!((open, accepted), (0, 1034), "{stats}");
    assert!(stats.contains("2 upstream failures, 2 resets"), "{stats}");
}

#[test]
fn socks5_with_username_and_password_through_microsocks() {
    if !can_run("socks5_with_username_and_password_through_microsocks") {
        return;
    }
    let socks = |net: &mut Net| {
        let m = Command::new("ip")
            .args([
                "netns",
                "exec",
                &net.server,
                "microsocks",
                "-i",
                "127.0.0.1",
                "-p",
                "1080",
            ])
            .args(["-u", "alice", "-P", "s3cret"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        net.extra.push(m);
        std::thread::sleep(Duration::from_millis(300));
    };
    let args = ["--socks5", "127.0.0.1:1080", "--socks-user", "alice"];
    let mut net = Net::up(
        "c",
        &[&args[..], &["--socks-pass", "s3cret"]].concat(),
        socks,
    );
    both_ways(&net, &format!("{D4}:9100"), 64 << 20, false);
    both_ways(&net, &format!("[{D6}]:9101"), 8 << 20, false);
    net.wait_closed();
    let stats = net.stop();
    assert_eq!(open_accepted(&stats), (0, 2), "{stats}");
    // A wrong password: microsocks refuses, and so is the client (RST to its SYN).
    let mut net = Net::up(
        "d",
        &[&args[..], &["--socks-pass", "wrong"]].concat(),
        socks,
    );
    let _l = net.listen(&format!("{D4}:9102"));
    let e = net.connect(&format!("{D4}:9102")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");
    let stats = net.stop();
    assert!(stats.contains("1 upstream failures"), "{stats}");
}

/// An IPv4 SYN from `src:sport` to `dst:dport` with its checksums.
fn syn(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, seq: u32) -> Vec<u8> {
    fn sum(data: &[u8], mut acc: u32) -> u32 {
        for c in data.chunks(2) {
            acc += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
        acc
    }
    fn fold(mut s: u32) -> u16 {
        while s > 0xffff {
            s = (s & 0xffff) + (s >> 16);
        }
        !(s as u16)
    }
    let mut p = vec![0u8; 40];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&40u16.to_be_bytes());
    p[8] = 64;
    p[9] = 6;
    p[12..16].copy_from_slice(&src);
    p[16..20].copy_from_slice(&dst);
    let c = fold(sum(&p[..20], 0));
    p[10..12].copy_from_slice(&c.to_be_bytes());
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&dport.to_be_bytes());
    p[24..28].copy_from_slice(&seq.to_be_bytes());
    p[32] = 5 << 4;
    p[33] = 0x02;
    p[34..36].copy_from_slice(&64240u16.to_be_bytes());
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&src);
    pseudo.extend_from_slice(&dst);
    pseudo.extend_from_slice(&[0, 6, 0, 20]);
    let c = fold(sum(&p[20..], sum(&pseudo, 0)));
    p[36..38].copy_from_slice(&c.to_be_bytes());
    p
}

#[test]
fn syn_flood_at_the_proxy_while_a_transfer_keeps_working() {
    if !can_run("syn_flood_at_the_proxy_while_a_transfer_keeps_working") {
        return;
    }
    let net = Net::up("e", &["--direct"], |_| {});
    // 40,000 SYNs from a source nobody answers for (the SYN-ACKs go nowhere), spread over
    // two seconds, to one forwarded destination while a transfer runs to another.
    let raw = Net::ns(&net.client)
        .run(|| {
            socket2::Socket::new(
                socket2::Domain::IPV4,
                socket2::Type::RAW,
                Some(socket2::Protocol::from(255)),
            )
        })
        .unwrap()
        .unwrap();
    let flood = std::thread::spawn(move || {
        let dst: SocketAddr = format!("{D4}:0").parse().unwrap();
        for i in 0..40_000u32 {
            let p = syn(
                [10, 217, 0, 77],
                1024 + (i % 60_000) as u16,
                [10, 216, 0, 2],
                8443,
                i,
            );
            let _ = raw.send_to(&p, &dst.into());
            if i % 1000 == 0 {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    });
    both_ways(&net, &format!("{D4}:9200"), 64 << 20, true);
    flood.join().unwrap();
    both_ways(&net, &format!("{D4}:9201"), 8 << 20, true);
}
