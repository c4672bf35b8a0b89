//! Transmit timestamps (`SO_TIMESTAMPING`) through the blocking API: `TcpStream::set_timestamping`
//! and the error-queue reads (`recv_timestamp`, `wait_timestamp`, `tx_timestamps`), between
//! two hosts joined by an in-memory link (no root), and against the Linux kernel over a TUN
//! (`timestamps_against_linux`: needs root, `/dev/net/tun` and iproute2; skipped with a
//! printed reason without them, unless `SHALLOW_REQUIRE_TUN=1`).

mod interop_harness;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use interop_harness::{can_run, connect, peers, with_watchdog, World};
use shallow_os::{link, Egress, Host, TcpListener, TcpStream};
use shallow_tcp::tstamp::sof;
use shallow_tcp::{pollbits, OptVal, SockOpt, Stack, TstampKind, TxTimestamp};

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const EINVAL: i32 = 22;

fn hosts(egress: Egress) -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(11);
    a.add_address(IpAddr::V4(A4));
    let mut b = Stack::new(22);
    b.add_address(IpAddr::V4(B4));
    (
        Host::start_with(a, la, egress.clone()).unwrap(),
        Host::start_with(b, lb, egress).unwrap(),
    )
}

const ALL: u32 = sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID;

/// Three writes of `LEN` bytes, each waited on until its ACK timestamp arrives (blocking
/// `wait_timestamp`): each write's last byte (keys `LEN-1`, `2LEN-1`, `3LEN-1`) gets SCHED,
/// SND and ACK, in that order in the queue and in time, and nothing for any other key; with
/// fq and without a qdisc, with the I/O thread transmitting and with direct transmit (the
/// application's thread writes to the device).
///
/// With direct transmit SND may follow ACK: the writing thread hands the packet's TX
/// completion (which stamps SND) to the I/O thread after its device write, and the I/O
/// thread may read the peer's ACK first when the writer is descheduled between the two
/// (seen about once in 25 runs, by some µs). Linux stamps SND in the driver's transmit,
/// which always precedes the ACK; the engine could report an owed SND before the ACK that
/// covers its packet. Until then that case only checks SCHED ≤ SND and SCHED ≤ ACK and
/// prints the inversion.
#[test]
fn sched_snd_ack_per_write() {
    with_watchdog(Duration::from_secs(60), || {
        for (egress, direct) in [
            (Egress::Fq, false),
            (Egress::Direct, false),
            (Egress::Fq, true),
            (Egress::Direct, true),
        ] {
            const LEN: usize = 10_000;
            let (ha, hb) = hosts(egress.clone());
            ha.set_direct_transmit(direct);
            let addr = SocketAddr::new(IpAddr::V4(B4), 80);
            let l = TcpListener::bind(&hb, addr).unwrap();
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut got = Vec::new();
                s.read_to_end(&mut got).unwrap();
                got.len()
            });
            let mut c = TcpStream::connect(&ha, addr).unwrap();
            c.set_timestamping(ALL).unwrap();
            assert_eq!(c.timestamping().unwrap(), ALL);
            assert_eq!(
                c.recv_timestamp().unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
            let mut events: Vec<TxTimestamp> = Vec::new();
            for i in 1..=3u32 {
                let before = ha.now();
                c.write_all(&vec![i as u8; LEN]).unwrap();
                let key = i * LEN as u32 - 1;
                loop {
                    let t = c.wait_timestamp(Some(Duration::from_secs(10))).unwrap();
                    // SND of the previous write may come late (see above).
                    assert!(
                        t.time >= before || direct && t.kind == TstampKind::Snd,
                        "{t:?} before the write ({before:?}): {events:?}"
                    );
                    events.push(t);
                    if t.kind == TstampKind::Ack && t.key == key {
                        break;
                    }
                }
                // Time for stray events (there should be none) to show up.
                if i == 3 {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            // A late SND (direct transmit) may still wait: POLLERR until it is read.
            events.extend(c.tx_timestamps().unwrap());
            assert_eq!(c.poll().unwrap() & pollbits::POLLERR, 0);
            println!("{egress:?} direct {direct}: {events:?}");
            for i in 1..=3u32 {
                let key = i * LEN as u32 - 1;
                let of = |k: TstampKind| -> Vec<&TxTimestamp> {
                    events
                        .iter()
                        .filter(|t| t.key == key && t.kind == k)
                        .collect()
                };
                let (sched, snd, ack) = (
                    of(TstampKind::Sched),
                    of(TstampKind::Snd),
                    of(TstampKind::Ack),
                );
                // No loss on this link: one transmission, one event of each kind.
                assert_eq!(
                    (sched.len(), snd.len(), ack.len()),
                    (1, 1, 1),
                    "key {key}: {events:?}"
                );
                let (sched, snd, ack) = (sched[0], snd[0], ack[0]);
                let pos = |t: &TxTimestamp| events.iter().position(|e| e == t).unwrap();
                assert!(
                    sched.time <= snd.time && pos(sched) < pos(snd),
                    "{events:?}"
                );
                assert!(
                    sched.time <= ack.time && pos(sched) < pos(ack),
                    "{events:?}"
                );
                // SND before ACK always: the engine reports an SND still owed when the ACK
                // comes (Linux stamps SND in the driver's transmit, before any ACK).
                let in_order = snd.time <= ack.time && pos(snd) < pos(ack);
                assert!(in_order, "key {key}: {events:?}");
            }
            assert!(
                events.iter().all(|t| t.key % LEN as u32 == LEN as u32 - 1),
                "{events:?}"
            );
            drop(c);
            assert_eq!(server.join().unwrap(), 3 * LEN);
        }
    });
}

/// `POLLERR` while an event waits, and the reads: `recv_timestamp` takes the oldest,
/// `WouldBlock` when empty; `wait_timestamp` times out with `WouldBlock`.
#[test]
fn pollerr_and_empty_queue() {
    with_watchdog(Duration::from_secs(30), || {
        let (ha, hb) = hosts(Egress::Fq);
        let addr = SocketAddr::new(IpAddr::V4(B4), 81);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got.len()
        });
        let mut c = TcpStream::connect(&ha, addr).unwrap();
        c.set_timestamping(sof::TX_SCHED | sof::SOFTWARE | sof::OPT_ID)
            .unwrap();
        c.write_all(b"hello").unwrap();
        let t = c.wait_timestamp(Some(Duration::from_secs(5))).unwrap();
        assert_eq!((t.kind, t.key), (TstampKind::Sched, 4));
        // Only SCHED asked for: nothing else comes.
        let e = c
            .wait_timestamp(Some(Duration::from_millis(100)))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::WouldBlock);
        c.write_all(b"world").unwrap();
        let dl = std::time::Instant::now() + Duration::from_secs(5);
        while c.poll().unwrap() & pollbits::POLLERR == 0 {
            assert!(std::time::Instant::now() < dl, "no POLLERR");
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = c.recv_timestamp().unwrap();
        assert_eq!((t.kind, t.key), (TstampKind::Sched, 9));
        assert_eq!(c.poll().unwrap() & pollbits::POLLERR, 0);
        assert_eq!(
            c.recv_timestamp().unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        // Off: later writes are not reported.
        c.set_timestamping(0).unwrap();
        c.write_all(b"!").unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(c.tx_timestamps().unwrap().is_empty());
        drop(c);
        assert_eq!(server.join().unwrap(), 11);
    });
}

