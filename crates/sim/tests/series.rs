//! The opt-in time-series recorder of a bench run (`bench::run_series`): it leaves the run
//! unchanged, is deterministic and bounded, and its values agree with the report's totals.

use shallow_sim::bench::{run_ext, run_series, BenchConfig, BenchExtras, BenchReport, Test};
use shallow_sim::{CaptureOut, Instant, LinkSpec, Rate, Series, SeriesConfig};
use std::time::Duration;

fn cfg() -> BenchConfig {
    BenchConfig {
        test: Test::Stream,
        flows: 2,
        probe: true,
        msg_size: 65536,
        duration: Some(Duration::from_millis(200)),
        nic_rate: Some(Rate::gbps(1)),
        link: "rate=500mbit,delay=1ms,loss=0.2%"
            .parse::<LinkSpec>()
            .unwrap(),
        seed: 5,
        ..BenchConfig::default()
    }
}

fn recorded(cfg: &BenchConfig, sc: SeriesConfig) -> (BenchReport, Series) {
    let (r, _, s) = run_series(cfg, &BenchExtras::default(), &sc, None, &mut |_| {}).unwrap();
    (r, s)
}

#[test]
fn recorder_leaves_the_report_and_the_capture_unchanged() {
    let cfg = cfg();
    let pcap = |c: Option<CaptureOut>| match c {
        Some(CaptureOut::Memory(v)) => v,
        _ => panic!("no capture"),
    };
    let (plain, cap) = run_ext(
        &cfg,
        &BenchExtras::default(),
        Some(CaptureOut::Memory(Vec::new())),
        &mut |_| {},
    )
    .unwrap();
    // 0.7 ms does not divide the 10 ms sampling period: the recorder stops the run at
    // points of its own in between.
    let (rec, cap2, s) = run_series(
        &cfg,
        &BenchExtras::default(),
        &SeriesConfig {
            interval: Duration::from_micros(700),
            max_points: 10_000,
        },
        Some(CaptureOut::Memory(Vec::new())),
        &mut |_| {},
    )
    .unwrap();
    assert!(s.samples.len() > 250, "{}", s.samples.len());
    assert_eq!(
        serde_json::to_string(&plain).unwrap(),
        serde_json::to_string(&rec).unwrap()
    );
    assert_eq!(pcap(cap), pcap(cap2));
}

#[test]
fn series_is_deterministic_and_bounded() {
    let sc = SeriesConfig {
        interval: Duration::from_micros(100),
        max_points: 50,
    };
    let (_, a) = recorded(&cfg(), sc);
    let (_, b) = recorded(&cfg(), sc);
    assert_eq!(a, b);
    assert!(a.samples.len() <= 50, "{}", a.samples.len());
    assert!(a.samples.len() >= 20, "{}", a.samples.len());
    assert!(a.decimations >= 4, "2000 points into 50: {}", a.decimations);
    assert_eq!(a.interval, Duration::from_nanos(100_000 << a.decimations));
    assert_eq!(a.samples[0].t, Instant::ZERO);
    assert_eq!(a.samples.last().unwrap().t, Instant::from_millis(200));
    // All but the final sample lie on the (doubled) grid.
    let n = a.samples.len();
    for w in a.samples[..n - 1].windows(2) {
        assert_eq!(w[1].t - w[0].t, a.interval);
    }
    let (_, c) = recorded(&BenchConfig { seed: 6, ..cfg() }, sc);
    assert_ne!(a, c, "another seed, another series");
}

