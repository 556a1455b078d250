"""The bookie's garbage collector: forget ledgers deleted from the metadata store, reclaim space.

A client deletes a ledger from the metadata store only; each bookie notices on its own.
Every ``gc_interval_s`` the collector compares the ledgers it holds with the ledgers the
store indexes for *this* bookie (:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.ledgers_of_bookie`,
paged), never with the cluster's: a pass costs the store about one id per ledger held
here, however many ledgers the cluster has (BookKeeper's scan-and-compare, by range). A
local ledger the index does not name is confirmed with a read of its metadata before
anything is deleted: it may be gone (deleted: collected here), or alive with metadata that
no longer names this bookie (an ensemble change or a re-replication moved it off, a copy
under way to here) -- then it is kept. Ledgers deleted from the store are the only ones
removed: BookKeeper also deletes "over-replicated" ledgers (alive, not named here) once a
day under the under-replication lock of the ledger; bkframe does not, since a worker may
be copying it here before its metadata names this bookie. Such ledgers are read again at
most ``rechecks_per_pass`` per pass, the longest unconfirmed first, so that one later
deleted is still collected while their number does not weigh on every pass.

The confirmed ledgers are deleted from ledger storage, a checkpoint follows (so the journal
does not replay them back), then the ledger storage reclaims their space (the default
storage removes entry logs no index points into any more and compacts the mostly-dead ones).
The comparison yields to the event loop every :data:`YIELD_EVERY` ids.

A failed pass (the metadata store is away, a disk error while compacting) is logged and
retried with backoff (:mod:`bkframe.bookie.runtime.periodic`); it never stops the bookie.

Ledgers in limbo are left alone: the repair task decides about them. A bookie whose
cookie the metadata store did not have at boot deletes no ledgers until restarted: the
store may be the wrong one, and its empty index must not wipe the bookie. An unreadable
record (not "no such ledger", another error) is skipped, never deleted.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence

import trio

from bkframe.bookie.bookie import Bookie
from bkframe.bookie.runtime.periodic import run_periodically
from bkframe.bookie.startup.cookies import CookieCheck
from bkframe.common.each_bounded import each_bounded
from bkframe.core.interfaces.metadata_store import MetadataStore, iter_ledgers_of_bookie
from bkframe.errors import MetadataError, NoSuchLedgerError
from bkframe.proto.codes import MAX_LEDGER_ID
from bkframe.storage_kit.disk_full import is_disk_full

log = logging.getLogger("bkframe.gc")

#: Local ledgers alive in the store but not indexed for this bookie, read again per pass.
RECHECKS_PER_PASS = 500
#: Ids compared, or ledgers deleted, between two yields to the event loop.
YIELD_EVERY = 2000
#: Metadata reads in flight while confirming the ledgers the index does not name.
READS_IN_FLIGHT = 16


async def not_indexed(local: Sequence[int], pages: AsyncIterator[list[int]]) -> list[int]:
    """The ids of ``local`` (ascending) that no page of ``pages`` (ascending pages of
    ascending ids, as :func:`~bkframe.core.interfaces.metadata_store.iter_ledgers_of_bookie` yields) holds:
    a merge, one page in memory at a time."""
    out: list[int] = []
    i = 0
    async for page in pages:
        indexed = set(page)
        last = page[-1]
        while i < len(local) and local[i] <= last:
            if local[i] not in indexed:
                out.append(local[i])
            i += 1
            if i % YIELD_EVERY == 0:
                await trio.lowlevel.checkpoint()
    out.extend(local[i:])
    return out


class GarbageCollector:
    """``rechecks_per_pass``: see the module's docstring."""

    def __init__(
        self, bookie: Bookie, store: MetadataStore, interval_s: float, *, rechecks_per_pass: int = RECHECKS_PER_PASS
    ) -> None:
        self.bookie = bookie
        self.store = store
        self.interval_s = interval_s
        self.rechecks_per_pass = rechecks_per_pass
        self._warned = False
        #: Local ledger id -> trio time its metadata was last read and found alive without
        #: naming this bookie (see the module's docstring).
        self.elsewhere: dict[int, float] = {}
        #: One pass at a time: the periodic one and one asked for (admin HTTP) never overlap.
        self._lock = trio.Lock()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Collect every ``interval_s``; a failed pass is logged and retried, never fatal."""
        # Compaction copies live entries before it frees their old log: on a full disk that
        # copy can fail. Nothing was repointed yet; the bookie turns read-only and the next
        # pass tries again. collect is looked up at each pass, as whoever wraps it expects.
        await run_periodically(
            "garbage collection", self.interval_s, lambda: self.collect(), mode=self.bookie.mode, task_status=task_status
        )

    async def collect(self) -> tuple[int, int]:
        """One pass; returns (ledgers deleted here, bytes the storage freed)."""
        async with self._lock:
            return await self._collect()

    async def _collect(self) -> tuple[int, int]:
        bookie = self.bookie
        if bookie.cookie_check is CookieCheck.STAMPED_METADATA:
            # The store did not know this bookie at boot: maybe the wrong store (a typo in
            # the URI), whose missing ledgers say nothing. Deleting would wipe the bookie.
            if not self._warned:
                log.warning(
                    "not deleting ledgers: the metadata store had no cookie for this bookie at boot, so it "
                    "may not be the store these ledgers belong to; restart the bookie once it is confirmed"
                )
                self._warned = True
            doomed: list[int] = []
        else:
            doomed = await self.deleted_from_store()
        deleted = 0
        for at in range(0, len(doomed), YIELD_EVERY):
            try:
                await bookie.delete_ledgers(doomed[at : at + YIELD_EVERY])
            except OSError as e:
                if not is_disk_full(e):
                    raise
                # No room for more tombstones (the room kept for them is used up): what
                # was deleted is collected below, which frees space for the rest next pass.
                bookie.mode.write_failed(e)
                log.warning("no space to delete more ledgers now (%s); %d left for the next pass", e, len(doomed) - at)
                break
            deleted += len(doomed[at : at + YIELD_EVERY])
            await trio.lowlevel.checkpoint()
        if deleted:
            await bookie.checkpoint()
            log.info("deleted %d ledger(s) that are gone from the metadata store", deleted)
        # Counted once deleted: reclaiming their space (below) yields while it runs.
        bookie.counters.gc_ledgers_deleted += deleted
        freed = await bookie.storage.collect_garbage()
        bookie.counters.gc_bytes_freed += freed
        return deleted, freed

    async def deleted_from_store(self) -> list[int]:
        """The local ledgers the metadata store no longer has (limbo ones left out)."""
        storage = self.bookie.storage
        # Taken before the index is read: a ledger gets state here only once its metadata
        # exists (naming this bookie, or as the target of a copy), so each of these is
        # either in the index or confirmed below.
        local = sorted(storage.ledgers())
        unindexed = await not_indexed(local, iter_ledgers_of_bookie(self.store, self.bookie.bookie_id))
        # Ledgers back in the index (or gone from here) are forgotten.
        self.elsewhere = {i: self.elsewhere[i] for i in unindexed if i in self.elsewhere}
        fresh = [i for i in unindexed if i not in self.elsewhere]
        again = sorted(self.elsewhere, key=self.elsewhere.__getitem__)[: self.rechecks_per_pass]
        doomed: list[int] = []
        confirm: list[int] = []
        for ledger_id in fresh + again:
            state = storage.ledger_state(ledger_id)
            if state is None or state.limbo:
                continue
            if ledger_id > MAX_LEDGER_ID:
                # No metadata store can hold such an id (stored by a bookie that did not
                # check ids on the wire yet): it is no ledger of this cluster.
                doomed.append(ledger_id)
                continue
            confirm.append(ledger_id)

        async def read(ledger_id: int) -> None:
            try:
                await self.store.read_ledger(ledger_id)
            except NoSuchLedgerError:
                doomed.append(ledger_id)
                self.elsewhere.pop(ledger_id, None)
                return
            except MetadataError as e:
                # One unreadable record must not stop the pass (nor delete the ledger).
                log.warning("garbage collection skips ledger %d: its metadata could not be read: %s", ledger_id, e)
                return
            # Alive, but its metadata does not name this bookie (see the module's docstring).
            self.elsewhere[ledger_id] = trio.current_time()

        # A few at once: on a remote store each read is a round trip, and the machine's
        # load stretches each one.
        await each_bounded(confirm, READS_IN_FLIGHT, read)
        return sorted(doomed)
