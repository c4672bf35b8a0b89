//! The receive window against Linux 6.18, measured with `shallow drill record` (packetdrill
//! through tun, `SO_MEMINFO` and `TCP_INFO` read after each event): the initial window, the
//! scaling ratio learnt from received buffers, `tcp_grow_window` and the window clamp.

use crate::packet::{self, OutOpt, SegOut};
use crate::*;
use core::net::SocketAddr;
use core::time::Duration;
use shallow_wire::TcpFlags;

const LOCAL: &str = "192.168.0.1:8080";
const REMOTE: &str = "192.0.2.1:40000";

fn raw(seq: u32, ack: u32, fl: TcpFlags, win: u16, opts: &[OutOpt], payload: &[u8]) -> Vec<u8> {
    packet::build(&SegOut {
        urgent: 0,
        local: REMOTE.parse().unwrap(),
        remote: LOCAL.parse().unwrap(),
        seq,
        ack,
        flags: fl,
        window: win,
        tos: 0,
        ttl: 64,
        ident: 0,
        opts,
        payload: crate::payload::Payload::Flat(payload),
        md5: None,
    })
    .unwrap()
}

/// (flags, window field, seq, ack) of each packet the stack sends now.
fn out(st: &mut Stack, now: Instant) -> Vec<(TcpFlags, u16, u32, u32)> {
    let mut v = Vec::new();
    while let Some(t) = st.poll_transmit(now) {
        let ip = shallow_wire::IpPacket::parse(&t.data).unwrap();
        let tcp = shallow_wire::TcpPacket::new_checked(ip.payload()).unwrap();
        v.push((tcp.flags(), tcp.window(), tcp.seq(), tcp.ack()));
        if let Some(tok) = t.token {
            st.tx_complete(now, tok);
        }
    }
    v
}

/// The packetdrill set-up (defaults.sh, tun truesize) with `tcp_rmem` = `rmem`.
fn stack(rmem: &str) -> Stack {
    let mut st = Stack::new(7);
    st.add_address("192.168.0.1".parse().unwrap());
    st.sysctl_set("net.ipv4.tcp_rmem", rmem).unwrap();
    st.sysctl_set("net.ipv4.tcp_wmem", "4096 262144 4194304")
        .unwrap();
    st.set_device(DeviceCaps {
        orphan_at_xmit: true,
        ..st.device()
    });
    st.set_device(DeviceCaps {
        rx_truesize: RxTruesize::TunKmalloc,
        ..st.device()
    });
    st
}

const MSS1460_WS7: &[OutOpt] = &[
    OutOpt::Mss(1460),
    OutOpt::Nop,
    OutOpt::Nop,
    OutOpt::SackOk,
    OutOpt::Nop,
    OutOpt::Wscale(7),
];
const MSS1460_NOWS: &[OutOpt] = &[OutOpt::Mss(1460), OutOpt::Nop, OutOpt::Nop, OutOpt::SackOk];

/// What a passive open showed: the SYN-ACK's window and, after each data segment, the
/// window field of its (quick) ACK and `rcv_ssthresh`.
#[derive(Debug)]
struct Seen {
    synack_win: u16,
    wins: Vec<u16>,
    ssthresh: Vec<u32>,
}

