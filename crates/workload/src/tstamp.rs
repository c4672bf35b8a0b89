//! Per-write transmit timestamps as a user reads them (`SO_TIMESTAMPING` with
//! `TX_SCHED | TX_SOFTWARE | TX_ACK | OPT_ID`): the error queue gives, per write (its key, the
//! offset of its last byte), the time it entered the host's queue (SCHED), left the host (SND)
//! and was acknowledged (ACK). [`WriteStamps`] pairs them by key into the two spans the TSQ
//! experiment is about: SCHED→SND, the write's residence in the host's queues (qdisc and
//! device), and SND→ACK, its time on the network and at the peer.
//!
//! The same matcher serves every substrate: the emulator's engine, Shallow on a TUN and the
//! kernel's own sockets (whose error queue says the same things in `sock_extended_err`).
//! Events of a key come in the order SCHED, SND, ACK; a retransmission brings SCHED and SND
//! again (the first of each is kept: the write's first trip through the host); ACKs come in
//! key order, once per key. A write whose ACK comes without its SCHED or SND (an event the
//! full error queue dropped, Linux's `sock_queue_err_skb` limit) is counted incomplete, not
//! measured; so is a write left behind by a later key's ACK.

use std::collections::VecDeque;
use std::time::Duration;

use shallow_time::Instant;

/// Which moment a transmit timestamp records (Linux's `SCM_TSTAMP_*`, `ee_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StampKind {
    /// `SCM_TSTAMP_SND` (0): the device took the packet.
    Snd,
    /// `SCM_TSTAMP_SCHED` (1): the packet entered the qdisc.
    Sched,
    /// `SCM_TSTAMP_ACK` (2): the write's last byte was cumulatively acknowledged.
    Ack,
}

impl StampKind {
    /// From Linux's `SCM_TSTAMP_*` number (`ee_info`); None for another.
    pub fn from_scm(v: u32) -> Option<StampKind> {
        match v {
            0 => Some(StampKind::Snd),
            1 => Some(StampKind::Sched),
            2 => Some(StampKind::Ack),
            _ => None,
        }
    }
}

/// One write's spans, once its ACK came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteSpans {
    /// The write's key.
    pub key: u32,
    /// SCHED→SND: residence in the host's queues.
    pub sched_to_snd: Duration,
    /// SND→ACK.
    pub snd_to_ack: Duration,
}

/// A write seen (SCHED or SND) but not yet acknowledged.
#[derive(Clone, Copy, Debug)]
struct Open {
    key: u32,
    sched: Option<Instant>,
    snd: Option<Instant>,
}

/// How many writes may wait for their ACK (a peer that never acknowledges costs no more; the
/// oldest is counted incomplete).
pub const OPEN_MAX: usize = 1 << 16;

/// Pairs a socket's transmit timestamps by key (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct WriteStamps {
    open: VecDeque<Open>,
    /// Writes acknowledged without both SCHED and SND seen, or passed over.
    pub incomplete: u64,
    /// Events of a kind this matcher does not know.
    pub unknown: u64,
}

impl WriteStamps {
    /// A matcher with nothing seen.
    pub fn new() -> WriteStamps {
        WriteStamps::default()
    }

    /// One event from the error queue; the write's spans when it is its ACK.
    pub fn add(&mut self, kind: StampKind, key: u32, time: Instant) -> Option<WriteSpans> {
        match kind {
            StampKind::Sched | StampKind::Snd => {
                let i = match self.open.iter().rposition(|o| o.key == key) {
                    Some(i) => i,
                    None => {
                        if self.open.len() >= OPEN_MAX {
                            self.open.pop_front();
                            self.incomplete += 1;
                        }
                        self.open.push_back(Open {
                            key,
                            sched: None,
                            snd: None,
                        });
                        self.open.len() - 1
                    }
                };
                let o = &mut self.open[i];
                let slot = if kind == StampKind::Sched {
                    &mut o.sched
                } else {
                    &mut o.snd
                };
                slot.get_or_insert(time);
                None
            }
            StampKind::Ack => {
                let Some(i) = self.open.iter().position(|o| o.key == key) else {
                    self.incomplete += 1;
                    return None;
                };
                // Writes before it whose ACK never came (dropped): not measured.
                self.incomplete += i as u64;
                let o = self.open.drain(..=i).next_back()?;
                match (o.sched, o.snd) {
                    (Some(sched), Some(snd)) => Some(WriteSpans {
                        key,
                        sched_to_snd: snd.saturating_duration_since(sched),
                        snd_to_ack: time.saturating_duration_since(snd),
                    }),
                    _ => {
                        self.incomplete += 1;
                        None
                    }
                }
            }
        }
    }

