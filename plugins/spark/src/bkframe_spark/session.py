"""A local SparkSession set up for bkframe (tests, the sandbox demo, the examples, the benchmark)."""

from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def local_session(threads: int = 2, *, task_attempts: int = 4, app: str = "bkframe") -> SparkSession:
    """``local[threads, task_attempts]``: Spark's local mode gives a failed task no second
    attempt unless asked (``local[N, F]``); a cluster retries 4 times by default."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise RuntimeError("Spark needs Java 17 or newer: install one (Debian: apt-get install default-jre-headless)")
    # Spark's Python workers must run this interpreter (the one with bkframe installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(f"local[{threads},{task_attempts}]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(threads))
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # A bulk-load task starts appending after its first Arrow batch: keep batches small
        # in bytes as well as in rows (64 KiB rows x 10,000 rows would be 640 MB).
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(8 << 20))
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.driver.memory", "2g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
