"""Session fixtures: one zeishd (in a lab of network namespaces) and as few
booted VMs as the suite can do with.

The eval-farm example runs first (``farm``): its kept baseline, a running
``debian`` sandbox with a git clone, is then the sandbox the SDK's tests
share (``sbx``) instead of booting one of their own. Tests fork it rather
than boot; the harness deletes everything at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness import REPO, SDK, Harness, vm_skip_reason

import zeish

FARM = REPO / "examples" / "eval-farm" / "python"
sys.path.insert(0, str(FARM))

import demo_repo  # noqa: E402

#: The farm's N in the suite (the bench runs 4 and 8).
FARM_N = 2


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _harness is not None:
        _harness.failed = True  # print zeishd's log at the end


_harness: Harness | None = None


_farm_report: list[str] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The eval farm's table and wall times, which its test's output would hide."""
    if _farm_report:
        terminalreporter.section("eval-farm (examples/eval-farm/python)")
        for line in _farm_report:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def server() -> Iterator[Harness]:
    """The suite's zeishd; skips VM tests where they cannot run (never under CI)."""
    global _harness
    why = vm_skip_reason()
    if why:
        pytest.skip(why)
    t0 = time.monotonic()
    h = Harness()
    _harness = h
    print(f"\nzeishd up in {time.monotonic() - t0:.1f}s at {h.api_url}", file=sys.stderr)
    try:
        _wait_for_debian(h.client)
        yield h
    finally:
        _harness = None
        h.stop()


def _wait_for_debian(z: zeish.Zeish) -> None:
    """The debian template comes from the shared cache; zeishd registers it shortly after start."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if any(t.name == "debian" and t.state == "ready" for t in z.templates.list()):
            return
        time.sleep(0.5)
    raise RuntimeError("the debian template is not ready: run `go test -run '^TestBuildDebian$' ./template` to fill the cache")


@pytest.fixture(scope="session")
def client(server: Harness) -> zeish.Zeish:
    return server.client


@pytest.fixture(scope="session")
def farm(server: Harness) -> dict[str, Any]:
    """Runs the eval-farm example (forked and naive, N = FARM_N) against the demo repository."""
    demo_repo.make(server.git_root / "calc.git")
    env = server.client_env()
    env["PYTHONPATH"] = str(SDK) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, str(FARM / "farm.py"), "--repo", server.git_url("calc.git"), "-n", str(FARM_N), "--json"],
        env=env, capture_output=True, text=True, timeout=1500,
    )
    took = time.monotonic() - t0
    sys.stderr.write(r.stderr)
    print(r.stdout, file=sys.stderr)
    print(f"eval-farm N={FARM_N} (forked and naive): {took:.1f}s", file=sys.stderr)
    _farm_report.extend(r.stdout.strip().splitlines()[:-1] + [f"the example ran {took:.1f}s (forked and naive, N = {FARM_N})"])
    lines = r.stdout.strip().splitlines()
    summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    return {"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "summary": summary, "seconds": took}


@pytest.fixture(scope="session")
def sbx(client: zeish.Zeish, farm: dict[str, Any]) -> zeish.Sandbox:
    """The running debian sandbox the SDK tests share: the farm's kept baseline."""
    runs = farm["summary"].get("runs") or []
    if not runs or not runs[0].get("baseline"):
        pytest.fail(f"the eval farm kept no baseline:\n{farm['stderr'][-3000:]}")
    s = client.sandboxes.get(runs[0]["baseline"])
    if s.state != "running":
        s.wait("running")
    return s
