"""A Spark pipeline on bkframe logs: bulk load, streaming aggregation, batch read, verified.

What ``bkframe sandbox --demo`` runs and ``examples/spark_pipeline.py`` shows, on any
cluster (``python -m bkframe_spark.pipeline --metadata URI [--rows N]``):

1. **bulk load**: a generated dataset of ``rows`` events ``{"id", "key", "ts"}`` is written
   to the log ``events`` as one Spark batch write (one ledger per task, one commit);
2. **stream**: a streaming query reads ``events`` (advancing the durable cursor
   ``pipeline``), counts events per 10-second event-time window and key, and writes each
   count to the log ``counts`` through the exactly-once sink;
3. **read back**: a batch read of ``counts``, checked against the counts computed here in
   plain Python: every (window, key) once, with its count, summing to ``rows``.

Python data sources only support the ``append`` output mode, so the aggregation runs on
event time with a watermark: a window is written once the watermark passes its end. The
last event of the dataset is a *sentinel* far in the future, appended after the bulk load
by an ordinary log writer, so the watermark closes every window of the dataset; its own
window never closes and is never written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from bkframe import BlockingClient, connect
from bkframe.errors import BKError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Event ``id`` has key ``id % KEYS`` and event time ``FIRST_TS + id // EVENTS_PER_SECOND``.
KEYS = 7
FIRST_TS = 1_700_000_000
EVENTS_PER_SECOND = 100
WINDOW_S = 10
#: The last event: its event time moves the watermark past every window of the dataset.
SENTINEL = b'{"id": -1, "key": -1, "ts": "2030-01-01T00:00:00Z"}'
#: The durable cursor the streaming query advances on ``events`` as it commits batches.
CURSOR = "pipeline"
EVENT_SCHEMA = "id long, key long, ts timestamp"
COUNT_SCHEMA = "start long, key long, count long"

Out = Callable[[str], None]


class PipelineError(BKError):
    """The pipeline could not run (its logs exist already) or read back wrong counts."""


def expected_counts(rows: int) -> dict[tuple[int, int], int]:
    """(window start in epoch seconds, key) -> how many of the ``rows`` events fall there."""
    counts: Counter[tuple[int, int]] = Counter()
    for i in range(rows):
        ts = FIRST_TS + i // EVENTS_PER_SECOND
        counts[(ts - ts % WINDOW_S, i % KEYS)] += 1
    return dict(counts)


# -- the logs -----------------------------------------------------------------------------


def prepare_logs(bk: BlockingClient, metadata: str, names: Sequence[str], *, replace: bool, out: Out) -> None:
    """Create the pipeline's logs, empty. Existing ones are deleted with ``replace``, else
    an error: a pipeline that appended to an earlier run's logs would count twice."""
    logs = set(bk.logs.list_logs())
    existing = [name for name in names if name in logs]
    if existing and not replace:
        raise PipelineError(
            f"log(s) {', '.join(repr(n) for n in existing)} exist already on {metadata}: "
            "pass --replace to delete them first, or name other logs with --events/--counts"
        )
    for name in existing:
        bk.logs.delete(name)
        out(f"  deleted log {name!r} of an earlier run")
    bookies = len(bk.run(bk.client.metadata.list_bookies))
    if bookies == 0:
        raise PipelineError(f"no bookie is registered on {metadata}: start the cluster first")
    # Segments on up to 3 bookies, each entry on 2 (the log default), fewer on a smaller cluster.
    ensemble = min(3, bookies)
    quorum = min(2, ensemble)
    for name in names:
        bk.logs.create(name, ensemble=ensemble, write_quorum=quorum, ack_quorum=quorum)
    out(f"  created logs {', '.join(repr(n) for n in names)}: E={ensemble} W={quorum} A={quorum}")


def log_entries(bk: BlockingClient, name: str) -> int:
    return sum((bk.logs.info(name)).entries.values())


# -- the stages -----------------------------------------------------------------------------


