//! The differential fuzzer (`shallow drill fuzz --judge kernel`): random valid scenarios,
//! each recorded on the running kernel ([`crate::record`]) and replayed on the engine; a
//! scenario whose replay fails is a divergence, shrunk to a minimal scenario that still
//! diverges.
//!
//! A scenario is one connection, opened passively (an inbound SYN with random MSS, SACK and
//! window scale) or actively (`connect` on a non-blocking socket), then 3 to 12 actions at
//! random gaps (1 ms to 250 ms): writes and reads of random sizes, `TCP_NODELAY`,
//! `TCP_CORK`, `TCP_QUICKACK`, `TCP_NOTSENT_LOWAT`, `SO_RCVBUF`, `SO_SNDBUF`; inbound ACKs of
//! any part of what was sent with windows from 0 up, SACK blocks, data in order, out of
//! order, duplicated or overlapping, a FIN, an RST; `shutdown` and `close`. It ends with a
//! quiet period so that delayed ACKs, retransmission and probe timers fire inside the
//! recording. Calls' results are left to the kernel (the recorder takes them from it).
//!
//! Agreement is the engine's runner passing the recorded script: the same packets (flags,
//! sequence and ACK numbers, window, options, lengths), each within the runner's timing
//! tolerance of the kernel's time (4 ms or 12.5% of the interval since the previous event,
//! the larger), and the same call results.

use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::expectations::Status;
use crate::judge::{agreement, Agreement};
use crate::outcome::Outcome;
use crate::record::{RecordError, Recorder};
use crate::run::run_script;

/// A generated scenario: its prologue and handshake, and the actions that the shrinker may
/// remove.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The seed it was generated from.
    pub seed: u64,
    head: Vec<String>,
    actions: Vec<(f64, String)>,
    end: f64,
}

impl Scenario {
    /// The scenario as script text.
    pub fn text(&self) -> String {
        let mut s = self.head.join("\n");
        s.push('\n');
        for (t, a) in &self.actions {
            s.push_str(&format!("{t:.3} {a}\n"));
        }
        // A last call that sends nothing closes the recording after the quiet period.
        s.push_str(&format!(
            "{:.3} socket(..., SOCK_STREAM, IPPROTO_TCP) = 5\n",
            self.end
        ));
        s
    }

    /// How many actions the shrinker can remove.
    pub fn len(&self) -> usize {
        self.actions.len()
    }

    /// Whether there are no actions.
    pub fn is_empty(&self) -> bool {
        self.actions.is_empty()
    }

    fn without(&self, i: usize) -> Scenario {
        let mut s = self.clone();
        s.actions.remove(i);
        s
    }
}

struct Gen {
    rng: ChaCha8Rng,
}

impl Gen {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next_u64() % n.max(1)
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len() as u64) as usize]
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Generates the scenario of `seed` (the same seed gives the same scenario), without TCP
/// timestamps.
pub fn generate(seed: u64) -> Scenario {
    generate_with(seed, false)
}

/// The peer's TCP timestamps in a scenario (`--timestamps`): its TSval clock, and the echo
/// of the kernel's, in the scenario's TS space, where the kernel's `>` anchor (its SYN-ACK
/// at 0.100 s, or its SYN at 0 s) carries TS val 100 and the kernel's clock ticks once a
/// millisecond. Its choices come from a stream of their own, so a seed's scenario is the
/// same with and without timestamps but for the options.
struct PeerTs {
    g: Gen,
    /// Script time of the kernel's anchor (its TS val 100).
    anchor: f64,
}

impl PeerTs {
    /// The anchor's TS value.
    const KERNEL_BASE: u64 = 100;
    /// The peer's TS value at time zero.
    const PEER_BASE: u64 = 1000;

    fn new(seed: u64, anchor: f64) -> PeerTs {
        PeerTs {
            g: Gen {
                rng: ChaCha8Rng::seed_from_u64(seed ^ 0x7473_7473_7473_7473),
            },
            anchor,
        }
    }

    /// `TS val V ecr E` for an inbound segment at `t`: the peer's clock (now and then an
    /// old value, which PAWS rejects), and an echo of the kernel's clock some time before
    /// `t` (never before the anchor, never after `t`).
    fn opt(&mut self, t: f64) -> String {
        let ms = |x: f64| (x * 1000.0).round().max(0.0) as u64;
        let mut val = Self::PEER_BASE + ms(t);
        if self.g.chance(5) {
            val = val.saturating_sub(*self.g.pick(&[1u64, 100, 10_000]));
        }
        let lag = *self.g.pick(&[0u64, 1, 5, 20, 100]);
        let ecr = Self::KERNEL_BASE + ms(t - self.anchor).saturating_sub(lag);
        format!("TS val {val} ecr {ecr}")
    }
}

