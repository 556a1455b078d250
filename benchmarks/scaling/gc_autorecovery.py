"""Issue 27, items 3 and 4, on sqlite: a bookie's GC round, its boot after an unclean stop
and the auditor's reaction to a lost bookie, with 10^6 ledgers in the store (metadata only)
across 100 fake bookie ids (ensembles of 3: each bookie in 3x10^4 ledgers).

    python benchmarks/scaling/gc_autorecovery.py [STORE.db] [LEDGERS]     # ONLY=gc, boot, lost or fill: those parts

BOOKIES=N sets the number of bookie ids (default 100): each is in 3/N of the ledgers, so
BOOKIES=10 with 340000 ledgers gives a bookie of 10^5 ledgers.

The store is filled once (create_ledger per ledger with PRAGMA synchronous=OFF on the
filling connection only: about 3 minutes for 10^6) and kept: a second run reuses it. Prints
one JSON object with the figures docs/scaling.md quotes.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import trio

from bkframe import LedgerMetadata
from bkframe.autorecovery.auditor import Auditor
from bkframe.bookie.durability.protection import read_own_metadata
from bkframe.bookie.runtime.garbage_collector import GarbageCollector
from bkframe.client.context import ClientContext
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.core.interfaces.metadata_store import iter_ledger_ids
from bkframe.core.metadata import BookieInfo
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.metadata_sqlite import SqliteMetadataStore

BOOKIES = [f"bookie-{i:03d}" for i in range(int(os.environ.get("BOOKIES", "100")))]
ONLY = os.environ.get("ONLY", "gc,boot,lost")
path = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bkframe-scale-gc.db")
total = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000


def ensemble(ledger_id: int) -> tuple[str, ...]:
    return tuple(BOOKIES[(ledger_id + k) % len(BOOKIES)] for k in range(3))


async def fill(store: SqliteMetadataStore) -> float:
    """Create ledgers 1..total that the store does not hold yet (an interrupted fill resumes)."""
    if await store.list_ledgers(start=total, limit=1):
        return 0.0
    last = 0
    async for page in iter_ledger_ids(store):
        last = page[-1]
    started = time.perf_counter()
    store._db.execute("PRAGMA synchronous=OFF")  # the fill only; the measurements use the store as it opens
    for ledger_id in range(last + 1, total + 1):
        md = LedgerMetadata(
            ledger_id=ledger_id, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, ensemble(ledger_id)),)
        )
        await store.create_ledger(md)
        if ledger_id % 100_000 == 0:
            print(f"filled {ledger_id} ledgers in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    store._db.execute("PRAGMA synchronous=FULL")
    return time.perf_counter() - started


class FakeStorage:
    """A bookie's ledger storage as the GC sees it: the ids it holds and their state."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def ledgers(self) -> list[int]:
        return list(self.ids)

    def ledger_state(self, ledger_id: int) -> LedgerState:
        return LedgerState(ledger_id, master_key=b"k" * 20)


class FakeBookie:
    def __init__(self, bookie_id: str, ids: list[int]) -> None:
        self.bookie_id = bookie_id
        self.storage = FakeStorage(ids)
        self.cookie_check = None


async def gc_round(store: SqliteMetadataStore, bookie_id: str) -> dict[str, Any]:
    """The metadata work of one GC pass of a bookie holding its 3x10^4 ledgers plus 100
    ledgers deleted from the store (each confirmed by a read)."""
    ids = [i for i in range(1, total + 1) if bookie_id in ensemble(i)]
    deleted = list(range(total + 1_000_001, total + 1_000_101))  # ids the store never had
    gc = GarbageCollector(FakeBookie(bookie_id, sorted(ids + deleted)), store, 60.0)  # type: ignore[arg-type]
    rounds = []
    for _ in range(3):  # the first may meet a cold page cache
        tracemalloc.start()
        started = time.perf_counter()
        doomed = await gc.deleted_from_store()
        rounds.append(round(time.perf_counter() - started, 3))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert doomed == deleted, (len(doomed), doomed[:5])
    # What a round did before: the cluster's listing, every id at once.
    tracemalloc.start()
    started = time.perf_counter()
    everything = set(await store.list_ledgers())
    before_s = time.perf_counter() - started
    _, before_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(everything) == total
    return {
        "local_ledgers": len(ids) + len(deleted),
        "seconds": rounds,
        "peak_mb": round(peak / 2**20, 1),
        "before_full_listing_seconds": round(before_s, 3),
        "before_full_listing_peak_mb": round(before_peak / 2**20, 1),
    }


async def boot(store: SqliteMetadataStore, bookie_id: str) -> dict[str, Any]:
    started = time.perf_counter()
    n = 0
    async for page in read_own_metadata(store, bookie_id):
        n += len(page)
    return {"ledgers_read": n, "seconds": round(time.perf_counter() - started, 2)}


async def lost_bookie(store: SqliteMetadataStore, victim: str) -> dict[str, Any]:
    """100 bookies registered, an auditor running; the victim's registration goes: seconds
    until every ledger of its index is marked (grace 0: from the registration's end)."""
    expected = sum(1 for i in range(1, total + 1) if victim in ensemble(i))
    async with trio.open_nursery() as nursery:
        registrations = {
            b: await store.register_bookie(BookieInfo(b, f"127.0.0.1:{n + 1}"), 30.0, nursery) for n, b in enumerate(BOOKIES)
        }
        config = AutorecoveryConfig(lost_bookie_grace_s=0.0, check_interval_s=1.0)
        auditor = Auditor(store, ClientContext.create(nursery, store, PluginManager()).pool, "measure", config)
        await nursery.start(auditor.run)
        with trio.fail_after(60):
            while not auditor.status.auditing:
                await trio.sleep(0.1)
        await trio.sleep(3.0)  # a few rounds: every bookie seen registered
        lost_at = time.perf_counter()
        await registrations[victim].aclose()
        first = 0.0
        while True:
            # Counted, not listed: a listing of 10^5 marks every 0.5 s would be the script's
            # load on the store, not the auditor's.
            marked = await store.count_under_replicated()
            if marked and not first:
                first = time.perf_counter() - lost_at
            if marked >= expected:
                break
            await trio.sleep(0.5)
        seconds = time.perf_counter() - lost_at
        checked = auditor.status.ledgers_checked
        nursery.cancel_scope.cancel()
    return {
        "ledgers_of_lost_bookie": expected,
        "first_mark_s": round(first, 1),
        "all_marked_s": round(seconds, 1),
        "marks_per_s": round(expected / seconds),
        "full_check_reads_meanwhile": checked,
    }


async def main() -> None:
    store = SqliteMetadataStore(f"sqlite://{path}")
    try:
        fill_s = await fill(store)
        victim = BOOKIES[7]
        out: dict[str, Any] = {"ledgers": total, "bookies": len(BOOKIES), "fill_s": round(fill_s)}
        if "gc" in ONLY:
            out["gc_round"] = await gc_round(store, victim)
        if "boot" in ONLY:
            out["unclean_boot"] = await boot(store, victim)
        if "lost" in ONLY:
            store._db.execute("DELETE FROM under_replicated")  # a clean slate for the marks (of an earlier run)
            out["lost_bookie"] = await lost_bookie(store, victim)
        out["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
        out["cpus"] = os.cpu_count()
        print(json.dumps(out, indent=1))
    finally:
        await store.aclose()


trio.run(main)
