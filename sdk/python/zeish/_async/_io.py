"""The async client's I/O primitives. tools/gen_sync.py turns the async
modules into the sync ones but not this file: zeish/_sync/_io.py is its
hand-written twin with the same names (AsyncStream becomes Stream)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from typing import BinaryIO, TypeVar, cast

__all__ = ["AsyncStream", "AsyncWriteData", "sleep", "run_all", "upload_body"]

T = TypeVar("T")

sleep = asyncio.sleep


async def run_all(calls: list[Callable[[], Awaitable[T]]]) -> list[T]:
    """Runs the calls concurrently; results in order; the first failure is raised."""
    return list(await asyncio.gather(*(c() for c in calls)))


class AsyncStream:
    """A byte stream with a buffer that a timed-out read leaves intact."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._buf = bytearray()
        self._eof = False

    @classmethod
    async def connect(cls, host: str, port: int, tls: bool, timeout: float | None) -> AsyncStream:
        ctx = ssl.create_default_context() if tls else None
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, ssl=ctx)
        return cls(reader, writer)

    async def fill(self, n: int, timeout: float | None = None) -> bool:
        """Buffers at least n bytes: False at end of stream, TimeoutError after timeout (nothing lost)."""
        async with asyncio.timeout(timeout):
            while len(self._buf) < n:
                if self._eof:
                    return False
                data = await self._reader.read(65536)
                if not data:
                    self._eof = True
                    return False
                self._buf += data
        return True

    async def read_until(self, sep: bytes, limit: int, timeout: float | None = None) -> bytes:
        """Everything up to and including sep (at most limit bytes)."""
        async with asyncio.timeout(timeout):
            while sep not in self._buf:
                if len(self._buf) > limit or not await self.fill(len(self._buf) + 1):
                    raise ConnectionError("stream ended before " + repr(sep))
        i = self._buf.index(sep) + len(sep)
        return self.take(i)

    def peek(self, n: int) -> bytes:
        return bytes(self._buf[:n])

    def take(self, n: int) -> bytes:
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass


#: What Files.write takes: bytes, text, a binary file, or chunks (sync or async).
AsyncWriteData = bytes | bytearray | memoryview | str | BinaryIO | Iterable[bytes] | AsyncIterable[bytes]

CHUNK = 1 << 20


def upload_body(data: AsyncWriteData) -> tuple[bytes | AsyncIterator[bytes], bool]:
    """The request content for data, and whether it can be sent again."""
    if isinstance(data, str):
        return data.encode(), True
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), True
    return _chunks(data), False


async def _chunks(data: BinaryIO | Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    if isinstance(data, AsyncIterable):
        async for chunk in data:
            yield bytes(chunk)
    elif hasattr(data, "read"):
        f = cast(BinaryIO, data)
        while chunk := f.read(CHUNK):
            yield chunk
    else:
        for chunk in data:
            yield bytes(chunk)
