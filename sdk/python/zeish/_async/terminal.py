"""Terminals: an exec with a TTY over a WebSocket (openTerminal in
api/openapi.yaml). Binary messages carry the terminal's bytes both ways;
text messages carry JSON events (server) and controls (client)."""

from __future__ import annotations

import codecs
import json
import time
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import cast

from .. import _ws
from .._wire import check_term_size
from ..errors import ZeishError, make_error
from ..schema import ExecResult as ExecResultWire
from ._io import AsyncStream

#: How long opening a terminal (connect, handshake, ``started``) may take.
OPEN_TIMEOUT = 60.0


class AsyncTerminal:
    """An interactive process on a pseudo-terminal in a sandbox.

    Read its output with :meth:`read`, iterate it, or wait for a text with
    :meth:`expect`; type with :meth:`write`. :meth:`close` only detaches: the
    process goes on for 10 minutes and ``sandbox.attach_terminal(pid)`` picks it
    up again, replaying its recent output.
    """

    def __init__(self, stream: AsyncStream, pid: int, early: list[bytes]) -> None:
        self._stream = stream
        #: The process id in the guest.
        self.pid = pid
        #: How the process ended (``ExecResult``), once it has.
        self.result: ExecResultWire | None = None
        #: Control messages the server refused (a bad signal name, …); the terminal went on.
        self.refused: list[ZeishError] = []
        #: Called with each refusal as it arrives, if set.
        self.on_refused: Callable[[ZeishError], None] | None = None
        self._pending = list(early)
        self._frag = bytearray()
        self._frag_op = 0
        self._closed = False
        self._lost: ZeishError | None = None
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self._seen = ""

    @classmethod
    async def open(cls, url: str, token: str) -> AsyncTerminal:
        """Connects to a terminal URL (ws:// or http://) and waits for ``started``."""
        target = _ws.Target.of(url)
        deadline = time.monotonic() + OPEN_TIMEOUT
        stream = await AsyncStream.connect(target.host, target.port, target.tls, OPEN_TIMEOUT)
        try:
            request, key = _ws.handshake(target, {"Authorization": f"Bearer {token}"})
            await stream.write(request)
            head = await stream.read_until(b"\r\n\r\n", 64 << 10, _left(deadline))
            status, reason, headers = _ws.parse_head(head[:-4])
            if status != 101:
                length = int(headers.get("content-length", "0") or 0)
                await stream.fill(min(length, 1 << 20), _left(deadline))
                raise _ws.refusal(status, reason, headers, stream.take(length))
            _ws.check_accept(headers, key)
            term = cls(stream, 0, [])
            while True:
                op, data = await term._message(_left(deadline))
                if op == _ws.OP_CLOSE:
                    raise make_error(0, "unavailable", "the terminal closed before it started")
                if op == _ws.OP_BINARY:
                    term._pending.append(data)
                    continue
                ev = json.loads(data)
                if ev.get("type") == "started":
                    term.pid = int(ev.get("pid", 0))
                    return term
                if ev.get("type") == "error":
                    e = ev.get("error") or {}
                    raise make_error(0, e.get("code", "internal"), e.get("message", "terminal refused"))
        except BaseException:
            await stream.close()
            raise

    # ---- frames -----------------------------------------------------------

    async def _message(self, timeout: float | None) -> tuple[int, bytes]:
        """The next data message (opcode, payload), or (OP_CLOSE, b"") at the end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if not await self._stream.fill(2, _left(deadline)):
                return _ws.OP_CLOSE, b""
            hsize = _ws.header_size(self._stream.peek(2))
            if not await self._stream.fill(hsize, _left(deadline)):
                return _ws.OP_CLOSE, b""
            h = _ws.parse_header(self._stream.peek(hsize))
            if not await self._stream.fill(hsize + h.length, _left(deadline)):
                return _ws.OP_CLOSE, b""
            payload = _ws.unmask(self._stream.take(hsize + h.length)[hsize:], h.mask)
            if h.opcode == _ws.OP_PING:
                await self._stream.write(_ws.frame(_ws.OP_PONG, payload))
                continue
            if h.opcode == _ws.OP_PONG:
                continue
            if h.opcode == _ws.OP_CLOSE:
                if not self._closed:
                    self._closed = True
                    try:
                        await self._stream.write(_ws.close_frame(*_ws.close_info(payload)[:1]))
                    except OSError:
                        pass
                return _ws.OP_CLOSE, payload
            if h.opcode != _ws.OP_CONT:
                self._frag_op = h.opcode
            self._frag += payload
            if len(self._frag) > _ws.MAX_MESSAGE:
                raise make_error(0, "unavailable", "terminal message too large")
            if h.fin:
                data = bytes(self._frag)
                self._frag.clear()
                return self._frag_op, data

    # ---- reading ----------------------------------------------------------

    async def read(self, timeout: float | None = None) -> bytes:
        """The next piece of output; ``b""`` once the process has exited (see
        ``result``). TimeoutError if none came within timeout; ZeishError
        ``unavailable`` if the connection ended first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._pending:
                return self._note(self._pending.pop(0))
            if self.result is not None:
                return b""
            if self._lost is not None:
                raise self._lost
            op, data = await self._message(_left(deadline))
            if op == _ws.OP_BINARY:
                return self._note(data)
            if op == _ws.OP_CLOSE:
                code, reason = _ws.close_info(data)
                self._lost = make_error(0, "unavailable", f"terminal connection closed ({code} {reason}) before the process ended")
                continue
            ev = json.loads(data)
            typ = ev.get("type")
            err = ev.get("error") or {}
            if typ == "exit":
                self.result = cast(ExecResultWire, ev.get("result") or {})
            elif typ == "refused":
                refusal = make_error(0, err.get("code", "internal"), err.get("message", "refused"))
                self.refused.append(refusal)
                if self.on_refused is not None:
                    self.on_refused(refusal)
            elif typ == "error":
                self._lost = make_error(0, err.get("code", "internal"), err.get("message", "terminal lost"))

    def _note(self, data: bytes) -> bytes:
        self._seen += self._dec.decode(data)
        return data

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while chunk := await self.read():
            yield chunk

    async def expect(self, text: str, timeout: float = 60.0) -> str:
        """Reads until the output since the last expect() contains text; returns
        that output (decoded). TimeoutError names what was seen instead."""
        deadline = time.monotonic() + timeout
        while text not in self._seen:
            try:
                if not await self.read(_left(deadline)) and self.result is not None:
                    break
            except TimeoutError:
                raise TimeoutError(f"terminal never showed {text!r}; it showed {self._seen[-2000:]!r}") from None
        if text not in self._seen:
            raise make_error(0, "invalid_state", f"the process exited before showing {text!r}: {self._seen[-2000:]!r}")
        end = self._seen.index(text) + len(text)
        out, self._seen = self._seen[:end], self._seen[end:]
        return out

    async def wait(self, timeout: float | None = None) -> ExecResultWire:
        """Reads (and drops) output until the process exits; returns how it ended."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while await self.read(_left(deadline)):
            pass
        assert self.result is not None
        return self.result

    # ---- writing ----------------------------------------------------------

    async def write(self, data: str | bytes) -> None:
        """Sends keystrokes (Ctrl-C is ``"\\x03"``)."""
        await self._stream.write(_ws.frame(_ws.OP_BINARY, data.encode() if isinstance(data, str) else bytes(data)))

    async def resize(self, rows: int, cols: int) -> None:
        """Resizes the window; the foreground program gets SIGWINCH."""
        check_term_size(rows, cols)
        await self._control({"type": "resize", "rows": rows, "cols": cols})

    async def signal(self, name: str) -> None:
        """Sends a signal (``"INT"``, ``"TERM"``, …) to the foreground process group."""
        await self._control({"type": "signal", "signal": name})

    async def _control(self, msg: dict[str, object]) -> None:
        await self._stream.write(_ws.frame(_ws.OP_TEXT, json.dumps(msg).encode()))

    async def close(self) -> None:
        """Detaches; the process goes on in the sandbox."""
        if not self._closed:
            self._closed = True
            try:
                await self._stream.write(_ws.close_frame(1000, "detach"))
            except OSError:
                pass
        await self._stream.close()

    async def __aenter__(self) -> AsyncTerminal:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
