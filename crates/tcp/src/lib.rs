//! Shallow's sans-IO TCP engine: one host's TCP/IP as a data structure that behaves like
//! Linux 6.x. It reads no clock, does no I/O and has no global state: time, packets, TX
//! completions and socket calls are inputs; packets, timer deadlines and wake-ups are outputs
//! (see `ARCHITECTURE.md`, "The engine's interface").
//!
//! Map of the crate:
//! - [`stack`]: [`Stack`], the host: addresses, routes, socket table, 4-tuple demux,
//!   listeners (SYN and accept queues), timers, and the socket API (Linux errnos).
//! - [`socket`]: per-connection state (`Connection`, Linux `tcp_sock` field names), buffers
//!   (`Skb`, `truesize`), [`Transmit`], [`TxToken`], [`Wakeup`], constants.
//! - [`output`]: MSS / `size_goal`, window selection, `tcp_write_xmit` (cwnd, rwnd, Nagle,
//!   TSO autosizing and deferral, TSQ), transmit with TX tokens, ACK/RST/SYN/FIN, pacing,
//!   write-space wake-ups (`tcp_check_space`), sndbuf autotuning.
//! - `input` (private): segment processing (RFC 9293 §3.10.7): PAWS, sequence checks,
//!   RFC 5961 RST/SYN handling and challenge ACKs, `tcp_ack`, data queueing, FIN, delayed
//!   ACK / quickack / pingpong, SACK compression, backlog ACK deferral.
//! - [`recv`]: out-of-order queue and SACK blocks, `recvmsg`, ACK-on-read, rcvbuf autotuning.
//! - `recovery` (private): SACK scoreboard, reordering detection, PRR, NewReno fallback,
//!   RTO with F-RTO and undo (D-SACK, timestamps). `rack` (private): RACK-TLP (RFC 8985).
//!   `rate` (private): delivery-rate sampling. `mtu` (private): path MTU and MTU probing.
//!   `chrono` (private): the send chronographs.
//! - `rtt` (private): RFC 6298 estimator with Linux's 200 ms floor, windowed min-RTT.
//! - [`sockopt`], [`info`]: socket options, `tcp_info` (incl. delivery rate and the busy /
//!   rwnd-limited / sndbuf-limited chronographs), `SO_MEMINFO`, `tcp_poll`.
//! - [`sysctl`]: sysctls by Linux name with 6.18 defaults. [`mib`]: SNMP counters (`nstat`
//!   table). [`Stack::sockets`] with `meminfo`/`tcp_info` gives what `ss -tmi` shows.
//! - [`gate`]: the device side's verdict on each outgoing packet ([`TxGate`]): a refusal is
//!   Linux's `NET_XMIT_DROP` at the transmit, not a loss in the network.
//! - [`driver`]: [`Driver`], the engine with its egress (TX queues with qdiscs from
//!   `shallow-qdisc`, their admission ledgers and the [`TxGate`] over them): the substrates'
//!   one loop (inputs, timers, `poll_transmit` into the qdiscs, what they release to the
//!   device, deadlines with the qdisc watchdog, wake-ups), sans-IO.
//! - [`packet`]: the only code that touches bytes (through `shallow_wire`).
//! - [`time`], [`seq`], [`errno`]: foundations.
//! - `harness` (feature `test-util`): two drivers over an impaired in-memory link.
//!
//! # Example: two stacks joined by hand
//!
//! ```
//! use shallow_tcp::{Errno, Family, Instant, Stack};
//! use std::net::SocketAddr;
//!
//! let (mut a, mut b) = (Stack::new(1), Stack::new(2));
//! a.add_address("10.0.0.1".parse().unwrap());
//! b.add_address("10.0.0.2".parse().unwrap());
//! let now = Instant::from_secs(1);
//! let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
//! let l = b.socket(Family::V4).unwrap();
//! b.bind(l, server).unwrap();
//! b.listen(l, 16).unwrap();
//! let c = a.socket(Family::V4).unwrap();
//! assert_eq!(a.connect(now, c, server), Err(Errno::EINPROGRESS));
//! // The "wire": move packets both ways, completing every TX token at once.
//! let mut pump = |a: &mut Stack, b: &mut Stack| {
//!     for _ in 0..8 {
//!         while let Some(t) = a.poll_transmit(now) {
//!             b.input(now, &t.data, t.gso_size);
//!             if let Some(tok) = t.token { a.tx_complete(now, tok) }
//!         }
//!         while let Some(t) = b.poll_transmit(now) {
//!             a.input(now, &t.data, t.gso_size);
//!             if let Some(tok) = t.token { b.tx_complete(now, tok) }
//!         }
//!     }
//! };
//! pump(&mut a, &mut b);
//! let (s, _peer) = b.accept(l).unwrap();
//! assert_eq!(a.send(now, c, b"hello", 0), Ok(5));
//! pump(&mut a, &mut b);
//! let mut buf = [0u8; 16];
//! assert_eq!(b.recv(now, s, &mut buf, 0), Ok(5));
//! assert_eq!(&buf[..5], b"hello");
//! ```
//!
//! # Paged packets: no copy between the socket and the device
//!
//! A substrate whose device takes a packet in pieces (`writev`, a DMA ring with
//! scatter-gather) says so in its [`DeviceCaps`] (`sg`): a data packet then comes as its
//! headers in [`Transmit::data`] and a share of the socket's send buffer in
//! [`Transmit::frags`] (bytes that are never written again), so the payload is not copied.
//! On the receive side, [`Stack::handle_packet`] takes a packet as its headers plus a
//! [`Bytes`] payload ([`RxPacket::paged`]), which the receive queue keeps instead of
//! copying; `recv` is then the only copy.
//!
//! ```
//! use shallow_tcp::{DeviceCaps, Errno, Family, Instant, RxPacket, Stack};
//! # use std::net::SocketAddr;
//! # let mut b = Stack::new(2);
//! let mut a = Stack::with_device(1, DeviceCaps { sg: true, ..DeviceCaps::default() });
//! # a.add_address("10.0.0.1".parse().unwrap());
//! # b.add_address("10.0.0.2".parse().unwrap());
//! # let now = Instant::from_secs(1);
//! # let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
//! # let l = b.socket(Family::V4).unwrap();
//! # b.bind(l, server).unwrap();
//! # b.listen(l, 16).unwrap();
//! # let c = a.socket(Family::V4).unwrap();
//! # assert_eq!(a.connect(now, c, server), Err(Errno::EINPROGRESS));
//! // A device with scatter-gather on both ends: headers and payload travel apart.
//! let mut pump = |a: &mut Stack, b: &mut Stack| {
//!     for _ in 0..8 {
//!         while let Some(mut t) = a.poll_transmit(now) {
//!             // A packet of several pieces (zero-copy sends) is gathered into one.
//!             if t.frags.as_single().is_none() {
//!                 t.linearize();
//!             }
//!             let rx = match t.frags.as_single() {
//!                 Some(f) if !f.is_empty() => RxPacket::paged(&t.data, f),
//!                 _ => RxPacket::linear(&t.data),
//!             };
//!             b.handle_packet(now, rx.gso(t.gso_size));
//!             if let Some(tok) = t.token { a.tx_complete(now, tok) }
//!         }
//!         while let Some(t) = b.poll_transmit(now) {
//!             a.input(now, &t.data, t.gso_size);
//!             if let Some(tok) = t.token { b.tx_complete(now, tok) }
//!         }
//!     }
//! };
//! pump(&mut a, &mut b);
//! let (s, _peer) = b.accept(l).unwrap();
//! let data: Vec<u8> = (0..20_000u32).map(|i| i as u8).collect();
//! assert_eq!(a.send(now, c, &data, 0), Ok(data.len()));
//! pump(&mut a, &mut b);
//! let mut buf = vec![0u8; 32_768];
//! assert_eq!(b.recv(now, s, &mut buf, 0), Ok(data.len()));
//! assert_eq!(&buf[..data.len()], &data[..]);
//! ```
//!
//! Accounting rule: every buffer's `truesize` is its payload plus a fixed overhead:
//! [`SKB_TX_OVERHEAD`] for transmit buffers (`wmem_queued`, and `wmem_alloc`: bytes below TCP
//! until `tx_complete`), [`SKB_OVERHEAD`] for received ones (`rmem_alloc`, backlog).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod errno;
pub mod mib;
pub mod seq;
pub mod sysctl;
pub mod time;

