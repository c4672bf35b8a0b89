//! The runners of the lab's TCP_STREAM over both kinds of socket: blocking senders (one
//! thread per flow, as netperf), an edge-triggered epoll sender (one thread for all flows)
//! over the kernel's epoll or Shallow's Poller, and the kernel receiver. What each end does
//! is `shallow-workload`'s sender and receiver roles, as on the emulator.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shallow_os::Netns;
pub(crate) use shallow_workload::Writer;
use shallow_workload::{wall_clock, Conn, Next, Play, Role, Source};

use super::parse::thread_cpu_ns;
use super::world::{io_err, os_err, RX_ADDR};
use crate::LabError;

/// A sending socket of either substrate: the workload's [`Conn`], and its set-up.
pub(super) trait Flow: Send + Sync {
    /// The socket as a role uses it.
    type Conn<'a>: Conn<Error = io::Error>
    where
        Self: 'a;
    fn conn(&self) -> Self::Conn<'_>;
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    fn shutdown_write(&self) -> io::Result<()>;
    /// `SO_TIMESTAMPING` with `flags`.
    fn set_timestamping(&self, flags: u32) -> io::Result<()>;
    /// Every transmit timestamp queued now (`recvmsg(MSG_ERRQUEUE)` until empty).
    fn tx_timestamps(&self) -> io::Result<Vec<shallow_tcp::TxTimestamp>>;
}

impl Flow for std::net::TcpStream {
    type Conn<'a> = &'a std::net::TcpStream;
    fn conn(&self) -> &std::net::TcpStream {
        self
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        std::net::TcpStream::set_nonblocking(self, on)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        std::net::TcpStream::set_write_timeout(self, t)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
    fn set_timestamping(&self, flags: u32) -> io::Result<()> {
        shallow_os::kernel_sock::set_timestamping(self, flags)
    }
    fn tx_timestamps(&self) -> io::Result<Vec<shallow_tcp::TxTimestamp>> {
        shallow_os::kernel_sock::recv_tx_timestamps(self)
    }
}

impl Flow for shallow_os::TcpStream {
    type Conn<'a> = &'a shallow_os::TcpStream;
    fn conn(&self) -> &shallow_os::TcpStream {
        self
    }
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        shallow_os::TcpStream::set_nonblocking(self, on)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        shallow_os::TcpStream::set_write_timeout(self, t)
    }
    fn shutdown_write(&self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
    fn set_timestamping(&self, flags: u32) -> io::Result<()> {
        shallow_os::TcpStream::set_timestamping(self, flags)
    }
    fn tx_timestamps(&self) -> io::Result<Vec<shallow_tcp::TxTimestamp>> {
        shallow_os::TcpStream::tx_timestamps(self)
    }
}

/// Edge-triggered readiness for writing over a set of flows (epoll or Shallow's Poller).
pub(super) trait WritePoller {
    /// Waits up to `timeout`; pushes the indexes of flows that became writable.
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()>;
}

pub(super) struct KernelEpoll {
    ep: std::os::fd::OwnedFd,
    cap: usize,
}

impl KernelEpoll {
    pub(super) fn new(flows: &[Arc<std::net::TcpStream>]) -> io::Result<KernelEpoll> {
        use rustix::event::epoll;
        let ep = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (i, f) in flows.iter().enumerate() {
            epoll::add(
                &ep,
                f.as_fd(),
                epoll::EventData::new_u64(i as u64),
                epoll::EventFlags::OUT | epoll::EventFlags::ET,
            )?;
        }
        Ok(KernelEpoll {
            ep,
            cap: flows.len().max(1),
        })
    }
}

impl WritePoller for KernelEpoll {
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()> {
        use rustix::event::epoll;
        let ts = rustix::event::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        // Made per call: epoll's event type holds a raw pointer, so it cannot be kept in a
        // value that moves to the sender thread.
        let mut buf: Vec<epoll::Event> = Vec::with_capacity(self.cap);
        match epoll::wait(
            &self.ep,
            rustix::buffer::spare_capacity(&mut buf),
            Some(&ts),
        ) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for e in buf.iter().copied() {
            let (flags, data) = (e.flags, e.data);
            if flags.intersects(epoll::EventFlags::OUT | epoll::EventFlags::ERR) {
                ready.push(data.u64() as usize);
            }
        }
        Ok(())
    }
}

pub(super) struct ShallowPoller {
    poller: shallow_os::Poller,
    events: shallow_os::Events,
}

impl ShallowPoller {
    pub(super) fn new(
        host: &shallow_os::Host,
        flows: &[Arc<shallow_os::TcpStream>],
    ) -> io::Result<ShallowPoller> {
        let poller = shallow_os::Poller::new(host);
        for (i, f) in flows.iter().enumerate() {
            poller.register(
                &**f,
                i,
                shallow_os::poller::Interest::WRITABLE,
                shallow_os::Trigger::Edge,
            )?;
        }
        Ok(ShallowPoller {
            poller,
            events: shallow_os::Events::with_capacity(flows.len().max(1)),
        })
    }
}

impl WritePoller for ShallowPoller {
    fn wait(&mut self, ready: &mut Vec<usize>, timeout: Duration) -> io::Result<()> {
        self.poller.wait(&mut self.events, Some(timeout))?;
        for e in self.events.iter() {
            if e.is_writable() {
                ready.push(e.token);
            }
        }
        Ok(())
    }
}

/// The lab's TCP_STREAM on Linux: its flows, their sender role's settings, how long.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
    /// Connections.
    pub(crate) flows: usize,
    /// Bytes per write.
    pub(crate) msg: usize,
    /// TCP_NODELAY (Nagle off).
    pub(crate) nodelay: bool,
    /// How the senders write: [`Writer::Blocking`], one thread per flow (netperf);
    /// [`Writer::Epoll`], one thread for all flows, writing until EAGAIN on every
    /// edge-triggered EPOLLOUT (spec §12 E3).
    pub(crate) writer: Writer,
    /// How long each arm sends.
    pub(crate) duration: Duration,
    /// `SO_TIMESTAMPING` on every sender ([`TSTAMP_FLAGS`]), its error queue read by a
    /// thread of its own: the per-write spans in the arm's result.
    pub(crate) timestamps: bool,
}

