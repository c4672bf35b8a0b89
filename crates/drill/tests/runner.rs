//! The runner's rules, each checked with a small inline script: what passes, what fails
//! (and where), what is skipped. The expected packets are Linux's for the same inputs.

use shallow_drill::expectations::Status;
use shallow_drill::{parse_script, run_script, Report, RunConfig};

fn run_with(text: &str, ipv6: bool) -> Report {
    let script = parse_script("inline.pkt", text).expect("script parses");
    run_script(
        &script,
        &RunConfig {
            ipv6,
            mapped: false,
            verbose: true,
        },
    )
}

fn run(text: &str) -> Report {
    run_with(text, false)
}

/// Passive open with a listener on fd 3 and the connection on fd 4.
const OPEN: &str = "`../common/defaults.sh`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 65535 <mss 1000,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,nop,wscale 8>
 +.01 < . 1:1(0) ack 1 win 1000
   +0 accept(3, ..., ...) = 4
";

fn script(body: &str) -> String {
    format!("{OPEN}{body}")
}

fn assert_pass(r: &Report) {
    assert_eq!(r.status, Status::Pass, "{r:#?}");
}

fn assert_fail(r: &Report, line: u32, needle: &str) {
    assert_eq!(r.status, Status::Fail, "{r:#?}");
    assert_eq!(r.line, line, "{r:#?}");
    assert!(
        r.reason.contains(needle),
        "reason {:?} lacks {needle:?}",
        r.reason
    );
}

#[test]
fn handshake_write_and_ack_pass() {
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
 +.01 < . 1:1(0) ack 1001 win 1000
",
    ));
    assert_pass(&r);
    assert!(r.log.iter().any(|l| l.contains("> P. 1:1001(1000) ack 1")));
}

#[test]
fn the_same_script_passes_over_ipv6() {
    let r = run_with(
        &script(
            "   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
",
        ),
        true,
    );
    assert_pass(&r);
    assert!(
        // The addresses of Linux's runner for IPv6 (`run_all.py`).
        r.log.iter().any(|l| l.contains("fd3d:fa7b:d17d::1")),
        "{:#?}",
        r.log
    );
}

#[test]
fn psh_is_compared_strictly() {
    // Linux sets PSH on the last segment of a write; a script without it must fail.
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000
   +0 > . 1:1001(1000) ack 1
",
    ));
    assert_fail(&r, 11, "flags differ");
}

#[test]
fn sequence_ack_window_and_options_are_checked() {
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000\n   +0 > P. 2:1002(1000) ack 1\n",
    ));
    assert_fail(&r, 11, "sequence number differs");
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000\n   +0 > P. 1:1001(1000) ack 2\n",
    ));
    assert_fail(&r, 11, "ack number differs");
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000\n   +0 > P. 1:1001(1000) ack 1 win 1\n",
    ));
    assert_fail(&r, 11, "window differs");
    let r = run(&script(
        "   +0 write(4, ..., 999) = 999\n   +0 > P. 1:1001(1000) ack 1\n",
    ));
    assert_fail(&r, 11, "payload length differs");
    let r = run("`../common/defaults.sh`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 65535 <mss 1000,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,wscale 8,nop>
");
    assert_fail(&r, 6, "options differ");
    // `<...>` does not check options.
    let r = run("`../common/defaults.sh`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 65535 <mss 1000,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <...>
");
    assert_pass(&r);
}

#[test]
fn a_missing_packet_fails_at_its_line() {
    let r = run(&script("   +0 > P. 1:1001(1000) ack 1\n"));
    assert_fail(&r, 10, "none was sent");
}

#[test]
fn an_unexpected_packet_fails_when_a_later_outbound_line_exists() {
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000
  +.1 < . 1:1(0) ack 1001 win 1000
   +0 write(4, ..., 1000) = 1000
   +0 > P. 1001:2001(1000) ack 1
",
    ));
    assert_fail(&r, 11, "unexpected outbound packet");
    // After the last `>` line, extra packets go unchecked, as in packetdrill.
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000\n  +.1 < . 1:1(0) ack 1001 win 1000\n",
    ));
    assert_pass(&r);
}

