//! Per-connection timers (Linux `tcp_timer.c`): retransmission (with SYN/SYN-ACK
//! retransmits), zero-window probe, delayed ACK, keepalive / FIN_WAIT2 / TIME_WAIT. The
//! kernel's timer granularity (`jiffy_timer_fire`) and the one rule that arms a timer
//! (`Connection::arm`) are here too.

use crate::env::Env;
use crate::errno::Errno;
use crate::mib::Mib;
use crate::seq::after;
use crate::socket::*;
use crate::sysctl::Sysctl;
use crate::time::Instant;
use core::cmp::Reverse;
use core::time::Duration;
use std::collections::BinaryHeap;

/// Per-socket timers. Linux multiplexes several events on the retransmit timer
/// (`icsk_pending`); so do we ([`RtxEvent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKind {
    /// RTO, SYN/SYN-ACK retransmit, zero-window probe, TLP, RACK reordering timer.
    Retrans = 0,
    /// Delayed ACK.
    Delack = 1,
    /// Keepalive; also FIN_WAIT2 and TIME_WAIT expiry (Linux uses the keepalive timer / tw timer).
    Keepalive = 2,
    /// Compressed-SACK hrtimer (`tcp_compressed_ack_kick`).
    CompSack = 3,
}
pub(crate) const NTIMERS: usize = 4;

/// What the retransmit timer is armed for (`icsk_pending`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RtxEvent {
    Rto,
    Probe0,
    LossProbe,
    ReoTimeout,
}

/// One jiffy of the judge kernel, which is built with CONFIG_HZ=250.
pub(crate) const JIFFY: Duration = Duration::from_millis(4);
/// `TCP_TIMEOUT_MIN`: two jiffies (8 ms at HZ=250), the floor of a zero-window probe
/// clamped to TCP_USER_TIMEOUT.
pub(crate) const TCP_TIMEOUT_MIN: Duration = Duration::from_millis(8);
/// `TCP_TIMEOUT_MIN_US`: 2 ms, which the loss-probe timer (with more than one packet out)
/// and the RACK reordering timer add to their delay (measured: [`jiffy_timer_fire`]).
pub(crate) const TCP_TIMEOUT_MIN_US: Duration = Duration::from_millis(2);

/// When a Linux timer on the jiffy timer wheel (`sk_reset_timer`) armed at `clock` to run
/// `x` later fires: the one place the engine applies the kernel's timer granularity.
///
/// The kernel converts `x` to d = ceil(x / jiffy) jiffies (`usecs_to_jiffies`) and sets
/// `expires = jiffies + d`; the wheel puts a timer less than 63 jiffies ahead in level 0,
/// whose bucket is `expires + 1` (`calc_index` rounds up so that no timer fires early), so
/// it runs on the (d+1)-th tick after the one that last advanced `jiffies`. Measured on
/// 6.18 (HZ=250) with packetdrill, which starts a script 250 µs after a jiffy edge
/// (`schedule_start_time_usecs`): RTOs of 210, 215, 220, 230 and 240 ms (53, 54, 55, 58 and
/// 60 jiffies) armed at 300.7 ms fired at 515.75, 519.7, 523.7, 535.7 and 543.7 ms, each
/// on tick k+d+1 of that grid in every run; the loss-probe and RACK reordering timers, whose
/// x carries `TCP_TIMEOUT_MIN_US` (2 ms), fire on tick ceil((x + 2 ms) / 4 ms) + 1 (RACK
/// with x = 10–50 ms, loss probe with x = 2.2–100.6 ms); a 40 ms delayed ACK on the 11th
/// tick. A timer 63 jiffies or more ahead goes to a level n ≥ 1 whose buckets of 8^n
/// jiffies start at 63·8^(n-1) jiffies; it fires at the first bucket boundary after its
/// expiry, which depends on the absolute jiffies value, so it is up to 8^n jiffies late (32
/// ms for 252 ms–2 s, 256 ms for 2–16 s), measured 8–28 ms for 300 and 600 ms timers
/// (crates/drill/scripts/kernel/: rto-retransmit-backoff, zero-window-probe,
/// cork-then-uncork); the engine takes the mean over that.
///
/// `phase` is a tick of the kernel's jiffy grid when the substrate knows it (`drill`:
/// packetdrill's grid, [`crate::Stack::set_jiffy_phase`]); level-0 timers then fire on the
/// kernel's own tick. Without it the engine takes the mean over the tick phase: half a
/// jiffy before the tick that is d+1 jiffies after arming.
pub(crate) fn jiffy_timer_fire(clock: Instant, x: Duration, phase: Option<Instant>) -> Instant {
    let j = JIFFY.as_nanos() as u64;
    let d = (x.as_nanos() as u64).div_ceil(j);
    // How long ago the tick that last advanced jiffies was, or the mean over that.
    let since = match phase {
        Some(p) => (clock.as_nanos() % j + j - p.as_nanos() % j) % j,
        None => j / 2,
    };
    let slack = wheel_slack(x);
    if slack.is_zero() {
        return clock + Duration::from_nanos((d + 1) * j - since);
    }
    match phase {
        // The bucket boundary's place is unknown: the mean over it.
        Some(_) => clock + Duration::from_nanos(d * j + j / 2 - since) + slack,
        None => clock + x + slack,
    }
}

