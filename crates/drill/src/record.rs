//! Scenarios recorded from the running kernel (`shallow drill record`).
//!
//! A **scenario** is a packetdrill script without the kernel's side: socket calls and inbound
//! packets at absolute times. It runs on the kernel (packetdrill in a network namespace, with
//! `tcpdump -i any` capturing the namespace), and the result is a complete script whose `>`
//! lines are the packets the kernel sent and whose calls return what the kernel returned:
//! Shallow's own text, replayable on the engine without root ([`crate::run_script`]).
//!
//! The scenario's form (what [`Recorder::record`] accepts):
//! * an optional prologue (options such as `--tolerance_usecs`, a backtick block such as
//!   `` `../common/defaults.sh` ``, comments) before the first event;
//! * then one event per line, each starting with an **absolute** time in seconds;
//! * one connection; `>` lines only where packetdrill needs them to learn the kernel's initial
//!   sequence number (the SYN-ACK of a passive open, the SYN of an active one), best with
//!   options `<...>`. They are replaced by the captured packets;
//! * the last event closes the recording (packets the kernel sends from its time on, such as
//!   packetdrill closing its sockets at exit, are left out): make it one that sends nothing;
//! * calls whose result the scenario cannot know may say anything: a call that returns
//!   something else is rewritten with the kernel's result (and errno) and the scenario run
//!   again, up to [`Recorder::max_fixes`] times.
//!
//! A kernel run that fails for any other reason (a `>` anchor that does not match, an
//! assertion, a timing error) is an error: the scenario must be changed.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pcap_file::pcap::PcapReader;
use pcap_file::DataLink;

use crate::expectations::Status;
use crate::judge::{kernel_release, JudgeError, Outcome, Packetdrill, Variant};
use crate::outcome::FailKind;
use crate::run::pkt::parse_live;
use crate::symbols;

/// Errors of [`Recorder::record`].
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Running the kernel side failed.
    #[error(transparent)]
    Judge(#[from] JudgeError),
    /// The scenario is not of the accepted form.
    #[error("scenario: {0}")]
    Form(String),
    /// The kernel could not run the scenario as written.
    #[error("the kernel rejected the scenario at line {line}: {reason}")]
    Rejected {
        /// Scenario line.
        line: u32,
        /// packetdrill's message.
        reason: String,
    },
    /// The capture could not be read or aligned.
    #[error("capture: {0}")]
    Capture(String),
    /// The recorded script does not pass on the kernel when replayed.
    #[error("the recording does not replay on the kernel: line {line}: {reason}")]
    Replay {
        /// Line of the recorded script.
        line: u32,
        /// packetdrill's message.
        reason: String,
    },
}

/// Records scenarios on the running kernel.
#[derive(Debug, Clone)]
pub struct Recorder {
    /// The packetdrill tool.
    pub pd: Packetdrill,
    /// The address family of the runs.
    pub variant: Variant,
    /// How many times a call's result may be rewritten before giving up.
    pub max_fixes: usize,
    /// Kernel replays of the finished recording, one of which must pass for it to be kept
    /// ([`RecordError::Replay`] otherwise); 0 skips the check (the fuzzer judges the
    /// kernel's variance itself).
    pub replays: usize,
}

/// A recorded script.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The complete script: the scenario's prologue and events, the kernel's results, and
    /// the kernel's packets as `>` lines.
    pub script: String,
    /// The calls whose results were rewritten, as `line N: old -> new`.
    pub fixes: Vec<String>,
    /// How many packets the kernel sent.
    pub outbound: usize,
}

/// One line of a scenario after the prologue.
#[derive(Debug, Clone)]
struct EventLine {
    time: f64,
    text: String,
    outbound: bool,
    inbound: bool,
}

/// The scenario split into its prologue and its timed events.
#[derive(Debug, Clone)]
struct Parsed {
    prologue: Vec<String>,
    events: Vec<EventLine>,
}

