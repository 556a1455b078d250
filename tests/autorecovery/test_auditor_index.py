"""The auditor at scale, on the memory store in process (issue 27, item 4): a lost bookie's
ledgers are marked from the store's index of that bookie, with no ledger's metadata read
and no listing of the cluster's ledgers; the full checks that do read every ledger keep to
``full_check_reads_per_s``."""

from __future__ import annotations

import uuid

import trio

from bkframe import LedgerMetadata
from bkframe.autorecovery.auditor import Auditor
from bkframe.client.context import ClientContext
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.metadata_store import BookieRegistration
from bkframe.core.metadata import BookieInfo, UnderReplicated
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.metadata_memory import MemoryMetadataStore
from bkframe.testing.counting_store import CountingStore
from bkframe.testing.kit import wait_until

BOOKIES = [f"b{i}" for i in range(6)]


async def make_store(nursery: trio.Nursery, ledgers: int) -> tuple[MemoryMetadataStore, dict[str, BookieRegistration]]:
    """``ledgers`` ledgers over BOOKIES (ensembles of 3), every bookie registered."""
    store = MemoryMetadataStore(f"memory://{uuid.uuid4().hex}")
    registrations: dict[str, BookieRegistration] = {
        b: await store.register_bookie(BookieInfo(b, f"127.0.0.1:{i + 1}"), 60.0, nursery) for i, b in enumerate(BOOKIES)
    }
    for ledger_id in range(1, ledgers + 1):
        ensemble = tuple(BOOKIES[(ledger_id + k) % len(BOOKIES)] for k in range(3))
        md = LedgerMetadata(ledger_id=ledger_id, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, ensemble),))
        await store.create_ledger(md)
    return store, registrations


async def test_a_lost_bookie_is_marked_from_the_index_alone(nursery: trio.Nursery) -> None:
    store, registrations = await make_store(nursery, 3000)
    counting = CountingStore(store)
    config = AutorecoveryConfig(
        lost_bookie_grace_s=0.5, check_interval_s=0.05, audit_interval_s=0.0, full_check_reads_per_s=100_000.0
    )
    auditor = Auditor(counting.as_store(), ClientContext.create(nursery, store, PluginManager()).pool, "x", config)
    await nursery.start(auditor.run)
    # A new auditor checks every ledger's ensembles once; after that nothing reads them.
    await wait_until(lambda: auditor.status.full_checks == 1, "the first full check", 30, every_s=0.02)
    assert auditor.status.ledgers_checked == 3000
    counting.calls.clear()

    victim = "b3"
    expected = {i for i in range(1, 3001) if victim in (await store.read_ledger(i)).bookies()}
    assert len(expected) == 1500
    await registrations[victim].aclose()

    async def all_marked() -> list[UnderReplicated] | None:
        marks = await store.list_under_replicated()
        return marks if len(marks) >= len(expected) else None

    marks = await wait_until(all_marked, "the lost bookie's ledgers marked", 30)
    assert {m.ledger_id for m in marks} == expected
    assert all(m.bookies == {victim} for m in marks)
    assert auditor.status.lost_bookies == {victim: 1500}
    # The marks came from the index of the lost bookie: no ledger read, no cluster listing.
    assert counting.calls["read_ledger"] == 0
    assert counting.calls["list_ledgers"] == 0
    assert counting.calls["ledgers_of_bookie"] >= 1
    # Rounds go on (the bookie set is watched) without marking anything twice.
    rounds = counting.calls["list_bookies"]
    await wait_until(lambda: counting.calls["list_bookies"] >= rounds + 5, "five more rounds", 10, every_s=0.02)
    assert auditor.status.ledgers_marked == 1500
    assert counting.calls["read_ledger"] == 0 and counting.calls["list_ledgers"] == 0


async def test_full_checks_keep_to_their_pace(nursery: trio.Nursery) -> None:
    """100 ledgers at 50 reads a second: the check takes two seconds, not a few milliseconds;
    a bookie named in metadata but never seen registered is found by it and, past its
    grace, its ledgers are marked."""
    store, _ = await make_store(nursery, 100)
    md = LedgerMetadata(ledger_id=101, ensemble_size=2, write_quorum=2, ack_quorum=2, fragments=((0, ("b0", "ghost")),))
    await store.create_ledger(md)
    counting = CountingStore(store)
    config = AutorecoveryConfig(
        lost_bookie_grace_s=0.5, check_interval_s=0.05, audit_interval_s=0.0, full_check_reads_per_s=50.0
    )
    auditor = Auditor(counting.as_store(), ClientContext.create(nursery, store, PluginManager()).pool, "x", config)
    started = trio.current_time()
    await nursery.start(auditor.run)
    # Under way, a few reads in: not all at once (the pace is what the time below shows).
    await wait_until(lambda: counting.calls["read_ledger"] >= 10, "the full check under way", 30, every_s=0.02)
    assert auditor.status.full_checks == 0 and counting.calls["read_ledger"] < 100
    await wait_until(lambda: auditor.status.full_checks == 1, "the first full check", 30, every_s=0.02)
    assert trio.current_time() - started >= 100 / 50.0
    assert counting.calls["read_ledger"] == 101
    [mark] = await wait_until(store.list_under_replicated, "the ghost's ledger marked", 10)
    assert (mark.ledger_id, mark.bookies) == (101, frozenset({"ghost"}))
