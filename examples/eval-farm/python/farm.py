"""eval-farm (Python): prepare once, fork N ways, one trial per fork.

1. Baseline: a sandbox of the ``debian`` template that clones the project
   (``--repo``) at create, installs its dependencies and runs its tests once
   to warm up. It is kept (named ``--baseline``) and reused by the next run.
2. Fork it N ways while it runs: each child carries on from the prepared state.
3. One trial per child, in parallel, with progress: apply a candidate patch
   (an agent's proposed fix) and run the tests.
4. A table of the results; the children are deleted, the baseline kept.
5. The same N trials the naive way (``--mode both``, the default): a fresh
   sandbox per trial, each cloning, installing and warming up on its own,
   and both wall times side by side.

    PYTHONPATH=sdk/python python3 examples/eval-farm/python/farm.py --repo git://host/calc.git -n 4

ZEISH_API_URL / ZEISH_API_KEY (or zeishd's admin.key) say which zeishd.
demo_repo.py makes the demo repository the trials expect.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from urllib.parse import urlsplit

import zeish
from zeish.schema import NetworkRequest

WORKDIR = "/home/user/workspace"
INSTALL = "python3 -m pip install --quiet --no-cache-dir --disable-pip-version-check --no-index --find-links vendor --target .deps -r requirements.txt"
TESTS = "PYTHONPATH=.deps python3 -m unittest 2>&1"

#: Candidate patches to calc/__init__.py, as an agent might propose them: (title, rewrite).
CANDIDATES: list[tuple[str, Callable[[str], str]]] = [
    ("no change", lambda s: s),
    ("fix mean", lambda s: s.replace("(len(xs) + 1)", "len(xs)")),
    ("fix median", lambda s: s.replace(
        "    return s[len(s) // 2]\n",
        "    m = len(s) // 2\n    return s[m] if len(s) % 2 else (s[m - 1] + s[m]) / 2\n")),
    ("fix both", lambda s: CANDIDATES[2][1](CANDIDATES[1][1](s))),
    ("wrong mean fix", lambda s: s.replace("(len(xs) + 1)", "(len(xs) - 1)")),
    ("break clamp", lambda s: s.replace("max(lo, min(x, hi))", "min(lo, max(x, hi))")),
]


@dataclass
class Row:
    """One trial's outcome."""

    trial: int
    patch: str
    sandbox: str
    name: str
    exit_code: int
    passed: int
    tests: int
    seconds: float
    at: float  # when the result was in, seconds since the farm started
    error: str = ""


class Progress:
    """Prints a line to stderr as each trial ends."""

    def __init__(self, total: int, label: str) -> None:
        self.total, self.label, self.done = total, label, 0
        self._lock = threading.Lock()

    def __call__(self, row: Row) -> None:
        with self._lock:
            self.done += 1
            what = row.error or f"{row.passed}/{row.tests} passed"
            log(f"{self.label} [{self.done}/{self.total}] trial {row.trial} ({row.patch}) on {row.name}: {what} in {row.seconds:.1f}s")


def log(msg: str) -> None:
    print(f"[eval-farm] {msg}", file=sys.stderr, flush=True)


def sh(sbx: zeish.Sandbox, cmd: str, what: str, timeout: float = 600) -> zeish.ExecResult:
    """Runs cmd in the project as user `user`; raises with its output if it fails."""
    r = sbx.run(cmd, cwd=WORKDIR, user="user", timeout=timeout)
    if r.exit_code != 0:
        raise RuntimeError(f"{what} failed (exit {r.exit_code}): {(r.stdout + r.stderr).strip()[-800:]}")
    return r


def network_for(repo: str) -> NetworkRequest:
    """Egress only to the repository's host (no other network)."""
    host = urlsplit(repo).hostname or ""
    return {"egress": "deny", "allow": [host]}


