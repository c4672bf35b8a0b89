//! [`Driver`]: the engine and its egress, the loop of `ARCHITECTURE.md` written once for every
//! substrate (the emulator's hosts, the Linux I/O threads, the packetdrill runner, the test
//! harness).
//!
//! Between the engine's `poll_transmit` and the device sit the host's TX queues, each with an
//! optional qdisc from `shallow-qdisc` ([`Egress`]); the engine learns a qdisc's verdict at the
//! transmit through the [`EgressGate`] the driver installs, as Linux's TCP learns
//! `NET_XMIT_DROP` from `dev_queue_xmit`. A substrate runs the same steps around its device:
//!
//! 1. inputs: [`Stack::handle_packet`], [`Stack::tx_complete`] (through the driver, which
//!    dereferences to its [`Stack`]), [`Driver::run_timers`] when a deadline is due;
//! 2. egress: [`Driver::transmit`] moves the engine's output into the qdisc of each packet's
//!    queue (a packet admitted at the transmit leaves the ledger and enters the queue; a drop
//!    completes its TX token), then [`Driver::poll_release`] gives the device what its
//!    queue's qdisc releases now;
//! 3. outputs: [`Driver::poll_deadline`] (the engine's next timer and the queue's
//!    `qdisc_watchdog`), [`Stack::poll_wakeup`].
//!
//! A substrate that enqueues later than the transmit (the emulator releases a packet when the
//! CPU time of the call that sent it ends) drains [`Stack::poll_transmit`] itself and gives
//! each packet to [`Egress::enqueue`] when its time comes: the packet was admitted at the
//! transmit, its place is held in the ledger meanwhile, and the enqueue cannot refuse it.
//!
//! Sans-IO like the engine: no clock, no thread; the substrate says what time it is. The
//! egress is shared with the gate inside the engine ([`EgressHandle`], a mutex); the driver
//! never holds its lock across a call into the engine.

mod egress;
mod packet;

pub use egress::{queue_of, BoxedQdisc, Egress, EgressGate, EgressHandle, TxQueue};
pub use packet::{gso_segment_len, gso_segments, qdisc_pkt_len, split_token, EgressPacket};

use core::ops::{Deref, DerefMut};
use core::time::Duration;

use shallow_qdisc::QdiscPacket;

use crate::socket::Transmit;
use crate::stack::Stack;
use crate::time::Instant;

/// How long a queue whose qdisc holds packets but names no release time waits before it looks
/// again (it should not happen: whatever was due was dequeued), rather than spin.
const STUCK_RECHECK: Duration = Duration::from_millis(1);

/// The engine ([`Stack`]) with its egress: one or several TX queues (Linux's `mq`, picked by
/// flow hash, [`queue_of`]), each with an optional qdisc over the substrate's packet type `P`
/// and the ledger of packets admitted at the transmit, and the gate the engine asks at the
/// transmit. Socket calls, inputs and getters go straight to the engine: the driver
/// dereferences to its [`Stack`]. See the module docs for the loop.
pub struct Driver<P: QdiscPacket + Send + 'static = Transmit> {
    stack: Stack,
    egress: EgressHandle<P>,
}

