//! `shallow nc` end to end: as a client of a kernel `socat` server and as a server for `socat`,
//! over the TUN of `shallow netns up` (a namespace of the test's own), data both ways with a
//! half-close, checked byte for byte. Plus its error messages when the peer is missing.
//!
//! The end-to-end tests need root, `/dev/net/tun`, iproute2, nc and socat; they skip with a
//! printed reason otherwise, unless `SHALLOW_REQUIRE_TUN=1`.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn shallow() -> Command {
    Command::new(env!("CARGO_BIN_EXE_shallow"))
}

fn can_run(test: &str) -> bool {
    shallow_os::skip::can_run(test, &[("nc", "-h"), ("socat", "-V")])
}

/// `shallow netns up` with names of this test; `down` on drop.
struct Peer {
    name: String,
    tun: String,
}

impl Peer {
    fn up(tag: &str) -> Peer {
        Peer::up_with(tag, &[])
    }

    /// `shallow netns up` with `extra` arguments (e.g. `--multi-queue`).
    fn up_with(tag: &str, extra: &[&str]) -> Peer {
        let name = format!("shnc-{tag}-{}", std::process::id());
        let tun = format!("shnc{tag}{}", std::process::id() % 100_000);
        let out = shallow()
            .args(["netns", "up", "--name", &name, "--tun", &tun])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Peer { name, tun }
    }

