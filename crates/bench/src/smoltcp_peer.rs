//! The smoltcp peer ([`Pair::SmoltcpToLinux`](crate::Pair::SmoltcpToLinux)): smoltcp 0.14 as
//! the netperf side on the same kind of TUN as Shallow's runs, against the same kernel
//! netserver, so the two user-space stacks are compared in one command.
//!
//! smoltcp runs as its applications run it: one thread owns the interface and its socket,
//! polls the interface (`Interface::poll`) around each `send`/`recv` of the workload, and
//! between polls that moved nothing either waits in `poll(2)` on the TUN for
//! `Interface::poll_delay` (the default), or, with `busy_poll_us` set, spins on the TUN
//! without sleeping (smoltcp's "polling" figure). smoltcp has no GSO: the TUN is opened
//! without offloads and every packet is one MTU-sized segment with its checksum computed in
//! software, both ways.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant as StdInstant};

use shallow_os::{Interest, Netns, Offload, Peer, RxPacket, Tun, TunConfig};
use shallow_workload::{wall_clock, Conn, Io};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};

use crate::{
    addrs, cpu_since, io_err, join, kernel_server, play, result_of, snap, BenchConfig, BenchError,
    BenchResult, Pair, Side, LOCAL4, LOCAL6, PORT,
};

/// The IP MTU of the TUN (the kernel's default for a new TUN).
const MTU: usize = 1500;
/// smoltcp's socket buffers (both ways): room for a window of a 10 Gbit/s, 200 µs path.
const SOCKET_BUFFER: usize = 1 << 20;

/// smoltcp's device: one TUN queue, read and written one packet per call.
struct TunDevice<'t> {
    tun: &'t Tun,
    rx: RxPacket,
    tx: Vec<u8>,
}

/// A received packet, handed to smoltcp.
struct RxTok<'b>(&'b [u8]);

impl smoltcp::phy::RxToken for RxTok<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// Room for a packet smoltcp writes, sent to the TUN when it is written.
struct TxTok<'b> {
    tun: &'b Tun,
    buf: &'b mut Vec<u8>,
}

impl smoltcp::phy::TxToken for TxTok<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        self.buf.clear();
        self.buf.resize(len, 0);
        let r = f(&mut self.buf[..len]);
        // A full TUN queue drops the packet, as a NIC ring would; TCP recovers.
        let _ = self.tun.send(&self.buf[..len], None);
        r
    }
}

impl Device for TunDevice<'_> {
    type RxToken<'a>
        = RxTok<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = TxTok<'a>
    where
        Self: 'a;

    fn receive(
        &mut self,
        _now: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.tun.recv(&mut self.rx).ok()?;
        Some((
            RxTok(self.rx.packet()),
            TxTok {
                tun: self.tun,
                buf: &mut self.tx,
            },
        ))
    }

    fn transmit(&mut self, _now: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(TxTok {
            tun: self.tun,
            buf: &mut self.tx,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ip;
        c.max_transmission_unit = MTU;
        c
    }
}

/// One smoltcp TCP connection with its interface, driven by the calling thread: the
/// workload's blocking calls poll the interface until they can go on.
struct SmolConn<'t> {
    dev: TunDevice<'t>,
    iface: Interface,
    sockets: SocketSet<'static>,
    handle: SocketHandle,
    epoch: StdInstant,
    /// Spin instead of sleeping in `poll(2)`.
    busy: bool,
}

impl SmolConn<'_> {
    fn now(&self) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(self.epoch.elapsed().as_micros() as i64)
    }

    /// One round of the interface: everything received, everything due sent.
    fn poll(&mut self) {
        let now = self.now();
        self.iface.poll(now, &mut self.dev, &mut self.sockets);
    }

    /// Nothing moved: wait for a packet or smoltcp's next timer (or spin, when busy).
    fn wait(&mut self) -> io::Result<()> {
        self.wait_at_most(Duration::from_millis(100))
    }

    /// [`SmolConn::wait`], at most `max`.
    fn wait_at_most(&mut self, max: Duration) -> io::Result<()> {
        if self.busy {
            std::hint::spin_loop();
            return Ok(());
        }
        let now = self.now();
        let delay = self
            .iface
            .poll_delay(now, &self.sockets)
            .map_or(max, |d| Duration::from_micros(d.total_micros()).min(max));
        self.dev.tun.wait(Interest::Readable, Some(delay))?;
        Ok(())
    }

    fn socket(&mut self) -> &mut tcp::Socket<'static> {
        self.sockets.get_mut::<tcp::Socket>(self.handle)
    }
}

