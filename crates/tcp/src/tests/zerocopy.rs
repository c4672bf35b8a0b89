//! `MSG_ZEROCOPY` (zerocopy.rs) between two stacks over a slow link: the stack keeps the
//! application's buffer itself (no copy) and gives it up — the completion on the error
//! queue — only once every byte is acknowledged and every transmitted copy has left the
//! host; a device without scatter-gather makes the send a copy, and the completion says so.

use crate::harness::*;
use crate::msgflags::{MSG_EOR, MSG_ZEROCOPY};
use crate::*;
use core::time::Duration;

fn connected(p: &mut Pair, sg: bool) -> (SocketId, SocketId) {
    p.a.set_device(DeviceCaps { sg, ..p.a.device() });
    let (c, s) = p.connected(90);
    p.a.setsockopt(p.now, c, SockOpt::SoZerocopy, &OptVal::Int(1))
        .unwrap();
    p.a.set_nonblocking(c, true).unwrap();
    (c, s)
}

fn read_all(p: &mut Pair, s: SocketId) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn the_buffer_is_shared_until_acked_and_sent_then_completed() {
    // 10 Mbit/s: 20,000 bytes take 16 ms to leave the host.
    let link = LinkConfig {
        rate_bps: 10_000_000,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(31, link);
    let (c, s) = connected(&mut p, true);
    let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    let buf = Bytes::from(data.clone());
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&buf), MSG_ZEROCOPY, None),
        Ok(20_000)
    );
    // The stack holds the application's buffer itself, not a copy.
    assert!(!buf.is_unique());
    p.run_for(Duration::from_millis(5));
    assert_eq!(
        p.a.recv_zerocopy(c),
        Err(Errno::EAGAIN),
        "nothing acked yet"
    );
    assert_eq!(p.a.poll(c).unwrap() & pollbits::POLLERR, 0);
    p.run_for(Duration::from_millis(200));
    assert_ne!(p.a.poll(c).unwrap() & pollbits::POLLERR, 0);
    assert_eq!(
        p.a.recv_errqueue(c),
        Ok(ErrQueueEntry::Zerocopy(ZcNotice {
            lo: 0,
            hi: 0,
            copied: false
        }))
    );
    assert_eq!(p.a.poll(c).unwrap() & pollbits::POLLERR, 0);
    // Completed: the stack no longer holds it.
    assert!(buf.is_unique());
    assert_eq!(read_all(&mut p, s), data);
    // The next sends take ids 1 and 2; a copying send takes none.
    for n in [1_000usize, 2_000] {
        let b = Bytes::from(vec![1u8; n]);
        assert_eq!(p.a.sendmsg_bufs(p.now, c, &[b], MSG_ZEROCOPY, None), Ok(n));
        assert_eq!(p.a.send(p.now, c, &[2u8; 100], 0), Ok(100));
        p.run_for(Duration::from_millis(100));
    }
    // Two completions in a row share one entry. Each shared buffer left at once, so the
    // copying sends after them started buffers of their own: nothing was copied.
    assert_eq!(
        p.a.recv_zerocopy(c),
        Ok(ZcNotice {
            lo: 1,
            hi: 2,
            copied: false
        })
    );
    assert_eq!(p.a.recv_errqueue(c), Err(Errno::EAGAIN));
}

#[test]
fn a_device_without_scatter_gather_copies_and_says_so() {
    let mut p = Pair::new(32, LinkConfig::default());
    let (c, s) = connected(&mut p, false);
    let buf = Bytes::from(vec![9u8; 3_000]);
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&buf), MSG_ZEROCOPY, None),
        Ok(3_000)
    );
    // Copied into the send buffer at once.
    assert!(buf.is_unique());
    p.run_for(Duration::from_millis(200));
    assert_eq!(
        p.a.recv_zerocopy(c),
        Ok(ZcNotice {
            lo: 0,
            hi: 0,
            copied: true
        })
    );
    assert_eq!(read_all(&mut p, s), vec![9u8; 3_000]);
}

