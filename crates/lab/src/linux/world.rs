//! The world: two namespaces, a veth pair with tbf on the sender's end, a TUN for Shallow;
//! made per run, removed when the [`World`] is dropped.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr};

use shallow_os::Netns;

use super::parse::{parse_proc_net, parse_ss, parse_tc_backlog, SsSock};
use crate::LabError;

const TX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 1);
pub(super) const RX_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 0, 2);
const TUN_KERNEL: Ipv4Addr = Ipv4Addr::new(10, 215, 1, 1);
pub(super) const SHALLOW_ADDR: Ipv4Addr = Ipv4Addr::new(10, 215, 1, 2);

/// The bottleneck: `tc qdisc replace dev VETH root tbf rate R burst B limit L`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tbf {
    /// Rate, bit/s.
    pub(crate) rate_bps: u64,
    /// Bucket size, bytes.
    pub(crate) burst: u64,
    /// Queue limit, bytes.
    pub(crate) limit: u64,
}

impl Tbf {
    pub(super) fn describe(&self) -> String {
        format!(
            "tbf rate {} Mbit/s burst {} KB limit {} KB on the sender's veth",
            self.rate_bps / 1_000_000,
            self.burst / 1024,
            self.limit / 1024
        )
    }
}

/// `/proc/net/netstat` and `/proc/net/snmp` of `ns`, as `TcpExtX`/`TcpX`.
fn counters_of(ns: &Netns) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for f in ["/proc/net/netstat", "/proc/net/snmp"] {
        if let Ok(out) = ns.command("cat").arg(f).output() {
            parse_proc_net(&String::from_utf8_lossy(&out.stdout), &mut m);
        }
    }
    m
}

/// The namespaces and devices of one run.
pub(super) struct World {
    /// The sender's namespace (the kernel's senders, the TUN, the tbf).
    pub(super) tx: Netns,
    /// The receiver's namespace.
    pub(super) rx: Netns,
    veth: String,
    tun: String,
    next_port: u16,
}

pub(super) fn os_err(what: &str) -> impl FnOnce(shallow_os::OsError) -> LabError + '_ {
    move |e| LabError::Linux(format!("{what}: {e}"))
}

pub(super) fn io_err(what: &str) -> impl FnOnce(io::Error) -> LabError + '_ {
    move |e| LabError::Linux(format!("{what}: {e}"))
}

impl World {
    pub(super) fn new(tbf: Tbf) -> Result<World, LabError> {
        if !shallow_os::is_root() {
            return Err(LabError::NotRoot(
                "the Linux substrate needs root (network namespaces, veth, tc)".into(),
            ));
        }
        let tx = Netns::unique("shallow-lab-tx").map_err(os_err("create namespace"))?;
        let rx = Netns::unique("shallow-lab-rx").map_err(os_err("create namespace"))?;
        let veth = "slab0".to_string();
        let peer = "slab1".to_string();
        // Made directly inside the namespaces: nothing appears in the caller's.
        shallow_os::netns::ip(&[
            "link",
            "add",
            &veth,
            "netns",
            tx.name(),
            "type",
            "veth",
            "peer",
            "name",
            &peer,
            "netns",
            rx.name(),
        ])
        .map_err(os_err("create veth pair"))?;
        let run = |ns: &Netns, args: &[&str]| ns.ip(args).map(|_| ()).map_err(os_err("ip"));
        run(
            &tx,
            &["addr", "add", &format!("{TX_ADDR}/24"), "dev", &veth],
        )?;
        run(
            &rx,
            &["addr", "add", &format!("{RX_ADDR}/24"), "dev", &peer],
        )?;
        for (ns, dev) in [(&tx, &veth), (&rx, &peer)] {
            run(ns, &["link", "set", "lo", "up"])?;
            run(ns, &["link", "set", dev, "up"])?;
        }
        // Shallow's subnet (behind the TUN in tx) is reached through tx.
        run(
            &rx,
            &[
                "route",
                "add",
                &format!("{}/24", Ipv4Addr::new(10, 215, 1, 0)),
                "via",
                &TX_ADDR.to_string(),
            ],
        )?;
        tx.sysctl_set("ipv4/ip_forward", "1")
            .map_err(os_err("ip_forward"))?;
        let w = World {
            tx,
            rx,
            veth,
            tun: "slabtun".into(),
            next_port: 5301,
        };
        w.set_tbf(tbf)?;
        Ok(w)
    }

    pub(super) fn set_tbf(&self, t: Tbf) -> Result<(), LabError> {
        self.set_root_qdisc(&[
            "tbf",
            "rate",
            &format!("{}bit", t.rate_bps),
            "burst",
            &t.burst.to_string(),
            "limit",
            &t.limit.to_string(),
        ])
    }

