//! Stack-wide TCP memory accounting in pages against `net.ipv4.tcp_mem` (Linux
//! `sk_mem_schedule` / `__sk_mem_raise_allocated`, `sk_mem_reclaim`,
//! `tcp_enter_memory_pressure` / `tcp_leave_memory_pressure`).
//!
//! Each socket owns `SockMem::pages` pages of the stack-wide `memory_allocated` counter. What it
//! has charged is `wmem_queued + rmem_alloc` (truesize of the write/retransmit queues and of
//! the receive/out-of-order queues); the rest of its pages is its `forward_alloc`
//! (`pages * 4096 - charged`, the `f` of `SO_MEMINFO`).
//!
//! Rules (Linux 6.x):
//! - An allocation that may fail (`sk_wmem_schedule` for sendmsg, `sk_rmem_schedule` for
//!   received data) first uses forward_alloc; if short by `delta` bytes it raises
//!   `memory_allocated` by `ceil(delta / 4096)` pages. Against `tcp_mem = [min, pressure, max]`:
//!   at or below min the stack leaves pressure and the raise succeeds; above pressure the
//!   stack enters pressure (`TcpExtTCPMemoryPressures`); above max it fails (as in Linux, the
//!   hard limit is checked before the per-socket minimum); otherwise it succeeds when the
//!   stack is not under pressure, when the socket is below its own minimum (`tcp_wmem[0]`
//!   queued / `tcp_rmem[0]` received), or when it holds less than its fair share
//!   (`sockets_allocated * its pages < max`). A failed send-side
//!   raise moderates sndbuf (`sk_stream_moderate_sndbuf`) and still succeeds when the
//!   write queue is already at sndbuf (the writer will wait for space anyway).
//! - Charges that must not fail (`sk_forced_mem_schedule`: FIN, splitting skbs, the first
//!   received skb of an empty receive queue) take pages without the limit checks.
//! - Reclaim (`sk_mem_uncharge` → `sk_mem_reclaim` in 6.x, no `SK_RECLAIM_THRESHOLD`): when
//!   forward_alloc reaches a whole page, every whole page goes back, so a socket keeps less
//!   than one page in reserve; dropping below `tcp_mem[0]` leaves pressure and adds the time
//!   spent to `TcpExtTCPMemoryPressuresChrono` (ms).
//! - We do not model Linux's per-CPU reserve of `memory_allocated`
//!   (`sysctl_mem_pcpu_rsv`): the counter is exact. Charges and uncharges made inside one
//!   engine call are settled at the end of that call ([`Connection::mem_sync`], from
//!   `Stack::reap`), so forced charges and reclaims are per call rather than per skb.
//! - A freed socket returns all its pages ([`Connection::mem_release`]).

use crate::env::Env;
use crate::socket::pollbits::{POLLOUT, POLLWRBAND, POLLWRNORM};
use crate::socket::{Connection, SOCK_MIN_SNDBUF};
use crate::sysctl::Sysctl;
use crate::time::Instant;
use crate::Mib;

/// Page size of the accounting (`PAGE_SIZE`).
pub const PAGE: i64 = 4096;

/// Largest page fragment sendmsg copies into at once (`SKB_FRAG_PAGE_ORDER`: 32 KiB); each
/// fragment is one `sk_wmem_schedule`.
pub(crate) const PAGE_FRAG: usize = 32768;

/// Which side asks for memory (`SK_MEM_SEND` / `SK_MEM_RECV`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemKind {
    Send,
    Recv,
}

/// `sk_mem_pages`: bytes rounded up to pages.
fn pages(bytes: i64) -> i64 {
    (bytes.max(0) + PAGE - 1) / PAGE
}

/// Host-wide TCP memory accounting (Linux's `tcp_memory_allocated`, `tcp_memory_pressure`,
/// `tcp_sockets_allocated`), against `net.ipv4.tcp_mem` (`mem.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostMem {
    /// Global TCP memory in pages (`tcp_memory_allocated`).
    pub allocated: i64,
    /// Under TCP memory pressure (`tcp_memory_pressure`).
    pub pressure: bool,
    /// When pressure was entered (for `TcpExtTCPMemoryPressuresChrono`).
    pub pressure_since: Instant,
    /// Live TCP sockets (`tcp_sockets_allocated`; our TIME_WAIT sockets are full sockets).
    pub sockets: u32,
}

impl Env {
    /// `tcp_enter_memory_pressure`: remember when, count `TcpExtTCPMemoryPressures` once.
    pub(crate) fn enter_memory_pressure(&mut self) {
        if self.mem.pressure {
            return;
        }
        self.mem.pressure = true;
        self.mem.pressure_since = self.clock;
        self.mib.inc(Mib::TCPMemoryPressures);
    }

    /// `tcp_leave_memory_pressure`: add the time spent under pressure (ms) to
    /// `TcpExtTCPMemoryPressuresChrono`.
    pub(crate) fn leave_memory_pressure(&mut self) {
        if !self.mem.pressure {
            return;
        }
        self.mem.pressure = false;
        let d = self
            .clock
            .saturating_duration_since(self.mem.pressure_since);
        self.mib
            .add(Mib::TCPMemoryPressuresChrono, d.as_millis() as u64);
    }

