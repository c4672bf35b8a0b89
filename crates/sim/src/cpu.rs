//! CPUs and the cost table: every operation of a host (a system call, copying bytes, sending a
//! packet, processing one that arrived, a TX completion, a wake-up) takes CPU time, and a CPU
//! does one thing at a time. This is what makes the emulator CPU-bound at high rates, as real
//! hosts are, and what gives the shallow-queue mechanisms (autocorking, backlog ACK deferral,
//! fewer wake-ups) an effect on throughput.
//!
//! ## How the defaults were chosen
//!
//! The table is the engine's own measured cost per operation, plus what a kernel does that
//! the engine does not (system call entry and exit, the driver's per-packet transmit work),
//! rounded; it was checked so that at 10 Gbit/s and above a CPU, not the wire, limits
//! throughput in the regimes of the seeds (spec §12). The figures are fixed: no experiment
//! tunes them. `cargo run --release -p shallow-sim --example calibrate` times the engine's
//! calls on the machine at hand (two `Stack`s joined directly). Figures of Nov 2026 (2-core
//! shared VM, release build) against the table:
//!
//! | operation | engine measured | table |
//! |---|---|---|
//! | `send` of 64 KiB, with its ~2 TSO packets out | 10.8 µs (0.16 ns/B) | 300 + 6 554 + 2 × (1 200 + 22 × 40) ≈ 11.0 µs |
//! | `input` of a 22-segment GRO packet (data) | 4.5 µs (~200 ns/segment) | 1 000 + 22 × 150 = 4.3 µs |
//! | `input` of a pure ACK | 0.40–0.74 µs | 600 + 150 = 0.75 µs |
//! | `tx_complete` | 30–50 ns | 150 ns (with the NIC's TX clean) |
//! | `send` of 128 B that goes out as one segment | 0.63 µs | 300 + 13 + 1 240 ≈ 1.55 µs (syscall + driver) |
//! | `recv` | 0.2–0.75 µs per call | 300 ns + 0.1 ns/B copy |
//!
//! Consequences (same-CPU layout):
//! * 64 KiB writes: ~11 µs of sender CPU per 64 KiB (~48 Gbit/s per CPU) and ~4.3 µs of
//!   receiver softirq per 64 KiB GRO packet; with several flows, small GRO packets (flows
//!   interleaved at the receiver) or a receiver that also copies, one CPU saturates near
//!   10 Gbit/s, as a real core does.
//! * 128-byte writes with TCP_NODELAY: ~0.3 µs per call plus ~1.3 µs per segment pushed;
//!   without autocorking almost every write is a segment (< 1 Gbit/s per CPU), with it the
//!   writes coalesce and the system call dominates (~3 Gbit/s): the autocorking seed's
//!   4-flow 10 Gbit/s setting is CPU-bound the same way.
//! * A wake-up with its context switch is 2 µs, so wake-up counts cost throughput, as the
//!   NOTSENT_LOWAT seeds' context-switch counts do.

use crate::time::Instant;

/// CPU time of each operation, in nanoseconds (per byte: picoseconds). See the module docs for
/// how the defaults were chosen. Every field can be set from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostTable {
    /// Entry and exit of one system call (`send`, `recv`, `epoll_wait`, `accept` ...), with
    /// `lock_sock`/`release_sock` bookkeeping.
    pub syscall_ns: u64,
    /// Copying one byte between user memory and the socket (`copy_from_user`/`copy_to_user`),
    /// in picoseconds.
    pub copy_ps_per_byte: u64,
    /// Transmitting one packet handed to the qdisc (`tcp_transmit_skb` → IP → qdisc → driver
    /// xmit), whatever its size.
    pub tx_packet_ns: u64,
    /// Extra per wire segment of a TSO packet (descriptor and fragment setup).
    pub tx_segment_ns: u64,
    /// Receiving one packet carrying data (`tcp_v4_rcv` → `tcp_rcv_established`), after GRO.
    pub rx_packet_ns: u64,
    /// Extra per wire segment merged by GRO into a received packet (NAPI poll + GRO).
    pub rx_segment_ns: u64,
    /// Receiving one pure ACK (`tcp_ack`, cleaning the retransmit queue).
    pub ack_ns: u64,
    /// One TX completion (`napi_consume_skb` → `tcp_wfree`).
    pub tx_completion_ns: u64,
    /// Queueing one packet to an owned socket's backlog (`tcp_add_backlog`) in softirq; the
    /// packet's `rx_*` cost is paid later by the owner, in `release_sock`.
    pub backlog_enqueue_ns: u64,
    /// One run of the stack's timers (retransmit, delayed ACK, TLP ...), in softirq.
    pub timer_ns: u64,
    /// Waking a blocked thread: wake-up, context switch in and out, cache refill; paid by the
    /// woken thread's CPU before it runs.
    pub context_switch_ns: u64,
}