/// Generates the scenario of `seed`; with `timestamps`, the peer negotiates TCP timestamps
/// (RFC 7323) and every segment it sends but RSTs carries them (see [`PeerTs`]).
pub fn generate_with(seed: u64, timestamps: bool) -> Scenario {
    let mut g = Gen {
        rng: ChaCha8Rng::seed_from_u64(seed),
    };
    let mss = *g.pick(&[536u32, 1000, 1460]);
    let sack = g.chance(70);
    let wscale = *g.pick(&[None, Some(0u8), Some(7), Some(10)]);
    let peer_win = *g.pick(&[1000u32, 5000, 32792, 65535]);
    let passive = g.chance(60);
    let mut ts = timestamps.then(|| PeerTs::new(seed, if passive { 0.100 } else { 0.0 }));
    // Options padded to whole words, as a real SYN's are; with timestamps in Linux's
    // order (SACK-permitted shares the timestamp's padding).
    let syn_opts = |ts_opt: Option<String>| {
        let mut opts = vec![format!("mss {mss}")];
        match (&ts_opt, sack) {
            (Some(t), true) => opts.extend(["sackOK".into(), t.clone()]),
            (Some(t), false) => opts.extend(["nop".into(), "nop".into(), t.clone()]),
            (None, true) => opts.extend(["nop".into(), "nop".into(), "sackOK".into()]),
            (None, false) => {}
        }
        if let Some(w) = wscale {
            opts.push("nop".into());
            opts.push(format!("wscale {w}"));
        }
        opts.join(",")
    };
    // The kernel's anchor with timestamps names its options exactly (packetdrill takes the
    // TS base from it): Linux's order, MSS 1460 (MTU 1500), window scale 8 (its default
    // buffers), and what the peer offered.
    let synack_opts = |ecr: u64| {
        let base = PeerTs::KERNEL_BASE;
        let mut o = match sack {
            true => format!("mss 1460,sackOK,TS val {base} ecr {ecr}"),
            false => format!("mss 1460,nop,nop,TS val {base} ecr {ecr}"),
        };
        if wscale.is_some() {
            o.push_str(",nop,wscale 8");
        }
        o
    };
    let mut head = vec!["`../common/defaults.sh`".to_string()];
    if ts.is_some() {
        // Inbound echoes are the kernel's clock at a time, not always a value it sent.
        head.insert(0, "--tcp_ts_ecr_scaled".into());
    }
    let t_open = if passive {
        let (syn, synack, ack) = match ts {
            Some(_) => (
                syn_opts(Some(format!("TS val {} ecr 0", PeerTs::PEER_BASE + 100))),
                format!("<{}>", synack_opts(PeerTs::PEER_BASE + 100)),
                format!(
                    " <nop,nop,TS val {} ecr {}>",
                    PeerTs::PEER_BASE + 110,
                    PeerTs::KERNEL_BASE
                ),
            ),
            None => (syn_opts(None), "<...>".into(), String::new()),
        };
        head.extend([
            "0.000 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3".to_string(),
            "0.000 setsockopt(3, SOL_SOCKET, SO_REUSEADDR, [1], 4) = 0".into(),
            "0.000 bind(3, ..., ...) = 0".into(),
            "0.000 listen(3, 1) = 0".into(),
            format!("0.100 < S 0:0(0) win {peer_win} <{syn}>"),
            format!("0.100 > S. 0:0(0) ack 1 {synack}"),
            format!("0.110 < . 1:1(0) ack 1 win {}{ack}", peer_win.min(65535)),
            "0.110 accept(3, ..., ...) = 4".into(),
            "0.110 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0".into(),
        ]);
        0.110
    } else {
        let (syn, synack) = match ts {
            // The SYN-ACK echoes the SYN's value (Linux resets a SYN-ACK whose echo is
            // not between its SYN's TSval and now).
            // The kernel's SYN offers everything whatever the peer will answer.
            Some(_) => (
                format!(
                    "<mss 1460,sackOK,TS val {} ecr 0,nop,wscale 8>",
                    PeerTs::KERNEL_BASE
                ),
                syn_opts(Some(format!(
                    "TS val {} ecr {}",
                    PeerTs::PEER_BASE + 10,
                    PeerTs::KERNEL_BASE
                ))),
            ),
            None => ("<...>".into(), syn_opts(None)),
        };
        head.extend([
            "0.000 socket(..., SOCK_STREAM, IPPROTO_TCP) = 4".to_string(),
            "0.000 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0".into(),
            "0.000 connect(4, ..., ...) = -1 EINPROGRESS (Operation now in progress)".into(),
            format!("0.000 > S 0:0(0) {syn}"),
            format!("0.010 < S. 0:0(0) ack 1 win {peer_win} <{synack}>"),
        ]);
        0.010
    };
    let mut t = t_open;
    // What the engine or kernel has been given to send (upper bound), and the peer's side.
    let mut written: u64 = 0;
    let mut acked: u64 = 0;
    let mut peer_seq: u64 = 1;
    let mut peer_fin = false;
    let mut closed = false;
    let mut actions = Vec::new();
    let n = 3 + g.below(10);
    for _ in 0..n {
        t += *g.pick(&[0.001, 0.005, 0.010, 0.030, 0.100, 0.250]);
        let win = *g.pick(&[0u32, 1, 10, 257, 1000, 32792]);
        let choice = g.below(100);
        let a = match choice {
            0..=19 if !closed => {
                let n = *g.pick(&[1u64, 100, 1000, 1460, 3000, 10000, 50000]);
                written += n;
                format!("write(4, ..., {n}) = {n}")
            }
            20..=29 if !closed => {
                let n = *g.pick(&[1u64, 100, 1000, 10000]);
                format!("read(4, ..., {n}) = {n}")
            }
            30..=39 if !closed => {
                let (name, v) = *g.pick(&[
                    ("TCP_NODELAY", 1u32),
                    ("TCP_NODELAY", 0),
                    ("TCP_CORK", 1),
                    ("TCP_CORK", 0),
                    ("TCP_QUICKACK", 1),
                    ("TCP_QUICKACK", 0),
                    ("TCP_NOTSENT_LOWAT", 1),
                    ("TCP_NOTSENT_LOWAT", 16384),
                ]);
                format!("setsockopt(4, IPPROTO_TCP, {name}, [{v}], 4) = 0")
            }
            40..=42 if !closed => {
                let (name, v) = *g.pick(&[
                    ("SO_RCVBUF", 4096u32),
                    ("SO_RCVBUF", 100000),
                    ("SO_SNDBUF", 10000),
                ]);
                format!("setsockopt(4, SOL_SOCKET, {name}, [{v}], 4) = 0")
            }
            43..=64 => {
                // An ACK of some of what was written (cumulative, never backwards).
                let top = written + 1;
                let ack = (acked + 1 + g.below(top - acked)).min(top);
                acked = ack - 1;
                let tso = ts_opts(&mut ts, t);
                if sack && written > acked + 1 && g.chance(40) {
                    let lo = ack + g.below(written - acked);
                    let hi = (lo + 1 + g.below(written + 1 - lo + 1)).min(written + 1);
                    format!(
                        "< . {peer_seq}:{peer_seq}(0) ack {ack} win {win} <{tso}nop,nop,sack {lo}:{hi}>"
                    )
                } else {
                    format!(
                        "< . {peer_seq}:{peer_seq}(0) ack {ack} win {win}{}",
                        opts_of(&tso)
                    )
                }
            }
            65..=84 if !peer_fin => {
                let len = *g.pick(&[1u64, 100, 500, u64::from(mss)]);
                let start = match g.below(10) {
                    0 => peer_seq + u64::from(mss),           // a hole: out of order
                    1 => peer_seq.saturating_sub(len).max(1), // old or overlapping
                    _ => peer_seq,
                };
                if start == peer_seq {
                    peer_seq += len;
                }
                let flags = if g.chance(50) { "P." } else { "." };
                format!(
                    "< {flags} {start}:{}({len}) ack {} win {win}{}",
                    start + len,
                    acked + 1,
                    opts_of(&ts_opts(&mut ts, t))
                )
            }
            85..=89 if !peer_fin => {
                peer_fin = true;
                let s = format!(
                    "< F. {peer_seq}:{peer_seq}(0) ack {} win {win}{}",
                    acked + 1,
                    opts_of(&ts_opts(&mut ts, t))
                );
                peer_seq += 1;
                s
            }
            90..=93 if !closed => {
                closed = true;
                "shutdown(4, SHUT_WR) = 0".to_string()
            }
            94..=96 if !closed => {
                closed = true;
                "close(4) = 0".to_string()
            }
            97..=99 => {
                closed = true;
                peer_fin = true;
                format!("< R. {peer_seq}:{peer_seq}(0) ack {} win 0", acked + 1)
            }
            _ => continue,
        };
        actions.push((t, a));
    }
    // A quiet second for the timers.
    let end = t + 1.0;
    Scenario {
        seed,
        head,
        actions,
        end,
    }
}