/// The `SOF_TIMESTAMPING_*` flags a timestamped arm sets on its senders (as
/// `shallow bench --timestamps`): SCHED, SND and ACK of every write, keys, no payload.
pub(crate) const TSTAMP_FLAGS: u32 = {
    use shallow_tcp::tstamp::sof;
    sof::TX_SCHED | sof::TX_SOFTWARE | sof::TX_ACK | sof::SOFTWARE | sof::OPT_ID | sof::OPT_TSONLY
};

/// Per-write spans of an arm's senders, ns (`shallow_workload::tstamp`).
#[derive(Clone, Debug, Default)]
pub(crate) struct TxSpans {
    /// SCHED→SND per write: residence in the sending host's queues.
    pub(crate) sched_to_snd: Vec<f64>,
    /// SND→ACK per write.
    pub(crate) snd_to_ack: Vec<f64>,
    /// Writes not measured (an event lost to a full error queue, or no ACK by the end).
    pub(crate) incomplete: u64,
}

/// Reads the error queue of every flow every 500 µs until `stop`, then on until every write
/// seen was acknowledged (at most one more second), pairing the events per write.
pub(super) fn stamp_reader<F: Flow + 'static>(
    flows: Vec<Arc<F>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<TxSpans> {
    use shallow_workload::tstamp::{StampKind, WriteStamps};
    std::thread::spawn(move || {
        let mut w: Vec<WriteStamps> = flows.iter().map(|_| WriteStamps::new()).collect();
        let mut out = TxSpans::default();
        let mut grace: Option<std::time::Instant> = None;
        loop {
            for (f, ws) in flows.iter().zip(w.iter_mut()) {
                for t in f.tx_timestamps().unwrap_or_default() {
                    let Some(kind) = StampKind::from_scm(t.kind.scm()) else {
                        continue;
                    };
                    if let Some(sp) = ws.add(kind, t.key, t.time) {
                        out.sched_to_snd.push(sp.sched_to_snd.as_nanos() as f64);
                        out.snd_to_ack.push(sp.snd_to_ack.as_nanos() as f64);
                    }
                }
            }
            if stop.load(Ordering::Relaxed) {
                let g = *grace.get_or_insert_with(std::time::Instant::now);
                if w.iter().all(|x| x.pending() == 0) || g.elapsed() > Duration::from_secs(1) {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        out.incomplete = w.iter().map(|x| x.incomplete + x.pending() as u64).sum();
        out
    })
}

impl Workload {
    /// Each flow's sender: `msg`-byte writes until the arm stops it.
    fn sender(&self) -> Role {
        Role::Sender {
            msg: self.msg,
            writer: self.writer,
            limit: None,
            hash: false,
        }
    }
}

/// What the senders did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendStats {
    /// Bytes written.
    pub(crate) bytes: u64,
    /// `send()` calls as the workload counts them (`shallow_workload::Counts::send_calls`):
    /// one per message for blocking writers, every call (EAGAIN included) for the epoll one.
    pub(crate) send_calls: u64,
    /// epoll_wait calls that returned at least one event (a wake-up of the sender thread).
    pub(crate) wakeups: u64,
    /// CPU time of the sender threads, ns.
    pub(crate) cpu_ns: u64,
}

/// Runs a sender on a new thread: `body` plays the flows' roles writing from a buffer of
/// `msg` bytes, and returns them and the tidy-up to do once the thread's CPU time has been
/// taken.
fn spawn_sender<D: FnOnce()>(
    msg: usize,
    body: impl FnOnce(Source<'_>, &mut SendStats) -> (Vec<Play>, D) + Send + 'static,
) -> std::thread::JoinHandle<SendStats> {
    std::thread::spawn(move || {
        let c0 = thread_cpu_ns();
        let buf = vec![0x5au8; msg];
        let mut st = SendStats::default();
        let (plays, tidy) = body(Source::Fill(&buf), &mut st);
        st.cpu_ns = thread_cpu_ns().saturating_sub(c0);
        for p in &plays {
            st.bytes += p.counts.bytes_sent;
            st.send_calls += p.counts.send_calls;
        }
        tidy();
        st
    })
}

/// One thread per flow, blocking writes (with a 50 ms timeout, to see `stop`).
pub(super) fn blocking_senders<F: Flow + 'static>(
    flows: Vec<Arc<F>>,
    w: &Workload,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<SendStats>> {
    flows
        .into_iter()
        .map(|f| {
            let stop = stop.clone();
            let role = w.sender();
            spawn_sender(w.msg, move |src, _| {
                let _ = f.set_write_timeout(Some(Duration::from_millis(50)));
                let mut p = Play::new(role);
                // A write error ends the flow, as a timeout does not.
                let stopped = |_: &Play| stop.load(Ordering::Relaxed);
                let _ = p.run_blocking(&mut f.conn(), src, stopped, |_| {});
                (vec![p], move || {
                    let _ = f.shutdown_write();
                })
            })
        })
        .collect()
}

/// One thread for all flows: non-blocking writes until EAGAIN, then again on each
/// edge-triggered readiness `poller` reports.
pub(super) fn epoll_sender<F: Flow + 'static, P: WritePoller + Send + 'static>(
    flows: Vec<Arc<F>>,
    mut poller: P,
    w: &Workload,
    stop: &Arc<AtomicBool>,
) -> std::thread::JoinHandle<SendStats> {
    let stop = stop.clone();
    let role = w.sender();
    spawn_sender(w.msg, move |src, st| {
        let mut plays: Vec<Play> = flows.iter().map(|_| Play::new(role.clone())).collect();
        let mut dead = vec![false; flows.len()];
        // Steps flow `i`'s role until it waits for EPOLLOUT (or ends).
        let fill = |i: usize, plays: &mut [Play], dead: &mut [bool]| loop {
            match plays[i].step(&mut flows[i].conn(), wall_clock(), src) {
                Ok(s) if s.next == Next::Run => {}
                Ok(s) if s.next != Next::Done => return,
                _ => {
                    dead[i] = true;
                    return;
                }
            }
        };
        for (i, f) in flows.iter().enumerate() {
            let _ = f.set_nonblocking(true);
            fill(i, &mut plays, &mut dead);
        }
        let mut ready = Vec::new();
        while !stop.load(Ordering::Relaxed) && dead.iter().any(|d| !d) {
            ready.clear();
            if poller.wait(&mut ready, Duration::from_millis(20)).is_err() {
                break;
            }
            if !ready.is_empty() {
                st.wakeups += 1;
            }
            for &i in &ready {
                if i < flows.len() && !dead[i] {
                    fill(i, &mut plays, &mut dead);
                }
            }
        }
        (plays, move || {
            for f in &flows {
                let _ = f.set_nonblocking(false);
                let _ = f.shutdown_write();
            }
        })
    })
}

/// Connects the workload's kernel senders to `dst` from namespace `ns`: Nagle as the
/// workload says, and cubic, the engine's congestion control (it has cubic and reno; the
/// VM's default may be bbr; per socket, root may pick any built-in one).
pub(super) fn kernel_senders(
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

/// The readers of a run's connections: each accepted connection is read with 128 KB reads
/// (netserver's default; the workload's receiver role) to EOF, an error, or 30 s without
/// data, counting bytes and the CPU time of its thread.
pub(super) struct Receiver {
    /// Bytes read so far.
    pub(super) bytes: Arc<AtomicU64>,
    /// CPU time of the reading threads that have finished, ns.
    pub(super) cpu_ns: Arc<AtomicU64>,
    /// The accepting thread (joins its readers).
    pub(super) handle: std::thread::JoinHandle<()>,
}

impl Receiver {
    /// The kernel's receiver in the receiving namespace: accepts `n` connections on `port`.
    pub(super) fn start(rx: &Netns, port: u16, n: usize) -> Result<Receiver, LabError> {
        let addr = SocketAddr::new(IpAddr::V4(RX_ADDR), port);
        let listener = rx
            .run(move || std::net::TcpListener::bind(addr))
            .map_err(os_err("enter receiver namespace"))?
            .map_err(io_err("bind the receiver"))?;
        Ok(Receiver::spawn(n, move || {
            listener.accept().ok().map(|(s, _)| {
                let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
                s
            })
        }))
    }

    /// Accepts `n` connections with `accept` (on a thread of its own) and reads each on a
    /// thread of its own.
    pub(super) fn spawn<S, A>(n: usize, mut accept: A) -> Receiver
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
                let Some(s) = accept() else {
                    break;
                };
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
        Receiver {
            bytes,
            cpu_ns,
            handle,
        }
    }
}
