//! The I/O threads of a [`Host`](crate::Host): softirq's role (see `host.rs`). One thread per
//! device queue and shard (one for a single-queue TUN or a [`MemLink`](crate::MemLink); one
//! per `IFF_MULTI_QUEUE` queue otherwise). Thread `k` reads its queue in batches; a packet of a
//! flow its shard owns (or any packet, with one queue) goes to its engine, a packet of a flow
//! another shard owns is copied into that shard's bounded inbox and that shard's thread is
//! kicked (as Linux's RPS hands a packet to another CPU's backlog). Under its shard's mutex it
//! also feeds its engine the packets of its own inbox, runs the engine's timers when they are
//! due, moves `poll_transmit` into the egress qdisc of its one TX queue (Linux's `mq` child of
//! that queue), writes what the qdisc releases with the mutex dropped and completes it, and
//! dispatches the engine's wake-ups; plus the optional packet hook. Only queue `k`'s thread
//! writes queue `k`, and only shard `k`'s packets: a flow leaves on one queue, in order.

use std::sync::atomic::Ordering;

use shallow_tcp::{Instant, Stack, Transmit, TxToken};

use crate::device::Device;
use crate::hook::{Dir, Held, HookState, Verdict, HOLD};
use crate::shared::{bump, wake_all, Inner, Shared};
use crate::tun::RxBatch;
use crate::wake::wait_readable;

/// Packets read per batch by the I/O thread.
const RX_BATCH: usize = 64;

/// The loop of queue `me`'s I/O thread over `dev`, serving shard `me`; returns when the host
/// stops or the device fails (which stops the host: every thread and every blocked call is
/// woken).
pub(crate) fn io_loop(sh: &Shared, me: usize, dev: &Device) {
    let shard = &sh.shards[me];
    let mut batch = RxBatch::new(RX_BATCH);
    let mut mem_batch: Vec<(Vec<u8>, Option<u16>)> = Vec::with_capacity(RX_BATCH);
    let mut inbox: Vec<(Vec<u8>, Option<u16>)> = Vec::new();
    let mut dropped_seen = 0u64;
    let mut outq: Vec<Out> = Vec::new();
    let mut kicks = vec![false; sh.shards.len()];
    let sharded = sh.shards.len() > 1;
    // The qdisc's release times are this thread's ppoll timeouts: fire them on time, as the
    // kernel's qdisc watchdog does (an hrtimer without slack). With the default 50 µs slack
    // a `tbf` whose burst is about one TSO packet loses the tokens of every late wake-up
    // (the bucket is full), and ran at 82-86% of its rate where the kernel's ran at 95.5%.
    // Best effort: without it the thread still works, only later.
    let _ = crate::sys::set_timer_slack(1);
    while !sh.stopped() {
        let timeout = {
            let g = shard.lock();
            let now = sh.now();
            let mut next = g.driver.poll_deadline(0, now);
            if let Some(h) = sh.lock_hook() {
                next = match (next, h.next_deadline(me)) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            next.map(|t| t - now)
        };
        // A poll error (EINTR is already absorbed) is not recoverable by waiting: stop.
        let Ok(ready) = wait_readable(dev.fd(), &shard.waker, timeout) else {
            break;
        };
        if ready.woken {
            let _ = shard.waker.drain();
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
            let mut g = shard.lock();
            let mut hook = sh.lock_hook();
            let now = sh.now();
            // What other queues read for this shard first (it was read earlier).
            if sharded {
                shard.take_inbox(&mut inbox);
            }
            for (p, gso) in inbox.drain(..) {
                g.driver.input(now, &p, gso);
                if gso.is_some() {
                    bump(&sh.stats.rx_gso);
                }
            }
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
                            &mut kicks,
                        );
                    }
                }
                Device::Mem(l) => {
                    for (p, gso) in mem_batch.drain(..) {
                        rx(
                            sh,
                            me,
                            &mut g,
                            hook.as_deref_mut(),
                            &p,
                            gso,
                            now,
                            &mut kicks,
                        );
                        l.recycle(p);
                    }
                }
            }
            if let Some(h) = hook.as_deref_mut() {
                let held = h.held(me, Dir::Rx);
                if held.as_ref().is_some_and(|x| x.until <= now) {
                    if let Some(x) = held.take() {
                        route(sh, me, &mut g, &x.data, x.gso_size, now, &mut kicks);
                    }
                }
            }
            if batch.dropped != dropped_seen {
                sh.stats
                    .rx_dropped
                    .fetch_add(batch.dropped - dropped_seen, Ordering::Relaxed);
                dropped_seen = batch.dropped;
            }
            g.driver.run_timers(now);
            egress(sh, me, &mut g, &mut outq, hook.as_deref_mut(), now);
            drop(hook);
            g.dispatch(sh);
            drop(g);
            kick_others(sh, &mut kicks);
            write_out(sh, me, dev, &mut outq);
            if n < RX_BATCH {
                break;
            }
        }
    }
    sh.stop.store(true, Ordering::SeqCst);
    sh.kick_all();
    wake_all(sh);
}

