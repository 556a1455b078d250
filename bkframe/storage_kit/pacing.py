"""Long loops on the event loop that let it breathe: yield once a time slice is used up.

A step over every ledger (garbage collection's scan, compaction, a load) that runs without
awaiting holds every request of the bookie behind it. :class:`Pacer` turns such a loop into
slices of at most ``slice_s`` seconds (plus one item's work), with a
``trio.lowlevel.checkpoint`` in between, which returns at once when nothing else waits.
"""

from __future__ import annotations

import time

import trio

#: Default slice: well under the 50 ms a step may hold the event loop.
DEFAULT_SLICE_S = 0.01


class Pacer:
    def __init__(self, slice_s: float = DEFAULT_SLICE_S) -> None:
        self.slice_s = slice_s
        self._since = time.perf_counter()
        #: Times the loop yielded (for tests).
        self.yields = 0

    async def tick(self) -> None:
        """Call once per item: yields if the slice is used up."""
        if time.perf_counter() - self._since >= self.slice_s:
            await trio.lowlevel.checkpoint()
            self.yields += 1
            self._since = time.perf_counter()
