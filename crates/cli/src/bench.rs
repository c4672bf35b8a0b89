//! `shallow bench`: netperf-style workloads between two emulated hosts running the engine,
//! in virtual time (deterministic for a given `--seed`), or, with `--substrate linux`, between
//! Shallow on a TUN device and the Linux kernel's TCP in a network namespace (real time), with
//! `--side-by-side` measuring Shallow against the kernel's own veth baseline in one run.
//! Argument parsing and output only; the work is `shallow_sim::bench` and `shallow_bench`.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use shallow_sim::bench::{self, BenchConfig, BenchReport, FlowMetrics, Test};
use shallow_sim::spec::{parse_bytes, parse_rate, parse_time};
use shallow_sim::time::{nanos, secs_f64};
use shallow_sim::{CaptureOut, CostTable, CpuLayout, LinkSpec, QdiscSpec, Rate, Writer};

/// A link as the report's `config` echoes it: the spelling of `LinkSpec`'s `Debug` from when
/// the emulator had a time type of its own, `Time(ns)` (the reports stay byte-identical).
fn link_echo(l: &LinkSpec) -> String {
    format!(
        "LinkSpec {{ rate: {:?}, delay: Time({}), jitter: Time({}), loss: {:?}, gilbert: {:?}, \
         reorder: {:?}, reorder_delay: Time({}), dup: {:?}, corrupt: {:?}, queue: {:?} }}",
        l.rate,
        nanos(l.delay),
        nanos(l.jitter),
        l.loss,
        l.gilbert,
        l.reorder,
        nanos(l.reorder_delay),
        l.dup,
        l.corrupt,
        l.queue
    )
}

fn time_arg(s: &str) -> Result<Duration, String> {
    parse_time("time", s).map_err(|e| e.to_string())
}
fn bytes_arg(s: &str) -> Result<u64, String> {
    parse_bytes("size", s).map_err(|e| e.to_string())
}
fn size_arg(s: &str) -> Result<usize, String> {
    let n = bytes_arg(s)?;
    if n == 0 || n > 1 << 30 {
        return Err("must be between 1 byte and 1g".into());
    }
    Ok(n as usize)
}
fn rate_arg(s: &str) -> Result<Rate, String> {
    parse_rate("rate", s).map_err(|e| e.to_string())
}
fn link_arg(s: &str) -> Result<LinkSpec, String> {
    s.parse::<LinkSpec>().map_err(|e| e.to_string())
}
fn qdisc_arg(s: &str) -> Result<QdiscSpec, String> {
    s.parse::<QdiscSpec>().map_err(|e| e.to_string())
}
fn sysctl_arg(s: &str) -> Result<(bool, String, String), String> {
    let (rx, kv) = match s.strip_prefix("rx:") {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (k, v) = kv
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not name=value (e.g. net.ipv4.tcp_autocorking=0)"))?;
    if k.trim().is_empty() {
        return Err(format!("`{s}`: empty sysctl name"));
    }
    Ok((rx, k.trim().to_string(), v.trim().to_string()))
}
fn cost_arg(s: &str) -> Result<String, String> {
    CostTable::default()
        .set(s)
        .map(|_| s.to_string())
        .map_err(|e| e.to_string())
}

/// Where the workload runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Substrate {
    /// Two emulated hosts in virtual time (deterministic).
    #[default]
    Emulator,
    /// Shallow on a TUN device against the Linux kernel's TCP in a network namespace (real
    /// time; needs root). Supports TCP_STREAM, TCP_MAERTS and TCP_RR, one flow.
    Linux,
}

/// Who runs netperf and who runs netserver with `--substrate linux`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PairArg {
    /// netperf on Shallow, netserver on the kernel.
    #[default]
    #[value(name = "shallow-linux")]
    ShallowLinux,
    /// netperf on the kernel, netserver on Shallow.
    #[value(name = "linux-shallow")]
    LinuxShallow,
    /// Both on the kernel, over a veth pair between two namespaces (the baseline).
    #[value(name = "linux-linux")]
    LinuxLinux,
    /// netperf on smoltcp 0.14 over a TUN of its own (no offloads), netserver on the
    /// kernel: the peer user-space stack, same workload (`--busy-poll` makes its thread
    /// spin on the TUN instead of sleeping in poll(2)).
    #[value(name = "smoltcp-linux")]
    SmoltcpLinux,
}

/// A peer user-space stack for `--side-by-side --peer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerStack {
    /// smoltcp 0.14 (`--pair smoltcp-linux`).
    Smoltcp,
}

