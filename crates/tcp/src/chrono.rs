//! Send-side chronographs (Linux's `tcp_chrono_start`/`tcp_chrono_stop`): how long a
//! connection has been busy sending, and of that how long limited by the peer's receive
//! window or by its own send buffer (`tcpi_busy_time`, `tcpi_rwnd_limited`,
//! `tcpi_sndbuf_limited`). One chronograph runs at a time; a higher-numbered type takes over
//! from a lower one. [`Chrono`]'s fields are private to this file.

use crate::socket::Connection;
use crate::time::Instant;
use crate::timer::JIFFY;
use core::time::Duration;

/// Chronograph types (`enum tcp_chrono`): busy sending.
pub(crate) const CHRONO_BUSY: u8 = 1;
/// Limited by the peer's receive window.
pub(crate) const CHRONO_RWND_LIMITED: u8 = 2;
/// Limited by the send buffer.
pub(crate) const CHRONO_SNDBUF_LIMITED: u8 = 3;

/// The running chronograph (type 0: none) since `start`, and the time accumulated per type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chrono {
    ty: u8,
    start: Instant,
    stat: [Duration; 3],
}

impl Default for Chrono {
    fn default() -> Self {
        Chrono {
            ty: 0,
            start: Instant::ZERO,
            stat: [Duration::ZERO; 3],
        }
    }
}

impl Chrono {
    /// Time between two instants as Linux's chronographs count it: whole jiffies
    /// (`tcp_jiffies32` at start and stop), on a tick grid at multiples of [`JIFFY`] of our
    /// clock. Measured on 6.18 (HZ=250) with tcp_info/tcp-info-sndbuf-limited.pkt: a
    /// busy period from the write at 0.10 s to the ACK at 0.15 s reads tcpi_busy_time 48000
    /// (12 ticks), the sndbuf-limited one from 0.13 s, 20000 (5 ticks).
    fn span(from: Instant, to: Instant) -> Duration {
        let j = JIFFY.as_nanos() as u64;
        let ticks = (to.as_nanos() / j).saturating_sub(from.as_nanos() / j);
        Duration::from_nanos(ticks * j)
    }

    fn set(&mut self, now: Instant, t: u8) {
        if self.ty != 0 {
            let i = usize::from(self.ty - 1);
            self.stat[i] += Self::span(self.start, now);
        }
        self.start = now;
        self.ty = t;
    }

    /// `tcp_chrono_start`: a higher-priority state (busy < rwnd-limited < sndbuf-limited)
    /// takes over.
    pub fn start(&mut self, now: Instant, t: u8) {
        if t > self.ty {
            self.set(now, t);
        }
    }

    /// Accumulated time per type, the running chronograph included.
    pub fn totals(&self, now: Instant) -> [Duration; 3] {
        let mut s = self.stat;
        if self.ty != 0 {
            s[usize::from(self.ty - 1)] += Self::span(self.start, now);
        }
        s
    }
}

impl Connection {
    /// `tcp_chrono_stop`: with nothing left to send every chronograph stops; otherwise the
    /// end of type `t` falls back to busy.
    pub fn chrono_stop(&mut self, now: Instant, t: u8) {
        if self.snd.write_queue.is_empty() && self.rtx.queue.is_empty() {
            if self.chrono.ty != 0 {
                self.chrono.set(now, 0);
            }
        } else if t == self.chrono.ty {
            self.chrono.set(now, 1);
        }
    }
}
