//! Scenarios shared by the engine's criterion bench (`benches/engine.rs`) and its
//! instruction-count runner (`examples/engine_insns.rs`): each is set up once, then stepped;
//! a step is one unit of the figure reported (a segment, an ACK, a transaction, a tick).
//!
//! The steps drive two stacks directly (no link, no event queue): what a step costs is the
//! engines' work and the few copies a device would make (a packet's bytes into a `Vec`).

#![allow(dead_code)]

use core::net::SocketAddr;
use core::time::Duration;
use shallow_tcp::harness::{LinkConfig, Pair, ADDR_B};
use shallow_tcp::{DeviceCaps, Errno, Family, Instant, OptVal, SockOpt, SocketId, Stack};

/// An established connection from `c` on A to `s` on B, over a link of `delay`.
pub fn connected(link: LinkConfig) -> (Pair, SocketId, SocketId) {
    let mut p = Pair::new(1, link);
    let l = p.b.socket(Family::V4).unwrap();
    p.b.bind(l, SocketAddr::new(ADDR_B, 80)).unwrap();
    p.b.listen(l, 16).unwrap();
    let c = p.a.socket(Family::V4).unwrap();
    let _ = p.a.connect(p.now, c, SocketAddr::new(ADDR_B, 80));
    p.run_for(Duration::from_millis(10));
    let (s, _) = p.b.accept(l).unwrap();
    (p, c, s)
}

/// Bytes moved from `c` (on A) to `s` (on B) through the harness's link until `bytes` more
/// have been read; the number of A→B wire segments it took is `p.segs[0]`'s increase.
pub fn transfer(p: &mut Pair, c: SocketId, s: SocketId, bytes: usize) -> usize {
    let chunk = vec![0x5au8; 256 * 1024];
    let mut rbuf = vec![0u8; 256 * 1024];
    let (mut sent, mut got) = (0, 0);
    while got < bytes {
        if sent < bytes {
            let n = (bytes - sent).min(chunk.len());
            match p.a.send(p.now, c, &chunk[..n], 0) {
                Ok(k) => sent += k,
                Err(Errno::EAGAIN) => {}
                Err(e) => panic!("{e}"),
            }
        }
        while let Ok(k) = p.b.recv(p.now, s, &mut rbuf, 0) {
            if k == 0 {
                break;
            }
            got += k;
        }
        p.drain_wakeups();
        if !p.step() {
            break;
        }
    }
    got
}

/// Bulk through the harness's link with one 1448-byte segment per packet (TSO off on A),
/// warmed past slow start and autotuning.
pub fn bulk_1448() -> (Pair, SocketId, SocketId) {
    let (mut p, c, s) = connected(LinkConfig {
        delay: Duration::from_micros(100),
        gro: false,
        ..Default::default()
    });
    p.a.set_device(DeviceCaps {
        gso: false,
        ..p.a.device()
    });
    transfer(&mut p, c, s, 32 << 20);
    (p, c, s)
}

/// The input path alone: `n` in-order 1448-byte data segments captured from A, with
/// advancing sequence numbers and valid checksums, replayed into B (`Input::step`), B's ACKs
/// discarded and the reader draining each time.
pub struct Input {
    pub b: Stack,
    pub s: SocketId,
    pub now: Instant,
    pkts: Vec<Vec<u8>>,
    next: usize,
    rbuf: Vec<u8>,
}

impl Input {
    pub fn new(n: usize) -> Input {
        let (mut p, cl, s) = connected(LinkConfig {
            delay: Duration::from_micros(10),
            ..Default::default()
        });
        let payload = vec![1u8; 1448];
        p.a.send(p.now, cl, &payload, 0).unwrap();
        let t = p.a.poll_transmit(p.now).unwrap();
        let template = t.data.clone();
        let pkts = (0..n as u32)
            .map(|i| {
                let mut pkt = template.clone();
                let seq =
                    u32::from_be_bytes([pkt[24], pkt[25], pkt[26], pkt[27]]).wrapping_add(i * 1448);
                pkt[24..28].copy_from_slice(&seq.to_be_bytes());
                pkt[36] = 0;
                pkt[37] = 0;
                let src = core::net::IpAddr::from([pkt[12], pkt[13], pkt[14], pkt[15]]);
                let dst = core::net::IpAddr::from([pkt[16], pkt[17], pkt[18], pkt[19]]);
                let tcp_len = (pkt.len() - 20) as u32;
                let ck = shallow_wire::checksum::combine(&[
                    shallow_wire::checksum::pseudo_header(src, dst, 6, tcp_len),
                    shallow_wire::checksum::sum(&pkt[20..]),
                ]);
                pkt[36..38].copy_from_slice(&ck.to_be_bytes());
                pkt
            })
            .collect();
        let b = std::mem::replace(p.b.stack_mut(), Stack::new(9));
        Input {
            b,
            s,
            now: p.now,
            pkts,
            next: 0,
            rbuf: vec![0u8; 65536],
        }
    }

