"""How appends leave the client: a lone append at once, appends started together in one
ADD_BATCH message per bookie. Real bookies (processes), counted by their request counters."""

from __future__ import annotations

from typing import Any

import bkframe
from bkframe.core.client.client import Client

PW = b"paths"


async def _requests(client: Client, bookies: list[str]) -> list[int]:
    counts = []
    for bookie_id in bookies:
        info = await (await client.pool.get(bookie_id)).info()
        counts.append(info["counters"]["requests"])
    return counts


async def test_a_lone_append_is_on_its_way_before_the_appender_yields(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PW)
        await writer.append(b"first")
        ensemble = list(writer.metadata.fragments[-1][1])
        conns = [client.pool.connected(b) for b in ensemble]
        assert all(c is not None for c in conns)
        before = [len(c._pending) for c in conns]  # type: ignore[union-attr]
        pending = writer.append_async(b"lone")
        # No scheduler pass yet: with nothing else in flight the entry was submitted to
        # every bookie of its write set by append_async itself (no flush task to wait for).
        assert [len(c._pending) for c in conns] == [n + 1 for n in before]  # type: ignore[union-attr]
        assert await pending.wait() == 1


async def test_appends_started_together_share_one_message_per_bookie(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PW)
        await writer.append(b"first")
        ensemble = list(writer.metadata.fragments[-1][1])
        start = await _requests(client, ensemble)
        await writer.append_many([b"many-%d" % i for i in range(100)])
        # A third bookie may still be answering (A = 2): wait for it before counting.
        await writer.append(b"last")
        counts = await _requests(client, ensemble)
        # Per bookie: one ADD_BATCH for the 100, one add for "last", one info request.
        assert [c - s for c, s in zip(counts, start)] == [3, 3, 3]
        # With an append in flight, later ones gather behind it: the first leaves alone,
        # the other 49 together.
        start = await _requests(client, ensemble)
        pendings = [writer.append_async(b"x-%d" % i) for i in range(50)]
        await pendings[-1].wait()
        await writer.append(b"end")
        counts = await _requests(client, ensemble)
        assert [c - s for c, s in zip(counts, start)] == [4, 4, 4]