/// Shared byte buffers (a paged [`RxPacket`]'s payload is one).
pub use bytes::Bytes;
pub use errno::{Errno, SocketId};
pub use mib::{Counters, Mib};
pub use sysctl::{SysctlError, Sysctls};
pub use time::Instant;

mod chrono;
pub mod device;
pub mod driver;
pub mod dualstack;
mod env;
pub mod errqueue;
mod fastopen;
pub mod gate;
pub mod info;
mod input;
pub mod md5;
mod mem;
mod mtu;
pub mod output;
pub mod packet;
pub mod payload;
mod rack;
mod rate;
mod recovery;
pub mod recv;
mod rtt;
mod send;
pub mod socket;
pub mod sockopt;
pub mod stack;
mod timer;
pub mod tstamp;
mod urg;
pub mod zerocopy;

pub use device::{DeviceCaps, RxBytes, RxChecksum, RxPacket, RxTruesize};
pub use driver::{Driver, EgressPacket};
pub use errqueue::{ErrQueueEntry, ErrQueueMsg, PktInfo};
pub use gate::{Admission, DropAll, TxGate, TxMeta};
pub use info::{MemInfo, TcpInfo};
pub use md5::Md5Sig;
pub use payload::Frags;
pub use recv::{msgflags, RecvMeta};
pub use socket::{
    pollbits, Family, RouteAttrs, TcpState, Transmit, TxToken, Wakeup, SKB_OVERHEAD,
    SKB_TX_OVERHEAD,
};
pub use sockopt::{OptVal, SockOpt};
pub use stack::{
    BusyPoll, ForwardCompletion, ForwardFilter, ForwardVerdict, HeldSyn, Ioctl, LingerWait,
    PortFilter, ProtoMem, Shutdown, SockStat, SocketRow, Stack,
};
pub use tstamp::{NlaValue, OptStats, TstampKind, TxTimestamp};
pub use zerocopy::ZcNotice;

#[cfg(any(test, feature = "test-util"))]
pub mod harness;

#[cfg(test)]
mod tests;

/// `ARCHITECTURE.md`, compiled as documentation so that its Rust blocks (the engine's
/// interface) run as doctests and cannot drift from the code.
#[cfg(doctest)]
#[doc = include_str!("../../../ARCHITECTURE.md")]
pub struct ArchitectureDoc;
