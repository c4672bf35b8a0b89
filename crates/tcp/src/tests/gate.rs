//! The device side's verdict at the transmit (`gate`): a packet the qdisc refuses is a local
//! drop (NET_XMIT_DROP), never a loss in the network.

use crate::harness::*;
use crate::tests::e2e::{connect_pair, transfer};
use crate::*;
use core::time::Duration;
use std::sync::{Arc, Mutex};

/// What the test gate did, shared with the test.
#[derive(Default)]
struct Log {
    /// Refuse every data packet while set.
    refuse_all: bool,
    /// Refuse every `every`-th data packet offered (0: none).
    every: u32,
    offered: u32,
    refused: u32,
    /// Accepted packets, in order.
    accepted: Vec<TxMeta>,
}

struct TestGate(Arc<Mutex<Log>>);

impl TxGate for TestGate {
    fn admit(&mut self, m: &TxMeta) -> bool {
        let mut l = self.0.lock().unwrap();
        if m.len > m.header_len {
            l.offered += 1;
            if l.refuse_all || (l.every > 0 && l.offered % l.every == 0) {
                l.refused += 1;
                return false;
            }
        }
        l.accepted.push(*m);
        true
    }
}

fn gate(st: &mut Stack) -> Arc<Mutex<Log>> {
    let log = Arc::new(Mutex::new(Log::default()));
    st.set_tx_gate(Some(Box::new(TestGate(log.clone()))));
    log
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 13 + i / 509) as u8).collect()
}

/// A refused first transmission stays unsent (snd_nxt does not move, the bytes stay in the
/// write queue), the flow enters CWR (`__tcp_transmit_skb` → `tcp_enter_cwr`), nothing
/// counts as retransmitted; with nothing in flight the persist timer tries again
/// (`tcp_check_probe_timer` after `tcp_write_xmit` failed), and every byte arrives in order.
#[test]
fn refused_first_transmission_stays_unsent_then_leaves() {
    let mut p = Pair::new(3, LinkConfig::default());
    let (c, _l, s) = connect_pair(&mut p);
    let log = gate(&mut p.a);
    log.lock().unwrap().refuse_all = true;
    let data = pattern(20_000);
    assert_eq!(p.a.send(p.now, c, &data, 0), Ok(20_000));
    p.run_for(Duration::from_millis(50));
    let i = p.a.tcp_info(p.now, c).unwrap();
    assert_eq!(i.ca_state, 2, "TCP_CA_CWR");
    assert_eq!(i.unacked, 0, "nothing in flight");
    assert_eq!(p.a.ioctl(c, Ioctl::SiocOutqNsd), Ok(20_000), "all unsent");
    assert!(log.lock().unwrap().refused >= 1);
    assert_eq!(p.a.counters().value(Mib::RetransSegs), 0);
    assert_eq!(p.a.counters().value(Mib::TCPOrigDataSent), 0);
    log.lock().unwrap().refuse_all = false;
    let mut buf = vec![0u8; 65536];
    let mut read = Vec::new();
    let deadline = p.now + Duration::from_secs(3);
    while read.len() < data.len() && p.now < deadline {
        if let Ok(n) = p.b.recv(p.now, s, &mut buf, 0) {
            read.extend_from_slice(&buf[..n]);
        }
        if !p.step() {
            break;
        }
    }
    assert!(read == data, "every byte delivered, in order");
    let a = p.a.counters();
    assert_eq!(a.value(Mib::RetransSegs), 0, "no retransmission");
    assert_eq!(a.value(Mib::TCPSackRecovery), 0);
    assert_eq!(a.value(Mib::TCPRetransFail), 0);
    assert_eq!(p.b.counters().value(Mib::TCPOFOQueue), 0);
}

/// A bulk transfer through a gate that refuses every 7th data packet, without TSO (the
/// `ethtool -K tso off` case of issue 19): the refused packets leave on the next try, the
/// network loses nothing, so there is no retransmission, no SACK recovery and no
/// out-of-order data at the receiver.
#[test]
fn periodic_refusals_cause_no_retransmission() {
    let link = LinkConfig {
        rate_bps: 100_000_000,
        delay: Duration::from_millis(2),
        ..LinkConfig::default()
    };
    let mut p = Pair::new(5, link);
    p.a.set_device(DeviceCaps {
        gso: false,
        ..p.a.device()
    });
    let (c, _l, s) = connect_pair(&mut p);
    let log = gate(&mut p.a);
    log.lock().unwrap().every = 7;
    let data = pattern(3_000_000);
    let got = transfer(&mut p, c, s, &data, Duration::from_secs(10));
    assert!(got == data, "every byte delivered, in order");
    let refused = log.lock().unwrap().refused;
    assert!(refused > 100, "refused {refused}");
    let a = p.a.counters();
    assert_eq!(a.value(Mib::RetransSegs), 0);
    assert_eq!(a.value(Mib::TCPSackRecovery), 0);
    assert_eq!(a.value(Mib::TCPLossProbes), 0);
    assert_eq!(p.b.counters().value(Mib::TCPOFOQueue), 0);
    assert_eq!(p.a.tcp_info(p.now, c).unwrap().total_retrans, 0);
}

/// The gate is told the packet's exact length, headers, GSO size, flow and TOS before the
/// packet exists (data, TSO and pure ACKs; with and without scatter-gather).
#[test]
fn gate_meta_describes_the_packet() {
    for sg in [false, true] {
        let mut p = Pair::new(9, LinkConfig::default());
        p.a.set_device(DeviceCaps { sg, ..p.a.device() });
        let (c, _l, _s) = connect_pair(&mut p);
        let log = gate(&mut p.a);
        assert_eq!(p.a.send(p.now, c, &pattern(30_000), 0), Ok(30_000));
        let mut n = 0;
        let mut tso = 0;
        while let Some(t) = p.a.poll_transmit(p.now) {
            let m = log.lock().unwrap().accepted[n];
            n += 1;
            assert_eq!(m.len, t.data.len() + t.frags.len());
            assert_eq!(m.gso_size, t.gso_size);
            assert_eq!(m.flow, t.flow);
            assert_eq!(m.departure, t.departure);
            let ihl = usize::from(t.data[0] & 0xf) * 4;
            let doff = shallow_wire::TcpPacket::new_checked(&t.data[ihl..])
                .unwrap()
                .header_len();
            assert_eq!(m.header_len, ihl + doff);
            assert_eq!(m.tos, t.data[1]);
            if m.segs() > 1 {
                tso += 1;
            }
        }
        assert!(n >= 1 && tso >= 1, "{n} packets, {tso} TSO");
        assert_eq!(n, log.lock().unwrap().accepted.len());
    }
}
