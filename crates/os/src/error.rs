//! The error type of this crate.

use std::io;

/// What went wrong while setting up or using the Linux substrate.
#[derive(Debug, thiserror::Error)]
pub enum OsError {
    /// `/dev/net/tun` does not exist.
    #[error("/dev/net/tun is missing: load the tun module (`modprobe tun`) or give the container the device")]
    TunMissing,
    /// The caller lacks the privilege (root / `CAP_NET_ADMIN`).
    #[error("{what}: permission denied (run as root, or with CAP_NET_ADMIN)")]
    NotPermitted {
        /// What was attempted.
        what: String,
    },
    /// A TUN device that should exist does not.
    #[error("TUN device {name:?} does not exist{}", in_netns(netns))]
    NoSuchTun {
        /// Device name.
        name: String,
        /// The namespace looked in, if not the caller's.
        netns: Option<String>,
    },
    /// A network namespace that should exist does not.
    #[error("network namespace {0:?} does not exist")]
    NoSuchNetns(String),
    /// A network namespace that should be new already exists.
    #[error("network namespace {0:?} already exists")]
    NetnsExists(String),
    /// A name that is not usable as an interface or namespace name.
    #[error("invalid name {0:?}: use letters, digits, `_`, `.` and `-`, not starting with `-` (at most 15 bytes for an interface, 64 for a namespace)")]
    BadName(String),
    /// A system call failed.
    #[error("{what}: {source}{}", errno_suffix(source))]
    Io {
        /// What was attempted.
        what: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// An external command (`ip`) failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed on stderr (or the spawn error).
        stderr: String,
    },
}

fn in_netns(ns: &Option<String>) -> String {
    match ns {
        Some(n) => format!(" in network namespace {n:?}"),
        None => String::new(),
    }
}

fn errno_suffix(e: &io::Error) -> String {
    match crate::sys::errno_name(e) {
        Some(n) => format!(" ({n})"),
        None => String::new(),
    }
}

impl OsError {
    /// Wraps an `io::Error` from `what`, turning `EPERM`/`EACCES` into [`OsError::NotPermitted`].
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> OsError {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => OsError::NotPermitted { what: what.into() },
            _ => OsError::Io {
                what: what.into(),
                source,
            },
        }
    }
}

/// Checks an interface or namespace name: 1..=15 bytes (`IFNAMSIZ - 1`) of `[A-Za-z0-9_.-]`,
/// so that it is valid for the kernel and safe on an `ip` command line.
pub fn check_name(name: &str) -> Result<(), OsError> {
    check_name_within(name, libc::IFNAMSIZ - 1)
}

/// Checks a name of 1..=`max` bytes of `[A-Za-z0-9_.-]`, not starting with `-` (the rule of
/// [`check_name`], and of namespace names with another length).
pub(crate) fn check_name_within(name: &str, max: usize) -> Result<(), OsError> {
    let ok = !name.is_empty()
        && name.len() <= max
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(OsError::BadName(name.to_string()))
    }
}