pub(crate) fn wheel_slack(delay: Duration) -> Duration {
    let j = JIFFY.as_nanos() as u64;
    let jiffies = (delay.as_nanos() as u64).div_ceil(j);
    let (mut gran, mut start) = (1u64, 63u64);
    while jiffies >= start && gran < 1 << 24 {
        gran *= 8;
        start *= 8;
    }
    if gran == 1 {
        return Duration::ZERO;
    }
    Duration::from_nanos(gran * j / 2)
}

/// The connection's probing state (`icsk_probes_out`, `icsk_probes_tstamp`), private to this
/// file: zero-window and keepalive probes sent and not answered (reported as `tcpi_probes`;
/// any acceptable ACK clears the count), and when the current run of zero-window probes
/// started (for TCP_USER_TIMEOUT).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Probes {
    out: u32,
    tstamp: Option<Instant>,
}

impl Probes {
    /// Probes sent and not answered (`tcpi_probes`).
    pub fn out(&self) -> u32 {
        self.out
    }

    /// An acceptable ACK arrived: the peer is alive (`tcp_ack` clears `icsk_probes_out`).
    pub fn answered(&mut self) {
        self.out = 0;
    }
}

impl Connection {
    /// Bookkeeping after a SYN or SYN-ACK retransmission (`tcp_retransmit_timer` for the
    /// handshake states): counters, exponential backoff of the RTO up to `tcp_rto_max_ms`, and
    /// the retransmit timer re-armed.
    pub(crate) fn syn_retransmitted(&mut self, env: &mut Env, now: Instant) {
        self.timer.retransmits += 1;
        self.stats.count_retrans(1);
        env.mib.inc(Mib::TCPSynRetrans);
        env.mib.inc(Mib::RetransSegs);
        self.rtt.backoff_rto(self.rto_max(env));
        let at = now + self.rtt.rto();
        self.arm(env, TimerKind::Retrans, at);
    }

