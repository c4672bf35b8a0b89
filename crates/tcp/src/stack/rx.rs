//! The network input of [`Stack`]: parse a received packet, count it, and hand it to its
//! connection (or its backlog while the application owns the socket), its listener, or a
//! reset (`tcp_v4_rcv`); ICMP errors for our connections (`tcp_v4_err`).

use super::*;
use shallow_wire::TcpFlags;

/// **Inputs from the network** (`handle_*`): one received packet at a time.
impl Stack {
    /// The engine's network input: one received IP packet (see [`RxPacket`]: contiguous or
    /// in two parts, maybe a GRO aggregate, its checksum verified or not). A TCP segment is
    /// checked (checksum unless the device verified it, lengths, header) and demultiplexed
    /// to its connection, its listener, or a reset; an ICMP error quoting one of our
    /// connections goes to it (`tcp_v4_err`/`tcp_v6_err`); anything else is ignored.
    /// Malformed packets are counted (`InErrs`, `InCsumErrors`) and dropped.
    pub fn handle_packet(&mut self, now: Instant, pkt: RxPacket<'_>) {
        self.tick(now);
        let verified = pkt.checksum == RxChecksum::Unnecessary;
        let seg = match pkt.bytes {
            RxBytes::Linear(bytes) => packet::parse(bytes, pkt.gso_size, verified),
            RxBytes::Paged { head, frag } => packet::parse_frag(head, frag, pkt.gso_size, verified),
        };
        if let Err(packet::ParseError::NotTcp) = seg {
            let icmp = match pkt.bytes {
                RxBytes::Linear(bytes) => packet::parse_icmp(bytes),
                // Rare (ICMP errors are small): join the parts rather than parse in two.
                RxBytes::Paged { head, frag } => packet::parse_icmp(&[head, &frag[..]].concat()),
            };
            if let Some(icmp) = icmp {
                self.icmp_err(now, icmp);
            }
        }
        self.input_seg(now, seg);
    }

    /// Shorthand for [`Stack::handle_packet`] with a contiguous packet whose checksum is not
    /// verified (a NIC without receive checksum offload, `CHECKSUM_NONE`), a GRO aggregate
    /// when `gso_size` is Some.
    pub fn input(&mut self, now: Instant, packet: &[u8], gso_size: Option<u16>) {
        self.handle_packet(now, RxPacket::linear(packet).gso(gso_size));
    }

    /// Count, then demultiplex a parsed segment.
    pub(super) fn input_seg(&mut self, now: Instant, seg: Result<SegIn<'_>, packet::ParseError>) {
        let seg = match seg {
            Ok(s) => s,
            Err(packet::ParseError::Checksum) => {
                self.env.mib.inc(Mib::InCsumErrors);
                self.env.mib.inc(Mib::InErrs);
                return;
            }
            Err(packet::ParseError::NotTcp) => return,
            Err(packet::ParseError::Malformed) => {
                self.env.mib.inc(Mib::InErrs);
                return;
            }
        };
        // TcpInSegs counts received packets, a GRO packet once (measured on Linux 6.18: 20 MB
        // over a 1500-byte-MTU loopback, 14,483 segments' worth, raised InSegs by 457 while
        // OutSegs counted every wire segment).
        self.env.mib.inc(Mib::InSegs);
        if !self.accepts_dst(seg.dst.ip()) {
            return;
        }
        if let Some(&id) = self.conns.get(&(seg.dst, seg.src)) {
            let Ok(sk) = self.sock(id) else { return };
            let owned = sk.lock.owned;
            // tcp_v4_rcv: a TIME_WAIT socket is not asked for signatures (measured). One test
            // when neither the socket has keys nor the segment a signature.
            let md5 = sk.md5.is_some() || seg.opts.md5.is_some();
            if md5 && sk.state != TcpState::TimeWait && self.md5_drop(id, &seg) {
                return;
            }
            if owned {
                self.add_backlog(id, &seg);
                return;
            }
            self.rcv_conn(now, id, &seg);
            return;
        }
        if let Some(l) = self.listener_for(seg.dst) {
            if self.md5_drop(l, &seg) {
                return;
            }
            self.listen_rcv(now, l, &seg);
            return;
        }
        if seg.opts.md5.is_some() {
            self.send_reset_signed_stray(&seg);
            return;
        }
        self.send_reset_for(&seg);
    }

