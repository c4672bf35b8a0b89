//! Thin, checked wrappers around the Linux system calls this crate needs.
//!
//! Every `unsafe` block of the crate lives in this module, so the rest of the crate is
//! ordinary safe Rust over `OwnedFd`s and slices. Calls go through the `libc` crate: it has
//! the TUN ioctl numbers and flags of `linux/if_tun.h`, `struct ifreq`, `setns`, `poll`,
//! `readv`/`writev` and `eventfd`, with the right types for each target (rustix/nix would
//! still need raw ioctl opcodes for TUN and add a layer of their own on top of `libc`).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Turns a `-1` return of a libc call into the `errno` as an `io::Error`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Like [`cvt`] for calls returning `ssize_t`.
fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// True when the effective user is root (uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// An all-zero `struct ifreq` with `name` copied into `ifr_name` (NUL-terminated).
fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    let bytes = name.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: ifreq is a plain C struct (arrays, integers and a union of such); all-zero bytes
    // is a valid value of it.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(ifr)
}

/// The interface name held in `ifr.ifr_name`.
fn ifreq_name(ifr: &libc::ifreq) -> String {
    let raw: Vec<u8> = ifr
        .ifr_name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&raw).into_owned()
}

/// `ioctl(fd, TUNSETIFF, &ifreq{name, flags})`: creates the TUN device `name` (the kernel picks
/// one from a `%d` pattern or an empty name) or attaches to the existing one. Returns the
/// device's actual name.
pub fn tun_set_iff(fd: BorrowedFd<'_>, name: &str, flags: libc::c_int) -> io::Result<String> {
    let mut ifr = ifreq_named(name)?;
    ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one `struct ifreq` through the pointer, which points to
    // a live, properly initialised ifreq for the whole call.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETIFF,
            &mut ifr as *mut libc::ifreq,
        )
    })?;
    Ok(ifreq_name(&ifr))
}

/// `ioctl(fd, TUNSETQUEUE, &ifreq{flags})` with `IFF_ATTACH_QUEUE` or `IFF_DETACH_QUEUE`.
pub fn tun_set_queue(fd: BorrowedFd<'_>, flags: libc::c_int) -> io::Result<()> {
    let mut ifr = ifreq_named("")?;
    ifr.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: TUNSETQUEUE reads one `struct ifreq` through the pointer, valid for the call.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETQUEUE,
            &mut ifr as *mut libc::ifreq,
        )
    })?;
    Ok(())
}

/// `ioctl(fd, TUNGETFEATURES, &flags)`: the `IFF_*` flags this kernel's TUN driver supports.
pub fn tun_get_features(fd: BorrowedFd<'_>) -> io::Result<libc::c_uint> {
    let mut v: libc::c_uint = 0;
    // SAFETY: TUNGETFEATURES writes one unsigned int through the pointer, which is valid.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNGETFEATURES,
            &mut v as *mut libc::c_uint,
        )
    })?;
    Ok(v)
}

/// `ioctl(fd, TUNSETVNETHDRSZ, &size)`: the length of the virtio-net header in front of every
/// packet (10 or 12).
pub fn tun_set_vnet_hdr_sz(fd: BorrowedFd<'_>, size: libc::c_int) -> io::Result<()> {
    // SAFETY: TUNSETVNETHDRSZ reads one int through the pointer, which is valid for the call.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETVNETHDRSZ,
            &size as *const libc::c_int,
        )
    })?;
    Ok(())
}

/// `ioctl(fd, TUNSETVNETLE, &1)`: little-endian virtio-net header fields (only needed, and
/// only available, on big-endian hosts).
#[cfg(target_endian = "big")]
pub fn tun_set_vnet_le(fd: BorrowedFd<'_>) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: TUNSETVNETLE reads one int through the pointer, which is valid for the call.
    cvt(unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TUNSETVNETLE,
            &on as *const libc::c_int,
        )
    })?;
    Ok(())
}

/// `ioctl(fd, TUNSETOFFLOAD, flags)`: which offloads (`TUN_F_*`) the reader accepts. The
/// argument is passed by value.
pub fn tun_set_offload(fd: BorrowedFd<'_>, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: TUNSETOFFLOAD takes its argument by value; no memory is passed.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, flags as libc::c_ulong) })?;
    Ok(())
}