    /// `tc qdisc replace dev VETH root QDISC...` in the sender namespace.
    pub(super) fn set_root_qdisc(&self, qdisc: &[&str]) -> Result<(), LabError> {
        let mut args = vec!["qdisc", "replace", "dev", self.veth.as_str(), "root"];
        args.extend_from_slice(qdisc);
        let out = self
            .tx
            .command("tc")
            .args(&args)
            .output()
            .map_err(io_err("tc"))?;
        if !out.status.success() {
            return Err(LabError::Linux(format!(
                "tc {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(())
    }

    /// Bytes in the tbf now (`tc -s qdisc`: "backlog 78728b 52p").
    pub(super) fn tbf_backlog(&self) -> Option<u64> {
        let out = self
            .tx
            .command("tc")
            .args(["-s", "qdisc", "show", "dev", &self.veth])
            .output()
            .ok()?;
        parse_tc_backlog(&String::from_utf8_lossy(&out.stdout))
    }

    pub(super) fn kernel_sysctl(&self, key: &str, value: &str) -> Result<(), LabError> {
        self.tx
            .sysctl_set(key, value)
            .map_err(os_err("sender namespace sysctl"))
    }

    /// `/proc/net/netstat` and `/proc/net/snmp` of the sender namespace, as `TcpExtX`/`TcpX`.
    pub(super) fn kernel_counters(&self) -> BTreeMap<String, u64> {
        counters_of(&self.tx)
    }

    /// The same of the receiving namespace.
    pub(super) fn rx_counters(&self) -> BTreeMap<String, u64> {
        counters_of(&self.rx)
    }

    /// Routes of the receiving namespace with `quickack 1` (`dst_quick_ack`: every segment
    /// is ACKed at once), to the sender's subnet and to Shallow's.
    pub(super) fn rx_quickack(&self) -> Result<(), LabError> {
        let run = |args: &[&str]| self.rx.ip(args).map(|_| ()).map_err(os_err("ip route"));
        run(&[
            "route",
            "replace",
            &format!("{}/24", Ipv4Addr::new(10, 215, 0, 0)),
            "dev",
            "slab1",
            "src",
            &RX_ADDR.to_string(),
            "quickack",
            "1",
        ])?;
        run(&[
            "route",
            "replace",
            &format!("{}/24", Ipv4Addr::new(10, 215, 1, 0)),
            "via",
            &TX_ADDR.to_string(),
            "quickack",
            "1",
        ])
    }

    /// `ss -tmniH` of the sender namespace's connections to `port`.
    pub(super) fn kernel_sockets(&self, port: u16) -> Vec<SsSock> {
        let filter = format!("( dport = :{port} )");
        match self
            .tx
            .command("ss")
            .args(["-tmniH", "state", "established", &filter])
            .output()
        {
            Ok(out) => parse_ss(&String::from_utf8_lossy(&out.stdout)),
            Err(_) => Vec::new(),
        }
    }

    pub(super) fn port(&mut self) -> u16 {
        self.next_port += 1;
        self.next_port
    }

    /// The engine on a TUN in the sender namespace: kernel side 10.215.1.1, Shallow 10.215.1.2;
    /// Shallow's own egress qdisc is the experiment's tbf (its host queue, where TSQ sees it).
    pub(super) fn shallow_host(
        &self,
        sysctls: &[(String, String)],
        seed: u64,
        tbf: Tbf,
    ) -> Result<shallow_os::Host, LabError> {
        let mut cfg = shallow_os::TunConfig::new(&self.tun);
        cfg.persist = Some(false);
        let tun = self
            .tx
            .open_tun(&cfg)
            .map_err(os_err("open TUN"))?
            .into_iter()
            .next()
            .ok_or_else(|| LabError::Linux("no TUN queue".into()))?;
        let run = |args: &[&str]| self.tx.ip(args).map(|_| ()).map_err(os_err("ip"));
        run(&[
            "addr",
            "replace",
            &format!("{TUN_KERNEL}/24"),
            "dev",
            &self.tun,
        ])?;
        run(&["link", "set", "dev", &self.tun, "up"])?;
        let mut stack = shallow_tcp::Stack::new(seed);
        stack.add_address(IpAddr::V4(SHALLOW_ADDR));
        for (k, v) in sysctls {
            stack
                .sysctl_set(k, v)
                .map_err(|e| LabError::Linux(format!("engine sysctl {k}={v}: {e}")))?;
        }
        let egress = shallow_os::Egress::Tbf {
            rate: shallow_os::Rate::bps(tbf.rate_bps),
            burst: tbf.burst,
            limit: usize::try_from(tbf.limit).unwrap_or(usize::MAX),
        };
        shallow_os::Host::start_with(stack, tun, egress).map_err(io_err("start the Shallow host"))
    }
}
