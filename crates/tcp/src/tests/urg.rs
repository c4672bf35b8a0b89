//! Urgent data (urg.rs) between two stacks: what one sends with `MSG_OOB` the other reads
//! apart with `MSG_OOB`, and the stream around it arrives whole and in order, the urgent
//! byte out of it unless `SO_OOBINLINE`.

use crate::harness::*;
use crate::msgflags::{MSG_DONTWAIT, MSG_OOB};
use crate::*;
use core::time::Duration;

fn connected(p: &mut Pair) -> (SocketId, SocketId) {
    p.connected(90)
}

fn read(p: &mut Pair, s: SocketId, flags: u32) -> Result<Vec<u8>, Errno> {
    let mut buf = [0u8; 4096];
    let n = p.b.recv(p.now, s, &mut buf, flags | MSG_DONTWAIT)?;
    Ok(buf[..n].to_vec())
}

#[test]
fn the_urgent_byte_is_read_apart_and_the_stream_stays_whole() {
    let mut p = Pair::new(41, LinkConfig::default());
    let (c, s) = connected(&mut p);
    assert_eq!(p.a.send(p.now, c, b"hello", 0), Ok(5));
    assert_eq!(p.a.send(p.now, c, b"ab!", MSG_OOB), Ok(3));
    assert_eq!(p.a.send(p.now, c, b"world", 0), Ok(5));
    p.run_for(Duration::from_millis(100));
    assert_ne!(p.b.poll(s).unwrap() & pollbits::POLLPRI, 0);
    // Up to the mark: everything before the urgent byte.
    assert_eq!(read(&mut p, s, 0).unwrap(), b"helloab");
    assert_eq!(p.b.ioctl(s, Ioctl::SiocAtmark), Ok(1));
    assert_eq!(read(&mut p, s, MSG_OOB).unwrap(), b"!");
    assert_eq!(read(&mut p, s, MSG_OOB), Err(Errno::EINVAL));
    assert_eq!(p.b.poll(s).unwrap() & pollbits::POLLPRI, 0);
    // The urgent byte is not in the stream.
    assert_eq!(read(&mut p, s, 0).unwrap(), b"world");
    assert_eq!(p.b.ioctl(s, Ioctl::SiocAtmark), Ok(0));

    // Inline: the byte stays in the stream (reads stop at the mark), MSG_OOB refuses.
    p.b.setsockopt(p.now, s, SockOpt::SoOobinline, &OptVal::Int(1))
        .unwrap();
    assert_eq!(p.a.send(p.now, c, b"xy#", MSG_OOB), Ok(3));
    p.run_for(Duration::from_millis(100));
    assert_eq!(read(&mut p, s, 0).unwrap(), b"xy");
    assert_eq!(read(&mut p, s, MSG_OOB), Err(Errno::EINVAL));
    assert_eq!(read(&mut p, s, 0).unwrap(), b"#");
    // Once acknowledged, the sender is out of urgent mode: no URG on later data.
    assert_eq!(p.a.send(p.now, c, b"z", 0), Ok(1));
    p.run_for(Duration::from_millis(100));
    assert_eq!(read(&mut p, s, 0).unwrap(), b"z");
    assert_eq!(p.b.poll(s).unwrap() & pollbits::POLLPRI, 0);
}
