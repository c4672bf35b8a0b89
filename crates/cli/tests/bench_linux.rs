//! `shallow bench --substrate linux`: option checks (no root needed), and as root one short run
//! of each workload and pair in the emulator's JSON shape, and a short `--side-by-side`.
//! Runs that need root skip with a printed reason otherwise, unless `SHALLOW_REQUIRE_TUN=1`.

use std::process::{Command, Output};

fn shallow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shallow"))
        .args(args)
        .output()
        .expect("run shallow")
}

fn can_run(test: &str) -> bool {
    shallow_os::skip::can_run(test, &[])
}

#[test]
fn emulator_only_options_are_usage_errors() {
    for args in [
        vec!["bench", "--substrate", "linux", "--probe"],
        vec!["bench", "--substrate", "linux", "--link", "rate=1gbit"],
        vec!["bench", "--substrate", "linux", "--pcap", "/tmp/x.pcap"],
        vec![
            "bench",
            "--substrate",
            "linux",
            "--test",
            "BULK",
            "--bytes",
            "1m",
        ],
        vec![
            "bench",
            "--substrate",
            "linux",
            "--sysctl",
            "rx:net.ipv4.tcp_autocorking=0",
        ],
        vec!["bench", "--side-by-side"],
        vec!["bench", "--busy-poll", "50"],
        vec!["bench", "--substrate", "linux", "--peer", "smoltcp"],
        vec![
            "bench",
            "--substrate",
            "linux",
            "--pair",
            "smoltcp-linux",
            "--flows",
            "2",
        ],
        vec!["bench", "--prefer-busy-poll"],
        vec![
            "bench",
            "--substrate",
            "linux",
            "--side-by-side",
            "--test",
            "TCP_RR",
        ],
        vec!["bench", "--substrate", "nope"],
    ] {
        let out = shallow(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
    }
}

/// Each workload and pair gives the emulator's JSON keys with the numbers a real run has.
#[test]
fn linux_runs_report_the_bench_json_shape() {
    if !can_run("linux_runs_report_the_bench_json_shape") {
        return;
    }
    for (test, pair) in [
        ("TCP_STREAM", "shallow-linux"),
        ("TCP_MAERTS", "shallow-linux"),
        ("TCP_RR", "shallow-linux"),
        ("TCP_STREAM", "linux-shallow"),
        ("TCP_RR", "linux-linux"),
        ("TCP_STREAM", "smoltcp-linux"),
        ("TCP_MAERTS", "smoltcp-linux"),
        ("TCP_RR", "smoltcp-linux"),
        ("TCP_STREAM/2 flows/2 queues", "shallow-linux"),
    ] {
        // "TEST/2 flows/2 queues": two parallel flows over a 2-queue TUN.
        let (test, multi) = match test.split_once('/') {
            Some((t, _)) => (t, true),
            None => (test, false),
        };
        let mut args = vec![
            "bench",
            "--substrate",
            "linux",
            "--test",
            test,
            "--pair",
            pair,
            "--duration",
            "300ms",
            "--json",
        ];
        if multi {
            args.extend(["--flows", "2", "--queues", "2"]);
        }
        let out = shallow(&args);
        assert!(
            out.status.success(),
            "{test} {pair}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        for k in [
            "config",
            "seed",
            "duration_s",
            "total",
            "flows",
            "counters",
            "verified",
        ] {
            assert!(v.get(k).is_some(), "{test} {pair}: missing {k}");
        }
        assert_eq!(v["config"]["substrate"], "linux");
        if multi {
            assert_eq!(v["config"]["flows"], 2, "{test} {pair}: flows");
            assert_eq!(v["config"]["queues"], 2, "{test} {pair}: queues");
        }
        assert_eq!(v["config"]["test"], test);
        let t = &v["total"];
        for k in [
            "throughput_bps",
            "goodput_bps",
            "latency_p50_us",
            "latency_p99_us",
            "cpu",
        ] {
            assert!(t.get(k).is_some(), "{test} {pair}: total.{k} missing");
        }
        if test == "TCP_RR" {
            assert!(
                t["transactions"].as_u64().unwrap() > 0,
                "{test} {pair}: no transactions"
            );
            assert!(t["latency_p50_us"].as_f64().unwrap() > 0.0);
        } else {
            assert!(
                t["bytes_read"].as_u64().unwrap() > 0,
                "{test} {pair}: no data"
            );
            assert_eq!(
                t["bytes_read"], t["bytes_written"],
                "{test} {pair}: bytes lost"
            );
        }
        if !matches!(pair, "linux-linux" | "smoltcp-linux") {
            assert!(
                !v["counters"].as_object().unwrap().is_empty(),
                "Shallow's MIB deltas"
            );
        }
    }
}

#[test]
fn side_by_side_prints_the_three_pairs_and_the_target() {
    if !can_run("side_by_side_prints_the_three_pairs_and_the_target") {
        return;
    }
    let out = shallow(&[
        "bench",
        "--substrate",
        "linux",
        "--side-by-side",
        "--peer",
        "smoltcp",
        "--duration",
        "300ms",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8_lossy(&out.stdout);
    for p in [
        "shallow->linux",
        "linux->shallow",
        "smoltcp->linux",
        "linux->linux",
        "target",
    ] {
        assert!(s.contains(p), "missing {p}:\n{s}");
    }
}

/// `--timestamps` with `--substrate linux`: the data sender's per-write spans in the JSON,
/// from Shallow's socket when it sends and from the kernel's own when the kernel does; and
/// the side-by-side text has their table.
#[test]
fn linux_timestamps_from_the_data_sender() {
    if !can_run("linux_timestamps_from_the_data_sender") {
        return;
    }
    for (pair, stack) in [("shallow-linux", "shallow"), ("linux-linux", "kernel")] {
        let out = shallow(&[
            "bench",
            "--substrate",
            "linux",
            "--pair",
            pair,
            "--duration",
            "300ms",
            "--timestamps",
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{pair}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert_eq!(v["config"]["timestamps"], true);
        let t = &v["tx_timestamps"];
        assert_eq!(t["stack"], stack, "{pair}");
        assert!(t["sched_to_snd"]["writes"].as_u64().unwrap() > 0, "{pair}");
        assert!(t["snd_to_ack"]["p50_us"].as_f64().is_some(), "{pair}");
    }
}

/// `--busy-poll`: a TCP_RR run whose Shallow socket polls the TUN before it sleeps completes
/// transactions and says so in its configuration.
#[test]
fn linux_rr_with_busy_polling() {
    if !can_run("linux_rr_with_busy_polling") {
        return;
    }
    for extra in [&[][..], &["--prefer-busy-poll"][..]] {
        let mut args = vec![
            "bench",
            "--substrate",
            "linux",
            "--pair",
            "shallow-linux",
            "--test",
            "TCP_RR",
            "--duration",
            "300ms",
            "--busy-poll",
            "50",
            "--json",
        ];
        args.extend_from_slice(extra);
        let out = shallow(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert_eq!(v["config"]["busy_poll_us"], 50);
        assert_eq!(v["config"]["prefer_busy_poll"], !extra.is_empty());
        let t = v["flows"][0]["transactions"]
            .as_u64()
            .or_else(|| v["transactions"].as_u64());
        assert!(t.is_some_and(|t| t > 100), "{extra:?}: {v}");
    }
}
