//! The arms of an experiment whose mechanism is the receiver's (backlog ACK deferral): the
//! kernel's TCP sends, and the receiver is the kernel's TCP in the receiving namespace (its
//! sysctls switch the mechanism) or Shallow on the TUN (the engine's sysctls switch it).
//! What each measures: the bytes the receiver read, its counters (`TcpOutSegs` are its ACKs:
//! it sends no data), and the CPU time of the receiving application's threads (plus, for
//! Shallow, its I/O thread, which does softirq's work; the kernel's softirq time is not
//! attributed to a process).

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::arms::{start_senders, ArmResult, Sample};
use super::parse::{engine_sysctls, threads_cpu_ns};
use super::workload::{kernel_senders, KernelEpoll, Receiver, Workload};
use super::world::{io_err, os_err, World, RX_ADDR, SHALLOW_ADDR};
use crate::LabError;

/// Runs the senders over `flows` for the workload's duration, then stops them and waits for
/// `readers`; `counters()` is read before and after.
fn run_arm(
    flows: Vec<Arc<std::net::TcpStream>>,
    readers: Receiver,
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
        tx_spans: None,
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
    let readers = Receiver::start(&world.rx, port, w.flows)?;
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
    let host = world.shallow_host(&engine_sysctls(sysctls), seed, tbf)?;
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
    let readers = Receiver::spawn(w.flows, move || {
        listener.accept().ok().map(|(s, _)| {
            let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
            s
        })
    });
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
