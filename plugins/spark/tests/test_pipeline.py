"""The Spark pipeline of ``bkframe sandbox --demo`` and ``examples/spark_pipeline.py``
(:mod:`bkframe_spark.pipeline`) on the suite's SparkSession and cluster, and its check."""

from __future__ import annotations

import json
import re

import pytest
from bkframe_spark.pipeline import CURSOR, FIRST_MS, PipelineError, expected_counts, run_pipeline, summary, verify
from pyspark.sql import SparkSession

from bkframe import BlockingClient
from bkframe.testing.cluster import Cluster


def test_verify_refuses_wrong_missing_and_duplicate_counts() -> None:
    rows = 2000
    good = [(start, who, n, amount) for (start, who), (n, amount) in expected_counts(rows).items()]
    assert len(good) == 14 and sum(n for _, _, n, _ in good) == rows  # 2 windows x 7 users
    verify(rows, good, "counts")
    (s, u, n, a), rest = good[0], good[1:]
    for bad, what in [
        ([(s, u, n + 1, a), *rest], f"window {s} {u}: expected {(n, a)}, got {(n + 1, a)}"),
        ([(s, u, n, a + 1), *rest], f"window {s} {u}: expected {(n, a)}, got {(n, a + 1)}"),
        (rest, f"window {s} {u}: expected {(n, a)}, got None"),
        ([*good, (s, u, n, a)], f"window {s} {u} written 2 times"),
    ]:
        with pytest.raises(PipelineError, match=re.escape(what)):
            verify(rows, bad, "counts")


@pytest.mark.spark
def test_pipeline_bulk_loads_streams_and_verifies(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    """The whole pipeline with 2,000 rows (3 micro-batches of at most 1,000 entries)."""
    names = {"events": "pipeline-events", "counts": "pipeline-counts"}
    lines: list[str] = []
    report = run_pipeline(spark, spark_cluster.metadata, rows=2000, out=lines.append, **names)
    assert report["verified"] is True
    assert report["stream"]["input_rows"] == 2001  # the events and the sentinel, each once
    assert report["stream"]["batches"] == 3 and report["replay"]["rows"] == 1000
    assert report["read_back"]["counts"] == 14
    assert summary(report).startswith("verified; rows/s: bulk load ")
    assert any("replay from a time" in line and "verified" in line for line in lines)
    # The output log read with the plain client, not only through Spark: a record per
    # (window, user), keyed by the user and stamped with the window's start.
    got = {(e.timestamp, e.key.decode() if e.key else None): json.loads(e.payload)
           for e in bk.logs.reader(names["counts"]).read()}
    assert {k: (v["count"], v["amount"]) for k, v in got.items()} == expected_counts(2000) and len(got) == 14
    # The events are records too: a user key, the event time, a property.
    first = bk.logs.reader(names["events"]).read(max_entries=1)[0]
    assert (first.key, first.timestamp, dict(first.properties)) == (b"user-0", FIRST_MS, {"source": "generator"})
    assert bk.logs.cursor(names["events"], CURSOR).position == bk.logs.end(names["events"])
    # The logs exist now: a second run says so instead of counting twice.
    with pytest.raises(PipelineError, match=r"exist already .* pass --replace"):
        run_pipeline(spark, spark_cluster.metadata, rows=10, **names)
