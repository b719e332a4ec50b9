"""Unit tests without VMs: the wire handling, the WebSocket codec, error
mapping, configuration, the sync/async parity, and the calls' shapes against
an in-process fake server."""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from harness import SDK

import zeish
from zeish import _ws
from zeish._config import api_key_from_env, api_url_from_env
from zeish._wire import ExecDecoder, SSEParser, exec_request, file_mode, term_query, time_param
from zeish.errors import error_class, error_from_response
from zeish.schema import ERROR_CODES, ERROR_STATUS


def test_generated_files_are_current() -> None:
    for tool in ("gen_schema.py", "gen_sync.py"):
        r = subprocess.run([sys.executable, str(SDK / "tools" / tool), "--check"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("code", ERROR_CODES)
def test_every_error_code_has_the_class_of_its_status(code: str) -> None:
    want = {
        400: zeish.InvalidArgumentError, 401: zeish.AuthenticationError, 403: zeish.AuthenticationError,
        404: zeish.NotFoundError, 409: zeish.ConflictError, 429: zeish.RateLimitError, 500: zeish.ServerError,
    }.get(ERROR_STATUS[code], zeish.ServerError)
    if code == "timeout":
        want = zeish.ZeishTimeoutError
    assert error_class(code) is want


def test_error_envelope() -> None:
    body = json.dumps({"error": {"code": "rate_limited", "message": "slow down", "request_id": "req-1"}}).encode()
    e = error_from_response(429, {"retry-after": "7", "x-request-id": "hdr"}, body)
    assert isinstance(e, zeish.RateLimitError)
    assert (e.status, e.code, e.message, e.request_id, e.retry_after) == (429, "rate_limited", "slow down", "req-1", 7)
    assert "req-1" in str(e)
    # Not an envelope (a proxy's page): the status's code, the text, the header's id.
    e = error_from_response(502, {"x-request-id": "hdr"}, b"<html>bad gateway</html>", "Bad Gateway")
    assert (type(e), e.code, e.request_id) == (zeish.ServerError, "unavailable", "hdr")
    e = error_from_response(404, {}, json.dumps({"error": {"code": "made_up", "message": "m"}}).encode())
    assert (type(e), e.code) == (zeish.NotFoundError, "not_found")


def test_sandbox_state_error_carries_the_sandboxs_error() -> None:
    e = zeish.SandboxStateError.of(
        {"id": "sbx_1", "state": "error", "error_code": "git_clone_failed", "error_message": "fatal: no repo"}, "running"
    )
    assert isinstance(e, zeish.ConflictError)
    assert (e.sandbox_id, e.state, e.error_code, e.error_message) == ("sbx_1", "error", "git_clone_failed", "fatal: no repo")
    assert "git_clone_failed: fatal: no repo" in str(e)


def test_config_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ZEISH_API_KEY", raising=False)
    monkeypatch.delenv("ZEISH_API_URL", raising=False)
    monkeypatch.setenv("ZEISH_DATA_DIR", str(tmp_path))
    assert api_key_from_env() is None
    assert api_url_from_env() == "http://127.0.0.1:7420/api/v1"
    (tmp_path / "admin.key").write_text("zk_fromfile\n")
    assert api_key_from_env() == "zk_fromfile"
    assert zeish.admin_key_path() == tmp_path / "admin.key"
    monkeypatch.setenv("ZEISH_API_KEY", " zk_env ")
    monkeypatch.setenv("ZEISH_API_URL", "http://h:1/api/v1/")
    assert (api_key_from_env(), api_url_from_env()) == ("zk_env", "http://h:1/api/v1")
    with zeish.Zeish() as z:
        assert (z.api_url, z._t.api_key, z.server_url) == ("http://h:1/api/v1", "zk_env", "http://h:1")


def test_exec_decoder() -> None:
    d = ExecDecoder()
    snow = "❄".encode()  # three bytes, split across two events
    line = lambda typ, data: json.dumps({"type": typ, "data": base64.b64encode(data).decode()})  # noqa: E731
    c1 = d.line(line("stdout", b"a" + snow[:1]))
    c2 = d.line(line("stderr", b"oops"))
    c3 = d.line(line("stdout", snow[1:] + b"\n"))
    assert d.line("") is None
    assert [c.text for c in (c1, c2, c3) if c] == ["a", "oops", "❄\n"]
    assert d.line(json.dumps({"type": "exit", "result": {"exit_code": 3, "timed_out": False, "pid": 9, "duration_ms": 1}})) is None
    r = d.result
    assert r is not None and (r.exit_code, r.stdout, r.stderr, r.pid, r.ok) == (3, "a❄\n", "oops", 9, False)
    with pytest.raises(zeish.CommandError, match="exit 3"):
        r.check()
    with pytest.raises(zeish.ServerError) as ei:
        ExecDecoder().line(json.dumps({"type": "error", "error": {"code": "unavailable", "message": "agent gone", "request_id": "r"}}))
    assert (ei.value.code, ei.value.request_id) == ("unavailable", "r")
    assert ExecDecoder().line(json.dumps({"type": "progress"})) is None  # newer event types are skipped


def test_request_shapes() -> None:
    assert exec_request("echo hi", stdin="x", env={"A": "1"}, cwd="/tmp", user=None, timeout=5) == {
        "argv": ["sh", "-c", "echo hi"], "env": {"A": "1"}, "cwd": "/tmp", "stdin": "eA==", "timeout_seconds": 5,
    }
    assert exec_request(["ls"], stdin=None, env=None, cwd=None, user="user", timeout=None) == {"argv": ["ls"], "user": "user"}
    assert (file_mode(0o755), file_mode("600"), file_mode(None)) == ("0755", "600", None)
    assert time_param(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05+00:00"
    assert term_query(24, 80, argv=["bash", "-l"], env={"A": "b"}, cwd="/", user="user") == [
        ("rows", "24"), ("cols", "80"), ("argv", "bash"), ("argv", "-l"), ("env", "A=b"), ("cwd", "/"), ("user", "user"),
    ]
    for rows, cols in ((0, 80), (24, 1001), (True, 80)):
        with pytest.raises(zeish.InvalidArgumentError):
            term_query(rows, cols)


def test_sse_parser() -> None:
    p = SSEParser()
    got = [p.line(x) for x in ["event: state", 'data: {"a":', "data: 1}", "", ": comment", ""]]
    assert got == [None, None, None, {"a": 1}, None, None]
    # Lines as httpx 0.23 hands them out: with their endings.
    got = [p.line(x) for x in ["event: state\n", 'data: {"b": 2}\r\n', "\n"]]
    assert got == [None, None, {"b": 2}]


def test_websocket_frames() -> None:
    for size in (0, 5, 125, 126, 65535, 65536, 70000):
        payload = os.urandom(size)
        f = _ws.frame(_ws.OP_BINARY, payload)
        h = _ws.parse_header(f[: _ws.header_size(f[:2])])
        assert (h.fin, h.opcode, h.length, h.mask is not None) == (True, _ws.OP_BINARY, size, True)
        assert _ws.unmask(f[_ws.header_size(f[:2]):], h.mask) == payload
    f = _ws.close_frame(1000, "bye")
    assert _ws.close_info(_ws.unmask(f[6:], f[2:6])) == (1000, "bye")
    t = _ws.Target.of("http://127.0.0.1:7420/data/v1/sandboxes/x/terminals/connect?rows=1&cols=2")
    assert (t.host, t.port, t.tls, t.resource, t.host_header) == ("127.0.0.1", 7420, False, "/data/v1/sandboxes/x/terminals/connect?rows=1&cols=2", "127.0.0.1:7420")
    assert _ws.Target.of("wss://h/x").port == 443
    req, key = _ws.handshake(t, {"Authorization": "Bearer t"})
    assert b"Sec-WebSocket-Key: " + key.encode() in req and req.endswith(b"\r\n\r\n")
    with pytest.raises(zeish.ZeishError):
        _ws.check_accept({"upgrade": "websocket", "sec-websocket-accept": "wrong"}, key)


def _public(cls: type) -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(getattr(cls, n))
        for n in dir(cls)
        if (not n.startswith("_") or n in ("__enter__", "__aenter__", "__exit__", "__aexit__", "__iter__", "__aiter__"))
        and callable(getattr(cls, n))
    }


PAIRS = [
    (zeish.Zeish, zeish.AsyncZeish), (zeish.Sandboxes, zeish.AsyncSandboxes), (zeish.Sandbox, zeish.AsyncSandbox),
    (zeish.Files, zeish.AsyncFiles), (zeish.Processes, zeish.AsyncProcesses), (zeish.Snapshots, zeish.AsyncSnapshots),
    (zeish.Snapshot, zeish.AsyncSnapshot), (zeish.CloneResult, zeish.AsyncCloneResult), (zeish.Execution, zeish.AsyncExecution),
    (zeish.Terminal, zeish.AsyncTerminal), (zeish.Desktop, zeish.AsyncDesktop), (zeish.Templates, zeish.AsyncTemplates),
    (zeish.Template, zeish.AsyncTemplate), (zeish.Secrets, zeish.AsyncSecrets), (zeish.Admin, zeish.AsyncAdmin),
    (zeish.FileReader, zeish.AsyncFileReader),
]
SYNC_NAME = {"__aenter__": "__enter__", "__aexit__": "__exit__", "__aiter__": "__iter__", "aclose": "close"}


@pytest.mark.parametrize("sync_cls,async_cls", PAIRS, ids=[p[0].__name__ for p in PAIRS])
def test_sync_and_async_have_the_same_surface(sync_cls: type, async_cls: type) -> None:
    s = _public(sync_cls)
    original = {SYNC_NAME.get(n, n): n for n in _public(async_cls)}
    a = {SYNC_NAME.get(n, n): sig for n, sig in _public(async_cls).items()}
    assert sorted(s) == sorted(a)
    for name, sig in s.items():
        assert list(sig.parameters) == list(a[name].parameters), name
        assert not inspect.iscoroutinefunction(getattr(sync_cls, name)), name
        assert original[name]


# ---- a fake server: the desktop's and browser's shapes, token renewal ------------

ID = "sbx_dddddddddddddddddddd"
PNG = b"\x89PNG-fake"


class Fake(BaseHTTPRequestHandler):
    sent: list[dict[str, Any]] = []
    tokens: list[str] = []
    expire_next = 0

    def log_message(self, *a: Any) -> None:
        pass

    def _json(self, status: int, v: Any) -> None:
        b = json.dumps(v).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(b)))
        self.send_header("x-request-id", "req-fake")
        self.end_headers()
        self.wfile.write(b)

    def _body(self) -> Any:
        n = int(self.headers.get("content-length") or 0)
        return json.loads(self.rfile.read(n) or b"null")

    def do_GET(self) -> None:
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        p = self.path.split("?")[0]
        if p == f"/api/v1/public/sandboxes/{ID}":
            return self._json(200, {"id": ID, "name": "d", "state": "running", "desktop": True})
        if p == f"/api/v1/public/sandboxes/{ID}/desktop":
            return self._json(200, {"running": True, "display": ":0", "width": 1280, "height": 800, "depth": 24, "window_manager": "openbox", "user": "user"})
        if p == f"/api/v1/public/sandboxes/{ID}/browser":
            return self._json(200, {"cdp_url": f"ws://x/browser/devtools/browser/1?token=zdp_1&{self.path.partition('?')[2]}", "http_url": "h", "token": "zdp_1", "expires_at": "2099-01-01T00:00:00Z", "version": "Chrome/1", "protocol_version": "1.3"})
        if p == f"/data/v1/sandboxes/{ID}/desktop/screenshot":
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.send_header("content-length", str(len(PNG)))
            self.end_headers()
            self.wfile.write(PNG)
            return
        if p == f"/data/v1/sandboxes/{ID}/processes":
            Fake.tokens.append(self.headers.get("authorization", ""))
            if Fake.expire_next:
                Fake.expire_next -= 1
                return self._json(401, {"error": {"code": "token_expired", "message": "expired"}})
            return self._json(200, {"processes": [{"pid": 1, "ppid": 0, "command": "sandboxd", "argv": ["sandboxd"]}]})
        self._json(404, {"error": {"code": "not_found", "message": self.path}})
        _ = base

    def do_POST(self) -> None:
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        p = self.path.split("?")[0]
        if p == f"/api/v1/public/sandboxes/{ID}/access":
            self._body()
            n = len(Fake.tokens)
            return self._json(200, {"url": f"{base}/data/v1/sandboxes/{ID}", "token": f"zdp_{n}", "expires_at": "2099-01-01T00:00:00Z"})
        if p == f"/data/v1/sandboxes/{ID}/desktop/actions":
            a = self._body()
            Fake.sent.append(a)
            if a.get("x", 0) >= 1280:
                return self._json(400, {"error": {"code": "off_screen", "message": "off the screen", "request_id": "req-off"}})
            if a["action"] == "screenshot":
                return self._json(200, {"x": 1, "y": 2, "image": base64.b64encode(PNG).decode(), "width": 1280, "height": 800})
            return self._json(200, {"x": 7, "y": 8})
        self._json(404, {"error": {"code": "not_found", "message": self.path}})


