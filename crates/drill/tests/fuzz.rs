//! Random and mutated input never makes the parsers panic (errors are fine).

use proptest::prelude::*;
use shallow_drill::{env, parse_script, python};

/// A script of our own that exercises most of the grammar; mutations of it reach deep
/// into the parser.
const SEED: &str = r#"--tolerance_usecs=10000
`../common/defaults.sh
sysctl -q net.ipv4.tcp_sack=1`
    0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
   +0 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0
   +0 bind(3, ..., ...) = 0
   +0 listen(3, 1) = 0
   +0 < S 0:0(0) win 32792 <mss 1000,sackOK,TS val 1 ecr 0,nop,wscale 7>
   +0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 8,FO abcd1234,nop,nop>
  +.1 < [ect0] . 1:1(0) ack 1 win 257 <sack 1:2 3:4,nop,nop>
   +0 accept(3, ..., ...) = 4
+.1...0.300 write(4, ..., 1000) = -1 EAGAIN (Resource temporarily unavailable)
   +0 sendmsg(4, {msg_name(...)=..., msg_iov(1)=[{..., 10}], msg_flags=0}, MSG_MORE|0x10) = 10
+.3~+.31 > P. 1:1001(1000) ack 1 <...>
   * < icmp unreachable frag_needed mtu 1200 [1:1001(1000)]
   +0 %{ assert 1 <= tcpi_x <= 3, 'x=%d' % tcpi_x }%
   +0 `nstat | grep TcpExtFoo > /dev/null`
   /* block */ +0 close(4) = 0 // done
"#;

fn mutate(seed: &str, edits: &[(usize, u8, u8)]) -> String {
    let mut b = seed.as_bytes().to_vec();
    for &(pos, kind, byte) in edits {
        if b.is_empty() {
            b.push(byte);
            continue;
        }
        let p = pos % b.len();
        match kind % 3 {
            0 => b[p] = byte,
            1 => {
                b.remove(p);
            }
            _ => b.insert(p, byte),
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn interesting_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        prop::sample::select(b"<>[](){}.,:;=+-*~`%|\"\\/ \n\t0123456789xSFRP.AEWUabz_".to_vec()),
        any::<u8>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(s in "\\PC{0,200}") {
        let _ = parse_script("f.pkt", &s);
        let _ = env::parse_command(&s);
        let _ = python::check(&s, &|_| Some(1));
    }

    #[test]
    fn mutated_script_never_panics(edits in prop::collection::vec((any::<usize>(), any::<u8>(), interesting_byte()), 1..8)) {
        let text = mutate(SEED, &edits);
        if let Ok(script) = parse_script("f.pkt", &text) {
            for ev in &script.events {
                match &ev.kind {
                    shallow_drill::EventKind::Command(c) => { let _ = env::parse_command(c); }
                    shallow_drill::EventKind::Code(c) => { let _ = python::check(c, &|_| Some(2)); }
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn mutated_python_never_panics(edits in prop::collection::vec((any::<usize>(), any::<u8>(), interesting_byte()), 1..6)) {
        let code = mutate("x = 3; x += 1\nassert (x & 4) != 0 and not x < -1 or x // 2 % 3 == 1, 'x=%d' % x\n", &edits);
        let _ = python::check(&code, &|_| Some(i64::MAX));
    }
}

#[test]
fn seed_parses() {
    let s = parse_script("seed.pkt", SEED).unwrap();
    assert_eq!(s.events.len(), 15);
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    let deep = format!("0 f({}1{}) = 0\n", "[".repeat(10_000), "]".repeat(10_000));
    let e = parse_script("deep.pkt", &deep).unwrap_err();
    assert!(e.message.contains("nested too deeply"), "{e}");
    let deep_py = format!("assert {}1{}", "(".repeat(10_000), ")".repeat(10_000));
    assert!(python::check(&deep_py, &|_| None).is_err());
    let deep_not = format!("assert {}1", "not ".repeat(10_000));
    assert!(python::check(&deep_not, &|_| None).is_err());
    let deep_neg = format!("assert {}1", "-".repeat(10_000));
    assert!(python::check(&deep_neg, &|_| None).is_err());
}
