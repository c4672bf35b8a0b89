//! `shallow decode FILE`: print a capture one packet per line (tcpdump-like) or as JSON lines.
//!
//! All packet parsing is `shallow_wire`'s; this module strips the link layer, keeps the
//! per-flow initial sequence numbers for relative numbering, and formats.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, TsResolution};
use serde::Serialize;
use shallow_wire::{
    Icmpv4Repr, Icmpv6Repr, IpPacket, TcpFlags, TcpOption, TcpPacket, IPPROTO_ICMP, IPPROTO_ICMPV6,
    IPPROTO_TCP,
};

/// Arguments of `shallow decode`.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// A pcap or pcapng file (link types Ethernet, raw IP, Linux cooked v1/v2, BSD loopback).
    pub file: PathBuf,
    /// Print one JSON object per packet instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One captured frame, link type attached.
struct Frame {
    ts: Duration,
    link: DataLink,
    data: Vec<u8>,
    orig_len: u32,
}

/// Streams every frame of a pcap or pcapng file (chosen by its magic number) to `sink`, which
/// returns false to stop. A record that cannot be read is passed as an error and ends the file.
fn read_frames(path: &PathBuf, mut sink: impl FnMut(Result<Frame>) -> bool) -> Result<()> {
    let mut f = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut magic = [0u8; 4];
    f.read_exact(&mut magic)
        .with_context(|| format!("{}: too short for a capture", path.display()))?;
    drop(f);
    let f = BufReader::new(File::open(path)?);
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).context("not a pcapng file")?;
        // Per interface: link type and timestamp resolution (`if_tsresol`, default 10^-6 s).
        let mut links: Vec<(DataLink, u8)> = Vec::new();
        while let Some(block) = r.next_block() {
            match block {
                Ok(Block::SectionHeader(_)) => links.clear(),
                Ok(Block::InterfaceDescription(idb)) => {
                    let resol = idb
                        .options
                        .iter()
                        .find_map(|o| match o {
                            InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                            _ => None,
                        })
                        .unwrap_or(6);
                    links.push((idb.linktype, resol));
                }
                Ok(Block::EnhancedPacket(epb)) => {
                    let (link, resol) = usize::try_from(epb.interface_id)
                        .ok()
                        .and_then(|i| links.get(i).copied())
                        .unwrap_or((DataLink::Unknown(u32::MAX), 6));
                    if !sink(Ok(Frame {
                        ts: pcapng_time(epb.timestamp, resol),
                        link,
                        data: epb.data.into_owned(),
                        orig_len: epb.original_len,
                    })) {
                        return Ok(());
                    }
                }
                Ok(Block::SimplePacket(spb)) => {
                    let link = links.first().map(|l| l.0);
                    if !sink(Ok(Frame {
                        ts: Duration::ZERO,
                        link: link.unwrap_or(DataLink::Unknown(u32::MAX)),
                        data: spb.data.into_owned(),
                        orig_len: spb.original_len,
                    })) {
                        return Ok(());
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    // A broken block ends the readable part of the file.
                    if !sink(Err(anyhow::Error::new(e).context("unreadable pcapng block"))) {
                        return Ok(());
                    }
                    break;
                }
            }
        }
    } else {
        let mut r = PcapReader::new(f).context("not a pcap or pcapng file")?;
        let header = r.header();
        let link = header.datalink;
        let frac_ns = match header.ts_resolution {
            TsResolution::MicroSecond => 1_000,
            TsResolution::NanoSecond => 1,
        };
        // Raw records: pcap-file 2.0's checked packets refuse `orig_len > snaplen`, which is
        // exactly what a capture taken with a snap length contains.
        while let Some(p) = r.next_raw_packet() {
            match p {
                Ok(p) => {
                    if !sink(Ok(Frame {
                        ts: Duration::from_secs(u64::from(p.ts_sec))
                            + Duration::from_nanos(u64::from(p.ts_frac) * frac_ns),
                        link,
                        orig_len: p.orig_len,
                        data: p.data.into_owned(),
                    })) {
                        return Ok(());
                    }
                }
                Err(e) => {
                    if !sink(Err(anyhow::Error::new(e).context("unreadable pcap record"))) {
                        return Ok(());
                    }
                    break;
                }
            }
        }
    }
    Ok(())
}

