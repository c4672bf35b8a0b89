//! `shallow nc --ss`: an `ss -tmi`-like text view of a Shallow stack's sockets — one header
//! line, then per socket its state, queues and addresses, and an indented line with
//! `skmem:(...)` (`SO_MEMINFO`) and the `tcp_info` fields in the order and units iproute2's
//! `ss` prints them (times in ms with three decimals, rates in bits per second). The engine
//! gives the figures (`Stack::sockets`, `meminfo`, `tcp_info`); this is only their spelling.

use std::fmt::Write;

use shallow_tcp::{Instant, MemInfo, Stack, TcpInfo, TcpState};

/// `ss -tmi`: every socket (listeners, connections, TIME_WAIT), with `Recv-Q`/`Send-Q` as `ss`
/// shows them (for a listener: accept queue length and backlog; otherwise bytes readable and
/// bytes not yet acknowledged), then `skmem` and the `tcp_info` line.
pub fn ss(stack: &Stack, now: Instant) -> String {
    let mut out = String::from(
        "State      Recv-Q Send-Q Local Address:Port                  Peer Address:Port\n",
    );
    for row in stack.sockets() {
        let (recvq, sendq) = row.listen_queue.unwrap_or((row.rx_queue, row.tx_queue));
        let _ = writeln!(
            out,
            "{:<10} {:<6} {:<6} {:<35} {}",
            state_name(row.state),
            recvq,
            sendq,
            row.local,
            row.remote
        );
        let mem = stack.meminfo(row.id).map(|m| skmem(&m)).unwrap_or_default();
        let info = match stack.tcp_info(now, row.id) {
            Ok(i) if row.state != TcpState::Listen => info_line(row.cc, &i),
            _ => row.cc.to_string(),
        };
        let _ = writeln!(out, "\t {mem} {info}");
    }
    out
}

/// `ss`'s name of a TCP state (`sstate_name` in iproute2).
fn state_name(s: TcpState) -> &'static str {
    match s {
        TcpState::Established => "ESTAB",
        TcpState::SynSent => "SYN-SENT",
        TcpState::SynRecv => "SYN-RECV",
        TcpState::FinWait1 => "FIN-WAIT-1",
        TcpState::FinWait2 => "FIN-WAIT-2",
        TcpState::TimeWait => "TIME-WAIT",
        TcpState::Close => "UNCONN",
        TcpState::CloseWait => "CLOSE-WAIT",
        TcpState::LastAck => "LAST-ACK",
        TcpState::Listen => "LISTEN",
        TcpState::Closing => "CLOSING",
    }
}

/// `skmem:(r..,rb..,t..,tb..,f..,w..,o..,bl..,d..)` as `ss -m` prints `SO_MEMINFO`.
fn skmem(m: &MemInfo) -> String {
    format!(
        "skmem:(r{},rb{},t{},tb{},f{},w{},o{},bl{},d{})",
        m.rmem_alloc,
        m.rcvbuf,
        m.wmem_alloc,
        m.sndbuf,
        m.fwd_alloc,
        m.wmem_queued,
        m.optmem,
        m.backlog,
        m.drops
    )
}

