//! Receive timestamps through the blocking API (`TcpStream::recv_with_timestamp` with
//! `SO_TIMESTAMPING`'s `RX_SOFTWARE | SOFTWARE` or `SO_TIMESTAMPNS`) and transmit timestamps
//! through the async one (`AsyncTcpStream::set_timestamping`, `recv_timestamp`), between
//! two hosts joined by an in-memory link (no root).

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use shallow_os::{link, Egress, Host, TcpListener, TcpStream};
use shallow_tcp::tstamp::sof;
use shallow_tcp::{OptVal, SockOpt, Stack};

const A4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B4: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn hosts() -> (Host, Host) {
    let (la, lb) = link::pair().unwrap();
    let mut a = Stack::new(13);
    a.add_address(IpAddr::V4(A4));
    let mut b = Stack::new(24);
    b.add_address(IpAddr::V4(B4));
    (
        Host::start_with(a, la, Egress::Fq).unwrap(),
        Host::start_with(b, lb, Egress::Fq).unwrap(),
    )
}

fn pair(port: u16) -> (Host, Host, TcpStream, TcpStream) {
    let (ha, hb) = hosts();
    let addr = SocketAddr::new(IpAddr::V4(B4), port);
    let l = TcpListener::bind(&hb, addr).unwrap();
    let c = TcpStream::connect(&ha, addr).unwrap();
    let (s, _) = l.accept().unwrap();
    c.set_nodelay(true).unwrap();
    (ha, hb, c, s)
}

/// Waits until `s` has `n` bytes to read.
fn wait_inq(s: &TcpStream, n: usize) {
    let dl = std::time::Instant::now() + Duration::from_secs(5);
    let mut buf = vec![0u8; n];
    while s
        .recv_with_flags(&mut buf, shallow_tcp::msgflags::MSG_PEEK)
        .unwrap()
        < n
    {
        assert!(std::time::Instant::now() < dl, "no data");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The receive time is the arrival of the data read, on the receiving host's clock, after
/// the write and before the read; without the option there is none; SO_TIMESTAMPNS gives it
/// too; end of stream has none.
#[test]
fn recv_with_timestamp_reports_the_arrival() {
    let (_ha, hb, mut c, mut s) = pair(90);
    let mut buf = [0u8; 1000];
    // Not asked: no time.
    c.write_all(b"plain").unwrap();
    wait_inq(&s, 5);
    assert_eq!(s.recv_with_timestamp(&mut buf, 0).unwrap(), (5, None));
    for (opt, v) in [
        (SockOpt::SoTimestamping, sof::RX_SOFTWARE | sof::SOFTWARE),
        (SockOpt::SoTimestampns, 1),
    ] {
        s.set_option(opt, &OptVal::Int(i64::from(v))).unwrap();
        let before = hb.now();
        c.write_all(&[7u8; 300]).unwrap();
        wait_inq(&s, 300);
        let arrived_by = hb.now();
        let (n, t) = s.recv_with_timestamp(&mut buf, 0).unwrap();
        assert_eq!(n, 300, "{opt:?}");
        let t = t.unwrap_or_else(|| panic!("{opt:?}: no receive time"));
        assert!(
            before <= t && t <= arrived_by,
            "{opt:?}: {before:?} {t:?} {arrived_by:?}"
        );
        s.set_option(opt, &OptVal::Int(0)).unwrap();
    }
    s.set_timestamping(sof::RX_SOFTWARE | sof::SOFTWARE)
        .unwrap();
    drop(c);
    let dl = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        match s.recv_with_timestamp(&mut buf, 0) {
            Ok((0, t)) => {
                assert_eq!(t, None, "end of stream has no time");
                break;
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        assert!(std::time::Instant::now() < dl);
    }
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).unwrap(), 0);
}

/// The async stream: `set_timestamping` and `recv_timestamp` waiting for each event of a
/// write (SCHED, SND, ACK of its last byte) while another task of the same stream waits to
/// read: each is woken by its own event (the reader by the data, the timestamp waiter by
/// POLLERR), neither takes the other's place. `recv_with_timestamp` reads with the time.
#[cfg(feature = "tokio")]
#[test]
fn async_recv_timestamp_waits_for_pollerr() {
    use shallow_os::AsyncTcpStream;
    use shallow_tcp::TstampKind;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_ha, _hb, c, mut s) = pair(91);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut c = AsyncTcpStream::from_std(c);
        let reader = AsyncTcpStream::from_std(c.get_ref().try_clone().unwrap());
        reader
            .get_ref()
            .set_option(SockOpt::SoTimestamping, &OptVal::Int(0))
            .unwrap();
        // A task waits to read what the server sends later.
        let read = tokio::spawn(async move {
            let mut r = reader;
            let mut b = [0u8; 5];
            r.read_exact(&mut b).await.map(|_| b)
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.set_timestamping(
            sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID,
        )
        .unwrap();
        // Nothing yet: the wait does not end by itself.
        let none = tokio::time::timeout(Duration::from_millis(50), c.recv_timestamp()).await;
        assert!(none.is_err(), "a timestamp before any write: {none:?}");
        c.write_all(&[1u8; 4000]).await.unwrap();
        let mut kinds = Vec::new();
        while kinds.last() != Some(&TstampKind::Ack) {
            let t = tokio::time::timeout(Duration::from_secs(5), c.recv_timestamp())
                .await
                .expect("woken by the event")
                .unwrap();
            assert_eq!(t.key, 3999);
            kinds.push(t.kind);
        }
        assert_eq!(kinds, [TstampKind::Sched, TstampKind::Snd, TstampKind::Ack]);
        assert!(!read.is_finished(), "the reader was woken for nothing");
        s.write_all(b"hello").unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("the reader is woken by the data")
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"hello");
        // Receive time through the async stream.
        c.get_ref()
            .set_timestamping(sof::RX_SOFTWARE | sof::SOFTWARE)
            .unwrap();
        let reply = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            s.write_all(b"again").unwrap();
            s
        });
        let mut buf = [0u8; 16];
        let (n, t) = tokio::time::timeout(Duration::from_secs(5), c.recv_with_timestamp(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf[..n], b"again");
        assert!(t.is_some());
        drop(reply.join().unwrap());
    });
}
