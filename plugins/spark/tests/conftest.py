"""One SparkSession (``local[2]``, 4 task attempts) and one 4-bookie cluster for every Spark
test: starting Spark costs seconds, so the tests share it and each uses logs of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bkframe_spark.connection import close_all
from bkframe_spark.session import local_session

import bkframe
from bkframe import BlockingClient
from bkframe.testing.cluster import Cluster
from bkframe.testing.servers import TEST_JVM_OPTIONS

#: The session's JVM, as the suite's other JVMs (bkframe.testing.servers.TEST_JVM_OPTIONS).
TEST_JVM = " ".join(TEST_JVM_OPTIONS[1:])


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # No skip when Java or pyspark is missing: the test fails and says what to install.
    session = local_session(2, task_attempts=4, app="bkframe-tests", java_options=TEST_JVM)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    close_all()


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
