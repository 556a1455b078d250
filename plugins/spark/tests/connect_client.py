"""A Spark Connect client in a process of its own: ``python connect_client.py SC_URL METADATA
CHECKPOINT`` runs the pipeline through the remote session and prints its report as JSON.
(A process holds one kind of session: the test process may hold a local one already.)"""

from __future__ import annotations

import json
import sys

from bkframe_spark.pipeline import run_pipeline
from pyspark.sql import SparkSession


def main(url: str, metadata: str, checkpoint: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        remote = spark.__class__.__module__.startswith("pyspark.sql.connect")
        report = run_pipeline(
            spark, metadata, rows=2000, checkpoint=checkpoint, out=lambda line: None, warm_up_first=False
        )
    finally:
        spark.stop()
    print(json.dumps({"remote": remote, **report}, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
