"""Reading a log's offloaded segments from their objects in a tier, or from the bookies.

A :class:`~bkframe.client.logs.reader.LogReader` asks this for every closed segment that
carries an :class:`~bkframe.client.logs.offload_record.Offload`: entries by range, Arrow
batches by range, the first entry at a time. Each is read from the segment's object by
ranged gets (:class:`~bkframe.client.tiering.segment_reader.AsyncSegmentObjectReader`: the
footer once, then only the row groups a read needs), through the tier the client opened for
that URI (:class:`~bkframe.client.tiering.open_tiers.OpenTiers`). Positions are the same:
the object holds the segment's entry ids.

The tier holds plain data, so the password check is the client's, made against the log
record when the reader was opened (as for any read). A tier that fails -- unreachable, the
object gone or corrupt, pyarrow not installed -- is not asked again for
:data:`RETRY_TIER_S`; meanwhile reads go to the bookies while the segment's ledger is still
there (``Offload.on_bookies``), else fail with a :class:`~bkframe.errors.TierError` naming
the tier and the key.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

from bkframe.client.logs.model import LogEntry, Segment
from bkframe.client.tiering.open_tiers import OpenTiers
from bkframe.errors import BKError, TierError

if TYPE_CHECKING:
    import pyarrow as pa

    from bkframe.client.tiering.segment_reader import AsyncSegmentObjectReader

log = logging.getLogger("bkframe.logs")

#: After a tier failed, reads skip it (to the bookies) this long before trying it again.
RETRY_TIER_S = 30.0
#: Object readers (each keeps its footer and last row group) kept per log reader.
MAX_OBJECT_READERS = 16


class Fallback:
    """Read this from the bookies."""


FALLBACK: Final = Fallback()


class TierReads:
    """One log reader's reads of offloaded segments."""

    def __init__(self, tiers: OpenTiers, log_name: str) -> None:
        self._tiers = tiers
        self._log = log_name
        self._readers: dict[str, AsyncSegmentObjectReader] = {}
        self._failed_until: dict[str, float] = {}
        #: Reads answered from objects, and those that fell back to the bookies.
        self.object_reads = 0
        self.fallbacks = 0

    def offloaded(self, seg: Segment) -> bool:
        return seg.closed and seg.offload is not None

    async def entries(self, seg: Segment, first: int, last: int) -> list[LogEntry] | Fallback:
        reader = await self._reader(seg)
        if reader is None:
            return FALLBACK
        try:
            found = await reader.entries(first, last)
        except (BKError, OSError, ValueError) as e:
            return self._failed(seg, e)
        self.object_reads += 1
        return found

    async def batches(self, seg: Segment, first: int, last: int) -> list[pa.RecordBatch] | Fallback:
        reader = await self._reader(seg)
        if reader is None:
            return FALLBACK
        try:
            found = [b async for b in reader.batches(first, last)]
        except (BKError, OSError, ValueError) as e:
            return self._failed(seg, e)
        self.object_reads += 1
        return found

    async def entry_at_time(self, seg: Segment, timestamp: int) -> int | Fallback | None:
        reader = await self._reader(seg)
        if reader is None:
            return FALLBACK
        try:
            found = await reader.entry_at_time(timestamp)
        except (BKError, OSError, ValueError) as e:
            return self._failed(seg, e)
        self.object_reads += 1
        return found

    async def _reader(self, seg: Segment) -> AsyncSegmentObjectReader | None:
        """The segment's object reader; None to read from the bookies (the tier failed lately)."""
        o = seg.offload
        assert o is not None
        if time.monotonic() < self._failed_until.get(o.tier, 0.0):
            self._skip(seg, None)
            return None
        found = self._readers.get(o.key)
        if found is None:
            try:
                from bkframe.client.tiering.segment_reader import AsyncSegmentObjectReader

                found = AsyncSegmentObjectReader(await self._tiers.get(o.tier), o.key, size=o.size)
            except (BKError, ImportError) as e:  # no plugin for the scheme, no pyarrow
                self._failed(seg, e)
                return None
            if len(self._readers) >= MAX_OBJECT_READERS:
                del self._readers[next(iter(self._readers))]
            self._readers[o.key] = found
        return found

    def _failed(self, seg: Segment, error: BaseException) -> Fallback:
        o = seg.offload
        assert o is not None
        self._failed_until[o.tier] = time.monotonic() + RETRY_TIER_S
        self._readers.pop(o.key, None)
        self._skip(seg, error)
        log.warning(
            "log %r: reading segment %d from tier %s (object %r) failed, reading the bookies for %g s: %s",
            self._log, seg.number, o.tier, o.key, RETRY_TIER_S, error,
        )
        return FALLBACK

    def _skip(self, seg: Segment, error: BaseException | None) -> None:
        """Reading the bookies instead: only while the segment's ledger is there."""
        o = seg.offload
        assert o is not None
        if not o.on_bookies:
            why = f": {error}" if error is not None else f" (it failed less than {RETRY_TIER_S:g} s ago)"
            raise TierError(
                f"log {self._log!r}: segment {seg.number} is only in tier {o.tier}, object {o.key!r}, "
                f"and reading it failed{why}"
            ) from error
        self.fallbacks += 1