    /// `__sk_mem_reduce_allocated`: give pages back; below `tcp_mem[0]` pressure ends.
    pub(crate) fn memory_reduce(&mut self, amt: i64) {
        self.mem.allocated -= amt;
        debug_assert!(self.mem.allocated >= 0, "tcp memory underflow");
        if self.mem.pressure && self.mem.allocated < self.config.sysctl.triple(Sysctl::tcp_mem)[0] {
            self.leave_memory_pressure();
        }
    }
}

impl Connection {
    /// Bytes this socket has charged: write/retransmit queues + receive/ofo queues.
    pub(crate) fn mem_charged(&self) -> i64 {
        i64::from(self.mem.wmem_queued) + i64::from(self.mem.rmem_alloc)
    }

    /// `sk_forward_alloc`: bytes of our pages not yet charged (negative between a forced
    /// charge and the end of the engine call that settles it).
    pub(crate) fn forward_alloc(&self) -> i64 {
        self.mem.pages * PAGE - self.mem_charged()
    }

    /// `__sk_mem_raise_allocated`: take `amt` more pages for an allocation of `size` bytes.
    fn mem_raise(&mut self, env: &mut Env, size: i64, amt: i64, kind: MemKind) -> bool {
        env.mem.allocated += amt;
        let allocated = env.mem.allocated;
        let [min, pressure, max] = env.config.sysctl.triple(Sysctl::tcp_mem);
        if allocated <= min {
            env.leave_memory_pressure();
            return true;
        }
        if allocated > pressure {
            env.enter_memory_pressure();
        }
        // Over the hard limit nothing is guaranteed (Linux checks max before the minimum).
        if allocated <= max {
            // Guarantee the per-socket minimum.
            let below_min = match kind {
                MemKind::Recv => {
                    i64::from(self.mem.rmem_alloc) < env.config.sysctl.triple(Sysctl::tcp_rmem)[0]
                }
                MemKind::Send => {
                    i64::from(self.mem.wmem_queued) < env.config.sysctl.triple(Sysctl::tcp_wmem)[0]
                }
            };
            if below_min || !env.mem.pressure {
                return true;
            }
            // Fairness under pressure: sockets below the average share may still grow.
            let socks = i64::from(env.mem.sockets.max(1));
            if max > socks * (self.mem.pages + amt) {
                return true;
            }
        }
        if kind == MemKind::Send {
            self.moderate_sndbuf();
            if i64::from(self.mem.wmem_queued) + size >= i64::from(self.mem.sndbuf) {
                return true;
            }
        }
        env.mem.allocated -= amt;
        false
    }

    /// `__sk_mem_schedule` for a shortfall of `delta` bytes.
    fn mem_schedule(&mut self, env: &mut Env, delta: i64, kind: MemKind) -> bool {
        let amt = pages(delta);
        if self.mem_raise(env, delta, amt, kind) {
            self.mem.pages += amt;
            true
        } else {
            false
        }
    }

    /// `sk_wmem_schedule`: may `size` more bytes be queued for sending?
    pub(crate) fn wmem_schedule(&mut self, env: &mut Env, size: u32) -> bool {
        let delta = i64::from(size) - self.forward_alloc();
        delta <= 0 || self.mem_schedule(env, delta, MemKind::Send)
    }

    /// `sk_rmem_schedule`: may `size` more bytes be queued for receiving?
    pub(crate) fn rmem_schedule(&mut self, env: &mut Env, size: u32) -> bool {
        let delta = i64::from(size) - self.forward_alloc();
        delta <= 0 || self.mem_schedule(env, delta, MemKind::Recv)
    }

    /// `sk_stream_moderate_sndbuf`: after a failed allocation, shrink sndbuf to half of what
    /// is queued (at least `SOCK_MIN_SNDBUF`), unless the application set SO_SNDBUF.
    pub(crate) fn moderate_sndbuf(&mut self) {
        if self.opts.sndbuf_lock {
            return;
        }
        let val = self.mem.sndbuf.min(self.mem.wmem_queued >> 1);
        self.mem.sndbuf = val.max(SOCK_MIN_SNDBUF);
    }

    /// Settle the charges made since the last call: a deficit is taken by force
    /// (`sk_forced_mem_schedule`), whole spare pages go back (`sk_mem_reclaim`).
    pub(crate) fn mem_sync(&mut self, env: &mut Env) {
        if self.mem.wait != 0 && self.mem.wmem_queued < self.mem.wait {
            // Queued bytes were freed: the writer may try again.
            self.mem.wait = 0;
            if self.stream_is_writeable(env, 1) {
                env.out.wake(self.id, POLLOUT | POLLWRNORM | POLLWRBAND);
            }
        }
        let fa = self.forward_alloc();
        if fa < 0 {
            let amt = pages(-fa);
            self.mem.pages += amt;
            env.mem.allocated += amt;
        } else if fa >= PAGE {
            let amt = fa / PAGE;
            self.mem.pages -= amt;
            env.memory_reduce(amt);
        }
    }

