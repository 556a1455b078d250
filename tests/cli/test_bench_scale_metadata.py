"""``bkframe bench scale metadata`` at a small size: it fills the store as asked and times
every target (docs/scaling.md has the figures at 10^6 ledgers)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_bench_scale_metadata_fills_and_times_a_small_store(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    args = ["--metadata", uri, "--ledgers", "500", "--logs", "50", "--fill-workers", "1", "--clients", "1", "--seconds", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bench", "scale", "metadata", *args, "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert (result["ledgers"], result["logs"]) == (500, 50)
    # Ledgers sit on three consecutive of 100 simulated bookies: 15 of 500 on each.
    assert result["bookie_ledgers"] == 15
    assert result["creates_per_s"] > 0
    # A create is one store write, plus a share of the id blocks and bookie listings.
    assert 1.0 <= result["store_calls_per_create"] < 1.5, result
    for key in ("page_s", "full_listing_s", "full_listing_mb", "bookie_s", "bookie_mb", "status_page_s", "ledger_list_api_s"):
        assert result[key] > 0, key
    # The GC pass holds the bookie's 15 ledgers and 100 the store does not have, and finds those.
    assert result["gc_local_ledgers"] == 115 and result["gc_s"] > 0
    # The lost bookie's 15 ledgers were all marked, by a real auditor, and the views read them.
    assert result["lost_ledgers"] == result["lost_marked"] == 15, result
    assert 0 < result["lost_first_mark_s"] <= result["lost_all_marked_s"]
    assert result["status_page_marked_s"] > 0 and result["autorecovery_status_s"] > 0

    # Without a fill, the same store is timed again, with the ledgers the clients made; the table.
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bench", "scale", "metadata", "--no-fill", "--metadata", uri, "--clients", "1",
         "--seconds", "0.5"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [c.strip() for c in lines[0].split(" | ")] == ["what", "measured", "target", "met"] and len(lines) == 13, proc.stdout
    assert "filling" not in proc.stderr
    # The first run's marks were cleared first: the lost bookie's marks are all made again.
    assert any(line.startswith("lost bookie: its ") and line.endswith("| yes") for line in lines), proc.stdout
