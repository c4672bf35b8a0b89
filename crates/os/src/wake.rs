//! Waking a thread that waits in `poll(2)` on a TUN device: an `eventfd(2)` counter, plus
//! [`wait_readable`], which waits on a TUN and a [`Waker`] at once.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use crate::sys;

/// A wake-up source for a thread that waits in [`wait_readable`]: any thread may call
/// [`Waker::wake`]; wake-ups before the wait are not lost (the counter stays set).
#[derive(Debug)]
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new eventfd-backed waker.
    pub fn new() -> io::Result<Waker> {
        Ok(Waker {
            fd: sys::eventfd()?,
        })
    }

    /// Wakes the waiting thread (or the next wait).
    pub fn wake(&self) -> io::Result<()> {
        sys::eventfd_signal(self.fd.as_fd())
    }

    /// Consumes pending wake-ups.
    pub fn drain(&self) -> io::Result<()> {
        sys::eventfd_drain(self.fd.as_fd())
    }
}

impl AsFd for Waker {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What [`wait_readable`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ready {
    /// The device has a packet to read (or an error to report).
    pub device: bool,
    /// The waker was woken (its counter is left set: call [`Waker::drain`]).
    pub woken: bool,
}

/// Waits until `device` (if any) is readable, `waker` is woken, or `timeout` passes (`None`:
/// no limit).
pub fn wait_readable(
    device: Option<BorrowedFd<'_>>,
    waker: &Waker,
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    let mut fds = [
        libc::pollfd {
            // poll(2) ignores a negative fd: without a device, only the waker and the timeout.
            fd: device.map_or(-1, |d| d.as_raw_fd()),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: waker.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    sys::poll(&mut fds, timeout)?;
    let hit = |p: &libc::pollfd| p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
    Ok(Ready {
        device: hit(&fds[0]),
        woken: hit(&fds[1]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wake before the wait is kept; drain clears it (eventfd(2) counter semantics).
    #[test]
    fn wake_is_sticky_until_drained() {
        let w = Waker::new().unwrap();
        let other = Waker::new().unwrap();
        w.wake().unwrap();
        w.wake().unwrap();
        let r = wait_readable(Some(other.as_fd()), &w, Some(Duration::ZERO)).unwrap();
        assert_eq!(
            r,
            Ready {
                device: false,
                woken: true
            }
        );
        w.drain().unwrap();
        let r = wait_readable(Some(other.as_fd()), &w, Some(Duration::ZERO)).unwrap();
        assert_eq!(r, Ready::default());
    }
}
