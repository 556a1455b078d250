"""Before/after: two checkouts taking turns over the add path's cases, medians and spreads
(issue 50, item 2). The closing note of every change to the add, read or storage path
carries its table.

    python3 benchmarks/ab.py base=/tmp/base head=$PWD [--rounds 3] [--quick]

Each checkout needs its own ``.venv`` (``uv sync --all-packages`` in it; make the base with
``git worktree add /tmp/base <ref>``). Per round, in an order that alternates between
rounds, each checkout starts a 3-bookie cluster of its own (real processes, sqlite
metadata, its own code) and runs ``bkframe bench appends`` through the client on it for
every case: ledger type (PD, VD, BYPASS; E3 W3 A2) x entry size (100 B, 1 KiB, 64 KiB) x
appends in flight (1, 16, 256). ``--quick``: PD only, 1 KiB and 64 KiB, windows 1 and 256.
``--spark MB`` adds the Spark reads (``SPARK_DRIVER``: a log of MB MB of 1 KiB rows read by
the data source, all columns and the payload only, against ``spark.read.parquet`` of the
same rows); ``--spark-only`` runs only those.

It prints, per case, each checkout's median entries/s (and p50 latency at window 1) over
the rounds with the spread between its rounds (max - min, as a share of the median), and
flags ``WORSE`` where head's median is below base's by more than both spreads together:
a slide the rounds' noise does not explain. Absolute figures drift on a shared machine;
the ratio of one run is what counts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TYPES = ("PD_JOURNAL", "VD_JOURNAL", "BYPASS_JOURNAL")
SIZES = (100, 1024, 65536)
WINDOWS = (1, 16, 256)
#: Bytes a pipelined case appends (a window-1 case: WINDOW1_ENTRIES entries).
CASE_BYTES = 48 << 20
WINDOW1_ENTRIES = 1500

#: Run by each checkout's own Python: a cluster of its code, every case through its CLI.
DRIVER = r"""
import json, subprocess, sys, tempfile
from pathlib import Path
from bkframe.testing.cluster import Cluster
cases = json.loads(sys.argv[1])
# Older checkouts (before 9c70945) had one `bench` command where `bench appends` is now.
probe = subprocess.run([sys.executable, "-m", "bkframe", "bench", "--help"], capture_output=True, text=True)
bench = ["bench", "appends"] if "Commands:" in probe.stdout else ["bench"]
with tempfile.TemporaryDirectory(prefix="ab-") as tmp:
    cluster = Cluster(Path(tmp) / "cluster", 3).start()
    try:
        for case in cases:
            cmd = [sys.executable, "-m", "bkframe", *bench, "--metadata", cluster.metadata, "--json",
                   "--type", case["type"], "--entry-size", str(case["size"]), "--window", str(case["window"]),
                   "--count", str(case["count"]), "-e", "3", "-w", "3", "-a", "2"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900).stdout
            print(json.dumps({**case, **json.loads(out.strip().splitlines()[-1])}), flush=True)
    finally:
        cluster.close()
"""

#: ``--spark``: run by each checkout's own Python, with only the API every checkout has (the
#: ``bkframe`` data source's load and read, ``local_session``, ``Cluster``): per round, a log
#: of ``mb`` MB of 1 KiB rows loaded by Spark and written as Parquet, then read back by the
#: data source (every column, and the payload column only) and by ``spark.read.parquet``,
#: in an order that alternates, each an action over every payload byte.
SPARK_DRIVER = r"""
import json, os, shutil, sys, tempfile, time
from pathlib import Path
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import functions as F
from bkframe.testing.cluster import Cluster
from bkframe_spark.session import local_session
from bkframe_spark.connection import close_all
mb, reads = json.loads(sys.argv[1])
def total(df):
    return df.select(F.sum(F.length("payload"))).collect()[0][0]
