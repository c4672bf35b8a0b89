//! `shallow netns up|down`: the kernel peer of a Shallow TUN, in its own network namespace.
//!
//! `up` makes namespace `--name` holding a persistent TUN `--tun` whose kernel side has
//! `--addr` and `--addr6`; a Shallow process then attaches to that TUN (opening it inside the
//! namespace) and uses the next address of each subnet (10.213.0.2, fd00:213::2 by default).
//! `down` removes both. All the work is `shallow_os::Peer`'s; this module parses and prints.

use anyhow::{Context, Result};
use shallow_os::netns::{parse_cidr4, parse_cidr6};
use shallow_os::Peer;

/// Arguments of `shallow netns`.
#[derive(Debug, clap::Args)]
pub struct NetnsArgs {
    /// `up` creates the namespace and TUN; `down` deletes them.
    #[arg(value_enum)]
    pub action: Action,
    /// Network namespace name.
    #[arg(long, default_value = "shallow-peer")]
    pub name: String,
    /// Name of the persistent TUN device inside the namespace.
    #[arg(long, default_value = "shallow0")]
    pub tun: String,
    /// IPv4 address/prefix of the kernel side of the TUN ("none" for no IPv4).
    #[arg(long, default_value = "10.213.0.1/24")]
    pub addr: String,
    /// IPv6 address/prefix of the kernel side of the TUN ("none" for no IPv6).
    #[arg(long, default_value = "fd00:213::1/64")]
    pub addr6: String,
    /// `up`: make the TUN multi-queue (IFF_MULTI_QUEUE), for `shallow nc --queues N` and
    /// `shallow_os::HostConfig::queues`.
    #[arg(long)]
    pub multi_queue: bool,
}

/// What `shallow netns` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Create the namespace, the persistent TUN and the kernel-side addresses.
    Up,
    /// Delete the TUN and the namespace.
    Down,
}

/// Runs `shallow netns`.
pub fn run(args: &NetnsArgs) -> Result<()> {
    let addr4 = match args.addr.as_str() {
        "none" => None,
        s => Some(
            parse_cidr4(s)
                .map_err(anyhow::Error::msg)
                .context("--addr")?,
        ),
    };
    let addr6 = match args.addr6.as_str() {
        "none" => None,
        s => Some(
            parse_cidr6(s)
                .map_err(anyhow::Error::msg)
                .context("--addr6")?,
        ),
    };
    let peer = Peer {
        netns: args.name.clone(),
        tun: args.tun.clone(),
        addr4,
        addr6,
    };
    match args.action {
        Action::Up => {
            let granted = peer.up_with(args.multi_queue)?;
            println!(
                "netns {} up: TUN {} (persistent{}), offloads granted: {granted}",
                peer.netns,
                peer.tun,
                if args.multi_queue {
                    ", multi-queue"
                } else {
                    ""
                }
            );
            if let Some((a, p)) = peer.addr4 {
                println!("  kernel side {a}/{p}");
            }
            if let Some((a, p)) = peer.addr6 {
                println!("  kernel side {a}/{p} (nodad)");
            }
        }
        Action::Down => {
            peer.down()?;
            println!("netns {} down: TUN {} deleted", peer.netns, peer.tun);
        }
    }
    Ok(())
}
