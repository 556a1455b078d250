"""A Spark pipeline on bkframe logs: keyed, timestamped events in, windowed counts out, verified.

What ``bkframe sandbox --demo`` runs and ``examples/spark_pipeline.py`` shows, on any
cluster (``python -m bkframe_spark.pipeline --metadata URI [--rows N]``):

1. **bulk load**: ``rows`` generated purchase events are written to the log ``events`` as
   one Spark batch write (one ledger per task, one commit). Each row is a *record*: its
   ``key`` is the user, its ``timestamp`` the event time, its payload ``{"id", "amount"}``,
   a property names the source;
2. **stream**: a streaming query reads ``events`` (advancing the durable cursor
   ``pipeline``) and counts events and sums amounts per 10-second event-time window and
   user -- by the records' own ``timestamp`` and ``key`` columns, no payload parsing for
   either -- into the log ``counts`` through the exactly-once sink (each count a record
   keyed by its user, stamped with its window's start);
3. **replay from a time**: a batch read of ``events`` from a moment in the middle of the
   dataset (``startingTimestamp``: the segment it falls in is found without reading the
   ones before) sums each user's amounts since then, checked against the dataset;
4. **read back**: a batch read of ``counts``, checked: every (window, user) once, with its
   count and sum.

Python data sources only support the ``append`` output mode, so the aggregation runs with a
watermark: a window is written once the watermark passes its end. The last event is a
*sentinel* with an event time far in the future, appended after the bulk load by an
ordinary log writer, so the watermark closes every window of the dataset; its own window
never closes and is never written.

Rates are the jobs' own: a warm-up (a row written to and read from a scratch log) starts
Spark's Python workers before anything is timed, the stream's rate is its micro-batches'
processing time (Spark's progress reports), and the small outputs (the counts) are
reported as counts and seconds, not as a rate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bkframe import BlockingClient, connect
from bkframe.errors import BKError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: Event ``id``: user ``id % USERS``, amount ``id % 100``, event time ``FIRST_MS + id * STEP_MS``.
USERS = 7
FIRST_MS = 1_764_140_400_000  # 2025-11-26 07:00:00 UTC
STEP_MS = 10  # 100 events a second
WINDOW_S = 10
#: The last event: its event time moves the watermark past every window of the dataset.
SENTINEL_KEY = b"end-of-data"
SENTINEL_MS = FIRST_MS + 10 * 365 * 86_400_000
#: The durable cursor the streaming query advances on ``events`` as it commits batches.
CURSOR = "pipeline"
EVENT_SCHEMA = "id long, amount long"
COUNT_SCHEMA = "count long, amount long"

Out = Callable[[str], None]


class PipelineError(BKError):
    """The pipeline could not run (its logs exist already) or read back wrong results."""


def user(i: int) -> str:
    return f"user-{i % USERS}"


def event_ms(i: int) -> int:
    return FIRST_MS + i * STEP_MS


def expected_counts(rows: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(window start in ms, user) -> (events, summed amount) of the ``rows`` events."""
    counts: dict[tuple[int, str], list[int]] = defaultdict(lambda: [0, 0])
    for i in range(rows):
        ms = event_ms(i)
        got = counts[(ms - ms % (WINDOW_S * 1000), user(i))]
        got[0] += 1
        got[1] += i % 100
    return {k: (n, a) for k, (n, a) in counts.items()}


def expected_since(rows: int, since_ms: int) -> dict[str, int]:
    """user -> summed amount of the events at or after ``since_ms``."""
    sums: Counter[str] = Counter()
    for i in range(rows):
        if event_ms(i) >= since_ms:
            sums[user(i)] += i % 100
    return dict(sums)


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


def warm_up(spark: SparkSession, bk: BlockingClient, metadata: str, log: str) -> None:
    """A row written to and read back from a scratch log through the connector, so that no
    timed stage pays for Spark starting its Python workers (each imports pyspark, pyarrow and
    bkframe and opens a client: seconds, once per session) -- the rates are the jobs' own."""
    bk.logs.create(log, ensemble=1, write_quorum=1, ack_quorum=1)
    try:
        spark.range(0, 2, numPartitions=2).selectExpr("'warm-up' as payload").write.format("bkframe") \
            .option("metadata", metadata).option("log", log).mode("append").save()
        spark.read.format("bkframe").option("metadata", metadata).option("log", log).load().count()
    finally:
        bk.logs.delete(log)


def bulk_load(spark: SparkSession, metadata: str, log: str, rows: int, partitions: int = 4) -> None:
    """One batch write: each of ``partitions`` tasks writes its rows to a ledger of its own,
    the driver commits them all to ``log`` at once. Range partitions hold consecutive ids
    and are committed in partition order, so the events land in id (and time) order."""
    from pyspark.sql import functions as F

    events = spark.range(0, rows, numPartitions=partitions).select(
        F.format_string("user-%d", F.col("id") % USERS).alias("key"),
        F.timestamp_millis(F.lit(FIRST_MS) + F.col("id") * STEP_MS).alias("timestamp"),
        F.to_json(F.struct(F.col("id"), (F.col("id") % 100).alias("amount"))).alias("payload"),
        F.create_map(F.lit("source"), F.lit("generator")).alias("properties"),
    )
    events.write.format("bkframe").option("metadata", metadata).option("log", log).mode("append").save()


