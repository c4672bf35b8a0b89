//! `shallow bench` from the command line: exit codes, the JSON shape, determinism, and a
//! pcap that tshark reads.

use std::process::{Command, Output};

fn shallow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_shallow"))
        .args(args)
        .output()
        .expect("run shallow")
}

fn json(args: &[&str]) -> serde_json::Value {
    let out = shallow(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn bad_options_exit_2_with_a_message() {
    for args in [
        vec!["bench", "--test", "TCP_NOPE"],
        vec!["bench", "--link", "rate=1gbit,bogus=3"],
        vec!["bench", "--link", "delay=fast"],
        vec!["bench", "--qdisc", "red"],
        vec!["bench", "--flows", "0"],
        vec!["bench", "--duration", "10"],
        vec!["bench", "--msg-size", "0"],
        vec!["bench", "--writer", "async"],
        vec!["bench", "--cpus", "four"],
        vec!["bench", "--sysctl", "tcp_autocorking"],
        vec!["bench", "--cost", "nope_ns=1"],
        vec!["bench", "--test", "BULK"],
        vec![
            "bench",
            "--duration",
            "1ms",
            "--sysctl",
            "net.ipv4.no_such=1",
        ],
        vec![
            "bench",
            "--duration",
            "1ms",
            "--sysctl",
            "rx:net.ipv4.tcp_autocorking=x",
        ],
    ] {
        let out = shallow(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("error"), "{args:?}: {err}");
    }
}

#[test]
fn help_documents_units() {
    let out = shallow(&["bench", "--help"]);
    assert!(out.status.success());
    let h = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--test",
        "--flows",
        "--duration",
        "--bytes",
        "--msg-size",
        "--writer",
        "--nodelay",
        "--link",
        "--qdisc",
        "--tx-completion-delay",
        "--cpus",
        "--sysctl",
        "--seed",
        "--pcap",
        "--json",
    ] {
        assert!(h.contains(opt), "{opt} missing from --help");
    }
    assert!(h.contains("ms") && h.contains("gbit"), "units in --help");
}

#[test]
fn json_shape_and_determinism() {
    let args = [
        "bench",
        "--test",
        "BULK",
        "--bytes",
        "1m",
        "--flows",
        "2",
        "--probe",
        "--link",
        "rate=1gbit,delay=1ms,loss=0.5%",
        "--sysctl",
        "net.ipv4.tcp_autocorking=0",
        "--sysctl",
        "rx:net.ipv4.tcp_backlog_ack_defer=0",
        "--seed",
        "5",
        "--json",
    ];
    let v = json(&args);
    let o = v.as_object().unwrap();
    for k in [
        "config",
        "seed",
        "duration_s",
        "total",
        "flows",
        "counters",
        "verified",
    ] {
        assert!(o.contains_key(k), "missing {k}");
    }
    assert_eq!(v["seed"], 5);
    assert_eq!(v["verified"], true);
    assert_eq!(v["config"]["test"], "BULK");
    assert_eq!(v["config"]["sysctls"][0], "net.ipv4.tcp_autocorking=0");
    let flows = v["flows"].as_array().unwrap();
    assert_eq!(flows.len(), 3);
    assert_eq!(flows[2]["kind"], "probe");
    let t = &v["total"];
    for k in [
        "throughput_bps",
        "goodput_bps",
        "retransmits",
        "rtt_p50_us",
        "rtt_p99_us",
        "host_queue_delay_p50_us",
        "host_queue_delay_p99_us",
        "host_queue_delay_max_us",
        "bytes_queued_max",
        "bytes_queued_mean",
        "wmem_queued_max_bytes",
        "rmem_max_bytes",
        "sockstat_mem_pages_max",
        "context_switches",
        "context_switches_per_s",
        "send_calls",
        "bytes_per_send_call",
        "segments_sent",
        "mean_segment_bytes",
        "acks_per_data_segment",
        "backlog_drops",
        "backlog_coalesces",
        "cpu",
    ] {
        assert!(t.get(k).is_some(), "total.{k} missing");
    }
    assert!(t["goodput_bps"].as_f64().unwrap() > 0.0);
    let c = v["counters"].as_object().unwrap();
    assert!(c.keys().all(|k| k.starts_with("Tcp")));
    assert!(c["TcpOutSegs"].as_u64().unwrap() > 700);
    // Keys are snake_case.
    for k in t.as_object().unwrap().keys() {
        assert!(
            k.chars()
                .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_'),
            "{k}"
        );
    }
    assert_eq!(v, json(&args), "same seed, same JSON");
}

#[test]
fn pcap_is_deterministic_and_tshark_reads_it() {
    let dir = std::env::temp_dir();
    let p1 = dir.join(format!("shallow-bench-{}-a.pcap", std::process::id()));
    let p2 = dir.join(format!("shallow-bench-{}-b.pcap", std::process::id()));
    for p in [&p1, &p2] {
        let out = shallow(&[
            "bench",
            "--duration",
            "50ms",
            "--link",
            "rate=100mbit,delay=1ms",
            "--pcap",
            p.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let a = std::fs::read(&p1).unwrap();
    let b = std::fs::read(&p2).unwrap();
    assert_eq!(a, b);
    assert!(a.len() > 24 + 100 * 1000, "a capture of the transfer");
    let tshark = Command::new("tshark").arg("--version").output();
    if tshark.is_err() {
        eprintln!("SKIPPED tshark check: tshark is not installed");
    } else {
        let out = Command::new("tshark")
            .args([
                "-r",
                p1.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "tcp.srcport",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines = String::from_utf8_lossy(&out.stdout);
        assert!(lines.lines().count() > 50);
        assert!(
            lines.lines().all(|l| !l.trim().is_empty()),
            "every packet is TCP"
        );
    }
    let _ = std::fs::remove_file(&p1);
    let _ = std::fs::remove_file(&p2);
}

/// `--ipv6` on the emulator: both hosts on IPv6, every captured packet an IPv6 TCP packet
/// (checked by tshark when it is installed), segments of the IPv6 MSS, and the report says so;
/// the same run without it is IPv4 with 20 more payload bytes per full segment.
#[test]
fn ipv6_on_the_emulator() {
    let dir = std::env::temp_dir();
    let pcap = dir.join(format!("shallow-bench-{}-v6.pcap", std::process::id()));
    let args = [
        "bench",
        "--json",
        "--duration",
        "100ms",
        "--link",
        "rate=100mbit,delay=1ms",
    ];
    let v6 = json(&[&args[..], &["--ipv6", "--pcap", pcap.to_str().unwrap()]].concat());
    let v4 = json(&args);
    assert_eq!(
        v6["config"]["ipv6"],
        serde_json::json!(true),
        "{}",
        v6["config"]
    );
    assert!(v4["config"].get("ipv6").is_none(), "{}", v4["config"]);
    let mean = |v: &serde_json::Value| v["total"]["mean_segment_bytes"].as_f64().unwrap();
    // Timestamps on: 1448 payload bytes per full IPv4 segment, 1428 per IPv6 one.
    assert_eq!((mean(&v4), mean(&v6)), (1448.0, 1428.0));
    assert!(
        v6["total"]["throughput_bps"].as_f64().unwrap() > 50e6,
        "{}",
        v6["total"]
    );
    let a = std::fs::read(&pcap).unwrap();
    assert!(a.len() > 24 + 100 * 1000, "a capture of the transfer");
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIPPED tshark check: tshark is not installed");
    } else {
        let out = Command::new("tshark")
            .args([
                "-r",
                pcap.to_str().unwrap(),
                "-T",
                "fields",
                "-e",
                "ipv6.src",
            ])
            .args(["-e", "tcp.srcport"])
            .output()
            .unwrap();
        let lines = String::from_utf8_lossy(&out.stdout);
        assert!(lines.lines().count() > 50);
        for l in lines.lines() {
            assert!(l.starts_with("fd00:"), "an IPv6 TCP packet: {l:?}");
        }
    }
    let _ = std::fs::remove_file(&pcap);
}

/// `--timestamps`: the data sender's per-write spans in the JSON and the text; without it the
/// report has no such key (and its config no `timestamps`).
#[test]
fn timestamps_add_per_write_spans() {
    let args = [
        "bench",
        "--duration",
        "200ms",
        "--msg-size",
        "64k",
        "--nic-rate",
        "1gbit",
        "--json",
    ];
    let plain = json(&args);
    assert!(plain.get("tx_timestamps").is_none());
    assert!(plain["config"].get("timestamps").is_none());
    let mut with = args.to_vec();
    with.push("--timestamps");
    let v = json(&with);
    assert_eq!(v["config"]["timestamps"], true);
    let t = &v["tx_timestamps"];
    for span in ["sched_to_snd", "snd_to_ack"] {
        for k in ["writes", "p50_us", "p90_us", "p99_us", "max_us"] {
            assert!(t[span].get(k).is_some(), "tx_timestamps.{span}.{k}");
        }
    }
    assert!(t["sched_to_snd"]["writes"].as_u64().unwrap() > 100);
    assert!(t.get("incomplete_writes").is_some());
    // The run itself is the same.
    assert_eq!(v["total"], plain["total"]);
    with.retain(|a| *a != "--json");
    let out = shallow(&with);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("tx timestamps ("), "{text}");
    assert!(text.contains("SCHED->SND"), "{text}");
}

/// `--zerocopy` on the emulator: the data sender's sends are `MSG_ZEROCOPY`; the report
/// counts its ids, their completions and how long the stack held each buffer, in JSON and
/// text; `--substrate linux` refuses it with a usage error.
#[test]
fn zerocopy_reports_completions_and_hold_times() {
    let args = [
        "bench",
        "--duration",
        "200ms",
        "--msg-size",
        "64k",
        "--nic-rate",
        "1gbit",
        "--json",
        "--zerocopy",
    ];
    let v = json(&args);
    assert_eq!(v["config"]["zerocopy"], true);
    let z = &v["zerocopy"];
    let (sends, completed) = (
        z["sends"].as_u64().unwrap(),
        z["completed"].as_u64().unwrap(),
    );
    assert!(sends > 100, "{z}");
    assert!(completed <= sends && completed > 0, "{z}");
    assert!(z["hold"]["p50_us"].as_f64().unwrap() > 0.0, "{z}");
    let text_args: Vec<&str> = args.iter().copied().filter(|a| *a != "--json").collect();
    let out = shallow(&text_args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("zerocopy: "), "{text}");
    let mut linux = text_args.clone();
    linux.extend(["--substrate", "linux"]);
    let out = shallow(&linux);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("emulator only"));
}
