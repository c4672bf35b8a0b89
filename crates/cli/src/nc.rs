//! `shallow nc`: netcat over Shallow. Attaches to the TUN that `shallow netns up` made (by
//! default `shallow0` in namespace `shallow-peer`, this side 10.213.0.2 / fd00:213::2), then
//! either listens (`-l PORT`, one connection) or connects (`HOST PORT`), and copies stdin to the
//! connection and the connection to stdout until both directions have ended: EOF on stdin
//! half-closes the connection (`shutdown(SHUT_WR)`, a FIN), EOF from the peer ends stdout.
//! Argument parsing, the two copy loops and error messages only; the TCP is `shallow_os`'s.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use shallow_os::host::HostConfig;
use shallow_os::{Host, OsError, TcpListener, TcpStream};

/// Arguments of `shallow nc`.
#[derive(Debug, clap::Args)]
pub struct NcArgs {
    /// Listen for one incoming connection instead of connecting.
    #[arg(short = 'l', long)]
    pub listen: bool,
    /// IPv4 only (with -l: listen on this host's IPv4 address).
    #[arg(short = '4', conflicts_with = "ipv6")]
    pub ipv4: bool,
    /// IPv6 only (with -l: listen on this host's IPv6 address).
    #[arg(short = '6')]
    pub ipv6: bool,
    /// Print connection progress on stderr.
    #[arg(short = 'v', long)]
    pub verbose: bool,
    /// TUN device to attach to.
    #[arg(long, default_value = "shallow0")]
    pub tun: String,
    /// Network namespace holding the TUN (`shallow netns up --name`); "none" for this one.
    #[arg(long, default_value = "shallow-peer")]
    pub netns: String,
    /// This host's IPv4 address.
    #[arg(long, default_value = "10.213.0.2")]
    pub addr: Ipv4Addr,
    /// This host's IPv6 address.
    #[arg(long, default_value = "fd00:213::2")]
    pub addr6: Ipv6Addr,
    /// TUN queues to attach, one I/O thread each; above 1 the device must have been made with
    /// IFF_MULTI_QUEUE (`shallow netns up` makes a single-queue one).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub queues: u32,
    /// When the transfer ends, print Shallow's sockets on stderr as `ss -tmi` shows the
    /// kernel's (state, queues, `skmem`, `tcp_info`: cwnd, rtt, retransmissions...).
    #[arg(long)]
    pub ss: bool,
    /// Give up connecting after this many seconds.
    #[arg(short = 'w', long, default_value_t = 10)]
    pub wait: u64,
    /// `HOST PORT` to connect to, or with -l `[ADDR] PORT` to listen on.
    #[arg(required = true, num_args = 1..=2, value_name = "HOST PORT")]
    pub target: Vec<String>,
}

fn parse_port(s: &str) -> Result<u16> {
    s.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| anyhow!("invalid port {s:?} (expected 1..65535)"))
}

/// Attaches to the TUN with messages that say what to do about each failure.
fn attach(args: &NcArgs) -> Result<Host> {
    if !shallow_os::is_root() {
        bail!(
            "shallow nc needs root (CAP_NET_ADMIN) to attach to the TUN device {:?}",
            args.tun
        );
    }
    let cfg = HostConfig {
        tun: args.tun.clone(),
        netns: (args.netns != "none").then(|| args.netns.clone()),
        addrs: vec![IpAddr::V4(args.addr), IpAddr::V6(args.addr6)],
        queues: args.queues as usize,
        ..HostConfig::default()
    };
    Host::attach(&cfg).map_err(|e| {
        let hint = match &e {
            OsError::NoSuchNetns(_) | OsError::NoSuchTun { .. } => format!(
                "\nhint: create it with `shallow netns up{}{}`",
                if args.netns == "shallow-peer" {
                    String::new()
                } else {
                    format!(" --name {}", args.netns)
                },
                if args.tun == "shallow0" {
                    String::new()
                } else {
                    format!(" --tun {}", args.tun)
                }
            ),
            _ => String::new(),
        };
        anyhow!("{e}{hint}")
    })
}

/// Resolves `host` (a literal address or a name) to a socket address of the wanted family.
fn resolve(args: &NcArgs, host: &str, port: u16) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {host:?}"))?
        .collect();
    addrs
        .into_iter()
        .find(|a| (!args.ipv4 || a.is_ipv4()) && (!args.ipv6 || a.is_ipv6()))
        .ok_or_else(|| anyhow!("{host:?} has no address of the requested family"))
}

