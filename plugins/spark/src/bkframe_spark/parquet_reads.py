"""``bkframe_spark.read_log(spark, NAME, ...)``: a log as one DataFrame in which Spark's own
Parquet reader reads the offloaded segments.

A Python data source hands Spark Arrow batches that the JVM turns into rows one by one;
for small records that costs about as much as Spark's whole vectorised Parquet read
(docs/benchmarks/spark.md). When a log's offloaded segments are objects in a ``file://`` tier --
a directory every Spark process sees at the same path (a local disk for ``local[N]``, a
shared mount on a cluster) -- Spark can read them as the Parquet files they are. This
plans a snapshot of the log on the driver, as the data source does (what is confirmed now,
the same options), and returns the union of

- ``spark.read.parquet(the objects of the offloaded segments in range)`` projected to the
  connector's columns (the objects' ``flags`` column is left out, as the connector's reads
  leave it out); the objects of the segments the snapshot's start or end cuts are filtered
  to its ``offset`` range (Spark skips row groups by their statistics), the others read whole;
- the connector's read (``format("bkframe")``) of each run of the other segments, fixed by
  positions: hot segments from the bookies, objects in other tiers (S3: Spark's JVM here
  has no S3 filesystem) by ranged reads.

Every entry of the snapshot is in exactly one of them, at its position, with the same bytes.
The log's password is checked when the snapshot is planned (the client, against the log
record); the files themselves are plain data: the filesystem's permissions are the access
control.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from bkframe import Client, SegmentRange
from bkframe_spark.connection import call, client_for
from bkframe_spark.options import Options
from bkframe_spark.reading import OFFSET_BITS, SCHEMA, log_snapshot

#: A compacted read broadcasts the keys written since the last clean compaction up to this
#: many rows (beyond, Spark's own join).
BROADCAST_KEYS = 1_000_000
#: Options the snapshot plan takes for itself; the hot runs' reads get positions instead.
_PLANNING = ("startingposition", "endingposition", "startingtimestamp", "endingtimestamp")


def read_log(
    spark: Any, log: str, *, metadata: str | None = None, password: str = "", compacted: bool = False, **options: Any
) -> Any:
    """The log ``log`` as a DataFrame of the connector's columns: the snapshot
    ``spark.read.format("bkframe")`` with these options would read, its offloaded segments in
    a ``file://`` tier read by Spark's Parquet reader (see the module). ``options`` are the
    connector's (``startingPosition``, ``endingTimestamp``, ``tlsCa``, ...). ``compacted``:
    the snapshot as a table (docs/compaction.md): each key's latest row unless a tombstone
    (an empty payload), and every row without a key."""
    given: dict[str, Any] = {"log": log, "password": password, **options}
    if metadata is not None:
        given["metadata"] = metadata
    opts = Options.parse({k: str(v) for k, v in given.items()})
    name = opts.need_log("read_log")
    bk = client_for(opts)
    start = opts.starting if opts.starting is not None else "earliest"
    record, ranges = call(bk, f"planning the read of log {name!r}", opts.timeout_s, _snapshot, bk.client, opts, name, start)
    if not compacted:
        return _rows(spark, given, ranges)
    # The clean part (before LogMetadata.compacted_until) holds each key once: its rows are the
    # table's unless a tombstone, or a key the rest of the log has again. Only that rest --
    # what was written since the last clean compaction -- needs the window.
    clean = [r for r in ranges if r.segment < record.compacted_until]
    head = [r for r in ranges if r.segment >= record.compacted_until]
    if not clean:
        return latest_rows(_rows(spark, given, head))
    from pyspark.sql import functions as F

    table = _rows(spark, given, clean).where(F.col("key").isNull() | (F.length("payload") > 0))
    if not head:
        return table
    rest = _rows(spark, given, head)
    keys = rest.where(F.col("key").isNotNull()).select("key").distinct()
    if sum(r.entries for r in head) <= BROADCAST_KEYS:
        keys = F.broadcast(keys)
    return table.join(keys, "key", "left_anti").select(*SCHEMA.names).unionByName(latest_rows(rest))


def latest_rows(df: Any) -> Any:
    """``df`` (the connector's columns) as a table: the row of greatest ``offset`` of each
    key, left out if its payload is empty (a tombstone), and every row whose key is null."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_key = Window.partitionBy("key").orderBy(F.col("offset").desc())
    keyed = df.where(F.col("key").isNotNull()).withColumn("_latest", F.row_number().over(by_key))
    latest = keyed.where((F.col("_latest") == 1) & (F.length("payload") > 0)).drop("_latest")
    return df.where(F.col("key").isNull()).unionByName(latest)


def _rows(spark: Any, given: dict[str, Any], ranges: list[SegmentRange]) -> Any:
    """The rows of the snapshot's ``ranges``: objects in a ``file://`` tier by Spark's
    Parquet reader, runs of the other segments by the data source."""
    from bkframe.tiering import object_path, whole_local_object  # pyarrow.dataset: only when used

    if not ranges:
        return spark.createDataFrame([], SCHEMA)
    whole: list[str] = []  # objects read whole
    cut: list[str] = []  # objects of the segments the snapshot's start or end cuts
    runs: list[list[SegmentRange]] = []
    in_run = False  # the previous range is in runs[-1]
    for r in ranges:
        path = object_path(r.offload.tier, r.offload.key) if r.offload is not None else None
        if path is not None:
            (whole if whole_local_object(r) is not None else cut).append(str(path))
        elif in_run:
            runs[-1].append(r)
        else:
            runs.append([r])
        in_run = path is None
    frames = [_hot_run(spark, given, run) for run in runs]
    # Spark's Parquet reader (parquet-mr) checks each page's checksum only when asked.
    parquet = spark.read.option("parquet.page.verify-checksum.enabled", "true")
    if cut:  # only their rows in the snapshot: Spark skips the others' row groups by statistics
        from pyspark.sql import functions as F

        lo, hi = _offset(ranges[0].segment, ranges[0].first), _offset(ranges[-1].segment, ranges[-1].last)
        frames.insert(0, parquet.parquet(*cut).where(F.col("offset").between(lo, hi)).select(*SCHEMA.names))
    if whole:  # every row, unfiltered: exactly Spark's Parquet read
        frames.insert(0, parquet.parquet(*whole).select(*SCHEMA.names))
    return reduce(lambda a, b: a.unionByName(b), frames)


async def _snapshot(client: Client, opts: Options, name: str, start: Any) -> tuple[Any, list[SegmentRange]]:
    return await log_snapshot(client, opts, name, start, opts.ending, by_time=True)


def _offset(segment: int, entry_id: int) -> int:
    return segment << OFFSET_BITS | entry_id


def _hot_run(spark: Any, given: dict[str, Any], run: list[SegmentRange]) -> Any:
    """The connector's read of consecutive segment ranges of the snapshot, fixed by position."""
    reader = spark.read.format("bkframe")
    for key, value in given.items():
        if key.lower() not in _PLANNING:
            reader = reader.option(key, value)
    first, last = run[0], run[-1]
    reader = reader.option("startingPosition", f"{first.segment}:{first.first}")
    return reader.option("endingPosition", f"{last.segment}:{last.last + 1}").load()
