"""The Python eval farm, forked against naive, at several N (default 4 and 8),
on a zeishd of its own (the test harness's: network namespaces, a git daemon
serving the demo repository). Prints a markdown table. Run through
``make bench-python`` (BENCH_FARM_N="4 8"); it boots real VMs.

Each N prepares a fresh baseline (``--fresh``), so the forked wall time
includes the preparation once; "fork + trials" is what a farm with a kept
baseline waits for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from harness import REPO, SDK, Harness, vm_skip_reason

sys.path.insert(0, str(REPO / "examples" / "eval-farm" / "python"))

import demo_repo  # noqa: E402


def main(ns: list[int]) -> int:
    why = vm_skip_reason()
    if why:
        print(f"bench_farm: {why}", file=sys.stderr)
        return 1
    h = Harness()
    rows: list[str] = []
    try:
        demo_repo.make(h.git_root / "calc.git")
        env = h.client_env()
        env["PYTHONPATH"] = str(SDK)
        for n in ns:
            t0 = time.monotonic()
            r = subprocess.run(
                [sys.executable, str(REPO / "examples" / "eval-farm" / "python" / "farm.py"), "--repo", h.git_url("calc.git"),
                 "-n", str(n), "--fresh", "--json"],
                env=env, stdout=subprocess.PIPE, text=True,
            )
            print(r.stdout, file=sys.stderr)
            if r.returncode != 0:
                h.failed = True
                print(f"bench_farm: N={n} failed after {time.monotonic() - t0:.0f}s", file=sys.stderr)
                return 1
            forked, naive = json.loads(r.stdout.strip().splitlines()[-1])["runs"]
            kept = forked["fork_s"] + forked["trials_s"]
            rows.append(
                f"| {n} | {forked['prepare_s']:.1f} | {forked['fork_s']:.1f} ({forked['pause_ms']} ms pause) | "
                f"{forked['trials_s']:.1f} | **{forked['wall_s']:.1f}** | {kept:.1f} | **{naive['wall_s']:.1f}** | "
                f"{naive['wall_s'] / forked['wall_s']:.2f}x | {naive['wall_s'] / kept:.2f}x |"
            )
    except BaseException:
        h.failed = True
        raise
    finally:
        h.stop()
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    print("| N | prepare baseline s | fork s | trials s | forked wall s | fork + trials s (baseline kept) | naive wall s | naive ÷ forked | naive ÷ kept |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main([int(a) for a in sys.argv[1:]] or [4, 8]))
