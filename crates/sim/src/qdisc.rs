//! Queueing disciplines of the host egress path: the shared `shallow-qdisc` crate
//! (pfifo_fast, fq with EDT and maxrate, tbf, pfifo/bfifo), queueing the emulator's [`Skb`].
//!
//! The NIC pulls with [`Qdisc::dequeue`] while its TX ring has room; when a qdisc holds
//! packets it may not release yet, [`Qdisc::next_wakeup`] says when to try again (Linux's
//! `qdisc_watchdog`). The qdiscs take the emulator's virtual [`Instant`](crate::Instant) as it is.

pub use shallow_qdisc::{
    pfifo_fast_band, tos_to_priority, Admitted, Fifo, Fq, FqConfig, Offer, PfifoFast, Qdisc,
    QdiscPacket, QdiscStats, Tbf,
};
use shallow_tcp::driver::{gso_segment_len, gso_segments, qdisc_pkt_len};
use std::sync::MutexGuard;

use crate::packet::{piece_token, Packet, Skb};
use crate::segment;

impl QdiscPacket for Skb {
    fn len(&self) -> usize {
        self.len()
    }
    fn flow_hash(&self) -> u32 {
        self.pkt.flow
    }
    fn departure(&self) -> Option<crate::Instant> {
        self.pkt.departure
    }
    /// The TOS byte's priority (Linux `rt_tos2priority`); a non-IP packet gets 0.
    fn priority(&self) -> u8 {
        segment::tos(&self.pkt.data).map_or(0, tos_to_priority)
    }
    fn qdisc_pkt_len(&self) -> usize {
        qdisc_pkt_len(
            &self.pkt.data,
            self.pkt.frag.len(),
            self.pkt.gso_size,
            self.len(),
        )
    }
    fn gso_segment_len(&self) -> Option<usize> {
        gso_segment_len(&self.pkt.data, self.pkt.frag.len(), self.pkt.gso_size)
    }
    /// Software GSO ([`gso_segments`], tbf's `tbf_segment`): each piece carries the
    /// TX-completion token with its own share ([`piece_token`]); the flow's byte account
    /// rides on the last.
    fn gso_segment(self) -> Result<Vec<Skb>, Skb> {
        let Some((outs, header_len)) = self.pkt.gso_size.and_then(|g| {
            let hl =
                gso_segment_len(&self.pkt.data, self.pkt.frag.len(), Some(g))? - usize::from(g);
            Some((gso_segments(&self.pkt.data, &self.pkt.frag[..], g)?, hl))
        }) else {
            return Err(self);
        };
        let last = outs.len() - 1;
        let tokens: Vec<Option<u64>> = outs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                self.pkt.token.map(|id| {
                    piece_token::encode(id, d.len().saturating_sub(header_len), i == last)
                })
            })
            .collect();
        Ok(outs
            .into_iter()
            .zip(tokens)
            .enumerate()
            .map(|(i, (data, token))| Skb {
                pkt: Packet {
                    data,
                    gso_size: None,
                    departure: self.pkt.departure,
                    token,
                    flow: self.pkt.flow,
                    seg: None,
                    frag: Default::default(),
                },
                enqueued: self.enqueued,
                acct_len: if i == last { self.acct_len } else { 0 },
            })
            .collect())
    }
}

/// A host's egress (`shallow_tcp::driver::Egress`, one TX queue here): shared by the emulator,
/// which enqueues what the endpoint releases ([`Egress::enqueue`](shallow_tcp::driver::Egress::enqueue):
/// out of the admission ledger, into the qdisc) and lets the NIC dequeue, and the host's engine,
/// which asks its qdisc for admission at the transmit ([`EgressGate`]); it also counts the
/// refusals not yet counted in the host's [`HostStats`](crate::HostStats).
pub type Egress = shallow_tcp::driver::Egress<Skb>;

/// A shared handle on a host's [`Egress`] (the emulator runs on one thread; the mutex is
/// only what a [`TxGate`](shallow_tcp::TxGate) installed in a `Send` engine needs).
pub type EgressHandle = shallow_tcp::driver::EgressHandle<Skb>;

