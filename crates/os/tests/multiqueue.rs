//! The multi-queue runtime: one I/O thread and one engine (shard) per device queue, one egress
//! qdisc per queue (Linux's `mq`), each flow owned by the shard its 4-tuple hash picks and
//! written on that shard's queue (more on the shards in `shards.rs`).
//!
//! - Over in-memory links (no root): several queues per host, parallel flows both ways, every
//!   byte checked, more than one queue used, each flow on one queue.
//! - Over an `IFF_MULTI_QUEUE` TUN against the kernel's TCP (root, `/dev/net/tun`, iproute2;
//!   otherwise each test prints why it skipped and passes, unless `SHALLOW_REQUIRE_TUN=1`):
//!   4 queues, flows opened from both sides, `SHALLOW_MQ_BYTES` each way per flow (default
//!   64 MiB) with SHA-256, and the kernel's tun flow steering (automq) checked: once Shallow
//!   has written a flow's packet on its queue, the kernel sends that flow's packets to the same
//!   queue (all but the few it sends while processing that first write: see [`MAX_STRAYS`]).
//!
//! A flow's queue is seen from the packet hook, which runs on the I/O thread of the queue that
//! read (`Dir::Rx`) or writes (`Dir::Tx`) the packet; that thread's name ends in `/QUEUE`.

mod interop_harness;

