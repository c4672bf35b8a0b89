//! A Linux TUN device opened with `IFF_TUN | IFF_NO_PI | IFF_VNET_HDR`: IP packets in and out
//! of the kernel, each behind a 10-byte virtio-net header that carries checksum and
//! segmentation offload (see [`crate::vnet`]).
//!
//! Descriptors are non-blocking; [`Tun::wait`] waits for readiness with `poll(2)`, and every
//! [`Tun`] is also `AsFd` for callers that use epoll/mio themselves. [`Tun::recv_batch`] and
//! [`Tun::send_batch`] move up to N packets per call (one `readv`/`writev` each, stopping at
//! `EAGAIN`).

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use shallow_tcp::Frags;
use shallow_wire::VirtioNetHdr;

use crate::error::{check_name, OsError};
use crate::sys;
use crate::vnet::{self, RxError};

/// The TUN clone device.
pub const TUN_PATH: &str = "/dev/net/tun";

/// Length of the virtio-net header this crate asks for (`TUNSETVNETHDRSZ`): the 10-byte
/// `struct virtio_net_hdr` without `num_buffers`.
pub const VNET_HDR_LEN: usize = VirtioNetHdr::LEN;

/// The largest IP packet a TUN read can return: a 64 KiB GSO aggregate (IPv6 payload length
/// 65535 plus its 40-byte header), rounded up.
pub const MAX_PACKET: usize = 65536 + 64;

/// Offloads the reader accepts from the kernel (`TUNSETOFFLOAD`, `TUN_F_*` of `if_tun.h`).
///
/// With `CSUM` the kernel may hand us packets whose checksum is still partial (`NEEDS_CSUM`);
/// with `TSO4`/`TSO6` (which need `CSUM`) it may hand us TCP aggregates up to 64 KiB with a
/// segment size, instead of segmenting them first.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Offload(pub u32);

impl Offload {
    /// No offload: every packet is a complete, checksummed, MTU-sized packet.
    pub const NONE: Offload = Offload(0);
    /// `TUN_F_CSUM`: partial checksums.
    pub const CSUM: Offload = Offload(libc::TUN_F_CSUM);
    /// `TUN_F_TSO4`: IPv4 TCP aggregates.
    pub const TSO4: Offload = Offload(libc::TUN_F_TSO4);
    /// `TUN_F_TSO6`: IPv6 TCP aggregates.
    pub const TSO6: Offload = Offload(libc::TUN_F_TSO6);
    /// `TUN_F_TSO_ECN`: aggregates whose first segment carries CWR.
    pub const TSO_ECN: Offload = Offload(libc::TUN_F_TSO_ECN);
    /// What Shallow asks for by default: `CSUM | TSO4 | TSO6`.
    pub const DEFAULT: Offload = Offload(libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6);

    /// True when every flag of `other` is set.
    pub fn contains(self, other: Offload) -> bool {
        self.0 & other.0 == other.0
    }

    /// The flags of both.
    pub fn intersection(self, other: Offload) -> Offload {
        Offload(self.0 & other.0)
    }

    /// The sets to try, best first, when the kernel refuses `self` (`EINVAL`): drop ECN, then
    /// TSO6, then all TSO, then everything. TSO without CSUM is never tried (the kernel
    /// refuses it).
    fn fallbacks(self) -> Vec<Offload> {
        let mut v: Vec<Offload> = Vec::new();
        let base = if self.contains(Offload::CSUM) {
            self
        } else {
            Offload::NONE
        };
        for cand in [
            base,
            Offload(base.0 & !Offload::TSO_ECN.0),
            Offload(base.0 & (Offload::CSUM.0 | Offload::TSO4.0)),
            Offload(base.0 & Offload::CSUM.0),
            Offload::NONE,
        ] {
            if !v.contains(&cand) {
                v.push(cand);
            }
        }
        v
    }
}

impl std::ops::BitOr for Offload {
    type Output = Offload;
    fn bitor(self, rhs: Offload) -> Offload {
        Offload(self.0 | rhs.0)
    }
}

impl fmt::Display for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Offload::CSUM, "csum"),
            (Offload::TSO4, "tso4"),
            (Offload::TSO6, "tso6"),
            (Offload::TSO_ECN, "tso_ecn"),
        ];
        let mut first = true;
        for (o, n) in names {
            if self.contains(o) {
                f.write_str(if first { "" } else { "," })?;
                f.write_str(n)?;
                first = false;
            }
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Offload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Offload({self})")
    }
}

