"""Large PD_JOURNAL entries written once (ledger storage ``large_entry_bytes``): the data goes
to the entry log only, fsynced before the ack, with a small STORED record in the journal.
Real bookie processes on the power-loss layer: only what was fsynced survives a cut."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import crc32c
import pytest
import trio

import bkframe
from bkframe.bookie.durability import journal_records as jr
from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import WriteOnceStorage
from bkframe.core.ledger_keys import master_key
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.proto.codes import Status
from bkframe.testing.kit import PASSWORD, payload

LARGE = 16384

#: No checkpoint during the test: after a power cut, only the journal and what the add
#: path fsynced are there. Small journal files (the power-loss layer copies on each fsync).
CONFIG = """
[bookie]
checkpoint_interval_s = 3600.0

[journal]
plugin = "journal_fs"
preallocate_bytes = 0

[ledger_storage]
plugin = "default"
large_entry_bytes = %d
"""


def size_of(entry_id: int) -> int:
    """Mixed sizes: every third entry is small, the others large (one just at the threshold)."""
    return 300 if entry_id % 3 == 0 else (LARGE if entry_id == 1 else 40000 + entry_id)


async def connection(client: Any, bookie_id: str, timeout: float = 60.0) -> Any:
    """A working connection (after a restart the pool may first hand out the dead one)."""
    with trio.fail_after(timeout):
        while True:
            try:
                conn = await client.pool.get(bookie_id)
                await conn.info()
                return conn
            except ConnectionError:
                await trio.sleep(0.2)


async def held_everywhere(client: Any, cluster: Any, ledger_id: int, count: int) -> None:
    """Every bookie holds every entry, byte for byte (not just one replica a reader picks)."""
    for b in cluster.bookies:
        conn = await connection(client, b.bookie_id)
        for e in range(count):
            r = await conn.read(ledger_id, e, master_key=master_key(PASSWORD))
            assert r.status == Status.OK, (b.bookie_id, e, r.status)
            assert r.data.endswith(payload(ledger_id, e, size=size_of(e))), (b.bookie_id, e)


@pytest.mark.parametrize("entry_logs", ["single", "per_ledger"])
async def test_acknowledged_large_entries_survive_a_power_cut_of_every_bookie(cluster_factory: Any, entry_logs: str) -> None:
    config = CONFIG % LARGE + f'\n[entry_log_manager]\nplugin = "{entry_logs}"\n'
    cluster = cluster_factory(3, config=config, powerloss=True)
    count = 30
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=PASSWORD)
        for e in range(count):
            await writer.append(payload(writer.ledger_id, e, size=size_of(e)))
        for b in cluster.bookies:
            counters = (await (await client.pool.get(b.bookie_id)).info())["counters"]
            written_once = [e for e in range(count) if size_of(e) >= LARGE]
            assert counters["entries_written_once"] == len(written_once)
            # Their data is not in the journal: it holds far less than the payload.
            assert counters["journal_bytes_written"] < sum(size_of(e) for e in range(count)) / 4
    for b in cluster.bookies:
        b.lose_power()
    for b in cluster.bookies:
        b.start(*cluster.bookie_args, powerloss=True)
    async with bkframe.open_client(cluster.metadata) as client:
        # Without the entry-log fsync before the ack, the large entries would be gone here:
        # nothing else synced the entry log before the cut (no checkpoint ran).
        await held_everywhere(client, cluster, writer.ledger_id, count)
        reader = await client.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
        assert reader.lac == count - 1
        entries = await reader.read(0, count - 1)
        assert [e.payload for e in entries] == [payload(writer.ledger_id, e, size=size_of(e)) for e in range(count)]


#: Small entry logs (so they seal), GC often, compact anything not wholly live.
GC_CONFIG = (CONFIG % LARGE).replace(
    "checkpoint_interval_s = 3600.0", "checkpoint_interval_s = 3600.0\ngc_interval_s = 0.5"
) + """compaction_threshold = 0.99

