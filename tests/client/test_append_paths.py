"""How appends leave the client: a synchronous writer's lone append at once, appends started
together in one ADD_BATCH message per bookie. Real bookies (processes), counted by their request counters."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import bkframe
from bkframe import Client
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD


async def _requests(client: Client, bookies: list[str]) -> list[int]:
    counts = []
    for bookie_id in bookies:
        info = await (await client.pool.get(bookie_id)).info()
        counts.append(info["counters"]["requests"])
    return counts


@pytest.mark.parametrize("ledger_type", ["VD_JOURNAL", "BYPASS_JOURNAL"])
async def test_a_lone_append_is_sent_by_the_appender_itself(shared_cluster: Cluster, ledger_type: str) -> None:
    """``append()`` on an idle writer submits the entry from the appending task, not from
    a flush task that runs a scheduler pass later."""
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD)
        await writer.append(b"first")
        submitters: list[object] = []
        for bookie_id in writer.metadata.fragments[-1][1]:
            conn = client.pool.connected(bookie_id)
            assert conn is not None
            submit = conn.submit_add_batch

            def spy(*args: Any, _submit: Any = submit, **kw: Any) -> Any:
                submitters.append(trio.lowlevel.current_task())
                return _submit(*args, **kw)

            conn.submit_add_batch = spy  # type: ignore[method-assign]
        appender: list[object] = []

        async def append_one() -> None:
            appender.append(trio.lowlevel.current_task())
            assert await writer.append(b"lone") == 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append_one)
        assert len(submitters) == 3 and set(submitters) == set(appender)


@pytest.mark.parametrize("ledger_type", ["VD_JOURNAL", "PD_JOURNAL"])
async def test_appends_started_together_share_one_message_per_bookie(cluster_factory: Any, ledger_type: str) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD)
        await writer.append(b"first")
        ensemble = list(writer.metadata.fragments[-1][1])
        start = await _requests(client, ensemble)
        await writer.append_many([b"many-%d" % i for i in range(100)])
        # A third bookie may still be answering (A = 2): wait for it before counting.
        await writer.append(b"last")
        counts = await _requests(client, ensemble)
        # Per bookie: one ADD_BATCH for the 100, one add for "last", one info request.
        assert [c - s for c, s in zip(counts, start)] == [3, 3, 3]
        # Started on an idle writer (a pipelined appender refilling its window), all 50
        # still go in one message: the first does not leave alone ahead of the others.
        start = await _requests(client, ensemble)
        pendings = [writer.append_async(b"x-%d" % i) for i in range(50)]
        await pendings[-1].wait()
        await writer.append(b"end")
        counts = await _requests(client, ensemble)
        assert [c - s for c, s in zip(counts, start)] == [3, 3, 3]
