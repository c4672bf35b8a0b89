//! Transmit timestamps (`SO_TIMESTAMPING`, tstamp.rs) between two stacks over a slow link:
//! each write's last byte is reported when it entered the host queue (SCHED), when the
//! device took it (SND, its TX completion) and when it was acknowledged (ACK), in that
//! order, with the write's key; the error queue raises POLLERR and never blocks.

use crate::harness::*;
use crate::tstamp::sof;
use crate::*;
use core::time::Duration;

fn connected(p: &mut Pair) -> (SocketId, SocketId) {
    p.connected(90)
}

#[test]
fn each_write_reports_sched_then_snd_then_ack_for_its_last_byte() {
    // 10 Mbit/s: a 10,000-byte write takes 8 ms to leave, so SND trails SCHED.
    let link = LinkConfig {
        rate_bps: 10_000_000,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(21, link);
    let (c, s) = connected(&mut p);
    // OPT_ID needs a connection.
    let l2 = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.setsockopt(
            p.now,
            l2,
            SockOpt::SoTimestamping,
            &OptVal::Int(i64::from(sof::OPT_ID))
        ),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        p.a.setsockopt(p.now, c, SockOpt::SoTimestamping, &OptVal::Int(1 << 20)),
        Err(Errno::EINVAL),
        "unknown flags"
    );
    let flags = sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID;
    p.a.setsockopt(
        p.now,
        c,
        SockOpt::SoTimestamping,
        &OptVal::Int(i64::from(flags)),
    )
    .unwrap();
    p.a.setsockopt(p.now, c, SockOpt::TcpNodelay, &OptVal::Int(1))
        .unwrap();
    assert_eq!(p.a.recv_tx_timestamp(c), Err(Errno::EAGAIN));
    let t0 = p.now;
    // Each write goes before the next is made (a write appending to a buffer not yet sent
    // takes over its mark: the_later_write_into_an_unsent_buffer_takes_its_mark).
    for _ in 0..3 {
        assert_eq!(p.a.send(p.now, c, &[1u8; 10_000], 0), Ok(10_000));
        p.run_for(Duration::from_millis(12));
    }
    p.run_for(Duration::from_millis(200));
    assert_ne!(p.a.poll(c).unwrap() & crate::pollbits::POLLERR, 0);
    let mut evs = Vec::new();
    while let Ok(e) = p.a.recv_tx_timestamp(c) {
        evs.push(e);
    }
    assert_eq!(p.a.poll(c).unwrap() & crate::pollbits::POLLERR, 0);
    for (i, key) in [9_999u32, 19_999, 29_999].into_iter().enumerate() {
        let of = |k: TstampKind| {
            evs.iter()
                .find(|e| e.key == key && e.kind == k)
                .unwrap_or_else(|| panic!("no {k:?} for write {i}: {evs:?}"))
                .time
        };
        let (sched, snd, ack) = (
            of(TstampKind::Sched),
            of(TstampKind::Snd),
            of(TstampKind::Ack),
        );
        assert!(
            sched >= t0 && sched <= snd && snd < ack,
            "{sched:?} {snd:?} {ack:?}"
        );
        // Each write leaves 8 ms (10 KB at 10 Mbit/s) after its first byte could.
        assert!(snd - t0 >= Duration::from_millis(8), "{:?}", snd - t0);
        // ACK: one way of 5 ms after the whole write arrived, and 5 ms back.
        assert!(ack - snd >= Duration::from_millis(10));
    }
    // ACK once per write; a retransmission of a marked buffer reports SCHED and SND again,
    // as Linux's clone of the marked skb does.
    assert_eq!(evs.iter().filter(|e| e.kind == TstampKind::Ack).count(), 3);
    assert!(evs.len() >= 9);
    // Without OPT_ID the key is 0.
    p.a.setsockopt(
        p.now,
        c,
        SockOpt::SoTimestamping,
        &OptVal::Int(i64::from(sof::TX_SCHED | sof::SOFTWARE)),
    )
    .unwrap();
    assert_eq!(p.a.send(p.now, c, &[2u8; 100], 0), Ok(100));
    p.run_for(Duration::from_millis(50));
    let e = p.a.recv_tx_timestamp(c).unwrap();
    assert_eq!((e.kind, e.key), (TstampKind::Sched, 0));
    assert_eq!(p.a.recv_tx_timestamp(c), Err(Errno::EAGAIN));
    let _ = s;
}

#[test]
fn the_error_queue_is_bounded_by_the_receive_buffer() {
    let mut p = Pair::new(22, LinkConfig::default());
    let (c, _) = connected(&mut p);
    p.a.setsockopt(p.now, c, SockOpt::SoRcvbuf, &OptVal::Int(2048))
        .unwrap();
    let flags = sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::OPT_ID;
    p.a.setsockopt(
        p.now,
        c,
        SockOpt::SoTimestamping,
        &OptVal::Int(i64::from(flags)),
    )
    .unwrap();
    p.a.setsockopt(p.now, c, SockOpt::TcpNodelay, &OptVal::Int(1))
        .unwrap();
    for _ in 0..50 {
        assert_eq!(p.a.send(p.now, c, &[1u8; 100], 0), Ok(100));
        p.run_for(Duration::from_millis(20));
    }
    let mut n = 0;
    while p.a.recv_tx_timestamp(c).is_ok() {
        n += 1;
    }
    // A 4,608-byte receive buffer (SO_RCVBUF 2048, doubled, at least the minimum) holds
    // five 768-byte events; the rest were dropped, not queued without bound.
    assert!(n > 0 && n <= 6, "{n}");
}

#[test]
fn the_later_write_into_an_unsent_buffer_takes_its_mark() {
    // Measured on Linux 6.18 (crates/drill/scripts/tstamp-corked-writes.pkt): under TCP_CORK
    // two writes share a buffer and only the second's last byte is reported.
    let mut p = Pair::new(23, LinkConfig::default());
    let (c, _) = connected(&mut p);
    let flags = sof::TX_SCHED | sof::SOFTWARE | sof::OPT_ID;
    p.a.setsockopt(
        p.now,
        c,
        SockOpt::SoTimestamping,
        &OptVal::Int(i64::from(flags)),
    )
    .unwrap();
    p.a.setsockopt(p.now, c, SockOpt::TcpCork, &OptVal::Int(1))
        .unwrap();
    assert_eq!(p.a.send(p.now, c, &[1u8; 100], 0), Ok(100));
    assert_eq!(p.a.send(p.now, c, &[1u8; 100], 0), Ok(100));
    p.a.setsockopt(p.now, c, SockOpt::TcpCork, &OptVal::Int(0))
        .unwrap();
    p.run_for(Duration::from_millis(20));
    let e = p.a.recv_tx_timestamp(c).unwrap();
    assert_eq!((e.kind, e.key), (TstampKind::Sched, 199));
    assert_eq!(p.a.recv_tx_timestamp(c), Err(Errno::EAGAIN));
}
