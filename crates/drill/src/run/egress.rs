//! The runner's egress: which host qdisc sits between the engine's transmit and
//! packetdrill's tun device, and what the runner does with what it releases.
//!
//! The qdisc itself, its admission at the transmit (the engine learns a refusal as Linux's
//! `__tcp_transmit_skb` gets `NET_XMIT_DROP` from `dev_queue_xmit`) and the queue of the
//! engine's transmits into it are the engine's [`Driver`], as on every other substrate. The
//! runner keeps its own concerns: a script's `tc qdisc` as a qdisc of `shallow-qdisc`
//! ([`QdiscSpec`]: `pfifo`/`bfifo` [`Fifo`], `limit 0` refusing everything; `fq` [`Fq`] with
//! the script's parameters, Linux defaults otherwise; `tc qdisc delete` and a fresh run have
//! the device's default, `pfifo_fast` with tun's 500 packets), the virtual wire the released
//! packets go to (cut into segments when TSO or GSO is off), and their TX completions, at once
//! or `shallow_tx_delay` later.
//!
//! [`Driver`]: shallow_tcp::Driver

use std::time::Duration;

use shallow_qdisc::{Fifo, Fq, FqConfig, PfifoFast, Rate, NSEC_PER_SEC};
use shallow_tcp::driver::BoxedQdisc;
use shallow_tcp::{DeviceCaps, Instant, Transmit};

use super::{describe_raw, pkt, Runner, Sent};
use crate::env::QdiscKind;

/// tun's `tx_queue_len` (Linux `TUN_READQ_SIZE`): the default qdisc's limit.
pub(crate) const TUN_TXQUEUELEN: usize = 500;

/// Which qdisc, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum QdiscSpec {
    /// The device's default: `pfifo_fast` of tun's 500 packets.
    Default,
    /// `pfifo limit N` (packets).
    Pfifo(usize),
    /// `bfifo limit N` (bytes).
    Bfifo(usize),
    /// `fq`; `pacing` false for `nopacing` (the socket then stamps no departure times).
    Fq { cfg: FqConfig, pacing: bool },
}

impl QdiscSpec {
    /// The qdisc a `tc qdisc add|replace` asks for on a device of `mtu` bytes, or why the
    /// runner cannot have it.
    pub fn from_tc(
        kind: &QdiscKind,
        limit: Option<u32>,
        params: &[(String, String)],
        mtu: u32,
    ) -> Result<QdiscSpec, String> {
        let limit = limit.map(|l| l as usize);
        match kind {
            QdiscKind::Pfifo | QdiscKind::Bfifo if !params.is_empty() => Err(format!(
                "{kind:?} parameter {} is not emulated",
                params[0].0
            )),
            // Without `limit`, sch_fifo takes the device's tx_queue_len (× MTU for bfifo).
            QdiscKind::Pfifo => Ok(QdiscSpec::Pfifo(limit.unwrap_or(TUN_TXQUEUELEN))),
            QdiscKind::Bfifo => Ok(QdiscSpec::Bfifo(
                limit.unwrap_or(TUN_TXQUEUELEN * mtu as usize),
            )),
            QdiscKind::Fq => {
                let mut cfg = FqConfig::new(mtu);
                if let Some(l) = limit {
                    cfg.limit = l;
                }
                let mut pacing = true;
                for (name, value) in params {
                    fq_param(&mut cfg, &mut pacing, name, value)
                        .ok_or_else(|| format!("fq parameter {name} {value} is not emulated"))?;
                }
                Ok(QdiscSpec::Fq { cfg, pacing })
            }
            QdiscKind::Other(k) => Err(format!("qdisc {k} is not emulated")),
        }
    }

    /// Whether the qdisc paces by earliest departure time (`DeviceCaps::edt_pacing`: sch_fq
    /// sets `SK_PACING_FQ` on the sockets it sees unless `nopacing`).
    pub fn edt(&self) -> bool {
        matches!(self, QdiscSpec::Fq { pacing: true, .. })
    }

