//! `shallow bench`: netperf-style workloads between two emulated hosts running the engine,
//! and their metrics.
//!
//! The left host (10.0.0.1) always sends the bulk data; the forward link carries it. For
//! TCP_STREAM and BULK the left host connects (netperf side) to the right one (netserver);
//! for TCP_MAERTS the right host connects and the left host's accepted connections send;
//! for TCP_RR the left host is the client. Sysctls given without a prefix apply to the left
//! (data-sending) host; `rx:` ones to the right host.
//!
//! Metrics are sampled every [`BenchConfig::sample_interval`] of virtual time (socket memory)
//! or recorded per event (every RTT sample of the senders' estimators, taken from the engine's
//! bounded per-socket log each interval; host-queue delay of every packet, RR latency of every
//! transaction, wake-ups, system calls). [`run_series`] also records a
//! [`Series`] for charts: queues, memory and cumulative counters every
//! [`SeriesConfig::interval`](crate::series::SeriesConfig::interval), off unless asked for.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::Serialize;
use shallow_tcp::tstamp::sof;
use shallow_tcp::{DeviceCaps, SocketId};

use crate::capture::{CaptureOut, CapturePoint};
use crate::cpu::{CostTable, CpuLayout};
use crate::hist::Histogram;
use crate::host::{SysctlFailure, TcpHost, TcpHostConfig, Thread};
use crate::series::{HostSample, Recorder, Sample, Series, SeriesConfig};
use crate::sim::{HostConfig, HostId, NicConfig, Sim, TopologyBuilder, TopologyError};
use crate::spec::{LinkSpec, QdiscSpec};
use crate::time::{nanos, Instant, Rate};
pub use crate::workload::Test;
use crate::workload::{Client, Listener, Role, Workload, Writer};

/// Everything a bench run needs.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// Workload.
    pub test: Test,
    /// Parallel flows (super_netperf).
    pub flows: usize,
    /// Virtual run time (default 10 s); with a byte count an upper bound (default 600 s).
    pub duration: Option<Duration>,
    /// Bytes per flow (BULK: required; TCP_STREAM/MAERTS: stop each flow after this many).
    pub bytes: Option<u64>,
    /// Bytes per `send()` (netperf `-m`).
    pub msg_size: usize,
    /// Bytes per `recv()` on the receiving side.
    pub recv_size: usize,
    /// TCP_RR request bytes.
    pub req_size: usize,
    /// TCP_RR response bytes.
    pub resp_size: usize,
    /// How bulk senders write.
    pub writer: Writer,
    /// TCP_NODELAY on every connection.
    pub nodelay: bool,
    /// Add a 1-byte TCP_RR latency probe flow alongside the workload.
    pub probe: bool,
    /// Forward (data) direction of the bottleneck.
    pub link: LinkSpec,
    /// Reverse direction; `None`: the forward delay and rate without impairments.
    pub reverse_link: Option<LinkSpec>,
    /// Root qdisc of the sending (left) host.
    pub qdisc: QdiscSpec,
    /// NIC line rate of both hosts; `None`: the larger of 10 Gbit/s and the link rate.
    pub nic_rate: Option<Rate>,
    /// TX completion interrupt delay (ethtool `tx-usecs`) of both hosts.
    pub tx_completion_delay: Duration,
    /// RX interrupt coalescing of both hosts (ethtool `rx-usecs`): how long the NIC waits
    /// before raising the interrupt that starts a NAPI poll, so GRO can merge the segments of
    /// a flow that arrived meanwhile.
    pub rx_coalesce: Duration,
    /// CPU layout of both hosts.
    pub cpus: CpuLayout,
    /// CPU costs.
    pub costs: CostTable,
    /// Sysctls of the left (data-sending) host.
    pub sysctls: Vec<(String, String)>,
    /// Sysctls of the right host.
    pub rx_sysctls: Vec<(String, String)>,
    /// Master seed.
    pub seed: u64,
    /// Sampling period of socket memory and RTT.
    pub sample_interval: Duration,
    /// `SO_TIMESTAMPING` ([`TSTAMP_FLAGS`]) on the data senders' sockets: the per-write
    /// spans in [`BenchReport::tx_timestamps`].
    pub timestamps: bool,
    /// `SO_ZEROCOPY` on the data senders' sockets and every send `MSG_ZEROCOPY`: their
    /// completions in [`BenchReport::zerocopy`].
    pub zerocopy: bool,
}

/// The `SOF_TIMESTAMPING_*` flags [`BenchConfig::timestamps`] sets on a data sender's socket:
/// SCHED, SND and ACK of every write, software stamps, a key per write, no payload (as
/// `shallow bench --substrate linux --timestamps` sets them on Shallow's and the kernel's).
pub const TSTAMP_FLAGS: u32 =
    sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID | sof::OPT_TSONLY;

/// The distribution of one per-write span, microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SpanReport {
    /// Writes measured.
    pub writes: u64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl SpanReport {
    fn of(h: &Histogram) -> Option<SpanReport> {
        let q = |q: f64| h.quantile(q).unwrap_or(0) as f64 / 1000.0;
        (h.count() > 0).then(|| SpanReport {
            writes: h.count(),
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            max_us: h.max() as f64 / 1000.0,
        })
    }
}

/// The data senders' zero-copy sends and completions (all workload flows together,
/// [`crate::host::ZcStats`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ZcReport {
    /// Sends that took bytes (ids).
    pub sends: u64,
    /// Ids completed by the run's end.
    pub completed: u64,
    /// Ids completed as copied.
    pub copied: u64,
    /// Send → completion per id: how long the stack held the application's buffer.
    pub hold: Option<SpanReport>,
}

