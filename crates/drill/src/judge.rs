//! The running Linux kernel as the judge: each script runs on the engine (in virtual time,
//! [`crate::run_file`]) and on the kernel (the packetdrill tool, in a fresh network namespace
//! per script), and the two outcomes are compared.
//!
//! Two runs **agree** when both pass, or both fail at the same line with the same
//! [`FailKind`]. A kernel run that could not run the script as written (a qdisc the kernel
//! lacks, a sysctl the namespace refuses, a missing tool) and a script the engine skips are
//! not judged: they count neither way and say why.
//!
//! The kernel side needs root, `unshare`, `ip` and a packetdrill binary built from
//! `../shared/packetdrill/src` (`build-packetdrill.sh`); [`Packetdrill::run`] invokes it with
//! the arguments of Linux's own runner for each [`Variant`].

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::outcome::FailKind;
pub use crate::outcome::Outcome;
use crate::outcome::Status;
use crate::run::{Report, RunConfig};

/// The address families Linux's packetdrill runner (`run_all.py`) runs each script in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Variant {
    /// IPv4 sockets and packets.
    #[serde(rename = "ipv4")]
    Ipv4,
    /// IPv6 sockets and packets (MTU 1520, so the scripts' MSS holds).
    #[serde(rename = "ipv6")]
    Ipv6,
    /// AF_INET6 sockets talking to IPv4 peers through IPv4-mapped addresses.
    #[serde(rename = "ipv4-mapped-ipv6")]
    Ipv4MappedIpv6,
}

impl Variant {
    /// All three, in the order Linux's runner lists them.
    pub const ALL: [Variant; 3] = [Variant::Ipv4, Variant::Ipv6, Variant::Ipv4MappedIpv6];

    /// The name packetdrill's `--ip_version` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Ipv4 => "ipv4",
            Variant::Ipv6 => "ipv6",
            Variant::Ipv4MappedIpv6 => "ipv4-mapped-ipv6",
        }
    }

    /// Whether Linux's runner runs `script` in this variant: a name ending in `v6.pkt` is
    /// IPv6-only, one ending in `v4.pkt` IPv4-only (IPv4 and IPv4-mapped-IPv6).
    pub fn applies_to(self, script: &str) -> bool {
        match self {
            Variant::Ipv4 | Variant::Ipv4MappedIpv6 => !script.ends_with("v6.pkt"),
            Variant::Ipv6 => !script.ends_with("v4.pkt"),
        }
    }

    /// The `-D NAME=VALUE` definitions of [`Variant::packetdrill_args`] (`TFO_COOKIE`, the
    /// kernel's Fast Open cookie for the suite's key and addresses; `CODE`; ...).
    pub fn defines(self) -> impl Iterator<Item = (&'static str, &'static str)> {
        let a = self.packetdrill_args();
        a.iter()
            .zip(a.iter().skip(1))
            .filter(|(flag, _)| **flag == "-D")
            .filter_map(|(_, d)| d.split_once('='))
    }

    /// The address a `--NAME=ADDR` argument of [`Variant::packetdrill_args`] gives
    /// (`local_ip`, `remote_ip`, `gateway_ip`).
    pub fn address(self, name: &str) -> Option<core::net::IpAddr> {
        self.packetdrill_args().iter().find_map(|a| {
            a.strip_prefix("--")?
                .strip_prefix(name)?
                .strip_prefix('=')?
                .parse()
                .ok()
        })
    }

    /// packetdrill's command-line arguments for this variant (those of Linux's runner).
    pub fn packetdrill_args(self) -> &'static [&'static str] {
        match self {
            Variant::Ipv4 => &[
                "--ip_version=ipv4",
                "--local_ip=192.168.0.1",
                "--gateway_ip=192.168.0.1",
                "--netmask_ip=255.255.0.0",
                "--remote_ip=192.0.2.1",
                "-D",
                "TFO_COOKIE=3021b9d889017eeb",
                "-D",
                "CODE=host_unreachable",
                "-D",
                "CMSG_LEVEL_IP=SOL_IP",
                "-D",
                "CMSG_TYPE_RECVERR=IP_RECVERR",
            ],
            Variant::Ipv6 => &[
                "--ip_version=ipv6",
                "--mtu=1520",
                "--local_ip=fd3d:0a0b:17d6::1",
                "--gateway_ip=fd3d:0a0b:17d6:8888::1",
                "--remote_ip=fd3d:fa7b:d17d::1",
                "-D",
                "TFO_COOKIE=c1d1e9742a47a9bc",
                "-D",
                "CMSG_LEVEL_IP=SOL_IPV6",
                "-D",
                "CMSG_TYPE_RECVERR=IPV6_RECVERR",
            ],
            Variant::Ipv4MappedIpv6 => &[
                "--ip_version=ipv4-mapped-ipv6",
                "--local_ip=192.168.0.1",
                "--gateway_ip=192.168.0.1",
                "--netmask_ip=255.255.0.0",
                "--remote_ip=192.0.2.1",
                "-D",
                "TFO_COOKIE=3021b9d889017eeb",
                "-D",
                "CODE=host_unreachable",
                "-D",
                "CMSG_LEVEL_IP=SOL_IPV6",
                "-D",
                "CMSG_TYPE_RECVERR=IPV6_RECVERR",
            ],
        }
    }

    /// The engine runner's configuration for this variant, or why the engine cannot run it.
    pub fn run_config(self) -> Result<RunConfig, &'static str> {
        match self {
            Variant::Ipv4 => Ok(RunConfig {
                ipv6: false,
                mapped: false,
                verbose: false,
            }),
            Variant::Ipv6 => Ok(RunConfig {
                ipv6: true,
                mapped: false,
                verbose: false,
            }),
            Variant::Ipv4MappedIpv6 => Ok(RunConfig {
                ipv6: false,
                mapped: true,
                verbose: false,
            }),
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Variant::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| format!("unknown variant {s:?} (ipv4, ipv6, ipv4-mapped-ipv6)"))
    }
}

