"""Reading for Spark: a snapshot planned as entry ranges, each range read as Arrow batches.

The plan is made once, on the driver, from what is *confirmed* at that moment: a log's
closed segments up to their last entry and its open segment up to its LAC (the log's end
is a prefix, see :mod:`bkframe.client.logs.reader`), a ledger up to its close or LAC.
Every entry in the plan stays readable forever and is the same bytes for every reader, so
a batch read is a consistent snapshot and a streaming micro-batch replayed after a failure
reads exactly what it read the first time. Tasks read their range with the ledger's read
handle (replica failover, digest checks) and build one Arrow record batch per chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace

import attrs
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructField, StructType, TimestampType

from bkframe import (
    LATEST,
    Client,
    Entry,
    EntryBlock,
    LogMetadata,
    Position,
    ReadHandle,
    SegmentRange,
    decode_envelopes,
    payload_column,
    read_compacted_index,
)
from bkframe.errors import NoSuchEntryError, NoSuchLedgerError, NoSuchLogError, PositionTrimmedError
from bkframe_spark.columns import PROPERTIES_TYPE, TIMESTAMP, empty_properties
from bkframe_spark.connection import call, call_ahead, check_bookies, client_for
from bkframe_spark.logsets import log_names
from bkframe_spark.options import OptionError, Options
from bkframe_spark.partitions import EntryRange
from bkframe_spark.tier_reading import check_on_bookies, on_bookies, plan_objects, read_object_partition

logger = logging.getLogger("bkframe.spark")

#: The columns of every read (batch and streaming): the first six as before records had
#: fields, then the record's key, timestamp and properties, and a sortable ``offset``.
SCHEMA = StructType(
    [
        StructField("log", StringType(), True),
        StructField("position", StringType(), True),
        StructField("segment", LongType(), True),
        StructField("ledger_id", LongType(), False),
        StructField("entry_id", LongType(), False),
        StructField("payload", BinaryType(), False),
        StructField("key", BinaryType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("properties", MapType(StringType(), StringType(), valueContainsNull=False), False),
        StructField("offset", LongType(), True),
    ]
)
#: What Spark checks each Arrow batch of a read against (timestamps in UTC).
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")
#: ``offset`` is ``segment << 32 | entry_id``: ordered as positions are, while entry ids
#: stay below 2**32 (an entry beyond that has a null offset; its position still names it).
OFFSET_BITS = 32
#: Entries per read request (and per Arrow batch), at most; fewer for large entries.
CHUNK_ENTRIES = 2000
CHUNK_BYTES = 16 << 20


def check_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema of a read with ``schema``: all of :data:`SCHEMA`, or the columns a
    user-given ``.schema(...)`` names (with their types, in any order). Python data sources
    cannot have Spark prune columns, and Spark turns every column a task sends into rows:
    naming only the columns a job uses (``.schema("payload binary")``) spares that work."""
    types = {f.name: f.dataType for f in SCHEMA.fields}
    names = tuple(f.name for f in schema.fields)
    wrong = [f for f in schema.fields if types.get(f.name) != f.dataType]
    if not names or wrong or len(set(names)) != len(names):
        why = (
            "no column" if not names
            else f"column {wrong[0].name!r} is not one of them" if wrong and wrong[0].name not in types
            else f"column {wrong[0].name!r} is {types[wrong[0].name].simpleString()}, not {wrong[0].dataType.simpleString()}"
            if wrong else "a column twice"
        )
        raise OptionError(
            f"format 'bkframe' reads the columns {', '.join(SCHEMA.names)} ({SCHEMA.simpleString()}); a .schema(...) "
            f"may name some of them, with these types, to read only those (it was given {schema.simpleString()}: "
            f"{why}); or leave it out and select columns after loading, e.g. .select('key', 'payload')"
        )
    # Spark checks each batch against the given schema, nullability included.
    return ARROW_SCHEMA if schema == SCHEMA else to_arrow_schema(schema, timezone="UTC")


