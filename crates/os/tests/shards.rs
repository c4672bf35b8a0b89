//! Per-shard ownership of a multi-queue host: one engine per device queue, flows owned by
//! 4-tuple hash (`Host::shard_of`).
//!
//! - In memory (no root): a packet read on a queue whose shard does not own its flow reaches
//!   the owner (forced with a raw peer writing a SYN on the wrong link); `connect` spreads
//!   connections over the shards round-robin, each with an ephemeral port its shard owns;
//!   a blocking `accept`, a `Poller` and the tokio listener each see connections that land on
//!   any shard, and a sleeping `accept` is woken by a connection of any shard (no lost
//!   wake-up), many times over.
//! - Over 2- and 4-queue `IFF_MULTI_QUEUE` TUNs with the kernel as peer (root, otherwise
//!   skipped unless `SHALLOW_REQUIRE_TUN=1`): connections opened from both sides land on
//!   several shards, every byte checked with SHA-256, each flow written on its owner's queue.

mod interop_harness;

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown as StdShutdown, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use interop_harness::*;
use shallow_os::{
    link, poller, Device, Dir, Egress, Events, Host, MemLink, Netns, Peer, Poller, TcpListener,
    TcpStream, Trigger, TunConfig, Verdict,
};
use shallow_tcp::{Family, Instant, Shutdown, Stack};

/// Two hosts joined by `n` in-memory links (one queue and shard per link on each side).
fn mem_pair(n: usize, a: Ipv4Addr, b: Ipv4Addr) -> (Host, Host) {
    let (mut da, mut db) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let (x, y) = link::pair().unwrap();
        da.push(Device::Mem(x));
        db.push(Device::Mem(y));
    }
    let mut sa = Stack::new(u64::from(a.octets()[3]) + 500);
    sa.add_address(IpAddr::V4(a));
    let mut sb = Stack::new(u64::from(b.octets()[3]) + 600);
    sb.add_address(IpAddr::V4(b));
    (
        Host::start_queues(sa, da, Egress::default()).unwrap(),
        Host::start_queues(sb, db, Egress::default()).unwrap(),
    )
}

fn forwarded(h: &Host) -> u64 {
    h.stats()
        .queues
        .iter()
        .map(|q| q.rx_forwarded.load(Ordering::SeqCst))
        .sum()
}

/// Every connection is on the shard its tuple belongs to.
fn assert_owned(h: &Host, s: &TcpStream, what: &str) {
    let (l, p) = (s.local_addr().unwrap(), s.peer_addr().unwrap());
    assert_eq!(
        s.shard(),
        h.shard_of(l, p),
        "{what}: {l} -> {p} on shard {} but owned by {}",
        s.shard(),
        h.shard_of(l, p)
    );
}

