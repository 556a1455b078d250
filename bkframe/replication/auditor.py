"""The auditor of autorecovery: one per cluster, it marks the ledgers that need
re-replication; the replication workers (:mod:`.worker`) do the copying.

Every autorecovery service runs :meth:`Auditor.run`: it tries the lock ``auditor`` (held
through the metadata store, vanishing with its holder) every ``check_interval_s``; the
holder audits until it stops or its lock is lost. An audit round:

* tracks when each *known* bookie -- one that holds a fragment of some ledger -- was last
  seen registered (a bookie first met unregistered counts from that moment: the grace
  starts when this auditor starts watching, so a new auditor never marks at once what an
  old one did not);
* a bookie gone longer than ``lost_bookie_grace_s``, and a decommissioned one at once, is
  *lost*: every ledger with a fragment on it is marked under-replicated, with that bookie.

Every ``audit_interval_s`` a full check also asks each registered replica of every fragment
which entries it holds (LIST_ENTRIES) and marks the ledger with the replicas that lack some
of theirs (a bookie that lost its disk and came back with a fixed cookie). An open ledger's
last fragment is left out: its writer may still be filling it.
"""

from __future__ import annotations

import logging
import time

import attrs
import numpy as np
import trio

from bkframe.client.bookie_pool import BookiePool
from bkframe.client.distribution import stored_at
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.metadata import LedgerMetadata, Lock, MetadataStore, NoSuchLedgerError
from bkframe.replication.copying import list_on_peers

log = logging.getLogger("bkframe.autorecovery.auditor")

#: Entry ids asked of a replica at a time by the full check.
CHECK_WINDOW = 65536


@attrs.define
class AuditorStatus:
    #: Whether this service holds the auditor lock now.
    auditing: bool = False
    ledgers_marked: int = 0
    full_checks: int = 0
    last_error: str = ""


