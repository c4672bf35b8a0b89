//! TCP Fast Open (RFC 7413): the cookie and its option, the server's keys, the client's
//! cookie cache, and the server's decision on a SYN that carries the option.
//!
//! Linux's rules, as the running 6.18 kernel shows them:
//! - `net.ipv4.tcp_fastopen` is a bit set ([`bits`]): client on (1), server on (2), data in the
//!   SYN without a cookie (4, client; 0x200, server), and listeners without `TCP_FASTOPEN`
//!   (0x400: the listen backlog is the TFO queue).
//! - A server cookie is the SipHash-2-4 of the SYN's source and destination addresses (IPv4:
//!   8 bytes, IPv6: 32 bytes, the SYN's own family: an IPv4 SYN to a dual-stack listener hashes
//!   the IPv4 addresses), keyed with the primary key, as 8 little-endian bytes
//!   (`__tcp_fastopen_cookie_gen_cipher`). A cookie the backup key gives is accepted too.
//! - Keys: `net.ipv4.tcp_fastopen_key` (`xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx[,backup]`, each
//!   word a little-endian u32 of the 16 key bytes) or `TCP_FASTOPEN_KEY` on a listener (16 or
//!   32 raw bytes); never set, a random key is made at first use (`tcp_fastopen_init_key_once`).
//! - The option: kind 34 (RFC 7413) or the experimental kind 254 with magic 0xF989, a cookie of
//!   0 (a request) or 4..=16 even bytes; anything else is as if the option were absent
//!   (`tcp_parse_fastopen_option`). A server answers in the kind the client used.

use crate::env::Env;
use crate::mib::Mib;
use crate::packet::SegIn;
use crate::socket::{Connection, Skb, SkbData};
use crate::sysctl::Sysctl;
use crate::time::Instant;
use core::hash::Hasher;
use core::net::IpAddr;
use shallow_wire::TcpFlags;
use std::collections::{HashMap, VecDeque};

/// Bits of `net.ipv4.tcp_fastopen` (Linux `TFO_*`).
pub(crate) mod bits {
    /// The client may send data in its SYN.
    pub const CLIENT_ENABLE: i64 = 0x1;
    /// Listeners may accept data in a SYN.
    pub const SERVER_ENABLE: i64 = 0x2;
    /// The client sends data in the SYN without a cookie.
    pub const CLIENT_NO_COOKIE: i64 = 0x4;
    /// Listeners accept data in a SYN without a cookie.
    pub const SERVER_COOKIE_NOT_REQD: i64 = 0x200;
    /// Listeners without `TCP_FASTOPEN` get a TFO queue as long as their backlog.
    pub const SERVER_WO_SOCKOPT1: i64 = 0x400;
}

/// Kind of the RFC 7413 option.
pub(crate) const TCPOPT_FASTOPEN: u8 = 34;
/// Kind of the experimental option (RFC 6994), with [`FASTOPEN_MAGIC`] first.
pub(crate) const TCPOPT_EXP: u8 = 254;
/// The experimental option's magic number for Fast Open.
pub(crate) const FASTOPEN_MAGIC: u16 = 0xF989;
/// How many destinations the client's cookie cache remembers (the oldest goes first).
pub(crate) const CACHE_ENTRIES: usize = 4096;
/// How long a Fast Open child reset before its handshake completed still counts in its
/// listener's TFO queue (`reqsk_fastopen_remove`: 60 s, against RST floods).
pub(crate) const RST_HOLD: core::time::Duration = core::time::Duration::from_secs(60);

/// A Fast Open cookie as carried by the option: 0 bytes (a request) or 4..=16 bytes, and
/// whether it came (or goes) in the experimental option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cookie {
    len: u8,
    val: [u8; 16],
    /// Carried in the experimental option (kind 254).
    pub exp: bool,
}

impl Cookie {
    /// An empty cookie: a cookie request.
    pub fn request(exp: bool) -> Cookie {
        Cookie {
            exp,
            ..Cookie::default()
        }
    }

