"""Wire handling shared by the sync and async clients: no I/O here.

The exec stream (NDJSON ``ExecEvent`` lines), server-sent events, and the
request bodies the SDK builds from keyword arguments.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast

from .errors import ZeishError, make_error
from .schema import ExecResult as ExecResultWire

Stream = Literal["stdout", "stderr"]

#: States a sandbox passes through on its way to a settled one.
TRANSITIONS = frozenset({"starting", "stopping", "deleting"})


@dataclass(frozen=True)
class ExecChunk:
    """A piece of a command's output as it arrived."""

    #: ``"stdout"`` or ``"stderr"``.
    stream: Stream
    #: The bytes.
    data: bytes
    #: The bytes decoded as UTF-8 (a character split between chunks is
    #: completed in the next chunk's text, so joined texts are the whole output).
    text: str


@dataclass(frozen=True)
class ExecResult:
    """How a command ended, with its whole output."""

    #: The exit status; -1 when a signal killed the command.
    exit_code: int
    stdout: str
    stderr: str
    #: Killed because its ``timeout`` passed.
    timed_out: bool = False
    #: The signal that killed it (e.g. ``"KILL"``), if one did.
    signal: str | None = None
    #: Its process id in the guest.
    pid: int = 0
    duration_ms: int = 0
    stdout_bytes: bytes = field(default=b"", repr=False)
    stderr_bytes: bytes = field(default=b"", repr=False)

    @property
    def ok(self) -> bool:
        """The command exited 0."""
        return self.exit_code == 0

    def check(self) -> ExecResult:
        """Returns self if the command exited 0, else raises :class:`CommandError`."""
        if not self.ok:
            raise CommandError(self)
        return self


class CommandError(Exception):
    """A command run with ``check=True`` exited non-zero (not an API error: the call worked)."""

    def __init__(self, result: ExecResult) -> None:
        how = f"signal {result.signal}" if result.signal else f"exit {result.exit_code}"
        if result.timed_out:
            how += ", timed out"
        tail = (result.stderr or result.stdout).strip()[-500:]
        super().__init__(f"command failed ({how})" + (f": {tail}" if tail else ""))
        self.result = result


class ExecDecoder:
    """Turns exec stream lines into chunks and, at the end, the result."""

    def __init__(self) -> None:
        self._dec = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self.out = bytearray()
        self.err = bytearray()
        self.result: ExecResult | None = None

    def line(self, line: str) -> ExecChunk | None:
        """One line of the stream: a chunk, or None (the exit, or nothing). Raises
        the stream's error event as a ZeishError."""
        if not line.strip():
            return None
        ev = json.loads(line)
        typ = ev.get("type")
        if typ in ("stdout", "stderr"):
            data = base64.b64decode(ev.get("data") or "")
            (self.out if typ == "stdout" else self.err).extend(data)
            return ExecChunk(typ, data, self._dec[typ].decode(data))
        if typ == "exit":
            r = ev.get("result")
            if not isinstance(r, dict):
                raise make_error(0, "internal", "exec: exit event without a result")
            self.result = self.finish(cast(ExecResultWire, r))
            return None
        if typ == "error":
            e = ev.get("error") or {}
            raise make_error(0, e.get("code", "internal"), e.get("message", "exec failed"), request_id=e.get("request_id"))
        return None  # a newer event type: skipped

    def tails(self) -> list[ExecChunk]:
        """Chunks for text still held by the decoders (an incomplete character at the end)."""
        out: list[ExecChunk] = []
        for name in ("stdout", "stderr"):
            tail = self._dec[name].decode(b"", final=True)
            if tail:
                out.append(ExecChunk(cast(Stream, name), b"", tail))
        return out

    def finish(self, r: ExecResultWire) -> ExecResult:
        return ExecResult(
            exit_code=r["exit_code"],
            stdout=self.out.decode("utf-8", "replace"),
            stderr=self.err.decode("utf-8", "replace"),
            timed_out=r.get("timed_out", False),
            signal=r.get("signal") or None,
            pid=r.get("pid", 0),
            duration_ms=r.get("duration_ms", 0),
            stdout_bytes=bytes(self.out),
            stderr_bytes=bytes(self.err),
        )

    def ended_early(self) -> ZeishError:
        return make_error(0, "unavailable", "exec: the stream ended before the command did")


class SSEParser:
    """Server-sent events: feed lines, get each event's ``data`` as JSON."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> Any | None:
        # httpx before 0.24 (Debian 12 has 0.23) hands lines out with their ending.
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data:
                return None
            text = "\n".join(self._data)
            self._data = []
            return json.loads(text)
        if line.startswith("data:"):
            v = line[5:]
            self._data.append(v[1:] if v.startswith(" ") else v)
        return None


def body(**fields: Any) -> dict[str, Any]:
    """A JSON body of the fields that were given (None means left out)."""
    return {k: v for k, v in fields.items() if v is not None}


def exec_request(
    cmd: str | list[str],
    *,
    stdin: str | bytes | None,
    env: Mapping[str, str] | None,
    cwd: str | None,
    user: str | None,
    timeout: float | None,
) -> dict[str, Any]:
    """The ExecRequest of a command: a list is argv (no shell), a string runs with ``sh -c``."""
    argv = ["sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
    if isinstance(stdin, str):
        stdin = stdin.encode()
    return body(
        argv=argv,
        env=dict(env) if env else None,
        cwd=cwd,
        user=user,
        stdin=base64.b64encode(stdin).decode() if stdin else None,
        timeout_seconds=timeout if timeout else None,
    )


def time_param(t: datetime | str | None) -> str | None:
    """RFC 3339 for a query parameter; naive datetimes are taken as UTC."""
    if t is None or isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.isoformat()


def file_mode(mode: int | str | None) -> str | None:
    """0o644 or "644" as the API's octal string."""
    if mode is None or isinstance(mode, str):
        return mode
    return format(mode, "04o")


def term_query(
    rows: int,
    cols: int,
    *,
    argv: list[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    user: str | None = None,
) -> list[tuple[str, str]]:
    """The query of a new terminal (argv and env repeat)."""
    check_term_size(rows, cols)
    q = [("rows", str(rows)), ("cols", str(cols))]
    q += [("argv", a) for a in argv or []]
    q += [("env", f"{k}={v}") for k, v in (env or {}).items()]
    if cwd:
        q.append(("cwd", cwd))
    if user:
        q.append(("user", user))
    return q


MAX_TERM_SIZE = 1000


def check_term_size(rows: int, cols: int) -> None:
    """Raises InvalidArgumentError unless rows and cols are a window size."""
    for n in (rows, cols):
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_TERM_SIZE:
            raise make_error(400, "invalid_argument", f"terminal size {rows}x{cols}: rows and cols must be within 1..{MAX_TERM_SIZE}")
