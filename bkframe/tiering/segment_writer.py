"""A closed segment written as a Parquet object (:mod:`~bkframe.tiering.object_format`)
and put in a tier.

The segment's ledger is read in bounded ranges through its read handle (replica failover
and digest checks as for any read), one range ahead of the writing, so that at most a few
read chunks and one row group are in memory however large the segment. Each range becomes
an Arrow batch with the connector's own code (:func:`bkframe.client.logs.columns.block_batch`)
and feeds the entry checksum; batches gather into a row group until it holds
:attr:`~bkframe.tiering.object_format.ObjectOptions.row_group_bytes` of entries
(a batch is cut at the boundary). The file is written to a local spool file (pyarrow's
``ParquetWriter``, in a worker thread: nothing heavier than a channel send runs on the event
loop), then put in the tier under the segment's key with ``if_absent``; the spool file is
removed whatever happens.

An object already under the key is an earlier offload that died before recording it: it is
**adopted** if it verifies against this ledger read (every entry, count and checksum) --
so an offload retried after a crash at any step converges on one object -- and refused with
:class:`~bkframe.tiering.object_format.CorruptObjectError` otherwise (the caller
deletes it and writes again).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path

import anyio
import attrs
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from bkframe.client.logs import columns, compacted
from bkframe.client.logs.model import Segment
from bkframe.client.read_handle import EntryBlock, ReadHandle
from bkframe.errors import BKError, ObjectExistsError
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.footer import footer_start
from bkframe.tiering.keys import segment_key
from bkframe.tiering.object_format import (
    FLAGS,
    EntryChecksum,
    ObjectOptions,
    ObjectSummary,
    SegmentContent,
    flags_column,
    object_schema,
)
from bkframe.tiering.verify import verify_object

#: A ledger read's size: entries, and bytes when the entry size is known.
READ_ENTRIES = 2000
READ_BYTES = 8 << 20
_CRC_CHUNK = 8 << 20


class SegmentNotClosedError(BKError):
    """Only a closed segment (its ledger closed too) can become an object."""


async def write_segment_object(
    handle: ReadHandle,
    tier: AsyncTier,
    *,
    log: str,
    log_uid: str,
    segment: Segment,
    spool_dir: Path,
    options: ObjectOptions | None = None,
) -> ObjectSummary:
    """Write closed segment ``segment`` of log ``log`` (uid ``log_uid``), read through
    ``handle`` (its ledger's, opened with the log's password), as an object in ``tier``;
    the spool file goes in ``spool_dir``. Returns what was put (or adopted: see above)."""
    options = options or ObjectOptions()
    last = segment.last_entry_id
    if not segment.closed or not handle.closed or last < 0:
        raise SegmentNotClosedError(
            f"log {log!r}: segment {segment.number} (ledger {segment.ledger_id}) is not closed, or empty: "
            "only a closed segment with entries is written to a tier"
        )
    # A compacted segment's ledger holds its kept records, then their index.
    c = segment.compacted
    ledger_last = last if c is None else c.kept + c.index_entries - 1
    if handle.ledger_id != segment.ledger_id or handle.lac != ledger_last:
        raise SegmentNotClosedError(
            f"log {log!r}: segment {segment.number} ends at entry {ledger_last} of its ledger, its ledger "
            f"{handle.ledger_id} at {handle.lac}"
        )
    key = segment_key(log_uid, segment.number, segment.ledger_id)
    fd, name = tempfile.mkstemp(dir=spool_dir, prefix=f"{segment.number}-{segment.ledger_id}-", suffix=".parquet")
    spool = Path(name)
    os.close(fd)  # pyarrow writes the file by its name
    try:
        builder = await anyio.to_thread.run_sync(_Builder, spool, log, log_uid, segment, options)
        try:
            await _copy_ledger(handle, segment, builder)
            content = await anyio.to_thread.run_sync(builder.finish)
        finally:
            builder.close()
        # End to end: the ledger's own count (a compacted one's records: the segment's length).
        held = handle.metadata.length if c is None else segment.length
        if content.entry_bytes != held:
            raise BKError(f"ledger {segment.ledger_id} holds {held} bytes of records; {content.entry_bytes} were read")
        return await _put(tier, key, spool, builder.row_groups, content)
    finally:
        spool.unlink(missing_ok=True)


async def write_kept_object(
    blocks: AsyncIterator[EntryBlock],
    tier: AsyncTier,
    *,
    log: str,
    log_uid: str,
    segment: Segment,
    rows: int,
    generation: int,
    spool_dir: Path,
    options: ObjectOptions | None = None,
) -> ObjectSummary:
    """An object of the ``rows`` records ``blocks`` gives (ascending positions of closed
    segment ``segment``, with gaps: what compaction kept of its object), under the key of
    compaction generation ``generation`` (docs/compaction.md). Put only if absent; an object
    already there is adopted if it holds the same records."""
    options = options or ObjectOptions()
    key = segment_key(log_uid, segment.number, segment.ledger_id, generation)
    fd, name = tempfile.mkstemp(dir=spool_dir, prefix=f"{segment.number}-{segment.ledger_id}-c", suffix=".parquet")
    spool = Path(name)
    os.close(fd)
    try:
        builder = await anyio.to_thread.run_sync(partial(_Builder, spool, log, log_uid, segment, options, rows=rows))
        try:
            async for block in blocks:
                await anyio.to_thread.run_sync(builder.add, block)
            content = await anyio.to_thread.run_sync(builder.finish)
        finally:
            builder.close()
        return await _put(tier, key, spool, builder.row_groups, content)
    finally:
        spool.unlink(missing_ok=True)


async def _put(tier: AsyncTier, key: str, spool: Path, row_groups: int, content: SegmentContent) -> ObjectSummary:
    """Put the finished ``spool`` file under ``key`` if absent; an object already there is
    adopted if it holds the same records."""
    size, object_crc, footer_crc = await anyio.to_thread.run_sync(_file_crc32c, spool)
    summary = ObjectSummary(key, size, object_crc, row_groups, content, footer_crc)
    try:
        info = await tier.put(key, spool, if_absent=True)
    except ObjectExistsError:
        return await _adopt(tier, key, content, footer_crc)
    if info.size != size:
        raise BKError(f"tier {tier.uri}: put {key!r} stored {info.size} bytes of {size}")
    return summary


async def _copy_ledger(handle: ReadHandle, segment: Segment, builder: _Builder) -> None:
    """Read the ledger a range ahead of the builder, which takes each range in a thread."""
    c = segment.compacted
    records = segment.entries if c is None else c.kept
    size = segment.length // records if records else 0
    chunk = READ_ENTRIES if size <= 0 else max(1, min(READ_ENTRIES, READ_BYTES // size))
    send, receive = anyio.create_memory_object_stream[EntryBlock](1)
    # A compacted segment's records are its ledger's first entries, their positions in its index.
    kept = None if c is None else await compacted.read_index(handle, c.kept, c.index_entries)

    async def read() -> None:
        async with send:
            for lo in range(0, records, chunk):
                block = await handle.read_block(lo, min(lo + chunk - 1, records - 1))
                await send.send(block if kept is None else attrs.evolve(block, entry_ids=kept[block.entry_ids]))

    try:
        async with anyio.create_task_group() as nursery:
            nursery.start_soon(read)
            async with receive:
                async for block in receive:
                    await anyio.to_thread.run_sync(builder.add, block)
    except* (BKError, OSError) as group:
        # A read that failed (every replica down, say) is raised as itself, as any other
        # offload failure is: callers catch a BKError, not a group of one.
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        raise first from None


async def _adopt(tier: AsyncTier, key: str, content: SegmentContent, footer_crc32c: int) -> ObjectSummary:
    """The object already under ``key``, if it holds what the ledger holds and its footer is
    byte for byte the one just written (checked before pyarrow parses it: a damaged footer
    can abort the process there), else CorruptObjectError."""
    found = await verify_object(tier, key, content, footer_crc32c=footer_crc32c)
    return ObjectSummary(key, found.size, found.object_crc32c, found.row_groups, content, found.footer_crc32c)


def _file_crc32c(path: Path) -> tuple[int, int, int]:
    """The file's size, its bytes' CRC32C, and its Parquet footer's (what readers check
    before they parse a footer: see :func:`~bkframe.tiering.footer.check_footer_crc`)."""
    crc = 0
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(_CRC_CHUNK):
            crc = crc32c.crc32c(chunk, crc)
            size += len(chunk)
        f.seek(max(0, size - 8))
        f.seek(footer_start(path.name, size, f.read(8)))
        footer_crc = crc32c.crc32c(f.read())
    return size, crc, footer_crc


class _Builder:
    """The Parquet file being written, fed a ledger range at a time (in a worker thread)."""

    def __init__(
        self, path: Path, log: str, log_uid: str, segment: Segment, options: ObjectOptions, *, rows: int | None = None
    ) -> None:
        """``rows``: the records to expect, with gaps in their ids (default: the segment's
        ledger's -- its entries, or a compacted segment's records)."""
        self._log, self._log_uid, self._segment = log, log_uid, segment
        self._gaps = rows is not None or segment.compacted is not None
        if rows is None:
            rows = segment.entries if segment.compacted is None else segment.compacted.kept
        self._expected_rows = rows
        self._target = options.row_group_bytes
        self._writer = pq.ParquetWriter(str(path), object_schema(), **options.writer_options())
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._checksum = EntryChecksum()
        #: The next entry id a row may have (a compacted segment's skip those it dropped).
        self._next = 0
        self._rows = 0
        self._entry_bytes = 0
        self._payload_bytes = 0
        self._min_ts: int | None = None
        self._max_ts: int | None = None
        self.row_groups = 0

    def add(self, block: EntryBlock) -> None:
        seg = self._segment
        n = len(block)
        ids = block.entry_ids
        gaps = self._gaps
        in_order = bool(ids[0] >= self._next and np.all(np.diff(ids) > 0)) if gaps and n else (
            n > 0 and np.array_equal(ids, np.arange(self._next, self._next + n))
        )
        if n == 0 or not in_order or int(ids[-1]) > seg.last_entry_id:
            raise BKError(f"ledger {seg.ledger_id}: a read from entry {self._next} returned entries out of order")
        self._next = int(ids[-1]) + 1
        self._rows += n
        self._checksum.add_block(block)
        batch = columns.segment_batch(self._log, seg.number, seg.ledger_id, block, enveloped=seg.enveloped)
        batch = batch.append_column(FLAGS, flags_column(block, seg.format))
        sizes = block.ends - block.starts
        self._entry_bytes += int(sizes.sum())
        self._payload_bytes += int(pc.sum(pc.binary_length(batch.column("payload"))).as_py() or 0)
        if seg.enveloped:
            lo, hi = pc.min_max(batch.column("timestamp").cast(pa.int64())).values()
            self._min_ts = min(lo.as_py(), self._min_ts if self._min_ts is not None else lo.as_py())
            self._max_ts = max(hi.as_py(), self._max_ts if self._max_ts is not None else hi.as_py())
        # Cut the batch where the row group reaches its byte target.
        ends = np.cumsum(sizes)
        at = 0
        while at < n:
            cut = int(np.searchsorted(ends, ends[at] - sizes[at] + self._target - self._pending_bytes))
            cut = min(n, max(cut + 1, at + 1))
            self._pending.append(batch.slice(at, cut - at))
            self._pending_bytes += int(ends[cut - 1] - (ends[at] - sizes[at]))
            at = cut
            if self._pending_bytes >= self._target:
                self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending)
        self._writer.write_table(table, row_group_size=table.num_rows)
        self.row_groups += 1
        self._pending, self._pending_bytes = [], 0

    def finish(self) -> SegmentContent:
        """Write the last row group and the footer; what the ledger held."""
        seg = self._segment
        if self._rows != self._expected_rows:
            raise BKError(f"ledger {seg.ledger_id}: read {self._rows} records of {self._expected_rows}")
        self._flush()
        content = SegmentContent(
            self._log,
            self._log_uid,
            seg.number,
            seg.ledger_id,
            seg.format,
            0,
            seg.last_entry_id,
            self._rows,
            self._entry_bytes,
            self._payload_bytes,
            self._checksum.value,
            self._min_ts if self._min_ts is not None else -1,
            self._max_ts if self._max_ts is not None else -1,
        )
        self._writer.add_key_value_metadata(content.footer())
        self._writer.close()
        return content

    def close(self) -> None:
        """Release the file (after :meth:`finish`, or instead of it when the write failed)."""
        self._writer.close()
