//! Shallow's Linux substrate: the engine on real threads over a real device.
//!
//! - [`host`]: a [`Host`] runs a `shallow_tcp::Stack` on an I/O thread (softirq's role) over
//!   a TUN queue or an in-memory [`link`] — one engine and thread per queue of a multi-queue
//!   TUN, each owning the flows its 4-tuple hash gives it —, with an fq egress qdisc that
//!   paces by earliest departure time and completes packets when the device write returns. Application threads
//!   own a socket for the length of a call (`lock_sock`), packets arriving meanwhile go to the
//!   socket's backlog and are processed by the caller at `release_sock`.
//! - [`net`]: blocking [`TcpStream`] and [`TcpListener`] shaped like `std::net`, errors as
//!   `std::io::Error` with Linux errnos; TCP Fast Open (RFC 7413) on both ends: data in the
//!   client's SYN ([`TcpStream::connect_fastopen`], Linux's `sendto(MSG_FASTOPEN)`) and
//!   listeners that accept it ([`TcpListener::set_fastopen`], `TCP_FASTOPEN`).
//! - [`poller`]: an epoll-like readiness API ([`Poller`]) for non-blocking sockets, level- or
//!   edge-triggered.
//! - `tokio` (cargo feature `tokio`): async stream and listener on the same machinery.
//! - [`tun`], [`vnet`], [`netns`]: a TUN device with virtio-net offloads, the translation
//!   between virtio-net headers and the engine's `(packet, gso_size)` shape, and network
//!   namespaces that hold the kernel peer of a TUN.
//!
//! This is the one crate of Shallow where `unsafe` code is allowed. All of it is in the
//! private `sys` module (the rest of the crate is `deny(unsafe_code)`): thin wrappers over
//! `libc` calls (ioctls of `linux/if_tun.h`, `readv`/`writev`, `poll`, `setns`, `eventfd`),
//! each `unsafe` block with a `// SAFETY:` comment (enforced by
//! `clippy::undocumented_unsafe_blocks`).
//!
//! # Example: a client on the TUN made by `shallow netns up`
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use shallow_os::{Host, TcpStream};
//! let host = Host::attach_default()?; // shallow0 in netns shallow-peer, we are 10.213.0.2
//! let mut s = TcpStream::connect(&host, "10.213.0.1:7".parse()?)?;
//! s.write_all(b"ping")?;
//! let mut buf = [0u8; 4];
//! s.read_exact(&mut buf)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Example: read raw packets from that TUN
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

#[cfg(feature = "tokio")]
pub mod async_io;
mod device;
mod egress;
mod error;
pub mod forward;
mod hook;
pub mod host;
mod iothread;
pub mod kernel_sock;
pub mod link;
pub mod net;
pub mod netns;
pub mod poller;
pub mod raw;
mod readiness;
mod shared;
pub mod skip;
mod steer;
#[allow(unsafe_code)]
mod sys;
pub mod tun;
pub mod vnet;
pub mod wake;

#[cfg(feature = "tokio")]
pub use async_io::{AsyncTcpListener, AsyncTcpStream};
pub use error::{check_name, OsError};
pub use forward::{ForwardRequest, Forwarded, Unreachable};
pub use host::{
    Device, Dir, Egress, FqConfig, Host, HostConfig, HostStats, PacketHook, QueueStats, Rate,
    Verdict,
};
pub use link::{LinkConfig, MemLink};
pub use net::{ShutdownHow, TcpListener, TcpStream};
pub use netns::{Netns, Peer};
pub use poller::{Event, Events, Poller, PollerStats, Source, Trigger};
pub use raw::{RawHandler, RawSender};
pub use shallow_tcp::{Family, ForwardCompletion, ForwardFilter, ForwardVerdict};
// `Interest` at the root is the TUN's (`tun::Interest`); the poller's is `poller::Interest`.
pub use tun::{Interest, Offload, RxBatch, RxPacket, Tun, TunConfig, TunMode, TxPacket};
pub use wake::{wait_readable, Ready, Waker};

/// True when the effective user is root (needed for TUN devices and namespaces).
pub fn is_root() -> bool {
    sys::is_root()
}
