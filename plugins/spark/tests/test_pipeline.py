"""The Spark pipeline of ``bkframe sandbox --demo`` and ``examples/spark_pipeline.py``
(:mod:`bkframe_spark.pipeline`) on the suite's SparkSession and cluster, and its check."""

from __future__ import annotations

import json

import pytest
from bkframe_spark.pipeline import CURSOR, PipelineError, expected_counts, run_pipeline, verify
from pyspark.sql import SparkSession

from bkframe import BlockingClient
from bkframe.testing.cluster import Cluster


def test_verify_refuses_wrong_missing_and_duplicate_counts() -> None:
    rows = 2000
    good = [(start, key, n) for (start, key), n in expected_counts(rows).items()]
    assert len(good) == 14 and sum(n for _, _, n in good) == rows  # 2 windows x 7 keys
    verify(rows, good, "counts")
    (s, k, n), rest = good[0], good[1:]
    for bad, what in [
        ([(s, k, n + 1), *rest], f"window {s} key {k}: expected {n}, got {n + 1}"),
        (rest, f"window {s} key {k}: expected {n}, got None"),
        ([*good, (s, k, n)], f"window {s} key {k} written 2 times"),
    ]:
        with pytest.raises(PipelineError, match=what):
            verify(rows, bad, "counts")


@pytest.mark.spark
def test_pipeline_bulk_loads_streams_and_verifies(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    """The whole pipeline with 2,000 rows (3 micro-batches of at most 1,000 entries)."""
    names = {"events": "pipeline-events", "counts": "pipeline-counts"}
    lines: list[str] = []
    report = run_pipeline(spark, spark_cluster.metadata, rows=2000, out=lines.append, **names)
    assert report["verified"] is True
    assert report["stream"]["input_rows"] == 2001  # the events and the sentinel, each once
    assert report["read_back"]["counts"] == 14
    assert any("verified" in line for line in lines)
    # The output log read with the plain client, not only through Spark.
    got = [json.loads(e.payload) for e in bk.logs.reader(names["counts"]).read()]
    assert {(c["start"], c["key"]): c["count"] for c in got} == expected_counts(2000) and len(got) == 14
    assert bk.logs.cursor(names["events"], CURSOR).position == bk.logs.end(names["events"])
    # The logs exist now: a second run says so instead of counting twice.
    with pytest.raises(PipelineError, match=r"exist already .* pass --replace"):
        run_pipeline(spark, spark_cluster.metadata, rows=10, **names)