/// `nop,nop,TS val V ecr E,` for a segment at `t` when the scenario has timestamps, else
/// nothing (the start of an option list).
fn ts_opts(ts: &mut Option<PeerTs>, t: f64) -> String {
    ts.as_mut()
        .map(|p| format!("nop,nop,{},", p.opt(t)))
        .unwrap_or_default()
}

/// An option list from [`ts_opts`]' start: ` <...>`, or nothing when it is empty.
fn opts_of(start: &str) -> String {
    match start.strip_suffix(',') {
        Some(o) => format!(" <{o}>"),
        None => String::new(),
    }
}

/// The outcome of one fuzzed scenario.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The engine replayed the kernel's recording.
    Agree,
    /// The engine did not: the (shrunk) scenario, its recording, and the engine's failure.
    Disagree {
        /// The minimal scenario that still diverges.
        scenario: Scenario,
        /// The kernel's recording of it.
        recorded: String,
        /// Where and why the engine's replay failed.
        failure: String,
    },
    /// The engine did not replay the recording, but neither did the kernel itself on one of
    /// its re-runs, failing at the same line with the same kind of mismatch: the divergence
    /// lies within the kernel's own run-to-run variance (a timer landing on the other side
    /// of a tick, a race decided the other way), so it says nothing of the engine's
    /// fidelity. Counted apart from agreements and disagreements.
    KernelVaries {
        /// The kernel's recording.
        recorded: String,
        /// Where and why the engine's replay failed.
        failure: String,
        /// The kernel's failure on its own recording (`fail:LINE:KIND`) and on which re-run.
        kernel: String,
    },
    /// The kernel could not run the scenario (not counted).
    Rejected(String),
}

