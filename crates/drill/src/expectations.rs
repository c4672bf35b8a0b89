//! The expectations file: the outcome we expect for each Linux packetdrill script, and
//! the comparison of a run against it.
//!
//! The file (`crates/drill/expectations.toml`) maps each script path, relative to
//! `../shared/packetdrill/tcp`, to a status and a reason:
//!
//! ```toml
//! [scripts]
//! "blocking/blocking-connect.pkt" = { status = "pass", reason = "" }
//! "md5/md5-only-on-client-ack.pkt" = { status = "skip", reason = "needs md5" }
//! ```
//!
//! A run is judged against it: a script doing worse than expected is a regression (CI
//! fails), one doing better is an improvement (update the file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ast::{EventKind, Expr, PacketBody, Script, TcpFlags, TcpOption, TcpOptions};
use crate::env::{parse_command, EnvAction};
pub use crate::outcome::Status;
use crate::outcome::{FailKind, Outcome};

/// The expected outcome of one script: the engine's, and the running kernel's as recorded
/// by `shallow drill --judge kernel --record` (the truth the engine is held to).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
pub struct Expectation {
    /// Expected status.
    pub status: Status,
    /// Why (for `fail` and `skip`: the known deviation or the missing feature).
    #[serde(default)]
    pub reason: String,
    /// The line of an expected failure (0 when none).
    #[serde(default)]
    pub line: u32,
    /// The kind of an expected failure.
    #[serde(default)]
    pub kind: Option<FailKind>,
    /// The kernel's outcome, when recorded.
    #[serde(default)]
    pub kernel: Option<Outcome>,
}

impl Expectation {
    /// The engine's expected outcome as an [`Outcome`].
    pub fn shallow(&self) -> Outcome {
        Outcome {
            status: self.status,
            line: self.line,
            kind: self.kind,
            reason: self.reason.clone(),
        }
    }
}

/// Errors reading an expectations file.
#[derive(Debug, thiserror::Error)]
pub enum ExpectationsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is not valid TOML of the expected shape.
    #[error("invalid expectations file: {0}")]
    Format(#[from] toml::de::Error),
}

/// The whole file: script path → expectation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Expectations {
    /// The release of the kernel whose outcomes the `kernel` fields record.
    #[serde(default)]
    pub kernel_version: Option<String>,
    /// Expectations by script path relative to the `tcp/` folder of the suite.
    #[serde(default)]
    pub scripts: BTreeMap<String, Expectation>,
}

/// One script whose actual status differs from the expected one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Script path.
    pub script: String,
    /// Expected status.
    pub expected: Status,
    /// Actual status.
    pub actual: Status,
}

/// The result of comparing a run with the expectations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Worse than expected: expected `pass` but got `fail`/`skip`, or expected `skip` but
    /// got `fail`.
    pub regressions: Vec<Change>,
    /// Better than expected: got `pass` where `fail` or `skip` was expected.
    pub improvements: Vec<Change>,
    /// Different but neither better nor worse (expected `fail`, got `skip`).
    pub other_changes: Vec<Change>,
    /// Scripts with a result but no expectation (add them to the file).
    pub unlisted: Vec<String>,
    /// Scripts with an expectation but no result.
    pub missing: Vec<String>,
    /// How many scripts matched their expectation exactly.
    pub matched: usize,
}

impl Comparison {
    /// True when nothing got worse and every result is accounted for: no regressions,
    /// no unlisted scripts, and no missing script that was expected to pass.
    pub fn is_acceptable(&self, expectations: &Expectations) -> bool {
        self.regressions.is_empty()
            && self.unlisted.is_empty()
            && self.missing.iter().all(|s| {
                expectations
                    .scripts
                    .get(s)
                    .is_none_or(|e| e.status != Status::Pass)
            })
    }
}

/// Default reason of scripts that are expected to fail for now.
pub const NOT_IMPLEMENTED: &str = "runner not implemented yet";

impl Expectations {
    /// Parses the TOML text of an expectations file.
    pub fn parse(text: &str) -> Result<Self, ExpectationsError> {
        Ok(toml::from_str(text)?)
    }

