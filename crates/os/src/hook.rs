//! The packet hook of a host's I/O threads: an impairment (loss, one-packet reordering) run
//! on every packet between the device and the engine, in both directions, and the packets
//! it holds back. Installed with [`Host::set_packet_hook`](crate::Host::set_packet_hook);
//! run by the I/O threads (`iothread.rs`) under the hook's own mutex, taken after the shard's
//! engine mutex and only while the host has a hook.

use std::time::Duration;

use shallow_tcp::{Instant, TxToken};

/// Direction of a packet shown to a [`PacketHook`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the device to the engine.
    Rx,
    /// From the engine (after the qdisc) to the device.
    Tx,
}

/// What a [`PacketHook`] does with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Deliver it.
    Pass,
    /// Drop it (a transmitted data packet is still TX-completed: the drop is below TCP).
    Drop,
    /// Hold it and deliver it after the next packet of the same direction, or after
    /// [`HOLD`] if none comes: a one-packet reordering. A second hold delivers the first.
    Hold,
}

/// An impairment hook run by the I/O thread on every packet between the device and the
/// engine, in both directions (loss and reordering for tests; the kernel here may lack
/// `sch_netem`). Set with [`Host::set_packet_hook`](crate::Host::set_packet_hook).
pub type PacketHook = Box<dyn FnMut(Dir, &[u8], Option<u16>) -> Verdict + Send>;

/// Longest time a held packet waits for the next one (1 ms).
pub const HOLD: Duration = Duration::from_millis(1);

/// A packet the hook holds back ([`Verdict::Hold`]).
pub(crate) struct Held {
    /// The packet.
    pub data: Vec<u8>,
    /// Its GSO size.
    pub gso_size: Option<u16>,
    /// Its TX-completion token (a transmitted data packet).
    pub token: Option<TxToken>,
    /// Delivered at this time if no packet of its direction comes first.
    pub until: Instant,
}

/// The packet hook and the packets it holds back: per device queue, one per direction (a
/// held packet is released by its own queue's thread, so a transmitted one leaves on its
/// flow's queue and is completed by the engine that sent it).
#[derive(Default)]
pub(crate) struct HookState {
    hook: Option<PacketHook>,
    /// Per queue: the received packet held back.
    held_rx: Vec<Option<Held>>,
    /// Per queue: the transmitted packet held back.
    held_tx: Vec<Option<Held>>,
}

impl HookState {
    /// Installs or removes the hook (held packets still go out).
    pub fn set(&mut self, hook: Option<PacketHook>) {
        self.hook = hook;
    }

    /// The hook's verdict on a packet (`Pass` without a hook).
    pub fn verdict(&mut self, dir: Dir, data: &[u8], gso: Option<u16>) -> Verdict {
        match self.hook.as_mut() {
            Some(h) => h(dir, data, gso),
            None => Verdict::Pass,
        }
    }

    /// The packet queue `q` holds back in direction `dir`.
    pub fn held(&mut self, q: usize, dir: Dir) -> &mut Option<Held> {
        let v = match dir {
            Dir::Rx => &mut self.held_rx,
            Dir::Tx => &mut self.held_tx,
        };
        if v.len() <= q {
            v.resize_with(q + 1, || None);
        }
        &mut v[q]
    }

    /// When the first packet queue `q` holds is due.
    pub fn next_deadline(&self, q: usize) -> Option<Instant> {
        let a = self
            .held_rx
            .get(q)
            .and_then(Option::as_ref)
            .map(|h| h.until);
        let b = self
            .held_tx
            .get(q)
            .and_then(Option::as_ref)
            .map(|h| h.until);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