    /// A cookie of these bytes, if their length is one the option allows (0, or 4..=16
    /// and even).
    pub fn new(bytes: &[u8], exp: bool) -> Option<Cookie> {
        let n = bytes.len();
        if n != 0 && !((4..=16).contains(&n) && n % 2 == 0) {
            return None;
        }
        let mut val = [0u8; 16];
        val[..n].copy_from_slice(bytes);
        Some(Cookie {
            len: n as u8,
            val,
            exp,
        })
    }

    /// The cookie's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.val[..self.len as usize]
    }

    /// True for a cookie request (no bytes).
    pub fn is_request(&self) -> bool {
        self.len == 0
    }

    /// The option's bytes after kind and length, and its kind.
    pub fn option(&self) -> (u8, Vec<u8>) {
        if self.exp {
            let mut d = FASTOPEN_MAGIC.to_be_bytes().to_vec();
            d.extend_from_slice(self.bytes());
            (TCPOPT_EXP, d)
        } else {
            (TCPOPT_FASTOPEN, self.bytes().to_vec())
        }
    }

    /// The option's length (kind and length bytes included, no padding).
    pub fn opt_len(&self) -> usize {
        let base = if self.exp { 4 } else { 2 };
        base + self.len as usize
    }

    /// The option's length on the wire, padded to 32 bits.
    pub fn wire_len(&self) -> usize {
        (self.opt_len() + 3) & !3
    }

    /// Parse the data of a kind-34 option or of a kind-254 one (magic first); `None` when it
    /// is not a Fast Open option or its cookie length is not allowed.
    pub fn parse(kind: u8, data: &[u8]) -> Option<Cookie> {
        match kind {
            TCPOPT_FASTOPEN => Cookie::new(data, false),
            TCPOPT_EXP if data.len() >= 2 && data[..2] == FASTOPEN_MAGIC.to_be_bytes() => {
                Cookie::new(&data[2..], true)
            }
            _ => None,
        }
    }
}

/// One SipHash key (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    k0: u64,
    k1: u64,
}

impl Key {
    /// The key of 16 raw bytes (`TCP_FASTOPEN_KEY`; two little-endian u64).
    pub fn from_bytes(b: &[u8; 16]) -> Key {
        let (lo, hi) = b.split_at(8);
        Key {
            k0: u64::from_le_bytes(lo.try_into().unwrap_or_default()),
            k1: u64::from_le_bytes(hi.try_into().unwrap_or_default()),
        }
    }

    /// The 16 raw bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.k0.to_le_bytes());
        b[8..].copy_from_slice(&self.k1.to_le_bytes());
        b
    }

    /// The cookie of a SYN from `src` to `dst` (both of one family).
    pub fn cookie(&self, src: IpAddr, dst: IpAddr, exp: bool) -> Cookie {
        let mut h = siphasher::sip::SipHasher24::new_with_keys(self.k0, self.k1);
        match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                h.write(&s.octets());
                h.write(&d.octets());
            }
            (s, d) => {
                h.write(&v6(s).octets());
                h.write(&v6(d).octets());
            }
        }
        let mut c = Cookie::new(&h.finish().to_le_bytes(), exp).unwrap_or_default();
        c.exp = exp;
        c
    }

    fn parse_words(text: &str) -> Option<Key> {
        let words: Vec<&str> = text.trim().split('-').collect();
        if words.len() != 4 {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, w) in words.iter().enumerate() {
            if w.is_empty() || w.len() > 8 {
                return None;
            }
            let v = u32::from_str_radix(w, 16).ok()?;
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        Some(Key::from_bytes(&b))
    }

    fn words(self) -> String {
        let b = self.to_bytes();
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        format!("{:08x}-{:08x}-{:08x}-{:08x}", w(0), w(4), w(8), w(12))
    }
}

fn v6(a: IpAddr) -> core::net::Ipv6Addr {
    match a {
        IpAddr::V6(a) => a,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
    }
}

/// A primary key and an optional backup (`struct tcp_fastopen_context`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Keys {
    /// Makes the cookies a server hands out.
    pub primary: Key,
    /// Also accepted (key rotation).
    pub backup: Option<Key>,
}