    /// Reads and parses an expectations file.
    pub fn load(path: &Path) -> Result<Self, ExpectationsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ExpectationsError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text)
    }

    /// Writes the file format: a header comment, then one inline table per script, sorted.
    pub fn to_toml(&self) -> String {
        let mut out = String::from(
            "# Expected outcome of each Linux packetdrill script (../shared/packetdrill/tcp),\n\
             # one line per script: status is pass | fail | skip, reason says why.\n\
             # Read by shallow_drill::expectations; a run that does worse than this is a\n\
             # regression, one that does better means this file should be updated.\n\
             # `kernel` is the running Linux kernel's outcome of the same script (packetdrill\n\
             # in a network namespace: `shallow drill --judge kernel --record FILE`); the\n\
             # engine agrees with it when both pass or both fail at the same line with the\n\
             # same kind of mismatch, and `cargo test -p shallow-drill` fails when it stops.\n\n",
        );
        if let Some(v) = &self.kernel_version {
            out.push_str(&format!("kernel_version = {}\n\n", toml_string(v)));
        }
        out.push_str("[scripts]\n");
        for (path, e) in &self.scripts {
            out.push_str(&format!(
                "{} = {{ status = \"{}\"{}, reason = {}",
                toml_string(path),
                e.status,
                line_kind(e.line, e.kind),
                toml_string(&e.reason)
            ));
            if let Some(k) = &e.kernel {
                out.push_str(&format!(
                    ", kernel = {{ status = \"{}\"{}",
                    k.status,
                    line_kind(k.line, k.kind)
                ));
                if !k.reason.is_empty() {
                    out.push_str(&format!(", reason = {}", toml_string(&k.reason)));
                }
                out.push_str(" }");
            }
            out.push_str(" }\n");
        }
        out
    }

    /// Compares actual outcomes (script path → status) with the expectations.
    pub fn compare(&self, actual: &BTreeMap<String, Status>) -> Comparison {
        let mut c = Comparison::default();
        for (script, &got) in actual {
            let Some(exp) = self.scripts.get(script) else {
                c.unlisted.push(script.clone());
                continue;
            };
            let change = Change {
                script: script.clone(),
                expected: exp.status,
                actual: got,
            };
            match (exp.status, got) {
                (e, a) if e == a => c.matched += 1,
                (Status::Pass, _) | (Status::Skip, Status::Fail) => c.regressions.push(change),
                (_, Status::Pass) => c.improvements.push(change),
                _ => c.other_changes.push(change),
            }
        }
        c.missing = self
            .scripts
            .keys()
            .filter(|s| !actual.contains_key(*s))
            .cloned()
            .collect();
        c
    }
}

fn line_kind(line: u32, kind: Option<FailKind>) -> String {
    let mut s = String::new();
    if line > 0 {
        s += &format!(", line = {line}");
    }
    if let Some(k) = kind {
        s += &format!(", kind = \"{k}\"");
    }
    s
}

fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Path of the crate's expectations file.
pub fn default_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("expectations.toml")
}

/// The suite's `tcp/` folder, `../shared/packetdrill/tcp` relative to the repository root,
/// if present.
pub fn corpus_root() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/packetdrill/tcp");
    p.is_dir().then_some(p)
}

/// All `*.pkt` files under `root`, as sorted `/`-separated paths relative to it.
pub fn list_scripts(root: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d)? {
            let p = entry?.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "pkt") {
                if let Ok(rel) = p.strip_prefix(root) {
                    let parts: Vec<String> = rel
                        .components()
                        .map(|c| c.as_os_str().to_string_lossy().into_owned())
                        .collect();
                    out.push(parts.join("/"));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}

fn expr_symbols<'e>(e: &'e Expr, out: &mut BTreeSet<&'e str>) {
    match e {
        Expr::Symbol(s) => {
            out.insert(s);
        }
        Expr::List(v) | Expr::BitOr(v) => v.iter().for_each(|x| expr_symbols(x, out)),
        Expr::Call { args, .. } => args.iter().for_each(|x| expr_symbols(x, out)),
        Expr::Struct(fields) => fields.iter().for_each(|f| {
            expr_symbols(&f.value, out);
            if let Some(q) = &f.qualifier {
                expr_symbols(q, out);
            }
        }),
        _ => {}
    }
}

fn env_actions(script: &Script) -> Vec<EnvAction> {
    let mut texts: Vec<&str> = Vec::new();
    texts.extend(script.init_command.as_ref().map(|c| c.text.as_str()));
    for ev in &script.events {
        if let EventKind::Command(t) = &ev.kind {
            texts.push(t);
        }
    }
    texts.extend(script.cleanup_command.as_ref().map(|c| c.text.as_str()));
    fn flatten(a: EnvAction, out: &mut Vec<EnvAction>) {
        match a {
            EnvAction::Fallback { first, otherwise } => first
                .into_iter()
                .chain(otherwise)
                .for_each(|x| flatten(x, out)),
            other => out.push(other),
        }
    }
    let mut out = Vec::new();
    for t in texts {
        for a in parse_command(t) {
            flatten(a, &mut out);
        }
    }
    out
}