#[test]
fn timing_is_checked_with_the_tolerance() {
    // Data at t=0.01 is ACKed at once (quickack); an ACK expected 50 ms later is "too early".
    let r = run(&script(
        "   +0 < P. 1:101(100) ack 1 win 1000
 +.05 > . 1:1(0) ack 101
",
    ));
    assert_fail(&r, 11, "too early");
    // With a wide tolerance it passes.
    let r = run(&format!(
        "--tolerance_usecs=60000\n{}",
        script("   +0 < P. 1:101(100) ack 1 win 1000\n +.05 > . 1:1(0) ack 101\n")
    ));
    assert_pass(&r);
}

#[test]
fn return_values_and_errnos_are_checked() {
    let r = run(&script("   +0 write(4, ..., 1000) = 999\n"));
    assert_fail(&r, 10, "returned 1000, script expects 999");
    let r = run(&script(
        "   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)
   +0 fcntl(4, F_GETFL) = 0x802
",
    ));
    assert_pass(&r);
    let r = run(&script(
        "   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0\n   +0 read(4, ..., 100) = -1 ENOTCONN\n",
    ));
    assert_fail(&r, 11, "EAGAIN, script expects ENOTCONN");
    let r = run(&script("   +0 close(9) = -1 EBADF (Bad file descriptor)\n"));
    assert_pass(&r);
}

#[test]
fn output_arguments_are_checked() {
    let r = run(&script(
        "   +0 getsockopt(4, SOL_TCP, TCP_NOTSENT_LOWAT, [0], [4]) = 0
   +0 setsockopt(4, SOL_TCP, TCP_NOTSENT_LOWAT, [4000], 4) = 0
   +0 getsockopt(4, SOL_TCP, TCP_NOTSENT_LOWAT, [4000], [4]) = 0
   +0 < P. 1:101(100) ack 1 win 1000
   +0 > . 1:1(0) ack 101
   +0 ioctl(4, SIOCINQ, [100]) = 0
   +0 poll([{fd=4, events=POLLIN|POLLOUT, revents=POLLIN|POLLOUT}], 1, 0) = 1
",
    ));
    assert_pass(&r);
    let r = run(&script(
        "   +0 getsockopt(4, SOL_TCP, TCP_NOTSENT_LOWAT, [7], [4]) = 0\n",
    ));
    assert_fail(&r, 10, "getsockopt TCP_NOTSENT_LOWAT");
    let r = run(&script("   +0 ioctl(4, SIOCINQ, [5]) = 0\n"));
    assert_fail(&r, 10, "ioctl");
}

#[test]
fn blocking_calls_return_at_the_scripted_time() {
    // read() blocks from 0.01 until data arrives at 0.11.
    let r = run(&script(
        "   +0...0.100 read(4, ..., 1000) = 100
  +.1 < P. 1:101(100) ack 1 win 1000
   +0 > . 1:1(0) ack 101
",
    ));
    assert_pass(&r);
    // The script says it returns at once, but nothing arrives before 0.11.
    let r = run(&script(
        "   +0 read(4, ..., 1000) = 100
  +.1 < P. 1:101(100) ack 1 win 1000
",
    ));
    assert_fail(&r, 10, "did not return");
    // A poll() timeout returns 0 at the end of the timeout.
    let r = run(&script(
        "   +0...0.050 poll([{fd=4, events=POLLIN, revents=0}], 1, 50) = 0\n",
    ));
    assert_pass(&r);
}

