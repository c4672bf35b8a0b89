//! Options of the kernel's own sockets that std, tokio and socket2 do not set, for programs
//! that relay between Shallow and the kernel (a TUN proxy's upstream sockets).

use std::io;
use std::os::fd::AsFd;

/// `SO_RCVLOWAT`: the kernel reports the socket readable only once `bytes` are queued (or
/// at end of stream or an error). Linux also raises the receive buffer to fit it
/// (`tcp_set_rcvlowat`).
pub fn set_rcvlowat(sock: &impl AsFd, bytes: i32) -> io::Result<()> {
    crate::sys::set_rcvlowat(sock.as_fd(), bytes.max(1))
}
