"""A sandbox: one isolated VM, and what can be done to and inside it."""

from __future__ import annotations

import builtins
import time
from collections.abc import AsyncIterator, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, cast
from urllib.parse import urlencode

from .._wire import TRANSITIONS, ExecChunk, ExecResult, body, exec_request, term_query
from ..errors import SandboxStateError, ZeishError, ZeishTimeoutError
from ..schema import (
    Access,
    Browser,
    CloneResponse,
    Event,
    GitStatus,
    Lineage,
    ListedPort,
    NetworkRequest,
    Port,
    RestoreResponse,
    Sandbox as SandboxInfo,
    Snapshot as SnapshotInfo,
    State,
    TermInfo,
)
from ._dataplane import AsyncDataPlane, quote
from ._http import AsyncTransport
from ._io import run_all
from ._resource import AsyncResource
from .desktop import AsyncDesktop
from .execution import AsyncExecution
from .files import AsyncFiles, AsyncProcesses
from .terminal import AsyncTerminal

#: Each POST …/wait blocks at most this long, so no one HTTP exchange outlives proxies' timeouts.
WAIT_SLICE_SECONDS = 60
#: How long waits wait by default, in total (a TCG boot on a loaded host can take minutes).
DEFAULT_WAIT = 600.0

Egress = Literal["allow", "deny"]


async def wait_sandbox(t: AsyncTransport, ref: str, state: State | None, timeout: float) -> SandboxInfo:
    """Waits until the sandbox is in no transition (or in state, or can no
    longer get there), by bounded POST …/wait calls. ZeishTimeoutError after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        left = int(deadline - time.monotonic() + 0.999)
        if left <= 0:
            raise ZeishTimeoutError(0, "timeout", f"sandbox {ref} did not settle{f' in {state}' if state else ''} within {timeout:.0f}s")
        try:
            sb = cast(
                SandboxInfo,
                await t.json(
                    "POST", f"/public/sandboxes/{quote(ref)}/wait", json=body(state=state, timeout_seconds=min(WAIT_SLICE_SECONDS, left))
                ),
            )
        except ZeishError as e:
            if e.code == "timeout":
                continue
            raise
        if state is None and sb["state"] not in TRANSITIONS:
            return sb
        if state is not None and sb["state"] in (state, "error", "destroyed"):
            return sb


async def wait_for_state(t: AsyncTransport, ref: str, state: State, timeout: float) -> SandboxInfo:
    """wait_sandbox for state; SandboxStateError (with error_code and error_message) if it settles elsewhere."""
    sb = await wait_sandbox(t, ref, state, timeout)
    if sb["state"] != state:
        raise SandboxStateError.of(sb, state)
    return sb


class AsyncCloneResult:
    """The children of a clone, and how long the parent was paused. Used as a
    context manager, it deletes the children at the end."""

    def __init__(self, pause_ms: int, sandboxes: builtins.list[AsyncSandbox]) -> None:
        #: How long the parent was paused while its state was captured, ms (0 from a snapshot).
        self.pause_ms = pause_ms
        #: The children, in order.
        self.sandboxes = sandboxes

    def __iter__(self) -> Any:
        return iter(self.sandboxes)

    def __len__(self) -> int:
        return len(self.sandboxes)

    def __getitem__(self, i: int) -> AsyncSandbox:
        return self.sandboxes[i]

    async def delete(self) -> None:
        """Deletes every child (concurrently) and waits until they are destroyed."""
        await run_all([c._delete_quietly for c in self.sandboxes])

    async def __aenter__(self) -> AsyncCloneResult:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.delete()


async def fork_at(
    t: AsyncTransport, path: str, req: dict[str, Any], wait: bool, wait_timeout: float, ttl: int | None
) -> AsyncCloneResult:
    """POSTs a clone request (a sandbox's or a snapshot's) and, with wait,
    waits until every child runs (if one does not, all are deleted and the
    first failure raised)."""
    resp = cast(CloneResponse, await t.json("POST", path, json=req))
    kids = [AsyncSandbox(t, info, ttl) for info in resp["sandboxes"]]
    result = AsyncCloneResult(resp["pause_ms"], kids)
    if wait:
        try:
            await run_all([lambda c=c: c.wait("running", timeout=wait_timeout) for c in kids])  # type: ignore[misc]
        except BaseException:
            await result.delete()
            raise
    return result


class AsyncSnapshot(AsyncResource):
    """One snapshot of a sandbox. As a context manager, deleted at the end."""

    def __init__(self, info: SnapshotInfo, sandbox: AsyncSandbox) -> None:
        #: The snapshot as the API returned it.
        self.info: SnapshotInfo = info
        self._sandbox = sandbox

    async def restore(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Rolls the sandbox back to this snapshot."""
        return await self._sandbox.snapshots.restore(self.id, wait=wait, wait_timeout=wait_timeout)

    async def clone(self, count: int = 1, **kw: Any) -> AsyncCloneResult:
        """New sandboxes from this snapshot (see Snapshots.clone)."""
        return await self._sandbox.snapshots.clone(self.id, count, **kw)

    async def delete(self) -> None:
        await self._sandbox.snapshots.delete(self.id)

    def __repr__(self) -> str:
        return f"Snapshot({self.id!r}, name={self.name!r})"