/// Whether to create the device, attach to an existing one, or either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TunMode {
    /// Attach when the device exists, create it otherwise.
    #[default]
    CreateOrAttach,
    /// Fail with [`OsError::NoSuchTun`] unless the device exists.
    Attach,
}

/// How to open a TUN device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunConfig {
    /// Interface name (at most 15 bytes); a name with `%d` lets the kernel number it.
    pub name: String,
    /// Create or attach.
    pub mode: TunMode,
    /// Offloads to ask for; [`Tun::offload`] says what was granted.
    pub offload: Offload,
    /// Number of queues (one descriptor each). More than one needs `multi_queue`.
    pub queues: usize,
    /// `IFF_MULTI_QUEUE`. Must match how an existing device was created.
    pub multi_queue: bool,
    /// `Some(true)`: make the device persistent (`TUNSETPERSIST 1`) so it outlives our
    /// descriptors; `Some(false)`: make it non-persistent; `None`: leave as it is.
    pub persist: Option<bool>,
}

impl TunConfig {
    /// One queue named `name`, default offloads, created or attached, persistence unchanged.
    pub fn new(name: &str) -> TunConfig {
        TunConfig {
            name: name.to_string(),
            mode: TunMode::CreateOrAttach,
            offload: Offload::DEFAULT,
            queues: 1,
            multi_queue: false,
            persist: None,
        }
    }

    /// Opens the device in the calling thread's network namespace: one [`Tun`] per queue.
    ///
    /// Errors: [`OsError::TunMissing`] without `/dev/net/tun`, [`OsError::NotPermitted`]
    /// without `CAP_NET_ADMIN`, [`OsError::NoSuchTun`] in [`TunMode::Attach`] when the device
    /// is absent, [`OsError::Io`] otherwise (e.g. `EBUSY` when a single-queue device already
    /// has a reader, `EINVAL` when `multi_queue` differs from the existing device's).
    pub fn open(&self) -> Result<Vec<Tun>, OsError> {
        if !self.name.contains('%') {
            check_name(&self.name)?;
        }
        if !Path::new(TUN_PATH).exists() {
            return Err(OsError::TunMissing);
        }
        if self.queues == 0 || (self.queues > 1 && !self.multi_queue) {
            return Err(OsError::Io {
                what: format!("open {} queues of {}", self.queues, self.name),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "more than one queue needs multi_queue, and at least one queue is needed",
                ),
            });
        }
        if self.mode == TunMode::Attach && !sys::if_exists(&self.name) {
            return Err(OsError::NoSuchTun {
                name: self.name.clone(),
                netns: None,
            });
        }
        let mut flags = libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR;
        if self.multi_queue {
            flags |= libc::IFF_MULTI_QUEUE;
        }
        let mut out: Vec<Tun> = Vec::with_capacity(self.queues);
        let mut name = self.name.clone();
        let mut granted = Offload::NONE;
        for q in 0..self.queues {
            let fd = open_clone_device()?;
            name = sys::tun_set_iff(fd.as_fd(), &name, flags)
                .map_err(|e| OsError::io(format!("TUNSETIFF {name}"), e))?;
            if q == 0 {
                sys::tun_set_vnet_hdr_sz(fd.as_fd(), VNET_HDR_LEN as libc::c_int)
                    .map_err(|e| OsError::io("TUNSETVNETHDRSZ", e))?;
                #[cfg(target_endian = "big")]
                sys::tun_set_vnet_le(fd.as_fd()).map_err(|e| OsError::io("TUNSETVNETLE", e))?;
                granted = set_offload(fd.as_fd(), self.offload)?;
                if let Some(p) = self.persist {
                    sys::tun_set_persist(fd.as_fd(), p)
                        .map_err(|e| OsError::io(format!("TUNSETPERSIST {name}"), e))?;
                }
            }
            out.push(Tun {
                fd,
                name: name.clone(),
                offload: granted,
                queue: q,
            });
        }
        Ok(out)
    }

    /// Opens exactly one queue (see [`TunConfig::open`]).
    pub fn open_one(&self) -> Result<Tun, OsError> {
        let cfg = TunConfig {
            queues: 1,
            ..self.clone()
        };
        let mut v = cfg.open()?;
        v.pop().ok_or_else(|| OsError::Io {
            what: "open TUN".into(),
            source: io::Error::other("no queue opened"),
        })
    }
}

