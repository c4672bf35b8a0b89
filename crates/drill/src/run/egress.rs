//! The runner's egress: the host qdisc between the engine's transmit and packetdrill's tun
//! device, a real one from `shallow-qdisc` (the emulator's and the Linux substrate's).
//!
//! A script picks it with `tc qdisc`: `pfifo`/`bfifo` ([`Fifo`], `limit 0` refuses everything),
//! `fq` ([`Fq`] with the script's parameters, Linux defaults otherwise); `tc qdisc delete`
//! and a fresh run have the device's default, `pfifo_fast` with tun's 500 packets. The engine
//! learns a refusal at the transmit, as Linux's `__tcp_transmit_skb` gets `NET_XMIT_DROP` from
//! `dev_queue_xmit`: the [`Gate`] installed with [`Stack::set_tx_gate`] asks the qdisc
//! ([`Qdisc::admit`]) and holds the packet's place in an [`Admitted`] ledger until the runner
//! enqueues it (after the engine call returns). The runner then dequeues whatever is due at
//! its virtual `now` onto the wire, and wakes at [`Egress::next_wakeup`] for what fq holds.
//!
//! This is the one place of the runner that knows the qdisc — the qdisc and its gate, and the
//! runner's side: a `tc qdisc` command, the stack's transmits into the qdisc, what it releases
//! onto the wire and their TX completions — so a driver shared with the other substrates can
//! take it over whole.
//!
//! [`Stack::set_tx_gate`]: shallow_tcp::Stack::set_tx_gate

use std::sync::{Arc, Mutex, MutexGuard};

use shallow_qdisc::{
    tos_to_priority, Admitted, Fifo, Fq, FqConfig, Offer, PfifoFast, Qdisc, QdiscPacket, Rate,
    NSEC_PER_SEC,
};
use shallow_tcp::{DeviceCaps, Transmit, TxGate, TxMeta};
use shallow_wire::segment;

use super::{describe_raw, pkt, Runner, Sent};
use crate::env::QdiscKind;

/// tun's `tx_queue_len` (Linux `TUN_READQ_SIZE`): the default qdisc's limit.
pub(crate) const TUN_TXQUEUELEN: usize = 500;

/// A packet the qdisc holds: one transmit of the engine, as it will reach the wire.
pub(crate) struct Held(pub Transmit);