/// Reads raw packets from `l` until one satisfies `want` (10 s at most).
fn recv_until(l: &MemLink, want: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let t0 = std::time::Instant::now();
    let mut v = Vec::new();
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no such packet came"
        );
        v.clear();
        l.recv_batch(&mut v, 16).unwrap();
        for (p, _) in v.drain(..) {
            if want(&p) {
                return p;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The forwarding path, forced: a raw peer (an engine driven by hand) writes its SYN to a
/// two-queue host on the link of the queue whose shard does *not* own the flow. That queue's
/// thread hands the packet to the owner's inbox (counted as forwarded on the queue that read
/// it), and the owner answers with a SYN-ACK on its own queue; the peer completes the
/// handshake and the connection is accepted on the owning shard.
#[test]
fn packet_on_the_wrong_queue_reaches_its_owner() {
    with_watchdog(Duration::from_secs(60), || {
        let (mut devs, mut raw) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let (x, y) = link::pair().unwrap();
            devs.push(Device::Mem(x));
            raw.push(y);
        }
        let me = Ipv4Addr::new(10, 5, 0, 2);
        let mut st = Stack::new(9);
        st.add_address(IpAddr::V4(me));
        let host = Host::start_queues(st, devs, Egress::default()).unwrap();
        let addr = SocketAddr::new(IpAddr::V4(me), 80);
        let l = TcpListener::bind(&host, addr).unwrap();
        let mut peer = Stack::new(10);
        peer.add_address(IpAddr::V4(Ipv4Addr::new(10, 5, 0, 1)));
        let c = peer.socket(Family::V4).unwrap();
        let now = Instant::ZERO;
        let _ = peer.connect(now, c, addr);
        let pa = peer.local_addr(c).unwrap();
        let owner = host.shard_of(addr, pa);
        let wrong = 1 - owner;
        let mut syn = peer.poll_transmit(now).expect("SYN");
        syn.linearize();
        raw[wrong].send(&syn.data, None).unwrap();
        // The SYN-ACK leaves on the owner's queue.
        let synack = recv_until(&raw[owner], |p| p.len() >= 40 && p[9] == 6);
        let q = &host.stats().queues;
        assert_eq!(q[wrong].rx_forwarded.load(Ordering::SeqCst), 1);
        assert_eq!(q[wrong].rx_packets.load(Ordering::SeqCst), 1);
        assert_eq!(q[owner].rx_packets.load(Ordering::SeqCst), 0);
        assert_eq!(q[owner].tx_packets.load(Ordering::SeqCst), 1);
        assert_eq!(q[wrong].tx_packets.load(Ordering::SeqCst), 0);
        // The handshake's last ACK, again on the wrong queue.
        peer.input(Instant::from_nanos(1_000_000), &synack, None);
        let mut ack = peer
            .poll_transmit(Instant::from_nanos(1_000_000))
            .expect("ACK");
        ack.linearize();
        raw[wrong].send(&ack.data, None).unwrap();
        let (s, from) = l.accept().unwrap();
        assert_eq!(from, pa);
        assert_eq!(s.shard(), owner);
        assert_owned(&host, &s, "raw peer");
        assert_eq!(q[wrong].rx_forwarded.load(Ordering::SeqCst), 2);
        host.shutdown();
    });
}

/// `connect` on a four-queue host takes the shards in turn, and on each an ephemeral port
/// whose tuple that shard owns (so no two shards can pick one connected tuple); connections
/// accepted by a four-queue peer are on the shard their tuple belongs to there; bytes cross
/// both ways on every one, and packets arriving on a queue that does not own them were
/// forwarded.
#[test]
fn connect_spreads_over_shards_with_owned_ports() {
    with_watchdog(Duration::from_secs(120), || {
        let (a4, b4) = (Ipv4Addr::new(10, 5, 1, 1), Ipv4Addr::new(10, 5, 1, 2));
        let (ha, hb) = mem_pair(4, a4, b4);
        assert_eq!((ha.shards(), hb.shards()), (4, 4));
        let addr = SocketAddr::new(IpAddr::V4(b4), 5001);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let mut clients = Vec::new();
        for _ in 0..8 {
            clients.push(TcpStream::connect(&ha, addr).unwrap());
        }
        let mut shards: Vec<usize> = clients.iter().map(TcpStream::shard).collect();
        for c in &clients {
            assert_owned(&ha, c, "client");
        }
        shards.sort_unstable();
        assert_eq!(shards, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        let mut servers = Vec::new();
        for _ in 0..8 {
            let (s, _) = l.accept().unwrap();
            assert_owned(&hb, &s, "server");
            servers.push(s);
        }
        let n = 256u64 << 10;
        let mut joins = Vec::new();
        for (i, c) in clients.into_iter().enumerate() {
            let seed = i as u64;
            joins.push(std::thread::spawn(move || {
                let mut c = c;
                send_pattern(&mut c, seed, n, 1 << 14).unwrap();
                c.shutdown(Shutdown::Write).unwrap();
                let (got, h) = read_hash(&mut c, 1 << 14).unwrap();
                assert_eq!((got, h), (n, pattern_hash(seed + 100, n)));
            }));
        }
        for s in servers {
            joins.push(std::thread::spawn(move || {
                let mut s = s;
                let (got, h) = read_hash(&mut s, 1 << 14).unwrap();
                assert_eq!(got, n);
                let seed = (0..8u64)
                    .find(|k| pattern_hash(*k, n) == h)
                    .expect("a flow");
                send_pattern(&mut s, seed + 100, n, 1 << 14).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
            }));
        }
        for j in joins {
            j.join().unwrap();
        }
        eprintln!(
            "forwarded: A {} B {}; inbox drops A {} B {}",
            forwarded(&ha),
            forwarded(&hb),
            ha.stats()
                .queues
                .iter()
                .map(|q| q.rx_forward_drops.load(Ordering::SeqCst))
                .sum::<u64>(),
            hb.stats()
                .queues
                .iter()
                .map(|q| q.rx_forward_drops.load(Ordering::SeqCst))
                .sum::<u64>()
        );
        // Counters are summed over the shards: eight active opens, eight passive.
        let get = |h: &Host, k: &str| {
            h.counters()
                .into_iter()
                .find(|(n, _)| n == k)
                .map_or(0, |x| x.1)
        };
        assert_eq!(get(&ha, "TcpActiveOpens"), 8);
        assert_eq!(get(&hb, "TcpPassiveOpens"), 8);
        ha.shutdown();
        hb.shutdown();
    });
}

/// No lost wake-up across shards: a blocking `accept` sleeps (on the listener's host-level
/// wait), and a connection that lands on any shard — tried before or after the sleeper looked
/// at it — wakes it. Forty rounds on a two-queue listener, each round waiting until the
/// acceptor sleeps before connecting; both shards get connections.
#[test]
fn sleeping_accept_is_woken_by_any_shard() {
    with_watchdog(Duration::from_secs(120), || {
        let (a4, b4) = (Ipv4Addr::new(10, 5, 2, 1), Ipv4Addr::new(10, 5, 2, 2));
        let (ha, hb) = mem_pair(2, a4, b4);
        let addr = SocketAddr::new(IpAddr::V4(b4), 5002);
        let l = TcpListener::bind(&hb, addr).unwrap();
        assert_eq!(l.sockets().len(), 2);
        let rounds = 40;
        let sleeps = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let hb2 = hb.clone();
        let acceptor = std::thread::spawn(move || {
            let mut seen = [0usize; 2];
            for _ in 0..rounds {
                let (s, _) = l.accept().unwrap();
                assert_owned(&hb2, &s, "accepted");
                seen[s.shard()] += 1;
            }
            seen
        });
        let mut keep = Vec::new();
        for _ in 0..rounds {
            // Wait until the acceptor is asleep (or has gone to sleep once more).
            let base = sleeps.load(Ordering::SeqCst);
            let t0 = std::time::Instant::now();
            while hb.stats().sleeps.load(Ordering::SeqCst) <= base {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "acceptor never slept"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            sleeps.store(hb.stats().sleeps.load(Ordering::SeqCst), Ordering::SeqCst);
            keep.push(TcpStream::connect(&ha, addr).unwrap());
        }
        let seen = acceptor.join().unwrap();
        eprintln!("accepted per shard: {seen:?}");
        assert!(
            seen.iter().all(|&c| c > 0),
            "one shard got nothing: {seen:?}"
        );
        ha.shutdown();
        hb.shutdown();
    });
}

/// A non-blocking listener registered with a `Poller` (one registration, a socket on each
/// shard) reports connections of either shard as one readable event of its token, and
/// `accept` then takes them; a dropped connection's socket is forgotten.
#[test]
fn poller_and_nonblocking_accept_across_shards() {
    with_watchdog(Duration::from_secs(60), || {
        let (a4, b4) = (Ipv4Addr::new(10, 5, 3, 1), Ipv4Addr::new(10, 5, 3, 2));
        let (ha, hb) = mem_pair(2, a4, b4);
        let addr = SocketAddr::new(IpAddr::V4(b4), 5003);
        let l = TcpListener::bind(&hb, addr).unwrap();
        l.set_nonblocking(true).unwrap();
        assert_eq!(
            l.accept().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
        let p = Poller::new(&hb);
        p.register(&l, 7, poller::Interest::READABLE, Trigger::Level)
            .unwrap();
        let mut ev = Events::with_capacity(8);
        assert_eq!(p.wait(&mut ev, Some(Duration::ZERO)).unwrap(), 0);
        let mut keep = Vec::new();
        let mut shards = [0usize; 2];
        for _ in 0..16 {
            keep.push(TcpStream::connect(&ha, addr).unwrap());
            let n = p.wait(&mut ev, Some(Duration::from_secs(10))).unwrap();
            assert_eq!(n, 1, "one event for the listener's two sockets");
            let e = ev.iter().next().unwrap();
            assert_eq!(e.token, 7);
            assert!(e.is_readable());
            let (s, _) = l.accept().unwrap();
            shards[s.shard()] += 1;
        }
        assert_eq!(p.wait(&mut ev, Some(Duration::ZERO)).unwrap(), 0);
        eprintln!("accepted per shard: {shards:?}");
        assert!(shards.iter().all(|&c| c > 0), "{shards:?}");
        p.deregister(&l).unwrap();
        drop(keep);
        ha.shutdown();
        hb.shutdown();
    });
}

/// The tokio listener on a two-queue host accepts connections of both shards.
#[cfg(feature = "tokio")]
#[test]
fn tokio_listener_across_shards() {
    use shallow_os::AsyncTcpListener;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    with_watchdog(Duration::from_secs(60), || {
        let (a4, b4) = (Ipv4Addr::new(10, 5, 4, 1), Ipv4Addr::new(10, 5, 4, 2));
        let (ha, hb) = mem_pair(2, a4, b4);
        let addr = SocketAddr::new(IpAddr::V4(b4), 5004);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let l = AsyncTcpListener::bind(&hb, addr).unwrap();
        let server = rt.spawn(async move {
            let mut shards = [0usize; 2];
            for _ in 0..16 {
                let (mut s, _) = l.accept().await.unwrap();
                shards[s.get_ref().shard()] += 1;
                let mut b = [0u8; 4];
                s.read_exact(&mut b).await.unwrap();
                s.write_all(&b).await.unwrap();
            }
            shards
        });
        for i in 0..16u32 {
            let mut c = TcpStream::connect(&ha, addr).unwrap();
            c.write_all(&i.to_be_bytes()).unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).unwrap();
            assert_eq!(u32::from_be_bytes(b), i);
        }
        let shards = rt.block_on(server).unwrap();
        eprintln!("accepted per shard: {shards:?}");
        assert!(shards.iter().all(|&c| c > 0), "{shards:?}");
        ha.shutdown();
        hb.shutdown();
    });
}

/// (Shallow's port, the peer's port) of each flow and the queue that wrote it.
type TxLog = Arc<Mutex<Vec<((u16, u16), usize)>>>;

/// A namespace whose `queues`-queue TUN has the kernel peer's addresses, and a Shallow host
/// with one shard per queue on it.
fn mq_world(queues: usize) -> (Host, Netns) {
    let ns = Netns::unique("shsh").expect("namespace");
    let mut tc = TunConfig::new("shsh0");
    tc.queues = queues;
    tc.multi_queue = true;
    let tuns = ns.open_tun(&tc).expect("multi-queue TUN");
    Peer {
        netns: ns.name().into(),
        tun: "shsh0".into(),
        ..Peer::default()
    }
    .configure(&ns)
    .expect("kernel side");
    let devices = tuns.into_iter().map(Device::Tun).collect();
    let host = Host::start_queues(stack(0x5a4d), devices, Egress::default()).expect("threads");
    (host, ns)
}

/// 2 and 4 TUN queues against the kernel: 16 connections accepted from the kernel
/// and 2 × queues opened by Shallow, each moving 1 MiB each way with SHA-256 on both ends;
/// accepted connections come from several shards, Shallow's own from every shard; every
/// connection is on its owner's shard and its packets are written on that shard's queue.
#[test]
fn tun_two_and_four_queues_flows_on_several_shards() {
    if !can_run("tun_two_and_four_queues_flows_on_several_shards", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(300), || {
        for queues in [2usize, 4] {
            let (host, ns) = mq_world(queues);
            // Which queue wrote each flow (by Shallow's port, peer's port).
            let log: TxLog = Arc::default();
            let lg = Arc::clone(&log);
            host.set_packet_hook(Some(Box::new(move |dir, p, _| {
                if dir == Dir::Tx && p.len() >= 24 && p[0] >> 4 == 4 && p[9] == 6 {
                    let ports = (
                        u16::from_be_bytes([p[20], p[21]]),
                        u16::from_be_bytes([p[22], p[23]]),
                    );
                    let q = std::thread::current()
                        .name()
                        .and_then(|n| n.rsplit_once('/'))
                        .and_then(|(_, q)| q.parse().ok())
                        .unwrap();
                    let mut v = lg.lock().unwrap();
                    if !v.iter().any(|(k, w)| *k == ports && *w == q) {
                        v.push((ports, q));
                    }
                }
                Verdict::Pass
            })));
            let n = 1u64 << 20;
            let mut joins = Vec::new();
            // The kernel connects to Shallow.
            let me = SocketAddr::new(IpAddr::V4(ME4), 7300);
            let l = TcpListener::bind(&host, me).unwrap();
            let accepted: Arc<Mutex<Vec<(usize, SocketAddr, SocketAddr)>>> = Arc::default();
            let flows_in = 16;
            for i in 0..flows_in {
                let seed = i as u64 + 10;
                joins.push(in_netns(ns.name(), move || {
                    let mut s = std::net::TcpStream::connect(me).unwrap();
                    s.write_all(&seed.to_be_bytes()).unwrap();
                    let w = s.try_clone().unwrap();
                    let tx = std::thread::spawn(move || {
                        let mut w = w;
                        send_pattern(&mut w, seed, n, 1 << 16).unwrap();
                        w.shutdown(StdShutdown::Write).unwrap();
                    });
                    let (got, h) = read_hash(&mut s, 1 << 16).unwrap();
                    tx.join().unwrap();
                    assert_eq!((got, h), (n, pattern_hash(seed + 1000, n)));
                }));
            }
            let mut servers = Vec::new();
            for _ in 0..flows_in {
                let (s, _) = l.accept().unwrap();
                assert_owned(&host, &s, "accepted");
                accepted.lock().unwrap().push((
                    s.shard(),
                    s.local_addr().unwrap(),
                    s.peer_addr().unwrap(),
                ));
                servers.push(std::thread::spawn(move || {
                    let mut s = s;
                    let mut b = [0u8; 8];
                    s.read_exact(&mut b).unwrap();
                    let seed = u64::from_be_bytes(b);
                    let w = s.try_clone().unwrap();
                    let tx = std::thread::spawn(move || {
                        let mut w = w;
                        send_pattern(&mut w, seed + 1000, n, 1 << 16).unwrap();
                        w.shutdown(Shutdown::Write).unwrap();
                    });
                    let (got, h) = read_hash(&mut s, 1 << 16).unwrap();
                    tx.join().unwrap();
                    assert_eq!((got, h), (n, pattern_hash(seed, n)));
                }));
            }
            // Shallow connects to the kernel.
            let peer = SocketAddr::new(IpAddr::V4(PEER4), 7400);
            let kl = ns
                .run(move || std::net::TcpListener::bind(peer))
                .unwrap()
                .unwrap();
            let flows_out = 2 * queues;
            let kside = std::thread::spawn(move || {
                let mut hs = Vec::new();
                for _ in 0..flows_out {
                    let (s, _) = kl.accept().unwrap();
                    hs.push(std::thread::spawn(move || {
                        let mut s = s;
                        let (got, h) = read_hash(&mut s, 1 << 16).unwrap();
                        assert_eq!(got, n);
                        s.write_all(&h).unwrap();
                    }));
                }
                for h in hs {
                    h.join().unwrap();
                }
            });
            let mut out_shards = vec![0usize; queues];
            let mut clients = Vec::new();
            for i in 0..flows_out {
                let s = connect(&host, peer);
                assert_owned(&host, &s, "connected");
                out_shards[s.shard()] += 1;
                let seed = 5000 + i as u64;
                clients.push(std::thread::spawn(move || {
                    let mut s = s;
                    send_pattern(&mut s, seed, n, 1 << 16).unwrap();
                    s.shutdown(Shutdown::Write).unwrap();
                    let mut h = [0u8; 32];
                    s.read_exact(&mut h).unwrap();
                    assert_eq!(h, pattern_hash(seed, n));
                }));
            }
            for j in joins.into_iter().chain(servers).chain(clients) {
                j.join().unwrap();
            }
            kside.join().unwrap();
            let acc = accepted.lock().unwrap().clone();
            let mut in_shards = vec![0usize; queues];
            for (k, _, _) in &acc {
                in_shards[*k] += 1;
            }
            let fwd: Vec<u64> = host
                .stats()
                .queues
                .iter()
                .map(|q| q.rx_forwarded.load(Ordering::SeqCst))
                .collect();
            let rx: u64 = host.stats().rx_packets.load(Ordering::SeqCst);
            eprintln!(
                "{queues} queues: accepted per shard {in_shards:?}, connected per shard \
                 {out_shards:?}, forwarded per queue {fwd:?} of {rx} packets read"
            );
            assert!(
                in_shards.iter().filter(|&&c| c > 0).count() >= 2,
                "{queues} queues: accepted on one shard only: {in_shards:?}"
            );
            assert!(out_shards.iter().all(|&c| c == 2), "{out_shards:?}");
            // Each flow is written on its owner's queue, and on no other.
            let log = log.lock().unwrap();
            for ((sp, dp), q) in log.iter() {
                let local = SocketAddr::new(IpAddr::V4(ME4), *sp);
                let remote = SocketAddr::new(IpAddr::V4(PEER4), *dp);
                assert_eq!(
                    *q,
                    host.shard_of(local, remote),
                    "{queues} queues: flow {local} -> {remote} written on queue {q}"
                );
            }
            drop(log);
            host.shutdown();
            drop(host);
            ns.delete().expect("delete namespace");
        }
    });
}