#[test]
fn script_fds_follow_the_script() {
    // packetdrill maps script fds to live ones: a script may start at 4.
    let r = run("`../common/defaults.sh`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 4
   +0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 connect(4, ..., ...) = -1 EINPROGRESS (Operation now in progress)
   +0 > S 0:0(0) <mss 1460,sackOK,TS val 100 ecr 0,nop,wscale 8>
 +.01 < S. 0:0(0) ack 1 win 5000 <mss 1000,nop,wscale 7>
   +0 > . 1:1(0) ack 1
   +0 getsockopt(4, SOL_SOCKET, SO_ERROR, [0], [4]) = 0
");
    assert_pass(&r);
}

#[test]
fn the_isn_is_learned_even_when_the_syn_is_not_written() {
    // No `> S` line: the SYN-ACK's ack number is still mapped with the stack's ISN. The
    // unmatched SYN is then unchecked (no later `>` line).
    let r = run("`../common/defaults.sh`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 fcntl(3, F_SETFL, O_RDWR|O_NONBLOCK) = 0
   +0 connect(3, ..., ...) = -1 EINPROGRESS (Operation now in progress)
 +.01 < S. 0:0(0) ack 1 win 5000 <mss 1000,nop,wscale 7>
   +0 getsockopt(3, SOL_SOCKET, SO_ERROR, [0], [4]) = 0
   +0 write(3, ..., 10) = 10
");
    assert_pass(&r);
}

#[test]
fn segments_are_concatenated_unless_strict() {
    let body = "   +0 `ethtool -K tun0 tso off gso off`
   +0 write(4, ..., 3000) = 3000
   +0 > P. 1:3001(3000) ack 1
";
    let r = run(&script(body));
    assert_pass(&r);
    assert!(
        r.log
            .iter()
            .any(|l| l.contains("concatenated from 3 packets")),
        "{:#?}",
        r.log
    );
    let r = run(&format!("--strict_segments\n{}", script(body)));
    assert_fail(&r, 13, "flags differ");
}

#[test]
fn python_snippets_see_tcp_info() {
    let r = run(&script(
        "   +0 %{ assert tcpi_snd_mss == 1000, tcpi_snd_mss }%
   +0 %{ assert tcpi_state == TCP_ESTABLISHED }%
",
    ));
    assert_pass(&r);
    let r = run(&script(
        "   +0 %{ assert tcpi_snd_cwnd == 3, tcpi_snd_cwnd }%\n",
    ));
    assert_fail(&r, 10, "python: assertion failed");
}

#[test]
fn counter_checks_use_nstat_deltas() {
    let r = run(&script(
        "   +0 `nstat > /dev/null`
   +0 < P. 1:101(100) ack 1 win 1000
   +0 > . 1:1(0) ack 101
   +0 `nstat | grep TcpInSegs > /dev/null`
",
    ));
    assert_pass(&r);
    let r = run(&script(
        "   +0 `nstat > /dev/null`\n   +0 `nstat | grep TcpInSegs`\n",
    ));
    assert_fail(&r, 11, "TcpInSegs changed by 0");
}

#[test]
fn unsupported_things_skip_with_a_reason() {
    let r = run(&script("   +0 splice(4, 0, 5, 0, 10, 0) = 10\n"));
    assert_eq!(r.status, Status::Skip);
    assert!(r.reason.contains("offset"), "{}", r.reason);
    let r = run(&script("   +0 `sysctl -q net.ipv4.tcp_no_such_thing=1`\n"));
    assert_eq!(r.status, Status::Skip);
    assert!(r.reason.contains("tcp_no_such_thing"), "{}", r.reason);
    let r = run(&script(
        "   +0 `tc qdisc add dev tun0 root netem delay 10ms`\n",
    ));
    assert_eq!(r.status, Status::Skip);
    let r = run(&script(
        "   +0 getsockopt(4, SOL_TCP, TCP_ZEROCOPY_RECEIVE, ..., ...) = 0\n",
    ));
    assert_eq!(r.status, Status::Skip);
    assert!(r.reason.contains("zerocopy receive"), "{}", r.reason);
}

#[test]
fn pfifo_limit_0_refuses_packets_at_transmit() {
    // The qdisc refuses the data inside the send (NET_XMIT_DROP): it stays unsent in the
    // write queue and never reaches the wire; the expected packet is missing.
    let r = run(&script(
        "   +0 `tc qdisc delete dev tun0 root 2>/dev/null ; tc qdisc add dev tun0 root pfifo limit 0`
   +0 write(4, ..., 1000) = 1000
   +0 ioctl(4, SIOCOUTQNSD, [1000]) = 0
   +0 > P. 1:1001(1000) ack 1
",
    ));
    assert_fail(&r, 13, "none was sent");
}

#[test]
fn parse_errors_fail_at_their_line() {
    let dir = std::env::temp_dir().join(format!("shallow-drill-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.pkt");
    std::fs::write(
        &p,
        "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 > Q 1:1(0)\n",
    )
    .unwrap();
    let r = shallow_drill::run_file(&p, &RunConfig::default());
    assert_eq!(r.status, Status::Fail);
    assert_eq!(r.line, 2);
    assert!(r.reason.starts_with("parse error"), "{}", r.reason);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inbound_packets_reach_the_stack_just_after_their_time() {
    // As on Linux, where packetdrill's tun write and the receive path run after the
    // scripted time: an ACK scripted exactly 1 ms after a send is processed after it, so
    // `tcp_tso_should_defer`'s "last send over 1 ms ago" rule sees it as late.
    let r = run(&script(
        "   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
 +.01 < . 1:1(0) ack 1001 win 1000
",
    ));
    assert_pass(&r);
    let at: f64 = r
        .log
        .iter()
        .find(|l| l.contains("< . 1:1(0) ack 1001"))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .expect("the ACK is in the log");
    // Scripted at 0.020 (after the handshake ACK at 0.010): a few µs later, never earlier.
    assert!(at > 0.020 && at < 0.020_01, "ACK processed at {at}");
}

fn run_mapped(text: &str) -> Report {
    let script = parse_script("inline.pkt", text).expect("script parses");
    run_script(
        &script,
        &RunConfig {
            ipv6: false,
            mapped: true,
            verbose: true,
        },
    )
}

/// The IPv4-mapped-IPv6 variant: AF_INET6 sockets (IPV6_V6ONLY exists), IPv4 packets on a
/// 1500-byte MTU (the SYN-ACK's MSS 1460), and a script's own `--ip_version=ipv4` wins over
/// the run's variant.
#[test]
fn mapped_variant_uses_af_inet6_sockets_and_ipv4_packets() {
    let body = "   +0 getsockopt(4, IPPROTO_IPV6, 26, [0], [4]) = 0
   +0 write(4, ..., 2920) = 2920
   +0 > P. 1:2921(2920) ack 1
";
    let r = run_mapped(&script(body));
    assert_pass(&r);
    assert!(
        r.log
            .iter()
            .any(|l| l.contains("wire: 192.168.0.1:8080 > 192.0.2.1:")),
        "{:#?}",
        r.log
    );
    // The same script as a plain IPv4 run: an AF_INET socket has no IPV6_V6ONLY.
    let r = run_mapped(&format!("--ip_version=ipv4\n{}", script(body)));
    assert_fail(&r, 11, "EOPNOTSUPP");
}

#[test]
fn bfifo_smaller_than_a_packet_refuses_it_at_transmit() {
    // bfifo counts bytes: a 1040-byte packet does not fit in 1000.
    let r = run(&script(
        "   +0 `tc qdisc replace dev tun0 root bfifo limit 1000`
   +0 write(4, ..., 1000) = 1000
   +0 ioctl(4, SIOCOUTQNSD, [1000]) = 0
   +0 > P. 1:1001(1000) ack 1
",
    ));
    assert_fail(&r, 13, "none was sent");
}

#[test]
fn fq_parameters_the_runner_lacks_skip() {
    let r = run(&script(
        "   +0 `tc qdisc replace dev tun0 root fq ce_threshold 4ms`\n",
    ));
    assert_eq!(r.status, Status::Skip);
    assert!(r.reason.contains("ce_threshold"), "{}", r.reason);
}

#[test]
fn fq_maxrate_spaces_a_flow_with_the_scripts_quantum() {
    // sch_fq's rule: a flow sends while it has credit; once spent, its next packet waits
    // max(len, quantum) / maxrate (1040 bytes at 832 kbit/s: 10 ms).
    let r = run(&script(
        "   +0 `tc qdisc replace dev tun0 root fq maxrate 832kbit quantum 1040 initial_quantum 1040`
   +0 setsockopt(4, SOL_TCP, TCP_NODELAY, [1], 4) = 0
   +0 write(4, ..., 1000) = 1000
   +0 write(4, ..., 1000) = 1000
   +0 write(4, ..., 1000) = 1000
   +0 > P. 1:1001(1000) ack 1
 +.01 > P. 1001:2001(1000) ack 1
 +.01 > P. 2001:3001(1000) ack 1
",
    ));
    assert_pass(&r);
}