impl QdiscPacket for Held {
    fn len(&self) -> usize {
        self.0.len()
    }
    fn flow_hash(&self) -> u32 {
        self.0.flow
    }
    fn departure_ns(&self) -> Option<u64> {
        self.0.departure.map(|d| d.as_nanos())
    }
    /// The TOS byte's priority (`rt_tos2priority`), as the admission's offer has it.
    fn priority(&self) -> u8 {
        segment::tos(&self.0.data).map_or(0, tos_to_priority)
    }
}

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

    fn build(&self) -> Box<dyn Qdisc<Held> + Send> {
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
        "refill_delay" => cfg.flow_refill_delay = tc_time_ns(value)?,
        "horizon" => cfg.horizon = tc_time_ns(value)?,
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

/// tc's time in nanoseconds: `s`, `ms`, `us` (and their long forms); no unit is µs.
fn tc_time_ns(s: &str) -> Option<u64> {
    let (n, unit) = num_unit(s)?;
    let ns = match unit {
        "s" | "sec" | "secs" => NSEC_PER_SEC as f64,
        "ms" | "msec" | "msecs" => 1e6,
        "" | "us" | "usec" | "usecs" => 1e3,
        _ => return None,
    };
    Some((n * ns) as u64)
}

/// The qdisc and the places its admissions hold, shared by the runner and the [`Gate`].
struct State {
    qdisc: Box<dyn Qdisc<Held> + Send>,
    admitted: Admitted,
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The admission rule installed in the engine: the qdisc decides at the transmit.
struct Gate(Shared);

impl TxGate for Gate {
    fn admit(&mut self, m: &TxMeta) -> bool {
        let offer = Offer {
            len: m.len,
            flow: m.flow,
            priority: tos_to_priority(m.tos),
            departure_ns: m.departure_ns,
            header_len: m.header_len,
            gso_size: m.gso_size.map(usize::from),
        };
        let mut s = lock(&self.0);
        let State { qdisc, admitted } = &mut *s;
        qdisc.admit(m.now.as_nanos(), &offer, admitted)
    }
}

/// The runner's host qdisc.
pub(crate) struct Egress {
    spec: QdiscSpec,
    state: Shared,
}

impl Egress {
    /// A qdisc as `spec` says, and the gate to install in the engine for it.
    pub fn new(spec: QdiscSpec) -> (Egress, Box<dyn TxGate>) {
        let state = Arc::new(Mutex::new(State {
            qdisc: spec.build(),
            admitted: Admitted::new(),
        }));
        let gate = Box::new(Gate(state.clone()));
        (Egress { spec, state }, gate)
    }

    /// What it is.
    pub fn spec(&self) -> &QdiscSpec {
        &self.spec
    }

    /// Queues a transmit of the engine (admitted at the transmit, so its place is held); a
    /// packet the qdisc refuses anyway comes back.
    pub fn enqueue(&self, now: u64, tx: Transmit) -> Result<(), Transmit> {
        let p = Held(tx);
        let mut s = lock(&self.state);
        s.admitted.remove(p.len(), p.flow_hash(), p.priority());
        s.qdisc.enqueue(now, p).map_err(|p| p.0)
    }

    /// The next packet due on the wire at `now`.
    pub fn dequeue(&self, now: u64) -> Option<Transmit> {
        lock(&self.state).qdisc.dequeue(now).map(|p| p.0)
    }

    /// When a held packet may leave (fq's watchdog), if any is held back by time.
    pub fn next_wakeup(&self, now: u64) -> Option<u64> {
        lock(&self.state).qdisc.next_wakeup(now)
    }

    /// Everything held, in dequeue order: what a replaced qdisc drops (`qdisc_reset`).
    pub fn drain(&self) -> Vec<Transmit> {
        std::iter::from_fn(|| self.dequeue(u64::MAX)).collect()
    }
}

/// The runner's side of the egress: the stack's transmits into the qdisc, and what the qdisc
/// releases onto the wire.
impl Runner<'_> {
    /// A transmit of the stack into the qdisc, and whatever it releases now onto the wire
    /// (`dev_queue_xmit`, then the qdisc run).
    pub(super) fn egress(&mut self, tx: Transmit) {
        if let Err(tx) = self.egress.enqueue(self.now, tx) {
            self.qdisc_drop(tx);
        }
        self.release();
    }

    /// Packets the qdisc lets go at `now`, onto the wire.
    pub(super) fn release(&mut self) {
        while let Some(tx) = self.egress.dequeue(self.now) {
            self.put_on_wire(tx);
        }
    }

    /// A packet the qdisc dropped: its destructor runs (the TX completion).
    fn qdisc_drop(&mut self, tx: Transmit) {
        let d = describe_raw(&tx.data);
        self.trace(|| format!("qdisc drop: {d}"));
        if let Some(tok) = tx.token {
            self.st.tx_complete(self.inst(), tok);
        }
    }

    /// A packet the qdisc released onto the wire (cut into `gso_size` segments when TSO or GSO
    /// is off), and its TX completion: now, or `shallow_tx_delay` later.
    fn put_on_wire(&mut self, tx: Transmit) {
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
            match self.tx_delay {
                None | Some(0) => self.st.tx_complete(self.inst(), tok),
                Some(d) => self.held.push((Some(self.now.saturating_add(d)), tok)),
            }
        }
    }

    /// `tc qdisc add|replace|delete`: a new qdisc (the old one's packets are dropped, as
    /// `qdisc_reset` frees them), its admission rule in the stack, and whether it paces.
    pub(super) fn set_qdisc(&mut self, spec: QdiscSpec) {
        let edt = spec.edt();
        let (new, gate) = Egress::new(spec);
        let old = std::mem::replace(&mut self.egress, new);
        for tx in old.drain() {
            self.qdisc_drop(tx);
        }
        self.st.set_device(DeviceCaps {
            edt_pacing: edt,
            ..self.st.device()
        });
        self.st.set_tx_gate(Some(gate));
        let spec = format!("{:?}", self.egress.spec());
        self.trace(|| format!("qdisc: {spec}"));
    }
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
            (40_000_000, 2 * NSEC_PER_SEC)
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
