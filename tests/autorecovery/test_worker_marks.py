"""Replication workers read the marks a page at a time (issue 27): with a lost bookie's
thousands of marks, no worker lists them all, two workers share them without doing one
twice, and a ledger that cannot be repaired does not hold up the others. On the memory
store in process; the copying itself is tested with bookies in test_autorecovery.py."""

from __future__ import annotations

import uuid
from typing import Any, cast

import trio

from bkframe import LedgerMetadata
from bkframe.autorecovery.worker import MARKS_PER_LOOK, ReplicationWorker
from bkframe.client.context import ClientContext
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.metadata import LedgerStateName, UnderReplicated
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.metadata_memory import MemoryMetadataStore
from bkframe.testing.kit import wait_until


class PageRecorder:
    """The store, recording the ``limit`` of every listing of the marks, and how many
    ledger reads were in flight at most (each made slow, as a remote store's)."""

    def __init__(self, inner: MetadataStore) -> None:
        self.inner = inner
        self.limits: list[int | None] = []
        self.reading = 0
        self.most_reading = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        self.limits.append(limit)
        return await self.inner.list_under_replicated(start=start, limit=limit)

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            await trio.sleep(0.005)
            return await self.inner.read_ledger(ledger_id)
        finally:
            self.reading -= 1


async def test_workers_take_the_marks_a_page_at_a_time(nursery: trio.Nursery) -> None:
    store = MemoryMetadataStore(f"memory://{uuid.uuid4().hex}")
    # Ledger 1 cannot be repaired (no bookie is registered to copy to): it backs off. The
    # others were deleted since they were marked: a worker drops their marks.
    stuck = LedgerMetadata(
        ledger_id=1, ensemble_size=2, write_quorum=2, ack_quorum=1, fragments=((0, ("gone", "b2")),),
        state=LedgerStateName.CLOSED, last_entry_id=9,
    )
    await store.create_ledger(stuck)
    marked = 500
    await store.mark_many_under_replicated(range(1, marked + 1), ["gone"])
    recorder = PageRecorder(store)
    config = AutorecoveryConfig(check_interval_s=0.05, request_timeout_s=5.0, max_retry_s=0.5)
    workers = []
    for name in ("w1", "w2"):
        ctx = ClientContext.create(nursery, cast(MetadataStore, recorder), PluginManager())
        workers.append(ReplicationWorker(ctx, name, config))
        await nursery.start(workers[-1].run)


    async def one_mark_left() -> bool:
        return await store.count_under_replicated() <= 1

    await wait_until(one_mark_left, "every mark but the stuck ledger's dropped", 30)
    [left] = await store.list_under_replicated()
    assert left.ledger_id == 1
    done = [w.status.ledgers_replicated for w in workers]
    assert all(n > 0 for n in done), done  # both took marks ...
    # ... several ledgers at a time each (parallel_ledgers), not one after another.
    assert recorder.most_reading > 2, recorder.most_reading
    # ... and never one the other had done: a mark is read again under the claim (the other
    # worker may have finished the ledger between this one's look and its claim).
    assert sum(done) == marked - 1, done
    # Every look read a page, none the whole list.
    assert recorder.limits and all(limit is not None and limit <= MARKS_PER_LOOK for limit in recorder.limits)
    # The stuck ledger was tried again and again meanwhile, and is still: its back-off
    # (at most max_retry_s) never stopped the worker's rotation.
    tried, since = len(recorder.limits), trio.current_time()
    await wait_until(lambda: len(recorder.limits) >= tried + 40, "forty more looks at the marks", 30)
    elapsed = trio.current_time() - since
    assert workers[0].status.last_error.startswith("ledger 1:") or workers[1].status.last_error.startswith("ledger 1:")
    # With nothing else to do, each worker reads a page per check_interval_s at most (and
    # one more after each try of ledger 1), not every mark in a row: over the time those
    # looks took, however long that was.
    assert len(recorder.limits) - tried <= 2 * 2 * (elapsed / 0.05 + elapsed / 0.5 + 2)