def stream_counts(
    spark: SparkSession, metadata: str, source: str, sink: str, checkpoint: str, max_per_batch: int
) -> tuple[int, int, float]:
    """Count events and sum amounts per window and user from ``source`` into ``sink``, until
    ``source``'s end as the query starts (Trigger.AvailableNow). Returns the input rows, the
    micro-batches, and the seconds Spark spent processing them."""
    from pyspark.sql import functions as F

    stream = (
        spark.readStream.format("bkframe").option("metadata", metadata).option("log", source)
        .option("maxEntriesPerTrigger", max_per_batch).option("cursor", CURSOR).load()
    )
    events = stream.select("key", "timestamp", F.from_json(F.col("payload").cast("string"), EVENT_SCHEMA).alias("e"))
    counts = (
        events.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", f"{WINDOW_S} seconds"), "key")
        .agg(F.count("*").alias("count"), F.sum("e.amount").alias("amount"))
        # Each count a record: keyed by its user, stamped with its window's start.
        .select("key", F.col("window.start").alias("timestamp"), F.to_json(F.struct("count", "amount")).alias("payload"))
    )
    query = (
        counts.writeStream.format("bkframe").option("metadata", metadata).option("log", sink)
        .outputMode("append").option("checkpointLocation", checkpoint)
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    progress = query.recentProgress
    # The properties, not the dict keys: through Spark Connect a key may hold None.
    rows = sum(int(p.numInputRows or 0) for p in progress)
    busy_ms = sum(int((p.durationMs or {}).get("triggerExecution") or 0) for p in progress if p.numInputRows)
    return rows, sum(1 for p in progress if p.numInputRows), busy_ms / 1000


def replay_since(spark: SparkSession, metadata: str, log: str, since_ms: int) -> tuple[dict[str, int], int]:
    """Each user's summed amount from the first event at or after ``since_ms`` on (a batch
    read starting at a time, found without a scan); and the rows read."""
    from pyspark.sql import functions as F

    df = (
        spark.read.format("bkframe").option("metadata", metadata).option("log", log)
        .option("startingTimestamp", since_ms).load()
        .where(F.col("key") != F.lit(SENTINEL_KEY))
    )
    amounts = F.from_json(F.col("payload").cast("string"), EVENT_SCHEMA).alias("e")
    per_user = (
        df.select(F.col("key").cast("string").alias("user"), amounts)
        .groupBy("user").agg(F.sum("e.amount").alias("amount"), F.count("*").alias("n")).collect()
    )
    return {r["user"]: int(r["amount"]) for r in per_user}, sum(int(r["n"]) for r in per_user)


def read_counts(spark: SparkSession, metadata: str, log: str) -> list[tuple[int, str, int, int]]:
    """Every (window start ms, user, count, amount) in ``log``, as written (duplicates kept)."""
    from pyspark.sql import functions as F

    df = spark.read.format("bkframe").option("metadata", metadata).option("log", log).load()
    rows = df.select(
        (F.unix_millis("timestamp")).alias("start"), F.col("key").cast("string").alias("user"),
        F.from_json(F.col("payload").cast("string"), COUNT_SCHEMA).alias("c"),
    ).collect()
    return [(int(r["start"]), str(r["user"]), int(r["c"]["count"]), int(r["c"]["amount"])) for r in rows]


def verify(rows: int, got: Sequence[tuple[int, str, int, int]], log: str) -> None:
    """Raise :class:`PipelineError` unless ``got`` holds each expected (window, user) once,
    with its expected count and sum."""
    expected = expected_counts(rows)
    seen: dict[tuple[int, str], tuple[int, int]] = {}
    twice = []
    for start, who, count, amount in got:
        if (start, who) in seen:
            twice.append((start, who))
        seen[(start, who)] = (count, amount)
    problems = [f"window {s} {u} written {1 + sum(t == (s, u) for t in twice)} times" for s, u in twice[:3]]
    wrong = sorted(k for k in expected.keys() | seen.keys() if expected.get(k) != seen.get(k))
    problems += [f"window {s} {u}: expected {expected.get((s, u))}, got {seen.get((s, u))}" for s, u in wrong[:5]]
    total = sum(c for _, _, c, _ in got)
    if problems or total != rows:
        raise PipelineError(
            f"log {log!r} holds wrong counts ({len(got)} rows counting {total} events, expected {len(expected)} "
            f"counting {rows}): " + "; ".join(problems)
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
    warm_up_first: bool = True,
) -> dict[str, Any]:
    """Run the stages on ``spark`` against the cluster at ``metadata``, verify, and return
    what was done: logs, rows, seconds and rows/s per stage. Raises :class:`PipelineError`
    if a result is wrong. The caller owns (and stops) ``spark``. Without ``warm_up_first``
    the first stage's time includes Spark starting its Python workers (:func:`warm_up`).

    Long on purpose: the pipeline reads as the stages it prints, one after the other.
    """
    if rows < 1:
        raise PipelineError(f"rows must be at least 1, got {rows}")
    report: dict[str, Any] = {"metadata": metadata, "rows": rows, "events": events, "counts": counts}
    with connect(metadata) as bk, tempfile.TemporaryDirectory(prefix="bkframe-pipeline-") as scratch:
        prepare_logs(bk, metadata, (events, counts), replace=replace, out=out)
        if warm_up_first:
            warm_up(spark, bk, metadata, f"{events}-warm-up")

        start = time.perf_counter()
        bulk_load(spark, metadata, events, rows)
        load_s = time.perf_counter() - start
        with bk.logs.open_writer(events) as writer:
            sentinel = writer.append(b'{"id": -1, "amount": 0}', key=SENTINEL_KEY, timestamp=SENTINEL_MS)
        loaded = log_entries(bk, events)
        if loaded != rows + 1:
            raise PipelineError(f"log {events!r} holds {loaded} entries after the bulk load, expected {rows} + 1")
        out(f"  bulk load: {rows:,} keyed, timestamped events into log {events!r} in {load_s:.2f} s: "
            f"{rows / load_s:,.0f} rows/s; the sentinel (event time {SENTINEL_MS}) at {sentinel}")
        report["bulk_load"] = {"seconds": load_s, "rows_per_s": rows / load_s}

        max_per_batch = max(1000, rows // 5)
        start = time.perf_counter()
        streamed, batches, busy_s = stream_counts(
            spark, metadata, events, counts, checkpoint or os.path.join(scratch, "checkpoint"), max_per_batch
        )
        stream_s = time.perf_counter() - start
        lag = {c.cursor.name: c.lag for c in bk.logs.info(events).cursors}.get(CURSOR)
        rate = streamed / busy_s if busy_s > 0 else 0.0
        out(f"  stream: {streamed:,} events in {batches} micro-batches ({max_per_batch:,} at most each) through a "
            f"{WINDOW_S} s event-time window per user into log {counts!r}: {rate:,.0f} rows/s of processing "
            f"({busy_s:.2f} s in batches, {stream_s:.2f} s with the query's start); cursor {CURSOR!r} lag {lag}")
        if streamed != rows + 1 or lag != 0:
            raise PipelineError(
                f"the streaming query read {streamed} events from log {events!r} (expected {rows + 1}) "
                f"and left its cursor {CURSOR!r} {lag} entries behind the end (expected 0)"
            )
        report["stream"] = {"seconds": busy_s, "wall_seconds": stream_s, "rows_per_s": rate, "input_rows": streamed,
                            "batches": batches}

        since_ms = event_ms(rows // 2)
        since = datetime.fromtimestamp(since_ms / 1000, UTC).isoformat(timespec="milliseconds")  # for people
        start = time.perf_counter()
        sums, replayed = replay_since(spark, metadata, events, since_ms)
        replay_s = time.perf_counter() - start
        if sums != expected_since(rows, since_ms) or replayed != rows - rows // 2:
            raise PipelineError(
                f"reading log {events!r} from event time {since} ({since_ms} ms) gave {replayed} events and sums {sums}; "
                f"expected {rows - rows // 2} events and {expected_since(rows, since_ms)}"
            )
        out(f"  replay from a time: {replayed:,} events of log {events!r} from event time {since} on (the second "
            f"half, found by time) summed per user in {replay_s:.2f} s: {replayed / replay_s:,.0f} rows/s; verified")
        report["replay"] = {"seconds": replay_s, "rows_per_s": replayed / replay_s, "rows": replayed}

        start = time.perf_counter()
        got = read_counts(spark, metadata, counts)
        read_s = time.perf_counter() - start
        verify(rows, got, counts)
        out(f"  read back: {len(got)} counts from log {counts!r} in {read_s:.2f} s; each (window, user) once with its "
            f"expected count and sum, counting {rows:,} events: verified")
        report["read_back"] = {"seconds": read_s, "counts": len(got)}
    report["verified"] = True
    return report


def summary(report: dict[str, Any]) -> str:
    """The last line the example and the demo print."""
    return (
        f"verified; rows/s: bulk load {report['bulk_load']['rows_per_s']:,.0f}, stream {report['stream']['rows_per_s']:,.0f}, "
        f"replay from a time {report['replay']['rows_per_s']:,.0f}"
    )


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
    parser.add_argument("--no-warm-up", action="store_true",
                        help="skip the warm-up job (sooner done; the bulk load's rate then includes Spark's start-up)")
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
                              replace=args.replace, out=lambda line: print(line, flush=True),
                              warm_up_first=not args.no_warm_up)
    except BKError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
        close_all()
    print(summary(report), flush=True)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
