//! `shallow lab --substrate linux` at test size (root: namespaces, veth, tc, TUN). Skipped
//! with a printed reason when not root, unless SHALLOW_REQUIRE_TUN=1 (then it fails).

use shallow_lab::{run_linux, Experiment, LabError, LinuxOptions, Scale};

fn opts() -> LinuxOptions {
    LinuxOptions {
        scale: Scale::Tiny,
        seed: 1,
        kernel_only: false,
    }
}

/// TSQ behind a 200 Mbit/s tbf: the kernel's sender and Shallow's both move data, and
/// Shallow's TSQ switch changes what piles up in its own egress tbf (off: the queue grows
/// with cwnd; on: about two TSO packets), as `tcp_small_queue_check` says.
#[test]
fn tsq_on_linux_kernel_and_shallow() {
    let rep = match run_linux(Experiment::Tsq, &opts(), &mut |_: &str, _: f64| {}) {
        Err(LabError::NotRoot(why)) if !shallow_os::skip::required() => {
            shallow_os::skip::check("tsq_on_linux_kernel_and_shallow", Some(why.to_string()));
            return;
        }
        r => r.expect("tsq on linux"),
    };
    let row = |n: &str| {
        rep.rows
            .iter()
            .find(|r| r.name == n)
            .unwrap_or_else(|| panic!("row {n}"))
            .clone()
    };
    let t = row("throughput");
    assert!(t.kernel_off.is_nan(), "Linux has no TSQ switch");
    assert!(t.kernel_on > 0.0, "kernel moved no data: {t:?}");
    assert!(
        t.shallow_off > 0.0 && t.shallow_on > 0.0,
        "Shallow moved no data: {t:?}"
    );
    let q = row("tbf_backlog_max");
    assert!(
        q.shallow_off > q.shallow_on,
        "TSQ off must let more pile up in the tbf: {q:?}"
    );
    let table = rep.table();
    for needle in [
        "Linux on",
        "Shallow off",
        "bottleneck_queue_delay_p99",
        "tbf rate 200",
    ] {
        assert!(table.contains(needle), "{needle} in\n{table}");
    }
    let j = rep.to_json();
    assert_eq!(j["substrate"], "linux");
    assert!(j["metrics"]["throughput"]["linux_off"].is_null());
}

/// ack-defer switches the receiver: the kernel's TCP sends to the kernel's receiver and to
/// Shallow's, with `tcp_backlog_ack_defer` 0 and 1 on each; every arm moves data, and both
/// receivers ACK (their TcpOutSegs) about once per packet received with the quickack route.
#[test]
fn ack_defer_on_linux_switches_the_receiver() {
    let rep = match run_linux(Experiment::AckDefer, &opts(), &mut |_: &str, _: f64| {}) {
        Err(LabError::NotRoot(why)) if !shallow_os::skip::required() => {
            shallow_os::skip::check(
                "ack_defer_on_linux_switches_the_receiver",
                Some(why.to_string()),
            );
            return;
        }
        r => r.expect("ack-defer on linux"),
    };
    let row = |n: &str| {
        rep.rows
            .iter()
            .find(|r| r.name == n)
            .unwrap_or_else(|| panic!("row {n}"))
            .clone()
    };
    let t = row("throughput");
    for v in [t.kernel_off, t.kernel_on, t.shallow_off, t.shallow_on] {
        assert!(v > 0.0, "an arm moved no data: {t:?}");
    }
    let a = row("acks_per_data_segment");
    for v in [a.kernel_off, a.kernel_on, a.shallow_off, a.shallow_on] {
        assert!(v > 0.5 && v <= 1.05, "ACKs per packet received: {a:?}");
    }
    assert!(rep.table().contains("tcp_backlog_ack_defer=0"));
}
