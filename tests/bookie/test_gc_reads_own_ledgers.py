"""A bookie's garbage collection and its boot after an unclean stop read the ledgers the
metadata store indexes for this bookie, not the cluster's: on a store holding 20,000
ledgers of other bookies, a pass lists no ledger of the cluster and reads the metadata of
only the local ledgers the index does not name (issue 27, item 3)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import attrs

import bkframe
from bkframe import LedgerMetadata
from bkframe.bookie.runtime.garbage_collector import GarbageCollector
from bkframe.bookie.startup.cookies import UNCLEAN_MARKER
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.ledger_keys import master_key, password_hash
from bkframe.plugins.metadata_memory import MemoryMetadataStore
from bkframe.proto.codes import Status
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.counting_store import CountingStore
from bkframe.testing.kit import PASSWORD

OTHERS = 20_000
ME = "me"


async def fill_with_others(store: MetadataStore) -> None:
    """OTHERS ledgers on bookies b0..b9, none on this bookie."""
    for ledger_id in range(1_000_000, 1_000_000 + OTHERS):
        ensemble = tuple(f"b{(ledger_id + k) % 10}" for k in range(3))
        await store.create_ledger(
            LedgerMetadata(ledger_id=ledger_id, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, ensemble),))
        )


async def test_gc_reads_only_the_ledgers_indexed_for_this_bookie(tmp_path: Path) -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    config = make_config(tmp_path / "bookie", metadata=uri, bookie_id=ME, gc_interval_s=3600.0)
    async with running_bookie(config) as (service, _, _):
        bookie = service.bookie
        assert bookie is not None
        store = MemoryMetadataStore(uri)
        await fill_with_others(store)
        async with bkframe.open_client(uri) as client:
            ids = []
            for i in range(30):
                writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, password=PASSWORD)
                await writer.append(b"entry %d" % i)
                await writer.close()
                ids.append(writer.ledger_id)
            deleted, kept, moved = ids[:10], ids[10:29], ids[29]
            for ledger_id in deleted:
                await client.delete_ledger(ledger_id)
        # One ledger re-replicated away: alive, its metadata names another bookie only.
        md = await store.read_ledger(moved)
        await store.update_ledger(attrs.evolve(md, fragments=((0, ("b1",)),)), md.version)
        counting = CountingStore(store)
        gc = GarbageCollector(bookie, counting.as_store(), 3600.0, rechecks_per_pass=0)

        assert (await gc.collect())[0] == 10
        assert sorted(bookie.storage.ledgers()) == sorted([*kept, moved])
        # One page of the index (19 ids); the metadata of the 11 local ledgers it lacks.
        assert counting.calls["ledgers_of_bookie"] == 1
        assert counting.calls["read_ledger"] == 11
        assert counting.calls["list_ledgers"] == 0
        assert gc.elsewhere.keys() == {moved}

        # The next pass reads nothing: the moved ledger's recheck budget is 0 here.
        counting.calls.clear()
        assert (await gc.collect())[0] == 0
        assert counting.calls["read_ledger"] == 0 and counting.calls["list_ledgers"] == 0
        # With a budget it is read again, and collected once deleted.
        await store.delete_ledger(moved)
        gc.rechecks_per_pass = 1
        assert (await gc.collect())[0] == 1
        assert counting.calls["read_ledger"] == 1 and counting.calls["list_ledgers"] == 0
        assert sorted(bookie.storage.ledgers()) == sorted(kept)
        assert bookie.counters.gc_ledgers_deleted == 11
        for ledger_id in kept:
            state = bookie.storage.ledger_state(ledger_id)
            assert state is not None and not state.fenced


async def test_unclean_boot_reads_only_the_ledgers_indexed_for_this_bookie(tmp_path: Path, monkeypatch: Any) -> None:
    uri = f"memory://{uuid.uuid4().hex}"
    config = make_config(tmp_path / "bookie", metadata=uri, bookie_id=ME, gc_interval_s=3600.0)
    async with running_bookie(config):
        store = MemoryMetadataStore(uri)
        await fill_with_others(store)
        for i, ledger_type in enumerate(("BYPASS_JOURNAL", "BYPASS_JOURNAL", "PD_JOURNAL")):
            md = LedgerMetadata(
                ledger_id=10 + i,
                ensemble_size=2,
                write_quorum=2,
                ack_quorum=2,
                fragments=((0, (ME, "b1")),),
                ledger_type=ledger_type,
                password_hash=password_hash(PASSWORD),
            )
            await store.create_ledger(md)
    (tmp_path / "bookie" / UNCLEAN_MARKER).write_text("pid 0\n")  # what a SIGKILL leaves behind
    read: list[int] = []
    listed: list[int] = []
    read_ledger, list_ledgers = MemoryMetadataStore.read_ledger, MemoryMetadataStore.list_ledgers

    async def counting_read(self: MemoryMetadataStore, ledger_id: int) -> LedgerMetadata:
        read.append(ledger_id)
        return await read_ledger(self, ledger_id)

    async def counting_list(self: MemoryMetadataStore, **kwargs: Any) -> list[int]:
        listed.append(1)
        return await list_ledgers(self, **kwargs)

    monkeypatch.setattr(MemoryMetadataStore, "read_ledger", counting_read)
    monkeypatch.setattr(MemoryMetadataStore, "list_ledgers", counting_list)
    async with running_bookie(config) as (service, host, port):
        assert service.bookie is not None
        # The BYPASS ledgers are fenced and in limbo: a read answers UNKNOWN, never NO_ENTRY.
        assert sorted(service.bookie.limbo_ledgers()) == [10, 11]
        async with connect_bookie(host, port) as conn:
            r = await conn.read(10, 0, master_key=master_key(PASSWORD))
            assert r.status == Status.UNKNOWN, r
    # Boot (and the repair it started) read this bookie's ledgers only, and listed none.
    assert set(read) <= {10, 11, 12} and {10, 11, 12} <= set(read)
    assert listed == []
