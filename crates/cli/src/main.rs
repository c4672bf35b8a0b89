//! `shallow`: the command-line front end of the Shallow user-space TCP/IP stack.
//!
//! Each command lives in its own module; this file only parses arguments and dispatches.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

mod decode;

/// Shallow: a user-space TCP/IP stack with Linux's shallow-queue send path.
#[derive(Debug, Parser)]
#[command(name = "shallow", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every packet of a pcap/pcapng capture on one line, like tcpdump.
    Decode(decode::DecodeArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Decode(args) => decode::run(&args),
    }
}
