"""The replication worker of autorecovery: it brings under-replicated ledgers back to full
replication, ``parallel_ledgers`` at a time.

A loop: read the next few under-replicated marks (the auditor's, :mod:`.auditor`; never
the whole list: a lost bookie of 10^5 ledgers leaves 10^5 marks), claim one ledger (the
lock ``ledger/<id>``, which dies with the worker; a ledger another worker holds is
skipped), and for each fragment with a *lost* bookie -- one in the mark, no longer
registered, or decommissioned -- choose a replacement (the placement policy), copy the
entries the lost bookie held in that fragment (its positions in the write sets,
:func:`~bkframe.client.distribution.stored_at`) from the surviving replicas to the
replacement, verifying each copy's digest (or requiring agreeing copies when it cannot be
verified), and only then compare-and-set the fragment's ensemble to name the replacement.
Metadata therefore never names a bookie that holds half a fragment: a worker that dies
mid-copy leaves at most unreferenced entries on the replacement, and the next worker
starts over. Once no fragment names a marked bookie the mark is cleared and the claim
released.

Closed ledgers are repaired fully. An open ledger's closed fragments are repaired at once;
its last fragment belongs to its writer (which replaces a failed bookie itself when it
writes next), so it is repaired only once the mark is ``open_ledger_rereplication_grace_s``
old and one of its lost bookies is really gone (not registered): the worker then recovers
and closes the ledger (fencing the writer, if it still lives) with the existing
:class:`~bkframe.client.recovery.Recovery`, which needs the ledger's master key -- a
worker inside a bookie that holds the ledger has it; a worker without it leaves the
ledger to one that has it, or to a client that opens it. A decommissioned bookie that is
still alive is never a reason to fence a writer: the bookie refuses adds, so the writer
moves off it by an ensemble change.

Which marks: :data:`MARKS_PER_LOOK` from this worker's cursor (a ledger id), in a random
order so that workers looking at the same marks do not all race for the first one, one
claimed per look (the marks are read again after each claim: a mark another worker
finished meanwhile is gone). A claimed ledger is replicated in a task of its own, up to
``parallel_ledgers`` of them at once (a lost bookie leaves thousands of ledgers, and one
ledger's copy mostly waits on round trips); the loop claims the next one as soon as a
slot is free, skipping the ledgers its own tasks hold. The cursor moves past the marks looked at when none of them
could be taken (held by other workers, or waiting out their back-off) and goes back to the
first mark after the last: the workers rotate over the marks, a page at a time.

A ledger that cannot be repaired yet (too few replicas reachable, no bookie to copy to,
no master key) is retried with a back-off that doubles up to ``max_retry_s``; it never
blocks the others. Every request has a deadline; failures are logged and retried, never
the end of the worker.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable

import attrs
import numpy as np
import trio

from bkframe.autorecovery.copying import fetch_entries, list_on_peers
from bkframe.client.context import ClientContext
from bkframe.client.distribution import replicas, stored_at
from bkframe.client.entry_format import Digester
from bkframe.client.placement import choose_replacements
from bkframe.client.recovery import Recovery
from bkframe.common.held_lock import release_quietly, while_held
from bkframe.core.config import AutorecoveryConfig
from bkframe.core.interfaces.metadata_store import Lock
from bkframe.core.metadata import LedgerMetadata, UnderReplicated
from bkframe.errors import BadVersionError, BKError, NoSuchLedgerError, NotEnoughBookiesError
from bkframe.proto.codes import Status

log = logging.getLogger("bkframe.autorecovery.worker")

#: Entries fetched from the replicas and written to the replacement per round trip.
COPY_BATCH = 64
#: Entry ids examined at a time when listing what the replicas hold.
COPY_WINDOW = 16384

#: Marks a worker reads at a time: the next few it may take.
MARKS_PER_LOOK = 32

#: ``key_for(ledger_id)``: the ledger's master key if this worker knows it (a bookie that
#: holds the ledger), else None.
KeyLookup = Callable[[int], bytes | None]


def _no_key(ledger_id: int) -> bytes | None:
    return None


class NotYet(BKError):
    """The ledger cannot be repaired now (an open ledger within its grace, a missing key):
    retried later, logged quietly."""


class Claim(enum.Enum):
    """What came of trying to take a mark."""

    #: Claimed, and replicated or tried.
    TAKEN = "taken"
    #: Another worker holds it.
    HELD = "held"
    #: The store failed (logged); tried again later.
    FAILED = "failed"


class _Marked(enum.Enum):
    """What became of a claimed ledger's replication."""

    #: Replicated here (its mark cleared).
    DONE = "done"
    #: Its mark was gone by the time it was claimed: nothing to do.
    GONE = "gone"