class Auditor:
    """``await nursery.start(auditor.run)``: competes for the auditor lock until cancelled.

    :param pool: connections for the full check (LIST_ENTRIES).
    :param holder: this service's name in the lock.
    """

    def __init__(self, store: MetadataStore, pool: BookiePool, holder: str, config: AutorecoveryConfig) -> None:
        self.store = store
        self.pool = pool
        self.holder = holder
        self.config = config
        self.status = AuditorStatus()
        #: Bookie id -> wall-clock time it was last seen registered (or first seen missing).
        self.last_seen: dict[str, float] = {}
        self._next_full_check = 0.0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        timeout = self.config.request_timeout_s
        while True:
            lock: Lock | None = None
            try:
                async with trio.open_nursery() as keepalive:
                    with trio.fail_after(timeout):
                        lock = await self.store.try_lock("auditor", self.holder, self.config.lock_ttl_s, keepalive)
                    if lock is not None:
                        await self._audit_while_held(lock)
                    keepalive.cancel_scope.cancel()
            except Exception as e:  # noqa: BLE001 - a store failure (or its timeout): retried, never fatal
                self.status.last_error = repr(e)
                log.warning("auditor: %r; trying again", e)
            finally:
                self.status.auditing = False
                if lock is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(timeout):
                        try:
                            await lock.release()
                        except Exception as e:  # noqa: BLE001 - it expires by its TTL then
                            log.warning("auditor: could not release the lock (%r)", e)
            await trio.sleep(self.config.check_interval_s)

    async def _audit_while_held(self, lock: Lock) -> None:
        log.info("%s is the auditor", self.holder)
        self.status.auditing = True
        self.last_seen.clear()  # the grace of a missing bookie starts when this auditor sees it
        self._next_full_check = trio.current_time() + self.config.audit_interval_s
        with trio.CancelScope() as scope:

            async def stop_when_lost() -> None:
                await lock.lost.wait()
                log.warning("%s lost the auditor lock; it stops auditing", self.holder)
                self.status.auditing = False
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_lost)
                while True:
                    try:
                        await self.audit_once()
                    except Exception as e:  # noqa: BLE001 - one failed round; the next one retries
                        self.status.last_error = repr(e)
                        log.warning("audit round failed (%r); retrying", e)
                    await trio.sleep(self.config.check_interval_s)

    async def audit_once(self) -> None:
        """One round: mark the ledgers of lost bookies; the full check when it is due."""
        timeout = self.config.request_timeout_s
        with trio.fail_after(timeout):
            registered = {b.bookie_id for b in await self.store.list_bookies()}
            decommissioned = await self.store.list_decommissioned()
            ledger_ids = await self.store.list_ledgers()
        ledgers: list[LedgerMetadata] = []
        for ledger_id in ledger_ids:
            try:
                with trio.fail_after(timeout):
                    ledgers.append(await self.store.read_ledger(ledger_id))
            except NoSuchLedgerError:
                continue  # deleted meanwhile
        now = time.time()
        known = set().union(*(md.bookies() for md in ledgers)) if ledgers else set()
        for bookie_id in registered:
            self.last_seen[bookie_id] = now
        lost: set[str] = set()
        for bookie_id in known - registered:
            seen = self.last_seen.setdefault(bookie_id, now)
            if now - seen >= self.config.lost_bookie_grace_s:
                lost.add(bookie_id)
        lost |= known & decommissioned
        if lost:
            with trio.fail_after(timeout):
                marked = {m.ledger_id: m.bookies for m in await self.store.list_under_replicated()}
            for md in ledgers:
                on = lost & md.bookies()
                if on and not on <= marked.get(md.ledger_id, frozenset()):
                    with trio.fail_after(timeout):
                        await self.store.mark_under_replicated(md.ledger_id, on)
                    self.status.ledgers_marked += 1
                    log.warning("ledger %d is under-replicated: lost %s", md.ledger_id, sorted(on))
        if self.config.audit_interval_s > 0 and trio.current_time() >= self._next_full_check:
            await self.full_check(ledgers, registered)
            self._next_full_check = trio.current_time() + self.config.audit_interval_s

    async def full_check(self, ledgers: list[LedgerMetadata], registered: set[str]) -> None:
        """Mark every ledger whose registered replicas lack entries they should hold."""
        self.status.full_checks += 1
        for md in ledgers:
            missing = await self.replicas_missing_entries(md, registered)
            if missing:
                with trio.fail_after(self.config.request_timeout_s):
                    await self.store.mark_under_replicated(md.ledger_id, missing)
                self.status.ledgers_marked += 1
                log.warning("full check: ledger %d has replicas missing entries on %s", md.ledger_id, sorted(missing))

    async def replicas_missing_entries(self, md: LedgerMetadata, registered: set[str]) -> set[str]:
        """The registered bookies that lack entries they should hold in ``md``'s fragments
        (all of them if closed, all but the last if open). A replica that cannot be asked
        is not counted: being unreachable is the lost-bookie rule's business."""
        missing: set[str] = set()
        w = md.write_quorum
        fragments = md.fragments if md.closed else md.fragments[:-1]
        for i, (first, ensemble) in enumerate(fragments):
            end = md.fragments[i + 1][0] - 1 if i + 1 < len(md.fragments) else md.last_entry_id
            asked = [b for b in ensemble if b in registered and b not in missing]
            for lo in range(first, end + 1, CHECK_WINDOW):
                hi = min(end, lo + CHECK_WINDOW - 1)
                with trio.fail_after(self.config.request_timeout_s):
                    held = await list_on_peers(self.pool, md.ledger_id, lo, hi, asked, skip_limbo=True)
                ids = np.arange(lo, hi + 1, dtype=np.int64)
                for bookie_id, has in held.items():
                    should = ids[stored_at(ensemble.index(bookie_id), ids, len(ensemble), w)]
                    if not np.isin(should, np.fromiter(has, dtype=np.int64, count=len(has))).all():
                        missing.add(bookie_id)
        return missing
