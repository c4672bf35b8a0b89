//! `shallow-drill`: Linux's packetdrill script language for Shallow.
//!
//! The crate holds the language (the first five modules need no engine) and the runner:
//!
//! * [`parse_script`] — a parser for the language (grammar in `spec/packetdrill.md` §3.1)
//!   into the tree in [`ast`], with [`ParseError`]s that point at `file:line:col`;
//! * [`symbols`] — the Linux constants scripts name (errnos, socket options, flags ...);
//! * [`env`](mod@env) — the backtick shell commands scripts run, turned into structured actions
//!   (sysctl writes, qdisc and route changes, `nstat` counter checks ...);
//! * [`python`] — an evaluator for the small `%{ assert ... }%` snippets;
//! * [`expectations`] — the per-script expected outcome file and the comparison of a run
//!   against it;
//! * [`run`] — the runner: one [`shallow_tcp::Stack`] driven through a script in virtual
//!   time ([`run_file`], [`run_script`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ast;
pub mod env;
mod error;
pub mod expectations;
pub mod fuzz;
pub mod judge;
pub mod outcome;
mod parser;
pub mod python;
pub mod record;
pub mod run;
pub mod symbols;

pub use ast::*;
pub use error::ParseError;
pub use outcome::FailKind;
pub use parser::parse_script;
pub use run::{run_file, run_script, Report, RunConfig};

/// Reads and parses a script file. The path as given becomes [`Script::file`].
pub fn parse_file(path: &std::path::Path) -> Result<Script, ParseError> {
    let name = path.display().to_string();
    match std::fs::read(path) {
        Ok(bytes) => parse_script(&name, &String::from_utf8_lossy(&bytes)),
        Err(e) => Err(ParseError {
            file: name,
            line: 0,
            col: 0,
            message: format!("cannot read file: {e}"),
        }),
    }
}
