//! Receive timestamps (`SO_TIMESTAMPING` with `SOFTWARE`, `SO_TIMESTAMP`, `SO_TIMESTAMPNS`)
//! between two stacks: `Stack::recvmsg` reports the arrival time of the last buffer a read
//! copied from, a buffer's time being that of its last coalesced segment (Linux's
//! `tcp_update_recv_tstamps` / `tcp_try_coalesce`, measured on 6.18 over loopback), and
//! nothing when the socket did not ask.

use crate::harness::*;
use crate::tstamp::sof;
use crate::*;
use core::net::SocketAddr;
use core::time::Duration;

/// A connection a → b with TCP_NODELAY on a; `lflags`: SO_TIMESTAMPING of b's listener.
fn connected(p: &mut Pair, lflags: u32) -> (SocketId, SocketId) {
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 91)).unwrap();
    p.b.listen(l, 4).unwrap();
    if lflags != 0 {
        p.b.setsockopt(
            p.now,
            l,
            SockOpt::SoTimestamping,
            &OptVal::Int(i64::from(lflags)),
        )
        .unwrap();
    }
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 91));
    p.run_for(Duration::from_millis(50));
    let (s, _) = p.b.accept(l).unwrap();
    p.a.setsockopt(p.now, c, SockOpt::TcpNodelay, &OptVal::Int(1))
        .unwrap();
    (c, s)
}

fn set(p: &mut Pair, s: SocketId, opt: SockOpt, v: u32) {
    p.b.setsockopt(p.now, s, opt, &OptVal::Int(i64::from(v)))
        .unwrap();
}

fn get(p: &mut Pair, s: SocketId, opt: SockOpt) -> i64 {
    p.b.getsockopt(s, opt).unwrap().int().unwrap()
}

/// Writes `n` bytes on `c` and runs the link `d`; returns the time the write was made.
fn write(p: &mut Pair, c: SocketId, n: usize, d: Duration) -> Instant {
    let t = p.now;
    assert_eq!(p.a.send(p.now, c, &vec![7u8; n], 0), Ok(n));
    p.run_for(d);
    t
}

fn recvmsg(p: &mut Pair, s: SocketId, len: usize, flags: u32) -> RecvMeta {
    let mut buf = vec![0u8; len];
    p.b.recvmsg(p.now, s, &mut buf, flags).unwrap()
}

/// The link's one-way delay is 5 ms: a segment written at `t` arrives in [t + 5 ms, t + 6 ms).
fn arrived_after(rx: Option<Instant>, t: Instant) -> bool {
    rx.is_some_and(|r| r >= t + Duration::from_millis(5) && r < t + Duration::from_millis(6))
}

