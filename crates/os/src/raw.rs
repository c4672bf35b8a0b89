//! Packets that are not TCP: the user's handler of the non-TCP packets a host receives
//! (UDP, ICMP, … — what a TUN-based proxy or VPN must relay itself) and the raw transmit
//! that lets it answer. Installed with [`Host::set_raw_handler`](crate::Host::set_raw_handler);
//! run by the I/O threads on every received IP packet whose transport is not TCP, before the
//! engine sees it (the engine still handles the ICMP errors that quote its own connections).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::shared::Shared;

/// The user's handler of received non-TCP IP packets (see the module doc). It runs on an
/// I/O thread with that queue's engine locked: it must be quick, and must not call the
/// host's sockets (it may [`RawSender::send`]).
pub type RawHandler = Box<dyn FnMut(&[u8]) + Send>;

/// The handler, and whether there is one (read without the mutex on every packet).
#[derive(Default)]
pub(crate) struct Raw {
    on: AtomicBool,
    handler: Mutex<Option<RawHandler>>,
}

impl Raw {
    /// Installs or removes the handler.
    pub fn set(&self, h: Option<RawHandler>) {
        let mut g = self.handler.lock().unwrap_or_else(|p| p.into_inner());
        self.on.store(h.is_some(), Ordering::SeqCst);
        *g = h;
    }

    /// Shows `p` to the handler if it is not a TCP packet; true when it was shown.
    pub fn deliver(&self, p: &[u8]) -> bool {
        if !self.on.load(Ordering::Relaxed) || crate::steer::is_tcp(p) {
            return false;
        }
        let mut g = self.handler.lock().unwrap_or_else(|p| p.into_inner());
        match g.as_mut() {
            Some(h) => {
                h(p);
                true
            }
            None => false,
        }
    }
}

/// Writes whole IP packets to a host's device (queue 0), past the engine and its qdisc: the
/// way a [`RawHandler`] answers. Holds the host weakly, so a handler that keeps one does not
/// keep the host alive; once the host has stopped, `send` fails with `ENETDOWN`.
#[derive(Clone)]
pub struct RawSender {
    pub(crate) shared: Weak<Shared>,
}

impl std::fmt::Debug for RawSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawSender").finish_non_exhaustive()
    }
}

impl RawSender {
    pub(crate) fn new(shared: &Arc<Shared>) -> RawSender {
        RawSender {
            shared: Arc::downgrade(shared),
        }
    }

    /// Sends one IPv4 or IPv6 packet (its checksums as they are). `EINVAL` for anything that
    /// is not one (shorter than its version's header, longer than 65,535 bytes), `ENETDOWN`
    /// once the host has stopped; the device's own errors as they come.
    pub fn send(&self, packet: &[u8]) -> io::Result<()> {
        let min = match packet.first().map(|b| b >> 4) {
            Some(4) => 20,
            Some(6) => 40,
            _ => 0,
        };
        if min == 0 || packet.len() < min || packet.len() > 65_535 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let Some(sh) = self.shared.upgrade().filter(|s| !s.stopped()) else {
            return Err(io::Error::from_raw_os_error(libc::ENETDOWN));
        };
        sh.shards[0].dev.send(packet, &Default::default(), None)
    }
}
