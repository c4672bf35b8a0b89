//! Reference measurements of the running Linux kernel's TCP, taken through a TUN device in a
//! fresh network namespace, for behaviour where Linux's own packetdrill scripts and the kernel
//! disagree. Each test drives the kernel with hand-built packets, records what it sends, and
//! asserts the figures that Shallow's own script `crates/drill/scripts/grow-skb-burst.pkt`
//! holds the engine to — so the engine and the kernel are checked against the same numbers.
//!
//! Needs root, `/dev/net/tun` and iproute2 (`ip`, `tc`). Without them each test prints why
//! and passes, unless `SHALLOW_REQUIRE_TUN=1`, which turns a skip into a failure. Every
//! namespace is named `shref-PID-N` and deleted by a drop guard.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use shallow_os::{Interest, Netns, Offload, Peer, RxPacket, Tun, TunConfig};
use shallow_wire::{
    IpPacket, IpRepr, Ipv4Repr, TcpFlags, TcpOptionRepr, TcpPacket, TcpRepr, IPPROTO_TCP,
};

const KERNEL: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
const US: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
const KPORT: u16 = 8080;

fn can_run(test: &str) -> bool {
    shallow_os::skip::can_run(test, &[("tc", "-V")])
}

fn tcp_packet(tcp: &TcpRepr, payload: &[u8]) -> Vec<u8> {
    let (src, dst) = (IpAddr::V4(US), IpAddr::V4(KERNEL));
    let mut seg = vec![0u8; tcp.header_len() + payload.len()];
    tcp.emit(&mut seg, payload, src, dst).unwrap();
    let ip = IpRepr::V4(Ipv4Repr {
        src: US,
        dst: KERNEL,
        protocol: IPPROTO_TCP,
        ttl: 64,
        tos: 0,
        df: true,
        ident: 0,
        payload_len: seg.len(),
    });
    let mut buf = vec![0u8; ip.header_len() + seg.len()];
    let h = ip.emit(&mut buf).unwrap();
    buf[h..].copy_from_slice(&seg);
    buf
}

/// A segment from our port `uport` to the kernel's port.
fn seg(
    uport: u16,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    window: u16,
    options: Vec<TcpOptionRepr>,
) -> Vec<u8> {
    tcp_packet(
        &TcpRepr {
            src_port: uport,
            dst_port: KPORT,
            seq,
            ack,
            flags,
            window,
            urgent: 0,
            options,
        },
        &[],
    )
}

/// What the kernel sent to our port `uport` until `quiet` passes without a packet:
/// (sequence number, payload length, flags).
fn read_segments(tun: &Tun, uport: u16, quiet: Duration) -> Vec<(u32, usize, TcpFlags)> {
    let mut out = Vec::new();
    let mut pkt = RxPacket::new();
    while tun.wait(Interest::Readable, Some(quiet)).unwrap() {
        match tun.recv(&mut pkt) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => panic!("recv: {e}"),
        }
        let Ok(ip) = IpPacket::parse(pkt.packet()) else {
            continue;
        };
        if ip.protocol() != IPPROTO_TCP {
            continue;
        }
        let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
            continue;
        };
        if tcp.dst_port() != uport {
            continue;
        }
        out.push((tcp.seq(), tcp.payload().len(), tcp.flags()));
    }
    out
}

/// The running kernel's (major, minor) version, from `/proc/sys/kernel/osrelease`.
fn kernel_version() -> Option<(u32, u32)> {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let mut it = r.trim().split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

/// Sets the listener's congestion control (`TCP_CONGESTION`): the namespace's default is
/// whatever the host chose (BBR on some machines), and only root may pick another one there.
fn set_congestion(l: &TcpListener, name: &str) {
    let v = name.as_bytes();
    // SAFETY: the descriptor is the listener's, open for the whole call; `v` is a live byte
    // slice whose pointer and length are passed together, and the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            v.as_ptr().cast(),
            v.len() as libc::socklen_t,
        )
    };
    assert_eq!(
        rc,
        0,
        "setsockopt(TCP_CONGESTION, {name}): {}",
        std::io::Error::last_os_error()
    );
}