/// pcap-file 2.0 hands the raw 64-bit pcapng timestamp over as nanoseconds; rescale it by the
/// interface's `if_tsresol` (pcapng spec: bit 7 clear means 10^-n s, set means 2^-n s).
fn pcapng_time(raw: Duration, resol: u8) -> Duration {
    let units = raw.as_nanos();
    let exp = u32::from(resol & 0x7f);
    let per_sec: u128 = if resol & 0x80 == 0 {
        10u128.checked_pow(exp).unwrap_or(u128::MAX)
    } else {
        2u128.checked_pow(exp).unwrap_or(u128::MAX)
    };
    let secs = units / per_sec;
    let nanos = (units % per_sec) * 1_000_000_000 / per_sec;
    Duration::new(u64::try_from(secs).unwrap_or(u64::MAX), nanos as u32)
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;

/// Finds the IP packet inside a frame, or says why there is none.
fn strip_link(link: DataLink, d: &[u8]) -> std::result::Result<&[u8], String> {
    let be16 = |b: &[u8], at: usize| -> Option<u16> {
        Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
    };
    let by_ethertype = |et: u16| -> std::result::Result<(), String> {
        match et {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok(()),
            0x0806 => Err("ARP".into()),
            other => Err(format!("ethertype {other:#06x}")),
        }
    };
    match link {
        DataLink::ETHERNET => {
            let mut off = 12;
            let mut et = be16(d, off).ok_or("truncated Ethernet header")?;
            // Up to two VLAN tags (802.1Q, 802.1ad).
            for _ in 0..2 {
                if et == 0x8100 || et == 0x88a8 {
                    off += 4;
                    et = be16(d, off).ok_or("truncated VLAN tag")?;
                }
            }
            let rest = d.get(off + 2..).ok_or("truncated Ethernet header")?;
            by_ethertype(et)?;
            Ok(rest)
        }
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => Ok(d),
        DataLink::LINUX_SLL => {
            let et = be16(d, 14).ok_or("truncated Linux cooked header")?;
            let rest = d.get(16..).ok_or("truncated Linux cooked header")?;
            by_ethertype(et)?;
            Ok(rest)
        }
        DataLink::LINUX_SLL2 => {
            let et = be16(d, 0).ok_or("truncated Linux cooked v2 header")?;
            let rest = d.get(20..).ok_or("truncated Linux cooked v2 header")?;
            by_ethertype(et)?;
            Ok(rest)
        }
        DataLink::NULL | DataLink::LOOP => {
            let fam = d.get(..4).ok_or("truncated loopback header")?;
            let le = u32::from_le_bytes([fam[0], fam[1], fam[2], fam[3]]);
            let be = u32::from_be_bytes([fam[0], fam[1], fam[2], fam[3]]);
            let fam = if le < 256 { le } else { be };
            match fam {
                2 | 24 | 28 | 30 => Ok(&d[4..]),
                f => Err(format!("loopback family {f}")),
            }
        }
        other => Err(format!("unsupported link type {other:?}")),
    }
}

/// A decoded packet, as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct PacketOut {
    /// 1-based frame number.
    pub frame: usize,
    /// Capture time, seconds since the epoch.
    pub time: f64,
    /// Capture time, exact (for the text form).
    #[serde(skip)]
    pub ts: Duration,
    /// Bytes captured.
    pub caplen: usize,
    /// Bytes on the wire.
    pub orig_len: u32,
    /// The IP header, when one was decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpOut>,
    /// The TCP header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<TcpOut>,
    /// The ICMP message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp: Option<IcmpOut>,
    /// Why the packet (or its upper layer) could not be decoded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// IP header fields.
#[derive(Debug, Serialize)]
pub struct IpOut {
    version: u8,
    src: IpAddr,
    dst: IpAddr,
    tos: u8,
    dscp: u8,
    ecn: &'static str,
    ttl: u8,
    protocol: u8,
    payload_len: usize,
    fragment: bool,
    snapped: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    df: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ident: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    checksum_ok: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    flow_label: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ext_headers_len: Option<usize>,
}

/// TCP header fields.
#[derive(Debug, Serialize)]
pub struct TcpOut {
    src_port: u16,
    dst_port: u16,
    seq: u32,
    ack: u32,
    /// Sequence number relative to the flow's SYN, when one was seen.
    rel_seq: Option<u32>,
    /// Acknowledgment number relative to the peer's SYN, when one was seen.
    rel_ack: Option<u32>,
    flags: String,
    flags_bits: u16,
    header_len: usize,
    window: u16,
    urgent: u16,
    checksum: u16,
    /// None when the capture was cut short (snap length).
    checksum_ok: Option<bool>,
    payload_len: usize,
    options: Vec<OptOut>,
}

/// One TCP option.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OptOut {
    /// End of option list.
    Eol,
    /// No-operation.
    Nop,
    /// MSS.
    Mss {
        /// Value.
        value: u16,
    },
    /// Window scale.
    Wscale {
        /// Shift count.
        shift: u8,
    },
    /// SACK permitted.
    SackOk,
    /// SACK blocks, absolute.
    Sack {
        /// (left, right) pairs.
        blocks: Vec<(u32, u32)>,
    },
    /// Timestamps.
    Ts {
        /// TSval.
        val: u32,
        /// TSecr.
        ecr: u32,
    },
    /// Anything else.
    Unknown {
        /// Option kind.
        code: u8,
        /// Data bytes in hex.
        data: String,
    },
    /// A malformed option (the rest of the option space is not decoded).
    Malformed,
}

