#!/usr/bin/env python3
"""Side-by-side benchmark of TUN-based TCP proxies (issue 18, item 3).

Builds, in network namespaces of its own, the topology

    client (kernel TCP, ns C) -> TUN -> proxy (in C) -> SOCKS5 (microsocks, ns S) -> server (kernel TCP, ns S)

and measures, for each arm, one after another in one sitting:

  kernel           the ceiling: client -> server directly over a veth, no proxy
  tun2proxy        tun2proxy-bin on TUN t2p0, upstream through microsocks
  shallow          `shallow proxy --socks5` on TUN shp0 (TCP_NOTSENT_LOWAT 131072, its default)
  shallow-nolowat  the same with `--notsent-lowat 0` (TCP_NOTSENT_LOWAT unset)

Metrics (same for every arm): bulk throughput each way with 1 and 4 flows (iperf3 -J, Gbit/s);
1-byte ping-pong latency p50/p99 (TCP_NODELAY both sides, microseconds); the same ping-pong while
an iperf3 -R download runs through the same proxy (latency under load); connection setup rate
(connect, 1-byte request, response, close; connections/s); proxy RSS per idle connection
((VmRSS after opening N idle connections - before) / N, bytes); proxy CPU seconds (utime+stime)
per GB moved by the bulk runs. Every repetition is printed, then medians, the ratios
shallow/tun2proxy and shallow/kernel, and whether issue 18's targets hold.

Addresses (all inside the namespaces; nothing leaves them): veth C 10.215.0.1/24 <-> S
10.215.0.2/24; the server address D4 = 10.216.0.2 on S's loopback; microsocks on
10.215.0.2:1080; t2p0 10.218.0.1/24; shp0 10.217.0.1/24 (Shallow is 10.217.0.2). Each arm routes
D4/32 in C through its own device. Namespaces are named pb<PID>c and pb<PID>s and are deleted,
with every process the script started, at exit, on error and on SIGINT/SIGTERM.

Needs: root (CAP_NET_ADMIN, CAP_SYS_ADMIN), `ip`, `iperf3`, `microsocks` (Debian package),
tun2proxy-bin (`cargo install tun2proxy`), and the `shallow` binary (`cargo build --release -p shallow`).

Usage:
    sudo scripts/proxy-bench.py --quick                        # smoke run: short, 1 rep, 1000 idle conns
    sudo scripts/proxy-bench.py --json /tmp/proxy-bench.json   # full run, 3 reps each arm
    sudo scripts/proxy-bench.py --arms kernel,tun2proxy --reps 5 --time 10
    sudo scripts/proxy-bench.py --server-cc cubic              # the download's senders unpaced
    sudo scripts/proxy-bench.py --shallow target/release/shallow --tun2proxy ~/.cargo/bin/tun2proxy-bin

Notes:
  * tun2proxy gets `--tcp-mss 1460`: without it its stack sends no MSS option in the SYN-ACK and
    the Linux client falls back to 536-byte segments. `--max-sessions` (default 200) is raised
    to the number of idle connections + 20000. Logging is `-v warn` (per-session info lines cost
    CPU). tun2proxy 0.8.7 does not pass the client's FIN upstream: a session closed by the client
    stays (upstream socket, microsocks thread) until the server closes or `--tcp-timeout` (600 s),
    so the connection-rate loop accumulates sessions, and the proxy of every arm is restarted
    after the idle-connection measurement (which comes first, on a fresh process).
  * RSS per idle connection is capped by RLIMIT_NOFILE: microsocks holds 2 descriptors per
    relayed connection and the hard limit cannot be raised without CAP_SYS_RESOURCE; the script
    lowers N to fit and says so.
  * The shallow binary is copied to the run's temporary directory first, so a rebuild during the
    run does not change the arms under measurement.
"""

import argparse
import ctypes
import hashlib
import json
import os
import platform
import resource
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

D4 = "10.216.0.2"
C_VETH = "10.215.0.1"
S_VETH = "10.215.0.2"
T2P_NET = "10.218.0.1/24"
SHP_NET = "10.217.0.1/24"
SHP_SELF = "10.217.0.2"
SOCKS_PORT = 1080
IPERF_PORT = 5201
ECHO_PORT = 7007
HOLD_PORT = 7009
T2P_DEV = "t2p0"
SHP_DEV = "shp0"
ALL_ARMS = ["kernel", "tun2proxy", "shallow", "shallow-nolowat"]
PROXY_ARMS = ["tun2proxy", "shallow", "shallow-nolowat"]
SELF = os.path.abspath(__file__)
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pct(samples, p):
    """Nearest-rank percentile of a sorted list."""
    if not samples:
        return None
    k = max(0, min(len(samples) - 1, int(round(p / 100.0 * len(samples) + 0.5)) - 1))
    return samples[k]


# --------------------------------------------------------------------------------------------
# Roles run inside the namespaces (`ip netns exec NS python3 proxy-bench.py _role ...`)
# --------------------------------------------------------------------------------------------