/// `SO_MEMINFO` of a kernel socket: (wmem_queued, sndbuf).
fn meminfo(c: &TcpStream) -> (u32, u32) {
    let mut v = [0u32; 9];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: the descriptor is the stream's, open for the whole call; `v` and `len` are live
    // locals and `len` holds `v`'s size in bytes, so the kernel writes inside `v`.
    let rc = unsafe {
        libc::getsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "SO_MEMINFO: {}", std::io::Error::last_os_error());
    (
        v[libc::SK_MEMINFO_WMEM_QUEUED as usize],
        v[libc::SK_MEMINFO_SNDBUF as usize],
    )
}

/// A namespace whose TUN `shref0` has the kernel at 10.213.0.1 behind a pfifo qdisc
/// (packetdrill's defaults: no fq pacing), a cubic listener on port 8080, and the scripts'
/// `tcp_wmem` (4096 50000 4194304). Dropping the namespace deletes everything.
struct Kernel {
    ns: Netns,
    tun: Tun,
}

impl Kernel {
    /// `None` (after printing why) when the test cannot run here.
    fn new(test: &str) -> Option<Kernel> {
        if !can_run(test) {
            return None;
        }
        match kernel_version() {
            Some(v) if v >= (6, 10) => {}
            v => {
                // The figures are those of kernels with tcp_grow_skb (6.10 and later).
                let _ = std::io::stderr().write_all(
                    format!("SKIPPED {test}: kernel {v:?} predates 6.10, whose figures it holds\n")
                        .as_bytes(),
                );
                return None;
            }
        }
        let ns = Netns::unique("shref").expect("create namespace");
        // No offloads: the kernel segments in software and we count 1000-byte segments.
        let mut cfg = TunConfig::new("shref0");
        cfg.offload = Offload::NONE;
        let tun = ns
            .open_tun(&cfg)
            .expect("open TUN in namespace")
            .pop()
            .expect("one queue");
        Peer {
            netns: ns.name().to_string(),
            tun: "shref0".into(),
            addr4: Some((KERNEL, 24)),
            addr6: None,
        }
        .configure(&ns)
        .expect("configure kernel side");
        let tc = ns
            .command("tc")
            .args(["qdisc", "replace", "dev", "shref0", "root", "pfifo"])
            .status()
            .expect("run tc");
        assert!(tc.success(), "tc qdisc replace ... pfifo failed");
        for (k, v) in [
            ("ipv4/tcp_wmem", "4096 50000 4194304"),
            ("ipv4/tcp_notsent_lowat", "4294967295"),
            ("ipv4/tcp_slow_start_after_idle", "0"),
        ] {
            ns.sysctl_set(k, v).unwrap();
        }
        Some(Kernel { ns, tun })
    }

    /// Inside the namespace: a cubic listener, then `f(kernel socket, our port, ack of
    /// relative sequence n)` on a connection opened from `uport` with the scripts' SYN
    /// (`mss 1000,sackOK,nop,nop,nop,wscale 7`, window 32792) and a 20 ms handshake RTT.
    fn connection<R: Send>(
        &self,
        uport: u16,
        f: impl FnOnce(TcpStream, &dyn Fn(u32) -> Vec<u8>) -> R + Send,
    ) -> R {
        let tun = &self.tun;
        self.ns
            .run(|| {
                let l = TcpListener::bind(SocketAddr::from((KERNEL, KPORT))).expect("bind");
                set_congestion(&l, "cubic");
                let opts = vec![
                    TcpOptionRepr::Mss(1000),
                    TcpOptionRepr::SackPermitted,
                    TcpOptionRepr::Nop,
                    TcpOptionRepr::Nop,
                    TcpOptionRepr::Nop,
                    TcpOptionRepr::WindowScale(7),
                ];
                tun.send(&seg(uport, 0, 0, TcpFlags::SYN, 32792, opts), None)
                    .unwrap();
                let isn = read_segments(tun, uport, Duration::from_millis(100))
                    .iter()
                    .find(|s| s.2.contains(TcpFlags::SYN | TcpFlags::ACK))
                    .expect("SYN-ACK from the kernel")
                    .0;
                let ack = move |n: u32| {
                    let a = isn.wrapping_add(1).wrapping_add(n);
                    seg(uport, 1, a, TcpFlags::ACK, 257, vec![])
                };
                std::thread::sleep(Duration::from_millis(20));
                tun.send(&ack(0), None).unwrap();
                let (c, _) = l.accept().expect("accept");
                c.set_nonblocking(true).unwrap();
                f(c, &ack)
            })
            .expect("run in namespace")
    }
}

