//! `shallow proxy`: Shallow as the TCP stack of a TUN-based proxy. Attaches to a TUN (by
//! default the one `shallow netns up` made), accepts every TCP connection that arrives on
//! it for any destination, and relays each to its original destination directly through
//! this host's kernel (`--direct`) or through a SOCKS5 server (`--socks5 HOST:PORT`). Runs
//! until SIGINT or SIGTERM; SIGUSR1 prints the counters and the open connections, as does
//! the exit. Argument parsing and printing only; the relay is `shallow_proxy`'s.

use std::net::{IpAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use shallow_os::host::HostConfig;
use shallow_os::Host;
use shallow_proxy::{Config, Proxy, Upstream};
use tokio::signal::unix::{signal, SignalKind};

/// Arguments of `shallow proxy`.
#[derive(Debug, clap::Args)]
pub struct ProxyArgs {
    /// TUN device to attach to.
    #[arg(long, default_value = "shallow0")]
    pub tun: String,
    /// Network namespace holding the TUN (`shallow netns up --name`); "none" for this one.
    /// Upstream connections are made from the namespace `shallow proxy` runs in.
    #[arg(long, default_value = "shallow-peer")]
    pub netns: String,
    /// Shallow's own addresses on the TUN (repeat for several); connections to them are not
    /// proxied. Default 10.213.0.2 and fd00:213::2, those of `shallow netns up`.
    #[arg(long = "addr")]
    pub addrs: Vec<IpAddr>,
    /// Connect to each original destination directly, through this host's kernel.
    #[arg(long, conflicts_with = "socks5", required_unless_present = "socks5")]
    pub direct: bool,
    /// Connect through this SOCKS5 server (RFC 1928).
    #[arg(long, value_name = "HOST:PORT")]
    pub socks5: Option<String>,
    /// SOCKS5 username (RFC 1929); needs --socks-pass.
    #[arg(long, requires = "socks_pass", requires = "socks5")]
    pub socks_user: Option<String>,
    /// SOCKS5 password.
    #[arg(long, requires = "socks_user")]
    pub socks_pass: Option<String>,
    /// TCP_NOTSENT_LOWAT of Shallow's sockets toward the TUN, bytes; 0 leaves it unset.
    #[arg(long, default_value_t = 131072)]
    pub notsent_lowat: u32,
    /// TCP_NOTSENT_LOWAT of the kernel's upstream sockets, bytes; 0 leaves it unset.
    #[arg(long, default_value_t = 131072)]
    pub upstream_notsent_lowat: u32,
    /// Engine sysctl NAME=VALUE (Linux names, e.g. net.ipv4.tcp_limit_output_bytes=1048576);
    /// repeatable.
    #[arg(long = "sysctl", value_name = "NAME=VALUE")]
    pub sysctls: Vec<String>,
    /// Seconds a connection to upstream (with the SOCKS5 exchange) may take.
    #[arg(long, default_value_t = 10)]
    pub connect_timeout: u64,
    /// Open connections listed by SIGUSR1 and at exit.
    #[arg(long, default_value_t = 20)]
    pub stats_rows: usize,
    /// Most destinations tried at once; beyond, SYNs wait in the SYN queue (SYN cookies
    /// answer once it is full).
    #[arg(long, default_value_t = 256)]
    pub max_pending: usize,
    /// Runtime worker threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
}

fn config(args: &ProxyArgs) -> Result<Config> {
    let upstream = match &args.socks5 {
        Some(s) => Upstream::Socks5 {
            server: s
                .to_socket_addrs()
                .with_context(|| format!("--socks5 {s:?}"))?
                .next()
                .ok_or_else(|| anyhow!("--socks5 {s:?}: no address"))?,
            auth: args.socks_user.clone().zip(args.socks_pass.clone()),
        },
        None => Upstream::Direct,
    };
    let opt = |v: u32| (v != 0).then_some(v);
    Ok(Config {
        upstream,
        notsent_lowat: opt(args.notsent_lowat),
        upstream_notsent_lowat: opt(args.upstream_notsent_lowat),
        connect_timeout: std::time::Duration::from_secs(args.connect_timeout.max(1)),
        max_pending: args.max_pending.max(1),
        ..Config::default()
    })
}

fn attach(args: &ProxyArgs) -> Result<Host> {
    if !shallow_os::is_root() {
        bail!(
            "shallow proxy needs root (CAP_NET_ADMIN) to attach to the TUN {:?}",
            args.tun
        );
    }
    let mut cfg = HostConfig {
        tun: args.tun.clone(),
        netns: (args.netns != "none").then(|| args.netns.clone()),
        ..HostConfig::default()
    };
    if !args.addrs.is_empty() {
        cfg.addrs = args.addrs.clone();
    }
    for kv in &args.sysctls {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("--sysctl {kv:?}: expected NAME=VALUE"))?;
        cfg.sysctls
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    Host::attach(&cfg).map_err(|e| {
        anyhow!("{e}\nhint: a TUN made by `shallow netns up --name NS --tun NAME` works")
    })
}

/// The proxy's report: its counters and connections, the non-TCP packets it did not relay,
/// and the engine's counters of the passive open (`nstat` names).
fn report(host: &Host, proxy: &Proxy, rows: usize, non_tcp: u64) -> String {
    let mut s = proxy.stats().report(rows);
    s.push_str(&format!("non-TCP packets (not relayed): {non_tcp}\n"));
    let wanted = [
        "TcpPassiveOpens",
        "TcpExtSyncookiesSent",
        "TcpExtSyncookiesRecv",
        "TcpExtSyncookiesFailed",
        "TcpExtListenOverflows",
        "TcpExtListenDrops",
    ];
    let engine: Vec<String> = host
        .counters()
        .into_iter()
        .filter(|(n, _)| wanted.contains(&n.as_str()))
        .map(|(n, v)| format!("{n} {v}"))
        .collect();
    s.push_str(&format!("engine: {}\n", engine.join(", ")));
    s
}

/// Runs `shallow proxy`.
pub fn run(args: &ProxyArgs) -> Result<()> {
    let cfg = config(args)?;
    let host = attach(args)?;
    let upstream = match &cfg.upstream {
        Upstream::Direct => "direct".to_string(),
        Upstream::Socks5 { server, auth } => format!(
            "socks5 {server}{}",
            if auth.is_some() {
                " (username/password)"
            } else {
                ""
            }
        ),
    };
    // Non-TCP packets are not relayed: counted, and dropped.
    let non_tcp = Arc::new(AtomicU64::new(0));
    let n = Arc::clone(&non_tcp);
    host.set_raw_handler(Some(Box::new(move |_p: &[u8]| {
        n.fetch_add(1, Ordering::Relaxed);
    })));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let rows = args.stats_rows;
    rt.block_on(async {
        let proxy = Proxy::start(&host, cfg).context("forwarding listeners")?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut usr1 = signal(SignalKind::user_defined1())?;
        println!(
            "shallow proxy: TUN {} (netns {}), upstream {upstream}: ready",
            args.tun, args.netns
        );
        loop {
            tokio::select! {
                _ = int.recv() => break,
                _ = term.recv() => break,
                _ = usr1.recv() => {
                    print!("{}", report(&host, &proxy, rows, non_tcp.load(Ordering::Relaxed)));
                }
            }
        }
        print!(
            "{}",
            report(&host, &proxy, rows, non_tcp.load(Ordering::Relaxed))
        );
        Ok::<_, anyhow::Error>(())
    })?;
    // Connections still open are dropped with the runtime (their sockets close).
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: ProxyArgs,
    }

    #[test]
    fn arguments() {
        let t =
            T::try_parse_from(["x", "--socks5", "127.0.0.1:1080", "--notsent-lowat", "0"]).unwrap();
        let c = config(&t.a).unwrap();
        assert_eq!(c.notsent_lowat, None);
        assert_eq!(c.upstream_notsent_lowat, Some(131072));
        assert!(matches!(c.upstream, Upstream::Socks5 { auth: None, .. }));
        assert!(T::try_parse_from(["x"]).is_err(), "an upstream is required");
        assert!(T::try_parse_from(["x", "--direct", "--socks5", "1.2.3.4:1"]).is_err());
        assert!(
            T::try_parse_from(["x", "--socks5", "127.0.0.1:1080", "--socks-user", "u"]).is_err(),
            "a user needs a password"
        );
        let t = T::try_parse_from([
            "x",
            "--socks5",
            "127.0.0.1:1080",
            "--socks-user",
            "u",
            "--socks-pass",
            "p",
        ])
        .unwrap();
        assert!(matches!(
            config(&t.a).unwrap().upstream,
            Upstream::Socks5 { auth: Some(_), .. }
        ));
    }
}