/// Replays a recording on the engine over IPv4 or IPv6: `None` when it passes, else the
/// failure.
pub fn replay(name: &str, script: &str, ipv6: bool) -> Option<String> {
    replay_in(
        name,
        script,
        if ipv6 {
            crate::judge::Variant::Ipv6
        } else {
            crate::judge::Variant::Ipv4
        },
    )
}

/// Replays a recording on the engine in `variant`: `None` when it passes, else the failure.
pub fn replay_in(name: &str, script: &str, variant: crate::judge::Variant) -> Option<String> {
    let o = replay_outcome(name, script, variant);
    (o.status != Status::Pass).then(|| format!("line {}: {}", o.line, o.reason))
}

/// The engine's outcome of a recording in `variant`.
pub fn replay_outcome(name: &str, script: &str, variant: crate::judge::Variant) -> Outcome {
    let Ok(cfg) = variant.run_config() else {
        return Outcome::skip(format!("the engine does not run the {variant} variant"));
    };
    match crate::parse_script(name, script) {
        Ok(s) => {
            let r = run_script(&s, &cfg);
            Outcome {
                status: r.status,
                line: r.line,
                kind: r.kind,
                reason: r.reason,
            }
        }
        Err(e) => Outcome {
            status: Status::Fail,
            line: e.line,
            kind: Some(crate::FailKind::Script),
            reason: format!("recorded script does not parse: {e}"),
        },
    }
}

/// Re-runs the kernel's recording on the kernel up to `repeats` times and returns the first
/// run that fails where the engine's replay `engine` failed (same line, same kind), with
/// its number (1-based): the divergence is then inside the kernel's own variance.
fn kernel_also_fails(
    rec: &Recorder,
    recorded: &str,
    engine: &Outcome,
    repeats: usize,
) -> Result<Option<(usize, Outcome)>, RecordError> {
    for i in 1..=repeats {
        let k = rec.run_on_kernel(recorded)?;
        if k.status == Status::Fail && agreement(&k, engine) == Agreement::Agree {
            return Ok(Some((i, k)));
        }
    }
    Ok(None)
}

