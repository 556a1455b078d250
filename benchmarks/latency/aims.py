"""Issue 38's aims, measured in one run on one or more checkouts taking turns (a checkout
from before the issue and one after, say), so that the ratios compare like with like on a
shared machine:

    python3 benchmarks/latency/aims.py [--rounds N] [--spark] before=/tmp/before after=$PWD

Each checkout needs its own ``.venv`` (``uv sync --all-packages`` in it). Per round, in
alternating order: ``benchmarks/latency/cpu_per_add.py`` from the checkout (``benchmarks/latency/``
before issue 39: CPU per add per bookie and of the client, p50 of one append in flight,
PD/VD/BYPASS) and ``../shared/bench/peers.py`` (1 KiB PD against Redis AOF-always, 64 KiB PD against
disk-group / 3); once per round the floors (``../shared/bench/floor.py``, bare and with
fsync, 1 KiB); with ``--spark`` the Spark connector's bench (1 KiB rows, read against
Parquet). Prints each round's figures, then the medians against the aims.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
SHARED = HERE.parent / "shared" / "bench"
LINE = re.compile(
    r"(?P<type>\w+_JOURNAL)\s+p50 (?P<p50>[\d.]+) ms\s+bookie CPU\s+(?P<bookie>\d+) us/add.*client CPU\s+(?P<client>\d+) us/add"
)
FLOOR = re.compile(r"p50 (?P<p50>[\d.]+) ms")
SPARK = re.compile(r"1,024 B rows: .*median read / Parquet (?P<ratio>[\d.]+)")
#: (what, aim, True if the figure must be at most the aim)
AIMS = [
    ("bookie CPU µs/add BYPASS", 60, True),
    ("bookie CPU µs/add VD", 80, True),
    ("client CPU µs/add (BYPASS)", 120, True),
    ("one in flight VD / bare floor", 1.5, True),
    ("one in flight BYPASS / bare floor", 1.3, True),
    ("one in flight PD / fsync floor", 1.2, True),
    ("1 KiB PD / Redis AOF-always", 1.5, False),
    ("64 KiB PD / (disk-group / 3)", 0.9, False),
    ("Spark 1 KiB read / Parquet", 0.6, False),
]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 1800) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def floors() -> dict[str, float]:
    python = str(HERE / ".venv" / "bin" / "python")
    out = {}
    for kind, extra in (("bare", []), ("fsync", ["--fsync"])):
        text = run([python, str(SHARED / "floor.py"), "--size", "1024", "--count", "3000", *extra], HERE)
        match = FLOOR.search(text)
        assert match, text
        out[kind] = float(match["p50"])
    return out


def own_script(checkout: Path, path: str, before_issue_39: list[str]) -> list[str]:
    """How ``checkout`` runs one of its benchmarks: ``path`` where it is, else the command of a
    checkout older than issue 39 (scripts/ and the Spark connector's bench module)."""
    return [path] if (checkout / path).exists() else before_issue_39


def per_add(label: str, checkout: Path) -> dict[str, dict[str, float]]:
    script = own_script(checkout, "benchmarks/latency/cpu_per_add.py", ["scripts/latency/cpu_per_add.py"])
    text = run([str(checkout / ".venv" / "bin" / "python"), *script, label], checkout)
    return {
        m["type"]: {"p50": float(m["p50"]), "bookie": float(m["bookie"]), "client": float(m["client"])}
        for m in LINE.finditer(text)
    }


def peers(checkout: Path) -> dict[tuple[str, int], float]:
    out_file = Path(tempfile.mkstemp(suffix=".json")[1])
    run(
        [sys.executable, str(SHARED / "peers.py"), "--plugin", str(SHARED / "bkframe_peer.py"),
         "--systems", "disk-group,redis-always,bkframe-pd", "--sizes", "1024,65536", "--counts", "50000,4000",
         "--out", str(out_file)],
        # In the checkout: its sandbox starts bookies with ``python -m bkframe``, which imports
        # the bkframe of the working directory first.
        checkout, env={"BKFRAME_CHECKOUT": str(checkout)},
    )
    results = json.loads(out_file.read_text())["results"]
    out_file.unlink()
    return {(r["system"], r["size"]): r["MB_per_s"] for r in results if "MB_per_s" in r}


def spark(checkout: Path) -> float:
    script = own_script(checkout, "benchmarks/spark/loads_and_reads.py", ["-m", "bkframe_spark.bench"])
    text = run([str(checkout / ".venv" / "bin" / "python"), *script, "--sizes", "1024", "--mb", "50", "--rounds", "1"],
               checkout)
    match = SPARK.search(text)
    assert match, text
    return float(match["ratio"])


def figures(label: str, checkout: Path, floor: dict[str, float], with_spark: bool) -> dict[str, float]:
    adds = per_add(label, checkout)
    rates = peers(checkout)
    out = {
        "bookie CPU µs/add BYPASS": adds["BYPASS_JOURNAL"]["bookie"],
        "bookie CPU µs/add VD": adds["VD_JOURNAL"]["bookie"],
        "client CPU µs/add (BYPASS)": adds["BYPASS_JOURNAL"]["client"],
        "one in flight VD / bare floor": adds["VD_JOURNAL"]["p50"] / floor["bare"],
        "one in flight BYPASS / bare floor": adds["BYPASS_JOURNAL"]["p50"] / floor["bare"],
        "one in flight PD / fsync floor": adds["PD_JOURNAL"]["p50"] / floor["fsync"],
        "1 KiB PD / Redis AOF-always": rates[("bkframe-pd", 1024)] / rates[("redis-always", 1024)],
        "64 KiB PD / (disk-group / 3)": rates[("bkframe-pd", 65536)] / (rates[("disk-group", 65536)] / 3),
    }
    if with_spark:
        out["Spark 1 KiB read / Parquet"] = spark(checkout)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkouts", nargs="+", help="LABEL=PATH of a checkout with its .venv")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--spark", action="store_true", help="also the Spark read bench (minutes per checkout)")
    args = parser.parse_args()
    checkouts = [(label, Path(path).resolve()) for label, _, path in (c.partition("=") for c in args.checkouts)]
    seen: dict[str, list[dict[str, float]]] = {label: [] for label, _ in checkouts}
    for round_ in range(args.rounds):
        floor = floors()
        print(f"round {round_ + 1}: floors p50 bare {floor['bare']:.3f} ms, fsync {floor['fsync']:.3f} ms", flush=True)
        for label, checkout in checkouts if round_ % 2 == 0 else list(reversed(checkouts)):
            got = figures(f"{label}{round_}", checkout, floor, args.spark)
            seen[label].append(got)
            print(f"  {label}: " + ", ".join(f"{k} {v:.2f}" for k, v in got.items()), flush=True)
    print("\n| aim | " + " | ".join(label for label, _ in checkouts) + " |")
    print("|---|" + "---|" * len(checkouts))
    for what, aim, at_most in AIMS:
        cells = []
        for label, _ in checkouts:
            values = [r[what] for r in seen[label] if what in r]
            if not values:
                cells.append("—")
                continue
            median = statistics.median(values)
            met = median <= aim if at_most else median >= aim
            cells.append(f"{median:.2f} ({'met' if met else 'not met'})")
        print(f"| {what} {'≤' if at_most else '≥'} {aim} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