/// Per-write transmit timestamps of the data senders (all workload flows together), read
/// from their error queues ([`crate::host::TxStamps`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TxStampReport {
    /// SCHED→SND: residence in the sending host's queues (qdisc and NIC, up to the TX
    /// completion that stamps SND).
    pub sched_to_snd: Option<SpanReport>,
    /// SND→ACK.
    pub snd_to_ack: Option<SpanReport>,
    /// Writes not measured: an event the full error queue dropped, or no ACK by the end.
    pub incomplete_writes: u64,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            test: Test::Stream,
            flows: 1,
            duration: None,
            bytes: None,
            msg_size: 16384,
            recv_size: 131072,
            req_size: 1,
            resp_size: 1,
            writer: Writer::Blocking,
            nodelay: false,
            probe: false,
            link: LinkSpec::default(),
            reverse_link: None,
            qdisc: QdiscSpec::default(),
            nic_rate: None,
            tx_completion_delay: Duration::ZERO,
            rx_coalesce: Duration::from_micros(8),
            cpus: CpuLayout::Same,
            costs: CostTable::default(),
            sysctls: Vec::new(),
            rx_sysctls: Vec::new(),
            seed: 1,
            sample_interval: Duration::from_millis(10),
            timestamps: false,
            zerocopy: false,
        }
    }
}

impl BenchConfig {
    /// The workload these settings describe (its roles are what the threads play).
    pub fn workload(&self) -> Workload {
        Workload {
            test: self.test,
            msg_size: self.msg_size,
            recv_size: self.recv_size,
            req_size: self.req_size,
            resp_size: self.resp_size,
            bytes: self.bytes,
            writer: self.writer,
            nodelay: self.nodelay,
        }
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A sysctl was refused.
    #[error(transparent)]
    Sysctl(#[from] SysctlFailure),
    /// The topology is invalid.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// An option combination makes no sense.
    #[error("{0}")]
    Config(String),
    /// The engine refused to set up a listener.
    #[error("listener: {0}")]
    Listen(shallow_tcp::Errno),
}

/// Metrics of one flow, or of all flows together (`flow` = null). Units are in the names.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FlowMetrics {
    /// Flow index (null in the total).
    pub flow: Option<usize>,
    /// "stream", "maerts", "bulk", "rr", "probe" or "total".
    pub kind: String,
    /// Bytes the data sender's application wrote.
    pub bytes_written: u64,
    /// Bytes the receiver's application read.
    pub bytes_read: u64,
    /// Bytes TCP sent, retransmissions included (`tcpi_bytes_sent`), over the run.
    pub throughput_bps: f64,
    /// Bytes read by the receiving application, over the run.
    pub goodput_bps: f64,
    /// Retransmitted segments (`tcpi_total_retrans`).
    pub retransmits: u64,
    /// Retransmitted bytes (`tcpi_bytes_retrans`).
    pub retransmitted_bytes: u64,
    /// RTT samples of the data sender: every measurement its RTT estimator took (one per ACK
    /// that gives one, `tcp_ack_update_rtt`), not the smoothed `srtt`.
    pub rtt_samples: u64,
    /// Samples lost because the engine's per-socket log was full between two takes (0 unless
    /// the sample interval is very long).
    pub rtt_samples_dropped: u64,
    /// Median of the per-ACK RTT samples.
    pub rtt_p50_us: Option<f64>,
    /// 99th percentile of the per-ACK RTT samples.
    pub rtt_p99_us: Option<f64>,
    /// Packets whose host-queue delay was measured (qdisc enqueue → last bit out of the NIC).
    pub host_queue_packets: u64,
    /// Median host-queue delay.
    pub host_queue_delay_p50_us: Option<f64>,
    /// 99th percentile host-queue delay.
    pub host_queue_delay_p99_us: Option<f64>,
    /// Largest host-queue delay.
    pub host_queue_delay_max_us: Option<f64>,
    /// Largest number of bytes below TCP (qdisc + NIC, not yet completed).
    pub bytes_queued_max: u64,
    /// Time-weighted mean of bytes below TCP.
    pub bytes_queued_mean: f64,
    /// Largest sampled `sk_wmem_queued` of the data sender.
    pub wmem_queued_max_bytes: u64,
    /// Mean sampled `sk_wmem_queued`.
    pub wmem_queued_mean_bytes: f64,
    /// Largest sampled `sk_rmem_alloc` of the receiver.
    pub rmem_max_bytes: u64,
    /// Mean sampled `sk_rmem_alloc`.
    pub rmem_mean_bytes: f64,
    /// `send()` calls of the data sender.
    pub send_calls: u64,
    /// Mean bytes per `send()` call.
    pub bytes_per_send_call: f64,
    /// `send()` calls that hit a full send buffer (EAGAIN or partial).
    pub send_calls_full: u64,
    /// `epoll_wait` calls of the data sender.
    pub epoll_waits: u64,
    /// `recv()` calls of the receiver.
    pub recv_calls: u64,
    /// Wake-ups of the data sender's thread.
    pub sender_wakeups: u64,
    /// Wake-ups of the receiver's thread.
    pub receiver_wakeups: u64,
    /// Context switches of both threads.
    pub context_switches: u64,
    /// Context switches per second of run time.
    pub context_switches_per_s: f64,
    /// Data segments sent (`tcpi_data_segs_out`, TSO segments counted one by one).
    pub segments_sent: u64,
    /// Mean payload bytes per data segment sent.
    pub mean_segment_bytes: f64,
    /// Segments the receiver sent (mostly ACKs; `tcpi_segs_out`).
    pub acks_sent: u64,
    /// Data segments the receiver got (`tcpi_data_segs_in`).
    pub data_segments_received: u64,
    /// `acks_sent / data_segments_received`.
    pub acks_per_data_segment: Option<f64>,
    /// Receiver socket drops (`SO_MEMINFO` d: backlog drops and other drops).
    pub receiver_socket_drops: u64,
    /// TCP_RR transactions.
    pub transactions: u64,
    /// TCP_RR transactions per second.
    pub transactions_per_s: f64,
    /// TCP_RR latency percentiles.
    pub latency_p50_us: Option<f64>,
    /// 90th percentile.
    pub latency_p90_us: Option<f64>,
    /// 99th percentile.
    pub latency_p99_us: Option<f64>,
    /// Largest.
    pub latency_max_us: Option<f64>,
    /// BULK: SHA-256 of the bytes read equals that of the bytes written, and all arrived.
    pub verified: Option<bool>,
    /// With a byte count: when the receiver read the end of the stream, seconds.
    pub completed_s: Option<f64>,
    /// The error that ended a thread early, if any.
    pub error: Option<String>,
}

/// Totals that only exist for the whole run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TotalExtra {
    /// `TcpExtTCPBacklogDrop` of the receiving host.
    pub backlog_drops: u64,
    /// `TcpExtTCPBacklogCoalesce` of the receiving host.
    pub backlog_coalesces: u64,
    /// Packets the receiving host queued to an owned socket's backlog.
    pub backlog_packets: u64,
    /// Largest sampled TCP memory of the sending host in pages (`/proc/net/sockstat` mem),
    /// computed as the sum over its sockets of `wmem_queued + rmem_alloc` rounded up to pages.
    pub sockstat_mem_pages_max: u64,
    /// Mean of the same.
    pub sockstat_mem_pages_mean: f64,
    /// Packets dropped waiting for a busy softirq CPU (both hosts).
    pub softirq_backlog_drops: u64,
    /// Packets the router queue of the forward link dropped.
    pub link_queue_drops: u64,
    /// Packets the forward link lost to impairments.
    pub link_lost: u64,
    /// Packets the sending host's qdisc dropped.
    pub qdisc_drops: u64,
    /// Wire packets the sending host sent.
    pub wire_packets: u64,
    /// Wire packets both hosts sent (data one way, ACKs the other): every packet the run
    /// simulated on a wire, the figure the emulator's speed is quoted in.
    pub wire_packets_both_ways: u64,
    /// Events the emulator ran.
    pub events: u64,
}