/// Options of `shallow bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// `emulator` (virtual time) or `linux` (Shallow over a TUN against the kernel's TCP in a
    /// network namespace; root).
    #[arg(long, value_enum, default_value_t = Substrate::Emulator)]
    substrate: Substrate,
    /// With `--substrate linux`: netperf side and netserver side.
    #[arg(long, value_enum, default_value_t = PairArg::ShallowLinux)]
    pair: PairArg,
    /// With `--substrate linux`: in one run, measure shallow->linux, linux->shallow and
    /// linux->linux (the kernel over veth) for one-flow TCP_STREAM throughput, TCP_RR latency
    /// and CPU per GB, and print the ratios to the kernel's baseline.
    #[arg(long)]
    side_by_side: bool,
    /// With `--side-by-side`: also run a peer user-space stack on the same workload, as the
    /// netperf side over a TUN of its own (`smoltcp`: smoltcp 0.14), before the kernel's
    /// baseline.
    #[arg(long, value_enum)]
    peer: Option<PeerStack>,
    /// Use IPv6 instead of IPv4: on the emulator fd00::1 → fd00:0:0:1::1, with `--substrate
    /// linux` fd00:213::/64.
    #[arg(long)]
    ipv6: bool,
    /// With `--substrate linux`: TUN queues (IFF_MULTI_QUEUE above 1), one Shallow I/O thread
    /// and one egress qdisc each; flows are spread over them by flow hash.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    queues: u32,
    /// With `--substrate linux`: the application threads hand every packet to Shallow's I/O
    /// threads instead of writing it to the TUN themselves (the default, as a Linux process's
    /// send runs the qdisc and the driver in its own context).
    #[arg(long)]
    io_thread_tx: bool,
    /// With `--substrate linux`: `SO_BUSY_POLL` on Shallow's sockets, µs: a blocking read
    /// polls the TUN itself that long before it sleeps (Linux's `net.core.busy_read`).
    #[arg(long, value_name = "US", default_value_t = 0)]
    busy_poll: u32,
    /// With `--busy-poll`: `SO_PREFER_BUSY_POLL` too (the I/O thread leaves the TUN to the
    /// polling reader while it polls).
    #[arg(long)]
    prefer_busy_poll: bool,
    /// Workload: TCP_STREAM (data from this side to netserver), TCP_RR (request/response
    /// latency), TCP_MAERTS (data from netserver to this side), BULK (a byte count per flow,
    /// SHA-256 checked at the receiver).
    #[arg(long, default_value = "TCP_STREAM", value_parser = |s: &str| s.parse::<Test>())]
    test: Test,
    /// Parallel flows (each with its own thread, like super_netperf).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10000))]
    flows: u32,
    /// Virtual run time, with a unit: 10s, 500ms (default 10s; with --bytes an upper bound,
    /// default 600s: the run ends when every flow has delivered its bytes). With
    /// `--substrate linux`: real time of each run, default 5s.
    #[arg(long, value_parser = time_arg)]
    duration: Option<Duration>,
    /// Bytes per flow: 1g, 64m, 1500 (k/m/g are powers of 1024). Required by BULK; with
    /// TCP_STREAM/TCP_MAERTS each flow stops after this many.
    #[arg(long, value_parser = bytes_arg)]
    bytes: Option<u64>,
    /// Bytes per send() call (netperf -m), e.g. 128, 64k.
    #[arg(long, default_value = "16k", value_parser = size_arg)]
    msg_size: usize,
    /// Bytes per recv() call of the receiver.
    #[arg(long, default_value = "128k", value_parser = size_arg)]
    recv_size: usize,
    /// TCP_RR request size in bytes.
    #[arg(long, default_value = "1", value_parser = size_arg)]
    req_size: usize,
    /// TCP_RR response size in bytes.
    #[arg(long, default_value = "1", value_parser = size_arg)]
    resp_size: usize,
    /// How bulk senders write: `blocking` send() of whole messages, or non-blocking send()
    /// until EAGAIN then `epoll` wait for EPOLLOUT.
    #[arg(long, default_value = "blocking", value_parser = |s: &str| s.parse::<Writer>())]
    writer: Writer,
    /// Set TCP_NODELAY on every connection (both ends).
    #[arg(long)]
    nodelay: bool,
    /// Add a 1-byte TCP_RR latency probe flow alongside the workload (reported last).
    #[arg(long)]
    probe: bool,
    /// Bottleneck, data direction: "rate=1gbit,delay=50ms,jitter=1ms,loss=0.5%,ge=1%/10%,
    /// reorder=1%,reorder_delay=1ms,dup=0.1%,corrupt=0.01%,queue=1000p" (delay is one-way;
    /// rates in bit/kbit/mbit/gbit, times in s/ms/us/ns, queue in packets `p` or bytes).
    #[arg(long, default_value = "", value_parser = link_arg)]
    link: LinkSpec,
    /// The ACK direction, same syntax (default: the --link rate and delay, no impairments).
    #[arg(long, value_parser = link_arg)]
    reverse_link: Option<LinkSpec>,
    /// Root qdisc of the sending host: pfifo_fast | fq[:limit=,flow_limit=,quantum=,
    /// initial_quantum=,maxrate=] | tbf:rate=,burst=,limit= | pfifo[:limit=] | bfifo[:limit=].
    #[arg(long, default_value = "pfifo_fast", value_parser = qdisc_arg)]
    qdisc: QdiscSpec,
    /// The sending host's device takes no TSO/GSO packets (`ethtool -K dev tso off gso off`:
    /// the engine sends one segment per packet). With `--substrate linux`: Shallow's engine.
    #[arg(long)]
    tso_off: bool,
    /// NIC line rate of both hosts, e.g. 25gbit (default: max(10gbit, link rate)).
    #[arg(long, value_parser = rate_arg)]
    nic_rate: Option<Rate>,
    /// TX completion interrupt delay (ethtool tx-usecs), e.g. 20us.
    #[arg(long, default_value = "0us", value_parser = time_arg)]
    tx_completion_delay: Duration,
    /// RX interrupt coalescing of both hosts (ethtool rx-usecs), e.g. 8us: segments that
    /// arrive meanwhile are merged by GRO.
    #[arg(long, default_value = "8us", value_parser = time_arg)]
    rx_coalesce: Duration,
    /// CPU layout of each host: `same` (application and packet processing share one CPU) or
    /// `split` (packet processing on CPU 0, application threads on CPU 1).
    #[arg(long, default_value = "same", value_parser = |s: &str| s.parse::<CpuLayout>())]
    cpus: CpuLayout,
    /// A sysctl of the data-sending host, Linux name: net.ipv4.tcp_autocorking=0
    /// (repeatable). Prefix with `rx:` for the receiving host.
    #[arg(long = "sysctl", value_name = "NAME=VALUE", value_parser = sysctl_arg)]
    sysctls: Vec<(bool, String, String)>,
    /// Override a CPU cost (repeatable): syscall_ns, copy_ps_per_byte, tx_packet_ns,
    /// tx_segment_ns, rx_packet_ns, rx_segment_ns, ack_ns, tx_completion_ns,
    /// backlog_enqueue_ns, timer_ns, context_switch_ns (nanoseconds; copy in ps per byte).
    #[arg(long = "cost", value_name = "NAME=VALUE", value_parser = cost_arg)]
    costs: Vec<String>,
    /// Master seed: same seed and options give the same output and pcap, byte for byte.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// How often socket memory and RTT are sampled (virtual time).
    #[arg(long, default_value = "10ms", value_parser = time_arg)]
    sample_interval: Duration,
    /// Write the sending host's egress (as tcpdump on it would see it, TSO packets whole) to
    /// this classic pcap file (nanosecond timestamps, raw IP).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Print one JSON object instead of the text summary.
    #[arg(long)]
    json: bool,
    /// `SO_TIMESTAMPING` (TX_SCHED | TX_SOFTWARE | TX_ACK | SOFTWARE | OPT_ID | OPT_TSONLY) on
    /// the data sender's sockets, read from their error queue as a user would: the
    /// distribution per write of SCHED->SND (residence in the host's queues) and SND->ACK.
    /// With `--substrate linux` the sender is Shallow's socket or the kernel's (its own
    /// SO_TIMESTAMPING), whichever sends the data.
    #[arg(long)]
    timestamps: bool,
    /// `SO_ZEROCOPY` on the data senders' sockets and `MSG_ZEROCOPY` on every send (emulator
    /// only): the completions, and how long the stack held each buffer (send to completion).
    #[arg(long)]
    zerocopy: bool,
}

