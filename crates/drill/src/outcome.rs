//! What kind of check failed, named the way packetdrill reports it, so that a run of a
//! script on the engine and a run on the Linux kernel can be compared: they **agree** when
//! both pass, or both fail at the same line with the same [`FailKind`].

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
