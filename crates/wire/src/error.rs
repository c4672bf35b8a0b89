//! The error type of every fallible parse or emit in this crate.

/// Why a byte string could not be parsed, or a `Repr` could not be emitted.
///
/// Every malformed input maps to one of these; no input makes a parser panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The buffer ends before a header (or a length a header announces) does.
    #[error("truncated packet")]
    Truncated,
    /// The IP version nibble is not the one expected (4 or 6).
    #[error("bad IP version")]
    BadVersion,
    /// A header-length field is below the minimum or beyond the buffer
    /// (IPv4 IHL < 5, TCP data offset < 5, an IPv6 extension header running past the payload).
    #[error("bad header length")]
    BadHeaderLen,
    /// The IPv4 total length is smaller than the header or larger than the buffer, or the IPv6
    /// payload length is larger than the buffer.
    #[error("bad total length")]
    BadTotalLen,
    /// A TCP option has a length byte below 2 or running past the option space
    /// (RFC 9293 §3.1), or a `Repr`'s options do not fit in 40 bytes.
    #[error("bad TCP option")]
    BadOption,
    /// A checksum does not verify (RFC 1071).
    #[error("bad checksum")]
    BadChecksum,
    /// A well-formed packet of a kind this crate does not represent (for example a fragment
    /// where a whole datagram is needed, or an IPv6 jumbogram).
    #[error("unsupported packet")]
    Unsupported,
    /// An IPv6 extension header is not allowed where it is (hop-by-hop not first, RFC 8200 §4.1).
    #[error("bad IPv6 extension header")]
    BadExtensionHeader,
    /// A field of a `Repr` holds a value that cannot be encoded (a payload too long for the
    /// 16-bit length field, a flow label above 20 bits, a virtio header length other than 10 or 12).
    #[error("value out of range for its field")]
    ValueOutOfRange,
    /// The caller's buffer is too small for what `emit` has to write.
    #[error("buffer too small")]
    BufferTooSmall,
    /// More than four SACK blocks (RFC 2018 §3: at most 4 fit in 40 bytes of options).
    #[error("too many SACK blocks")]
    TooManySackBlocks,
}

/// `Result` with [`WireError`].
pub type Result<T> = core::result::Result<T, WireError>;