use std::collections::HashMap;
use std::io::{ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown as StdShutdown, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use interop_harness::*;
use shallow_os::{
    link, Device, Dir, Egress, Host, HostConfig, Netns, Peer, TcpListener, TcpStream, TunConfig,
    Verdict,
};
use shallow_tcp::{Shutdown, Stack};

/// (Shallow's port, the peer's port) of a TCP packet, seen from Shallow (`dir` says which
/// header port is local). IPv4 with any header length, IPv6 without extension headers.
fn ports(dir: Dir, p: &[u8]) -> Option<(u16, u16)> {
    let off = match p.first()? >> 4 {
        4 if *p.get(9)? == 6 => usize::from(p[0] & 0x0f) * 4,
        6 if *p.get(6)? == 6 => 40,
        _ => return None,
    };
    let src = u16::from_be_bytes([*p.get(off)?, *p.get(off + 1)?]);
    let dst = u16::from_be_bytes([*p.get(off + 2)?, *p.get(off + 3)?]);
    Some(match dir {
        Dir::Rx => (dst, src),
        Dir::Tx => (src, dst),
    })
}

/// The queue of the calling I/O thread (`shallow-io-DEV/QUEUE`).
fn this_queue() -> usize {
    std::thread::current()
        .name()
        .and_then(|n| n.rsplit_once('/'))
        .and_then(|(_, q)| q.parse().ok())
        .expect("hook runs on a multi-queue I/O thread")
}

/// Per flow: the queues its packets were written on, and the queues its packets were read
/// from, split at the flow's first write.
#[derive(Default, Debug, Clone)]
struct FlowQueues {
    tx: HashMap<usize, u64>,
    rx_before_first_tx: HashMap<usize, u64>,
    rx: HashMap<usize, u64>,
}

type FlowLog = Arc<Mutex<HashMap<(u16, u16), FlowQueues>>>;

/// Installs a hook (passing everything) that records which queue each flow's packets use.
fn log_queues(host: &Host) -> FlowLog {
    let log: FlowLog = Arc::default();
    let l = Arc::clone(&log);
    host.set_packet_hook(Some(Box::new(move |dir, p, _| {
        if let Some(k) = ports(dir, p) {
            let q = this_queue();
            let mut m = l.lock().unwrap();
            let f = m.entry(k).or_default();
            let side = match dir {
                Dir::Tx => &mut f.tx,
                Dir::Rx if f.tx.is_empty() => &mut f.rx_before_first_tx,
                Dir::Rx => &mut f.rx,
            };
            *side.entry(q).or_default() += 1;
        }
        Verdict::Pass
    })));
    log
}

/// Most packets of a flow the kernel may send on another queue than the one Shallow writes the
/// flow on. Linux's tun records a flow's queue (`tun_flow_update`) only after the written packet
/// has gone through the kernel's stack, so what the kernel sends while processing Shallow's
/// *first* write of a flow (the SYN-ACK to our SYN; the handshake's last ACK, and possibly a
/// first data burst, in reply to our SYN-ACK) still follows the plain hash
/// (`reciprocal_scale`); after that the flow table steers the flow to our queue.
const MAX_STRAYS: u64 = 4;

/// Every flow of `log` was written on exactly one queue, and (when `rx_stable`) read from other
/// queues at most [`MAX_STRAYS`] times after its first write. Returns the number of distinct
/// queues the flows were written on.
fn check_flow_queues(log: &FlowLog, rx_stable: bool, what: &str) -> usize {
    let m = log.lock().unwrap();
    let mut used = std::collections::HashSet::new();
    for (k, f) in m.iter() {
        eprintln!("{what}: flow {k:?}: {f:?}");
        assert_eq!(
            f.tx.len(),
            1,
            "{what}: flow {k:?} written on several queues: {f:?}"
        );
        let q = *f.tx.keys().next().unwrap();
        used.insert(q);
        if rx_stable {
            let strays: u64 = f.rx.iter().filter(|(&r, _)| r != q).map(|(_, c)| c).sum();
            let home = f.rx.get(&q).copied().unwrap_or(0);
            assert!(
                strays <= MAX_STRAYS && home > 0,
                "{what}: flow {k:?} written on queue {q} but read {strays} times from others: {f:?}"
            );
        }
    }
    used.len()
}

/// Per-queue counters add up to the totals, and at least `min` queues carried traffic each
/// way. Returns (rx, tx) per queue.
/// The host is stopped first: its threads may still be counting a packet (the total and the
/// queue's counter are two atomics), and the counts are read once they are all joined.
fn check_queue_stats(host: &Host, min: usize, what: &str) -> Vec<(u64, u64)> {
    host.shutdown();
    let st = host.stats();
    let per: Vec<(u64, u64)> = st
        .queues
        .iter()
        .map(|q| {
            (
                q.rx_packets.load(Ordering::SeqCst),
                q.tx_packets.load(Ordering::SeqCst),
            )
        })
        .collect();
    eprintln!("{what}: per-queue (rx, tx) packets {per:?}");
    assert_eq!(
        per.iter().map(|x| x.0).sum::<u64>(),
        st.rx_packets.load(Ordering::SeqCst),
        "{what}: per-queue rx does not add up"
    );
    assert_eq!(
        per.iter().map(|x| x.1).sum::<u64>(),
        st.tx_packets.load(Ordering::SeqCst),
        "{what}: per-queue tx does not add up"
    );
    let rx_q = per.iter().filter(|x| x.0 > 0).count();
    let tx_q = per.iter().filter(|x| x.1 > 0).count();
    assert!(
        rx_q >= min && tx_q >= min,
        "{what}: only {rx_q} queues read and {tx_q} wrote (want {min}): {per:?}"
    );
    per
}

/// Sends `n` bytes of pattern `seed_out`, half-closes, reads to EOF and checks it is `n` bytes
/// of pattern `seed_in` (both directions at once, on two threads).
fn exchange(s: TcpStream, n: u64, seed_out: u64, seed_in: u64, what: String) {
    let w = s.try_clone().expect("clone");
    let tx = std::thread::spawn(move || {
        let mut w = w;
        send_pattern(&mut w, seed_out, n, 1 << 16).unwrap();
        w.shutdown(Shutdown::Write).unwrap();
    });
    let mut r = s;
    let (got, h) = read_hash(&mut r, 1 << 16).unwrap();
    tx.join().unwrap();
    assert_eq!(got, n, "{what}: read {got} of {n} bytes");
    assert_eq!(h, pattern_hash(seed_in, n), "{what}: SHA-256 differs");
}

/// The kernel's side of [`exchange`] on a `std::net` stream.
fn kernel_exchange(s: std::net::TcpStream, n: u64, seed_out: u64, seed_in: u64, what: String) {
    let w = s.try_clone().expect("clone");
    let tx = std::thread::spawn(move || {
        let mut w = w;
        send_pattern(&mut w, seed_out, n, 1 << 16).unwrap();
        w.shutdown(StdShutdown::Write).unwrap();
    });
    let mut r = s;
    let (got, h) = read_hash(&mut r, 1 << 16).unwrap();
    tx.join().unwrap();
    assert_eq!(got, n, "{what} (kernel): read {got} of {n} bytes");
    assert_eq!(
        h,
        pattern_hash(seed_in, n),
        "{what} (kernel): SHA-256 differs"
    );
}

/// Two hosts joined by three in-memory links, each host with one I/O thread per link: six
/// flows (three opened from each side) move 4 MiB each way at once, every byte checked; each
/// flow is written on one queue by each host; both hosts used more than one queue. With fq
/// per queue (the default) and with no qdisc. A host reads each flow on the queue the other
/// host wrote it, so packets also cross between shards here (forwarded through inboxes).
#[test]
fn mem_three_queues_parallel_flows() {
    mem_three_queues(Egress::default());
}

/// [`mem_three_queues_parallel_flows`] without a qdisc.
#[test]
fn mem_three_queues_parallel_flows_direct() {
    mem_three_queues(Egress::Direct);
}

fn mem_three_queues(egress: Egress) {
    with_watchdog(Duration::from_secs(120), move || {
        let (mut da, mut db) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (a, b) = link::pair().unwrap();
            da.push(Device::Mem(a));
            db.push(Device::Mem(b));
        }
        let a4 = Ipv4Addr::new(10, 7, 0, 1);
        let b4 = Ipv4Addr::new(10, 7, 0, 2);
        let mut sa = Stack::new(71);
        sa.add_address(IpAddr::V4(a4));
        let mut sb = Stack::new(72);
        sb.add_address(IpAddr::V4(b4));
        let ha = Host::start_queues(sa, da, egress.clone()).unwrap();
        let hb = Host::start_queues(sb, db, egress).unwrap();
        // Each host's flows are logged from its own side; a flow's queue may differ between
        // the hosts (each hashes with its own key), and a host reads on whatever queue the
        // other wrote, so only the write side is checked for stability here.
        let la = log_queues(&ha);
        let lb = log_queues(&hb);
        let n = 4u64 << 20;
        let mut joins = Vec::new();
        for i in 0..6u16 {
            let (client, server, srv_ip) = if i % 2 == 0 {
                (ha.clone(), hb.clone(), b4)
            } else {
                (hb.clone(), ha.clone(), a4)
            };
            let addr = SocketAddr::new(IpAddr::V4(srv_ip), 6000 + i);
            let l = TcpListener::bind(&server, addr).unwrap();
            let seed = u64::from(i) * 2 + 100;
            joins.push(std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                exchange(s, n, seed + 1, seed, format!("flow {i} server"));
            }));
            joins.push(std::thread::spawn(move || {
                let s = TcpStream::connect(&client, addr).unwrap();
                exchange(s, n, seed, seed + 1, format!("flow {i} client"));
            }));
        }
        for j in joins {
            j.join().unwrap();
        }
        assert!(check_flow_queues(&la, false, "host A") >= 2);
        assert!(check_flow_queues(&lb, false, "host B") >= 2);
        check_queue_stats(&ha, 2, "host A");
        check_queue_stats(&hb, 2, "host B");
        ha.shutdown();
        hb.shutdown();
    });
}