with tempfile.TemporaryDirectory(prefix="ab-spark-") as tmp:
    cluster = Cluster(Path(tmp) / "cluster", 3).start()
    spark = local_session(2, app="ab")
    spark.sparkContext.setLogLevel("ERROR")
    try:
        rows = mb * 1_000_000 // 1024
        df = spark.range(0, rows, numPartitions=4).select(F.expr("cast(randstr(1024, 7) as binary)").alias("payload")).cache()
        df.count()
        def bk(schema=None):
            reader = spark.read.format("bkframe")
            if schema:
                reader = reader.schema(schema)
            return reader.option("metadata", cluster.metadata).option("log", "ab")
        df.limit(1000).write.format("bkframe").option("metadata", cluster.metadata).option("log", "warm").mode("append").save()
        total(spark.read.format("bkframe").option("metadata", cluster.metadata).option("log", "warm").load())
        start = time.perf_counter()
        df.write.format("bkframe").option("metadata", cluster.metadata).option("log", "ab").mode("append").save()
        load_s = time.perf_counter() - start
        df.write.mode("overwrite").parquet(str(Path(tmp) / "pq"))
        steps = {
            "read": lambda: total(bk().load()),
            "read_payload": lambda: total(bk("payload binary").load()),
            "parquet": lambda: total(spark.read.parquet(str(Path(tmp) / "pq"))),
        }
        out = {"kind": "spark", "mb": mb, "load_mb_s": round(mb / load_s, 1)}
        for name in reads:
            start = time.perf_counter()
            assert steps[name]() == rows * 1024
            out[name + "_mb_s"] = round(mb / (time.perf_counter() - start), 1)
        print(json.dumps(out), flush=True)
    finally:
        spark.stop()
        close_all()
        cluster.close()
