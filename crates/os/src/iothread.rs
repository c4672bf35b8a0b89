//! The I/O thread of a [`Host`](crate::Host): softirq's role (see [`crate::host`]). Reads the
//! device in batches and feeds the engine, runs its timers, moves `poll_transmit` through the
//! egress qdisc, writes what the qdisc releases with the engine mutex dropped and completes it,
//! and dispatches the engine's wake-ups; plus the optional packet hook.

use std::sync::atomic::Ordering;
use std::time::Duration;

use shallow_qdisc::{Fq, FqConfig, PfifoFast, Qdisc, QdiscPacket, Tbf};
use shallow_tcp::{Instant, TxToken};
use shallow_wire::segment;

use crate::host::{
    bump, wake_all, Device, Dir, Egress, Inner, PacketHook, Shared, Verdict, HOLD_NS,
};
use crate::tun::RxBatch;
use crate::wake::wait_readable;

/// Packets read per batch by the I/O thread.
const RX_BATCH: usize = 64;

/// The egress qdisc of the I/O thread.
pub(crate) type EgressQdisc = Option<Box<dyn Qdisc<TxPkt> + Send>>;

/// The qdisc for `egress` on a device of `mtu` bytes (`None`: straight to the device).
pub(crate) fn qdisc_for(egress: Egress, mtu: usize) -> EgressQdisc {
    match egress {
        Egress::Fq => Some(Box::new(Fq::new(FqConfig::new(mtu as u32)))),
        Egress::FqWith(c) => Some(Box::new(Fq::new(c))),
        Egress::Tbf { rate, burst, limit } => Some(Box::new(Tbf::new(rate, burst, limit))),
        Egress::PfifoFast { txqueuelen } => Some(Box::new(PfifoFast::new(txqueuelen))),
        Egress::Direct => None,
    }
}

/// A packet between `poll_transmit` and the device: held by the egress qdisc.
pub(crate) struct TxPkt {
    data: Vec<u8>,
    gso_size: Option<u16>,
    departure: Option<u64>,
    token: Option<TxToken>,
    flow: u32,
}

impl QdiscPacket for TxPkt {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn flow_hash(&self) -> u32 {
        self.flow
    }
    fn departure_ns(&self) -> Option<u64> {
        self.departure
    }
    /// The TOS byte's priority (Linux `rt_tos2priority`), for pfifo_fast's bands.
    fn priority(&self) -> u8 {
        segment::tos(&self.data).map_or(0, shallow_qdisc::tos_to_priority)
    }
    fn gso_segment_len(&self) -> Option<usize> {
        let gso = self.gso_size.filter(|&g| g > 0)?;
        let v = segment::parse_tcp(&self.data)?;
        Some(v.payload_off + usize::from(gso))
    }
    /// Software GSO (`skb_gso_segment`, which tbf calls for a packet above its burst): the
    /// TX-completion token rides on the last piece.
    fn gso_segment(self) -> Result<Vec<TxPkt>, TxPkt> {
        let Some(gso) = self.gso_size.filter(|&g| g > 0) else {
            return Err(self);
        };
        let Some(v) = segment::parse_tcp(&self.data) else {
            return Err(self);
        };
        let n = v.payload_len.div_ceil(usize::from(gso)).max(1);
        let mut outs = Vec::with_capacity(n);
        for i in 0..n {
            let mut out = Vec::new();
            if segment::write_segment_parsed(&self.data, &v, gso, i, &mut out).is_err() {
                return Err(self);
            }
            outs.push(out);
        }
        let TxPkt {
            departure,
            mut token,
            flow,
            ..
        } = self;
        let last = outs.len() - 1;
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(i, data)| TxPkt {
                data,
                gso_size: None,
                departure,
                token: if i == last { token.take() } else { None },
                flow,
            })
            .collect())
    }
}

struct Held {
    data: Vec<u8>,
    gso_size: Option<u16>,
    token: Option<TxToken>,
    until: u64,
}

/// The packet hook and the packets it holds back, one per direction.
#[derive(Default)]
pub(crate) struct HookState {
    hook: Option<PacketHook>,
    held_rx: Option<Held>,
    held_tx: Option<Held>,
}

impl HookState {
    /// Installs or removes the hook (held packets still go out).
    pub fn set(&mut self, hook: Option<PacketHook>) {
        self.hook = hook;
    }

