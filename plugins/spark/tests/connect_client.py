"""A Spark Connect client in a process of its own: ``python connect_client.py SC_URL METADATA``
writes a few records to the log ``connect`` and reads them back, both through the ``bkframe``
data source on a remote session, and prints what it read as JSON. (A process holds one kind
of session: the test process may hold a local one already.) The log exists: the test made it."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

LOG = "connect"
#: A few records: what a remote session adds is the path, not the volume (the connector's
#: stages on volume, and streams, are test_pipeline.py's, test_batch.py's and
#: test_streaming.py's, on a local session running the same data source).
PAYLOADS = ["one", "two", "three"]


def main(url: str, metadata: str) -> None:
    spark = SparkSession.builder.remote(url).getOrCreate()
    try:
        remote = spark.__class__.__module__.startswith("pyspark.sql.connect")
        spark.createDataFrame([(p,) for p in PAYLOADS], "payload string").write.format("bkframe") \
            .option("metadata", metadata).option("log", LOG).mode("append").save()
        df = spark.read.format("bkframe").option("metadata", metadata).option("log", LOG).load()
        read = [r[0] for r in df.select(F.col("payload").cast("string")).collect()]
    finally:
        spark.stop()
    print(json.dumps({"remote": remote, "read": read}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