class AsyncSnapshots:
    """The snapshots of one sandbox (``sandbox.snapshots``); a ref is a snapshot's id or its name."""

    def __init__(self, sandbox: AsyncSandbox) -> None:
        self._sb = sandbox
        self._t = sandbox._t

    def _path(self, ref: str = "") -> str:
        base = f"/public/sandboxes/{quote(self._sb.id)}/snapshots"
        return base + (f"/{quote(ref)}" if ref else "")

    async def create(self, name: str | None = None) -> AsyncSnapshot:
        """Saves disk and memory now (a running sandbox pauses only for a moment).
        Names are unique within the sandbox (``name_taken``); at most 20 (``limit_reached``)."""
        info = cast(SnapshotInfo, await self._t.json("POST", self._path(), json=body(name=name)))
        return AsyncSnapshot(info, self._sb)

    async def list(self) -> builtins.list[AsyncSnapshot]:
        """The sandbox's snapshots, oldest first."""
        r = await self._t.json("GET", self._path())
        return [AsyncSnapshot(i, self._sb) for i in r["snapshots"]]

    async def get(self, ref: str) -> AsyncSnapshot:
        return AsyncSnapshot(cast(SnapshotInfo, await self._t.json("GET", self._path(ref))), self._sb)

    async def restore(self, ref: str, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Rolls the sandbox back (work after the snapshot is lost); by default
        waits until it has settled. Returns the sandbox."""
        r = cast(RestoreResponse, await self._t.json("POST", self._path(ref) + "/restore"))
        self._sb.info = r["sandbox"]
        self._sb._dp.forget()
        if wait:
            return await self._sb.wait(timeout=wait_timeout)
        return r["sandbox"]

    async def delete(self, ref: str) -> None:
        await self._t.send("DELETE", self._path(ref))

    async def clone(
        self,
        ref: str,
        count: int = 1,
        *,
        name: str | None = None,
        git_branch: str | None = None,
        pr_number: int | None = None,
        max_cost_micros: int | None = None,
        browser: bool | None = None,
        desktop: bool | None = None,
        network: NetworkRequest | None = None,
        placement: Literal["parent", "any"] | None = None,
        wait: bool = True,
        wait_timeout: float = DEFAULT_WAIT,
    ) -> AsyncCloneResult:
        """New sandboxes from the snapshot: fork children of the sandbox as it
        was when the snapshot was taken; the sandbox itself is untouched."""
        req = body(count=count, name=name, git_branch=git_branch, pr_number=pr_number, max_cost_micros=max_cost_micros)
        req.update(body(browser=browser, desktop=desktop, network=network, placement=placement))
        return await fork_at(self._t, self._path(ref) + "/clone", req, wait, wait_timeout, self._sb._ttl)


class AsyncSandbox(AsyncResource):
    """One sandbox. Get one from ``zeish.sandboxes.create(…)`` or ``.get(…)``.

    ``info`` is the API's ``Sandbox`` object as last seen (``refresh()``
    reloads it). Used as a context manager it is deleted at the end.
    """

    def __init__(self, transport: AsyncTransport, info: SandboxInfo, token_ttl: int | None = None) -> None:
        self._t = transport
        self._ttl = token_ttl
        #: The sandbox as last seen (snake_case, exactly the ``Sandbox`` schema).
        self.info: SandboxInfo = info
        self._dp = AsyncDataPlane(transport, info["id"], token_ttl)
        #: Files inside the sandbox.
        self.files = AsyncFiles(self._dp)
        #: Processes inside the sandbox.
        self.processes = AsyncProcesses(self._dp)
        #: The sandbox's snapshots.
        self.snapshots = AsyncSnapshots(self)
        #: The desktop (sandboxes created or forked with ``desktop=True``).
        self.desktop = AsyncDesktop(transport, self._dp)

    @property
    def state(self) -> State:
        return self.info["state"]

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, name={self.name!r}, state={self.state!r})"

    def _path(self, suffix: str = "") -> str:
        return f"/public/sandboxes/{quote(self.id)}{suffix}"

    async def refresh(self) -> SandboxInfo:
        """Reloads ``info`` from the server."""
        self.info = cast(SandboxInfo, await self._t.json("GET", self._path()))
        return self.info

    async def wait(self, state: State | None = None, *, timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Waits until the sandbox is in no transition, or with state until it
        is in that state (SandboxStateError if it settles elsewhere)."""
        if state is None:
            self.info = await wait_sandbox(self._t, self.id, None, timeout)
        else:
            self.info = await wait_for_state(self._t, self.id, state, timeout)
        return self.info

    # ---- lifecycle -----------------------------------------------------------

    async def _lifecycle(self, op: str, want: State, wait: bool, wait_timeout: float) -> SandboxInfo:
        self.info = cast(SandboxInfo, await self._t.json("POST", self._path("/" + op)))
        if op != "resume":
            self._dp.forget()
        if not wait:
            return self.info
        return await self.wait(want, timeout=wait_timeout)

    async def pause(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Freezes the VM in memory (it keeps its running slot)."""
        return await self._lifecycle("pause", "paused", wait, wait_timeout)

    async def resume(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Continues a paused VM where it was."""
        return await self._lifecycle("resume", "running", wait, wait_timeout)

    async def stop(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Suspends the VM to disk, memory included: no compute used, nothing lost."""
        return await self._lifecycle("stop", "stopped", wait, wait_timeout)

    async def start(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Resumes a stopped VM where it was."""
        return await self._lifecycle("start", "running", wait, wait_timeout)

    async def delete(self, *, wait: bool = True, wait_timeout: float = DEFAULT_WAIT) -> SandboxInfo:
        """Deletes the sandbox and its snapshots; by default waits until it is destroyed."""
        self.info = cast(SandboxInfo, await self._t.json("DELETE", self._path()))
        self._dp.forget()
        if wait and self.info["state"] in TRANSITIONS:
            return await self.wait(timeout=wait_timeout)
        return self.info

    async def set_timeout(self, seconds: int, on_timeout: Literal["delete", "pause", "stop"] | None = None) -> SandboxInfo:
        """The sandbox's time is up ``seconds`` from now (0 clears it); then on_timeout happens."""
        self.info = cast(
            SandboxInfo, await self._t.json("POST", self._path("/timeout"), json=body(timeout_seconds=seconds, on_timeout=on_timeout))
        )
        return self.info

    # ---- forks ---------------------------------------------------------------

    async def clone(
        self,
        count: int = 1,
        *,
        name: str | None = None,
        git_branch: str | None = None,
        pr_number: int | None = None,
        max_cost_micros: int | None = None,
        browser: bool | None = None,
        desktop: bool | None = None,
        network: NetworkRequest | None = None,
        placement: Literal["parent", "any"] | None = None,
        wait: bool = True,
        wait_timeout: float = DEFAULT_WAIT,
    ) -> AsyncCloneResult:
        """Forks the sandbox while it runs: ``count`` children (1–16) carry on
        from this instant, copy-on-write. By default waits until every child
        runs. Fields left out keep the parent's value. In a cluster,
        ``placement="any"`` starts the children that do not fit on the
        parent's node on other nodes (each child's ``host`` says where)."""
        req = body(count=count, name=name, git_branch=git_branch, pr_number=pr_number, max_cost_micros=max_cost_micros)
        req.update(body(browser=browser, desktop=desktop, network=network, placement=placement))
        return await fork_at(self._t, self._path("/clone"), req, wait, wait_timeout, self._ttl)

    fork = clone

    async def lineage(self) -> Lineage:
        """The sandbox, its ancestors up to the root, and all its descendants."""
        return cast(Lineage, await self._t.json("GET", self._path("/lineage")))

    # ---- control-plane extras --------------------------------------------------

    async def access(self) -> Access:
        """A data-plane URL and token (cached, renewed before it expires)."""
        return await self._dp.access()

    async def browser(self, ttl_seconds: int | None = None) -> Browser:
        """The DevTools (CDP) endpoint of a sandbox created with ``browser=True``:
        ``cdp_url`` carries a token, for Playwright's ``connect_over_cdp``."""
        return cast(Browser, await self._t.json("GET", self._path("/browser"), query={"ttl_seconds": ttl_seconds}))

    async def git_status(self) -> GitStatus:
        """The sandbox's git clone: branch, HEAD commit, dirty files."""
        return cast(GitStatus, await self._t.json("GET", self._path("/git")))

    async def set_network(
        self,
        *,
        egress: Egress | None = None,
        allow: builtins.list[str] | None = None,
        deny: builtins.list[str] | None = None,
        rate_bytes_per_second: int | None = None,
        rate_packets_per_second: int | None = None,
    ) -> SandboxInfo:
        """Changes the egress policy of the running sandbox; each field given
        replaces the sandbox's (``[]`` clears a list)."""
        req = body(
            egress=egress, allow=allow, deny=deny, rate_bytes_per_second=rate_bytes_per_second,
            rate_packets_per_second=rate_packets_per_second,
        )
        self.info = cast(SandboxInfo, await self._t.json("PATCH", self._path("/network"), json=req))
        return self.info

    async def ports(self) -> builtins.list[ListedPort]:
        """The TCP ports the guest listens on and those open to the public, with their URLs."""
        r = await self._t.json("GET", self._path("/ports"))
        return cast(builtins.list[ListedPort], r["ports"])

    async def set_port(self, port: int, public: bool) -> Port:
        """Opens a guest port to requests without a token, or closes it again."""
        return cast(Port, await self._t.json("POST", self._path("/ports"), json={"port": port, "public": public}))

    async def events(self) -> AsyncIterator[Event]:
        """Follows the sandbox's state (server-sent events): the sandbox now, then after every change."""
        async for ev in self._t.events(self._path("/events")):
            yield cast(Event, ev)

    # ---- exec ------------------------------------------------------------------

    async def exec(
        self,
        cmd: str | builtins.list[str],
        *,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
    ) -> AsyncExecution:
        """Starts a command and streams its output: a list is argv (no shell), a
        string runs with ``sh -c``. ``timeout`` kills it after that many seconds.
        Errors found before it starts (``file_not_found``) are raised here."""
        req = exec_request(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout)
        resp = await self._dp.send("POST", "/exec", json=req, headers={"accept": "application/x-ndjson"}, stream=True)
        return AsyncExecution(resp)

    async def run(
        self,
        cmd: str | builtins.list[str],
        *,
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
        timeout: float | None = None,
        on_output: Callable[[ExecChunk], None] | None = None,
        check: bool = False,
    ) -> ExecResult:
        """Runs a command to its end and returns its result (exit code, stdout,
        stderr). A non-zero exit is a result, not an error, unless ``check``
        (then CommandError). ``on_output`` sees each chunk as it arrives."""
        async with await self.exec(cmd, stdin=stdin, env=env, cwd=cwd, user=user, timeout=timeout) as ex:
            if on_output is None:
                result = await ex.wait()
            else:
                async for chunk in ex:
                    on_output(chunk)
                result = await ex.wait()
        return result.check() if check else result

    # ---- terminals ---------------------------------------------------------------

    async def terminal(
        self,
        rows: int = 24,
        cols: int = 80,
        *,
        argv: builtins.list[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        user: str | None = None,
    ) -> AsyncTerminal:
        """Opens an interactive terminal: argv on a pseudo-terminal (default the
        user's login shell)."""
        q = term_query(rows, cols, argv=argv, env=env, cwd=cwd, user=user)
        return await self._open_terminal("/terminals/connect", q)

    async def attach_terminal(self, pid: int, rows: int | None = None, cols: int | None = None) -> AsyncTerminal:
        """Re-attaches to a terminal (its recent output is replayed first)."""
        q: builtins.list[tuple[str, str]] = []
        if rows is not None or cols is not None:
            q = term_query(rows or 0, cols or 0)
        return await self._open_terminal(f"/terminals/{int(pid)}/connect", q)

    async def _open_terminal(self, path: str, query: builtins.list[tuple[str, str]]) -> AsyncTerminal:
        for attempt in range(2):
            acc = await self._dp.access(force=attempt > 0)
            url = acc["url"] + path + ("?" + urlencode(query) if query else "")
            try:
                return await AsyncTerminal.open(url, acc["token"])
            except ZeishError as e:
                if attempt > 0 or e.code != "token_expired":
                    raise
        raise AssertionError("unreachable")

    async def terminals(self) -> builtins.list[TermInfo]:
        """The sandbox's terminals: running, and exited ones not yet collected."""
        r = await self._dp.json("GET", "/terminals")
        return cast(builtins.list[TermInfo], r["terminals"])