impl Conn for SmolConn<'_> {
    type Error = io::Error;

    fn send(&mut self, buf: &[u8]) -> Result<usize, Io<io::Error>> {
        loop {
            self.poll();
            let s = self.socket();
            if !s.may_send() {
                return Err(Io::Failed(io::Error::from(io::ErrorKind::BrokenPipe)));
            }
            if s.can_send() {
                let n = s
                    .send_slice(buf)
                    .map_err(|e| Io::Failed(io::Error::other(e.to_string())))?;
                // Out at once, as a socket's send pushes what it may.
                self.poll();
                return Ok(n);
            }
            self.wait().map_err(Io::Failed)?;
        }
    }

    fn recv(&mut self, buf: &mut [u8], _keep: bool) -> Result<usize, Io<io::Error>> {
        loop {
            self.poll();
            let s = self.socket();
            if s.can_recv() {
                let n = s
                    .recv_slice(buf)
                    .map_err(|e| Io::Failed(io::Error::other(e.to_string())))?;
                // The window update and the ACK go out now.
                self.poll();
                return Ok(n);
            }
            if !s.may_recv() {
                return Ok(0);
            }
            self.wait().map_err(Io::Failed)?;
        }
    }

    fn shutdown_write(&mut self) -> Result<(), Io<io::Error>> {
        self.socket().close();
        self.poll();
        Ok(())
    }

    fn now(&self) -> shallow_workload::Instant {
        wall_clock()
    }
}

/// smoltcp → Linux: netperf on smoltcp over a TUN, netserver on the kernel in the TUN's
/// namespace (one flow).
pub(crate) fn run(cfg: &BenchConfig) -> Result<BenchResult, BenchError> {
    let ns = Netns::unique("shsmol")?;
    let mut tc = TunConfig::new("sm0");
    tc.offload = Offload::NONE;
    let tuns = ns.open_tun(&tc)?;
    let tun = tuns.into_iter().next().ok_or_else(|| BenchError::Io {
        what: "smoltcp TUN".into(),
        source: io::Error::other("no TUN queue"),
    })?;
    let peer = Peer {
        netns: ns.name().into(),
        tun: "sm0".into(),
        ..Peer::default()
    };
    peer.configure(&ns)?;
    let (_, kernel) = addrs(cfg.ipv6);
    let addr = std::net::SocketAddr::new(kernel, PORT);
    let cpu0 = snap();
    let server = kernel_server(
        &ns,
        &BenchConfig {
            flows: 1,
            ..cfg.clone()
        },
        addr,
    )?;
    let netperf = netperf_side(&tun, cfg, kernel).map_err(io_err("netperf (smoltcp)"))?;
    let netserver = join(server, "netserver")?.map_err(io_err("netserver (kernel)"))?;
    let cpu = cpu_since(cpu0);
    drop(tun);
    drop(ns);
    Ok(result_of(
        Pair::SmoltcpToLinux,
        cfg,
        netperf,
        netserver,
        cpu,
    ))
}

/// Connects smoltcp's socket to the kernel's listener and plays netperf's role on it.
fn netperf_side(tun: &Tun, cfg: &BenchConfig, kernel: IpAddr) -> io::Result<Side> {
    let mut dev = TunDevice {
        tun,
        rx: RxPacket::new(),
        tx: Vec::with_capacity(MTU),
    };
    let epoch = StdInstant::now();
    let mut iface = Interface::new(
        Config::new(HardwareAddress::Ip),
        &mut dev,
        smoltcp::time::Instant::from_micros(0),
    );
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::from(LOCAL4), 24));
        let _ = a.push(IpCidr::new(IpAddress::from(LOCAL6), 64));
    });
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
        tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
    );
    s.set_nagle_enabled(!cfg.nodelay);
    let mut sockets = SocketSet::new(Vec::new());
    let handle = sockets.add(s);
    let mut conn = SmolConn {
        dev,
        iface,
        sockets,
        handle,
        epoch,
        busy: cfg.busy_poll_us > 0,
    };
    let remote = (IpAddress::from(kernel), PORT);
    let deadline = StdInstant::now() + Duration::from_secs(5);
    let mut port = 49152u16;
    loop {
        let cx = conn.iface.context();
        let sock = conn.sockets.get_mut::<tcp::Socket>(handle);
        if !sock.is_open() {
            port = port.wrapping_add(1).max(49152);
            sock.connect(cx, remote, port)
                .map_err(|e| io::Error::other(e.to_string()))?;
        }
        conn.poll();
        let sock = conn.socket();
        if sock.may_send() {
            break;
        }
        if StdInstant::now() > deadline {
            return Err(io::Error::from(io::ErrorKind::TimedOut));
        }
        conn.wait()?;
    }
    let side = play(&mut conn, cfg.workload().netperf_role(), cfg)?;
    // Let the close finish (our FIN acknowledged), as a socket's close does in the
    // background; TIME_WAIT is not waited for. The run ended before this.
    let end = StdInstant::now() + Duration::from_secs(2);
    while !matches!(
        conn.socket().state(),
        tcp::State::TimeWait | tcp::State::Closed | tcp::State::FinWait2
    ) && StdInstant::now() < end
    {
        conn.poll();
        conn.wait_at_most(Duration::from_millis(10))?;
    }
    Ok(side)
}
