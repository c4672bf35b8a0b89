//! What a run of a script produced ([`Outcome`]: its [`Status`], and for a failure the line
//! and the kind of check, named the way packetdrill reports it), so that a run on the engine
//! and a run on the Linux kernel can be compared: they **agree** when both pass, or both fail
//! at the same line with the same [`FailKind`].

use serde::{Deserialize, Serialize};

/// The kind of a failed check. packetdrill checks an outbound packet's header fields, then
/// its options, then its payload length, then its time (`verify_outbound_live_packet`), so a
/// packet that is both early and wrong fails as [`FailKind::Packet`]; the engine's runner
/// checks in the same order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailKind {
    /// An outbound packet, or a blocking system call's return, outside its time window
    /// (packetdrill: `timing error`).
    Timing,
    /// An outbound packet that differs from its `>` line (flags, sequence or ACK numbers,
    /// window, options, payload length), that never came, or that came where no `>` line
    /// expected it (packetdrill: `error handling packet`, `live packet field ...`).
    Packet,
    /// A system call's return value, errno or output argument (packetdrill: `Expected result
    /// ...`, `Bad getsockopt optval`, `poll revents ...`).
    Syscall,
    /// A `%{ }%` Python assertion (packetdrill: `error in Python code`).
    Assertion,
    /// A backtick shell command that failed (packetdrill: `non-zero status`), e.g. an
    /// `nstat` counter check.
    Command,
    /// The script cannot be run as written (parse error, a packet for no connection, a
    /// missing argument).
    Script,
    /// Anything else (a runaway run, a runner timeout, an engine panic).
    Other,
}

impl FailKind {
    /// The word used in expectation files and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FailKind::Timing => "timing",
            FailKind::Packet => "packet",
            FailKind::Syscall => "syscall",
            FailKind::Assertion => "assertion",
            FailKind::Command => "command",
            FailKind::Script => "script",
            FailKind::Other => "other",
        }
    }
}

impl std::fmt::Display for FailKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pass, fail or skip: the status of one script's run or expectation.
#[derive(
    Default, Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The script ran and every check held.
    Pass,
    /// The script ran and a check failed (or the runner could not run it yet).
    Fail,
    /// The script was not run (it needs something the runner does not support).
    #[default]
    Skip,
}

impl Status {
    /// The word used in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Fail => "fail",
            Status::Skip => "skip",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of one run of a script, on the engine or on the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// pass, fail, or skip (not run as written: a missing feature or environment).
    pub status: Status,
    /// The script line of the failure (0 when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub line: u32,
    /// The kind of the failed check (`fail` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<FailKind>,
    /// The failure or skip message (first line of packetdrill's error, or the runner's).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Outcome {
    /// A pass.
    pub fn pass() -> Outcome {
        Outcome {
            status: Status::Pass,
            line: 0,
            kind: None,
            reason: String::new(),
        }
    }

    /// A script not run as written, with the reason.
    pub fn skip(reason: impl Into<String>) -> Outcome {
        Outcome {
            status: Status::Skip,
            line: 0,
            kind: None,
            reason: reason.into(),
        }
    }

    /// `pass`, `fail at line N (kind)` or `skip`: the short form reports print.
    pub fn short(&self) -> String {
        match self.status {
            Status::Pass => "pass".into(),
            Status::Skip => "skip".into(),
            Status::Fail => match self.kind {
                Some(k) => format!("fail:{}:{k}", self.line),
                None => format!("fail:{}", self.line),
            },
        }
    }
}
