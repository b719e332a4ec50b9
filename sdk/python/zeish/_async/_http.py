"""One place where requests are sent: auth, JSON, errors (both planes)."""

from __future__ import annotations

import json as jsonlib
from collections.abc import AsyncIterable, AsyncIterator, Mapping, Sequence
from typing import Any, TypeAlias

import httpx

from .._wire import SSEParser
from ..errors import ZeishError, error_from_response, make_error

QueryValue: TypeAlias = str | int | float | bool | None
Query = Mapping[str, QueryValue] | Sequence[tuple[str, str]]

#: Connects are bounded; reads are not (an exec or a download lasts as long as
#: it lasts): bound those with the call's own timeout arguments.
DEFAULT_TIMEOUT = httpx.Timeout(None, connect=30.0)


def _params(query: Query | None) -> httpx.QueryParams:
    if query is None:
        return httpx.QueryParams()
    if isinstance(query, Mapping):
        out: list[tuple[str, QueryValue]] = []
        for k, v in query.items():
            if v is None:
                continue
            out.append((k, ("true" if v else "false") if isinstance(v, bool) else str(v)))
        return httpx.QueryParams(out)
    return httpx.QueryParams([(k, v) for k, v in query])


class AsyncTransport:
    """Sends requests to one zeishd: control-plane paths are relative to api_url."""

    def __init__(self, api_url: str, api_key: str | None, http: httpx.AsyncClient | None, timeout: httpx.Timeout) -> None:
        self.api_url = api_url.rstrip("/")
        self.api_key = api_key
        self._own = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else self.api_url + path

    async def send(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        json: Any = None,
        content: bytes | str | AsyncIterable[bytes] | None = None,
        files: Any = None,
        headers: Mapping[str, str] | None = None,
        token: str | None = None,
        stream: bool = False,
    ) -> httpx.Response:
        """Sends one request; returns the response if it is 2xx, else raises the
        ZeishError its error envelope describes. With stream, the body is left
        unread (the caller closes the response)."""
        h = {"accept": "application/json"}
        h.update(headers or {})
        bearer = token if token is not None else self.api_key
        if bearer:
            h["authorization"] = f"Bearer {bearer}"
        kw: dict[str, Any] = {}
        if json is not None:
            h["content-type"] = "application/json"
            kw["content"] = jsonlib.dumps(json).encode()
        elif content is not None:
            kw["content"] = content
        if files is not None:
            kw["files"] = files
        try:
            req = self.http.build_request(method, self.url(path), params=_params(query), headers=h, **kw)
            resp = await self.http.send(req, stream=True)
        except httpx.TransportError as e:
            raise make_error(0, "unavailable", f"{method} {self.url(path)}: {e or type(e).__name__}") from e
        if resp.status_code >= 400:
            try:
                raw = await resp.aread()
            except httpx.HTTPError:
                raw = b""
            finally:
                await resp.aclose()
            err = error_from_response(resp.status_code, resp.headers, raw, resp.reason_phrase)
            if err.code == "unauthenticated" and not bearer:
                err.message += " (no API key: pass api_key, set ZEISH_API_KEY, or make zeishd's admin.key readable)"
            raise err
        if not stream:
            try:
                await resp.aread()
            except httpx.HTTPError as e:
                raise make_error(0, "unavailable", f"{method} {self.url(path)}: reading the answer: {e}") from e
            finally:
                await resp.aclose()
        return resp

    async def events(self, path: str) -> AsyncIterator[Any]:
        """The ``data`` of each server-sent event of GET path, decoded, until the stream ends."""
        resp = await self.send("GET", path, headers={"accept": "text/event-stream"}, stream=True)
        parser = SSEParser()
        try:
            async for line in resp.aiter_lines():
                ev = parser.line(line)
                if ev is not None:
                    yield ev
        finally:
            await resp.aclose()

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        """send() and the decoded JSON body (None for an empty one)."""
        resp = await self.send(method, path, **kw)
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError as e:
            raise make_error(resp.status_code, "internal", f"{method} {path}: the answer is not JSON") from e


__all__ = ["AsyncTransport", "DEFAULT_TIMEOUT", "Query", "ZeishError"]
