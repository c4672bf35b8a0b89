//! Linux's own tools as Shallow's peers, run in the kernel peer's namespace: `curl` against the
//! HTTP/1.1 server of `examples/http_server.rs` (the same code, included here), OpenBSD `nc`
//! and `socat` as clients and servers, with SHA-256 checks through `sha256sum`.
//!
//! Needs root, `/dev/net/tun`, iproute2 and the tools (`.ci/run` installs them); skips with a
//! printed reason otherwise, unless `SHALLOW_REQUIRE_TUN=1`.

mod interop_harness;

#[allow(dead_code)]
#[path = "../examples/http_server.rs"]
mod http_server;

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::process::Stdio;
use std::time::Duration;

use interop_harness::*;
use sha2::{Digest, Sha256};
use shallow_os::{TcpListener, TcpStream};

/// `sha256sum` of `len` bytes of `abc…z` repeated (what `/bytes/N` serves).
fn letters_hash(len: usize) -> String {
    let v: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
    hexs(&Sha256::digest(&v))
}

fn hexs(d: &[u8]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// curl (the kernel's TCP) against Shallow's HTTP server over IPv4 and IPv6: a greeting,
/// 5 MB downloads checked with sha256sum, a 3 MB upload echoed back, two requests on one
/// keep-alive connection, and a 404.
#[test]
fn curl_against_shallow_http_server() {
    if !can_run(
        "curl_against_shallow_http_server",
        &[("curl", "--version"), ("sha256sum", "--version")],
    ) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shtool");
        for (port, me) in [(8080u16, IpAddr::V4(ME4)), (8081, IpAddr::V6(ME6))] {
            let l = TcpListener::bind(&w.host, SocketAddr::new(me, port)).unwrap();
            std::thread::spawn(move || http_server::serve(&l));
            let base = match me {
                IpAddr::V4(a) => format!("http://{a}:{port}"),
                IpAddr::V6(a) => format!("http://[{a}]:{port}"),
            };
            let curl = |args: &[&str]| -> String {
                run_ok(
                    w.ns.command("curl")
                        .args(["-sS", "--max-time", "30"])
                        .args(args),
                )
            };
            assert_eq!(curl(&[&format!("{base}/")]), "hello from Shallow\n");
            let sh = |cmd: String| run_ok(w.ns.command("sh").args(["-c", &cmd]));
            let n = 5_000_000;
            let got = sh(format!(
                "curl -sS --max-time 30 {base}/bytes/{n} | sha256sum"
            ));
            assert_eq!(
                got.split_whitespace().next(),
                Some(letters_hash(n).as_str()),
                "{me}"
            );
            // Upload 3 MB of /dev/urandom and compare the echo.
            let got = sh(format!(
                "f=$(mktemp) && head -c 3000000 /dev/urandom > $f && \
                 a=$(sha256sum < $f) && b=$(curl -sS --max-time 30 --data-binary @$f \
                 -H 'Content-Type: application/octet-stream' {base}/echo | sha256sum) && \
                 rm -f $f && [ \"$a\" = \"$b\" ] && echo same"
            ));
            assert_eq!(got.trim(), "same", "{me}: /echo differs");
            // Keep-alive: curl reuses the connection for the second URL (its -v says so).
            let out =
                w.ns.command("curl")
                    .args(["-sS", "-v", "--max-time", "30"])
                    .arg(format!("{base}/"))
                    .arg(format!("{base}/bytes/100"))
                    .output()
                    .unwrap();
            assert!(out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("Re-using existing connection") || err.contains("Reusing existing"),
                "{me}: curl did not keep the connection alive:\n{err}"
            );
            let out =
                w.ns.command("curl")
                    .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
                    .arg(format!("{base}/nope"))
                    .output()
                    .unwrap();
            assert_eq!(String::from_utf8_lossy(&out.stdout), "404", "{me}");
        }
    });
}

