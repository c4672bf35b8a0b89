//! Measures the engine's own CPU cost per operation on this machine, as a cross-check of the
//! emulator's default cost table (`shallow_sim::cpu::CostTable`).
//!
//! Two `Stack`s are joined directly (no emulator): A sends, its packets (TSO super-segments)
//! go to B as GRO aggregates, B reads and ACKs, A takes the ACKs and the TX completions.
//! Each engine call is timed with the wall clock (this is an example, not a test).
//!
//! Run: `cargo run --release -p shallow-sim --example calibrate`.
//!
//! The figures of the last run and how the default cost table compares with them are in
//! the docs of `shallow_sim::cpu`.

use std::net::SocketAddr;
use std::time::{Duration, Instant as Wall};

use shallow_tcp::{Errno, Family, Instant, Stack, TxToken};

struct Acc {
    name: &'static str,
    calls: u64,
    units: u64,
    t: Duration,
}

impl Acc {
    fn new(name: &'static str) -> Acc {
        Acc {
            name,
            calls: 0,
            units: 0,
            t: Duration::ZERO,
        }
    }
    fn time<R>(&mut self, units: u64, f: impl FnOnce() -> R) -> R {
        let s = Wall::now();
        let r = f();
        self.t += s.elapsed();
        self.calls += 1;
        self.units += units;
        r
    }
    fn print(&self, unit: &str) {
        let ns = self.t.as_nanos() as f64;
        println!(
            "{:<28} {:>9} calls {:>10.0} ns/call {:>10.2} ns/{unit}",
            self.name,
            self.calls,
            ns / self.calls.max(1) as f64,
            ns / self.units.max(1) as f64
        );
    }
}

fn main() {
    for msg in [128usize, 65536] {
        run(msg);
    }
}

fn run(msg: usize) {
    println!("--- send size {msg} bytes");
    let a_ip = [10, 0, 0, 1].into();
    let b_ip = [10, 0, 1, 1].into();
    let mut a = Stack::new(1);
    let mut b = Stack::new(2);
    a.add_address(a_ip);
    b.add_address(b_ip);
    let l = b.socket(Family::V4).unwrap();
    b.bind(l, SocketAddr::new(b_ip, 5001)).unwrap();
    b.listen(l, 16).unwrap();
    let c = a.socket(Family::V4).unwrap();
    let mut now = Instant::from_millis(1);
    let _ = a.connect(now, c, SocketAddr::new(b_ip, 5001));
    let mut tokens: Vec<TxToken> = Vec::new();
    for _ in 0..4 {
        while let Some(t) = a.poll_transmit(now) {
            b.input(now, &t.data, t.gso_size);
            tokens.extend(t.token);
        }
        while let Some(t) = b.poll_transmit(now) {
            a.input(now, &t.data, t.gso_size);
        }
    }
    for t in tokens.drain(..) {
        a.tx_complete(now, t);
    }
    let (s, _) = b.accept(l).expect("connected");
    let data = vec![0x5au8; msg];
    let mut buf = vec![0u8; 1 << 20];
    let (mut send, mut input, mut recv, mut ack, mut txc) = (
        Acc::new("Stack::send (+poll_transmit)"),
        Acc::new("Stack::input data (B)"),
        Acc::new("Stack::recv (B)"),
        Acc::new("Stack::input ACK (A)"),
        Acc::new("Stack::tx_complete (A)"),
    );
    let mut in_segs = 0u64;
    let total: u64 = 256 << 20;
    let mut sent = 0u64;
    while sent < total {
        now = Instant::from_nanos(now.as_nanos() + 20_000);
        let mut out = Vec::new();
        let r = send.time(msg as u64, || {
            let r = a.send(now, c, &data, 0);
            while let Some(t) = a.poll_transmit(now) {
                out.push(t);
            }
            r
        });
        match r {
            Ok(n) => sent += n as u64,
            Err(Errno::EAGAIN) => {}
            Err(e) => panic!("send: {e}"),
        }
        for t in out {
            let segs = match t.gso_size {
                Some(g) => (t.data.len().saturating_sub(52))
                    .div_ceil(usize::from(g))
                    .max(1),
                None => 1,
            } as u64;
            in_segs += segs;
            input.time(segs, || b.input(now, &t.data, t.gso_size));
            tokens.extend(t.token);
        }
        loop {
            match recv.time(0, || b.recv(now, s, &mut buf, 0)) {
                Ok(n) if n > 0 => recv.units += n as u64,
                _ => break,
            }
        }
        while let Some(t) = b.poll_transmit(now) {
            ack.time(1, || a.input(now, &t.data, t.gso_size));
        }
        for t in tokens.drain(..) {
            txc.time(1, || a.tx_complete(now, t));
        }
        // ACKs may release more data.
        while let Some(t) = a.poll_transmit(now) {
            input.time(1, || b.input(now, &t.data, t.gso_size));
            tokens.extend(t.token);
        }
        while a.poll_wakeup().is_some() {}
        while b.poll_wakeup().is_some() {}
    }
    send.print("byte");
    input.print("segment");
    recv.print("byte");
    ack.print("ACK");
    txc.print("completion");
    println!("segments received: {in_segs}");
}