fn usage_error(msg: impl std::fmt::Display) -> ! {
    use clap::CommandFactory;
    let mut cmd = crate::Cli::command();
    let sub = cmd
        .find_subcommand_mut("bench")
        .cloned()
        .unwrap_or_else(|| cmd.clone());
    let mut sub = sub.bin_name("shallow bench");
    sub.error(clap::error::ErrorKind::ValueValidation, msg)
        .exit()
}

/// Run `shallow bench`.
pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
    if args.substrate == Substrate::Linux && args.zerocopy {
        usage_error("--zerocopy runs on the emulator only (on Linux: cargo bench -p shallow-os --bench zerocopy)");
    }
    if args.substrate == Substrate::Linux {
        return linux::run(args);
    }
    if args.side_by_side {
        usage_error("--side-by-side needs --substrate linux");
    }
    if args.peer.is_some() {
        usage_error("--peer needs --substrate linux --side-by-side");
    }
    if args.queues != 1 {
        usage_error("--queues needs --substrate linux");
    }
    if args.io_thread_tx {
        usage_error("--io-thread-tx needs --substrate linux");
    }
    if args.busy_poll > 0 || args.prefer_busy_poll {
        usage_error("--busy-poll and --prefer-busy-poll need --substrate linux");
    }
    let mut costs = CostTable::default();
    for c in &args.costs {
        if let Err(e) = costs.set(c) {
            usage_error(e);
        }
    }
    if args.test == Test::Bulk && args.bytes.is_none() {
        usage_error("--test BULK needs --bytes (e.g. --bytes 8m)");
    }
    if args.sample_interval < Duration::from_micros(100) {
        usage_error("--sample-interval must be at least 100us");
    }
    let cfg = BenchConfig {
        test: args.test,
        flows: args.flows as usize,
        duration: args.duration,
        bytes: args.bytes,
        msg_size: args.msg_size,
        recv_size: args.recv_size,
        req_size: args.req_size,
        resp_size: args.resp_size,
        writer: args.writer,
        nodelay: args.nodelay,
        probe: args.probe,
        link: args.link.clone(),
        reverse_link: args.reverse_link.clone(),
        qdisc: args.qdisc.clone(),
        nic_rate: args.nic_rate,
        tx_completion_delay: args.tx_completion_delay,
        rx_coalesce: args.rx_coalesce,
        cpus: args.cpus,
        costs,
        sysctls: args
            .sysctls
            .iter()
            .filter(|s| !s.0)
            .map(|s| (s.1.clone(), s.2.clone()))
            .collect(),
        rx_sysctls: args
            .sysctls
            .iter()
            .filter(|s| s.0)
            .map(|s| (s.1.clone(), s.2.clone()))
            .collect(),
        seed: args.seed,
        sample_interval: args.sample_interval,
        timestamps: args.timestamps,
        zerocopy: args.zerocopy,
    };
    let capture = match &args.pcap {
        Some(p) => {
            let f = File::create(p).with_context(|| format!("creating {}", p.display()))?;
            Some(CaptureOut::Writer(Box::new(BufWriter::new(f))))
        }
        None => None,
    };

    let started = std::time::Instant::now();
    let mut bar: Option<indicatif::ProgressBar> = None;
    let mut progress = |frac: f64| {
        if bar.is_none() && started.elapsed().as_secs_f64() > 1.0 {
            let b = indicatif::ProgressBar::with_draw_target(
                Some(1000),
                indicatif::ProgressDrawTarget::stderr(),
            );
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {percent}% virtual time (eta {eta})",
            ) {
                b.set_style(style);
            }
            bar = Some(b);
        }
        if let Some(b) = &bar {
            b.set_position((frac * 1000.0) as u64);
        }
    };
    let extras = bench::BenchExtras {
        tx_gso_off: args.tso_off,
        ipv6: args.ipv6,
        ..bench::BenchExtras::default()
    };
    let result = bench::run_ext(&cfg, &extras, capture, &mut progress);
    if let Some(b) = bar.take() {
        b.finish_and_clear();
    }
    let (report, cap) = match result {
        Ok(r) => r,
        Err(e @ (bench::BenchError::Sysctl(_) | bench::BenchError::Config(_))) => usage_error(e),
        Err(e) => return Err(e.into()),
    };
    drop(cap); // flushes the pcap writer
    let wall = started.elapsed();
    if args.json {
        println!("{}", serde_json::to_string(&json_of(args, &report))?);
    } else {
        print_text(&report);
        eprintln!(
            "wall time {:.2}s, {} events, {:.0} wire packets per wall-clock second \
             ({:.0} counting the sender's only)",
            wall.as_secs_f64(),
            report.total_extra.events,
            report.total_extra.wire_packets_both_ways as f64 / wall.as_secs_f64().max(1e-9),
            report.total_extra.wire_packets as f64 / wall.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

fn json_of(args: &BenchArgs, r: &BenchReport) -> Value {
    let flows: Vec<Value> = r
        .flows
        .iter()
        .map(|f| serde_json::to_value(f).unwrap_or(Value::Null))
        .collect();
    let mut total = serde_json::to_value(&r.total).unwrap_or(Value::Null);
    if let (Value::Object(t), Ok(Value::Object(extra))) =
        (&mut total, serde_json::to_value(&r.total_extra))
    {
        t.extend(extra);
        t.insert(
            "cpu".into(),
            serde_json::to_value(&r.cpu).unwrap_or(Value::Null),
        );
    }
    let sysctl = |rx: bool| -> Vec<String> {
        args.sysctls
            .iter()
            .filter(|s| s.0 == rx)
            .map(|s| format!("{}={}", s.1, s.2))
            .collect()
    };
    let mut costs = CostTable::default();
    for c in &args.costs {
        let _ = costs.set(c);
    }
    let costs: serde_json::Map<String, Value> = costs
        .entries()
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    let mut v = json!({
        "config": {
            "test": r.test,
            "flows": args.flows,
            "duration_s": args.duration.map(secs_f64),
            "bytes": args.bytes,
            "msg_size_bytes": args.msg_size,
            "recv_size_bytes": args.recv_size,
            "req_size_bytes": args.req_size,
            "resp_size_bytes": args.resp_size,
            "writer": format!("{:?}", args.writer).to_lowercase(),
            "nodelay": args.nodelay,
            "probe": args.probe,
            "link": link_echo(&args.link),
            "reverse_link": args.reverse_link.as_ref().map(link_echo),
            "qdisc": format!("{:?}", args.qdisc),
            "nic_rate_bps": args.nic_rate.map(|r| r.as_bps()),
            "tx_completion_delay_us": args.tx_completion_delay.as_nanos() as f64 / 1000.0,
            "rx_coalesce_us": args.rx_coalesce.as_nanos() as f64 / 1000.0,
            "cpus": format!("{:?}", args.cpus).to_lowercase(),
            "sysctls": sysctl(false),
            "rx_sysctls": sysctl(true),
            "costs": costs,
            "sample_interval_us": args.sample_interval.as_nanos() as f64 / 1000.0,
        },
        "seed": r.seed,
        "duration_s": r.duration_s,
        "total": total,
        "flows": flows,
        "counters": r.counters,
        "rx_counters": r.rx_counters,
        "verified": r.verified,
    });
    // Only when set, so that the report of a run without it stays as it was.
    if let Some(c) = v.get_mut("config").and_then(Value::as_object_mut) {
        if args.tso_off {
            c.insert("tso_off".into(), json!(true));
        }
        if args.ipv6 {
            c.insert("ipv6".into(), json!(true));
        }
        if args.timestamps {
            c.insert("timestamps".into(), json!(true));
        }
        if args.zerocopy {
            c.insert("zerocopy".into(), json!(true));
        }
    }
    if let (Some(t), Value::Object(o)) = (&r.tx_timestamps, &mut v) {
        o.insert(
            "tx_timestamps".into(),
            serde_json::to_value(t).unwrap_or(Value::Null),
        );
    }
    if let (Some(z), Value::Object(o)) = (&r.zerocopy, &mut v) {
        o.insert(
            "zerocopy".into(),
            serde_json::to_value(z).unwrap_or(Value::Null),
        );
    }
    v
}

fn opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |x| format!("{x:.1}"))
}

