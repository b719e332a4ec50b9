"""The data plane of one sandbox: a cached access token and requests at the
URL `/access` returned."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any, cast
from urllib.parse import quote as _quote

import httpx

from ..errors import ZeishError
from ..schema import Access
from ._http import AsyncTransport


class AsyncDataPlane:
    """Requests to one sandbox's data plane. The token is cached and renewed
    shortly before it expires; a ``token_expired`` answer (clock skew) renews it
    and retries once, unless the request body was a stream."""

    def __init__(self, transport: AsyncTransport, sandbox_id: str, ttl: int | None = None) -> None:
        self.transport = transport
        self.sandbox_id = sandbox_id
        self.ttl = ttl
        self._access: Access | None = None
        self._renew_at = 0.0

    async def access(self, force: bool = False) -> Access:
        """A data-plane URL and token for the sandbox."""
        if not force and self._access is not None and time.time() < self._renew_at:
            return self._access
        obtained = time.time()
        acc = cast(
            Access,
            await self.transport.json(
                "POST", f"/public/sandboxes/{quote(self.sandbox_id)}/access", json={"ttl_seconds": self.ttl} if self.ttl else {}
            ),
        )
        try:
            expires = datetime.fromisoformat(acc["expires_at"].replace("Z", "+00:00")).timestamp()
        except (KeyError, ValueError):
            expires = obtained + 60
        self._renew_at = expires - min(60.0, max(0.0, expires - obtained) / 4)
        self._access = acc
        return acc

    def forget(self) -> None:
        """Drops the cached token (after a restart of the sandbox's machine, a stop, …)."""
        self._access = None

    async def send(self, method: str, path: str, *, replayable: bool = True, **kw: Any) -> httpx.Response:
        for attempt in range(2):
            acc = await self.access(force=attempt > 0)
            try:
                return await self.transport.send(method, acc["url"] + path, token=acc["token"], **kw)
            except ZeishError as e:
                retry = attempt == 0 and replayable and (e.code == "token_expired" or (e.code == "unauthenticated" and e.status == 401))
                if not retry:
                    raise
        raise AssertionError("unreachable")

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.send(method, path, **kw)
        return resp.json() if resp.content else None


def quote(s: str) -> str:
    """A path segment, escaped."""
    return _quote(s, safe="")
