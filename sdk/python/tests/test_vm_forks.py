"""Forks, lineage and snapshots of the shared sandbox (children, not boots)."""

from __future__ import annotations

import pytest

import zeish


def test_fork_and_lineage(client: zeish.Zeish, sbx: zeish.Sandbox) -> None:
    sbx.files.write("/root/marker.txt", "from-parent\n")
    with sbx.clone(count=2, name="py-kid", max_cost_micros=9_000_000_000) as fork:
        assert fork.pause_ms >= 0 and len(fork) == 2
        kids = list(fork)
        assert [k.name for k in kids] == ["py-kid-1", "py-kid-2"]
        assert all(k.state == "running" and k.info.get("parent_id") == sbx.id for k in kids)
        assert kids[0].info["max_cost_micros"] == 9_000_000_000
        assert len({k.info["address"] for k in kids} | {sbx.info["address"]}) == 3
        assert [k.run("hostname").stdout for k in kids] == ["py-kid-1\n", "py-kid-2\n"]
        assert kids[0].files.read_text("/root/marker.txt") == "from-parent\n"
        kids[0].files.write("/root/child-only.txt", "mine")
        assert not sbx.files.exists("/root/child-only.txt") and not kids[1].files.exists("/root/child-only.txt")
        lin = sbx.lineage()
        assert lin["sandbox"]["id"] == sbx.id
        live = [d["id"] for d in lin["descendants"] if d["state"] != "destroyed"]  # destroyed ones are listed too
        assert sorted(live) == sorted(k.id for k in kids)
        kid_lin = kids[0].lineage()
        assert kid_lin["ancestors"][0]["id"] == sbx.id
        assert client.sandboxes.get("py-kid-1").id == kids[0].id  # a name works wherever an id does
        assert client.sandboxes.delete("py-kid-2")["state"] == "destroyed"  # the with block skips it then
    # The context manager deleted the children; the parent carries on.
    assert [client.sandboxes.get(k.id).state for k in kids] == ["destroyed", "destroyed"]
    assert sbx.run("echo still-here").stdout == "still-here\n"
    with pytest.raises(zeish.InvalidArgumentError):
        sbx.clone(count=17)


def test_snapshot_restore_and_clone(sbx: zeish.Sandbox) -> None:
    sbx.files.write("/root/version.txt", "v1\n")
    with sbx.snapshots.create("py-v1") as snap:
        assert snap.id.startswith("snp_") and snap.info["sandbox_id"] == sbx.id and snap.name == "py-v1"
        assert "py-v1" in [s.name for s in sbx.snapshots.list()]
        assert sbx.snapshots.get("py-v1").id == snap.id
        with pytest.raises(zeish.ConflictError) as ei:
            sbx.snapshots.create("py-v1")
        assert ei.value.code == "name_taken"
        sbx.files.write("/root/version.txt", "v2\n")
        restored = snap.restore()
        assert restored["state"] == "running"
        assert sbx.files.read_text("/root/version.txt") == "v1\n"  # later work is gone
        sbx.files.write("/root/version.txt", "v3\n")
        with snap.clone(count=1) as fork:
            assert fork.pause_ms == 0
            (kid,) = fork
            assert kid.files.read_text("/root/version.txt") == "v1\n"  # the sandbox as it was
        assert sbx.files.read_text("/root/version.txt") == "v3\n"  # untouched by the snapshot's clone
    with pytest.raises(zeish.NotFoundError):
        sbx.snapshots.get(snap.id)
    with pytest.raises(zeish.InvalidArgumentError):
        sbx.snapshots.create("x" * 65)
    sbx.files.remove("/root/version.txt")
