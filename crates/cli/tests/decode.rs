//! Runs the `shallow` binary on testdata/linux-tcp.pcap, a capture of Linux TCP traffic
//! between network namespaces (IPv4 and IPv6, SACK, timestamps, window scaling, ICMP
//! frag-needed and packet-too-big), and checks its output.

use std::path::PathBuf;
use std::process::Command;

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata/linux-tcp.pcap")
}

fn shallow(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_shallow"))
        .args(args)
        .output()
        .expect("run shallow");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("utf8"),
        String::from_utf8(out.stderr).expect("utf8"),
    )
}

/// The first line is the client's SYN, tcpdump-style: relative seq 0 and Linux's SYN options.
#[test]
fn first_line_is_syn_with_linux_options() {
    let (ok, out, err) = shallow(&["decode", testdata().to_str().unwrap()]);
    assert!(ok, "{err}");
    let first = out.lines().next().expect("a line");
    assert!(first.contains(" IP 10.213.1.1."), "{first}");
    // The client asks for ECN (RFC 3168 §6.1.1): SYN with ECE and CWR.
    assert!(first.contains(": Flags [SEW], seq 0, win "), "{first}");
    assert!(
        first.contains("options [mss 1460,sackOK,TS val ") && first.contains(" ecr 0,nop,wscale "),
        "{first}"
    );
    assert!(first.ends_with("length 0"), "{first}");
    let second = out.lines().nth(1).unwrap();
    assert!(
        second.contains("Flags [S.E], seq 0, ack 1, win "),
        "{second}"
    );
}

/// Every frame decodes: no undecodable line, one line per frame, both IP versions present,
/// SACK blocks printed relative to the peer's ISN, ICMP lines with the MTU.
#[test]
fn every_packet_decodes() {
    let (ok, out, err) = shallow(&["decode", testdata().to_str().unwrap()]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() > 100);
    for l in &lines {
        assert!(
            !l.contains("undecodable") && !l.contains("unreadable"),
            "{l}"
        );
    }
    assert!(lines
        .iter()
        .any(|l| l.contains(" IP6 ") && l.contains("Flags [SEW]")));
    assert!(lines
        .iter()
        .any(|l| l.contains(" IP6 ") && l.contains("Flags [S.E]")));
    let sack = lines
        .iter()
        .find(|l| l.contains(",sack 1 {"))
        .expect("a SACK line");
    // Relative SACK edges are small numbers within the 400 kB transfer.
    let inner = sack
        .split("sack 1 {")
        .nth(1)
        .unwrap()
        .split('}')
        .next()
        .unwrap();
    let (l, r) = inner.split_once(':').unwrap();
    let (l, r): (u32, u32) = (l.parse().unwrap(), r.parse().unwrap());
    assert!(l < r && r <= 400_001, "{sack}");
    assert!(lines
        .iter()
        .any(|l| l.contains("ICMP unreachable - need to frag (mtu 1400)")));
    assert!(lines
        .iter()
        .any(|l| l.contains("ICMP6, packet too big, mtu 1400")));
    assert!(lines.iter().any(|l| l.contains("Flags [F.]")));
    assert!(lines
        .iter()
        .any(|l| l.contains("Flags [P.]") || l.contains("Flags [.], seq ")));
}

/// `--json` prints one object per frame with the decoded fields.
#[test]
fn json_lines() {
    let (ok, out, err) = shallow(&["decode", "--json", testdata().to_str().unwrap()]);
    assert!(ok, "{err}");
    let (_, text, _) = shallow(&["decode", testdata().to_str().unwrap()]);
    assert_eq!(out.lines().count(), text.lines().count());
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["frame"], 1);
    assert_eq!(first["ip"]["version"], 4);
    assert_eq!(first["ip"]["df"], true);
    assert_eq!(first["tcp"]["flags"], "SEW");
    assert_eq!(first["tcp"]["rel_seq"], 0);
    assert_eq!(first["tcp"]["options"][0]["kind"], "mss");
    assert_eq!(first["tcp"]["options"][0]["value"], 1460);
    for l in out.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert!(v.get("error").is_none(), "{l}");
        assert!(v.get("tcp").is_some() || v.get("icmp").is_some(), "{l}");
    }
}