/// Wakes the threads of the shards whose inboxes were given packets (after this shard's mutex
/// is dropped; the eventfd keeps the wake-up until they wait again, so none is lost).
fn kick_others(sh: &Shared, kicks: &mut [bool]) {
    for (q, k) in kicks.iter_mut().enumerate() {
        if std::mem::take(k) {
            sh.shards[q].kick();
        }
    }
}

/// Gives one received packet to the shard that owns its flow: this one's engine, or another
/// shard's inbox (bounded: a full inbox drops the packet, counted).
#[allow(clippy::too_many_arguments)]
fn route(
    sh: &Shared,
    me: usize,
    g: &mut Inner,
    p: &[u8],
    gso: Option<u16>,
    now: Instant,
    kicks: &mut [bool],
) {
    let owner = sh.steer.owner_of_packet(p);
    let q = &sh.stats.queues[me];
    if owner == me {
        g.driver.input(now, p, gso);
        if gso.is_some() {
            bump(&sh.stats.rx_gso);
        }
    } else if sh.shards[owner].push_inbox(p, gso) {
        bump(&q.rx_forwarded);
        kicks[owner] = true;
    } else {
        bump(&q.rx_forward_drops);
        return;
    }
    bump(&sh.stats.rx_packets);
    bump(&q.rx_packets);
}

/// One received packet through the hook (if any) to its shard.
#[allow(clippy::too_many_arguments)]
fn rx(
    sh: &Shared,
    me: usize,
    g: &mut Inner,
    hook: Option<&mut HookState>,
    p: &[u8],
    gso: Option<u16>,
    now: Instant,
    kicks: &mut [bool],
) {
    let Some(h) = hook else {
        route(sh, me, g, p, gso, now, kicks);
        return;
    };
    match h.verdict(Dir::Rx, p, gso) {
        Verdict::Pass => {
            route(sh, me, g, p, gso, now, kicks);
            if let Some(x) = h.held(me, Dir::Rx).take() {
                route(sh, me, g, &x.data, x.gso_size, now, kicks);
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
            if let Some(x) = h.held(me, Dir::Rx).replace(new) {
                route(sh, me, g, &x.data, x.gso_size, now, kicks);
            }
        }
    }
}

/// Drains `poll_transmit` into the shard's qdisc (the driver's egress step; without a qdisc
/// the packet waits for the write), then moves what the qdisc releases at `now` to `outq`
/// (see [`write_out`]). Repeats while something moved: a completion (a hook's drop) may let
/// the engine send more.
fn egress(
    sh: &Shared,
    me: usize,
    g: &mut Inner,
    outq: &mut Vec<Out>,
    mut hook: Option<&mut HookState>,
    now: Instant,
) {
    let driver = &mut g.driver;
    if let Some(h) = hook.as_deref_mut() {
        let held = h.held(me, Dir::Tx);
        if held.as_ref().is_some_and(|x| x.until <= now) {
            if let Some(x) = held.take() {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
    }
    loop {
        let mut any = false;
        let dropped = driver.transmit(now, |_| any = true);
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
        while let Some(p) = driver.poll_release(0, now) {
            any = true;
            tx_hooked(sh, me, driver, outq, hook.as_deref_mut(), p, now);
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
    me: usize,
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
            if let Some(x) = h.held(me, Dir::Tx).take() {
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
            if let Some(x) = h.held(me, Dir::Tx).replace(new) {
                out(outq, x.data, x.gso_size, x.token);
            }
        }
    }
}

/// A packet ready for the device: written by the I/O thread after it drops the shard's
/// mutex, then completed under the mutex again.
type Out = (Vec<u8>, Option<u16>, Option<TxToken>);

fn out(outq: &mut Vec<Out>, data: Vec<u8>, gso_size: Option<u16>, token: Option<TxToken>) {
    outq.push((data, gso_size, token));
}

/// Writes `outq` to the device without the shard's mutex, then completes the data packets
/// under it (the device has them, or refused them: a drop below TCP completes too, as
/// `kfree_skb` runs the destructor). Completions may let TSQ queue more and the qdisc release
/// more, so this repeats until nothing is left to write.
fn write_out(sh: &Shared, me: usize, dev: &Device, outq: &mut Vec<Out>) {
    let mut tokens: Vec<TxToken> = Vec::new();
    let qstats = &sh.stats.queues[me];
    while !outq.is_empty() {
        for (data, gso_size, token) in outq.drain(..) {
            match dev.send(&data, gso_size) {
                Ok(()) => {
                    bump(&sh.stats.tx_packets);
                    bump(&qstats.tx_packets);
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
        let mut g = sh.shards[me].lock();
        let mut hook = sh.lock_hook();
        let now = sh.now();
        for t in tokens.drain(..) {
            g.driver.tx_complete(now, t);
        }
        egress(sh, me, &mut g, outq, hook.as_deref_mut(), now);
        drop(hook);
        g.dispatch(sh);
    }
}
