//! A host's egress: its TX queues (Linux's `mq` root, one child per device queue), each with
//! an optional qdisc from `shallow-qdisc` and the ledger of the packets its qdisc admitted at
//! the transmit and has not been given yet ([`Admitted`]), and the admission rule the engine
//! asks at the transmit ([`EgressGate`], Linux's `NET_XMIT_DROP` from `dev_queue_xmit`).
//!
//! The state ([`Egress`]) is shared by the engine's gate, which is asked inside engine calls,
//! and the substrate, which enqueues and dequeues: [`EgressHandle`] is it behind a mutex. Lock
//! order: whoever holds the engine takes the egress lock after it, and the egress lock is never
//! held across a call into the engine (the gate would take it again).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use shallow_qdisc::{tos_to_priority, Admitted, Offer, Qdisc, QdiscPacket};

use crate::gate::{Admission, TxGate, TxMeta};
use crate::time::Instant;

/// A qdisc of one TX queue, over the substrate's packet type `P`.
pub type BoxedQdisc<P> = Box<dyn Qdisc<P> + Send>;

/// One TX queue: its qdisc, the packets the qdisc admitted at the transmit and has not been
/// given yet, and without a qdisc the packets waiting for the device in emission order.
pub struct TxQueue<P> {
    /// The qdisc (`None`: packets go to the device in the order the engine emits them, as a
    /// `noqueue` device; pacing times are ignored).
    pub qdisc: Option<BoxedQdisc<P>>,
    /// Room held by packets admitted at the transmit and not yet enqueued.
    pub admitted: Admitted,
    /// Without a qdisc: packets waiting for the device.
    direct: VecDeque<P>,
}

impl<P: QdiscPacket> TxQueue<P> {
    /// A queue with `qdisc` (`None`: straight to the device).
    pub fn new(qdisc: Option<BoxedQdisc<P>>) -> TxQueue<P> {
        TxQueue {
            qdisc,
            admitted: Admitted::new(),
            direct: VecDeque::new(),
        }
    }

    /// Bytes held (by the qdisc, or waiting for the device without one).
    pub fn backlog_bytes(&self) -> usize {
        self.qdisc.as_ref().map_or(0, |q| q.backlog_bytes())
            + self.direct.iter().map(QdiscPacket::len).sum::<usize>()
    }

    /// Packets held (by the qdisc, or waiting for the device without one).
    pub fn backlog_packets(&self) -> usize {
        self.qdisc.as_ref().map_or(0, |q| q.backlog_packets()) + self.direct.len()
    }
}

/// The TX queue of a flow among `n` (Linux `skb_tx_hash` → `reciprocal_scale`): stable per
/// flow, so a flow leaves in order on one queue (and a multi-queue tun's flow table brings its
/// reverse packets to the same queue).
pub fn queue_of(flow: u32, n: usize) -> usize {
    if n <= 1 {
        return 0;
    }
    ((u64::from(flow) * n as u64) >> 32) as usize
}

/// A host's TX queues and the refusals at the transmit not yet counted by the substrate.
pub struct Egress<P> {
    queues: Vec<TxQueue<P>>,
    refused: u64,
}

impl<P: QdiscPacket> Egress<P> {
    /// One TX queue per qdisc in `qdiscs` (at least one: an empty list is one queue without a
    /// qdisc).
    pub fn new(qdiscs: Vec<Option<BoxedQdisc<P>>>) -> Egress<P> {
        let mut queues: Vec<TxQueue<P>> = qdiscs.into_iter().map(TxQueue::new).collect();
        if queues.is_empty() {
            queues.push(TxQueue::new(None));
        }
        Egress { queues, refused: 0 }
    }

    /// Number of TX queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// TX queue `q`.
    pub fn queue(&self, q: usize) -> &TxQueue<P> {
        &self.queues[q]
    }

    /// TX queue `q`, mutably (to reconfigure its qdisc).
    pub fn queue_mut(&mut self, q: usize) -> &mut TxQueue<P> {
        &mut self.queues[q]
    }

    /// The TX queue of a packet of flow hash `flow` ([`queue_of`]).
    pub fn queue_of(&self, flow: u32) -> usize {
        queue_of(flow, self.queues.len())
    }

    /// True when some queue has a qdisc (else nothing can refuse a packet).
    pub fn any_qdisc(&self) -> bool {
        self.queues.iter().any(|q| q.qdisc.is_some())
    }

    /// The admission of the packet `m` describes by the qdisc of its queue at the transmit
    /// ([`Qdisc::admit`]): a packet admitted is recorded in the queue's ledger until
    /// [`Egress::enqueue`] gives it; a refusal is counted (see [`Egress::take_refused`]). A
    /// queue without a qdisc admits everything.
    pub fn admit(&mut self, m: &TxMeta) -> bool {
        self.verdict(m) != Admission::Refused
    }