    /// Retransmit-timer expiry. Returns true if the socket (a SYN_RECV child) must be freed.
    pub(crate) fn write_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::SynSent => {
                if self.write_timeout(env, now) {
                    return false;
                }
                self.send_syn(env, now);
                self.timer.backoff += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::SynRecv if self.fastopen.child => {
                // tcp_fastopen_synack_timer: the SYN-ACK again, one more time than a request
                // would be; then the child fails with ETIMEDOUT.
                let max = self
                    .opts
                    .syn_retries
                    .unwrap_or(env.sysint(Sysctl::tcp_synack_retries) as u32)
                    + 1;
                if self.timer.synack_retries_done >= max {
                    self.err = Some(crate::Errno::ETIMEDOUT);
                    self.set_closed(env);
                    return false;
                }
                self.send_synack(env, now);
                self.timer.synack_retries_done += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::SynRecv => {
                let max = env.sysint(Sysctl::tcp_synack_retries) as u32;
                if self.parent.is_some() && self.timer.synack_retries_done >= max {
                    return true;
                }
                if self.parent.is_none() && self.write_timeout(env, now) {
                    return false;
                }
                self.send_synack(env, now);
                self.timer.synack_retries_done += 1;
                self.syn_retransmitted(env, now);
                false
            }
            TcpState::Close | TcpState::Listen | TcpState::TimeWait => false,
            _ => {
                match self.timer.rtx_event {
                    RtxEvent::Rto => {
                        self.retransmit_timer(env, now);
                    }
                    RtxEvent::LossProbe => self.send_loss_probe(env, now),
                    RtxEvent::ReoTimeout => {
                        self.rack_reo_timeout(env, now);
                        if !self.timer.armed(TimerKind::Retrans) {
                            self.schedule_loss_probe_or_rto(env, now, false);
                        }
                    }
                    RtxEvent::Probe0 => self.probe_timer(env, now),
                }
                false
            }
        }
    }

    /// Zero-window / persist probe timer (`tcp_probe_timer`): with TCP_USER_TIMEOUT the run
    /// of probes ends after that long (counted from the first probe, `icsk_probes_tstamp`),
    /// otherwise after `tcp_retries2` unanswered probes.
    pub(crate) fn probe_timer(&mut self, env: &mut Env, now: Instant) {
        if self.rtx.packets_out > 0 || self.snd.write_queue.is_empty() {
            self.timer.probes.out = 0;
            self.timer.probes.tstamp = None;
            return;
        }
        let user_timeout = Duration::from_millis(u64::from(self.opts.user_timeout_ms));
        let timed_out = match self.timer.probes.tstamp {
            None => {
                self.timer.probes.tstamp = Some(now);
                false
            }
            Some(t0) => self.opts.user_timeout_ms != 0 && now - t0 >= user_timeout,
        };
        let max_probes = env.sysint(Sysctl::tcp_retries2) as u32;
        if timed_out || self.timer.probes.out >= max_probes {
            // tcp_write_err
            self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
            env.mib.inc(Mib::TCPAbortOnTimeout);
            self.set_closed(env);
            return;
        }
        // tcp_send_probe0
        let local_drop = self.send_probe0(env, now);
        if self.rtx.packets_out > 0 || self.snd.write_queue.is_empty() {
            self.timer.probes.out = 0;
            self.timer.backoff = 0;
            self.timer.probes.tstamp = None;
            return;
        }
        self.timer.probes.out += 1;
        let mut when = if local_drop {
            // Not sent for local congestion: retry at TCP_RESOURCE_PROBE_INTERVAL, no backoff.
            Duration::from_millis(500)
        } else {
            if self.timer.backoff < max_probes {
                self.timer.backoff += 1;
            }
            self.probe0_when()
        };
        when = self.clamp_probe0_to_user_timeout(now, when);
        self.timer.rtx_event = RtxEvent::Probe0;
        self.arm(env, TimerKind::Retrans, now + when);
    }

    /// `tcp_clamp_probe0_to_user_timeout`: with TCP_USER_TIMEOUT, the next zero-window probe
    /// is due no later than the end of the user timeout (counted from the first probe), and
    /// no sooner than `TCP_TIMEOUT_MIN`.
    pub(crate) fn clamp_probe0_to_user_timeout(&self, now: Instant, when: Duration) -> Duration {
        let user_timeout = Duration::from_millis(u64::from(self.opts.user_timeout_ms));
        match (self.opts.user_timeout_ms != 0, self.timer.probes.tstamp) {
            (true, Some(t0)) => {
                when.min(user_timeout.saturating_sub(now - t0).max(TCP_TIMEOUT_MIN))
            }
            _ => when,
        }
    }