/// Loss and reordering on a two-queue host (the packet hook drops 1% and holds back 2% of the
/// packets in both directions): each shard's timers (RTO, TLP, delayed ACK), run by its I/O
/// thread, and the held packets, released by the thread of the queue that holds them, still
/// bring every byte of four flows across, both ways.
#[test]
fn mem_two_queues_with_loss_and_reordering() {
    with_watchdog(Duration::from_secs(180), || {
        let (mut da, mut db) = (Vec::new(), Vec::new());
        for _ in 0..2 {
            let (a, b) = link::pair().unwrap();
            da.push(Device::Mem(a));
            db.push(Device::Mem(b));
        }
        let b4 = Ipv4Addr::new(10, 6, 0, 2);
        let mut sa = Stack::new(61);
        sa.add_address(IpAddr::V4(Ipv4Addr::new(10, 6, 0, 1)));
        let mut sb = Stack::new(62);
        sb.add_address(IpAddr::V4(b4));
        let ha = Host::start_queues(sa, da, Egress::default()).unwrap();
        let hb = Host::start_queues(sb, db, Egress::default()).unwrap();
        let mut rng = Pattern::new(0x1055);
        let seen: FlowLog = Arc::default();
        let seen2 = Arc::clone(&seen);
        ha.set_packet_hook(Some(Box::new(move |dir, p, _| {
            if let (Dir::Tx, Some(k)) = (dir, ports(dir, p)) {
                let mut m = seen2.lock().unwrap();
                *m.entry(k).or_default().tx.entry(this_queue()).or_default() += 1;
            }
            let mut b = [0u8; 1];
            rng.fill(&mut b);
            match b[0] {
                0..=2 => Verdict::Drop,
                3..=7 => Verdict::Hold,
                _ => Verdict::Pass,
            }
        })));
        let n = 4u64 << 20;
        let mut joins = Vec::new();
        for i in 0..4u16 {
            let addr = SocketAddr::new(IpAddr::V4(b4), 6200 + i);
            let l = TcpListener::bind(&hb, addr).unwrap();
            let seed = u64::from(i) * 2 + 300;
            joins.push(std::thread::spawn(move || {
                let (s, _) = l.accept().unwrap();
                exchange(s, n, seed + 1, seed, format!("flow {i} server"));
            }));
            let h = ha.clone();
            joins.push(std::thread::spawn(move || {
                let s = TcpStream::connect(&h, addr).unwrap();
                exchange(s, n, seed, seed + 1, format!("flow {i} client"));
            }));
        }
        for j in joins {
            j.join().unwrap();
        }
        check_flow_queues(&seen, false, "lossy host A");
        let drops = ha.stats().hook_drops.load(Ordering::SeqCst);
        eprintln!("hook drops {drops}");
        assert!(drops > 0, "the hook dropped nothing: no loss was tested");
        // Four flows' hashes may all pick one queue (the other host's choice decides what is
        // read where): this test is about loss, so one queue used is enough.
        check_queue_stats(&ha, 1, "lossy host A");
        ha.shutdown();
        hb.shutdown();
    });
}