#[test]
fn opting_in_errors_and_sends_that_take_nothing() {
    let mut p = Pair::new(33, LinkConfig::default());
    let c = p.a.socket(Family::V4).unwrap();
    assert_eq!(
        p.a.setsockopt(p.now, c, SockOpt::SoZerocopy, &OptVal::Int(2)),
        Err(Errno::EINVAL)
    );
    p.a.setsockopt(p.now, c, SockOpt::SoZerocopy, &OptVal::Int(1))
        .unwrap();
    assert_eq!(p.a.getsockopt(c, SockOpt::SoZerocopy), Ok(OptVal::Int(1)));
    // Not connected: EPIPE, as Linux's sk_stream_wait_connect; the id is given back.
    let b = Bytes::from(vec![0u8; 10]);
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&b), MSG_ZEROCOPY, None),
        Err(Errno::EPIPE)
    );
    let (c2, _s2) = connected(&mut p, true);
    // Without SO_ZEROCOPY the flag is ignored: a plain copy, no completion.
    p.a.setsockopt(p.now, c2, SockOpt::SoZerocopy, &OptVal::Int(0))
        .unwrap();
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c2, std::slice::from_ref(&b), MSG_ZEROCOPY, None),
        Ok(10)
    );
    assert!(b.is_unique());
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.recv_zerocopy(c2), Err(Errno::EAGAIN));
    // On again: this send is id 0 (neither the failed nor the plain send took one).
    p.a.setsockopt(p.now, c2, SockOpt::SoZerocopy, &OptVal::Int(1))
        .unwrap();
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c2, std::slice::from_ref(&b), MSG_ZEROCOPY, None),
        Ok(10)
    );
    p.run_for(Duration::from_millis(100));
    assert_eq!(p.a.recv_zerocopy(c2).map(|z| (z.lo, z.hi)), Ok((0, 0)));
}

#[test]
fn a_reset_releases_what_was_never_acked() {
    let link = LinkConfig {
        rate_bps: 10_000_000,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(34, link);
    let (c, s) = connected(&mut p, true);
    // The peer stops reading: its window closes and our bytes wait unacked.
    p.b.setsockopt(
        p.now,
        s,
        SockOpt::SoLinger,
        &OptVal::Linger {
            onoff: true,
            secs: 0,
        },
    )
    .unwrap();
    let buf = Bytes::from(vec![5u8; 200_000]);
    let n =
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&buf), MSG_ZEROCOPY, None)
            .unwrap();
    assert!(n > 0);
    p.run_for(Duration::from_millis(3));
    assert_eq!(p.a.recv_zerocopy(c), Err(Errno::EAGAIN));
    // An abortive close: the RST purges our queues, and the completion follows once the
    // copies in the host are gone.
    p.b.close(p.now, s).unwrap();
    p.run_for(Duration::from_millis(500));
    assert_eq!(p.a.state(c), Ok(TcpState::Close));
    assert_eq!(p.a.recv_zerocopy(c).map(|z| (z.lo, z.hi)), Ok((0, 0)));
    assert!(
        buf.is_unique() || n < buf.len(),
        "the stack let go of the buffer"
    );
}