"""
#: The Spark case's reads, in the order of even rounds (odd rounds reverse it).
SPARK_READS = ["read", "read_payload", "parquet"]


def cases(quick: bool) -> list[dict[str, object]]:
    types, sizes, windows = (("PD_JOURNAL",), (1024, 65536), (1, 256)) if quick else (TYPES, SIZES, WINDOWS)
    out: list[dict[str, object]] = []
    for kind in types:
        for size in sizes:
            for window in windows:
                count = WINDOW1_ENTRIES if window == 1 else max(2000, min(200_000, CASE_BYTES // max(size, 1)))
                out.append({"type": kind, "size": size, "window": window, "count": count})
    return out


def compile_checkout(path: Path) -> None:
    """Write the bytecode of a checkout's code and packages once, before any round: a fresh
    worktree has none, and where PYTHONDONTWRITEBYTECODE is set (this machine sets it) every
    process would compile what it imports again, ~0.4 CPU-s a client process and more in a
    bookie's lazily imported modules, counted against that checkout (issue 50, item 1: a
    "slide" of 30% in client CPU per entry was exactly this)."""
    python = path / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{path} has no .venv: run 'uv sync --all-packages' in it first")
    sources = [str(p) for p in [path / "bkframe", *path.glob("plugins/*/src"), *path.glob(".venv/lib/python3*/site-packages")]]
    subprocess.run([str(python), "-m", "compileall", "-q", *sources], cwd=path, capture_output=True, timeout=1800)


def run_checkout(path: Path, driver: str, todo: object) -> list[dict[str, object]]:
    python = path / ".venv" / "bin" / "python"
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [str(python), "-c", driver, json.dumps(todo)], cwd=path, capture_output=True, text=True, timeout=7200,
            env={"PATH": "/usr/bin:/bin", "HOME": tmp},
        )
    if proc.returncode != 0:
        raise SystemExit(f"the cases failed on {path}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def key(case: dict[str, object]) -> tuple[object, ...]:
    return case["type"], case["size"], case["window"]


def spread(values: list[float]) -> float:
    """max - min over the median: how much the rounds disagree."""
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs=2, metavar="NAME=PATH", help="base=PATH head=PATH (the first is the base)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="PD only, 1 KiB and 64 KiB, windows 1 and 256")
    parser.add_argument("--json", type=Path, default=None, help="also write every result to this file")
    parser.add_argument(
        "--case", action="append", default=[], metavar="TYPE:SIZE:WINDOW", help="only these cases (e.g. PD:1024:256)"
    )
    parser.add_argument("--spark", type=int, default=0, metavar="MB", help="also the Spark reads of a log of MB MB")
    parser.add_argument("--spark-only", action="store_true", help="only the Spark reads (with --spark)")
    args = parser.parse_args()
    named = [(n, Path(p).resolve()) for n, _, p in (c.partition("=") for c in args.checkouts)]
    todo = [] if args.spark_only else cases(args.quick)
    if args.case:
        wanted = {(t.upper(), int(z), int(w)) for t, z, w in (c.split(":") for c in args.case)}
        todo = [c for c in cases(False) if (str(c["type"]).split("_")[0], c["size"], c["window"]) in wanted]
    results: dict[str, dict[tuple[object, ...], list[dict[str, object]]]] = {n: {} for n, _ in named}
    sparks: dict[str, list[dict[str, object]]] = {n: [] for n, _ in named}
    for _, path in named:
        compile_checkout(path)
    for r in range(args.rounds):
        for name, path in named if r % 2 == 0 else list(reversed(named)):
            print(f"round {r + 1}: {name} ({path})", file=sys.stderr, flush=True)
            if todo:
                for found in run_checkout(path, DRIVER, todo):
                    results[name].setdefault(key(found), []).append(found)
            if args.spark:
                reads = SPARK_READS if r % 2 == 0 else SPARK_READS[::-1]
                sparks[name] += run_checkout(path, SPARK_DRIVER, [args.spark, reads])
    if args.json is not None:
        every = {n: [x for v in c.values() for x in v] + sparks[n] for n, c in results.items()}
        args.json.write_text(json.dumps(every, indent=1))
    (base, _), (head, _) = named
    if todo:
        print_appends(todo, results, base, head)
    if args.spark:
        print_spark(sparks, base, head)


def print_spark(sparks: dict[str, list[dict[str, object]]], base: str, head: str) -> None:
    """Each Spark figure's median and spread per checkout, and the read / Parquet ratio of
    each round (Parquet's own rate moves with the machine; the ratio of one run less)."""
    print(f"\n| Spark, 1 KiB rows | {base} (spread) | {head} (spread) | {head}/{base} |")
    print("|---|---|---|---|")
    figures = [("load MB/s", lambda x: x["load_mb_s"])]
    figures += [(f"{r} MB/s", lambda x, r=r: x[f"{r}_mb_s"]) for r in SPARK_READS]
    figures += [(f"{r} / parquet", lambda x, r=r: x[f"{r}_mb_s"] / x["parquet_mb_s"]) for r in SPARK_READS[:-1]]
    for label, figure in figures:
        b = [float(figure(x)) for x in sparks[base]]  # type: ignore[no-untyped-call]
        h = [float(figure(x)) for x in sparks[head]]  # type: ignore[no-untyped-call]
        mb, mh = statistics.median(b), statistics.median(h)
        worse = mh < mb * (1 - spread(b) - spread(h))
        print(
            f"| {label} | {mb:,.2f} ({spread(b):.0%}) | {mh:,.2f} ({spread(h):.0%}) | {mh / mb:.2f}"
            f"{' **WORSE**' if worse else ''} |"
        )


def print_appends(
    todo: list[dict[str, object]], results: dict[str, dict[tuple[object, ...], list[dict[str, object]]]], base: str, head: str
) -> None:
    print(f"| case | {base} entries/s (spread) | {head} entries/s (spread) | {head}/{base} | p50 ms at window 1 |")
    print("|---|---|---|---|---|")
    for case in todo:
        k = key(case)
        b = [float(x["entries_per_s"]) for x in results[base].get(k, [])]  # type: ignore[arg-type]
        h = [float(x["entries_per_s"]) for x in results[head].get(k, [])]  # type: ignore[arg-type]
        if not b or not h:
            continue
        mb, mh = statistics.median(b), statistics.median(h)
        worse = mh < mb * (1 - spread(b) - spread(h))
        latency = ""
        if case["window"] == 1:
            pb = statistics.median(float(x["p50_ms"]) for x in results[base][k])  # type: ignore[arg-type]
            ph = statistics.median(float(x["p50_ms"]) for x in results[head][k])  # type: ignore[arg-type]
            latency = f"{pb:.2f} / {ph:.2f}"
        name = f"{str(case['type']).split('_')[0]} {case['size']} B w{case['window']}"
        print(
            f"| {name} | {mb:,.0f} ({spread(b):.0%}) | {mh:,.0f} ({spread(h):.0%}) | {mh / mb:.2f}"
            f"{' **WORSE**' if worse else ''} | {latency} |"
        )


if __name__ == "__main__":
    main()