/// `ioctl(fd, TUNSETPERSIST, on)`: a persistent device outlives its file descriptors.
pub fn tun_set_persist(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: TUNSETPERSIST takes its argument by value; no memory is passed.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETPERSIST, libc::c_ulong::from(on)) })?;
    Ok(())
}

/// `readv(2)`.
pub fn readv(fd: BorrowedFd<'_>, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
    let n = bufs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: `IoSliceMut` is documented to be ABI-compatible with `struct iovec` on Unix; each
    // one borrows a live mutable buffer for the duration of the call, and `n` does not exceed
    // the slice length.
    cvt_size(unsafe {
        libc::readv(
            fd.as_raw_fd(),
            bufs.as_mut_ptr() as *mut libc::iovec as *const libc::iovec,
            n,
        )
    })
}

/// `writev(2)`.
pub fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    let n = bufs.len().min(libc::c_int::MAX as usize) as libc::c_int;
    // SAFETY: `IoSlice` is documented to be ABI-compatible with `struct iovec` on Unix; each one
    // borrows a live buffer for the duration of the call, and `n` does not exceed the slice
    // length.
    cvt_size(unsafe { libc::writev(fd.as_raw_fd(), bufs.as_ptr() as *const libc::iovec, n) })
}

/// `ppoll(2)` over `fds` (`(fd, events)` in, `revents` out), with a nanosecond timeout (the
/// I/O thread's timers and fq's departure times are finer than `poll`'s milliseconds).
/// `None` waits without limit. Returns the number of descriptors with events; `EINTR` is
/// reported as `Ok(0)`.
pub fn poll(fds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<usize> {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(d.subsec_nanos() as i32),
    });
    let tsp: *const libc::timespec = match &ts {
        Some(t) => t,
        None => std::ptr::null(),
    };
    // SAFETY: the pointer and length describe the caller's live, initialised pollfd slice;
    // `tsp` is null or points to `ts`, which lives until the call returns; a null signal mask
    // leaves the mask unchanged.
    let r = unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    match cvt(r) {
        Ok(n) => Ok(n as usize),
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(e) => Err(e),
    }
}

/// `prctl(PR_SET_TIMERSLACK, ns)`: how late the kernel may fire this thread's timers
/// (`ppoll` timeouts included) to batch wake-ups; the default is 50 µs.
pub fn set_timer_slack(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK reads only its integer argument; the unused arguments are 0.
    cvt(unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            ns as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })?;
    Ok(())
}