/// `SOF_TIMESTAMPING_OPT_STATS` (with `OPT_TSONLY`, as Linux requires: `EINVAL` without it):
/// every timestamp `tx_timestamps`/`wait_timestamp` returns carries the connection's
/// statistics at that moment (`TxTimestamp::stats`, Linux's `SCM_TIMESTAMPING_OPT_STATS`).
/// Three writes of `LEN` bytes, each waited on until its ACK: the data segments sent grow
/// from write to write, each write's ACK stamp counts exactly the bytes written so far, with
/// nothing left queued, the ACK's TTL and a congestion window of at least 10; SCHED and SND
/// carry no TTL; the blob is Linux's size (248 bytes, 256 with TTL).
#[test]
fn opt_stats_ride_with_the_timestamps() {
    with_watchdog(Duration::from_secs(60), || {
        const LEN: usize = 10_000;
        let (ha, hb) = hosts(Egress::Fq);
        let addr = SocketAddr::new(IpAddr::V4(B4), 83);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got.len()
        });
        let mut c = TcpStream::connect(&ha, addr).unwrap();
        let e = c.set_timestamping(ALL | sof::OPT_STATS).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EINVAL));
        let flags = ALL | sof::OPT_TSONLY | sof::OPT_STATS;
        c.set_timestamping(flags).unwrap();
        assert_eq!(c.timestamping().unwrap(), flags);
        let mut events: Vec<TxTimestamp> = Vec::new();
        let mut segs_before = 0;
        for i in 1..=3u64 {
            c.write_all(&vec![i as u8; LEN]).unwrap();
            let key = (i as usize * LEN - 1) as u32;
            loop {
                let t = c.wait_timestamp(Some(Duration::from_secs(10))).unwrap();
                events.push(t);
                if t.kind == TstampKind::Ack && t.key == key {
                    break;
                }
            }
            let ack = events
                .last()
                .unwrap()
                .stats
                .expect("stats on the ACK stamp");
            assert_eq!(ack.bytes_sent, i * LEN as u64, "{ack:?}");
            assert!(ack.data_segs_out > segs_before, "{ack:?}");
            segs_before = ack.data_segs_out;
            assert_eq!((ack.sndq_size, ack.bytes_notsent), (0, 0), "{ack:?}");
            assert!(ack.snd_cwnd >= 10, "{ack:?}");
            assert_eq!(ack.ttl, Some(64));
            assert_eq!(ack.encode().len(), 256);
        }
        events.extend(c.tx_timestamps().unwrap());
        assert!(events.iter().all(|t| t.stats.is_some()), "{events:?}");
        for t in events.iter().filter(|t| t.kind != TstampKind::Ack) {
            let st = t.stats.unwrap();
            assert_eq!(st.ttl, None);
            assert_eq!(t.payload().len(), 248);
            // A SCHED or SND stamp sees its own write sent.
            assert!(st.bytes_sent > u64::from(t.key), "{t:?}");
        }
        drop(c);
        assert_eq!(server.join().unwrap(), 3 * LEN);
    });
}