/// The admission rule a `TcpHost`'s driver installs in its engine: the host's real qdisc
/// decides at the transmit ([`Qdisc::admit`]), as Linux's `dev_queue_xmit` returns
/// `NET_XMIT_DROP` to `__tcp_transmit_skb`; an admitted packet is then sure of its place when
/// the emulator enqueues it (after the CPU time of the send).
pub type EgressGate = shallow_tcp::driver::EgressGate<Skb>;

/// The qdisc of an [`EgressHandle`], borrowed ([`Sim::qdisc`](crate::Sim::qdisc)).
pub struct QdiscRef<'a>(pub(crate) MutexGuard<'a, Egress>);

impl std::ops::Deref for QdiscRef<'_> {
    type Target = dyn Qdisc<Skb> + Send;
    fn deref(&self) -> &Self::Target {
        self.0
            .queue(0)
            .qdisc
            .as_deref()
            .expect("an emulated host's egress has a qdisc")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Instant;

    fn with_tos(tos: u8) -> Skb {
        let mut d = vec![0u8; 40];
        d[0] = 0x45;
        d[1] = tos;
        Skb::new(Packet::new(d), Instant::ZERO)
    }

    /// The band comes from the IP TOS byte (ip_tos2prio + default priomap); non-IP → band 1.
    #[test]
    fn pfifo_fast_bands_by_tos() {
        assert_eq!(pfifo_fast_band(with_tos(0x10).priority()), 0);
        assert_eq!(pfifo_fast_band(with_tos(0x00).priority()), 1);
        assert_eq!(pfifo_fast_band(with_tos(0x08).priority()), 2);
        let non_ip = Skb::new(Packet::new(vec![0x00, 0x10]), Instant::ZERO);
        assert_eq!(pfifo_fast_band(non_ip.priority()), 1);
        let mut q = PfifoFast::new(10);
        q.enqueue(Instant::ZERO, with_tos(0x08)).unwrap();
        q.enqueue(Instant::ZERO, with_tos(0x00)).unwrap();
        q.enqueue(Instant::ZERO, with_tos(0x10)).unwrap();
        let order: Vec<u8> = std::iter::from_fn(|| q.dequeue(Instant::ZERO))
            .map(|s| s.pkt.data[1])
            .collect();
        assert_eq!(order, vec![0x10, 0x00, 0x08]);
    }

    /// tbf cuts a real TSO super-segment into wire segments; each carries the packet's token
    /// with its payload length, the last marked as such (`piece_token`).
    #[test]
    fn tbf_segments_gso_larger_than_burst() {
        use crate::segment::{build_ipv4_tcp, TcpPacketSpec};
        let mut d = Vec::new();
        build_ipv4_tcp(&TcpPacketSpec::default(), &[1u8; 5000], &mut d);
        let mut p = Packet::new(d);
        p.gso_size = Some(1000);
        p.token = Some(9);
        let mut q = Tbf::new(crate::Rate::gbps(1), 3000, 1_000_000);
        q.enqueue(Instant::ZERO, Skb::new(p, Instant::ZERO))
            .unwrap();
        assert_eq!(q.backlog_packets(), 5);
        assert_eq!(q.stats().segmented, 1);
        let mut tokens = Vec::new();
        let mut now = Instant::ZERO;
        while q.backlog_packets() > 0 {
            match q.dequeue(now) {
                Some(s) => {
                    assert!(segment::parse_tcp(&s.pkt.data).is_some());
                    tokens.push(s.pkt.token)
                }
                None => now = q.next_wakeup(now).unwrap(),
            }
        }
        let decoded: Vec<_> = tokens
            .iter()
            .map(|t| piece_token::decode(t.expect("every piece has a token")))
            .collect();
        assert_eq!(
            decoded,
            vec![
                (9, Some((1000, false))),
                (9, Some((1000, false))),
                (9, Some((1000, false))),
                (9, Some((1000, false))),
                (9, Some((1000, true))),
            ]
        );
        assert_eq!(piece_token::decode(9), (9, None));
    }
}