    /// Segments left to replay.
    pub fn left(&self) -> usize {
        self.pkts.len() - self.next
    }

    /// One segment in (and its ACK, wake-up and read).
    #[inline(never)]
    pub fn step(&mut self) {
        self.now += Duration::from_micros(10);
        self.b.input(self.now, &self.pkts[self.next], None);
        self.next += 1;
        while self.b.poll_transmit(self.now).is_some() {}
        while self.b.poll_wakeup().is_some() {}
        let _ = self.b.recv(self.now, self.s, &mut self.rbuf, 0);
    }
}

/// Two stacks passing packets directly (no link, no event queue), the clock advancing by
/// `tick` per step: the output path (A's send builds its segments), the input path of data
/// (B), pure ACKs (A), each in a function of its own so that an instruction profile splits
/// them (`Duo::send`, `Duo::deliver_to_b`, `Duo::deliver_to_a`).
pub struct Duo {
    pub a: Stack,
    pub b: Stack,
    pub c: SocketId,
    pub s: SocketId,
    pub now: Instant,
    tick: Duration,
    wbuf: Vec<u8>,
    rbuf: Vec<u8>,
    /// Data packets A→B, ACK or data packets B→A, so far.
    pub to_b: u64,
    pub to_a: u64,
}

impl Duo {
    /// Connected, TSO off on both sides; `tick` of virtual time per step.
    pub fn new(tick: Duration) -> Duo {
        let (mut p, c, s) = connected(LinkConfig {
            delay: Duration::from_micros(10),
            ..Default::default()
        });
        for d in [&mut p.a, &mut p.b] {
            let caps = DeviceCaps {
                gso: false,
                ..d.device()
            };
            d.set_device(caps);
        }
        let a = std::mem::replace(p.a.stack_mut(), Stack::new(8));
        let b = std::mem::replace(p.b.stack_mut(), Stack::new(9));
        Duo {
            a,
            b,
            c,
            s,
            now: p.now,
            tick,
            wbuf: vec![0x5a; 1 << 20],
            rbuf: vec![0; 1 << 20],
            to_b: 0,
            to_a: 0,
        }
    }

    /// A writes `n` bytes (its segments are built in the call: the output path).
    #[inline(never)]
    pub fn send(&mut self, n: usize) -> usize {
        self.a
            .send(self.now, self.c, &self.wbuf[..n], 0)
            .unwrap_or(0)
    }

    /// B writes `n` bytes.
    #[inline(never)]
    pub fn send_b(&mut self, n: usize) -> usize {
        self.b
            .send(self.now, self.s, &self.wbuf[..n], 0)
            .unwrap_or(0)
    }

    /// Everything A has sent goes into B (each packet's TX completion first, as a device
    /// that sent it).
    #[inline(never)]
    pub fn deliver_to_b(&mut self) {
        while let Some(mut t) = self.a.poll_transmit(self.now) {
            t.linearize();
            if let Some(tok) = t.token.take() {
                self.a.tx_complete(self.now, tok);
            }
            self.b.input(self.now, &t.data, None);
            self.to_b += 1;
        }
    }

    /// Everything B has sent goes into A.
    #[inline(never)]
    pub fn deliver_to_a(&mut self) {
        while let Some(mut t) = self.b.poll_transmit(self.now) {
            t.linearize();
            if let Some(tok) = t.token.take() {
                self.b.tx_complete(self.now, tok);
            }
            self.a.input(self.now, &t.data, None);
            self.to_a += 1;
        }
    }

    /// B's reader takes what arrived.
    #[inline(never)]
    pub fn read_b(&mut self) -> usize {
        let mut got = 0;
        while let Ok(k) = self.b.recv(self.now, self.s, &mut self.rbuf, 0) {
            if k == 0 {
                break;
            }
            got += k;
        }
        got
    }

