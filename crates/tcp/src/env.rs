//! The environment every socket of one stack acts on (`Env`), grouped by what it is: the
//! configuration (`Config`, sysctl.rs), the device side (`DeviceSide`, device.rs), the clock
//! and the timer set (`TimerSet`, timer.rs), the outputs waiting for the substrate
//! (`Outputs`, here), host-wide TCP memory (`HostMem`, mem.rs), the SNMP counters (mib.rs),
//! the host-wide rate rules (`Limits`, input.rs) and the keyed randomness (`Keys`, here).
//! Each group keeps its rules beside it; `Env` itself only composes them where one act needs
//! several (building and queueing a packet: [`Env::emit`]).

use crate::device::DeviceSide;
use crate::gate::TxMeta;
use crate::input::Limits;
use crate::mem::HostMem;
use crate::mib::{Counters, Mib};
use crate::packet::{self, SegOut};
use crate::payload::Frags;
use crate::socket::{Transmit, TxToken, Wakeup, MAX_WAKEUPS};
use crate::sysctl::{Config, Sysctl};
use crate::time::Instant;
use crate::timer::TimerSet;
use crate::SocketId;
use core::net::{IpAddr, SocketAddr};
use rand_chacha::rand_core::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// What became of a segment the engine emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emitted {
    /// Queued for the substrate.
    Sent,
    /// Refused by the device side (NET_XMIT_DROP, [`DeviceSide::admit`]).
    Refused,
    /// Could not be built (mixed address families; a bug guard).
    Unbuilt,
}

impl Emitted {
    pub fn sent(self) -> bool {
        self == Emitted::Sent
    }
}

/// What every socket of one stack shares, grouped by what it is. Sockets get it as `&mut Env`
/// beside themselves (the split borrow of `Stack::sk_env`).
pub(crate) struct Env {
    /// Sysctls and module parameters (sysctl.rs).
    pub config: Config,
    /// The device below: its capabilities and its admission rule (device.rs).
    pub device: DeviceSide,
    /// The latest time the stack was given (for events noticed without a `now`); only
    /// `Stack::tick` advances it.
    pub clock: Instant,
    /// Armed timers of all sockets (timer.rs).
    pub timers: TimerSet,
    /// What waits for the substrate.
    pub out: Outputs,
    /// Host-wide TCP memory (mem.rs).
    pub mem: HostMem,
    /// SNMP counters.
    pub mib: Counters,
    /// Host-wide rate rules and counters: the challenge-ACK limiter, the IPv4 ident (input.rs).
    pub limits: Limits,
    /// Keyed randomness, from the stack's seed only.
    pub keys: Keys,
    /// TCP Fast Open's keys and the client's cookie cache (fastopen.rs).
    pub tfo: crate::fastopen::FastOpenState,
    /// Sockets asking for receive timestamps (`netstamp_needed_key`, Linux's host-wide
    /// switch): while any does, every arriving segment is stamped (recv.rs).
    pub rx_tstamp_users: u32,
}

/// The engine's outputs waiting for the substrate (`Stack::poll_transmit`,
/// `Stack::poll_wakeup`).
#[derive(Default)]
pub(crate) struct Outputs {
    /// Packets to transmit, in order.
    pub txq: VecDeque<Transmit>,
    /// Socket wake-ups, merged per socket (`Env::wake`).
    pub wakeups: VecDeque<Wakeup>,
    /// The option list `packet::build_with` fills for each packet it builds, kept empty
    /// between packets so that its allocation serves them all.
    pub opt_scratch: Vec<shallow_wire::TcpOptionRepr>,
}

impl Outputs {
    /// Queue a wake-up, merging with the previous one for the same socket. If the substrate
    /// lets the queue grow past [`MAX_WAKEUPS`], wake-ups merge per socket (level-triggered
    /// waiters lose nothing; edge-triggered ones see fewer edges).
    pub fn wake(&mut self, socket: SocketId, events: u32) {
        if let Some(last) = self.wakeups.back_mut() {
            if last.socket == socket {
                last.events |= events;
                return;
            }
        }
        if self.wakeups.len() >= MAX_WAKEUPS {
            if let Some(w) = self.wakeups.iter_mut().find(|w| w.socket == socket) {
                w.events |= events;
                return;
            }
        }
        self.wakeups.push_back(Wakeup { socket, events });
    }
}

/// The stack's keyed randomness, from its seed only (the engine draws nothing from the
/// operating system): a random stream and the secret of its keyed hashes (ISNs, timestamp
/// offsets, flow hashes, tables). Private: drawn from through the methods.
pub(crate) struct Keys {
    /// The stack's random stream.
    rng: ChaCha8Rng,
    /// The secret of its keyed hashes.
    key: (u64, u64),
    /// The last flow hash computed, with its 4-tuple: the packets of a connection come in
    /// runs, and the hash of a tuple never changes (Linux keeps it in the socket,
    /// `sk_txhash`), so a run pays for one SipHash.
    flow_memo: Option<(SocketAddr, SocketAddr, u32)>,
}

impl Keys {
    /// The keys of a stack seeded with `seed`.
    pub fn new(seed: u64) -> Keys {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let key = (rng.next_u64(), rng.next_u64());
        Keys {
            rng,
            key,
            flow_memo: None,
        }
    }

