"""The connector through Spark Connect: a Connect server (the one the ``pyspark`` package
ships, as a plugin of the suite's session: conftest.py) finds the ``bkframe`` data source on
its own Python path, and a remote session in a process of its own writes and reads records
through it with nothing but the DataFrame API on the client side. The stages on more data,
and streams, are test_pipeline.py's and test_streaming.py's, on a local session: a Connect
session runs the same data source, in the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bkframe
from bkframe.testing.cluster import Cluster

from .connect_client import LOG, PAYLOADS


@pytest.mark.spark
# The remote client's start, then the server's Python workers': tens of seconds on a loaded
# machine; the suite's default limit (300 s) is short on a machine loaded to 20.
@pytest.mark.timeout(600)
def test_a_remote_session_writes_and_reads_through_the_data_source(spark_connect: str, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path / "cluster", 1).start()
    try:
        with bkframe.connect(cluster.metadata) as bk:
            bk.logs.create(LOG, ensemble=1, write_quorum=1, ack_quorum=1)
            client = subprocess.run(
                [sys.executable, str(Path(__file__).with_name("connect_client.py")), spark_connect, cluster.metadata],
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
