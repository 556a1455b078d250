"""The auditor of autorecovery: one per cluster, it marks the ledgers that need
re-replication; the replication workers (:mod:`.worker`) do the copying.

Every autorecovery service runs :meth:`Auditor.run`. It watches the bookie set
(``list_bookies``, one bounded request, every ``check_interval_s``) whether it audits or
not, so that a candidate that takes over knows since when each bookie it saw is gone; and
it tries the lock ``auditor`` (held through the metadata store, vanishing with its holder)
every ``check_interval_s``. The holder audits until it stops or its lock is lost. Nothing
periodic reads every ledger (BookKeeper's auditor, driven by bookie-set watches):

* every ``check_interval_s`` a round tracks when each *known* bookie -- one seen
  registered, one a full check found named in a ledger's metadata, a decommissioned one --
  was last seen registered (a bookie first met unregistered counts from that moment: the
  grace starts when this service starts watching, so a new auditor never marks at once
  what an old one did not);
* a bookie gone longer than ``lost_bookie_grace_s``, and a decommissioned one at once, is
  *lost*: every ledger the store indexes for it
  (:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.ledgers_of_bookie`, paged) is marked
  under-replicated with that bookie, :data:`MARK_PAGE` ledgers per store call, with no
  read of any ledger's metadata. Its index is swept again every :data:`RESWEEP_S` (a
  ledger that named it after the sweep passed: a client with an old bookie set) until it is
  empty; an unregistered bookie with an empty index is then forgotten.

*Full checks* run beside the rounds, throttled: every ledger id, a page at a time
(:func:`~bkframe.core.interfaces.metadata_store.iter_ledger_ids`), and the metadata of each, at most
``full_check_reads_per_s`` reads a second. Each ledger's ensembles are checked against the
live bookies (a bookie named but not registered becomes known, its grace starting then,
and its ledgers are marked by the rounds once it is lost), and, every ``audit_interval_s``, each registered
replica of every fragment is asked which entries it holds (LIST_ENTRIES): the ledger is
marked with the replicas that lack some of theirs (a bookie that lost its disk and came
back with a fixed cookie). An open ledger's last fragment is left out: its writer may still
be filling it. A new auditor runs one full check of the ensembles only at once, at the same
rate: it finds the bookies that died while no auditor watched.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection, Sequence

import attrs
import numpy as np
import trio

from bkframe.autorecovery.copying import list_on_peers
from bkframe.client.bookies.pool import BookiePool
from bkframe.client.distribution import stored_at
from bkframe.common.each_bounded import each_bounded
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.metadata_store import Lock, MetadataStore
from bkframe.core.metadata import LEDGER_PAGE, LedgerMetadata
from bkframe.errors import NoSuchLedgerError

log = logging.getLogger("bkframe.autorecovery.auditor")

#: Entry ids asked of a replica at a time by the full check.
CHECK_WINDOW = 65536
#: Ledgers marked under-replicated per store call when a bookie is lost
#: (:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.mark_many_under_replicated`: one sqlite
#: transaction, pipelined ZooKeeper requests, a few etcd transactions).
MARK_PAGE = 1_000
#: Such calls at once (hides a remote store's round trips; sqlite takes them in turn).
MARK_PAGES_IN_FLIGHT = 4
#: Seconds between two sweeps of a lost bookie's index.
RESWEEP_S = 60.0


@attrs.define
class AuditorStatus:
    #: Whether this service holds the auditor lock now.
    auditing: bool = False
    ledgers_marked: int = 0
    #: Full checks completed (the one at takeover included).
    full_checks: int = 0
    #: Ledgers whose metadata full checks read.
    ledgers_checked: int = 0
    #: Bookies found lost, with the ledgers of each marked at the last sweep.
    lost_bookies: dict[str, int] = attrs.Factory(dict)
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
        #: Bookie id -> when it was last seen registered, or first seen missing, on the
        #: monotonic clock: a step of the wall clock must neither call a live bookie lost nor
        #: keep a dead one for an hour.
        self.last_seen: dict[str, float] = {}
        #: The bookie set at the last look.
        self.registered: set[str] = set()
        self.decommissioned: set[str] = set()
        #: Lost bookie -> trio time of the last sweep of its index.
        self._swept: dict[str, float] = {}
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
                    else:
                        await self.watch_bookies()
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

    async def watch_bookies(self) -> None:
        """Look at the bookie set: note when each bookie was last seen registered."""
        before = self.registered
        with trio.fail_after(self.config.request_timeout_s):
            self.registered = {b.bookie_id for b in await self.store.list_bookies()}
            self.decommissioned = await self.store.list_decommissioned()
        now = time.monotonic()
        # The grace runs from the look that first finds a bookie gone, not from the last
        # that found it there: after a slow look (a stalled auditor, a slow store) the
        # bookie may have been there all along, and it gets its whole grace from now.
        for bookie_id in self.registered | (before - self.registered):
            self.last_seen[bookie_id] = now
        for bookie_id in self.decommissioned:
            self.last_seen.setdefault(bookie_id, now)

    def lost_bookies(self) -> set[str]:
        """Known bookies gone past the grace, and decommissioned ones."""
        now = time.monotonic()
        grace = self.config.lost_bookie_grace_s
        return {
            b
            for b, seen in self.last_seen.items()
            if b in self.decommissioned or (b not in self.registered and now - seen >= grace)
        }

    async def _audit_while_held(self, lock: Lock) -> None:
        log.info("%s is the auditor", self.holder)
        self.status.auditing = True
        self._swept.clear()  # what an old auditor swept may have changed since: sweep again
        self._next_full_check = trio.current_time() + self.config.audit_interval_s
        with trio.CancelScope() as scope:

            async def stop_when_lost() -> None:
                await lock.lost.wait()
                log.warning("%s lost the auditor lock; it stops auditing", self.holder)
                self.status.auditing = False
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop_when_lost)
                started = False
                while True:
                    try:
                        await self.audit_once()
                    except Exception as e:  # noqa: BLE001 - one failed round; the next one retries
                        self.status.last_error = repr(e)
                        log.warning("audit round failed (%r); retrying", e)
                    else:
                        if not started:  # once the bookie set is known, not before
                            nursery.start_soon(self._full_checks)
                            started = True
                    await trio.sleep(self.config.check_interval_s)

    async def audit_once(self) -> None:
        """One round: look at the bookie set; mark the ledgers of bookies lost since."""
        await self.watch_bookies()
        lost = self.lost_bookies()
        for bookie_id in set(self._swept) - lost:
            del self._swept[bookie_id]  # back: if lost again, swept at once
        for bookie_id in sorted(lost):
            if trio.current_time() < self._swept.get(bookie_id, -math.inf) + RESWEEP_S:
                continue
            held = await self.mark_ledgers_of(bookie_id)
            self._swept[bookie_id] = trio.current_time()
            if not held and bookie_id not in self.registered and bookie_id not in self.decommissioned:
                # Nothing names it any more: forget it (a full check finds it again if needed).
                del self.last_seen[bookie_id], self._swept[bookie_id]
                self.status.lost_bookies.pop(bookie_id, None)

    async def mark_ledgers_of(self, bookie_id: str) -> int:
        """Mark every ledger the store indexes for ``bookie_id``; returns how many it indexes.

        The marks are not listed first: marking a ledger marked with the bookie already
        writes nothing (and is not counted), and reads that one mark only, where a listing
        would read every ledger's mark, of every lost bookie, at each sweep."""
        timeout = self.config.request_timeout_s
        held = newly = 0
        start = 0
        while True:
            with trio.fail_after(timeout):
                page = await self.store.ledgers_of_bookie(bookie_id, start=start, limit=LEDGER_PAGE)
            held += len(page)
            newly += await self._mark(page, {bookie_id})
            if len(page) < LEDGER_PAGE:
                break
            start = page[-1] + 1
        if newly:
            log.warning("bookie %s is lost: marked %d of its %d ledger(s) under-replicated", bookie_id, newly, held)
        self.status.lost_bookies[bookie_id] = held
        return held

    async def _mark(self, ledger_ids: Sequence[int], bookies: Collection[str]) -> int:
        """How many marks were made or changed."""
        pages = [ledger_ids[i : i + MARK_PAGE] for i in range(0, len(ledger_ids), MARK_PAGE)]
        changed = 0

        async def mark(k: int) -> None:
            nonlocal changed
            with trio.fail_after(self.config.request_timeout_s):
                n = await self.store.mark_many_under_replicated(pages[k], bookies)
            changed += n
            self.status.ledgers_marked += n
            log.debug("%d ledger(s) under-replicated: lost %s", n, sorted(bookies))

        await each_bounded(range(len(pages)), MARK_PAGES_IN_FLIGHT, mark)
        return changed

    # -- full checks --------------------------------------------------------------------

    async def _full_checks(self) -> None:
        """At takeover the ensembles of every ledger, then every ``audit_interval_s`` the
        ensembles and the replicas' entries; a failed check is tried again later."""
        replicas = False
        while True:
            try:
                await self.full_check(replicas=replicas)
            except Exception as e:  # noqa: BLE001 - a store or bookie failure: tried again later
                self.status.last_error = repr(e)
                log.warning("full check failed (%r); trying again in %.0f s", e, self.config.max_retry_s)
                await trio.sleep(self.config.max_retry_s)
                continue
            if self.config.audit_interval_s <= 0:
                return
            self._next_full_check = trio.current_time() + self.config.audit_interval_s
            await trio.sleep_until(self._next_full_check)
            replicas = True

    async def full_check(self, *, replicas: bool = True) -> None:
        """Every ledger, at most ``full_check_reads_per_s`` metadata reads a second: its
        ensembles against the live bookies, and with ``replicas`` its replicas' entries."""
        timeout = self.config.request_timeout_s
        interval = 1.0 / self.config.full_check_reads_per_s
        next_read = trio.current_time()
        start = 0
        while True:
            with trio.fail_after(timeout):
                page = await self.store.list_ledgers(start=start, limit=LEDGER_PAGE)
            for ledger_id in page:
                await trio.sleep_until(next_read)
                next_read = max(next_read + interval, trio.current_time() - 1.0)
                try:
                    with trio.fail_after(timeout):
                        md = await self.store.read_ledger(ledger_id)
                except NoSuchLedgerError:
                    continue  # deleted meanwhile
                self.status.ledgers_checked += 1
                self._note_bookies(md)
                if replicas:
                    missing = await self.replicas_missing_entries(md, self.registered)
                    if missing:
                        await self._mark([md.ledger_id], missing)
                        log.warning("full check: ledger %d has replicas missing entries on %s", md.ledger_id, sorted(missing))
            if len(page) < LEDGER_PAGE:
                break
            start = page[-1] + 1
        self.status.full_checks += 1

    def _note_bookies(self, md: LedgerMetadata) -> None:
        """Make the bookies ``md`` names known: one never seen registered counts as missing
        from now (its ledgers are marked from its index once it is lost, by the rounds)."""
        now = time.monotonic()
        for bookie_id in md.bookies() - self.registered:
            self.last_seen.setdefault(bookie_id, now)

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