impl Keys {
    /// Parse `net.ipv4.tcp_fastopen_key`'s text.
    pub fn parse_sysctl(text: &str) -> Option<Keys> {
        let mut parts = text.trim().split(',');
        let primary = Key::parse_words(parts.next()?)?;
        let backup = match parts.next() {
            Some(b) => Some(Key::parse_words(b)?),
            None => None,
        };
        if parts.next().is_some() {
            return None;
        }
        Some(Keys { primary, backup })
    }

    /// The sysctl's text (`proc_tcp_fastopen_key`'s format).
    pub fn sysctl_text(&self) -> String {
        match self.backup {
            Some(b) => format!("{},{}", self.primary.words(), b.words()),
            None => self.primary.words(),
        }
    }

    /// From `TCP_FASTOPEN_KEY`'s value: 16 bytes (primary) or 32 (primary, backup).
    pub fn from_sockopt(b: &[u8]) -> Option<Keys> {
        match b.len() {
            16 => Some(Keys {
                primary: Key::from_bytes(b.try_into().ok()?),
                backup: None,
            }),
            32 => Some(Keys {
                primary: Key::from_bytes(b[..16].try_into().ok()?),
                backup: Some(Key::from_bytes(b[16..].try_into().ok()?)),
            }),
            _ => None,
        }
    }

    /// `TCP_FASTOPEN_KEY`'s value as getsockopt returns it.
    pub fn to_sockopt(self) -> Vec<u8> {
        let mut v = self.primary.to_bytes().to_vec();
        if let Some(b) = self.backup {
            v.extend_from_slice(&b.to_bytes());
        }
        v
    }

    /// Which key makes `got` for a SYN from `src` to `dst`: 1 the primary, 2 the backup, 0
    /// none (`tcp_fastopen_cookie_gen_check`).
    pub fn check(&self, got: &Cookie, src: IpAddr, dst: IpAddr) -> u8 {
        if self.primary.cookie(src, dst, got.exp).bytes() == got.bytes() {
            return 1;
        }
        match self.backup {
            Some(b) if b.cookie(src, dst, got.exp).bytes() == got.bytes() => 2,
            _ => 0,
        }
    }
}

/// What the client remembers of a server (the Fast Open part of Linux's `tcp_metrics`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CacheEntry {
    /// The MSS the server's SYN-ACK announced (0: unknown).
    pub mss: u16,
    /// The server's cookie (a request-length cookie when it gave none).
    pub cookie: Cookie,
    /// The experimental option worked where the RFC one did not (1), or the reverse (2).
    pub try_exp: u8,
    /// Consecutive losses of a SYN with data.
    pub syn_loss: u32,
    /// When the last of them was noticed.
    pub last_syn_loss: Instant,
}

/// The client's cookie cache, by (local address, server address), bounded to
/// [`CACHE_ENTRIES`] (the oldest entry goes first). `ip tcp_metrics flush` empties it.
#[derive(Default)]
pub(crate) struct Cache {
    map: HashMap<(IpAddr, IpAddr), CacheEntry>,
    order: VecDeque<(IpAddr, IpAddr)>,
}

impl Cache {
    /// The entry for a pair, if any.
    pub fn get(&self, local: IpAddr, remote: IpAddr) -> Option<CacheEntry> {
        self.map.get(&(local, remote)).copied()
    }