fn line(name: &str, m: &FlowMetrics) {
    println!(
        "{name:>6} {:>10.1} {:>10.1} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8.0} {:>8}",
        m.throughput_bps / 1e6,
        m.goodput_bps / 1e6,
        m.retransmits,
        opt(m.rtt_p50_us),
        opt(m.rtt_p99_us),
        opt(m.host_queue_delay_p99_us),
        opt(m.latency_p50_us),
        opt(m.latency_p99_us),
        m.bytes_per_send_call,
        m.context_switches,
    );
}

fn print_text(r: &BenchReport) {
    println!(
        "{} seed {} over {:.3} s (virtual){}",
        r.test,
        r.seed,
        r.duration_s,
        match r.verified {
            Some(true) => ", SHA-256 verified",
            Some(false) => ", VERIFICATION FAILED",
            None => "",
        }
    );
    println!(
        "{:>6} {:>10} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}",
        "flow",
        "tput Mb/s",
        "good Mb/s",
        "retx",
        "rtt50 us",
        "rtt99 us",
        "hq99 us",
        "lat50 us",
        "lat99 us",
        "B/send",
        "cswitch"
    );
    if r.flows.len() > 1 {
        for f in &r.flows {
            let name = if f.kind == "probe" {
                "probe".to_string()
            } else {
                f.flow.map_or("?".into(), |i| i.to_string())
            };
            line(&name, f);
        }
    }
    line("total", &r.total);
    let t = &r.total;
    let x = &r.total_extra;
    println!(
        "segments {} (mean {:.0} B), ACKs/data segment {}, send calls {}, wake-ups {}+{}, \
         backlog drops {} coalesces {}, sockstat mem max {} pages",
        t.segments_sent,
        t.mean_segment_bytes,
        t.acks_per_data_segment
            .map_or("-".into(), |v| format!("{v:.3}")),
        t.send_calls,
        t.sender_wakeups,
        t.receiver_wakeups,
        x.backlog_drops,
        x.backlog_coalesces,
        x.sockstat_mem_pages_max
    );
    for c in &r.cpu {
        println!(
            "cpu {}/{}: busy {:.3} s ({:.0}%), softirq {:.3} s",
            c.host,
            c.cpu,
            c.busy_s,
            c.utilization * 100.0,
            c.softirq_s
        );
    }
    if let Some(t) = &r.tx_timestamps {
        let f = |s: &Option<bench::SpanReport>| {
            s.as_ref().map_or("-".into(), |s| {
                format!(
                    "{:.1}/{:.1}/{:.1}/{:.1}",
                    s.p50_us, s.p90_us, s.p99_us, s.max_us
                )
            })
        };
        println!(
            "tx timestamps ({} writes measured, {} incomplete), us p50/p90/p99/max: SCHED->SND {}, SND->ACK {}",
            t.sched_to_snd.as_ref().map_or(0, |s| s.writes),
            t.incomplete_writes,
            f(&t.sched_to_snd),
            f(&t.snd_to_ack),
        );
    }
    if let Some(z) = &r.zerocopy {
        let hold = z.hold.as_ref().map_or("-".into(), |s| {
            format!(
                "{:.1}/{:.1}/{:.1}/{:.1}",
                s.p50_us, s.p90_us, s.p99_us, s.max_us
            )
        });
        println!(
            "zerocopy: {} sends, {} completed ({} copied), buffer held us p50/p90/p99/max: {hold}",
            z.sends, z.completed, z.copied
        );
    }
}

