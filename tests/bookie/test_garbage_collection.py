"""Deleting a ledger frees it on the bookies: they notice it is gone from the metadata
store, drop it and remove the entry logs nothing points into any more."""

from __future__ import annotations

from typing import Any

import trio

import bkframe
from bkframe.core.ledger_keys import master_key
from bkframe.proto.codes import Status
from bkframe.testing.kit import wait_until

GC_FAST = """
[bookie]
gc_interval_s = 0.3

[entry_log_manager]
plugin = "single"
max_log_size = 65536
"""


async def test_deleted_ledger_is_collected_on_every_bookie(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=GC_FAST)
    async with bkframe.open_client(cluster.metadata) as client:
        doomed = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        kept = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        marker = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3)
        for _ in range(200):
            await doomed.append(b"d" * 2000)
        for i in range(20):
            await kept.append(b"k%d" % i)
        await marker.append(b"m")
        for w in (doomed, kept, marker):
            await w.close()
        # Nothing is collected while the ledgers exist: once a pass has collected the
        # marker (deleted from the store), that pass looked at the two others and left them.
        await client.delete_ledger(marker.ledger_id)
        for b in cluster.bookies:
            conn = await client.pool.get(b.bookie_id)
            info = await wait_until(lambda conn=conn: _deleted(conn, 1), f"{b.bookie_id} to collect the marker ledger", 30)
            assert info["ledgers"] == 2
        await client.delete_ledger(doomed.ledger_id)
        with trio.fail_after(30):
            for b in cluster.bookies:
                conn = await client.pool.get(b.bookie_id)
                # The pass counts the ledger deleted before it reclaims its space (which
                # yields while it runs): wait for the space, the thing the user waits for.
                # ~400 KB of its entries filled several 64 KiB logs: those go.
                while (info := await conn.info())["counters"]["gc_bytes_freed"] <= 200_000:
                    await trio.sleep(0.1)
                assert info["ledgers"] == 1
                assert info["counters"]["gc_ledgers_deleted"] == 2
                assert (await conn.read(doomed.ledger_id, 0, master_key=master_key(b""))).status == Status.NO_LEDGER
        reader = await client.open_ledger(kept.ledger_id)
        assert [e.payload for e in await reader.read(0, 19)] == [b"k%d" % i for i in range(20)]


async def test_a_bookie_pointed_at_another_store_deletes_nothing(cluster_factory: Any, tmp_path: Any) -> None:
    from bkframe.client.bookies.connection import connect_bookie

    cluster = cluster_factory(3, config=GC_FAST)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await writer.append(b"precious")
        await writer.close()
    b = cluster.bookies[0]
    assert b.stop() == 0
    b.metadata = f"sqlite://{tmp_path / 'typo.db'}"  # an empty store: it lists no ledgers
    b.start(*cluster.bookie_args)
    # Its first GC pass says why it deletes nothing (the deletions it leaves out).
    await wait_until(lambda: "not deleting ledgers" in b.log(), "the GC pass's warning", 30)
    host, _, port = b.address.rpartition(":")
    async with connect_bookie(host, int(port)) as conn:
        info = await conn.info()
        assert info["cookie_check"] == "STAMPED_METADATA"
        assert info["ledgers"] == 1 and info["counters"]["gc_ledgers_deleted"] == 0
        assert (await conn.read(writer.ledger_id, 0, master_key=master_key(b""))).status == Status.OK


async def _deleted(conn: Any, n: int) -> dict[str, Any] | None:
    """The bookie's info once its GC has deleted ``n`` ledgers, else None."""
    info = await conn.info()
    return info if info["counters"]["gc_ledgers_deleted"] >= n else None
