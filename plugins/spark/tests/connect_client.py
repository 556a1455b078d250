"""A Spark Connect client in a process of its own: ``python connect_client.py SC_URL METADATA
CHECKPOINT`` runs the pipeline through the remote session and prints its report as JSON.
(A process holds one kind of session: the test process may hold a local one already.)"""

from __future__ import annotations

import json
import sys

from bkframe_spark.pipeline import run_pipeline
from pyspark.sql import SparkSession

#: One micro-batch (999 events and the sentinel, at most 1,000 a batch): the several-batch
#: stream is test_pipeline.py's, on a local session; here the point is the remote session.
ROWS = 999


def main(url: str, metadata: str, checkpoint: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        remote = spark.__class__.__module__.startswith("pyspark.sql.connect")
        report = run_pipeline(
            spark, metadata, rows=ROWS, checkpoint=checkpoint, out=lambda line: None, warm_up_first=False
        )
    finally:
        spark.stop()
    print(json.dumps({"remote": remote, **report}, default=str))


if __name__ == "__main__":
    main(*sys.argv[1:4])
