"""The data source's partitions of a compacted log (docs/compaction.md): planned on the
driver and read as a task reads them, each compacted segment through its index -- no Spark
session needed. Every partition's rows are the records the log reader gives, at their
positions, however the segments are cut into partitions."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from bkframe_spark.options import Options
from bkframe_spark.reading import log_ranges, log_snapshot, read_partition, split
from bkframe_spark.tier_reading import plan_objects

from bkframe import BlockingClient, Position, Record
from bkframe.testing.cluster import Cluster

pytestmark = pytest.mark.spark


def test_partitions_of_compacted_segments_read_the_kept_records_at_their_positions(
    spark_cluster: Cluster, bk: BlockingClient
) -> None:
    name = "spark-compacted"
    bk.logs.create(name, ensemble=2, write_quorum=2, ack_quorum=2, rollover_entries=100, compaction="key")
    with bk.logs.open_writer(name) as writer:
        writer.append_many([Record(b"v%d" % i, None if i % 10 == 0 else b"k%d" % (i % 23)) for i in range(450)])
    with tempfile.TemporaryDirectory() as work:
        result = bk.logs.compact(name, work_dir=Path(work))
    assert len(result.rewritten) == 5 and result.records_dropped > 300
    expected = [(str(e.position), e.key, e.payload) for e in bk.logs.reader(name).read()]
    opts = Options.parse({"metadata": spark_cluster.metadata, "log": name})
    record, ranges = bk.run(log_snapshot, bk.client, opts, name, "earliest", None)
    for per_partition in (1000, 7):  # whole segments, and cuts that fall on dropped positions
        parts = split(log_ranges(record, ranges), per_partition, 1 << 30)
        assert all(p.compacted_kept >= 0 for p in parts)
        got = [
            (position, key, payload)
            for part in parts for batch in read_partition(opts, part)
            for position, key, payload in zip(*(batch.column(c).to_pylist() for c in ("position", "key", "payload")))
        ]
        assert got == expected
    # Offloaded with their gaps: partitions of the objects' row groups read the same rows.
    tier = Path(tempfile.mkdtemp(prefix="spark-compacted-tier-"))
    bk.logs.offload(name, tier=tier.as_uri())
    record, ranges = bk.run(log_snapshot, bk.client, opts, name, "earliest", None)
    parts = bk.run(plan_objects, bk.client, log_ranges(record, ranges), 4096)
    assert all(p.key for p in parts)  # every partition read from an object
    got = [
        (position, key, payload)
        for part in parts for batch in read_partition(opts, part)
        for position, key, payload in zip(*(batch.column(c).to_pylist() for c in ("position", "key", "payload")))
    ]
    assert got == expected
    # A partition wholly inside dropped positions reads nothing.
    kept = {Position.parse(p) for p, _, _ in expected}
    gap = next(Position(0, i) for i in range(100) if Position(0, i) not in kept and Position(0, i + 1) not in kept)
    part = next(p for p in log_ranges(record, ranges) if p.segment == 0)
    from dataclasses import replace

    assert [b.num_rows for b in read_partition(opts, replace(part, first=gap.entry_id, last=gap.entry_id + 1))] in ([], [0])
