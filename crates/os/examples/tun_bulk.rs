//! Bulk TCP between Shallow (over a TUN) and the Linux kernel (socat in a network namespace),
//! both directions, with the rate each achieved. Needs root, iproute2 and socat.
//!
//! `cargo run --release -p shallow-os --example tun_bulk -- [MEGABYTES] [--no-offload]`
//! (default 200 MB; `--no-offload` asks the TUN for no checksum/TSO offload).

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shallow_os::{Host, Netns, Peer, TcpStream, TunConfig};
use shallow_tcp::{Shutdown, Stack};

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn connect(host: &Host, addr: SocketAddr) -> std::io::Result<TcpStream> {
    for _ in 0..100 {
        match TcpStream::connect_timeout(host, addr, Duration::from_secs(5)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(50))
            }
            r => return r,
        }
    }
    Err(std::io::ErrorKind::ConnectionRefused.into())
}

fn rate(bytes: usize, t: Duration) -> String {
    format!(
        "{bytes} bytes in {:.3} s = {:.2} Gbit/s",
        t.as_secs_f64(),
        bytes as f64 * 8.0 / t.as_secs_f64() / 1e9
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mb: usize = std::env::args()
        .nth(1)
        .filter(|a| !a.starts_with("--"))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200);
    let bytes = mb * 1_000_000;
    let ns = Netns::unique("shbulk")?;
    let mut cfg = TunConfig::new("sh0");
    if std::env::args().any(|a| a == "--no-offload") {
        cfg.offload = shallow_os::Offload::NONE;
    }
    let tun = ns.open_tun(&cfg)?.remove(0);
    let peer = Peer {
        netns: ns.name().into(),
        tun: "sh0".into(),
        ..Peer::default()
    };
    peer.configure(&ns)?;
    println!("TUN offloads granted: {}", tun.offload());
    let mut stack = Stack::new(1);
    stack.add_address(IpAddr::V4(Ipv4Addr::new(10, 213, 0, 2)));
    let host = Host::start(stack, tun)?;
    let kernel = IpAddr::V4(Ipv4Addr::new(10, 213, 0, 1));

    // Kernel → Shallow.
    let _tx = Kill(
        ns.command("socat")
            .args([
                "-u",
                &format!("OPEN:/dev/zero,readbytes={bytes}"),
                "TCP4-LISTEN:6001,reuseaddr",
            ])
            .stderr(Stdio::null())
            .spawn()?,
    );
    let mut s = connect(&host, SocketAddr::new(kernel, 6001))?;
    let mut buf = vec![0u8; 256 * 1024];
    let t0 = Instant::now();
    let mut got = 0;
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        got += n;
    }
    println!("kernel -> shallow: {}", rate(got, t0.elapsed()));
    if std::env::args().any(|a| a == "--nstat") {
        // The kernel side's view: retransmissions, timeouts, drops (`nstat` of iproute2).
        let out = ns.command("nstat").args(["-a", "-s"]).output()?;
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if l.contains("Retrans")
                || l.contains("Timeout")
                || l.contains("Drop")
                || l.contains("OutSegs")
                || l.contains("Lost")
                || l.contains("Probe")
                || l.contains("Window")
            {
                println!("  kernel: {l}");
            }
        }
    }
    drop(s);

    // Shallow → kernel: done when the kernel's socat has read everything and closed.
    let _rx = Kill(
        ns.command("socat")
            .args(["-u", "TCP4-LISTEN:6002,reuseaddr", "OPEN:/dev/null"])
            .stderr(Stdio::null())
            .spawn()?,
    );
    let mut s = connect(&host, SocketAddr::new(kernel, 6002))?;
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < bytes {
        let n = (bytes - sent).min(buf.len());
        s.write_all(&buf[..n])?;
        sent += n;
    }
    s.shutdown(Shutdown::Write)?;
    while s.read(&mut buf)? > 0 {}
    println!("shallow -> kernel: {}", rate(sent, t0.elapsed()));

    let st = host.stats();
    println!(
        "TUN: rx {} packets ({} GSO), tx {} packets ({} GSO), tx errors {}",
        st.rx_packets.load(Ordering::Relaxed),
        st.rx_gso.load(Ordering::Relaxed),
        st.tx_packets.load(Ordering::Relaxed),
        st.tx_gso.load(Ordering::Relaxed),
        st.tx_errors.load(Ordering::Relaxed)
    );
    Ok(())
}