impl Default for CostTable {
    fn default() -> Self {
        CostTable {
            syscall_ns: 300,
            copy_ps_per_byte: 100,
            tx_packet_ns: 1_200,
            tx_segment_ns: 40,
            rx_packet_ns: 1_000,
            rx_segment_ns: 150,
            ack_ns: 600,
            tx_completion_ns: 150,
            backlog_enqueue_ns: 150,
            timer_ns: 500,
            context_switch_ns: 2_000,
        }
    }
}

/// A malformed cost-table override.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// Not `name=value`.
    #[error("`{0}` is not name=value")]
    NotKeyValue(String),
    /// No such cost.
    #[error("unknown cost `{0}` (expected one of: {names})", names = CostTable::NAMES.join(", "))]
    Unknown(String),
    /// Not a non-negative integer.
    #[error(
        "bad value `{1}` for cost `{0}`: expected a whole number (ns, or ps for copy_ps_per_byte)"
    )]
    BadValue(String, String),
}

impl CostTable {
    /// A table where everything is free (pure network model).
    pub const ZERO: CostTable = CostTable {
        syscall_ns: 0,
        copy_ps_per_byte: 0,
        tx_packet_ns: 0,
        tx_segment_ns: 0,
        rx_packet_ns: 0,
        rx_segment_ns: 0,
        ack_ns: 0,
        tx_completion_ns: 0,
        backlog_enqueue_ns: 0,
        timer_ns: 0,
        context_switch_ns: 0,
    };

    /// Field names, as accepted by [`CostTable::set`].
    pub const NAMES: &'static [&'static str] = &[
        "syscall_ns",
        "copy_ps_per_byte",
        "tx_packet_ns",
        "tx_segment_ns",
        "rx_packet_ns",
        "rx_segment_ns",
        "ack_ns",
        "tx_completion_ns",
        "backlog_enqueue_ns",
        "timer_ns",
        "context_switch_ns",
    ];

    fn field(&mut self, name: &str) -> Option<&mut u64> {
        Some(match name {
            "syscall_ns" => &mut self.syscall_ns,
            "copy_ps_per_byte" => &mut self.copy_ps_per_byte,
            "tx_packet_ns" => &mut self.tx_packet_ns,
            "tx_segment_ns" => &mut self.tx_segment_ns,
            "rx_packet_ns" => &mut self.rx_packet_ns,
            "rx_segment_ns" => &mut self.rx_segment_ns,
            "ack_ns" => &mut self.ack_ns,
            "tx_completion_ns" => &mut self.tx_completion_ns,
            "backlog_enqueue_ns" => &mut self.backlog_enqueue_ns,
            "timer_ns" => &mut self.timer_ns,
            "context_switch_ns" => &mut self.context_switch_ns,
            _ => return None,
        })
    }

    /// Set one cost from `name=value`.
    pub fn set(&mut self, kv: &str) -> Result<(), CostError> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| CostError::NotKeyValue(kv.to_string()))?;
        let (k, v) = (k.trim(), v.trim());
        let x: u64 = v
            .parse()
            .map_err(|_| CostError::BadValue(k.to_string(), v.to_string()))?;
        *self
            .field(k)
            .ok_or_else(|| CostError::Unknown(k.to_string()))? = x;
        Ok(())
    }

    /// `(name, value)` of every cost, in [`CostTable::NAMES`] order.
    pub fn entries(&self) -> Vec<(&'static str, u64)> {
        let mut c = *self;
        Self::NAMES
            .iter()
            .map(|n| (*n, c.field(n).map_or(0, |f| *f)))
            .collect()
    }

    /// Time to copy `bytes`.
    pub fn copy(&self, bytes: usize) -> u64 {
        (bytes as u64).saturating_mul(self.copy_ps_per_byte) / 1000
    }

    /// Time to transmit `packets` packets carrying `segments` wire segments in all.
    pub fn tx(&self, packets: u64, segments: u64) -> u64 {
        packets * self.tx_packet_ns + segments * self.tx_segment_ns
    }

    /// Time to process one received packet of `segments` wire segments (`payload` = false
    /// for a pure ACK or control segment).
    pub fn rx(&self, payload: bool, segments: u64) -> u64 {
        if payload {
            self.rx_packet_ns + segments.max(1) * self.rx_segment_ns
        } else {
            self.ack_ns + self.rx_segment_ns
        }
    }
}