[entry_log_manager]
plugin = "single"
max_log_size = 1048576
"""


async def test_compaction_after_a_restart_keeps_large_entries(cluster_factory: Any) -> None:
    cluster = cluster_factory(1, config=GC_CONFIG, powerloss=True)
    (b,) = cluster.bookies
    count = 60
    async with bkframe.open_client(cluster.metadata) as client:
        doomed = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        kept = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        for e in range(count):  # interleaved: both ledgers share every entry log
            await doomed.append(payload(doomed.ledger_id, e, size=size_of(e)))
            await kept.append(payload(kept.ledger_id, e, size=size_of(e)))
    b.lose_power()
    b.start(*cluster.bookie_args, powerloss=True)  # replay indexes the large entries again
    async with bkframe.open_client(cluster.metadata) as client:
        conn = await connection(client, b.bookie_id)
        assert (await conn.info())["counters"]["stored_entries_unreadable"] == 0
        await client.delete_ledger(doomed.ledger_id)
        with trio.fail_after(60):
            while (await conn.info())["counters"]["compacted_bytes"] == 0:
                await trio.sleep(0.1)
        # Compaction moved kept's entries and removed old logs, while the journal (no
        # checkpoint since) still holds STORED records pointing into them. Cut again.
        b.lose_power()
        b.start(*cluster.bookie_args, powerloss=True)
        conn = await connection(client, b.bookie_id)
        for e in range(count):
            r = await conn.read(kept.ledger_id, e, master_key=master_key(PASSWORD))
            assert (r.status, r.data.endswith(payload(kept.ledger_id, e, size=size_of(e)))) == (Status.OK, True), e
        assert b.running, b.log()[-3000:]


async def test_option_off_journals_the_data_as_today(cluster_factory: Any) -> None:
    cluster = cluster_factory(1, config=CONFIG % 0)
    (b,) = cluster.bookies
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
        for e in range(10):
            await writer.append(payload(writer.ledger_id, e, size=40000))
        counters = (await (await client.pool.get(b.bookie_id)).info())["counters"]
        assert counters["entries_written_once"] == 0
        assert counters["journal_bytes_written"] > 10 * 40000


def test_stored_records_round_trip() -> None:
    located = [(5, 2, 16, 40020, 123), (6, 2, 40036, 70020, 2**32 - 1)]
    rec = jr.decode(b"".join(bytes(part) for part in jr.stored_record(9, 4, located)))
    assert rec == jr.StoredRecord(9, tuple(jr.StoredEntry(*row) for row in located), 4)
    with pytest.raises(jr.BadRecordError):
        jr.decode(b"".join(bytes(part) for part in jr.stored_record(9, 4, located))[:-3])


async def test_replay_indexes_only_a_record_that_is_the_entry(tmp_path: Path) -> None:
    """A STORED location past the log's end, with a wrong CRC, or holding another entry is
    not indexed as good; the true one is."""
    counters = Counters()
    logs = SingleEntryLogManager(tmp_path / "logs", counters)
    storage = DefaultLedgerStorage(tmp_path / "ledgers", logs, counters, large_entry_bytes=LARGE)
    assert isinstance(storage, WriteOnceStorage)
    data = os.urandom(50000)
    storage.ensure_ledger(1, b"k", 0)
    storage.add_entries(1, [0, 1], [data, data])
    await storage.sync_entries()
    log_id, offset, length = storage.locate(1, 0)
    crc = crc32c.crc32c(data)
    fresh = DefaultLedgerStorage(tmp_path / "other", logs, counters)
    fresh.ensure_ledger(1, b"k", 0)
    assert not fresh.index_stored(1, 0, log_id, offset + 10**7, length, crc)  # past the end
    assert not fresh.index_stored(1, 0, log_id, offset, length, crc ^ 1)  # bad checksum
    assert not fresh.index_stored(1, 0, log_id, storage.locate(1, 1)[1], length, crc)  # entry 1's record
    assert fresh.get_entry(1, 0) is None
    assert fresh.index_stored(1, 0, log_id, offset, length, crc)
    assert fresh.get_entry(1, 0) == data
    await storage.aclose()
