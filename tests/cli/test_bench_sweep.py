"""``bkframe bench sweep`` with tiny counts, run as a real process on real 3-bookie clusters:
every cell is there with positive figures, and the plots are PNG files. No speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bkframe.bench.plots import write_plots
from bkframe.bench.sweep import SIZES, TYPES, WINDOWS, markdown_tables

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = ("throughput-window256.png", "latency-cdf-window1.png", "latency-by-window.png")


def assert_pngs(out_dir: Path) -> None:
    for name in PLOTS:
        data = (out_dir / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 10_000, name


@pytest.mark.subprocess
def test_sweep_writes_every_cell_and_the_plots(tmp_path: Path) -> None:
    # Without --out-dir: a new folder in the current directory, named on stderr (it used to be
    # docs/benchmarks, over the committed figures).
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bench", "sweep", "--scale", "0.001", "--note", "a test"],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    (out_dir,) = tmp_path.glob("bench-sweep-*Z")
    assert f"writing to {out_dir}" in proc.stderr
    sweep = json.loads((out_dir / "sweep.json").read_text())
    cells = {(c["entry_size"], c["ledger_type"], c["window"]): c for c in sweep["cells"]}
    assert set(cells) == {(s, t, w) for s in SIZES for t in TYPES for w in WINDOWS}
    for key, cell in cells.items():
        assert cell["count"] >= 10, key
        assert cell["entries_per_s"] > 0 and cell["mb_per_s"] > 0, key
        assert 0 < cell["p50_ms"] <= cell["p99_ms"] <= cell["max_ms"], key
        # Every payload byte lands on 3 bookies at least once (BYPASS: entry log only).
        assert cell["bytes_written_per_payload_byte"] >= 3, key
        if cell["window"] == 1:
            cdf = cell["latency_cdf_ms"]
            assert len(cdf) == 201 and cdf == sorted(cdf) and cdf[0] > 0, key
    assert sweep["notes"] == ["a test"] and sweep["machine"]["cpus"] >= 1 and sweep["date"].endswith("Z")
    assert sweep["command"].startswith("bkframe bench sweep")
    assert sweep["peers"]["results"] == [] and sweep["floors"] == []
    assert_pngs(out_dir)
    # It prints the cells as a markdown table for docs/benchmarks/sweep.md: a row per cell.
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "JOURNAL" in line]
    assert len(rows) == len(cells)

    # The same plots with the peers' markers and the floors' lines that --peer-bench adds.
    sweep["floors"] = [
        {"kind": kind, "entry_size": size, "p50_ms": p50, "p99_ms": 2 * p50, "appends_per_s": 1000}
        for size in SIZES for kind, p50 in (("echo", 0.2), ("fsync", 0.8))
    ]
    sweep["peers"] = {"results": [
        {"system": system, "size": size, "count": 1000, "records_per_s": 10_000.0, "MB_per_s": size / 100,
         "lat_p50_ms": 3.0, "lat_p99_ms": 6.0}
        for system in ("redis-always", "nats-r3") for size in SIZES
    ] + [{"system": "nats-r3", "size": 100, "count": 1000, "error": "a failed run has no figures"}]}
    with_peers = tmp_path / "with-peers"
    with_peers.mkdir()
    assert [p.name for p in write_plots(sweep, with_peers)] == list(PLOTS)
    assert_pngs(with_peers)
    tables = markdown_tables(sweep)
    assert "| fsync | 65,536 | 0.800 |" in tables and "| redis-always | 1,024 |" in tables and "failed: a failed run" in tables
