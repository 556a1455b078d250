"""``bkframe bench backends``, small, as a real process on three real bookies: both event
loops measured in one run, alternating, and the ratios printed (docs/benchmarks/event-loops.md's
figures come from the same command at full size)."""

from __future__ import annotations

import json
import subprocess
import sys

from bkframe.testing.cluster import Cluster


def test_bench_backends_alternates_asyncio_and_trio(shared_cluster: Cluster) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bench", "backends", "--metadata", shared_cluster.metadata, "--rounds", "2",
         "--count", "300", "--latency-count", "20", "--entry-size", "100", "--json"],
        capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    *runs, summary = (json.loads(line) for line in proc.stdout.splitlines())
    # Which backend goes first alternates, so that drift hits both alike.
    assert [(r["backend"], r["round"]) for r in runs] == [("asyncio", 0), ("trio", 0), ("trio", 1), ("asyncio", 1)]
    assert all(r["entries_per_s"] > 0 and r["w1_p50_ms"] > 0 and r["cpu_us"] > 0 for r in runs), runs
    ratios = summary["ratios"]
    assert {"throughput", "window1_p50", "cpu_per_entry"} <= set(ratios) and all(v > 0 for v in ratios.values())
