"""Ledger ids in blocks: a client takes ids from the store a range at a time.

One counter shared by every client of a cluster is a hot key: each create would update it
(a round trip, and a conflict with every other client's create). As BookKeeper's id ranges
do, a client takes a block of consecutive ids in one round trip
(:meth:`~bkframe.core.interfaces.metadata_store.MetadataStore.new_ledger_ids`) and hands them out itself.
Blocks grow from 1 id to ``block`` ids, doubling: a command that creates one ledger takes
one id (ids stay small and dense for scripts), a busy writer reaches full blocks after a
few creates. Ids a client took and did not use are skipped for good: ids are unique,
not dense.
"""

from __future__ import annotations

import anyio

from bkframe.core.interfaces.metadata_store import MetadataStore


class LedgerIds:
    """``await ids.next()``: a ledger id no client of the store was given before."""

    def __init__(self, store: MetadataStore, block: int, *, first_block: int = 1) -> None:
        """``first_block``: the size of the first block (a bulk loader takes full ones at once)."""
        if not 1 <= first_block <= block:
            raise ValueError(f"ledger id blocks hold 1 to block ids; got first_block={first_block}, block={block}")
        self._store = store
        self.block = block
        self._next_size = first_block
        self._ids: range = range(0)
        self._lock = anyio.Lock()

    async def next(self) -> int:
        async with self._lock:  # concurrent creates share one refill
            if not self._ids:
                self._ids = await self._store.new_ledger_ids(self._next_size)
                self._next_size = min(self._next_size * 2, self.block)
            ledger_id = self._ids[0]
            self._ids = self._ids[1:]
            return ledger_id
