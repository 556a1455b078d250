"""Reading a named log: ranges of positions, consistent snapshots, tailing across segments.

A reader never returns an entry beyond what is confirmed: a closed segment up to its last
entry, an open one up to its LAC. The *end* of a log is a prefix: it stops in the first
segment the log record does not show closed (a rolled-over segment is closed moments after
its successor starts), so everything before the end stays readable and nothing before it
can appear later; a reader moves to the next segment only once the record shows the
previous one closed (see :attr:`bkframe.client.logs.model.Segment.last_sent` for why). A
Spark batch or micro-batch that reads up to the end therefore never skips an entry.

Tailing reads what is confirmed, then waits: a long poll on the open segment's bookies
(READ_LAC with LONG_POLL), starting short after progress and doubling up to
``poll_timeout_s`` while the log is quiet; a poll that brings nothing re-reads the
segment's and the log's metadata, which is how a reader learns that a segment closed
and which segment comes next.

A closed segment offloaded to a tier (it carries an
:class:`~bkframe.tiering.offload_record.Offload`) is read from its object instead of
its ledger, with the same positions: :mod:`bkframe.tiering.reads`, which falls
back to the bookies when the tier fails and the ledger is still there.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, cast

import anyio

from bkframe.client.logs import columns, compacted
from bkframe.client.logs.envelope import FORMAT_RAW, BadRecordError, decode, timestamp_of
from bkframe.client.logs.model import (
    EARLIEST,
    LATEST,
    LogEntry,
    LogMetadata,
    Position,
    Segment,
    SegmentRange,
    Where,
    epoch_ms,
)
from bkframe.client.logs.records import LogRecords
from bkframe.client.read_handle import Entry, EntryBlock, ReadHandle
from bkframe.compaction.table import latest_batches, latest_entries
from bkframe.errors import NoSuchEntryError, NoSuchLedgerError, NoSuchLogError, PositionTrimmedError
from bkframe.tiering.reads import Fallback, TierReads

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

#: Entries read per request batch.
CHUNK = 1000
#: The first wait of a caught-up tail after progress; doubles up to ``poll_timeout_s``.
FIRST_WAIT_S = 0.05
#: Read handles a reader keeps (closed segments' are dropped first beyond this).
MAX_HANDLES = 64


class _Replaced(Exception):
    """The segment's ledger was replaced by a compacted one: read that instead (it holds the
    same positions, less the records compaction dropped)."""

    def __init__(self, segment: Segment) -> None:
        self.segment = segment


class _SegmentGone(Exception):
    """The segment left the log, not by a trim (an empty segment dropped): skip it."""


class LogReader:
    """Made by :meth:`Logs.reader`. Holds no resources; make as many as you like."""

    name: str
    tier_reads: TierReads
    metadata: LogMetadata

    def __init__(self, records: LogRecords, record: LogMetadata, password: bytes) -> None:
        self._records = records
        self._client = records.ledgers
        self.name = record.name
        self.metadata = record
        self._password = password
        self._handles: dict[int, ReadHandle] = {}
        #: Compacted segments' indexes, by ledger id.
        self._indexes: dict[int, compacted.I64] = {}
        #: Offloaded segments' reads (objects in tiers, the client's open tiers).
        self.tier_reads = TierReads(records.ledgers.context.tiers, record.name)

    async def refresh(self) -> LogMetadata:
        record = await self._records.read(self.name)
        if record.uid != self.metadata.uid:
            raise NoSuchLogError(self.name, f"log {self.name!r} was deleted (and made again); open a new reader")
        self.metadata = record
        return record

    # -- positions -----------------------------------------------------------------------

    async def resolve(self, where: Where) -> Position:
        """``earliest``, ``latest`` (the end: the next position to be confirmed), a
        position (checked not to be trimmed), or a time (a :class:`~datetime.datetime`:
        :meth:`position_at` it)."""
        if where == EARLIEST:
            return (await self.refresh()).start
        if where == LATEST:
            return await self.end()
        if isinstance(where, datetime):
            return await self.position_at(epoch_ms(where))
        if not isinstance(where, Position):
            raise ValueError(f"bad position {where!r}: a Position, 'earliest', 'latest' or a datetime")
        self._check_not_trimmed(where)
        return where

    async def position_at(self, timestamp: int) -> Position:
        """The first position whose record's timestamp (ms since the epoch) is at or after
        ``timestamp``; the log's end if none is yet (Kafka's ``offsetsForTimes``).

        Closed segments record the range of their timestamps, so a seek skips every segment
        (and every chunk of them) that ends earlier without reading it, and reads only the
        segment the time falls in, by bisection: about log2(entries) single-entry reads.
        Bisection assumes timestamps that do not go back within a segment -- true of publish
        times; with event times given out of order the position found has a timestamp at or
        after ``timestamp`` and one before it just ahead, not necessarily the first such. A
        raw segment (written before records had timestamps) counts as of when it closed."""
        record = await self.refresh()
        end = await self.end()
        for c in record.chunks:
            if 0 <= c.max_ts < timestamp:
                continue
            for seg in await self._records.chunk(record, c):
                found = await self._seek(seg, timestamp, end)
                if found is not None:
                    return found
        for seg in record.segments:
            if seg.number > end.segment:
                break
            found = await self._seek(seg, timestamp, end)
            if found is not None:
                return found
        return end

    async def _seek(self, seg: Segment, timestamp: int, end: Position) -> Position | None:
        """The first position of ``seg`` (before ``end``) at or after ``timestamp``, or None
        if every entry of it is earlier."""
        latest = seg.latest_ms()
        if latest is not None and latest < timestamp:
            return None
        if seg.format == FORMAT_RAW or 0 <= timestamp <= seg.min_ts:
            return Position(seg.number, 0) if seg.number < end.segment or end.entry_id > 0 else None
        if self.tier_reads.offloaded(seg):
            at = await self.tier_reads.entry_at_time(seg, timestamp)
            if not isinstance(at, Fallback):
                return Position(seg.number, at) if at is not None else None
        last = await self._confirmed_last(seg)
        if last is None:
            return None
        if seg.number == end.segment:
            last = min(last, end.entry_id - 1)
        if last < 0:
            return None
        try:
            handle = await self._handle(seg)
        except NoSuchLedgerError:
            if not seg.closed:
                raise
            return await self._seek(await self._moved_off_bookies(seg), timestamp, end)

        async def stamp(entry_id: int) -> int:
            [entry] = await handle.read(entry_id, entry_id)
            try:
                return timestamp_of(entry.payload)
            except BadRecordError as e:
                raise BadRecordError(f"log {self.name!r}: entry {seg.number}:{entry_id}: {e}") from None

        if await stamp(last) < timestamp:
            return None
        lo, hi = 0, last  # the answer is in lo..hi, and hi's timestamp is at or after it
        while lo < hi:
            mid = (lo + hi) // 2
            if await stamp(mid) < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return Position(seg.number, lo)

    def _check_not_trimmed(self, position: Position) -> None:
        if position.segment < self.metadata.first_segment:
            raise PositionTrimmedError(
                f"log {self.name!r}: position {position} was trimmed; the log now starts at {self.metadata.start}"
            )

    async def end(self) -> Position:
        """The position after the last confirmed entry of the log's confirmed prefix."""
        record = await self.refresh()
        end = Position(record.next_segment, 0)
        if record.chunks and not record.segments:
            end = Position(record.chunks[-1].last, record.chunks[-1].last_entry_id + 1)
        for seg in record.segments:
            if seg.closed:
                end = Position(seg.number, seg.last_entry_id + 1)
                continue
            # The first segment the record does not show closed ends the prefix (see tail).
            confirmed = await self._confirmed_last(seg, check_closed=True)
            if confirmed is None:
                continue  # dropped meanwhile
            end = Position(seg.number, confirmed + 1)
            break
        return end

    async def _confirmed_last(self, seg: Segment, *, check_closed: bool = False) -> int | None:
        """The segment's last confirmed entry id (None if the segment left the log)."""
        if seg.closed:
            return seg.last_entry_id
        try:
            handle = await self._handle(seg)
            if check_closed and not handle.closed:
                await handle.refresh()
            if not handle.closed:
                await handle.read_lac()
        except (_SegmentGone, NoSuchLedgerError):
            return None
        return handle.lac

    # -- reading ---------------------------------------------------------------------------

    async def snapshot(self, start: Where = EARLIEST, end: Position | None = None) -> list[SegmentRange]:
        """The confirmed entries from ``start`` up to ``end`` (exclusive; default the log's
        end now), as one range per segment: a consistent snapshot to read in parts."""
        first = await self.resolve(start)
        stop = end if end is not None else await self.end()
        out: list[SegmentRange] = []
        for seg in await self._records.segments(self.metadata, first.segment):
            if seg.number < first.segment:
                continue
            if seg.number > stop.segment:
                break
            # Segments before the end must be read to their close, not to a stale LAC.
            confirmed = await self._confirmed_last(seg, check_closed=seg.number < stop.segment)
            if confirmed is None:
                continue
            lo = first.entry_id if seg.number == first.segment else 0
            hi = confirmed if seg.number < stop.segment else min(confirmed, stop.entry_id - 1)
            if hi >= lo:
                held = seg.compacted.kept if seg.compacted is not None else seg.entries
                size = seg.length // held if seg.closed and held > 0 else 0
                out.append(SegmentRange(
                    seg.number, seg.ledger_id, lo, hi, seg.format, seg.min_ts, seg.max_ts, size, seg.offload, seg.compacted,
                    seg.last_entry_id if seg.closed else -1,
                ))
        return out

    async def advance(self, start: Where, max_entries: int, end: Position | None = None) -> Position:
        """The position ``max_entries`` confirmed entries after ``start``, or ``end`` (default
        the log's end) if there are fewer: where a bounded batch from ``start`` stops (what
        a stream's ``maxEntriesPerTrigger`` needs)."""
        if max_entries < 0:
            raise ValueError(f"max_entries must be >= 0, got {max_entries}")
        first = await self.resolve(start)
        stop = end if end is not None else await self.end()
        left = max_entries
        for part in await self.snapshot(first, stop):
            if part.entries >= left:
                return Position(part.segment, part.first + left)
            left -= part.entries
        return max(stop, first)

    async def read_segment(self, segment: int, first: int, last: int) -> list[LogEntry]:
        """Entries ``first..last`` (inclusive) of one segment; they must be confirmed."""
        seg = await self._records.segment(self.metadata, segment)
        if seg is None:
            seg = await self._records.segment(await self.refresh(), segment)
        if seg is None:
            self._check_not_trimmed(Position(segment, 0))
            raise NoSuchEntryError(f"log {self.name!r} has no segment {segment}")
        return await self._read(seg, first, last)

    async def read(
        self, start: Where = EARLIEST, end: Position | None = None, *, max_entries: int | None = None,
        compacted: bool = False,
    ) -> list[LogEntry]:
        """Confirmed entries from ``start`` up to ``end`` (exclusive; default the end now).
        ``compacted``: the range as a table -- each key's latest record (none for a key
        whose latest is a tombstone) and every record without a key, in position order
        (docs/compaction.md, "Reading the table")."""
        out: list[LogEntry] = []
        async for chunk in self.chunks(start, end, compacted=compacted):
            out.extend(chunk)
            if max_entries is not None and len(out) >= max_entries:
                return out[:max_entries]
        return out

    async def chunks(
        self, start: Where = EARLIEST, end: Position | None = None, *, compacted: bool = False
    ) -> AsyncIterator[list[LogEntry]]:
        """Like :meth:`read`, a chunk of entries at a time."""
        parts = await self.snapshot(start, end)
        if compacted:
            async for chunk in latest_entries(lambda: self._chunks_of(parts)):
                yield chunk
            return
        async for chunk in self._chunks_of(parts):
            yield chunk

    async def _chunks_of(self, parts: list[SegmentRange]) -> AsyncIterator[list[LogEntry]]:
        for part in parts:
            seg = await self._part_segment(part)
            for lo in range(part.first, part.last + 1, CHUNK):
                yield await self._read(seg, lo, min(lo + CHUNK - 1, part.last))

    async def _part_segment(self, part: SegmentRange) -> Segment:
        """The segment a snapshot's range is of (from its chunk record if it is in one)."""
        seg = await self._records.segment(self.metadata, part.segment)
        if seg is None or seg.ledger_id != part.ledger_id:
            seg = Segment(part.segment, part.ledger_id, format=part.format, compacted=part.compacted)
        return seg

    async def _handle(self, seg: Segment) -> ReadHandle:
        handle = self._handles.get(seg.ledger_id)
        if handle is None:
            try:
                handle = await self._client.open_ledger(seg.ledger_id, password=self._password, recovery=False)
            except NoSuchLedgerError:
                await self._gone(seg)
                raise
            if len(self._handles) >= MAX_HANDLES:
                for ledger_id in [i for i, h in self._handles.items() if h.closed][: MAX_HANDLES // 2]:
                    del self._handles[ledger_id]
            self._handles[seg.ledger_id] = handle
        return handle

    async def _gone(self, seg: Segment) -> None:
        """The segment's ledger is gone: say why (trimmed, or a segment without an
        acknowledged entry dropped, its number maybe given to a new segment), or raise
        :class:`_Replaced` if compaction replaced it."""
        record = await self.refresh()
        self._records.forget_chunks(record.uid)
        self._handles.pop(seg.ledger_id, None)
        self._check_not_trimmed(Position(seg.number, 0))
        now = await self._records.segment(record, seg.number)
        if now is not None and now.ledger_id != seg.ledger_id and now.compacted is not None:
            raise _Replaced(now)
        if now is None or now.ledger_id != seg.ledger_id:
            raise _SegmentGone()

    async def _read(self, seg: Segment, first: int, last: int) -> list[LogEntry]:
        if self.tier_reads.offloaded(seg):
            found = await self.tier_reads.entries(seg, first, last)
            if not isinstance(found, Fallback):
                return found
        try:
            return log_entries(self.name, seg, await self._read_raw(seg, first, last))
        except NoSuchLedgerError:
            return await self._read(await self._moved_off_bookies(seg), first, last)

    async def _moved_off_bookies(self, seg: Segment) -> Segment:
        """``seg`` as stored now, if its ledger is gone because it was offloaded and deleted
        after the deletion lag (this reader's copy of the record, or of its chunk, is older);
        reads of it then go to its object only. Re-raises the ledger's absence otherwise."""
        record = await self.refresh()
        self._records.forget_chunks(record.uid)
        now = await self._records.segment(record, seg.number)
        if now is None or now.ledger_id != seg.ledger_id or now.offload is None or now.offload.on_bookies:
            raise NoSuchLedgerError(seg.ledger_id)
        self._handles.pop(seg.ledger_id, None)
        return now

    async def read_block(self, seg: Segment, first: int, last: int) -> EntryBlock:
        """The raw entries (envelopes as stored) at positions ``first..last`` of the closed
        segment ``seg`` from the bookies, in one buffer, with their positions' entry ids (a
        compacted segment's: only those it kept). What compaction rewrites from."""
        return await self._read_block(seg, first, last)

    async def _read_raw(self, seg: Segment, first: int, last: int) -> list[Entry]:
        return (await self._read_block(seg, first, last)).entries()

    async def _read_block(self, seg: Segment, first: int, last: int) -> EntryBlock:
        """Entries ``first..last`` of the segment from its ledger, with their positions'
        entry ids (those a compacted segment kept)."""
        try:
            handle = await self._handle(seg)
            if seg.compacted is None:
                return await handle.read_block(first, last)
            return await compacted.read_positions(handle, await self._kept_ids(seg, handle), first, last)
        except (NoSuchLedgerError, NoSuchEntryError):
            try:
                await self._gone(seg)
            except _SegmentGone:
                raise NoSuchEntryError(f"log {self.name!r}: segment {seg.number} holds no entries") from None
            except _Replaced as replaced:
                return await self._read_block(replaced.segment, first, last)
            raise

    async def _kept_ids(self, seg: Segment, handle: ReadHandle) -> compacted.I64:
        """The positions a compacted segment kept (its index, read once per ledger)."""
        assert seg.compacted is not None
        ids = self._indexes.get(seg.ledger_id)
        if ids is None:
            ids = await compacted.read_index(handle, seg.compacted.kept, seg.compacted.index_entries)
            if len(self._indexes) >= MAX_HANDLES:
                del self._indexes[next(iter(self._indexes))]
            self._indexes[seg.ledger_id] = ids
        return ids

    # -- as Arrow ----------------------------------------------------------------------------

    async def arrow_batches(
        self, start: Where = EARLIEST, end: Position | None = None, *, compacted: bool = False
    ) -> AsyncIterator[pa.RecordBatch]:
        """The confirmed records from ``start`` up to ``end`` (exclusive; default the end
        now) as Arrow record batches of the columns of :mod:`bkframe.client.logs.columns`,
        a read chunk at a time (``compacted``: as a table, see :meth:`read`). Needs pyarrow
        (``bkframe[arrow]``)."""
        parts = await self.snapshot(start, end)
        if compacted:
            async for batch in latest_batches(lambda: self._batches_of(parts)):
                yield batch
            return
        async for batch in self._batches_of(parts):
            yield batch

    async def _batches_of(self, parts: list[SegmentRange]) -> AsyncIterator[pa.RecordBatch]:
        for part in parts:
            seg = await self._part_segment(part)
            for lo in range(part.first, part.last + 1, CHUNK):
                if self.tier_reads.offloaded(seg):
                    found = await self.tier_reads.batches(seg, lo, min(lo + CHUNK - 1, part.last))
                    if not isinstance(found, Fallback):
                        for batch in found:
                            yield batch
                        continue
                try:
                    block = await self._read_block(seg, lo, min(lo + CHUNK - 1, part.last))
                except NoSuchLedgerError:
                    seg = await self._moved_off_bookies(seg)
                    moved = await self.tier_reads.batches(seg, lo, min(lo + CHUNK - 1, part.last))
                    assert not isinstance(moved, Fallback)  # off the bookies: the object or an error
                    for batch in moved:
                        yield batch
                    continue
                yield columns.segment_batch(self.name, part.segment, part.ledger_id, block, enveloped=part.enveloped)

    async def to_arrow(self, start: Where = EARLIEST, end: Position | None = None, *, compacted: bool = False) -> pa.Table:
        """An exact, repeatable snapshot of the log as one Arrow table: the confirmed records
        from ``start`` up to ``end`` (exclusive; default: the end now). The table's schema
        metadata says which range it holds (``bkframe.log``, ``bkframe.start``,
        ``bkframe.end``): reading that range again gives the same rows, however the log grew.
        DuckDB, Polars and pandas read it as it is (docs/logs.md#arrow). ``compacted``: the
        range as a table (see :meth:`read`; the metadata says ``bkframe.compacted``)."""
        pa_module = columns.pyarrow()
        first = await self.resolve(start)
        stop = end if end is not None else await self.end()
        batches = [b async for b in self.arrow_batches(first, stop, compacted=compacted)] if stop > first else []
        metadata = {"bkframe.log": self.name, "bkframe.start": str(first), "bkframe.end": str(max(stop, first))}
        if compacted:
            metadata["bkframe.compacted"] = "true"
        table: pa.Table = pa_module.Table.from_batches(batches, schema=columns.schema().with_metadata(metadata))
        return table

    async def dataset(self, start: Where = EARLIEST, end: Position | None = None, *, compacted: bool = False) -> ds.Dataset:
        """The snapshot :meth:`to_arrow` gives, as one ``pyarrow.dataset.Dataset`` that DuckDB
        and Polars scan: offloaded segments in a ``file://`` tier as Parquet fragments of
        their objects (read by the engine itself, row groups skipped by statistics), the rest
        read now into memory (:mod:`bkframe.tiering.snapshot`). ``compacted``: the table
        (see :meth:`read`), read now into memory. Needs pyarrow."""
        from bkframe.tiering.snapshot import log_dataset

        if compacted:
            import pyarrow.dataset as pds

            return pds.dataset(await self.to_arrow(start, end, compacted=True))
        first = await self.resolve(start)
        return await log_dataset(self, first, end if end is not None else await self.end())

    async def _at_or_after(self, number: int) -> Segment | None:
        record = self.metadata
        for c in record.chunks:  # a reader far behind reads the chunk it is in (cached)
            if c.last >= number:
                found = next((s for s in await self._records.chunk(record, c) if s.number >= number), None)
                if found is not None:
                    return found
        return record.segment_at_or_after(number)

    # -- tailing ---------------------------------------------------------------------------

    async def tail(
        self, start: Where = EARLIEST, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> AsyncIterator[LogEntry]:
        """Yield every confirmed entry from ``start`` on, in order, across segments, waiting
        for new ones; it ends when cancelled, or (with ``idle_timeout_s``) once no entry came
        for that long -- as the blocking reader's ``tail`` -- and raises if the log is deleted."""
        async for chunk in self.tail_chunks(start, poll_timeout_s=poll_timeout_s, idle_timeout_s=idle_timeout_s):
            for entry in chunk:
                yield entry

    async def tail_chunks(
        self, start: Where = EARLIEST, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> AsyncIterator[list[LogEntry]]:
        """:meth:`tail`, a chunk of entries at a time.

        One loop on purpose: the tail is a small state machine over (position, wait), each
        branch moving one or the other; read together they show that every way round either
        yields, advances or waits.
        """
        if idle_timeout_s is not None:
            chunks = cast(AsyncGenerator[list[LogEntry], None], self.tail_chunks(start, poll_timeout_s=poll_timeout_s))
            while True:
                got: list[LogEntry] | None = None
                with anyio.move_on_after(idle_timeout_s):  # never around a yield: the caller's code runs there
                    try:
                        got = await chunks.__anext__()
                    except StopAsyncIteration:
                        return
                if got is None:  # idle for idle_timeout_s: the tail ends
                    await chunks.aclose()
                    return
                yield got
        pos = await self.resolve(start)
        wait = FIRST_WAIT_S
        while True:
            self._check_not_trimmed(pos)
            seg = await self._at_or_after(pos.segment)
            if seg is None:
                # Nothing after the last segment yet: wait for the writer's next one.
                await anyio.sleep(wait)
                wait = min(wait * 2, poll_timeout_s)
                await self.refresh()
                continue
            if seg.number > pos.segment:
                pos = Position(seg.number, 0)
            if self.tier_reads.offloaded(seg):  # closed, in a tier: no ledger to open
                if pos.entry_id <= seg.last_entry_id:
                    last = min(seg.last_entry_id, pos.entry_id + CHUNK - 1)
                    yield await self._read(seg, pos.entry_id, last)
                    pos = Position(seg.number, last + 1)
                    wait = FIRST_WAIT_S
                else:
                    pos = Position(seg.number + 1, 0)
                continue
            try:
                handle = await self._handle(seg)
            except _SegmentGone:
                continue
            except NoSuchLedgerError:
                if not seg.closed:
                    raise
                await self._moved_off_bookies(seg)  # offloaded, then deleted: the record read again says so
                continue
            if pos.entry_id <= handle.lac:
                last = min(handle.lac, pos.entry_id + CHUNK - 1)
                try:
                    chunk = await self._read(seg, pos.entry_id, last)
                except NoSuchEntryError:
                    await self._gone(seg)  # trimmed: raises; else a real read failure
                    raise
                yield chunk
                pos = Position(seg.number, last + 1)
                wait = FIRST_WAIT_S
                continue
            if handle.closed:
                if seg.closed:
                    self._handles.pop(seg.ledger_id, None)
                    pos = Position(seg.number + 1, 0)
                    continue
                # The ledger is closed; the log record says so a moment later (or, if the
                # writer died, once the next writer opens the log). Only then is the next
                # segment part of the log for sure: a writer that died with entries of this
                # segment in flight leaves its next segment to be dropped.
                await anyio.sleep(wait)
                wait = min(wait * 2, poll_timeout_s)
                await self.refresh()
                continue
            # Caught up with an open segment: long-poll its LAC. A busy log answers at
            # once; a poll that brings nothing checks whether the segment closed (a
            # rollover's close comes moments after the switch) and waits longer next time.
            before = handle.lac
            await handle.wait_for_lac(before, timeout_s=wait)
            if handle.lac != before:
                wait = FIRST_WAIT_S
                continue
            try:
                await handle.refresh()
            except NoSuchLedgerError:
                try:
                    await self._gone(seg)
                except _SegmentGone:
                    continue
                raise
            if not handle.closed:
                await self.refresh()
                wait = min(wait * 2, poll_timeout_s)


def log_entries(log: str, seg: Segment, entries: Sequence[Entry]) -> list[LogEntry]:
    """The log entries of ``seg`` read as ledger ``entries``: envelopes decoded."""
    number, ledger_id = seg.number, seg.ledger_id
    if seg.format == FORMAT_RAW:
        return [LogEntry(Position(number, e.entry_id), ledger_id, e.payload) for e in entries]
    out = []
    for e in entries:
        try:
            payload, key, timestamp, properties, event_time = decode(e.payload)
        except BadRecordError as error:
            raise BadRecordError(f"log {log!r}: entry {number}:{e.entry_id}: {error}") from None
        out.append(LogEntry(Position(number, e.entry_id), ledger_id, payload, key, timestamp, properties, event_time))
    return out


async def count_entries(reader: LogReader, start: Position) -> int:
    """Confirmed entries from ``start`` to the end (a cursor's lag)."""
    return sum(r.entries for r in await reader.snapshot(start))
