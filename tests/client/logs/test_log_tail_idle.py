"""The async tail ends when idle, as the blocking one does (issue 49): ``idle_timeout_s`` on
``LogReader.tail`` and ``tail_chunks``, under trio and asyncio alike. Real bookies (the shared
sqlite cluster)."""

from __future__ import annotations

import asyncio
import time
import uuid

import bkframe
from bkframe.testing.cluster import Cluster


async def _tail_until_idle(uri: str) -> tuple[list[bytes], list[int], float]:
    name = f"idle-{uuid.uuid4().hex[:8]}"
    async with bkframe.open_client(uri) as client:
        await client.logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=2)
        writer = await client.logs.open_writer(name)
        for i in range(5):
            await writer.append(b"r%d" % i)
        await writer.close()
        reader = await client.logs.reader(name)
        started = time.monotonic()
        got = [entry.payload async for entry in reader.tail("earliest", idle_timeout_s=0.5)]
        idle = time.monotonic() - started
        chunks = [len(chunk) async for chunk in reader.tail_chunks("earliest", idle_timeout_s=0.5)]
    return got, chunks, idle


async def test_an_idle_tail_ends_under_trio(shared_cluster: Cluster) -> None:
    got, chunks, idle = await _tail_until_idle(shared_cluster.metadata)
    assert got == [b"r%d" % i for i in range(5)] and sum(chunks) == 5
    assert idle >= 0.5  # it waited for more before it ended


def test_an_idle_tail_ends_under_asyncio(shared_cluster: Cluster) -> None:
    got, chunks, _ = asyncio.run(_tail_until_idle(shared_cluster.metadata))
    assert got == [b"r%d" % i for i in range(5)] and sum(chunks) == 5