    fn verdict(&mut self, dir: Dir, data: &[u8], gso: Option<u16>) -> Verdict {
        match self.hook.as_mut() {
            Some(h) => h(dir, data, gso),
            None => Verdict::Pass,
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        let a = self.held_rx.as_ref().map(|h| h.until);
        let b = self.held_tx.as_ref().map(|h| h.until);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// The I/O thread's loop; returns when the host stops or the device fails.
pub(crate) fn io_loop(sh: &Shared, dev: &Device, mut qdisc: EgressQdisc) {
    let mut batch = RxBatch::new(RX_BATCH);
    let mut mem_batch: Vec<(Vec<u8>, Option<u16>)> = Vec::with_capacity(RX_BATCH);
    let mut dropped_seen = 0u64;
    let mut outq: Vec<Out> = Vec::new();
    while !sh.stopped() {
        let timeout = {
            let g = sh.lock();
            let now = sh.now().as_nanos();
            let mut next = g.stack.poll_timeout().map(|t| t.as_nanos());
            let mut earliest = |t: Option<u64>| {
                next = match (next, t) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            };
            if let Some(q) = qdisc.as_ref() {
                if q.backlog_packets() > 0 {
                    // Held but not by time should not happen (everything due was dequeued);
                    // if it does, look again in a millisecond rather than spin.
                    earliest(Some(q.next_wakeup(now).unwrap_or(now + 1_000_000)));
                }
            }
            if sh.hooked.load(Ordering::Relaxed) {
                let h = sh.hook.lock().unwrap_or_else(|p| p.into_inner());
                earliest(h.next_deadline());
            }
            next.map(|t| Duration::from_nanos(t.saturating_sub(now)))
        };
        // A poll error (EINTR is already absorbed) is not recoverable by waiting: stop.
        let Ok(ready) = wait_readable(dev.fd(), &sh.waker, timeout) else {
            break;
        };
        if ready.woken {
            let _ = sh.waker.drain();
        }
        loop {
            let n = if ready.device {
                let r = match dev {
                    Device::Tun(t) => t.recv_batch(&mut batch),
                    Device::Mem(l) => l.recv_batch(&mut mem_batch, RX_BATCH),
                };
                match r {
                    Ok(n) => n,
                    // The device is gone (deleted with its namespace) or broken: a poll that
                    // keeps reporting it would spin, so the host stops and blocked calls
                    // return ENETDOWN.
                    Err(_) => {
                        sh.stop.store(true, Ordering::SeqCst);
                        break;
                    }
                }
            } else {
                0
            };
            let mut g = sh.lock();
            let mut hook = if sh.hooked.load(Ordering::Relaxed) {
                Some(sh.hook.lock().unwrap_or_else(|p| p.into_inner()))
            } else {
                None
            };
            let now = sh.now();
            match dev {
                Device::Tun(_) => {
                    for p in batch.packets().iter().take(n) {
                        rx(
                            sh,
                            &mut g,
                            hook.as_deref_mut(),
                            p.packet(),
                            p.gso_size(),
                            now,
                        );
                    }
                }
                Device::Mem(l) => {
                    for (p, gso) in mem_batch.drain(..) {
                        rx(sh, &mut g, hook.as_deref_mut(), &p, gso, now);
                        l.recycle(p);
                    }
                }
            }
            if let Some(h) = hook.as_deref_mut() {
                if h.held_rx
                    .as_ref()
                    .is_some_and(|x| x.until <= now.as_nanos())
                {
                    if let Some(x) = h.held_rx.take() {
                        deliver(sh, &mut g, &x.data, x.gso_size, now);
                    }
                }
            }
            if batch.dropped != dropped_seen {
                sh.stats
                    .rx_dropped
                    .fetch_add(batch.dropped - dropped_seen, Ordering::Relaxed);
                dropped_seen = batch.dropped;
            }
            if g.stack.poll_timeout().is_some_and(|t| t <= now) {
                g.stack.handle_timeout(now);
            }
            egress(sh, &mut g, &mut outq, &mut qdisc, hook.as_deref_mut(), now);
            drop(hook);
            g.dispatch(&sh.stats);
            drop(g);
            write_out(sh, dev, &mut outq, &mut qdisc);
            if n < RX_BATCH {
                break;
            }
        }
    }
    sh.stop.store(true, Ordering::SeqCst);
    wake_all(sh);
}

/// Gives one received packet to the engine.
fn deliver(sh: &Shared, g: &mut Inner, p: &[u8], gso: Option<u16>, now: Instant) {
    g.stack.input(now, p, gso);
    bump(&sh.stats.rx_packets);
    if gso.is_some() {
        bump(&sh.stats.rx_gso);
    }
}

/// One received packet through the hook (if any) to the engine.
fn rx(
    sh: &Shared,
    g: &mut Inner,
    hook: Option<&mut HookState>,
    p: &[u8],
    gso: Option<u16>,
    now: Instant,
) {
    let Some(h) = hook else {
        deliver(sh, g, p, gso, now);
        return;
    };
    match h.verdict(Dir::Rx, p, gso) {
        Verdict::Pass => {
            deliver(sh, g, p, gso, now);
            if let Some(x) = h.held_rx.take() {
                deliver(sh, g, &x.data, x.gso_size, now);
            }
        }
        Verdict::Drop => bump(&sh.stats.hook_drops),
        Verdict::Hold => {
            let new = Held {
                data: p.to_vec(),
                gso_size: gso,
                token: None,
                until: now.as_nanos().saturating_add(HOLD_NS),
            };
            if let Some(x) = h.held_rx.replace(new) {
                deliver(sh, g, &x.data, x.gso_size, now);
            }
        }
    }
}

/// Drains `poll_transmit` into the qdisc (or straight to `outq`), then moves what the qdisc
/// releases at `now` to `outq` (see [`write_out`]).
fn egress(
    sh: &Shared,
    g: &mut Inner,
    outq: &mut Vec<Out>,
    qdisc: &mut EgressQdisc,
    mut hook: Option<&mut HookState>,
    now: Instant,
) {
    if let Some(h) = hook.as_deref_mut() {
        if h.held_tx
            .as_ref()
            .is_some_and(|x| x.until <= now.as_nanos())
        {
            if let Some(x) = h.held_tx.take() {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
    }
    loop {
        let mut any = false;
        while let Some(tx) = g.stack.poll_transmit(now) {
            any = true;
            match qdisc {
                None => tx_hooked(
                    sh,
                    g,
                    outq,
                    hook.as_deref_mut(),
                    tx.data,
                    tx.gso_size,
                    tx.token,
                    now,
                ),
                Some(q) => {
                    let p = TxPkt {
                        data: tx.data,
                        gso_size: tx.gso_size,
                        departure: tx.departure.map(|d| d.as_nanos()),
                        token: tx.token,
                        flow: tx.flow,
                    };
                    if let Err(p) = q.enqueue(now.as_nanos(), p) {
                        bump(&sh.stats.qdisc_drops);
                        if let Some(t) = p.token {
                            g.stack.tx_complete(now, t);
                        }
                    }
                }
            }
        }
        if let Some(q) = qdisc {
            let held = q.backlog_bytes() as u64;
            sh.stats
                .qdisc_backlog_max
                .fetch_max(held, Ordering::Relaxed);
            while let Some(p) = q.dequeue(now.as_nanos()) {
                any = true;
                tx_hooked(
                    sh,
                    g,
                    outq,
                    hook.as_deref_mut(),
                    p.data,
                    p.gso_size,
                    p.token,
                    now,
                );
            }
        }
        if let Some(q) = qdisc {
            sh.stats
                .qdisc_backlog
                .store(q.backlog_bytes() as u64, Ordering::Relaxed);
        }
        if !any {
            break;
        }
    }
}

/// One packet to the device through the hook (if any).
#[allow(clippy::too_many_arguments)]
fn tx_hooked(
    sh: &Shared,
    g: &mut Inner,
    outq: &mut Vec<Out>,
    hook: Option<&mut HookState>,
    data: Vec<u8>,
    gso_size: Option<u16>,
    token: Option<TxToken>,
    now: Instant,
) {
    let Some(h) = hook else {
        out(outq, data, gso_size, token);
        return;
    };
    match h.verdict(Dir::Tx, &data, gso_size) {
        Verdict::Pass => {
            out(outq, data, gso_size, token);
            if let Some(x) = h.held_tx.take() {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
        Verdict::Drop => {
            bump(&sh.stats.hook_drops);
            if let Some(t) = token {
                g.stack.tx_complete(now, t);
            }
        }
        Verdict::Hold => {
            let new = Held {
                data,
                gso_size,
                token,
                until: now.as_nanos().saturating_add(HOLD_NS),
            };
            if let Some(x) = h.held_tx.replace(new) {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
    }
}

/// A packet ready for the device: written by the I/O thread after it drops the engine
/// mutex, then completed under the mutex again.
type Out = (Vec<u8>, Option<u16>, Option<TxToken>);

fn out(outq: &mut Vec<Out>, data: Vec<u8>, gso_size: Option<u16>, token: Option<TxToken>) {
    outq.push((data, gso_size, token));
}

/// Writes `outq` to the device without the engine mutex, then completes the data packets
/// under it (the device has them, or refused them: a drop below TCP completes too, as
/// `kfree_skb` runs the destructor). Completions may let TSQ queue more and the qdisc release
/// more, so this repeats until nothing is left to write.
fn write_out(sh: &Shared, dev: &Device, outq: &mut Vec<Out>, qdisc: &mut EgressQdisc) {
    let mut tokens: Vec<TxToken> = Vec::new();
    while !outq.is_empty() {
        for (data, gso_size, token) in outq.drain(..) {
            match dev.send(&data, gso_size) {
                Ok(()) => {
                    bump(&sh.stats.tx_packets);
                    if gso_size.is_some() {
                        bump(&sh.stats.tx_gso);
                    }
                }
                Err(_) => bump(&sh.stats.tx_errors),
            }
            tokens.extend(token);
        }
        if tokens.is_empty() {
            break;
        }
        let mut g = sh.lock();
        let mut hook = if sh.hooked.load(Ordering::Relaxed) {
            Some(sh.hook.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        };
        let now = sh.now();
        for t in tokens.drain(..) {
            g.stack.tx_complete(now, t);
        }
        egress(sh, &mut g, outq, qdisc, hook.as_deref_mut(), now);
        drop(hook);
        g.dispatch(&sh.stats);
    }
}