/// `setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, bytes)` on a kernel socket.
pub fn set_rcvlowat(fd: BorrowedFd<'_>, bytes: i32) -> io::Result<()> {
    let v: libc::c_int = bytes;
    // SAFETY: the option value is a live c_int on the stack and its exact size is passed;
    // a bad fd or value yields an error, not UB.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// `SO_TIMESTAMPING` (`SO_TIMESTAMPING_OLD`: 64-bit `timespec`s on the targets this crate
/// builds for) and its control message `SCM_TIMESTAMPING`: asm-generic's number, which libc
/// does not name for Linux.
const SO_TIMESTAMPING: libc::c_int = 37;
/// `SCM_TIMESTAMPING_OPT_STATS` (asm-generic/socket.h).
const SCM_TIMESTAMPING_OPT_STATS: libc::c_int = 54;

/// `setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPING, flags)` on a kernel socket.
pub fn set_timestamping(fd: BorrowedFd<'_>, flags: u32) -> io::Result<()> {
    let v: libc::c_int = flags as libc::c_int;
    // SAFETY: the option value is a live c_int on the stack and its exact size is passed;
    // a bad fd or flag yields an error, not UB.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_TIMESTAMPING,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// One transmit timestamp read from a kernel socket's error queue: `ee_info` (the
/// `SCM_TSTAMP_*` kind), `ee_data` (the key) and the software time (`CLOCK_REALTIME`, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrqStamp {
    /// `ee_info`.
    pub info: u32,
    /// `ee_data`.
    pub data: u32,
    /// The first `timespec` of `SCM_TIMESTAMPING`, nanoseconds.
    pub nanos: u64,
    /// `SCM_TIMESTAMPING_OPT_STATS`, with `SOF_TIMESTAMPING_OPT_STATS`.
    pub stats: Option<shallow_tcp::OptStats>,
}

/// `recvmsg(fd, MSG_ERRQUEUE | MSG_DONTWAIT)` until the error queue is empty: every
/// timestamping entry (`SO_EE_ORIGIN_TIMESTAMPING` with an `SCM_TIMESTAMPING` control
/// message) is appended to `out`; other entries are skipped. Returns how many were read.
pub fn recv_errqueue_stamps(fd: BorrowedFd<'_>, out: &mut Vec<ErrqStamp>) -> io::Result<usize> {
    let mut n = 0;
    loop {
        // u64s keep the buffer aligned for cmsghdr.
        let mut control = [0u64; 64];
        let mut payload = [0u8; 64];
        let mut iov = libc::iovec {
            iov_base: payload.as_mut_ptr().cast(),
            iov_len: payload.len(),
        };
        // SAFETY: an all-zero msghdr is a valid empty one; its pointers are set below.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: msg points at live buffers (iov, control) of the lengths it gives; the
        // kernel writes at most those lengths.
        let r = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if let Err(e) = cvt_size(r) {
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(n);
            }
            return Err(e);
        }
        let (mut time, mut err, mut stats) = (None, None, None);
        // SAFETY: msg is the header recvmsg just filled; CMSG_FIRSTHDR/NXTHDR stay within
        // msg_controllen, and each data pointer is read unaligned with the length checked
        // against cmsg_len first; the statistics are borrowed as the `len` bytes cmsg_len
        // gives, which the kernel keeps inside `control` (a cut message's cmsg_len is the
        // space that was left).
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&msg);
            while !c.is_null() {
                let h = std::ptr::read_unaligned(c);
                let data = libc::CMSG_DATA(c);
                let len = h.cmsg_len as usize - (data as usize - c as usize);
                if h.cmsg_level == libc::SOL_SOCKET
                    && h.cmsg_type == SO_TIMESTAMPING
                    && len >= std::mem::size_of::<libc::timespec>()
                {
                    let ts = std::ptr::read_unaligned(data.cast::<libc::timespec>());
                    time = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                } else if h.cmsg_level == libc::SOL_SOCKET
                    && h.cmsg_type == SCM_TIMESTAMPING_OPT_STATS
                {
                    let blob = std::slice::from_raw_parts(data.cast_const(), len);
                    stats = shallow_tcp::OptStats::decode(blob);
                } else if ((h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR)
                    || (h.cmsg_level == libc::SOL_IPV6 && h.cmsg_type == libc::IPV6_RECVERR))
                    && len >= std::mem::size_of::<libc::sock_extended_err>()
                {
                    err = Some(std::ptr::read_unaligned(
                        data.cast::<libc::sock_extended_err>(),
                    ));
                }
                c = libc::CMSG_NXTHDR(&msg, c);
            }
        }
        if let (Some(nanos), Some(e)) = (time, err) {
            if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING && e.ee_errno == libc::ENOMSG as u32 {
                out.push(ErrqStamp {
                    info: e.ee_info,
                    data: e.ee_data,
                    nanos,
                    stats,
                });
                n += 1;
            }
        }
    }
}

/// `setns(fd, CLONE_NEWNET)`: moves the *calling thread* into the network namespace `fd`.
pub fn setns_net(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns only reads its integer arguments; a wrong fd yields an error, not UB.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) })?;
    Ok(())
}

/// `eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)`: a counter used to wake a thread out of `poll`.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes integers only and returns a new descriptor or -1.
    let fd: RawFd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
    // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd counter (a wake-up). A full counter (`EAGAIN`) already means "awake".
pub fn eventfd_signal(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64, the size eventfd requires.
    let r = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    match cvt_size(r) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// Resets an eventfd counter to zero (consumes pending wake-ups).
pub fn eventfd_drain(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64, the size eventfd requires.
    let r = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    match cvt_size(r) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// The name of the `errno` constant for `e`, for error messages (`EPERM`, `EINVAL`, ...).
pub fn errno_name(e: &io::Error) -> Option<&'static str> {
    Some(match e.raw_os_error()? {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::EBUSY => "EBUSY",
        libc::ENOENT => "ENOENT",
        libc::ENODEV => "ENODEV",
        libc::ENXIO => "ENXIO",
        libc::EEXIST => "EEXIST",
        _ => return None,
    })
}

/// True when a network interface `name` exists in the calling thread's network namespace
/// (`if_nametoindex(3)`, which asks the kernel through a socket of that namespace).
pub fn if_exists(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that lives for the whole call.
    unsafe { libc::if_nametoindex(c.as_ptr()) != 0 }
}