/// Opens `/dev/net/tun` read-write, non-blocking, close-on-exec.
fn open_clone_device() -> Result<OwnedFd, OsError> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(TUN_PATH)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => OsError::TunMissing,
            _ => OsError::io(format!("open {TUN_PATH}"), e),
        })?;
    Ok(OwnedFd::from(f))
}

/// `TUNSETOFFLOAD` with fallback: tries `want`, then smaller sets, and returns what the kernel
/// took.
fn set_offload(fd: BorrowedFd<'_>, want: Offload) -> Result<Offload, OsError> {
    let mut last = None;
    for cand in want.fallbacks() {
        match sys::tun_set_offload(fd, cand.0) {
            Ok(()) => return Ok(cand),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
            Err(e) => return Err(OsError::io("TUNSETOFFLOAD", e)),
        }
    }
    Err(OsError::io(
        "TUNSETOFFLOAD",
        last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)),
    ))
}

/// One queue of a TUN device: a non-blocking descriptor that reads and writes IP packets
/// behind virtio-net headers.
#[derive(Debug)]
pub struct Tun {
    fd: OwnedFd,
    name: String,
    offload: Offload,
    queue: usize,
}

/// Readiness to wait for in [`Tun::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// A packet can be read.
    Readable,
    /// A packet can be written.
    Writable,
}

/// One received packet: an IP packet ready for `Stack::input(now, packet(), gso_size())`.
pub struct RxPacket {
    buf: Box<[u8]>,
    len: usize,
    gso_size: Option<u16>,
    vnet: VirtioNetHdr,
}

impl Default for RxPacket {
    fn default() -> Self {
        RxPacket::new()
    }
}

impl fmt::Debug for RxPacket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxPacket")
            .field("len", &self.len)
            .field("gso_size", &self.gso_size)
            .field("vnet", &self.vnet)
            .finish()
    }
}

impl RxPacket {
    /// An empty packet buffer of [`MAX_PACKET`] bytes.
    pub fn new() -> RxPacket {
        RxPacket {
            buf: vec![0u8; MAX_PACKET].into_boxed_slice(),
            len: 0,
            gso_size: None,
            vnet: VirtioNetHdr::default(),
        }
    }
    /// The IP packet (checksum completed when the kernel left it partial).
    pub fn packet(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// The segment size of a TCP GSO aggregate (the engine's GRO `gso_size`), else `None`.
    pub fn gso_size(&self) -> Option<u16> {
        self.gso_size
    }
    /// The virtio-net header as the kernel wrote it.
    pub fn vnet_hdr(&self) -> &VirtioNetHdr {
        &self.vnet
    }
}

/// Buffers for [`Tun::recv_batch`].
#[derive(Debug)]
pub struct RxBatch {
    pkts: Vec<RxPacket>,
    filled: usize,
    /// Packets dropped because their virtio-net header was malformed, over the batch's life.
    pub dropped: u64,
}

impl RxBatch {
    /// Room for `n` packets (at least one).
    pub fn new(n: usize) -> RxBatch {
        RxBatch {
            pkts: (0..n.max(1)).map(|_| RxPacket::new()).collect(),
            filled: 0,
            dropped: 0,
        }
    }
    /// Packets filled by the last `recv_batch`.
    pub fn packets(&self) -> &[RxPacket] {
        &self.pkts[..self.filled]
    }
    /// Number of packets filled by the last `recv_batch`.
    pub fn len(&self) -> usize {
        self.filled
    }
    /// True when the last `recv_batch` filled none.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }
    /// Capacity in packets.
    pub fn capacity(&self) -> usize {
        self.pkts.len()
    }
}

/// One packet to write: the engine's `Transmit::data` and `Transmit::gso_size`.
#[derive(Debug, Clone, Copy)]
pub struct TxPacket<'a> {
    /// The IP packet (a TSO super-segment when `gso_size` is set and it holds more payload).
    pub data: &'a [u8],
    /// Payload bytes per segment.
    pub gso_size: Option<u16>,
}

