"""An entry over the maximum entry size is refused by the client before it is sent, with an
error that says so; the writer goes on (the ledger stays open, no ensemble change, later
appends succeed). Before, the bookie refused it and the client took that for a dead bookie:
ensemble changes, then "no reachable writable bookie left"."""

from __future__ import annotations

from typing import Any

import pytest

import bkframe
from bkframe import BookieError, EntryTooLargeError, LedgerStateName
from bkframe.proto.codes import MAX_ENTRY_SIZE, Status
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import FAST, PASSWORD

#: The default max_entry_size (bookies' and client's) is 5 MiB: this is over it.
SIX_MIB = 6 * 1024 * 1024


async def test_an_oversized_append_is_refused_and_the_ledger_goes_on(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        assert await writer.append(b"before") == 0
        with pytest.raises(EntryTooLargeError) as refused:
            writer.append_async(b"x" * SIX_MIB)
        message = str(refused.value)
        assert f"ledger {writer.ledger_id}: an entry of {SIX_MIB} bytes is over the maximum" in message
        assert "max_entry_size" in message and "split it" in message
        assert refused.value.size == SIX_MIB and refused.value.maximum < 5 * 1024 * 1024
        # A payload of exactly the maximum goes through: the limit is the bookies' own.
        assert await writer.append(b"m" * refused.value.maximum) == 1
        # A batch with one entry too many bytes is refused whole.
        with pytest.raises(EntryTooLargeError):
            await writer.append_many([b"a", b"x" * SIX_MIB])
        assert await writer.append(b"after") == 2
        assert client.context.counters.ensemble_changes == 0
        md = await client.ledger_metadata(writer.ledger_id)
        assert md.state == LedgerStateName.OPEN and len(md.fragments) == 1
        await writer.close()
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD)
        assert [e.payload[:6] for e in await reader.read(0, 2)] == [b"before", b"m" * 6, b"after"]


async def test_the_client_setting_bounds_entries(shared_cluster: Cluster) -> None:
    """``max_entry_size`` is the client's setting (kept equal to the bookies'); a 200 MiB
    entry, larger than a frame, is refused as any other, before a byte is sent."""
    async with bkframe.open_client(shared_cluster.metadata, max_entry_size=1000) as client:
        writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        limit = 1000 - 32 - 4  # header and CRC32C digest
        assert await writer.append(b"y" * limit) == 0
        with pytest.raises(EntryTooLargeError, match=f"an entry of {limit + 1} bytes is over the maximum of {limit}"):
            await writer.append(b"y" * (limit + 1))
        await writer.close()
    async with bkframe.open_client(shared_cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        with pytest.raises(EntryTooLargeError, match=f"an entry of {200 << 20} bytes"):
            await writer.append(bytes(200 << 20))
        assert await writer.append(b"fine") == 0
        assert client.context.counters.ensemble_changes == 0
        await writer.close()
    with pytest.raises(ValueError, match="max_entry_size"):
        bkframe.ClientSettings(max_entry_size=MAX_ENTRY_SIZE + 1)


async def test_an_oversized_log_append_leaves_the_writer_usable(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        await client.logs.create("entry-size-log", password=PASSWORD)
        writer = await client.logs.open_writer("entry-size-log", password=PASSWORD)
        await writer.append(b"one")
        with pytest.raises(EntryTooLargeError, match="log 'entry-size-log': an entry of"):
            writer.append_async(b"x" * SIX_MIB)
        await writer.append(b"two")
        await writer.close()
        reader = await client.logs.reader("entry-size-log", password=PASSWORD)
        assert [e.payload async for chunk in reader.chunks("earliest") for e in chunk] == [b"one", b"two"]


def test_the_blocking_api_refuses_the_same(shared_cluster: Cluster) -> None:
    with bkframe.connect(shared_cluster.metadata) as bk:
        writer = bk.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=PASSWORD)
        with pytest.raises(EntryTooLargeError):
            writer.append(b"x" * SIX_MIB)
        with pytest.raises(EntryTooLargeError):
            writer.append_many([b"ok", b"x" * SIX_MIB])
        assert writer.append(b"ok") == 0
        writer.close()
        bk.logs.create("entry-size-blocking", password=PASSWORD)
        log_writer = bk.logs.open_writer("entry-size-blocking", password=PASSWORD)
        with pytest.raises(EntryTooLargeError):
            log_writer.append_many([b"ok", b"x" * SIX_MIB])  # refused whole: nothing appended
        assert [str(pos) for pos in log_writer.append_many([b"a", b"b"])] == ["0:0", "0:1"]
        log_writer.close()


async def test_a_bookie_with_a_smaller_maximum_is_no_dead_bookie(module_cluster_factory: Any) -> None:
    """Bookies whose max_entry_size is below the client's refuse the entry (BAD_REQUEST): the
    writer fails with the bookie's reason and changes no ensemble (a replacement would
    refuse it too)."""
    cluster = module_cluster_factory(2, config="[bookie]\nmax_entry_size = 2000\n")
    async with bkframe.open_client(cluster.metadata, **FAST) as client:
        writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        assert await writer.append(b"small") == 0
        with pytest.raises(BookieError) as refused:
            await writer.append(b"z" * 3000)
        assert refused.value.status == Status.BAD_REQUEST and "max_entry_size" in str(refused.value)
        assert client.context.counters.ensemble_changes == 0
        md = await client.ledger_metadata(writer.ledger_id)
        assert len(md.fragments) == 1 and md.state == LedgerStateName.OPEN
