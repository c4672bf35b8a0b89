//! Network namespaces (`ip netns`) as a home for the kernel peer of a Shallow TUN device.
//!
//! A namespace is named and pinned under `/run/netns/NAME` by iproute2's `ip netns add`;
//! addresses, routes and links are set with `ip -n NAME ...` (iproute2 is the one external
//! tool this module uses: simple, and the output is what a person would type). Code that must
//! run *inside* a namespace — opening the TUN device, writing its `/proc/sys/net` knobs — runs
//! on a short-lived helper thread that has called `setns(2)`: the network namespace is a
//! per-thread attribute, so the rest of the process is untouched, and a descriptor opened
//! there stays bound to that namespace's device after the thread exits.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{check_name, check_name_within, OsError};
use crate::sys;
use crate::tun::{Tun, TunConfig, TunMode, TUN_PATH};

/// Where `ip netns` pins named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// A named network namespace. Made with [`Netns::create`] or [`Netns::unique`] it is deleted
/// when dropped (a guard for tests); [`Netns::open`] and [`Netns::keep`] leave it in place.
#[derive(Debug)]
pub struct Netns {
    name: String,
    delete_on_drop: bool,
}

/// Checks a namespace name: like an interface name (it doubles as a path component and an
/// `ip` argument) but up to 64 bytes.
fn check_netns_name(name: &str) -> Result<(), OsError> {
    if name == "." || name == ".." {
        return Err(OsError::BadName(name.to_string()));
    }
    check_name_within(name, 64)
}

