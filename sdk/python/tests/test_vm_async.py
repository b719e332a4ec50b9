"""The async client against the shared sandbox: the same calls, awaited."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import zeish
from harness import Harness


def test_async_client(server: Harness, sbx: zeish.Sandbox) -> None:
    async def run() -> None:
        async with zeish.AsyncZeish(server.api_url, server.api_key) as z:
            s = await z.sandboxes.get(sbx.id)
            assert s.state == "running"
            assert sbx.id in [x.id for x in await z.sandboxes.list(state=["running"])]
            r = await s.run("echo out; echo err >&2; exit 2", env={"A": "1"})
            assert (r.exit_code, r.stdout, r.stderr) == (2, "out\n", "err\n")
            texts: list[str] = []
            async with await s.exec("for i in 1 2; do echo $i; sleep 0.3; done") as ex:
                async for chunk in ex:
                    texts.append(chunk.text)
            assert "".join(texts) == "1\n2\n" and ex.exit_code == 0

            data = os.urandom(3 << 20)

            async def parts() -> AsyncIterator[bytes]:
                for i in range(0, len(data), 1 << 20):
                    yield data[i : i + (1 << 20)]

            assert (await s.files.write("/root/async.bin", parts()))["size"] == len(data)
            got = bytearray()
            async with await s.files.stream("/root/async.bin") as reader:
                async for piece in reader:
                    got += piece
            assert bytes(got) == data
            await s.files.remove("/root/async.bin")
            assert not await s.files.exists("/root/async.bin")

            async with await s.terminal(24, 80) as t:
                await t.write("echo async-$((2+3))\n")
                await t.expect("async-5")
                await t.write("exit 3\n")
                assert (await t.wait(timeout=60))["exit_code"] == 3

            assert (await s.pause())["state"] == "paused"
            assert (await s.resume())["state"] == "running"
            assert (await s.lineage())["sandbox"]["id"] == sbx.id
            assert isinstance(await s.snapshots.list(), list)
            assert (await z.estimate(minutes=1))["minutes"] == 1

    asyncio.run(run())
