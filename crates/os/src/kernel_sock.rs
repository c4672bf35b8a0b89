//! Options of the kernel's own sockets that std, tokio and socket2 do not set, for programs
//! that relay between Shallow and the kernel (a TUN proxy's upstream sockets), or that measure
//! the kernel beside Shallow (`SO_TIMESTAMPING` and its error queue, for `shallow bench`).

use std::io;
use std::os::fd::AsFd;

/// `SO_RCVLOWAT`: the kernel reports the socket readable only once `bytes` are queued (or
/// at end of stream or an error). Linux also raises the receive buffer to fit it
/// (`tcp_set_rcvlowat`).
pub fn set_rcvlowat(sock: &impl AsFd, bytes: i32) -> io::Result<()> {
    crate::sys::set_rcvlowat(sock.as_fd(), bytes.max(1))
}

/// `SO_TIMESTAMPING` on a kernel socket: `flags` are `SOF_TIMESTAMPING_*`
/// ([`shallow_tcp::tstamp::sof`], the same numbers), as [`crate::TcpStream::set_timestamping`]
/// asks of Shallow's engine. Errors as the kernel gives them (`EINVAL` for `OPT_ID` on a TCP
/// socket that is not connected, `sock_set_timestamping`).
pub fn set_timestamping(sock: &impl AsFd, flags: u32) -> io::Result<()> {
    crate::sys::set_timestamping(sock.as_fd(), flags)
}

/// Every transmit timestamp waiting in a kernel socket's error queue now, oldest first
/// (`recvmsg(MSG_ERRQUEUE)` until `EAGAIN`; never waits): the kind from `ee_info`, the key
/// from `ee_data`, the time from `SCM_TIMESTAMPING`'s software stamp. That time is the
/// kernel's `CLOCK_REALTIME` as an [`Instant`](shallow_tcp::Instant) since the Unix epoch, a
/// clock other than Shallow's ([`crate::Host::now`]): compare a kernel socket's stamps with
/// each other only. Entries of another origin (ICMP errors with `IP_RECVERR`) are skipped.
pub fn recv_tx_timestamps(sock: &impl AsFd) -> io::Result<Vec<shallow_tcp::TxTimestamp>> {
    use shallow_tcp::TstampKind;
    let mut raw = Vec::new();
    crate::sys::recv_errqueue_stamps(sock.as_fd(), &mut raw)?;
    Ok(raw
        .into_iter()
        .filter_map(|e| {
            let kind = match e.info {
                0 => TstampKind::Snd,
                1 => TstampKind::Sched,
                2 => TstampKind::Ack,
                _ => return None,
            };
            Some(shallow_tcp::TxTimestamp {
                kind,
                key: e.data,
                time: shallow_tcp::Instant::from_nanos(e.nanos),
                stats: e.stats,
            })
        })
        .collect())
}
