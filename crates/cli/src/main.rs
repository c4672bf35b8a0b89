//! `shallow`: the command-line front end of the Shallow user-space TCP/IP stack.
//!
//! Each command lives in its own module; this file only parses arguments and dispatches.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

/// mimalloc instead of glibc's malloc: the emulator allocates and frees packet and skb
/// buffers of 1.5–256 KiB at a high rate, where glibc keeps returning memory to the kernel
/// and faulting it back in (measured in the README's benchmark section).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod decode;
mod drill;
mod lab;
mod nc;
mod netns;
mod proxy;
mod ss;

/// Shallow: a user-space TCP/IP stack with Linux's shallow-queue send path.
#[derive(Debug, Parser)]
#[command(name = "shallow", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run netperf-style workloads (TCP_STREAM, TCP_RR, TCP_MAERTS, BULK) between two
    /// emulated hosts running the engine, in deterministic virtual time, and report metrics;
    /// or, with `--substrate linux`, between Shallow on a TUN and the Linux kernel's TCP.
    Bench(Box<bench::BenchArgs>),
    /// Print every packet of a pcap/pcapng capture on one line, like tcpdump.
    Decode(decode::DecodeArgs),
    /// Run packetdrill scripts against the engine in virtual time (files or directories).
    Drill(drill::DrillArgs),
    /// Reproduce each seed commit's measurement on the emulator, mechanism off vs on,
    /// beside the published figures (tsq, notsent-lowat, pollout, autocork, ack-defer, all).
    Lab(lab::LabArgs),
    /// netcat over Shallow: `nc -l PORT` or `nc HOST PORT` through the TUN of `shallow netns
    /// up`, copying stdin to the connection and the connection to stdout (needs root).
    Nc(nc::NcArgs),
    /// Shallow as the TCP stack of a TUN-based proxy: accept every TCP connection that
    /// arrives on the TUN, for any destination, and relay it there directly (`--direct`) or
    /// through a SOCKS5 server (`--socks5 HOST:PORT`) (needs root).
    Proxy(Box<proxy::ProxyArgs>),
    /// Create or delete the kernel peer of a Shallow TUN: a network namespace with a
    /// persistent TUN and addresses on the kernel side (needs root).
    Netns(netns::NetnsArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Decode(args) => decode::run(&args),
        Command::Drill(args) => drill::run(&args),
        Command::Lab(args) => lab::run(&args),
        Command::Netns(args) => netns::run(&args),
        Command::Nc(args) => nc::run(&args),
        Command::Proxy(args) => proxy::run(&args),
    }
}
