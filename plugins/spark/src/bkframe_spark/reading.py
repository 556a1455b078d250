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

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from bkframe import LATEST, Client, Entry, LogMetadata, Position, ReadHandle, SegmentRange, decode_record
from bkframe.errors import NoSuchEntryError, NoSuchLedgerError, NoSuchLogError, PositionTrimmedError
from bkframe_spark.connection import call, client_for
from bkframe_spark.options import OptionError, Options

#: The columns of every read (batch and streaming).
SCHEMA = StructType(
    [
        StructField("log", StringType(), True),
        StructField("position", StringType(), True),
        StructField("segment", LongType(), True),
        StructField("ledger_id", LongType(), False),
        StructField("entry_id", LongType(), False),
        StructField("payload", BinaryType(), False),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("log", pa.string()),
        pa.field("position", pa.string()),
        pa.field("segment", pa.int64()),
        pa.field("ledger_id", pa.int64(), nullable=False),
        pa.field("entry_id", pa.int64(), nullable=False),
        pa.field("payload", pa.binary(), nullable=False),
    ]
)
#: Entries per read request (and per Arrow batch), at most; fewer for large entries.
CHUNK_ENTRIES = 2000
CHUNK_BYTES = 16 << 20


@dataclass(frozen=True)
class EntryRange(InputPartition):
    """One read partition: entries ``first..last`` of one ledger (a log segment or not)."""

    log: str | None
    segment: int | None
    ledger_id: int
    first: int
    last: int
    #: Average payload size, when known (a closed segment), to size the read chunks.
    entry_size: int = 0
    #: The entries are log records in envelopes (a log segment's; ledgers read raw).
    enveloped: bool = False

    @property
    def entries(self) -> int:
        return self.last - self.first + 1


def check_schema(schema: StructType) -> None:
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in SCHEMA.fields]:
        raise OptionError(
            f"format 'bkframe' reads the columns {SCHEMA.simpleString()}; leave out .schema(...) "
            f"(it was given {schema.simpleString()}) and select columns after loading"
        )


def split(parts: Sequence[EntryRange], entries_per_partition: int, bytes_per_partition: int) -> list[EntryRange]:
    """Cut each range into partitions of at most ``entries_per_partition`` entries and
    about ``bytes_per_partition`` payload bytes (where the entry size is known)."""
    out: list[EntryRange] = []
    for part in parts:
        step = entries_per_partition
        if part.entry_size > 0:
            step = max(1, min(step, bytes_per_partition // part.entry_size))
        for lo in range(part.first, part.last + 1, step):
            out.append(
                EntryRange(
                    part.log, part.segment, part.ledger_id, lo, min(lo + step - 1, part.last), part.entry_size, part.enveloped
                )
            )
    return out


def log_ranges(record: LogMetadata, ranges: Sequence[SegmentRange]) -> list[EntryRange]:
    out = []
    for r in ranges:
        seg = record.segment(r.segment)
        size = seg.length // seg.entries if seg is not None and seg.closed and seg.entries > 0 else 0
        out.append(EntryRange(record.name, r.segment, r.ledger_id, r.first, r.last, size, r.enveloped))
    return out


async def plan_log(client: Client, opts: Options, start: Position | str, end: Position | str | None) -> list[EntryRange]:
    """The confirmed entries of the log from ``start`` to ``end`` (exclusive; None or
    ``latest``: the end now), as entry ranges."""
    log = opts.need_log("reading")
    reader = await client.logs.reader(log, password=opts.password)
    stop = None if end is None or end == LATEST else end
    if isinstance(stop, str):
        raise OptionError(f"bad ending position {end!r}")
    first = await reader.resolve(start)
    if stop is None:
        stop = await reader.end()
    ranges = await reader.snapshot(first, stop) if stop > first else []
    return log_ranges(reader.metadata, ranges)


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


def _payloads(part: EntryRange, entries: Sequence[Entry]) -> list[bytes]:
    if not part.enveloped:
        return [e.payload for e in entries]
    return [decode_record(e.payload).payload for e in entries]


def to_batch(part: EntryRange, entries: Sequence[Entry]) -> pa.RecordBatch:
    n = len(entries)
    ids = np.fromiter((e.entry_id for e in entries), dtype=np.int64, count=n)
    if part.segment is None:
        log_col = pa.nulls(n, pa.string())
        position = pa.nulls(n, pa.string())
        segment = pa.nulls(n, pa.int64())
    else:
        log_col = pa.array([part.log] * n, pa.string())
        prefix = f"{part.segment}:"
        position = pa.array([prefix + str(i) for i in ids.tolist()], pa.string())
        segment = pa.array(np.full(n, part.segment, dtype=np.int64))
    return pa.RecordBatch.from_arrays(
        [
            log_col,
            position,
            segment,
            pa.array(np.full(n, part.ledger_id, dtype=np.int64)),
            pa.array(ids),
            pa.array(_payloads(part, entries), pa.binary()),
        ],
        schema=ARROW_SCHEMA,
    )


def read_partition(opts: Options, part: EntryRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's entries, in order (in a task)."""
    bk = client_for(opts.metadata, opts.timeout_s)
    what = f"reading ledger {part.ledger_id}" + (f" (segment {part.segment} of log {part.log!r})" if part.log else "")
    handle = call(bk, what, opts.timeout_s, _open, bk.client, part, opts.password)
    chunk = CHUNK_ENTRIES if part.entry_size <= 0 else max(1, min(CHUNK_ENTRIES, CHUNK_BYTES // part.entry_size))
    for lo in range(part.first, part.last + 1, chunk):
        hi = min(lo + chunk - 1, part.last)
        try:
            entries = call(bk, what, opts.timeout_s, handle.read, lo, hi)
        except (NoSuchLedgerError, NoSuchEntryError, NoSuchLogError) as e:
            raise PositionTrimmedError(f"{what}: entries {lo}..{hi} are gone (trimmed or deleted after planning): {e}") from None
        yield to_batch(part, entries)
