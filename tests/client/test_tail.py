"""A tailing reader yields every entry once, in order, whatever moves the LAC under it."""

from __future__ import annotations

from typing import Any

import attrs

from bkframe import Entry, EntryBlock, LedgerMetadata, LedgerStateName, ReadHandle
from bkframe.testing.backends import on_both_backends


class EndMovesWhileReading(ReadHandle):
    """A handle on a ledger confirmed up to 1499, closed at 2999 by the time its first range
    is read: as when a read retried after an ensemble change refreshes the metadata (found
    by tests/partitions: a tail that ended 4,500 entries early). Only the reads are faked."""

    def __init__(self) -> None:
        metadata = LedgerMetadata(7, 3, 3, 2, ((0, ("a", "b", "c")),))
        super().__init__(ctx=None, metadata=metadata, master_key=b"", digester=None)  # type: ignore[arg-type]
        self._lac = 1499
        self.ranges: list[tuple[int, int]] = []

    async def _read_range(self, first: int, last: int) -> EntryBlock:
        self.ranges.append((first, last))
        if not self.metadata.closed:
            self.metadata = attrs.evolve(self.metadata, state=LedgerStateName.CLOSED, last_entry_id=2999)
            self._lac = 2999
        return EntryBlock.of(self.ledger_id, [Entry(self.ledger_id, e, b"%d" % e) for e in range(first, last + 1)])

    async def wait_for_lac(self, previous: int, *, timeout_s: float = 1.0) -> int:
        raise AssertionError("a closed ledger needs no long poll")

    async def refresh(self, *args: Any) -> LedgerMetadata:
        return self.metadata


@on_both_backends
async def test_a_tail_reads_past_an_end_that_moved_while_it_read() -> None:
    handle = EndMovesWhileReading()
    seen = [entry.entry_id async for entry in handle.tail(0)]
    assert seen == list(range(3000))
    assert handle.ranges == [(0, 999), (1000, 1499), (1500, 2499), (2500, 2999)]