@pytest.fixture(scope="module")
def fake() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/api/v1"
    srv.shutdown()
    srv.server_close()


WANT_ACTIONS = [
    {"action": "left_click", "x": 10, "y": 20},
    {"action": "right_click", "x": 10, "y": 20},
    {"action": "mouse_move", "x": 0, "y": 0},
    {"action": "drag", "x": 1, "y": 2, "to_x": 3, "to_y": 4},
    {"action": "type", "text": "ls\n"},
    {"action": "key", "keys": "ctrl+c"},
    {"action": "scroll", "x": 5, "y": 6, "direction": "down", "amount": 2},
    {"action": "cursor_position"},
    {"action": "screenshot"},
]


def test_desktop_and_browser_shapes_sync(fake: str) -> None:
    Fake.sent.clear()
    with zeish.Zeish(fake, "zk_test") as z:
        d = z.sandboxes.get(ID).desktop
        assert d.click(10, 20) == {"x": 7, "y": 8}
        d.click(10, 20, "right")
        d.move_mouse(0, 0)
        d.drag(1, 2, 3, 4)
        d.type("ls\n")
        d.key("ctrl+c")
        d.scroll(5, 6, "down", 2)
        d.cursor_position()
        shot = d.screenshot_with_cursor()
        assert Fake.sent == WANT_ACTIONS
        assert (shot.png, shot.width, shot.height, shot.x, shot.y) == (PNG, 1280, 800, 1, 2)
        assert d.screenshot() == PNG
        assert d.status()["window_manager"] == "openbox"
        with pytest.raises(zeish.InvalidArgumentError) as ei:
            d.click(5000, 1)
        assert (ei.value.code, ei.value.request_id) == ("off_screen", "req-off")
        b = z.sandboxes.get(ID).browser(ttl_seconds=60)
        assert b["cdp_url"].endswith("ttl_seconds=60") and b["protocol_version"] == "1.3"