def setup(sbx: zeish.Sandbox) -> str:
    """Installs the project's dependencies and runs its tests once (warm-up); returns the source trials patch."""
    sh(sbx, INSTALL, "installing dependencies")
    sbx.run(TESTS + " | tail -n 1", cwd=WORKDIR, user="user")  # the bugs fail tests: only warming up here
    return sbx.files.read_text(f"{WORKDIR}/calc/__init__.py")


def create_prepared(z: zeish.Zeish, repo: str, name: str | None, memory_mib: int, role: str) -> zeish.Sandbox:
    """A new sandbox with the project cloned (at create), installed and warm."""
    sbx = z.sandboxes.create(
        "debian", name=name, memory_mib=memory_mib, git_repo=repo, network=network_for(repo),
        metadata={"eval-farm.role": role, "eval-farm.repo": repo},
    )
    try:
        setup(sbx)
    except BaseException:
        sbx.delete()
        raise
    return sbx


def baseline(z: zeish.Zeish, repo: str, name: str, memory_mib: int, fresh: bool) -> tuple[zeish.Sandbox, bool]:
    """The kept baseline if one of this repository runs, else a new one; and whether it is new."""
    try:
        old = z.sandboxes.get(name)
    except zeish.NotFoundError:
        old = None
    if old is not None and old.state != "destroyed":
        same = old.info.get("metadata", {}).get("eval-farm.repo") == repo
        if same and not fresh and old.state in ("running", "paused", "stopped"):
            if old.state == "paused":
                old.resume()
            elif old.state == "stopped":
                old.start()
            log(f"reusing baseline {old.name} ({old.id})")
            return old, False
        log(f"replacing baseline {old.name} ({old.id}, {old.state})")
        old.delete()
    return create_prepared(z, repo, name, memory_mib, "baseline"), True


def trial(sbx: zeish.Sandbox, index: int, original: str, t0: float) -> Row:
    """Applies candidate index's patch and runs the tests."""
    title, rewrite = CANDIDATES[index % len(CANDIDATES)]
    start = time.monotonic()
    diff = "".join(difflib.unified_diff(
        original.splitlines(True), rewrite(original).splitlines(True), "a/calc/__init__.py", "b/calc/__init__.py"))
    apply = ""
    if diff:
        sbx.files.write(f"{WORKDIR}/trial.diff", diff, user="user")
        apply = "git apply trial.diff && "
    r = sbx.run(apply + TESTS, cwd=WORKDIR, user="user", timeout=600)
    ran = re.search(r"^Ran (\d+) tests?", r.stdout, re.M)
    tests = int(ran.group(1)) if ran else 0
    failed = sum(int(n) for n in re.findall(r"(?:failures|errors)=(\d+)", r.stdout))
    passed = tests - failed if ran else 0
    end = time.monotonic()
    return Row(index, title, sbx.id, sbx.name, r.exit_code, passed, tests, end - start, end - t0,
               "" if ran else f"no test ran: {r.stdout.strip()[-300:]}")


def run_parallel(n: int, work: Callable[[int], Row], progress: Progress) -> list[Row]:
    rows: list[Row] = []
    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = {pool.submit(work, i): i for i in range(n)}
        for f in as_completed(futures):
            try:
                row = f.result()
            except Exception as e:  # a trial that broke is a row, not the end of the farm
                row = Row(futures[f], "?", "", "", -1, 0, 0, 0.0, 0.0, f"{type(e).__name__}: {e}")
            progress(row)
            rows.append(row)
    return sorted(rows, key=lambda r: r.trial)


