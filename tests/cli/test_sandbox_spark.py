"""The Spark part of ``bkframe sandbox --demo``: the pipeline (``bkframe_spark.pipeline``) on
a real cluster and a real SparkSession, its verification, and the sandbox's clear error when
Spark cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bkframe_spark.pipeline import PipelineError, expected_counts, run_pipeline, verify

import bkframe
from bkframe.testing.cluster import Cluster


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A ``local[2]`` session; one that is running already (another suite's) is used and left
    running: stopping it would stop it under its owner."""
    from bkframe_spark.connection import close_all
    from bkframe_spark.session import local_session
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    session = local_session(2, app="bkframe-pipeline-test")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    close_all()


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
def test_spark_pipeline_bulk_loads_streams_and_verifies(spark: Any, cluster_factory: Callable[..., Cluster]) -> None:
    """The whole pipeline with 2,000 rows (3 micro-batches of at most 1,000 entries)."""
    metadata = cluster_factory(3).metadata
    lines: list[str] = []
    report = run_pipeline(spark, metadata, rows=2000, out=lines.append)
    assert report["verified"] is True
    assert report["stream"]["input_rows"] == 2001  # the events and the sentinel, each once
    assert report["read_back"]["counts"] == 14
    assert any("verified" in line for line in lines)
    # Check the output log with the plain client too, not only through Spark.
    with bkframe.connect(metadata) as bk:
        got = [json.loads(e.payload) for e in bk.logs.reader("counts").read()]
        assert {(c["start"], c["key"]): c["count"] for c in got} == expected_counts(2000) and len(got) == 14
        cursor = bk.logs.cursor("events", "pipeline")
        assert cursor.position == bk.logs.end("events")
    # The logs exist now: a second run says so instead of counting twice.
    with pytest.raises(PipelineError, match=r"exist already .* pass --replace"):
        run_pipeline(spark, metadata, rows=10)


def test_sandbox_demo_says_what_to_install_when_java_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "empty")  # no java on it
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "sandbox", "--data-dir", str(tmp_path / "data"), "--demo"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode != 0
    assert "needs Java 17" in proc.stderr and "default-jre-headless" in proc.stderr and "--no-spark" in proc.stderr
    assert not (tmp_path / "data" / "sandbox.json").exists()  # refused before any bookie started
