"""Garbage collection of the ``default`` storage's entry logs: removing logs no index points
into, and compacting mostly dead ones.

**The order compaction keeps.** A log's live records are (1) copied to the active entry log
and the copies fsynced, (2) the indexes are pointed at the copies and checkpointed, and only
then (3) is the old log removed -- never another order. An index made durable before its
copies would point at bytes a crash can lose; a log removed before the indexes that pointed
into it are durable would leave them, after a crash, pointing into a log that is gone. In
this order a crash at any step leaves every index pointing at durable data: the old log
until (2) is durable, the copies after.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import numpy as np
import trio

from bkframe.core.counters import Counters
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.storage_kit.disk_full import is_disk_full
from bkframe.storage_kit.pacing import Pacer

from .entry_record import LOST, read_record
from .ledger_index import LedgerIndex

#: The storage's logger, as before this module was split from it: one name for its messages.
log = logging.getLogger("bkframe.plugins.ledger_storage_default.storage")

#: Bytes of live records copied per step of a compaction (the event loop runs in between).
COMPACTION_STEP_BYTES = 4 << 20


class Compactor:
    """Garbage collection for one :class:`~.storage.DefaultLedgerStorage`.

    :param ledgers: the ids of the storage's ledgers now (they come and go while a
        compaction yields).
    :param index: a ledger's index, opened if need be (None: the ledger has none, or no
        longer exists); valid until the next await.
    :param checkpoint: the storage's checkpoint (entry logs, then dirty indexes, made durable).
    :param drop: forgets entries whose bytes are gone (``ledger_id, index, entry_ids``).
    :param repointed: told each ledger whose index now points at copies (it is dirty).
    """

    def __init__(
        self,
        ledgers: Callable[[], list[int]],
        index: Callable[[int], LedgerIndex | None],
        entry_logs: EntryLogManager,
        counters: Counters,
        *,
        threshold: float,
        checkpoint: Callable[[], Awaitable[None]],
        drop: Callable[[int, LedgerIndex, np.ndarray], None],
        repointed: Callable[[int], None],
    ) -> None:
        self._ledgers = ledgers
        self._index = index
        #: One collection at a time (the bookie's GC and an admin's request may overlap).
        self._lock = trio.Lock()
        self._entry_logs = entry_logs
        self._counters = counters
        self._threshold = threshold
        self._checkpoint = checkpoint
        self._drop = drop
        self._repointed = repointed

    async def collect_garbage(self) -> int:
        """Reclaim the entry-log space of deleted ledgers; return the bytes freed.

        Deletions are made durable first (a checkpoint), so that a crash cannot bring back
        an index that points into a removed log. Then, for sealed logs only (the entry-log
        manager says which will never be appended to again): a log no index points into
        is removed; a log whose live records are under the threshold of its size is
        compacted, in the order the module docstring gives, and removed only once its
        copies are durable and the indexes point at them.
        """
        async with self._lock:
            return await self._collect_garbage()

    async def _collect_garbage(self) -> int:
        await self._checkpoint()
        # Which logs are sealed (taken first: a sealed log gains no entries), then their
        # live bytes and the ledgers that point into them, over every ledger's index. The
        # scan yields between ledgers: a ledger deleted meanwhile is counted or not (live
        # bytes are only ever overestimated, never a log removed that an index points
        # into), and what is written meanwhile goes to logs that are not sealed.
        sealed = self._entry_logs.sealed_log_ids()
        live: dict[int, int] = {}
        users: dict[int, list[int]] = {}
        pacer = Pacer()
        for ledger_id in self._ledgers():
            await pacer.tick()
            idx = self._index(ledger_id)
            if idx is None:
                continue
            # A chunk at a time, and never through unallocated pages of the mapping
            # (LedgerIndex.held): the holes of a sparse table kill the bookie on a full tmpfs.
            mine: dict[int, int] = {}
            for _, held in idx.held():
                ids, inverse = np.unique(held["log_id"], return_inverse=True)
                sums = np.bincount(inverse, weights=held["length"])
                for log_id, total in zip(ids.tolist(), sums.tolist()):
                    mine[log_id] = mine.get(log_id, 0) + int(total)
            for log_id, total in mine.items():
                live[log_id] = live.get(log_id, 0) + total
                users.setdefault(log_id, []).append(ledger_id)
        freed = 0
        for log_id in sealed:
            size = self._entry_logs.log_size(log_id)
            in_use = live.get(log_id, 0)
            if in_use == 0:
                if await self._entry_logs.remove_log(log_id):
                    freed += size
                    log.info("removed entry log %08x (%d bytes): no ledger points into it", log_id, size)
            elif size and in_use / size < self._threshold:
                try:
                    copied, complete = await self._compact(log_id, users.get(log_id, []))
                except Exception as e:
                    if not is_disk_full(e):
                        raise
                    # No room for the copies (a full disk): nothing points at them yet. Go on
                    # removing logs that need no copy; they are what can make room.
                    log.warning("compaction of entry log %08x skipped: %s", log_id, e)
                    continue
                # Step (3), last: the copies are durable and the durable indexes point at them.
                if complete and await self._entry_logs.remove_log(log_id):
                    freed += size - copied
                    log.info("compacted entry log %08x: kept %d of %d bytes", log_id, copied, size)
        if freed:
            await self._entry_logs.flush()  # the directory: the removals are durable
        return freed

    def _read_live(
        self, old_log: int, ledger_id: int, idx: LedgerIndex, chunk: np.ndarray, rows: np.ndarray
    ) -> tuple[list[bytes], np.ndarray, np.ndarray, bool]:
        """The records of ``chunk`` (entry ids whose index ``rows`` point into ``old_log``)
        that can be copied, with their ids and rows, and whether none was corrupt. A record
        a power cut took is dropped from the index as missing here; a corrupt one stays."""
        parts: list[bytes] = []
        fate = np.zeros(chunk.size, dtype=np.int8)  # 0 copy, 1 lost, 2 corrupt
        for i, (entry_id, offset, length) in enumerate(zip(chunk.tolist(), rows["offset"].tolist(), rows["length"].tolist())):
            record = read_record(self._entry_logs, old_log, offset, length, ledger_id, entry_id)
            if isinstance(record, bytes):
                parts.append(record)
            else:
                fate[i] = 1 if record is LOST else 2
        if (fate == 1).any():
            # Bytes a power cut took: the entry is missing here, nothing to copy,
            # and no reason to fail the pass (it used to, at every GC).
            lost = chunk[fate == 1]
            log.warning(
                "compacting entry log %08x: %d entries of ledger %d (ids %d..%d) are not in it "
                "(its tail was lost in a crash); dropped from the index as missing here",
                old_log, lost.size, ledger_id, int(lost[0]), int(lost[-1]),
            )
            self._drop(ledger_id, idx, lost)
        intact = not (fate == 2).any()
        if not intact:
            log.error(
                "compacting entry log %08x: %d records of ledger %d (first entry %d) are not the "
                "entries the index names (corrupt); they stay where they are, and so does the log",
                old_log, int((fate == 2).sum()), ledger_id, int(chunk[fate == 2][0]),
            )
        return parts, chunk[fate == 0], rows[fate == 0], intact

    async def _repoint(
        self, old_log: int, moved: list[tuple[int, np.ndarray, np.ndarray, int, np.ndarray]], pacer: Pacer
    ) -> None:
        """Point the indexes at the copies ``moved`` made: (ledger, entry ids, their offsets
        in ``old_log``, the log and offsets of their copies)."""
        for ledger_id, chunk, old_offsets, new_log, new_offsets in moved:
            await pacer.tick()
            idx = self._index(ledger_id)
            if idx is None:
                continue
            current = idx.read_at(chunk)
            # Only records still where the copy was taken from: an entry rewritten since
            # (a recovery add) keeps its newer location.
            still = (current["log_id"] == old_log) & (current["offset"] == old_offsets)
            idx.repoint(chunk[still], new_offsets[still], new_log)
            self._repointed(ledger_id)

    async def _compact(self, old_log: int, ledgers: list[int]) -> tuple[int, bool]:
        """Steps (1) and (2): copy ``old_log``'s live records to the active log, then repoint
        the indexes to them. The caller removes the old log (step 3). ``ledgers``: those
        whose indexes point into it (none other can: it is sealed).

        Returns the bytes copied and whether every live record could be moved (else the
        old log must stay). A record the log does not hold (past its end, or never written:
        zeros -- a power cut took it) is dropped from the index as missing here, as at
        open. A record that is there but is not the entry the index names is corruption:
        it stays where it is, and so does the log, for repair or inspection.
        """
        moved: list[tuple[int, np.ndarray, np.ndarray, int, np.ndarray]] = []
        copied = 0
        complete = True
        pacer = Pacer()
        for ledger_id in ledgers:
            await pacer.tick()
            idx = self._index(ledger_id)
            if idx is None:
                continue  # deleted while an earlier step yielded
            found, live_bytes = [], 0
            for held_ids, rows in idx.held():
                here = rows["log_id"] == old_log
                found.append(held_ids[here])
                live_bytes += int(rows["length"][here].sum(dtype=np.int64))
            ids = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
            steps = live_bytes // COMPACTION_STEP_BYTES + 1
            for chunk in np.array_split(ids, steps):
                idx = self._index(ledger_id)
                if idx is None or not chunk.size:
                    continue
                # Re-read after every yield: an add may have changed the records.
                rows = idx.read_at(chunk).copy()
                keep = (rows["log_id"] == old_log) & (rows["length"] > 0)
                chunk, rows = chunk[keep], rows[keep]
                if not chunk.size:
                    continue
                parts, chunk, rows, intact = self._read_live(old_log, ledger_id, idx, chunk, rows)
                complete = complete and intact
                if not chunk.size:
                    continue
                # Step (1): the copies. No index points at them yet.
                blob = b"".join(parts)
                new_log, base = self._entry_logs.append(ledger_id, blob)
                lengths = rows["length"].astype(np.int64)
                new_offsets = (np.cumsum(lengths) - lengths + base).astype(np.uint64)
                moved.append((ledger_id, chunk, rows["offset"].copy(), new_log, new_offsets))
                copied += len(blob)
                await trio.sleep(0)  # let requests in between steps
        # The copies must be durable before any index points at them.
        await self._entry_logs.flush()
        # Step (2): the indexes point at the copies, made durable by the checkpoint below.
        await self._repoint(old_log, moved, pacer)
        await self._checkpoint()
        self._counters.compacted_bytes += copied
        return copied, complete