/// The kernel charges 832 bytes per transmit skb beyond its payload: a 1-byte write leaves
/// `wmem_queued` at 833. Shallow's [`shallow_tcp::SKB_TX_OVERHEAD`] is this figure, which
/// decides where a large non-blocking write stops (`wmem_queued < sndbuf` admits a new skb).
#[test]
fn kernel_tx_skb_overhead_matches_the_engine() {
    let Some(k) = Kernel::new("kernel_tx_skb_overhead_matches_the_engine") else {
        return;
    };
    let (queued, _) = k.connection(48001, |c, _| {
        assert_eq!((&c).write(b"y").expect("write"), 1);
        meminfo(&c)
    });
    eprintln!("kernel: wmem_queued after a 1-byte write = {queued}");
    assert_eq!(queued, 1 + shallow_tcp::SKB_TX_OVERHEAD);
}

/// Bytes the kernel sends after each ACK while a large non-blocking write waits: 10000 at
/// first (IW10), then a whole doubled cwnd (20000) after the first ACK, as Linux 6.10+ grows
/// the skb at the send head (`tcp_grow_skb`); Linux's packetdrill scripts
/// `notsent_lowat/notsent-lowat-default.pkt` and `epoll/epoll_out_edge*.pkt` still expect
/// the 16000 of earlier kernels. The same figures, and the write's 58000, are what
/// `crates/drill/scripts/grow-skb-burst.pkt` asserts of Shallow's engine.
#[test]
fn kernel_sends_whole_cwnd_quota_after_ack() {
    let Some(k) = Kernel::new("kernel_sends_whole_cwnd_quota_after_ack") else {
        return;
    };
    let uport = 48000;
    let (written, bursts) = k.connection(uport, |c, ack| {
        let written = (&c).write(&[0x5a; 59000]).expect("write");
        let quiet = Duration::from_millis(15);
        let mut bursts = vec![read_segments(&k.tun, uport, quiet)];
        for acked in [10_000u32, 17_000] {
            k.tun.send(&ack(acked), None).unwrap();
            bursts.push(read_segments(&k.tun, uport, quiet));
        }
        (written, bursts)
    });
    let first_and_sum = |b: &[(u32, usize, TcpFlags)]| -> (u32, usize) {
        let first = b.iter().map(|s| s.0).min().unwrap_or(0);
        (first, b.iter().map(|s| s.1).sum())
    };
    let sums: Vec<usize> = bursts.iter().map(|b| first_and_sum(b).1).collect();
    eprintln!("kernel: write() = {written}, bytes sent per burst = {sums:?}");
    assert_eq!(written, 58000, "write() with tcp_wmem[1] = 50000");
    assert_eq!(sums, vec![10000, 20000, 14000], "bytes sent after each ACK");
    // The bursts are contiguous: each starts where the previous one ended.
    let starts: Vec<u32> = bursts.iter().map(|b| first_and_sum(b).0).collect();
    assert_eq!(starts[1].wrapping_sub(starts[0]), 10000);
    assert_eq!(starts[2].wrapping_sub(starts[1]), 20000);
}
