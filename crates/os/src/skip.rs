//! The skip rule of tests that need the real machine: root, `/dev/net/tun`, iproute2 and some
//! programs as peers. Without them a test prints `SKIPPED <test>: <why>` (straight to fd 2,
//! past the test harness's capture) and passes, unless `SHALLOW_REQUIRE_TUN=1`, which turns the
//! skip into a failure (CI sets it). One rule for every crate's tests.

use std::io::Write;
use std::process::{Command, Stdio};

/// True when `prog ARG` can be spawned (the program is installed).
pub fn have_tool(prog: &str, arg: &str) -> bool {
    Command::new(prog)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Why a test needing root, `/dev/net/tun`, iproute2 and `tools` (program, probe argument)
/// cannot run here, or `None` when it can.
pub fn missing(tools: &[(&str, &str)]) -> Option<String> {
    if !crate::is_root() {
        Some("not running as root".into())
    } else if !std::path::Path::new("/dev/net/tun").exists() {
        Some("/dev/net/tun is missing".into())
    } else if crate::netns::ip(&["-V"]).is_err() {
        Some("the `ip` command (iproute2) is missing".into())
    } else {
        tools
            .iter()
            .find(|(t, a)| !have_tool(t, a))
            .map(|(t, _)| format!("`{t}` is not installed"))
    }
}

/// Whether `SHALLOW_REQUIRE_TUN=1` is set: a skip must fail instead.
pub fn required() -> bool {
    std::env::var("SHALLOW_REQUIRE_TUN").as_deref() == Ok("1")
}

/// Applies the skip rule to `why` (a missing requirement, if any): `true` when the test may
/// run; `false` after printing `SKIPPED test: why`; panics when [`required`].
pub fn check(test: &str, why: Option<String>) -> bool {
    match why {
        None => true,
        Some(w) if required() => panic!("{test}: SHALLOW_REQUIRE_TUN=1 but {w}"),
        Some(w) => {
            let _ = std::io::stderr().write_all(format!("SKIPPED {test}: {w}\n").as_bytes());
            false
        }
    }
}

/// [`check`] of [`missing`]: may `test`, which needs root, `/dev/net/tun`, iproute2 and
/// `tools`, run here?
pub fn can_run(test: &str, tools: &[(&str, &str)]) -> bool {
    check(test, missing(tools))
}
