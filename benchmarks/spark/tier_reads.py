"""``.venv/bin/python benchmarks/spark/tier_reads.py``: Spark reads of an offloaded log against
a plain ``spark.read.parquet`` of the same Parquet files, measured in one run (it was
the module ``bkframe_spark.bench_tiers`` inside the connector before issue 39).

A DataFrame of random 1 KiB payloads (cached first) is bulk-loaded into a log (a segment
per task) and every segment offloaded by hand to a ``file://`` tier; the same again into a
second log offloaded to an S3 tier (moto's S3 server, a real HTTP process, started here).
Then, round after round in alternating order, an action that touches every payload byte
(``sum(length(payload))``) reads:

- ``parquet``: ``spark.read.parquet`` of the offloaded objects themselves -- the reference;
- ``read_log``: :func:`bkframe_spark.read_log` (Spark's Parquet reader on the objects, the
  connector for the rest -- here nothing);
- ``tier``, ``tier_payload``: the data source reading the objects by ranged reads (all
  columns; ``.schema("payload binary")``);
- ``bookies``: the data source reading the same segments' ledgers (``offloaded=bookies``),
  the path before offloaded segments were read from their tier;
- ``s3``, ``s3_payload``: the data source reading the S3 log's objects;
- ``bookies_payload``: ``bookies`` with ``.schema("payload binary")``;
- ``tier_before``, ``bookies_before``: ``tier`` and ``bookies`` as they were before issue 50
  (``memory_source.py``: a worker's objects left to the collector pyspark runs after every
  task, an object's row groups handed over whole); ``memory_unfrozen``: ``memory`` so;
- ``memory``, ``memory_payload``, ``memory_2k``: the ceiling of any Python data source here
  (``memory_source.py``): the batches the ``tier`` read yields, kept in each Python worker's
  memory, handed to Spark with no I/O (``memory_2k``: sliced to 2,000 rows, the bookies'
  chunk).

The report gives each round's MB/s of payload and the ratios to ``parquet``, the medians,
and the CPU each read cost per row in each part of the process tree (the JVM, Spark's Python
workers, the bookies, the S3 server, this driver), from ``/proc``. ``--reads`` picks some
reads (``parquet`` is always one); ``--jfr DIR`` records the JVM with Java Flight Recorder
during each timed read, into ``DIR/READ-ROUND.jfr`` (``jfr_top.py`` summarises them);
``--perf DIR`` samples every process of the tree with ``perf record`` (``perf_top.py``;
``perf`` is this process's child: its own CPU shows as the driver's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bkframe_spark.connection import close_all
from bkframe_spark.parquet_reads import read_log
from bkframe_spark.session import local_session
from loads_and_reads import spark_load, with_cluster  # beside this script: sys.path[0]
from tree_cpu import PARTS, snapshot, spent, threads

import bkframe
from bkframe.testing.servers import S3Server

READS = (
    "parquet", "read_log", "tier", "tier_payload", "bookies", "bookies_payload", "s3", "s3_payload",
    "memory", "memory_payload", "memory_2k", "tier_before", "bookies_before", "memory_unfrozen",
)


def _sum(df: Any) -> int:
    from pyspark.sql import functions as F

    return int(df.select(F.sum(F.length("payload"))).collect()[0][0])


def _connector(
    spark: Any, metadata: str, log: str, payload_only: bool = False, source: str = "bkframe", **options: str
) -> int:
    reader = spark.read.format(source)
    if payload_only:
        reader = reader.schema("payload binary")
    named = {"metadata": metadata, "log": log} if source != "bkframe-memory" else {}
    for key, value in {**named, **options}.items():
        reader = reader.option(key, value)
    return _sum(reader.load())


def _offload(metadata: str, log: str, tier: str) -> list[str]:
    """Offload every closed segment of ``log`` to ``tier``; the objects' keys."""
    with bkframe.connect(metadata) as bk:
        result = bk.logs.offload(log, tier=tier)
        return [s.offload.key for s in result.offloaded if s.offload is not None]