/// OpenBSD nc and socat as clients of a Shallow server and as servers for a Shallow client,
/// 4 MB each way with SHA-256 (`sha256sum` on the kernel side), over IPv4 and IPv6.
#[test]
fn nc_and_socat_as_peers() {
    if !can_run(
        "nc_and_socat_as_peers",
        &[("nc", "-h"), ("socat", "-V"), ("sha256sum", "--version")],
    ) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let w = World::new("shtool");
        let n: u64 = 4 << 20;
        let want_up = hex(&pattern_hash(11, n));
        let mut port = 9100u16;
        for (me, peer) in [(IpAddr::V4(ME4), peers()[0]), (IpAddr::V6(ME6), peers()[1])] {
            // Kernel tools as clients: they send N bytes from a file and print the sha256 of
            // what Shallow sends back.
            for tool in ["nc", "socat"] {
                port += 1;
                let l = TcpListener::bind(&w.host, SocketAddr::new(me, port)).unwrap();
                let target = match me {
                    IpAddr::V4(a) => format!("{a}"),
                    IpAddr::V6(a) => format!("[{a}]"),
                };
                let client = match tool {
                    // -N: shut down the write side at EOF on stdin.
                    "nc" => format!("nc -N {me} {port}"),
                    _ => format!("socat - TCP:{target}:{port}"),
                };
                let script = format!(
                    "f=$(mktemp) && head -c {n} /dev/urandom > $f && sha256sum < $f && \
                     {client} < $f | sha256sum; rm -f $f"
                );
                let child =
                    w.ns.command("sh")
                        .args(["-c", &script])
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap();
                let (mut s, _) = l.accept().unwrap();
                let (len, h) = read_hash(&mut s, 1 << 16).unwrap();
                let back = send_pattern(&mut s, 12, n, 1 << 16).unwrap();
                s.shutdown(std::net::Shutdown::Write).unwrap();
                let out = child.wait_with_output().unwrap();
                let out = String::from_utf8_lossy(&out.stdout).into_owned();
                let lines: Vec<&str> = out.lines().collect();
                assert_eq!(len, n, "{tool} {me}: bytes received");
                assert_eq!(
                    lines.first().and_then(|l| l.split_whitespace().next()),
                    Some(hex(&h).as_str()),
                    "{tool} {me}: upload differs"
                );
                assert_eq!(
                    lines.get(1).and_then(|l| l.split_whitespace().next()),
                    Some(hex(&back).as_str()),
                    "{tool} {me}: download differs"
                );
            }
            // Kernel tools as servers: they print the sha256 of what a Shallow client sends.
            for tool in ["nc", "socat"] {
                port += 1;
                let server = match tool {
                    "nc" => format!("nc -l {peer} {port} | sha256sum"),
                    _ => match peer {
                        IpAddr::V4(a) => {
                            format!("socat -u TCP4-LISTEN:{port},bind={a},reuseaddr - | sha256sum")
                        }
                        IpAddr::V6(a) => format!(
                            "socat -u TCP6-LISTEN:{port},bind=[{a}],reuseaddr - | sha256sum"
                        ),
                    },
                };
                let child =
                    w.ns.command("sh")
                        .args(["-c", &server])
                        .stdin(Stdio::null())
                        .stdout(Stdio::piped())
                        .spawn()
                        .unwrap();
                let addr = SocketAddr::new(peer, port);
                let mut tries = 0;
                let mut s = loop {
                    tries += 1;
                    assert!(tries < 500, "{tool} server at {addr} never came up");
                    match TcpStream::connect(&w.host, addr) {
                        Ok(s) => break s,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        Err(e) => panic!("{tool}: connect {addr}: {e}"),
                    }
                };
                let sent = send_pattern(&mut s, 11, n, 1 << 16).unwrap();
                assert_eq!(hex(&sent), want_up);
                s.shutdown(std::net::Shutdown::Write).unwrap();
                // The server closes after EOF: we read EOF too.
                let mut rest = Vec::new();
                s.read_to_end(&mut rest).unwrap();
                drop(s);
                let out = child.wait_with_output().unwrap();
                let out = String::from_utf8_lossy(&out.stdout).into_owned();
                assert_eq!(
                    out.split_whitespace().next(),
                    Some(want_up.as_str()),
                    "{tool} server {peer}: received bytes differ"
                );
            }
        }
    });
}

/// iperf3 control-protocol states (iperf_api.h of iperf 3.x).
mod iperf {
    pub const TEST_START: u8 = 1;
    pub const TEST_RUNNING: u8 = 2;
    pub const TEST_END: u8 = 4;
    pub const PARAM_EXCHANGE: u8 = 9;
    pub const CREATE_STREAMS: u8 = 10;
    pub const EXCHANGE_RESULTS: u8 = 13;
    pub const DISPLAY_RESULTS: u8 = 14;
    pub const IPERF_DONE: u8 = 16;
}