impl<P: QdiscPacket + Send + 'static> Driver<P> {
    /// A driver of `stack` with one TX queue and no qdisc: packets go to the device in the
    /// order the engine emits them, and nothing refuses one at the transmit.
    pub fn new(stack: Stack) -> Driver<P> {
        Driver::with_egress(stack, EgressHandle::single(None))
    }

    /// A driver of `stack` over `egress` (shared with whoever else needs the qdiscs, e.g. the
    /// emulator's NIC); the gate is installed when some queue has a qdisc.
    pub fn with_egress(stack: Stack, egress: EgressHandle<P>) -> Driver<P> {
        let mut d = Driver { stack, egress };
        d.install_gate();
        d
    }

    /// Replaces the egress (a device reconfigured at run time, `tc qdisc replace`), and the
    /// engine's gate with it.
    pub fn set_egress(&mut self, egress: EgressHandle<P>) {
        self.egress = egress;
        self.install_gate();
    }

    /// Replaces the qdisc of TX queue `q` (`tc qdisc replace dev D root ...` at run time; `None`:
    /// no qdisc) and returns the old one with whatever it still holds, whose TX completions
    /// are the caller's to run. The engine's gate follows: installed while some queue has a
    /// qdisc, removed otherwise (replacing any gate set by hand).
    pub fn set_qdisc(&mut self, q: usize, qdisc: Option<BoxedQdisc<P>>) -> Option<BoxedQdisc<P>> {
        let old = std::mem::replace(&mut self.egress.lock().queue_mut(q).qdisc, qdisc);
        self.install_gate();
        old
    }

    fn install_gate(&mut self) {
        let gate: Option<Box<dyn crate::TxGate>> = if self.egress.lock().any_qdisc() {
            Some(Box::new(EgressGate(self.egress.clone())))
        } else {
            None
        };
        self.stack.set_tx_gate(gate);
    }

    /// Describes the device anew ([`Stack::set_device`]: a device reconfigured at run time).
    pub fn set_device(&mut self, caps: crate::DeviceCaps) {
        self.stack.set_device(caps);
    }

    /// The egress (its TX queues and qdiscs).
    pub fn egress(&self) -> &EgressHandle<P> {
        &self.egress
    }

    /// The engine.
    pub fn stack(&self) -> &Stack {
        &self.stack
    }

    /// The engine, mutably (socket calls).
    pub fn stack_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }

    /// Runs the engine's timers if their deadline has come ([`Stack::handle_timeout`]); true
    /// if it did. Under a substrate's engine lock a deadline another thread already handled
    /// has moved on, so it does not fire twice.
    pub fn run_timers(&mut self, now: Instant) -> bool {
        if self.stack.poll_timeout().is_some_and(|t| t <= now) {
            self.stack.handle_timeout(now);
            true
        } else {
            false
        }
    }

    /// When queue `q`'s loop must run next: the engine's next timer
    /// ([`Stack::poll_timeout`]) or the time queue `q`'s qdisc may release a packet it holds
    /// (Linux's `qdisc_watchdog`, [`Egress::next_wakeup`]), whichever is first; `now` while
    /// packets wait without a qdisc.
    pub fn poll_deadline(&self, q: usize, now: Instant) -> Option<Instant> {
        let engine = self.stack.poll_timeout();
        let e = self.egress.lock();
        let queue = if e.queue(q).backlog_packets() > 0 {
            Some(e.next_wakeup(q, now).unwrap_or(now + STUCK_RECHECK))
        } else {
            None
        };
        match (engine, queue) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next packet queue `q`'s device may send at `now`: what waits without a qdisc, then
    /// what the qdisc releases ([`Egress::dequeue`]). Its TX completion
    /// ([`Stack::tx_complete`]) is the substrate's to run when the device is done with it.
    pub fn poll_release(&mut self, q: usize, now: Instant) -> Option<P> {
        self.egress.lock().dequeue(q, now)
    }

    /// Refusals at the transmit since the last call: the qdiscs' drops that never became
    /// packets ([`Egress::take_refused`]).
    pub fn take_refused(&mut self) -> u64 {
        self.egress.lock().take_refused()
    }
}

