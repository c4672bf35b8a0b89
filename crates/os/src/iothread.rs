//! The I/O threads of a [`Host`](crate::Host): softirq's role (see [`crate::host`]). One thread
//! per device queue (one for a single-queue TUN or a [`MemLink`](crate::MemLink); one per
//! `IFF_MULTI_QUEUE` queue otherwise). Each reads its queue in batches and feeds the engine,
//! runs the engine's timers when they are due (under the engine mutex, so a deadline fires
//! once whichever thread sees it), moves `poll_transmit` into the egress qdisc of the queue
//! the packet's flow hash picks (Linux's `mq` root with one child per TX queue, and
//! `skb_tx_hash`'s `reciprocal_scale`), writes what *its own* qdisc releases with the engine
//! mutex dropped and completes it, and dispatches the engine's wake-ups; plus the optional
//! packet hook. Only queue `k`'s thread dequeues queue `k`'s qdisc and writes queue `k`, so a
//! flow's packets leave in order; a thread that puts packets in another queue's qdisc kicks
//! that queue's thread.

use std::sync::atomic::Ordering;

use shallow_tcp::{Instant, Stack, Transmit, TxToken};

use crate::device::Device;
use crate::hook::{Dir, Held, HookState, Verdict, HOLD};
use crate::shared::{bump, wake_all, Inner, Shared};
use crate::tun::RxBatch;
use crate::wake::wait_readable;

/// Packets read per batch by the I/O thread.
const RX_BATCH: usize = 64;

