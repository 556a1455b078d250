"""The open indexes of a ``default`` storage: at most ``limit`` of them, least recently
used closed first.

Each open index costs two file descriptors (its file, and the one its mapping holds), so a
bookie holding 10^5 ledgers cannot keep them all open; BookKeeper bounds its open ledger
files the same way (``openFileLimit``). Closing an index loses nothing: its writes are in
the page cache, and the checkpoint fsyncs dirty index files by path.

Callers use an index only between two awaits: a later :meth:`IndexCache.get` may close it
(never the one just returned, nor the one before it: ``limit`` is at least 2).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from bkframe.storage_kit.open_files import open_or_evict

from .config import MIN_OPEN_INDEXES
from .ledger_index import LedgerIndex


class IndexCache:
    """:param limit: most indexes open at once.
    :param opener: opens a ledger's index, creating the file if ``create``; None if the
        ledger has no index file and ``create`` is false.
    """

    def __init__(self, limit: int, opener: Callable[[int, bool], LedgerIndex | None]) -> None:
        if limit < MIN_OPEN_INDEXES:
            raise ValueError(f"the open-index limit must be at least {MIN_OPEN_INDEXES}")
        self.limit = limit
        self._opener = opener
        self._open: OrderedDict[int, LedgerIndex] = OrderedDict()
        #: Indexes opened and closed for want of room (for metrics and tests).
        self.opened = 0
        self.evicted = 0

    def get(self, ledger_id: int, *, create: bool = False) -> LedgerIndex | None:
        """The ledger's open index, opened now if it is not (closing the least recently
        used one if the cache is full); None if it has none and ``create`` is false."""
        idx = self._open.get(ledger_id)
        if idx is not None:
            self._open.move_to_end(ledger_id)
            return idx
        while len(self._open) >= self.limit:
            self._close_oldest()
        idx = open_or_evict(
            lambda: self._opener(ledger_id, create), self.shed, f"the index of ledger {ledger_id}"
        )
        if idx is not None:
            self._open[ledger_id] = idx
            self.opened += 1
        return idx

    def discard(self, ledger_id: int) -> None:
        """Close the ledger's index if it is open."""
        idx = self._open.pop(ledger_id, None)
        if idx is not None:
            idx.close()

    def shed(self) -> int:
        """Close the least recently used half (for an open that found no file descriptor);
        return how many were closed."""
        n = (len(self._open) + 1) // 2
        for _ in range(n):
            self._close_oldest()
        return n

    def _close_oldest(self) -> None:
        _, idx = self._open.popitem(last=False)
        idx.close()
        self.evicted += 1

    def close_all(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._open