/// Busy time of one CPU.
#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    /// "sender" (left) or "receiver" (right).
    pub host: String,
    /// CPU index (0 does softirq; under the spread layout every CPU does some).
    pub cpu: usize,
    /// Busy time, seconds.
    pub busy_s: f64,
    /// Of which softirq, seconds.
    pub softirq_s: f64,
    /// Busy time over run time.
    pub utilization: f64,
}

/// The result of a run.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    /// Test name.
    pub test: String,
    /// Master seed.
    pub seed: u64,
    /// Run time, seconds (with a byte count: until the last flow completed).
    pub duration_s: f64,
    /// All flows together (RR latency of the workload flows only, not the probe).
    pub total: FlowMetrics,
    /// Run-wide figures.
    pub total_extra: TotalExtra,
    /// Per flow (the probe last).
    pub flows: Vec<FlowMetrics>,
    /// CPU time per CPU.
    pub cpu: Vec<CpuReport>,
    /// MIB counters of the sending host (deltas over the run; every counter).
    pub counters: BTreeMap<String, u64>,
    /// MIB counters of the receiving host.
    pub rx_counters: BTreeMap<String, u64>,
    /// BULK: every flow verified; null for other tests.
    pub verified: Option<bool>,
    /// With [`BenchConfig::timestamps`]: the data senders' per-write spans (absent without).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_timestamps: Option<TxStampReport>,
    /// With [`BenchConfig::zerocopy`]: the data senders' zero-copy completions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zerocopy: Option<ZcReport>,
}

#[derive(Default, Clone)]
struct FlowAcc {
    rtt: Histogram,
    rtt_dropped: u64,
    qdelay: Histogram,
    wmem_max: u64,
    wmem_sum: u128,
    rmem_max: u64,
    rmem_sum: u128,
    samples: u64,
}

const DATA_PORT: u16 = 5001;
const PROBE_PORT: u16 = 5002;

fn us(ns: Option<u64>) -> Option<f64> {
    ns.map(|v| v as f64 / 1000.0)
}

/// Host settings beyond [`BenchConfig`] that experiments (`shallow lab`) switch; the
/// defaults are what [`run`] uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BenchExtras {
    /// The receiving host's route to the sender has `quickack 1` (`ip route ... quickack 1`,
    /// Linux `dst_quick_ack`): it ACKs every segment at once.
    pub rx_route_quickack: bool,
    /// The sending host's device takes no TSO/GSO packets (`ethtool -K dev tso off gso
    /// off`, [`DeviceCaps::gso`](shallow_tcp::DeviceCaps::gso) off): one segment per packet.
    pub tx_gso_off: bool,
    /// Both hosts on IPv6 (`fd00::1` → `fd00:0:0:1::1`, one /64 a side) instead of IPv4
    /// (`10.0.0.1` → `10.0.1.1`): IPv6 headers, the IPv6 MSS (1440 at MTU 1500), IPv6 GSO
    /// and GRO.
    pub ipv6: bool,
}

/// Run a benchmark. `capture`: pcap of the sending host's egress (as tcpdump on it sees
/// it). `progress` is called after each sampling period with the fraction done (0..=1).
pub fn run(
    cfg: &BenchConfig,
    capture: Option<CaptureOut>,
    progress: &mut dyn FnMut(f64),
) -> Result<(BenchReport, Option<CaptureOut>), BenchError> {
    run_ext(cfg, &BenchExtras::default(), capture, progress)
}

/// [`run`] with [`BenchExtras`].
pub fn run_ext(
    cfg: &BenchConfig,
    extras: &BenchExtras,
    capture: Option<CaptureOut>,
    progress: &mut dyn FnMut(f64),
) -> Result<(BenchReport, Option<CaptureOut>), BenchError> {
    run_inner(cfg, extras, capture, progress, None).map(|(r, c, _)| (r, c))
}

