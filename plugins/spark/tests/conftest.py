"""One SparkSession (``local[2]``, 4 task attempts) and one 4-bookie cluster for every Spark
test: starting Spark costs seconds, so the tests share it and each uses logs of its own. The
session's JVM also serves Spark Connect (the Connect plugin the ``pyspark`` package ships, on
loopback): test_connect.py's remote session uses it instead of a Connect server JVM of its own."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bkframe_spark.connection import close_all
from bkframe_spark.session import local_session
from pyspark.sql import SparkSession

import bkframe
from bkframe import BlockingClient
from bkframe.testing.cluster import Cluster
from bkframe.testing.servers import TEST_JVM_OPTIONS, free_port

#: The session's JVM, as the suite's other JVMs (bkframe.testing.servers.TEST_JVM_OPTIONS).
TEST_JVM = " ".join(TEST_JVM_OPTIONS[1:])


#: Spark Connect in the session's JVM (spark-submit options: local_session() takes no others).
CONNECT = "--conf spark.plugins=org.apache.spark.sql.connect.SparkConnectPlugin" \
    " --conf spark.connect.grpc.binding.address=127.0.0.1 --conf spark.connect.grpc.binding.port={port}"


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # No skip when Java or pyspark is missing: the test fails and says what to install.
    before = os.environ.get("PYSPARK_SUBMIT_ARGS")
    os.environ["PYSPARK_SUBMIT_ARGS"] = f"{CONNECT.format(port=free_port())} {before or 'pyspark-shell'}"
    try:
        session = local_session(2, task_attempts=4, app="bkframe-tests", java_options=TEST_JVM)
    finally:
        if before is None:
            del os.environ["PYSPARK_SUBMIT_ARGS"]
        else:
            os.environ["PYSPARK_SUBMIT_ARGS"] = before
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    close_all()


@pytest.fixture(scope="session")
def spark_connect(spark: SparkSession) -> str:
    """The ``sc://`` URL of the Spark Connect server in the session's JVM, once it accepts."""
    port = int(spark.sparkContext.getConf().get("spark.connect.grpc.binding.port"))
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            return f"sc://127.0.0.1:{port}"
        except OSError:
            assert time.monotonic() < deadline, f"Spark Connect is not listening on port {port}"
            time.sleep(0.2)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root: Path = tmp_path_factory.mktemp("spark-cluster")
    cluster = Cluster(root, 4).start(parallel=True)
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def bk(spark_cluster: Cluster) -> Iterator[BlockingClient]:
    """The test's own client (the connector's clients live in Spark's processes)."""
    with bkframe.connect(spark_cluster.metadata) as client:
        yield client