/// `--substrate linux`: the workloads of `shallow_bench`, reported in the emulator's JSON
/// shape where a field applies (fields with no real-substrate counterpart stay 0 or null).
mod linux {
    use super::*;
    use shallow_bench::{self as ob, BenchResult, Pair};

    /// Options that only the emulator has: rejected with `--substrate linux`.
    fn check(args: &BenchArgs) {
        let mut bad: Vec<&str> = Vec::new();
        if args.bytes.is_some() {
            bad.push("--bytes");
        }
        if args.probe {
            bad.push("--probe");
        }
        if args.pcap.is_some() {
            bad.push("--pcap");
        }
        if args.link != LinkSpec::default() {
            bad.push("--link");
        }
        if args.reverse_link.is_some() {
            bad.push("--reverse-link");
        }
        if args.qdisc != QdiscSpec::default() {
            bad.push("--qdisc");
        }
        if args.nic_rate.is_some() {
            bad.push("--nic-rate");
        }
        if args.writer != Writer::Blocking {
            bad.push("--writer");
        }
        if !args.costs.is_empty() {
            bad.push("--cost");
        }
        if args.sysctls.iter().any(|s| s.0) {
            bad.push("--sysctl rx:");
        }
        if !bad.is_empty() {
            usage_error(format!(
                "{} apply to the emulator only, not to --substrate linux",
                bad.join(", ")
            ));
        }
        if args.test == Test::Bulk {
            usage_error("--substrate linux runs TCP_STREAM, TCP_MAERTS and TCP_RR (not BULK)");
        }
        if args.peer.is_some() && !args.side_by_side {
            usage_error("--peer adds a row to --side-by-side (one run: --pair smoltcp-linux)");
        }
        if args.pair == PairArg::SmoltcpLinux && (args.flows != 1 || args.timestamps) {
            usage_error("--pair smoltcp-linux runs one flow, without --timestamps");
        }
    }

    fn config(args: &BenchArgs, test: Test) -> ob::BenchConfig {
        ob::BenchConfig {
            test,
            duration: args.duration.unwrap_or(Duration::from_secs(5)),
            msg_size: args.msg_size,
            recv_size: args.recv_size,
            req_size: args.req_size,
            resp_size: args.resp_size,
            nodelay: args.nodelay,
            ipv6: args.ipv6,
            sysctls: args
                .sysctls
                .iter()
                .filter(|s| !s.0)
                .map(|s| (s.1.clone(), s.2.clone()))
                .collect(),
            seed: args.seed,
            flows: args.flows as usize,
            queues: args.queues as usize,
            gso: !args.tso_off,
            direct_tx: !args.io_thread_tx,
            timestamps: args.timestamps,
            busy_poll_us: args.busy_poll,
            prefer_busy_poll: args.prefer_busy_poll,
            ..ob::BenchConfig::default()
        }
    }

    fn pair_of(p: PairArg) -> Pair {
        match p {
            PairArg::ShallowLinux => Pair::ShallowToLinux,
            PairArg::LinuxShallow => Pair::LinuxToShallow,
            PairArg::LinuxLinux => Pair::LinuxToLinux,
            PairArg::SmoltcpLinux => Pair::SmoltcpToLinux,
        }
    }

    fn run_one(cfg: &ob::BenchConfig, pair: Pair) -> anyhow::Result<BenchResult> {
        ob::run(cfg, pair).map_err(|e| match e {
            ob::BenchError::Sysctl(m) => usage_error(format!("--sysctl {m}")),
            e => anyhow::Error::new(e).context(format!("{} {}", cfg.test.name(), pair.label())),
        })
    }

    /// Runs `shallow bench --substrate linux`.
    pub fn run(args: &BenchArgs) -> anyhow::Result<()> {
        check(args);
        if args.side_by_side {
            return side_by_side(args);
        }
        let cfg = config(args, args.test);
        let r = run_one(&cfg, pair_of(args.pair))?;
        if args.json {
            println!("{}", serde_json::to_string(&json_of_linux(args, &cfg, &r))?);
        } else {
            print_linux(&r);
        }
        Ok(())
    }

