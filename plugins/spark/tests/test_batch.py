"""Batch reads and bulk loads on a real SparkSession (``local[2]``) and real bookies."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bkframe import BlockingClient, connect
from bkframe.testing.cluster import Cluster
from tests.core.test_security import TOKEN, Certs, secure_config

ROWS = 100_000
#: Event times of the bulk load's rows: T0 + id milliseconds.
T0 = 1_750_000_000_000

pytestmark = pytest.mark.spark


def reader(spark: SparkSession, metadata: str, **options: Any) -> Any:
    r = spark.read.format("bkframe").option("metadata", metadata)  # found with no register() call
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def write(df: Any, metadata: str, log: str, **options: Any) -> None:
    w = df.write.format("bkframe").option("metadata", metadata).option("log", log).mode("append")
    for key, value in options.items():
        w = w.option(key, value)
    w.save()


def payloads(n: int, tag: str) -> list[bytes]:
    return [f"{tag}-{i:07d}".encode() for i in range(n)]


def log_ledgers(bk: BlockingClient, log: str) -> set[int]:
    return {s.ledger_id for s in bk.logs.metadata(log).segments}


def check_contiguous(rows: list[Any]) -> None:
    """Positions are entry ids 0..n-1 of each segment, and match the columns."""
    by_segment: dict[int, list[int]] = {}
    for row in rows:
        by_segment.setdefault(row.segment, []).append(row.entry_id)
        assert row.position == f"{row.segment}:{row.entry_id}"
    for segment, ids in by_segment.items():
        assert sorted(ids) == list(range(len(ids))), f"segment {segment} has gaps or duplicates"


def test_bulk_load_then_read_back_the_same_rows(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    m = spark_cluster.metadata
    expected = payloads(ROWS, "bulk")
    # Records: a key, an event time (T0 + id ms: increasing through the log), properties on some rows.
    df = spark.range(0, ROWS, numPartitions=4).select(
        F.format_string("bulk-%07d", "id").alias("payload"),
        F.format_string("k%d", F.col("id") % 7).alias("key"),
        F.timestamp_millis(F.lit(T0) + F.col("id")).alias("timestamp"),
        F.when(F.col("id") % 1000 == 0, F.create_map(F.lit("n"), F.col("id").cast("string"))).alias("properties"),
    )
    write(df, m, "bulk")  # the log does not exist yet: the write creates it
    record = bk.logs.metadata("bulk")
    assert len(record.segments) == 4 and all(s.closed for s in record.segments)
    # Every ledger the write made is VD_JOURNAL (BP-14's bulk load), closed, and in the log.
    assert {bk.ledger_metadata(s.ledger_id).ledger_type for s in record.segments} == {"VD_JOURNAL"}
    # Each segment knows its records' time range (what seeks and timestamp filters use).
    assert [(s.min_ts - T0, s.max_ts - T0) for s in record.segments] == [(i * 25_000, i * 25_000 + 24_999) for i in range(4)]

    df = reader(spark, m, log="bulk", entriesPerPartition=10_000)
    assert df.rdd.getNumPartitions() == 12  # 4 segments of 25,000 entries, cut in 10,000s
    rows = df.select("*", F.unix_millis("timestamp").alias("ms")).collect()
    assert Counter(r.payload for r in rows) == Counter(expected)
    check_contiguous(rows)
    # The log keeps the DataFrame's order: partition i became segment i.
    assert sorted(rows, key=lambda r: (r.segment, r.entry_id))[0].payload == b"bulk-0000000"
    assert {r.log for r in rows} == {"bulk"}
    # Each row's record read back whole; offsets sort as positions do.
    for r in rows:
        i = int(r.payload[5:])
        assert (r.key, r.ms, r.properties) == (b"k%d" % (i % 7), T0 + i, {"n": str(i)} if i % 1000 == 0 else {}), r
    assert [r.offset for r in sorted(rows, key=lambda r: (r.segment, r.entry_id))] == sorted(r.offset for r in rows)
    # A .schema(...) naming some columns reads only those (Spark cannot prune a Python source's).
    some = (
        spark.read.format("bkframe").schema("key binary, payload binary").option("metadata", m).option("log", "bulk").load()
    )
    assert some.columns == ["key", "payload"]
    assert sorted((r.payload, r.key) for r in some.collect()) == sorted((r.payload, r.key) for r in rows)

    # A time range: exactly its rows (across a segment boundary), planned from the segments' time ranges.
    timed = reader(spark, m, log="bulk", startingTimestamp=T0 + 24_990, endingTimestamp=T0 + 25_010)
    assert timed.rdd.getNumPartitions() == 2
    assert sorted(r.payload for r in timed.collect()) == expected[24_990:25_010]
    # A filter on timestamp skips the segments whose time range cannot match (Spark checks each row too).
    since = F.timestamp_millis(F.lit(T0 + 74_990))
    late = reader(spark, m, log="bulk", entriesPerPartition=10_000).where(F.col("timestamp") >= since)
    assert late.rdd.getNumPartitions() == 6  # segments 2 and 3 only
    assert late.count() == 25_010

    # Filters on segment / entry_id are pushed down: the scan plans only what can match.
    narrowed = reader(spark, m, log="bulk", entriesPerPartition=10_000).where("segment = 2 AND entry_id >= 24990")
    assert narrowed.rdd.getNumPartitions() == 1
    assert sorted(r.payload for r in narrowed.collect()) == expected[75_000 - 10 : 75_000]

    # The same entries by ledger id, and positions from a starting/ending position.
    ids = sorted(log_ledgers(bk, "bulk"))
    assert reader(spark, m, ledgers=",".join(map(str, ids[:2]))).count() == 50_000
    ranged = reader(spark, m, log="bulk", startingPosition="1:24998", endingPosition="2:2").collect()
    assert [r.position for r in ranged] == ["1:24998", "1:24999", "2:0", "2:1"]


def _fail_first_attempt(partition: int, at: int) -> Any:
    @F.udf("string")
    def flaky(i: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == partition and ctx.attemptNumber() == 0 and i == at:
            time.sleep(3)  # the rows before this one reach the writer first
            raise RuntimeError("injected failure of a task's first attempt")
        return f"retry-{i:07d}"

    return flaky


def _always_fail(partition: int) -> Any:
    @F.udf("string")
    def broken(i: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == partition and i % 1000 == 999:
            raise RuntimeError("injected failure of every attempt")
        return f"doomed-{i:07d}"

    return broken


@contextlib.contextmanager
def ledgers_seen(metadata: str) -> Iterator[set[int]]:
    """Every ledger id that exists at some point while the block runs (listed every 50 ms)."""
    seen: set[int] = set()
    stop = threading.Event()

    def watch() -> None:
        with connect(metadata) as client:
            while not stop.is_set():
                seen.update(client.list_ledgers())
                stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        stop.set()
        watcher.join(30)


def test_failed_attempts_and_failed_jobs_leave_nothing(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    m = spark_cluster.metadata
    bk.logs.create("retried")
    before = set(bk.list_ledgers())
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")  # the attempt writes before it fails
    try:
        # Partition 1 fails near its end, ~170 KB of UDF output in: more than the Python
        # worker's 64 KiB output buffer, so the writer has rows (and a ledger) before the failure.
        n = 40_000
        df = spark.range(0, n, numPartitions=4).select(_fail_first_attempt(1, 19_990)("id").alias("payload"))
        with ledgers_seen(m) as seen:
            write(df, m, "retried")
        rows = reader(spark, m, log="retried").collect()
        assert Counter(r.payload for r in rows) == Counter(payloads(n, "retry"))  # each row once
        check_contiguous(rows)
        # Ids come in blocks per client, so they say nothing of how many ledgers were made:
        # the failed attempt's ledger is seen while it lives (seconds: the attempt sleeps 3 s).
        made = seen - before - log_ledgers(bk, "retried")
        assert made, "the failed attempt should have made a ledger of its own"
        assert set(bk.list_ledgers()) == before | log_ledgers(bk, "retried"), "a ledger of the failed attempt is left"

        before = set(bk.list_ledgers())
        doomed = spark.range(0, 4_000, numPartitions=4).select(_always_fail(2)("id").alias("payload"))
        with pytest.raises(Exception, match="injected failure of every attempt"):
            write(doomed, m, "retried")
        assert reader(spark, m, log="retried").count() == n  # nothing of the failed job is visible
        left = set(bk.list_ledgers()) - before
        assert not left, f"the failed job left ledgers behind: {[bk.ledger_metadata(i) for i in left]}"
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_read_of_an_open_log_is_a_snapshot(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    m = spark_cluster.metadata
    bk.logs.create("growing", rollover_entries=700)
    acked = 0
    stop = threading.Event()

    def append() -> None:
        nonlocal acked
        with bk.logs.open_writer("growing") as writer:
            while not stop.is_set():
                writer.append(b"grow-%07d" % acked)  # one at a time: acked is exact
                acked += 1

    thread = threading.Thread(target=append)
    thread.start()
    try:
        while acked < 2000:
            time.sleep(0.05)
        df = reader(spark, m, log="growing", entriesPerPartition=300)
        first = acked
        rows = df.collect()
        last = acked
        again = df.count()  # a new action plans a new snapshot
    finally:
        stop.set()
        thread.join()
    ordered = sorted(rows, key=lambda r: (r.segment, r.entry_id))
    # A prefix of the log (no gap, in every closed and the open segment) ...
    assert [r.payload for r in ordered] == [b"grow-%07d" % i for i in range(len(rows))]
    check_contiguous(rows)
    assert len({r.segment for r in rows}) >= 3  # across rollovers
    # ... holding what was acknowledged when the read was planned (the LAC, carried on the
    # next add, trails the last acknowledged entry by one) and nothing after it was read.
    assert first - 1 <= len(rows) <= last
    assert again >= len(rows)


def test_a_bookie_killed_during_a_bulk_load(spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient) -> None:
    m = spark_cluster.metadata
    bk.logs.create("killed")
    before = set(bk.list_ledgers())
    victim: list[str] = []

    def kill_when_writing() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            new = [i for i in bk.list_ledgers() if i not in before]
            if new:
                md = bk.ledger_metadata(new[0])
                bookie = md.fragments[0][1][0]
                time.sleep(0.2)
                spark_cluster.by_id(bookie).kill()
                victim.append(bookie)
                return
            time.sleep(0.02)

    n = 100_000
    df = spark.range(0, n, numPartitions=4).select(F.format_string("kill-%07d", "id").alias("payload"))
    killer = threading.Thread(target=kill_when_writing)
    killer.start()
    try:
        try:
            write(df, m, "killed")
            succeeded = True
        except Exception:  # noqa: BLE001 - failing cleanly is allowed; what is visible is checked below
            succeeded = False
        killer.join()
        assert victim, "no bookie was killed during the load"
        rows = reader(spark, m, log="killed").collect()
        if succeeded:
            assert Counter(r.payload for r in rows) == Counter(payloads(n, "kill"))
            check_contiguous(rows)
        else:
            assert rows == []
        assert set(bk.list_ledgers()) == before | log_ledgers(bk, "killed")
    finally:
        for b in spark_cluster.bookies:
            if not b.running:
                b.start()


def test_a_log_on_bookies_that_require_tls_and_a_token(
    spark: SparkSession, cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    """Options tlsCa/tlsCert/tlsKey and authToken/authTokenFile reach every client the
    connector opens; a missing or wrong token is the first line of what Spark raises."""
    (tmp_path / "certs").mkdir()
    certs = Certs(tmp_path / "certs")
    cluster = cluster_factory(1, config=secure_config(certs))
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    tls = {"tlsCa": str(certs.ca), "tlsCert": str(certs.client_cert), "tlsKey": str(certs.client_key)}
    with connect(cluster.metadata, **certs.client()) as client:
        client.logs.create("secure", ensemble=1, write_quorum=1, ack_quorum=1)
    df = spark.range(0, 1000, numPartitions=2).select(
        F.format_string("secret-%04d", "id").alias("payload"), F.format_string("k%d", "id").alias("key")
    )
    write(df, cluster.metadata, "secure", authTokenFile=str(token_file), **tls)
    rows = reader(spark, cluster.metadata, log="secure", authToken=TOKEN, **tls).collect()
    assert sorted((r.payload, r.key) for r in rows) == [(b"secret-%04d" % i, b"k%d" % i) for i in range(1000)]
    for token, says in [({"authToken": "a-wrong-guess"}, "not accepted"), ({}, "no token given")]:
        with pytest.raises(Exception) as caught:  # Spark wraps it: what matters is the first line it shows
            reader(spark, cluster.metadata, log="secure", **token, **tls).collect()
        first = str(caught.value).splitlines()[0]
        assert "refused authentication" in first and says in first and "a-wrong-guess" not in str(caught.value), first


def test_rows_routed_into_several_logs_then_read_together(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient
) -> None:
    """A write with a 'log' column: one commit across the logs, each row once in its log even
    with a task attempt failed; reads of a list and of a pattern give each row's log; a
    commit that fails changes no log and leaves no ledger."""
    m = spark_cluster.metadata
    n = 40_000
    before = set(bk.list_ledgers())
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")  # the attempt writes before it fails
    try:
        df = spark.range(0, n, numPartitions=4).select(
            F.when(F.col("id") % 3 == 0, "route-a").otherwise("route-b").alias("log"),  # logs the tasks create
            _fail_first_attempt(1, 19_990)("id").alias("payload"),
            F.timestamp_millis(F.lit(T0) + F.col("id")).alias("timestamp"),
        )
        with ledgers_seen(m) as seen:
            df.write.format("bkframe").option("metadata", m).mode("append").save()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    owned = log_ledgers(bk, "route-a") | log_ledgers(bk, "route-b")
    assert seen - before - owned, "the failed attempt should have made ledgers of its own"
    assert set(bk.list_ledgers()) == before | owned, "a ledger of the failed attempt is left"
    assert [len(bk.logs.metadata(name).segments) for name in ("route-a", "route-b")] == [4, 4]  # a ledger per task and log

    expected = Counter(("route-a" if i % 3 == 0 else "route-b", b"retry-%07d" % i) for i in range(n))
    rows = reader(spark, m, log="route-a,route-b").collect()
    assert Counter((r.log, r.payload) for r in rows) == expected  # each row once, in the log it named
    for name in ("route-a", "route-b"):
        check_contiguous([r for r in rows if r.log == name])
    # A pattern (matching whole names) and a time range that applies to each log.
    late = reader(spark, m, logPattern="route-.", startingTimestamp=T0 + n - 30).collect()
    assert sorted((r.log, r.payload) for r in late) == sorted(
        ("route-a" if i % 3 == 0 else "route-b", b"retry-%07d" % i) for i in range(n - 30, n)
    )

    # The write's token is committed to route-b already (as a commit that landed in one log
    # only would leave it): the commit across route-a and route-b is refused, and neither changes.
    segments = {name: bk.logs.metadata(name).segments for name in ("route-a", "route-b")}
    before = set(bk.list_ledgers())
    token: list[str] = []

    def commit_its_token_to_route_b() -> None:
        with connect(m) as client:
            deadline = time.monotonic() + 60
            while not token and time.monotonic() < deadline:
                token.extend({s.token for s in client.logs.metadata("route-a").staged})
                time.sleep(0.02)
            client.logs.commit_ledgers("route-b", [], token[0])

    @F.udf("string")
    def slow_last_task(i: int) -> str:
        ctx = TaskContext.get()
        if ctx is not None and ctx.partitionId() == 3 and i == 3_000:
            time.sleep(2)  # the job lasts until the token is known
        return f"doomed-{i:07d}"

    meddler = threading.Thread(target=commit_its_token_to_route_b)
    meddler.start()
    doomed = spark.range(0, 4_000, numPartitions=4).select(
        F.when(F.col("id") % 2 == 0, "route-a").otherwise("route-b").alias("log"), slow_last_task("id").alias("payload")
    )
    try:
        with pytest.raises(Exception, match=r"committed in log\(s\) \['route-b'\] but not in \['route-a'\]"):
            doomed.write.format("bkframe").option("metadata", m).mode("append").save()
    finally:
        meddler.join(60)
    assert {name: bk.logs.metadata(name).segments for name in segments} == segments
    left = set(bk.list_ledgers()) - before
    assert not left, f"the failed commit left ledgers behind: {[bk.ledger_metadata(i) for i in left]}"
    assert not bk.logs.metadata("route-a").staged
