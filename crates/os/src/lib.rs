//! Shallow's Linux substrate: a TUN device with virtio-net offloads ([`tun`]), the
//! translation between virtio-net headers and the engine's `(packet, gso_size)` shape
//! ([`vnet`]), network namespaces that hold the kernel peer of a TUN ([`netns`]), and a host
//! that runs the engine on an I/O thread over a TUN with blocking sockets ([`host`]).
//!
//! This is the one crate of Shallow where `unsafe` code is allowed. All of it is in the
//! private `sys` module (the rest of the crate is `deny(unsafe_code)`): thin wrappers over
//! `libc` calls (ioctls of `linux/if_tun.h`, `readv`/`writev`, `poll`, `setns`, `eventfd`),
//! each `unsafe` block with a `// SAFETY:` comment (enforced by
//! `clippy::undocumented_unsafe_blocks`).
//!
//! # Example: attach to the peer made by `shallow netns up`
//!
//! ```no_run
//! use shallow_os::{netns::Peer, tun::{RxBatch, TunConfig}};
//! let queues = Peer::default().attach(&TunConfig::new("shallow0"))?;
//! let tun = &queues[0];
//! println!("offloads granted: {}", tun.offload());
//! let mut batch = RxBatch::new(32);
//! tun.recv_batch(&mut batch)?;
//! for p in batch.packets() {
//!     println!("{} bytes, gso_size {:?}", p.packet().len(), p.gso_size());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod error;
pub mod host;
pub mod netns;
#[allow(unsafe_code)]
mod sys;
pub mod tun;
pub mod vnet;
pub mod wake;

pub use error::{check_name, OsError};
pub use host::{Host, HostStats, TcpStream};
pub use netns::{Netns, Peer};
pub use tun::{Interest, Offload, RxBatch, RxPacket, Tun, TunConfig, TunMode, TxPacket};
pub use wake::{wait_readable, Ready, Waker};

/// True when the effective user is root (needed for TUN devices and namespaces).
pub fn is_root() -> bool {
    sys::is_root()
}