/// The kernel's own sockets (`kernel_sock::recv_tx_timestamps`, as `shallow bench` reads
/// them) hand out the kernel's `SCM_TIMESTAMPING_OPT_STATS` decoded into the same
/// `OptStats`: one 1000-byte write over the loopback in this process's namespace, whose SCHED
/// sees it sent and not acknowledged and whose ACK stamp sees it delivered with the ACK's
/// TTL (the values measured on 6.18 with a python test of the same write).
#[test]
fn kernel_sockets_decode_opt_stats() {
    use shallow_os::kernel_sock;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (_s, _) = l.accept().unwrap();
    let flags = ALL | sof::OPT_TSONLY | sof::OPT_STATS;
    // Linux too refuses OPT_STATS without OPT_TSONLY.
    let e = kernel_sock::set_timestamping(&c, ALL | sof::OPT_STATS).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(EINVAL));
    kernel_sock::set_timestamping(&c, flags).unwrap();
    c.write_all(&[7u8; 1000]).unwrap();
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !got.iter().any(|t: &TxTimestamp| t.kind == TstampKind::Ack) {
        assert!(std::time::Instant::now() < deadline, "{got:?}");
        std::thread::sleep(Duration::from_millis(5));
        got.extend(kernel_sock::recv_tx_timestamps(&c).unwrap());
    }
    let of = |k: TstampKind| {
        got.iter()
            .find(|t| t.kind == k)
            .and_then(|t| t.stats)
            .unwrap_or_else(|| panic!("no {k:?} with stats: {got:?}"))
    };
    let sched = of(TstampKind::Sched);
    assert_eq!(
        (
            sched.data_segs_out,
            sched.bytes_sent,
            sched.sndq_size,
            sched.ttl
        ),
        (1, 1000, 1000, None)
    );
    let ack = of(TstampKind::Ack);
    assert_eq!((ack.delivered, ack.sndq_size, ack.ttl), (2, 0, Some(64)));
    assert_eq!(ack.encode().len(), 256);
}

