"""BP-14's per-ledger sync cursor (which entries a bookie has fsynced) and the tracker that
keeps a bookie's cursors moving with the journal's group commits.

``last_add_synced`` is the highest entry id such that every entry up to it is synced
here (or confirmed in the ensemble: a piggybacked LAC also advances it). Entries synced
out of order wait in ``ranges`` until the gap before them closes.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable, Sequence

import trio

from bkframe.core.interfaces.journal import Journal, JournalWriteError


class SyncCursor:
    __slots__ = ("_ranges", "last_add_synced")

    def __init__(self, last_add_synced: int = -1) -> None:
        self.last_add_synced = last_add_synced
        #: Disjoint, sorted, non-adjacent [first, last] ranges above last_add_synced + 1.
        self._ranges: list[list[int]] = []

    @property
    def ranges(self) -> list[tuple[int, int]]:
        return [(a, b) for a, b in self._ranges]

    def synced(self, entry_ids: Iterable[int]) -> None:
        """Record that these entries are now fsynced on this bookie."""
        for entry_id in sorted(entry_ids):
            if entry_id <= self.last_add_synced:
                continue
            self._insert(entry_id, entry_id)
        self._collapse()

    def confirmed(self, lac: int) -> None:
        """A LAC from the writer: every entry up to it is confirmed in the ensemble."""
        if lac > self.last_add_synced:
            self.last_add_synced = lac
            self._collapse()

    def _insert(self, first: int, last: int) -> None:
        ranges = self._ranges
        i = bisect.bisect_left(ranges, [first, first])
        # Merge with the range before if it touches.
        if i > 0 and ranges[i - 1][1] >= first - 1:
            i -= 1
            ranges[i][1] = max(ranges[i][1], last)
        else:
            ranges.insert(i, [first, last])
        # Swallow the ranges after that now touch.
        while i + 1 < len(ranges) and ranges[i + 1][0] <= ranges[i][1] + 1:
            ranges[i][1] = max(ranges[i][1], ranges[i + 1][1])
            del ranges[i + 1]

    def _collapse(self) -> None:
        ranges = self._ranges
        while ranges and ranges[0][0] <= self.last_add_synced + 1:
            self.last_add_synced = max(self.last_add_synced, ranges[0][1])
            del ranges[0]


class SyncTracker:
    """BP-14 on one bookie: a :class:`SyncCursor` per ledger whose adds are acknowledged
    before their fsync, moved forward as the journal's group commits land.

    :param on_write_failed: told about a journal write that failed (the bookie turns
        read-only on a full disk); the entries of a lost record stay unsynced here.
    """

    def __init__(self, journal: Journal, on_write_failed: Callable[[BaseException], None]) -> None:
        self._journal = journal
        self._on_write_failed = on_write_failed
        self._cursors: dict[int, SyncCursor] = {}
        #: Journal records not yet known durable: (sequence, ledger id, entry ids).
        self._unsynced: deque[tuple[int, int, Sequence[int]]] = deque()
        self._unsynced_added = trio.Event()
        #: Each tracked ledger's last journal record.
        self._last_seq: dict[int, int] = {}

    def cursor(self, ledger_id: int) -> SyncCursor | None:
        return self._cursors.get(ledger_id)

    def start(self, ledger_id: int, last_add_synced: int) -> SyncCursor:
        """Track a ledger from its first add in this run (what it held before is durable)."""
        cursor = self._cursors[ledger_id] = SyncCursor(last_add_synced)
        return cursor

    def journaled(self, ledger_id: int, cursor: SyncCursor, seq: int, entry_ids: Sequence[int], lac: int) -> None:
        """Entries of a tracked ledger went into journal record ``seq`` with the writer's ``lac``."""
        cursor.confirmed(lac)
        self._last_seq[ledger_id] = seq
        self._unsynced.append((seq, ledger_id, entry_ids))
        self._unsynced_added.set()

    def last_seq(self, ledger_id: int) -> int:
        """The ledger's last journal record (0: none in this run)."""
        return self._last_seq.get(ledger_id, 0)

    def forget(self, ledger_id: int) -> None:
        self._cursors.pop(ledger_id, None)
        self._last_seq.pop(ledger_id, None)

    def last_add_synced(self, ledger_id: int) -> int:
        """BP-14 LastAddSynced of a ledger acknowledged before fsync (-1 for others)."""
        self._apply_durable()
        cursor = self._cursors.get(ledger_id)
        return cursor.last_add_synced if cursor is not None else -1

    def _apply_durable(self) -> None:
        """Move sync cursors over every journal record the journal has made durable."""
        journal = self._journal
        durable = journal.durable_seq
        unsynced = self._unsynced
        while unsynced and unsynced[0][0] <= durable:
            seq, ledger_id, entry_ids = unsynced.popleft()
            if journal.is_lost(seq):
                continue  # never written: those entries stay unsynced here
            cursor = self._cursors.get(ledger_id)
            if cursor is not None:
                cursor.synced(entry_ids)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep sync cursors current as group commits land (cheap: one wait per group)."""
        task_status.started()
        while True:
            if not self._unsynced:
                await self._unsynced_added.wait()
                self._unsynced_added = trio.Event()
                continue
            try:
                # Only watching: VD records are acknowledged already, nobody waits on them.
                await self._journal.wait_durable(self._unsynced[0][0], hurry=False)
            except JournalWriteError as e:
                self._on_write_failed(e)
            self._apply_durable()