    /// The entry for a pair, made if missing.
    pub fn entry(&mut self, local: IpAddr, remote: IpAddr) -> &mut CacheEntry {
        let k = (local, remote);
        if !self.map.contains_key(&k) {
            if self.map.len() >= CACHE_ENTRIES {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
            self.order.push_back(k);
        }
        self.map.entry(k).or_default()
    }

    /// Forget everything (`ip tcp_metrics flush all`).
    pub fn flush(&mut self) {
        self.map.clear();
        self.order.clear();
    }
}

/// The stack-wide Fast Open state: the server keys in force (`net.ipv4.tcp_fastopen_key`,
/// `None` until set or first needed) and the client's cookie cache.
#[derive(Default)]
pub(crate) struct FastOpenState {
    /// The stack's keys (listeners without their own `TCP_FASTOPEN_KEY` use them).
    pub keys: Option<Keys>,
    /// The client's cookie cache.
    pub cache: Cache,
    /// Black holes seen: how many times the client's Fast Open was paused
    /// (`tfo_active_disable_times`), and when it last was.
    pub disable_times: u32,
    /// When the client's Fast Open was last paused (`tfo_active_disable_stamp`).
    pub disable_stamp: Instant,
}

impl FastOpenState {
    /// `tcp_fastopen_active_should_disable`: Fast Open is paused after a black hole, for
    /// `tcp_fastopen_blackhole_timeout_sec` doubled per black hole beyond the first (at most
    /// 64 times). Returns whether it is paused now.
    pub fn active_paused(&self, now: Instant, timeout_sec: i64) -> bool {
        if timeout_sec <= 0 || self.disable_times == 0 {
            return false;
        }
        let mult = 1u64 << (self.disable_times - 1).min(6);
        let span = core::time::Duration::from_secs(timeout_sec as u64 * mult);
        now < self.disable_stamp + span
    }
}

/// The Fast Open state of one connection, grouped: what the client asked and sent in its SYN
/// (`fastopen_req`, `syn_fastopen`, `syn_data`...) and the server child's ties to its
/// listener while its handshake is incomplete (`fastopen_rsk`).
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnFastOpen {
    /// Active open: the cookie (or request) the SYN carries; `None`: no option.
    pub syn_cookie: Option<Cookie>,
    /// Active open: the SYN carried a Fast Open option (`syn_fastopen`).
    pub syn_fastopen: bool,
    /// Active open: the SYN carried data (`syn_data`).
    pub syn_data: bool,
    /// The data of the SYN was acknowledged (client) or accepted from it (server)
    /// (`syn_data_acked`, `TCPI_OPT_SYN_DATA`).
    pub syn_data_acked: bool,
    /// `TCP_FASTOPEN_CONNECT` deferred the SYN to the first write (`DEFER_CONNECT`).
    pub defer_connect: bool,
    /// Passive open: a child made at the SYN (`syn_fastopen_child`): it began its transfer
    /// then, before its handshake completed.
    pub child: bool,
    /// Passive open: a child made from a SYN under Fast Open, whose handshake is not
    /// complete yet (`fastopen_rsk`): its listener, to give back its place in the TFO queue.
    pub listener: Option<(crate::SocketId, u32)>,
    /// Passive open: when the SYN-ACK left (its RTT sample).
    pub synack_sent: Option<Instant>,
    /// Why the client's Fast Open did not go through (`tcpi_fastopen_client_fail`).
    pub client_fail: u8,
    /// The black-hole pause was checked and over for this connection (`syn_fastopen_ch`):
    /// if it then carries data, the pause count starts again.
    pub pause_checked: bool,
}

/// `tcpi_fastopen_client_fail` values.
pub(crate) mod client_fail {
    /// No cookie was cached.
    pub const COOKIE_UNAVAILABLE: u8 = 1;
    /// The SYN-ACK did not acknowledge the SYN's data.
    pub const DATA_NOT_ACKED: u8 = 2;
    /// The SYN with data was retransmitted.
    pub const SYN_RETRANSMITTED: u8 = 3;
}

/// The listener's side of a SYN with the option or with data (`tcp_try_fastopen`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// An ordinary passive open; the SYN-ACK carries this cookie option, if any.
    Ordinary(Option<Cookie>),
    /// A child now, in the accept queue, with the SYN's data; the SYN-ACK carries this
    /// cookie option, if any (a backup-key cookie is answered with the primary's).
    Child(Option<Cookie>),
}