impl From<&Report> for Outcome {
    fn from(r: &Report) -> Outcome {
        Outcome {
            status: r.status,
            line: r.line,
            kind: r.kind,
            reason: r.reason.clone(),
        }
    }
}

/// Whether two outcomes of one script agree, or why they cannot be judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Agreement {
    /// Both pass, or both fail at the same line with the same kind.
    Agree,
    /// Both ran and they differ.
    Disagree,
    /// One side did not run the script as written.
    Skipped,
}

/// Compares the kernel's outcome with the engine's.
pub fn agreement(kernel: &Outcome, shallow: &Outcome) -> Agreement {
    match (kernel.status, shallow.status) {
        (Status::Skip, _) | (_, Status::Skip) => Agreement::Skipped,
        (Status::Pass, Status::Pass) => Agreement::Agree,
        (Status::Fail, Status::Fail)
            if kernel.line == shallow.line && kernel.kind == shallow.kind =>
        {
            Agreement::Agree
        }
        _ => Agreement::Disagree,
    }
}

/// Reads packetdrill's output for a script: the first `NAME:LINE: message` line it printed
/// (NAME being the script's file name) and the words that tell its kind. `exit_ok` is the
/// tool's exit status being 0. Output that shows the environment refused part of the
/// script's set-up makes the outcome a skip, whatever the exit status.
pub fn parse_packetdrill_output(file_name: &str, exit_ok: bool, output: &str) -> Outcome {
    if let Some(why) = environment_problem(output) {
        return Outcome::skip(format!("kernel environment: {why}"));
    }
    if exit_ok {
        return Outcome::pass();
    }
    let prefix = format!("{file_name}:");
    let mut first = None;
    for l in output.lines() {
        let Some(rest) = l.strip_prefix(&prefix) else {
            continue;
        };
        let Some((num, msg)) = rest.split_once(':') else {
            continue;
        };
        if let Ok(n) = num.trim().parse::<u32>() {
            first = Some((n, msg.trim().to_string()));
            break;
        }
    }
    let Some((line, msg)) = first else {
        let tail: String = output
            .lines()
            .last()
            .unwrap_or("")
            .chars()
            .take(300)
            .collect();
        return Outcome {
            status: Status::Fail,
            line: 0,
            kind: Some(FailKind::Other),
            reason: format!("packetdrill failed without naming a line: {tail}"),
        };
    };
    let kind = if msg.contains("timing error") {
        FailKind::Timing
    } else if msg.contains("error in Python code") {
        FailKind::Assertion
    } else if msg.contains("error handling packet") || msg.contains("packet") {
        FailKind::Packet
    } else if msg.contains("error executing") || msg.contains("non-zero status") {
        FailKind::Command
    } else if msg.contains("semantic error") || msg.contains("syntax error") {
        FailKind::Script
    } else {
        FailKind::Syscall
    };
    // Python's own message (the assertion's value) is on a later line: keep it.
    let mut reason = msg;
    if kind == FailKind::Assertion {
        if let Some(a) = output.lines().find(|l| l.starts_with("AssertionError")) {
            reason = format!("{reason}: {a}");
        }
    }
    Outcome {
        status: Status::Fail,
        line,
        kind: Some(kind),
        reason,
    }
}

