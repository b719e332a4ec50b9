"""examples/eval-farm/python at N = FARM_N against the suite's zeishd: the
forked farm and the naive one, their results and wall times, and what they
leave (the baseline only)."""

from __future__ import annotations

from typing import Any

from conftest import FARM_N

import zeish

# Tests passed by each candidate patch of farm.py on the demo project (6 tests).
WANT = {"no change": 2, "fix mean": 5, "fix median": 3, "fix both": 6}


def test_eval_farm(client: zeish.Zeish, farm: dict[str, Any]) -> None:
    assert farm["returncode"] == 0, farm["stderr"][-4000:]
    runs = farm["summary"]["runs"]
    assert [r["mode"] for r in runs] == ["forked", "naive"]
    forked, naive = runs
    for run in runs:
        rows = run["rows"]
        assert [r["trial"] for r in rows] == list(range(FARM_N))
        assert len({r["sandbox"] for r in rows}) == FARM_N
        for r in rows:
            assert not r["error"] and r["tests"] == 6, r
            assert r["passed"] == WANT[r["patch"]], r
            # The trial's sandbox was deleted after it.
            assert client.sandboxes.get(r["sandbox"]).state == "destroyed"
        assert run["wall_s"] > 0
    base = client.sandboxes.get(forked["baseline"])
    assert base.state == "running" and base.name == "eval-farm-baseline", "the baseline is kept"
    assert [r["sandbox"] for r in forked["rows"]] != [r["sandbox"] for r in naive["rows"]]
    lineage = base.lineage()
    assert {r["sandbox"] for r in forked["rows"]} <= {d["id"] for d in lineage["descendants"]}
    assert [s.id for s in client.sandboxes.list()] == [base.id], "nothing but the baseline is left"
    out = farm["stdout"]
    assert "naive / forked:" in out and f"forked  N={FARM_N}" in out and f"naive   N={FARM_N}" in out
    print(f"\neval-farm N={FARM_N}: forked {forked['wall_s']}s (prepare {forked['prepare_s']}s), naive {naive['wall_s']}s")
