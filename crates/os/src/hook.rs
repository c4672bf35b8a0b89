//! The packet hook of a host's I/O threads: an impairment (loss, one-packet reordering) run
//! on every packet between the device and the engine, in both directions, and the packets
//! it holds back. Installed with [`Host::set_packet_hook`](crate::Host::set_packet_hook);
//! run by the I/O threads (`iothread.rs`) under the hook's own mutex, taken after the engine
//! mutex and only while the host has a hook.

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

/// The packet hook and the packets it holds back, one per direction.
#[derive(Default)]
pub(crate) struct HookState {
    hook: Option<PacketHook>,
    /// The received packet held back.
    pub held_rx: Option<Held>,
    /// The transmitted packet held back.
    pub held_tx: Option<Held>,
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

    /// When the first held packet is due.
    pub fn next_deadline(&self) -> Option<Instant> {
        let a = self.held_rx.as_ref().map(|h| h.until);
        let b = self.held_tx.as_ref().map(|h| h.until);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
