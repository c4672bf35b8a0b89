//! The arms of an experiment whose mechanism is the receiver's (backlog ACK deferral): the
//! kernel's TCP sends, and the receiver is the kernel's TCP in the receiving namespace (its
//! sysctls switch the mechanism) or Shallow on the TUN (the engine's sysctls switch it).
//! What each measures: the bytes the receiver read, its counters (`TcpOutSegs` are its ACKs:
//! it sends no data), and the CPU time of the receiving application's threads (plus, for
//! Shallow, its I/O thread, which does softirq's work; the kernel's softirq time is not
//! attributed to a process).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shallow_workload::{wall_clock, Conn, Next, Play, Role, Source};

use super::arms::{start_senders, ArmResult, Sample};
use super::parse::{sysctl_name, thread_cpu_ns, threads_cpu_ns};
use super::workload::{KernelEpoll, Workload};
use super::world::{io_err, os_err, World, RX_ADDR, SHALLOW_ADDR};
use crate::LabError;

/// Readers of accepted connections: each reads with 128 KB reads (netserver's default) to
/// EOF, counting bytes and the CPU time of its thread.
struct Readers {
    bytes: Arc<AtomicU64>,
    cpu_ns: Arc<AtomicU64>,
    handle: std::thread::JoinHandle<()>,
}

impl Readers {
    /// Accepts `n` connections with `accept` (on a thread of its own) and reads each.
    fn start<S, A>(n: usize, mut accept: A) -> Readers
    where
        S: Send + 'static,
        for<'a> &'a S: Conn<Error = io::Error>,
        A: FnMut() -> Option<S> + Send + 'static,
    {
        let bytes = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        let (b, c) = (bytes.clone(), cpu_ns.clone());
        let handle = std::thread::spawn(move || {
            let mut readers = Vec::new();
            for _ in 0..n {
                let Some(s) = accept() else { break };
                let (b, c) = (b.clone(), c.clone());
                readers.push(std::thread::spawn(move || {
                    let c0 = thread_cpu_ns();
                    let mut p = Play::new(Role::Receiver {
                        buf: 131072,
                        hash: false,
                    });
                    loop {
                        let before = p.counts.bytes_received;
                        let step = p.step(&mut &s, wall_clock(), Source::Fill(&[]));
                        b.fetch_add(p.counts.bytes_received - before, Ordering::Relaxed);
                        if step.map_or(true, |x| x.next != Next::Run) {
                            break;
                        }
                    }
                    c.fetch_add(thread_cpu_ns().saturating_sub(c0), Ordering::Relaxed);
                }));
            }
            for r in readers {
                let _ = r.join();
            }
        });
        Readers {
            bytes,
            cpu_ns,
            handle,
        }
    }
}

/// Connects the workload's kernel senders to `dst` from namespace `ns` (cubic, Nagle as the
/// workload says).
fn kernel_senders(
    ns: &shallow_os::Netns,
    dst: SocketAddr,
    w: &Workload,
) -> Result<Vec<Arc<std::net::TcpStream>>, LabError> {
    let (n, nodelay) = (w.flows, w.nodelay);
    let socks = ns
        .run(move || -> io::Result<Vec<std::net::TcpStream>> {
            (0..n)
                .map(|_| {
                    let s = std::net::TcpStream::connect_timeout(&dst, Duration::from_secs(5))?;
                    s.set_nodelay(nodelay)?;
                    rustix::net::sockopt::set_tcp_congestion(&s, "cubic")?;
                    Ok(s)
                })
                .collect()
        })
        .map_err(os_err("enter a namespace"))?
        .map_err(io_err("connect"))?;
    Ok(socks.into_iter().map(Arc::new).collect())
}