/// Output of the set-up commands that shows the kernel did not run the script as written.
fn environment_problem(output: &str) -> Option<String> {
    const SIGNS: [(&str, &str); 8] = [
        (
            "Specified qdisc kind is unknown",
            "the kernel lacks a qdisc the script selects",
        ),
        ("Operation not permitted", "a setting was refused"),
        (
            "RTNETLINK answers",
            "a route or link change was refused (the script names other addresses than the run)",
        ),
        ("cannot stat /proc/sys", "a sysctl the kernel lacks"),
        ("command not found", "a tool the script calls is missing"),
        // dash's words for it, and the status packetdrill reports for the set-up command.
        (": not found", "a tool the script calls is missing"),
        (
            "init command: non-zero status 127",
            "a tool the script calls is missing",
        ),
        ("Unknown symbol", "a symbol packetdrill does not know"),
    ];
    for (sign, what) in SIGNS {
        if let Some(l) = output.lines().find(|l| l.contains(sign)) {
            return Some(format!("{what} ({})", l.trim()));
        }
    }
    None
}

/// Errors of the kernel side.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// Starting the tool failed.
    #[error("cannot run {what}: {source}")]
    Spawn {
        /// What was run.
        what: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// The packetdrill tool, run against the running kernel.
#[derive(Debug, Clone)]
pub struct Packetdrill {
    /// Path of the packetdrill binary.
    pub binary: PathBuf,
    /// A run still going after this long is killed and reported as not judged.
    pub timeout: Duration,
}

/// One kernel run: its outcome, everything packetdrill printed, and how long it took.
#[derive(Debug, Clone)]
pub struct KernelRun {
    /// The outcome read from the output.
    pub outcome: Outcome,
    /// stdout and stderr.
    pub output: String,
    /// Wall-clock time of the run.
    pub elapsed: Duration,
}

impl Packetdrill {
    /// Runs `script` on the running kernel, from the script's folder (the scripts call
    /// `../common/defaults.sh` by relative path) in a fresh network namespace with its
    /// loopback up: `unshare -n sh -c 'ip link set lo up && exec packetdrill ARGS FILE'`.
    pub fn run(&self, script: &Path, variant: Variant) -> Result<KernelRun, JudgeError> {
        self.run_in_netns(script, variant, "ip link set lo up && exec \"$@\"", &[])
    }

    /// As [`Packetdrill::run`], with `tcpdump -i any` capturing every packet of the
    /// namespace (both directions, whole packets) into `pcap` while the script runs.
    pub fn run_captured(
        &self,
        script: &Path,
        variant: Variant,
        pcap: &Path,
    ) -> Result<KernelRun, JudgeError> {
        // tcpdump starts before packetdrill creates tun0; `-i any` sees interfaces that
        // appear later. Its file exists once it is capturing (at most a second's wait).
        const SHELL: &str = "ip link set lo up || exit 1; cap=$1; shift; \
            tcpdump -i any -s 0 -U --immediate-mode -Z root -w \"$cap\" >/dev/null 2>&1 & tp=$!; \
            i=0; while [ ! -s \"$cap\" ] && [ $i -lt 50 ]; do sleep 0.02; i=$((i+1)); done; \
            \"$@\"; rc=$?; sleep 0.05; kill $tp 2>/dev/null; wait $tp; exit $rc";
        self.run_in_netns(script, variant, SHELL, &[pcap.as_os_str()])
    }

    fn run_in_netns(
        &self,
        script: &Path,
        variant: Variant,
        shell: &str,
        leading: &[&std::ffi::OsStr],
    ) -> Result<KernelRun, JudgeError> {
        let dir = script
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let file = script
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let out_path = std::env::temp_dir().join(format!(
            "shallow-judge-{}-{}.out",
            std::process::id(),
            OUT_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let out = std::fs::File::create(&out_path)?;
        let err = out.try_clone()?;
        let started = Instant::now();
        let mut child = Command::new("unshare")
            .arg("-n")
            .arg("--")
            .arg("sh")
            .arg("-c")
            .arg(shell)
            .arg("sh")
            .args(leading)
            .arg(&self.binary)
            .args(variant.packetdrill_args())
            .arg(&file)
            .current_dir(dir)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|source| JudgeError::Spawn {
                what: format!("unshare -n {}", self.binary.display()),
                source,
            })?;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break Some(s);
            }
            if started.elapsed() > self.timeout {
                // The whole group: the shell, packetdrill, tcpdump.
                let _ = Command::new("kill")
                    .arg("-KILL")
                    .arg(format!("-{}", child.id()))
                    .status();
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = started.elapsed();
        let mut output = String::new();
        std::fs::File::open(&out_path)?
            .take(1 << 20)
            .read_to_string(&mut output)
            .ok();
        let _ = std::fs::remove_file(&out_path);
        let outcome = match status {
            None => Outcome::skip(format!(
                "kernel run did not finish in {} s (killed)",
                self.timeout.as_secs()
            )),
            Some(s) => parse_packetdrill_output(&file, s.success(), &output),
        };
        Ok(KernelRun {
            outcome,
            output,
            elapsed,
        })
    }
}

/// A packetdrill binary for the judge: `$SHALLOW_PACKETDRILL` if set, else one built once
/// from `../shared/packetdrill/src` with its `build-packetdrill.sh` into
/// `$TMPDIR/shallow-packetdrill/` (kept for later runs).
pub fn find_or_build_packetdrill() -> Result<PathBuf, JudgeError> {
    if let Some(p) = std::env::var_os("SHALLOW_PACKETDRILL") {
        return Ok(PathBuf::from(p));
    }
    let out = std::env::temp_dir().join("shallow-packetdrill");
    let bin = out.join("packetdrill");
    if bin.is_file() {
        return Ok(bin);
    }
    let script = crate::expectations::corpus_root()
        .and_then(|tcp| tcp.parent().map(|p| p.join("build-packetdrill.sh")))
        .filter(|p| p.is_file())
        .ok_or_else(|| {
            JudgeError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "../shared/packetdrill/build-packetdrill.sh not found; give --packetdrill PATH",
            ))
        })?;
    // Built beside and renamed into place, so two runs at once never see half a build.
    let tmp =
        std::env::temp_dir().join(format!("shallow-packetdrill.build-{}", std::process::id()));
    let status = Command::new("bash")
        .arg(&script)
        .arg(&tmp)
        .stdout(Stdio::null())
        .status()
        .map_err(|source| JudgeError::Spawn {
            what: script.display().to_string(),
            source,
        })?;
    if !status.success() || !tmp.join("packetdrill").is_file() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(JudgeError::Io(std::io::Error::other(format!(
            "{} failed ({status}); it needs gcc, make, bison and flex",
            script.display()
        ))));
    }
    if std::fs::rename(&tmp, &out).is_err() {
        // Another run put its build there first.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(bin)
}

