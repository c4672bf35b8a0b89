//! The I/O threads of a [`Host`](crate::Host): softirq's role (see `host.rs`). One thread per
//! device queue and shard (one for a single-queue TUN or a [`MemLink`](crate::MemLink); one
//! per `IFF_MULTI_QUEUE` queue otherwise). Thread `k` reads its queue in batches; a packet of a
//! flow its shard owns (or any packet, with one queue) goes to its engine, a packet of a flow
//! another shard owns is copied into that shard's bounded inbox and that shard's thread is
//! kicked (as Linux's RPS hands a packet to another CPU's backlog). Under its shard's mutex it
//! also feeds its engine the packets of its own inbox, completes the packets application
//! threads wrote, runs the engine's timers when they are due, dispatches the engine's
//! wake-ups and runs the TX queue ([`tx_run`]: `poll_transmit` into the egress qdisc of its
//! one TX queue, Linux's `mq` child of that queue, then what the qdisc releases written with
//! the mutex dropped and completed); plus the optional packet hook. Application calls run
//! [`tx_run`] too, on their own thread. Queue `k` gets only shard `k`'s packets, written by
//! one thread at a time: a flow leaves on one queue, in order.

use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use shallow_tcp::{Frags, Instant, Stack, Transmit, TxToken};

use crate::device::Device;
use crate::hook::{Dir, Held, HookState, Verdict, HOLD};
use crate::shared::{bump, wake_all, Inner, Shared};
use crate::tun::RxBatch;
use crate::wake::wait_readable;

/// Packets read per batch by the I/O thread.
const RX_BATCH: usize = 64;

/// Rounds of the TX queue an application thread runs at most in one [`tx_run`] (the first,
/// for its own output, and those others' output made it go round again).
const APP_TX_ROUNDS: u32 = 4;

/// What a reader of a queue keeps between reads: the buffers of its device reads, the
/// packets taken from its shard's inbox, the drops it has counted, the shards to kick. The
/// I/O thread has one; so has each thread that busy-polls (`busy_poll`).
pub(crate) struct RxState {
    batch: RxBatch,
    mem_batch: Vec<(Vec<u8>, Option<u16>)>,
    inbox: Vec<(Vec<u8>, Option<u16>)>,
    dropped_seen: u64,
    kicks: Vec<bool>,
    /// Packets one read takes at most.
    max: usize,
}

impl RxState {
    pub(crate) fn new(shards: usize, max: usize) -> RxState {
        RxState {
            batch: RxBatch::new(max),
            mem_batch: Vec::with_capacity(max),
            inbox: Vec::new(),
            dropped_seen: 0,
            kicks: vec![false; shards],
            max,
        }
    }

    /// Reads what the device has now (at most [`RxState::max`] packets, without waiting).
    fn read(&mut self, dev: &Device) -> std::io::Result<usize> {
        match dev {
            Device::Tun(t) => t.recv_batch(&mut self.batch),
            Device::Mem(l) => l.recv_batch(&mut self.mem_batch, self.max),
        }
    }

    /// Queue `me`'s softirq round, `g` its engine held: the completions of what application
    /// threads wrote, the shard's inbox, the `n` packets [`RxState::read`] read, the hook's
    /// held packet, the engine's timers, the wake-ups, and the TX queue. Returns the engine
    /// held again.
    fn process<'a>(
        &mut self,
        sh: &'a Shared,
        me: usize,
        mut g: MutexGuard<'a, Inner>,
        n: usize,
    ) -> MutexGuard<'a, Inner> {
        let shard = &sh.shards[me];
        let mut hook = sh.lock_hook();
        let now = sh.now();
        // The TX completions of what application threads wrote come first: the device
        // took those packets before anything read now arrived, so an ACK of one of them
        // must not be processed before its completion (its SND timestamp would follow
        // its ACK timestamp).
        for t in shard.take_completions() {
            g.driver.tx_complete(now, t);
        }
        // What other queues read for this shard first (it was read earlier).
        if sh.shards.len() > 1 {
            shard.take_inbox(&mut self.inbox);
        }
        for (p, gso) in self.inbox.drain(..) {
            g.driver.input(now, &p, gso);
            if gso.is_some() {
                bump(&sh.stats.rx_gso);
            }
        }
        let kicks = &mut self.kicks;
        match &*shard.dev {
            Device::Tun(_) => {
                for p in self.batch.packets().iter().take(n) {
                    rx(
                        sh,
                        me,
                        &mut g,
                        hook.as_deref_mut(),
                        p.packet(),
                        p.gso_size(),
                        now,
                        kicks,
                    );
                }
            }
            Device::Mem(l) => {
                for (p, gso) in self.mem_batch.drain(..) {
                    rx(sh, me, &mut g, hook.as_deref_mut(), &p, gso, now, kicks);
                    l.recycle(p);
                }
            }
        }
        if let Some(h) = hook.as_deref_mut() {
            let held = h.held(me, Dir::Rx);
            if held.as_ref().is_some_and(|x| x.until <= now) {
                if let Some(x) = held.take() {
                    route(sh, me, &mut g, &x.data, x.gso_size, now, kicks);
                }
            }
        }
        if self.batch.dropped != self.dropped_seen {
            sh.stats
                .rx_dropped
                .fetch_add(self.batch.dropped - self.dropped_seen, Ordering::Relaxed);
            self.dropped_seen = self.batch.dropped;
        }
        g.driver.run_timers(now);
        drop(hook);
        g.dispatch(sh);
        let g = tx_run(sh, me, g, false);
        kick_others(sh, &mut self.kicks);
        g
    }
}