/// listen (SO_RCVBUF `rcvbuf` first, if any); `< S` with `syn_opts`; the third ACK; accept;
/// then one in-order segment of each size in `sizes`, 10 ms apart.
fn passive(rmem: &str, rcvbuf: Option<i64>, syn_opts: &[OutOpt], sizes: &[usize]) -> Seen {
    let mut st = stack(rmem);
    let mut now = Instant::from_secs(1);
    let l = st.socket(Family::V4).unwrap();
    st.setsockopt(now, l, SockOpt::SoReuseaddr, &OptVal::Int(1))
        .unwrap();
    if let Some(b) = rcvbuf {
        st.setsockopt(now, l, SockOpt::SoRcvbuf, &OptVal::Int(b))
            .unwrap();
    }
    st.bind(l, LOCAL.parse().unwrap()).unwrap();
    st.listen(l, 1).unwrap();
    st.input(now, &raw(0, 0, TcpFlags::SYN, 65535, syn_opts, &[]), None);
    let o = out(&mut st, now);
    assert_eq!(o.len(), 1);
    let (synack_win, iss) = (o[0].1, o[0].2.wrapping_add(1));
    now += Duration::from_millis(100);
    st.input(now, &raw(1, iss, TcpFlags::ACK, 1000, &[], &[]), None);
    let (s, peer) = st.accept(l).unwrap();
    assert_eq!(peer, REMOTE.parse::<SocketAddr>().unwrap());
    let mut seen = Seen {
        synack_win,
        wins: Vec::new(),
        ssthresh: Vec::new(),
    };
    let mut seq = 1u32;
    for &n in sizes {
        now += Duration::from_millis(10);
        let data = vec![0u8; n];
        st.input(
            now,
            &raw(seq, iss, TcpFlags::ACK | TcpFlags::PSH, 1000, &[], &data),
            None,
        );
        seq += n as u32;
        let o = out(&mut st, now);
        assert_eq!(o.len(), 1, "one quick ACK per segment");
        assert_eq!(o[0].3, seq);
        seen.wins.push(o[0].1);
        seen.ssthresh
            .push(st.tcp_info(now, s).unwrap().rcv_ssthresh);
    }
    seen
}

/// `tcp_rmem[1]` 540000 (packetdrill's default): the SYN-ACK says 65535, but the window
/// behind it is 268640 (184 × 1460), so the first ACK offers what is left of it (field
/// 1049 at scale 8), not a window grown from 64 KiB. The 1000-byte segment lowers the ratio
/// (111/256) and the 1460-byte one raises it (162/256); from there each full segment grows
/// rcv_ssthresh by 2 × advmss.
#[test]
fn initial_window_beyond_64k_then_scaling_ratio() {
    let s = passive(
        "4096 540000 15728640",
        None,
        MSS1460_WS7,
        &[100, 1000, 1460, 1460, 1460, 1460],
    );
    assert_eq!(s.synack_win, 65535);
    assert_eq!(s.wins, [1049, 1046, 1058, 1069, 1081, 1092]);
}

/// `tcp_rmem[1]` 1000000: window 499320 (342 × 1460) behind a SYN-ACK of 65535.
#[test]
fn initial_window_one_megabyte_buffer() {
    let s = passive(
        "4096 1000000 15728640",
        None,
        MSS1460_WS7,
        &[100, 1000, 1460, 1460, 1460, 1460],
    );
    assert_eq!(s.synack_win, 65535);
    assert_eq!(s.wins, [1951, 1948, 1960, 1971, 1983, 1994]);
}

/// `tcp_rmem[1]` 65536, read through `TCP_INFO` on Linux 6.18: rcv_ssthresh 31308 after the
/// handshake (clamp 32768 less one advmss), 28416 after the 1000-byte segment
/// (65536 × 111 / 256), 34408 after the first 1460-byte one (the window offered, 31488, plus
/// 2920), then 36571, bound by the free space (65536 − 7744 of rmem_alloc) × 162 / 256.
#[test]
fn small_buffer_ratio_and_grow_window() {
    let s = passive(
        "4096 65536 15728640",
        None,
        MSS1460_WS7,
        &[100, 1000, 1460, 1460, 1460, 1460],
    );
    assert_eq!(s.synack_win, 32120);
    assert_eq!(s.wins, [126, 123, 135, 143, 138, 133]);
    assert_eq!(s.ssthresh, [31308, 28416, 34408, 36571, 36571, 36571]);
}