    /// The emulator's per-flow metrics, filled from a real run.
    pub(super) fn metrics(r: &BenchResult) -> FlowMetrics {
        let kind = match r.test {
            Test::Stream => "stream",
            Test::Maerts => "maerts",
            Test::Rr => "rr",
            Test::Bulk => "bulk",
        };
        let secs = r.duration_s.max(1e-9);
        let mut m = FlowMetrics {
            flow: Some(0),
            kind: kind.into(),
            bytes_written: r.bytes_written,
            bytes_read: r.bytes_read,
            goodput_bps: r.goodput_bps(),
            send_calls: r.send_calls,
            recv_calls: r.recv_calls,
            bytes_per_send_call: if r.send_calls > 0 {
                r.bytes_written as f64 / r.send_calls as f64
            } else {
                0.0
            },
            transactions: r.transactions,
            transactions_per_s: r.transactions as f64 / secs,
            latency_p50_us: r.latency_us(0.5),
            latency_p90_us: r.latency_us(0.9),
            latency_p99_us: r.latency_us(0.99),
            latency_max_us: r.latency_us(1.0),
            rtt_samples: r.rtt_us.len() as u64,
            rtt_p50_us: ob::quantile(&r.rtt_us, 0.5).map(f64::from),
            rtt_p99_us: ob::quantile(&r.rtt_us, 0.99).map(f64::from),
            ..FlowMetrics::default()
        };
        // Shallow's socket, when Shallow sent the data (tcpi_* of the sender).
        if let Some(i) = &r.tcp_info {
            let shallow_sends = matches!(
                (r.pair, r.test),
                (Pair::ShallowToLinux, Test::Stream | Test::Rr | Test::Bulk)
                    | (Pair::LinuxToShallow, Test::Maerts)
            );
            if shallow_sends {
                m.throughput_bps = i.bytes_sent as f64 * 8.0 / secs;
                m.retransmits = u64::from(i.total_retrans);
                m.retransmitted_bytes = i.bytes_retrans;
                m.segments_sent = u64::from(i.data_segs_out);
                m.mean_segment_bytes = if i.data_segs_out > 0 {
                    i.bytes_sent as f64 / f64::from(i.data_segs_out)
                } else {
                    0.0
                };
            } else {
                m.acks_sent = u64::from(i.segs_out);
                m.data_segments_received = u64::from(i.data_segs_in);
                m.acks_per_data_segment =
                    (i.data_segs_in > 0).then(|| f64::from(i.segs_out) / f64::from(i.data_segs_in));
            }
        }
        if m.throughput_bps == 0.0 {
            m.throughput_bps = r.bytes_written as f64 * 8.0 / secs;
        }
        m
    }

    fn cpu_json(r: &BenchResult) -> Value {
        json!({
            "user_s": r.cpu.user_s,
            "sys_s": r.cpu.sys_s,
            "softirq_s": r.cpu.softirq_s,
            "io_thread_s": r.cpu.io_thread_s,
            "total_s": r.cpu.total_s(),
            "cpu_s_per_gb": r.cpu_s_per_gb(),
            "cpu_us_per_transaction": r.cpu_us_per_transaction(),
            "measured": "user+sys of this process (/proc/self/stat: both endpoints are its threads) + softirq of all CPUs (/proc/stat); io_thread_s: threads shallow-io-*",
        })
    }

    pub(super) fn report_json(r: &BenchResult) -> Value {
        let m = metrics(r);
        let mut total = serde_json::to_value(FlowMetrics {
            flow: None,
            kind: "total".into(),
            ..m.clone()
        })
        .unwrap_or(Value::Null);
        if let Value::Object(t) = &mut total {
            t.insert("cpu".into(), cpu_json(r));
        }
        let counters: serde_json::Map<String, Value> = r
            .counters
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let mut v = json!({
            "pair": r.pair.label(),
            "test": r.test.name(),
            "duration_s": r.duration_s,
            "offloads": r.offload.map(|o| o.to_string()),
            "total": total,
            "flows": [serde_json::to_value(&m).unwrap_or(Value::Null)],
            "queue_packets": r.queue_packets.iter().map(|(rx, tx)| json!({"rx": rx, "tx": tx})).collect::<Vec<_>>(),
            "queue_forwarded": r.queue_forwarded,
            "counters": counters,
            "qdisc_drops": r.qdisc_drops,
        });
        if let (Some(t), Value::Object(o)) = (&r.tx_spans, &mut v) {
            o.insert("tx_timestamps".into(), spans_json(t));
        }
        v
    }

    fn summary_json(s: &Option<ob::SpanSummary>) -> Value {
        match s {
            Some(s) => json!({
                "writes": s.count,
                "p50_us": s.p50_ns as f64 / 1e3,
                "p90_us": s.p90_ns as f64 / 1e3,
                "p99_us": s.p99_ns as f64 / 1e3,
                "max_us": s.max_ns as f64 / 1e3,
            }),
            None => Value::Null,
        }
    }

    /// `tx_timestamps`: the data sender's per-write spans (`--timestamps`).
    fn spans_json(t: &ob::TxSpans) -> Value {
        json!({
            "stack": t.stack,
            "sched_to_snd": summary_json(&t.sched_to_snd),
            "snd_to_ack": summary_json(&t.snd_to_ack),
            "incomplete_writes": t.incomplete,
        })
    }

