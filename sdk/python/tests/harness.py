"""A real zeishd for the tests and the farm bench: bin/zeishd (``make build``)
on a temp data dir, with the template cache the Go tests fill.

As root (always, in CI) zeishd runs in a network namespace of the test's own
whose only way out is a veth to a second, empty namespace, the lab's
"internet" (198.18.0.0/15, the benchmarking range): its guests get real
network cards, and nothing they do reaches the machine's real network. A git
daemon serves repositories there, and the test reaches zeishd through a
loopback port relayed into the namespace. :meth:`Harness.stop` deletes every
sandbox, stops zeishd and the git daemon, kills any VM process left, and
removes the namespaces, /dev/shm files and the temp dir.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

SDK = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(SDK))

import zeish  # noqa: E402

REPO = SDK.parent.parent
#: The lab's "internet": its gateway, and the git server's address on it.
GATEWAY = "198.18.0.1"
GIT_HOST = "198.18.7.7"
CLONE_NEWNET = 0x40000000


def cache_dir() -> Path:
    return Path(os.environ.get("ZEISH_TEST_CACHE", "/var/tmp/zeish-test-cache"))


def vm_skip_reason() -> str | None:
    """Why VM tests cannot run here, or None. Under CI a missing tool is an error, never a skip."""
    missing = [t for t in ("qemu-system-x86_64", "qemu-img") if shutil.which(t) is None]
    why = None
    if missing:
        why = f"{', '.join(missing)} not found (apt-get install qemu-system-x86 qemu-utils)"
    elif os.geteuid() != 0:
        why = "the suite's zeishd runs in network namespaces of its own, which needs root"
    if why and os.environ.get("CI"):
        raise RuntimeError(f"CI is set, refusing to skip VM tests: {why}")
    return why


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")


def dial_in(netns: str, host: str, port: int) -> socket.socket:
    """A TCP connection made from inside a network namespace (a socket keeps
    the namespace it was made in; setns applies to the calling thread only,
    so it runs in a thread of its own)."""
    out: dict[str, Any] = {}

    def run() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns")
            out["sock"] = socket.create_connection((host, port), timeout=10)
        except BaseException as e:  # handed to the caller
            out["err"] = e
        finally:
            os.close(fd)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if "err" in out:
        raise out["err"]
    sock: socket.socket = out["sock"]
    sock.settimeout(None)
    return sock


class Lab:
    """Two namespaces joined by a veth: Node (zeishd's) and Inet (its internet)."""

    def __init__(self) -> None:
        tag = secrets.token_hex(3)
        self.node, self.inet = f"zpy-{tag}-n", f"zpy-{tag}-i"
        self.uplink, peer = f"zpv{tag}n", f"zpv{tag}i"
        steps = [
            ["netns", "add", self.node],
            ["netns", "add", self.inet],
            ["link", "add", self.uplink, "netns", self.node, "type", "veth", "peer", "name", peer, "netns", self.inet],
            ["-n", self.node, "link", "set", "lo", "up"],
            ["-n", self.inet, "link", "set", "lo", "up"],
            ["-n", self.node, "addr", "add", "198.18.0.2/24", "dev", self.uplink],
            ["-n", self.inet, "addr", "add", f"{GATEWAY}/24", "dev", peer],
            ["-n", self.inet, "addr", "add", f"{GIT_HOST}/32", "dev", "lo"],
            ["-n", self.node, "link", "set", self.uplink, "up"],
            ["-n", self.inet, "link", "set", peer, "up"],
            ["-n", self.node, "route", "add", "default", "via", GATEWAY],
        ]
        try:
            for s in steps:
                _ip(*s)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        # Deleting a namespace deletes its end of the veth pair, and so the pair.
        for ns in (self.node, self.inet):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


class Relay:
    """A loopback port of the host whose connections lead to addr inside netns."""

    def __init__(self, netns: str, host: str, port: int) -> None:
        self._ln = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._ln.getsockname()[1]
        self._target = (netns, host, port)
        self._closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                c, _ = self._ln.accept()
            except OSError:
                return
            threading.Thread(target=self._pair, args=(c,), daemon=True).start()

    def _pair(self, c: socket.socket) -> None:
        try:
            up = dial_in(*self._target)
        except OSError:
            c.close()
            return

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        t = threading.Thread(target=pump, args=(up, c), daemon=True)
        t.start()
        pump(c, up)
        t.join()
        c.close()
        up.close()

    def close(self) -> None:
        self._closed = True
        self._ln.close()


class Harness:
    """One zeishd (and a git daemon in its lab) for a whole test session."""

    def __init__(self) -> None:
        for b in ("zeishd", "sandboxd"):
            if not (REPO / "bin" / b).exists():
                raise RuntimeError(f"{REPO / 'bin' / b} is missing: run `make build` first")
        self.failed = False
        self.data_dir = Path(tempfile.mkdtemp(prefix="zeish-py-test-"))
        self.git_root = self.data_dir / "git"
        self.git_root.mkdir()
        self._log_path = self.data_dir / "zeishd.log"
        self._procs: list[subprocess.Popen[bytes]] = []
        self._seen: set[str] = set()
        self.lab: Lab | None = None
        self.relay: Relay | None = None
        try:
            self._start()
        except BaseException:
            self.failed = True
            self.stop()
            raise

    def _start(self) -> None:
        self.lab = Lab()
        inside_port = 7420
        self.relay = Relay(self.lab.node, "127.0.0.1", inside_port)
        self.base = f"http://127.0.0.1:{self.relay.port}"
        self.api_url = self.base + "/api/v1"
        env = dict(os.environ)
        env.update(
            ZEISH_DATA_DIR=str(self.data_dir / "zeish"),
            ZEISH_LISTEN=f"127.0.0.1:{inside_port}",
            ZEISH_PUBLIC_URL=self.base,
            ZEISH_NET="on",
            ZEISH_UPLINK=self.lab.uplink,
            ZEISH_DNS_UPSTREAM=f"{GATEWAY}:53",
            ZEISH_NET_CIDR="10.214.0.0/24",
            # The lab's internet is in the benchmarking range, blocked by default.
            ZEISH_NET_ALLOW_RANGES="198.18.0.0/15",
            ZEISH_SANDBOXD=str(REPO / "bin" / "sandboxd"),
            ZEISH_TEMPLATE_CACHE=str(cache_dir() / "templates"),
            # The debian template (git, python3) from the cache the Go tests
            # fill (`make test-python` runs template's TestBuildDebian first):
            # zeishd cannot build it from inside its namespace.
            ZEISH_DEBIAN_TEMPLATE="on",
            ZEISH_LOG_LEVEL="debug",
        )
        log = open(self._log_path, "wb")
        self._log_file: IO[bytes] = log
        self._spawn(["nsenter", f"--net=/run/netns/{self.lab.node}", str(REPO / "bin" / "zeishd")], env, log)
        self._spawn(
            ["nsenter", f"--net=/run/netns/{self.lab.inet}", "git", "daemon", "--reuseaddr", "--export-all",
             f"--base-path={self.git_root}", f"--listen={GIT_HOST}", "--port=9418", str(self.git_root)],
            dict(os.environ, GIT_CONFIG_NOSYSTEM="1", HOME=str(self.data_dir)),
            log,
        )
        deadline = time.monotonic() + 60
        while True:
            if self._procs[0].poll() is not None:
                raise RuntimeError(f"zeishd exited at start:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.relay.port), timeout=5) as s:
                    s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
                    if b" 200 " in s.recv(200):
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"zeishd did not answer /healthz within 60s:\n{self.log()}")
            time.sleep(0.1)
        self.api_key = (self.data_dir / "zeish" / "admin.key").read_text().strip()
        self.client = zeish.Zeish(self.api_url, self.api_key)

    def _spawn(self, argv: list[str], env: dict[str, str], log: IO[bytes]) -> None:
        self._procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def git_url(self, name: str) -> str:
        """The URL guests clone repository name (a bare repo under git_root) from."""
        return f"git://{GIT_HOST}/{name}"

    def client_env(self) -> dict[str, str]:
        """Environment for a child process (an example program) to reach this server."""
        return dict(os.environ, ZEISH_API_URL=self.api_url, ZEISH_API_KEY=self.api_key)

    def log(self, tail: int = 8000) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-tail:]

    def delete_all(self) -> list[str]:
        """Deletes every sandbox of the admin account; returns the ids it found."""
        ids: list[str] = []
        try:
            sandboxes = self.client.sandboxes.list()
        except zeish.ZeishError as e:
            print(f"harness: listing sandboxes: {e}", file=sys.stderr)
            return ids
        for sb in sandboxes:
            ids.append(sb.id)
            self._seen.add(sb.id)
            try:
                sb.delete(wait_timeout=120)
            except zeish.ZeishError as e:
                print(f"harness: deleting {sb.id}: {e}", file=sys.stderr)
        return ids

    def stop(self) -> None:
        """Deletes every sandbox, stops zeishd and the git daemon, removes what they left. Safe twice."""
        if self._procs and self._procs[0].poll() is None and hasattr(self, "client"):
            self.delete_all()
            self.client.close()
        if self.failed:
            print(f"zeishd log:\n{self.log()}", file=sys.stderr)
        for p in self._procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self._procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                print(f"harness: {p.args!r} did not exit within 30s of SIGTERM; killing it", file=sys.stderr)
                p.kill()
                p.wait()
        self._procs = []
        if self.relay:
            self.relay.close()
        self._sweep()
        if self.lab:
            self.lab.close()
            self.lab = None
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def _sweep(self) -> None:
        """Kills VM processes of this data dir and removes their RAM files."""
        mark = str(self.data_dir) + "/"
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode("latin-1")
            except OSError:
                continue
            if mark in cmdline:
                print(f"harness: VM process {pid} left behind; killing it", file=sys.stderr)
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
        ids = set(self._seen)
        for sub in ("sandboxes", "images"):
            try:
                ids.update(os.listdir(self.data_dir / "zeish" / sub))
            except OSError:
                pass
        try:
            shm = os.listdir("/dev/shm")
        except OSError:
            shm = []
        for f in shm:
            if any(f.startswith(f"zeish-{i}-") or f == f"zeish-img-{i}.mem" for i in ids):
                print(f"harness: RAM file /dev/shm/{f} left behind; removing it", file=sys.stderr)
                try:
                    os.remove(f"/dev/shm/{f}")
                except OSError:
                    pass