#[test]
fn a_read_reports_the_time_of_the_last_buffer_it_copied_from() {
    let mut p = Pair::new(31, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    set(
        &mut p,
        s,
        SockOpt::SoTimestamping,
        sof::RX_SOFTWARE | sof::SOFTWARE,
    );
    let coalesced0 = p.b.counters().get("TcpExtTCPRcvCoalesce").unwrap_or(0);
    let t0 = write(&mut p, c, 100, Duration::from_millis(200));
    let t1 = write(&mut p, c, 100, Duration::from_millis(200));
    let coalesced = p.b.counters().get("TcpExtTCPRcvCoalesce").unwrap_or(0) > coalesced0;
    // Both at once: the second segment's time (its own buffer, or merged into the first's).
    let m = recvmsg(&mut p, s, 1000, 0);
    assert_eq!(m.len, 200);
    assert!(arrived_after(m.rx_time, t1), "{m:?} t1 {t1:?}");
    // Part of a buffer: with coalescing, the later segment's time (Linux over loopback);
    // without, the first's own.
    let t2 = write(&mut p, c, 100, Duration::from_millis(200));
    let t3 = write(&mut p, c, 100, Duration::from_millis(200));
    let m = recvmsg(&mut p, s, 50, 0);
    assert_eq!(m.len, 50);
    let want = if coalesced { t3 } else { t2 };
    assert!(
        arrived_after(m.rx_time, want),
        "{m:?} coalesced {coalesced}"
    );
    // MSG_PEEK reports too, and reads nothing.
    let m = recvmsg(&mut p, s, 1000, msgflags::MSG_PEEK);
    assert_eq!(m.len, 150);
    assert!(arrived_after(m.rx_time, t3));
    let m = recvmsg(&mut p, s, 1000, 0);
    assert_eq!(m.len, 150);
    assert!(arrived_after(m.rx_time, t3));
    // End of stream: no time.
    p.a.shutdown(p.now, c, Shutdown::Write).unwrap();
    p.run_for(Duration::from_millis(50));
    assert_eq!(
        recvmsg(&mut p, s, 1000, 0),
        RecvMeta {
            len: 0,
            rx_time: None
        }
    );
    let _ = t0;
}

#[test]
fn only_a_socket_that_asks_gets_receive_times() {
    let mut p = Pair::new(32, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    // Nothing asked, RX_SOFTWARE alone (generation without reporting) and SOFTWARE with the
    // receive filter but without RX_SOFTWARE (measured on 6.18: no control message for
    // either).
    for flags in [0, sof::RX_SOFTWARE, sof::SOFTWARE | sof::OPT_RX_FILTER] {
        set(&mut p, s, SockOpt::SoTimestamping, flags);
        write(&mut p, c, 100, Duration::from_millis(50));
        let m = recvmsg(&mut p, s, 1000, 0);
        assert_eq!(
            m,
            RecvMeta {
                len: 100,
                rx_time: None
            },
            "flags {flags:#x}"
        );
    }
    // SOFTWARE alone reports (6.18: without OPT_RX_FILTER, any stamped packet is reported).
    set(&mut p, s, SockOpt::SoTimestamping, sof::SOFTWARE);
    let t = write(&mut p, c, 100, Duration::from_millis(50));
    assert!(arrived_after(recvmsg(&mut p, s, 1000, 0).rx_time, t));
    // Data that came before the socket asked, while no socket of the host asked, has no
    // time.
    set(&mut p, s, SockOpt::SoTimestamping, 0);
    write(&mut p, c, 100, Duration::from_millis(50));
    set(
        &mut p,
        s,
        SockOpt::SoTimestamping,
        sof::RX_SOFTWARE | sof::SOFTWARE,
    );
    assert_eq!(recvmsg(&mut p, s, 1000, 0).rx_time, None);
    // recv() is unchanged.
    let t = write(&mut p, c, 100, Duration::from_millis(50));
    let mut buf = [0u8; 1000];
    assert_eq!(p.b.recv(p.now, s, &mut buf, 0), Ok(100));
    let _ = t;
}

#[test]
fn so_timestamp_and_so_timestampns_as_linux_sets_them() {
    let mut p = Pair::new(33, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    let both = |p: &mut Pair| {
        (
            get(p, s, SockOpt::SoTimestamp),
            get(p, s, SockOpt::SoTimestampns),
        )
    };
    // Measured on 6.18 with getsockopt after each setsockopt.
    assert_eq!(both(&mut p), (0, 0));
    set(&mut p, s, SockOpt::SoTimestamp, 7);
    assert_eq!(both(&mut p), (1, 0));
    set(&mut p, s, SockOpt::SoTimestampns, 1);
    assert_eq!(both(&mut p), (0, 1));
    set(&mut p, s, SockOpt::SoTimestamp, 1);
    assert_eq!(both(&mut p), (1, 0));
    set(&mut p, s, SockOpt::SoTimestampns, 1);
    set(&mut p, s, SockOpt::SoTimestamp, 0);
    assert_eq!(both(&mut p), (0, 0));
    for opt in [SockOpt::SoTimestamp, SockOpt::SoTimestampns] {
        set(&mut p, s, opt, 1);
        let t = write(&mut p, c, 100, Duration::from_millis(50));
        assert!(
            arrived_after(recvmsg(&mut p, s, 1000, 0).rx_time, t),
            "{opt:?}"
        );
        set(&mut p, s, opt, 0);
        write(&mut p, c, 100, Duration::from_millis(50));
        assert_eq!(recvmsg(&mut p, s, 1000, 0).rx_time, None, "{opt:?} off");
    }
    assert_eq!(SockOpt::from_linux(1, 29), Some(SockOpt::SoTimestamp));
    assert_eq!(SockOpt::from_linux(1, 35), Some(SockOpt::SoTimestampns));
}

#[test]
fn an_accepted_socket_inherits_the_listeners_flags() {
    let mut p = Pair::new(34, LinkConfig::default());
    let flags = sof::RX_SOFTWARE | sof::SOFTWARE;
    let (c, s) = connected(&mut p, flags);
    // Measured on 6.18: 24 on the listener, 24 on the accepted socket.
    assert_eq!(get(&mut p, s, SockOpt::SoTimestamping), i64::from(flags));
    let t = write(&mut p, c, 100, Duration::from_millis(50));
    assert!(arrived_after(recvmsg(&mut p, s, 1000, 0).rx_time, t));
}

#[test]
fn out_of_order_data_keeps_its_own_arrival_time() {
    // Every segment reordered by 20 ms with probability 1/2: data that waited in the
    // out-of-order queue moves to the receive queue with the time it came.
    let link = LinkConfig {
        reorder: 0.5,
        reorder_delay: Duration::from_millis(20),
        ..LinkConfig::default()
    };
    let mut p = Pair::new(35, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    p.ab = link;
    set(
        &mut p,
        s,
        SockOpt::SoTimestamping,
        sof::RX_SOFTWARE | sof::SOFTWARE,
    );
    let t0 = p.now;
    assert_eq!(p.a.send(p.now, c, &[1u8; 60_000], 0), Ok(60_000));
    p.run_for(Duration::from_millis(300));
    let ofo = p.b.counters().get("TcpExtTCPOFOQueue").unwrap_or(0);
    assert!(ofo > 0, "the link reordered nothing");
    let mut total = 0;
    while total < 60_000 {
        let m = recvmsg(&mut p, s, 1448, 0);
        assert!(m.len > 0);
        total += m.len;
        // Each buffer's time is an arrival: after the write plus the link's delay, before now.
        let t = m.rx_time.expect("stamped");
        assert!(t >= t0 + Duration::from_millis(5) && t <= p.now, "{t:?}");
    }
}

/// Linux stamps every arriving packet while any socket of the host asks for receive
/// timestamps (a host-wide switch, `net_enable_timestamp`), and reports a time only to a
/// socket that asks when it reads (measured on 6.18 over loopback in a fresh namespace: data
/// that arrived before the socket asked has a time exactly when another socket asked then;
/// data read after the socket stopped asking has none).
#[test]
fn another_socket_asking_stamps_what_arrives_before_this_one_asks() {
    let mut p = Pair::new(36, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    let other = p.b.socket(Family::V4).unwrap();
    set(&mut p, other, SockOpt::SoTimestamp, 1);
    let t = write(&mut p, c, 100, Duration::from_millis(50));
    // The other socket stops asking (closed) before this one asks: the time stays.
    p.b.close(p.now, other).unwrap();
    set(&mut p, s, SockOpt::SoTimestamp, 1);
    assert!(arrived_after(recvmsg(&mut p, s, 1000, 0).rx_time, t));
    // Nobody asks now but this socket: what arrives is stamped for it.
    let t = write(&mut p, c, 100, Duration::from_millis(50));
    assert!(arrived_after(recvmsg(&mut p, s, 1000, 0).rx_time, t));
    // It stops asking: data that arrives is not stamped, and even stamped data read now
    // reports nothing (tcp_recv_timestamp looks at the socket's flags when it reads).
    let other = p.b.socket(Family::V4).unwrap();
    set(&mut p, other, SockOpt::SoTimestampns, 1);
    set(&mut p, s, SockOpt::SoTimestamp, 0);
    write(&mut p, c, 100, Duration::from_millis(50));
    assert_eq!(recvmsg(&mut p, s, 1000, 0).rx_time, None);
    p.b.close(p.now, other).unwrap();
    write(&mut p, c, 100, Duration::from_millis(50));
    set(&mut p, s, SockOpt::SoTimestamp, 1);
    assert_eq!(
        recvmsg(&mut p, s, 1000, 0).rx_time,
        None,
        "arrived while no socket asked"
    );
}

/// The `_NEW` forms (64-bit times) as 6.18 reports them (measured with python3 over
/// loopback): one flag for all of them, set or cleared by whichever timestamp option was
/// last turned on (SO_TIMESTAMPING in either form sets it whatever its value); each
/// getsockopt reports its own form only.
#[test]
fn the_new_forms_share_one_flag_as_linux() {
    let mut p = Pair::new(37, LinkConfig::default());
    let (c, s) = connected(&mut p, 0);
    let forms = [
        SockOpt::SoTimestamp,
        SockOpt::SoTimestampns,
        SockOpt::SoTimestamping,
        SockOpt::SoTimestampNew,
        SockOpt::SoTimestampnsNew,
        SockOpt::SoTimestampingNew,
    ];
    let all = |p: &mut Pair| forms.map(|o| get(p, s, o));
    set(&mut p, s, SockOpt::SoTimestampNew, 1);
    assert_eq!(all(&mut p), [0, 0, 0, 1, 0, 0]);
    assert_eq!(p.b.timestamp_new(s), Ok(true));
    let t = write(&mut p, c, 10, Duration::from_millis(50));
    assert!(arrived_after(recvmsg(&mut p, s, 100, 0).rx_time, t));
    set(&mut p, s, SockOpt::SoTimestampnsNew, 1);
    assert_eq!(all(&mut p), [0, 0, 0, 1, 1, 0]);
    set(&mut p, s, SockOpt::SoTimestampnsNew, 0);
    assert_eq!(all(&mut p), [0; 6]);
    // Off leaves the flag; the next form turned on decides it.
    assert_eq!(p.b.timestamp_new(s), Ok(true));
    set(&mut p, s, SockOpt::SoTimestampns, 1);
    assert_eq!(all(&mut p), [0, 1, 0, 0, 0, 0]);
    assert_eq!(p.b.timestamp_new(s), Ok(false));
    set(&mut p, s, SockOpt::SoTimestampns, 0);
    let flags = sof::SOFTWARE | sof::RX_SOFTWARE;
    set(&mut p, s, SockOpt::SoTimestampingNew, flags);
    assert_eq!(
        all(&mut p),
        [0, 0, i64::from(flags), 0, 0, i64::from(flags)]
    );
    set(&mut p, s, SockOpt::SoTimestamping, flags);
    assert_eq!(all(&mut p), [0, 0, i64::from(flags), 0, 0, 0]);
    assert_eq!(p.b.timestamp_new(s), Ok(false));
}
