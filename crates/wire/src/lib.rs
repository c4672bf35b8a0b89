//! Packet formats for Shallow.
//!
//! Parsing is done through zero-copy views over `&[u8]` (`Ipv4Packet`, `Ipv6Packet`,
//! `TcpPacket`, …); building is done from plain `…Repr` structs that are written into a
//! caller's buffer by their `emit` method. Every constructor that takes bytes checks the
//! lengths it relies on, so parsing any byte string never panics and never reads out of
//! bounds: malformed input is a [`WireError`].
//!
//! Covered formats:
//! - IPv4 (RFC 791; ECN bits per RFC 3168 §5), with fragments flagged;
//! - IPv6 (RFC 8200), with hop-by-hop, routing, fragment and destination-options extension
//!   headers skipped (RFC 8200 §4);
//! - TCP (RFC 9293 §3.1): the one TCP packet model of the project — the header layout
//!   ([`tcp_field`]), the control bits ([`TcpFlags`], defined nowhere else), the view
//!   ([`TcpPacket`]) and the fields to build ([`TcpRepr`]) — with MSS, window scale and
//!   timestamps (RFC 7323), SACK-permitted and SACK blocks (RFC 2018), NOP/EOL, and unknown
//!   options kept as bytes;
//! - ICMPv4 (RFC 792, with the next-hop MTU of RFC 1191) and ICMPv6 (RFC 4443, RFC 8201);
//! - the internet checksum (RFC 1071) with the IPv4 and IPv6 pseudo-headers;
//! - the virtio-net header that a TUN device with `IFF_VNET_HDR` puts in front of each packet;
//! - TCP segmentation offload in software ([`segment`]: cut a TSO/GSO super-segment into wire
//!   segments, fix lengths and checksums in place), with a light offsets-only TCP view.
//!
//! [`TcpRepr::emit_packet`] appends a whole IP + TCP packet to a `Vec` in one pass (headers,
//! one copy of the payload, checksums).
//!
//! This crate does no I/O, reads no clock and keeps no global state.
//!
//! # Example: build a SYN, then parse it back
//!
//! ```
//! use shallow_wire::*;
//! use std::net::Ipv4Addr;
//!
//! let tcp = TcpRepr {
//!     src_port: 40000, dst_port: 80, seq: 1, ack: 0, flags: TcpFlags::SYN, window: 64240,
//!     urgent: 0,
//!     options: vec![TcpOptionRepr::Mss(1460), TcpOptionRepr::SackPermitted,
//!                   TcpOptionRepr::Timestamps { tsval: 1, tsecr: 0 },
//!                   TcpOptionRepr::Nop, TcpOptionRepr::WindowScale(7)],
//! };
//! let ip = IpRepr::V4(Ipv4Repr {
//!     src: Ipv4Addr::new(192, 0, 2, 1), dst: Ipv4Addr::new(192, 0, 2, 2),
//!     protocol: IPPROTO_TCP, ttl: 64, tos: 0, df: true, ident: 0,
//!     payload_len: tcp.header_len(),
//! });
//! let mut buf = [0u8; 1500];
//! let h = ip.emit(&mut buf)?;
//! let n = h + tcp.emit(&mut buf[h..], &[], ip.src(), ip.dst())?;
//!
//! let packet = IpPacket::parse(&buf[..n])?;
//! let seg = TcpPacket::new_checked(packet.payload())?;
//! assert!(seg.checksum_valid(packet.src(), packet.dst()));
//! assert_eq!(seg.flags().to_string(), "S");
//! assert_eq!(seg.options().next(), Some(Ok(TcpOption::Mss(1460))));
//! assert_eq!(TcpRepr::parse(&seg)?, tcp);
//! # Ok::<(), WireError>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checksum;
mod error;
mod icmp;
mod ip;
pub mod segment;
mod tcp;
mod virtio;

pub use error::{Result, WireError};
pub use icmp::{Icmpv4Repr, Icmpv6Repr};
pub use ip::{
    Ecn, IpPacket, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Fragment, Ipv6Packet, Ipv6Repr, IPPROTO_ICMP,
    IPPROTO_ICMPV6, IPPROTO_TCP, IPPROTO_UDP,
};
pub use tcp::field as tcp_field;
pub use tcp::{
    SackBlocks, TcpFlags, TcpOption, TcpOptionIter, TcpOptionRepr, TcpPacket, TcpRepr,
    TCP_MAX_OPTIONS_LEN,
};
pub use virtio::VirtioNetHdr;