fn parse_scenario(text: &str) -> Result<Parsed, RecordError> {
    let mut prologue = Vec::new();
    let mut events = Vec::new();
    let mut in_backticks = false;
    for (i, raw) in text.lines().enumerate() {
        let t = raw.trim();
        let first = t.split_whitespace().next().unwrap_or("");
        let time = first.parse::<f64>().ok();
        if in_backticks || time.is_none() {
            if !events.is_empty() && !t.is_empty() && !t.starts_with("//") {
                return Err(RecordError::Form(format!(
                    "line {}: after the first event every line must start with an absolute time",
                    i + 1
                )));
            }
            if t.matches('`').count() % 2 == 1 {
                in_backticks = !in_backticks;
            }
            if events.is_empty() {
                prologue.push(raw.to_string());
            }
            continue;
        }
        if first.starts_with('+') {
            return Err(RecordError::Form(format!(
                "line {}: relative times are not accepted",
                i + 1
            )));
        }
        let rest = t[first.len()..].trim_start();
        events.push(EventLine {
            time: time.unwrap_or(0.0),
            text: rest.to_string(),
            outbound: rest.starts_with('>'),
            inbound: rest.starts_with('<'),
        });
    }
    if events.is_empty() {
        return Err(RecordError::Form("no events".into()));
    }
    if events.windows(2).any(|w| w[1].time < w[0].time) {
        return Err(RecordError::Form(
            "event times must not go backwards".into(),
        ));
    }
    Ok(Parsed { prologue, events })
}

/// Rewrites the result of the call on `line` from packetdrill's complaint, or `None` when
/// the complaint is not about a call's result.
fn fix_call(text: &str, line: u32, reason: &str) -> Option<(String, String)> {
    // "Expected result X but got Y with errno N (...)", "Expected non-negative result but
    // got -1 with errno N (...)", "Expected errno A (...) but got B (...)".
    let got = reason.split("but got ").nth(1)?;
    // packetdrill needs an errno's description in parentheses; take the kernel's.
    let note = got
        .split_once('(')
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(n, _)| n.to_string());
    let (value, errno) = if reason.contains("Expected errno") {
        let n: i64 = got.split_whitespace().next()?.parse().ok()?;
        (-1, Some(n))
    } else {
        let v: i64 = got.split_whitespace().next()?.parse().ok()?;
        let e = got
            .split("with errno ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse::<i64>().ok());
        (v, if v == -1 { e } else { None })
    };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let l = lines.get_mut(line.checked_sub(1)? as usize)?;
    let eq = l.rfind(") = ").map(|i| i + 1)?;
    let old = l[eq..].trim().to_string();
    let new = match errno {
        Some(e) => {
            let name = symbols::errno_name(e)?;
            format!("= -1 {name} ({})", note.unwrap_or_else(|| name.to_string()))
        }
        None => format!("= {value}"),
    };
    l.replace_range(eq.., &format!(" {new}"));
    let mut out = lines.join("\n");
    out.push('\n');
    Some((out, format!("line {line}: {old} -> {new}")))
}

/// A captured packet: when, which way, and the IP packet.
struct Captured {
    at: Duration,
    outbound: bool,
    ip: Vec<u8>,
}

fn read_capture(path: &Path) -> Result<Vec<Captured>, RecordError> {
    let f = std::fs::File::open(path).map_err(|e| RecordError::Capture(e.to_string()))?;
    let mut r = PcapReader::new(f).map_err(|e| RecordError::Capture(e.to_string()))?;
    let link = r.header().datalink;
    let mut out = Vec::new();
    while let Some(p) = r.next_packet() {
        let p = p.map_err(|e| RecordError::Capture(e.to_string()))?;
        let d = &p.data;
        // Linux cooked captures (`-i any`): the packet type says which way it went
        // (0 = to this host, 4 = sent by it).
        let (pkttype, ip) = match link {
            DataLink::LINUX_SLL if d.len() >= 16 => (u16::from_be_bytes([d[0], d[1]]), &d[16..]),
            DataLink::LINUX_SLL2 if d.len() >= 20 => (u16::from(d[10]), &d[20..]),
            other => {
                return Err(RecordError::Capture(format!(
                    "unexpected link type {other:?} or short record"
                )))
            }
        };
        if pkttype != 0 && pkttype != 4 {
            continue;
        }
        out.push(Captured {
            at: p.timestamp,
            outbound: pkttype == 4,
            ip: ip.to_vec(),
        });
    }
    Ok(out)
}

