"""Structured Streaming on real bookies: a log as a source and as an exactly-once sink."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from bkframe_spark.writing import TAG_LOG
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bkframe import ENVELOPE_CUSTOM, BlockingClient, Position, Record, encode_record
from bkframe.testing.cluster import Cluster

BKFRAME = str(Path(sys.executable).parent / "bkframe")

pytestmark = pytest.mark.spark


def stream(spark: SparkSession, metadata: str, log: str | None, **options: Any) -> Any:
    r = spark.readStream.format("bkframe").option("metadata", metadata)
    if log is not None:
        r = r.option("log", log)
    for key, value in options.items():
        r = r.option(key, value)
    return r.load()


def sink(df: Any, metadata: str, log: str, checkpoint: Path) -> Any:
    return (
        df.writeStream.format("bkframe").option("metadata", metadata).option("log", log)
        .option("checkpointLocation", str(checkpoint)).outputMode("append")
    )


def entries(bk: BlockingClient, log: str) -> int:
    return sum(s.entries for s in bk.logs.metadata(log).segments if s.closed)


def read_all(spark: SparkSession, metadata: str, log: str) -> list[bytes]:
    df = spark.read.format("bkframe").option("metadata", metadata).option("log", log).load()
    return [r.payload for r in df.select("payload").collect()]


def no_strays(bk: BlockingClient, log: str) -> None:
    """Every ledger the sink made for ``log`` is one of its segments."""
    in_log = {s.ledger_id for s in bk.logs.metadata(log).segments}
    tagged = {i for i in bk.list_ledgers() if bk.ledger_metadata(i).custom.get(TAG_LOG) == log}
    assert tagged <= in_log, f"ledgers made for {log!r} but not in it: {sorted(tagged - in_log)}"


def test_a_stream_follows_a_log_written_by_the_cli_across_rollovers(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient, tmp_path: Path
) -> None:
    m = spark_cluster.metadata
    bk.logs.create("clicks", rollover_entries=400)
    bk.logs.create("clicks-copy")
    lines = [f"click-{i:05d}" for i in range(3000)]
    query = (
        sink(stream(spark, m, "clicks", maxEntriesPerTrigger=500, cursor="copier").select("payload"), m, "clicks-copy",
             tmp_path / "checkpoint")
        .trigger(processingTime="1 second").start()
    )
    try:
        appender = subprocess.Popen([BKFRAME, "log", "append", "clicks", "--metadata", m], stdin=subprocess.PIPE,
                                    stdout=subprocess.DEVNULL)
        assert appender.stdin is not None
        for first in range(0, len(lines), 100):  # while the query runs, across 7 rollovers
            appender.stdin.write("".join(line + "\n" for line in lines[first : first + 100]).encode())
            appender.stdin.flush()
            time.sleep(0.1)
        appender.stdin.close()
        assert appender.wait(60) == 0
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and entries(bk, "clicks-copy") < len(lines):
            assert query.exception() is None
            time.sleep(0.5)
        # Spark commits a batch's end offset to the source when it plans the next batch, so
        # the cursor reaches the end of what was read once one more entry arrives.
        end = bk.logs.end("clicks")
        lines.append("click-last")
        subprocess.run([BKFRAME, "log", "append", "clicks", "--metadata", m], input=b"click-last\n", check=True,
                       stdout=subprocess.DEVNULL, timeout=60)
        while time.monotonic() < deadline and not (
            entries(bk, "clicks-copy") == len(lines) and bk.logs.cursor("clicks", "copier").position >= end
        ):
            assert query.exception() is None
            time.sleep(0.5)
    finally:
        query.stop()
    assert query.exception() is None
    assert len(bk.logs.metadata("clicks").segments) >= 8
    got = read_all(spark, m, "clicks-copy")
    assert Counter(got) == Counter(line.encode() for line in lines)  # every entry exactly once
    # The cursor moved as Spark committed the batches, never past what was read.
    assert end <= bk.logs.cursor("clicks", "copier").position <= bk.logs.end("clicks")
    no_strays(bk, "clicks-copy")


def test_restarts_from_the_checkpoint_write_each_input_once(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient, tmp_path: Path
) -> None:
    m = spark_cluster.metadata
    n = 4000
    bk.logs.create("orders", rollover_entries=1500)
    bk.logs.create("orders-out")
    with bk.logs.open_writer("orders") as writer:
        writer.append_many([b"order-%05d" % i for i in range(n)])
    checkpoint = tmp_path / "checkpoint"

    @F.udf("binary")
    def slow(payload: bytes) -> bytes:
        time.sleep(0.002)  # a batch of 800 takes ~2 s: time to stop it in the middle
        return payload

    def start(trigger: dict[str, Any]) -> Any:
        source = stream(spark, m, "orders", maxEntriesPerTrigger=800)
        return sink(source.select(slow("payload").alias("payload")), m, "orders-out", checkpoint).trigger(**trigger).start()

    query = start({"processingTime": "0 seconds"})
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            entries(bk, "orders-out") > 0 and query.status["isTriggerActive"] and query.status["isDataAvailable"]
        ):
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        query.stop()  # in the middle of a batch
    stopped_at = entries(bk, "orders-out")
    assert 0 < stopped_at < n

    # A driver that crashed after the sink committed a batch but before Spark recorded it:
    # Spark runs that batch again, and its commit must change nothing. Spark re-runs the
    # newest batch of its offset log when that one has no commit: drop the newest commit and
    # any later offsets (a batch stopped in flight), each with its checksum file.
    last = numbered(checkpoint, "commits")[-1]
    drop(last)
    for offsets in numbered(checkpoint, "offsets"):
        if int(offsets.name) > int(last.name):
            drop(offsets)
        else:
            # As a checkpoint from before offsets held a position per log: {"position": ...}.
            lines = offsets.read_text().splitlines()
            assert json.loads(lines[-1]).keys() == {"logs"}
            lines[-1] = json.dumps({"position": json.loads(lines[-1])["logs"]["orders"]})
            offsets.write_text("\n".join(lines))
            offsets.with_name(f".{offsets.name}.crc").unlink(missing_ok=True)
    query = start({"availableNow": True})
    query.awaitTermination(300)
    assert query.exception() is None
    got = read_all(spark, m, "orders-out")
    assert Counter(got) == Counter(b"order-%05d" % i for i in range(n))
    no_strays(bk, "orders-out")
    # Batches land whole and in order: the output is the input's order.
    assert got == [b"order-%05d" % i for i in range(n)]


T0 = 1_750_000_000_000


def test_a_stream_from_a_time_in_batches_of_bytes_copies_whole_records(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient, tmp_path: Path
) -> None:
    """startingTimestamp, maxBytesPerTrigger, and the sink taking key, timestamp and
    properties (the read's position columns ignored) from a copy of a whole read."""
    m = spark_cluster.metadata
    bk.logs.create("timed", rollover_entries=20)
    records = [
        Record(b"event-%03d" % i, key=b"user-%02d" % (i % 10), timestamp=T0 + i * 1000, properties={"n": f"{i:02d}"})
        for i in range(50)
    ]
    with bk.logs.open_writer("timed") as writer:
        writer.append_many(records)
    size = len(encode_record(records[0]))  # every record's envelope is as long
    source = stream(spark, m, "timed", startingTimestamp=T0 + 20_000, maxBytesPerTrigger=10 * size)
    query = sink(source, m, "timed-copy", tmp_path / "checkpoint").trigger(availableNow=True).start()
    query.awaitTermination(300)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [10, 10, 10]
    copy = spark.read.format("bkframe").option("metadata", m).option("log", "timed-copy").load()
    got = copy.select("payload", "key", F.unix_millis("timestamp").alias("ms"), "properties").collect()
    assert sorted((r.payload, r.key, r.ms, r.properties) for r in got) == [
        (r.payload, r.key, r.timestamp, dict(r.properties or {})) for r in records[20:]
    ]
    segments = bk.logs.metadata("timed-copy").segments
    assert (min(s.min_ts for s in segments), max(s.max_ts for s in segments)) == (T0 + 20_000, T0 + 49_000)
    no_strays(bk, "timed-copy")


def commit_records(bk: BlockingClient, log: str, payloads: list[bytes], token: str) -> None:
    """Append ``payloads`` to ``log`` all at once (one ledger, one commit): a reader sees none or all."""
    ledger = bk.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, custom=dict(ENVELOPE_CUSTOM))
    ledger.append_many([encode_record(p) for p in payloads])
    ledger.close()
    bk.logs.commit_ledgers(log, [ledger.ledger_id], token)


