"""BP-14 VD_JOURNAL ledgers as written: acks before fsync, LastAddSynced LAC, sync()."""

from __future__ import annotations

from typing import Any

import pytest
import trio

import bkframe
from bkframe.client.write_handle import lac_by_sync
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import PASSWORD

#: Bookies whose journal holds a group up to 1.5 s before its fsync, so that "not yet
#: synced" lasts long enough to observe.
SLOW_SYNC = """
[journal]
plugin = "journal_fs"
flush_when_queue_empty = false
max_wait_ms = 1500.0
buffered_bytes_threshold = 104857600
"""


@pytest.mark.parametrize("ack_quorum, lac", [(1, 3), (2, 2), (3, 1)])
def test_lac_follows_the_w_minus_a_rule(ack_quorum: int, lac: int) -> None:
    assert lac_by_sync([1, 2, 3], 3, ack_quorum, lap=10) == lac


def test_lac_never_passes_what_was_pushed() -> None:
    assert lac_by_sync([5, 5, 5], 3, 1, lap=2) == 2


async def test_lac_waits_for_fsync_and_sync_moves_it(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=SLOW_SYNC)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        # The ledger's first add also journals its master key, which is synced before the
        # ack (the key must survive a crash); later adds do not wait for any fsync.
        assert await writer.append(b"vd-0") == 0
        with trio.fail_after(1.0):  # acknowledged without waiting for the 1.5 s group commit
            for i in range(1, 5):
                assert await writer.append(b"vd-%d" % i) == i
        assert writer.lap == 4
        # Entry 0 went out with the master key's fsync; 1..4 are not synced yet, so the LAC
        # stays below them.
        assert writer.lac <= 0
        # Readers see nothing beyond it, but can read unconfirmed entries up to LAP.
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        assert await reader.read_lac() <= 0
        assert [e.payload for e in await reader.read_unconfirmed(0, 4)] == [b"vd-%d" % i for i in range(5)]
        assert await writer.sync() == 4
        assert writer.lac == 4


async def test_sync_with_one_bookie_down(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=SLOW_SYNC)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        pending = [writer.append_async(b"x%d" % i) for i in range(50)]
        for pa in pending:
            await pa.wait()
        cluster.by_id(writer.metadata.fragments[0][1][0]).kill()
        with trio.fail_after(10):
            assert await writer.sync() == 49  # two of three bookies are enough for A = 2


async def test_ensemble_change_is_refused_with_a_reason(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        await writer.append(b"before")
        cluster.by_id(writer.metadata.fragments[0][1][1]).kill()
        with pytest.raises(bkframe.UnsupportedError, match="ensemble change is only allowed for PD_JOURNAL"):
            with trio.fail_after(10):
                for _ in range(100):
                    await writer.append(b"after")
        assert len(writer.metadata.fragments) == 1


async def test_striped_vd_ledgers_are_refused(shared_cluster: Cluster) -> None:
    cluster = shared_cluster
    async with bkframe.open_client(cluster.metadata) as client:
        with pytest.raises(bkframe.UnsupportedError, match="cannot be striped"):
            await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, ledger_type="VD_JOURNAL")


async def test_closed_vd_ledger_holds_every_acknowledged_entry(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=SLOW_SYNC)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        pending = [writer.append_async(b"bulk-%d" % i) for i in range(500)]
        acked = [await pa.wait() for pa in pending]
        md = await writer.close()  # syncs first
        assert md.last_entry_id == max(acked) == 499
        assert md.ledger_type == "VD_JOURNAL"
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload for e in await reader.read(0, 499)] == [b"bulk-%d" % i for i in range(500)]


LOSSY = SLOW_SYNC.replace("max_wait_ms = 1500.0", "max_wait_ms = 5000.0") + "preallocate_bytes = 0\n"


async def test_power_loss_of_unsynced_writes_keeps_everything_up_to_lac(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=LOSSY, powerloss=True)
    # The bookies hold a group 5 s before its fsync (the first add waits for its master
    # key's): give adds longer than the default timeout.
    async with bkframe.open_client(cluster.metadata, add_timeout_s=30.0) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        for i in range(20):
            await writer.append(b"synced-%d" % i)
        lac = await writer.sync()
        assert lac == 19
        # More entries, acknowledged but not synced yet (the group commit waits 1.5 s).
        for i in range(20, 40):
            await writer.append(b"volatile-%d" % i)
        assert writer.lac == 19
    # Two of the three bookies lose power: what they had not fsynced is gone.
    victims = [cluster.by_id(b) for b in writer.metadata.fragments[0][1][:2]]
    for b in victims:
        b.lose_power()
    for b in victims:
        b.start(*cluster.bookie_args, powerloss=True)
    # Fences and recovery-adds are answered once synced: 5 s of group wait here, more than
    # the default timeouts.
    async with bkframe.open_client(cluster.metadata, read_timeout_s=30.0, add_timeout_s=30.0) as client:
        # The power cut really lost data: the victims no longer hold the unsynced entries.
        for b in victims:
            assert (await (await client.pool.get(b.bookie_id)).read(writer.ledger_id, 39)).status != 0
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=False)
        # Every entry up to the LAC the reader finds is readable, from any replica. That LAC is
        # a lower bound (the first answers that cover every write set: BookKeeper's rule), so
        # it may be a restarted bookie's, below 19; recovery below finds every synced entry.
        assert 0 <= reader.lac <= 39
        assert [e.payload for e in await reader.read(0, reader.lac)] == [
            (b"synced-%d" if i < 20 else b"volatile-%d") % i for i in range(reader.lac + 1)
        ]
        recovered = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
        assert recovered.lac >= 19
        entries = await recovered.read(0, recovered.lac)
        assert [e.payload for e in entries[:20]] == [b"synced-%d" % i for i in range(20)]
        assert all(e.payload == b"volatile-%d" % e.entry_id for e in entries[20:])


#: Default group commit (flush as soon as someone waits), but a group nobody waits for
#: (VD entries) may wait a minute for company: only a SYNC makes it durable in this test.
LAZY = """
[journal]
plugin = "journal_fs"
max_lazy_wait_ms = 60000.0
preallocate_bytes = 0
"""


async def test_sync_makes_entries_acked_before_their_journal_write_durable_across_a_power_cut(
    cluster_factory: Any,
) -> None:
    cluster = cluster_factory(3, config=LAZY, powerloss=True)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=PASSWORD)
        with trio.fail_after(10):  # acknowledged while their journal records wait
            for i in range(30):
                await writer.append(b"acked-%d" % i)
        # Entry 0 went out with the master key's fsync; nothing after it is synced yet.
        assert writer.lac <= 0
        with trio.fail_after(10):  # the SYNC hurries the journal: no minute's wait
            assert await writer.sync() == 29
    # Every bookie loses power: what a sync covered must survive on two of them.
    bookies = [cluster.by_id(b) for b in writer.metadata.fragments[0][1]]
    for b in bookies:
        b.lose_power()
    for b in bookies:
        b.start(*cluster.bookie_args, powerloss=True)
    async with bkframe.open_client(cluster.metadata) as client:
        recovered = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
        assert recovered.lac == 29
        assert [e.payload for e in await recovered.read(0, 29)] == [b"acked-%d" % i for i in range(30)]
