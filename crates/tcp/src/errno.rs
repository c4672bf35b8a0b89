//! Linux errno values returned by socket calls, and [`SocketId`].

/// A Linux errno (x86-64 / generic numbering). `Errno as i32` is the number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(i32)]
#[allow(missing_docs)]
pub enum Errno {
    #[error("EPERM: operation not permitted")]
    EPERM = 1,
    #[error("ENOENT: no such file or directory")]
    ENOENT = 2,
    #[error("EINTR: interrupted system call")]
    EINTR = 4,
    #[error("EBADF: bad file descriptor")]
    EBADF = 9,
    #[error("EAGAIN: resource temporarily unavailable")]
    EAGAIN = 11,
    #[error("ENOMEM: cannot allocate memory")]
    ENOMEM = 12,
    #[error("EACCES: permission denied")]
    EACCES = 13,
    #[error("EFAULT: bad address")]
    EFAULT = 14,
    #[error("EINVAL: invalid argument")]
    EINVAL = 22,
    #[error("EMFILE: too many open files")]
    EMFILE = 24,
    #[error("EPIPE: broken pipe")]
    EPIPE = 32,
    #[error("ENOTSOCK: socket operation on non-socket")]
    ENOTSOCK = 88,
    #[error("EDESTADDRREQ: destination address required")]
    EDESTADDRREQ = 89,
    #[error("EMSGSIZE: message too long")]
    EMSGSIZE = 90,
    #[error("ENOPROTOOPT: protocol not available")]
    ENOPROTOOPT = 92,
    #[error("EPROTONOSUPPORT: protocol not supported")]
    EPROTONOSUPPORT = 93,
    #[error("EOPNOTSUPP: operation not supported")]
    EOPNOTSUPP = 95,
    #[error("EAFNOSUPPORT: address family not supported by protocol")]
    EAFNOSUPPORT = 97,
    #[error("EADDRINUSE: address already in use")]
    EADDRINUSE = 98,
    #[error("EADDRNOTAVAIL: cannot assign requested address")]
    EADDRNOTAVAIL = 99,
    #[error("ENETUNREACH: network is unreachable")]
    ENETUNREACH = 101,
    #[error("ECONNABORTED: software caused connection abort")]
    ECONNABORTED = 103,
    #[error("ECONNRESET: connection reset by peer")]
    ECONNRESET = 104,
    #[error("ENOBUFS: no buffer space available")]
    ENOBUFS = 105,
    #[error("EISCONN: transport endpoint is already connected")]
    EISCONN = 106,
    #[error("ENOTCONN: transport endpoint is not connected")]
    ENOTCONN = 107,
    #[error("ETIMEDOUT: connection timed out")]
    ETIMEDOUT = 110,
    #[error("ECONNREFUSED: connection refused")]
    ECONNREFUSED = 111,
    #[error("EHOSTUNREACH: no route to host")]
    EHOSTUNREACH = 113,
    #[error("EALREADY: operation already in progress")]
    EALREADY = 114,
    #[error("EINPROGRESS: operation now in progress")]
    EINPROGRESS = 115,
}

impl Errno {
    /// The Linux errno number.
    pub fn code(self) -> i32 {
        self as i32
    }
    /// The symbolic name, e.g. `"EAGAIN"`.
    pub fn name(self) -> &'static str {
        use Errno::*;
        match self {
            EPERM => "EPERM",
            ENOENT => "ENOENT",
            EINTR => "EINTR",
            EBADF => "EBADF",
            EAGAIN => "EAGAIN",
            ENOMEM => "ENOMEM",
            EACCES => "EACCES",
            EFAULT => "EFAULT",
            EINVAL => "EINVAL",
            EMFILE => "EMFILE",
            EPIPE => "EPIPE",
            ENOTSOCK => "ENOTSOCK",
            EDESTADDRREQ => "EDESTADDRREQ",
            EMSGSIZE => "EMSGSIZE",
            ENOPROTOOPT => "ENOPROTOOPT",
            EPROTONOSUPPORT => "EPROTONOSUPPORT",
            EOPNOTSUPP => "EOPNOTSUPP",
            EAFNOSUPPORT => "EAFNOSUPPORT",
            EADDRINUSE => "EADDRINUSE",
            EADDRNOTAVAIL => "EADDRNOTAVAIL",
            ENETUNREACH => "ENETUNREACH",
            ECONNABORTED => "ECONNABORTED",
            ECONNRESET => "ECONNRESET",
            ENOBUFS => "ENOBUFS",
            EISCONN => "EISCONN",
            ENOTCONN => "ENOTCONN",
            ETIMEDOUT => "ETIMEDOUT",
            ECONNREFUSED => "ECONNREFUSED",
            EHOSTUNREACH => "EHOSTUNREACH",
            EALREADY => "EALREADY",
            EINPROGRESS => "EINPROGRESS",
        }
    }
}

/// A socket handle, like a file descriptor: an index into the stack's socket table.
/// Indices are reused (lowest free first) after a socket is fully released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SocketId(pub u32);

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn linux_numbers() {
        assert_eq!(Errno::EAGAIN.code(), 11);
        assert_eq!(Errno::EINPROGRESS.code(), 115);
        assert_eq!(Errno::ECONNREFUSED.code(), 111);
        assert_eq!(Errno::ECONNRESET.code(), 104);
        assert_eq!(Errno::EPIPE.code(), 32);
        assert_eq!(Errno::ENOTCONN.code(), 107);
        assert_eq!(Errno::EISCONN.code(), 106);
        assert_eq!(Errno::EALREADY.code(), 114);
        assert_eq!(Errno::EADDRINUSE.code(), 98);
        assert_eq!(Errno::ETIMEDOUT.code(), 110);
        assert_eq!(Errno::EOPNOTSUPP.code(), 95);
        assert_eq!(Errno::ENOPROTOOPT.code(), 92);
        assert_eq!(Errno::EMSGSIZE.code(), 90);
        assert_eq!(Errno::EHOSTUNREACH.code(), 113);
        assert_eq!(Errno::EAGAIN.name(), "EAGAIN");
    }
}