    /// `tcp_ack_probe`: an ACK arrived while nothing was in flight and data waits. If the
    /// window now takes the head, probing ends (backoff and the probe clock cleared); if not,
    /// the peer is alive but its window still closed, and the next probe is due a backed-off
    /// interval from this ACK (measured on 6.18: probes answered at 0.70 s and 1.30 s were
    /// followed by the next probe 0.6157 s after the answer, not on the old schedule).
    pub(crate) fn ack_probe(&mut self, env: &mut Env, now: Instant) {
        let Some(head) = self.snd.write_queue.front() else {
            return;
        };
        if !after(head.end_seq, self.snd_wnd_end()) {
            self.timer.backoff = 0;
            self.timer.probes.tstamp = None;
            if self.timer.rtx_event == RtxEvent::Probe0 {
                self.disarm(env, TimerKind::Retrans);
            }
        } else {
            let when = self.clamp_probe0_to_user_timeout(now, self.probe0_when());
            self.timer.rtx_event = RtxEvent::Probe0;
            self.arm(env, TimerKind::Retrans, now + when);
        }
    }

    /// Delayed-ACK timer (`tcp_delack_timer_handler`).
    pub(crate) fn delack_timer(&mut self, env: &mut Env, now: Instant) {
        // tcp_sack_compress_send_ack
        if self.sack_compress_send_ack(env, now) {
            return;
        }
        if self.ack.pending & ackf::TIMER == 0 {
            return;
        }
        if self.ack.pending & ackf::SCHED != 0 {
            if self.ack.pingpong == 0 {
                self.ack.ato = (self.ack.ato * 2).min(self.rtt.rto());
            } else {
                self.ack.pingpong = 0;
                self.ack.ato = TCP_ATO_MIN;
            }
            self.send_ack(env, now);
            env.mib.inc(Mib::DelayedACKs);
        }
        self.ack.pending &= !ackf::TIMER;
    }

    /// The idle time before the first keepalive probe (`keepalive_time_when`):
    /// TCP_KEEPIDLE, else `tcp_keepalive_time`.
    pub(crate) fn keepalive_time(&self, env: &Env) -> Duration {
        let s = self
            .opts
            .keepidle
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_time) as u32);
        Duration::from_secs(u64::from(s))
    }

    /// The time between keepalive probes (`keepalive_intvl_when`): TCP_KEEPINTVL, else
    /// `tcp_keepalive_intvl`.
    pub(crate) fn keepalive_intvl(&self, env: &Env) -> Duration {
        let s = self
            .opts
            .keepintvl
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_intvl) as u32);
        Duration::from_secs(u64::from(s))
    }

    /// Unanswered keepalive probes before the connection is dropped (`keepalive_probes`):
    /// TCP_KEEPCNT, else `tcp_keepalive_probes`.
    pub(crate) fn keepalive_probes(&self, env: &Env) -> u32 {
        self.opts
            .keepcnt
            .unwrap_or(env.sysint(Sysctl::tcp_keepalive_probes) as u32)
    }

    /// Time since the peer was last heard from (`keepalive_time_elapsed`: the later of the
    /// last received segment and the last ACK).
    pub(crate) fn keepalive_time_elapsed(&self, now: Instant) -> Duration {
        now - self.rcv_tstamp.max(self.lrcvtime)
    }

    /// Keepalive / FIN_WAIT2 / TIME_WAIT timer. Returns true if the socket must be freed.
    pub(crate) fn keepalive_timer(&mut self, env: &mut Env, now: Instant) -> bool {
        match self.state {
            TcpState::TimeWait => {
                self.state = TcpState::Close;
                self.orphan
            }
            TcpState::FinWait2 if self.orphan => {
                self.set_closed(env);
                true
            }
            // tcp_keepalive_timer: keepalive runs in every state but CLOSE, LISTEN and
            // SYN_SENT; its probes count in icsk_probes_out (`tcpi_probes`), which any
            // acceptable ACK clears (tcp_ack).
            TcpState::Close | TcpState::Listen | TcpState::SynSent => false,
            _ if self.opts.keepalive => {
                if self.rtx.packets_out > 0 || !self.snd.write_queue.is_empty() {
                    let idle = self.keepalive_time(env);
                    self.arm(env, TimerKind::Keepalive, now + idle);
                    return false;
                }
                let elapsed = self.keepalive_time_elapsed(now);
                let idle = self.keepalive_time(env);
                if elapsed < idle {
                    // Something arrived since: the next probe is due an idle time after it.
                    self.arm(env, TimerKind::Keepalive, now + (idle - elapsed));
                    return false;
                }
                // With TCP_USER_TIMEOUT, that bounds the silence instead of the probe count.
                let user_timeout = u64::from(self.opts.user_timeout_ms);
                let timed_out = if user_timeout != 0 {
                    elapsed >= Duration::from_millis(user_timeout) && self.timer.probes.out > 0
                } else {
                    self.timer.probes.out >= self.keepalive_probes(env)
                };
                if timed_out {
                    self.send_active_reset(env, now);
                    // tcp_write_err
                    self.err = Some(self.err_soft.unwrap_or(Errno::ETIMEDOUT));
                    env.mib.inc(Mib::TCPAbortOnTimeout);
                    self.set_closed(env);
                    return false;
                }
                self.send_probe_keepalive(env, now);
                self.timer.probes.out += 1;
                let intvl = self.keepalive_intvl(env);
                self.arm(env, TimerKind::Keepalive, now + intvl);
                false
            }
            _ => false,
        }
    }

    /// The keepalive probe (`tcp_write_wakeup` with nothing to send: `tcp_xmit_probe_skb`).
    pub(crate) fn send_probe_keepalive(&mut self, env: &mut Env, now: Instant) {
        self.xmit_probe_skb(env, now, Mib::TCPKeepAlive);
    }
}

