"""The sync SDK inside one running sandbox (the farm's kept baseline): exec
streaming, files (a 10 MB round trip), a terminal session, processes, ports,
network policy, events, lifecycle. No boot of its own."""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from harness import GIT_HOST

import zeish


def test_exec_streams_output_as_it_comes(sbx: zeish.Sandbox) -> None:
    # The command prints, then waits for a file the test writes only once it
    # has that first line: output held back until the end would never come.
    if sbx.files.exists("/tmp/py-go"):
        sbx.files.remove("/tmp/py-go")
    cmd = "echo line1; while [ ! -e /tmp/py-go ]; do sleep 0.1; done; echo line2; echo oops >&2; exit 3"
    with sbx.exec(cmd, timeout=120) as ex:
        assert ex.result is None
        chunks = iter(ex)
        first = next(chunks)
        assert (first.stream, first.text) == ("stdout", "line1\n")
        sbx.files.write("/tmp/py-go", "")
        rest = list(chunks)
    assert "".join(c.text for c in rest if c.stream == "stdout") == "line2\n"
    assert "".join(c.text for c in rest if c.stream == "stderr") == "oops\n"
    assert ex.result is not None and ex.exit_code == 3
    assert (ex.result.stdout, ex.result.stderr, ex.result.timed_out) == ("line1\nline2\n", "oops\n", False)
    sbx.files.remove("/tmp/py-go")


def test_run_stdin_env_cwd_user_timeout(sbx: zeish.Sandbox) -> None:
    seen: list[str] = []
    r = sbx.run("echo $EXTRA-$(pwd)", env={"EXTRA": "x"}, cwd="/tmp", on_output=lambda c: seen.append(c.text))
    assert (r.exit_code, r.stdout, seen) == (0, "x-/tmp\n", ["x-/tmp\n"])
    r = sbx.run(["cat"], stdin=b"piped\x00bytes")
    assert r.stdout_bytes == b"piped\x00bytes"
    assert sbx.run(["id", "-un"], user="user").stdout == "user\n"
    slow = sbx.run(["sleep", "30"], timeout=1)
    assert slow.timed_out and slow.exit_code != 0
    with pytest.raises(zeish.CommandError) as ei:
        sbx.run("echo nope >&2; exit 4", check=True)
    assert ei.value.result.exit_code == 4 and "nope" in str(ei.value)
    with pytest.raises(zeish.NotFoundError) as nf:
        sbx.run(["/no/such/binary"])
    assert nf.value.code == "file_not_found" and nf.value.status == 404 and nf.value.request_id


def _sleepers(sbx: zeish.Sandbox, mark: str, want: bool | None = None) -> list[int]:
    """The pids of `sleep MARK`; with want, first waits (bounded) until there are some (True) or none (False)."""
    for _ in range(120 if want is not None else 1):
        pids = [p["pid"] for p in sbx.processes.list() if p["argv"][:2] == ["sleep", mark]]
        if want is None or bool(pids) == want:
            break
        time.sleep(0.5)
    return pids


def test_exec_kill_stops_the_command(sbx: zeish.Sandbox) -> None:
    with sbx.exec("echo started; exec sleep 301") as ex:
        first = next(iter(ex))  # a temporary iterator: dropping it leaves the command running
        assert first.text == "started\n"
        assert _sleepers(sbx, "301", want=True), "the command runs"
        ex.kill()
    assert ex.result is None
    with pytest.raises(zeish.ServerError):
        ex.wait()  # killed: it has no result
    assert not _sleepers(sbx, "301", want=False), "the guest killed it when the stream closed"
    # processes.kill: a signal to any process.
    sbx.run("setsid sleep 302 >/dev/null 2>&1 < /dev/null &")
    (pid,) = _sleepers(sbx, "302", want=True)
    sbx.processes.kill(pid, "TERM")
    assert not _sleepers(sbx, "302", want=False)
    with pytest.raises(zeish.NotFoundError):
        sbx.processes.kill(999999)


def test_files_10mb_round_trip(sbx: zeish.Sandbox, tmp_path: Path) -> None:
    size = 10 * 1024 * 1024
    data = os.urandom(size)
    chunks = [data[i : i + (1 << 20)] for i in range(0, size, 1 << 20)]

    def stream() -> Iterator[bytes]:
        yield from chunks  # an iterable: uploaded as it yields, not buffered

    sbx.files.mkdir("/root/py/deep", parents=True)
    info = sbx.files.write("/root/py/big.bin", stream(), mode=0o600)
    assert (info["size"], info["perm"], info["is_dir"]) == (size, 0o600, False)
    got = hashlib.sha256()
    n = pieces = 0
    with sbx.files.stream("/root/py/big.bin") as reader:
        assert reader.size == size
        for piece in reader:
            got.update(piece)
            n += len(piece)
            pieces += 1
    assert n == size and pieces > 1 and got.digest() == hashlib.sha256(data).digest()
    assert sbx.run(["sha256sum", "/root/py/big.bin"]).stdout.split()[0] == hashlib.sha256(data).hexdigest()
    local = tmp_path / "big.bin"
    assert sbx.files.download("/root/py/big.bin", local) == size and local.read_bytes() == data
    sbx.files.upload(local, "/root/py/copy.bin")
    assert sbx.files.read("/root/py/copy.bin") == data

    sbx.files.write("/root/py/note.txt", "héllo\n")
    assert sbx.files.read_text("/root/py/note.txt") == "héllo\n"
    assert sorted(f["name"] for f in sbx.files.list("/root/py")) == ["big.bin", "copy.bin", "deep", "note.txt"]
    assert sbx.files.stat("/root/py/deep")["is_dir"]
    with pytest.raises(zeish.ConflictError) as ei:
        sbx.files.mkdir("/root/py/deep")
    assert ei.value.code == "file_exists"
    with pytest.raises(zeish.NotFoundError) as nf:
        sbx.files.read("/root/py/missing")
    assert nf.value.code == "file_not_found"
    sbx.files.remove("/root/py", recursive=True)
    assert not sbx.files.exists("/root/py")