/// [`run_ext`] that also records a [`Series`] (time series of both hosts' queues and memory,
/// the workload's cumulative counters, and the host-queue delay histogram) as `series` asks.
/// The report is the same as [`run_ext`]'s for the same configuration.
pub fn run_series(
    cfg: &BenchConfig,
    extras: &BenchExtras,
    series: &SeriesConfig,
    capture: Option<CaptureOut>,
    progress: &mut dyn FnMut(f64),
) -> Result<(BenchReport, Option<CaptureOut>, Series), BenchError> {
    let (r, c, s) = run_inner(cfg, extras, capture, progress, Some(*series))?;
    Ok((r, c, s.unwrap_or_default()))
}

fn run_inner(
    cfg: &BenchConfig,
    extras: &BenchExtras,
    capture: Option<CaptureOut>,
    progress: &mut dyn FnMut(f64),
    series: Option<SeriesConfig>,
) -> Result<(BenchReport, Option<CaptureOut>, Option<Series>), BenchError> {
    if cfg.flows == 0 {
        return Err(BenchError::Config("--flows must be at least 1".into()));
    }
    if cfg.test == Test::Bulk && cfg.bytes.is_none() {
        return Err(BenchError::Config("BULK needs --bytes".into()));
    }
    if cfg.msg_size == 0 || cfg.recv_size == 0 || cfg.req_size == 0 || cfg.resp_size == 0 {
        return Err(BenchError::Config(
            "message sizes must be at least 1 byte".into(),
        ));
    }
    let (left_ip, right_ip, host_prefix): (IpAddr, IpAddr, u8) = if extras.ipv6 {
        (
            std::net::Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into(),
            std::net::Ipv6Addr::new(0xfd00, 0, 0, 1, 0, 0, 0, 1).into(),
            128,
        )
    } else {
        ([10, 0, 0, 1].into(), [10, 0, 1, 1].into(), 32)
    };
    let fq = matches!(cfg.qdisc, QdiscSpec::Fq { .. });
    let mk_host = |addr, seed_name: &str, sysctls: &Vec<(String, String)>, fq| {
        TcpHost::new(&TcpHostConfig {
            addr,
            seed: crate::rng::derive_seed(cfg.seed, seed_name),
            costs: cfg.costs,
            cpus: cfg.cpus,
            sysctls: sysctls.clone(),
            fq_pacing: fq,
        })
    };
    let mut left = mk_host(left_ip, "host/left", &cfg.sysctls, fq)?;
    let mut right = mk_host(right_ip, "host/right", &cfg.rx_sysctls, false)?;
    if extras.tx_gso_off {
        left.driver.set_device(DeviceCaps {
            gso: false,
            ..left.driver.device()
        });
    }
    if extras.rx_route_quickack {
        right.driver.set_route(
            left_ip,
            host_prefix,
            shallow_tcp::RouteAttrs {
                quickack: true,
                ..shallow_tcp::RouteAttrs::default()
            },
        );
    }

    let bulk = cfg.test == Test::Bulk;
    // The workload's two sides: netserver listens, netperf's flows connect to it.
    let w = cfg.workload();
    let stamps = |role: &Role| {
        if cfg.timestamps && matches!(role, Role::Sender { .. } | Role::RrClient { .. }) {
            TSTAMP_FLAGS
        } else {
            0
        }
    };
    let zerocopy = |role: &Role| cfg.zerocopy && matches!(role, Role::Sender { .. });
    let client = |flow, ip, port, role: Role| Client {
        flow,
        remote: SocketAddr::new(ip, port),
        timestamping: stamps(&role),
        zerocopy: zerocopy(&role),
        role,
        nodelay: cfg.nodelay,
    };
    {
        let (netperf, netserver, server_ip) = if cfg.test.netperf_sends() {
            (&mut left, &mut right, right_ip)
        } else {
            (&mut right, &mut left, left_ip)
        };
        netserver
            .add_listener(Listener {
                port: DATA_PORT,
                timestamping: stamps(&w.netserver_role()),
                zerocopy: zerocopy(&w.netserver_role()),
                role: w.netserver_role(),
                nodelay: cfg.nodelay,
            })
            .map_err(BenchError::Listen)?;
        for i in 0..cfg.flows {
            netperf.add_client(client(i, server_ip, DATA_PORT, w.netperf_role()));
        }
    }
    if cfg.probe {
        right
            .add_listener(Listener {
                port: PROBE_PORT,
                role: Role::RrServer { req: 1, resp: 1 },
                nodelay: true,
                timestamping: 0,
                zerocopy: false,
            })
            .map_err(BenchError::Listen)?;
        let mut c = client(
            cfg.flows,
            right_ip,
            PROBE_PORT,
            Role::RrClient { req: 1, resp: 1 },
        );
        c.nodelay = true;
        // The probe's writes are not the workload's.
        c.timestamping = 0;
        c.zerocopy = false;
        left.add_client(c);
    }

    let link_rate = cfg.link.rate.unwrap_or(Rate::gbps(10));
    let nic_rate = cfg.nic_rate.unwrap_or(link_rate.max(Rate::gbps(10)));
    let nic = NicConfig {
        rate: nic_rate,
        tx_coalesce: cfg.tx_completion_delay,
        ..NicConfig::default()
    };
    let reverse = cfg.reverse_link.clone().unwrap_or(LinkSpec {
        rate: cfg.link.rate,
        delay: cfg.link.delay,
        ..LinkSpec::default()
    });
    let mut b = TopologyBuilder::new(cfg.seed);
    let lh = b.sender(
        HostConfig {
            addrs: vec![left_ip],
            qdisc: cfg.qdisc.clone(),
            nic: nic.clone(),
            record_delays: true,
            rx_coalesce: cfg.rx_coalesce,
            capture: capture.map(|c| (CapturePoint::HostTx, c)),
            ..HostConfig::default()
        },
        left,
    );
    let rh = b.receiver(
        HostConfig {
            addrs: vec![right_ip],
            rx_coalesce: cfg.rx_coalesce,
            nic,
            ..HostConfig::default()
        },
        right,
    );
    b.forward(cfg.link.clone());
    b.reverse(reverse);
    let mut sim = b.build()?;

    // A byte count per flow makes a run finite: it ends when every receiver has read to the
    // end of its stream.
    let finite = cfg.bytes.is_some() && cfg.test != Test::Rr;
    let limit = Instant::ZERO
        + cfg.duration.unwrap_or(if finite {
            Duration::from_secs(600)
        } else {
            Duration::from_secs(10)
        });
    let n_all = cfg.flows + usize::from(cfg.probe);
    let mut acc = vec![FlowAcc::default(); n_all];
    let mut mem_pages_max = 0u64;
    let mut mem_pages_sum = 0u128;
    let mut mem_samples = 0u64;
    let step = cfg.sample_interval.max(Duration::from_micros(100));
    let mut end = limit;
    // (local port, remote port) on the left host → flow, filled as connections come up.
    let mut port_flow: BTreeMap<(u16, u16), usize> = BTreeMap::new();
    let mut senders: Vec<(usize, SocketId)> = Vec::new();
    let mut rtt_buf: Vec<u32> = Vec::new();
    let mut rec = series.map(Recorder::new);
    loop {
        let t = (sim.now() + step).min(limit);
        // The recorder's points before this sampling point: the emulator stops there only to
        // be read, so the run is the same as without them.
        if let Some(r) = rec.as_mut() {
            while r.next_due() < t {
                sim.run_until(r.next_due());
                r.push(sample_of(&sim, lh, rh, cfg));
            }
        }
        sim.run_until(t);
        if let Some(r) = rec.as_mut() {
            if r.next_due() <= t {
                r.push(sample_of(&sim, lh, rh, cfg));
            }
        }
        // Host-queue delays of the left host's packets, by flow.
        let delays = sim.take_delays(lh);
        {
            let host = sim.endpoint(lh);
            refresh_ports(host, sim.endpoint(rh), cfg, &mut port_flow);
            for d in delays {
                let f = host
                    .flow_ports(d.flow)
                    .and_then(|p| port_flow.get(&p).copied());
                if let Some(f) = f {
                    acc[f].qdelay.add(nanos(d.host_queue_delay()));
                }
            }
        }
        // Socket samples.
        let (lhost, rhost) = (sim.endpoint(lh), sim.endpoint(rh));
        senders.clear();
        for (f, a) in acc.iter_mut().enumerate() {
            let Some((s_th, r_th)) = pair(lhost, rhost, cfg, f) else {
                continue;
            };
            if let Some(s) = s_th.sock {
                senders.push((f, s));
                if let Ok(m) = lhost.driver.meminfo(s) {
                    a.wmem_max = a.wmem_max.max(u64::from(m.wmem_queued));
                    a.wmem_sum += u128::from(m.wmem_queued);
                }
            }
            if let Some(r) = r_th.and_then(|r| r.sock) {
                if let Ok(m) = rhost.driver.meminfo(r) {
                    a.rmem_max = a.rmem_max.max(u64::from(m.rmem_alloc));
                    a.rmem_sum += u128::from(m.rmem_alloc);
                }
            }
            a.samples += 1;
        }
        let pages: u64 = lhost
            .threads()
            .iter()
            .filter_map(|t| t.sock)
            .filter_map(|s| lhost.driver.meminfo(s).ok())
            .map(|m| u64::from(m.wmem_queued + m.rmem_alloc).div_ceil(4096))
            .sum();
        mem_pages_max = mem_pages_max.max(pages);
        mem_pages_sum += u128::from(pages);
        mem_samples += 1;
        // Every RTT sample the data senders' estimators took since the last interval
        // (per ACK, `Stack::take_rtt_samples`).
        let lhost = sim.endpoint_mut(lh);
        for &(f, s) in &senders {
            rtt_buf.clear();
            if let Ok(dropped) = lhost.driver.take_rtt_samples(s, &mut rtt_buf) {
                acc[f].rtt_dropped += dropped;
                for &us in &rtt_buf {
                    acc[f].rtt.add(u64::from(us) * 1000);
                }
            }
        }
        let now = sim.now();
        let (lhost, rhost) = (sim.endpoint(lh), sim.endpoint(rh));
        progress((now.0 as f64 / limit.0.max(1) as f64).min(1.0));
        if finite && all_bulk_done(lhost, rhost, cfg) {
            end = (0..cfg.flows)
                .filter_map(|f| pair(lhost, rhost, cfg, f))
                .filter_map(|(_, r)| r.and_then(|r| r.stats.done_at))
                .max()
                .unwrap_or(now);
            break;
        }
        if now >= limit {
            break;
        }
    }
    let now = sim.now();
    if let Some(r) = rec.as_mut() {
        if r.last_time().is_none_or(|l| l < now) {
            r.push(sample_of(&sim, lh, rh, cfg));
        }
    }
    let dur = end.max(Instant(1));
    let secs = dur.as_secs_f64();
    sim.endpoint_mut(lh).read_all_tstamps();
    sim.endpoint_mut(rh).read_all_tstamps();
    let (lhost, rhost) = (sim.endpoint(lh), sim.endpoint(rh));
    let qflows = &sim.host_metrics(lh).flows;
    let mut flows = Vec::new();
    for (f, a) in acc.iter().enumerate() {
        let probe = f == cfg.flows;
        let kind = if probe {
            "probe"
        } else {
            match cfg.test {
                Test::Stream => "stream",
                Test::Maerts => "maerts",
                Test::Bulk => "bulk",
                Test::Rr => "rr",
            }
        };
        let mut m = FlowMetrics {
            flow: Some(f),
            kind: kind.into(),
            ..FlowMetrics::default()
        };
        if let Some((s, r)) = pair(lhost, rhost, cfg, f) {
            fill_flow(&mut m, s, r, lhost, rhost, now, secs, bulk && !probe);
            // Bytes below TCP: the fq/host metrics are keyed by flow hash.
            for (hash, ports) in lhost.flows() {
                if Some(ports) == s.local.zip(s.peer).map(|(l, p)| (l.port(), p.port())) {
                    if let Some(fb) = qflows.get(&hash) {
                        m.bytes_queued_max = fb.max;
                        m.bytes_queued_mean = fb.time_weighted_mean(now);
                    }
                }
            }
        } else {
            m.error = Some("connection not established".into());
            if bulk && !probe {
                m.verified = Some(false);
            }
        }
        m.rtt_samples = a.rtt.count();
        m.rtt_samples_dropped = a.rtt_dropped;
        m.rtt_p50_us = us(a.rtt.quantile(0.5));
        m.rtt_p99_us = us(a.rtt.quantile(0.99));
        m.host_queue_packets = a.qdelay.count();
        m.host_queue_delay_p50_us = us(a.qdelay.quantile(0.5));
        m.host_queue_delay_p99_us = us(a.qdelay.quantile(0.99));
        m.host_queue_delay_max_us = us((a.qdelay.count() > 0).then(|| a.qdelay.max()));
        if a.samples > 0 {
            m.wmem_queued_max_bytes = a.wmem_max;
            m.wmem_queued_mean_bytes = a.wmem_sum as f64 / a.samples as f64;
            m.rmem_max_bytes = a.rmem_max;
            m.rmem_mean_bytes = a.rmem_sum as f64 / a.samples as f64;
        }
        flows.push(m);
    }
    let total = total_of(&flows, &acc, cfg, lhost, rhost, secs);
    let counters = counters_of(lhost);
    let rx_counters = counters_of(rhost);
    let lstats = sim.host_stats(lh);
    let fwd = sim.link_stats(crate::sim::Dir::Forward);
    let total_extra = TotalExtra {
        backlog_drops: rx_counters
            .get("TcpExtTCPBacklogDrop")
            .copied()
            .unwrap_or(0),
        backlog_coalesces: rx_counters
            .get("TcpExtTCPBacklogCoalesce")
            .copied()
            .unwrap_or(0),
        backlog_packets: rhost.stats.rx_to_backlog,
        sockstat_mem_pages_max: mem_pages_max,
        sockstat_mem_pages_mean: if mem_samples > 0 {
            mem_pages_sum as f64 / mem_samples as f64
        } else {
            0.0
        },
        softirq_backlog_drops: lhost.stats.rx_backlog_drops + rhost.stats.rx_backlog_drops,
        link_queue_drops: fwd.queue_drops,
        link_lost: fwd.lost + fwd.ge_lost,
        qdisc_drops: lstats.qdisc_drops,
        wire_packets: lstats.wire_packets,
        wire_packets_both_ways: lstats.wire_packets + sim.host_stats(rh).wire_packets,
        events: sim.events_run(),
    };
    let mut cpu = Vec::new();
    for (name, h) in [("sender", lhost), ("receiver", rhost)] {
        for (i, c) in h.cpus().iter().enumerate() {
            cpu.push(CpuReport {
                host: name.into(),
                cpu: i,
                busy_s: c.busy_ns as f64 / 1e9,
                softirq_s: c.softirq_ns as f64 / 1e9,
                utilization: c.busy_ns as f64 / now.0.max(1) as f64,
            });
        }
    }
    let verified = bulk.then(|| {
        flows
            .iter()
            .filter(|f| f.kind == "bulk")
            .all(|f| f.verified == Some(true))
    });
    let tx_timestamps = cfg.timestamps.then(|| {
        let mut t = crate::host::TxStamps::default();
        for f in 0..cfg.flows {
            if let Some(st) =
                pair(lhost, rhost, cfg, f).and_then(|(s, _)| s.stats.tx_stamps.as_ref())
            {
                t.sched_to_snd.merge(&st.sched_to_snd);
                t.snd_to_ack.merge(&st.snd_to_ack);
                t.writes.incomplete += st.writes.incomplete + st.writes.pending() as u64;
            }
        }
        TxStampReport {
            sched_to_snd: SpanReport::of(&t.sched_to_snd),
            snd_to_ack: SpanReport::of(&t.snd_to_ack),
            incomplete_writes: t.writes.incomplete,
        }
    });
    let zerocopy = cfg.zerocopy.then(|| {
        let mut z = ZcReport::default();
        let mut hold = Histogram::new();
        for f in 0..cfg.flows {
            if let Some(st) =
                pair(lhost, rhost, cfg, f).and_then(|(s, _)| s.stats.zerocopy.as_ref())
            {
                z.sends += st.sends;
                z.completed += st.completed;
                z.copied += st.copied;
                hold.merge(&st.hold);
            }
        }
        z.hold = SpanReport::of(&hold);
        z
    });
    let report = BenchReport {
        test: cfg.test.name().into(),
        seed: cfg.seed,
        duration_s: secs,
        total,
        total_extra,
        flows,
        cpu,
        counters,
        rx_counters,
        verified,
        tx_timestamps,
        zerocopy,
    };
    let cap = sim.finish_capture(lh);
    let series = rec.map(|r| {
        let mut qd = Histogram::new();
        for a in &acc {
            qd.merge(&a.qdelay);
        }
        r.finish(qd)
    });
    Ok((report, cap, series))
}

