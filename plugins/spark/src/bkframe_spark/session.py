"""SparkSessions set up for bkframe: local ones (tests, the sandbox demo, the examples, the
benchmark) and ones on a Spark cluster (a standalone master, executors on other machines)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOOPBACK = "127.0.0.1"


def local_session(
    threads: int = 2, *, task_attempts: int = 4, app: str = "bkframe", java_options: str = ""
) -> SparkSession:
    """``local[threads, task_attempts]``, listening on loopback only: Spark's local mode gives a failed task no second
    attempt unless asked (``local[N, F]``); a cluster retries 4 times by default.
    ``java_options``: for the JVM it starts (``spark.driver.extraJavaOptions``)."""
    # Spark looks up the machine's address as its JVM starts, before any setting is read, and
    # warns when the hostname resolves to loopback (Debian's 127.0.1.1): for a local session
    # the address is loopback on purpose, which SPARK_LOCAL_IP tells it first.
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    builder = _configured(f"local[{threads},{task_attempts}]", app, threads)
    # Everything runs on this machine: the driver listens on loopback only, not on the
    # address Spark would pick (the first interface's, reachable from the network).
    builder = builder.config("spark.driver.bindAddress", LOOPBACK).config("spark.driver.host", LOOPBACK)
    if java_options:
        builder = builder.config("spark.driver.extraJavaOptions", java_options)
    return builder.getOrCreate()


def cluster_session(
    master: str, *, app: str = "bkframe", driver_host: str = "", partitions: int = 4, executor_memory: str = "512m"
) -> SparkSession:
    """A session on a Spark cluster (``spark://HOST:7077``). Executors run on the workers'
    machines: each needs bkframe and bkframe-spark installed for the Python that
    ``spark.pyspark.python`` names (here: this interpreter's path, the same on every machine),
    and must reach the metadata store and every bookie's advertised address.
    ``driver_host``: the address executors connect back to (the driver binds it too)."""
    builder = _configured(master, app, partitions).config("spark.executor.memory", executor_memory)
    builder = builder.config("spark.pyspark.python", sys.executable)
    if driver_host:
        builder = builder.config("spark.driver.host", driver_host).config("spark.driver.bindAddress", driver_host)
    return builder.getOrCreate()


def _configured(master: str, app: str, partitions: int) -> SparkSession.Builder:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs Java 17 or newer: install one (Debian: apt-get install default-jre-headless)")
    # Spark's Python workers must run this interpreter (the one with bkframe installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # A bulk-load task starts appending after its first Arrow batch: keep batches small
        # in bytes as well as in rows (64 KiB rows x 10,000 rows would be 640 MB).
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(8 << 20))
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        # Whole Python tracebacks: a simplified one drops the causes, and bkframe's errors
        # put their message first as a cause (bkframe_spark.first_line).
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
    )