def bulk_load(spark: SparkSession, metadata: str, log: str, rows: int, partitions: int = 4) -> None:
    """One batch write: each of ``partitions`` tasks writes its rows to a ledger of its own,
    the driver commits them all to ``log`` at once. Range partitions hold consecutive ids
    and are committed in partition order, so the events land in id order."""
    events = spark.range(0, rows, numPartitions=partitions).selectExpr(
        f"to_json(named_struct('id', id, 'key', id % {KEYS}, "
        f"'ts', timestamp_seconds({FIRST_TS} + id div {EVENTS_PER_SECOND}))) as payload"
    )
    events.write.format("bkframe").option("metadata", metadata).option("log", log).mode("append").save()


def stream_counts(
    spark: SparkSession, metadata: str, source: str, sink: str, checkpoint: str, max_per_batch: int
) -> int:
    """Count events per window and key from ``source`` into ``sink``, until ``source``'s end
    as the query starts (Trigger.AvailableNow). Returns the input rows Spark processed."""
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("bkframe").option("metadata", metadata).option("log", source)
        .option("maxEntriesPerTrigger", max_per_batch).option("cursor", CURSOR).load()
    )
    events = stream.select(F.from_json(F.col("payload").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    counts = (
        events.withWatermark("ts", "1 minute")
        .groupBy(F.window("ts", f"{WINDOW_S} seconds"), "key").count()
        # Epoch seconds: the same whatever the session's time zone.
        .select(F.to_json(F.struct(F.col("window.start").cast("long").alias("start"), "key", "count")).alias("payload"))
    )
    query = (
        counts.writeStream.format("bkframe").option("metadata", metadata).option("log", sink)
        .outputMode("append").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    # The property, not the dict key: through Spark Connect the key may hold None (the
    # property then sums the sources').
    return sum(int(p.numInputRows or 0) for p in query.recentProgress)


def read_counts(spark: SparkSession, metadata: str, log: str) -> list[tuple[int, int, int]]:
    """Every (window start, key, count) in ``log``, as written (duplicates kept)."""
    from pyspark.sql import functions as F

    df = spark.read.format("bkframe").option("metadata", metadata).option("log", log).load()
    rows = df.select(F.from_json(F.col("payload").cast("string"), COUNT_SCHEMA).alias("c")).select("c.*").collect()
    return [(int(r["start"]), int(r["key"]), int(r["count"])) for r in rows]


def verify(rows: int, got: Sequence[tuple[int, int, int]], log: str) -> None:
    """Raise :class:`PipelineError` unless ``got`` holds each expected (window, key) once,
    with its expected count."""
    expected = expected_counts(rows)
    seen: dict[tuple[int, int], int] = {}
    twice = []
    for start, key, count in got:
        if (start, key) in seen:
            twice.append((start, key))
        seen[(start, key)] = count
    problems = [f"window {s} key {k} written {1 + sum(t == (s, k) for t in twice)} times" for s, k in twice[:3]]
    wrong = sorted(k for k in expected.keys() | seen.keys() if expected.get(k) != seen.get(k))
    problems += [f"window {s} key {k}: expected {expected.get((s, k))}, got {seen.get((s, k))}" for s, k in wrong[:5]]
    total = sum(c for _, _, c in got)
    if problems or total != rows:
        raise PipelineError(
            f"log {log!r} holds wrong counts ({len(got)} rows summing to {total}, expected {len(expected)} "
            f"summing to {rows}): " + "; ".join(problems)
        )


# -- the pipeline -----------------------------------------------------------------------------


def run_pipeline(
    spark: SparkSession,
    metadata: str,
    *,
    rows: int = 20_000,
    events: str = "events",
    counts: str = "counts",
    replace: bool = False,
    checkpoint: str | None = None,
    out: Out = print,
) -> dict[str, Any]:
    """Run the three stages on ``spark`` against the cluster at ``metadata``, verify, and
    return what was done: logs, rows, seconds and rows/s per stage. Raises
    :class:`PipelineError` if a count is wrong. The caller owns (and stops) ``spark``."""
    if rows < 1:
        raise PipelineError(f"rows must be at least 1, got {rows}")
    report: dict[str, Any] = {"metadata": metadata, "rows": rows, "events": events, "counts": counts}
    with connect(metadata) as bk, tempfile.TemporaryDirectory(prefix="bkframe-pipeline-") as scratch:
        prepare_logs(bk, metadata, (events, counts), replace=replace, out=out)

        start = time.perf_counter()
        bulk_load(spark, metadata, events, rows)
        load_s = time.perf_counter() - start
        with bk.logs.open_writer(events) as writer:
            sentinel = writer.append(SENTINEL)
        loaded = log_entries(bk, events)
        if loaded != rows + 1:
            raise PipelineError(f"log {events!r} holds {loaded} entries after the bulk load, expected {rows} + 1")
        out(f"  bulk load: {rows} events into log {events!r} in {load_s:.2f} s: {rows / load_s:,.0f} rows/s "
            f"(in a new session, this job also starts Spark's Python workers); sentinel at {sentinel}")
        report["bulk_load"] = {"seconds": load_s, "rows_per_s": rows / load_s}

        max_per_batch = max(1000, rows // 5)
        start = time.perf_counter()
        streamed = stream_counts(spark, metadata, events, counts, checkpoint or os.path.join(scratch, "checkpoint"),
                                 max_per_batch)
        stream_s = time.perf_counter() - start
        lag = {c.cursor.name: c.lag for c in bk.logs.info(events).cursors}.get(CURSOR)
        out(f"  stream: {streamed} events through a {WINDOW_S} s window count per key into log {counts!r} "
            f"in {stream_s:.2f} s: {streamed / stream_s:,.0f} rows/s ({max_per_batch} per micro-batch; "
            f"cursor {CURSOR!r} lag {lag})")
        if streamed != rows + 1 or lag != 0:
            raise PipelineError(
                f"the streaming query read {streamed} events from log {events!r} (expected {rows + 1}) "
                f"and left its cursor {CURSOR!r} {lag} entries behind the end (expected 0)"
            )
        report["stream"] = {"seconds": stream_s, "rows_per_s": streamed / stream_s, "input_rows": streamed}

        start = time.perf_counter()
        got = read_counts(spark, metadata, counts)
        read_s = time.perf_counter() - start
        verify(rows, got, counts)
        out(f"  read back: {len(got)} counts from log {counts!r} in {read_s:.2f} s: {len(got) / read_s:,.0f} rows/s; "
            f"each (window, key) once with its expected count, summing to {rows}: verified")
        report["read_back"] = {"seconds": read_s, "rows_per_s": len(got) / read_s, "counts": len(got)}
    report["verified"] = True
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bkframe_spark.pipeline", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    parser.add_argument("--metadata", default=os.environ.get("BKFRAME_METADATA"),
                        help="the cluster's metadata URI (default: $BKFRAME_METADATA)")
    parser.add_argument("--rows", type=int, default=20_000, help="events to generate (default 20000)")
    parser.add_argument("--events", default="events", help="the log the events are loaded into")
    parser.add_argument("--counts", default="counts", help="the log the counts are written to")
    parser.add_argument("--replace", action="store_true", help="delete those logs first if they exist")
    parser.add_argument("--report", help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    if not args.metadata:
        parser.error("give --metadata URI (e.g. sqlite:///path/metadata.db) or set $BKFRAME_METADATA")
    from bkframe_spark.connection import close_all
    from bkframe_spark.session import local_session

    try:
        with connect(args.metadata):  # a wrong URI fails now, not after Spark has started
            pass
        spark = local_session(2, app="bkframe-pipeline")
    except (BKError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    spark.sparkContext.setLogLevel("ERROR")
    try:
        report = run_pipeline(spark, args.metadata, rows=args.rows, events=args.events, counts=args.counts,
                              replace=args.replace, out=lambda line: print(line, flush=True))
    except BKError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
        close_all()
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