def test_terminal_session(sbx: zeish.Sandbox) -> None:
    with sbx.terminal(24, 80, env={"PS1": "$ "}) as t:
        assert t.pid > 1
        t.write("stty size\n")
        t.expect("24 80")
        t.resize(40, 120)
        t.write("stty size\n")
        t.expect("40 120")
        t.write("sh -c 'echo sleeping; exec sleep 300'\n")
        t.expect("sleeping\r\n")
        t.write("\x03")  # Ctrl-C interrupts the foreground job
        t.write("echo rc=$?\n")
        t.expect("rc=130")
        t.signal("BOGUS")
        t.write("echo mark-$((6*7))\n")
        t.expect("mark-42")
        assert [e.code for e in t.refused] == ["invalid_argument"]
        with pytest.raises(zeish.InvalidArgumentError):
            t.resize(0, 0)
        pid = t.pid
    # Closing only detached: the shell is still there, and attaching replays its output.
    assert [(x["pid"], x["exited"]) for x in sbx.terminals() if x["pid"] == pid] == [(pid, False)]
    with sbx.attach_terminal(pid, rows=30, cols=90) as again:
        again.expect("mark-42")
        again.write("stty size; exit 6\n")
        again.expect("30 90")
        assert again.wait(timeout=60)["exit_code"] == 6
        assert again.read() == b""
    with pytest.raises(zeish.InvalidArgumentError):
        sbx.terminal(0, 0)
    with pytest.raises(zeish.ZeishError) as ei:
        sbx.terminal(24, 80, user="no-such-user")
    assert ei.value.status in (400, 404)


def test_ports_and_network_policy(sbx: zeish.Sandbox) -> None:
    sbx.run("setsid python3 -m http.server 8765 --directory /tmp >/dev/null 2>&1 < /dev/null &")
    port = None
    for _ in range(120):
        port = next((p for p in sbx.ports() if p["port"] == 8765 and p["listening"]), None)
        if port:
            break
        time.sleep(0.5)
    assert port is not None, sbx.ports()
    token = sbx.access()["token"]
    try:
        assert httpx.get(port["url"], headers={"authorization": f"Bearer {token}"}, timeout=60).status_code == 200
        assert httpx.get(port["url"], timeout=60).status_code == 401
        opened = sbx.set_port(8765, True)
        assert opened["public"] and httpx.get(opened["url"], timeout=60).status_code == 200
        assert sbx.set_port(8765, False)["public"] is False
        assert httpx.get(port["url"], timeout=60).status_code == 401
    finally:
        for p in sbx.processes.list():
            if p["argv"][:3] == ["python3", "-m", "http.server"]:
                sbx.processes.kill(p["pid"])

    before = sbx.info["network"]
    assert before["egress"] == "deny" and before["allow"] == [GIT_HOST]  # as the farm created it
    after = sbx.set_network(allow=[GIT_HOST, "*.example.test"], deny=["203.0.113.0/24"])
    assert (after["network"]["allow"], after["network"]["deny"]) == ([GIT_HOST, "*.example.test"], ["203.0.113.0/24"])
    with pytest.raises(zeish.InvalidArgumentError):
        sbx.set_network(allow=["not a rule!"])
    assert sbx.refresh()["network"]["allow"] == [GIT_HOST, "*.example.test"], "a refused change changes nothing"
    sbx.set_network(allow=before["allow"], deny=[])
    assert sbx.refresh()["network"]["deny"] == []


def test_events_access_git_and_features(sbx: zeish.Sandbox) -> None:
    with contextlib.closing(sbx.events()) as events:
        first = next(events)
    assert first["type"] == "state" and first["sandbox"]["id"] == sbx.id and first["sandbox"]["state"] == "running"
    acc = sbx.access()
    assert acc["url"].endswith(f"/data/v1/sandboxes/{sbx.id}") and acc["token"].startswith("zdp_")
    git = sbx.git_status()
    assert git["branch"] == "main" and len(git["head"]) == 40 and not git["detached"]
    # A sandbox of a template without a browser or desktop: the calls answer with their codes.
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        sbx.browser()
    assert ei.value.code == "invalid_argument" and "browser" in ei.value.message
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        sbx.desktop.status()
    assert ei.value.code == "desktop_not_enabled"
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        sbx.desktop.screenshot()
    assert ei.value.code == "desktop_not_enabled"
    info = sbx.set_timeout(3600, "pause")
    assert info.get("timeout_at") and info.get("on_timeout") == "pause"
    assert "timeout_at" not in sbx.set_timeout(0)


def test_lifecycle(sbx: zeish.Sandbox) -> None:
    sbx.files.write("/root/alive.txt", "kept\n")
    assert sbx.pause()["state"] == "paused"
    with pytest.raises(zeish.ConflictError) as ei:
        sbx.run("true")
    assert ei.value.code == "invalid_state"
    assert sbx.resume()["state"] == "running"
    assert sbx.stop()["state"] == "stopped"
    with pytest.raises(zeish.ConflictError):
        sbx.pause()
    assert sbx.start()["state"] == "running"
    assert sbx.files.read_text("/root/alive.txt") == "kept\n"  # memory and disk kept across stop/start
    sbx.files.remove("/root/alive.txt")