    /// A's reader takes what arrived.
    #[inline(never)]
    pub fn read_a(&mut self) -> usize {
        let mut got = 0;
        while let Ok(k) = self.a.recv(self.now, self.c, &mut self.rbuf, 0) {
            if k == 0 {
                break;
            }
            got += k;
        }
        got
    }

    /// Time passes: timers of both stacks, wake-ups drained.
    #[inline(never)]
    pub fn advance(&mut self) {
        self.now += self.tick;
        if self.a.poll_timeout().is_some_and(|t| t <= self.now) {
            self.a.handle_timeout(self.now);
        }
        if self.b.poll_timeout().is_some_and(|t| t <= self.now) {
            self.b.handle_timeout(self.now);
        }
        while self.a.poll_wakeup().is_some() {}
        while self.b.poll_wakeup().is_some() {}
    }

    /// Bulk, one step: A writes two segments' worth, they go to B, B reads, its ACKs go
    /// back. Two data segments and (with B's ACK on every second segment) one pure ACK.
    #[inline(never)]
    pub fn bulk_step(&mut self) {
        self.send(2 * 1448);
        self.deliver_to_b();
        self.read_b();
        self.deliver_to_a();
        self.advance();
    }

    /// One 1-byte request from A, answered by one byte from B (TCP_RR), both read.
    #[inline(never)]
    pub fn rr_step(&mut self) {
        self.send(1);
        self.deliver_to_b();
        self.read_b();
        self.send_b(1);
        self.deliver_to_a();
        self.read_a();
        self.advance();
    }
}

/// `n` established idle connections between A and B (as `examples/idle_conns.rs` opens
/// them), each client socket on A with keepalive (`TCP_KEEPIDLE` 1 s, `TCP_KEEPINTVL` 1 s),
/// its first probe due at a time spread over one second; the harness's link answers the
/// probes. [`Timers::tick`] advances the clock 1 ms (a jiffy of a HZ=1000 kernel) and runs
/// what is due on both stacks.
pub struct Timers {
    pub p: Pair,
    /// Timer-driven packets sent by A so far (keepalive probes).
    pub probes: u64,
}

impl Timers {
    pub fn new(n: usize) -> Timers {
        let mut p = Pair::new(
            7,
            LinkConfig {
                delay: Duration::from_micros(50),
                ..LinkConfig::default()
            },
        );
        p.a.sysctl_set("net.ipv4.ip_local_port_range", "1024 65535")
            .unwrap();
        let ports: Vec<u16> = (0..n.div_ceil(60_000).max(1))
            .map(|i| 80 + i as u16)
            .collect();
        let mut listeners = Vec::new();
        for &port in &ports {
            let l = p.b.socket(Family::V4).unwrap();
            p.b.bind(l, SocketAddr::new(ADDR_B, port)).unwrap();
            p.b.listen(l, 4096).unwrap();
            listeners.push(l);
        }
        p.run_for(Duration::from_millis(1));
        let mut opened = 0;
        let batch = 1000;
        while opened < n {
            let k = batch.min(n - opened);
            for i in 0..k {
                let port = ports[(opened + i) % ports.len()];
                let c = p.a.socket(Family::V4).unwrap();
                let now = p.now;
                let _ = p.a.connect(now, c, SocketAddr::new(ADDR_B, port));
                for (opt, v) in [
                    (SockOpt::SoKeepalive, 1),
                    (SockOpt::TcpKeepidle, 1),
                    (SockOpt::TcpKeepintvl, 1),
                ] {
                    p.a.setsockopt(now, c, opt, &OptVal::Int(v)).unwrap();
                }
            }
            // Spread the connections' keepalive deadlines over the second.
            p.run_for(Duration::from_millis(
                1000 / (n.div_ceil(batch) as u64).max(1),
            ));
            for &l in &listeners {
                while p.b.accept(l).is_ok() {}
            }
            opened += k;
        }
        p.run_for(Duration::from_millis(10));
        for &l in &listeners {
            while p.b.accept(l).is_ok() {}
        }
        p.drain_wakeups();
        Timers { p, probes: 0 }
    }

    /// One millisecond of the two stacks' lives: the timers due, the probes and their answers.
    #[inline(never)]
    pub fn tick(&mut self) {
        let before = self.p.segs[0];
        self.p.run_for(Duration::from_millis(1));
        self.probes += self.p.segs[0] - before;
    }
}