/// Linux's `sock_set_timestamping` errors: an unknown bit, `OPT_ID_TCP` without `OPT_ID`, and
/// `OPT_ID` on a listening socket are `EINVAL` (`InvalidInput`); the flags stay as they were.
#[test]
fn bad_flags_are_einval() {
    with_watchdog(Duration::from_secs(30), || {
        let (ha, hb) = hosts(Egress::Fq);
        let addr = SocketAddr::new(IpAddr::V4(B4), 82);
        let l = TcpListener::bind(&hb, addr).unwrap();
        let e = l
            .set_option(
                SockOpt::SoTimestamping,
                &OptVal::Int(i64::from(sof::OPT_ID)),
            )
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(EINVAL));
        // Without OPT_ID a listener takes the flags.
        l.set_option(
            SockOpt::SoTimestamping,
            &OptVal::Int(i64::from(sof::TX_ACK)),
        )
        .unwrap();
        let server = std::thread::spawn(move || l.accept().unwrap().0);
        let c = TcpStream::connect(&ha, addr).unwrap();
        for bad in [1u32 << 30, sof::MASK + 1, sof::OPT_ID_TCP | sof::TX_ACK] {
            let e = c.set_timestamping(bad).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(EINVAL), "{bad:#x}");
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
        }
        assert_eq!(c.timestamping().unwrap(), 0);
        c.set_timestamping(sof::OPT_ID | sof::OPT_ID_TCP | sof::TX_ACK)
            .unwrap();
        drop(server.join().unwrap());
    });
}