impl<P: EgressPacket> Driver<P> {
    /// The egress step: moves everything the engine wants sent ([`Stack::poll_transmit`]) into
    /// the queue of its flow (`on_queue` is told each packet's queue), where the qdisc takes
    /// it (it was admitted at the transmit) or, without a qdisc, it waits for
    /// [`Driver::poll_release`]. A packet a qdisc drops all the same has its TX token
    /// completed here (Linux's `kfree_skb` runs the destructor); returns how many were
    /// dropped.
    pub fn transmit(&mut self, now: Instant, mut on_queue: impl FnMut(usize)) -> u64 {
        let mut dropped = 0;
        while let Some(t) = self.stack.poll_transmit(now) {
            let p = P::from_transmit(t);
            // The lock is taken for the enqueue alone: the completion of a drop calls into the
            // engine, whose gate takes it.
            let (q, r) = {
                let mut e = self.egress.lock();
                let q = e.queue_of(p.flow_hash());
                (q, e.enqueue(q, now, p))
            };
            on_queue(q);
            if let Err(p) = r {
                dropped += 1;
                if let Some(token) = p.into_token() {
                    self.stack.tx_complete(now, token);
                }
            }
        }
        dropped
    }
}

impl<P: QdiscPacket + Send + 'static> Deref for Driver<P> {
    type Target = Stack;
    fn deref(&self) -> &Stack {
        &self.stack
    }
}