/// The features a script needs that Shallow does not implement (zero-copy receive, AccECN,
/// PSP), or that a script cannot drive (an outbound TCP-MD5 signature), by name, sorted. Detected
/// from the parsed script: option kinds, socket-option and flag symbols, system call names,
/// and sysctls the script writes.
pub fn unsupported_features(script: &Script) -> Vec<&'static str> {
    let mut feats = BTreeSet::new();
    let mut syms = BTreeSet::new();
    for ev in &script.events {
        match &ev.kind {
            EventKind::Syscall(c) => {
                c.args.iter().for_each(|a| expr_symbols(a, &mut syms));
                expr_symbols(&c.result, &mut syms);
            }
            EventKind::Packet(p) => {
                if let PacketBody::Tcp(t) = &p.body {
                    if t.flags.contains(TcpFlags::AE) {
                        feats.insert("AccECN");
                    }
                    if let TcpOptions::List(opts) = &t.options {
                        // An outbound signature needs a keyed socket, which a script
                        // cannot make (packetdrill's strings stop at a NUL byte, so no
                        // `struct tcp_md5sig`), and a digest packetdrill cannot compute; an
                        // inbound one to a socket without keys is dropped, as on Linux.
                        if p.direction == crate::ast::Direction::Outbound
                            && opts.iter().any(|o| matches!(o, TcpOption::Md5(_)))
                        {
                            feats.insert("md5");
                        }
                    }
                }
            }
            _ => {}
        }
    }
    for s in syms {
        if s == "TCP_ZEROCOPY_RECEIVE" {
            feats.insert("zerocopy receive");
        } else if s.contains("PSP") {
            feats.insert("PSP");
        }
    }
    for a in env_actions(script) {
        if let EnvAction::Sysctl { name, value } = a {
            if name == "net.ipv4.tcp_ecn" && value.parse::<u32>().is_ok_and(|v| v >= 3) {
                feats.insert("AccECN");
            }
        }
    }
    if script.options.iter().any(|(n, _)| n.starts_with("psp")) {
        feats.insert("PSP");
    }
    feats.into_iter().collect()
}

/// The initial expectation of a script: `skip` naming the unsupported features it needs,
/// otherwise `fail` with [`NOT_IMPLEMENTED`].
pub fn initial_expectation(script: &Script) -> Expectation {
    let feats = unsupported_features(script);
    if feats.is_empty() {
        Expectation {
            status: Status::Fail,
            reason: NOT_IMPLEMENTED.to_string(),
            ..Default::default()
        }
    } else {
        Expectation {
            status: Status::Skip,
            reason: format!("needs {}", feats.join(", ")),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exp(entries: &[(&str, Status)]) -> Expectations {
        Expectations {
            scripts: entries
                .iter()
                .map(|&(n, s)| {
                    (
                        n.to_string(),
                        Expectation {
                            status: s,
                            ..Default::default()
                        },
                    )
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn comparison_classifies_changes() {
        use Status::*;
        let e = exp(&[
            ("a", Pass),
            ("b", Fail),
            ("c", Skip),
            ("d", Skip),
            ("e", Fail),
            ("f", Pass),
            ("g", Pass),
        ]);
        let actual: BTreeMap<String, Status> = [
            ("a", Fail),
            ("b", Pass),
            ("c", Fail),
            ("d", Pass),
            ("e", Skip),
            ("f", Pass),
            ("z", Pass),
        ]
        .iter()
        .map(|&(n, s)| (n.to_string(), s))
        .collect();
        let c = e.compare(&actual);
        let names = |v: &[Change]| v.iter().map(|c| c.script.clone()).collect::<Vec<_>>();
        assert_eq!(names(&c.regressions), ["a", "c"]);
        assert_eq!(names(&c.improvements), ["b", "d"]);
        assert_eq!(names(&c.other_changes), ["e"]);
        assert_eq!(c.unlisted, ["z"]);
        assert_eq!(c.missing, ["g"]);
        assert_eq!(c.matched, 1);
        assert!(!c.is_acceptable(&e));
        let clean = exp(&[("b", Fail)]).compare(
            &[("b".to_string(), Pass)]
                .into_iter()
                .collect::<BTreeMap<_, _>>(),
        );
        assert!(clean.is_acceptable(&exp(&[("b", Fail)])));
    }

    #[test]
    fn file_round_trips_and_rejects_bad_status() {
        let mut e = exp(&[("x/y.pkt", Status::Skip)]);
        e.scripts.get_mut("x/y.pkt").unwrap().reason = "needs \"md5\"\\".into();
        assert_eq!(Expectations::parse(&e.to_toml()).unwrap(), e);
        e.kernel_version = Some("6.18.44".into());
        e.scripts.insert(
            "a/b.pkt".into(),
            Expectation {
                status: Status::Fail,
                reason: "line 7: too early".into(),
                line: 7,
                kind: Some(FailKind::Timing),
                kernel: Some(Outcome {
                    status: Status::Fail,
                    line: 7,
                    kind: Some(FailKind::Packet),
                    reason: "live packet payload".into(),
                }),
            },
        );
        assert_eq!(Expectations::parse(&e.to_toml()).unwrap(), e);
        assert!(Expectations::parse("[scripts]\n\"a\" = { status = \"flaky\" }\n").is_err());
    }

    #[test]
    fn features_detected_from_the_tree() {
        let s = crate::parse_script(
            "t",
            "0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n\
             +0 getsockopt(3, SOL_TCP, TCP_ZEROCOPY_RECEIVE, ..., ...) = 0\n\
             +0 < SA 0:0(0) win 1\n\
             +0 `sysctl -q net.ipv4.tcp_fastopen=0`\n",
        )
        .unwrap();
        assert_eq!(unsupported_features(&s), vec!["AccECN", "zerocopy receive"]);
        let plain = crate::parse_script("t", "0 `sysctl -q net.ipv4.tcp_fastopen=0`\n").unwrap();
        assert!(unsupported_features(&plain).is_empty());
        assert_eq!(initial_expectation(&plain).status, Status::Fail);
    }
}