    /// `p50/p90/p99/max` in microseconds, or `-`.
    fn summary_text(s: &Option<ob::SpanSummary>) -> String {
        s.as_ref().map_or("-".into(), |s| {
            format!(
                "{:.1}/{:.1}/{:.1}/{:.1}",
                s.p50_ns as f64 / 1e3,
                s.p90_ns as f64 / 1e3,
                s.p99_ns as f64 / 1e3,
                s.max_ns as f64 / 1e3
            )
        })
    }

    fn print_spans(t: &ob::TxSpans) {
        println!(
            "tx timestamps ({} socket, {} writes measured, {} incomplete), us p50/p90/p99/max: SCHED->SND {}, SND->ACK {}",
            t.stack,
            t.sched_to_snd.as_ref().map_or(0, |s| s.count),
            t.incomplete,
            summary_text(&t.sched_to_snd),
            summary_text(&t.snd_to_ack),
        );
    }

    fn json_of_linux(args: &BenchArgs, cfg: &ob::BenchConfig, r: &BenchResult) -> Value {
        let mut v = report_json(r);
        if let Value::Object(o) = &mut v {
            o.insert("config".into(), config_json(args, cfg));
            o.insert("seed".into(), json!(args.seed));
            o.insert("rx_counters".into(), json!({}));
            o.insert("verified".into(), Value::Null);
        }
        v
    }

    fn config_json(args: &BenchArgs, cfg: &ob::BenchConfig) -> Value {
        let mut v = json!({
            "substrate": "linux",
            "test": cfg.test.name(),
            "pair": pair_of(args.pair).label(),
            "flows": cfg.flows,
            "queues": cfg.queues,
            "direct_tx": cfg.direct_tx,
            "duration_s": cfg.duration.as_secs_f64(),
            "msg_size_bytes": cfg.msg_size,
            "recv_size_bytes": cfg.recv_size,
            "req_size_bytes": cfg.req_size,
            "resp_size_bytes": cfg.resp_size,
            "nodelay": cfg.nodelay,
            "ipv6": cfg.ipv6,
            "tso_off": !cfg.gso,
            "sysctls": cfg.sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>(),
        });
        // Only when set, so that the report of a run without it stays as it was.
        if cfg.timestamps {
            if let Value::Object(o) = &mut v {
                o.insert("timestamps".into(), json!(true));
            }
        }
        if cfg.busy_poll_us > 0 {
            if let Value::Object(o) = &mut v {
                o.insert("busy_poll_us".into(), json!(cfg.busy_poll_us));
                o.insert("prefer_busy_poll".into(), json!(cfg.prefer_busy_poll));
            }
        }
        v
    }

    fn print_linux(r: &BenchResult) {
        println!(
            "{} {} over {:.3} s (real time){}",
            r.test.name(),
            r.pair.label(),
            r.duration_s,
            r.offload
                .map_or(String::new(), |o| format!(", TUN offloads {o}"))
        );
        let m = metrics(r);
        println!(
            "{:>6} {:>10} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "flow",
            "tput Mb/s",
            "good Mb/s",
            "retx",
            "rtt50 us",
            "rtt99 us",
            "lat50 us",
            "lat99 us",
            "B/send",
            "trans/s"
        );
        println!(
            "{:>6} {:>10.1} {:>10.1} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9.0} {:>8.0}",
            "total",
            m.throughput_bps / 1e6,
            m.goodput_bps / 1e6,
            m.retransmits,
            opt(m.rtt_p50_us),
            opt(m.rtt_p99_us),
            opt(m.latency_p50_us),
            opt(m.latency_p99_us),
            m.bytes_per_send_call,
            m.transactions_per_s
        );
        let per = match (r.cpu_us_per_transaction(), r.cpu_s_per_gb()) {
            (Some(t), _) => format!("{t:.1} CPU-us/transaction"),
            (None, Some(g)) => format!("{g:.2} CPU-s/GB"),
            (None, None) => "- CPU-s/GB".into(),
        };
        println!(
            "cpu: user {:.2} s, sys {:.2} s, softirq {:.2} s (all CPUs), Shallow I/O thread {:.2} s; {per}",
            r.cpu.user_s, r.cpu.sys_s, r.cpu.softirq_s, r.cpu.io_thread_s,
        );
        if r.queue_packets.len() > 1 {
            let q: Vec<String> = r
                .queue_packets
                .iter()
                .enumerate()
                .map(|(i, (rx, tx))| {
                    let fwd = r.queue_forwarded.get(i).copied().unwrap_or(0);
                    format!("q{i} rx {rx} (forwarded {fwd}) tx {tx}")
                })
                .collect();
            println!("TUN queues (packets): {}", q.join(", "));
        }
        if let Some(t) = &r.tx_spans {
            print_spans(t);
        }
    }

    /// One row of the side-by-side table: a throughput run and an RR run of the same pair.
    struct Row {
        label: &'static str,
        stream: BenchResult,
        rr: Option<BenchResult>,
    }

    /// The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status, as
    /// `taskset -c` sets it), e.g. `1` or `0-1`.
    fn cpus_allowed() -> Option<String> {
        std::fs::read_to_string("/proc/self/status")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
    }

    /// Whether the run is pinned, in words for the report: every thread of the run (both
    /// endpoints, the kernel peers' sockets, Shallow's I/O threads) inherits this affinity.
    fn pinning() -> String {
        // The machine's online CPUs (affinity does not change this list).
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
        let many = |l: &str| l.contains(',') || l.contains('-');
        match cpus_allowed() {
            Some(list) if many(&list) => {
                format!("unpinned (CPUs {list}; cross-CPU wake-ups included)")
            }
            Some(list) if many(online.trim()) => {
                format!("pinned to CPU {list} (no cross-CPU wake-ups)")
            }
            Some(list) => format!("one CPU ({list})"),
            None => "CPU affinity unknown".to_string(),
        }
    }

