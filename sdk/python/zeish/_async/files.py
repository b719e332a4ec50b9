"""Files and processes inside one sandbox."""

from __future__ import annotations

import builtins
import os
from collections.abc import AsyncIterator
from types import TracebackType
from typing import BinaryIO, cast

import httpx

from .._wire import body, file_mode
from ..errors import NotFoundError, make_error
from ..schema import FileInfo, Process
from ._dataplane import AsyncDataPlane
from ._io import AsyncWriteData, upload_body


class AsyncFileReader:
    """A file being downloaded: iterate it for chunks of bytes."""

    def __init__(self, response: httpx.Response) -> None:
        self._resp = response
        length = response.headers.get("content-length", "")
        #: The file's size in bytes, from the answer's Content-Length (None if absent).
        self.size: int | None = int(length) if length.isdigit() else None

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._resp.aiter_bytes():
                yield chunk
        except httpx.HTTPError as e:
            raise make_error(0, "unavailable", f"download broke: {e}") from e
        finally:
            await self._resp.aclose()

    async def aclose(self) -> None:
        await self._resp.aclose()

    async def __aenter__(self) -> AsyncFileReader:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class AsyncFiles:
    """The files of one sandbox (``sandbox.files``). Paths are absolute.
    Reads and writes stream: a file of any size never has to fit in memory."""

    def __init__(self, dp: AsyncDataPlane) -> None:
        self._dp = dp

    async def read(self, path: str) -> bytes:
        """The whole file as bytes (use :meth:`stream` or :meth:`download` for big ones)."""
        resp = await self._dp.send("GET", "/files", query={"path": path}, headers={"accept": "application/octet-stream"})
        return resp.content

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The whole file as text."""
        return (await self.read(path)).decode(encoding)

    async def stream(self, path: str) -> AsyncFileReader:
        """The file as a stream of chunks; close it (or use ``with``) when done early."""
        resp = await self._dp.send(
            "GET", "/files", query={"path": path}, headers={"accept": "application/octet-stream"}, stream=True
        )
        return AsyncFileReader(resp)

    async def download(self, path: str, dest: str | os.PathLike[str] | BinaryIO) -> int:
        """Copies the file to dest (a local path or a binary file), streamed; returns its size."""
        n = 0
        reader = await self.stream(path)
        if isinstance(dest, (str, os.PathLike)):
            with open(dest, "wb") as f:
                async for chunk in reader:
                    f.write(chunk)
                    n += len(chunk)
        else:
            async for chunk in reader:
                dest.write(chunk)
                n += len(chunk)
        return n

    async def write(self, path: str, data: AsyncWriteData, *, mode: int | str | None = None, user: str | None = None) -> FileInfo:
        """Creates or replaces a file. Files and iterables are uploaded as they
        are read, never held whole. ``mode``: permission bits (``0o755`` or
        ``"755"``, default 0644); ``user``: the owner in the guest."""
        content, replayable = upload_body(data)
        return cast(
            FileInfo,
            await self._dp.json(
                "PUT",
                "/files",
                query={"path": path, "mode": file_mode(mode), "user": user},
                content=content,
                headers={"content-type": "application/octet-stream"},
                replayable=replayable,
            ),
        )

    async def upload(self, src: str | os.PathLike[str], path: str, *, mode: int | str | None = None, user: str | None = None) -> FileInfo:
        """Copies the local file src to path in the sandbox, streamed."""
        with open(src, "rb") as f:
            return await self.write(path, f, mode=mode, user=user)

    async def list(self, path: str) -> builtins.list[FileInfo]:
        """The entries of a directory."""
        r = await self._dp.json("GET", "/files/list", query={"path": path})
        return cast(builtins.list[FileInfo], r["files"])

    async def stat(self, path: str) -> FileInfo:
        """Describes one file; raises NotFoundError (``file_not_found``) if absent."""
        return cast(FileInfo, await self._dp.json("GET", "/files/stat", query={"path": path}))

    async def exists(self, path: str) -> bool:
        """Whether something exists at path."""
        try:
            await self.stat(path)
        except NotFoundError as e:
            if e.code == "file_not_found":
                return False
            raise
        return True

    async def mkdir(self, path: str, *, parents: bool = False) -> FileInfo:
        """Makes a directory; with ``parents``, missing parents too and no error if it exists."""
        return cast(FileInfo, await self._dp.json("POST", "/files/mkdir", json=body(path=path, parents=parents or None)))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        """Removes a file, or with ``recursive`` a directory and all it holds."""
        await self._dp.send("DELETE", "/files", query={"path": path, "recursive": recursive or None})


class AsyncProcesses:
    """The processes of one sandbox (``sandbox.processes``)."""

    def __init__(self, dp: AsyncDataPlane) -> None:
        self._dp = dp

    async def list(self) -> builtins.list[Process]:
        """Every process in the guest."""
        r = await self._dp.json("GET", "/processes")
        return cast(builtins.list[Process], r["processes"])

    async def kill(self, pid: int, signal: str | int | None = None) -> None:
        """Sends a signal (a name like ``"TERM"`` or a number; default ``KILL``)."""
        await self._dp.send("POST", f"/processes/{int(pid)}/kill", json=body(signal=None if signal is None else str(signal)))