/// Runs `shallow nc`.
pub fn run(args: &NcArgs) -> Result<()> {
    let (host_arg, port) = match args.target.as_slice() {
        [p] => (None, parse_port(p)?),
        [h, p] => (Some(h.as_str()), parse_port(p)?),
        _ => bail!("expected HOST PORT (or -l [ADDR] PORT)"),
    };
    if !args.listen && host_arg.is_none() {
        bail!("missing HOST: `shallow nc HOST PORT` (or `shallow nc -l PORT` to listen)");
    }
    let host = attach(args)?;
    let stream = if args.listen {
        let ip: IpAddr = match host_arg {
            Some(h) => h
                .parse()
                .with_context(|| format!("-l takes a literal address, not {h:?}"))?,
            None if args.ipv6 => IpAddr::V6(args.addr6),
            None => IpAddr::V4(args.addr),
        };
        let l = TcpListener::bind(&host, SocketAddr::new(ip, port))
            .with_context(|| format!("listen on {ip} port {port}"))?;
        if args.verbose {
            eprintln!("listening on {}", SocketAddr::new(ip, port));
        }
        let (s, peer) = l.accept().context("accept")?;
        if args.verbose {
            eprintln!("connection from {peer}");
        }
        s
    } else {
        let addr = resolve(args, host_arg.unwrap_or_default(), port)?;
        let s = TcpStream::connect_timeout(&host, addr, Duration::from_secs(args.wait.max(1)))
            .with_context(|| format!("connect to {addr}"))?;
        if args.verbose {
            eprintln!("connected to {addr}");
        }
        s
    };
    copy_both_ways(stream, args.ss.then_some(&host))
}

/// stdin → connection on a helper thread (half-close at EOF), connection → stdout here; returns
/// when both have ended. With `ss`, prints that host's sockets (`--ss`) once both directions
/// have ended, before the socket is closed.
fn copy_both_ways(stream: TcpStream, ss: Option<&Host>) -> Result<()> {
    let writer = stream.try_clone()?;
    let up = std::thread::spawn(move || -> Result<()> {
        let mut stdin = std::io::stdin().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match stdin.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e).context("read stdin"),
            };
            if n == 0 {
                break;
            }
            (&writer)
                .write_all(&buf[..n])
                .context("send to the connection")?;
        }
        writer
            .shutdown(std::net::Shutdown::Write)
            .context("half-close the connection")
    });
    let mut stdout = std::io::stdout().lock();
    let mut buf = vec![0u8; 64 * 1024];
    let down: Result<()> = (|| loop {
        let n = (&stream)
            .read(&mut buf)
            .context("receive from the connection")?;
        if n == 0 {
            return stdout.flush().context("write stdout");
        }
        stdout.write_all(&buf[..n]).context("write stdout")?;
    })();
    down?;
    up.join()
        .map_err(|_| anyhow!("the stdin thread panicked"))??;
    if let Some(host) = ss {
        // Every shard's sockets, under one header.
        let parts = host.with_stacks(|_, st, now| crate::ss::ss(st, now));
        for (i, p) in parts.iter().enumerate() {
            let body = if i == 0 {
                p.as_str()
            } else {
                p.split_once('\n').map_or("", |x| x.1)
            };
            eprint!("{body}");
        }
    }
    linger(&stream);
    Ok(())
}

/// `tcpi_state` values (Linux `TCP_*` states) in which our FIN or data may still be unacked.
const FIN_WAIT1: u8 = 4;
const CLOSING: u8 = 11;
const LAST_ACK: u8 = 9;

/// Waits (up to a minute) until everything sent has been acknowledged, our FIN included. The
/// TCP lives in this process: exiting earlier would drop what the kernel's TCP keeps sending
/// after close(2) (a lingering close, as `SO_LINGER` does).
fn linger(stream: &TcpStream) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::time::Instant::now() < deadline {
        match stream.tcp_info() {
            Ok(i)
                if i.unacked > 0
                    || i.notsent_bytes > 0
                    || matches!(i.state, FIN_WAIT1 | CLOSING | LAST_ACK) =>
            {
                std::thread::sleep(Duration::from_millis(1))
            }
            _ => return,
        }
    }
}
