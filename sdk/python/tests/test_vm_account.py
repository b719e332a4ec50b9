"""Calls around sandboxes: errors for bad input, a failed boot's error code,
templates built from an image with progress, secrets, usage and prices,
accounts and keys."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harness import Harness

import zeish


def test_bad_input_errors(server: Harness, client: zeish.Zeish) -> None:
    assert client.health()["status"] == "ok"
    before = [s.id for s in client.sandboxes.list()]
    with pytest.raises(zeish.NotFoundError) as ei:
        client.sandboxes.get("sbx_00000000000000000000")
    assert (ei.value.status, ei.value.code) == (404, "not_found") and ei.value.request_id
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.sandboxes.get("Not_A_Ref")
    assert ei.value.status == 400 and ei.value.code == "invalid_argument"
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.sandboxes.create(memory_mib=99999999)
    assert "memory_mib" in ei.value.message
    with pytest.raises(zeish.InvalidArgumentError):
        client.sandboxes.create(name="Not A Hostname!")
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.sandboxes.create("no-such-template")
    assert ei.value.code == "unknown_template"
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.sandboxes.create("base", git_repo=server.git_url("calc.git"))
    assert ei.value.code == "template_lacks_git"
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.sandboxes.create("debian", git_repo="http://bob:pw@198.18.7.7/x.git")
    assert ei.value.code == "git_credentials_in_url"
    with pytest.raises(zeish.NotFoundError):
        client.request("DELETE", "/public/snapshots/snp_00000000000000000000")
    with zeish.Zeish(server.api_url, "zk_wrong") as wrong, pytest.raises(zeish.AuthenticationError) as ei:
        wrong.sandboxes.list()
    assert (ei.value.status, ei.value.code) == (401, "unauthenticated")
    with zeish.Zeish(server.api_url, "") as none, pytest.raises(zeish.AuthenticationError) as ei:
        none.sandboxes.list()
    assert "no API key" in ei.value.message
    assert [s.id for s in client.sandboxes.list()] == before, "refused calls left nothing behind"


def test_a_wait_that_does_not_end_times_out(client: zeish.Zeish, sbx: zeish.Sandbox) -> None:
    with pytest.raises(zeish.ZeishTimeoutError) as ei:
        client.sandboxes.wait(sbx.id, "paused", timeout=2)
    assert ei.value.code == "timeout"
    assert client.sandboxes.wait(sbx.name)["state"] == "running"


def test_a_failed_boot_raises_its_error_code(server: Harness, client: zeish.Zeish) -> None:
    before = [s.id for s in client.sandboxes.list()]
    with pytest.raises(zeish.SandboxStateError) as ei:
        client.sandboxes.create("debian", name="py-no-repo", git_repo=server.git_url("missing.git"))
    e = ei.value
    assert (e.state, e.error_code) == ("error", "git_clone_failed"), e
    assert e.error_message and "missing.git" in e.error_message
    assert e.sandbox_id.startswith("sbx_")
    # create() deleted the sandbox that did not come up.
    assert client.sandboxes.get(e.sandbox_id).state == "destroyed"
    assert [s.id for s in client.sandboxes.list()] == before


def _docker_archive() -> bytes:
    """A one-layer image as `docker save` writes it."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as t:
        data = b"hello from the image\n"
        info = tarfile.TarInfo("etc/greeting")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    layer_bytes = layer.getvalue()
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["GREETING=hi"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()]},
    }).encode()
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["py/test:1"], "Layers": ["layer/layer.tar"]}]).encode()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as t:
        for name, data in (("config.json", config), ("layer/layer.tar", layer_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_template_from_an_image_with_progress(client: zeish.Zeish, tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    archive.write_bytes(_docker_archive())
    events: list[dict[str, object]] = []
    with client.templates.build("py-tpl", archive=archive, cold=True, disk_mib=256, on_event=lambda e: events.append(dict(e))) as tpl:
        assert tpl.state == "ready", tpl.info.get("state_reason")
        assert tpl.id.startswith("tpl_") and tpl.info["source"].startswith("docker-archive")
        steps = [e["progress"]["step"] for e in events if e["type"] == "progress"]  # type: ignore[index]
        assert "layer" in steps and steps[-1] == "done", events
        assert events[-1]["type"] == "state"
        assert "py-tpl" in [t.name for t in client.templates.list()]
        assert client.templates.get("py-tpl").id == tpl.id
        with pytest.raises(zeish.ConflictError) as ei:
            client.templates.build("py-tpl", archive=archive, cold=True)
        assert ei.value.code == "name_taken"
        # The finished build's log replays.
        assert [e["type"] for e in tpl.events()][-1] == "state"
    with pytest.raises(zeish.NotFoundError):
        client.templates.get("py-tpl")
    with pytest.raises(zeish.AuthenticationError) as ei:
        client.templates.delete("base")
    assert ei.value.code == "forbidden"
    with pytest.raises(zeish.InvalidArgumentError) as ei:
        client.templates.build("py-reg", "registry:127.0.0.1:1/x:1", registry_secret="nope", wait=False)
    assert ei.value.code == "unknown_secret"


def test_secrets(client: zeish.Zeish) -> None:
    s = client.secrets.put("PY_TOKEN", "s3cret")
    assert s["name"] == "PY_TOKEN" and "value" not in s
    assert "PY_TOKEN" in [x["name"] for x in client.secrets.list()]
    client.secrets.delete("PY_TOKEN")
    assert "PY_TOKEN" not in [x["name"] for x in client.secrets.list()]
    with pytest.raises(zeish.NotFoundError):
        client.secrets.delete("PY_TOKEN")
    with pytest.raises(zeish.InvalidArgumentError):
        client.secrets.put("bad name!", "x")


def test_usage_and_estimate(client: zeish.Zeish) -> None:
    u = client.usage()
    assert u["total"]["cost_micros"] == sum(s["usage"]["cost_micros"] for s in u["sandboxes"])
    past = client.usage(from_=datetime(2020, 1, 1, tzinfo=timezone.utc), to=datetime(2020, 1, 2, tzinfo=timezone.utc))
    assert (past["sandboxes"], past["total"]["cost_micros"]) == ([], 0)
    with pytest.raises(zeish.InvalidArgumentError):
        client.usage(from_="yesterday")
    with pytest.raises(zeish.InvalidArgumentError):
        now = datetime.now(timezone.utc)
        client.usage(from_=now, to=now - timedelta(hours=1))
    est = client.estimate(sandboxes=3, size="medium", memory_mib=4096, minutes=10)
    assert (est["sandboxes"], est["vcpus"], est["memory_mib"], est["disk_mib"], est["minutes"]) == (3, 2, 4096, 8192, 10)
    p = est["prices"]
    compute = 1800 * 2 * p["vcpu_second_micros"] + 1800 * 4 * p["memory_gib_second_micros"]
    assert est["usage"]["compute_micros"] == round(compute)
    with pytest.raises(zeish.InvalidArgumentError):
        client.estimate(sandboxes=0)


def test_accounts_and_keys(server: Harness, client: zeish.Zeish) -> None:
    acc = client.admin.create_account("py-team")
    assert acc["id"].startswith("acc_") and not acc["admin"]
    assert acc["id"] in [a["id"] for a in client.admin.list_accounts()]
    with pytest.raises(zeish.ConflictError):
        client.admin.create_account("py-team")
    key = client.admin.create_key(acc["id"])
    assert key["key"].startswith("zk_") and key["key"].startswith(key["prefix"])
    assert [k["id"] for k in client.admin.list_keys(acc["id"])] == [key["id"]]
    with zeish.Zeish(server.api_url, key["key"]) as user:
        assert user.sandboxes.list() == []
        with pytest.raises(zeish.AuthenticationError) as ei:
            user.admin.list_accounts()
        assert ei.value.code == "forbidden"
        revoked = client.admin.revoke_key(key["id"])
        assert revoked.get("revoked_at")
        with pytest.raises(zeish.AuthenticationError) as ei:
            user.sandboxes.list()
        assert ei.value.code == "unauthenticated"
    # A single zeishd has no node agents.
    for call in (client.admin.list_nodes, lambda: client.admin.drain_node("n1"), lambda: client.admin.undrain_node("n1")):
        with pytest.raises(zeish.NotFoundError):
            call()
