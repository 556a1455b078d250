"""BookKeeper client behaviours users rely on (issue 17), on real bookie processes: a
deleted ledger stays deleted, a reader knows the LAC on open, reads advance the LAC,
and a write handle's state is honest."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

import bkframe
from bkframe import DigestType
from bkframe.client.entry_format import Digester
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.testing.backends import on_backends, on_both_backends
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import FAST, PASSWORD, payload

GC_FAST = """
[bookie]
gc_interval_s = 0.3
"""


@on_backends("trio")  # slow (bookie restarts): once, the backends taking turns
async def test_a_deleted_ledger_stays_deleted(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=GC_FAST)
    async with bkframe.open_client(cluster.metadata, **FAST) as client, bkframe.open_client(cluster.metadata, **FAST) as other:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(5):
            await writer.append(payload("entry", i))
        lid = writer.ledger_id
        await other.open_ledger(lid, password=PASSWORD)  # recovery fences the old writer out...
        await other.delete_ledger(lid)  # ...and the ledger is deleted
        # Every bookie garbage-collects it: no trace of it, its fence included.
        with anyio.fail_after(30):
            for b in cluster.bookies:
                conn = await other.pool.get(b.bookie_id)
                while (await conn.info())["counters"]["gc_ledgers_deleted"] < 1:
                    await anyio.sleep(0.1)
        # The old writer appends: it must fail, and no bookie may store the entry.
        with anyio.fail_after(30), pytest.raises(bkframe.LedgerFencedError):
            await writer.append(b"orphan")
        for b in cluster.bookies:
            conn = await other.pool.get(b.bookie_id)
            r = await conn.read(lid, 5)
            assert r.status == Status.NO_LEDGER, (b.bookie_id, r.status)
            assert (await conn.info())["ledgers"] == 0
        # Tombstones are durable: a restarted bookie still refuses the ledger.
        b = cluster.bookies[0]
        b.kill()
        b.start(*cluster.bookie_args)
        data = Digester.for_ledger(DigestType.CRC32C, PASSWORD).encode(lid, 5, 4, 0, b"orphan")
        with anyio.fail_after(30):
            while True:
                try:
                    conn = await other.pool.get(b.bookie_id)
                    r = await conn.add(lid, 5, data, master_key=master_key(PASSWORD))
                    break
                except ConnectionError:
                    await anyio.sleep(0.1)  # the connection to the killed process
        assert r.status == Status.NO_LEDGER and "deleted" in r.message
        r = await conn.read(lid, LAST_ENTRY, master_key=master_key(PASSWORD), fence=True)
        assert r.status == Status.NO_LEDGER


@on_both_backends
async def test_a_reader_knows_the_lac_when_it_opens_and_reads_advance_it(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata, **FAST) as client, bkframe.open_client(cluster.metadata, **FAST) as other:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(10):
            await writer.append(payload("entry", i))
        reader = await other.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        assert reader.lac == 8  # entry 9 carries LAC 8 (as in BookKeeper, one behind)
        for i in range(10, 20):
            await writer.append(payload("entry", i))
        assert reader.lac == 8  # nothing told it yet
        # TestPiggybackLAC: entries carry the writer's LAC; reading them moves the reader's.
        entries = await reader.read_unconfirmed(15, 19)
        assert [e.payload for e in entries] == [payload("entry", i) for i in range(15, 20)]
        assert reader.lac == 18
        assert [e.payload for e in await reader.read(9, 18)] == [payload("entry", i) for i in range(9, 19)]


@on_backends("asyncio")  # slow (bookie restarts): once, the backends taking turns
async def test_length_counts_only_acknowledged_entries(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        # VD ledgers cannot change ensemble: a lost bookie fails the appends after it.
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, ledger_type="VD_JOURNAL", password=PASSWORD)
        for i in range(5):
            await writer.append(payload("entry", i))
        acked = sum(len(payload("entry", i)) for i in range(5))
        assert writer.length == acked
        cluster.by_id(writer.metadata.fragments[0][1][0]).kill()
        pending = [writer.append_async(payload("entry", i)) for i in range(5, 10)]
        failed = 0
        for pa in pending:
            try:
                await pa.wait()
            except bkframe.BKError:
                failed += 1
        assert failed == 5
        assert writer.length == acked


@on_both_backends
async def test_a_closed_handle_refuses_sync_and_append(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        for ledger_type in ("PD_JOURNAL", "VD_JOURNAL"):
            writer = await client.create_ledger(
                ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ledger_type, password=PASSWORD
            )
            await writer.append(b"x")
            await writer.close()
            with pytest.raises(bkframe.LedgerClosedError):
                await writer.sync()
            with pytest.raises(bkframe.LedgerClosedError):
                await writer.append(b"y")


@on_backends("asyncio")  # slow (bookie restarts): once, the backends taking turns
async def test_a_fenced_handle_says_fenced_after_its_bookies_restarted(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    async with bkframe.open_client(cluster.metadata, **FAST) as client, bkframe.open_client(cluster.metadata, **FAST) as other:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=PASSWORD)
        for i in range(5):
            await writer.append(payload("entry", i))
        await other.open_ledger(writer.ledger_id, password=PASSWORD)  # fences and closes it
        for b in cluster.bookies:
            b.kill()
            b.start(*cluster.bookie_args)
        with anyio.fail_after(30), pytest.raises(bkframe.LedgerFencedError):
            await writer.append(b"late")