/// The median of `v` (sorted here); zero when empty.
fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Shallow sends 1 MiB in 64 KiB writes to a Linux receiver over the TUN, IPv4 and IPv6,
/// with SCHED, SND and ACK asked for (`OPT_ID`), first with the I/O thread transmitting,
/// then with direct transmit (the default). Each write waits for its own SCHED before the
/// next, so that no later write appends to its last buffer (which would move its mark, as in
/// Linux, and leave it unreported). Every write's last byte (key `64Ki·n − 1`) gets SCHED,
/// then SND, then one ACK, in time and in queue order, and no other key appears. Prints
/// the medians of SCHED→SND (the packet's residence in the host's queues: qdisc, TSQ and
/// the TUN write) and SND→ACK. With `OPT_TSONLY`: without it each entry carries (and is
/// charged) its packet, here some 30 KB, and the four or five entries that wait while the
/// test blocks in a write reach the 128 KiB receive buffer, so the next is dropped, as
/// Linux's `sock_queue_err_skb` drops it (`the_error_queue_is_bounded_by_the_receive_buffer`
/// in the engine's tests).
#[test]
fn timestamps_against_linux() {
    if !can_run("timestamps_against_linux", &[]) {
        return;
    }
    with_watchdog(Duration::from_secs(120), || {
        const WRITE: usize = 64 << 10;
        const WRITES: u32 = 16;
        let w = World::new("shts");
        for (round, direct) in [false, true].into_iter().enumerate() {
            w.host.set_direct_transmit(direct);
            for (n, ip) in peers().into_iter().enumerate() {
                let addr = SocketAddr::new(ip, 7300 + (round * 2 + n) as u16);
                let l = w.kernel_listener(addr);
                let kernel = w.kernel(move || {
                    let (mut s, _) = l.accept().unwrap();
                    let mut got = Vec::new();
                    s.read_to_end(&mut got).unwrap();
                    got.len()
                });
                let mut c = connect(&w.host, addr);
                c.set_timestamping(ALL | sof::OPT_TSONLY).unwrap();
                let buf = vec![0x5a; WRITE];
                let mut events: Vec<TxTimestamp> = Vec::new();
                let wait = |c: &TcpStream, events: &mut Vec<TxTimestamp>, kind, key| loop {
                    let t = c.wait_timestamp(Some(Duration::from_secs(10))).unwrap();
                    events.push(t);
                    if (t.kind, t.key) == (kind, key) {
                        break;
                    }
                };
                let start = std::time::Instant::now();
                for i in 1..=WRITES {
                    c.write_all(&buf).unwrap();
                    wait(&c, &mut events, TstampKind::Sched, i * WRITE as u32 - 1);
                }
                let last = WRITES * WRITE as u32 - 1;
                wait(&c, &mut events, TstampKind::Ack, last);
                let elapsed = start.elapsed();
                std::thread::sleep(Duration::from_millis(20));
                events.extend(c.tx_timestamps().unwrap());
                drop(c);
                assert_eq!(kernel.join().unwrap(), WRITES as usize * WRITE);
                let (mut res, mut rtt, mut late) = (Vec::new(), Vec::new(), 0);
                for i in 1..=WRITES {
                    let key = i * WRITE as u32 - 1;
                    let pos =
                        |k: TstampKind| events.iter().position(|t| (t.kind, t.key) == (k, key));
                    let count = |k: TstampKind| {
                        events
                            .iter()
                            .filter(|t| (t.kind, t.key) == (k, key))
                            .count()
                    };
                    let (Some(ps), Some(pd), Some(pa)) = (
                        pos(TstampKind::Sched),
                        pos(TstampKind::Snd),
                        pos(TstampKind::Ack),
                    ) else {
                        panic!("{ip} direct {direct}: key {key} lacks an event: {events:?}");
                    };
                    assert_eq!(count(TstampKind::Ack), 1, "{ip}: key {key}: {events:?}");
                    let (ts, td, ta) = (events[ps].time, events[pd].time, events[pa].time);
                    assert!(
                        ps < pd && ts <= td,
                        "{ip}: key {key}: SND before SCHED: {events:?}"
                    );
                    assert!(
                        ps < pa && ts <= ta,
                        "{ip}: key {key}: ACK before SCHED: {events:?}"
                    );
                    if pd > pa || td > ta {
                        late += 1;
                    }
                    assert_eq!(late, 0, "{ip}: key {key}: SND after ACK: {events:?}");
                    res.push(td - ts);
                    rtt.push(ta.saturating_duration_since(td));
                }
                // No key ends anything but a write: a blocking write that waits for buffer
                // space is several engine sends, and the engine marks only the last one (as
                // Linux's one sendmsg marks only the write's last byte).
                let mut extra: Vec<u32> = events
                    .iter()
                    .map(|t| t.key)
                    .filter(|k| k % WRITE as u32 != WRITE as u32 - 1)
                    .collect();
                extra.dedup();
                assert!(
                    extra.is_empty(),
                    "{ip}: keys ending no write {extra:?}: {events:?}"
                );
                println!(
                    "{ip} direct transmit {direct}: {WRITES} writes of {WRITE} B in {elapsed:?}, {} events; \
                     median SCHED->SND {:?}, median SND->ACK {:?}; SND after ACK {late}; \
                     keys ending no write {extra:?}",
                    events.len(),
                    median(&mut res),
                    median(&mut rtt)
                );
            }
        }
    });
}
