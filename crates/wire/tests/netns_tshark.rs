//! Cross-check of `shallow-wire` against an independent decoder (Wireshark's `tshark`) on
//! real Linux traffic.
//!
//! As root, the test builds three network namespaces `A — R — B` joined by veth pairs (R
//! forwards; its link towards B has a 1400-byte MTU and, when `tc` supports it, a `tbf` shaper
//! with a small queue, so that A's TCP meets real loss and B sends SACK blocks, and A's
//! full-size packets get ICMP "fragmentation needed" / ICMPv6 "packet too big" back). It
//! transfers data over TCP with `socat` over IPv4 and IPv6 (Linux uses SACK, timestamps and
//! window scaling by default; A also asks for ECN), sends oversized UDP datagrams to a closed
//! port (IP fragments, ICMP port unreachable), captures everything on A's interface with
//! `tcpdump`, then decodes
//! every frame with `shallow_wire` and with `tshark -T fields` and asserts that every IP header
//! field, TCP header field and TCP option agrees.
//!
//! Traffic stays inside the namespaces (private addresses that exist only there). The
//! namespaces are deleted by a drop guard, also on failure. The test skips with a printed
//! reason when not root or when `ip`, `tc`, `tcpdump`, `tshark` or `socat` is missing, unless
//! `SHALLOW_REQUIRE_TUN=1`, in which case it fails.
//!
//! With `SHALLOW_WRITE_TESTDATA=1` it also writes `testdata/linux-tcp.pcap`: the capture's
//! TCP frames cut to 128 bytes each (a snap length), small enough to keep in the repository.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shallow_wire::{
    Icmpv4Repr, Icmpv6Repr, IpPacket, TcpOption, TcpPacket, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_TCP,
};

/// Skips (prints why and returns) or, with `SHALLOW_REQUIRE_TUN=1`, fails.
macro_rules! skip {
    ($($arg:tt)*) => {{
        let why = format!($($arg)*);
        if std::env::var("SHALLOW_REQUIRE_TUN").as_deref() == Ok("1") {
            panic!("SHALLOW_REQUIRE_TUN=1 but: {why}");
        }
        say(&format!("SKIPPED netns_tshark_cross_check: {why}"));
        return;
    }};
}