/// Records and replays the scenario of `seed`. On a divergence, first re-runs the recording
/// on the kernel up to `kernel_repeats` times ([`Verdict::KernelVaries`] if the kernel fails
/// its own recording where the engine did), then removes actions one at a time (last first)
/// while the rest still diverges, at most `shrink_budget` kernel runs.
pub fn fuzz_one(
    rec: &Recorder,
    seed: u64,
    timestamps: bool,
    shrink_budget: usize,
    kernel_repeats: usize,
) -> Result<Verdict, RecordError> {
    let name = format!("fuzz-{seed}.pkt");
    let sc = generate_with(seed, timestamps);
    let diverges = |sc: &Scenario| -> Result<Option<(String, String)>, RecordError> {
        match rec.record(&name, &sc.text()) {
            Ok(r) => Ok(replay_in(&name, &r.script, rec.variant).map(|f| (r.script, f))),
            Err(RecordError::Rejected { line, reason }) => {
                Err(RecordError::Rejected { line, reason })
            }
            Err(e) => Err(e),
        }
    };
    let (mut recorded, mut failure) = match diverges(&sc) {
        Ok(None) => return Ok(Verdict::Agree),
        Ok(Some(x)) => x,
        Err(RecordError::Rejected { line, reason }) => {
            return Ok(Verdict::Rejected(format!("line {line}: {reason}")))
        }
        Err(e) => return Err(e),
    };
    let engine = replay_outcome(&name, &recorded, rec.variant);
    if let Some((run, k)) = kernel_also_fails(rec, &recorded, &engine, kernel_repeats)? {
        return Ok(Verdict::KernelVaries {
            recorded,
            failure,
            kernel: format!(
                "{} on re-run {run} of {kernel_repeats}: {}",
                k.short(),
                k.reason
            ),
        });
    }
    let mut best = sc;
    let mut budget = shrink_budget;
    let mut i = best.len();
    while i > 0 && budget > 0 {
        i -= 1;
        budget -= 1;
        let cand = best.without(i);
        if let Ok(Some((r, f))) = diverges(&cand) {
            best = cand;
            recorded = r;
            failure = f;
        }
    }
    Ok(Verdict::Disagree {
        scenario: best,
        recorded,
        failure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_are_deterministic_and_well_formed() {
        for seed in 0..200 {
            let a = generate(seed).text();
            assert_eq!(a, generate(seed).text());
            // Times never go backwards and the text is a script our parser reads.
            let times: Vec<f64> = a
                .lines()
                .filter_map(|l| l.split_whitespace().next()?.parse().ok())
                .collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]), "{a}");
            crate::parse_script("fuzz", &a).unwrap_or_else(|e| panic!("{e}\n{a}"));
        }
        assert_ne!(generate(1).text(), generate(2).text());
    }

    #[test]
    fn timestamps_only_add_options() {
        for seed in 0..200 {
            let plain = generate(seed).text();
            let ts = generate_with(seed, true).text();
            assert_eq!(ts, generate_with(seed, true).text());
            crate::parse_script("fuzz", &ts).unwrap_or_else(|e| panic!("{e}\n{ts}"));
            assert!(ts.starts_with("--tcp_ts_ecr_scaled\n"));
            // The same events at the same times.
            let events = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| !l.starts_with("--"))
                    .map(|l| l.split(" <").next().unwrap_or(l).to_string())
                    .collect()
            };
            assert_eq!(events(&plain), events(&ts), "{plain}\n{ts}");
            // Every inbound segment but an RST carries a timestamp whose echo never runs
            // ahead of the kernel's clock at that time.
            for l in ts
                .lines()
                .filter(|l| l.contains(" < ") && !l.contains(" < R"))
            {
                let t: f64 = l.split_whitespace().next().unwrap().parse().unwrap();
                let ecr: u64 = l
                    .split("ecr ")
                    .nth(1)
                    .and_then(|x| x.split(|c: char| !c.is_ascii_digit()).next())
                    .and_then(|x| x.parse().ok())
                    .unwrap_or_else(|| panic!("no TS in {l}"));
                if !l.contains(" < S ") {
                    let anchor = if ts.contains("listen(3") { 0.1 } else { 0.0 };
                    assert!(ecr <= 100 + ((t - anchor) * 1000.0).round() as u64, "{l}");
                }
            }
        }
    }

    #[test]
    fn shrinking_removes_actions() {
        let s = generate(7);
        let n = s.len();
        assert!(n > 0);
        assert_eq!(s.without(0).len(), n - 1);
    }
}
