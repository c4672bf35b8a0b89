//! Simulated wire packets per wall-clock second through qdisc → NIC → link → receiver, with a
//! trivial endpoint (pre-built packets, no checksum work at either end).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use shallow_sim::segment::{build_ipv4_tcp, TcpPacketSpec};
use shallow_sim::{
    Endpoint, HostConfig, Instant, LinkSpec, NicConfig, Packet, QdiscSpec, Rate, TopologyBuilder,
};

enum Ep {
    Src {
        template: Vec<u8>,
        gso: Option<u16>,
        left: u64,
        below: u64,
        window: u64,
        next_token: u64,
    },
    Sink {
        packets: u64,
    },
}

impl Endpoint for Ep {
    fn input(&mut self, _now: Instant, _pkt: &mut Packet) {
        if let Ep::Sink { packets } = self {
            *packets += 1;
        }
    }
    /// The sink reads no bytes, so GRO's aggregates may stay in parts.
    fn accepts_frags(&self) -> bool {
        true
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Packet> {
        match self {
            Ep::Src {
                template,
                gso,
                left,
                below,
                window,
                next_token,
            } if *left > 0 && *below < *window => {
                *left -= 1;
                *below += 1;
                *next_token += 1;
                Some(Packet {
                    data: template.clone(),
                    gso_size: *gso,
                    departure: None,
                    token: Some(*next_token),
                    flow: 1,
                    ..Packet::default()
                })
            }
            _ => None,
        }
    }
    fn tx_complete(&mut self, _now: Instant, _token: u64) {
        if let Ep::Src { below, .. } = self {
            *below -= 1;
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _now: Instant) {}
}

fn run(packets: u64, segs: u16, qdisc: QdiscSpec, gro: bool) -> u64 {
    let mut template = Vec::new();
    build_ipv4_tcp(
        &TcpPacketSpec::default(),
        &vec![7u8; 1448 * usize::from(segs)],
        &mut template,
    );
    let mut b = TopologyBuilder::new(1);
    let s = b.sender(
        HostConfig {
            qdisc,
            nic: NicConfig {
                rate: Rate::gbps(10),
                ..NicConfig::default()
            },
            ..HostConfig::default()
        },
        Ep::Src {
            template,
            gso: (segs > 1).then_some(1448),
            left: packets / u64::from(segs),
            below: 0,
            window: 64,
            next_token: 0,
        },
    );
    b.receiver(
        HostConfig {
            gro,
            ..HostConfig::default()
        },
        Ep::Sink { packets: 0 },
    );
    b.forward(
        "rate=10gbit,delay=1ms,queue=1000p"
            .parse::<LinkSpec>()
            .unwrap(),
    );
    let mut sim = b.build().unwrap();
    sim.run_until(Instant::from_secs(3600));
    sim.host_stats(s).wire_packets
}

fn bench(c: &mut Criterion) {
    const N: u64 = 100_000;
    let mut g = c.benchmark_group("pipeline");
    g.sample_size(10);
    g.throughput(Throughput::Elements(N));
    g.bench_function("pfifo_fast_1500B_wire_packets", |b| {
        b.iter(|| assert_eq!(run(N, 1, QdiscSpec::PfifoFast, false), N))
    });
    g.bench_function("fq_1500B_wire_packets", |b| {
        b.iter(|| assert_eq!(run(N, 1, QdiscSpec::fq(), false), N))
    });
    g.bench_function("pfifo_fast_tso10_gro_wire_packets", |b| {
        b.iter(|| assert_eq!(run(N, 10, QdiscSpec::PfifoFast, true), N))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