/// One [`Sample`] of the bench topology now: reads only.
fn sample_of(sim: &BenchSim, lh: HostId, rh: HostId, cfg: &BenchConfig) -> Sample {
    let (l, r) = (sim.endpoint(lh), sim.endpoint(rh));
    let now = sim.now();
    let at = now;
    let host = |h: HostId, ep: &TcpHost| HostSample {
        bytes_below_tcp: sim.host_metrics(h).flows.values().map(|f| f.current).sum(),
        qdisc_bytes: sim.qdisc(h).backlog_bytes() as u64,
        nic_bytes: sim.nic_inflight_bytes(h) as u64,
        tcp_mem_pages: ep
            .threads()
            .iter()
            .filter_map(|t| t.sock)
            .filter_map(|s| ep.driver.meminfo(s).ok())
            .map(|m| u64::from(m.wmem_queued + m.rmem_alloc).div_ceil(4096))
            .sum(),
    };
    let mut s = Sample {
        t: now,
        hosts: [host(lh, l), host(rh, r)],
        autocork_events: l.driver.counters().get("TcpExtTCPAutoCorking").unwrap_or(0),
        ..Sample::default()
    };
    for f in 0..cfg.flows + usize::from(cfg.probe) {
        let Some((st, rt)) = pair(l, r, cfg, f) else {
            continue;
        };
        // The data sender is on the left host (as in `fill_flow`).
        s.sender_wakeups += st.stats.wakeups;
        s.send_calls += st.counts().send_calls;
        if let Some(i) = st.sock.and_then(|k| l.driver.tcp_info(at, k).ok()) {
            s.bytes_sent += i.bytes_sent;
            s.segments_sent += u64::from(i.data_segs_out);
        }
        if let Some(rt) = rt {
            s.bytes_delivered += rt.counts().bytes_received;
            if let Some(i) = rt.sock.and_then(|k| r.driver.tcp_info(at, k).ok()) {
                s.acks_sent += u64::from(i.segs_out);
            }
        }
    }
    s
}

