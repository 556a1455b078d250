"""The connector through Spark Connect: a Connect server (the one the ``pyspark`` package
ships) finds the ``bkframe`` data source on its own Python path, and a remote session writes
and reads records through it with nothing but the DataFrame API on the client side. The
stages on more data, and streams, are test_pipeline.py's and test_streaming.py's, on a local
session: a Connect session runs the same data source, in the server."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import bkframe
from bkframe.testing.cluster import Cluster
from bkframe.testing.servers import free_port, stop_process

from .connect_client import LOG, PAYLOADS
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
# The server's JVM start, then its Python workers': ~40 s alone on 2 cores; the suite's default
# limit (300 s) is short on a machine loaded to 20.
@pytest.mark.timeout(600)
def test_a_remote_session_writes_and_reads_through_the_data_source(connect_server: str, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", 1).start()
    try:
        with bkframe.connect(cluster.metadata) as bk:
            bk.logs.create(LOG, ensemble=1, write_quorum=1, ack_quorum=1)
            client = subprocess.run(
                [sys.executable, str(Path(__file__).with_name("connect_client.py")), connect_server, cluster.metadata],
                capture_output=True, text=True, timeout=500,
            )
            assert client.returncode == 0, client.stderr[-5000:]
            report = json.loads(client.stdout.strip().splitlines()[-1])
            assert report["remote"], "the client used a Spark Connect session"
            assert sorted(report["read"]) == sorted(PAYLOADS), report
            # What the server's data source wrote, read with the plain client.
            assert sorted(e.payload.decode() for e in bk.logs.reader(LOG).read()) == sorted(PAYLOADS)
    finally:
        cluster.close()