def test_a_micro_batch_waits_for_min_entries_or_the_delay(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient, tmp_path: Path
) -> None:
    """minEntriesPerTrigger=5 with maxTriggerDelay=3s: 3 entries go after the delay, 7 at
    once, 2 after the delay again (Kafka's minOffsetsPerTrigger / maxTriggerDelay)."""
    m = spark_cluster.metadata
    bk.logs.create("trickle")
    bk.logs.create("trickle-copy")
    commit_records(bk, "trickle", [b"a%d" % i for i in range(3)], "first")
    source = stream(spark, m, "trickle", minEntriesPerTrigger=5, maxTriggerDelay="3s").select("payload")
    started = time.time()
    query = sink(source, m, "trickle-copy", tmp_path / "checkpoint").trigger(processingTime="250 milliseconds").start()

    def batches(total: int) -> list[tuple[int, float]]:
        """(rows, trigger time) of the batches with rows, once ``total`` rows went through."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert query.exception() is None
            done = [(p["numInputRows"], iso_seconds(p["timestamp"])) for p in query.recentProgress if p["numInputRows"]]
            if sum(n for n, _ in done) >= total:
                return done
            time.sleep(0.2)
        raise AssertionError(f"{total} rows did not go through: {query.recentProgress}")

    try:
        [(rows, first)] = batches(3)
        assert rows == 3 and first - started >= 2.5  # fewer than 5: held back until the delay passed
        commit_records(bk, "trickle", [b"b%d" % i for i in range(7)], "second")
        assert [n for n, _ in batches(10)] == [3, 7]  # 7 >= 5: at once
        commit_records(bk, "trickle", [b"c0", b"c1"], "third")
        done = batches(12)
    finally:
        query.stop()
    assert [n for n, _ in done] == [3, 7, 2]
    assert done[2][1] - done[1][1] >= 2.5  # the last 2 waited for the delay after the batch before
    assert len(read_all(spark, m, "trickle-copy")) == 12


def iso_seconds(text: str) -> float:
    """Seconds since the epoch of a progress report's ISO timestamp (``...Z``)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_stream_of_several_logs_routed_into_several_logs_exactly_once(
    spark: SparkSession, spark_cluster: Cluster, bk: BlockingClient, tmp_path: Path
) -> None:
    """A stream over the logs a pattern matches (offsets a position per log, batches shared
    fairly), its rows routed by a 'log' column into a log each; a task attempt fails, the
    last batch is replayed and a new log appears: each input once, in order, in its log."""
    m = spark_cluster.metadata
    inputs = {"multi-a": [b"a-%05d" % i for i in range(400)], "multi-b": [b"b-%05d" % i for i in range(200)]}
    for name, payloads in inputs.items():
        bk.logs.create(name, rollover_entries=300)
        with bk.logs.open_writer(name) as writer:
            writer.append_many(payloads)
    checkpoint = tmp_path / "checkpoint"

    @F.udf("binary")
    def flaky(payload: bytes) -> bytes:
        ctx = TaskContext.get()
        if ctx is not None and ctx.attemptNumber() == 0 and payload == b"a-00300":  # in the last batch of the first run
            raise RuntimeError("injected failure of a task's first attempt")
        return payload

    def run() -> Any:
        source = stream(spark, m, None, logPattern="multi-.", maxEntriesPerTrigger=300, cursor="router")
        routed = source.select(F.concat("log", F.lit("-out")).alias("log"), flaky("payload").alias("payload"))
        query = (
            routed.writeStream.format("bkframe").option("metadata", m).option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )
        query.awaitTermination(300)
        assert query.exception() is None
        return query

    query = run()
    # 300 entries a batch, shared fairly: the first batch takes 150 from each log, not 300 from one.
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [300, 300]
    assert json.loads(offsets_of(checkpoint, 0)) == {"logs": {"multi-a": "0:150", "multi-b": "0:150"}}
    assert bk.logs.cursor("multi-b", "router").position >= Position(0, 150)  # a cursor in each log, moved

    # A driver crash after the sink committed the last batch but before Spark recorded it:
    # that batch is run again (its task attempt failing again) and must change nothing.
    last = numbered(checkpoint, "commits")[-1]
    drop(last)
    more = {"multi-a": [b"a-%05d" % i for i in range(400, 500)], "multi-c": [b"c-%05d" % i for i in range(50)]}
    bk.logs.create("multi-c")  # a log that appears while the query is stopped: read from its start
    for name, payloads in more.items():
        with bk.logs.open_writer(name) as writer:
            writer.append_many(payloads)
        inputs[name] = inputs.get(name, []) + payloads
    again = run()
    assert [p["numInputRows"] for p in again.recentProgress if p["numInputRows"]] == [300, 150]  # the replay, then new
    for name, payloads in inputs.items():
        assert read_all(spark, m, f"{name}-out") == payloads  # each once, in order
        no_strays(bk, f"{name}-out")


def numbered(checkpoint: Path, folder: str) -> list[Path]:
    return sorted((p for p in (checkpoint / folder).iterdir() if p.name.isdigit()), key=lambda p: int(p.name))


def drop(path: Path) -> None:
    path.unlink()
    path.with_name(f".{path.name}.crc").unlink(missing_ok=True)


def offsets_of(checkpoint: Path, batch: int) -> str:
    """The source's end offset of a batch, as Spark wrote it (the last line of its offset file)."""
    return (checkpoint / "offsets" / str(batch)).read_text().splitlines()[-1]