/// Runs `ip ARGS`, returning stdout; a non-zero exit becomes [`OsError::Command`] with stderr.
pub fn ip(args: &[&str]) -> Result<String, OsError> {
    let cmd = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| OsError::Command {
            cmd: cmd.clone(),
            stderr: if e.kind() == io::ErrorKind::NotFound {
                "the `ip` command (iproute2) is not installed".into()
            } else {
                e.to_string()
            },
        })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        if stderr.contains("Operation not permitted") {
            return Err(OsError::NotPermitted { what: cmd });
        }
        return Err(OsError::Command { cmd, stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn require_root(what: &str) -> Result<(), OsError> {
    if sys::is_root() {
        Ok(())
    } else {
        Err(OsError::NotPermitted { what: what.into() })
    }
}

impl Netns {
    /// True when the namespace `name` exists (is pinned under [`NETNS_DIR`]).
    pub fn exists(name: &str) -> bool {
        check_netns_name(name).is_ok() && Self::path_of(name).exists()
    }

    fn path_of(name: &str) -> PathBuf {
        PathBuf::from(NETNS_DIR).join(name)
    }

    /// Creates the namespace `name` (`ip netns add`); it is deleted on drop.
    pub fn create(name: &str) -> Result<Netns, OsError> {
        check_netns_name(name)?;
        require_root(&format!("create network namespace {name}"))?;
        if Self::exists(name) {
            return Err(OsError::NetnsExists(name.into()));
        }
        ip(&["netns", "add", name])?;
        Ok(Netns {
            name: name.into(),
            delete_on_drop: true,
        })
    }

    /// Creates a namespace with a name unique on this host: `PREFIX-PID-N`. Deleted on drop.
    pub fn unique(prefix: &str) -> Result<Netns, OsError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let name = format!("{prefix}-{}-{n}", std::process::id());
            match Self::create(&name) {
                Err(OsError::NetnsExists(_)) => continue,
                r => return r,
            }
        }
    }

    /// A handle on the existing namespace `name`; not deleted on drop.
    pub fn open(name: &str) -> Result<Netns, OsError> {
        check_netns_name(name)?;
        if !Self::exists(name) {
            return Err(OsError::NoSuchNetns(name.into()));
        }
        Ok(Netns {
            name: name.into(),
            delete_on_drop: false,
        })
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pin file, `/run/netns/NAME`.
    pub fn path(&self) -> PathBuf {
        Self::path_of(&self.name)
    }

    /// Disarms the drop guard: the namespace outlives this handle.
    pub fn keep(mut self) -> String {
        self.delete_on_drop = false;
        std::mem::take(&mut self.name)
    }

    /// Deletes the namespace now (`ip netns delete`). Processes still inside keep it alive
    /// until they exit.
    pub fn delete(mut self) -> Result<(), OsError> {
        self.delete_on_drop = false;
        ip(&["netns", "delete", &self.name]).map(|_| ())
    }

    /// Runs `f` on a helper thread that has entered this namespace (`setns(CLONE_NEWNET)`),
    /// and returns its result. The calling thread stays where it is.
    pub fn run<R: Send>(&self, f: impl FnOnce() -> R + Send) -> Result<R, OsError> {
        let file = File::open(self.path()).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => OsError::NoSuchNetns(self.name.clone()),
            _ => OsError::io(format!("open {}", self.path().display()), e),
        })?;
        let name = self.name.clone();
        std::thread::scope(|s| {
            s.spawn(move || {
                sys::setns_net(file.as_fd())
                    .map_err(|e| OsError::io(format!("setns into {name}"), e))?;
                Ok(f())
            })
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// `ip -n NAME ARGS`.
    pub fn ip(&self, args: &[&str]) -> Result<String, OsError> {
        let mut v = vec!["-n", self.name.as_str()];
        v.extend_from_slice(args);
        ip(&v)
    }

    /// A command that runs `program` inside the namespace (`ip netns exec NAME program`).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }

    /// True when the interface `dev` exists inside the namespace.
    pub fn has_link(&self, dev: &str) -> Result<bool, OsError> {
        let dev = dev.to_string();
        self.run(move || sys::if_exists(&dev))
    }

    /// Writes a `/proc/sys/net/...` knob of this namespace, e.g.
    /// `("ipv6/conf/shallow0/router_solicitations", "0")`.
    pub fn sysctl_set(&self, key: &str, value: &str) -> Result<(), OsError> {
        if key.split('/').any(|c| c.is_empty() || c == "..") {
            return Err(OsError::BadName(key.into()));
        }
        let path = format!("/proc/sys/net/{key}");
        let value = value.to_string();
        self.run(move || std::fs::write(&path, value).map_err(|e| OsError::io(path.clone(), e)))?
    }

    /// Opens the TUN device `cfg.name` *inside* this namespace (creating it there unless
    /// `cfg.mode` is [`TunMode::Attach`]). The descriptors work from any thread afterwards.
    pub fn open_tun(&self, cfg: &TunConfig) -> Result<Vec<Tun>, OsError> {
        if !std::path::Path::new(TUN_PATH).exists() {
            return Err(OsError::TunMissing);
        }
        let cfg = cfg.clone();
        let netns = self.name.clone();
        self.run(move || {
            if cfg.mode == TunMode::Attach && !sys::if_exists(&cfg.name) {
                return Err(OsError::NoSuchTun {
                    name: cfg.name.clone(),
                    netns: Some(netns),
                });
            }
            cfg.open()
        })?
    }

    /// Moves the interface `dev` of the caller's namespace into this one
    /// (`ip link set dev DEV netns NAME`).
    pub fn adopt_link(&self, dev: &str) -> Result<(), OsError> {
        check_name(dev)?;
        ip(&["link", "set", "dev", dev, "netns", &self.name]).map(|_| ())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.delete_on_drop {
            let _ = ip(&["netns", "delete", &self.name]);
        }
    }
}

/// The kernel peer of a Shallow TUN: a namespace holding a persistent TUN device whose kernel
/// side has the given addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// Namespace name (default `shallow-peer`).
    pub netns: String,
    /// TUN device name (default `shallow0`).
    pub tun: String,
    /// Kernel-side IPv4 address and prefix length (default 10.213.0.1/24).
    pub addr4: Option<(Ipv4Addr, u8)>,
    /// Kernel-side IPv6 address and prefix length (default fd00:213::1/64), added with
    /// `nodad` so that it is usable at once.
    pub addr6: Option<(Ipv6Addr, u8)>,
}

impl Default for Peer {
    fn default() -> Self {
        Peer {
            netns: "shallow-peer".into(),
            tun: "shallow0".into(),
            addr4: Some((Ipv4Addr::new(10, 213, 0, 1), 24)),
            addr6: Some((Ipv6Addr::new(0xfd00, 0x213, 0, 0, 0, 0, 0, 1), 64)),
        }
    }
}

/// Parses `ADDR/PREFIX` for an IPv4 address.
pub fn parse_cidr4(s: &str) -> Result<(Ipv4Addr, u8), String> {
    parse_cidr(s, 32)
}

/// Parses `ADDR/PREFIX` for an IPv6 address.
pub fn parse_cidr6(s: &str) -> Result<(Ipv6Addr, u8), String> {
    parse_cidr(s, 128)
}

/// Parses `ADDR/PREFIX` with a prefix of at most `max` bits.
fn parse_cidr<A>(s: &str, max: u8) -> Result<(A, u8), String>
where
    A: std::str::FromStr,
    A::Err: std::fmt::Display,
{
    let (a, p) = s
        .split_once('/')
        .ok_or_else(|| format!("{s:?}: expected ADDR/PREFIX"))?;
    let a: A = a.parse().map_err(|e| format!("{s:?}: {e}"))?;
    let p: u8 = p.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if p > max {
        return Err(format!("{s:?}: prefix length above {max}"));
    }
    Ok((a, p))
}

impl Peer {
    /// Configures the TUN's kernel side in `ns`: loopback up, addresses (IPv6 with `nodad`),
    /// no IPv6 router solicitations (quiet link), link up. The TUN must already exist there.
    pub fn configure(&self, ns: &Netns) -> Result<(), OsError> {
        check_name(&self.tun)?;
        ns.ip(&["link", "set", "lo", "up"])?;
        if let Some((a, p)) = self.addr4 {
            ns.ip(&["addr", "replace", &format!("{a}/{p}"), "dev", &self.tun])?;
        }
        if let Some((a, p)) = self.addr6 {
            // Best effort: a kernel without IPv6 has no such knob.
            let _ = ns.sysctl_set(&format!("ipv6/conf/{}/router_solicitations", self.tun), "0");
            ns.ip(&[
                "-6",
                "addr",
                "replace",
                &format!("{a}/{p}"),
                "dev",
                &self.tun,
                "nodad",
            ])?;
        }
        ns.ip(&["link", "set", "dev", &self.tun, "up"])?;
        Ok(())
    }

    /// `shallow netns up`: creates the namespace (or reuses it), a persistent TUN inside it
    /// (or reuses it) and configures the kernel side. Returns the offloads the kernel granted
    /// when the device was opened.
    pub fn up(&self) -> Result<crate::tun::Offload, OsError> {
        self.up_with(false)
    }

    /// [`Peer::up`] with the TUN made `IFF_MULTI_QUEUE` when `multi_queue` is set, so that a
    /// Shallow host can attach several queues (`HostConfig::queues`), one I/O thread each. An
    /// existing device must already be of that kind (`EINVAL` otherwise).
    pub fn up_with(&self, multi_queue: bool) -> Result<crate::tun::Offload, OsError> {
        check_netns_name(&self.netns)?;
        check_name(&self.tun)?;
        require_root(&format!("create network namespace {}", self.netns))?;
        if !std::path::Path::new(TUN_PATH).exists() {
            return Err(OsError::TunMissing);
        }
        let ns = if Netns::exists(&self.netns) {
            Netns::open(&self.netns)?
        } else {
            Netns::create(&self.netns)?
        };
        let mut cfg = TunConfig::new(&self.tun);
        cfg.persist = Some(true);
        cfg.multi_queue = multi_queue;
        let r = ns.open_tun(&cfg).and_then(|t| {
            let offload = t.first().map(|t| t.offload()).unwrap_or_default();
            drop(t);
            self.configure(&ns)?;
            Ok(offload)
        });
        match r {
            Ok(o) => {
                ns.keep();
                Ok(o)
            }
            // A half-made namespace of ours is removed by the guard; a reused one is kept.
            Err(e) => Err(e),
        }
    }

    /// `shallow netns down`: deletes the TUN and the namespace. Fails when either is absent.
    pub fn down(&self) -> Result<(), OsError> {
        check_netns_name(&self.netns)?;
        check_name(&self.tun)?;
        require_root(&format!("delete network namespace {}", self.netns))?;
        let ns = Netns::open(&self.netns)?;
        if !ns.has_link(&self.tun)? {
            return Err(OsError::NoSuchTun {
                name: self.tun.clone(),
                netns: Some(self.netns.clone()),
            });
        }
        ns.ip(&["link", "del", "dev", &self.tun])?;
        ns.delete()
    }

    /// Opens the peer's TUN from this process (attaching to the existing device inside the
    /// namespace): the descriptor Shallow reads and writes.
    pub fn attach(&self, cfg: &TunConfig) -> Result<Vec<Tun>, OsError> {
        let ns = Netns::open(&self.netns)?;
        let mut cfg = cfg.clone();
        cfg.name = self.tun.clone();
        cfg.mode = TunMode::Attach;
        ns.open_tun(&cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_parsing() {
        assert_eq!(
            parse_cidr4("10.213.0.1/24"),
            Ok((Ipv4Addr::new(10, 213, 0, 1), 24))
        );
        assert!(parse_cidr4("10.213.0.1").is_err());
        assert!(parse_cidr4("10.213.0.1/33").is_err());
        assert_eq!(
            parse_cidr6("fd00:213::1/64"),
            Ok((Peer::default().addr6.unwrap().0, 64))
        );
        assert!(parse_cidr6("fd00:213::1/129").is_err());
    }

    /// Names become paths under /run/netns and `ip` arguments: no traversal, no options.
    #[test]
    fn netns_names_checked() {
        for bad in ["", ".", "..", "-n", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_netns_name(bad).is_err(), "{bad:?}");
            assert!(matches!(Netns::open(bad), Err(OsError::BadName(_))));
        }
        assert!(check_netns_name("shallow-peer").is_ok());
    }
}