#[test]
fn retransmissions_hold_the_completion_and_every_byte_arrives() {
    // 5% loss both ways: some bytes go out several times; a completion comes only once the
    // stack holds no byte of its sends (each buffer is then the caller's alone), once per
    // id, in order.
    let link = LinkConfig {
        rate_bps: 50_000_000,
        loss: 0.05,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(35, link);
    let (c, s) = connected(&mut p, true);
    let mut bufs: Vec<Bytes> = Vec::new();
    // The last id each buffer's bytes went with.
    let mut last_id: Vec<u32> = Vec::new();
    let mut ids = 0u32;
    let mut got = Vec::new();
    let mut next = 0u32;
    let check = |p: &mut Pair, bufs: &[Bytes], last_id: &[u32], next: &mut u32| {
        while let Ok(z) = p.a.recv_zerocopy(c) {
            assert_eq!(z.lo, *next, "each id once, in order");
            *next = z.hi + 1;
            for (b, &l) in bufs.iter().zip(last_id) {
                if l <= z.hi {
                    assert!(b.is_unique(), "completed while the stack holds it");
                }
            }
        }
    };
    for i in 0..20u32 {
        bufs.push(Bytes::from(vec![i as u8; 30_000]));
        last_id.push(u32::MAX);
        let mut off = 0;
        while off < bufs[i as usize].len() {
            let rest = bufs[i as usize].slice(off..);
            match p.a.sendmsg_bufs(p.now, c, &[rest], MSG_ZEROCOPY, None) {
                Ok(n) => {
                    off += n;
                    *last_id.last_mut().unwrap() = ids;
                    ids += 1;
                }
                Err(Errno::EAGAIN) => p.run_for(Duration::from_millis(20)),
                Err(e) => panic!("{e:?}"),
            }
            got.extend(read_all(&mut p, s));
            check(&mut p, &bufs, &last_id, &mut next);
        }
    }
    for _ in 0..200 {
        p.run_for(Duration::from_millis(50));
        got.extend(read_all(&mut p, s));
    }
    while let Ok(z) = p.a.recv_zerocopy(c) {
        assert_eq!(z.lo, next);
        next = z.hi + 1;
    }
    assert!(
        p.a.tcp_info(p.now, c).unwrap().total_retrans > 0,
        "no loss happened"
    );
    assert_eq!(got, bufs.concat());
    assert_eq!(next, ids, "every id completed");
    assert!(bufs.iter().all(|b| b.is_unique()));
}

/// Moves packets between the two stacks by hand (no loss, no delay) for `rounds` ms, and
/// hands every packet A sends to `look` before it is gathered and delivered.
fn pump_by_hand(p: &mut Pair, rounds: u32, mut look: impl FnMut(&Transmit)) {
    for _ in 0..rounds {
        for _ in 0..64 {
            let mut moved = false;
            while let Some(mut t) = p.a.poll_transmit(p.now) {
                moved = true;
                look(&t);
                if let Some(tok) = t.token.take() {
                    p.a.tx_complete(p.now, tok);
                }
                t.linearize();
                p.b.input(p.now, &t.data, t.gso_size);
            }
            while let Some(mut t) = p.b.poll_transmit(p.now) {
                moved = true;
                if let Some(tok) = t.token.take() {
                    p.b.tx_complete(p.now, tok);
                }
                t.linearize();
                p.a.input(p.now, &t.data, t.gso_size);
            }
            if !moved {
                break;
            }
        }
        p.now += Duration::from_millis(1);
        p.a.handle_timeout(p.now);
        p.b.handle_timeout(p.now);
    }
}

/// Bytes of `piece` that lie inside one of `bufs` (the application's memory).
fn in_user_memory(piece: &Bytes, bufs: &[Bytes]) -> usize {
    let p = piece.as_ptr() as usize;
    let inside = bufs.iter().any(|b| {
        let s = b.as_ptr() as usize;
        p >= s && p + piece.len() <= s + b.len()
    });
    if inside {
        piece.len()
    } else {
        0
    }
}

/// Several buffers in one call, a send whose bytes join the unsent tail of the one before,
/// and copied bytes behind them all share buffers of the write queue; each application's
/// buffer stays a fragment of its own (Linux's `skb_shinfo(skb)->frags`): packets carry
/// pieces that point into the application's memory, nothing is copied, and the completion
/// says so.
#[test]
fn buffers_joined_in_one_skb_stay_fragments_and_are_not_copied() {
    let mut p = Pair::new(33, LinkConfig::default());
    let (c, s) = connected(&mut p, true);
    // Corked, so every byte below waits in the write queue and joins its neighbours.
    p.a.setsockopt(p.now, c, SockOpt::TcpCork, &OptVal::Int(1))
        .unwrap();
    let mut bufs: Vec<Bytes> = (1..=3u8).map(|i| Bytes::from(vec![i; 5_001])).collect();
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, &bufs, MSG_ZEROCOPY, None),
        Ok(15_003)
    );
    let more = Bytes::from(vec![7u8; 3_000]);
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&more), MSG_ZEROCOPY, None),
        Ok(3_000)
    );
    assert_eq!(p.a.send(p.now, c, &[8u8; 500], 0), Ok(500));
    let last = Bytes::from(vec![9u8; 2_000]);
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&last), MSG_ZEROCOPY, None),
        Ok(2_000)
    );
    bufs.push(more);
    bufs.push(last);
    assert!(bufs.iter().all(|b| !b.is_unique()), "held, not copied");
    p.a.setsockopt(p.now, c, SockOpt::TcpCork, &OptVal::Int(0))
        .unwrap();
    let (mut shared, mut most_pieces, mut payload) = (0, 0, 0);
    pump_by_hand(&mut p, 300, |t| {
        most_pieces = most_pieces.max(t.frags.pieces());
        payload += t.frags.len();
        shared += t
            .frags
            .iter()
            .map(|f| in_user_memory(f, &bufs))
            .sum::<usize>();
        // The checksum covers the pieces as one run, odd boundaries included.
        let mut whole = t.data.clone();
        t.frags.copy_to(&mut whole);
        assert!(shallow_wire::segment::tcp_checksum_ok(&whole));
    });
    assert!(most_pieces >= 2, "a packet spans two buffers");
    assert_eq!(payload, 20_503);
    assert_eq!(
        shared, 20_003,
        "every byte of the application's buffers left from its own memory"
    );
    let mut want = Vec::new();
    for (i, b) in bufs.iter().enumerate() {
        if i == 4 {
            want.extend_from_slice(&[8u8; 500]);
        }
        want.extend_from_slice(b);
    }
    assert_eq!(read_all(&mut p, s), want);
    // Three sends, ids 0..=2, completed in order (completions that follow on share one
    // entry of the error queue); none was copied.
    let mut got = Vec::new();
    while let Ok(n) = p.a.recv_zerocopy(c) {
        got.push(n);
    }
    assert_eq!(
        got,
        vec![ZcNotice {
            lo: 0,
            hi: 2,
            copied: false
        }]
    );
    assert!(bufs.iter().all(|b| b.is_unique()), "all given back");
}

