"""``perf_top.py DIR/READ-ROUND.data [...]``: where the samples of ``tier_reads.py --perf``
went, by part of the process tree (the JVM, Spark's Python workers, the bookies, ...) and by
shared object (``[unknown]`` in the JVM is JIT-compiled Java; ``libpython`` is the Python
interpreter itself) and thread name (digits folded), then the top symbols of each part. Percentages are of all samples of
the files given.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import TypeVar

#: ``  12.34%  TID:COMM  WHAT`` (a thread's name may have spaces; perf pads it to 16 columns).
_LINE = re.compile(r"^\s*([\d.]+)%\s+(\d+):(.{16})\s*(.*?)\s*$")


def _report(data: Path, key: str) -> list[tuple[float, int, str, str]]:
    out = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none", "--sort", f"pid,{key}",
         "--percent-limit", "0.05"],
        check=True, capture_output=True, text=True,
    ).stdout
    return [
        (float(m[1]), int(m[2]), re.sub(r"\d+", "N", m[3].strip()), m[4])
        for line in out.splitlines() if (m := _LINE.match(line))
    ]


K = TypeVar("K")


def _ranked(shares: dict[K, float]) -> list[tuple[K, float]]:
    """Largest share first (as Counter.most_common)."""
    return sorted(shares.items(), key=lambda item: item[1], reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    # (shares are fractions: a Counter's values are ints to mypy)
    by_thread: defaultdict[tuple[str, str], float] = defaultdict(float)
    by_dso: defaultdict[tuple[str, str], float] = defaultdict(float)
    by_sym: defaultdict[tuple[str, str], float] = defaultdict(float)
    for data in args.files:
        parts = {int(k): v for k, v in json.loads(data.with_suffix(".parts.json").read_text()).items()}
        for share, pid, thread, dso in _report(data, "dso"):
            by_dso[(parts.get(pid, "other"), dso)] += share / len(args.files)
            by_thread[(parts.get(pid, "other"), thread)] += share / len(args.files)
        for share, pid, _, sym in _report(data, "sym"):
            by_sym[(parts.get(pid, "other"), sym)] += share / len(args.files)
    totals: defaultdict[str, float] = defaultdict(float)
    for (part, _), share in by_dso.items():
        totals[part] += share
    for part, total in _ranked(totals):
        print(f"\n{part}: {total:.1f}% of samples")
        for (p, thread), share in _ranked(by_thread):
            if p == part and share >= 0.5:
                print(f"  {share:5.1f}%  thread {thread}")
        for (p, dso), share in _ranked(by_dso):
            if p == part and share >= 0.3:
                print(f"  {share:5.1f}%  {dso}")
        print("  top symbols:")
        for (_, sym), share in [x for x in _ranked(by_sym) if x[0][0] == part][: args.top]:
            print(f"  {share:5.1f}%  {sym[:110]}")


if __name__ == "__main__":
    main()
