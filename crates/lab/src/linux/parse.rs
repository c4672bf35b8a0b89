//! What the Linux substrate reads: `tc -s qdisc` backlogs, `/proc/net/netstat` and
//! `/proc/net/snmp` counters, `ss -tmi` socket memory, threads' CPU time from `schedstat`;
//! and the names of sysctls.

use std::collections::BTreeMap;

/// `ipv4/tcp_autocorking` → `net.ipv4.tcp_autocorking`; `shallow/tcp_tsq` (an engine
/// extension, no kernel file) → `shallow.tcp_tsq`.
pub(crate) fn sysctl_name(k: &str) -> String {
    match k.strip_prefix("shallow/") {
        Some(rest) => format!("shallow.{rest}"),
        None => format!("net.{}", k.replace('/', ".")),
    }
}

/// An experiment's sysctls as the engine takes them (full names, [`sysctl_name`]).
pub(super) fn engine_sysctls(sysctls: &[(&str, &str)]) -> Vec<(String, String)> {
    sysctls
        .iter()
        .map(|(k, v)| (sysctl_name(k), v.to_string()))
        .collect()
}

pub(super) fn parse_tc_backlog(s: &str) -> Option<u64> {
    let l = s.lines().find(|l| l.trim_start().starts_with("backlog"))?;
    let b = l.split_whitespace().nth(1)?;
    parse_size(b.trim_end_matches('b'))
}

/// "78728", "77Kb"-style sizes of tc (K = 1024, M = 1024²).
fn parse_size(s: &str) -> Option<u64> {
    let (num, mul) = if let Some(n) = s.strip_suffix('K') {
        (n, 1024)
    } else if let Some(n) = s.strip_suffix('M') {
        (n, 1024 * 1024)
    } else {
        (s, 1)
    };
    num.parse::<u64>().ok().map(|v| v * mul)
}

pub(super) fn parse_proc_net(text: &str, out: &mut BTreeMap<String, u64>) {
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((p1, n)), Some((p2, v))) = (names.split_once(':'), values.split_once(':')) else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        for (k, v) in n.split_whitespace().zip(v.split_whitespace()) {
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{p1}{k}"), v);
            }
        }
    }
}

/// What `ss -tmi` says about one socket.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct SsSock {
    /// `skmem r`: rmem_alloc.
    pub(super) rmem_alloc: u64,
    /// `skmem t`: wmem_alloc (bytes below TCP).
    pub(super) wmem_alloc: u64,
    /// `skmem w`: wmem_queued.
    pub(super) wmem_queued: u64,
    /// `notsent:`.
    pub(super) notsent: u64,
    /// `skmem tb`: sndbuf.
    pub(super) sndbuf: u64,
    /// `cwnd:`, segments.
    pub(super) cwnd: u64,
    /// `unacked:`, segments in flight (packets_out).
    pub(super) unacked: u64,
    /// `rtt:` (its first figure, srtt), µs.
    pub(super) srtt_us: u64,
}

pub(super) fn parse_ss(text: &str) -> Vec<SsSock> {
    let mut v = Vec::new();
    for l in text.lines() {
        let Some(i) = l.find("skmem:(") else { continue };
        let rest = &l[i + 7..];
        let mem = rest.split(')').next().unwrap_or("");
        let mut s = SsSock::default();
        for f in mem.split(',') {
            let num = |p: &str| f.strip_prefix(p).and_then(|x| x.parse::<u64>().ok());
            if let Some(x) = num("r") {
                s.rmem_alloc = x;
            } else if let Some(x) = num("tb") {
                s.sndbuf = x;
            } else if let Some(x) = num("t") {
                s.wmem_alloc = x;
            } else if let Some(x) = num("w") {
                s.wmem_queued = x;
            }
        }
        // `name:value` fields after the skmem group.
        let field = |name: &str| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .map(|x| x.split('/').next().unwrap_or(""))
        };
        let int = |name: &str| field(name).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
        s.notsent = int("notsent:");
        s.cwnd = int("cwnd:");
        s.unacked = int("unacked:");
        s.srtt_us = field("rtt:")
            .and_then(|x| x.parse::<f64>().ok())
            .map_or(0, |ms| (ms * 1000.0).round() as u64);
        v.push(s);
    }
    v
}

/// CPU time this thread has run, ns (`/proc/thread-self/schedstat`, first field).
pub(super) fn thread_cpu_ns() -> u64 {
    schedstat_ns(std::path::Path::new("/proc/thread-self/schedstat"))
}

/// The first field of a `schedstat` file: CPU time run, ns (0 when unreadable).
fn schedstat_ns(path: &std::path::Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|x| x.parse().ok()))
        .unwrap_or(0)
}

/// CPU time of this process's threads whose name starts with `prefix`, ns.
pub(super) fn threads_cpu_ns(prefix: &str) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    let mut sum = 0;
    for e in dir.flatten() {
        let p = e.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        if name.trim_end().starts_with(prefix) {
            sum += schedstat_ns(&p.join("schedstat"));
        }
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tc_backlog() {
        let s = "qdisc tbf 8036: root refcnt 3 rate 200Mbit burst 32750b lat 334ms \n Sent 37550262 bytes 24811 pkt (dropped 0, overlimits 46923 requeues 0) \n backlog 78728b 52p requeues 0\n";
        assert_eq!(parse_tc_backlog(s), Some(78728));
        assert_eq!(
            parse_tc_backlog(" backlog 77Kb 52p requeues 0"),
            Some(77 * 1024)
        );
        assert_eq!(parse_tc_backlog("nothing"), None);
    }

    #[test]
    fn parses_ss_skmem_and_notsent() {
        let s = "0      930376 10.77.0.1:57802 10.77.0.2:5555\n\t skmem:(r0,rb131072,t109440,tb1410048,f1656,w944520,o0,bl0,d0) cubic wscale:10,10 rtt:4.25/0.5 mss:1448 cwnd:87 unacked:40 notsent:814536 minrtt:0.007\n";
        let v = parse_ss(s);
        assert_eq!(v.len(), 1);
        assert_eq!(
            v[0],
            SsSock {
                rmem_alloc: 0,
                wmem_alloc: 109440,
                wmem_queued: 944520,
                notsent: 814536,
                sndbuf: 1410048,
                cwnd: 87,
                unacked: 40,
                srtt_us: 4250,
            }
        );
    }

    #[test]
    fn parses_proc_net_pairs() {
        let s = "TcpExt: A B\nTcpExt: 1 2\nIpExt: C\nIpExt: 3\n";
        let mut m = BTreeMap::new();
        parse_proc_net(s, &mut m);
        assert_eq!(m.get("TcpExtA"), Some(&1));
        assert_eq!(m.get("TcpExtB"), Some(&2));
        assert_eq!(m.get("IpExtC"), Some(&3));
    }
}