    /// `tcp_v4_send_reset` for a signed segment that matched no socket: "the active side is
    /// lost", so the key is looked for in a listener on our address at the port the segment
    /// came from (where a BGP speaker also listens). Only when that listener holds a key for
    /// the source and the signature verifies under it is a RST sent, signed with the key;
    /// otherwise nothing (measured on 6.18: a signed SYN-ACK to a closed port on a host
    /// with a keyed listener at the SYN-ACK's source port is answered with a signed RST).
    fn send_reset_signed_stray(&mut self, seg: &SegIn<'_>) {
        if seg.has(TcpFlags::RST) {
            return;
        }
        let Some(l) = self.listener_for(SocketAddr::new(seg.dst.ip(), seg.src.port())) else {
            return;
        };
        let Ok(ls) = self.sock(l) else { return };
        let Some(k) = ls.md5.as_ref().and_then(|t| t.lookup(seg.src.ip())) else {
            return;
        };
        if seg.md5_expected(&k.key).as_ref() != seg.md5_digest() {
            return;
        }
        let key = Some(k.key.clone());
        let (seq, ack, fl) = reset_numbers(seg);
        self.send_reset_signed(seg.dst, seg.src, seq, ack, fl, key);
    }

    /// `tcp_inbound_md5_hash` before the socket `id` (a connection or a listener) sees `seg`
    /// (md5.rs): a segment whose signature is missing, unexpected or wrong is counted and
    /// dropped.
    fn md5_drop(&mut self, id: SocketId, seg: &SegIn<'_>) -> bool {
        let Ok(sk) = self.sock(id) else { return false };
        if sk.md5.is_none() && seg.opts.md5.is_none() {
            return false;
        }
        match sk.md5_inbound(seg).mib() {
            Some(m) => {
                self.env.mib.inc(m);
                true
            }
            None => false,
        }
    }

    /// The listener a SYN to `dst` reaches (`__inet_lookup_listener`): one bound to the
    /// address itself, else one bound to its family's wildcard, else — for an IPv4 `dst` —
    /// a dual-stack AF_INET6 listener on `::` (not `IPV6_V6ONLY`; see `dualstack`). A
    /// destination that is not one of the stack's addresses reaches only a forwarding
    /// listener (`forward.rs`), as on Linux a wildcard listener sees only local delivery.
    pub(super) fn listener_for(&self, dst: SocketAddr) -> Option<SocketId> {
        if !self.addrs.is_empty() && !self.addrs.contains(&dst.ip()) {
            return self.forward_listener_for(dst);
        }
        if let Some(&l) = self.listeners.get(&dst) {
            return Some(l);
        }
        let any = SocketAddr::new(Family::of(dst.ip()).unspecified(), dst.port());
        if let Some(&l) = self.listeners.get(&any) {
            return Some(l);
        }
        if dst.is_ipv4() {
            let any6 = SocketAddr::new(Family::V6.unspecified(), dst.port());
            if let Some(&l) = self.listeners.get(&any6) {
                let sk = self.sock(l).ok()?;
                if BindScope::of(sk.local.ip(), sk.opts.v6only).receives(dst.ip()) {
                    return Some(l);
                }
            }
        }
        self.forward_listener_for(dst)
    }

