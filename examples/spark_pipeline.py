"""A Spark pipeline on bkframe logs, against any running cluster.

    python examples/spark_pipeline.py --metadata sqlite:///path/metadata.db [--rows 20000] [--replace]
                                      [--events events] [--counts counts]
                                      [--master spark://HOST:7077 --driver-host ADDRESS]

(``./scripts/sandbox`` starts a local cluster and prints its metadata URI; so does
``sandbox-data/sandbox.json``.) On Spark ``local[2]`` -- or, with ``--master``, on a Spark
cluster whose executors run on other machines (docs/deployment.md) -- with the ``bkframe``
data source:

1. bulk-load ``--rows`` generated purchase events into the log ``events`` as records -- the
   user as the key, the event time as the timestamp, ``{"id", "amount"}`` as the payload
   (a batch write: every task writes a ledger, one commit makes them all visible);
2. stream ``events`` through a count and a sum per 10-second event-time window and user,
   by the records' ``timestamp`` and ``key`` columns, into the log ``counts`` (the
   exactly-once sink; the source advances the durable cursor ``pipeline``);
3. replay from a time: read ``events`` from the middle of the dataset on
   (``startingTimestamp``, found without a scan) and sum each user's amounts;
4. read ``counts`` back with a batch read and check every count against the dataset.

It prints each stage's rate: rows per second of the job itself (Spark's Python workers are
started by a warm-up through the connector first, and the stream's rate is its micro-batches' processing
time). The stages' Spark code is in ``bkframe_spark.pipeline``
(``plugins/spark/src/bkframe_spark/pipeline.py``), which ``bkframe sandbox --demo`` runs too;
this script is the shape of a program of your own: make a session, run, stop.
"""

from __future__ import annotations

import argparse
import os
import sys

from bkframe_spark.connection import close_all
from bkframe_spark.pipeline import run_pipeline, summary
from bkframe_spark.session import cluster_session, local_session

from bkframe.errors import BKError


def main() -> int:
    parser = argparse.ArgumentParser(description="Bulk load, stream and read back bkframe logs with Spark.")
    parser.add_argument("--metadata", default=os.environ.get("BKFRAME_METADATA"),
                        help="the cluster's metadata URI (default: $BKFRAME_METADATA)")
    parser.add_argument("--rows", type=int, default=20_000, help="events to generate")
    parser.add_argument("--events", default="events", help="the log the events are loaded into")
    parser.add_argument("--counts", default="counts", help="the log the counts are written to")
    parser.add_argument("--replace", action="store_true", help="delete those two logs first if they exist")
    parser.add_argument("--master", default="", help="a Spark cluster's master URL, e.g. spark://HOST:7077 (default: local[2])")
    parser.add_argument("--driver-host", default="", help="with --master: the address executors reach this driver at")
    parser.add_argument("--no-warm-up", action="store_true",
                        help="skip the warm-up job (sooner done; the bulk load's rate then includes Spark's start-up)")
    args = parser.parse_args()
    if not args.metadata:
        parser.error("give --metadata URI (e.g. sqlite:///path/metadata.db) or set $BKFRAME_METADATA")

    # Spark finds the "bkframe" format itself (the pyspark_bkframe package), here and on executors.
    if args.master:
        spark = cluster_session(args.master, app="bkframe-example", driver_host=args.driver_host)
    else:
        spark = local_session(2, app="bkframe-example")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        report = run_pipeline(
            spark, args.metadata, rows=args.rows, events=args.events, counts=args.counts, replace=args.replace,
            warm_up_first=not args.no_warm_up,
        )
    except BKError as e:  # a log exists already, a count is wrong, ...
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
        close_all()  # the bkframe clients the connector opened in this process
    print(summary(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