/// Prints to stderr past libtest's output capture, so a skip reason or the comparison's
/// figures are visible in a normal `cargo test` run.
fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn in_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// Runs a command and panics with its stderr if it fails.
fn run(args: &[&str]) {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .expect("spawn");
    assert!(
        out.status.success(),
        "{:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a command; true on success.
fn try_run(args: &[&str]) -> bool {
    Command::new(args[0])
        .args(&args[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Deletes the namespaces (and so the veths), stops child processes and removes the work
/// directory, whatever happens to the test.
struct Guard {
    namespaces: Vec<String>,
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ns_cmd(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).args(args);
    c
}

fn wait_timeout(c: &mut Child, limit: Duration, what: &str) {
    let start = Instant::now();
    loop {
        match c.try_wait().expect("wait") {
            Some(st) => {
                assert!(st.success(), "{what} exited with {st}");
                return;
            }
            None if start.elapsed() > limit => {
                let _ = c.kill();
                panic!("{what} did not finish within {limit:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Our decode of one frame, as the strings tshark prints (so both sides compare as text
/// after normalisation).
#[derive(Debug, Default)]
struct Ours {
    fields: HashMap<&'static str, String>,
}

impl Ours {
    fn set(&mut self, k: &'static str, v: impl ToString) {
        self.fields.insert(k, v.to_string());
    }
}

fn decode_ours(frame: &[u8]) -> Ours {
    let mut o = Ours::default();
    if frame.len() < 14 || !matches!(u16::from_be_bytes([frame[12], frame[13]]), 0x0800 | 0x86dd) {
        return o;
    }
    let ip = IpPacket::parse(&frame[14..]).expect("Linux sent an IP packet we cannot parse");
    match &ip {
        IpPacket::V4(p) => {
            assert!(
                p.checksum_valid(),
                "IPv4 header checksum (computed by Linux) must verify"
            );
            o.set("ip.hdr_len", p.header_len());
            o.set("ip.dsfield", p.tos());
            o.set("ip.dsfield.ecn", p.ecn().bits());
            o.set("ip.len", p.total_len());
            o.set("ip.id", p.ident());
            o.set("ip.flags.df", u8::from(p.df()));
            o.set("ip.flags.mf", u8::from(p.mf()));
            // In 8-byte units, as the field is stored and as tshark 4.0 prints it.
            o.set("ip.frag_offset", p.frag_offset() / 8);
            o.set("ip.ttl", p.ttl());
            o.set("ip.proto", p.protocol());
            o.set("ip.src", p.src());
            o.set("ip.dst", p.dst());
        }
        IpPacket::V6(p) => {
            o.set("ipv6.tclass", p.traffic_class());
            o.set("ipv6.tclass.ecn", p.ecn().bits());
            o.set("ipv6.flow", p.flow_label());
            o.set("ipv6.plen", p.payload_len());
            o.set("ipv6.nxt", p.next_header());
            o.set("ipv6.hlim", p.hop_limit());
            o.set("ipv6.src", p.src());
            o.set("ipv6.dst", p.dst());
            if let Some(f) = p.fragment() {
                o.set("ipv6.fraghdr.offset", f.offset / 8);
                o.set("ipv6.fraghdr.more", u8::from(f.more));
                o.set("ipv6.fraghdr.ident", f.ident);
            }
        }
    }
    if ip.is_fragment()
        && match &ip {
            IpPacket::V4(p) => p.frag_offset() != 0,
            IpPacket::V6(p) => p.fragment().is_some_and(|f| f.offset != 0),
        }
    {
        return o; // no upper-layer header in a non-first fragment
    }
    match ip.protocol() {
        IPPROTO_TCP => {
            let t = TcpPacket::new_checked(ip.payload()).expect("TCP header");
            o.set("tcp.srcport", t.src_port());
            o.set("tcp.dstport", t.dst_port());
            o.set("tcp.seq_raw", t.seq());
            o.set("tcp.ack_raw", t.ack());
            o.set("tcp.hdr_len", t.header_len());
            o.set("tcp.flags", t.flags().bits());
            o.set("tcp.window_size_value", t.window());
            o.set("tcp.checksum", t.checksum());
            o.set("tcp.urgent_pointer", t.urgent());
            o.set("tcp.len", t.payload().len());
            let (mut kinds, mut mss, mut ws, mut le, mut re, mut tsv, mut tse) =
                (vec![], vec![], vec![], vec![], vec![], vec![], vec![]);
            for opt in t.options() {
                let opt = opt.expect("Linux sends well-formed options");
                kinds.push(opt.kind().to_string());
                match opt {
                    TcpOption::Mss(m) => mss.push(m.to_string()),
                    TcpOption::WindowScale(s) => ws.push(s.to_string()),
                    TcpOption::Sack(s) => {
                        for (l, r) in s.iter() {
                            le.push(l.to_string());
                            re.push(r.to_string());
                        }
                    }
                    TcpOption::Timestamps { tsval, tsecr } => {
                        tsv.push(tsval.to_string());
                        tse.push(tsecr.to_string());
                    }
                    _ => {}
                }
            }
            o.set("tcp.option_kind", kinds.join(","));
            o.set("tcp.options.mss_val", mss.join(","));
            o.set("tcp.options.wscale.shift", ws.join(","));
            o.set("tcp.options.sack_le", le.join(","));
            o.set("tcp.options.sack_re", re.join(","));
            o.set("tcp.options.timestamp.tsval", tsv.join(","));
            o.set("tcp.options.timestamp.tsecr", tse.join(","));
        }
        IPPROTO_ICMP => {
            let r = Icmpv4Repr::parse(ip.payload()).expect("ICMP from Linux verifies");
            let (t, c) = r.type_code();
            o.set("icmp.type", t);
            o.set("icmp.code", c);
            if let Icmpv4Repr::DstUnreachable {
                code: 4,
                next_hop_mtu,
                ..
            } = r
            {
                o.set("icmp.mtu", next_hop_mtu);
            }
        }
        IPPROTO_ICMPV6 => {
            let IpPacket::V6(p) = &ip else { unreachable!() };
            let r = Icmpv6Repr::parse(ip.payload(), p.src(), p.dst())
                .expect("ICMPv6 from Linux verifies with the pseudo-header");
            let (t, c) = r.type_code();
            o.set("icmpv6.type", t);
            o.set("icmpv6.code", c);
            if let Icmpv6Repr::PacketTooBig { mtu, .. } = r {
                o.set("icmpv6.mtu", mtu);
            }
        }
        _ => {}
    }
    o
}

/// The fields asked of tshark, in column order.
const FIELDS: &[&str] = &[
    "ip.hdr_len",
    "ip.dsfield",
    "ip.dsfield.ecn",
    "ip.len",
    "ip.id",
    "ip.flags.df",
    "ip.flags.mf",
    "ip.frag_offset",
    "ip.ttl",
    "ip.proto",
    "ip.src",
    "ip.dst",
    "ipv6.tclass",
    "ipv6.tclass.ecn",
    "ipv6.flow",
    "ipv6.plen",
    "ipv6.nxt",
    "ipv6.hlim",
    "ipv6.src",
    "ipv6.dst",
    "ipv6.fraghdr.offset",
    "ipv6.fraghdr.more",
    "ipv6.fraghdr.ident",
    "tcp.srcport",
    "tcp.dstport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.hdr_len",
    "tcp.flags",
    "tcp.window_size_value",
    "tcp.checksum",
    "tcp.urgent_pointer",
    "tcp.len",
    "tcp.option_kind",
    "tcp.options.mss_val",
    "tcp.options.wscale.shift",
    "tcp.options.sack_le",
    "tcp.options.sack_re",
    "tcp.options.timestamp.tsval",
    "tcp.options.timestamp.tsecr",
    "icmp.type",
    "icmp.code",
    "icmp.mtu",
    "icmpv6.type",
    "icmpv6.code",
    "icmpv6.mtu",
];

/// Fields whose later occurrences belong to a packet quoted inside an ICMP error: only the
/// first (outer) one is compared.
fn first_only(field: &str) -> bool {
    field.starts_with("ip.") || field.starts_with("ipv6.") || field.starts_with("icmp")
}

/// Normalises one tshark value: hex to decimal, booleans to 0/1.
fn norm(v: &str) -> String {
    let v = v.trim();
    match v {
        "True" => return "1".into(),
        "False" => return "0".into(),
        _ => {}
    }
    if let Some(h) = v.strip_prefix("0x") {
        if let Ok(n) = u64::from_str_radix(h, 16) {
            return n.to_string();
        }
    }
    v.to_string()
}

fn tshark_fields(pcap: &Path) -> Vec<HashMap<&'static str, String>> {
    let mut cmd = Command::new("tshark");
    cmd.args(["-n", "-r"]).arg(pcap).args([
        "-o",
        "tcp.relative_sequence_numbers:FALSE",
        "-o",
        "tcp.analyze_sequence_numbers:FALSE",
        "-o",
        "ip.defragment:FALSE",
        "-o",
        "ipv6.defragment:FALSE",
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
        "-e",
        "frame.number",
    ]);
    for f in FIELDS {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf8");
    text.lines()
        .map(|line| {
            let cols: Vec<&str> = line.split('\t').collect();
            let mut m = HashMap::new();
            for (i, f) in FIELDS.iter().enumerate() {
                let raw = cols.get(i + 1).copied().unwrap_or("");
                if raw.is_empty() {
                    continue;
                }
                let vals: Vec<String> = raw.split(',').map(norm).collect();
                let v = if first_only(f) {
                    vals[0].clone()
                } else {
                    vals.join(",")
                };
                m.insert(*f, v);
            }
            m
        })
        .collect()
}

/// Writes a small excerpt of the capture into a pcap at `path`, each frame cut to 128 bytes
/// (a snap length; headers stay whole): per IP version the first 130 TCP frames (handshake,
/// slow start, the first losses with their SACK blocks) and the last 6 (FIN exchange), and
/// every ICMP frame (frag-needed, packet-too-big, port unreachable).
fn write_testdata(path: &Path, frames: &[(Duration, u32, Vec<u8>)]) {
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
    use pcap_file::DataLink;
    const SNAP: usize = 128;
    const HEAD: usize = 130;
    const TAIL: usize = 6;
    let kind = |data: &[u8]| -> Option<(u8, u8)> {
        let ip = IpPacket::parse(data.get(14..)?).ok()?;
        let v = if matches!(ip, IpPacket::V4(_)) { 4 } else { 6 };
        Some((v, ip.protocol()))
    };
    let mut keep = vec![false; frames.len()];
    for v in [4u8, 6] {
        let tcp: Vec<usize> = (0..frames.len())
            .filter(|&i| kind(&frames[i].2) == Some((v, IPPROTO_TCP)))
            .collect();
        for (n, &i) in tcp.iter().enumerate() {
            if n < HEAD || n + TAIL >= tcp.len() {
                keep[i] = true;
            }
        }
    }
    for (i, f) in frames.iter().enumerate() {
        if let Some((_, IPPROTO_ICMP | IPPROTO_ICMPV6)) = kind(&f.2) {
            keep[i] = true;
        }
    }
    let header = PcapHeader {
        snaplen: SNAP as u32,
        datalink: DataLink::ETHERNET,
        endianness: pcap_file::Endianness::Little,
        ..Default::default()
    };
    let f = std::fs::File::create(path).expect("create testdata");
    let mut w = PcapWriter::with_header(f, header).expect("pcap header");
    let mut sacks = 0;
    for ((ts, orig, data), _) in frames.iter().zip(&keep).filter(|(_, k)| **k) {
        let ours = decode_ours(data);
        if ours
            .fields
            .get("tcp.options.sack_le")
            .is_some_and(|v| !v.is_empty())
        {
            sacks += 1;
        }
        let cut = &data[..data.len().min(SNAP)];
        w.write_packet(&PcapPacket::new(*ts, *orig, cut))
            .expect("write packet");
    }
    assert!(sacks > 0, "the excerpt should contain SACK blocks");
}

#[test]
fn netns_tshark_cross_check() {
    if !is_root() {
        skip!("not root (needs network namespaces)");
    }
    for tool in ["ip", "tc", "tcpdump", "tshark", "socat"] {
        if !in_path(tool) {
            skip!("{tool} not found in PATH");
        }
    }
    let pid = std::process::id();
    let (na, nr, nb) = (
        format!("shw{pid}a"),
        format!("shw{pid}r"),
        format!("shw{pid}b"),
    );
    let (va, vra, vrb, vb) = (
        format!("sa{pid}"),
        format!("sra{pid}"),
        format!("srb{pid}"),
        format!("sb{pid}"),
    );
    let dir = std::env::temp_dir().join(format!("shallow-wire-netns-{pid}"));
    std::fs::create_dir_all(&dir).expect("work dir");
    let mut g = Guard {
        namespaces: vec![],
        children: vec![],
        dir: dir.clone(),
    };
    for ns in [&na, &nr, &nb] {
        if !try_run(&["ip", "netns", "add", ns]) {
            skip!("cannot create network namespace {ns}");
        }
        g.namespaces.push(ns.clone());
        run(&["ip", "-n", ns, "link", "set", "lo", "up"]);
    }
    run(&[
        "ip", "link", "add", &va, "netns", &na, "type", "veth", "peer", "name", &vra, "netns", &nr,
    ]);
    run(&[
        "ip", "link", "add", &vrb, "netns", &nr, "type", "veth", "peer", "name", &vb, "netns", &nb,
    ]);
    // A — R: 10.213.1.0/24, fd00:213:1::/64; R — B: 10.213.2.0/24, fd00:213:2::/64.
    for (ns, dev, v4, v6) in [
        (&na, &va, "10.213.1.1/24", "fd00:213:1::1/64"),
        (&nr, &vra, "10.213.1.2/24", "fd00:213:1::2/64"),
        (&nr, &vrb, "10.213.2.2/24", "fd00:213:2::2/64"),
        (&nb, &vb, "10.213.2.1/24", "fd00:213:2::1/64"),
    ] {
        run(&["ip", "-n", ns, "addr", "add", v4, "dev", dev]);
        run(&["ip", "-n", ns, "addr", "add", v6, "dev", dev, "nodad"]);
        run(&["ip", "-n", ns, "link", "set", dev, "up"]);
    }
    run(&[
        "ip",
        "-n",
        &na,
        "route",
        "add",
        "default",
        "via",
        "10.213.1.2",
    ]);
    run(&[
        "ip",
        "-n",
        &nb,
        "route",
        "add",
        "default",
        "via",
        "10.213.2.2",
    ]);
    run(&[
        "ip",
        "-n",
        &na,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:213:1::2",
    ]);
    run(&[
        "ip",
        "-n",
        &nb,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:213:2::2",
    ]);
    run(&[
        "ip",
        "netns",
        "exec",
        &nr,
        "sh",
        "-c",
        "echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv6/conf/all/forwarding",
    ]);
    // A requests ECN (RFC 3168): SYN with ECE+CWR, then ECT(0) data, so the ECN bits and
    // flags are compared too (B accepts with Linux's default tcp_ecn=2).
    run(&[
        "ip",
        "netns",
        "exec",
        &na,
        "sh",
        "-c",
        "echo 1 > /proc/sys/net/ipv4/tcp_ecn",
    ]);
    // Smaller MTU on R's side of the R—B link only: B still advertises MSS 1460, so A's
    // full-size DF packets draw ICMP frag-needed / packet-too-big from R (RFC 1191, 8201).
    run(&["ip", "-n", &nr, "link", "set", &vrb, "mtu", "1400"]);
    // Keep A's segments at wire size (no TSO super-packets in the capture).
    let _ = try_run(&["ip", "-n", &na, "link", "set", &va, "gso_max_segs", "1"]);
    // Loss on R's egress towards B: netem if the kernel has it, else a tbf with a small queue.
    let loss = if try_run(&[
        "ip", "netns", "exec", &nr, "tc", "qdisc", "add", "dev", &vrb, "root", "netem", "loss",
        "3%",
    ]) {
        "netem loss 3%"
    } else if try_run(&[
        "ip", "netns", "exec", &nr, "tc", "qdisc", "add", "dev", &vrb, "root", "tbf", "rate",
        "20mbit", "burst", "4500", "limit", "9000",
    ]) {
        "tbf rate 20mbit limit 9000 (netem unavailable)"
    } else {
        "none (neither netem nor tbf available)"
    };
    say(&format!("netns_tshark: loss on R->B: {loss}"));

    let pcap = dir.join("cap.pcap");
    let mut td = ns_cmd(
        &na,
        &[
            "tcpdump",
            "-i",
            &va,
            "-n",
            "-U",
            "--immediate-mode",
            "-Z",
            "root",
        ],
    )
    .arg("-w")
    .arg(&pcap)
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn tcpdump");
    let mut err = BufReader::new(td.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("tcpdump stderr");
    assert!(line.contains("listening"), "tcpdump did not start: {line}");
    g.children.push(td);

    let data = dir.join("data");
    let bytes: Vec<u8> = (0..400_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&data, bytes).expect("data file");
    let data_s = data.to_str().expect("path");
    for (listen, connect) in [
        (
            "TCP4-LISTEN:5001,reuseaddr",
            "TCP4:10.213.2.1:5001,retry=50,interval=0.1",
        ),
        (
            "TCP6-LISTEN:5002,reuseaddr",
            "TCP6:[fd00:213:2::1]:5002,retry=50,interval=0.1",
        ),
    ] {
        let srv = ns_cmd(&nb, &["socat", "-u", listen, "GOPEN:/dev/null"])
            .spawn()
            .expect("server");
        g.children.push(srv);
        let gopen = format!("GOPEN:{data_s}");
        let cli = ns_cmd(&na, &["socat", "-u", &gopen, connect])
            .spawn()
            .expect("client");
        g.children.push(cli);
        // Both stay in the guard until they have exited, so a failure kills them.
        let n = g.children.len();
        wait_timeout(
            &mut g.children[n - 1],
            Duration::from_secs(60),
            "socat client",
        );
        wait_timeout(
            &mut g.children[n - 2],
            Duration::from_secs(10),
            "socat server",
        );
        g.children.truncate(n - 2);
    }
    // Oversized UDP datagrams to a closed port: IP fragments, then ICMP port unreachable.
    let big = dir.join("big");
    std::fs::write(&big, vec![0x5au8; 3000]).expect("big");
    let gopen = format!("GOPEN:{}", big.to_str().expect("path"));
    for dst in ["UDP4:10.213.2.1:9", "UDP6:[fd00:213:2::1]:9"] {
        g.children.push(
            ns_cmd(&na, &["socat", "-u", &gopen, dst])
                .spawn()
                .expect("udp"),
        );
        let n = g.children.len();
        wait_timeout(&mut g.children[n - 1], Duration::from_secs(10), "socat udp");
        g.children.truncate(n - 1);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut td = g.children.remove(0); // tcpdump, the only child left
    let _ = Command::new("kill")
        .args(["-INT", &td.id().to_string()])
        .status();
    let _ = td.wait();

    // Read the capture ourselves.
    let f = std::fs::File::open(&pcap).expect("open capture");
    let mut r = pcap_file::pcap::PcapReader::new(f).expect("pcap");
    assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET);
    let mut frames = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.expect("packet");
        frames.push((p.timestamp, p.orig_len, p.data.into_owned()));
    }
    let theirs = tshark_fields(&pcap);
    assert_eq!(
        theirs.len(),
        frames.len(),
        "tshark and pcap-file see the same frame count"
    );

    let mut stats: HashMap<&str, usize> = HashMap::new();
    let mut mismatches = Vec::new();
    for (i, ((_, _, data), t)) in frames.iter().zip(&theirs).enumerate() {
        let ours = decode_ours(data);
        let is_icmp =
            ours.fields.contains_key("icmp.type") || ours.fields.contains_key("icmpv6.type");
        for f in FIELDS {
            // The TCP fields of an ICMP frame belong to the quoted packet, which we do not decode.
            if is_icmp && f.starts_with("tcp.") {
                continue;
            }
            let a = ours.fields.get(f).map(String::as_str).unwrap_or("");
            let b = t.get(f).map(String::as_str).unwrap_or("");
            if a != b {
                mismatches.push(format!("frame {}: {f}: ours {a:?} tshark {b:?}", i + 1));
            }
        }
        let fl = &ours.fields;
        let v6 = fl.contains_key("ipv6.src");
        let v4 = fl.contains_key("ip.src");
        if fl.contains_key("tcp.srcport") {
            *stats.entry(if v6 { "tcp6" } else { "tcp4" }).or_default() += 1;
            if !fl["tcp.options.sack_le"].is_empty() {
                *stats.entry(if v6 { "sack6" } else { "sack4" }).or_default() += 1;
            }
            if !fl["tcp.options.timestamp.tsval"].is_empty() {
                *stats.entry("ts").or_default() += 1;
            }
        } else if is_icmp {
            *stats.entry(if v6 { "icmp6" } else { "icmp4" }).or_default() += 1;
        } else if v4 || v6 {
            *stats.entry("other-ip").or_default() += 1;
        }
        if fl
            .get("ip.dsfield.ecn")
            .or(fl.get("ipv6.tclass.ecn"))
            .is_some_and(|v| v != "0")
        {
            *stats.entry("ect").or_default() += 1;
        }
        if fl.get("icmp.mtu").is_some() || fl.get("icmpv6.mtu").is_some() {
            *stats.entry("ptb").or_default() += 1;
        }
        if fl.get("ip.flags.mf").is_some_and(|v| v == "1") || fl.contains_key("ipv6.fraghdr.offset")
        {
            *stats.entry("fragments").or_default() += 1;
        }
    }
    let mut s: Vec<_> = stats.iter().collect();
    s.sort();
    say(&format!(
        "netns_tshark: compared {} frames with tshark: {s:?}",
        frames.len()
    ));
    assert!(
        mismatches.is_empty(),
        "{} field mismatches, first ones:\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        stats.get("tcp4").copied().unwrap_or(0) > 100,
        "IPv4 TCP traffic captured"
    );
    assert!(
        stats.get("tcp6").copied().unwrap_or(0) > 100,
        "IPv6 TCP traffic captured"
    );
    assert!(
        stats.get("ts").copied().unwrap_or(0) > 100,
        "timestamps seen"
    );
    assert!(
        stats.get("ect").copied().unwrap_or(0) > 100,
        "ECN-capable packets seen"
    );
    assert!(stats.get("icmp4").copied().unwrap_or(0) >= 1, "ICMPv4 seen");
    assert!(stats.get("icmp6").copied().unwrap_or(0) >= 1, "ICMPv6 seen");
    if !loss.starts_with("none") {
        assert!(
            stats.get("sack4").copied().unwrap_or(0) + stats.get("sack6").copied().unwrap_or(0) > 0,
            "loss was configured ({loss}) so SACK blocks are expected"
        );
    }
    if std::env::var("SHALLOW_WRITE_TESTDATA").as_deref() == Ok("1") {
        let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/linux-tcp.pcap");
        write_testdata(&out, &frames);
        say(&format!("wrote {}", out.display()));
    }
}