/// What the listener's decision needs.
pub(crate) struct Syn<'a> {
    /// The client's cookie option (`None`: absent or malformed).
    pub cookie: Option<Cookie>,
    /// The SYN carries data.
    pub data: bool,
    /// `net.ipv4.tcp_fastopen`.
    pub sysctl: i64,
    /// The listener's `TCP_FASTOPEN_NO_COOKIE`.
    pub no_cookie: bool,
    /// The TFO queue has room (`tcp_fastopen_queue_check`).
    pub queue_ok: bool,
    /// The keys in force for this listener.
    pub keys: &'a Keys,
    /// The SYN's source and destination.
    pub src: IpAddr,
    /// The SYN's destination.
    pub dst: IpAddr,
}

/// Outcome of [`decide`] with the counters to bump.
pub(crate) struct Decision {
    /// What to do.
    pub verdict: Verdict,
    /// `TCPFastOpenCookieReqd`.
    pub cookie_reqd: bool,
    /// `TCPFastOpenPassive`.
    pub passive: bool,
    /// `TCPFastOpenPassiveFail`.
    pub passive_fail: bool,
    /// `TCPFastOpenPassiveAltKey`.
    pub alt_key: bool,
}

/// The listener's decision on a SYN (`tcp_try_fastopen`): a child at once when the cookie is
/// valid (or none is required), with or without data; a fresh cookie on the SYN-ACK when
/// the client asked for one or sent a wrong one.
pub(crate) fn decide(s: &Syn<'_>) -> Decision {
    let mut d = Decision {
        verdict: Verdict::Ordinary(None),
        cookie_reqd: s.cookie.is_some_and(|c| c.is_request()),
        passive: false,
        passive_fail: false,
        alt_key: false,
    };
    if s.sysctl & bits::SERVER_ENABLE == 0 || !(s.data || s.cookie.is_some()) || !s.queue_ok {
        return d;
    }
    if s.sysctl & bits::SERVER_COOKIE_NOT_REQD != 0 || s.no_cookie {
        d.verdict = Verdict::Child(None);
        d.passive = true;
        return d;
    }
    let Some(got) = s.cookie else {
        return d;
    };
    let valid = s.keys.primary.cookie(s.src, s.dst, got.exp);
    if got.is_request() {
        d.verdict = Verdict::Ordinary(Some(valid));
        return d;
    }
    match s.keys.check(&got, s.src, s.dst) {
        1 => {
            d.verdict = Verdict::Child(None);
            d.passive = true;
        }
        2 => {
            d.verdict = Verdict::Child(Some(valid));
            d.passive = true;
            d.alt_key = true;
        }
        _ => {
            d.verdict = Verdict::Ordinary(Some(valid));
            d.passive_fail = true;
        }
    }
    d
}

/// Room for options a middlebox may add, kept free of data in a SYN (`MAX_TCP_OPTION_SPACE`).
const MAX_TCP_OPTION_SPACE: u32 = 40;

/// The client's side of Fast Open on a connection.
impl Connection {
    /// `tcp_fastopen_cookie_check`: whether the SYN may carry data, with the option it carries
    /// (`None`: data without a cookie, `TFO_CLIENT_NO_COOKIE` or `TCP_FASTOPEN_NO_COOKIE`),
    /// or, when it may not, the cookie request it carries; and the server's cached MSS.
    pub(crate) fn fastopen_cookie_check(&mut self, env: &Env) -> (bool, Option<Cookie>, u16) {
        let e = env
            .tfo
            .cache
            .get(self.local.ip(), self.remote.ip())
            .unwrap_or_default();
        // Paused after a black hole: no option and no data (the SYN is plain).
        let timeout = env.sysint(Sysctl::tcp_fastopen_blackhole_timeout_sec);
        if env.tfo.active_paused(env.clock, timeout) {
            return (false, None, e.mss);
        }
        if timeout > 0 && env.tfo.disable_times > 0 {
            self.fastopen.pause_checked = true;
        }
        let no_cookie = env.sysint(Sysctl::tcp_fastopen) & bits::CLIENT_NO_COOKIE != 0
            || self.opts.fastopen_no_cookie;
        if no_cookie {
            return (true, None, e.mss);
        }
        if !e.cookie.is_request() {
            return (true, Some(e.cookie), e.mss);
        }
        self.fastopen.client_fail = client_fail::COOKIE_UNAVAILABLE;
        (false, Some(Cookie::request(e.try_exp == 1)), e.mss)
    }

