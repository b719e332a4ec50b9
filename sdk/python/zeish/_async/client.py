"""The client: one zeishd, its API key, and the account's resources."""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, BinaryIO, Literal, cast

import httpx

from .._config import api_key_from_env, api_url_from_env
from .._wire import body, time_param
from ..schema import (
    Account,
    APIKey,
    CreatedAPIKey,
    Health,
    NetworkRequest,
    Node,
    PriceEstimate,
    Sandbox as SandboxInfo,
    Secret,
    SizePreset,
    State,
    Template as TemplateInfo,
    TemplateEvent,
    UsageReport,
)
from ._dataplane import quote
from ._http import DEFAULT_TIMEOUT, AsyncTransport
from ._resource import AsyncResource
from .sandbox import DEFAULT_WAIT, AsyncSandbox, wait_for_state, wait_sandbox


class AsyncSandboxes:
    """The account's sandboxes (``zeish.sandboxes``). Every ref is a sandbox's id or name."""

    def __init__(self, transport: AsyncTransport, token_ttl: int | None) -> None:
        self._t = transport
        self._ttl = token_ttl

    async def create(
        self,
        template: str | None = None,
        *,
        name: str | None = None,
        size: SizePreset | None = None,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        disk_mib: int | None = None,
        region: str | None = None,
        env: Mapping[str, str] | None = None,
        secrets: Mapping[str, str] | None = None,
        network: NetworkRequest | None = None,
        git_repo: str | None = None,
        git_branch: str | None = None,
        pr_number: int | None = None,
        git_path: str | None = None,
        git_pr_ref: str | None = None,
        git_token_secret: str | None = None,
        max_cost_micros: int | None = None,
        browser: bool | None = None,
        desktop: bool | None = None,
        metadata: Mapping[str, str] | None = None,
        timeout_seconds: int | None = None,
        on_timeout: Literal["delete", "pause", "stop"] | None = None,
        accel: Literal["kvm", "tcg"] | None = None,
        node_labels: Mapping[str, str] | None = None,
        wait: bool = True,
        wait_timeout: float = DEFAULT_WAIT,
    ) -> AsyncSandbox:
        """Creates a sandbox (the API's ``CreateSandboxRequest``, every field
        optional) and by default waits until it runs. A sandbox that fails to
        come up is deleted and SandboxStateError raised, with its
        ``error_code`` and ``error_message``. ``timeout_seconds`` is the
        sandbox's own deadline; ``wait_timeout`` bounds the wait."""
        req = body(
            template=template, name=name, size=size, vcpus=vcpus, memory_mib=memory_mib, disk_mib=disk_mib, region=region,
            env=dict(env) if env is not None else None, secrets=dict(secrets) if secrets is not None else None, network=network,
            git_repo=git_repo, git_branch=git_branch, pr_number=pr_number, git_path=git_path, git_pr_ref=git_pr_ref,
            git_token_secret=git_token_secret, max_cost_micros=max_cost_micros, browser=browser, desktop=desktop,
            metadata=dict(metadata) if metadata is not None else None, timeout_seconds=timeout_seconds, on_timeout=on_timeout,
            accel=accel, node_labels=dict(node_labels) if node_labels is not None else None,
        )
        info = cast(SandboxInfo, await self._t.json("POST", "/public/sandboxes", json=req))
        sbx = AsyncSandbox(self._t, info, self._ttl)
        if wait:
            try:
                sbx.info = await wait_for_state(self._t, sbx.id, "running", wait_timeout)
            except BaseException:
                # Leave nothing behind: a sandbox that did not come up is deleted.
                await sbx._delete_quietly()
                raise
        return sbx

    async def get(self, ref: str) -> AsyncSandbox:
        """A sandbox by id or name (destroyed ones too); NotFoundError if there is none."""
        info = cast(SandboxInfo, await self._t.json("GET", f"/public/sandboxes/{quote(ref)}"))
        return AsyncSandbox(self._t, info, self._ttl)

    async def list(self, *, state: builtins.list[State] | None = None, include_destroyed: bool = False) -> builtins.list[AsyncSandbox]:
        """The account's sandboxes, oldest first (destroyed ones only with include_destroyed)."""
        out: builtins.list[AsyncSandbox] = []
        after: str | None = None
        while True:
            q = {"state": ",".join(state) if state else None, "include_destroyed": include_destroyed or None, "limit": 1000, "after": after}
            r = await self._t.json("GET", "/public/sandboxes", query=q)
            out += [AsyncSandbox(self._t, i, self._ttl) for i in r["sandboxes"]]
            after = r.get("next_after")
            if not after:
                return out

    async def delete(self, ref: str, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Deletes a sandbox and its snapshots; by default waits until it is destroyed."""
        info = cast(SandboxInfo, await self._t.json("DELETE", f"/public/sandboxes/{quote(ref)}"))
        if wait and info["state"] not in ("destroyed", "error"):
            return await wait_sandbox(self._t, info["id"], None, wait_timeout)
        return info

    async def wait(self, ref: str, state: State | None = None, *, timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Waits until the sandbox has settled (or is in state: SandboxStateError if it settles elsewhere)."""
        if state is None:
            return await wait_sandbox(self._t, ref, None, timeout)
        return await wait_for_state(self._t, ref, state, timeout)


class AsyncTemplate(AsyncResource):
    """A template. As a context manager (one the caller built), deleted at the end."""

    def __init__(self, transport: AsyncTransport, info: TemplateInfo) -> None:
        self._t = transport
        #: The template as the API returned it last.
        self.info: TemplateInfo = info

    @property
    def state(self) -> str:
        return self.info["state"]

    def __repr__(self) -> str:
        return f"Template({self.id!r}, name={self.name!r}, state={self.state!r})"

    def _ref(self) -> str:
        return quote(self.id or self.name)

    async def refresh(self) -> TemplateInfo:
        self.info = cast(TemplateInfo, await self._t.json("GET", f"/public/templates/{self._ref()}"))
        return self.info

    async def events(self) -> AsyncIterator[TemplateEvent]:
        """The build's log from the start, then as it goes (``progress``, ``log``,
        ``state`` events); ends once the build has ended."""
        async for ev in self._t.events(f"/public/templates/{self._ref()}/events"):
            yield cast(TemplateEvent, ev)

    async def wait(self, on_event: Callable[[TemplateEvent], None] | None = None) -> TemplateInfo:
        """Follows the build to its end (each event to on_event) and returns the
        template: ``ready``, or ``error`` with its ``state_reason``."""
        async for ev in self.events():
            if on_event is not None:
                on_event(ev)
        return await self.refresh()

    async def delete(self) -> TemplateInfo:
        """Deletes the template; sandboxes already booted from it keep working."""
        self.info = cast(TemplateInfo, await self._t.json("DELETE", f"/public/templates/{self._ref()}"))
        return self.info


class AsyncTemplates:
    """Templates (``zeish.templates``): built-ins and the account's own, built from images."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def build(
        self,
        name: str,
        source: str | None = None,
        *,
        archive: str | os.PathLike[str] | BinaryIO | None = None,
        disk_mib: int | None = None,
        start_cmd: builtins.list[str] | None = None,
        ready_cmd: builtins.list[str] | None = None,
        ready_timeout_seconds: int | None = None,
        cold: bool | None = None,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        registry_secret: str | None = None,
        username: str | None = None,
        password: str | None = None,
        wait: bool = True,
        on_event: Callable[[TemplateEvent], None] | None = None,
    ) -> AsyncTemplate:
        """Builds a template from an image: ``source`` is ``registry:host/repo:tag``
        (the API's ``from``), or give ``archive`` (a ``docker save`` or OCI
        archive, a path or a binary file) to upload it, streamed. By default
        follows the build to its end, handing each progress event to
        ``on_event``; the template is then ``ready`` or ``error``."""
        if archive is not None and source is None:
            source = "docker-archive"
        if source is None:
            raise ValueError("build needs a source (registry:…) or an archive")
        req = body(
            name=name, disk_mib=disk_mib, start_cmd=start_cmd, ready_cmd=ready_cmd, ready_timeout_seconds=ready_timeout_seconds,
            cold=cold, vcpus=vcpus, memory_mib=memory_mib, registry_secret=registry_secret, username=username, password=password,
        )
        req["from"] = source
        if archive is None:
            info = await self._t.json("POST", "/public/templates", json=req)
        elif isinstance(archive, (str, os.PathLike)):
            with open(archive, "rb") as f:
                info = await self._upload(req, f)
        else:
            info = await self._upload(req, archive)
        tpl = AsyncTemplate(self._t, cast(TemplateInfo, info))
        if wait:
            await tpl.wait(on_event)
        return tpl

    async def _upload(self, req: dict[str, Any], archive: BinaryIO) -> Any:
        # spec first, then the image: the server reads the parts in this order.
        files = [("spec", (None, json.dumps(req), "application/json")), ("image", ("image.tar", archive, "application/x-tar"))]
        return await self._t.json("POST", "/public/templates", files=files)

    async def get(self, ref: str) -> AsyncTemplate:
        """A template by id or name (the account's own first, then the built-ins)."""
        return AsyncTemplate(self._t, cast(TemplateInfo, await self._t.json("GET", f"/public/templates/{quote(ref)}")))

    async def list(self) -> builtins.list[AsyncTemplate]:
        """The account's templates and the built-ins, oldest first."""
        r = await self._t.json("GET", "/public/templates")
        return [AsyncTemplate(self._t, i) for i in r["templates"]]

    async def delete(self, ref: str) -> TemplateInfo:
        """Deletes a template (built-ins: AuthenticationError ``forbidden``)."""
        return cast(TemplateInfo, await self._t.json("DELETE", f"/public/templates/{quote(ref)}"))


class AsyncSecrets:
    """Account secrets (``zeish.secrets``): stored sealed, never returned, named in requests."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def put(self, name: str, value: str) -> Secret:
        """Stores (or replaces) a secret."""
        return cast(Secret, await self._t.json("PUT", f"/public/secrets/{quote(name)}", json={"value": value}))

    async def list(self) -> builtins.list[Secret]:
        """The account's secrets, by name (values are never returned)."""
        r = await self._t.json("GET", "/public/secrets")
        return cast(builtins.list[Secret], r["secrets"])

    async def delete(self, name: str) -> None:
        await self._t.send("DELETE", f"/public/secrets/{quote(name)}")


class AsyncAdmin:
    """Accounts, API keys and nodes (``zeish.admin``): admin keys only, others get ``forbidden``."""

    def __init__(self, transport: AsyncTransport) -> None:
        self._t = transport

    async def create_account(self, name: str) -> Account:
        """An account with no keys yet (``name_taken`` if the name is used)."""
        return cast(Account, await self._t.json("POST", "/admin/accounts", json={"name": name}))

    async def list_accounts(self) -> builtins.list[Account]:
        r = await self._t.json("GET", "/admin/accounts")
        return cast(builtins.list[Account], r["accounts"])

    async def create_key(self, account_id: str) -> CreatedAPIKey:
        """A new API key; its ``key`` (``zk_…``) is in this answer only."""
        return cast(CreatedAPIKey, await self._t.json("POST", f"/admin/accounts/{quote(account_id)}/keys", json={}))

    async def list_keys(self, account: str | None = None) -> builtins.list[APIKey]:
        """Keys (prefixes only), revoked ones included; of one account with account."""
        r = await self._t.json("GET", "/admin/keys", query={"account": account})
        return cast(builtins.list[APIKey], r["keys"])

    async def revoke_key(self, key_id: str) -> APIKey:
        """Revokes a key at once; returns it with ``revoked_at``."""
        return cast(APIKey, await self._t.json("DELETE", f"/admin/keys/{quote(key_id)}"))

    async def list_nodes(self) -> builtins.list[Node]:
        """A cluster's node agents (a single zeishd answers NotFoundError)."""
        r = await self._t.json("GET", "/admin/nodes")
        return cast(builtins.list[Node], r["nodes"])

    async def drain_node(self, node_id: str) -> Node:
        return cast(Node, await self._t.json("POST", f"/admin/nodes/{quote(node_id)}/drain"))

    async def undrain_node(self, node_id: str) -> Node:
        return cast(Node, await self._t.json("POST", f"/admin/nodes/{quote(node_id)}/undrain"))


class AsyncZeish:
    """A client of one zeishd.

    ``api_url`` defaults to ``ZEISH_API_URL`` (else
    ``http://127.0.0.1:7420/api/v1``) and ``api_key`` to ``ZEISH_API_KEY``,
    else zeishd's admin key file (``$ZEISH_DATA_DIR/admin.key``), as zeishctl
    does. Close it (or use it as a context manager) to free its connections.
    """

    def __init__(
        self,
        api_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.AsyncClient | None = None,
        token_ttl: int | None = None,
    ) -> None:
        self._t = AsyncTransport(api_url or api_url_from_env(), api_key if api_key is not None else api_key_from_env(), http_client, timeout)
        #: Sandboxes: create, get, list, delete, wait.
        self.sandboxes = AsyncSandboxes(self._t, token_ttl)
        #: Templates: build from an image, get, list, delete.
        self.templates = AsyncTemplates(self._t)
        #: Account secrets.
        self.secrets = AsyncSecrets(self._t)
        #: Accounts, keys and nodes (admin keys only).
        self.admin = AsyncAdmin(self._t)

    @property
    def api_url(self) -> str:
        return self._t.api_url

    @property
    def server_url(self) -> str:
        """The server root (api_url without ``/api/v1``)."""
        return self._t.api_url.removesuffix("/api/v1")

    async def health(self) -> Health:
        """GET /healthz: the server's version and accelerator (needs no key)."""
        return cast(Health, await self._t.json("GET", self.server_url + "/healthz"))

    async def usage(self, *, from_: datetime | str | None = None, to: datetime | str | None = None) -> UsageReport:
        """The account's usage and cost per sandbox (destroyed ones included) and in total within [from_, to)."""
        q = {"from": time_param(from_), "to": time_param(to)}
        return cast(UsageReport, await self._t.json("GET", "/public/usage", query=q))

    async def estimate(
        self,
        *,
        sandboxes: int | None = None,
        size: SizePreset | None = None,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        disk_mib: int | None = None,
        minutes: int | None = None,
    ) -> PriceEstimate:
        """The pricing calculator: what sandboxes of one size cost running for minutes."""
        q = body(sandboxes=sandboxes, size=size, vcpus=vcpus, memory_mib=memory_mib, disk_mib=disk_mib, minutes=minutes)
        return cast(PriceEstimate, await self._t.json("GET", "/public/pricing/estimate", query=q))

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        """A raw control-plane call (path relative to api_url); the decoded JSON answer."""
        return await self._t.json(method, path, **kw)

    async def aclose(self) -> None:
        await self._t.aclose()

    async def __aenter__(self) -> AsyncZeish:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
