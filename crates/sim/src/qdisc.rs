//! Queueing disciplines of the host egress path: the shared `shallow-qdisc` crate
//! (pfifo_fast, fq with EDT and maxrate, tbf, pfifo/bfifo), queueing the emulator's [`Skb`].
//!
//! The NIC pulls with [`Qdisc::dequeue`] while its TX ring has room; when a qdisc holds
//! packets it may not release yet, [`Qdisc::next_wakeup`] says when to try again (Linux's
//! `qdisc_watchdog`). Times passed to the qdiscs are [`Time`](crate::Time)'s nanoseconds.

pub use shallow_qdisc::{
    pfifo_fast_band, tos_to_priority, Admitted, Fifo, Fq, FqConfig, Offer, PfifoFast, Qdisc,
    QdiscPacket, QdiscStats, Rate as QdiscRate, Tbf,
};
use shallow_tcp::{TxGate, TxMeta};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::packet::{Packet, Skb};
use crate::segment;

impl QdiscPacket for Skb {
    fn len(&self) -> usize {
        self.len()
    }
    fn flow_hash(&self) -> u32 {
        self.pkt.flow
    }
    fn departure_ns(&self) -> Option<u64> {
        self.pkt.departure.map(|t| t.0)
    }
    /// The TOS byte's priority (Linux `rt_tos2priority`); a non-IP packet gets 0.
    fn priority(&self) -> u8 {
        segment::tos(&self.pkt.data).map_or(0, tos_to_priority)
    }
    fn gso_segment_len(&self) -> Option<usize> {
        let gso = self.pkt.gso_size.filter(|&g| g > 0)?;
        let v = segment::parse_tcp_split(&self.pkt.data, self.pkt.frag.len())?;
        Some(v.payload_off + usize::from(gso))
    }
    /// The NIC's TSO cut ([`segment::write_segment_parsed`]); the TX-completion token and the
    /// flow's byte account ride on the last piece.
    fn gso_segment(self) -> Result<Vec<Skb>, Skb> {
        let Some(gso) = self.pkt.gso_size.filter(|&g| g > 0) else {
            return Err(self);
        };
        let (head, frag) = (&self.pkt.data, &self.pkt.frag);
        let Some(v) = segment::parse_tcp_split(head, frag.len()) else {
            return Err(self);
        };
        // The payload: in `frag` for a paged packet (whose head is its headers), else after
        // the headers.
        let (head, payload) = if frag.is_empty() {
            head.split_at(v.payload_off.min(head.len()))
        } else if head.len() == v.payload_off {
            (&head[..], &frag[..])
        } else {
            return Err(self);
        };
        let n = v.payload_len.div_ceil(usize::from(gso)).max(1);
        let mut pieces = Vec::with_capacity(n);
        for i in 0..n {
            let mut out = Vec::new();
            if segment::write_segment_parts(head, payload, &v, gso, i, &mut out).is_err() {
                return Err(self);
            }
            let last = i + 1 == n;
            pieces.push(Skb {
                pkt: Packet {
                    data: out,
                    gso_size: None,
                    departure: self.pkt.departure,
                    token: if last { self.pkt.token } else { None },
                    flow: self.pkt.flow,
                    seg: None,
                    frag: Default::default(),
                },
                enqueued: self.enqueued,
                acct_len: if last { self.acct_len } else { 0 },
            });
        }
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Time;

    fn with_tos(tos: u8) -> Skb {
        let mut d = vec![0u8; 40];
        d[0] = 0x45;
        d[1] = tos;
        Skb::new(Packet::new(d), Time::ZERO)
    }

    /// The band comes from the IP TOS byte (ip_tos2prio + default priomap); non-IP → band 1.
    #[test]
    fn pfifo_fast_bands_by_tos() {
        assert_eq!(pfifo_fast_band(with_tos(0x10).priority()), 0);
        assert_eq!(pfifo_fast_band(with_tos(0x00).priority()), 1);
        assert_eq!(pfifo_fast_band(with_tos(0x08).priority()), 2);
        let non_ip = Skb::new(Packet::new(vec![0x00, 0x10]), Time::ZERO);
        assert_eq!(pfifo_fast_band(non_ip.priority()), 1);
        let mut q = PfifoFast::new(10);
        q.enqueue(0, with_tos(0x08)).unwrap();
        q.enqueue(0, with_tos(0x00)).unwrap();
        q.enqueue(0, with_tos(0x10)).unwrap();
        let order: Vec<u8> = std::iter::from_fn(|| q.dequeue(0))
            .map(|s| s.pkt.data[1])
            .collect();
        assert_eq!(order, vec![0x10, 0x00, 0x08]);
    }

    /// tbf cuts a real TSO super-segment into wire segments; the token rides on the last.
    #[test]
    fn tbf_segments_gso_larger_than_burst() {
        use crate::segment::{build_ipv4_tcp, TcpPacketSpec};
        let mut d = Vec::new();
        build_ipv4_tcp(&TcpPacketSpec::default(), &[1u8; 5000], &mut d);
        let mut p = Packet::new(d);
        p.gso_size = Some(1000);
        p.token = Some(9);
        let mut q = Tbf::new(QdiscRate::gbps(1), 3000, 1_000_000);
        q.enqueue(0, Skb::new(p, Time::ZERO)).unwrap();
        assert_eq!(q.backlog_packets(), 5);
        assert_eq!(q.stats().segmented, 1);
        let mut tokens = Vec::new();
        let mut now = 0;
        while q.backlog_packets() > 0 {
            match q.dequeue(now) {
                Some(s) => {
                    assert!(segment::parse_tcp(&s.pkt.data).is_some());
                    tokens.push(s.pkt.token)
                }
                None => now = q.next_wakeup(now).unwrap(),
            }
        }
        assert_eq!(tokens, vec![None, None, None, None, Some(9)]);
    }
}

/// A host's egress qdisc, shared by the emulator (which enqueues what the endpoint releases
/// and lets the NIC dequeue) and the host's engine (which asks it for admission at the
/// transmit, [`EgressGate`]): the packets admitted but not yet enqueued, and the refusals
/// not yet counted in the host's [`HostStats`](crate::HostStats).
pub struct Egress {
    /// The qdisc.
    pub qdisc: Box<dyn Qdisc<Skb> + Send>,
    /// Packets admitted at the transmit and not yet enqueued.
    pub admitted: Admitted,
    /// Refusals since the emulator last counted them.
    pub refused: u64,
}

/// A shared handle on a host's [`Egress`] (the emulator runs on one thread; the mutex is
/// only what a [`TxGate`] installed in a `Send` engine needs).
#[derive(Clone)]
pub struct EgressHandle(Arc<Mutex<Egress>>);

impl EgressHandle {
    /// A handle on a new egress around `qdisc`.
    pub fn new(qdisc: Box<dyn Qdisc<Skb> + Send>) -> EgressHandle {
        EgressHandle(Arc::new(Mutex::new(Egress {
            qdisc,
            admitted: Admitted::new(),
            refused: 0,
        })))
    }
    /// The egress (a poisoned lock is taken over: the state is plain counters and queues).
    pub fn lock(&self) -> MutexGuard<'_, Egress> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The qdisc of an [`EgressHandle`], borrowed ([`Sim::qdisc`](crate::Sim::qdisc)).
pub struct QdiscRef<'a>(pub(crate) MutexGuard<'a, Egress>);

impl std::ops::Deref for QdiscRef<'_> {
    type Target = dyn Qdisc<Skb> + Send;
    fn deref(&self) -> &Self::Target {
        self.0.qdisc.as_ref()
    }
}

/// The admission rule a `TcpHost` installs in its engine ([`Stack::set_tx_gate`]): the
/// host's real qdisc decides at the transmit ([`Qdisc::admit`]), as Linux's `dev_queue_xmit`
/// returns `NET_XMIT_DROP` to `__tcp_transmit_skb`; an admitted packet is then sure of its
/// place when the emulator enqueues it (after the CPU time of the send).
///
/// [`Stack::set_tx_gate`]: shallow_tcp::Stack::set_tx_gate
pub struct EgressGate(pub EgressHandle);

impl TxGate for EgressGate {
    fn admit(&mut self, m: &TxMeta) -> bool {
        let offer = Offer {
            len: m.len,
            flow: m.flow,
            priority: tos_to_priority(m.tos),
            departure_ns: m.departure_ns,
            header_len: m.header_len,
            gso_size: m.gso_size.map(usize::from),
        };
        let mut e = self.0.lock();
        let Egress {
            qdisc,
            admitted,
            refused,
        } = &mut *e;
        let ok = qdisc.admit(m.now.as_nanos(), &offer, admitted);
        if !ok {
            *refused += 1;
        }
        ok
    }
}