impl Tun {
    /// Interface name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The offloads the kernel granted (`TUNSETOFFLOAD`).
    pub fn offload(&self) -> Offload {
        self.offload
    }

    /// Index of this queue among those opened together.
    pub fn queue(&self) -> usize {
        self.queue
    }

    /// Makes the device persistent or not (`TUNSETPERSIST`).
    pub fn set_persist(&self, on: bool) -> Result<(), OsError> {
        sys::tun_set_persist(self.fd.as_fd(), on)
            .map_err(|e| OsError::io(format!("TUNSETPERSIST {}", self.name), e))
    }

    /// Enables or disables this queue of a multi-queue device (`TUNSETQUEUE` with
    /// `IFF_ATTACH_QUEUE` / `IFF_DETACH_QUEUE`).
    pub fn set_queue_enabled(&self, on: bool) -> Result<(), OsError> {
        let flag = if on {
            libc::IFF_ATTACH_QUEUE
        } else {
            libc::IFF_DETACH_QUEUE
        };
        sys::tun_set_queue(self.fd.as_fd(), flag).map_err(|e| OsError::io("TUNSETQUEUE", e))
    }

    /// The `IFF_*` feature flags of this kernel's TUN driver (`TUNGETFEATURES`).
    pub fn kernel_features(&self) -> io::Result<u32> {
        sys::tun_get_features(self.fd.as_fd())
    }