/// `tcp_rmem[1]` 100000: the room-bound growth (56963) and a window held by what was
/// already offered (218).
#[test]
fn grow_window_bound_by_room() {
    let s = passive(
        "4096 100000 15728640",
        None,
        MSS1460_WS7,
        &[100, 1000, 1460, 1460, 1460, 1460],
    );
    assert_eq!(s.synack_win, 49640);
    assert_eq!(s.wins, [194, 191, 203, 214, 223, 218]);
}

/// Without window scaling the unscaled window is rounded down to the peer's segment size:
/// 33580 = 23 × 1460, 36500 = 25 × 1460.
#[test]
fn no_window_scaling_small_buffer() {
    let s = passive(
        "4096 65536 15728640",
        None,
        MSS1460_NOWS,
        &[100, 1000, 1460, 1460],
    );
    assert_eq!(s.synack_win, 32120);
    assert_eq!(s.wins, [32020, 31020, 33580, 36500]);
}

/// Without window scaling and a large buffer every window field is 65535.
#[test]
fn no_window_scaling_large_buffer() {
    let s = passive(
        "4096 540000 15728640",
        None,
        MSS1460_NOWS,
        &[100, 1000, 1460, 1460],
    );
    assert_eq!(s.synack_win, 65535);
    assert_eq!(s.wins, [65535; 4]);
}

/// SO_RCVBUF 100000 on the listener (rcvbuf 200000, clamp 100000, scale 1): the window
/// behind the SYN-ACK's 65535 is 99280 = 68 × 1460; a ratio above one half lifts the clamp
/// past the locked buffer's half (50550 × 2 = 101100).
#[test]
fn so_rcvbuf_locked_clamp() {
    let s = passive(
        "4096 540000 15728640",
        Some(100000),
        MSS1460_WS7,
        &[100, 1000, 1460, 1460],
    );
    assert_eq!(s.synack_win, 65535);
    assert_eq!(s.wins, [49590, 49090, 50550, 52010]);
}

/// SO_RCVBUF 20000 (rcvbuf 40000, scale 0): 18980 = 13 × 1460 behind the SYN-ACK; a window
/// below what was offered keeps the offered right edge (17880, 18980).
#[test]
fn so_rcvbuf_small() {
    let s = passive(
        "4096 540000 15728640",
        Some(20000),
        MSS1460_WS7,
        &[100, 1000, 1460, 1460],
    );
    assert_eq!(s.synack_win, 18980);
    assert_eq!(s.wins, [18880, 17880, 20440, 18980]);
}

/// An active open rounds its initial window to the whole advertised MSS, even with
/// timestamps on (it knows no peer timestamp yet): `tcp_rmem[1]` 131072 gives a SYN window
/// of 64240 = 44 × 1460; with 540000 the ACK of the SYN-ACK offers 268640 (field 1050).
#[test]
fn active_open_initial_window() {
    for (rmem, syn_win, ack_win) in [
        ("4096 131072 6291456", 64240, 502),
        ("4096 540000 15728640", 65535, 1050),
        ("4096 2000000 15728640", 65535, 3901),
    ] {
        let mut st = stack(rmem);
        let now = Instant::from_secs(1);
        let c = st.socket(Family::V4).unwrap();
        st.bind(c, LOCAL.parse().unwrap()).unwrap();
        let _ = st.connect(now, c, REMOTE.parse().unwrap());
        let o = out(&mut st, now);
        assert_eq!(o[0].1, syn_win, "{rmem}");
        let iss = o[0].2.wrapping_add(1);
        let now = now + Duration::from_millis(100);
        st.input(
            now,
            &raw(
                0,
                iss,
                TcpFlags::SYN | TcpFlags::ACK,
                65535,
                MSS1460_WS7,
                &[],
            ),
            None,
        );
        let o = out(&mut st, now);
        assert_eq!(o[0].1, ack_win, "{rmem}");
    }
}

