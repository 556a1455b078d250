"""The connector through Spark Connect: a Connect server (the one the ``pyspark`` package
ships) finds the ``bkframe`` data source on its own Python path, and a remote session runs
the whole pipeline -- bulk load, exactly-once stream, batch read -- with nothing but the
DataFrame API on the client side."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bkframe_spark.pipeline import expected_counts

from bkframe.testing.cluster import Cluster
from bkframe.testing.servers import free_port, stop_process

from .connect_client import ROWS
from .standalone import SPARK_HOME, jvm_env_for_tests


@pytest.fixture
def connect_server(tmp_path: Path) -> Iterator[str]:
    """A Spark Connect server on ``local[2]``; yields its ``sc://`` URL."""
    port = free_port()
    jar = next((SPARK_HOME / "jars").glob("spark-connect_*.jar"))
    log_path = tmp_path / "connect-server.log"
    env = {**jvm_env_for_tests(), "PYSPARK_PYTHON": sys.executable}
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
             "--master", "local[2]", "--conf", f"spark.connect.grpc.binding.port={port}",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2", str(jar)],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        while "Spark Connect server started" not in log_path.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log_path.read_text(errors="replace")[-3000:]
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        stop_process(proc)


@pytest.mark.subprocess
# Two JVM starts (the server's, then its Python workers') and the four stages: ~150 s alone on
# 2 cores, 300 s (the suite's default limit) on a machine loaded to 20.
@pytest.mark.timeout(600)
def test_the_pipeline_runs_through_spark_connect(connect_server: str, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", 3).start(parallel=True)
    try:
        client = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("connect_client.py")), connect_server, cluster.metadata,
             str(tmp_path / "checkpoint")],
            capture_output=True, text=True, timeout=500,
        )
        assert client.returncode == 0, client.stderr[-5000:]
        report = json.loads(client.stdout.strip().splitlines()[-1])
        assert report["remote"], "the client used a Spark Connect session"
        # run_pipeline verified every count (PipelineError otherwise); what it did:
        assert report["verified"] is True
        assert report["stream"]["input_rows"] == ROWS + 1  # the events and the bulk load's sentinel
        assert report["read_back"]["counts"] == len(expected_counts(ROWS))
    finally:
        cluster.close()