def forked(z: zeish.Zeish, args: argparse.Namespace) -> dict[str, object]:
    t0 = time.monotonic()
    base, new = baseline(z, args.repo, args.baseline, args.memory_mib, args.fresh)
    original = base.files.read_text(f"{WORKDIR}/calc/__init__.py")
    prepared = time.monotonic()
    log(f"baseline {base.name} ({base.id}) {'prepared' if new else 'reused'} in {prepared - t0:.1f}s")
    with base.clone(count=args.n) as fork:  # the children are deleted at the end of the block
        forked_at = time.monotonic()
        log(f"{args.n} fork(s) running after {forked_at - prepared:.1f}s; baseline paused {fork.pause_ms} ms")
        rows = run_parallel(args.n, lambda i: trial(fork[i], i, original, t0), Progress(args.n, "forked"))
        results_at = time.monotonic()
    log(f"children deleted in {time.monotonic() - results_at:.1f}s; baseline {base.name} kept")
    return {
        "mode": "forked", "n": args.n, "baseline": base.id, "baseline_new": new,
        "prepare_s": round(prepared - t0, 2), "fork_s": round(forked_at - prepared, 2), "pause_ms": fork.pause_ms,
        "trials_s": round(results_at - forked_at, 2), "wall_s": round(results_at - t0, 2), "rows": [asdict(r) for r in rows],
    }


def naive(z: zeish.Zeish, args: argparse.Namespace) -> dict[str, object]:
    t0 = time.monotonic()

    def one(i: int) -> Row:
        with create_prepared(z, args.repo, None, args.memory_mib, "naive") as sbx:  # deleted after its trial
            original = sbx.files.read_text(f"{WORKDIR}/calc/__init__.py")
            return trial(sbx, i, original, t0)

    rows = run_parallel(args.n, one, Progress(args.n, "naive"))
    # Each trial's sandbox is deleted right after it (its own create and setup counted in full).
    wall = max((r.at for r in rows), default=0.0)
    return {"mode": "naive", "n": args.n, "wall_s": round(wall, 2), "total_s": round(time.monotonic() - t0, 2),
            "rows": [asdict(r) for r in rows]}


def table(rows: list[dict[str, object]]) -> str:
    head = ["mode", "#", "patch", "sandbox", "exit", "passed", "seconds"]
    body = [[str(r["mode"]), str(r["trial"]), str(r["patch"]), str(r["sandbox"]) or "-", str(r["exit_code"]),
             str(r["error"]) or f"{r['passed']}/{r['tests']}", f"{r['seconds']:.1f}"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in [head, *body])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", required=True, help="git URL of the project (demo_repo.py makes one)")
    ap.add_argument("-n", type=int, default=4, help="trials: forks of the baseline, and fresh sandboxes the naive way (1-16)")
    ap.add_argument("--mode", choices=("forked", "naive", "both"), default="both")
    ap.add_argument("--baseline", default="eval-farm-baseline", help="name of the kept baseline sandbox")
    ap.add_argument("--fresh", action="store_true", help="prepare a new baseline even if one is kept")
    ap.add_argument("--memory-mib", type=int, default=512)
    ap.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    args = ap.parse_args(argv)
    if not 1 <= args.n <= 16:
        ap.error("-n must be within 1..16")
    summaries: list[dict[str, object]] = []
    with zeish.Zeish() as z:
        if args.mode in ("forked", "both"):
            summaries.append(forked(z, args))
        if args.mode in ("naive", "both"):
            summaries.append(naive(z, args))
    rows = [dict(r, mode=s["mode"]) for s in summaries for r in s["rows"]]  # type: ignore[attr-defined]
    print(table(rows))
    print()
    for s in summaries:
        extra = f" (prepare {s['prepare_s']}s, fork {s['fork_s']}s, trials {s['trials_s']}s)" if s["mode"] == "forked" else ""
        print(f"{s['mode']:<7} N={s['n']}  wall {s['wall_s']}s{extra}")
    if len(summaries) == 2:
        f, nv = (float(str(s["wall_s"])) for s in summaries)
        print(f"naive / forked: {nv / f:.2f}x")
    if args.json:
        print(json.dumps({"n": args.n, "runs": summaries}))
    broken = [r for r in rows if r["error"]]
    return 1 if broken else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except zeish.ZeishError as e:
        log(f"error {e.status} {e.code}: {e.message}" + (f" (request {e.request_id})" if e.request_id else ""))
        sys.exit(1)