/// A connection's timers and what their retries count (`inet_connection_sock`'s timers,
/// `icsk_pending`, `icsk_backoff`, `icsk_retransmits`, `icsk_probes_out`, and `tcp_sock`'s
/// `retrans_stamp`). The deadlines are private to this file: [`Connection::arm`] and
/// [`Connection::disarm`] keep them and the stack's timer set in step. The retry counters are
/// `pub(crate)`: as in Linux, the timer handlers raise them (the SYN, probe and keepalive
/// handlers here, the RTO's `tcp_retransmit_timer` in recovery.rs beside the loss state it
/// enters), the ACK that makes progress (input.rs) resets them, and the undo rules, the
/// output and `tcp_info` read them.
#[derive(Debug)]
pub(crate) struct Timers {
    /// Deadline of each armed timer, as entered in the stack's timer set.
    at: [Option<Instant>; NTIMERS],
    /// What the retransmit timer is armed for (`icsk_pending`).
    pub rtx_event: RtxEvent,
    /// Exponential backoff of the RTO or the probe timer (`icsk_backoff`).
    pub backoff: u32,
    /// RTOs (or SYN retransmissions) since the last progress (`icsk_retransmits`).
    pub retransmits: u32,
    /// First retransmission of the current episode (`tp->retrans_stamp`), for the
    /// retry limits and undo.
    pub retrans_stamp: Option<Instant>,
    /// SYN-ACK retransmissions of this passive child (`req->num_retrans`).
    pub synack_retries_done: u32,
    /// Zero-window and keepalive probing (timer.rs).
    pub probes: Probes,
}

/// One armed timer: (deadline, socket slot, generation, kind), ordered by all four.
type TimerEntry = (Instant, u32, u32, TimerKind);

/// A [`TimerEntry`] as the heap orders it: (deadline, socket slot, generation, arming order
/// reversed, kind). One socket's timers due on the same tick run the last armed first, as
/// Linux's timer wheel runs a bucket's timers (each armed timer goes to the head of its
/// bucket's list): measured on 6.18 (fuzz seed 150007), a delayed ACK armed after the RTO and
/// due on the RTO's tick went first, a pure ACK before the retransmission.
type HeapEntry = (Instant, u32, u32, Reverse<u32>, TimerKind);