    /// The qdisc, over the engine's own packets.
    pub fn build(&self) -> BoxedQdisc<Transmit> {
        match self {
            QdiscSpec::Default => Box::new(PfifoFast::new(TUN_TXQUEUELEN)),
            QdiscSpec::Pfifo(l) => Box::new(Fifo::pfifo(*l)),
            QdiscSpec::Bfifo(l) => Box::new(Fifo::bfifo(*l)),
            QdiscSpec::Fq { cfg, .. } => Box::new(Fq::new(cfg.clone())),
        }
    }
}

/// One `tc ... fq` parameter into `cfg` (tc's units: sizes in bytes, rates in bits/s with a
/// unit or bytes/s without, times in µs without a unit). `None` when not understood.
fn fq_param(cfg: &mut FqConfig, pacing: &mut bool, name: &str, value: &str) -> Option<()> {
    match name {
        "pacing" => *pacing = true,
        "nopacing" => *pacing = false,
        "flow_limit" => cfg.flow_limit = value.parse().ok()?,
        "quantum" => cfg.quantum = u32::try_from(tc_size(value)?).ok()?,
        "initial_quantum" => cfg.initial_quantum = u32::try_from(tc_size(value)?).ok()?,
        "maxrate" => cfg.maxrate = Some(tc_rate(value)?),
        "low_rate_threshold" => cfg.low_rate_threshold = tc_rate(value)?,
        "refill_delay" => cfg.flow_refill_delay = tc_time(value)?,
        "horizon" => cfg.horizon = tc_time(value)?,
        // Affect nothing the runner models (hash table size, an orphan hash mask).
        "buckets" | "orphanmask" => {}
        _ => return None,
    }
    Some(())
}

/// Splits `12.5ms` into (12.5, "ms").
fn num_unit(s: &str) -> Option<(f64, &str)> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// tc's size: bytes, or `k`/`kb`, `m`/`mb` (binary multiples, as tc's `get_size`).
fn tc_size(s: &str) -> Option<u64> {
    let (n, unit) = num_unit(s)?;
    let mult = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1024.0,
        "m" | "mb" => 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * mult) as u64)
}

/// tc's rate: `bit`, `kbit`, `mbit`, `gbit`, `bps` (bytes), `kbps`, ...; no unit is bytes/s.
fn tc_rate(s: &str) -> Option<Rate> {
    let (n, unit) = num_unit(s)?;
    let bits = match unit.to_ascii_lowercase().as_str() {
        "" | "bps" => 8.0,
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "kbps" => 8e3,
        "mbps" => 8e6,
        "gbps" => 8e9,
        _ => return None,
    };
    Some(Rate::bps((n * bits) as u64))
}

/// tc's time: `s`, `ms`, `us` (and their long forms); no unit is µs. Whole nanoseconds,
/// truncated.
fn tc_time(s: &str) -> Option<Duration> {
    let (n, unit) = num_unit(s)?;
    let ns = match unit {
        "s" | "sec" | "secs" => NSEC_PER_SEC as f64,
        "ms" | "msec" | "msecs" => 1e6,
        "" | "us" | "usec" | "usecs" => 1e3,
        _ => return None,
    };
    Some(Duration::from_nanos((n * ns) as u64))
}