@attrs.define
class WorkerStatus:
    """What ``bkframe autorecovery status`` and the logs tell of one worker."""

    ledgers_replicated: int = 0
    fragments_replicated: int = 0
    entries_copied: int = 0
    #: The ledgers being replicated now.
    replicating: set[int] = attrs.Factory(set)
    last_error: str = ""


class ReplicationWorker:
    """``await nursery.start(worker.run)``: runs until cancelled.

    :param ctx: a client context (connections, metadata store, ledger types).
    :param holder: this worker's name in the locks it takes (e.g. ``bookie-3``).
    :param key_for: the master keys this worker knows (see :data:`KeyLookup`).
    """

    def __init__(
        self, ctx: ClientContext, holder: str, config: AutorecoveryConfig, *, key_for: KeyLookup = _no_key
    ) -> None:
        self.ctx = ctx
        self.store = ctx.metadata
        self.holder = holder
        self.config = config
        self.key_for = key_for
        self.status = WorkerStatus()
        #: Ledger id -> (trio time before which it is not tried again, current back-off).
        self._retry: dict[int, tuple[float, float]] = {}
        #: The ledger id this worker reads marks from (see the module's docstring).
        self._cursor = 0
        #: Open ledger -> trio time this worker first found its last fragment waiting on its
        #: writer. The grace counts from then, not from the mark's wall-clock ``since``: a
        #: step of this machine's clock (or another's, which wrote ``since``) must not end it
        #: early and fence a live writer.
        self._pending_since: dict[int, float] = {}
        #: A slot per ledger replicated at once; taken before a claim, freed when it ends.
        self._slots = trio.Semaphore(config.parallel_ledgers)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            await self._loop(nursery)

    async def _loop(self, nursery: trio.Nursery) -> None:
        while True:
            try:
                with trio.fail_after(self.config.request_timeout_s):
                    marks, wrapped = await self.next_marks()
            except Exception as e:  # noqa: BLE001 - a store failure (or its timeout): retried, never fatal
                log.warning("cannot list under-replicated ledgers (%r); retrying", e)
                await trio.sleep(self.config.check_interval_s)
                continue
            outcome = await self._take_one(marks, nursery)
            if outcome is Claim.TAKEN:
                continue
            # Nothing here could be taken: look further on, at once if these are held by
            # other workers (work may follow), else after a pause (all waiting out their
            # back-off, a store failure, or nothing marked) -- so a worker never reads
            # every mark in a row.
            self._cursor = 0 if wrapped or not marks else marks[-1].ledger_id + 1
            if wrapped:
                # Back-offs already over are forgotten (their ledgers were done elsewhere,
                # or are tried as new), so that the table holds only marks still waiting.
                now = trio.current_time()
                self._retry = {i: r for i, r in self._retry.items() if r[0] > now}
                busy = self.status.replicating
                self._pending_since = {i: t for i, t in self._pending_since.items() if i in self._retry or i in busy}
            if outcome is not Claim.HELD or wrapped:
                await trio.sleep(self.config.check_interval_s)

    async def next_marks(self) -> tuple[list[UnderReplicated], bool]:
        """At most :data:`MARKS_PER_LOOK` marks from the cursor on, continued from the first
        mark when the last is reached; and whether that end was reached."""
        marks = await self.store.list_under_replicated(start=self._cursor, limit=MARKS_PER_LOOK)
        if len(marks) == MARKS_PER_LOOK:
            return marks, False
        if self._cursor > 0:
            first = await self.store.list_under_replicated(start=0, limit=MARKS_PER_LOOK - len(marks))
            marks += [m for m in first if m.ledger_id < self._cursor]
        return marks, True

    async def _take_one(self, marks: list[UnderReplicated], nursery: trio.Nursery) -> Claim | None:
        """Claim one of ``marks`` (tried in a random order until one is taken or the store
        fails) and start its replication in ``nursery``; None if all of them wait out their
        back-off or are being replicated here already."""
        outcome: Claim | None = None
        for mark in random.sample(marks, len(marks)):
            if self._retry.get(mark.ledger_id, (0.0, 0.0))[0] > trio.current_time():
                continue
            if mark.ledger_id in self.status.replicating:
                continue
            await self._slots.acquire()  # before the claim: a claim must not wait for a slot
            outcome, lock = await self._claim(mark)
            if lock is None:
                self._slots.release()
            else:
                self.status.replicating.add(mark.ledger_id)
                nursery.start_soon(self._replicate_claimed, lock, mark)
            if outcome is not Claim.HELD:
                break
        return outcome

    async def _claim(self, mark: UnderReplicated) -> tuple[Claim, Lock | None]:
        try:
            with trio.fail_after(self.config.request_timeout_s):
                lock = await self.store.try_lock(
                    f"ledger/{mark.ledger_id}", self.holder, self.config.lock_ttl_s, self.ctx.nursery
                )
        except Exception as e:  # noqa: BLE001 - a store failure: try again next round
            log.warning("cannot claim ledger %d (%r)", mark.ledger_id, e)
            return Claim.FAILED, None
        return (Claim.HELD, None) if lock is None else (Claim.TAKEN, lock)

    async def _replicate_claimed(self, lock: Lock, mark: UnderReplicated) -> None:
        """Replicate a claimed ledger (or try to), then free its claim and its slot."""
        try:
            await self._replicate_held(lock, mark)
        finally:
            self.status.replicating.discard(mark.ledger_id)
            self._slots.release()

    async def _replicate_held(self, lock: Lock, mark: UnderReplicated) -> None:
        try:
            outcome = await while_held(
                lock, lambda: self._replicate_if_marked(mark.ledger_id), log,
                f"lost the claim on ledger {mark.ledger_id}; abandoning its replication",
            )
            if outcome is _Marked.GONE:
                # Another worker finished it between this worker's look and its claim.
                self._retry.pop(mark.ledger_id, None)
                return
            done = outcome is _Marked.DONE
        except NotYet as e:
            log.info("ledger %d: %s", mark.ledger_id, e)
            done = False
        except Exception as e:
            self.status.last_error = f"ledger {mark.ledger_id}: {e}"
            if isinstance(e, (BKError, ConnectionError, OSError, trio.TooSlowError)):
                log.warning("replication of ledger %d not done yet: %s", mark.ledger_id, e)
            else:
                log.exception("replication of ledger %d failed; retrying later", mark.ledger_id)
            done = False
        finally:
            await release_quietly(lock, self.config.request_timeout_s, log, f"the claim on ledger {mark.ledger_id}")
        if done:
            self._retry.pop(mark.ledger_id, None)
            self.status.ledgers_replicated += 1
        else:
            _, delay = self._retry.get(mark.ledger_id, (0.0, self.config.check_interval_s / 2))
            delay = min(delay * 2, self.config.max_retry_s)
            self._retry[mark.ledger_id] = (trio.current_time() + delay, delay)

    async def _replicate_if_marked(self, ledger_id: int) -> _Marked:
        """:meth:`replicate` of a claimed ledger, with its mark read again under the claim:
        the worker that held the claim before may have finished the ledger and cleared its
        mark after this worker read the marks, and a ledger is done only once."""
        with trio.fail_after(self.config.request_timeout_s):
            found = await self.store.list_under_replicated(start=ledger_id, limit=1)
        if not found or found[0].ledger_id != ledger_id:
            return _Marked.GONE
        await self.replicate(ledger_id, found[0])
        return _Marked.DONE

    # -- one ledger ---------------------------------------------------------------------

    async def replicate(self, ledger_id: int, mark: UnderReplicated | None = None) -> bool:
        """Repair what can be repaired now; True once no fragment names a marked bookie
        (the mark is then cleared). Raises :class:`NotYet` or another error if work is left.

        ``mark``: the ledger's mark as the worker read it, just before it claimed the ledger
        (else it is read). A worker that repaired the ledger meanwhile left it naming none
        of the mark's bookies: they are cleared below as done; bookies marked since stay
        marked for the next look."""
        timeout = self.config.request_timeout_s
        if mark is None:
            with trio.fail_after(timeout):
                found = await self.store.list_under_replicated(start=ledger_id, limit=1)
            if not found or found[0].ledger_id != ledger_id:
                return True  # done by another worker meanwhile
            mark = found[0]
        try:
            with trio.fail_after(timeout):
                md = await self.store.read_ledger(ledger_id)
        except NoSuchLedgerError:
            log.info("ledger %d was deleted; dropping its under-replicated mark", ledger_id)
            with trio.fail_after(timeout):
                await self.store.clear_under_replicated(ledger_id, mark.bookies)
            return True
        with trio.fail_after(timeout):
            registered = {b.bookie_id for b in await self.store.list_bookies()}
            decommissioned = await self.store.list_decommissioned()
        lost = {b for b in md.bookies() if b in mark.bookies or b not in registered or b in decommissioned}
        pending = ""
        while True:
            index = self._next_fragment(md, lost)
            if index is None:
                break
            if index == len(md.fragments) - 1 and not md.closed:
                pending = await self._last_fragment_pending(md, mark, lost, registered)
                if pending:
                    break
                md = await self._recover(md)
                continue
            md = await self._replicate_fragment(md, index, lost)
        gone = set(mark.bookies) - md.bookies()
        if gone:
            with trio.fail_after(timeout):
                await self.store.clear_under_replicated(ledger_id, gone)
        if pending:
            raise NotYet(pending)
        left = set(mark.bookies) & md.bookies()
        if left:
            raise NotYet(f"bookies {sorted(left)} are still in its fragments")
        log.info("ledger %d is fully replicated again (replaced %s)", ledger_id, sorted(gone))
        return True

    @staticmethod
    def _next_fragment(md: LedgerMetadata, lost: set[str]) -> int | None:
        for i, (_, ensemble) in enumerate(md.fragments):
            if lost & set(ensemble):
                return i
        return None

    async def _last_fragment_pending(
        self, md: LedgerMetadata, mark: UnderReplicated, lost: set[str], registered: set[str]
    ) -> str:
        """Why the open ledger's last fragment is left to its writer for now ('' if not)."""
        ensemble = md.fragments[-1][1]
        gone = [b for b in ensemble if b in lost and b not in registered]
        if not gone:
            return (
                f"the last fragment of the open ledger names {sorted(lost & set(ensemble))}, which are alive "
                f"(decommissioned or marked): left to the writer's ensemble change or close"
            )
        age = trio.current_time() - self._pending_since.setdefault(md.ledger_id, trio.current_time())
        grace = self.config.open_ledger_rereplication_grace_s
        if age < grace:
            return f"open ledger: its last fragment is left to its writer for {grace - age:.0f} s more"
        if self.key_for(md.ledger_id) is None:
            return (
                "open ledger past its grace, but this worker does not hold its master key to recover it: "
                "left to a worker in a bookie of the ledger, or to a client that opens it"
            )
        return ""

    async def _recover(self, md: LedgerMetadata) -> LedgerMetadata:
        """Recover and close an open ledger whose writer is gone (fencing it if it is not)."""
        key = self.key_for(md.ledger_id)
        assert key is not None
        log.warning("ledger %d: its writer is gone past the grace; recovering and closing it", md.ledger_id)
        with trio.fail_after(self.config.request_timeout_s * 4):
            return await Recovery(self.ctx, md, key, Digester.unkeyed(md.digest_type)).run()

    async def _replicate_fragment(self, md: LedgerMetadata, index: int, lost: set[str]) -> LedgerMetadata:
        """Copy the lost bookies' share of one fragment to replacements, then CAS them in."""
        first, ensemble = md.fragments[index]
        end = md.fragments[index + 1][0] - 1 if index + 1 < len(md.fragments) else md.last_entry_id
        failed = [i for i, b in enumerate(ensemble) if b in lost]
        new = await self._choose(md, ensemble, failed, lost)
        for i in failed:
            copied = await self._copy(md, ensemble, first, end, i, new[i], lost)
            self.status.entries_copied += copied
            log.info(
                "ledger %d fragment %d: copied %d entries of %s to %s", md.ledger_id, first, copied, ensemble[i], new[i]
            )
        timeout = self.config.request_timeout_s
        while True:
            if (first, ensemble) not in md.fragments:
                # Someone else changed it (another worker, recovery): look again from the top.
                log.info("ledger %d: fragment %d changed meanwhile; not replacing it", md.ledger_id, first)
                return md
            fragments = tuple((f, tuple(new)) if (f, e) == (first, ensemble) else (f, e) for f, e in md.fragments)
            try:
                with trio.fail_after(timeout):
                    md = await self.store.update_ledger(attrs.evolve(md, fragments=fragments), md.version)
            except BadVersionError:
                with trio.fail_after(timeout):
                    md = await self.store.read_ledger(md.ledger_id)
                continue
            self.status.fragments_replicated += 1
            return md

    async def _choose(self, md: LedgerMetadata, ensemble: tuple[str, ...], failed: list[int], lost: set[str]) -> list[str]:
        """Replacements, preferably bookies that hold nothing of the ledger yet; else any live
        bookie outside the fragment's ensemble (it may hold another fragment of the ledger)."""
        what = f"re-replication of ledger {md.ledger_id}"
        with trio.fail_after(self.config.request_timeout_s):
            try:
                return await choose_replacements(
                    self.ctx.pool, ensemble, failed, exclude=md.bookies() | lost, what=what,
                    write_quorum=md.write_quorum,
                )
            except NotEnoughBookiesError:
                return await choose_replacements(
                    self.ctx.pool, ensemble, failed, exclude=lost, what=what, write_quorum=md.write_quorum
                )

    async def _copy(
        self, md: LedgerMetadata, ensemble: tuple[str, ...], first: int, end: int, index: int, target: str, lost: set[str]
    ) -> int:
        """Copy entries ``first..end`` that ensemble position ``index`` holds to ``target``."""
        ledger_id = md.ledger_id
        e, w = len(ensemble), md.write_quorum
        digester = Digester.unkeyed(md.digest_type)
        key = self.key_for(ledger_id) or b""
        type_id = self.ctx.ledger_types.named(md.ledger_type).type_id
        timeout = self.config.request_timeout_s
        # Lost bookies may still be alive (decommissioned, marked): sources, but last.
        sources = sorted((b for b in ensemble if b != target), key=lambda b: b in lost)
        copied = 0
        for lo in range(first, end + 1, COPY_WINDOW):
            hi = min(end, lo + COPY_WINDOW - 1)
            ids = np.arange(lo, hi + 1, dtype=np.int64)
            wanted = ids[stored_at(index, ids, e, w)].tolist()
            if not wanted:
                continue
            with trio.fail_after(timeout):
                listed = await list_on_peers(self.ctx.pool, ledger_id, lo, hi, [target, *sources])
            # What the target holds already (an earlier, interrupted attempt) is not sent again.
            missing = [i for i in wanted if i not in listed.get(target, ())]
            for start in range(0, len(missing), COPY_BATCH):
                chunk: list[tuple[int, list[str]]] = []
                for entry_id in missing[start : start + COPY_BATCH]:
                    # Replicas known to hold it first, lost ones (if alive at all) last.
                    peers = [b for b in replicas(ensemble, entry_id, w) if b != target]
                    peers.sort(key=lambda b: (entry_id not in listed.get(b, ()), b in lost))
                    chunk.append((entry_id, peers))
                with trio.fail_after(timeout):
                    entry_ids, entries = await fetch_entries(self.ctx.pool, ledger_id, chunk, digester)
                with trio.fail_after(timeout):
                    conn = await self.ctx.pool.get(target)
                    r = await conn.submit_add_batch(
                        ledger_id, entry_ids, entries, master_key=key, ledger_type=type_id, recovery=True, timeout_s=timeout
                    ).wait()
                if r.status != Status.OK:
                    raise BKError(f"ledger {ledger_id}: {target} refused the copies: {r.status.name} {r.message}")
                copied += len(entry_ids)
        return copied