/// Microseconds as `ss` prints milliseconds (`rto:204`, `rtt:0.123/0.061`).
fn ms(us: u32) -> String {
    let v = f64::from(us) / 1000.0;
    if v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

/// A rate in bits per second as `ss` prints it (`12.3Mbps`).
fn bps(bits: f64) -> String {
    if bits >= 1e9 {
        format!("{:.1}Gbps", bits / 1e9)
    } else if bits >= 1e6 {
        format!("{:.1}Mbps", bits / 1e6)
    } else if bits >= 1e3 {
        format!("{:.1}Kbps", bits / 1e3)
    } else {
        format!("{bits:.0}bps")
    }
}

/// The `-i` part of one socket (`tcp_show_info` in iproute2's `ss`).
fn info_line(cc: &str, i: &TcpInfo) -> String {
    let mut s = String::new();
    let _ = write!(s, "{cc}");
    if i.options & 0x4 != 0 {
        let _ = write!(s, " wscale:{},{}", i.snd_wscale, i.rcv_wscale);
    }
    let _ = write!(s, " rto:{}", ms(i.rto));
    if i.backoff > 0 {
        let _ = write!(s, " backoff:{}", i.backoff);
    }
    if i.rtt > 0 {
        let _ = write!(s, " rtt:{}/{}", ms(i.rtt), ms(i.rttvar));
    }
    if i.ato > 0 {
        let _ = write!(s, " ato:{}", ms(i.ato));
    }
    let _ = write!(
        s,
        " mss:{} pmtu:{} rcvmss:{} advmss:{} cwnd:{}",
        i.snd_mss, i.pmtu, i.rcv_mss, i.advmss, i.snd_cwnd
    );
    if i.snd_ssthresh < 0xffff {
        let _ = write!(s, " ssthresh:{}", i.snd_ssthresh);
    }
    for (name, v) in [
        ("bytes_sent", i.bytes_sent),
        ("bytes_retrans", i.bytes_retrans),
        ("bytes_acked", i.bytes_acked),
        ("bytes_received", i.bytes_received),
    ] {
        if v > 0 {
            let _ = write!(s, " {name}:{v}");
        }
    }
    let _ = write!(s, " segs_out:{} segs_in:{}", i.segs_out, i.segs_in);
    if i.data_segs_out > 0 {
        let _ = write!(s, " data_segs_out:{}", i.data_segs_out);
    }
    if i.data_segs_in > 0 {
        let _ = write!(s, " data_segs_in:{}", i.data_segs_in);
    }
    if i.rtt > 0 {
        // ss: send = cwnd * mss * 8 / srtt.
        let send = f64::from(i.snd_cwnd) * f64::from(i.snd_mss) * 8e6 / f64::from(i.rtt);
        let _ = write!(s, " send {}", bps(send));
    }
    let _ = write!(
        s,
        " lastsnd:{} lastrcv:{} lastack:{}",
        i.last_data_sent, i.last_data_recv, i.last_ack_recv
    );
    if i.pacing_rate > 0 {
        let _ = write!(s, " pacing_rate {}", bps(i.pacing_rate as f64 * 8.0));
    }
    if i.delivery_rate > 0 {
        let _ = write!(s, " delivery_rate {}", bps(i.delivery_rate as f64 * 8.0));
        if i.delivery_rate_app_limited {
            let _ = write!(s, " app_limited");
        }
    }
    let _ = write!(s, " delivered:{}", i.delivered);
    if i.busy_time > 0 {
        let _ = write!(s, " busy:{}ms", i.busy_time / 1000);
    }
    if i.rwnd_limited > 0 {
        let _ = write!(s, " rwnd_limited:{}ms", i.rwnd_limited / 1000);
    }
    if i.sndbuf_limited > 0 {
        let _ = write!(s, " sndbuf_limited:{}ms", i.sndbuf_limited / 1000);
    }
    if i.unacked > 0 {
        let _ = write!(s, " unacked:{}", i.unacked);
    }
    if i.retrans > 0 || i.total_retrans > 0 {
        let _ = write!(s, " retrans:{}/{}", i.retrans, i.total_retrans);
    }
    if i.lost > 0 {
        let _ = write!(s, " lost:{}", i.lost);
    }
    if i.sacked > 0 {
        let _ = write!(s, " sacked:{}", i.sacked);
    }
    if i.reordering != 3 {
        let _ = write!(s, " reordering:{}", i.reordering);
    }
    if i.reord_seen > 0 {
        let _ = write!(s, " reord_seen:{}", i.reord_seen);
    }
    if i.rcv_rtt > 0 {
        let _ = write!(s, " rcv_rtt:{}", ms(i.rcv_rtt));
    }
    let _ = write!(
        s,
        " rcv_space:{} rcv_ssthresh:{}",
        i.rcv_space, i.rcv_ssthresh
    );
    if i.notsent_bytes > 0 {
        let _ = write!(s, " notsent:{}", i.notsent_bytes);
    }
    if i.min_rtt > 0 && i.min_rtt != u32::MAX {
        let _ = write!(s, " minrtt:{}", ms(i.min_rtt));
    }
    let _ = write!(s, " snd_wnd:{} rcv_wnd:{}", i.snd_wnd, i.rcv_wnd);
    s
}

#[cfg(test)]
mod tests {
    use super::ss;
    use shallow_tcp::{Errno, Family, Instant, Stack};
    use std::net::SocketAddr;

    fn pump(a: &mut Stack, b: &mut Stack, now: Instant) {
        for _ in 0..8 {
            while let Some(t) = a.poll_transmit(now) {
                b.input(now, &t.data, t.gso_size);
                if let Some(tok) = t.token {
                    a.tx_complete(now, tok)
                }
            }
            while let Some(t) = b.poll_transmit(now) {
                a.input(now, &t.data, t.gso_size);
                if let Some(tok) = t.token {
                    b.tx_complete(now, tok)
                }
            }
        }
    }

    /// A listener with one connection waiting in its accept queue, and the connection's two
    /// ends after 3000 bytes one way, 1000 of them read.
    #[test]
    fn ss_shows_states_queues_skmem_and_tcp_info() {
        let (mut a, mut b) = (Stack::new(1), Stack::new(2));
        a.add_address("10.0.0.1".parse().unwrap());
        b.add_address("10.0.0.2".parse().unwrap());
        let now = Instant::from_secs(1);
        let server: SocketAddr = "10.0.0.2:80".parse().unwrap();
        let l = b.socket(Family::V4).unwrap();
        b.bind(l, server).unwrap();
        b.listen(l, 16).unwrap();
        let c = a.socket(Family::V4).unwrap();
        assert_eq!(a.connect(now, c, server), Err(Errno::EINPROGRESS));
        pump(&mut a, &mut b, now);
        let before = ss(&b, now);
        assert!(
            before
                .lines()
                .any(|l| l.starts_with("LISTEN     1      16 ")),
            "accept queue 1 of backlog 16:\n{before}"
        );
        let (s, _) = b.accept(l).unwrap();
        assert_eq!(a.send(now, c, &[7u8; 3000], 0), Ok(3000));
        pump(&mut a, &mut b, now);
        let mut buf = [0u8; 1000];
        assert_eq!(b.recv(now, s, &mut buf, 0), Ok(1000));
        let out = ss(&b, now);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("State"), "{out}");
        let est = lines
            .iter()
            .position(|l| l.starts_with("ESTAB      2000   0 "))
            .unwrap_or_else(|| panic!("2000 bytes left to read:\n{out}"));
        let detail = lines[est + 1];
        assert!(detail.starts_with("\t skmem:(r"), "{detail}");
        for field in [
            " cubic",
            " wscale:",
            " rto:",
            " mss:",
            " cwnd:10",
            " bytes_received:3000",
        ] {
            assert!(detail.contains(field), "{field} in {detail}");
        }
        // Linux counts the active opener's SYN in bytes_acked, not the SYN-ACK.
        let sender = ss(&a, now);
        assert!(sender.contains("bytes_acked:3001"), "{sender}");
        assert!(!out.contains("bytes_acked"), "{out}");
        assert!(
            sender.contains(",w0,"),
            "all acked, nothing queued:\n{sender}"
        );
    }
}