    /// Writes seen and not yet acknowledged.
    pub fn pending(&self) -> usize {
        self.open.len()
    }
}

/// The distribution of one span over many writes, nanoseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SpanSummary {
    /// Writes measured.
    pub count: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// Largest, ns.
    pub max_ns: u64,
}

impl SpanSummary {
    /// Nearest-rank quantiles of `ns` (sorted here); None when empty.
    pub fn of(ns: &mut [u64]) -> Option<SpanSummary> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        let q = |q: f64| {
            let rank = (q * ns.len() as f64).ceil() as usize;
            ns[rank.saturating_sub(1).min(ns.len() - 1)]
        };
        Some(SpanSummary {
            count: ns.len() as u64,
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            max_ns: ns[ns.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(us: u64) -> Instant {
        Instant::from_micros(us)
    }

    #[test]
    fn spans_per_write_first_sched_and_snd_kept() {
        let mut w = WriteStamps::new();
        assert_eq!(w.add(StampKind::Sched, 999, t(10)), None);
        assert_eq!(w.add(StampKind::Sched, 1999, t(11)), None);
        assert_eq!(w.add(StampKind::Snd, 999, t(15)), None);
        // A retransmission of 999: its first trip is kept.
        assert_eq!(w.add(StampKind::Sched, 999, t(40)), None);
        assert_eq!(w.add(StampKind::Snd, 999, t(41)), None);
        assert_eq!(
            w.add(StampKind::Ack, 999, t(100)),
            Some(WriteSpans {
                key: 999,
                sched_to_snd: Duration::from_micros(5),
                snd_to_ack: Duration::from_micros(85),
            })
        );
        assert_eq!(w.add(StampKind::Snd, 1999, t(20)), None);
        let s = w.add(StampKind::Ack, 1999, t(120)).unwrap();
        assert_eq!(s.sched_to_snd, Duration::from_micros(9));
        assert_eq!((w.incomplete, w.pending()), (0, 0));
    }

    #[test]
    fn dropped_events_are_incomplete_not_measured() {
        let mut w = WriteStamps::new();
        // 10: SND dropped. 20: ACK dropped (passed over by 30's). 40: ACK without anything.
        w.add(StampKind::Sched, 10, t(1));
        assert_eq!(w.add(StampKind::Ack, 10, t(5)), None);
        w.add(StampKind::Sched, 20, t(6));
        w.add(StampKind::Snd, 20, t(7));
        w.add(StampKind::Sched, 30, t(8));
        w.add(StampKind::Snd, 30, t(9));
        assert!(w.add(StampKind::Ack, 30, t(20)).is_some());
        assert_eq!(w.add(StampKind::Ack, 40, t(21)), None);
        assert_eq!(w.incomplete, 3);
        assert_eq!(StampKind::from_scm(1), Some(StampKind::Sched));
        assert_eq!(StampKind::from_scm(3), None);
    }

    #[test]
    fn open_writes_are_bounded() {
        let mut w = WriteStamps::new();
        for k in 0..(OPEN_MAX as u32 + 10) {
            w.add(StampKind::Sched, k, t(1));
        }
        assert_eq!(w.pending(), OPEN_MAX);
        assert_eq!(w.incomplete, 10);
    }

    #[test]
    fn summary_quantiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let s = SpanSummary::of(&mut v).unwrap();
        assert_eq!(
            (s.count, s.p50_ns, s.p90_ns, s.p99_ns, s.max_ns),
            (100, 50, 90, 99, 100)
        );
        assert_eq!(SpanSummary::of(&mut []), None);
    }
}