/// The runner's side of the egress: the stack's transmits into the qdisc, and what the qdisc
/// releases onto the wire.
impl Runner<'_> {
    /// Moves the stack's transmits into the qdisc and whatever it releases now onto the wire
    /// (`dev_queue_xmit`, then the qdisc run); true if the stack transmitted anything.
    pub(super) fn egress(&mut self) -> bool {
        let mut sent = 0usize;
        let dropped = self.st.transmit(self.inst(), |_| sent += 1);
        if dropped > 0 {
            // Completed by the driver (their destructor runs).
            self.trace(|| format!("qdisc drop: {dropped} packets"));
        }
        let refused = self.st.take_refused();
        if refused > 0 {
            self.trace(|| format!("qdisc refused {refused} packets at the transmit"));
        }
        if sent > 0 {
            self.release();
        }
        sent > 0
    }

    /// Packets the qdisc lets go at `now`, onto the wire.
    pub(super) fn release(&mut self) {
        while let Some(tx) = self.st.poll_release(0, self.inst()) {
            self.put_on_wire(tx);
        }
    }

    /// A packet the qdisc released onto the wire (cut into `gso_size` segments when TSO or GSO
    /// is off), and its TX completion: now, or `shallow_tx_delay` later.
    fn put_on_wire(&mut self, mut tx: Transmit) {
        // The tun device copies the packet out of the socket's buffers.
        tx.linearize();
        let pkts = match tx.gso_size {
            Some(g) if !(self.tso && self.gso) => pkt::segment(&tx.data, g),
            _ => vec![tx.data],
        };
        for data in pkts {
            let d = describe_raw(&data);
            self.trace(|| format!("wire: {d}"));
            self.wire.push_back(Sent { at: self.now, data });
        }
        if let Some(tok) = tx.token {
            let now = self.inst();
            match self.tx_delay {
                None | Some(0) => self.st.tx_complete(now, tok),
                Some(d) => self.held.push((Some(self.now.saturating_add(d)), tok)),
            }
        }
    }

    /// `tc qdisc add|replace|delete`: a new qdisc in the driver (the old one's packets are
    /// dropped, as `qdisc_reset` frees them, and their destructors run), and whether it
    /// paces.
    pub(super) fn set_qdisc(&mut self, spec: QdiscSpec) {
        let old = self.st.set_qdisc(0, Some(spec.build()));
        for tx in old.into_iter().flat_map(drain) {
            let d = describe_raw(&tx.data);
            self.trace(|| format!("qdisc drop: {d}"));
            if let Some(tok) = tx.token {
                let now = self.inst();
                self.st.tx_complete(now, tok);
            }
        }
        let caps = DeviceCaps {
            edt_pacing: spec.edt(),
            ..self.st.device()
        };
        self.st.set_device(caps);
        self.trace(|| format!("qdisc: {spec:?}"));
    }
}

/// Everything `qdisc` holds, in dequeue order.
fn drain(mut qdisc: BoxedQdisc<Transmit>) -> Vec<Transmit> {
    std::iter::from_fn(|| qdisc.dequeue(Instant::MAX)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fq_parameters_in_tc_units() {
        let params: Vec<(String, String)> = [
            ("maxrate", "1mbit"),
            ("quantum", "3k"),
            ("initial_quantum", "15140"),
            ("refill_delay", "40ms"),
            ("horizon", "2s"),
            ("flow_limit", "7"),
        ]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let QdiscSpec::Fq { cfg, pacing } =
            QdiscSpec::from_tc(&QdiscKind::Fq, Some(50), &params, 1500).unwrap()
        else {
            panic!("not fq");
        };
        assert!(pacing);
        assert_eq!(cfg.maxrate, Some(Rate::mbps(1)));
        assert_eq!((cfg.quantum, cfg.initial_quantum), (3072, 15140));
        assert_eq!(
            (cfg.flow_refill_delay, cfg.horizon),
            (Duration::from_millis(40), Duration::from_secs(2))
        );
        assert_eq!((cfg.flow_limit, cfg.limit), (7, 50));
        assert_eq!(tc_rate("1000"), Some(Rate::bps(8000)));
        let np = [("nopacing".to_string(), String::new())];
        assert!(!QdiscSpec::from_tc(&QdiscKind::Fq, None, &np, 1500)
            .unwrap()
            .edt());
        let bad = [("ce_threshold".to_string(), "4ms".to_string())];
        assert!(QdiscSpec::from_tc(&QdiscKind::Fq, None, &bad, 1500).is_err());
        assert_eq!(
            QdiscSpec::from_tc(&QdiscKind::Pfifo, None, &[], 1500),
            Ok(QdiscSpec::Pfifo(500))
        );
    }
}