def test_desktop_and_browser_shapes_async(fake: str) -> None:
    async def run() -> None:
        Fake.sent.clear()
        async with zeish.AsyncZeish(fake, "zk_test") as z:
            sbx = await z.sandboxes.get(ID)
            d = sbx.desktop
            await d.click(10, 20)
            await d.click(10, 20, "right")
            await d.move_mouse(0, 0)
            await d.drag(1, 2, 3, 4)
            await d.type("ls\n")
            await d.key("ctrl+c")
            await d.scroll(5, 6, "down", 2)
            await d.cursor_position()
            shot = await d.screenshot_with_cursor()
            assert Fake.sent == WANT_ACTIONS
            assert shot.png == PNG and await d.screenshot() == PNG
            assert (await sbx.browser())["version"] == "Chrome/1"

    asyncio.run(run())


def test_an_expired_token_is_renewed_once(fake: str) -> None:
    Fake.tokens.clear()
    with zeish.Zeish(fake, "zk_test") as z:
        sbx = z.sandboxes.get(ID)
        Fake.expire_next = 1
        assert sbx.processes.list()[0]["command"] == "sandboxd"
        assert len(Fake.tokens) == 2 and Fake.tokens[0] != Fake.tokens[1]  # a new token for the retry
        Fake.expire_next = 2
        with pytest.raises(zeish.AuthenticationError) as ei:
            sbx.processes.list()
        assert ei.value.code == "token_expired"


def test_no_server_is_status_0_unavailable() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with zeish.Zeish(f"http://127.0.0.1:{port}/api/v1", "zk") as z:
        with pytest.raises(zeish.ServerError) as ei:
            z.sandboxes.list()
    assert (ei.value.status, ei.value.code) == (0, "unavailable")


def test_a_wheel_builds(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-c", f"from setuptools import build_meta; print(build_meta.build_wheel({str(tmp_path)!r}))"],
        cwd=SDK, capture_output=True, text=True,
    )
    for junk in ("build", "zeish.egg-info"):
        subprocess.run(["rm", "-rf", str(SDK / junk)])
    assert r.returncode == 0, r.stderr[-2000:]
    import zipfile

    names = zipfile.ZipFile(tmp_path / r.stdout.strip().splitlines()[-1]).namelist()
    for want in ("zeish/py.typed", "zeish/schema.py", "zeish/_sync/sandbox.py", "zeish/_async/sandbox.py"):
        assert want in names