static OUT_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The running kernel's release (`/proc/sys/kernel/osrelease`), e.g. `6.18.44`.
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// What the kernel side needs, missing on this machine (empty when all is there): root, the
/// `unshare` and `ip` tools, `python3` (for `%{ }%` snippets) and the binary.
pub fn missing_prerequisites(binary: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push("root (network namespaces)".to_string());
    }
    for tool in ["unshare", "ip", "python3"] {
        if !on_path(tool) {
            missing.push(format!("`{tool}` on PATH"));
        }
    }
    if !binary.is_file() {
        missing.push(format!("packetdrill binary at {}", binary.display()));
    }
    missing
}

/// What [`Packetdrill::run_captured`] needs beyond [`missing_prerequisites`]: `tcpdump`.
pub fn missing_for_capture() -> Vec<String> {
    if on_path("tcpdump") {
        Vec::new()
    } else {
        vec!["`tcpdump` on PATH".to_string()]
    }
}

fn is_root() -> bool {
    // The effective uid, from /proc: no libc call needed.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// The suite's scripts select CUBIC (`net.ipv4.tcp_congestion_control=cubic`), which a new
/// network namespace may set only when it is in `net.ipv4.tcp_allowed_congestion_control`.
/// Adds it there if the kernel has it and it is missing; the guard puts the old list back.
pub fn allow_cubic() -> Result<AllowedCcGuard, JudgeError> {
    const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let old = std::fs::read_to_string(ALLOWED)?.trim().to_string();
    let available = std::fs::read_to_string(AVAILABLE)?;
    let has = |list: &str| list.split_whitespace().any(|c| c == "cubic");
    if has(&old) || !has(&available) {
        return Ok(AllowedCcGuard { restore: None });
    }
    std::fs::write(ALLOWED, format!("{old} cubic"))?;
    Ok(AllowedCcGuard { restore: Some(old) })
}

/// Restores `net.ipv4.tcp_allowed_congestion_control` when dropped (see [`allow_cubic`]).
#[derive(Debug)]
pub struct AllowedCcGuard {
    restore: Option<String>,
}

impl AllowedCcGuard {
    /// Whether the list was changed.
    pub fn changed(&self) -> bool {
        self.restore.is_some()
    }
}

impl Drop for AllowedCcGuard {
    fn drop(&mut self) {
        if let Some(old) = &self.restore {
            let _ = std::fs::write("/proc/sys/net/ipv4/tcp_allowed_congestion_control", old);
        }
    }
}

/// One script judged: the kernel's outcome (the majority of its runs), every kernel run, the
/// engine's outcome, and whether they agree.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Judged {
    /// Script path as given.
    pub path: String,
    /// The kernel's outcome (the most frequent one over its runs; ties go to the first).
    pub kernel: Outcome,
    /// Each kernel run's short outcome (`pass`, `fail:LINE:KIND`, `skip`) when there was
    /// more than one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_runs: Vec<String>,
    /// The engine's outcome.
    pub shallow: Outcome,
    /// The verdict.
    pub agreement: Agreement,
}