/// One queue is the host as it was: one I/O thread (named without a queue suffix), one
/// per-queue counter equal to the totals, data both ways intact.
#[test]
fn mem_one_queue_as_before() {
    with_watchdog(Duration::from_secs(60), || {
        let (a, b) = link::pair().unwrap();
        let mut sa = Stack::new(81);
        sa.add_address(IpAddr::V4(Ipv4Addr::new(10, 8, 0, 1)));
        let mut sb = Stack::new(82);
        sb.add_address(IpAddr::V4(Ipv4Addr::new(10, 8, 0, 2)));
        let ha = Host::start(sa, a).unwrap();
        let hb = Host::start_queues(sb, vec![Device::Mem(b)], Egress::default()).unwrap();
        let names: Arc<Mutex<Vec<String>>> = Arc::default();
        let nm = Arc::clone(&names);
        ha.set_packet_hook(Some(Box::new(move |_, _, _| {
            let n = std::thread::current().name().unwrap_or("").to_string();
            let mut v = nm.lock().unwrap();
            if !v.contains(&n) {
                v.push(n);
            }
            Verdict::Pass
        })));
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 8, 0, 2)), 6100);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let n = 2u64 << 20;
        let srv = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            exchange(s, n, 2, 1, "server".into());
        });
        let s = TcpStream::connect(&ha, addr).unwrap();
        exchange(s, n, 1, 2, "client".into());
        srv.join().unwrap();
        assert_eq!(*names.lock().unwrap(), vec!["shallow-io-mem".to_string()]);
        for h in [&ha, &hb] {
            assert_eq!(h.stats().queues.len(), 1);
            check_queue_stats(h, 1, "one queue");
        }
    });
}

fn mq_bytes() -> u64 {
    size_from_env("SHALLOW_MQ_BYTES", 64 << 20)
}

/// A namespace whose 4-queue TUN `shmq0` has the kernel peer's addresses, and a Shallow host
/// with one I/O thread per queue on it.
fn mq_world(queues: usize) -> (Host, Netns) {
    let ns = Netns::unique("shmq").expect("namespace");
    let mut tc = TunConfig::new("shmq0");
    tc.queues = queues;
    tc.multi_queue = true;
    let tuns = ns.open_tun(&tc).expect("multi-queue TUN");
    assert_eq!(tuns.len(), queues);
    Peer {
        netns: ns.name().into(),
        tun: "shmq0".into(),
        ..Peer::default()
    }
    .configure(&ns)
    .expect("kernel side");
    let devices = tuns.into_iter().map(Device::Tun).collect();
    let host = Host::start_queues(stack(0x3a9), devices, Egress::default()).expect("I/O threads");
    (host, ns)
}