    /// An ICMP error for one of our connections (`tcp_v4_err`): path-MTU reduction
    /// (RFC 1191 / RFC 8201) or a destination-unreachable error (hard in SYN states, soft
    /// otherwise). Errors quoting a sequence outside snd_una..snd_nxt count as
    /// OutOfWindowIcmps and are ignored (RFC 5927 §4.1).
    pub(super) fn icmp_err(&mut self, now: Instant, icmp: packet::IcmpIn) {
        let Some(&id) = self.conns.get(&(icmp.local, icmp.remote)) else {
            return;
        };
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        // The quoted sequence must be one we sent and is not yet acknowledged; a Fast Open
        // child's window begins at its SYN-ACK (`tcp_v4_err`: snd_una = the request's ISN).
        // A child still in the SYN queue answers for its request socket (`tcp_req_err`).
        let tfo_recv = sk.state == TcpState::SynRecv && sk.fastopen.child;
        let snd_una = if tfo_recv { sk.snd.iss } else { sk.snd.una };
        if (sk.state != TcpState::SynRecv || tfo_recv) && !between(icmp.seq, snd_una, sk.snd.nxt) {
            env.mib.inc(Mib::OutOfWindowIcmps);
            return;
        }
        // A Fast Open child the application accepted is treated as a connected socket.
        let hard = match sk.state {
            TcpState::SynSent => true,
            TcpState::SynRecv => !sk.fastopen.child || sk.parent.is_some(),
            _ => false,
        };
        match icmp.kind {
            packet::IcmpKind::FragNeeded(mtu) => {
                // The wire's family decides (an IPv4-mapped peer is an IPv4 path).
                let (min, pmtudisc) = if sk.local.is_ipv4() {
                    (68, sk.opts.pmtudisc)
                } else {
                    (1280, sk.opts.pmtudisc6)
                };
                // tcp_v4_mtu_reduced: IP_PMTUDISC_DONT opts out of path-MTU discovery.
                if mtu < min || mtu >= sk.pmtu() || pmtudisc == 0 {
                    return;
                }
                sk.route.mtu = mtu;
                let old = sk.mss.cache;
                sk.sync_mss(env);
                if sk.state == TcpState::SynSent && sk.fastopen.syn_data {
                    // The SYN with data was too big: it and its data are lost
                    // (tcp_simple_retransmit under Fast Open).
                    sk.fastopen_syn_too_big(env, now);
                } else if sk.mss.cache < old {
                    sk.simple_retransmit(env, now);
                }
            }
            packet::IcmpKind::Unreach(e) => {
                if hard && !sk.lock.owned {
                    sk.err = Some(e);
                    if sk.state == TcpState::SynSent {
                        env.mib.inc(Mib::AttemptFails);
                    }
                    sk.set_closed(env);
                    self.reap(id);
                } else {
                    sk.err_soft = Some(e);
                }
            }
        }
    }

    /// `tcp_add_backlog`: queue a packet for an owned socket, within 2*rcvbuf + sndbuf/2 + 64K.
    pub(super) fn add_backlog(&mut self, id: SocketId, seg: &SegIn<'_>) {
        let Ok((sk, env)) = self.sk_env(id) else {
            return;
        };
        if let Some(tail) = sk
            .lock
            .backlog
            .back_mut()
            .filter(|_| env.device.caps.rx_truesize.coalesces())
        {
            if tail.try_coalesce(seg) {
                sk.lock.backlog_len += seg.payload.len() as u32;
                env.mib.inc(Mib::TCPBacklogCoalesce);
                return;
            }
        }
        let limit = 2u64 * u64::from(sk.mem.rcvbuf) + u64::from(sk.mem.sndbuf / 2) + 65536;
        if u64::from(sk.lock.backlog_len) + u64::from(sk.mem.rmem_alloc) > limit {
            env.mib.inc(Mib::TCPBacklogDrop);
            sk.stats.count_drop();
            return;
        }
        sk.lock.backlog_len += sk.rx_truesize(env, seg, seg.payload.len() as u32);
        sk.lock.backlog.push_back(packet::OwnedSeg::from_seg(seg));
    }