/// The loop of queue `me`'s I/O thread over `dev`; returns when the host stops or the device
/// fails (which stops the host: every thread and every blocked call is woken).
pub(crate) fn io_loop(sh: &Shared, me: usize, dev: &Device) {
    let mut batch = RxBatch::new(RX_BATCH);
    let mut mem_batch: Vec<(Vec<u8>, Option<u16>)> = Vec::with_capacity(RX_BATCH);
    let mut dropped_seen = 0u64;
    let mut outq: Vec<Out> = Vec::new();
    let mut kicks = vec![false; sh.queues()];
    while !sh.stopped() {
        let timeout = {
            let g = sh.lock();
            let now = sh.now();
            // Every thread waits for the engine's next timer too: the deadline may have been
            // moved earlier by this thread's own input (application calls kick thread 0).
            let mut next = g.driver.poll_deadline(me, now);
            if let Some(h) = sh.lock_hook() {
                next = match (next, h.next_deadline()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            next.map(|t| t - now)
        };
        // A poll error (EINTR is already absorbed) is not recoverable by waiting: stop.
        let Ok(ready) = wait_readable(dev.fd(), &sh.wakers[me], timeout) else {
            break;
        };
        if ready.woken {
            let _ = sh.wakers[me].drain();
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
            let mut hook = sh.lock_hook();
            let now = sh.now();
            match dev {
                Device::Tun(_) => {
                    for p in batch.packets().iter().take(n) {
                        rx(
                            sh,
                            me,
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
                        rx(sh, me, &mut g, hook.as_deref_mut(), &p, gso, now);
                        l.recycle(p);
                    }
                }
            }
            if let Some(h) = hook.as_deref_mut() {
                if h.held_rx.as_ref().is_some_and(|x| x.until <= now) {
                    if let Some(x) = h.held_rx.take() {
                        deliver(sh, me, &mut g, &x.data, x.gso_size, now);
                    }
                }
            }
            if batch.dropped != dropped_seen {
                sh.stats
                    .rx_dropped
                    .fetch_add(batch.dropped - dropped_seen, Ordering::Relaxed);
                dropped_seen = batch.dropped;
            }
            // Under the engine mutex: a deadline that another thread already handled has
            // moved on, so it does not fire twice.
            g.driver.run_timers(now);
            egress(
                sh,
                me,
                &mut g,
                &mut outq,
                hook.as_deref_mut(),
                now,
                &mut kicks,
            );
            drop(hook);
            g.dispatch(&sh.stats);
            drop(g);
            kick_others(sh, &mut kicks);
            write_out(sh, me, dev, &mut outq, &mut kicks);
            if n < RX_BATCH {
                break;
            }
        }
    }
    sh.stop.store(true, Ordering::SeqCst);
    sh.kick_all();
    wake_all(sh);
}

/// Wakes the threads of the other queues that were given packets (after the engine mutex is
/// dropped; the eventfd keeps the wake-up until they wait again, so none is lost).
fn kick_others(sh: &Shared, kicks: &mut [bool]) {
    for (q, k) in kicks.iter_mut().enumerate() {
        if std::mem::take(k) {
            sh.kick_queue(q);
        }
    }
}

/// Gives one received packet to the engine.
fn deliver(sh: &Shared, me: usize, g: &mut Inner, p: &[u8], gso: Option<u16>, now: Instant) {
    g.driver.input(now, p, gso);
    bump(&sh.stats.rx_packets);
    if let Some(q) = sh.stats.queues.get(me) {
        bump(&q.rx_packets);
    }
    if gso.is_some() {
        bump(&sh.stats.rx_gso);
    }
}

/// One received packet through the hook (if any) to the engine.
fn rx(
    sh: &Shared,
    me: usize,
    g: &mut Inner,
    hook: Option<&mut HookState>,
    p: &[u8],
    gso: Option<u16>,
    now: Instant,
) {
    let Some(h) = hook else {
        deliver(sh, me, g, p, gso, now);
        return;
    };
    match h.verdict(Dir::Rx, p, gso) {
        Verdict::Pass => {
            deliver(sh, me, g, p, gso, now);
            if let Some(x) = h.held_rx.take() {
                deliver(sh, me, g, &x.data, x.gso_size, now);
            }
        }
        Verdict::Drop => bump(&sh.stats.hook_drops),
        Verdict::Hold => {
            let new = Held {
                data: p.to_vec(),
                gso_size: gso,
                token: None,
                until: now + HOLD,
            };
            if let Some(x) = h.held_rx.replace(new) {
                deliver(sh, me, g, &x.data, x.gso_size, now);
            }
        }
    }
}

/// Drains `poll_transmit` into the qdisc of each packet's queue (the driver's egress step;
/// without a qdisc the packet waits for its queue's thread), then moves what this queue
/// releases at `now` to `outq` (see [`write_out`]). Queues other than `me` that were given
/// packets are marked in `kicks`. Repeats while something moved: a completion (a hook's drop)
/// may let the engine send more.
fn egress(
    sh: &Shared,
    me: usize,
    g: &mut Inner,
    outq: &mut Vec<Out>,
    mut hook: Option<&mut HookState>,
    now: Instant,
    kicks: &mut [bool],
) {
    let driver = &mut g.driver;
    if let Some(h) = hook.as_deref_mut() {
        if h.held_tx.as_ref().is_some_and(|x| x.until <= now) {
            if let Some(x) = h.held_tx.take() {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
    }
    loop {
        let mut any = false;
        let dropped = driver.transmit(now, |q| {
            any = true;
            if q != me {
                kicks[q] = true;
            }
        });
        // Refusals at the transmit are the qdisc's drops too.
        let (refused, held) = {
            let mut e = driver.egress().lock();
            (e.take_refused(), e.backlog_bytes())
        };
        if dropped + refused > 0 {
            sh.stats
                .qdisc_drops
                .fetch_add(dropped + refused, Ordering::Relaxed);
        }
        sh.stats
            .qdisc_backlog_max
            .fetch_max(held as u64, Ordering::Relaxed);
        while let Some(p) = driver.poll_release(me, now) {
            any = true;
            tx_hooked(sh, driver, outq, hook.as_deref_mut(), p, now);
        }
        let held = driver.egress().lock().backlog_bytes();
        sh.stats.qdisc_backlog.store(held as u64, Ordering::Relaxed);
        if !any {
            break;
        }
    }
}

/// One packet to the device through the hook (if any).
#[allow(clippy::too_many_arguments)]
fn tx_hooked(
    sh: &Shared,
    stack: &mut Stack,
    outq: &mut Vec<Out>,
    hook: Option<&mut HookState>,
    mut p: Transmit,
    now: Instant,
) {
    // The device writes one buffer.
    p.linearize();
    let Transmit {
        data,
        gso_size,
        token,
        ..
    } = p;
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
                stack.tx_complete(now, t);
            }
        }
        Verdict::Hold => {
            let new = Held {
                data,
                gso_size,
                token,
                until: now + HOLD,
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
fn write_out(sh: &Shared, me: usize, dev: &Device, outq: &mut Vec<Out>, kicks: &mut [bool]) {
    let mut tokens: Vec<TxToken> = Vec::new();
    let qstats = sh.stats.queues.get(me);
    while !outq.is_empty() {
        for (data, gso_size, token) in outq.drain(..) {
            match dev.send(&data, gso_size) {
                Ok(()) => {
                    bump(&sh.stats.tx_packets);
                    if let Some(q) = qstats {
                        bump(&q.tx_packets);
                    }
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
        let mut hook = sh.lock_hook();
        let now = sh.now();
        for t in tokens.drain(..) {
            g.driver.tx_complete(now, t);
        }
        egress(sh, me, &mut g, outq, hook.as_deref_mut(), now, kicks);
        drop(hook);
        g.dispatch(&sh.stats);
        drop(g);
        kick_others(sh, kicks);
    }
}