/// Four TUN queues, four I/O threads, against the kernel's TCP: six flows at once over IPv4
/// and IPv6, three opened by Shallow and three by the kernel, each moving `SHALLOW_MQ_BYTES`
/// (64 MiB) each way with SHA-256 on both ends. Every flow is written on one queue, and once
/// it has been, the kernel's tun (automq: the flow table `tun_flow_update` fills on our write)
/// sends that flow's packets back on the same queue; more than one queue carries traffic.
#[test]
fn tun_four_queues_parallel_flows_with_linux() {
    if !can_run("tun_four_queues_parallel_flows_with_linux", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(600), || {
        let (host, ns) = mq_world(4);
        let log = log_queues(&host);
        let n = mq_bytes();
        let mut joins = Vec::new();
        for i in 0..6u16 {
            let v6 = i >= 3;
            let (me, peer) = if v6 {
                (IpAddr::V6(ME6), IpAddr::V6(PEER6))
            } else {
                (IpAddr::V4(ME4), IpAddr::V4(PEER4))
            };
            let seed = u64::from(i) * 2 + 1000;
            if i % 2 == 0 {
                // Shallow connects to a kernel listener.
                let addr = SocketAddr::new(peer, 7100 + i);
                let l = ns
                    .run(move || std::net::TcpListener::bind(addr))
                    .expect("enter namespace")
                    .expect("kernel bind");
                joins.push(std::thread::spawn(move || {
                    let (s, _) = l.accept().unwrap();
                    kernel_exchange(s, n, seed + 1, seed, format!("flow {i}"));
                }));
                let h = host.clone();
                joins.push(std::thread::spawn(move || {
                    let s = connect(&h, addr);
                    exchange(s, n, seed, seed + 1, format!("flow {i}"));
                }));
            } else {
                // The kernel connects to a Shallow listener.
                let addr = SocketAddr::new(me, 7100 + i);
                let l = TcpListener::bind(&host, addr).unwrap();
                joins.push(std::thread::spawn(move || {
                    let (s, _) = l.accept().unwrap();
                    exchange(s, n, seed + 1, seed, format!("flow {i}"));
                }));
                joins.push(in_netns(ns.name(), move || {
                    let s = connect_kernel(addr);
                    kernel_exchange(s, n, seed, seed + 1, format!("flow {i}"));
                }));
            }
        }
        for j in joins {
            j.join().unwrap();
        }
        let used = check_flow_queues(&log, true, "4-queue TUN");
        assert!(used >= 2, "all flows on one queue");
        check_queue_stats(&host, 2, "4-queue TUN");
        host.shutdown();
        drop(host);
        ns.delete().expect("delete namespace");
    });
}

/// The kernel connects to `addr`, retrying while Shallow's listener is not up yet.
fn connect_kernel(addr: SocketAddr) -> std::net::TcpStream {
    for _ in 0..100 {
        match std::net::TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("kernel connect {addr}: {e}"),
        }
    }
    panic!("listener at {addr} never came up");
}

/// `HostConfig::queues`: `Host::attach` opens that many queues of an existing multi-queue TUN
/// (made persistent here, as `shallow netns up` does for a single-queue one), one I/O thread
/// each; four flows work and the host stops cleanly.
#[test]
fn attach_with_queues() {
    if !can_run("attach_with_queues", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        let ns = Netns::unique("shmqa").expect("namespace");
        let mut tc = TunConfig::new("shmqa0");
        tc.multi_queue = true;
        tc.persist = Some(true);
        drop(ns.open_tun(&tc).expect("persistent multi-queue TUN"));
        let peer = Peer {
            netns: ns.name().into(),
            tun: "shmqa0".into(),
            ..Peer::default()
        };
        peer.configure(&ns).expect("kernel side");
        let host = Host::attach(&HostConfig {
            tun: "shmqa0".into(),
            netns: Some(ns.name().into()),
            queues: 2,
            seed: 5,
            ..HostConfig::default()
        })
        .expect("attach with 2 queues");
        assert_eq!(host.stats().queues.len(), 2);
        let n = 1u64 << 20;
        let mut joins = Vec::new();
        for i in 0..4u16 {
            let addr = SocketAddr::new(IpAddr::V4(PEER4), 7200 + i);
            let l = ns
                .run(move || std::net::TcpListener::bind(addr))
                .expect("enter namespace")
                .expect("kernel bind");
            joins.push(std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let (got, h) = read_hash(&mut s, 1 << 16).unwrap();
                assert_eq!((got, h), (n, pattern_hash(u64::from(i), n)));
                s.write_all(b"ok").unwrap();
            }));
            let h = host.clone();
            joins.push(std::thread::spawn(move || {
                let mut s = connect(&h, addr);
                send_pattern(&mut s, u64::from(i), n, 1 << 16).unwrap();
                s.shutdown(Shutdown::Write).unwrap();
                let (got, _) = read_hash(&mut s, 16).unwrap();
                assert_eq!(got, 2);
            }));
        }
        for j in joins {
            j.join().unwrap();
        }
        // Stopped first, so that no thread is between its two counters.
        host.shutdown();
        let st = host.stats();
        let total: u64 = st
            .queues
            .iter()
            .map(|q| q.tx_packets.load(Ordering::SeqCst))
            .sum();
        assert_eq!(total, st.tx_packets.load(Ordering::SeqCst));
        assert!(!host.is_running());
        drop(host);
        let _ = ns.ip(&["link", "del", "dev", "shmqa0"]);
        ns.delete().expect("delete namespace");
    });
}
