//! Socket options (`setsockopt`/`getsockopt`) with Linux names and semantics.

use crate::errno::Errno;

/// Socket options the engine implements (Linux level + name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum SockOpt {
    SoReuseaddr,
    SoReuseport,
    SoError,
    SoSndbuf,
    SoRcvbuf,
    SoKeepalive,
    SoLinger,
    SoRcvlowat,
    SoType,
    SoSndbufforce,
    SoRcvbufforce,
    SoTimestamping,
    /// `SO_TIMESTAMPING_NEW`: as `SO_TIMESTAMPING`, with 64-bit times (`SCM_TIMESTAMPING_NEW`).
    SoTimestampingNew,
    SoZerocopy,
    SoMark,
    /// `SO_BUSY_POLL`.
    SoBusyPoll,
    /// `SO_PREFER_BUSY_POLL`.
    SoPreferBusyPoll,
    /// `SO_BUSY_POLL_BUDGET`.
    SoBusyPollBudget,
    SoOobinline,
    IpFreebind,
    /// `SO_TIMESTAMP` (`SO_TIMESTAMP_OLD`): receive times as `SCM_TIMESTAMP` (a `timeval`).
    SoTimestamp,
    /// `SO_TIMESTAMPNS` (`SO_TIMESTAMPNS_OLD`): receive times as `SCM_TIMESTAMPNS` (a
    /// `timespec`).
    SoTimestampns,
    /// `SO_TIMESTAMP_NEW` (`SCM_TIMESTAMP_NEW`, a 64-bit `timeval`).
    SoTimestampNew,
    /// `SO_TIMESTAMPNS_NEW` (`SCM_TIMESTAMPNS_NEW`, a 64-bit `timespec`).
    SoTimestampnsNew,
    TcpNodelay,
    TcpMaxseg,
    TcpCork,
    TcpKeepidle,
    TcpKeepintvl,
    TcpKeepcnt,
    TcpSyncnt,
    TcpInfo,
    TcpQuickack,
    TcpCongestion,
    TcpUserTimeout,
    TcpNotsentLowat,
    TcpInq,
    TcpFastopen,
    TcpFastopenKey,
    TcpFastopenConnect,
    TcpFastopenNoCookie,
    TcpMd5sig,
    TcpMd5sigExt,
    IpTos,
    Ipv6Tclass,
    IpMtuDiscover,
    /// `IP_PKTINFO` (`IP_CMSG_PKTINFO`).
    IpPktinfo,
    /// `IPV6_RECVPKTINFO` (`rxopt.bits.rxinfo`).
    Ipv6Recvpktinfo,
    Ipv6MtuDiscover,
    Ipv6V6only,
}

/// `SOL_SOCKET`.
pub const SOL_SOCKET: i32 = 1;
/// `IPPROTO_IP`.
pub const SOL_IP: i32 = 0;
/// `SOL_TCP` / `IPPROTO_TCP`.
pub const SOL_TCP: i32 = 6;
/// `IPPROTO_IPV6`.
pub const SOL_IPV6: i32 = 41;

impl SockOpt {
    /// Map a Linux (level, optname) pair to an option; None = ENOPROTOOPT.
    pub fn from_linux(level: i32, name: i32) -> Option<SockOpt> {
        use SockOpt::*;
        Some(match (level, name) {
            (SOL_SOCKET, 2) => SoReuseaddr,
            (SOL_SOCKET, 15) => SoReuseport,
            (SOL_SOCKET, 3) => SoType,
            (SOL_SOCKET, 4) => SoError,
            (SOL_SOCKET, 7) => SoSndbuf,
            (SOL_SOCKET, 8) => SoRcvbuf,
            (SOL_SOCKET, 9) => SoKeepalive,
            (SOL_SOCKET, 13) => SoLinger,
            (SOL_SOCKET, 18) => SoRcvlowat,
            (SOL_SOCKET, 32) => SoSndbufforce,
            (SOL_SOCKET, 33) => SoRcvbufforce,
            (SOL_SOCKET, 37) => SoTimestamping,
            (SOL_SOCKET, 65) => SoTimestampingNew,
            (SOL_SOCKET, 60) => SoZerocopy,
            (SOL_SOCKET, 36) => SoMark,
            (SOL_SOCKET, 46) => SoBusyPoll,
            (SOL_SOCKET, 69) => SoPreferBusyPoll,
            (SOL_SOCKET, 70) => SoBusyPollBudget,
            (SOL_SOCKET, 10) => SoOobinline,
            (SOL_SOCKET, 29) => SoTimestamp,
            (SOL_SOCKET, 35) => SoTimestampns,
            (SOL_SOCKET, 63) => SoTimestampNew,
            (SOL_SOCKET, 64) => SoTimestampnsNew,
            (SOL_TCP, 1) => TcpNodelay,
            (SOL_TCP, 2) => TcpMaxseg,
            (SOL_TCP, 3) => TcpCork,
            (SOL_TCP, 4) => TcpKeepidle,
            (SOL_TCP, 5) => TcpKeepintvl,
            (SOL_TCP, 6) => TcpKeepcnt,
            (SOL_TCP, 7) => TcpSyncnt,
            (SOL_TCP, 11) => TcpInfo,
            (SOL_TCP, 12) => TcpQuickack,
            (SOL_TCP, 13) => TcpCongestion,
            (SOL_TCP, 18) => TcpUserTimeout,
            (SOL_TCP, 25) => TcpNotsentLowat,
            (SOL_TCP, 36) => TcpInq,
            (SOL_TCP, 23) => TcpFastopen,
            (SOL_TCP, 33) => TcpFastopenKey,
            (SOL_TCP, 30) => TcpFastopenConnect,
            (SOL_TCP, 34) => TcpFastopenNoCookie,
            (SOL_TCP, 14) => TcpMd5sig,
            (SOL_TCP, 32) => TcpMd5sigExt,
            (SOL_IP, 1) => IpTos,
            (SOL_IP, 10) => IpMtuDiscover,
            (SOL_IP, 8) => IpPktinfo,
            (SOL_IPV6, 49) => Ipv6Recvpktinfo,
            (SOL_IP, 15) | (SOL_IPV6, 78) => IpFreebind,
            (SOL_IPV6, 23) => Ipv6MtuDiscover,
            (SOL_IPV6, 26) => Ipv6V6only,
            (SOL_IPV6, 67) => Ipv6Tclass,
            _ => return None,
        })
    }