/// The loop of queue `me`'s I/O thread over its shard's device, serving shard `me`; returns when the host
/// stops or the device fails (which stops the host: every thread and every blocked call is
/// woken).
pub(crate) fn io_loop(sh: &Shared, me: usize) {
    let shard = &sh.shards[me];
    let dev: &Device = &shard.dev;
    let mut st = RxState::new(sh.shards.len(), RX_BATCH);
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
            // Under the mutex, so a call that moves the deadline earlier sees it (and kicks).
            shard
                .io_wakes_at
                .store(next.map_or(u64::MAX, |t| t.as_nanos()), Ordering::SeqCst);
            next.map(|t| t - now)
        };
        // While a socket that prefers busy polling polls this queue, the I/O thread leaves
        // the device to it (`SO_PREFER_BUSY_POLL`: Linux defers the device's interrupts)
        // and waits for its kick, its timers or the end of the polling.
        let fd = if shard.busy_preferred.load(Ordering::SeqCst) > 0 {
            None
        } else {
            Some(dev.fd())
        };
        // A poll error (EINTR is already absorbed) is not recoverable by waiting: stop.
        let Ok(ready) = wait_readable(fd, &shard.waker, timeout) else {
            break;
        };
        if ready.woken {
            let _ = shard.waker.drain();
        }
        loop {
            let n = if ready.device {
                match st.read(dev) {
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
            drop(st.process(sh, me, shard.lock(), n));
            if n < RX_BATCH {
                break;
            }
        }
    }
    sh.stop.store(true, Ordering::SeqCst);
    sh.kick_all();
    wake_all(sh);
}

/// `sk_busy_loop` / `napi_busy_loop`: a blocking call of an application thread reads queue
/// `me`'s device itself (at most `budget` packets a read) and runs the softirq round on what
/// it read, as the I/O thread would, until `done` says so (checked with the engine held
/// after each read), or `until` passes, or the host stops. Between
/// empty reads it yields the CPU (Linux stops spinning when another task wants the CPU,
/// `need_resched`). Returns the engine held, and whether `done` ended it.
pub(crate) fn busy_poll<'a>(
    sh: &'a Shared,
    me: usize,
    budget: u16,
    prefer: bool,
    until: std::time::Instant,
    mut done: impl FnMut(&mut Inner) -> bool,
) -> (MutexGuard<'a, Inner>, bool) {
    thread_local! {
        static STATE: std::cell::RefCell<Option<RxState>> = const { std::cell::RefCell::new(None) };
    }
    let shard = &sh.shards[me];
    let max = usize::from(budget.clamp(1, RX_BATCH as u16));
    if prefer {
        shard.busy_preferred.fetch_add(1, Ordering::SeqCst);
        // The I/O thread waits on the device now: it must wait without it.
        shard.kick();
    }
    let out = STATE.with(|cell| {
        let mut cell = cell.borrow_mut();
        if cell
            .as_ref()
            .is_none_or(|st| st.max != max || st.kicks.len() != sh.shards.len())
        {
            *cell = Some(RxState::new(sh.shards.len(), max));
        }
        let st = cell.as_mut().expect("set above");
        bump(&sh.stats.busy_polls);
        loop {
            // A broken device is the I/O thread's to report (it stops the host).
            let n: usize = st.read(&shard.dev).unwrap_or(0);
            let mut g = if n > 0 {
                bump(&sh.stats.busy_poll_packets);
                st.process(sh, me, shard.lock(), n)
            } else {
                // The I/O thread may have read what this thread waits for.
                shard.lock()
            };
            let d = done(&mut g);
            if d || sh.stopped() || std::time::Instant::now() >= until {
                return (g, d);
            }
            drop(g);
            if n == 0 {
                std::thread::yield_now();
            }
        }
    });
    if prefer {
        shard.busy_preferred.fetch_sub(1, Ordering::SeqCst);
        // Whatever arrived since is the I/O thread's again.
        shard.kick();
    }
    out
}