def split(parts: Sequence[EntryRange], entries_per_partition: int, bytes_per_partition: int) -> list[EntryRange]:
    """Cut each range into partitions of at most ``entries_per_partition`` entries and
    about ``bytes_per_partition`` payload bytes (where the entry size is known)."""
    out: list[EntryRange] = []
    for part in parts:
        if part.key:
            out.append(part)  # already cut at row groups: a cut inside one would fetch it twice
            continue
        step = entries_per_partition
        if part.entry_size > 0:
            step = max(1, min(step, bytes_per_partition // part.entry_size))
        for lo in range(part.first, part.last + 1, step):
            out.append(replace(part, first=lo, last=min(lo + step - 1, part.last)))
    return out


def log_ranges(record: LogMetadata, ranges: Sequence[SegmentRange]) -> list[EntryRange]:
    """Entry ranges of a log's segment ranges; an offloaded segment's names its object (as a
    whole: :func:`~bkframe_spark.tier_reading.plan_objects` cuts it at row groups)."""
    out = []
    for r in ranges:
        part = EntryRange(
            record.name, r.segment, r.ledger_id, r.first, r.last, r.entry_size, r.enveloped, r.min_ts, r.max_ts,
            *(
                (o.tier, o.key, o.size, o.on_bookies, o.footer_crc32c, o.entries, o.checksum)
                if (o := r.offload) is not None else ()
            ),
        )
        if r.compacted is not None:
            part = replace(part, compacted_kept=r.compacted.kept, compacted_index_entries=r.compacted.index_entries)
        out.append(part)
    return out


async def log_snapshot(
    client: Client, opts: Options, log: str, start: Position | str, end: Position | str | None, *, by_time: bool = False
) -> tuple[LogMetadata, list[SegmentRange]]:
    """The confirmed entries of ``log`` from ``start`` to ``end`` (exclusive; None or
    ``latest``: the end now), a range per segment. ``by_time``: ``startingTimestamp`` and
    ``endingTimestamp``, when given, set the start and end instead (found from the
    segments' recorded time ranges and a bisection in one segment each, never a scan)."""
    reader = await client.logs.reader(log, password=opts.password)
    stop = None if end is None or end == LATEST else end
    if isinstance(stop, str):
        raise OptionError(f"bad ending position {end!r}")
    first = await reader.resolve(start)
    if by_time and opts.starting_ts is not None:
        first = await reader.position_at(opts.starting_ts)
    if by_time and opts.ending_ts is not None:
        stop = await reader.position_at(opts.ending_ts)
    if stop is None:
        stop = await reader.end()
    return reader.metadata, (await reader.snapshot(first, stop) if stop > first else [])


async def plan_log(
    client: Client, opts: Options, log: str, start: Position | str, end: Position | str | None, *, by_time: bool = False
) -> list[EntryRange]:
    """:func:`log_snapshot` as entry ranges: offloaded segments cut at their objects' row
    groups (``offloaded=tier``, the default) or read from their ledgers (``bookies``)."""
    record, ranges = await log_snapshot(client, opts, log, start, end, by_time=by_time)
    parts = log_ranges(record, ranges)
    if opts.offloaded == "tier":
        parts = await plan_objects(client, parts, opts.bytes_per_partition)
    else:
        check_on_bookies(record.name, ranges)
        parts = [on_bookies(p) for p in parts]
    hot = next((p for p in parts if not p.key), None)
    if hot is not None:  # a read of offloaded segments only needs no bookie
        await check_bookies(client, hot.ledger_id, hot.first, opts.password)
    return parts


async def plan_logs(client: Client, opts: Options) -> list[EntryRange]:
    """A batch read's plan: each log's ranges (``startingPosition``/``endingPosition`` or the
    time options apply to each), the logs in name order. A log the pattern matched that is
    deleted before its turn is left out; a listed log that does not exist is an error."""
    start = opts.starting if opts.starting is not None else "earliest"
    names = await log_names(client, opts)
    if not names:
        logger.warning("no log matches logPattern %r: the read is empty", opts.log_pattern)
    out: list[EntryRange] = []
    for name in names:
        try:
            out += await plan_log(client, opts, name, start, opts.ending, by_time=True)
        except NoSuchLogError:
            if opts.log_pattern is None:
                raise
            logger.info("log %r matched %r but was deleted before the read was planned: left out", name, opts.log_pattern)
    return out


async def plan_ledgers(client: Client, opts: Options) -> list[EntryRange]:
    """Each listed ledger from entry 0 to its close (or LAC, if it is open)."""
    out = []
    for ledger_id in opts.ledgers:
        try:
            handle = await client.open_ledger(ledger_id, password=opts.password, recovery=False)
        except NoSuchLedgerError:
            raise NoSuchLedgerError(ledger_id, f"option 'ledgers': ledger {ledger_id} does not exist") from None
        md = handle.metadata
        size = md.length // (md.last_entry_id + 1) if md.closed and md.last_entry_id >= 0 else 0
        if handle.lac >= 0:
            out.append(EntryRange(None, None, ledger_id, 0, handle.lac, size))
    return out


# -- reading a partition (in a task) -----------------------------------------------------


async def _open(client: Client, part: EntryRange, password: bytes) -> ReadHandle:
    try:
        return await client.open_ledger(part.ledger_id, password=password, recovery=False)
    except NoSuchLedgerError:
        if part.log is not None:
            raise PositionTrimmedError(
                f"log {part.log!r}: segment {part.segment} (ledger {part.ledger_id}) was trimmed or the log deleted "
                f"after this read was planned; read again"
            ) from None
        raise


def to_batch(
    part: EntryRange, entries: EntryBlock | Sequence[Entry], schema: pa.Schema = ARROW_SCHEMA
) -> pa.RecordBatch:
    """One Arrow batch of the range's ``entries`` (consecutive, as a range read returns
    them), with the columns of ``schema`` (:func:`check_schema`): each built from whole
    arrays over the buffer the read left the entries in, no Python object per value where
    the format allows (:func:`bkframe.decode_envelopes`), and only if asked for."""
    block = entries if isinstance(entries, EntryBlock) else EntryBlock.of(part.ledger_id, list(entries))
    n = len(block)
    ids = block.entry_ids
    columns = schema.names
    wanted = set(columns)
    out: dict[str, pa.Array] = {}
    if wanted & {"payload", "key", "timestamp", "properties"}:
        if part.enveloped:
            prefix = f"log {part.log!r}: entry {part.segment}:"
            rec = decode_envelopes(block.data, block.starts, block.ends, lambda i: f"{prefix}{ids[i]}")
            out["payload"], out["key"] = rec.payload, rec.key
            if "timestamp" in wanted:
                out["timestamp"] = pa.array(rec.millis * 1000, TIMESTAMP)
            if "properties" in wanted:
                out["properties"] = rec.properties(PROPERTIES_TYPE)
        else:
            out["payload"] = payload_column(block.data, block.starts, block.ends)
            out["key"], out["timestamp"], out["properties"] = (
                pa.nulls(n, pa.binary()), pa.nulls(n, TIMESTAMP), empty_properties(n)
            )
    entry_ids = pa.array(ids)
    out["entry_id"] = entry_ids
    if part.segment is None:
        for name, t in (("log", pa.string()), ("position", pa.string()), ("segment", pa.int64()), ("offset", pa.int64())):
            if name in wanted:
                out[name] = pa.nulls(n, t)
    else:
        if "log" in wanted:
            out["log"] = pa.repeat(pa.scalar(part.log, pa.string()), n)
        if "position" in wanted:
            out["position"] = pc.binary_join_element_wise(f"{part.segment}:", entry_ids.cast(pa.string()), "")
        if "segment" in wanted:
            out["segment"] = pa.repeat(pa.scalar(part.segment, pa.int64()), n)
        if "offset" in wanted:
            too_far = ids >= 1 << OFFSET_BITS
            out["offset"] = pa.array((part.segment << OFFSET_BITS) | ids, mask=too_far if too_far.any() else None)
    if "ledger_id" in wanted:
        out["ledger_id"] = pa.repeat(pa.scalar(part.ledger_id, pa.int64()), n)
    return pa.RecordBatch.from_arrays([out[name] for name in columns], schema=schema)


def read_partition(opts: Options, part: EntryRange, schema: pa.Schema = ARROW_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's entries with ``schema``'s columns, in order (in a
    task): from the segment's object in its tier if it is offloaded, else from the bookies."""
    if part.key:
        return read_object_partition(opts, part, schema, read_ledger_partition)
    return read_ledger_partition(opts, part, schema)


def read_ledger_partition(opts: Options, part: EntryRange, schema: pa.Schema = ARROW_SCHEMA) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's entries read from the bookies."""
    bk = client_for(opts)
    what = f"reading ledger {part.ledger_id}" + (f" (segment {part.segment} of log {part.log!r})" if part.log else "")
    handle = call(bk, what, opts.timeout_s, _open, bk.client, part, opts.password)
    chunk = CHUNK_ENTRIES if part.entry_size <= 0 else max(1, min(CHUNK_ENTRIES, CHUNK_BYTES // part.entry_size))
    read: Callable[[int, int], Awaitable[EntryBlock]] = handle.read_block
    first, last = part.first, part.last
    if part.compacted_kept >= 0:
        # Positions are read through the compacted ledger's index: the chunks are cut in
        # its entries, and each block's entry ids become positions again.
        kept = call(bk, what, opts.timeout_s, read_compacted_index, handle, part.compacted_kept,
                    part.compacted_index_entries)
        first, last = int(np.searchsorted(kept, part.first, "left")), int(np.searchsorted(kept, part.last, "right")) - 1

        async def read(lo: int, hi: int) -> EntryBlock:
            block = await handle.read_block(lo, hi)
            return attrs.evolve(block, entry_ids=kept[block.entry_ids])

    ranges = [(lo, min(lo + chunk - 1, last)) for lo in range(first, last + 1, chunk)]
    # One chunk read ahead: the client's loop reads the next chunk while this thread builds
    # the current batch and Spark consumes it (no more than one chunk waits in memory).
    ahead = call_ahead(bk, what, opts.timeout_s, read, *ranges[0]) if ranges else None
    try:
        for i, (lo, hi) in enumerate(ranges):
            assert ahead is not None
            try:
                block = ahead.result()
            except (NoSuchLedgerError, NoSuchEntryError, NoSuchLogError) as e:
                ahead = None
                raise PositionTrimmedError(
                    f"{what}: entries {lo}..{hi} are gone (trimmed or deleted after planning): {e}"
                ) from None
            ahead = call_ahead(bk, what, opts.timeout_s, read, *ranges[i + 1]) if i + 1 < len(ranges) else None
            yield to_batch(part, block, schema)
    finally:
        if ahead is not None:  # the task stopped early (a limit, a failure): drop the read ahead
            ahead.cancel()