/// The armed timers of all sockets of one stack, in deadline order: (deadline, socket slot,
/// generation, arming order reversed, kind). Private to this file: entries are added and removed only by
/// [`Connection::arm`] and [`Connection::disarm`], which keep each socket's [`Timers`] in
/// step, and taken by the stack when due.
///
/// A set with the order of a `BTreeSet` of the entries (the earliest first, ties by slot,
/// generation, the last armed first, then kind), kept as a binary min-heap beside a table of its members by slot
/// and kind (a socket has at most one timer of a kind armed, and a freed socket's are all
/// cancelled before its slot serves again): arming is a push (a later deadline than most
/// stays at the bottom: O(1) on average) and a cancel only clears the member, its heap
/// entry left behind until it surfaces at the top, where it is dropped at once, so the top
/// is always a member (`next_deadline` reads it without looking further). The heap is
/// rebuilt from the members when stale entries outnumber them, so it holds at most about
/// twice what is armed. Entries are unique, so the heap's order is the entries' own,
/// whatever its shape: the same timers come out in the same order as from an ordered set.
#[derive(Debug, Default)]
pub(crate) struct TimerSet {
    heap: BinaryHeap<Reverse<HeapEntry>>,
    /// Per socket slot, its armed timers.
    live: Vec<SlotTimers>,
    /// How many timers are armed.
    members: usize,
    /// The arming order the next armed timer gets (wrapping: only timers of one socket due
    /// on one tick compare it, armed far fewer than 2^32 arms apart).
    next_seq: u32,
    /// A tick of the kernel's jiffy grid, when the substrate knows it
    /// ([`jiffy_timer_fire`]).
    pub jiffy_phase: Option<Instant>,
}

/// The armed timers of one socket slot in [`TimerSet`]: each kind's deadline and arming
/// order, which kinds are armed, and the generation of the socket they belong to (one at a
/// time: a freed socket's timers are all cancelled before its slot serves again). 56 bytes a
/// slot.
#[derive(Clone, Copy, Debug, Default)]
struct SlotTimers {
    at: [Instant; NTIMERS],
    seq: [u32; NTIMERS],
    gen: u32,
    /// Bit `kind`: that kind is armed.
    armed: u8,
}

impl SlotTimers {
    /// Whether `e` (of this slot) is armed.
    fn holds(&self, e: &TimerEntry) -> bool {
        let k = e.3 as usize;
        self.armed & (1 << k) != 0 && self.at[k] == e.0 && self.gen == e.2
    }

    /// Whether the heap entry `h` (of this slot) is the armed timer of its kind.
    fn holds_entry(&self, h: &HeapEntry) -> bool {
        self.holds(&(h.0, h.1, h.2, h.4)) && self.seq[h.4 as usize] == h.3 .0
    }

    /// Arms `e` (of this slot) as the `seq`th timer armed, its kind not armed.
    fn set(&mut self, e: &TimerEntry, seq: u32) {
        let k = e.3 as usize;
        debug_assert!(
            self.armed & (1 << k) == 0,
            "a second timer of one kind for one socket"
        );
        debug_assert!(
            self.armed == 0 || self.gen == e.2,
            "timers of two sockets in one slot"
        );
        self.at[k] = e.0;
        self.seq[k] = seq;
        self.gen = e.2;
        self.armed |= 1 << k;
    }

    /// Disarms `kind`.
    fn clear(&mut self, kind: TimerKind) {
        self.armed &= !(1 << kind as usize);
    }
}

