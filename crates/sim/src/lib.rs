//! `shallow-sim`: the deterministic network emulator of Shallow.
//!
//! Virtual time as the workspace's one time type (points are [`Instant`]s, nanoseconds since
//! the start of a run; spans are [`Duration`](std::time::Duration)s), one event queue ([`EventQueue`]) with
//! insertion-order tie-breaking, one seeded random stream per component ([`SimRng`]), and a
//! network model: per host an egress path qdisc → NIC TX ring → wire (with TSO segmentation and
//! TX completions at the time the last bit leaves), a bottleneck link per direction with a
//! drop-tail router queue and impairments, and a receive path with GRO. Endpoints plug in
//! through the [`Endpoint`] trait, which mirrors the engine's network-side interface.
//!
//! On top of the network model: [`host::TcpHost`] runs the Shallow engine (`shallow_tcp::Stack`)
//! as an endpoint, with CPUs that charge every operation from a [`cpu::CostTable`], socket
//! ownership while a system call runs (packets meanwhile go to the socket's backlog), and
//! application threads playing netperf's workloads ([`workload`]); [`mod@bench`] builds the
//! two-host topology, runs a workload and reports its metrics ([`hist`] for percentiles;
//! [`series`], opt-in, records time series of a run for charts).
//!
//! Same seed and same inputs give the same event trace ([`Sim::digest`]) and the same pcap
//! bytes.
//!
//! ```
//! use shallow_sim::testing::{Sink, Source, SourceConfig, TestEndpoint};
//! use shallow_sim::{Dir, HostConfig, Instant, LinkSpec, QdiscSpec, TopologyBuilder};
//!
//! let mut b = TopologyBuilder::new(42);
//! let tx = b.sender(
//!     HostConfig { qdisc: "fq".parse::<QdiscSpec>()?, ..HostConfig::default() },
//!     TestEndpoint::Source(Source::new(SourceConfig { count: 10, ..SourceConfig::default() })),
//! );
//! let rx = b.receiver(HostConfig::default(), TestEndpoint::Sink(Sink::default()));
//! b.forward("rate=100mbit,delay=10ms,queue=100p".parse::<LinkSpec>()?);
//! let mut sim = b.build()?;
//! sim.run_until(Instant::from_secs(1));
//! assert_eq!(sim.endpoint(rx).sink().unwrap().packets, 10);
//! assert_eq!(sim.link_stats(Dir::Forward).packets_in, 10);
//! assert_eq!(sim.endpoint(tx).source().unwrap().completions.len(), 10);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod capture;
pub mod cpu;
pub mod endpoint;
pub mod event;
pub mod gro;
pub mod hist;
pub mod host;
pub mod metrics;
pub mod packet;
pub mod pool;
pub mod qdisc;
pub mod rng;
pub mod segment;
pub mod series;
pub mod sim;
pub mod spec;
pub mod testing;
pub mod time;
pub mod workload;

pub use bench::{BenchConfig, BenchReport, FlowMetrics, Test};
pub use capture::{CaptureOut, CapturePoint};
pub use cpu::{CostTable, CpuLayout};
pub use endpoint::Endpoint;
pub use event::EventQueue;
pub use host::{TcpHost, TcpHostConfig};
pub use packet::{Packet, Skb};
pub use qdisc::{Qdisc, QdiscStats};
pub use rng::SimRng;
pub use series::{Series, SeriesConfig};
pub use sim::{
    Dir, HostConfig, HostId, HostStats, LinkStats, NicConfig, Side, Sim, TopologyBuilder,
    TopologyError,
};
pub use spec::{GilbertElliott, LinkSpec, QdiscSpec, QueueLimit, SpecError};
pub use time::{Instant, Rate};
pub use workload::{Role, Writer};