    /// A random u32 from the stack's stream.
    pub fn rand(&mut self) -> u32 {
        self.rng.next_u32()
    }

    /// The secret, for the stack's keyed hash tables.
    pub fn key(&self) -> (u64, u64) {
        self.key
    }

    /// Keyed hash (SipHash-1-3) over the connection 4-tuple, for ISNs and TS offsets.
    pub fn hash4(&self, local: SocketAddr, remote: SocketAddr, salt: u8) -> u64 {
        use core::hash::Hasher;
        let mut h = siphasher::sip::SipHasher13::new_with_keys(self.key.0, self.key.1);
        h.write_u8(salt);
        match local.ip() {
            IpAddr::V4(a) => h.write(&a.octets()),
            IpAddr::V6(a) => h.write(&a.octets()),
        }
        match remote.ip() {
            IpAddr::V4(a) => h.write(&a.octets()),
            IpAddr::V6(a) => h.write(&a.octets()),
        }
        h.write_u16(local.port());
        h.write_u16(remote.port());
        h.finish()
    }

    /// The flow hash of a connection (`skb->hash`, fq's key): [`Transmit::flow`].
    pub fn flow_hash(&mut self, local: SocketAddr, remote: SocketAddr) -> u32 {
        if let Some((l, r, h)) = self.flow_memo {
            if l == local && r == remote {
                return h;
            }
        }
        let h = (self.hash4(local, remote, 3) & 0xffff_ffff) as u32;
        self.flow_memo = Some((local, remote, h));
        h
    }
}

impl Env {
    pub fn new(seed: u64) -> Env {
        Env {
            config: Config::default(),
            device: DeviceSide::default(),
            clock: Instant::ZERO,
            timers: TimerSet::default(),
            out: Outputs::default(),
            mem: HostMem::default(),
            mib: Counters::default(),
            limits: Limits::default(),
            keys: Keys::new(seed),
            tfo: Default::default(),
            rx_tstamp_users: 0,
        }
    }

    /// The stack's Fast Open keys, made from the stack's random stream at first use when
    /// `net.ipv4.tcp_fastopen_key` was never set (`tcp_fastopen_init_key_once`); the sysctl
    /// then shows them.
    pub fn tfo_keys(&mut self) -> crate::fastopen::Keys {
        if let Some(k) = self.tfo.keys {
            return k;
        }
        let mut b = [0u8; 16];
        for c in b.chunks_mut(4) {
            c.copy_from_slice(&self.keys.rand().to_le_bytes());
        }
        let k = crate::fastopen::Keys {
            primary: crate::fastopen::Key::from_bytes(&b),
            backup: None,
        };
        self.tfo.keys = Some(k);
        let _ = self
            .config
            .sysctl
            .set("net.ipv4.tcp_fastopen_key", &k.sysctl_text());
        k
    }

    /// A sysctl's integer value.
    pub fn sysint(&self, s: Sysctl) -> i64 {
        self.config.sysctl.int(s)
    }

    /// Build and queue a segment, after asking the device side ([`DeviceSide::admit`]).
    pub fn emit(
        &mut self,
        seg: &SegOut<'_>,
        gso_size: Option<u16>,
        departure: Option<Instant>,
        token: Option<TxToken>,
    ) -> Emitted {
        self.emit_frag(seg, None, gso_size, departure, token, None)
    }

    /// [`Env::emit`] for a segment whose payload (`seg.payload`) is `frags`' bytes: when the
    /// device does scatter-gather, the packet carries shares of them instead of a copy.
    /// `admitted`: the caller already had the packet admitted ([`DeviceSide::admit`], with the
    /// length [`packet::header_len`] gives) under this flow hash, so it is not asked again.
    pub fn emit_frag(
        &mut self,
        seg: &SegOut<'_>,
        frags: Option<Frags>,
        gso_size: Option<u16>,
        departure: Option<Instant>,
        token: Option<TxToken>,
        admitted: Option<u32>,
    ) -> Emitted {
        let flow = match admitted {
            Some(flow) => flow,
            None => self.keys.flow_hash(seg.local, seg.remote),
        };
        if admitted.is_none() {
            let header_len = packet::header_len(seg);
            let meta = TxMeta {
                flow,
                len: header_len + seg.payload.len(),
                header_len,
                gso_size,
                tos: seg.tos,
                departure,
                now: self.clock,
            };
            if !self.device.admit(&meta) {
                return Emitted::Refused;
            }
        }
        let partial = self.device.caps.tso_csum_offload
            && gso_size.is_some_and(|g| g > 0 && seg.payload.len() > usize::from(g));
        // `frags` must be the very bytes of `seg.payload` (shares of the same buffers).
        let frags =
            frags.filter(|f| self.device.caps.sg && !f.is_empty() && seg.payload.is_shared_by(f));
        match packet::build_with(seg, partial, frags.is_some(), &mut self.out.opt_scratch) {
            Some(data) => {
                self.mib.inc(Mib::OutSegs);
                self.out.txq.push_back(Transmit {
                    data,
                    frags: frags.unwrap_or_default(),
                    gso_size,
                    departure,
                    token,
                    flow,
                });
                Emitted::Sent
            }
            None => Emitted::Unbuilt,
        }
    }
}