def role_server(argv):
    """In S: echo server on ECHO_PORT, hold server on HOLD_PORT (sends one byte on accept, then
    discards what it reads until EOF). Exits when stdin closes, on SIGTERM, or after max_secs."""
    addr, max_secs = argv[0], float(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sel = selectors.DefaultSelector()
    for port, kind in ((ECHO_PORT, "echo-l"), (HOLD_PORT, "hold-l")):
        ls = socket.socket()
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((addr, port))
        ls.listen(4096)
        ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ, kind)
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    pending = {}  # sock -> bytes not yet echoed
    deadline = time.monotonic() + max_secs
    print("ready", flush=True)

    def close(s):
        pending.pop(s, None)
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()

    while time.monotonic() < deadline:
        for key, ev in sel.select(timeout=1.0):
            kind, s = key.data, key.fileobj
            if kind == "stdin":
                if not os.read(s, 4096):
                    return
            elif kind in ("echo-l", "hold-l"):
                for _ in range(256):
                    try:
                        c, _a = s.accept()
                    except (BlockingIOError, InterruptedError):
                        break
                    except OSError:
                        break
                    c.setblocking(False)
                    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if kind == "hold-l":
                        try:
                            c.send(b"h")
                        except OSError:
                            c.close()
                            continue
                        sel.register(c, selectors.EVENT_READ, "hold")
                    else:
                        sel.register(c, selectors.EVENT_READ, "echo")
            elif kind == "hold":
                try:
                    d = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b""
                if not d:
                    close(s)
            elif kind == "echo":
                if ev & selectors.EVENT_WRITE:
                    buf = pending.get(s, b"")
                    try:
                        n = s.send(buf)
                    except (BlockingIOError, InterruptedError):
                        n = 0
                    except OSError:
                        close(s)
                        continue
                    buf = buf[n:]
                    if buf:
                        pending[s] = buf
                    else:
                        pending.pop(s, None)
                        sel.modify(s, selectors.EVENT_READ, "echo")
                    continue
                try:
                    d = s.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    d = b""
                if not d:
                    close(s)
                    continue
                try:
                    n = s.send(d)
                except (BlockingIOError, InterruptedError):
                    n = 0
                except OSError:
                    close(s)
                    continue
                if n < len(d):
                    pending[s] = d[n:]
                    sel.modify(s, selectors.EVENT_READ | selectors.EVENT_WRITE, "echo")


def role_probe(argv):
    """One 1-byte exchange with the echo server; exit status 0 when it worked."""
    dst, timeout = argv[0], float(argv[1])
    try:
        s = socket.create_connection((dst, ECHO_PORT), timeout=timeout)
        s.sendall(b"p")
        ok = s.recv(1) == b"p"
        s.close()
    except OSError as e:
        print(f"probe: {e}", file=sys.stderr)
        ok = False
    sys.exit(0 if ok else 1)


def role_pingpong(argv):
    """1-byte ping-pong over one connection for `secs` seconds; prints JSON (microseconds)."""
    dst, secs = argv[0], float(argv[1])
    out = {"samples": 0, "errors": []}
    try:
        s = socket.create_connection((dst, ECHO_PORT), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(10)
        rtts = []
        end = time.monotonic() + secs
        clock = time.perf_counter_ns
        while time.monotonic() < end and len(rtts) < 10_000_000:
            t0 = clock()
            s.sendall(b"x")
            b = s.recv(1)
            t1 = clock()
            if not b:
                out["errors"].append("connection closed by peer")
                break
            rtts.append((t1 - t0) / 1000.0)
        s.close()
    except OSError as e:
        out["errors"].append(f"{type(e).__name__}: {e}")
        rtts = locals().get("rtts", [])
    rtts.sort()
    out.update(
        samples=len(rtts),
        p50_us=pct(rtts, 50),
        p99_us=pct(rtts, 99),
        mean_us=(sum(rtts) / len(rtts)) if rtts else None,
        max_us=rtts[-1] if rtts else None,
    )
    print(json.dumps(out), flush=True)


def role_connrate(argv):
    """connect + 1-byte request + response + close in a loop for `secs` seconds; prints JSON."""
    dst, secs = argv[0], float(argv[1])
    n = 0
    errors = 0
    first_error = None
    t0 = time.monotonic()
    end = t0 + secs
    while time.monotonic() < end:
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(5)
        try:
            s.connect((dst, ECHO_PORT))
            s.sendall(b"c")
            if s.recv(1) != b"c":
                raise OSError("short response")
            n += 1
        except OSError as e:
            errors += 1
            first_error = first_error or f"{type(e).__name__}: {e}"
            if errors >= 100:
                break
        finally:
            s.close()
    el = time.monotonic() - t0
    print(json.dumps({"conns": n, "secs": el, "rate": n / el if el > 0 else None,
                      "errors": errors, "first_error": first_error}), flush=True)


def role_idle(argv):
    """Opens n connections to the hold server (each proven end to end by its 1-byte banner),
    prints a JSON line, waits for a line on stdin (or max_secs), closes them all."""
    dst, n, open_secs, max_secs = argv[0], int(argv[1]), float(argv[2]), float(argv[3])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    errors = 0
    first_error = None
    t0 = time.monotonic()
    end = t0 + open_secs
    batch = 200
    while len(socks) < n and time.monotonic() < end and errors < 20:
        fresh = []
        for _ in range(min(batch, n - len(socks) - len(fresh))):
            s = socket.socket()
            s.settimeout(10)
            try:
                s.connect((dst, HOLD_PORT))
                fresh.append(s)
            except OSError as e:
                s.close()
                errors += 1
                first_error = first_error or f"connect: {type(e).__name__}: {e}"
                break
        for s in fresh:
            try:
                if s.recv(1) != b"h":
                    raise OSError("no banner")
                socks.append(s)
            except OSError as e:
                s.close()
                errors += 1
                first_error = first_error or f"banner: {type(e).__name__}: {e}"
    print(json.dumps({"opened": len(socks), "wanted": n, "errors": errors,
                      "first_error": first_error, "secs": time.monotonic() - t0}), flush=True)
    sel = selectors.DefaultSelector()
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ)
    sel.select(timeout=max_secs)
    for s in socks:
        s.close()
    print(json.dumps({"closed": len(socks)}), flush=True)


