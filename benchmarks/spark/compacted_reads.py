"""``.venv/bin/python benchmarks/spark/compacted_reads.py``: a compacted log read as a table by
Spark (``read_log(..., compacted=True)``) against ``spark.read.parquet`` of the same latest
rows (issue 48, item 7: aim >= 0.9x), measured in one run.

Keyed rows (``--keys`` keys, ``--size`` B payloads, each key written ``--updates`` times) are
bulk-loaded into a log, which is then compacted (``Logs.compact``) and offloaded to a
``file://`` tier: its objects hold each key's latest row, with gaps in their entry ids.
Then, round after round in alternating order, an action that touches every payload byte
(``sum(length(payload))``) reads:

- ``parquet``: ``spark.read.parquet`` of those objects -- the same latest rows, the reference;
- ``compacted``: ``read_log(spark, log, compacted=True)`` (the objects by Spark's Parquet
  reader, then the window that keeps each key's latest row);
- ``read_log``: ``read_log`` without the window.

The report gives each round's MB/s of payload and the ratios to ``parquet``, and the medians.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bkframe_spark.connection import close_all
from bkframe_spark.parquet_reads import read_log
from bkframe_spark.session import local_session
from loads_and_reads import spark_load, with_cluster  # beside this script: sys.path[0]

import bkframe

READS = ("parquet", "compacted", "read_log")


def _sum(df: Any) -> int:
    from pyspark.sql import functions as F

    return int(df.select(F.sum(F.length("payload"))).collect()[0][0])


def bench(metadata: str, work: Path, size: int, keys: int, updates: int, rounds: int) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    spark = local_session(2, app="bkframe-bench-compacted")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = keys * updates
        df = spark.range(0, rows, numPartitions=4).select(
            F.expr(f"cast(randstr({size}, 7) as binary)").alias("payload"),
            F.expr(f"cast(concat('key-', cast(id % {keys} as string)) as binary)").alias("key"),
        )
        started = time.perf_counter()
        with bkframe.connect(metadata) as bk:
            bk.logs.create("table", compaction="key")
        spark_load(df, metadata, "table")
        tier = work / "tier"
        tier.mkdir()
        with bkframe.connect(metadata) as bk, tempfile.TemporaryDirectory() as tmp:
            result = bk.logs.compact("table", work_dir=Path(tmp))
            keys_ = [s.offload.key for s in bk.logs.offload("table", tier=tier.as_uri()).offloaded if s.offload]
        print(f"loaded {rows:,} rows of {size:,} B over {keys:,} keys, compacted ({result.records_dropped:,} dropped in "
              f"{result.seconds:.1f} s) and offloaded in {time.perf_counter() - started:.1f} s", flush=True)
        files = [str(tier / k) for k in keys_]
        steps = {
            "parquet": lambda: _sum(spark.read.parquet(*files)),
            "compacted": lambda: _sum(read_log(spark, "table", metadata=metadata, compacted=True)),
            "read_log": lambda: _sum(read_log(spark, "table", metadata=metadata)),
        }
        expected = keys * size
        for name, step in steps.items():  # warm-up, not counted
            assert step() == expected, name
        results = []
        for r in range(rounds):
            order = list(steps.items())
            if r % 2:
                order.reverse()
            row: dict[str, Any] = {"size": size, "rows": keys, "round": r + 1}
            for name, step in order:
                start = time.perf_counter()
                assert step() == expected, name
                row[name] = time.perf_counter() - start
            results.append(row)
            print(_line(row), flush=True)
        return results
    finally:
        spark.stop()
        close_all()


def _rate(row: dict[str, Any], key: str) -> float:
    return float(row["rows"] * row["size"] / row[key] / 1e6)


def _line(row: dict[str, Any]) -> str:
    cells = [f"{_rate(row, k):.0f} ({_rate(row, k) / _rate(row, 'parquet'):.2f})" for k in READS]
    return f"| {row['round']} | " + " | ".join(cells) + " |"


def report(results: list[dict[str, Any]]) -> str:
    head = "| round | " + " | ".join(f"{k} MB/s (/ parquet)" for k in READS) + " |\n|" + "---|" * (len(READS) + 1)
    medians = [f"{k} {statistics.median(_rate(r, k) / _rate(r, 'parquet') for r in results):.2f}" for k in READS[1:]]
    return "\n".join([head, *(_line(r) for r in results), "\nmedian ratio to parquet: " + ", ".join(medians)
                      + " (aim: compacted >= 0.90)"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--metadata", help="a running cluster's metadata URI (default: start 3 bookies)")
    parser.add_argument("--size", type=int, default=1024, help="payload bytes")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--updates", type=int, default=3, help="rows per key")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with_cluster(
        "bkframe-spark-bench-compacted-", args.metadata,
        lambda m, work: report(bench(m, work, args.size, args.keys, args.updates, args.rounds)),
    )


if __name__ == "__main__":
    main()