impl Recorder {
    /// Runs `scenario` on the kernel and returns the complete script. `name` names the
    /// script in its header comment.
    pub fn record(&self, name: &str, scenario: &str) -> Result<Recording, RecordError> {
        let parsed = parse_scenario(scenario)?;
        let dir = work_dir()?;
        let result = self.record_in(&dir, name, scenario, &parsed);
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    /// Runs a complete script (such as a recording) on the kernel, from a folder laid out as
    /// the suite's so that `../common/defaults.sh` resolves: the kernel's outcome.
    pub fn run_on_kernel(&self, script: &str) -> Result<Outcome, RecordError> {
        let dir = work_dir()?;
        let path = dir.join("s").join("script.pkt");
        let res = std::fs::write(&path, script)
            .map_err(|e| RecordError::from(JudgeError::from(e)))
            .and_then(|()| Ok(self.pd.run(&path, self.variant)?.outcome));
        let _ = std::fs::remove_dir_all(&dir);
        res
    }

    fn record_in(
        &self,
        dir: &Path,
        name: &str,
        scenario: &str,
        parsed: &Parsed,
    ) -> Result<Recording, RecordError> {
        let script = dir.join("s").join("scenario.pkt");
        let pcap = dir.join("capture.pcap");
        let mut text = scenario.to_string();
        let mut fixes = Vec::new();
        loop {
            std::fs::write(&script, &text).map_err(JudgeError::from)?;
            let _ = std::fs::remove_file(&pcap);
            let run = self.pd.run_captured(&script, self.variant, &pcap)?;
            match run.outcome.status {
                Status::Pass => break,
                Status::Skip => {
                    return Err(RecordError::Rejected {
                        line: 0,
                        reason: run.outcome.reason,
                    })
                }
                Status::Fail => {}
            }
            let Outcome {
                line, kind, reason, ..
            } = run.outcome;
            let fixed = (kind == Some(FailKind::Syscall) && fixes.len() < self.max_fixes)
                .then(|| fix_call(&text, line, &reason))
                .flatten();
            match fixed {
                Some((t, what)) => {
                    text = t;
                    fixes.push(what);
                }
                None => return Err(RecordError::Rejected { line, reason }),
            }
        }
        let final_parsed = parse_scenario(&text)?;
        let captured = read_capture(&pcap)?;
        let (lines, outbound) = self.merge(&final_parsed, &captured)?;
        let _ = parsed;
        let mut out = format!(
            "// {name}: recorded from Linux {} ({}) by `shallow drill record`.\n\
             // The `>` lines and the calls' results are what the kernel sent and returned;\n\
             // regenerate rather than edit.\n",
            kernel_release(),
            self.variant
        );
        for l in &final_parsed.prologue {
            out.push_str(l);
            out.push('\n');
        }
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
        // A recording is only worth keeping if the kernel passes it as written (the judge
        // replays every recording on the kernel), within its run-to-run variance.
        let mut last = None;
        for _ in 0..self.replays {
            let replay = self.run_on_kernel(&out)?;
            if replay.status == Status::Pass {
                last = None;
                break;
            }
            last = Some(replay);
        }
        if let Some(r) = last {
            return Err(RecordError::Replay {
                line: r.line,
                reason: r.reason,
            });
        }
        Ok(Recording {
            script: out,
            fixes,
            outbound,
        })
    }

    /// The scenario's events with the captured outbound packets in place of its `>` lines,
    /// ordered by time. The capture's clock is placed on script time by the inbound packets:
    /// packetdrill writes each at or after its scripted time, so the smallest lag seen is
    /// the clocks' offset. A packet captured within [`CAUSE_WINDOW`] before a scenario event
    /// is the event's doing (the residue of that estimate) and goes after it.
    fn merge(
        &self,
        parsed: &Parsed,
        captured: &[Captured],
    ) -> Result<(Vec<String>, usize), RecordError> {
        let tcp: Vec<(&Captured, crate::run::pkt::Live)> = captured
            .iter()
            .filter_map(|c| parse_live(&c.ip).map(|l| (c, l)))
            .collect();
        let inbound_times = parsed.events.iter().filter(|e| e.inbound).map(|e| e.time);
        let inbound_caps = tcp.iter().filter(|(c, _)| !c.outbound).map(|(c, _)| c.at);
        let offset = inbound_times
            .zip(inbound_caps)
            .map(|(t, c)| t - c.as_secs_f64())
            .reduce(f64::max)
            .ok_or_else(|| RecordError::Capture("no inbound TCP packet captured".into()))?;
        let event_times: Vec<f64> = parsed
            .events
            .iter()
            .filter(|e| !e.outbound)
            .map(|e| e.time)
            .collect();
        let mut conn: Option<(SocketAddr, SocketAddr)> = None;
        let mut isn = None;
        let mut timed: Vec<(f64, usize, String)> = Vec::new();
        for (i, e) in parsed.events.iter().enumerate() {
            if !e.outbound {
                timed.push((e.time, 2 * i, format!("{:.6} {}", e.time, e.text)));
            }
        }
        // The last event closes the recording: from then on the kernel's packets are
        // packetdrill closing its sockets at exit, not part of the scenario.
        let end = parsed.events.last().map_or(0.0, |e| e.time);
        let ts_shift = ts_shift(parsed, &tcp);
        let mut outbound = 0;
        for (k, (c, l)) in tcp.iter().enumerate() {
            if !c.outbound || c.at.as_secs_f64() + offset >= end {
                continue;
            }
            let key = (l.src, l.dst);
            match conn {
                None => conn = Some(key),
                Some(k0) if k0 != key => {
                    return Err(RecordError::Form(
                        "the kernel sent on more than one connection (one per scenario)".into(),
                    ))
                }
                _ => {}
            }
            if isn.is_none() {
                if !l.flags.contains(shallow_wire::TcpFlags::SYN) {
                    return Err(RecordError::Capture(
                        "the kernel's first packet is not a SYN or SYN-ACK".into(),
                    ));
                }
                isn = Some(l.seq);
            }
            let mut t = (c.at.as_secs_f64() + offset).max(0.0);
            if let Some(&e) = event_times
                .iter()
                .find(|&&e| e > t && e - t <= CAUSE_WINDOW)
            {
                t = e;
            }
            let body = match ts_shift {
                Some(d) => crate::run::describe(&shift_tsval(l, d), isn.unwrap_or(0)),
                None => crate::run::describe(l, isn.unwrap_or(0)),
            };
            // After every scenario event at the same time (index 2i), in capture order.
            timed.push((t, usize::MAX / 2 + k, format!("{t:.6} > {body}")));
            outbound += 1;
        }
        timed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        Ok((timed.into_iter().map(|(_, _, l)| l).collect(), outbound))
    }
}

/// The shift from the kernel's timestamp clock to the scenario's: the scenario's first `>`
/// anchor that names a `TS val` against the kernel's first sent packet that carries one.
///
/// packetdrill maps TS values this way itself (the first outbound packet with a timestamp
/// in both the script and the live packet sets the base; later outbound values are compared
/// as offsets from it, and inbound `ecr` values are translated through it). The scenario's
/// inbound packets echo values in the scenario's space, so the recorded `>` lines must be in
/// that space too, or the recording does not replay: written with the kernel's live values
/// (a random per-connection offset), the first `>` line would set a base that the inbound
/// `ecr` values do not refer to. `None` when the scenario names no `TS val` or the kernel
/// sent no timestamp.
fn ts_shift(parsed: &Parsed, tcp: &[(&Captured, crate::run::pkt::Live)]) -> Option<u32> {
    let script = parsed
        .events
        .iter()
        .filter(|e| e.outbound)
        .find_map(|e| script_tsval(&e.text))?;
    let live = tcp
        .iter()
        .filter(|(c, _)| c.outbound)
        .find_map(|(_, l)| live_tsval(l))?;
    Some(script.wrapping_sub(live))
}

/// The `TS val N` of a script packet line, if it names one.
fn script_tsval(text: &str) -> Option<u32> {
    let at = text.find("TS val ")? + "TS val ".len();
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The TS value of a captured packet, if it carries the option.
fn live_tsval(l: &crate::run::pkt::Live) -> Option<u32> {
    l.opts.iter().find_map(|o| match o {
        shallow_wire::TcpOptionRepr::Timestamps { tsval, .. } => Some(*tsval),
        _ => None,
    })
}

/// `l` with its TS value moved by `d` (modulo 2^32, as TCP timestamps wrap).
fn shift_tsval(l: &crate::run::pkt::Live, d: u32) -> crate::run::pkt::Live {
    let mut l = l.clone();
    for o in &mut l.opts {
        if let shallow_wire::TcpOptionRepr::Timestamps { tsval, .. } = o {
            *tsval = tsval.wrapping_add(d);
        }
    }
    l
}

/// How far before a scenario event a captured packet may seem to leave and still be taken
/// as caused by it (the error of placing the capture's clock, tens of microseconds).
const CAUSE_WINDOW: f64 = 0.000_3;

/// A fresh folder laid out as the suite's: `s/` for the scenario and `common` linking to
/// the suite's `common/` (scripts call `../common/defaults.sh`).
fn work_dir() -> Result<PathBuf, RecordError> {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "shallow-record-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(dir.join("s")).map_err(JudgeError::from)?;
    let common = crate::expectations::corpus_root()
        .map(|t| t.join("common"))
        .filter(|c| c.is_dir())
        .ok_or_else(|| RecordError::Form("../shared/packetdrill/tcp/common not found".into()))?;
    std::os::unix::fs::symlink(common, dir.join("common")).map_err(JudgeError::from)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_need_absolute_times_after_the_prologue() {
        let ok = "--tolerance_usecs=10000\n`../common/defaults.sh`\n0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n0.1 < S 0:0(0) win 1000\n0.1 > S. 0:0(0) ack 1 <...>\n";
        let p = parse_scenario(ok).unwrap();
        assert_eq!(p.prologue.len(), 2);
        assert_eq!(p.events.len(), 3);
        assert!(p.events[1].inbound && p.events[2].outbound);
        assert!(
            parse_scenario("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0.1 close(3) = 0\n")
                .is_err()
        );
        assert!(parse_scenario("0.2 close(3) = 0\n0.1 close(3) = 0\n").is_err());
        assert!(parse_scenario("0 close(3) = 0\n`x`\n").is_err());
    }

    #[test]
    fn recorded_timestamps_are_moved_to_the_scenarios_space() {
        assert_eq!(
            script_tsval("> S. 0:0(0) ack 1 <mss 1460,TS val 100 ecr 700,nop,wscale 8>"),
            Some(100)
        );
        assert_eq!(script_tsval("> S. 0:0(0) ack 1 <...>"), None);
        let parsed = parse_scenario(
            "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n\
             0.1 < S 0:0(0) win 1000 <mss 1000,TS val 700 ecr 0>\n\
             0.1 > S. 0:0(0) ack 1 <mss 1460,TS val 100 ecr 700>\n",
        )
        .unwrap();
        let live = |tsval: u32| crate::run::pkt::Live {
            src: "192.168.0.1:8080".parse().unwrap(),
            dst: "192.0.2.1:9000".parse().unwrap(),
            seq: 1,
            ack: 1,
            flags: shallow_wire::TcpFlags::ACK,
            win: 100,
            urg: 0,
            opts: vec![shallow_wire::TcpOptionRepr::Timestamps { tsval, tsecr: 700 }],
            len: 0,
            tos: 0,
            ttl: 64,
            flowlabel: None,
            csum_ok: true,
        };
        let cap = |outbound| Captured {
            at: Duration::ZERO,
            outbound,
            ip: Vec::new(),
        };
        let (inb, out) = (cap(false), cap(true));
        // The kernel's clock runs 4,000,000,000 ahead: the first sent value becomes the
        // scenario's 100, and a value 25 ticks later (across the wrap) becomes 125.
        let tcp = vec![(&inb, live(9)), (&out, live(4_000_000_000))];
        let d = ts_shift(&parsed, &tcp).unwrap();
        assert_eq!(live_tsval(&shift_tsval(&live(4_000_000_000), d)), Some(100));
        let later = 4_000_000_000u32.wrapping_add(25);
        assert_eq!(live_tsval(&shift_tsval(&live(later), d)), Some(125));
        assert_eq!(shift_tsval(&live(5), d).opts.len(), 1);
        let no_ts = parse_scenario("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n").unwrap();
        assert_eq!(ts_shift(&no_ts, &tcp), None);
    }

    #[test]
    fn call_results_are_rewritten_from_packetdrill_complaints() {
        let s = "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n0.2 read(4, ..., 1000) = 1000\n";
        let (t, what) = fix_call(
            s,
            2,
            "Expected result 1000 but got -1 with errno 11 (Resource temporarily unavailable)",
        )
        .unwrap();
        assert_eq!(
            t.lines().nth(1).unwrap(),
            "0.2 read(4, ..., 1000) = -1 EAGAIN (Resource temporarily unavailable)"
        );
        assert_eq!(
            what,
            "line 2: = 1000 -> = -1 EAGAIN (Resource temporarily unavailable)"
        );
        let (t, _) = fix_call(
            &t,
            2,
            "Expected result -1 but got 300 with errno 0 (Success)",
        )
        .unwrap();
        assert_eq!(t.lines().nth(1).unwrap(), "0.2 read(4, ..., 1000) = 300");
        let (t, _) = fix_call(
            &t,
            2,
            "Expected errno 11 (x) but got 104 (Connection reset by peer)",
        )
        .unwrap();
        assert_eq!(
            t.lines().nth(1).unwrap(),
            "0.2 read(4, ..., 1000) = -1 ECONNRESET (Connection reset by peer)"
        );
        assert!(fix_call(s, 2, "live packet field tcp_ack_seq").is_none());
    }
}