    fn side_by_side(args: &BenchArgs) -> anyhow::Result<()> {
        if args.test != Test::Stream {
            usage_error("--side-by-side runs TCP_STREAM and TCP_RR itself: leave --test unset");
        }
        let st = config(args, Test::Stream);
        let rr = config(args, Test::Rr);
        let mut rows = Vec::new();
        let mut pairs = vec![Pair::ShallowToLinux, Pair::LinuxToShallow];
        if args.peer == Some(PeerStack::Smoltcp) {
            pairs.push(Pair::SmoltcpToLinux);
        }
        pairs.push(Pair::LinuxToLinux);
        for pair in pairs {
            eprintln!("running {} TCP_STREAM ...", pair.label());
            let stream = run_one(&st, pair)?;
            eprintln!("running {} TCP_RR ...", pair.label());
            let rr = Some(run_one(&rr, pair)?);
            rows.push(Row {
                label: pair.label(),
                stream,
                rr,
            });
        }
        let base = rows.last().map(metric_row).unwrap_or_default();
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let tput0 = rows[0].stream.goodput_bps();
        let tput_base = rows[rows.len() - 1].stream.goodput_bps();
        let target = tput0 >= 0.6 * tput_base;
        if args.json {
            let v: Vec<Value> = rows
                .iter()
                .map(|r| {
                    let m = metric_row(r);
                    json!({
                        "pair": r.label,
                        "throughput_bps": m.tput,
                        "rr_latency_p50_us": m.p50,
                        "rr_latency_p99_us": m.p99,
                        "cpu_s_per_gb": m.cpu_gb,
                        "ratio_to_linux": {
                            "throughput": ratio(m.tput, base.tput),
                            "rr_latency_p50": ratio(m.p50, base.p50),
                            "rr_latency_p99": ratio(m.p99, base.p99),
                            "cpu_s_per_gb": ratio(m.cpu_gb, base.cpu_gb),
                        },
                        "stream": report_json(&r.stream),
                        "rr": r.rr.as_ref().map(report_json),
                    })
                })
                .collect();
            println!(
                "{}",
                serde_json::to_string(&json!({
                    "config": config_json(args, &st),
                    "cpus_allowed": cpus_allowed(),
                    "side_by_side": v,
                    "target": {
                        "rule": "shallow->linux throughput >= 0.6 x linux->linux (veth)",
                        "met": target,
                    },
                }))?
            );
            return Ok(());
        }
        println!(
            "side by side, {} TCP_STREAM ({} B writes) and TCP_RR ({}/{} B), {:.1} s each, {}; {}",
            if args.ipv6 { "IPv6" } else { "IPv4" },
            st.msg_size,
            rr.req_size,
            rr.resp_size,
            st.duration.as_secs_f64(),
            rows[0]
                .stream
                .offload
                .map_or(String::new(), |o| format!("TUN offloads {o}")),
            pinning()
        );
        println!(
            "{:<15} | {:>11} | {:>9} | {:>9} | {:>9} | {:>6} | {:>7} | {:>7} | {:>7}",
            "pair",
            "tput Gbit/s",
            "lat50 us",
            "lat99 us",
            "CPU-s/GB",
            "tput x",
            "lat50 x",
            "lat99 x",
            "CPU x"
        );
        let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
        for r in &rows {
            let m = metric_row(r);
            println!(
                "{:<15} | {:>11} | {:>9} | {:>9} | {:>9} | {:>6} | {:>7} | {:>7} | {:>7}",
                r.label,
                f(m.tput.map(|t| t / 1e9), 2),
                f(m.p50, 1),
                f(m.p99, 1),
                f(m.cpu_gb, 2),
                f(ratio(m.tput, base.tput), 2),
                f(ratio(m.p50, base.p50), 2),
                f(ratio(m.p99, base.p99), 2),
                f(ratio(m.cpu_gb, base.cpu_gb), 2),
            );
        }
        println!("ratios (x) are to linux->linux, the kernel's TCP over veth in this same run");
        if args.timestamps {
            println!(
                "TCP_STREAM per-write transmit timestamps (SO_TIMESTAMPING of the data sender), us p50/p90/p99/max:"
            );
            println!(
                "{:<15} | {:<7} | {:>7} | {:>10} | {:>27} | {:>27}",
                "pair", "sender", "writes", "incomplete", "SCHED->SND", "SND->ACK"
            );
            for r in &rows {
                if let Some(t) = &r.stream.tx_spans {
                    println!(
                        "{:<15} | {:<7} | {:>7} | {:>10} | {:>27} | {:>27}",
                        r.label,
                        t.stack,
                        t.sched_to_snd.as_ref().map_or(0, |s| s.count),
                        t.incomplete,
                        summary_text(&t.sched_to_snd),
                        summary_text(&t.snd_to_ack),
                    );
                }
            }
        }
        println!(
            "CPU-s/GB: user+sys of this process (both endpoints are its threads) + softirq of all CPUs, per 10^9 bytes read"
        );
        println!(
            "target shallow->linux throughput >= 0.6 x linux->linux: {} ({:.2}x)",
            if target { "met" } else { "NOT met" },
            tput0 / tput_base.max(1e-9)
        );
        Ok(())
    }

    #[derive(Default, Clone, Copy)]
    struct RowMetrics {
        tput: Option<f64>,
        p50: Option<f64>,
        p99: Option<f64>,
        cpu_gb: Option<f64>,
    }

    fn metric_row(r: &Row) -> RowMetrics {
        RowMetrics {
            tput: Some(r.stream.goodput_bps()),
            p50: r.rr.as_ref().and_then(|x| x.latency_us(0.5)),
            p99: r.rr.as_ref().and_then(|x| x.latency_us(0.99)),
            cpu_gb: r.stream.cpu_s_per_gb(),
        }
    }
}