    /// Reads one packet into `pkt`. `WouldBlock` when none is queued; `InvalidData` (with an
    /// [`RxError`] inside) when its virtio-net header is malformed (the packet is consumed).
    pub fn recv(&self, pkt: &mut RxPacket) -> io::Result<()> {
        let mut hdr = [0u8; VNET_HDR_LEN];
        let n = {
            let mut iov = [IoSliceMut::new(&mut hdr), IoSliceMut::new(&mut pkt.buf)];
            sys::readv(self.fd.as_fd(), &mut iov)?
        };
        pkt.len = 0;
        pkt.gso_size = None;
        if n < VNET_HDR_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                RxError::Truncated,
            ));
        }
        let vnet = VirtioNetHdr::parse(&hdr, VNET_HDR_LEN)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, RxError::Truncated))?;
        let len = n - VNET_HDR_LEN;
        let gso = vnet::rx_finish(&vnet, &mut pkt.buf[..len])
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        pkt.len = len;
        pkt.gso_size = gso;
        pkt.vnet = vnet;
        Ok(())
    }

    /// Reads up to `batch.capacity()` packets, stopping when none is left. Returns how many
    /// were read (0 when the device had none). Malformed packets are counted in
    /// `batch.dropped` and skipped.
    pub fn recv_batch(&self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.filled = 0;
        while batch.filled < batch.pkts.len() {
            match self.recv(&mut batch.pkts[batch.filled]) {
                Ok(()) => batch.filled += 1,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => batch.dropped += 1,
                Err(e) => {
                    if batch.filled == 0 {
                        return Err(e);
                    }
                    break;
                }
            }
        }
        Ok(batch.filled)
    }

    /// Writes one IP packet; a super-segment (`gso_size` set and more payload than that) goes
    /// out as a GSO write that the kernel segments (see [`vnet::tx_prepare`]).
    /// `InvalidInput` when a super-segment is not well-formed TCP.
    pub fn send(&self, data: &[u8], gso_size: Option<u16>) -> io::Result<()> {
        let prep = vnet::tx_prepare(data, gso_size)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut hdr = [0u8; VNET_HDR_LEN];
        prep.hdr
            .emit(&mut hdr)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let rest = data.get(prep.head_len..).unwrap_or(&[]);
        let iov_full;
        let iov_plain;
        let iov: &[IoSlice<'_>] = if prep.head_len > 0 {
            iov_full = [
                IoSlice::new(&hdr),
                IoSlice::new(prep.head()),
                IoSlice::new(rest),
            ];
            &iov_full
        } else {
            iov_plain = [IoSlice::new(&hdr), IoSlice::new(data)];
            &iov_plain
        };
        self.write_iov(iov)
    }

    /// [`Tun::send`] for a packet whose payload lies apart from its headers (`head`, the
    /// engine's scatter-gather `Transmit::data`), in the pieces of `frags`: one `writev` of
    /// the virtio-net header, the headers and every piece where it lies, so the payload is
    /// not copied on its way to the kernel. A packet of more pieces than one `writev` takes
    /// (`UIO_MAXIOV`) is gathered into one buffer first.
    pub fn send_frags(&self, head: &[u8], frags: &Frags, gso_size: Option<u16>) -> io::Result<()> {
        if frags.is_empty() {
            return self.send(head, gso_size);
        }
        let prep = vnet::tx_prepare_split(head, frags.len(), gso_size)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut hdr = [0u8; VNET_HDR_LEN];
        prep.hdr
            .emit(&mut hdr)
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let head = if prep.head_len > 0 { prep.head() } else { head };
        const MAX_PIECES: usize = 30;
        if frags.pieces() > MAX_PIECES {
            let joined = frags.clone().join();
            return self.write_iov(&[
                IoSlice::new(&hdr),
                IoSlice::new(head),
                IoSlice::new(&joined),
            ]);
        }
        let mut iov = [IoSlice::new(&[]); MAX_PIECES + 2];
        iov[0] = IoSlice::new(&hdr);
        iov[1] = IoSlice::new(head);
        let mut n = 2;
        for p in frags.iter() {
            iov[n] = IoSlice::new(p);
            n += 1;
        }
        self.write_iov(&iov[..n])
    }

    fn write_iov(&self, iov: &[IoSlice<'_>]) -> io::Result<()> {
        loop {
            match sys::writev(self.fd.as_fd(), iov) {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes packets in order until all are written or the device would block; returns how
    /// many were written (like `sendmmsg(2)`: an error after the first packet ends the batch
    /// early and is reported by the next call, which starts with the failing packet).
    /// `Err(WouldBlock)` when not even the first could be written.
    pub fn send_batch(&self, pkts: &[TxPacket<'_>]) -> io::Result<usize> {
        for (i, p) in pkts.iter().enumerate() {
            if let Err(e) = self.send(p.data, p.gso_size) {
                if i == 0 {
                    return Err(e);
                }
                return Ok(i);
            }
        }
        Ok(pkts.len())
    }

    /// Waits until the descriptor is ready for `interest` or `timeout` passes (`None`: no
    /// limit). Returns whether it is ready.
    pub fn wait(&self, interest: Interest, timeout: Option<Duration>) -> io::Result<bool> {
        let events = match interest {
            Interest::Readable => libc::POLLIN,
            Interest::Writable => libc::POLLOUT,
        };
        let mut fds = [libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events,
            revents: 0,
        }];
        let n = sys::poll(&mut fds, timeout)?;
        Ok(n > 0 && fds[0].revents & (events | libc::POLLERR | libc::POLLHUP) != 0)
    }
}

impl AsFd for Tun {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Tun {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl From<Tun> for OwnedFd {
    fn from(t: Tun) -> OwnedFd {
        t.fd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fallback order never asks for TSO without CSUM (the kernel's `set_offload` refuses
    /// TSO unless `TUN_F_CSUM` is set) and ends with no offload.
    #[test]
    fn offload_fallbacks() {
        let f = (Offload::DEFAULT | Offload::TSO_ECN).fallbacks();
        assert_eq!(f.first(), Some(&(Offload::DEFAULT | Offload::TSO_ECN)));
        assert_eq!(f.last(), Some(&Offload::NONE));
        assert!(f.contains(&Offload::DEFAULT));
        assert!(f.contains(&(Offload::CSUM | Offload::TSO4)));
        for o in &f {
            assert!(*o == Offload::NONE || o.contains(Offload::CSUM), "{o}");
        }
        assert_eq!(Offload::TSO4.fallbacks(), vec![Offload::NONE]);
    }

    #[test]
    fn offload_display() {
        assert_eq!(Offload::DEFAULT.to_string(), "csum,tso4,tso6");
        assert_eq!(Offload::NONE.to_string(), "none");
    }

    /// Names that the kernel would refuse or that could smuggle options into `ip` are errors.
    #[test]
    fn bad_names_rejected_before_any_syscall() {
        for n in ["", "this-name-is-too-long", "-x", "a b", "a/b"] {
            let r = TunConfig::new(n).open();
            assert!(matches!(r, Err(OsError::BadName(_))), "{n}: {r:?}");
        }
    }
}
