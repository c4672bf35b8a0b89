//! `shallow bench`: netperf-style workloads between two emulated hosts running the engine,
//! in virtual time (deterministic for a given `--seed`). Argument parsing and output only;
//! the emulation is `shallow_sim::bench`.

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde_json::{json, Value};
use shallow_sim::bench::{self, BenchConfig, BenchReport, FlowMetrics, Test};
use shallow_sim::spec::{parse_bytes, parse_rate, parse_time};
use shallow_sim::{CaptureOut, CostTable, CpuLayout, LinkSpec, QdiscSpec, Rate, Time, Writer};

fn time_arg(s: &str) -> Result<Time, String> {
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

/// Options of `shallow bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Workload: TCP_STREAM (data from this side to netserver), TCP_RR (request/response
    /// latency), TCP_MAERTS (data from netserver to this side), BULK (a byte count per flow,
    /// SHA-256 checked at the receiver).
    #[arg(long, default_value = "TCP_STREAM", value_parser = |s: &str| s.parse::<Test>())]
    test: Test,
    /// Parallel flows (each with its own thread, like super_netperf).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10000))]
    flows: u32,
    /// Virtual run time, with a unit: 10s, 500ms (default 10s; with --bytes an upper bound,
    /// default 600s: the run ends when every flow has delivered its bytes).
    #[arg(long, value_parser = time_arg)]
    duration: Option<Time>,
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
    /// NIC line rate of both hosts, e.g. 25gbit (default: max(10gbit, link rate)).
    #[arg(long, value_parser = rate_arg)]
    nic_rate: Option<Rate>,
    /// TX completion interrupt delay (ethtool tx-usecs), e.g. 20us.
    #[arg(long, default_value = "0us", value_parser = time_arg)]
    tx_completion_delay: Time,
    /// RX interrupt coalescing of both hosts (ethtool rx-usecs), e.g. 8us: segments that
    /// arrive meanwhile are merged by GRO.
    #[arg(long, default_value = "8us", value_parser = time_arg)]
    rx_coalesce: Time,
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
    sample_interval: Time,
    /// Write the sending host's egress (as tcpdump on it would see it, TSO packets whole) to
    /// this classic pcap file (nanosecond timestamps, raw IP).
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// Print one JSON object instead of the text summary.
    #[arg(long)]
    json: bool,
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
    let mut costs = CostTable::default();
    for c in &args.costs {
        if let Err(e) = costs.set(c) {
            usage_error(e);
        }
    }
    if args.test == Test::Bulk && args.bytes.is_none() {
        usage_error("--test BULK needs --bytes (e.g. --bytes 8m)");
    }
    if args.sample_interval < Time::from_micros(100) {
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
    let result = bench::run(&cfg, capture, &mut progress);
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
            "wall time {:.2}s, {} events, {:.0} wire packets per wall-clock second",
            wall.as_secs_f64(),
            report.total_extra.events,
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
    json!({
        "config": {
            "test": r.test,
            "flows": args.flows,
            "duration_s": args.duration.map(|d| d.as_secs_f64()),
            "bytes": args.bytes,
            "msg_size_bytes": args.msg_size,
            "recv_size_bytes": args.recv_size,
            "req_size_bytes": args.req_size,
            "resp_size_bytes": args.resp_size,
            "writer": format!("{:?}", args.writer).to_lowercase(),
            "nodelay": args.nodelay,
            "probe": args.probe,
            "link": format!("{:?}", args.link),
            "reverse_link": args.reverse_link.as_ref().map(|l| format!("{l:?}")),
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
    })
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
}