#[test]
fn series_agrees_with_the_report() {
    // 2 ms divides the 10 ms sampling period and nothing is decimated, so the series holds
    // every point the report's memory figures were sampled at.
    let (r, s) = recorded(
        &cfg(),
        SeriesConfig {
            interval: Duration::from_millis(2),
            max_points: 10_000,
        },
    );
    assert_eq!(s.decimations, 0);
    assert_eq!(s.samples.len(), 101);
    let first = s.samples[0];
    let last = *s.samples.last().unwrap();
    assert_eq!(first.acks_sent, 0);
    assert_eq!(first.bytes_delivered, 0);
    assert_eq!(last.acks_sent, r.total.acks_sent);
    assert_eq!(last.bytes_delivered, r.total.bytes_read);
    assert_eq!(last.sender_wakeups, r.total.sender_wakeups);
    assert_eq!(last.send_calls, r.total.send_calls);
    assert_eq!(last.segments_sent, r.total.segments_sent);
    assert_eq!(
        last.autocork_events,
        r.counters.get("TcpExtTCPAutoCorking").copied().unwrap_or(0)
    );
    let bits = last.bytes_sent as f64 * 8.0 / r.duration_s;
    assert!(
        (bits - r.total.throughput_bps).abs() <= 1e-6 * bits,
        "{bits}"
    );
    assert!(last.acks_sent > 100 && last.bytes_delivered > 1_000_000);
    // Rates over the intervals add up to the totals.
    for (name, f, total) in [
        (
            "acks",
            (|x: &_| x.acks_sent) as fn(&shallow_sim::series::Sample) -> u64,
            r.total.acks_sent,
        ),
        ("delivered", |x| x.bytes_delivered, r.total.bytes_read),
        ("wakeups", |x| x.sender_wakeups, r.total.sender_wakeups),
    ] {
        let mut sum = 0.0;
        let mut prev = 0.0;
        for (t, v) in s.rate(f) {
            assert!(v >= 0.0);
            sum += v * (t - prev);
            prev = t;
        }
        assert!(
            (sum - total as f64).abs() <= 1e-6 * total as f64 + 1e-6,
            "{name}: {sum} vs {total}"
        );
    }
    // Counters never fall.
    for w in s.samples.windows(2) {
        assert!(w[1].acks_sent >= w[0].acks_sent && w[1].bytes_delivered >= w[0].bytes_delivered);
    }
    // Memory: the report's samples are the series' samples at multiples of 10 ms.
    let at_report = s
        .samples
        .iter()
        .filter(|x| x.t > Instant::ZERO && x.t.0 % 10_000_000 == 0);
    let pages_max = at_report
        .clone()
        .map(|x| x.hosts[0].tcp_mem_pages)
        .max()
        .unwrap();
    assert_eq!(pages_max, r.total_extra.sockstat_mem_pages_max);
    let n = at_report.clone().count() as f64;
    let pages_mean = at_report
        .map(|x| x.hosts[0].tcp_mem_pages as f64)
        .sum::<f64>()
        / n;
    assert!((pages_mean - r.total_extra.sockstat_mem_pages_mean).abs() < 1e-9);
    // Bytes below TCP never exceed the largest the per-flow accounts saw, and are seen.
    let below_max = s
        .samples
        .iter()
        .map(|x| x.hosts[0].bytes_below_tcp)
        .max()
        .unwrap();
    assert!(
        below_max > 0 && below_max <= r.total.bytes_queued_max,
        "{below_max} vs {}",
        r.total.bytes_queued_max
    );
    // The delay histogram is the one the report's percentiles come from.
    let h = &s.host_queue_delay;
    assert_eq!(h.count(), r.total.host_queue_packets);
    assert_eq!(
        h.quantile(0.99).map(|v| v as f64 / 1000.0),
        r.total.host_queue_delay_p99_us
    );
    let cdf = h.cdf();
    assert_eq!(cdf.last().map(|p| p.1), Some(1.0));
}

/// TSQ off: the series shows the pile-up below TCP that the report's maximum summarises.
#[test]
fn tsq_off_shows_in_bytes_below_tcp_over_time() {
    let go = |off: bool| {
        let mut c = BenchConfig {
            flows: 1,
            probe: false,
            link: "delay=50us".parse().unwrap(),
            ..cfg()
        };
        if off {
            c.sysctls.push(("shallow.tcp_tsq".into(), "0".into()));
        }
        recorded(&c, SeriesConfig::default()).1
    };
    let mean = |s: &Series| {
        s.samples
            .iter()
            .map(|x| x.hosts[0].bytes_below_tcp as f64)
            .sum::<f64>()
            / s.samples.len() as f64
    };
    let (on, off) = (go(false), go(true));
    assert!(
        mean(&off) > 2.0 * mean(&on),
        "off {} on {}",
        mean(&off),
        mean(&on)
    );
}