impl<P: QdiscPacket + Send + 'static> DerefMut for Driver<P> {
    fn deref_mut(&mut self) -> &mut Stack {
        &mut self.stack
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Errno, Family, SocketId, SKB_TX_OVERHEAD};
    use shallow_qdisc::Fifo;

    /// One turn of `x`'s loop, its packets handed to `y` and completed at once; returns how
    /// many it sent.
    fn step(x: &mut Driver, y: &mut Driver, now: Instant) -> usize {
        let mut sent = 0;
        x.run_timers(now);
        x.transmit(now, |q| assert_eq!(q, 0));
        while let Some(t) = x.poll_release(0, now) {
            sent += 1;
            y.handle_packet(now, crate::RxPacket::linear(&t.data).gso(t.gso_size));
            if let Some(tok) = t.token {
                x.tx_complete(now, tok);
            }
        }
        sent
    }

    /// Two drivers joined by hand, `a` behind `pfifo limit` `limit`: returns the packets `a`
    /// sent, the refusals at its transmit, and the bytes `b` received.
    fn run(limit: Option<usize>) -> (usize, u64, usize) {
        let (mut a, mut b, l, c, mut now) = connecting(|a| {
            if let Some(l) = limit {
                let q: BoxedQdisc<Transmit> = Box::new(Fifo::pfifo(l));
                assert!(a.set_qdisc(0, Some(q)).is_none());
            }
        });
        let (mut sent, mut got, mut acc) = (0, 0, None);
        for _ in 0..100 {
            sent += step(&mut a, &mut b, now);
            step(&mut b, &mut a, now);
            if acc.is_none() {
                if let Ok((s, _)) = b.accept(l) {
                    acc = Some(s);
                    a.send(now, c, &[7u8; 3000], 0).unwrap();
                }
            }
            if let Some(s) = acc {
                let mut buf = [0u8; 4096];
                got += b.recv(now, s, &mut buf, 0).unwrap_or(0);
            }
            now += Duration::from_millis(1);
        }
        (sent, a.take_refused(), got)
    }

    #[test]
    fn without_a_qdisc_the_driver_is_the_plain_loop() {
        let (sent, refused, got) = run(None);
        assert!(sent > 0);
        assert_eq!((refused, got), (0, 3000));
    }

    /// `pfifo limit 0` refuses everything at the transmit: nothing leaves, nothing is lost.
    #[test]
    fn a_qdisc_that_refuses_is_asked_at_the_transmit() {
        let (_, refused, got) = run(Some(0));
        assert!(refused > 0);
        assert_eq!(got, 0);
        let (_, refused, got) = run(Some(100));
        assert_eq!((refused, got), (0, 3000));
    }

    /// A driver over a shared egress of several queues: each flow keeps its queue, and the
    /// qdisc of another queue never sees its packets.
    #[test]
    fn an_egress_of_several_queues_is_shared_with_the_substrate() {
        let qdiscs: Vec<Option<BoxedQdisc<Transmit>>> = vec![
            Some(Box::new(Fifo::pfifo(10))),
            None,
            Some(Box::new(Fifo::pfifo(0))),
        ];
        let egress = EgressHandle::new(Egress::new(qdiscs));
        let d: Driver = Driver::with_egress(Stack::new(1), egress.clone());
        assert_eq!(d.egress().lock().queues(), 3);
        assert_eq!(egress.lock().queue_of(u32::MAX), 2);
        assert_eq!(d.poll_deadline(1, Instant::from_secs(1)), None);
    }

    /// Two drivers joined by hand, `a` set up by `setup` first, `b` listening on
    /// 10.0.0.2:80 and `a`'s socket connecting to it (its SYN queued, nothing moved yet).
    /// Returns the drivers, `b`'s listener, `a`'s socket and the time.
    fn connecting(
        setup: impl FnOnce(&mut Driver),
    ) -> (Driver, Driver, SocketId, SocketId, Instant) {
        let mut a: Driver = Driver::new(Stack::new(1));
        let mut b: Driver = Driver::new(Stack::new(2));
        setup(&mut a);
        a.add_address("10.0.0.1".parse().unwrap());
        b.add_address("10.0.0.2".parse().unwrap());
        let srv = "10.0.0.2:80".parse().unwrap();
        let l = b.socket(Family::V4).unwrap();
        b.bind(l, srv).unwrap();
        b.listen(l, 4).unwrap();
        let c = a.socket(Family::V4).unwrap();
        let now = Instant::from_secs(1);
        assert_eq!(a.connect(now, c, srv), Err(Errno::EINPROGRESS));
        (a, b, l, c, now)
    }

    /// [`connecting`], then the handshake and `b`'s accept. Returns the drivers, `a`'s
    /// socket, `b`'s accepted one and the time.
    fn connected(setup: impl FnOnce(&mut Driver)) -> (Driver, Driver, SocketId, SocketId, Instant) {
        let (mut a, mut b, l, c, mut now) = connecting(setup);
        for _ in 0..4 {
            step(&mut a, &mut b, now);
            step(&mut b, &mut a, now);
            now += Duration::from_millis(1);
        }
        let (s, _) = b.accept(l).unwrap();
        (a, b, c, s, now)
    }

    /// A tbf whose burst is below a TSO packet cuts it into wire segments (tbf_segment); the
    /// socket is told at the transmit and charged each segment's own truesize
    /// (SKB_TX_OVERHEAD + payload, `tcp_gso_segment`), released segment by segment as they
    /// leave; once all have left nothing stays charged.
    #[test]
    fn a_tbf_cut_charges_each_segment() {
        let (mut a, _b, c, _s, now) = connected(|a| {
            a.set_device(crate::DeviceCaps {
                gso: true,
                ..crate::DeviceCaps::default()
            });
            let q: BoxedQdisc<Transmit> = Box::new(shallow_qdisc::Tbf::new(
                shallow_qdisc::Rate::mbps(8),
                3000,
                1_000_000,
            ));
            a.set_qdisc(0, Some(q));
        });
        let mut now = now;
        // 10 full segments: one TSO packet within the initial window.
        let mss = a.tcp_info(now, c).unwrap().snd_mss as usize;
        a.send(now, c, &vec![7u8; 10 * mss], 0).unwrap();
        a.transmit(now, |_| {});
        let charged = a.meminfo(c).unwrap().wmem_alloc as usize;
        assert_eq!(charged, 10 * (SKB_TX_OVERHEAD as usize + mss));
        assert_eq!(a.egress().lock().queue(0).backlog_packets(), 10);
        // The segments leave one by one (8 Mbit/s, a 3000-byte burst), each releasing its own.
        let mut left = charged;
        while a.egress().lock().queue(0).backlog_packets() > 0 {
            let Some(t) = a.poll_release(0, now) else {
                now = (a.egress().lock().next_wakeup(0, now)).expect("the tbf names a time");
                continue;
            };
            let tok = t.token.expect("every segment has a token");
            assert_eq!(tok.truesize() as usize, SKB_TX_OVERHEAD as usize + mss);
            a.tx_complete(now, tok);
            left -= SKB_TX_OVERHEAD as usize + mss;
            assert_eq!(a.meminfo(c).unwrap().wmem_alloc as usize, left);
        }
        assert_eq!(left, 0);
    }

    /// `TcpInSegs` counts received packets (a GRO/TSO packet once), `TcpOutSegs` wire
    /// segments, as Linux 6.18 counts them.
    #[test]
    fn in_segs_count_packets_out_segs_wire_segments() {
        let (mut a, mut b, c, _s, now) = connected(|a| {
            a.set_device(crate::DeviceCaps {
                gso: true,
                ..crate::DeviceCaps::default()
            })
        });
        let count = |d: &Driver, k: &str| d.counters().get(k).unwrap_or(0);
        let (in0, out0) = (count(&b, "TcpInSegs"), count(&a, "TcpOutSegs"));
        let mss = a.tcp_info(now, c).unwrap().snd_mss as usize;
        a.send(now, c, &vec![7u8; 10 * mss], 0).unwrap();
        let packets = step(&mut a, &mut b, now) as u64;
        assert!(packets < 10, "TSO packets: {packets}");
        assert_eq!(count(&a, "TcpOutSegs") - out0, 10);
        assert_eq!(count(&b, "TcpInSegs") - in0, packets);
    }

    /// RFC 2861's slow part (`tcp_cwnd_application_limited`): a flow that grew cwnd in bulk and
    /// then sends one segment at a time, each acknowledged before the next, leaves cwnd unused;
    /// every RTO of that it falls halfway to what was used (at least the initial window). With
    /// `tcp_slow_start_after_idle` off it stays.
    #[test]
    fn unused_cwnd_decays_after_an_rto() {
        let run = |after_idle: &str| {
            let (mut a, mut b, c, s, mut now) = connected(|a| {
                a.sysctl_set("net.ipv4.tcp_slow_start_after_idle", after_idle)
                    .unwrap()
            });
            let mut buf = vec![0u8; 1 << 20];
            // Bulk: cwnd grows in slow start.
            for _ in 0..40 {
                let _ = a.send(now, c, &[1u8; 16384], 0);
                for _ in 0..3 {
                    step(&mut a, &mut b, now);
                    let _ = b.recv(now, s, &mut buf, 0);
                    step(&mut b, &mut a, now);
                }
                now += Duration::from_millis(1);
            }
            let grown = a.tcp_info(now, c).unwrap().snd_cwnd;
            // One segment every 10 ms, each ACKed at once, for 2 s.
            for _ in 0..200 {
                a.run_timers(now);
                let _ = a.send(now, c, &[2u8; 100], 0);
                step(&mut a, &mut b, now);
                let _ = b.recv(now, s, &mut buf, 0);
                b.run_timers(now);
                step(&mut b, &mut a, now);
                now += Duration::from_millis(10);
            }
            (grown, a.tcp_info(now, c).unwrap())
        };
        let (grown, i) = run("1");
        assert!(grown > 20, "cwnd did not grow: {grown}");
        assert!(i.snd_cwnd < grown, "cwnd {} not below {grown}", i.snd_cwnd);
        assert!(i.snd_cwnd >= 10, "below the initial window: {}", i.snd_cwnd);
        let (grown, i) = run("0");
        assert_eq!(
            i.snd_cwnd, grown,
            "decayed with tcp_slow_start_after_idle off"
        );
    }

    #[test]
    fn flows_keep_one_queue() {
        assert_eq!(queue_of(u32::MAX, 1), 0);
        assert_eq!(queue_of(u32::MAX, 4), 3);
        assert_eq!(queue_of(0, 4), 0);
    }
}
