"""The sync client's I/O primitives: the hand-written twin of
zeish/_async/_io.py (same names, AsyncStream as Stream)."""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO, TypeVar, cast

__all__ = ["Stream", "WriteData", "sleep", "run_all", "upload_body"]

T = TypeVar("T")

sleep = time.sleep


def run_all(calls: list[Callable[[], T]]) -> list[T]:
    """Runs the calls in threads; results in order; the first failure is raised."""
    if len(calls) <= 1:
        return [c() for c in calls]
    with ThreadPoolExecutor(max_workers=min(len(calls), 32)) as pool:
        futures = [pool.submit(c) for c in calls]
        return [f.result() for f in futures]


class Stream:
    """A byte stream with a buffer that a timed-out read leaves intact. One
    thread may read while another writes (a terminal's keystrokes)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buf = bytearray()
        self._eof = False
        self._wlock = threading.Lock()

    @classmethod
    def connect(cls, host: str, port: int, tls: bool, timeout: float | None) -> Stream:
        sock = socket.create_connection((host, port), timeout=timeout)
        if tls:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        # Blocking from here: reads wait in select() so that a read's timeout
        # never applies to another thread's write.
        sock.settimeout(None)
        return cls(sock)

    def fill(self, n: int, timeout: float | None = None) -> bool:
        """Buffers at least n bytes: False at end of stream, TimeoutError after timeout (nothing lost)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self._buf) < n:
            if self._eof:
                return False
            pending = isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0
            if not pending:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                ready, _, _ = select.select([self._sock], [], [], left)
                if not ready:
                    raise TimeoutError("read timed out")
            data = self._sock.recv(65536)
            if not data:
                self._eof = True
                return False
            self._buf += data
        return True

    def read_until(self, sep: bytes, limit: int, timeout: float | None = None) -> bytes:
        """Everything up to and including sep (at most limit bytes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while sep not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if len(self._buf) > limit or not self.fill(len(self._buf) + 1, left):
                raise ConnectionError("stream ended before " + repr(sep))
        i = self._buf.index(sep) + len(sep)
        return self.take(i)

    def peek(self, n: int) -> bytes:
        return bytes(self._buf[:n])

    def take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def write(self, data: bytes) -> None:
        with self._wlock:
            self._sock.sendall(data)

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()


#: What Files.write takes: bytes, text, a binary file, or an iterable of chunks.
WriteData = bytes | bytearray | memoryview | str | BinaryIO | Iterable[bytes]

CHUNK = 1 << 20


def upload_body(data: WriteData) -> tuple[bytes | Iterator[bytes], bool]:
    """The request content for data, and whether it can be sent again."""
    if isinstance(data, str):
        return data.encode(), True
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), True
    return _chunks(data), False


def _chunks(data: BinaryIO | Iterable[bytes]) -> Iterator[bytes]:
    if hasattr(data, "read"):
        f = cast(BinaryIO, data)
        while chunk := f.read(CHUNK):
            yield chunk
    else:
        for chunk in data:
            yield bytes(chunk)
