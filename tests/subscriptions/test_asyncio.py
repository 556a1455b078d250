"""The consumer API under asyncio, as a FastAPI or aiohttp service uses it: ``async for msg
in sub`` and ``await msg.ack()`` in a process running asyncio's loop, against the shared
cluster of bookie processes (a bookie hosts the owner)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

from bkframe.testing.cluster import Cluster

SCRIPT = textwrap.dedent(
    """
    import asyncio, sys
    import bkframe

    async def main(uri, log):
        async with bkframe.open_client(uri) as bk:
            await bk.logs.create(log)
            async with await bk.logs.open_writer(log) as w:
                await w.append_many([bkframe.Record(b"job %d" % i, key=b"k%d" % (i % 3)) for i in range(20)])
            await bk.logs.create_subscription(log, "s", kind="key_shared")
            got = []
            async with await bk.logs.subscribe(log, "s") as sub:
                async for msg in sub:
                    got.append(msg.payload)
                    await msg.ack()
                    if len(got) == 20:
                        break
            stats = await bk.logs.subscription_stats(log, "s")
            print(sorted(got) == sorted(b"job %d" % i for i in range(20)), stats.backlog, stats.acked)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_a_consumer_under_asyncio(shared_cluster: Cluster) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, shared_cluster.metadata, f"aio-{uuid.uuid4().hex[:8]}"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0", "20"]
