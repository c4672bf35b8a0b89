//! Shared harness of the interop tests (`tests/interop*.rs`): the kernel peer in a fresh network
//! namespace, a Shallow host on the TUN, kernel-side threads with `std::net` sockets, a
//! deterministic byte stream with SHA-256, and skip / watchdog helpers.
//!
//! Not every test binary uses every item.
#![allow(dead_code)]

use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest, Sha256};
use shallow_os::{Dir, Host, Netns, Peer, TcpStream, TunConfig, Verdict};
use shallow_tcp::Stack;

/// The kernel side of the TUN (as `shallow netns up` sets it).
pub const PEER4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// Shallow's side.
pub const ME4: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
/// The kernel side of the TUN, IPv6.
pub const PEER6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1);
/// Shallow's side, IPv6.
pub const ME6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 2);

/// Both families' kernel-side addresses, for tests that run once per family.
pub fn peers() -> [IpAddr; 2] {
    [IpAddr::V4(PEER4), IpAddr::V6(PEER6)]
}

pub use shallow_os::skip::can_run;

/// Runs `f` on its own thread and fails the test if it has not finished after `limit`
/// (a blocking call that never returns must fail the test, not hang the suite).
pub fn with_watchdog(limit: Duration, f: impl FnOnce() + Send + 'static) {
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
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test body still running after {limit:?}"),
    }
}

/// Kills a helper process on drop.
pub struct ChildGuard(pub Child);
impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A deterministic pseudo-random byte stream (xorshift64*), the same for the same seed, so
/// that sender and receiver can each compute what the other should see.
pub struct Pattern {
    state: u64,
    pending: [u8; 8],
    used: usize,
}

impl Pattern {
    /// A stream keyed by `seed`.
    pub fn new(seed: u64) -> Pattern {
        Pattern {
            state: seed | 1,
            pending: [0; 8],
            used: 8,
        }
    }

    fn next_word(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Fills `buf` with the next bytes of the stream.
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() && self.used < 8 {
            buf[i] = self.pending[self.used];
            self.used += 1;
            i += 1;
        }
        let mut chunks = buf[i..].chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_word().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            self.pending = self.next_word().to_le_bytes();
            self.used = 0;
            for b in rest {
                *b = self.pending[self.used];
                self.used += 1;
            }
        }
    }
}

/// Writes `len` bytes of `Pattern::new(seed)` to `w` in `chunk`-byte writes; returns their
/// SHA-256.
pub fn send_pattern(w: &mut impl Write, seed: u64, len: u64, chunk: usize) -> io::Result<[u8; 32]> {
    let mut p = Pattern::new(seed);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; chunk];
    let mut left = len;
    while left > 0 {
        let n = (left as usize).min(chunk);
        p.fill(&mut buf[..n]);
        h.update(&buf[..n]);
        w.write_all(&buf[..n])?;
        left -= n as u64;
    }
    Ok(h.finalize().into())
}

/// Reads `r` to EOF; returns (bytes, SHA-256).
pub fn read_hash(r: &mut impl Read, chunk: usize) -> io::Result<(u64, [u8; 32])> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; chunk];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok((total, h.finalize().into()));
        }
        h.update(&buf[..n]);
        total += n as u64;
    }
}

/// Reads exactly `len` bytes from `r` (not to EOF); returns their SHA-256.
pub fn read_exact_hash(r: &mut impl Read, len: u64, chunk: usize) -> io::Result<[u8; 32]> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; chunk];
    let mut left = len;
    while left > 0 {
        let n = (left as usize).min(chunk);
        r.read_exact(&mut buf[..n])?;
        h.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(h.finalize().into())
}

/// SHA-256 of `len` bytes of `Pattern::new(seed)`.
pub fn pattern_hash(seed: u64, len: u64) -> [u8; 32] {
    let mut sink = io::sink();
    send_pattern(&mut sink, seed, len, 1 << 16).unwrap()
}

/// Runs `f` on a new thread inside the namespace `ns` (by name), e.g. a kernel server.
pub fn in_netns<R: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> R + Send + 'static,
) -> JoinHandle<R> {
    let ns = Netns::open(ns).expect("namespace exists");
    std::thread::spawn(move || ns.run(f).expect("enter namespace"))
}