    fn sh(&self, script: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, "sh", "-c", script]);
        c
    }

    fn nc(&self) -> Command {
        let mut c = shallow();
        c.args(["nc", "--netns", &self.name, "--tun", &self.tun]);
        c
    }

    /// `shallow nc ARGS < stdin` as a client, retried while the kernel's server is not
    /// listening yet (connection refused).
    fn nc_client(&self, args: &[&str], stdin: &std::path::Path) -> Output {
        for _ in 0..100 {
            let out = self
                .nc()
                .args(args)
                .stdin(std::fs::File::open(stdin).unwrap())
                .output()
                .unwrap();
            if !String::from_utf8_lossy(&out.stderr).contains("refused") {
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("the kernel's server never listened");
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = shallow()
            .args(["netns", "down", "--name", &self.name, "--tun", &self.tun])
            .output();
    }
}

/// A file of `n` varied bytes (seeded), for stdin.
fn data_file(tag: &str, n: usize, seed: u8) -> (PathBuf, Vec<u8>) {
    let v: Vec<u8> = (0..n)
        .map(|i| {
            (i as u32)
                .wrapping_mul(2_654_435_761)
                .rotate_left(seed as u32) as u8
                ^ seed
        })
        .collect();
    let p = std::env::temp_dir().join(format!("shallow-nc-{tag}-{}-{seed}", std::process::id()));
    std::fs::write(&p, &v).unwrap();
    (p, v)
}

/// Assert `got == want`; on a mismatch say how (lengths, first differing offset), so a rare
/// failure can be told apart: a short read, lost bytes or corrupted ones.
fn same(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        panic!(
            "{what}: got {} bytes, want {}; first difference at {:?}",
            got.len(),
            want.len(),
            at
        );
    }
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `shallow nc HOST PORT` against a kernel socat server, IPv4 then IPv6: stdin goes to the
/// kernel, the kernel's file comes back on stdout; EOF on stdin half-closes.
#[test]
fn nc_client_to_kernel_socat() {
    if !can_run("nc_client_to_kernel_socat") {
        return;
    }
    let p = Peer::up("c");
    for (i, (kernel, port)) in [("10.213.0.1", 9401u16), ("fd00:213::1", 9402)]
        .into_iter()
        .enumerate()
    {
        let (up_path, up) = data_file("cu", 700_000 + i, 3 + i as u8);
        let (down_path, down) = data_file("cd", 900_000 + i, 7 + i as u8);
        let recv_path =
            std::env::temp_dir().join(format!("shallow-nc-cr-{}-{i}", std::process::id()));
        // socat half-closes after sending its file and exits at our FIN (OpenBSD nc may quit
        // at our FIN before it has sent all of its stdin, so it is not used here).
        let listen = if kernel.contains(':') {
            format!("TCP6-LISTEN:{port},bind=[{kernel}]")
        } else {
            format!("TCP4-LISTEN:{port},bind={kernel}")
        };
        let server = p
            .sh(&format!(
                "socat -t 30 {listen},reuseaddr STDIO < {} > {}",
                down_path.display(),
                recv_path.display()
            ))
            .spawn()
            .unwrap();
        let out = p.nc_client(&["--ss", kernel, &port.to_string()], &up_path);
        check(&out, "shallow nc");
        // --ss: the connection's row as `ss -tmi` prints it, with its memory and tcp_info.
        let err = String::from_utf8_lossy(&out.stderr);
        let peer = if kernel.contains(':') {
            format!("[{kernel}]:{port}")
        } else {
            format!("{kernel}:{port}")
        };
        let row = err
            .lines()
            .position(|l| l.ends_with(&peer))
            .unwrap_or_else(|| panic!("{kernel}: no ss row for {peer}:\n{err}"));
        assert!(err.contains("State      Recv-Q Send-Q"), "{err}");
        let detail = err.lines().nth(row + 1).unwrap_or_default();
        for field in ["skmem:(r", " cubic", " cwnd:", " bytes_acked:"] {
            assert!(detail.contains(field), "{kernel}: {field} in {detail}");
        }
        let server = server.wait_with_output().unwrap();
        check(&server, "kernel socat");
        assert!(
            out.stdout == down,
            "{kernel}: bytes from the kernel differ: {} of {}",
            out.stdout.len(),
            down.len()
        );
        assert!(
            std::fs::read(&recv_path).unwrap() == up,
            "{kernel}: bytes to the kernel differ"
        );
        for f in [up_path, down_path, recv_path] {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `shallow nc -l PORT` (and `-6 -l PORT`) with socat as the client.
#[test]
fn nc_listen_for_kernel_socat() {
    if !can_run("nc_listen_for_kernel_socat") {
        return;
    }
    let p = Peer::up("l");
    for (i, (flag, me, port)) in [("-4", "10.213.0.2", 9411u16), ("-6", "[fd00:213::2]", 9412)]
        .into_iter()
        .enumerate()
    {
        let (up_path, up) = data_file("lu", 600_000 + i, 5 + i as u8);
        let (down_path, down) = data_file("ld", 800_000 + i, 9 + i as u8);
        let server = p
            .nc()
            .args([flag, "-l", &port.to_string()])
            .stdin(std::fs::File::open(&up_path).unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // nc's stdout is read from now on, while socat runs: unread, the pipe fills (64 KiB),
        // nc blocks writing it and stops reading the connection, Shallow's window closes and
        // socat cannot send the rest of its file. socat then gets our FIN, waits its -t 30 and
        // exits 0 with what it had not written dropped (CI saw 'bytes to Shallow differ';
        // whether the kernel's send buffer happened to hold the whole file decided it).
        let server = std::thread::spawn(move || server.wait_with_output());
        let family = if flag == "-4" { "TCP4" } else { "TCP6" };
        let mut got = None;
        for _ in 0..100 {
            let out = p
                .sh(&format!(
                    // -t 30: after its stdin's EOF, wait up to 30 s for ours (not 0.5 s).
                    "socat -t 30 - {family}:{me}:{port} < {}",
                    down_path.display()
                ))
                .output()
                .unwrap();
            if out.status.success() {
                got = Some(out);
                break;
            }
            // Only "not listening yet" is retried: nc -l accepts one connection, so an
            // attempt that failed after connecting has spent it.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("refused"),
                "socat failed ({}): {err}",
                out.status
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let got = got.expect("shallow nc -l never accepted");
        let server = server.join().unwrap().unwrap();
        check(&server, "shallow nc -l");
        same(&got.stdout, &up, &format!("{me}: bytes from Shallow"));
        same(
            &server.stdout,
            &down,
            &format!(
                "{me}: bytes to Shallow (nc said: {})",
                String::from_utf8_lossy(&server.stderr)
            ),
        );
        for f in [up_path, down_path] {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Without the peer namespace, `shallow nc` fails with a message that says what to do (as
/// root: run `shallow netns up`; otherwise: run as root).
#[test]
fn nc_missing_peer_is_a_clear_error() {
    let out = shallow()
        .args([
            "nc",
            "--netns",
            "shallow-no-such-peer-h2",
            "10.213.0.1",
            "7",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    if shallow_os::is_root() {
        assert!(err.contains("shallow netns up"), "{err}");
    } else {
        assert!(err.contains("root"), "{err}");
    }
    let out = shallow().args(["nc", "-l"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "a missing PORT is a usage error"
    );
}

/// `shallow netns up --multi-queue` makes a TUN that `shallow nc --queues 2` attaches with two
/// I/O threads; data crosses both ways intact (socat as the kernel's server). Without
/// `--multi-queue`, attaching two queues fails with a clear error.
#[test]
fn nc_two_queues_on_a_multi_queue_tun() {
    if !can_run("nc_two_queues_on_a_multi_queue_tun") {
        return;
    }
    let single = Peer::up("s");
    let out = single
        .nc()
        .args(["--queues", "2", "10.213.0.1", "9421"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "two queues on a single-queue TUN");
    drop(single);
    let p = Peer::up_with("m", &["--multi-queue"]);
    let (up_path, up) = data_file("mu", 500_000, 11);
    let (down_path, down) = data_file("md", 400_000, 13);
    let recv_path = std::env::temp_dir().join(format!("shallow-nc-mr-{}", std::process::id()));
    let server = p
        .sh(&format!(
            "socat -t 30 TCP4-LISTEN:9422,bind=10.213.0.1,reuseaddr STDIO < {} > {}",
            down_path.display(),
            recv_path.display()
        ))
        .spawn()
        .unwrap();
    let out = p.nc_client(&["--queues", "2", "10.213.0.1", "9422"], &up_path);
    check(&out, "shallow nc --queues 2");
    check(&server.wait_with_output().unwrap(), "kernel socat");
    same(&out.stdout, &down, "bytes from the kernel");
    assert!(
        std::fs::read(&recv_path).unwrap() == up,
        "bytes to the kernel differ"
    );
    for f in [up_path, down_path, recv_path] {
        let _ = std::fs::remove_file(f);
    }
}
