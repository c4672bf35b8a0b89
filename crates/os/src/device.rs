//! The device under a [`Host`](crate::Host)'s I/O thread: a TUN queue or one end of an
//! in-memory [`link`](crate::link).

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::link::MemLink;
use crate::tun::Tun;

/// What the I/O thread reads and writes packets through.
#[derive(Debug)]
pub enum Device {
    /// A TUN queue.
    Tun(Tun),
    /// One end of an in-memory link to another host.
    Mem(MemLink),
}

impl From<Tun> for Device {
    fn from(t: Tun) -> Device {
        Device::Tun(t)
    }
}

impl From<MemLink> for Device {
    fn from(l: MemLink) -> Device {
        Device::Mem(l)
    }
}

impl Device {
    /// The device's name (the TUN's, or `mem`), for the I/O thread's name.
    pub(crate) fn name(&self) -> String {
        match self {
            Device::Tun(t) => t.name().to_string(),
            Device::Mem(_) => "mem".into(),
        }
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Device::Tun(t) => t.as_fd(),
            Device::Mem(l) => l.as_fd(),
        }
    }

    /// Writes one packet: `data`, then the payload pieces of `frags` (empty for a
    /// contiguous packet).
    pub(crate) fn send(
        &self,
        data: &[u8],
        frags: &shallow_tcp::Frags,
        gso_size: Option<u16>,
    ) -> io::Result<()> {
        match self {
            Device::Tun(t) => t.send_frags(data, frags, gso_size),
            Device::Mem(l) => l.send_parts(
                std::iter::once(data).chain(frags.iter().map(|b| &b[..])),
                gso_size,
            ),
        }
    }
}