fn counters_of(h: &TcpHost) -> BTreeMap<String, u64> {
    h.driver
        .counters()
        .iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// (data-sender thread, receiver thread) of flow `f`: the client thread with that flow index
/// and the server-side thread whose peer is the client's local address.
fn pair<'a>(
    l: &'a TcpHost,
    r: &'a TcpHost,
    cfg: &BenchConfig,
    f: usize,
) -> Option<(&'a Thread, Option<&'a Thread>)> {
    let maerts = cfg.test == Test::Maerts && f < cfg.flows;
    let (chost, shost) = if maerts { (r, l) } else { (l, r) };
    let c = chost.threads().iter().find(|t| t.flow == Some(f))?;
    let local = c.local?;
    let s = shost.threads().iter().find(|t| {
        !t.is_acceptor() && t.flow.is_none() && t.peer.map(|p| p.port()) == Some(local.port())
    });
    if maerts {
        Some((s?, Some(c)))
    } else {
        Some((c, s))
    }
}

fn refresh_ports(
    l: &TcpHost,
    r: &TcpHost,
    cfg: &BenchConfig,
    map: &mut BTreeMap<(u16, u16), usize>,
) {
    let n = cfg.flows + usize::from(cfg.probe);
    if map.len() == n {
        return;
    }
    for f in 0..n {
        if let Some((s, _)) = pair(l, r, cfg, f) {
            if let (Some(a), Some(b)) = (s.local, s.peer) {
                map.insert((a.port(), b.port()), f);
            }
        }
    }
}

