//! The syntax tree of a packetdrill script.
//!
//! The tree records what the script *says*, with no interpretation: symbols stay symbols,
//! sequence numbers stay script-relative, times stay in the form written. The runner maps
//! them onto a live stack (see `spec/packetdrill.md` §3.1 for the semantics).

/// Nanoseconds, the unit of every time in the tree (scripts write seconds with fractions).
pub type Nanos = u64;

/// A parsed script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    /// Name of the file it was read from (as given to the parser), used in messages.
    pub file: String,
    /// The option prologue: `--name=value` / `--name` lines, in order. `-D NAME=value`
    /// lines are stored as `("define", Some("NAME=value"))`, the same as `--define=NAME=value`.
    pub options: Vec<(String, Option<String>)>,
    /// A backtick command written without a time before the first event (normally the
    /// suite's `defaults.sh`); packetdrill runs it before the script's clock starts.
    pub init_command: Option<Command>,
    /// The timed events, in script order.
    pub events: Vec<Event>,
    /// A backtick command written without a time after the last event (normally
    /// `/tmp/sysctl_restore_${PPID}.sh`); packetdrill runs it when the script ends.
    pub cleanup_command: Option<Command>,
}

impl Script {
    /// The value of option `name` (the last one written wins), `Some(None)` for a bare flag.
    pub fn option(&self, name: &str) -> Option<Option<&str>> {
        self.options
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_deref())
    }

    /// Symbols defined with `-D NAME=value` / `--define=NAME=value`, in order.
    pub fn defines(&self) -> Vec<(&str, &str)> {
        self.options
            .iter()
            .filter(|(n, _)| n == "define")
            .filter_map(|(_, v)| v.as_deref())
            .map(|v| v.split_once('=').unwrap_or((v, "")))
            .collect()
    }
}

/// A backtick shell command with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// 1-based line of the opening backtick.
    pub line: u32,
    /// 1-based column of the opening backtick.
    pub col: u32,
    /// The text between the backticks, verbatim.
    pub text: String,
}

/// One timed line of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// 1-based line where the event's time starts.
    pub line: u32,
    /// 1-based column where the event's time starts.
    pub col: u32,
    /// When the event happens (or, for outbound packets, when it is expected).
    pub time: EventTime,
    /// For a blocking system call written `a...b`: the time `b` at which the call must
    /// return. Like packetdrill, `b` has the same base as `a`: if `a` is relative (`+a`),
    /// `b` is relative to the previous event's time too (`+.1...0.200` after an event at
    /// t=0 starts at 0.1 s and returns at 0.2 s); if `a` is absolute, so is `b`.
    pub end_time: Option<Nanos>,
    /// What happens.
    pub kind: EventKind,
}

/// The time column of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventTime {
    /// `N`: seconds since the script started.
    Absolute(Nanos),
    /// `+N`: seconds after the previous event.
    Relative(Nanos),
    /// `lo~hi`: the event may happen anywhere in the window; each end is relative
    /// (written with `+`) or absolute on its own.
    Range {
        /// Earliest time.
        lo: Nanos,
        /// `lo` was written with `+`.
        lo_relative: bool,
        /// Latest time.
        hi: Nanos,
        /// `hi` was written with `+`.
        hi_relative: bool,
    },
    /// `*`: no time check (used for outbound packets).
    Any,
}

/// What an event does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// `<` inject or `>` expect a packet.
    Packet(PacketSpec),
    /// A system call with its expected result.
    Syscall(SyscallSpec),
    /// A backtick shell command (text verbatim); see [`crate::env`].
    Command(String),
    /// A `%{ ... }%` python snippet (text verbatim); see [`crate::python`].
    Code(String),
}

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// `<`: the runner injects the packet toward the stack under test.
    Inbound,
    /// `>`: the stack under test must send this packet.
    Outbound,
}

/// ECN codepoint of the IP header (RFC 3168 §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    /// `noecn`: Not-ECT (00).
    NotEct,
    /// `ect1`: ECT(1) (01).
    Ect1,
    /// `ect0`: ECT(0) (10).
    Ect0,
    /// `ce`: Congestion Experienced (11).
    Ce,
    /// `ect01`: either ECT(0) or ECT(1) is accepted (outbound check only).
    Ect01,
}

/// The optional `[...]` IP header description before a packet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpInfo {
    /// ECN codepoint, checked only if written.
    pub ecn: Option<Ecn>,
    /// Whole TOS / traffic class byte (`tos 0x..`), checked only if written.
    pub tos: Option<u8>,
    /// TTL / hop limit (`ttl N`), checked only if written.
    pub ttl: Option<u8>,
    /// IPv6 flow label (`flowlabel N`), checked only if written.
    pub flowlabel: Option<u32>,
}

/// One packet line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketSpec {
    /// `<` or `>`.
    pub direction: Direction,
    /// The optional IP header description.
    pub ip: IpInfo,
    /// The transport part.
    pub body: PacketBody,
}

/// The transport part of a packet line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PacketBody {
    /// A TCP segment.
    Tcp(TcpSpec),
    /// `udp (LEN)`: a UDP datagram with LEN payload bytes.
    Udp {
        /// Payload length.
        len: u32,
    },
    /// An ICMP / ICMPv6 message.
    Icmp(IcmpSpec),
}

/// TCP header flags as written: the wire model's control bits (script letters `F S R P . U E
/// W A`, AE being the former NS bit, RFC 3540 / AccECN).
pub use shallow_wire::TcpFlags;