/// Runs the senders over `flows` for the workload's duration, then stops them and waits for
/// `readers`; `counters()` is read before and after.
fn run_arm(
    flows: Vec<Arc<std::net::TcpStream>>,
    readers: Readers,
    w: &Workload,
    label: &str,
    progress: &mut dyn FnMut(&str, f64),
    counters: &mut dyn FnMut() -> std::collections::BTreeMap<String, u64>,
    more_cpu_ns: &mut dyn FnMut() -> u64,
) -> Result<ArmResult, LabError> {
    let c0 = counters();
    let cpu0 = more_cpu_ns();
    let run = start_senders(flows, w, "epoll", KernelEpoll::new)?;
    let samples = run.sample(w, label, progress, |t| Sample {
        t,
        ..Sample::default()
    });
    let received = readers.bytes.load(Ordering::Relaxed);
    let duration_s = run.elapsed_s();
    let c1 = counters();
    let cpu1 = more_cpu_ns();
    let send = run.stop();
    let _ = readers.handle.join();
    Ok(ArmResult {
        duration_s,
        received,
        send,
        samples,
        counters: super::arms::delta(&c0, &c1),
        recv_cpu_ns: readers.cpu_ns.load(Ordering::Relaxed) + cpu1.saturating_sub(cpu0),
    })
}

/// The kernel's senders in the sender namespace, the kernel's receiver in the receiving one
/// with `sysctls` set there and a quickack route back to the sender.
pub(super) fn kernel_rx_arm(
    world: &mut World,
    w: &Workload,
    sysctls: &[(&str, &str)],
    label: &str,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<ArmResult, LabError> {
    for (k, v) in sysctls {
        world
            .rx
            .sysctl_set(k, v)
            .map_err(os_err("receiver namespace sysctl"))?;
    }
    world.rx_quickack()?;
    let port = world.port();
    let addr = SocketAddr::new(IpAddr::V4(RX_ADDR), port);
    let listener = world
        .rx
        .run(move || std::net::TcpListener::bind(addr))
        .map_err(os_err("enter receiver namespace"))?
        .map_err(io_err("bind the receiver"))?;
    let readers = Readers::start(w.flows, move || listener.accept().ok().map(|(s, _)| s));
    let flows = kernel_senders(&world.tx, addr, w)?;
    run_arm(
        flows,
        readers,
        w,
        label,
        progress,
        &mut || world.rx_counters(),
        &mut || 0,
    )
}

/// The kernel's senders in the receiving namespace, Shallow on the TUN as the receiver with
/// `sysctls` and a quickack route back to the sender.
pub(super) fn shallow_rx_arm(
    world: &mut World,
    tbf: super::Tbf,
    w: &Workload,
    sysctls: &[(&str, &str)],
    seed: u64,
    label: &str,
    progress: &mut dyn FnMut(&str, f64),
) -> Result<ArmResult, LabError> {
    let sysctls: Vec<(String, String)> = sysctls
        .iter()
        .map(|(k, v)| (sysctl_name(k), v.to_string()))
        .collect();
    let host = world.shallow_host(&sysctls, seed, tbf)?;
    host.with_stacks(|_, st, _| {
        st.set_route(
            IpAddr::V4(RX_ADDR),
            24,
            shallow_tcp::RouteAttrs {
                quickack: true,
                ..shallow_tcp::RouteAttrs::default()
            },
        )
    });
    let port = world.port();
    let addr = SocketAddr::new(IpAddr::V4(SHALLOW_ADDR), port);
    let listener =
        shallow_os::TcpListener::bind(&host, addr).map_err(io_err("bind Shallow's receiver"))?;
    let readers = Readers::start(w.flows, move || listener.accept().ok().map(|(s, _)| s));
    let flows = kernel_senders(&world.rx, addr, w)?;
    let h = host.clone();
    let result = run_arm(
        flows,
        readers,
        w,
        label,
        progress,
        &mut || h.counters().into_iter().collect(),
        &mut || threads_cpu_ns("shallow-io"),
    );
    host.shutdown();
    result
}