/// ICMP fields.
#[derive(Debug, Serialize)]
pub struct IcmpOut {
    version: u8,
    #[serde(rename = "type")]
    type_: u8,
    code: u8,
    what: String,
    checksum_ok: Option<bool>,
    length: usize,
}

type FlowKey = (IpAddr, u16, IpAddr, u16);

/// Decoding state across packets: the initial sequence number of each direction.
#[derive(Default)]
struct Decoder {
    isn: HashMap<FlowKey, u32>,
}

fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut s, x| {
        let _ = write!(s, "{x:02x}");
        s
    })
}

fn ecn_name(e: shallow_wire::Ecn) -> &'static str {
    match e {
        shallow_wire::Ecn::NotEct => "not-ect",
        shallow_wire::Ecn::Ect1 => "ect1",
        shallow_wire::Ecn::Ect0 => "ect0",
        shallow_wire::Ecn::Ce => "ce",
    }
}

impl Decoder {
    fn decode(&mut self, frame_no: usize, f: &Frame) -> PacketOut {
        let mut out = PacketOut {
            frame: frame_no,
            time: f.ts.as_secs_f64(),
            ts: f.ts,
            caplen: f.data.len(),
            orig_len: f.orig_len,
            ip: None,
            tcp: None,
            icmp: None,
            error: None,
        };
        let ipb = match strip_link(f.link, &f.data) {
            Ok(b) => b,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        let ip = match IpPacket::parse_snapped(ipb) {
            Ok(ip) => ip,
            Err(e) => {
                out.error = Some(format!("IP: {e}"));
                return out;
            }
        };
        let snapped = ip.is_snapped();
        out.ip = Some(match &ip {
            IpPacket::V4(p) => IpOut {
                version: 4,
                src: ip.src(),
                dst: ip.dst(),
                tos: p.tos(),
                dscp: p.dscp(),
                ecn: ecn_name(p.ecn()),
                ttl: p.ttl(),
                protocol: p.protocol(),
                payload_len: p.payload_len(),
                fragment: p.is_fragment(),
                snapped,
                df: Some(p.df()),
                ident: Some(p.ident()),
                checksum_ok: Some(p.checksum_valid()),
                flow_label: None,
                ext_headers_len: None,
            },
            IpPacket::V6(p) => IpOut {
                version: 6,
                src: ip.src(),
                dst: ip.dst(),
                tos: p.traffic_class(),
                dscp: p.traffic_class() >> 2,
                ecn: ecn_name(p.ecn()),
                ttl: p.hop_limit(),
                protocol: p.upper_protocol(),
                payload_len: p.upper_len(),
                fragment: p.is_fragment(),
                snapped,
                df: None,
                ident: None,
                checksum_ok: None,
                flow_label: Some(p.flow_label()),
                ext_headers_len: Some(p.ext_headers_len()),
            },
        });
        if ip.is_fragment() {
            return out;
        }
        match ip.protocol() {
            IPPROTO_TCP => match TcpPacket::new_checked(ip.payload()) {
                Ok(t) => out.tcp = Some(self.tcp(&ip, &t)),
                Err(e) => out.error = Some(format!("TCP: {e}")),
            },
            IPPROTO_ICMP | IPPROTO_ICMPV6 => match icmp(&ip) {
                Ok(i) => out.icmp = Some(i),
                Err(e) => out.error = Some(format!("ICMP: {e}")),
            },
            _ => {}
        }
        out
    }

    fn tcp(&mut self, ip: &IpPacket<'_>, t: &TcpPacket<'_>) -> TcpOut {
        let key = (ip.src(), t.src_port(), ip.dst(), t.dst_port());
        let rkey = (ip.dst(), t.dst_port(), ip.src(), t.src_port());
        if t.flags().contains(TcpFlags::SYN) {
            self.isn.insert(key, t.seq());
        }
        let rel_seq = self.isn.get(&key).map(|i| t.seq().wrapping_sub(*i));
        let rel_ack = if t.flags().contains(TcpFlags::ACK) {
            self.isn.get(&rkey).map(|i| t.ack().wrapping_sub(*i))
        } else {
            None
        };
        let mut options = Vec::new();
        for o in t.options() {
            options.push(match o {
                Ok(TcpOption::Eol) => OptOut::Eol,
                Ok(TcpOption::Nop) => OptOut::Nop,
                Ok(TcpOption::Mss(m)) => OptOut::Mss { value: m },
                Ok(TcpOption::WindowScale(s)) => OptOut::Wscale { shift: s },
                Ok(TcpOption::SackPermitted) => OptOut::SackOk,
                Ok(TcpOption::Sack(s)) => OptOut::Sack {
                    blocks: s.iter().collect(),
                },
                Ok(TcpOption::Timestamps { tsval, tsecr }) => OptOut::Ts {
                    val: tsval,
                    ecr: tsecr,
                },
                Ok(TcpOption::Unknown { kind, data }) => OptOut::Unknown {
                    code: kind,
                    data: hex(data),
                },
                Err(_) => OptOut::Malformed,
            });
        }
        let payload_len = ip.payload_len().saturating_sub(t.header_len());
        TcpOut {
            src_port: t.src_port(),
            dst_port: t.dst_port(),
            seq: t.seq(),
            ack: t.ack(),
            rel_seq,
            rel_ack,
            flags: t.flags().to_string(),
            flags_bits: t.flags().bits(),
            header_len: t.header_len(),
            window: t.window(),
            urgent: t.urgent(),
            checksum: t.checksum(),
            checksum_ok: (!ip.is_snapped()).then(|| t.checksum_valid(ip.src(), ip.dst())),
            payload_len,
            options,
        }
    }

    /// The ISN that relative SACK blocks of a packet from `src` are measured from (the peer's).
    fn peer_isn(&self, ip: &IpOut, t: &TcpOut) -> Option<u32> {
        self.isn
            .get(&(ip.dst, t.dst_port, ip.src, t.src_port))
            .copied()
    }
}

fn icmp(ip: &IpPacket<'_>) -> shallow_wire::Result<IcmpOut> {
    let data = ip.payload();
    let full = !ip.is_snapped();
    match ip {
        IpPacket::V4(_) => {
            let r = Icmpv4Repr::parse_ignoring_checksum(data)?;
            let (type_, code) = r.type_code();
            let what = match r {
                Icmpv4Repr::EchoRequest { ident, seq, .. } => {
                    format!("echo request, id {ident}, seq {seq}")
                }
                Icmpv4Repr::EchoReply { ident, seq, .. } => {
                    format!("echo reply, id {ident}, seq {seq}")
                }
                Icmpv4Repr::DstUnreachable {
                    code: Icmpv4Repr::CODE_FRAG_NEEDED,
                    next_hop_mtu,
                    ..
                } => {
                    format!("unreachable - need to frag (mtu {next_hop_mtu})")
                }
                Icmpv4Repr::DstUnreachable { code, .. } => {
                    let why = match code {
                        0 => "net",
                        1 => "host",
                        2 => "protocol",
                        3 => "port",
                        _ => "code",
                    };
                    format!("{why} unreachable (code {code})")
                }
                Icmpv4Repr::Other {
                    type_: 11, code, ..
                } => format!("time exceeded (code {code})"),
                Icmpv4Repr::Other { type_, code, .. } => format!("type {type_}, code {code}"),
            };
            Ok(IcmpOut {
                version: 4,
                type_,
                code,
                what,
                checksum_ok: full.then(|| Icmpv4Repr::parse(data).is_ok()),
                length: ip.payload_len(),
            })
        }
        IpPacket::V6(p) => {
            let r = Icmpv6Repr::parse_ignoring_checksum(data)?;
            let (type_, code) = r.type_code();
            let what = match r {
                Icmpv6Repr::EchoRequest { ident, seq, .. } => {
                    format!("echo request, id {ident}, seq {seq}")
                }
                Icmpv6Repr::EchoReply { ident, seq, .. } => {
                    format!("echo reply, id {ident}, seq {seq}")
                }
                Icmpv6Repr::PacketTooBig { mtu, .. } => format!("packet too big, mtu {mtu}"),
                Icmpv6Repr::DstUnreachable { code, .. } => {
                    let why = match code {
                        0 => "no route",
                        1 => "prohibited",
                        3 => "address",
                        4 => "port",
                        _ => "code",
                    };
                    format!("destination unreachable, {why} (code {code})")
                }
                Icmpv6Repr::Other { type_, code, .. } => match type_ {
                    3 => format!("time exceeded (code {code})"),
                    4 => format!("parameter problem (code {code})"),
                    133 => "router solicitation".to_string(),
                    134 => "router advertisement".to_string(),
                    135 => "neighbor solicitation".to_string(),
                    136 => "neighbor advertisement".to_string(),
                    143 => "multicast listener report v2".to_string(),
                    _ => format!("type {type_}, code {code}"),
                },
            };
            Ok(IcmpOut {
                version: 6,
                type_,
                code,
                what,
                checksum_ok: full.then(|| Icmpv6Repr::parse(data, p.src(), p.dst()).is_ok()),
                length: ip.payload_len(),
            })
        }
    }
}

/// `HH:MM:SS.uuuuuu` in UTC, as tcpdump prints (tcpdump uses local time; we use UTC).
fn clock(ts: Duration) -> String {
    let s = ts.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:06}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ts.subsec_micros()
    )
}