    /// The socket is being freed: every page goes back (`sk_mem_reclaim_final`).
    pub(crate) fn mem_release(&mut self, env: &mut Env) {
        let amt = self.mem.pages;
        self.mem.pages = 0;
        if amt > 0 {
            env.memory_reduce(amt);
        }
    }

    /// `tcp_adjust_rcv_ssthresh`: under memory pressure, offer at most 4 MSS more.
    pub(crate) fn adjust_rcv_ssthresh(&mut self) {
        self.rcv.ssthresh = self.rcv.ssthresh.min(4 * self.mss.advmss);
    }

    /// `tcp_clamp_window`: the receive queue reached rcvbuf; grow rcvbuf to what is queued
    /// when memory allows, else clamp the window we offer.
    pub(crate) fn clamp_window(&mut self, env: &Env) {
        self.ack.quick = 0;
        let rmem2 = env.config.sysctl.triple(Sysctl::tcp_rmem)[2].max(0) as u32;
        if self.mem.rcvbuf < rmem2
            && !self.opts.rcvbuf_lock
            && !env.mem.pressure
            && env.mem.allocated < env.config.sysctl.triple(Sysctl::tcp_mem)[0]
        {
            self.mem.rcvbuf = self.mem.rmem_alloc.min(rmem2).max(self.mem.rcvbuf);
        }
        if self.mem.rmem_alloc > self.mem.rcvbuf {
            self.rcv.ssthresh = self.rcv.window_clamp.min(2 * self.mss.advmss);
        }
    }

    /// `tcp_try_rmem_schedule` for in-order data (`force` when the receive queue is empty:
    /// Linux charges the first skb with `sk_forced_mem_schedule`) or out-of-order data: on
    /// failure `tcp_prune_queue` (clamp or adjust the window, count `PruneCalled`) then drop
    /// out-of-order data from the far end until the charge fits. False: drop the segment.
    pub(crate) fn try_rmem_schedule(&mut self, env: &mut Env, size: u32) -> bool {
        if self.rmem_schedule(env, size) {
            return true;
        }
        env.mib.inc(Mib::PruneCalled);
        if self.mem.rmem_alloc >= self.mem.rcvbuf {
            self.clamp_window(env);
        } else if env.mem.pressure {
            self.adjust_rcv_ssthresh();
        }
        loop {
            if !self.prune_ofo(env) {
                return false;
            }
            if self.rmem_schedule(env, size) {
                return true;
            }
        }
    }
}

/// A socket's buffer sizes and what its queues hold (`sock`'s `sk_sndbuf`, `sk_rcvbuf`,
/// `sk_wmem_queued`, `sk_wmem_alloc`, `sk_rmem_alloc`, `sk_forward_alloc`). The rules over them
/// (scheduling against `tcp_mem`, reclaim, `sndbuf` moderation, the window clamp under pressure)
/// live in this file, and its pages and allocation-failure mark are private to it; the byte
/// counters are `pub(crate)` because, as in Linux, a buffer is
/// charged and uncharged where it is queued or freed (`sendmsg`, the transmit, the clean-up of
/// acked data, the receive and out-of-order queues, TX completions), and the window, `tcp_poll`
/// and TSQ read them.
#[derive(Debug)]
pub(crate) struct SockMem {
    /// `sk_wmem_queued`: truesize of the write and retransmit queues.
    pub wmem_queued: u32,
    /// `sk_wmem_alloc` less its bias: truesize of packets below TCP, not yet completed.
    pub wmem_alloc: u32,
    /// `sk_sndbuf`.
    pub sndbuf: u32,
    /// `sk_rcvbuf`.
    pub rcvbuf: u32,
    /// `sk_rmem_alloc`: truesize of the receive and out-of-order queues.
    pub rmem_alloc: u32,
    /// Pages of the stack-wide TCP memory this socket holds (private: changed only by the
    /// scheduling and reclaim rules here).
    pages: i64,
    /// `wmem_queued` when a send-side memory allocation failed (0: none pending); the
    /// socket is not writable until the queues shrink below it (private: see
    /// [`SockMem::wait_for_memory`]).
    wait: u32,
}

impl SockMem {
    /// A socket with the default buffer sizes and nothing charged.
    pub fn new(sndbuf: u32, rcvbuf: u32) -> SockMem {
        SockMem {
            wmem_queued: 0,
            wmem_alloc: 0,
            sndbuf,
            rcvbuf,
            rmem_alloc: 0,
            pages: 0,
            wait: 0,
        }
    }

    /// A send-side allocation failed: the socket stays unwritable until its queues shrink
    /// below what they hold now (Linux sleeps a short random time instead).
    pub fn wait_for_memory(&mut self) {
        self.wait = self.wmem_queued.max(1);
    }

    /// Whether a send-side allocation failure still holds the socket unwritable.
    pub fn waiting(&self) -> bool {
        self.wait != 0
    }
}
