"""What sandboxes, snapshots and templates have in common."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from ..errors import ZeishError


class AsyncResource:
    """An API object with an id and a name, ``info`` as the API returned it
    last. As a context manager it is deleted at the end (one already gone is
    no error)."""

    info: Mapping[str, Any]

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def name(self) -> str:
        return str(self.info["name"])

    async def delete(self) -> object:
        raise NotImplementedError

    async def _delete_quietly(self) -> None:
        try:
            await self.delete()
        except ZeishError as e:
            if e.code != "not_found":
                raise

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._delete_quietly()
