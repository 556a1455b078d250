"""The bookie's garbage collector: forget ledgers deleted from the metadata store, reclaim space.

A client deletes a ledger from the metadata store only; each bookie notices on its own.
Every ``gc_interval_s`` the collector lists the store's ledgers once, confirms each local
ledger missing from that list with a read of its metadata (a ledger created after the
listing is not deleted), deletes the confirmed ones from ledger storage, checkpoints (so the
journal does not replay them back), then asks the ledger storage to reclaim their space
(the default storage removes entry logs no index points into any more and compacts the
mostly-dead ones).

A failed pass (the metadata store is away, a disk error while compacting) is logged and
retried with backoff (:mod:`bkframe.bookie.background`); it never stops the bookie.

Ledgers in limbo are left alone: the repair task decides about them. A bookie whose
cookie the metadata store did not have at boot deletes no ledgers until restarted: the
store may be the wrong one, and its empty listing must not wipe the bookie.
"""

from __future__ import annotations

import logging

import trio

from bkframe import proto as p
from bkframe.bookie.background import run_periodically
from bkframe.bookie.bookie import Bookie
from bkframe.bookie.cookies import CookieCheck
from bkframe.core.disk_full import is_disk_full
from bkframe.core.metadata import MetadataError, MetadataStore, NoSuchLedgerError

log = logging.getLogger("bkframe.gc")


class GarbageCollector:
    def __init__(self, bookie: Bookie, store: MetadataStore, interval_s: float) -> None:
        self.bookie = bookie
        self.store = store
        self.interval_s = interval_s
        self._warned = False
        #: One pass at a time: the periodic one and one asked for (admin HTTP) never overlap.
        self._lock = trio.Lock()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Collect every ``interval_s``; a failed pass is logged and retried, never fatal."""
        await run_periodically("garbage collection", self.interval_s, self._collect_once, task_status=task_status)

    async def _collect_once(self) -> None:
        try:
            await self.collect()
        except OSError as e:
            if is_disk_full(e):
                # Compaction copies live entries before it frees their old log: on a full
                # disk that copy can fail. Nothing was repointed yet; the bookie turns
                # read-only and the next pass tries again.
                self.bookie.mode.write_failed(e)
            raise

    async def collect(self) -> tuple[int, int]:
        """One pass; returns (ledgers deleted here, bytes the storage freed)."""
        async with self._lock:
            return await self._collect()

    async def _collect(self) -> tuple[int, int]:
        bookie = self.bookie
        storage = bookie.storage
        deleted = 0
        doomed: list[int] = []
        if bookie.cookie_check is CookieCheck.STAMPED_METADATA:
            # The store did not know this bookie at boot: maybe the wrong store (a typo in
            # the URI), whose missing ledgers say nothing. Deleting would wipe the bookie.
            if not self._warned:
                log.warning(
                    "not deleting ledgers: the metadata store had no cookie for this bookie at boot, so it "
                    "may not be the store these ledgers belong to; restart the bookie once it is confirmed"
                )
                self._warned = True
            known = set(storage.ledgers())
        else:
            known = set(await self.store.list_ledgers())
        for ledger_id in list(storage.ledgers()):
            state = storage.ledger_state(ledger_id)
            if ledger_id in known or state is None or state.limbo:
                continue
            if ledger_id <= p.MAX_LEDGER_ID:
                try:
                    await self.store.read_ledger(ledger_id)
                    continue  # created after the listing
                except NoSuchLedgerError:
                    pass
                except MetadataError as e:
                    # One unreadable record must not stop the pass (nor delete the ledger).
                    log.warning("garbage collection skips ledger %d: its metadata could not be read: %s", ledger_id, e)
                    continue
            # else: no metadata store can hold such an id (stored by a bookie that did not
            # check ids on the wire yet): it is no ledger of this cluster.
            doomed.append(ledger_id)
        if doomed:
            await bookie.delete_ledgers(doomed)
            deleted = len(doomed)
            await bookie.checkpoint()
            log.info("deleted %d ledger(s) that are gone from the metadata store", deleted)
        freed = await storage.collect_garbage()
        bookie.counters.gc_ledgers_deleted += deleted
        bookie.counters.gc_bytes_freed += freed
        return deleted, freed