fn endpoint(a: IpAddr, port: u16) -> String {
    format!("{a}.{port}")
}

/// One tcpdump-like line.
fn text_line(d: &Decoder, p: &PacketOut) -> String {
    let mut s = clock(p.ts);
    let Some(ip) = &p.ip else {
        let _ = write!(
            s,
            " [undecodable: {}] caplen {}",
            p.error.as_deref().unwrap_or("?"),
            p.caplen
        );
        return s;
    };
    s.push_str(if ip.version == 4 { " IP " } else { " IP6 " });
    if let Some(t) = &p.tcp {
        let _ = write!(
            s,
            "{} > {}: Flags [{}]",
            endpoint(ip.src, t.src_port),
            endpoint(ip.dst, t.dst_port),
            t.flags
        );
        let seq = t.rel_seq.unwrap_or(t.seq);
        let bits = TcpFlags(t.flags_bits);
        if t.payload_len > 0 {
            let _ = write!(
                s,
                ", seq {}:{}",
                seq,
                seq.wrapping_add(t.payload_len as u32)
            );
        } else if bits.intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST) {
            let _ = write!(s, ", seq {seq}");
        }
        if bits.contains(TcpFlags::ACK) {
            let _ = write!(s, ", ack {}", t.rel_ack.unwrap_or(t.ack));
        }
        let _ = write!(s, ", win {}", t.window);
        if bits.contains(TcpFlags::URG) {
            let _ = write!(s, ", urg {}", t.urgent);
        }
        if !t.options.is_empty() {
            let isn = d.peer_isn(ip, t);
            let opts: Vec<String> = t
                .options
                .iter()
                .map(|o| match o {
                    OptOut::Eol => "eol".to_string(),
                    OptOut::Nop => "nop".to_string(),
                    OptOut::Mss { value } => format!("mss {value}"),
                    OptOut::Wscale { shift } => format!("wscale {shift}"),
                    OptOut::SackOk => "sackOK".to_string(),
                    OptOut::Sack { blocks } => {
                        let mut b = format!("sack {} ", blocks.len());
                        for (l, r) in blocks {
                            let rel = |x: u32| isn.map_or(x, |i| x.wrapping_sub(i));
                            let _ = write!(b, "{{{}:{}}}", rel(*l), rel(*r));
                        }
                        b
                    }
                    OptOut::Ts { val, ecr } => format!("TS val {val} ecr {ecr}"),
                    OptOut::Unknown { code, data } => format!("unknown-{code} 0x{data}"),
                    OptOut::Malformed => "[bad opt]".to_string(),
                })
                .collect();
            let _ = write!(s, ", options [{}]", opts.join(","));
        }
        let _ = write!(s, ", length {}", t.payload_len);
    } else if let Some(i) = &p.icmp {
        let _ = write!(
            s,
            "{} > {}: {} {}, length {}",
            ip.src,
            ip.dst,
            if i.version == 4 { "ICMP" } else { "ICMP6," },
            i.what,
            i.length
        );
    } else {
        let _ = write!(s, "{} > {}: ", ip.src, ip.dst);
        if ip.fragment {
            let _ = write!(
                s,
                "fragment, proto {}, length {}",
                ip.protocol, ip.payload_len
            );
        } else if let Some(e) = &p.error {
            let _ = write!(
                s,
                "[undecodable {e}], proto {}, length {}",
                ip.protocol, ip.payload_len
            );
        } else {
            let _ = write!(s, "proto {}, length {}", ip.protocol, ip.payload_len);
        }
    }
    s
}

/// Runs `shallow decode`.
pub fn run(args: &DecodeArgs) -> Result<()> {
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(stdout.lock());
    let mut d = Decoder::default();
    let mut i = 0usize;
    let mut failure: Option<anyhow::Error> = None;
    read_frames(&args.file, |f| {
        i += 1;
        let line = match f {
            Ok(f) => {
                let p = d.decode(i, &f);
                if args.json {
                    match serde_json::to_string(&p) {
                        Ok(l) => l,
                        Err(e) => {
                            failure = Some(e.into());
                            return false;
                        }
                    }
                } else {
                    text_line(&d, &p)
                }
            }
            Err(e) => {
                if args.json {
                    serde_json::json!({ "frame": i, "error": format!("{e:#}") }).to_string()
                } else {
                    format!("[unreadable record {i}: {e:#}]")
                }
            }
        };
        // A closed pipe (e.g. `| head`) stops quietly.
        writeln!(w, "{line}").is_ok()
    })?;
    w.flush().ok();
    failure.map_or(Ok(()), Err)
}