ROLES = {"_server": role_server, "_probe": role_probe, "_pingpong": role_pingpong,
         "_connrate": role_connrate, "_idle": role_idle}


# --------------------------------------------------------------------------------------------
# Orchestrator
# --------------------------------------------------------------------------------------------


def _set_pdeathsig():
    """Child side of Popen: die with the script (PR_SET_PDEATHSIG survives the exec of `ip
    netns exec` and of the program it runs)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Failure(Exception):
    pass


class Bench:
    def __init__(self, args):
        self.a = args
        tag = f"pb{os.getpid()}"
        self.nsc, self.nss = tag + "c", tag + "s"
        self.tmp = tempfile.mkdtemp(prefix=tag + "-")
        self.procs = []  # (name, Popen)
        self.namespaces = []
        self.cleaned = False
        self.servers = {}
        self.proxy = None
        self.notes = []
        self.idle_n = args.idle_conns

    # ---- processes ----
    def spawn(self, name, argv, stdin=subprocess.DEVNULL, stdout=None, text=True):
        logf = open(os.path.join(self.tmp, name + ".log"), "ab")
        argv = [str(x) for x in argv]
        p = subprocess.Popen(argv, stdin=stdin, stdout=stdout if stdout is not None else logf,
                             stderr=logf, preexec_fn=_set_pdeathsig, text=text if stdout else False)
        p._logf = logf
        self.procs.append((name, p))
        return p

    def stop(self, p, sig=signal.SIGTERM, wait=5.0):
        if p.poll() is None:
            try:
                p.send_signal(sig)
                p.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            except ProcessLookupError:
                pass
        try:
            p._logf.close()
        except Exception:
            pass
        self.procs = [(n, q) for (n, q) in self.procs if q is not p]

    def run(self, argv, timeout=30, check=True, ns=None):
        if ns:
            argv = ["ip", "netns", "exec", ns] + argv
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               preexec_fn=_set_pdeathsig)
        except subprocess.TimeoutExpired:
            raise Failure(f"timed out after {timeout}s: {' '.join(argv)}")
        if check and r.returncode != 0:
            raise Failure(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
        return r

    def role(self, ns, role, *args, timeout):
        r = self.run(["ip", "netns", "exec", ns, sys.executable, SELF, role] + [str(x) for x in args],
                     timeout=timeout, check=False)
        if r.returncode != 0:
            raise Failure(f"{role} exit {r.returncode}: {r.stderr.strip()[-300:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])

    # ---- cleanup ----
    def cleanup(self):
        if self.cleaned:
            return
        self.cleaned = True
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for name, p in reversed(list(self.procs)):
            self.stop(p, signal.SIGTERM, wait=3)
        for ns in list(self.namespaces):
            # Anything still running inside our own namespaces is ours.
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        time.sleep(0.3)
        for dev in (T2P_DEV, SHP_DEV, "vc"):
            subprocess.run(["ip", "-n", self.nsc, "link", "del", dev], capture_output=True)
        for ns in list(self.namespaces):
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0:
                log(f"could not delete namespace {ns}: {r.stderr.strip()}")
        self.namespaces = []
        if self.a.keep_logs:
            log(f"logs kept in {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- topology ----
    def setup(self):
        C, S = self.nsc, self.nss
        for ns in (C, S):
            self.run(["ip", "netns", "add", ns])
            self.namespaces.append(ns)
            self.run(["ip", "-n", ns, "link", "set", "lo", "up"])
        self.run(["ip", "-n", C, "link", "add", "vc", "type", "veth", "peer", "name", "vs", "netns", S])
        self.run(["ip", "-n", C, "addr", "add", C_VETH + "/24", "dev", "vc"])
        self.run(["ip", "-n", S, "addr", "add", S_VETH + "/24", "dev", "vs"])
        self.run(["ip", "-n", C, "link", "set", "vc", "up"])
        self.run(["ip", "-n", S, "link", "set", "vs", "up"])
        self.run(["ip", "-n", S, "addr", "add", D4 + "/32", "dev", "lo"])
        for ns in (C, S):
            # 10,000 idle connections to one port plus the TIME_WAITs of the setup-rate loop.
            self.run(["sysctl", "-q", "-w", "net.ipv4.ip_local_port_range=10000 65000"], ns=ns)
            self.run(["sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1"], ns=ns)
            self.run(["sysctl", "-q", "-w", "net.ipv4.tcp_max_syn_backlog=8192"], ns=ns)
            self.run(["sysctl", "-q", "-w", "net.core.somaxconn=8192"], ns=ns)
        if self.a.server_cc:
            # The download's senders (iperf3's server, microsocks) live in S.
            self.run(["sysctl", "-q", "-w",
                      f"net.ipv4.tcp_congestion_control={self.a.server_cc}"], ns=S)
        self.route("kernel")
        self.start_servers()

    def route(self, arm):
        via = {"kernel": ["via", S_VETH, "dev", "vc"], "tun2proxy": ["dev", T2P_DEV]}.get(
            arm, ["dev", SHP_DEV])
        self.run(["ip", "-n", self.nsc, "route", "replace", D4 + "/32"] + via)

    def make_tun(self, arm):
        C = self.nsc
        if arm == "tun2proxy":
            r = self.run(["ip", "-n", C, "link", "show", T2P_DEV], check=False)
            if r.returncode != 0:
                self.run(["ip", "tuntap", "add", "mode", "tun", "name", T2P_DEV], ns=C)
                self.run(["ip", "-n", C, "addr", "add", T2P_NET, "dev", T2P_DEV])
                self.run(["sysctl", "-q", "-w", f"net.ipv6.conf.{T2P_DEV}.disable_ipv6=1"], ns=C,
                         check=False)
                self.run(["ip", "-n", C, "link", "set", T2P_DEV, "up"])
        elif arm in ("shallow", "shallow-nolowat"):
            r = self.run(["ip", "-n", C, "link", "show", SHP_DEV], check=False)
            if r.returncode != 0:
                self.run([self.shallow, "netns", "up", "--name", C, "--tun", SHP_DEV,
                          "--addr", SHP_NET, "--addr6", "none"])

    def start_servers(self):
        S = self.nss
        ms = ["microsocks", "-i", S_VETH, "-p", str(SOCKS_PORT)]
        if self.a.socks_user:
            ms += ["-u", self.a.socks_user, "-P", self.a.socks_pass]
        self.servers["microsocks"] = self.spawn("microsocks", ["ip", "netns", "exec", S] + ms)
        self.start_iperf_server()
        p = self.spawn("server", ["ip", "netns", "exec", S, sys.executable, SELF, "_server", D4,
                                  str(self.a.max_time + 60)],
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        line = self._readline(p, 10)
        if line.strip() != "ready":
            raise Failure(f"echo server did not start: {line!r}")
        self.servers["server"] = p
        self.wait_port(S, S_VETH, SOCKS_PORT)
        self.wait_port(S, D4, IPERF_PORT)
        self.socks_fds0 = self.status(self.servers["microsocks"].pid).get("fds", 0)

    def start_iperf_server(self):
        old = self.servers.get("iperf3")
        if old is not None:
            self.stop(old)
        self.servers["iperf3"] = self.spawn(
            "iperf3-server", ["ip", "netns", "exec", self.nss, "iperf3", "-s", "-B", D4,
                              "-p", str(IPERF_PORT), "--idle-timeout", "60"])
        self.wait_port(self.nss, D4, IPERF_PORT)

    def wait_port(self, ns, addr, port, secs=10):
        code = (f"import socket,sys\ntry:\n socket.create_connection(('{addr}',{port}),timeout=1)"
                f".close()\nexcept OSError: sys.exit(1)")
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if self.run([sys.executable, "-c", code], ns=ns, check=False, timeout=5).returncode == 0:
                return
            time.sleep(0.2)
        raise Failure(f"nothing listens on {addr}:{port} in {ns}")

    @staticmethod
    def _readline(p, secs):
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=secs):
            raise Failure("timed out waiting for a child's output")
        return p.stdout.readline()

    # ---- proxies ----
    def wait_socks_drain(self, secs=30):
        """Waits (bounded) until microsocks holds no relayed connection any more."""
        pid = self.servers["microsocks"].pid
        end = time.monotonic() + secs
        while time.monotonic() < end:
            if self.status(pid).get("fds", 0) <= self.socks_fds0 + 2:
                return
            time.sleep(0.25)
        log(f"  microsocks still holds {self.status(pid).get('fds')} descriptors after {secs} s")

    def start_proxy(self, arm, rep, phase="a"):
        C = self.nsc
        if arm == "tun2proxy":
            auth = ""
            if self.a.socks_user:
                auth = f"{self.a.socks_user}:{self.a.socks_pass}@"
            argv = [self.tun2proxy, "--tun", T2P_DEV, "--proxy",
                    f"socks5://{auth}{S_VETH}:{SOCKS_PORT}", "--tcp-mss", "1460",
                    "--max-sessions", str(self.idle_n + 20000), "-v", "warn"]
            argv += self.a.tun2proxy_arg
        else:
            argv = [self.shallow, "proxy", "--tun", SHP_DEV, "--netns", C, "--addr", SHP_SELF,
                    "--socks5", f"{S_VETH}:{SOCKS_PORT}"]
            if self.a.socks_user:
                argv += ["--socks-user", self.a.socks_user, "--socks-pass", self.a.socks_pass]
            if arm == "shallow-nolowat":
                argv += ["--notsent-lowat", "0"]
            argv += self.a.shallow_arg
        self.proxy_argv = ["ip", "netns", "exec", C] + argv
        name = self.proxy_name = f"{arm}-{rep}{phase}"
        p = self.spawn(name, self.proxy_argv)
        end = time.monotonic() + 15
        while time.monotonic() < end:
            if p.poll() is not None:
                raise Failure(f"{arm} exited with {p.returncode}: {self.log_tail(name)}")
            if self.run([sys.executable, SELF, "_probe", D4, "2"], ns=C, check=False,
                        timeout=10).returncode == 0:
                return p
            time.sleep(0.3)
        raise Failure(f"{arm} relays nothing after 15 s: {self.log_tail(name)}")

    def log_tail(self, name, lines=30):
        try:
            with open(os.path.join(self.tmp, name + ".log"), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    @staticmethod
    def cpu_s(pid):
        if pid is None:
            return None
        try:
            with open(f"/proc/{pid}/stat") as f:
                st = f.read()
        except OSError:
            return None
        fields = st[st.rindex(")") + 2:].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)

    @staticmethod
    def status(pid):
        out = {}
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k in ("VmRSS", "VmHWM", "Threads"):
                        out[k] = int(v.split()[0])
            out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            pass
        return out

    # ---- measurements ----
    def iperf(self, reverse, flows, secs):
        argv = ["iperf3", "-c", D4, "-p", str(IPERF_PORT), "-t", str(secs), "-J",
                "--connect-timeout", "5000", "-P", str(flows)]
        if reverse:
            argv.append("-R")
        r = self.run(argv, ns=self.nsc, timeout=secs + 30, check=False)
        try:
            j = json.loads(r.stdout)
        except ValueError:
            self.start_iperf_server()
            raise Failure(f"iperf3 gave no JSON (exit {r.returncode}): {r.stderr.strip()[-300:]}")
        if "error" in j:
            self.start_iperf_server()
            raise Failure(f"iperf3: {j['error']}")
        rcv = j["end"]["sum_received"]
        snt = j["end"].get("sum_sent", {})
        return {"gbps": rcv["bits_per_second"] / 1e9, "bytes": rcv["bytes"],
                "retransmits": snt.get("retransmits")}

    def measure(self, arm, rep):
        a = self.a
        res = {"arm": arm, "rep": rep, "m": {}, "errors": [], "detail": {}}
        m, det = res["m"], res["detail"]
        det["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
        pid = None
        if arm != "kernel":
            self.make_tun(arm)
        self.route(arm)
        if arm != "kernel":
            self.proxy = self.start_proxy(arm, rep)
            pid = self.proxy.pid
            det["proxy_argv"] = self.proxy_argv
            det["proxy_comm"] = open(f"/proc/{pid}/comm").read().strip()
        socks_pid = self.servers["microsocks"].pid

        def step(name, fn):
            if self.proxy is not None and self.proxy.poll() is not None:
                res["errors"].append(f"{name}: proxy is dead (exit {self.proxy.returncode})")
                return
            try:
                fn()
            except Exception as e:  # one failed measurement must not end the run
                e = e if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
                res["errors"].append(f"{name}: {e}")
                log(f"  {arm}#{rep} {name}: {e}")

        # Memory first, on a fresh proxy.
        def idle():
            st0 = self.status(pid)
            p = self.spawn("idle", ["ip", "netns", "exec", self.nsc, sys.executable, SELF, "_idle",
                                    D4, self.idle_n, a.idle_open_secs, 300],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            try:
                info = json.loads(self._readline(p, a.idle_open_secs + 30))
                time.sleep(1.0)
                st1 = self.status(pid)
                p.stdin.write("close\n")
                p.stdin.flush()
                self._readline(p, 60)
            finally:
                self.stop(p)
            time.sleep(1.0)
            st2 = self.status(pid)
            det["idle"] = {"client": info, "before": st0, "with_conns": st1, "after_close": st2}
            m["idle_opened"] = info["opened"]
            if info["errors"]:
                res["errors"].append(f"idle: {info['errors']} errors, first: {info['first_error']}")
            if info["opened"] and "VmRSS" in st0 and "VmRSS" in st1:
                m["rss_base_mib"] = st0["VmRSS"] / 1024
                m["rss_idle_mib"] = st1["VmRSS"] / 1024
                m["rss_per_conn_b"] = (st1["VmRSS"] - st0["VmRSS"]) * 1024 / info["opened"]

        if arm != "kernel" and self.idle_n > 0:
            step("idle", idle)
            # A fresh proxy for the rest: tun2proxy keeps a session (its upstream socket, a
            # microsocks thread with 2 descriptors) until --tcp-timeout after the client closed,
            # and 10,000 of them would exhaust microsocks' descriptors. Same for every arm.
            det["idle_proxy_log_tail"] = self.log_tail(self.proxy_name, 20)
            self.stop(self.proxy, signal.SIGINT, wait=10)
            self.wait_socks_drain()
            self.proxy = self.start_proxy(arm, rep, "b")
            pid = self.proxy.pid

        tot_bytes, tot_cpu, tot_socks = 0, 0.0, 0.0
        socks_dir = {"up": [0, 0.0], "down": [0, 0.0]}  # bytes, microsocks CPU seconds
        for reverse, flows in ((False, 1), (False, 4), (True, 1), (True, 4)):
            key = f"{'down' if reverse else 'up'}{flows}"

            def bulk():
                nonlocal tot_bytes, tot_cpu, tot_socks
                c0, s0 = self.cpu_s(pid), self.cpu_s(socks_pid)
                r = self.iperf(reverse, flows, a.time)
                c1, s1 = self.cpu_s(pid), self.cpu_s(socks_pid)
                m[f"{key}_gbps"] = r["gbps"]
                det[key] = r
                gb = r["bytes"] / 1e9
                if c0 is not None and c1 is not None and gb > 0:
                    m[f"cpu_{key}_s_per_gb"] = (c1 - c0) / gb
                    tot_cpu += c1 - c0
                    tot_bytes += r["bytes"]
                if s0 is not None and s1 is not None and gb > 0 and pid is not None:
                    det[key]["socks_cpu_s_per_gb"] = (s1 - s0) / gb
                    tot_socks += s1 - s0
                    sd = socks_dir["down" if reverse else "up"]
                    sd[0] += r["bytes"]
                    sd[1] += s1 - s0
            step(key, bulk)
        if tot_bytes and pid is not None:
            m["cpu_all_s_per_gb"] = tot_cpu / (tot_bytes / 1e9)
            det["socks_cpu_all_s_per_gb"] = tot_socks / (tot_bytes / 1e9)
            for d, (nb, cs) in socks_dir.items():
                if nb:
                    m[f"socks_cpu_{d}_s_per_gb"] = cs / (nb / 1e9)

        def rr():
            r = self.role(self.nsc, "_pingpong", D4, a.lat_time, timeout=a.lat_time + 30)
            det["rr"] = r
            m["rr_p50_us"], m["rr_p99_us"] = r["p50_us"], r["p99_us"]
            if r["errors"]:
                res["errors"].append(f"rr: {r['errors']}")
        step("rr", rr)

        def lul():
            load_secs = int(a.lat_time + 3)
            argv = ["ip", "netns", "exec", self.nsc, "iperf3", "-c", D4, "-p", str(IPERF_PORT),
                    "-t", str(load_secs), "-J", "-R", "-P", str(a.load_flows),
                    "--connect-timeout", "5000"]
            ip = self.spawn("load", argv, stdout=subprocess.PIPE)
            try:
                time.sleep(1.0)
                r = self.role(self.nsc, "_pingpong", D4, a.lat_time, timeout=a.lat_time + 30)
                out, _ = ip.communicate(timeout=load_secs + 30)
            finally:
                self.stop(ip)
            det["lul"] = r
            m["lul_p50_us"], m["lul_p99_us"] = r["p50_us"], r["p99_us"]
            if r["errors"]:
                res["errors"].append(f"lul: {r['errors']}")
            try:
                j = json.loads(out)
                if "error" in j:
                    raise ValueError(j["error"])
                m["lul_load_gbps"] = j["end"]["sum_received"]["bits_per_second"] / 1e9
            except (ValueError, KeyError) as e:
                self.start_iperf_server()
                res["errors"].append(f"lul: load iperf3: {e}")
        step("lul", lul)

        def cps():
            r = self.role(self.nsc, "_connrate", D4, a.lat_time, timeout=a.lat_time + 60)
            det["cps"] = r
            m["cps"] = r["rate"]
            if r["errors"]:
                res["errors"].append(f"cps: {r['errors']} errors, first: {r['first_error']}")
        step("cps", cps)

        if self.proxy is not None:
            alive = self.proxy.poll() is None
            self.stop(self.proxy, signal.SIGINT, wait=10)
            if not alive:
                res["errors"].append(f"proxy died (exit {self.proxy.returncode})")
            det["proxy_log_tail"] = self.log_tail(self.proxy_name, 40)
            self.proxy = None
            self.wait_socks_drain()
        det["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
        return res


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

# key, label, better ("high"/"low"/None), target: (kind, factor) vs tun2proxy
METRICS = [
    ("up1_gbps", "bulk up 1 flow, Gbit/s", "high", (">=", 1.0)),
    ("up4_gbps", "bulk up 4 flows, Gbit/s", "high", (">=", 1.0)),
    ("down1_gbps", "bulk down 1 flow, Gbit/s", "high", (">=", 1.0)),
    ("down4_gbps", "bulk down 4 flows, Gbit/s", "high", (">=", 1.0)),
    ("rr_p50_us", "ping-pong p50, us", "low", None),
    ("rr_p99_us", "ping-pong p99, us", "low", None),
    ("lul_p50_us", "ping-pong p50 under load, us", "low", ("<=", 0.5)),
    ("lul_p99_us", "ping-pong p99 under load, us", "low", ("<=", 0.5)),
    ("lul_load_gbps", "  (the load, Gbit/s)", "high", None),
    ("cps", "connections/s", "high", None),
    ("idle_opened", "idle connections opened", None, None),
    ("rss_base_mib", "proxy RSS before, MiB", "low", None),
    ("rss_idle_mib", "proxy RSS with idle conns, MiB", "low", None),
    ("rss_per_conn_b", "RSS per idle conn, bytes", "low", ("<=", 1.0)),
    ("cpu_up1_s_per_gb", "CPU s/GB up 1", "low", ("<=", 1.0)),
    ("cpu_up4_s_per_gb", "CPU s/GB up 4", "low", ("<=", 1.0)),
    ("cpu_down1_s_per_gb", "CPU s/GB down 1", "low", ("<=", 1.0)),
    ("cpu_down4_s_per_gb", "CPU s/GB down 4", "low", ("<=", 1.0)),
    ("cpu_all_s_per_gb", "CPU s/GB all bulk runs", "low", ("<=", 1.0)),
    ("socks_cpu_up_s_per_gb", "  (microsocks CPU s/GB up)", "low", None),
    ("socks_cpu_down_s_per_gb", "  (microsocks CPU s/GB down)", "low", None),
]
SHORT = {"kernel": "kern", "tun2proxy": "t2p", "shallow": "shal", "shallow-nolowat": "nolo"}


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    a = abs(v)
    if a >= 10000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def summarize(results, arms):
    med = {}
    for key, *_ in METRICS:
        med[key] = {}
        for arm in arms:
            vals = [r["m"][key] for r in results if r["arm"] == arm and r["m"].get(key) is not None]
            med[key][arm] = statistics.median(vals) if vals else None
    ratios, targets = {}, []
    for key, label, better, target in METRICS:
        ratios[key] = {}
        for num, den in (("shallow", "tun2proxy"), ("shallow", "kernel"),
                         ("shallow-nolowat", "tun2proxy"), ("shallow-nolowat", "kernel")):
            a, b = med[key].get(num), med[key].get(den)
            ratios[key][f"{num}/{den}"] = (a / b) if (a is not None and b) else None
        if target:
            kind, factor = target
            for arm in ("shallow", "shallow-nolowat"):
                x = ratios[key].get(f"{arm}/tun2proxy")
                ok = None if x is None else (x >= factor if kind == ">=" else x <= factor)
                targets.append({"metric": key, "arm": arm, "ratio": x,
                                "target": f"{kind} {factor}x tun2proxy", "holds": ok})
    return med, ratios, targets


def print_tables(results, arms, reps, med, ratios, targets, out=sys.stdout):
    cols = [(arm, r) for arm in arms for r in range(1, reps + 1)]
    by = {(r["arm"], r["rep"]): r for r in results}
    w0, w = 32, 9
    print("\nEvery repetition (arm#rep):", file=out)
    print(f"{'metric':<{w0}}" + "".join(f"{SHORT[a] + '#' + str(r):>{w}}" for a, r in cols), file=out)
    for key, label, *_ in METRICS:
        cells = []
        for c in cols:
            v = by.get(c, {}).get("m", {}).get(key)
            if v is None and c[0] == "kernel" and (key.startswith(("cpu", "socks")) or "rss" in key
                                                  or key == "idle_opened"):
                v = "n/a"
            cells.append(fmt(v))
        print(f"{label:<{w0}}" + "".join(f"{c:>{w}}" for c in cells), file=out)

    rcols = [k for k in ("shallow/tun2proxy", "shallow/kernel", "shallow-nolowat/tun2proxy")
             if k.split("/")[0] in arms and k.split("/")[1] in arms]
    rshort = {"shallow/tun2proxy": "shal/t2p", "shallow/kernel": "shal/kern",
              "shallow-nolowat/tun2proxy": "nolo/t2p"}
    print("\nMedians and ratios (target: vs tun2proxy's median):", file=out)
    print(f"{'metric':<{w0}}" + "".join(f"{SHORT[a]:>{w}}" for a in arms)
          + "".join(f"{rshort[k]:>{w + 1}}" for k in rcols) + "  target", file=out)
    tg = {(t["metric"], t["arm"]): t for t in targets}
    for key, label, better, target in METRICS:
        cells = []
        for arm in arms:
            v = med[key].get(arm)
            if v is None and arm == "kernel" and (key.startswith(("cpu", "socks")) or "rss" in key
                                                 or key == "idle_opened"):
                v = "n/a"
            cells.append(fmt(v))
        rc = [fmt(ratios[key].get(k)) + ("x" if ratios[key].get(k) is not None else "") for k in rcols]
        tcell = ""
        if target and "tun2proxy" in arms and any(x.startswith("shallow") for x in arms):
            kind, factor = target
            parts = []
            for arm in ("shallow", "shallow-nolowat"):
                t = tg.get((key, arm))
                if t and arm in arms and "tun2proxy" in arms:
                    mark = {True: "HOLDS", False: "MISSED", None: "?"}[t["holds"]]
                    parts.append(f"{SHORT[arm]} {mark}")
            tcell = f"{'≥' if kind == '>=' else '≤'}{factor}x t2p: " + ", ".join(parts)
        print(f"{label:<{w0}}" + "".join(f"{c:>{w}}" for c in cells)
              + "".join(f"{c:>{w + 1}}" for c in rc) + "  " + tcell, file=out)


# --------------------------------------------------------------------------------------------


def find_tun2proxy(given):
    for cand in ([given] if given else []) + [shutil.which("tun2proxy-bin"),
                                             "/tmp/t2p/bin/tun2proxy-bin"]:
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return os.path.abspath(cand)
    return None


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def version(argv):
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (r.stdout or r.stderr).strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ROLES:
        return ROLES[sys.argv[1]](sys.argv[2:])
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Builds client -> TUN -> proxy -> SOCKS5 "
        "(microsocks) -> server in network namespaces of its own and compares the kernel path, "
        "tun2proxy and `shallow proxy`. Needs root, ip, iperf3, microsocks and tun2proxy-bin "
        "(install it with `cargo install tun2proxy`).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--arms", default=",".join(ALL_ARMS),
                    help="comma-separated arms, run in this order: " + ",".join(ALL_ARMS))
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each arm")
    ap.add_argument("--order", choices=["rep", "arm"], default="rep",
                    help="rep: rep 1 of every arm, then rep 2, ... (drift hits all arms alike); "
                    "arm: all reps of an arm, then the next arm")
    ap.add_argument("--time", type=int, default=5, help="seconds of each iperf3 bulk run")
    ap.add_argument("--lat-time", type=float, default=5.0,
                    help="seconds of each ping-pong and of the connection-rate loop")
    ap.add_argument("--load-flows", type=int, default=1,
                    help="iperf3 -R flows of the load under which latency is measured")
    ap.add_argument("--idle-conns", type=int, default=10000,
                    help="idle connections for the memory measurement (0: skip)")
    ap.add_argument("--idle-open-secs", type=float, default=120.0,
                    help="time limit for opening the idle connections")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 rep, 2 s bulk runs, 2 s latency, 1000 idle connections")
    ap.add_argument("--shallow", default="/work/main/target/release/shallow",
                    help="path of the shallow binary (copied before the run)")
    ap.add_argument("--tun2proxy", default=None,
                    help="path of tun2proxy-bin (`cargo install tun2proxy`); default: "
                    "tun2proxy-bin on PATH, then /tmp/t2p/bin/tun2proxy-bin")
    ap.add_argument("--tun2proxy-arg", action="append", default=[],
                    help="extra argument for tun2proxy-bin (repeatable; use --tun2proxy-arg=--x)")
    ap.add_argument("--shallow-arg", action="append", default=[],
                    help="extra argument for `shallow proxy` (repeatable; use --shallow-arg=--x)")
    ap.add_argument("--server-cc", default=None,
                    help="congestion control of the server namespace's sockets (iperf3's server, "
                    "microsocks): e.g. cubic; default: the namespace's default (the host's)")
    ap.add_argument("--socks-user", default=None, help="SOCKS5 username (microsocks -u)")
    ap.add_argument("--socks-pass", default=None, help="SOCKS5 password (microsocks -P)")
    ap.add_argument("--json", default=None, help="write every result and the summary here")
    ap.add_argument("--max-time", type=int, default=3600,
                    help="the script stops (and cleans up) after this many seconds")
    ap.add_argument("--keep-logs", action="store_true",
                    help="keep the processes' logs (the temporary directory is printed)")
    a = ap.parse_args()
    if a.quick:
        a.reps, a.time, a.lat_time = 1, 2, 2.0
        a.idle_conns = min(a.idle_conns, 1000)
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    for arm in arms:
        if arm not in ALL_ARMS:
            ap.error(f"unknown arm {arm!r}")
    if bool(a.socks_user) != bool(a.socks_pass):
        ap.error("--socks-user and --socks-pass go together")
    if os.geteuid() != 0:
        ap.error("needs root (network namespaces, TUN devices)")
    for tool in ("ip", "iperf3", "microsocks", "sysctl"):
        if not shutil.which(tool):
            ap.error(f"{tool} not found")

    b = Bench(a)
    t2p = find_tun2proxy(a.tun2proxy)
    if "tun2proxy" in arms and not t2p:
        ap.error("tun2proxy-bin not found: `cargo install tun2proxy`, or --tun2proxy PATH")
    b.tun2proxy = t2p
    b.shallow = None
    if any(x.startswith("shallow") for x in arms):
        if not os.access(a.shallow, os.X_OK):
            ap.error(f"{a.shallow}: no shallow binary (`cargo build --release -p shallow`)")
        b.shallow = os.path.join(b.tmp, "shallow")
        shutil.copy2(a.shallow, b.shallow)

    # Descriptors: the client, the proxies and microsocks (2 per relayed connection) inherit this.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(hard, 1 << 20), max(hard, 1 << 20)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fit = (soft - 64) // 2
    if a.idle_conns > fit:
        b.notes.append(f"idle connections lowered from {a.idle_conns} to {fit}: RLIMIT_NOFILE is "
                       f"{soft} and cannot be raised (no CAP_SYS_RESOURCE); microsocks holds 2 "
                       f"descriptors per relayed connection")
        log(b.notes[-1])
        b.idle_n = fit

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(a.max_time)
    meta = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "kernel": platform.release(), "cpus": os.cpu_count(),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "argv": sys.argv, "arms": arms, "reps": a.reps, "time": a.time, "lat_time": a.lat_time,
        "load_flows": a.load_flows, "server_cc": a.server_cc, "idle_conns": b.idle_n, "rlimit_nofile": soft,
        "tun2proxy": t2p, "tun2proxy_version": version([t2p, "--version"]) if t2p else None,
        "shallow": a.shallow,
        "shallow_mtime": (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(a.shallow)))
                          if b.shallow else None),
        "shallow_sha256": file_sha256(b.shallow) if b.shallow else None,
        "shallow_version": version([b.shallow, "--version"]) if b.shallow else None,
        "iperf3_version": version(["iperf3", "--version"]),
        "namespaces": [b.nsc, b.nss],
    }
    results = []
    status = 0
    try:
        log(f"namespaces {b.nsc} (client) and {b.nss} (server); logs in {b.tmp}")
        b.setup()
        plan = ([(arm, r) for r in range(1, a.reps + 1) for arm in arms] if a.order == "rep"
                else [(arm, r) for arm in arms for r in range(1, a.reps + 1)])
        for arm, rep in plan:
            log(f"{arm} #{rep}")
            try:
                res = b.measure(arm, rep)
            except Exception as e:  # this arm's repetition is lost, the run goes on
                e = e if isinstance(e, Failure) else f"{type(e).__name__}: {e}"
                log(f"  {arm}#{rep} failed: {e}")
                res = {"arm": arm, "rep": rep, "m": {}, "errors": [str(e)], "detail": {}}
                if b.proxy is not None:
                    b.stop(b.proxy, signal.SIGINT, wait=10)
                    b.proxy = None
            results.append(res)
            short = ", ".join(f"{k}={fmt(v)}" for k, v in res["m"].items())
            log(f"  {short}")
            for e in res["errors"]:
                log(f"  error: {e}")
    except (KeyboardInterrupt, SystemExit) as e:
        status = 130 if isinstance(e, KeyboardInterrupt) else e.code
        log(f"stopped (exit status {status}); the results so far follow")
    except Failure as e:
        status = 1
        log(f"set-up failed: {e}")
    finally:
        signal.alarm(0)
        b.cleanup()
    med, ratios, targets = summarize(results, arms)
    print(f"proxy-bench {meta['date']}  kernel {meta['kernel']}  {meta['cpus']} CPUs  "
          f"load {' '.join(meta['loadavg_start'])}")
    print(f"tun2proxy: {meta['tun2proxy_version']}   shallow: {meta['shallow_version']} "
          f"(built {meta['shallow_mtime']}, sha256 {(meta['shallow_sha256'] or '-')[:12]})")
    print(f"bulk {a.time} s, ping-pong/conn-rate {a.lat_time} s, load {a.load_flows} flow(s) "
          f"iperf3 -R, {b.idle_n} idle connections, {a.reps} rep(s), order by {a.order}, "
          f"server cc {a.server_cc or 'default'}")
    print_tables(results, arms, a.reps, med, ratios, targets)
    errs = [(r["arm"], r["rep"], e) for r in results for e in r["errors"]]
    if errs:
        print("\nErrors:")
        for arm, rep, e in errs:
            print(f"  {arm}#{rep}: {e}")
    for n in b.notes:
        print(f"Note: {n}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "notes": b.notes, "results": results, "medians": med,
                       "ratios": ratios, "targets": targets}, f, indent=1)
        print(f"JSON: {a.json}")
    return status


if __name__ == "__main__":
    sys.exit(main())
