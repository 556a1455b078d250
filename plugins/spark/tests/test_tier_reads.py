"""Spark reads a two-tiered log in one query: offloaded segments from their objects in a
``file://`` tier (their ledgers deleted from the bookies, so nothing else could serve them),
hot segments from the bookies -- through the data source (row groups as partitions, a
position range and a time range picking row groups) and through ``read_log`` (Spark's own
Parquet reader on the objects). Every row equals what the bookies gave before the offload.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import attrs
import pytest
from bkframe_spark import read_log, tier_reading
from bkframe_spark.options import Options
from bkframe_spark.reading import EntryRange, plan_log, read_partition
from bkframe_spark.tier_reading import on_bookies, plan_objects
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bkframe import BlockingClient, Position, Record
from bkframe.client.logs.model import LogEntry
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import TierError, UnauthorizedError
from bkframe.testing.cluster import Cluster
from bkframe.tiering import segment_writer
from bkframe.tiering.footer import RowGroupSpan
from bkframe.tiering.object_format import ObjectOptions
from bkframe.tiering.segment_reader import SegmentObjectReader

pytestmark = pytest.mark.spark

PASSWORD = "tiers"
BASE_MS = 1_764_140_400_000
PER_SEGMENT = 1000
#: Small row groups, so that each object has several (~8) for the planning to choose from.
ROW_GROUP_BYTES = 32 << 10


def records(count: int) -> list[Record]:
    rng = random.Random(7)
    return [
        Record(rng.randbytes(rng.randrange(100, 400)), b"user-%d" % (i % 7) if i % 3 else None, BASE_MS + 1000 * i,
               {"n": str(i)} if i % 5 == 0 else None)
        for i in range(count)
    ]


@attrs.frozen
class Tiered:
    name: str
    #: Every entry as the bookies gave it before the offload.
    entries: list[LogEntry]
    #: Each offloaded segment's row groups, from its object's footer.
    groups: dict[int, tuple[RowGroupSpan, ...]]


@pytest.fixture(scope="module")
def tiered(spark_cluster: Cluster, bk: BlockingClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiered]:
    """Segments 0-2 offloaded and their ledgers deleted; segments 3 and 4 hot."""
    name = f"tiered-{uuid.uuid4().hex[:8]}"
    tier_root: Path = tmp_path_factory.mktemp("tier")
    bk.logs.create(name, password=PASSWORD.encode(), rollover_entries=PER_SEGMENT)
    with bk.logs.open_writer(name, password=PASSWORD.encode()) as writer:
        writer.append_many(records(4 * PER_SEGMENT + 150))
    entries = bk.logs.reader(name, password=PASSWORD.encode()).read()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(segment_writer, "ObjectOptions", functools.partial(ObjectOptions, row_group_bytes=ROW_GROUP_BYTES))
        result = bk.logs.offload(name, tier=tier_root.as_uri(), password=PASSWORD.encode(), until=Position(3, 0))
    assert [s.number for s in result.offloaded] == [0, 1, 2]
    tier = PluginManager().tier(tier_root.as_uri())
    groups = {}
    for seg in result.offloaded:
        assert seg.offload is not None
        groups[seg.number] = SegmentObjectReader(tier, seg.offload.key, size=seg.offload.size).footer().groups
        bk.delete_ledger(seg.ledger_id)  # from now on only the object holds the segment
    tier.close()
    assert all(len(g) >= 4 for g in groups.values())
    yield Tiered(name, entries, groups)


def load(spark: SparkSession, metadata: str, name: str, **options: Any) -> Any:
    r = spark.read.format("bkframe").option("metadata", metadata).option("log", name).option("password", PASSWORD)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


COLUMNS = ("log", "position", "segment", "ledger_id", "entry_id", "payload", "key", "properties", "offset")


def rows(df: Any) -> list[tuple[Any, ...]]:
    """The rows in position order, the timestamp as ms, the properties as a dict."""
    picked = df.select(*COLUMNS, F.unix_millis("timestamp").alias("ms")).collect()
    out = [(*(r[c] if c != "properties" else dict(r[c]) for c in COLUMNS), r.ms) for r in picked]
    return sorted(out, key=lambda row: row[COLUMNS.index("offset")])


def expected(t: Tiered, entries: list[LogEntry]) -> list[tuple[Any, ...]]:
    return [
        (t.name, str(e.position), e.position.segment, e.ledger_id, e.position.entry_id, e.payload, e.key,
         dict(e.properties), e.position.segment << 32 | e.position.entry_id, e.timestamp)
        for e in entries
    ]


def groups_for(t: Tiered, segment: int, first: int, last: int) -> int:
    return sum(1 for g in t.groups[segment] if g.last_entry_id >= first and g.first_entry_id <= last)


def test_one_query_reads_offloaded_segments_from_the_tier_and_hot_ones_from_the_bookies(
    spark: SparkSession, spark_cluster: Cluster, tiered: Tiered, bk: BlockingClient, tmp_path: Path
) -> None:
    m, t = spark_cluster.metadata, tiered
    # The whole log: every row once, byte for byte.
    assert rows(load(spark, m, t.name)) == expected(t, t.entries)
    # One partition per row group (bytesPerPartition=1): a position range (from 1:500) and a
    # timestamp filter (before entry 2:300's time, by the row groups' statistics) plan only
    # the row groups that hold them.
    first, before = Position(1, 500), BASE_MS + 1000 * (2 * PER_SEGMENT + 300)
    df = load(spark, m, t.name, bytesPerPartition=1, startingPosition=str(first), endingPosition="3:0")
    df = df.where(F.col("timestamp") < F.timestamp_millis(F.lit(before)))
    assert df.rdd.getNumPartitions() == groups_for(t, 1, 500, PER_SEGMENT - 1) + groups_for(t, 2, 0, 300)
    # A time range (found in the objects' footers and timestamp columns), from segment 2 into 4.
    lo, hi = BASE_MS + 1000 * 2345, BASE_MS + 1000 * 4100
    df = load(spark, m, t.name, startingTimestamp=lo, endingTimestamp=hi)
    assert rows(df) == expected(t, [e for e in t.entries if e.timestamp is not None and lo <= e.timestamp < hi])
    # Spark's own Parquet reader on the objects (segment 1 cut by the start, 2 whole), the
    # connector on the rest (3 and 4, cut by the end): the same rows, each once.
    df = read_log(spark, t.name, metadata=m, password=PASSWORD, startingPosition=str(first), endingTimestamp=hi)
    assert "FileScan parquet" in df._jdf.queryExecution().executedPlan().toString()
    assert rows(df) == expected(t, [e for e in t.entries if first <= e.position and e.timestamp < hi])
    # As a table (compacted=True): each key's latest row across tier and bookies, and every
    # row without a key.
    latest = {e.key: e for e in t.entries if e.key is not None}
    table = [e for e in t.entries if e.key is None or latest[e.key] is e]
    assert rows(read_log(spark, t.name, metadata=m, password=PASSWORD, compacted=True)) == expected(t, table)
    # A log compacted, then written on (a tombstone of a compacted key, updates, new keys):
    # its clean part read as it is, the rest through the window, the keys rewritten since
    # taken out of the clean part.
    table_log = f"table-{uuid.uuid4().hex[:6]}"
    bk.logs.create(table_log, ensemble=2, write_quorum=2, ack_quorum=2, rollover_entries=100, compaction="key")
    rng = random.Random(5)
    with bk.logs.open_writer(table_log) as writer:
        writer.append_many([Record(b"" if i % 41 == 40 else rng.randbytes(50), b"k%d" % (i % 37)) for i in range(400)])
    bk.logs.compact(table_log, work_dir=tmp_path)
    assert bk.logs.metadata(table_log).compacted_until == 4
    with bk.logs.open_writer(table_log) as writer:
        writer.append_many([Record(b"", b"k3"), *(Record(b"new-%d" % i, b"k%d" % (i % 50)) for i in range(36, 60)),
                            Record(b"no key")])
    everything = bk.logs.reader(table_log).read()
    last = {e.key: e for e in everything if e.key is not None}
    want = [e for e in everything if e.key is None or (last[e.key] is e and e.payload)]
    assert rows(read_log(spark, table_log, metadata=m, compacted=True)) == expected(attrs.evolve(t, name=table_log), want)
    # The log's password holds for the objects too (checked on the driver, as for any read).
    with pytest.raises(UnauthorizedError):
        read_log(spark, t.name, metadata=m, password="wrong")


def test_a_task_cuts_row_groups_into_batches_and_reads_around_a_tier_that_fails(
    spark_cluster: Cluster, bk: BlockingClient, tiered: Tiered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No Spark: the planning and a task's read as the driver and an executor run them."""
    m, t = spark_cluster.metadata, tiered
    # A row group reaches Spark cut into batches of about HANDOFF_BYTES: every row once, in order.
    opts = Options.parse({"metadata": m, "log": t.name, "password": PASSWORD})
    part = next(p for p in bk.run(plan_log, bk.client, opts, t.name, "earliest", None) if p.key)
    monkeypatch.setattr(tier_reading, "HANDOFF_BYTES", 8 << 10)
    batches = list(read_partition(opts, part))
    assert len(batches) > 1 and all(b.nbytes < 16 << 10 for b in batches)
    assert [p for b in batches for p in b.column("payload").to_pylist()] == [
        e.payload for e in t.entries if e.position.segment == part.segment and part.first <= e.position.entry_id <= part.last
    ]
    hot = [e for e in t.entries if e.position.segment == 3][:100]
    # Segment 3 as if offloaded to a tier that is gone (its ledger is on the bookies).
    gone = EntryRange(t.name, 3, hot[0].ledger_id, 0, 99, enveloped=True, tier=(tmp_path / "gone").as_uri(),
                      key="segments/x/0000000003-1.parquet", object_size=1000)
    assert bk.run(plan_objects, bk.client, [gone], 1 << 20) == [on_bookies(gone)]
    with pytest.raises(TierError, match="is only in tier"):
        bk.run(plan_objects, bk.client, [replace(gone, on_bookies=False)], 1 << 20)
    batches = list(read_partition(opts, gone))
    assert [p for b in batches for p in b.column("payload").to_pylist()] == [e.payload for e in hot]
    with pytest.raises(TierError, match="no longer on the bookies"):
        list(read_partition(opts, replace(gone, on_bookies=False)))
