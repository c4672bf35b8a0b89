//! The egress qdisc of each TX queue of a host (Linux's `mq` root, one child per queue):
//! which qdisc ([`Egress`]). The TX queues, the packets they hold (the engine's `Transmit`),
//! their admission at the transmit and the egress steps are the engine's driver's
//! (`shallow_tcp::driver`), guarded by the engine mutex; the queues' own lock is taken after
//! it and never held across a call into the engine.

use shallow_qdisc::{Fifo, Fq, FqConfig, PfifoFast, Rate, Tbf};
use shallow_tcp::driver::{BoxedQdisc, Driver};

/// What sits between `poll_transmit` and the device write.
#[derive(Debug, Clone, Default)]
pub enum Egress {
    /// Linux's `fq` (the default qdisc for paced TCP): per-flow queues, earliest departure
    /// time honoured, so pacing and TSQ see a real host queue. TX completion happens when the
    /// packet leaves fq and the device write returns.
    #[default]
    Fq,
    /// fq with an explicit configuration.
    FqWith(FqConfig),
    /// Linux's `tbf`: a token bucket of `rate` with `burst` bytes, holding at most `limit`
    /// bytes (a super-segment above the burst is cut in software, as `tbf_segment` does). A
    /// bottleneck on the host itself, which TSQ sees.
    Tbf {
        /// Token rate.
        rate: Rate,
        /// Bucket size in bytes.
        burst: u64,
        /// Queue limit in bytes.
        limit: usize,
    },
    /// Linux's `pfifo_fast` (the old default qdisc): three priority bands by TOS, at most
    /// `txqueuelen` packets.
    PfifoFast {
        /// Queue limit in packets (`txqueuelen`, Linux default 1000).
        txqueuelen: usize,
    },
    /// Linux's `pfifo`: one drop-tail FIFO of at most `limit` packets (`tc qdisc replace
    /// dev D root pfifo limit N`; 0 refuses everything).
    Pfifo {
        /// Queue limit in packets.
        limit: usize,
    },
    /// No qdisc: packets go to the device as the engine emits them (pacing times ignored).
    Direct,
}

/// The egress qdisc of one TX queue.
pub(crate) type EgressQdisc = Option<BoxedQdisc<shallow_tcp::Transmit>>;

/// The engine with the host's TX queues (`shallow_tcp::Driver`), guarded by the engine mutex.
pub(crate) type OsDriver = Driver;

/// The qdisc for `egress` on a device of `mtu` bytes (`None`: straight to the device).
pub(crate) fn qdisc_for(egress: Egress, mtu: usize) -> EgressQdisc {
    match egress {
        Egress::Fq => Some(Box::new(Fq::new(FqConfig::new(mtu as u32)))),
        Egress::FqWith(c) => Some(Box::new(Fq::new(c))),
        Egress::Tbf { rate, burst, limit } => Some(Box::new(Tbf::new(rate, burst, limit))),
        Egress::PfifoFast { txqueuelen } => Some(Box::new(PfifoFast::new(txqueuelen))),
        Egress::Pfifo { limit } => Some(Box::new(Fifo::pfifo(limit))),
        Egress::Direct => None,
    }
}
