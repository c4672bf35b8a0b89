//! The egress qdisc of each TX queue of a host (Linux's `mq` root, one child per queue):
//! which qdisc ([`Egress`]), the queues shared by the I/O threads and the engine's admission
//! at the transmit ([`EgressGate`]), and the packet a qdisc holds ([`TxPkt`]). Lock order:
//! the engine mutex, then the queues' lock; the queues' lock is never held across a call into
//! the engine.

use std::sync::{Arc, Mutex, MutexGuard};

use shallow_qdisc::{
    Admitted, Fifo, Fq, FqConfig, Offer, PfifoFast, Qdisc, QdiscPacket, Rate, Tbf,
};
use shallow_tcp::{TxGate, TxMeta, TxToken};
use shallow_wire::segment;

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
pub(crate) type EgressQdisc = Option<Box<dyn Qdisc<TxPkt> + Send>>;

/// One TX queue's egress state: the qdisc, the packets admitted at the transmit and not yet
/// enqueued, and without a qdisc the packets another queue's thread steered here (written in
/// order by this queue's thread).
pub(crate) struct TxQueue {
    /// The qdisc (`None`: straight to the device).
    pub qdisc: EgressQdisc,
    /// Room held by packets admitted at the transmit and not yet enqueued.
    pub admitted: Admitted,
    /// Without a qdisc: packets another queue's thread steered here.
    pub direct: Vec<TxPkt>,
}

impl TxQueue {
    pub fn new(qdisc: EgressQdisc) -> TxQueue {
        TxQueue {
            qdisc,
            admitted: Admitted::new(),
            direct: Vec::new(),
        }
    }

    /// Bytes held (qdisc and steered packets).
    pub fn backlog_bytes(&self) -> usize {
        self.qdisc.as_ref().map_or(0, |q| q.backlog_bytes())
            + self.direct.iter().map(|p| p.data.len()).sum::<usize>()
    }
}

/// The TX queues of a host, shared by its I/O threads (which enqueue and dequeue, always
/// under the engine mutex too) and the engine's [`EgressGate`] (asked inside engine calls,
/// under the engine mutex): lock order engine → queues, and the queues' lock is never held
/// across a call into the engine.
pub(crate) struct TxQueues {
    /// One per device queue.
    pub queues: Vec<TxQueue>,
    /// Packets refused at the transmit, not yet added to `HostStats::qdisc_drops`.
    pub refused: u64,
}

/// [`TxQueues`] behind their lock.
pub(crate) type SharedTxQueues = Arc<Mutex<TxQueues>>;

impl TxQueues {
    pub fn new(queues: Vec<TxQueue>) -> SharedTxQueues {
        Arc::new(Mutex::new(TxQueues { queues, refused: 0 }))
    }
    /// True when some queue has a qdisc (else nothing can refuse a packet).
    pub fn any_qdisc(&self) -> bool {
        self.queues.iter().any(|q| q.qdisc.is_some())
    }
}

/// Lock the TX queues (a poisoned lock is taken over: the state is queues and counters).
pub(crate) fn lock_txq(t: &SharedTxQueues) -> MutexGuard<'_, TxQueues> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// The admission rule the host installs in its engine ([`Stack::set_tx_gate`](shallow_tcp::Stack::set_tx_gate)): the qdisc
/// of the queue the packet's flow picks decides at the transmit ([`Qdisc::admit`]), as
/// Linux's `dev_queue_xmit` returns `NET_XMIT_DROP` to `__tcp_transmit_skb`; an admitted
/// packet keeps its place until the I/O thread's egress enqueues it.
pub(crate) struct EgressGate(pub SharedTxQueues);

impl TxGate for EgressGate {
    fn admit(&mut self, m: &TxMeta) -> bool {
        let mut t = lock_txq(&self.0);
        let n = t.queues.len();
        let q = if n > 1 { queue_of(m.flow, n) } else { 0 };
        let TxQueue {
            qdisc, admitted, ..
        } = &mut t.queues[q];
        let Some(qd) = qdisc.as_mut() else {
            return true;
        };
        let offer = Offer {
            len: m.len,
            flow: m.flow,
            priority: shallow_qdisc::tos_to_priority(m.tos),
            departure_ns: m.departure_ns,
            header_len: m.header_len,
            gso_size: m.gso_size.map(usize::from),
        };
        let ok = qd.admit(m.now.as_nanos(), &offer, admitted);
        if !ok {
            t.refused += 1;
        }
        ok
    }
}

/// The TX queue of a flow among `n` (Linux `skb_tx_hash` → `reciprocal_scale`): stable per
/// flow, so the kernel's tun flow table (`tun_flow_update` on our write, automq on its
/// transmit) brings the flow's reverse packets to the same queue.
pub(crate) fn queue_of(flow: u32, n: usize) -> usize {
    ((u64::from(flow) * n as u64) >> 32) as usize
}

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

/// A packet between `poll_transmit` and the device: held by the egress qdisc.
pub(crate) struct TxPkt {
    /// The packet.
    pub data: Vec<u8>,
    /// Its GSO size (a super-segment).
    pub gso_size: Option<u16>,
    /// Earliest departure time (ns), stamped by the engine under fq pacing.
    pub departure: Option<u64>,
    /// Its TX-completion token (a data packet).
    pub token: Option<TxToken>,
    /// Flow hash.
    pub flow: u32,
}

impl QdiscPacket for TxPkt {
    fn len(&self) -> usize {
        self.data.len()
    }
    fn flow_hash(&self) -> u32 {
        self.flow
    }
    fn departure_ns(&self) -> Option<u64> {
        self.departure
    }
    /// The TOS byte's priority (Linux `rt_tos2priority`), for pfifo_fast's bands.
    fn priority(&self) -> u8 {
        segment::tos(&self.data).map_or(0, shallow_qdisc::tos_to_priority)
    }
    fn gso_segment_len(&self) -> Option<usize> {
        let gso = self.gso_size.filter(|&g| g > 0)?;
        let v = segment::parse_tcp(&self.data)?;
        Some(v.payload_off + usize::from(gso))
    }
    /// Software GSO (`skb_gso_segment`, which tbf calls for a packet above its burst): the
    /// TX-completion token rides on the last piece.
    fn gso_segment(self) -> Result<Vec<TxPkt>, TxPkt> {
        let Some(gso) = self.gso_size.filter(|&g| g > 0) else {
            return Err(self);
        };
        let Some(v) = segment::parse_tcp(&self.data) else {
            return Err(self);
        };
        let n = v.payload_len.div_ceil(usize::from(gso)).max(1);
        let mut outs = Vec::with_capacity(n);
        for i in 0..n {
            let mut out = Vec::new();
            if segment::write_segment_parsed(&self.data, &v, gso, i, &mut out).is_err() {
                return Err(self);
            }
            outs.push(out);
        }
        let TxPkt {
            departure,
            mut token,
            flow,
            ..
        } = self;
        let last = outs.len() - 1;
        Ok(outs
            .into_iter()
            .enumerate()
            .map(|(i, data)| TxPkt {
                data,
                gso_size: None,
                departure,
                token: if i == last { token.take() } else { None },
                flow,
            })
            .collect())
    }
}