#[test]
fn a_blocking_send_that_extends_the_previous_completion_and_sleeps_keeps_its_id() {
    // A blocking send whose first try extends the completion of the send before (its bytes
    // would join that send's unsent tail) and finds no room sleeps and comes back: one
    // send, so it keeps its id, as Linux's sendmsg keeps the extended uarg while it sleeps
    // (it once gave the id back and then joined the completion without one: 2 sends, 1 id,
    // and a blocking caller waiting for id 1 waited for ever).
    let link = LinkConfig {
        rate_bps: 10_000_000,
        ..LinkConfig::default()
    };
    let mut p = Pair::new(36, link);
    let (c, s) = connected(&mut p, true);
    p.a.set_nonblocking(c, false).unwrap();
    let a = Bytes::from(vec![1u8; 30_000]);
    let b = Bytes::from(vec![2u8; 30_000]);
    // Send 0, taken whole and left (partly) unsent behind the initial window.
    assert_eq!(
        p.a.sendmsg_bufs(
            p.now,
            c,
            std::slice::from_ref(&a),
            MSG_ZEROCOPY | MSG_EOR,
            None
        ),
        Ok(30_000)
    );
    assert_eq!(p.a.zerocopy_next_id(c), Ok(1));
    // No room now (the send buffer shrunk under what is queued): send 1 finds none.
    p.a.setsockopt(p.now, c, SockOpt::SoSndbuf, &OptVal::Int(1))
        .unwrap();
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&b), MSG_ZEROCOPY, None),
        Err(Errno::EAGAIN)
    );
    assert_eq!(
        p.a.zerocopy_next_id(c),
        Ok(2),
        "the sleeping send holds id 1"
    );
    // Its room comes back: the same send goes on.
    p.a.setsockopt(p.now, c, SockOpt::SoSndbuf, &OptVal::Int(1 << 20))
        .unwrap();
    p.run_for(Duration::from_millis(5));
    assert_eq!(
        p.a.sendmsg_bufs(p.now, c, std::slice::from_ref(&b), MSG_ZEROCOPY, None),
        Ok(30_000)
    );
    assert_eq!(p.a.zerocopy_next_id(c), Ok(2));
    p.run_for(Duration::from_millis(300));
    let mut ids = Vec::new();
    while let Ok(z) = p.a.recv_zerocopy(c) {
        ids.push((z.lo, z.hi));
    }
    assert_eq!(ids, vec![(0, 1)], "both sends completed, one id each");
    assert_eq!(read_all(&mut p, s), [a.clone(), b.clone()].concat());
    assert!(a.is_unique() && b.is_unique());
}