/// Where the application threads and the packet processing of a host run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuLayout {
    /// One CPU does both (softirq preempts the application between its system calls).
    #[default]
    Same,
    /// CPU 0 does packet processing (NAPI/softirq), CPU 1 runs the application threads: the
    /// setting where backlog processing matters (spec §12 E5).
    Split,
    /// `cpus` CPUs sharing everything, as a multi-queue NIC with RSS spreads a many-flow host:
    /// application threads are placed round robin (one per flow, in creation order); each
    /// received packet's softirq work runs on the CPU its flow hashes to (RSS: a fixed hash
    /// of the port pair stands in for the NIC's Toeplitz hash), and so does the TX completion
    /// of each packet sent (the TX queue paired with that flow's RX queue); timers run on
    /// CPU 0. One flow's packets always meet the same CPU, so per-flow order is kept.
    Spread {
        /// Number of CPUs (1 to [`MAX_CPUS`]).
        cpus: usize,
    },
}

/// Most CPUs a host may have.
pub const MAX_CPUS: usize = 256;

impl CpuLayout {
    /// Number of CPUs of the layout.
    pub fn cpu_count(self) -> usize {
        match self {
            CpuLayout::Same => 1,
            CpuLayout::Split => 2,
            CpuLayout::Spread { cpus } => cpus.clamp(1, MAX_CPUS),
        }
    }
}

impl std::str::FromStr for CpuLayout {
    type Err = String;
    /// `same`, `split`, or a CPU count `N` ([`CpuLayout::Spread`]).
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "same" => Ok(CpuLayout::Same),
            "split" => Ok(CpuLayout::Split),
            _ => match s.parse::<usize>() {
                Ok(n) if (1..=MAX_CPUS).contains(&n) => Ok(CpuLayout::Spread { cpus: n }),
                _ => Err(format!(
                    "unknown CPU layout `{s}` (expected same, split or a CPU count 1..={MAX_CPUS})"
                )),
            },
        }
    }
}

/// One CPU's timeline: it is busy until `free_at`; `busy` totals the CPU time spent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    /// The CPU finishes its current work at this time.
    pub free_at: Instant,
    /// Total busy time, ns.
    pub busy_ns: u64,
    /// Busy time spent in packet processing (softirq), ns.
    pub softirq_ns: u64,
}

impl Cpu {
    /// Run `cost` ns of work starting at `now` (the CPU must be free by then).
    pub fn run(&mut self, now: Instant, cost: u64, softirq: bool) {
        self.free_at = now.max(self.free_at).saturating_add_nanos(cost);
        self.busy_ns += cost;
        if softirq {
            self.softirq_ns += cost;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_entries() {
        let mut c = CostTable::default();
        c.set("syscall_ns=7").unwrap();
        c.set(" ack_ns = 9 ").unwrap();
        assert_eq!(c.syscall_ns, 7);
        assert_eq!(c.ack_ns, 9);
        assert!(matches!(c.set("nope=1"), Err(CostError::Unknown(_))));
        assert!(matches!(c.set("ack_ns=-1"), Err(CostError::BadValue(..))));
        assert!(matches!(c.set("ack_ns"), Err(CostError::NotKeyValue(_))));
        assert_eq!(c.entries().len(), CostTable::NAMES.len());
        assert!(c.entries().contains(&("ack_ns", 9)));
    }

    #[test]
    fn cost_arithmetic() {
        let c = CostTable::default();
        assert_eq!(c.copy(65536), 6553);
        assert_eq!(c.tx(2, 45), 2 * 1200 + 45 * 40);
        assert_eq!(c.rx(false, 1), c.ack_ns + c.rx_segment_ns);
        assert_eq!(c.rx(true, 44), 1000 + 44 * 150);
        let mut cpu = Cpu::default();
        cpu.run(Instant(100), 50, true);
        cpu.run(Instant(120), 10, false);
        assert_eq!(cpu.free_at, Instant(160));
        assert_eq!((cpu.busy_ns, cpu.softirq_ns), (60, 50));
    }
}