    /// Linux name, e.g. `"TCP_NODELAY"`.
    pub fn name(self) -> &'static str {
        use SockOpt::*;
        match self {
            SoReuseaddr => "SO_REUSEADDR",
            SoReuseport => "SO_REUSEPORT",
            SoError => "SO_ERROR",
            SoSndbuf => "SO_SNDBUF",
            SoRcvbuf => "SO_RCVBUF",
            SoKeepalive => "SO_KEEPALIVE",
            SoLinger => "SO_LINGER",
            SoRcvlowat => "SO_RCVLOWAT",
            SoType => "SO_TYPE",
            SoSndbufforce => "SO_SNDBUFFORCE",
            SoRcvbufforce => "SO_RCVBUFFORCE",
            SoTimestamping => "SO_TIMESTAMPING",
            SoTimestampingNew => "SO_TIMESTAMPING_NEW",
            SoZerocopy => "SO_ZEROCOPY",
            SoMark => "SO_MARK",
            SoBusyPoll => "SO_BUSY_POLL",
            SoPreferBusyPoll => "SO_PREFER_BUSY_POLL",
            SoBusyPollBudget => "SO_BUSY_POLL_BUDGET",
            SoOobinline => "SO_OOBINLINE",
            IpFreebind => "IP_FREEBIND",
            SoTimestamp => "SO_TIMESTAMP",
            SoTimestampns => "SO_TIMESTAMPNS",
            SoTimestampNew => "SO_TIMESTAMP_NEW",
            SoTimestampnsNew => "SO_TIMESTAMPNS_NEW",
            TcpNodelay => "TCP_NODELAY",
            TcpMaxseg => "TCP_MAXSEG",
            TcpCork => "TCP_CORK",
            TcpKeepidle => "TCP_KEEPIDLE",
            TcpKeepintvl => "TCP_KEEPINTVL",
            TcpKeepcnt => "TCP_KEEPCNT",
            TcpSyncnt => "TCP_SYNCNT",
            TcpInfo => "TCP_INFO",
            TcpQuickack => "TCP_QUICKACK",
            TcpCongestion => "TCP_CONGESTION",
            TcpUserTimeout => "TCP_USER_TIMEOUT",
            TcpNotsentLowat => "TCP_NOTSENT_LOWAT",
            TcpInq => "TCP_INQ",
            TcpFastopen => "TCP_FASTOPEN",
            TcpFastopenKey => "TCP_FASTOPEN_KEY",
            TcpFastopenConnect => "TCP_FASTOPEN_CONNECT",
            TcpFastopenNoCookie => "TCP_FASTOPEN_NO_COOKIE",
            TcpMd5sig => "TCP_MD5SIG",
            TcpMd5sigExt => "TCP_MD5SIG_EXT",
            IpTos => "IP_TOS",
            Ipv6Tclass => "IPV6_TCLASS",
            IpMtuDiscover => "IP_MTU_DISCOVER",
            IpPktinfo => "IP_PKTINFO",
            Ipv6Recvpktinfo => "IPV6_RECVPKTINFO",
            Ipv6MtuDiscover => "IPV6_MTU_DISCOVER",
            Ipv6V6only => "IPV6_V6ONLY",
        }
    }
}

impl SockOpt {
    /// An `IPPROTO_IPV6` option: an AF_INET socket has none (setsockopt ENOPROTOOPT,
    /// getsockopt EOPNOTSUPP, from `ip_setsockopt`/`ip_getsockopt`; measured on 6.18).
    pub fn is_ipv6_level(self) -> bool {
        matches!(
            self,
            SockOpt::Ipv6Tclass
                | SockOpt::Ipv6MtuDiscover
                | SockOpt::Ipv6V6only
                | SockOpt::Ipv6Recvpktinfo
        )
    }
}

/// An option value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OptVal {
    /// An `int` option.
    Int(i64),
    /// `struct linger`.
    Linger {
        /// l_onoff.
        onoff: bool,
        /// l_linger, seconds.
        secs: i32,
    },
    /// A string option (TCP_CONGESTION).
    Str(String),
    /// Raw bytes (TCP_FASTOPEN_KEY; TCP_MD5SIG's `struct tcp_md5sig`, see [`crate::Md5Sig`]).
    Bytes(Vec<u8>),
}

impl OptVal {
    /// The integer value, or EINVAL.
    pub fn int(&self) -> Result<i64, Errno> {
        match self {
            OptVal::Int(v) => Ok(*v),
            OptVal::Linger { onoff, .. } => Ok(i64::from(*onoff)),
            OptVal::Str(_) | OptVal::Bytes(_) => Err(Errno::EINVAL),
        }
    }
}
