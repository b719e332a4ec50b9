"""A command running in a sandbox, its output streamed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType

import httpx

from .._wire import ExecChunk, ExecDecoder, ExecResult
from ..errors import make_error


class AsyncExecution:
    """The output of a running command, chunk by chunk, then its result.

    Iterate it for :class:`ExecChunk` objects (stdout and stderr as they
    come); then ``result`` holds the exit code and the whole output.
    ``wait()`` reads to the end without handing out chunks. Leaving the
    ``with`` block (or ``kill()``) before the end closes the stream, and the
    guest kills the command and its process group.
    """

    def __init__(self, response: httpx.Response) -> None:
        self._resp = response
        self._dec = ExecDecoder()
        self._gen: AsyncIterator[ExecChunk] | None = None
        self._closed = False

    @property
    def result(self) -> ExecResult | None:
        """How the command ended, once the stream has been read to its end."""
        return self._dec.result

    @property
    def exit_code(self) -> int | None:
        """The exit status once known, else None."""
        return self._dec.result.exit_code if self._dec.result else None

    def __aiter__(self) -> AsyncIterator[ExecChunk]:
        # One iterator for the execution's life: a loop that stops early and
        # a later one (or wait()) carry on where it stopped, and dropping a
        # temporary iterator does not close the stream (which kills the command).
        if self._gen is None:
            self._gen = self._chunks()
        return self._gen

    async def _chunks(self) -> AsyncIterator[ExecChunk]:
        try:
            async for line in self._resp.aiter_lines():
                chunk = self._dec.line(line)
                if chunk is not None:
                    yield chunk
                if self._dec.result is not None:
                    for tail in self._dec.tails():
                        yield tail
                    return
        except httpx.HTTPError as e:
            if self._closed:
                raise make_error(0, "unavailable", "exec: the stream was closed (killed)") from e
            raise make_error(0, "unavailable", f"exec: the stream broke: {e}") from e
        finally:
            await self._close()
        raise self._dec.ended_early()

    async def wait(self) -> ExecResult:
        """Reads the rest of the output (what was not iterated yet) and returns the result."""
        if self._dec.result is None and not self._closed:
            async for _ in self:
                pass
        if self._dec.result is None:
            raise self._dec.ended_early()
        return self._dec.result

    async def kill(self) -> None:
        """Stops the command: the stream closes and the guest kills its process group."""
        self._closed = True
        await self._close()

    async def _close(self) -> None:
        if not self._resp.is_closed:
            await self._resp.aclose()

    async def __aenter__(self) -> AsyncExecution:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.kill()
