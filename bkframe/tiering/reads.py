"""Reading a log's offloaded segments from their objects in a tier, or from the bookies.

A :class:`~bkframe.client.logs.reader.LogReader` asks this for every closed segment that
carries an :class:`~bkframe.tiering.offload_record.Offload`: entries by range, Arrow
batches by range, the first entry at a time. Each is read from the segment's object by
ranged gets (:class:`~bkframe.tiering.segment_reader.AsyncSegmentObjectReader`: the
footer once, then only the row groups a read needs), through the tier the client opened for
that URI (:class:`~bkframe.tiering.open_tiers.OpenTiers`). Positions are the same:
the object holds the segment's entry ids.

The tier holds plain data, so the password check is the client's, made against the log
record when the reader was opened (as for any read).

Nothing damaged is returned as data: the object's size is the recorded one (a short ranged
get is a truncated object), its footer's bytes must have the CRC32C the record holds
(checked before pyarrow parses them: a changed byte there can abort the process inside
pyarrow), the footer must name the very segment and the entry count and entry checksum the
record holds, and every page decoded has its checksum checked. A read that fails -- the tier
unreachable or past its deadline, the object missing or damaged, pyarrow not installed --
goes to the bookies while the segment's ledger is still there (``Offload.on_bookies``),
else fails with a :class:`~bkframe.errors.TierError` naming the log, the segment, the tier
and the key, and what to do. The failed object is not asked again for :data:`RETRY_TIER_S`
-- and not the whole tier, when the tier itself failed (unreachable, no plugin): each read
would wait out its deadline again.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Final

from bkframe.client.logs.model import LogEntry, Segment
from bkframe.errors import BKError, ConfigError, NoSuchObjectError, TierError
from bkframe.tiering.offload_record import Offload
from bkframe.tiering.open_tiers import OpenTiers

if TYPE_CHECKING:
    import pyarrow as pa

    from bkframe.tiering.footer import ObjectFooter
    from bkframe.tiering.segment_reader import AsyncSegmentObjectReader

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
        """The segment's object reader, its footer read and checked against the record; None
        to read from the bookies (the tier or the object failed lately, or now)."""
        o = seg.offload
        assert o is not None
        if time.monotonic() < max(self._failed_until.get(o.tier, 0.0), self._failed_until.get(o.key, 0.0)):
            self._skip(seg, None)
            return None
        found = self._readers.get(o.key)
        if found is None:
            try:
                from bkframe.tiering.segment_reader import AsyncSegmentObjectReader

                found = AsyncSegmentObjectReader(
                    await self._tiers.get(o.tier), o.key, size=o.size, footer_crc32c=o.footer_crc32c
                )
                _check_footer(seg, o, await found.footer())
            except (BKError, OSError, ValueError, ImportError) as e:  # no plugin, no pyarrow, a damaged footer
                self._failed(seg, e)
                return None
            if len(self._readers) >= MAX_OBJECT_READERS:
                del self._readers[next(iter(self._readers))]
            self._readers[o.key] = found
        return found

    def _failed(self, seg: Segment, error: BaseException) -> Fallback:
        o = seg.offload
        assert o is not None
        # The tier itself failed (unreachable, timed out, no plugin or SDK): skip all of it;
        # else this object (missing, damaged): the tier's other objects are still read.
        whole_tier = isinstance(error, ImportError | ConfigError) or (
            isinstance(error, TierError) and not isinstance(error, NoSuchObjectError)
        )
        self._failed_until[o.tier if whole_tier else o.key] = time.monotonic() + RETRY_TIER_S
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
                f"log {self._log!r}: segment {seg.number} is only in tier {o.tier}, object {o.key!r}, its ledger "
                f"deleted from the bookies, and reading the object failed{why}. If the tier is unreachable, read "
                f"again once it is back; if the object is missing or damaged, restore it from a backup of the tier "
                f"('bkframe tier check --tier {o.tier}' lists every such object)"
            ) from error
        self.fallbacks += 1


def _check_footer(seg: Segment, o: Offload, footer: ObjectFooter) -> None:
    """The object's footer names the segment and holds the entries its record says: a
    changed footer value (or another object under the key) is found before any row is read."""
    from bkframe.tiering.object_format import CorruptObjectError

    c = footer.content
    expected = (seg.number, seg.ledger_id, 0, seg.last_entry_id, o.entries, o.checksum)
    found = (c.segment, c.ledger_id, c.first_entry_id, c.last_entry_id, c.entries, c.checksum)
    if found != expected:
        raise CorruptObjectError(
            f"tier object {o.key!r}: its footer says segment {c.segment} (ledger {c.ledger_id}), entries "
            f"{c.first_entry_id}..{c.last_entry_id} ({c.entries}), checksum {c.checksum}; the log's record says "
            f"segment {seg.number} (ledger {seg.ledger_id}), entries 0..{seg.last_entry_id} ({o.entries}), "
            f"checksum {o.checksum}"
        )