/// The tun device's buffer sizes, as `SO_MEMINFO` showed them: 832 for a 140-byte packet,
/// 2304 for 1040- and 1500-byte ones.
#[test]
fn tun_truesize() {
    let t = RxTruesize::TunKmalloc;
    assert_eq!(t.truesize(100, 40), 832);
    assert_eq!(t.truesize(1000, 40), 2304);
    assert_eq!(t.truesize(1460, 40), 2304);
    assert!(!t.coalesces());
    assert_eq!(RxTruesize::Overhead.truesize(1460, 40), 1460 + SKB_OVERHEAD);
}

/// A passive open with packetdrill's `tcp_rmem` (540000) and a wscale-7 peer, accepted:
/// (stack, socket, our first sequence number after the SYN, now).
fn accepted() -> (Stack, SocketId, u32, Instant) {
    let mut st = stack("4096 540000 15728640");
    let mut now = Instant::from_secs(1);
    let l = st.socket(Family::V4).unwrap();
    st.bind(l, LOCAL.parse().unwrap()).unwrap();
    st.listen(l, 1).unwrap();
    st.input(
        now,
        &raw(0, 0, TcpFlags::SYN, 65535, MSS1460_WS7, &[]),
        None,
    );
    let iss = out(&mut st, now)[0].2.wrapping_add(1);
    now += Duration::from_millis(10);
    st.input(now, &raw(1, iss, TcpFlags::ACK, 1000, &[], &[]), None);
    let (s, _) = st.accept(l).unwrap();
    (st, s, iss, now)
}

/// A buffer that waited out of order moves to the receive queue as it is (`tcp_ofo_queue`):
/// a tun device's keeps its kmalloc truesize (832 for 1 byte), it is not charged anew as
/// payload + `SKB_OVERHEAD`. Fuzz seed 70152 (kernel 6.18): 500 bytes, then byte 1037 out
/// of order, then 501..1037 filling the hole; the kernel's ACK of the whole still offers
/// window field 1049, which the old charge (1281) had cut to 1048.
#[test]
fn out_of_order_buffer_keeps_its_truesize_when_it_moves() {
    let (mut st, s, iss, now) = accepted();
    let seg = |st: &mut Stack, now, seq: u32, n: usize| {
        let data = vec![0u8; n];
        st.input(now, &raw(seq, iss, TcpFlags::ACK, 1000, &[], &data), None);
        out(st, now)
    };
    seg(&mut st, now, 1, 500);
    seg(&mut st, now, 1037, 1);
    // 540- and 41-byte packets: 1280 and 832 bytes of tun buffer.
    assert_eq!(st.meminfo(s).unwrap().rmem_alloc, 1280 + 832);
    let o = seg(&mut st, now, 501, 536);
    assert_eq!(st.meminfo(s).unwrap().rmem_alloc, 1280 + 832 + 1280);
    assert_eq!(
        (o[0].3, o[0].1),
        (1038, 1049),
        "ACK of all 1037 bytes, window field"
    );
}

/// A partly duplicate segment is queued as it came (`tcp_data_queue`: D-SACK for the old
/// part, then the whole skb to the receive queue), so it costs the whole packet's buffer: a
/// 1040-byte tun packet charges 2304 even though only its last 500 bytes are new. Fuzz seed
/// 70031 (kernel 6.18): the ACK after it offers window field 1048, as the whole charge gives.
#[test]
fn partly_duplicate_segment_costs_its_whole_buffer() {
    let (mut st, s, iss, now) = accepted();
    st.input(
        now,
        &raw(1, iss, TcpFlags::ACK, 1000, &[], &[0u8; 500]),
        None,
    );
    out(&mut st, now);
    assert_eq!(st.meminfo(s).unwrap().rmem_alloc, 1280);
    st.input(
        now,
        &raw(1, iss, TcpFlags::ACK, 1000, &[], &[0u8; 1000]),
        None,
    );
    let o = out(&mut st, now);
    assert_eq!(o[0].3, 1001, "the new 500 bytes are acknowledged");
    assert_eq!(st.meminfo(s).unwrap().rmem_alloc, 1280 + 2304);
}