/// A TCP segment line: `flags start:end(len) [ack N] [win N] [urg N] [<options>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpSpec {
    /// Flags.
    pub flags: TcpFlags,
    /// First sequence number (script-relative: ISN is 0).
    pub seq_start: u32,
    /// Sequence number after the payload.
    pub seq_end: u32,
    /// Payload length (in parentheses).
    pub len: u32,
    /// Acknowledgment number (`ack N`), script-relative.
    pub ack: Option<u32>,
    /// Window field (`win N`), checked for outbound packets only if written.
    pub win: Option<u32>,
    /// Urgent pointer (`urg N`).
    pub urg: Option<u32>,
    /// TCP options.
    pub options: TcpOptions,
}

/// The option list of a TCP line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOptions {
    /// Options written (kind by kind, in order); empty if no `<...>` list was written,
    /// meaning "no options".
    List(Vec<TcpOption>),
    /// `<...>`: do not check options.
    Unchecked,
}

/// One TCP option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TcpOption {
    /// `nop` (kind 1).
    Nop,
    /// `eol` (kind 0).
    Eol,
    /// `mss N` (kind 2).
    Mss(u16),
    /// `wscale N` (kind 3).
    WindowScale(u8),
    /// `sackOK` (kind 4).
    SackPermitted,
    /// `sack L:R ...` (kind 5), blocks in script-relative sequence space.
    Sack(Vec<(u32, u32)>),
    /// `TS val N ecr N` (kind 8).
    Timestamp {
        /// TSval.
        val: u32,
        /// TSecr.
        ecr: u32,
    },
    /// `FO [cookie]` (kind 34, RFC 7413). The cookie is kept as written: hex digits, or a
    /// symbol defined with `-D` (e.g. `TFO_COOKIE`). See [`cookie_bytes`].
    FastOpen(Option<String>),
    /// `FOEXP [cookie]` (experimental kind 254 with magic 0xF989).
    FastOpenExp(Option<String>),
    /// `md5 HEX` (kind 19, RFC 2385): the digest as written.
    Md5(String),
    /// `N [HEX]`: an option of numeric kind N with optional payload bytes.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Payload bytes (after kind and length).
        data: Vec<u8>,
    },
}

/// Decodes a hex cookie (`abcd1234`) into bytes; `None` if it is not an even number of hex
/// digits (e.g. a `-D` symbol, to be resolved by the runner first).
pub fn cookie_bytes(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// An ICMP line: `icmp TYPE [CODE] [mtu N] [[start:end(len)]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IcmpSpec {
    /// Type name as written (`unreachable`, `packet_too_big`, `time_exceeded`, ...).
    pub icmp_type: String,
    /// Code name as written (`frag_needed`, `host_unreachable`, a `-D` symbol ...).
    pub code: Option<String>,
    /// Next-hop MTU for "fragmentation needed" / "packet too big".
    pub mtu: Option<u32>,
    /// The TCP sequence range of the echoed (quoted) segment: (start, end, len).
    pub echoed: Option<(u32, u32, u32)>,
}

/// A system call line: `name(args) = result [ERRNO] [(comment)]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallSpec {
    /// System call name (`socket`, `write`, `setsockopt` ...).
    pub name: String,
    /// Arguments.
    pub args: Vec<Expr>,
    /// Expected return value.
    pub result: Expr,
    /// Expected errno symbol (for a `-1` result).
    pub errno: Option<String>,
    /// The parenthesised comment after the result, verbatim (not checked).
    pub note: Option<String>,
}

/// An argument or result expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Integer (decimal, hex, or negative). Hex values up to `u64::MAX` are stored
    /// bit-for-bit (so `0xffffffffffffffff` is -1).
    Int(i64),
    /// `...`: runner-provided value (zero-filled buffer, implicit address ...).
    Ellipsis,
    /// `NULL`: a null pointer.
    Null,
    /// A symbol (`SOCK_STREAM`, `EPOLLIN` ...); see [`crate::symbols::lookup`].
    Symbol(String),
    /// A string literal with escapes decoded.
    Str(Vec<u8>),
    /// `[a, b]`: pointer to a value or an array.
    List(Vec<Expr>),
    /// `{field=value, ...}` or positional `{..., 100}` (iovec).
    Struct(Vec<StructField>),
    /// `a | b | c`: flags ORed together.
    BitOr(Vec<Expr>),
    /// `name(args)`: e.g. `htons(8080)`, `inet_addr("192.0.2.1")`.
    Call {
        /// Function name.
        name: String,
        /// Arguments.
        args: Vec<Expr>,
    },
}

/// One member of a struct literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructField {
    /// Field name; `None` for a positional member (`{..., 1000}`).
    pub name: Option<String>,
    /// Parenthesised qualifier after the name: `msg_iov(1)=...`, `msg_name(...)=...`.
    pub qualifier: Option<Expr>,
    /// The value.
    pub value: Expr,
}

impl Expr {
    /// The integer value of the expression: integers, known symbols (Linux x86-64
    /// values, [`crate::symbols::lookup`]) and `|` combinations of those.
    pub fn int_value(&self) -> Option<i64> {
        match self {
            Expr::Int(v) => Some(*v),
            Expr::Symbol(s) => crate::symbols::lookup(s),
            Expr::BitOr(parts) => parts
                .iter()
                .try_fold(0i64, |acc, p| p.int_value().map(|v| acc | v)),
            _ => None,
        }
    }

    /// The named field of a struct literal, if this is one.
    pub fn field(&self, name: &str) -> Option<&StructField> {
        match self {
            Expr::Struct(fields) => fields.iter().find(|f| f.name.as_deref() == Some(name)),
            _ => None,
        }
    }
}