fn all_bulk_done(l: &TcpHost, r: &TcpHost, cfg: &BenchConfig) -> bool {
    (0..cfg.flows).all(|f| match pair(l, r, cfg, f) {
        Some((s, Some(rt))) => rt.is_done() || (s.is_done() && s.stats.error.is_some()),
        Some((s, None)) => s.is_done() && s.stats.error.is_some(),
        None => l.threads().iter().any(|t| t.flow == Some(f) && t.is_done()),
    })
}

#[allow(clippy::too_many_arguments)]
fn fill_flow(
    m: &mut FlowMetrics,
    s: &Thread,
    r: Option<&Thread>,
    l: &TcpHost,
    rh: &TcpHost,
    now: Instant,
    secs: f64,
    bulk: bool,
) {
    // The data sender is always on the left host.
    let (shost, rhost) = (l, rh);
    let at = now;
    let rr = m.kind == "rr" || m.kind == "probe";
    m.bytes_written = s.counts().bytes_sent;
    m.send_calls = s.counts().send_calls;
    m.send_calls_full = s.counts().send_full;
    m.epoll_waits = s.counts().epoll_waits;
    m.bytes_per_send_call = ratio(s.counts().bytes_sent, s.counts().send_calls);
    m.sender_wakeups = s.stats.wakeups;
    m.context_switches = s.stats.context_switches;
    if let Some(sock) = s.sock {
        if let Ok(i) = shost.driver.tcp_info(at, sock) {
            m.throughput_bps = i.bytes_sent as f64 * 8.0 / secs;
            m.retransmits = u64::from(i.total_retrans);
            m.retransmitted_bytes = i.bytes_retrans;
            m.segments_sent = u64::from(i.data_segs_out);
            m.mean_segment_bytes = ratio(i.bytes_sent, u64::from(i.data_segs_out));
        }
    }
    if let Some(r) = r {
        m.bytes_read = r.counts().bytes_received;
        m.recv_calls = r.counts().recv_calls;
        m.receiver_wakeups = r.stats.wakeups;
        m.context_switches += r.stats.context_switches;
        if let Some(sock) = r.sock {
            if let Ok(i) = rhost.driver.tcp_info(at, sock) {
                m.acks_sent = u64::from(i.segs_out);
                m.data_segments_received = u64::from(i.data_segs_in);
                m.acks_per_data_segment =
                    (i.data_segs_in > 0).then(|| f64::from(i.segs_out) / f64::from(i.data_segs_in));
            }
            if let Ok(mi) = rhost.driver.meminfo(sock) {
                m.receiver_socket_drops = u64::from(mi.drops);
            }
        }
        m.completed_s = r.stats.done_at.map(|t| t.as_secs_f64());
        if bulk {
            m.verified = Some(
                r.is_done()
                    && r.stats.error.is_none()
                    && r.stats.sha256.is_some()
                    && r.stats.sha256 == s.stats.sha256
                    && r.counts().bytes_received == s.counts().bytes_sent,
            );
        }
        if let Some(e) = r.stats.error {
            m.error = Some(e.to_string());
        }
    } else if bulk {
        m.verified = Some(false);
    }
    if let Some(e) = s.stats.error {
        m.error = Some(e.to_string());
    }
    m.goodput_bps = m.bytes_read as f64 * 8.0 / secs;
    m.context_switches_per_s = m.context_switches as f64 / secs;
    if rr {
        // The client holds the latency; for RR the client is the "sender" side thread.
        let lat = &s.stats.latency;
        m.transactions = s.counts().transactions;
        m.transactions_per_s = s.counts().transactions as f64 / secs;
        m.latency_p50_us = us(lat.quantile(0.5));
        m.latency_p90_us = us(lat.quantile(0.9));
        m.latency_p99_us = us(lat.quantile(0.99));
        m.latency_max_us = us((lat.count() > 0).then(|| lat.max()));
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

fn total_of(
    flows: &[FlowMetrics],
    acc: &[FlowAcc],
    cfg: &BenchConfig,
    l: &TcpHost,
    r: &TcpHost,
    secs: f64,
) -> FlowMetrics {
    let mut t = FlowMetrics {
        kind: "total".into(),
        ..FlowMetrics::default()
    };
    let (mut rtt, mut qd) = (Histogram::new(), Histogram::new());
    let mut lat = Histogram::new();
    let (mut segbytes, mut data_in) = (0f64, 0u64);
    for (f, m) in flows.iter().enumerate() {
        t.bytes_written += m.bytes_written;
        t.bytes_read += m.bytes_read;
        t.throughput_bps += m.throughput_bps;
        t.goodput_bps += m.goodput_bps;
        t.retransmits += m.retransmits;
        t.retransmitted_bytes += m.retransmitted_bytes;
        t.bytes_queued_max += m.bytes_queued_max;
        t.bytes_queued_mean += m.bytes_queued_mean;
        t.wmem_queued_max_bytes = t.wmem_queued_max_bytes.max(m.wmem_queued_max_bytes);
        t.wmem_queued_mean_bytes += m.wmem_queued_mean_bytes;
        t.rmem_max_bytes = t.rmem_max_bytes.max(m.rmem_max_bytes);
        t.rmem_mean_bytes += m.rmem_mean_bytes;
        t.send_calls += m.send_calls;
        t.send_calls_full += m.send_calls_full;
        t.epoll_waits += m.epoll_waits;
        t.recv_calls += m.recv_calls;
        t.sender_wakeups += m.sender_wakeups;
        t.receiver_wakeups += m.receiver_wakeups;
        t.context_switches += m.context_switches;
        t.segments_sent += m.segments_sent;
        segbytes += m.mean_segment_bytes * m.segments_sent as f64;
        t.acks_sent += m.acks_sent;
        data_in += m.data_segments_received;
        t.receiver_socket_drops += m.receiver_socket_drops;
        t.completed_s = match (t.completed_s, m.completed_s) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        if t.error.is_none() {
            t.error = m.error.clone();
        }
        t.rtt_samples_dropped += m.rtt_samples_dropped;
        if let Some(a) = acc.get(f) {
            rtt.merge(&a.rtt);
            qd.merge(&a.qdelay);
        }
        if f < cfg.flows {
            t.transactions += m.transactions;
            if let Some((s, _)) = pair(l, r, cfg, f) {
                lat.merge(&s.stats.latency);
            }
        }
    }
    t.data_segments_received = data_in;
    t.acks_per_data_segment = (data_in > 0).then(|| t.acks_sent as f64 / data_in as f64);
    t.mean_segment_bytes = if t.segments_sent > 0 {
        segbytes / t.segments_sent as f64
    } else {
        0.0
    };
    t.bytes_per_send_call = ratio(t.bytes_written, t.send_calls);
    t.context_switches_per_s = t.context_switches as f64 / secs;
    t.rtt_samples = rtt.count();
    t.rtt_p50_us = us(rtt.quantile(0.5));
    t.rtt_p99_us = us(rtt.quantile(0.99));
    t.host_queue_packets = qd.count();
    t.host_queue_delay_p50_us = us(qd.quantile(0.5));
    t.host_queue_delay_p99_us = us(qd.quantile(0.99));
    t.host_queue_delay_max_us = us((qd.count() > 0).then(|| qd.max()));
    if cfg.test == Test::Rr {
        t.transactions_per_s = t.transactions as f64 / secs;
        t.latency_p50_us = us(lat.quantile(0.5));
        t.latency_p90_us = us(lat.quantile(0.9));
        t.latency_p99_us = us(lat.quantile(0.99));
        t.latency_max_us = us((lat.count() > 0).then(|| lat.max()));
    }
    if cfg.test == Test::Bulk {
        t.verified = Some(
            flows
                .iter()
                .filter(|f| f.kind == "bulk")
                .all(|f| f.verified == Some(true)),
        );
    }
    t
}

/// The `Sim` type a bench run drives.
pub type BenchSim = Sim<TcpHost>;

/// Host ids of a bench topology: (left/sender, right/receiver).
pub fn hosts() -> (HostId, HostId) {
    (HostId(0), HostId(1))
}