/// A minimal iperf3 client on Shallow (one TCP stream, sender side): the control connection's
/// cookie, parameter exchange and state machine, one data connection, `secs` of data, and the
/// results exchange. Returns (bytes we sent, the server's JSON results).
fn iperf3_client(host: &shallow_os::Host, server: SocketAddr, secs: u64) -> (u64, String) {
    use std::io::Write;
    let cookie: Vec<u8> = b"shallowiperf3interoptest0123456789ab\0".to_vec();
    assert_eq!(cookie.len(), 37);
    let mut ctl = loop {
        match TcpStream::connect(host, server) {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("iperf3 control connect: {e}"),
        }
    };
    ctl.set_nodelay(true).unwrap();
    ctl.write_all(&cookie).unwrap();
    let state = |c: &mut TcpStream| {
        let mut b = [0u8; 1];
        c.read_exact(&mut b).unwrap();
        b[0]
    };
    let send_json = |c: &mut TcpStream, j: &str| {
        c.write_all(&(j.len() as u32).to_be_bytes()).unwrap();
        c.write_all(j.as_bytes()).unwrap();
    };
    assert_eq!(state(&mut ctl), iperf::PARAM_EXCHANGE);
    send_json(
        &mut ctl,
        &format!(
            "{{\"tcp\":true,\"omit\":0,\"time\":{secs},\"num\":0,\"blockcount\":0,\"parallel\":1,\
             \"len\":131072,\"pacing_timer\":1000,\"client_version\":\"3.12\"}}"
        ),
    );
    assert_eq!(state(&mut ctl), iperf::CREATE_STREAMS);
    let mut data = TcpStream::connect(host, server).unwrap();
    data.write_all(&cookie).unwrap();
    assert_eq!(state(&mut ctl), iperf::TEST_START);
    assert_eq!(state(&mut ctl), iperf::TEST_RUNNING);
    let buf = vec![0x33u8; 131072];
    let t0 = std::time::Instant::now();
    let mut sent = 0u64;
    while t0.elapsed() < Duration::from_secs(secs) {
        data.write_all(&buf).unwrap();
        sent += buf.len() as u64;
    }
    let secs_f = t0.elapsed().as_secs_f64();
    // Like a lingering close: everything sent is acknowledged (in the kernel's receive queue)
    // before TEST_END, so the server can have counted all but what its reader had not yet
    // taken from that queue.
    for _ in 0..10_000 {
        let i = data.tcp_info().unwrap();
        if i.unacked == 0 && i.notsent_bytes == 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    ctl.write_all(&[iperf::TEST_END]).unwrap();
    assert_eq!(state(&mut ctl), iperf::EXCHANGE_RESULTS);
    send_json(
        &mut ctl,
        &format!(
            "{{\"cpu_util_total\":0,\"cpu_util_user\":0,\"cpu_util_system\":0,\
             \"sender_has_retransmits\":0,\"streams\":[{{\"id\":1,\"bytes\":{sent},\
             \"retransmits\":-1,\"jitter\":0,\"errors\":0,\"packets\":0,\"start_time\":0,\
             \"end_time\":{secs_f}}}]}}"
        ),
    );
    let mut len = [0u8; 4];
    ctl.read_exact(&mut len).unwrap();
    let mut json = vec![0u8; u32::from_be_bytes(len) as usize];
    ctl.read_exact(&mut json).unwrap();
    assert_eq!(state(&mut ctl), iperf::DISPLAY_RESULTS);
    ctl.write_all(&[iperf::IPERF_DONE]).unwrap();
    drop(data);
    (sent, String::from_utf8_lossy(&json).into_owned())
}

/// iperf3's server (the kernel's TCP) measures a Shallow client speaking iperf3's protocol,
/// over IPv4 and IPv6: the protocol runs to its end, and the server counted what Shallow sent
/// but for what was still in its receive queue at TEST_END.
#[test]
fn iperf3_server_counts_shallow_client() {
    if !can_run(
        "iperf3_server_counts_shallow_client",
        &[("iperf3", "--version")],
    ) {
        return;
    }
    with_watchdog(Duration::from_secs(60), || {
        let w = World::new("shtool");
        for (port, peer) in [(5301u16, peers()[0]), (5302, peers()[1])] {
            let srv = ChildGuard(
                w.ns.command("iperf3")
                    .args(["-s", "-1", "-p", &port.to_string(), "-B", &peer.to_string()])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
            let (sent, json) = iperf3_client(&w.host, SocketAddr::new(peer, port), 1);
            let bytes: u64 = json
                .split("\"bytes\":")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{peer}: no byte count in the server's results: {json}"));
            eprintln!("{peer}: iperf3 server counted {bytes} of {sent} bytes");
            // The server stops counting at TEST_END; what it had not read by then is at most
            // one receive buffer (net.ipv4.tcp_rmem's maximum).
            let rmem: u64 =
                w.ns.run(|| std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem"))
                    .unwrap()
                    .unwrap()
                    .split_whitespace()
                    .nth(2)
                    .and_then(|v| v.parse().ok())
                    .unwrap();
            assert!(
                bytes <= sent && sent - bytes <= rmem,
                "{peer}: the iperf3 server counted {bytes} of {sent} bytes (rmem max {rmem})"
            );
            drop(srv);
        }
    });
}