def bench(
    metadata: str, work: Path, size: int, total_mb: int, rounds: int, partitions: int, reads: list[str], jfr: str,
    perf: str,
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    # The Python workers import memory_source.py from beside this script.
    here = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    spark = local_session(2, app="bkframe-bench-tiers")
    spark.sparkContext.setLogLevel("ERROR")
    s3 = any(r.startswith("s3") for r in reads)
    s3_server = S3Server(work / "s3").start() if s3 else None
    try:
        from memory_source import BeforeSource, MemorySource

        spark.dataSource.register(MemorySource)
        spark.dataSource.register(BeforeSource)
        rows = max(partitions, total_mb * 1_000_000 // size)
        df = spark.range(0, rows, numPartitions=partitions).select(
            F.expr(f"cast(randstr({size}, 7) as binary)").alias("payload")
        ).cache()
        df.count()
        tier_root = work / "tier"
        tier_root.mkdir()
        started = time.perf_counter()
        spark_load(df, metadata, "tiered")
        keys = _offload(metadata, "tiered", tier_root.as_uri())
        print(f"loaded and offloaded {rows:,} rows of {size:,} B in {time.perf_counter() - started:.1f} s "
              f"({len(keys)} objects, {sum((tier_root / k).stat().st_size for k in keys) / 1e6:.0f} MB)", flush=True)
        files = [str(tier_root / k) for k in keys]
        memory = partial(_connector, spark, metadata, "", source="bkframe-memory", files=",".join(files))
        steps: dict[str, Callable[[], int]] = {
            "parquet": lambda: _sum(spark.read.parquet(*files)),
            "read_log": lambda: _sum(read_log(spark, "tiered", metadata=metadata)),
            "tier": partial(_connector, spark, metadata, "tiered"),
            "tier_payload": partial(_connector, spark, metadata, "tiered", True),
            "bookies": partial(_connector, spark, metadata, "tiered", offloaded="bookies"),
            "bookies_payload": partial(_connector, spark, metadata, "tiered", True, offloaded="bookies"),
            "memory": memory,
            "memory_payload": partial(memory, True),
            "memory_2k": partial(memory, rowsPerBatch="2000"),
            "tier_before": partial(_connector, spark, metadata, "tiered", source="bkframe-before"),
            "bookies_before": partial(_connector, spark, metadata, "tiered", source="bkframe-before",
                                      offloaded="bookies"),
            "memory_unfrozen": partial(memory, freeze="false"),
        }
        if s3_server is not None:
            creds = s3_server.credentials_file(work / "s3.ini")
            tier = f"s3://{s3_server.bucket()}/lake?endpoint={s3_server.endpoint}&region=us-east-1&credentials={creds}"
            spark_load(df, metadata, "tiered-s3")
            _offload(metadata, "tiered-s3", tier)
            steps["s3"] = partial(_connector, spark, metadata, "tiered-s3")
            steps["s3_payload"] = partial(_connector, spark, metadata, "tiered-s3", True)
        steps = {name: step for name, step in steps.items() if name == "parquet" or name in reads}
        expected = rows * size
        for name, step in steps.items():  # warm-up, not counted: Python workers, clients, footers, memory's batches
            for _ in range(3 if name.startswith("memory") else 1):  # (each worker keeps its own)
                assert step() == expected, name
        tree = snapshot()
        jvm = next(pid for pid, (part, _) in tree.items() if part == "jvm")
        if perf:
            Path(perf).mkdir(parents=True, exist_ok=True)
        results = []
        for r in range(rounds):
            order = list(steps.items())
            if r % 2:
                order.reverse()
            row: dict[str, Any] = {"size": size, "rows": rows, "round": r + 1}
            for name, step in order:
                if jfr:
                    _jcmd(jvm, "JFR.start", "name=bench", "settings=profile")
                sampler = _perf_start(perf, f"{name}-{r + 1}") if perf else None
                before = snapshot()
                start = time.perf_counter()
                assert step() == expected, name
                row[name] = time.perf_counter() - start
                row[f"{name}/cpu"] = spent(before, snapshot())
                if sampler is not None:
                    sampler.send_signal(signal.SIGINT)
                    sampler.wait()
                if jfr:
                    _jcmd(jvm, "JFR.stop", "name=bench", f"filename={Path(jfr) / f'{name}-{r + 1}.jfr'}")
            results.append(row)
            print(_line(row), flush=True)
        df.unpersist()
        return results
    finally:
        spark.stop()
        close_all()
        if s3_server is not None:
            s3_server.stop()


def _perf_start(directory: str, name: str) -> subprocess.Popen[bytes]:
    """``perf record`` of every process of the tree (user and kernel stacks' top frames),
    into ``DIR/NAME.data``, with ``DIR/NAME.parts.json`` saying which part each pid is."""
    tree = snapshot()
    base = Path(directory) / name
    base.with_suffix(".parts.json").write_text(json.dumps(threads(tree)))
    sampler = subprocess.Popen(
        ["perf", "record", "-q", "-F", "199", "-p", ",".join(map(str, tree)), "-o", str(base.with_suffix(".data"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # attached to every thread before the read starts
    return sampler


def _jcmd(pid: int, *command: str) -> None:
    subprocess.run(["jcmd", str(pid), *command], check=True, capture_output=True)


def _rate(row: dict[str, Any], key: str) -> float:
    return float(row["rows"] * row["size"] / row[key] / 1e6)


def _line(row: dict[str, Any]) -> str:
    cells = [f"{_rate(row, k):.0f} ({_rate(row, k) / _rate(row, 'parquet'):.2f})" if k in row else "-" for k in READS]
    return f"| {row['round']} | " + " | ".join(cells) + " |"


def _cpu(rows: list[dict[str, Any]], read: str, part: str) -> float:
    """Median CPU µs per row of ``part`` (or "all") in ``read``."""
    return statistics.median(
        1e6 * (sum(r[f"{read}/cpu"].values()) if part == "all" else r[f"{read}/cpu"][part]) / r["rows"] for r in rows
    )


def report(results: list[dict[str, Any]]) -> str:
    head = "| round | " + " | ".join(f"{k} MB/s (/ parquet)" for k in READS) + " |\n|" + "---|" * (len(READS) + 1)
    lines = [head] + [_line(r) for r in results]
    done = [k for k in READS if all(k in r for r in results)]
    medians = [f"{k} {statistics.median(_rate(r, k) / _rate(r, 'parquet') for r in results):.2f}" for k in done[1:]]
    lines.append("\nmedian ratio to parquet: " + ", ".join(medians) + " (aims: read_log >= 0.90, tier >= 0.80, "
                 "bookies >= 0.60)")
    lines.append("\nCPU µs per row, medians of the rounds (wall s per round in the last column)\n")
    lines.append("| read | " + " | ".join(PARTS) + " | all | wall s |\n|" + "---|" * (len(PARTS) + 3))
    for k in done:
        cells = [f"{_cpu(results, k, p):.2f}" for p in (*PARTS, "all")]
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {statistics.median(r[k] for r in results):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metadata", help="a running cluster's metadata URI (default: start 3 bookies)")
    parser.add_argument("--size", type=int, default=1024, help="row size in bytes")
    parser.add_argument("--mb", type=int, default=200, help="payload megabytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--reads", default=",".join(READS[1:]), help="the reads beside parquet, comma-separated")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 tier (moto's server)")
    parser.add_argument("--jfr", default="", help="a directory: record each timed read with Java Flight Recorder")
    parser.add_argument("--perf", default="", help="a directory: record each timed read with perf (perf_top.py)")
    args = parser.parse_args()
    reads = [r for r in args.reads.split(",") if r and not (args.no_s3 and r.startswith("s3"))]
    unknown = set(reads) - set(READS)
    if unknown:
        parser.error(f"unknown reads {sorted(unknown)}; known: {', '.join(READS)}")
    with_cluster(
        "bkframe-spark-bench-tiers-", args.metadata,
        lambda m, work: report(bench(m, work, args.size, args.mb, args.rounds, args.partitions, reads, args.jfr,
                                          args.perf)),
    )

if __name__ == "__main__":
    main()