/// The Stack a test host runs: both default addresses, `seed` for ISNs and ports.
pub fn stack(seed: u64) -> Stack {
    let mut st = Stack::new(seed);
    st.add_address(IpAddr::V4(ME4));
    st.add_address(IpAddr::V6(ME6));
    st
}

/// A namespace whose TUN `sh0` has the kernel peer's addresses, and a Shallow host on it.
/// Dropping it stops the host and deletes the namespace (and with it the TUN).
pub struct World {
    /// The Shallow host (drop it before `ns`).
    pub host: Host,
    /// The kernel peer's namespace.
    pub ns: Netns,
}

impl World {
    /// A fresh world named `PREFIX-PID-N`.
    pub fn new(prefix: &str) -> World {
        Self::with_stack(prefix, stack(0x5eed))
    }

    /// A fresh world whose host runs `stack`.
    pub fn with_stack(prefix: &str, stack: Stack) -> World {
        let ns = Netns::unique(prefix).expect("namespace");
        let tun = ns
            .open_tun(&TunConfig::new("sh0"))
            .expect("TUN")
            .pop()
            .expect("one queue");
        let peer = Peer {
            netns: ns.name().into(),
            tun: "sh0".into(),
            ..Peer::default()
        };
        peer.configure(&ns).expect("kernel side");
        let host = Host::start(stack, tun).expect("I/O thread");
        World { host, ns }
    }

    /// Runs `f` in the kernel peer's namespace on a new thread.
    pub fn kernel<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        in_netns(self.ns.name(), f)
    }

    /// Binds a kernel listener at `addr` in the namespace (on the calling thread's behalf).
    pub fn kernel_listener(&self, addr: SocketAddr) -> std::net::TcpListener {
        self.ns
            .run(move || std::net::TcpListener::bind(addr))
            .expect("enter namespace")
            .expect("kernel bind")
    }

    /// Runs `tc ARGS` in the namespace.
    pub fn tc(&self, args: &[&str]) -> String {
        run_ok(self.ns.command("tc").args(args))
    }
}

/// Runs a command, panicking with its stderr when it fails; returns stdout.
/// Connects, retrying while the listener is not up yet (ECONNREFUSED).
pub fn connect(host: &Host, addr: SocketAddr) -> TcpStream {
    for _ in 0..100 {
        match TcpStream::connect_timeout(host, addr, Duration::from_secs(5)) {
            Ok(s) => return s,
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connect {addr}: {e}"),
        }
    }
    panic!("listener at {addr} never came up");
}

pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Hex of a digest, for messages.
pub fn hex(d: &[u8; 32]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A byte count from env `VAR` (plain bytes or with k/m/g suffix, powers of 1024), else
/// `default`.
pub fn size_from_env(var: &str, default: u64) -> u64 {
    let Ok(v) = std::env::var(var) else {
        return default;
    };
    let v = v.trim().to_ascii_lowercase();
    let (num, mul) = match v.chars().last() {
        Some('k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('m') => (&v[..v.len() - 1], 1 << 20),
        Some('g') => (&v[..v.len() - 1], 1 << 30),
        _ => (&v[..], 1),
    };
    num.parse::<u64>()
        .map(|n| n * mul)
        .unwrap_or_else(|_| panic!("{var}={v:?} is not a size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stream does not depend on how it is cut into writes.
    #[test]
    fn pattern_is_chunking_independent() {
        let mut a = vec![0u8; 1000];
        Pattern::new(7).fill(&mut a);
        let mut b = vec![0u8; 1000];
        let mut p = Pattern::new(7);
        let mut i = 0;
        for n in [1usize, 3, 8, 13, 64, 911] {
            p.fill(&mut b[i..i + n]);
            i += n;
        }
        assert_eq!(a, b);
        let mut c = vec![0u8; 1000];
        Pattern::new(8).fill(&mut c);
        assert_ne!(a, c);
    }
}

/// Impairments of one direction between the TUN and the engine.
#[derive(Clone, Copy, Debug, Default)]
pub struct Impair {
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Probability that a packet is held back and delivered after the next one (or after
    /// 1 ms), i.e. reordered by one place.
    pub reorder: f64,
}

/// What the impairment hook did.
#[derive(Debug, Default)]
pub struct ImpairCounts {
    /// Packets dropped, kernel → engine.
    pub rx_dropped: AtomicU64,
    /// Packets reordered, kernel → engine.
    pub rx_reordered: AtomicU64,
    /// Packets dropped, engine → kernel.
    pub tx_dropped: AtomicU64,
    /// Packets reordered, engine → kernel.
    pub tx_reordered: AtomicU64,
}

/// A namespace whose TUN `sh0` has the kernel peer's addresses and a Shallow host on it whose
/// packet hook (between the TUN and the engine; this kernel has no `sch_netem`) drops and
/// reorders packets in both directions. The engine's TSO and the TUN's offloads are off, so
/// every packet is one segment and a loss is one segment's.
pub struct LossyWorld {
    /// The Shallow host.
    pub host: Host,
    /// What the hook did.
    pub counts: Arc<ImpairCounts>,
    /// The kernel peer's namespace.
    pub ns: Netns,
}

impl LossyWorld {
    /// A fresh world with `imp` in both directions; `seed` keys the engine and the coin.
    pub fn new(prefix: &str, imp: Impair, seed: u64) -> LossyWorld {
        let ns = Netns::unique(prefix).expect("namespace");
        let mut tc = TunConfig::new("sh0");
        tc.offload = shallow_os::Offload::NONE;
        let tun = ns.open_tun(&tc).expect("TUN").pop().expect("one queue");
        Peer {
            netns: ns.name().into(),
            tun: "sh0".into(),
            ..Peer::default()
        }
        .configure(&ns)
        .expect("kernel side");
        let mut st = stack(seed);
        st.set_device(shallow_tcp::DeviceCaps {
            gso: false,
            ..st.device()
        });
        let host = Host::start(st, tun).expect("I/O thread");
        let counts = Arc::new(ImpairCounts::default());
        let c = Arc::clone(&counts);
        let mut rng = Pattern::new(seed ^ 0x9e37_79b9_7f4a_7c15);
        host.set_packet_hook(Some(Box::new(move |dir, _pkt, _gso| {
            let mut b = [0u8; 8];
            rng.fill(&mut b);
            let x = (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64;
            let (d, r) = match dir {
                Dir::Rx => (&c.rx_dropped, &c.rx_reordered),
                Dir::Tx => (&c.tx_dropped, &c.tx_reordered),
            };
            if x < imp.loss {
                d.fetch_add(1, Ordering::Relaxed);
                Verdict::Drop
            } else if x < imp.loss + imp.reorder {
                r.fetch_add(1, Ordering::Relaxed);
                Verdict::Hold
            } else {
                Verdict::Pass
            }
        })));
        LossyWorld { host, counts, ns }
    }

    /// Runs `f` in the kernel peer's namespace on a new thread.
    pub fn kernel<R: Send + 'static>(
        &self,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> JoinHandle<R> {
        in_netns(self.ns.name(), f)
    }

    /// Binds a kernel listener at `addr` in the namespace.
    pub fn kernel_listener(&self, addr: SocketAddr) -> std::net::TcpListener {
        self.ns
            .run(move || std::net::TcpListener::bind(addr))
            .expect("enter namespace")
            .expect("kernel bind")
    }
}

/// The kernel's SNMP counter `name` in namespace `ns` (`nstat -a -z`: absolute values).
pub fn nstat(ns: &Netns, name: &str) -> u64 {
    let out = run_ok(ns.command("nstat").args(["-a", "-z", name]));
    out.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in nstat output:\n{out}"))
}

/// `addr` as the `sockaddr_storage` and length a libc socket call takes (for the tests that
/// drive a kernel socket with options `std::net` lacks: TCP-MD5 keys, `MSG_FASTOPEN`).
pub fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, usize) {
    // SAFETY: all zeros is a valid `sockaddr_storage`.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: `sockaddr_storage` is larger than `sockaddr_in` and aligned for it.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            // SAFETY: `sockaddr_storage` is larger than `sockaddr_in6` and aligned for it.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len)
}
