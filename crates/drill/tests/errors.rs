//! Parse errors point at the offending line and column. The scripts here are our own.

use shallow_drill::{parse_script, ParseError};

fn err(text: &str) -> ParseError {
    match parse_script("t.pkt", text) {
        Ok(s) => panic!("expected an error, parsed {s:?}"),
        Err(e) => e,
    }
}

fn at(text: &str, line: u32, col: u32, needle: &str) {
    let e = err(text);
    assert_eq!((e.line, e.col), (line, col), "{e}");
    assert!(
        e.message.contains(needle),
        "message `{}` lacks `{needle}`",
        e.message
    );
    assert_eq!(e.to_string(), format!("t.pkt:{line}:{col}: {}", e.message));
}

#[test]
fn unknown_tcp_option() {
    at(
        "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 > S 0:0(0) <mss 1460,bogus 3>\n",
        2,
        25,
        "unknown TCP option `bogus`",
    );
}

#[test]
fn bad_flag() {
    at("+0 < SX 0:0(0) win 100\n", 1, 7, "unknown TCP flag `X`");
    at("+0 < S-. 0:0(0) win 100\n", 1, 6, "cannot be combined");
    at("+0 < SS 0:0(0) win 100\n", 1, 7, "written twice");
}

#[test]
fn sequence_length_mismatch() {
    at(
        "\n\n   +.1 < P. 1:1001(100) ack 1 win 257\n",
        3,
        13,
        "does not match length 100",
    );
}

#[test]
fn missing_result() {
    at(
        "0 socket(..., SOCK_STREAM, IPPROTO_TCP)\n+0 close(3) = 0\n",
        2,
        1,
        "expected `=`",
    );
}

#[test]
fn unterminated_things() {
    at(
        "0 `sysctl -q net.ipv4.tcp_sack=0\n+0 close(3) = 0\n",
        1,
        3,
        "unterminated backtick",
    );
    at("0 %{ assert 1 == 1\n", 1, 3, "unterminated `%{`");
    at("0 write(3, \"abc, 3) = 3\n", 1, 12, "unterminated string");
    at(
        "0 close(3) = 0\n/* never closed\n",
        2,
        1,
        "unterminated `/*`",
    );
    at(
        "0 setsockopt(3, SOL_SOCKET, SO_LINGER, {onoff=1, linger=0, 8) = 0\n",
        1,
        61,
        "expected `,` or `}`",
    );
}

#[test]
fn bad_times() {
    at("x close(3) = 0\n", 1, 1, "expected an event time");
    at("+.5~+.4 > . 1:1(0) ack 1\n", 1, 6, "ends before it starts");
    at(
        "+0...1 > . 1:1(0) ack 1\n",
        1,
        3,
        "only allowed for system calls",
    );
    at(
        "+1.0000000001 close(3) = 0\n",
        1,
        2,
        "more than 9 decimal places",
    );
    at("+1s close(3) = 0\n", 1, 2, "malformed");
}

#[test]
fn out_of_range_numbers() {
    at("+0 < S 0:0(0) win 100 <mss 70000>\n", 1, 28, "out of range");
    at(
        "+0 < . 1:1(0) ack 4294967296 win 1\n",
        1,
        19,
        "out of range",
    );
    at(
        "+0 write(3, ..., 99999999999999999999) = 1\n",
        1,
        18,
        "too large",
    );
}

#[test]
fn options_after_events_and_commands_in_the_middle() {
    at(
        "0 close(3) = 0\n--mss=1000\n",
        2,
        1,
        "before the first event",
    );
    at(
        "`a`\n0 close(3) = 0\n`b`\n+0 close(4) = 0\n",
        4,
        1,
        "untimed command at line 3",
    );
}

#[test]
fn columns_count_characters_and_tabs() {
    // A tab and a two-byte character each count as one column.
    at("// é\n\t+0 > Z 1:1(0)\n", 2, 7, "expected TCP flags");
    at(
        "0 close(3) = 0\n/* é */ +0 > . 1:1(0) ack 1 <sack 1>\n",
        2,
        36,
        "expected `:`",
    );
}

#[test]
fn errors_on_unknown_event_kind() {
    at("+0 ! something\n", 1, 4, "expected a packet");
}

#[test]
fn prologue_and_defines_parse() {
    let s = parse_script(
        "t.pkt",
        "--tolerance_usecs=10000\n--strict_segments // note\n-D TFO_COOKIE=abcd\n\
         `../common/defaults.sh`\n0 close(3) = 0\n`/tmp/sysctl_restore_${PPID}.sh`\n",
    )
    .unwrap();
    assert_eq!(s.option("tolerance_usecs"), Some(Some("10000")));
    assert_eq!(s.option("strict_segments"), Some(None));
    assert_eq!(s.defines(), vec![("TFO_COOKIE", "abcd")]);
    assert_eq!(s.events.len(), 1);
    assert!(s.cleanup_command.unwrap().text.contains("restore"));
}
