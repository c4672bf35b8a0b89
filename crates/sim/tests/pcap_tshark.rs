//! The capture is a classic pcap that tshark reads: right packet count, IPv4/TCP decoded,
//! nanosecond timestamps.

use std::process::Command;

use shallow_sim::capture::{CaptureOut, CapturePoint};
use shallow_sim::testing::{Sink, Source, SourceConfig, TestEndpoint};
use shallow_sim::{HostConfig, Instant, LinkSpec, TopologyBuilder};

fn capture(point: CapturePoint) -> (Vec<u8>, u64) {
    let mut b = TopologyBuilder::new(1);
    let s = b.sender(
        HostConfig {
            capture: Some((point, CaptureOut::Memory(Vec::new()))),
            ..HostConfig::default()
        },
        TestEndpoint::Source(Source::new(SourceConfig {
            count: 5,
            segs: 3,
            ..SourceConfig::default()
        })),
    );
    b.receiver(HostConfig::default(), TestEndpoint::Sink(Sink::default()));
    b.forward("delay=1ms".parse::<LinkSpec>().unwrap());
    let mut sim = b.build().unwrap();
    sim.run_until(Instant::from_secs(1));
    let wire = sim.host_stats(s).wire_packets;
    match sim.finish_capture(s) {
        Some(CaptureOut::Memory(v)) => (v, wire),
        _ => panic!("no capture"),
    }
}

#[test]
fn pcap_header_is_nanosecond_raw() {
    let (bytes, _) = capture(CapturePoint::HostTx);
    // Little-endian nanosecond magic a1b23c4d, version 2.4, linktype 101 (LINKTYPE_RAW).
    assert_eq!(&bytes[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
    assert_eq!(&bytes[4..8], &[2, 0, 4, 0]);
    assert_eq!(&bytes[20..24], &101u32.to_le_bytes());
    // First record: 24-byte file header, then ts_sec, ts_nsec, incl_len, orig_len.
    let incl = u32::from_le_bytes(bytes[32..36].try_into().unwrap());
    assert_eq!(incl as usize, 40 + 3 * 1448); // a whole TSO super-segment, as tcpdump sees it
}

#[test]
fn tshark_reads_capture() {
    if Command::new("tshark").arg("--version").output().is_err() {
        eprintln!("SKIPPED tshark_reads_capture: tshark is not installed");
        return;
    }
    for (point, name) in [
        (CapturePoint::HostTx, "hosttx"),
        (CapturePoint::Wire, "wire"),
    ] {
        let (bytes, wire) = capture(point);
        let path =
            std::env::temp_dir().join(format!("shallow-sim-{}-{name}.pcap", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let out = Command::new("tshark")
            .arg("-r")
            .arg(&path)
            .args([
                "-T",
                "fields",
                "-e",
                "frame.len",
                "-e",
                "tcp.seq_raw",
                "-e",
                "tcp.len",
            ])
            .args(["-o", "tcp.check_checksum:TRUE"])
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let expect = if point == CapturePoint::HostTx {
            5
        } else {
            wire as usize
        };
        assert_eq!(lines.len(), expect, "{text}");
        for l in &lines {
            let f: Vec<&str> = l.split('\t').collect();
            assert_eq!(f.len(), 3, "{l}");
            assert!(!f[1].is_empty(), "tshark did not decode TCP: {l}");
        }
        if point == CapturePoint::Wire {
            // Wire segments are contiguous in sequence space.
            let seqs: Vec<u64> = lines
                .iter()
                .map(|l| l.split('\t').nth(1).unwrap().parse().unwrap())
                .collect();
            for w in seqs.windows(2) {
                assert_eq!(w[1] - w[0], 1448);
            }
        }
    }
}