impl TimerSet {
    /// The earliest deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|t| t.0 .0)
    }

    /// Take the earliest timer if it is due at `now`: (deadline, socket slot, generation,
    /// kind). The socket's own record says whether it still stands ([`Timers::fire`]).
    pub fn pop_due(&mut self, now: Instant) -> Option<TimerEntry> {
        match self.heap.peek() {
            Some(&Reverse(h)) if h.0 <= now => {
                self.heap.pop();
                self.live[h.1 as usize].clear(h.4);
                self.members -= 1;
                self.surface();
                self.compact();
                Some((h.0, h.1, h.2, h.4))
            }
            _ => None,
        }
    }

    /// Whether `e` is armed.
    fn holds(&self, e: &TimerEntry) -> bool {
        self.live.get(e.1 as usize).is_some_and(|l| l.holds(e))
    }

    /// Whether the heap entry `h` is armed.
    fn holds_entry(&self, h: &HeapEntry) -> bool {
        self.live
            .get(h.1 as usize)
            .is_some_and(|l| l.holds_entry(h))
    }

    /// Adds `e` (nothing if it is there already). Its socket has no other timer of its kind,
    /// and no timer of an earlier socket in its slot (a freed socket's are all cancelled).
    fn insert(&mut self, e: TimerEntry) {
        let slot = e.1 as usize;
        if self.live.len() <= slot {
            self.live.resize(slot + 1, SlotTimers::default());
        }
        let l = &mut self.live[slot];
        if l.holds(&e) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq = seq.wrapping_add(1);
        l.set(&e, seq);
        self.members += 1;
        self.heap.push(Reverse((e.0, e.1, e.2, Reverse(seq), e.3)));
    }

    /// Removes `e` if it is there.
    fn remove(&mut self, e: TimerEntry) {
        if !self.holds(&e) {
            return;
        }
        self.live[e.1 as usize].clear(e.3);
        self.members -= 1;
        self.surface();
        self.compact();
    }

    /// Rebuilds the heap from its member entries (one each) once stale entries outnumber
    /// them: O(n log n) once per at least n/2 removals.
    fn compact(&mut self) {
        if self.heap.len() > 2 * self.members + 64 {
            let mut v = std::mem::take(&mut self.heap).into_vec();
            v.retain(|Reverse(h)| self.holds_entry(h));
            v.sort_unstable();
            v.dedup();
            self.heap = BinaryHeap::from(v);
        }
    }

    /// Drops the removed entries at the top, so that the top is a member.
    fn surface(&mut self) {
        while let Some(Reverse(top)) = self.heap.peek() {
            if self.holds_entry(top) {
                break;
            }
            self.heap.pop();
        }
    }
}

impl Timers {
    pub fn new() -> Timers {
        Timers {
            at: [None; NTIMERS],
            rtx_event: RtxEvent::Rto,
            backoff: 0,
            retransmits: 0,
            retrans_stamp: None,
            synack_retries_done: 0,
            probes: Probes::default(),
        }
    }

    /// Whether a timer of `kind` is armed.
    pub fn armed(&self, kind: TimerKind) -> bool {
        self.at[kind as usize].is_some()
    }

    /// The stack's timer set found this timer due at `at`: true (and the timer is no longer
    /// armed) if it is still armed for that time, false if it was re-armed or cancelled since.
    pub fn fire(&mut self, kind: TimerKind, at: Instant) -> bool {
        let t = &mut self.at[kind as usize];
        if *t == Some(at) {
            *t = None;
            true
        } else {
            false
        }
    }
}

impl Connection {
    /// Arm (or re-arm) a timer for `at`; a timer-wheel timer fires when
    /// [`jiffy_timer_fire`] says.
    pub fn arm(&mut self, env: &mut Env, kind: TimerKind, at: Instant) {
        // The retransmit (RTO, persist, SYN, loss probe, RACK), delayed-ACK and keepalive
        // (FIN_WAIT2, TIME_WAIT) timers live on the jiffy timer wheel (`sk_reset_timer`);
        // the compressed-SACK timer is an hrtimer and fires on time.
        // A timer due at once is the engine's "at the end of this step" and stays so, but
        // for a delayed ACK due at once (`ato` 0: a bare FIN before any data): Linux arms
        // the wheel for the current jiffy, which runs at a later tick (kernel recordings of
        // fuzz seeds 60046, 60057, 60105: 4.7 to 5.7 ms after the FIN of an active opener;
        // a passive child's within 4 ms, close-remote-fin-then-close): on the next tick.
        let phase = env.timers.jiffy_phase;
        let at = if kind == TimerKind::Delack && at <= env.clock {
            jiffy_timer_fire(env.clock, Duration::ZERO, phase)
        } else if at <= env.clock || kind == TimerKind::CompSack {
            at
        } else {
            jiffy_timer_fire(env.clock, at - env.clock, phase)
        };
        // Armed for that very time already (several segments sent at one instant): the set
        // would get back the entry it gave up.
        if self.timer.at[kind as usize] == Some(at) {
            return;
        }
        if let Some(old) = self.timer.at[kind as usize].take() {
            env.timers.remove((old, self.id.0, self.gen, kind));
        }
        self.timer.at[kind as usize] = Some(at);
        env.timers.insert((at, self.id.0, self.gen, kind));
    }