/// Runs shard `k`'s TX queue, `g` its engine held (Linux's `__qdisc_run` between
/// `qdisc_run_begin` and `qdisc_run_end`): moves the engine's output into the qdisc, writes
/// what the qdisc releases now to the device with the mutex dropped, completes it (which may
/// release more), and returns the engine held again. One thread at a time runs a queue, so
/// a flow's packets leave in order: a thread that finds it busy leaves its output to the
/// runner, which goes round again ([`Shard::tx_missed`](crate::shared::Shard::tx_missed)).
/// Called by the queue's I/O thread after its input and timers, and by application calls on
/// their own thread (`app`; Linux's `sendmsg` runs the qdisc and the driver in the process's
/// context), so a send does not wait for the I/O thread to be scheduled. An application
/// thread goes round at most [`APP_TX_ROUNDS`] times, then leaves what others queued
/// meanwhile to the I/O thread (as `__qdisc_run` hands the rest of its quota to softirq).
pub(crate) fn tx_run<'a>(
    sh: &'a Shared,
    k: usize,
    mut g: MutexGuard<'a, Inner>,
    app: bool,
) -> MutexGuard<'a, Inner> {
    let shard = &sh.shards[k];
    // Set before trying, so a runner that is just finishing sees it (see tx_missed).
    shard.tx_missed.store(true, Ordering::SeqCst);
    let mut rounds = 0;
    loop {
        if app && rounds == APP_TX_ROUNDS {
            // tx_missed stays set and nobody runs the queue: the I/O thread will.
            shard.kick();
            return g;
        }
        rounds += 1;
        if shard.tx_busy.swap(true, Ordering::SeqCst) {
            return g;
        }
        shard.tx_missed.store(false, Ordering::SeqCst);
        let mut outq: Vec<Out> = Vec::new();
        {
            let mut hook = sh.lock_hook();
            let now = sh.now();
            egress(sh, k, &mut g, &mut outq, hook.as_deref_mut(), now);
        }
        g.dispatch(sh);
        if !outq.is_empty() {
            drop(g);
            if app {
                // The device has the packets; their completions come from the I/O thread,
                // as a NIC's TX completion comes from its interrupt after the driver's
                // transmit in the sender's context: meanwhile they count below TCP, which is
                // what autocorking and TSQ look at.
                let n = write_only(sh, k, &shard.dev, &mut outq);
                sh.stats.tx_direct.fetch_add(n, Ordering::Relaxed);
                shard.kick();
            } else {
                write_out(sh, k, &shard.dev, &mut outq);
            }
            g = shard.lock();
        }
        shard.tx_busy.store(false, Ordering::SeqCst);
        if !shard.tx_missed.load(Ordering::SeqCst) {
            return g;
        }
    }
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
    if sh.raw.deliver(p) {
        bump(&sh.stats.rx_raw);
    }
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
    let Some(h) = hook else {
        // The device gathers the payload pieces where they lie (a `writev`).
        let Transmit {
            data,
            frags,
            gso_size,
            token,
            ..
        } = p;
        outq.push((data, frags, gso_size, token));
        return;
    };
    // A hook reads and holds whole packets.
    p.linearize();
    let Transmit {
        data,
        gso_size,
        token,
        ..
    } = p;
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

/// Writes `outq` to the device from an application thread, without the shard's mutex, and
/// leaves the completions of the data packets to the I/O thread (`Shard::completions`).
/// Returns how many packets it wrote.
fn write_only(sh: &Shared, me: usize, dev: &Device, outq: &mut Vec<Out>) -> u64 {
    let mut tokens: Vec<TxToken> = Vec::new();
    let n = send_all(sh, me, dev, outq, &mut tokens);
    if !tokens.is_empty() {
        sh.shards[me].push_completions(tokens);
    }
    n
}

/// Writes every packet of `outq` to the device (counted), keeping their TX tokens in
/// `tokens`; returns how many it wrote.
fn send_all(
    sh: &Shared,
    me: usize,
    dev: &Device,
    outq: &mut Vec<Out>,
    tokens: &mut Vec<TxToken>,
) -> u64 {
    let qstats = &sh.stats.queues[me];
    let mut written = 0;
    for (data, frags, gso_size, token) in outq.drain(..) {
        written += 1;
        match dev.send(&data, &frags, gso_size) {
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
    written
}

/// A packet ready for the device (headers or the whole packet, payload pieces, GSO size,
/// completion token): written by the I/O thread after it drops the shard's mutex, then
/// completed under the mutex again.
type Out = (Vec<u8>, Frags, Option<u16>, Option<TxToken>);

fn out(outq: &mut Vec<Out>, data: Vec<u8>, gso_size: Option<u16>, token: Option<TxToken>) {
    outq.push((data, Frags::default(), gso_size, token));
}

/// Writes `outq` to the device without the shard's mutex, then completes the data packets
/// under it (the device has them, or refused them: a drop below TCP completes too, as
/// `kfree_skb` runs the destructor). Completions may let TSQ queue more and the qdisc release
/// more, so this repeats until nothing is left to write.
fn write_out(sh: &Shared, me: usize, dev: &Device, outq: &mut Vec<Out>) -> u64 {
    let mut written = 0;
    let mut tokens: Vec<TxToken> = Vec::new();
    while !outq.is_empty() {
        written += send_all(sh, me, dev, outq, &mut tokens);
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
    written
}
