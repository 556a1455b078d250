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
- ``s3``, ``s3_payload``: the data source reading the S3 log's objects.

The report gives each round's MB/s of payload and the ratios to ``parquet``, and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bkframe_spark.connection import close_all
from bkframe_spark.parquet_reads import read_log
from bkframe_spark.session import local_session
from loads_and_reads import spark_load, with_cluster  # beside this script: sys.path[0]

import bkframe
from bkframe.testing.servers import S3Server

READS = ("parquet", "read_log", "tier", "tier_payload", "bookies", "s3", "s3_payload")


def _sum(df: Any) -> int:
    from pyspark.sql import functions as F

    return int(df.select(F.sum(F.length("payload"))).collect()[0][0])


def _connector(spark: Any, metadata: str, log: str, payload_only: bool = False, **options: str) -> int:
    reader = spark.read.format("bkframe")
    if payload_only:
        reader = reader.schema("payload binary")
    for key, value in {"metadata": metadata, "log": log, **options}.items():
        reader = reader.option(key, value)
    return _sum(reader.load())


def _offload(metadata: str, log: str, tier: str) -> list[str]:
    """Offload every closed segment of ``log`` to ``tier``; the objects' keys."""
    with bkframe.connect(metadata) as bk:
        result = bk.logs.offload(log, tier=tier)
        return [s.offload.key for s in result.offloaded if s.offload is not None]


def bench(metadata: str, work: Path, size: int, total_mb: int, rounds: int, partitions: int, s3: bool) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    spark = local_session(2, app="bkframe-bench-tiers")
    spark.sparkContext.setLogLevel("ERROR")
    s3_server = S3Server(work / "s3").start() if s3 else None
    try:
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
        steps: dict[str, Callable[[], int]] = {
            "parquet": lambda: _sum(spark.read.parquet(*files)),
            "read_log": lambda: _sum(read_log(spark, "tiered", metadata=metadata)),
            "tier": partial(_connector, spark, metadata, "tiered"),
            "tier_payload": partial(_connector, spark, metadata, "tiered", True),
            "bookies": partial(_connector, spark, metadata, "tiered", offloaded="bookies"),
        }
        if s3_server is not None:
            creds = s3_server.credentials_file(work / "s3.ini")
            tier = f"s3://{s3_server.bucket()}/lake?endpoint={s3_server.endpoint}&region=us-east-1&credentials={creds}"
            spark_load(df, metadata, "tiered-s3")
            _offload(metadata, "tiered-s3", tier)
            steps["s3"] = partial(_connector, spark, metadata, "tiered-s3")
            steps["s3_payload"] = partial(_connector, spark, metadata, "tiered-s3", True)
        expected = rows * size
        for name, step in steps.items():  # warm-up, not counted: Python workers, clients, footers
            assert step() == expected, name
        results = []
        for r in range(rounds):
            order = list(steps.items())
            if r % 2:
                order.reverse()
            row: dict[str, Any] = {"size": size, "rows": rows, "round": r + 1}
            for name, step in order:
                start = time.perf_counter()
                assert step() == expected, name
                row[name] = time.perf_counter() - start
            results.append(row)
            print(_line(row), flush=True)
        df.unpersist()
        return results
    finally:
        spark.stop()
        close_all()
        if s3_server is not None:
            s3_server.stop()


def _rate(row: dict[str, Any], key: str) -> float:
    return float(row["rows"] * row["size"] / row[key] / 1e6)


def _line(row: dict[str, Any]) -> str:
    cells = [f"{_rate(row, k):.0f} ({_rate(row, k) / _rate(row, 'parquet'):.2f})" if k in row else "-" for k in READS]
    return f"| {row['round']} | " + " | ".join(cells) + " |"


def report(results: list[dict[str, Any]]) -> str:
    head = "| round | " + " | ".join(f"{k} MB/s (/ parquet)" for k in READS) + " |\n|" + "---|" * (len(READS) + 1)
    lines = [head] + [_line(r) for r in results]
    medians = [
        f"{k} {statistics.median(_rate(r, k) / _rate(r, 'parquet') for r in results):.2f}"
        for k in READS if k != "parquet" and all(k in r for r in results)
    ]
    lines.append("\nmedian ratio to parquet: " + ", ".join(medians) + " (aim: read_log or tier >= 0.90)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metadata", help="a running cluster's metadata URI (default: start 3 bookies)")
    parser.add_argument("--size", type=int, default=1024, help="row size in bytes")
    parser.add_argument("--mb", type=int, default=200, help="payload megabytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 tier (moto's server)")
    args = parser.parse_args()
    with_cluster(
        "bkframe-spark-bench-tiers-", args.metadata,
        lambda m, work: report(bench(m, work, args.size, args.mb, args.rounds, args.partitions, not args.no_s3)),
    )

if __name__ == "__main__":
    main()