    /// `tcp_send_syn_data`: send the SYN of an active open under Fast Open with as much of
    /// `data` as the cached MSS allows (less [`MAX_TCP_OPTION_SPACE`]) when a cookie (or none)
    /// allows, else with a cookie request and no data. The data sent is queued as sent right
    /// behind the SYN (retransmitted as ordinary data if the SYN-ACK does not cover it).
    /// Returns the bytes sent.
    pub(crate) fn send_syn_data(&mut self, env: &mut Env, now: Instant, data: &[u8]) -> usize {
        let (ok, cookie, cached_mss) = self.fastopen_cookie_check(env);
        let mut n = 0usize;
        if ok {
            // The cached MSS, else our own advertised one, bounds the SYN's data.
            let mut clamp = if cached_mss != 0 {
                u32::from(cached_mss)
            } else {
                self.mss.advmss
            };
            if self.opts.user_mss != 0 {
                clamp = clamp.min(self.opts.user_mss);
            }
            let mss = self
                .pmtu()
                .saturating_sub(self.ip_hdr_len() + 20)
                .min(clamp)
                .max(env.sysint(Sysctl::tcp_min_snd_mss) as u32);
            let space = mss.saturating_sub(MAX_TCP_OPTION_SPACE) as usize;
            n = space.min(data.len());
        }
        self.fastopen.syn_cookie = cookie;
        self.fastopen.syn_fastopen = cookie.is_some();
        self.send_syn_with(env, now, cookie.as_ref(), &data[..n]);
        if n > 0 {
            let mut skb = Skb::new(self.snd.write_seq, TcpFlags::ACK | TcpFlags::PSH);
            skb.data = SkbData::Open(bytes::BytesMut::from(&data[..n]));
            skb.end_seq = skb.seq.wrapping_add(n as u32);
            skb.truesize += n as u32;
            self.mem.wmem_queued += skb.truesize;
            self.snd.write_seq = skb.end_seq;
            self.snd.pushed_seq = skb.end_seq;
            skb.tx = self.rate_skb_sent(now);
            skb.pcount = 1;
            skb.mstamp = now;
            skb.first_tx = now;
            self.rtx.queue.push_back(skb);
            let idx = self.rtx.queue.len() - 1;
            self.event_new_data_sent(env, now, idx);
            self.fastopen.syn_data = true;
        }
        n
    }

    /// A SYN with data met a smaller path MTU (ICMP fragmentation needed / packet too big):
    /// the SYN and its data are taken as lost and a plain SYN goes at once, announcing the
    /// MSS the path allows (`tcp_simple_retransmit` marks the whole queue lost under Fast
    /// Open, `tcp_advertise_mss` follows the route); the data goes after the handshake.
    pub(crate) fn fastopen_syn_too_big(&mut self, env: &mut Env, now: Instant) {
        let adv = self.pmtu().saturating_sub(self.ip_hdr_len() + 20);
        self.mss.advmss = self.mss.advmss.min(adv);
        self.send_syn(env, now);
        self.stats.count_retrans(1);
        env.mib.inc(Mib::TCPSynRetrans);
        env.mib.inc(Mib::RetransSegs);
        if self.timer.retrans_stamp.is_none() {
            self.timer.retrans_stamp = Some(now);
        }
    }

    /// `tcp_fastopen_active_detect_blackhole`, at a retransmission timeout: a connection that
    /// used Fast Open whose SYN timed out twice, or that gave up sooner, pauses the client's
    /// Fast Open (when `tcp_fastopen_blackhole_timeout_sec` is set).
    pub(crate) fn fastopen_detect_blackhole(&mut self, env: &mut Env, now: Instant, expired: bool) {
        let f = &self.fastopen;
        let used = f.syn_fastopen || f.syn_data || f.syn_data_acked;
        let timeouts = self.timer.retransmits;
        if !(used && (timeouts == 2 || (timeouts < 2 && expired))) {
            return;
        }
        if env.sysint(Sysctl::tcp_fastopen_blackhole_timeout_sec) > 0 {
            env.tfo.disable_stamp = now;
            env.tfo.disable_times += 1;
            env.mib.inc(Mib::TCPFastOpenBlackhole);
        }
        env.mib.inc(Mib::TCPFastOpenActiveFail);
    }