    pub(super) fn rcv_conn(&mut self, now: Instant, id: SocketId, seg: &SegIn<'_>) {
        if self.deferred_rcv(id, seg) {
            return;
        }
        // tcp_timewait_state_process TCP_TW_SYN: a new SYN above the old sequence space
        // reopens the 4-tuple through the listener.
        if let Ok(sk) = self.sock(id) {
            if sk.state == TcpState::TimeWait
                && seg.has(TcpFlags::SYN)
                && !seg.has(TcpFlags::ACK)
                && !seg.has(TcpFlags::RST)
                && after(seg.seq, sk.rcv.nxt)
            {
                if let Some(l) = self.listener_for(seg.dst) {
                    if sk.orphan {
                        self.free(id);
                    } else {
                        let key = (sk.local, sk.remote);
                        self.conns.remove(&key);
                        if let Ok((sk, env)) = self.sk_env(id) {
                            sk.hashed = false;
                            sk.disarm_all(env);
                            sk.state = TcpState::Close;
                        }
                    }
                    self.listen_rcv(now, l, seg);
                    return;
                }
            }
        }
        // Accept-queue overflow at the third ACK (tcp_check_req → syn_recv_sock).
        let parent = {
            let Ok(sk) = self.sock(id) else { return };
            if sk.state == TcpState::SynRecv
                && seg.has(TcpFlags::ACK)
                && !seg.has(TcpFlags::RST)
                && !seg.has(TcpFlags::SYN)
                && !sk.fastopen.child
            {
                sk.parent
            } else {
                None
            }
        };
        if let Some((p, gen)) = parent {
            let full = match self.sock(p) {
                Ok(ps) if ps.gen == gen => ps
                    .listen
                    .as_ref()
                    // sk_acceptq_is_full: ack_backlog > max_ack_backlog.
                    .map(|l| l.accept_queue.len() as u32 > l.backlog)
                    .unwrap_or(true),
                _ => true,
            };
            if full {
                self.env.mib.inc(Mib::ListenOverflows);
                self.env.mib.inc(Mib::ListenDrops);
                if self.env.config.sysctl.on(Sysctl::tcp_abort_on_overflow) {
                    self.send_reset_for(seg);
                    self.free(id);
                }
                return;
            }
        }
        let out: RcvOutcome = {
            let Ok((sk, env)) = self.sk_env(id) else {
                return;
            };
            sk.rcv(env, now, seg)
        };
        if out.reset {
            self.send_reset_for(seg);
        }
        if out.child_established {
            self.child_established(now, id);
        }
        self.reap(id);
    }

    /// Answer a segment that matched no connection with a RST (`tcp_v4_send_reset`).
    /// TCP-MD5: the RST is signed with the key its socket — the segment's connection, or
    /// the listener it reached — holds for the peer, if any.
    pub(super) fn send_reset_for(&mut self, seg: &SegIn<'_>) {
        if seg.has(TcpFlags::RST) {
            return;
        }
        let sk = match self.conns.get(&(seg.dst, seg.src)) {
            Some(&id) => Some(id),
            None => self.listener_for(seg.dst),
        };
        let key = sk.and_then(|id| {
            let t = self.sock(id).ok()?.md5.as_ref()?;
            t.lookup(seg.src.ip()).map(|k| k.key.clone())
        });
        let (seq, ack, fl) = reset_numbers(seg);
        self.send_reset_signed(seg.dst, seg.src, seq, ack, fl, key);
    }

    /// A RST from `local` to `remote` that belongs to no socket (`tcp_v4_send_reset`).
    pub(super) fn send_reset_to(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        ack: u32,
        fl: TcpFlags,
    ) {
        self.send_reset_signed(local, remote, seq, ack, fl, None);
    }

    /// [`Stack::send_reset_to`], signed with the TCP-MD5 key `md5` if given.
    fn send_reset_signed(
        &mut self,
        local: SocketAddr,
        remote: SocketAddr,
        seq: u32,
        ack: u32,
        fl: TcpFlags,
        md5: Option<std::sync::Arc<[u8]>>,
    ) {
        let ident = self.env.limits.next_ident();
        let out = SegOut {
            urgent: 0,
            local,
            remote,
            seq,
            ack,
            flags: fl,
            window: 0,
            tos: 0,
            ttl: 64,
            ident,
            opts: &[],
            payload: crate::payload::Payload::EMPTY,
            md5,
        };
        self.env.emit(&out, None, None, None);
        self.env.mib.inc(Mib::OutRsts);
    }
}

/// The sequence, acknowledgment and flags of a RST answering `seg` (RFC 9293 §3.10.7.1):
/// `seq = SEG.ACK` for a segment with ACK, else `RST|ACK` acknowledging all of it.
fn reset_numbers(seg: &SegIn<'_>) -> (u32, u32, TcpFlags) {
    if seg.has(TcpFlags::ACK) {
        (seg.ack, 0, TcpFlags::RST)
    } else {
        (0, seg.end_seq(), TcpFlags::RST | TcpFlags::ACK)
    }
}
