"""BP-14's per-ledger sync cursor: which entries a bookie has fsynced.

``last_add_synced`` is the highest entry id such that every entry up to it is synced
here (or confirmed in the ensemble: a piggybacked LAC also advances it). Entries synced
out of order wait in ``ranges`` until the gap before them closes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable


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
