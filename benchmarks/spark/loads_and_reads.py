"""``.venv/bin/python benchmarks/spark/loads_and_reads.py``: Spark bulk loads and reads of a
log, against Parquet on the local disk and against the direct client, measured side by side
in one run (before issue 39 this was the module ``bkframe_spark.bench`` inside the connector).

For each row size: one DataFrame of random payloads (generated and cached first, so the
timings are of writing and reading only) is bulk-loaded into a new log, written as Parquet,
and its entries appended by this process's client to one ledger of the same type and
quorums as a task's (the window a task uses); then the log and the Parquet files are read back with a
Spark action that touches every payload byte. Rounds alternate the order; the report gives
each round and the medians. Starts its own 3-bookie cluster unless given ``--metadata``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bkframe_spark.connection import close_all
from bkframe_spark.session import local_session
from bkframe_spark.writing import CHUNK, WINDOW

import bkframe
from bkframe import PendingAppend
from bkframe.launcher import Cluster


def _direct(metadata: str, payloads: list[bytes], ledger_type: str, e: int, w: int, a: int) -> float:
    """Seconds to append ``payloads`` to a new ledger through the client (the window a task uses) and close it."""
    with bkframe.connect(metadata) as bk:

        async def run() -> float:
            client = bk.client
            start = time.perf_counter()
            handle = await client.create_ledger(ensemble=e, write_quorum=w, ack_quorum=a, ledger_type=ledger_type)
            pending: deque[list[PendingAppend]] = deque()
            for first in range(0, len(payloads), CHUNK):  # as a Spark task appends
                pending.append([handle.append_async(p) for p in payloads[first : first + CHUNK]])
                while len(pending) * CHUNK > WINDOW:
                    for pa in pending.popleft():
                        await pa.wait()
            while pending:
                for pa in pending.popleft():
                    await pa.wait()
            await handle.close()
            seconds = time.perf_counter() - start
            await client.delete_ledger(handle.ledger_id)
            return seconds

        return bk.run(run)


def spark_load(df: Any, metadata: str, log: str) -> None:
    df.write.format("bkframe").option("metadata", metadata).option("log", log).mode("append").save()


def _parquet_write(df: Any, path: Path) -> None:
    df.write.mode("overwrite").parquet(str(path))


def _spark_read(spark: Any, metadata: str, log: str) -> None:
    from pyspark.sql import functions as F

    spark.read.format("bkframe").option("metadata", metadata).option("log", log).load().select(
        F.sum(F.length("payload"))
    ).collect()


def _spark_read_payload(spark: Any, metadata: str, log: str) -> None:
    """The same read with a schema naming the one column the job uses (as Parquet's reader
    reads only that column; a Python data source cannot have Spark prune the others)."""
    from pyspark.sql import functions as F

    spark.read.format("bkframe").schema("payload binary").option("metadata", metadata).option("log", log).load().select(
        F.sum(F.length("payload"))
    ).collect()


def _spark_read_before(spark: Any, metadata: str, log: str) -> None:
    """:func:`_spark_read` through the connector as it was before issue 50 (``memory_source.py``)."""
    from pyspark.sql import functions as F

    spark.read.format("bkframe-before").option("metadata", metadata).option("log", log).load().select(
        F.sum(F.length("payload"))
    ).collect()


def _parquet_read(spark: Any, path: Path) -> None:
    from pyspark.sql import functions as F

    spark.read.parquet(str(path)).select(F.sum(F.length("payload"))).collect()


def _timed(fn: Any) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench(metadata: str, work: Path, sizes: list[int], total_mb: int, rounds: int, partitions: int) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    # The Python workers import memory_source.py from beside this script.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    spark = local_session(2, app="bkframe-bench")
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    try:
        from memory_source import BeforeSource

        spark.dataSource.register(BeforeSource)
        settings = bkframe.LogSettings()  # the log the load creates has the default settings
        ledger_type, e, w, a = "VD_JOURNAL", settings.write_quorum, settings.write_quorum, settings.ack_quorum
        for size in sizes:
            rows = max(partitions, total_mb * 1_000_000 // size)
            df = spark.range(0, rows, numPartitions=partitions).select(
                F.expr(f"cast(randstr({size}, 7) as binary)").alias("payload")
            ).cache()
            df.count()
            sample = [r.payload for r in df.limit(1000).collect()]
            payloads = [sample[i % len(sample)] for i in range(rows)]
            # Not counted: the first jobs start Spark's Python workers and the tasks' clients.
            spark_load(df.limit(1000), metadata, f"bench-{size}-warmup")
            _spark_read(spark, metadata, f"bench-{size}-warmup")
            for r in range(rounds):
                log_name = f"bench-{size}-{r}"
                parquet = work / f"parquet-{size}-{r}"
                steps: list[tuple[str, Callable[[], Any]]] = [
                    ("spark_load", partial(spark_load, df, metadata, log_name)),
                    ("parquet_write", partial(_parquet_write, df, parquet)),
                    ("direct", partial(_direct, metadata, payloads, ledger_type, e, w, a)),
                ]
                if r % 2:
                    steps.reverse()
                row: dict[str, Any] = {"size": size, "rows": rows, "round": r + 1}
                for name, step in steps:
                    row[name] = step() if name == "direct" else _timed(step)
                reads: list[tuple[str, Callable[[], Any]]] = [
                    ("spark_read", partial(_spark_read, spark, metadata, log_name)),
                    ("spark_read_payload", partial(_spark_read_payload, spark, metadata, log_name)),
                    ("spark_read_before", partial(_spark_read_before, spark, metadata, log_name)),
                    ("parquet_read", partial(_parquet_read, spark, parquet)),
                ]
                if r % 2:
                    reads.reverse()
                for name, step in reads:
                    row[name] = _timed(step)
                results.append(row)
                print(_line(row), flush=True)
                shutil.rmtree(parquet, ignore_errors=True)
            df.unpersist()
    finally:
        spark.stop()
        close_all()
    return results


def _rate(row: dict[str, Any], key: str) -> float:
    return float(row["rows"] * row["size"] / row[key] / 1e6)


def _line(row: dict[str, Any]) -> str:
    return (
        f"| {row['size']:,} B | {row['round']} | {_rate(row, 'spark_load'):.1f} | {_rate(row, 'direct'):.1f} | "
        f"{_rate(row, 'parquet_write'):.1f} | {_rate(row, 'spark_load') / _rate(row, 'direct'):.2f} | "
        f"{_rate(row, 'spark_read'):.1f} | {_rate(row, 'spark_read_payload'):.1f} | {_rate(row, 'parquet_read'):.1f} | "
        f"{_rate(row, 'spark_read') / _rate(row, 'parquet_read'):.2f} | "
        f"{_rate(row, 'spark_read_payload') / _rate(row, 'parquet_read'):.2f} | "
        f"{_rate(row, 'spark_read_before') / _rate(row, 'parquet_read'):.2f} |"
    )


def report(results: list[dict[str, Any]]) -> str:
    head = (
        "| rows of | round | Spark load MB/s | direct client MB/s | Parquet write MB/s | load / direct | "
        "Spark read MB/s | Spark read, payload column MB/s | Parquet read MB/s | read / Parquet | "
        "payload read / Parquet | read before issue 50 / Parquet |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head] + [_line(r) for r in results]
    for size in sorted({r["size"] for r in results}):
        mine = [r for r in results if r["size"] == size]
        load = statistics.median(_rate(r, "spark_load") / _rate(r, "direct") for r in mine)
        read = statistics.median(_rate(r, "spark_read") / _rate(r, "parquet_read") for r in mine)
        payload = statistics.median(_rate(r, "spark_read_payload") / _rate(r, "parquet_read") for r in mine)
        before = statistics.median(_rate(r, "spark_read_before") / _rate(r, "parquet_read") for r in mine)
        lines.append(f"\n{size:,} B rows: median load / direct {load:.2f} (aim >= 0.70), "
                     f"median read / Parquet {read:.2f}, payload column only {payload:.2f} (aim >= 0.60), "
                     f"the read before issue 50 {before:.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metadata", help="a running cluster's metadata URI (default: start 3 bookies)")
    parser.add_argument("--sizes", default="1024,65536", help="row sizes in bytes, comma-separated")
    parser.add_argument("--mb", type=int, default=200, help="payload megabytes per DataFrame")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with_cluster(
        "bkframe-spark-bench-", args.metadata,
        lambda m, work: report(bench(m, work, sizes, args.mb, args.rounds, args.partitions)),
    )


def with_cluster(prefix: str, metadata: str | None, run: Callable[[str, Path], str]) -> None:
    """Print ``run(metadata, work directory)``'s report: on the cluster ``metadata`` names,
    or on 3 bookies started here (stopped after, with the work directory removed)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    cluster = None
    try:
        if metadata is None:
            cluster = Cluster(work / "cluster", 3).start(parallel=True)
            metadata = cluster.metadata
        print(run(metadata, work))
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