/// Runs one script on the engine and on the kernel. When the first kernel run disagrees
/// with the engine, the kernel runs `repeat - 1` more times and its outcome is the most
/// frequent one (timing on a loaded machine varies by milliseconds; every run is listed).
pub fn judge_script(
    pd: &Packetdrill,
    script: &Path,
    variant: Variant,
    repeat: u32,
) -> Result<Judged, JudgeError> {
    let shallow = match variant.run_config() {
        Ok(cfg) => Outcome::from(&crate::run_file(script, &cfg)),
        Err(why) => Outcome::skip(why),
    };
    let first = pd.run(script, variant)?.outcome;
    let mut runs = vec![first.clone()];
    if agreement(&first, &shallow) == Agreement::Disagree {
        for _ in 1..repeat.max(1) {
            runs.push(pd.run(script, variant)?.outcome);
        }
    }
    let kernel = majority(&runs);
    let agreement = agreement(&kernel, &shallow);
    Ok(Judged {
        path: script.display().to_string(),
        kernel,
        kernel_runs: if runs.len() > 1 {
            runs.iter().map(Outcome::short).collect()
        } else {
            Vec::new()
        },
        shallow,
        agreement,
    })
}

/// The most frequent outcome by (status, line, kind); ties go to the earliest run.
fn majority(runs: &[Outcome]) -> Outcome {
    let key = |o: &Outcome| (o.status, o.line, o.kind);
    let mut best = &runs[0];
    let mut best_n = 0;
    for r in runs {
        let n = runs.iter().filter(|o| key(o) == key(r)).count();
        if n > best_n {
            best = r;
            best_n = n;
        }
    }
    best.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_packetdrill_failures_by_kind() {
        let timing = "x.pkt:20: error handling packet: timing error: expected outbound packet at 0.010626 sec but happened at 0.015765 sec; tolerance 0.004000 sec\nscript packet: ...\n";
        let o = parse_packetdrill_output("x.pkt", false, timing);
        assert_eq!(
            (o.status, o.line, o.kind),
            (Status::Fail, 20, Some(FailKind::Timing))
        );
        let field = "x.pkt:40: error handling packet: live packet payload: expected 16000 bytes vs actual 20000 bytes\n";
        let o = parse_packetdrill_output("x.pkt", false, field);
        assert_eq!((o.line, o.kind), (40, Some(FailKind::Packet)));
        let py = "20\nx.pkt:53: error in Python code\nTraceback (most recent call last):\nAssertionError: 36\nx.pkt: error executing code: 'python3' returned non-zero status 1\n";
        let o = parse_packetdrill_output("x.pkt", false, py);
        assert_eq!((o.line, o.kind), (53, Some(FailKind::Assertion)));
        assert!(o.reason.ends_with("AssertionError: 36"), "{}", o.reason);
        let sys = "x.pkt:12: runtime error in write call: Expected result 10 but got -1 with errno 11 (Resource temporarily unavailable)\n";
        let o = parse_packetdrill_output("x.pkt", false, sys);
        assert_eq!((o.line, o.kind), (12, Some(FailKind::Syscall)));
        // Another file's name at the start of a line is not this script's error.
        let o = parse_packetdrill_output("x.pkt", false, "y.pkt:3: timing error\n");
        assert_eq!((o.line, o.kind), (0, Some(FailKind::Other)));
        assert_eq!(
            parse_packetdrill_output("x.pkt", true, "").status,
            Status::Pass
        );
    }

    #[test]
    fn a_missing_tool_is_not_judged() {
        let out = "sh: 1: ethtool: not found\nbasic-v4.pkt: error executing init command: non-zero status 127\n";
        let o = parse_packetdrill_output("basic-v4.pkt", false, out);
        assert_eq!(o.status, Status::Skip);
        assert!(o.reason.contains("missing"), "{}", o.reason);
    }

    #[test]
    fn environment_refusals_are_not_judged() {
        let out = "Error: Specified qdisc kind is unknown.\nx.pkt:53: error in Python code\n";
        for ok in [true, false] {
            let o = parse_packetdrill_output("x.pkt", ok, out);
            assert_eq!(o.status, Status::Skip);
            assert!(o.reason.contains("qdisc"), "{}", o.reason);
        }
    }

    #[test]
    fn agreement_needs_same_line_and_kind() {
        let fail = |line, kind| Outcome {
            status: Status::Fail,
            line,
            kind: Some(kind),
            reason: String::new(),
        };
        use FailKind::*;
        assert_eq!(
            agreement(&Outcome::pass(), &Outcome::pass()),
            Agreement::Agree
        );
        assert_eq!(
            agreement(&fail(3, Timing), &fail(3, Timing)),
            Agreement::Agree
        );
        assert_eq!(
            agreement(&fail(3, Timing), &fail(3, Packet)),
            Agreement::Disagree
        );
        assert_eq!(
            agreement(&fail(3, Timing), &fail(4, Timing)),
            Agreement::Disagree
        );
        assert_eq!(
            agreement(&fail(3, Timing), &Outcome::pass()),
            Agreement::Disagree
        );
        assert_eq!(
            agreement(&Outcome::skip("x"), &Outcome::pass()),
            Agreement::Skipped
        );
        assert_eq!(
            agreement(&Outcome::pass(), &Outcome::skip("x")),
            Agreement::Skipped
        );
    }

    #[test]
    fn majority_prefers_the_most_frequent_then_the_first() {
        let f = |line| Outcome {
            status: Status::Fail,
            line,
            kind: Some(FailKind::Timing),
            reason: format!("{line}"),
        };
        assert_eq!(
            majority(&[f(1), Outcome::pass(), Outcome::pass()]),
            Outcome::pass()
        );
        assert_eq!(majority(&[f(1), f(2)]), f(1));
    }

    #[test]
    fn variants_follow_linux_runner_naming_rules() {
        assert!(!Variant::Ipv4.applies_to("mtu_probe/basic-v6.pkt"));
        assert!(Variant::Ipv6.applies_to("mtu_probe/basic-v6.pkt"));
        assert!(!Variant::Ipv6.applies_to("mtu_probe/basic-v4.pkt"));
        assert!(!Variant::Ipv4MappedIpv6.applies_to("a/b-ipv6.pkt"));
        assert_eq!(
            "ipv4-mapped-ipv6".parse::<Variant>(),
            Ok(Variant::Ipv4MappedIpv6)
        );
    }
}