    /// Cancel a timer.
    pub fn disarm(&mut self, env: &mut Env, kind: TimerKind) {
        if let Some(old) = self.timer.at[kind as usize].take() {
            env.timers.remove((old, self.id.0, self.gen, kind));
        }
    }

    pub fn disarm_all(&mut self, env: &mut Env) {
        for k in [
            TimerKind::Retrans,
            TimerKind::Delack,
            TimerKind::Keepalive,
            TimerKind::CompSack,
        ] {
            self.disarm(env, k);
        }
    }
}

#[cfg(test)]
mod set_tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The heap with its member table gives what an ordered set of the entries gives: the
    /// same earliest deadline after every change and the same entries popped in the same
    /// order (a socket's timers due together: the last armed first), through random arming,
    /// re-arming (to the same time too), cancelling, slots freed and reused with a new
    /// generation, and time passing.
    #[test]
    fn timer_set_is_the_ordered_set() {
        const KINDS: [TimerKind; NTIMERS] = [
            TimerKind::Retrans,
            TimerKind::Delack,
            TimerKind::Keepalive,
            TimerKind::CompSack,
        ];
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut set = TimerSet::default();
        let mut model: BTreeSet<HeapEntry> = BTreeSet::new();
        let mut seq = 0u32;
        // Per slot: generation and each kind's armed deadline and arming order (the sockets'
        // records).
        type Armed = [Option<(Instant, u32)>; NTIMERS];
        let mut socks: Vec<(u32, Armed)> = vec![(1, [None; NTIMERS]); 40];
        let mut now = Instant::ZERO;
        for _ in 0..200_000 {
            let slot = rnd(socks.len() as u64) as usize;
            let kind = KINDS[rnd(NTIMERS as u64) as usize];
            let (gen, at) = (socks[slot].0, &mut socks[slot].1[kind as usize]);
            match rnd(10) {
                0..=4 => {
                    // Arm: a few distinct times, so that re-arming to the same time happens.
                    let t = now + Duration::from_micros(rnd(50) * 100);
                    if let Some((old, q)) = at.take() {
                        set.remove((old, slot as u32, gen, kind));
                        model.remove(&(old, slot as u32, gen, Reverse(q), kind));
                    }
                    *at = Some((t, seq));
                    set.insert((t, slot as u32, gen, kind));
                    model.insert((t, slot as u32, gen, Reverse(seq), kind));
                    seq += 1;
                }
                5..=6 => {
                    if let Some((old, q)) = at.take() {
                        set.remove((old, slot as u32, gen, kind));
                        model.remove(&(old, slot as u32, gen, Reverse(q), kind));
                    }
                }
                7 => {
                    // The slot is freed (every timer cancelled) and serves a new socket.
                    for k in KINDS {
                        if let Some((old, q)) = socks[slot].1[k as usize].take() {
                            set.remove((old, slot as u32, gen, k));
                            model.remove(&(old, slot as u32, gen, Reverse(q), k));
                        }
                    }
                    socks[slot].0 += 1;
                }
                _ => {
                    now += Duration::from_micros(rnd(300));
                    loop {
                        let got = set.pop_due(now);
                        let want = match model.first() {
                            Some(&e) if e.0 <= now => model.pop_first(),
                            _ => None,
                        };
                        assert_eq!(got, want.map(|h| (h.0, h.1, h.2, h.4)));
                        let Some((t, s, g, k)) = got else { break };
                        if socks[s as usize].0 == g
                            && socks[s as usize].1[k as usize].map(|a| a.0) == Some(t)
                        {
                            socks[s as usize].1[k as usize] = None;
                        }
                    }
                }
            }
            assert_eq!(set.next_deadline(), model.first().map(|e| e.0));
            assert!(set.heap.len() <= 2 * set.members + 64 + 1);
        }
    }
}