    /// [`Egress::admit`] with what becomes of an admitted packet: queued whole, or cut into
    /// wire segments at enqueue ([`Qdisc::segments`]).
    pub fn verdict(&mut self, m: &TxMeta) -> Admission {
        let q = self.queue_of(m.flow);
        let TxQueue {
            qdisc, admitted, ..
        } = &mut self.queues[q];
        let Some(qd) = qdisc.as_mut() else {
            return Admission::Queued;
        };
        let offer = offer_of(m);
        if !qd.admit(m.now, &offer, admitted) {
            self.refused += 1;
            Admission::Refused
        } else if qd.segments(&offer) {
            Admission::Cut
        } else {
            Admission::Queued
        }
    }

    /// Gives queue `q` a packet at `now`: the packet leaves the ledger (it was admitted
    /// at the transmit, perhaps some time ago: its place was held, so the qdisc takes it) and
    /// enters the qdisc, or without a qdisc waits for the device. `Err` hands back a packet
    /// the qdisc dropped (one that did not come through admission), whose TX completion is
    /// the caller's to run (Linux's `kfree_skb` runs the destructor on a drop too).
    pub fn enqueue(&mut self, q: usize, now: Instant, p: P) -> Result<(), P> {
        let TxQueue {
            qdisc,
            admitted,
            direct,
        } = &mut self.queues[q];
        match qdisc {
            Some(qd) => {
                admitted.remove(p.len(), p.flow_hash(), p.priority());
                qd.enqueue(now, p)
            }
            None => {
                direct.push_back(p);
                Ok(())
            }
        }
    }

    /// The next packet of queue `q` the device may take at `now`.
    pub fn dequeue(&mut self, q: usize, now: Instant) -> Option<P> {
        let queue = &mut self.queues[q];
        if let Some(p) = queue.direct.pop_front() {
            return Some(p);
        }
        queue.qdisc.as_mut()?.dequeue(now)
    }

    /// When queue `q`'s qdisc may release a packet it holds back by time (Linux's
    /// `qdisc_watchdog`, [`Qdisc::next_wakeup`]); `now` if packets wait without a qdisc.
    pub fn next_wakeup(&self, q: usize, now: Instant) -> Option<Instant> {
        let queue = &self.queues[q];
        if !queue.direct.is_empty() {
            return Some(now);
        }
        queue.qdisc.as_ref()?.next_wakeup(now)
    }

    /// Refusals at the transmit since the last call (they are the qdiscs' drops too).
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }

    /// Bytes held by every queue.
    pub fn backlog_bytes(&self) -> usize {
        self.queues.iter().map(TxQueue::backlog_bytes).sum()
    }
}

/// An [`Egress`] behind its mutex, shared by the substrate and the engine's [`EgressGate`].
pub struct EgressHandle<P>(Arc<Mutex<Egress<P>>>);

impl<P> Clone for EgressHandle<P> {
    fn clone(&self) -> Self {
        EgressHandle(Arc::clone(&self.0))
    }
}

impl<P: QdiscPacket> EgressHandle<P> {
    /// A handle on `egress`.
    pub fn new(egress: Egress<P>) -> EgressHandle<P> {
        EgressHandle(Arc::new(Mutex::new(egress)))
    }

    /// A handle on one TX queue with `qdisc`.
    pub fn single(qdisc: Option<BoxedQdisc<P>>) -> EgressHandle<P> {
        EgressHandle::new(Egress::new(vec![qdisc]))
    }

    /// The egress (a poisoned lock is taken over: the state is queues and counters). Never
    /// hold the guard across a call into the engine.
    pub fn lock(&self) -> MutexGuard<'_, Egress<P>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The admission rule a [`Driver`](crate::driver::Driver) installs in its engine
/// ([`Stack::set_tx_gate`](crate::Stack::set_tx_gate)): the qdisc of the queue the packet's
/// flow picks decides at the transmit ([`Egress::admit`]), as Linux's `dev_queue_xmit`
/// returns `NET_XMIT_DROP` to `__tcp_transmit_skb`; an admitted packet keeps its place until
/// the substrate enqueues it ([`Egress::enqueue`]).
pub struct EgressGate<P>(pub EgressHandle<P>);

impl<P: QdiscPacket + Send> TxGate for EgressGate<P> {
    fn admit(&mut self, m: &TxMeta) -> bool {
        self.0.lock().admit(m)
    }
    fn verdict(&mut self, m: &TxMeta) -> Admission {
        self.0.lock().verdict(m)
    }
}

/// What a qdisc is told about the packet `m` describes.
fn offer_of(m: &TxMeta) -> Offer {
    Offer {
        len: m.len,
        flow: m.flow,
        priority: tos_to_priority(m.tos),
        departure: m.departure,
        header_len: m.header_len,
        gso_size: m.gso_size.map(usize::from),
    }
}