    /// `tcp_fastopen_active_disable_ofo_check`, when the peer closes: a connection that
    /// found the pause over and received data shows the path works, so the pause count
    /// starts again.
    pub(crate) fn fastopen_path_works(&mut self, env: &mut Env) {
        if self.fastopen.syn_fastopen
            && self.fastopen.pause_checked
            && self.stats.data_segs_in() > 0
        {
            env.tfo.disable_times = 0;
        }
    }

    /// `tcp_rcv_fastopen_synack`, on the SYN-ACK of an active open whose SYN carried the
    /// option or data, once the connection is established: remember what the server said
    /// (its MSS, its cookie; or that the SYN with data seems lost, or that the other option
    /// kind should be tried), and resend the SYN's data the SYN-ACK did not acknowledge.
    /// Returns true when data was resent (the retransmission carries the ACK).
    pub(crate) fn rcv_fastopen_synack(
        &mut self,
        env: &mut Env,
        now: Instant,
        seg: &SegIn<'_>,
    ) -> bool {
        // The server's MSS as it wrote it (not as TCP_MAXSEG clamps it).
        let mss = seg.opts.mss.unwrap_or(0);
        let mut cookie = if self.fastopen.syn_fastopen {
            seg.opts.fastopen.filter(|c| !c.is_request())
        } else {
            None // an unsolicited cookie is ignored
        };
        let data_left = self.fastopen.syn_data && !self.rtx.queue.is_empty();
        let mut syn_drop = false;
        let mut try_exp = 0u8;
        if !self.fastopen.syn_fastopen {
            cookie = None;
        } else if self.stats.total_retrans() > 0 {
            // The SYN timed out and the SYN-ACK neither gives a cookie nor covers the data:
            // the server saw only the plain retransmitted SYN.
            syn_drop = cookie.is_none() && data_left;
        } else if cookie.is_none() && !self.fastopen.syn_data {
            // A cookie was asked for and none came: try the other option kind next time.
            try_exp = if self.fastopen.syn_cookie.is_some_and(|c| c.exp) {
                2
            } else {
                1
            };
        }
        let e = env.tfo.cache.entry(self.local.ip(), self.remote.ip());
        if mss != 0 {
            e.mss = mss;
        }
        if let Some(c) = cookie {
            e.cookie = c;
        } else if try_exp > e.try_exp && e.cookie.is_request() {
            e.try_exp = try_exp;
        }
        if syn_drop {
            e.syn_loss += 1;
            e.last_syn_loss = now;
        } else {
            e.syn_loss = 0;
        }
        if data_left {
            self.fastopen.client_fail = if self.stats.total_retrans() > 0 {
                client_fail::SYN_RETRANSMITTED
            } else {
                client_fail::DATA_NOT_ACKED
            };
            for i in 0..self.rtx.queue.len() {
                self.rtx.queue[i].in_host = 0;
                self.mark_lost(i);
            }
            self.non_congestion_loss_retransmit(env, now);
            env.mib.inc(Mib::TCPFastOpenActiveFail);
            return true;
        }
        self.fastopen.syn_data_acked = self.fastopen.syn_data;
        if self.fastopen.syn_data_acked {
            env.mib.inc(Mib::TCPFastOpenActive);
            // The SYN and its data were delivered as one.
            if self.rtx.delivered > 1 {
                self.rtx.delivered -= 1;
            }
        }
        // Data on the SYN-ACK is taken as a Fast Open child takes its SYN's, before the ACK.
        self.fastopen_add_data(env, now, seg);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(c: &Cookie) -> String {
        c.bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The cookies the running kernel (6.18) hands out for the packetdrill suite's key and
    /// addresses (the suite's `TFO_COOKIE` definitions, which its scripts pass on the kernel).
    #[test]
    fn cookies_are_the_kernels() {
        let k = Keys::parse_sysctl("a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4").unwrap();
        let v4 = k.primary.cookie(
            "192.0.2.1".parse().unwrap(),
            "192.168.0.1".parse().unwrap(),
            false,
        );
        assert_eq!(hex(&v4), "3021b9d889017eeb");
        let v6 = k.primary.cookie(
            "fd3d:fa7b:d17d::1".parse().unwrap(),
            "fd3d:0a0b:17d6::1".parse().unwrap(),
            false,
        );
        assert_eq!(hex(&v6), "c1d1e9742a47a9bc");
    }

    #[test]
    fn key_text_and_bytes_round_trip() {
        let t = "a0bf63f7-ed803d81-cd641d30-cebc4a90";
        let k = Keys::parse_sysctl(t).unwrap();
        assert_eq!(k.sysctl_text(), t);
        assert_eq!(
            k.primary.to_bytes()[..4],
            [0xf7, 0x63, 0xbf, 0xa0],
            "each word is a little-endian u32 of the key bytes"
        );
        let two = format!("{t},00000001-00000002-00000003-00000004");
        assert_eq!(Keys::parse_sysctl(&two).unwrap().sysctl_text(), two);
        assert!(Keys::parse_sysctl("1-2-3").is_none());
        assert!(Keys::parse_sysctl("g-2-3-4").is_none());
        assert_eq!(Keys::from_sockopt(&k.to_sockopt()), Some(k));
        assert!(Keys::from_sockopt(&[0; 15]).is_none());
    }

    #[test]
    fn option_lengths() {
        assert!(Cookie::new(&[1, 2, 3], false).is_none());
        assert!(Cookie::new(&[0; 18], false).is_none());
        assert!(Cookie::new(&[0; 5], false).is_none());
        let c = Cookie::new(&[1, 2, 3, 4], false).unwrap();
        assert_eq!(c.wire_len(), 8);
        assert_eq!(Cookie::request(false).wire_len(), 4);
        assert_eq!(Cookie::request(true).wire_len(), 4);
        let e = Cookie::new(&[0; 8], true).unwrap();
        assert_eq!(e.wire_len(), 12);
        assert_eq!(
            Cookie::parse(254, &[0xf9, 0x89, 1, 2, 3, 4])
                .unwrap()
                .bytes(),
            &[1, 2, 3, 4]
        );
        assert!(Cookie::parse(254, &[0xf9, 0x88, 1, 2, 3, 4]).is_none());
        assert!(Cookie::parse(34, &[1]).is_none());
    }

    #[test]
    fn decision() {
        let keys = Keys::parse_sysctl("a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4").unwrap();
        let (src, dst) = ("192.0.2.1".parse().unwrap(), "192.168.0.1".parse().unwrap());
        let good = keys.primary.cookie(src, dst, false);
        let syn = |cookie, data, sysctl| Syn {
            cookie,
            data,
            sysctl,
            no_cookie: false,
            queue_ok: true,
            keys: &keys,
            src,
            dst,
        };
        assert_eq!(
            decide(&syn(Some(good), true, 3)).verdict,
            Verdict::Child(None)
        );
        assert_eq!(
            decide(&syn(Some(Cookie::request(false)), true, 3)).verdict,
            Verdict::Ordinary(Some(good))
        );
        let bad = Cookie::new(&[9; 8], false).unwrap();
        let d = decide(&syn(Some(bad), true, 3));
        assert!(d.passive_fail);
        assert_eq!(d.verdict, Verdict::Ordinary(Some(good)));
        assert_eq!(decide(&syn(None, true, 3)).verdict, Verdict::Ordinary(None));
        assert_eq!(
            decide(&syn(None, true, 0x203)).verdict,
            Verdict::Child(None)
        );
        assert_eq!(
            decide(&syn(Some(good), true, 1)).verdict,
            Verdict::Ordinary(None)
        );
        // Data-less SYN with a valid cookie: a child too.
        assert_eq!(
            decide(&syn(Some(good), false, 3)).verdict,
            Verdict::Child(None)
        );
    }
}
