"""Range reads of unstriped ledgers go as READ_BATCH requests; whatever a batch cannot bring
(a replica missing entries, a dead or hung replica) is read entry by entry."""

from __future__ import annotations

import signal
from typing import Any

import trio

import bkframe
from bkframe.core.ledger_keys import master_key
from bkframe.testing.kit import PASSWORD, payload

FAST: dict[str, float] = {"add_timeout_s": 1.0, "read_timeout_s": 2.0, "speculative_read_timeout_s": 0.5}


async def batched(client: Any, bookies: list[str]) -> int:
    total = 0
    for b in bookies:
        conn = await client.pool.get(b)
        total += (await conn.info(timeout_s=10))["counters"]["entries_read_in_batches"]
    return total


async def test_a_range_read_comes_in_batches_and_fills_a_replica_s_gaps(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        await writer.append_many([payload("entry", i) for i in range(600)])
        lagging = writer.metadata.fragments[0][1][1]
        # Acknowledged by two of three: the third may still be writing them. It holds them
        # durably before it hangs (it has the last one, and a SYNC answers once its journal
        # holds all it has of the ledger), so the kill below takes only what it never got.
        conn = await client.pool.get(lagging)
        with trio.fail_after(30):
            while (await conn.read(writer.ledger_id, 599, master_key=master_key(PASSWORD))).status != 0:
                await trio.sleep(0.05)
            assert (await conn.submit_sync(writer.ledger_id, timeout_s=10).wait()).status == 0
        cluster.by_id(lagging).hang()
        # Acknowledged by the two others; close waits for the hung one (add timeout) and
        # closes without it. Killed and restarted, it has none of them.
        await writer.append_many([payload("entry", i) for i in range(600, 1200)])
        md = await writer.close()
        proc = cluster.by_id(lagging).proc
        assert proc is not None
        proc.send_signal(signal.SIGKILL)  # still stopped: the adds in its socket die with it
        proc.wait(timeout=30)
        cluster.by_id(lagging).start()
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        conn = await client.pool.get(lagging)
        key = master_key(PASSWORD)
        missing = [e for e in range(0, 1200) if (await conn.read(writer.ledger_id, e, master_key=key)).status != 0]
        assert missing and min(missing) >= 600, "the lagging replica should lack the later entries"

    async with bkframe.open_client(cluster.metadata, **FAST) as client:  # no quarantine yet
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        before = await batched(client, [b.bookie_id for b in cluster.bookies])
        got = await reader.read(0, 1199)
        assert [e.payload for e in got] == [payload("entry", i) for i in range(1200)]
        assert [e.entry_id for e in got] == list(range(1200))
        assert await batched(client, [b.bookie_id for b in cluster.bookies]) - before >= 900

        # A dead replica: its chunks fail over to entry-by-entry reads of the others.
        cluster.by_id(md.fragments[0][1][0]).kill()
        with trio.fail_after(30):
            got = await reader.read(0, 1199)
        assert [e.payload for e in got] == [payload("entry", i) for i in range(1200)]


async def test_striped_ledgers_read_every_e_th_entry_from_each_bookie(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        await writer.append_many([payload("entry", i) for i in range(1000)])
        await writer.close()
        bookies = [b.bookie_id for b in cluster.bookies]
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        before = await batched(client, bookies)
        assert [e.payload for e in await reader.read(0, 999)] == [payload("entry", i) for i in range(1000)]
        # Each entry came once, in a batch from one of its two holders.
        assert await batched(client, bookies) - before == 1000
        before = await batched(client, bookies)
        assert [e.entry_id for e in await reader.read(5, 6)] == [5, 6]  # short reads: entry by entry
        assert await batched(client, bookies) == before
        # One holder gone: its share comes from the other holders, entry by entry.
        cluster.by_id(writer.metadata.fragments[0][1][2]).kill()
        with trio.fail_after(30):
            assert [e.payload for e in await reader.read(0, 999)] == [payload("entry", i) for i in range(1000)]