/// A file that is not a capture is an error with a message, not a panic; garbage after a
/// valid header gives a clear line, not an abort.
#[test]
fn bad_files() {
    let dir = std::env::temp_dir().join(format!("shallow-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pcap");
    std::fs::write(&junk, b"this is not a capture at all").unwrap();
    let (ok, _, err) = shallow(&["decode", junk.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("not a pcap"), "{err}");

    // A valid pcap header (raw IP link type) followed by one record of garbage bytes.
    let mut f = Vec::new();
    f.extend_from_slice(&0xa1b2c3d4u32.to_le_bytes());
    f.extend_from_slice(&2u16.to_le_bytes());
    f.extend_from_slice(&4u16.to_le_bytes());
    f.extend_from_slice(&0i32.to_le_bytes());
    f.extend_from_slice(&0u32.to_le_bytes());
    f.extend_from_slice(&65535u32.to_le_bytes());
    f.extend_from_slice(&101u32.to_le_bytes()); // LINKTYPE_RAW
    for payload in [&[0x45u8, 0, 0, 99][..], &[0x60, 1, 2][..]] {
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&0u32.to_le_bytes());
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(payload);
    }
    let bad = dir.join("bad.pcap");
    std::fs::write(&bad, &f).unwrap();
    let (ok, out, err) = shallow(&["decode", bad.to_str().unwrap()]);
    assert!(ok, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].contains("[undecodable: IP: truncated packet]"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains("[undecodable: IP: truncated packet]"),
        "{}",
        lines[1]
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// `--help` lists exactly the commands that exist, and none that do not yet.
#[test]
fn help_lists_existing_commands() {
    let (ok, out, _) = shallow(&["--help"]);
    assert!(ok);
    let commands: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        commands,
        ["bench", "decode", "drill", "lab", "nc", "proxy", "netns", "help"],
        "{out}"
    );
}

/// The frames of the test capture: (timestamp, orig_len, Ethernet frame).
fn frames() -> Vec<(std::time::Duration, u32, Vec<u8>)> {
    let f = std::fs::File::open(testdata()).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(f).unwrap();
    let mut out = Vec::new();
    while let Some(p) = r.next_raw_packet() {
        let p = p.unwrap();
        let ts = std::time::Duration::new(u64::from(p.ts_sec), p.ts_frac * 1000);
        out.push((ts, p.orig_len, p.data.into_owned()));
    }
    out
}

/// The same packets behind other link layers (raw IP, Linux cooked v1 and v2) and in a
/// pcapng file decode to the same lines as the Ethernet pcap.
#[test]
fn link_types_and_pcapng_decode_the_same() {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::interface_description::{
        InterfaceDescriptionBlock, InterfaceDescriptionOption,
    };
    use pcap_file::pcapng::PcapNgWriter;
    use pcap_file::DataLink;

    let (ok, want, err) = shallow(&["decode", testdata().to_str().unwrap()]);
    assert!(ok, "{err}");
    let frames = frames();
    let dir = std::env::temp_dir().join(format!("shallow-cli-links-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rewrap = |link: DataLink, name: &str, wrap: &dyn Fn(&[u8]) -> Vec<u8>| {
        let path = dir.join(name);
        let header = PcapHeader {
            datalink: link,
            snaplen: 65535,
            ..Default::default()
        };
        let mut w = PcapWriter::with_header(std::fs::File::create(&path).unwrap(), header).unwrap();
        for (ts, orig, data) in &frames {
            let d = wrap(data);
            let orig = orig - 14 + (d.len() as u32 + 14 - data.len() as u32);
            w.write_packet(&PcapPacket::new(*ts, orig, &d)).unwrap();
        }
        path
    };
    let raw = rewrap(DataLink::RAW, "raw.pcap", &|d| d[14..].to_vec());
    let sll = rewrap(DataLink::LINUX_SLL, "sll.pcap", &|d| {
        let mut v = vec![0, 4, 0, 1, 0, 6, 1, 2, 3, 4, 5, 6, 0, 0, d[12], d[13]];
        v.extend_from_slice(&d[14..]);
        v
    });
    let sll2 = rewrap(DataLink::LINUX_SLL2, "sll2.pcap", &|d| {
        let mut v = vec![
            d[12], d[13], 0, 0, 0, 0, 0, 7, 0, 1, 4, 6, 1, 2, 3, 4, 5, 6, 0, 0,
        ];
        v.extend_from_slice(&d[14..]);
        v
    });
    let ng = dir.join("eth.pcapng");
    {
        let mut w = PcapNgWriter::new(std::fs::File::create(&ng).unwrap()).unwrap();
        w.write_pcapng_block(InterfaceDescriptionBlock {
            linktype: DataLink::ETHERNET,
            snaplen: 0,
            options: vec![InterfaceDescriptionOption::IfTsResol(9)],
        })
        .unwrap();
        for (ts, orig, data) in &frames {
            w.write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: *ts,
                original_len: *orig,
                data: data.as_slice().into(),
                options: vec![],
            })
            .unwrap();
        }
    }
    for path in [raw, sll, sll2, ng] {
        let (ok, got, err) = shallow(&["decode", path.to_str().unwrap()]);
        assert!(ok, "{}: {err}", path.display());
        assert_eq!(got, want, "{}", path.display());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The TCP lines match tcpdump's own decode of the same file word for word, except the SYNs'
/// sequence numbers (tcpdump prints a SYN's ISN absolute, we print it relative: 0).
/// Skipped (with a printed reason) when tcpdump is not installed.
#[test]
fn tcp_lines_match_tcpdump() {
    let Ok(td) = Command::new("tcpdump")
        .env("TZ", "UTC")
        .args(["-n", "-r"])
        .arg(testdata())
        .output()
    else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED tcp_lines_match_tcpdump: tcpdump not found"
        );
        return;
    };
    assert!(td.status.success());
    let theirs = String::from_utf8(td.stdout).unwrap();
    let (ok, ours, err) = shallow(&["decode", testdata().to_str().unwrap()]);
    assert!(ok, "{err}");
    let theirs: Vec<&str> = theirs.lines().collect();
    let ours: Vec<&str> = ours.lines().collect();
    assert_eq!(theirs.len(), ours.len());
    let mut compared = 0;
    for (t, o) in theirs.iter().zip(&ours) {
        if !t.contains(": Flags [") {
            continue;
        }
        if t.contains("Flags [S") {
            // Compare everything but the numbers after "seq " and "ack ".
            let strip = |l: &str| -> String {
                l.split(", ")
                    .filter(|f| !f.starts_with("seq ") && !f.starts_with("ack "))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            assert_eq!(strip(t), strip(o));
        } else {
            assert_eq!(t, o);
        }
        compared += 1;
    }
    assert!(compared > 200, "{compared}");
}
