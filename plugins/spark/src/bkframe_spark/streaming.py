"""Structured Streaming: a log as a source (offsets are positions) and as an exactly-once sink.

**Source.** An offset is a log position, ``{"position": "3:41"}``: a boundary, so a
micro-batch from offset ``a`` to offset ``b`` reads the confirmed entries in ``[a, b)``.
``latestOffset`` is the log's end (only confirmed entries, across every rollover and
committed segment), or less under ``maxEntriesPerTrigger`` / ``maxBytesPerTrigger``, or the
batch's start (no batch yet) while fewer than ``minEntriesPerTrigger`` entries are new and
``maxTriggerDelay`` has not passed since the last batch; a batch replayed after a failure
reads the same entries, since positions never change meaning. With a ``cursor``
the source moves that durable cursor to a batch's end when Spark commits the batch, so
retention never trims what the query has not finished with.

**Sink.** Each micro-batch is a bulk load (:mod:`bkframe_spark.writing`) whose commit token
is the query's id and the batch id: Spark replays the last batch after a driver crash with
the same id, and its commit then changes nothing (its new ledgers are deleted), so every
batch lands in the output log exactly once. Spark's own contract -- the source replays the
same data for a batch id, the sink's commit is idempotent per batch id -- does the rest.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from bkframe import EARLIEST, Client, LogEntry, LogReader, Position, SegmentRange
from bkframe.errors import NoSuchCursorError, PositionTrimmedError
from bkframe_spark.columns import WriteColumns
from bkframe_spark.connection import call, client_for
from bkframe_spark.first_line import message_first
from bkframe_spark.options import Options
from bkframe_spark.reading import EntryRange, plan_log, read_partition, split
from bkframe_spark.writing import (
    LedgerMessage,
    LedgerSpec,
    abort_write,
    commit_write,
    write_task,
)

log = logging.getLogger("bkframe.spark")

#: Spark's task-local properties naming the streaming query and the micro-batch.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def offset(position: Position) -> dict[str, Any]:
    return {"position": str(position)}


def position_of(offset: dict[str, Any]) -> Position:
    return Position.parse(str(offset["position"]))


@attrs.frozen
class Limits:
    """How much one micro-batch takes (None: no bound)."""

    max_entries: int | None = None
    max_bytes: int | None = None
    min_entries: int | None = None


#: Entries of an open segment read to guess its records' size for ``maxBytesPerTrigger``
#: (a closed segment's average size is recorded).
SIZE_SAMPLE = 16


def record_size(entry: LogEntry, enveloped: bool) -> int:
    """The bytes ``entry`` takes in its ledger (the envelope's, docs/logs.md)."""
    if not enveloped:
        return len(entry.payload)
    size = 9 + len(entry.payload) + (4 + len(entry.key) if entry.key is not None else 0)
    if entry.properties:
        size += 4 + sum(8 + len(k.encode()) + len(v.encode()) for k, v in entry.properties.items())
    return size


def after(ranges: Sequence[SegmentRange], entries: int, end: Position) -> Position:
    """The position ``entries`` entries into ``ranges`` (``end`` if they hold fewer)."""
    left = entries
    for r in ranges:
        if r.entries >= left:
            return Position(r.segment, r.first + left)
        left -= r.entries
    return end


async def after_bytes(reader: LogReader, ranges: Sequence[SegmentRange], budget: int, end: Position) -> Position:
    """Where about ``budget`` bytes of records from the start of ``ranges`` end, by each
    closed segment's average record size (an open segment's: a sample's); at least one
    entry, so that a record larger than the budget still goes, alone."""
    taken = 0
    for r in ranges:
        size = r.entry_size
        if size <= 0:
            sample = await reader.read_segment(r.segment, r.first, min(r.last, r.first + SIZE_SAMPLE - 1))
            size = sum(record_size(e, r.enveloped) for e in sample) // max(1, len(sample))
        fits = budget // max(1, size)
        if fits < r.entries:
            return Position(r.segment, r.first + max(fits, 1 if taken == 0 else 0))
        budget -= r.entries * size
        taken += r.entries
    return end


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("bkframe").option("log", NAME)``."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.log = opts.need_log("a streaming read")
        #: Set by Trigger.AvailableNow: the end the query stops at.
        self._target: Position | None = None
        #: When the last micro-batch was let through (time.monotonic()): ``minEntriesPerTrigger``
        #: holds a batch back for at most ``maxTriggerDelay`` after it (the query's start counts).
        self._last_batch = time.monotonic()

    @message_first
    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        bk = client_for(self.opts)
        return call(bk, f"{what} (log {self.log!r})", self.opts.timeout_s, fn, bk.client, *args)

    # -- offsets ------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return offset(self._call("finding the starting position", self._initial))

    async def _initial(self, client: Client) -> Position:
        """``startingPosition`` or ``startingTimestamp``; without either the cursor's
        position if the cursor exists, else the earliest. A cursor that does not exist yet
        is created there. (Spark asks only when the query has no checkpoint.)"""
        opts, logs = self.opts, client.logs
        reader = await logs.reader(self.log, password=opts.password)
        start: Position | str = opts.starting if opts.starting is not None else EARLIEST
        if opts.starting_ts is not None:
            start = await reader.position_at(opts.starting_ts)
        if opts.cursor is not None:
            try:
                cursor = await logs.cursor(self.log, opts.cursor)
                if opts.starting is None and opts.starting_ts is None:
                    start = cursor.position
            except NoSuchCursorError:
                cursor = await logs.create_cursor(self.log, opts.cursor, start, password=opts.password)
                start = cursor.position
        if isinstance(start, Position) and start < (await reader.refresh()).start and not opts.fail_on_data_loss:
            start = EARLIEST
        return await reader.resolve(start)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = position_of(start)
        return offset(self._call("finding the latest position", self._latest, first, self._limits(limit)))

    def _limits(self, limit: ReadLimit) -> Limits:
        """The options' bounds, or the one Spark passes (ReadAllAvailable: Trigger.Once)."""
        if isinstance(limit, ReadAllAvailable):
            return Limits()
        opts = self.opts
        return Limits(
            limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_entries_per_trigger,
            limit.max_bytes if isinstance(limit, ReadMaxBytes) else opts.max_bytes_per_trigger,
            # Trigger.AvailableNow reads up to a fixed end, then stops: no waiting for more.
            None if self._target is not None else limit.min_rows if isinstance(limit, ReadMinRows)
            else opts.min_entries_per_trigger,
        )

    async def _latest(self, client: Client, first: Position, limits: Limits) -> Position:
        reader = await client.logs.reader(self.log, password=self.opts.password)
        end = await reader.end()
        if self._target is not None:
            end = min(end, self._target)
        first = self._not_trimmed(first, reader.metadata.start)
        if end <= first:
            return first
        if limits == Limits():
            self._last_batch = time.monotonic()
            return end
        ranges = await reader.snapshot(first, end)
        waited = time.monotonic() - self._last_batch
        if limits.min_entries is not None and sum(r.entries for r in ranges) < limits.min_entries:
            if waited < self.opts.max_trigger_delay_s:
                return first  # Kafka's minOffsetsPerTrigger: no batch yet
        if limits.max_entries is not None:
            end = min(end, after(ranges, limits.max_entries, end))
        if limits.max_bytes is not None:
            end = min(end, await after_bytes(reader, ranges, limits.max_bytes, end))
        self._last_batch = time.monotonic()
        return end

    def _not_trimmed(self, first: Position, log_start: Position) -> Position:
        if first.segment >= log_start.segment:
            return first
        if self.opts.fail_on_data_loss:
            raise PositionTrimmedError(
                f"log {self.log!r}: the stream is at {first}, which was trimmed (the log now starts at {log_start}); "
                f"entries were lost to retention. Set option failOnDataLoss=false to go on from {log_start}"
            )
        log.warning("log %r: position %s was trimmed; skipping to %s (failOnDataLoss=false)", self.log, first, log_start)
        return log_start

    async def _end(self, client: Client) -> Position:
        return await (await client.logs.reader(self.log, password=self.opts.password)).end()

    def getDefaultReadLimit(self) -> ReadLimit:
        # Spark takes one limit; latestOffset applies all the options (see _limits).
        opts = self.opts
        if opts.max_entries_per_trigger is not None:
            return ReadMaxRows(opts.max_entries_per_trigger)
        if opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(opts.max_bytes_per_trigger)
        if opts.min_entries_per_trigger is not None:
            return ReadMinRows(opts.min_entries_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._call("finding the log's end", self._end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offset(self._call("finding the log's end", self._end))

    # -- batches ------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, stop = position_of(start), position_of(end)
        if stop <= first:
            return []
        parts = self._call("planning a micro-batch", self._plan, first, stop)
        return split(parts, self.opts.entries_per_partition, self.opts.bytes_per_partition)

    async def _plan(self, client: Client, first: Position, stop: Position) -> list[EntryRange]:
        reader = await client.logs.reader(self.log, password=self.opts.password)
        first = self._not_trimmed(first, reader.metadata.start)
        return await plan_log(client, self.opts, first, stop) if stop > first else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EntryRange)
        return read_partition(self.opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.cursor is not None:
            self._call(f"moving cursor {self.opts.cursor!r}", self._move_cursor, position_of(end))

    async def _move_cursor(self, client: Client, position: Position) -> None:
        # Never moves back: a batch committed again after a restart changes nothing.
        await client.logs.move_cursor(self.log, str(self.opts.cursor), position)


def stream_token(query_id: str, batch_id: int) -> str:
    return f"spark:stream:{query_id}:{batch_id}"


class LogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("bkframe").option("log", NAME)``: exactly once per batch."""

    def __init__(self, opts: Options, spec: LedgerSpec, columns: WriteColumns) -> None:
        self.opts = opts
        self.spec = spec
        self.columns = columns
        #: Tells this run's writes from a replay's (after a restart) of the same batch.
        self.run = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgerMessage:  # type: ignore[override]
        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if not query_id or batch is None:
            raise RuntimeError("the bkframe stream sink runs only in a Spark streaming query (no query or batch id)")
        write = f"{query_id}:{batch}:{self.run}"
        return write_task(self.opts, self.spec, write, stream_token(query_id, int(batch)), self.columns, iterator)

    @staticmethod
    def _ids(messages: Sequence[LedgerMessage | None]) -> tuple[str, str] | None:
        """The query's id and this run's write id (None when no task reported)."""
        done = [m for m in messages if m is not None]
        if not done:
            return None
        write = done[0].write
        return write.split(":")[0], write

    @message_first
    def commit(self, messages: list[LedgerMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = self._ids(messages)
        if ids is None:
            return
        # The commit deletes what earlier runs of this batch staged under its token.
        commit_write(self.opts, self.spec, stream_token(ids[0], batchId), messages)

    @message_first
    def abort(self, messages: list[LedgerMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = self._ids(messages)
        if ids is None:
            return
        abort_write(self.opts, self.spec, stream_token(ids[0], batchId), ids[1])
