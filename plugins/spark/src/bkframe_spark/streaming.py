"""Structured Streaming: logs as a source (offsets are positions) and as an exactly-once sink.

**Source.** An offset holds a position in each log the query reads, ``{"logs": {"a":
"3:41", "b": "0:0"}}`` (:mod:`bkframe_spark.logsets`): boundaries, so a micro-batch from
offset ``s`` to offset ``e`` reads the confirmed entries in ``[s[log], e[log])`` of each
log, and those of a log new in ``e`` from its start. ``latestOffset`` is each log's end
(only confirmed entries, across every rollover and committed segment), or less under
``maxEntriesPerTrigger`` / ``maxBytesPerTrigger`` -- bounds on the whole batch, shared
fairly between the logs -- or the batch's start (no batch yet) while fewer than
``minEntriesPerTrigger`` entries are new in all the logs and ``maxTriggerDelay`` has not
passed since the last batch; a batch replayed after a failure reads the same entries, since
positions never change meaning. With a ``cursor`` the source moves that durable cursor (one
of that name in each log) to a batch's end when Spark commits the batch, so retention never
trims what the query has not finished with.

**Sink.** Each micro-batch is a bulk load (:mod:`bkframe_spark.writing`) whose commit token
is the query's id and the batch id: Spark replays the last batch after a driver crash with
the same id, and its commit then changes nothing (its new ledgers are deleted), so every
batch lands in the output log exactly once. Spark's own contract -- the source replays the
same data for a batch id, the sink's commit is idempotent per batch id -- does the rest. A
sink that routes rows by their ``log`` column is :mod:`bkframe_spark.routing`.
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
from bkframe.errors import CursorExistsError, NoSuchCursorError, NoSuchLogError, PositionTrimmedError
from bkframe_spark.columns import WriteColumns
from bkframe_spark.connection import call, client_for, task_starts
from bkframe_spark.first_line import message_first
from bkframe_spark.logsets import describe, fair_shares, log_names, offset, positions_of
from bkframe_spark.options import OptionError, Options
from bkframe_spark.reading import ARROW_SCHEMA, EntryRange, plan_log, read_partition, split
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


@attrs.frozen
class Limits:
    """How much one micro-batch takes, across all its logs (None: no bound)."""

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


async def range_sizes(reader: LogReader, ranges: Sequence[SegmentRange]) -> list[int]:
    """Each range's bytes per record: a closed segment's recorded average, an open one's
    from a sample of its first records."""
    sizes = []
    for r in ranges:
        size = r.entry_size
        if size <= 0:
            sample = await reader.read_segment(r.segment, r.first, min(r.last, r.first + SIZE_SAMPLE - 1))
            size = sum(record_size(e, r.enveloped) for e in sample) // max(1, len(sample))
        sizes.append(max(1, size))
    return sizes


def fitting(ranges: Sequence[SegmentRange], sizes: Sequence[int], budget: int) -> int:
    """How many records from the start of ``ranges`` fit in ``budget`` bytes."""
    taken = 0
    for r, size in zip(ranges, sizes, strict=True):
        fits = budget // size
        if fits < r.entries:
            return taken + fits
        budget -= r.entries * size
        taken += r.entries
    return taken


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("bkframe").option("log", NAMES)`` (or ``logPattern``)."""

    def __init__(self, opts: Options, schema: pa.Schema = ARROW_SCHEMA) -> None:
        if opts.ledgers or (not opts.logs and opts.log_pattern is None):
            raise OptionError("a streaming read needs option 'log' (one log, or several: 'a,b') or option 'logPattern'")
        self.opts = opts
        #: The columns each batch has (see reading.check_schema).
        self.schema = schema
        self.what = describe(opts)
        #: Set by Trigger.AvailableNow: each log's end the query stops at.
        self._target: dict[str, Position] | None = None
        #: When the last micro-batch was let through (time.monotonic()): ``minEntriesPerTrigger``
        #: holds a batch back for at most ``maxTriggerDelay`` after it (the query's start counts).
        self._last_batch = time.monotonic()
        #: Moves on at each micro-batch: which log gets the units of a budget too small to share.
        self._turn = 0

    @message_first
    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        bk = client_for(self.opts)
        return call(bk, f"{what} ({self.what})", self.opts.timeout_s, fn, bk.client, *args)

    # -- offsets ------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        return offset(self._call("finding the starting positions", self._initials))

    async def _initials(self, client: Client) -> dict[str, Position]:
        return {name: await self._initial(client, name) for name in await log_names(client, self.opts)}

    async def _initial(self, client: Client, name: str) -> Position:
        """``startingPosition`` or ``startingTimestamp``; without either the cursor's
        position if the cursor exists, else the earliest. A cursor that does not exist yet
        is created there. (Spark asks only when the query has no checkpoint.)"""
        opts, logs = self.opts, client.logs
        reader = await logs.reader(name, password=opts.password)
        start: Position | str = opts.starting if opts.starting is not None else EARLIEST
        if opts.starting_ts is not None:
            start = await reader.position_at(opts.starting_ts)
        if opts.cursor is not None:
            try:
                cursor = await logs.cursor(name, opts.cursor)
                if opts.starting is None and opts.starting_ts is None:
                    start = cursor.position
            except NoSuchCursorError:
                cursor = await logs.create_cursor(name, opts.cursor, start, password=opts.password)
                start = cursor.position
        if isinstance(start, Position) and start < (await reader.refresh()).start and not opts.fail_on_data_loss:
            start = EARLIEST
        return await reader.resolve(start)

    @message_first
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        first = positions_of(start, self.opts)
        return offset(self._call("finding the latest positions", self._latest, first, self._limits(limit)))

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

    async def _live(self, client: Client, first: dict[str, Position]) -> dict[str, LogReader]:
        """A reader of each log the query reads now: those at a position in ``first``, and
        new ones (listed, or matching the pattern); a log of ``first`` that is gone is lost
        data (:meth:`_lost`). Under Trigger.AvailableNow, only logs that were there when
        the query started."""
        names = set(await log_names(client, self.opts)) | set(first)
        live: dict[str, LogReader] = {}
        for name in sorted(names):
            if self._target is not None and name not in self._target and name not in first:
                continue
            try:
                live[name] = await client.logs.reader(name, password=self.opts.password)
            except NoSuchLogError:
                if name in first:
                    self._lost(name, first[name])
                elif self.opts.log_pattern is None:
                    raise
        return live

    async def _latest(self, client: Client, first: dict[str, Position], limits: Limits) -> dict[str, Position]:
        live = await self._live(client, first)
        starts: dict[str, Position] = {}
        ends: dict[str, Position] = {}
        for name, reader in live.items():
            log_start = reader.metadata.start
            # A new log is read from its start (Kafka's new partitions under subscribePattern).
            starts[name] = self._not_trimmed(name, first[name], log_start) if name in first else log_start
            end = await reader.end()
            if self._target is not None:
                end = min(end, self._target.get(name, starts[name]))
            ends[name] = max(end, starts[name])
        if all(ends[n] <= starts[n] for n in live):
            return ends
        if limits == Limits():
            self._last_batch = time.monotonic()
            return ends
        ranges = {n: await live[n].snapshot(starts[n], ends[n]) for n in live if ends[n] > starts[n]}
        have = {n: sum(r.entries for r in rs) for n, rs in ranges.items()}
        waited = time.monotonic() - self._last_batch
        if limits.min_entries is not None and sum(have.values()) < limits.min_entries:
            if waited < self.opts.max_trigger_delay_s:
                return {n: starts[n] for n in live if n in first}  # Kafka's minOffsetsPerTrigger: no batch yet
        take = dict(have)
        if limits.max_entries is not None:
            take = fair_shares(have, limits.max_entries, self._turn)
        if limits.max_bytes is not None:
            sizes = {n: await range_sizes(live[n], rs) for n, rs in ranges.items()}
            volume = {n: sum(r.entries * z for r, z in zip(rs, sizes[n], strict=True)) for n, rs in ranges.items()}
            budget = fair_shares(volume, limits.max_bytes, self._turn)
            fit = {n: fitting(rs, sizes[n], budget[n]) for n, rs in ranges.items()}
            # A record larger than its log's share goes alone, one such log per batch in
            # turn: a batch is never empty, and no log's large records wait forever.
            starved = sorted(n for n in ranges if fit[n] == 0 and take[n] > 0)
            if starved:
                fit[starved[self._turn % len(starved)]] = 1
            take = {n: min(take[n], fit[n]) for n in ranges}
        self._turn += 1
        self._last_batch = time.monotonic()
        return {
            n: starts[n] if not take.get(n) else ends[n] if take[n] >= have[n] else after(ranges[n], take[n], ends[n])
            for n in live
        }

    def _not_trimmed(self, name: str, first: Position, log_start: Position) -> Position:
        if first.segment >= log_start.segment:
            return first
        if self.opts.fail_on_data_loss:
            raise PositionTrimmedError(
                f"log {name!r}: the stream is at {first}, which was trimmed (the log now starts at {log_start}); "
                f"entries were lost to retention. Set option failOnDataLoss=false to go on from {log_start}"
            )
        log.warning("log %r: position %s was trimmed; skipping to %s (failOnDataLoss=false)", name, first, log_start)
        return log_start

    def _lost(self, name: str, at: Position) -> None:
        """Log ``name``, read up to ``at``, was deleted: fail, or go on without it (``failOnDataLoss``)."""
        if self.opts.fail_on_data_loss:
            raise NoSuchLogError(
                name,
                f"log {name!r} was deleted while the stream read it (at {at}): entries it had after that may be lost. "
                f"Set option failOnDataLoss=false to go on without it",
            )
        log.warning("log %r was deleted while the stream read it (at %s); going on without it (failOnDataLoss=false)",
                    name, at)

    async def _ends(self, client: Client) -> dict[str, Position]:
        ends = {}
        for name in await log_names(client, self.opts):
            try:
                ends[name] = await (await client.logs.reader(name, password=self.opts.password)).end()
            except NoSuchLogError:
                if self.opts.log_pattern is None:
                    raise
        return ends

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
        self._target = self._call("finding the logs' ends", self._ends)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offset(self._call("finding the logs' ends", self._ends))

    # -- batches ------------------------------------------------------------------------

    @message_first
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, stop = positions_of(start, self.opts), positions_of(end, self.opts)
        if all(name in first and stop[name] <= first[name] for name in stop):
            return []
        parts = self._call("planning a micro-batch", self._plan, first, stop)
        return split(parts, self.opts.entries_per_partition, self.opts.bytes_per_partition)

    async def _plan(self, client: Client, first: dict[str, Position], stop: dict[str, Position]) -> list[EntryRange]:
        """Each log's entries from its position in ``first`` (a log new in this batch: from
        its start) to its position in ``stop``, in name order."""
        out: list[EntryRange] = []
        for name in sorted(stop):
            if name in first and stop[name] <= first[name]:
                continue
            try:
                reader = await client.logs.reader(name, password=self.opts.password)
            except NoSuchLogError:
                self._lost(name, first.get(name, stop[name]))
                continue
            log_start = reader.metadata.start
            begin = self._not_trimmed(name, first[name], log_start) if name in first else log_start
            if stop[name] > begin:
                out += await plan_log(client, self.opts, name, begin, stop[name])
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EntryRange)
        task_starts()
        return read_partition(self.opts, partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        if self.opts.cursor is not None:
            self._call(f"moving cursor {self.opts.cursor!r}", self._move_cursors, positions_of(end, self.opts))

    async def _move_cursors(self, client: Client, positions: dict[str, Position]) -> None:
        cursor = str(self.opts.cursor)
        for name, position in positions.items():
            try:
                await self._move_cursor(client, name, cursor, position)
            except NoSuchLogError:
                log.info("log %r was deleted: its cursor %r is gone with it", name, cursor)

    async def _move_cursor(self, client: Client, name: str, cursor: str, position: Position) -> None:
        try:
            # Never moves back: a batch committed again after a restart changes nothing.
            await client.logs.move_cursor(name, cursor, position)
        except NoSuchCursorError:
            # A log the stream found after it started: its cursor starts where the stream is.
            try:
                await client.logs.create_cursor(name, cursor, position, password=self.opts.password)
            except CursorExistsError:
                await client.logs.move_cursor(name, cursor, position)


def stream_batch(run: str) -> tuple[str, str]:
    """In a sink's task: the micro-batch's commit token, and the write id of this run of it."""
    ctx = TaskContext.get()
    query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
    if not query_id or batch is None:
        raise RuntimeError("the bkframe stream sink runs only in a Spark streaming query (no query or batch id)")
    return stream_token(query_id, int(batch)), f"{query_id}:{batch}:{run}"


def batch_ids(messages: Sequence[Any]) -> tuple[str, str] | None:
    """The query's id and this run's write id, from the tasks' messages (None when no task reported)."""
    done = [m for m in messages if m is not None]
    if not done:
        return None
    write = str(done[0].write)
    return write.split(":")[0], write


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
        token, write = stream_batch(self.run)
        task_starts()
        return write_task(self.opts, self.spec, write, token, self.columns, iterator)

    @message_first
    def commit(self, messages: list[LedgerMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = batch_ids(messages)
        if ids is None:
            return
        # The commit deletes what earlier runs of this batch staged under its token.
        commit_write(self.opts, self.spec, stream_token(ids[0], batchId), messages)

    @message_first
    def abort(self, messages: list[LedgerMessage | None], batchId: int) -> None:  # type: ignore[override]
        ids = batch_ids(messages)
        if ids is None:
            return
        abort_write(self.opts, self.spec, stream_token(ids[0], batchId), ids[1])
