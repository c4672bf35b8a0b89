//! A drop by the sending host's own egress qdisc is a local drop, not a loss in the network
//! (issue 19 item 1). Linux's qdisc refuses the packet inside the sender's transmit call
//! (`dev_queue_xmit` returns `NET_XMIT_DROP` to `__tcp_transmit_skb`): the skb is not counted
//! as sent, the flow enters CWR and sends it again later. The emulator's `TcpHost` asks its
//! host's real qdisc at the transmit (`EgressGate`), so the engine takes the same path.
//!
//! Before the change, the emulator's refusals were drops after the fact: `shallow bench --test
//! BULK --bytes 8m --flows 8 --qdisc pfifo:limit=5 --nic-rate 1gbit --link
//! rate=1gbit,delay=1ms` (TSO on) had 94 qdisc drops, 480 TcpRetransSegs, 31 SACK recoveries
//! and 1140 out-of-order queueings at the receiver (834 Mbit/s); with the verdict at the
//! transmit, 115 refusals, 1 TcpRetransSegs (a tail loss probe), no SACK recovery, no
//! out-of-order data (897 Mbit/s).
//!
//! The kernel's figures for the same situation (Linux 6.18, veth between two namespaces,
//! TSO/GSO off, htb 200 Mbit with a `pfifo limit 5` leaf on the sender, 8 iperf3 flows, 5 s):
//! 1184–1258 (three runs) qdisc drops, TcpRetransSegs 0, TcpExtTCPRetransFail 0, TcpExtTCPSackRecovery
//! 0–1, the receiver's TcpExtTCPOFOQueue 0–2 — the refused packets were sent again as new
//! data, never as retransmissions.

use shallow_sim::bench::{run_ext, BenchConfig, BenchExtras, BenchReport, Test};
use shallow_sim::{QdiscSpec, Rate};
use std::time::Duration;

fn run(qdisc: &str, gso_off: bool, seed: u64) -> BenchReport {
    let cfg = BenchConfig {
        test: Test::Bulk,
        flows: 8,
        bytes: Some(8 << 20),
        duration: Some(Duration::from_secs(60)),
        link: "rate=1gbit,delay=1ms".parse().unwrap(),
        // The NIC is the bottleneck, so packets wait in the host's qdisc.
        nic_rate: Some(Rate::gbps(1)),
        qdisc: qdisc.parse::<QdiscSpec>().unwrap(),
        seed,
        ..BenchConfig::default()
    };
    let extras = BenchExtras {
        tx_gso_off: gso_off,
        ..BenchExtras::default()
    };
    run_ext(&cfg, &extras, None, &mut |_| {}).unwrap().0
}

fn counter(m: &std::collections::BTreeMap<String, u64>, k: &str) -> u64 {
    m.get(k).copied().unwrap_or(0)
}

/// With TSO off and a qdisc too small for the flows' TSQ budgets (`pfifo limit 5`; fq with
/// `flow_limit 5`), the qdisc refuses packets at the transmit: it counts them as drops, the
/// engine sends them again as new data, and there is no retransmission, no SACK recovery,
/// no tail loss probe and no out-of-order data at the receiver; every byte arrives intact.
#[test]
fn qdisc_refusals_are_not_losses() {
    for q in ["pfifo:limit=5", "fq:flow_limit=5"] {
        let r = run(q, true, 3);
        let qd = r.total_extra.qdisc_drops;
        let tx = &r.counters;
        eprintln!(
            "{q}: qdisc drops {}, OutSegs {}, OrigDataSent {}, RetransSegs {}, \
             SackRecovery {}, LossProbes {}, rx OFOQueue {}, {:.0} Mbit/s",
            qd,
            counter(tx, "TcpOutSegs"),
            counter(tx, "TcpExtTCPOrigDataSent"),
            counter(tx, "TcpRetransSegs"),
            counter(tx, "TcpExtTCPSackRecovery"),
            counter(tx, "TcpExtTCPLossProbes"),
            counter(&r.rx_counters, "TcpExtTCPOFOQueue"),
            r.total.goodput_bps / 1e6,
        );
        assert_eq!(r.verified, Some(true), "{q}: every byte delivered intact");
        assert!(qd > 0, "{q}: the qdisc refused packets");
        assert_eq!(counter(tx, "TcpRetransSegs"), 0, "{q}: no retransmission");
        assert_eq!(counter(tx, "TcpExtTCPSackRecovery"), 0, "{q}");
        assert_eq!(counter(tx, "TcpExtTCPLossProbes"), 0, "{q}");
        assert_eq!(counter(tx, "TcpExtTCPRetransFail"), 0, "{q}");
        assert_eq!(counter(&r.rx_counters, "TcpExtTCPOFOQueue"), 0, "{q}");
        // Linux counts a refused new-data attempt in OutSegs (before `queue_xmit`).
        assert!(counter(tx, "TcpOutSegs") >= counter(tx, "TcpExtTCPOrigDataSent") + qd);
    }
}
