"""Placement from the command line: ``ledger create --placement NAME -o KEY=VALUE``."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.cli.forked_cli import bkframe_text


def bk(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = bkframe_text(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ledger_create_with_a_placement_policy(cluster_factory: Any) -> None:
    cluster = cluster_factory(4, racks=("a", "a", "b", "c"))
    meta = ["--metadata", cluster.metadata]
    rack = {f"bookie-{i}": r for i, r in enumerate("aabc")}
    for _ in range(4):  # a random choice of 3 of these 4 misses rack b or c one time in two
        ledger_id = bk(
            "ledger", "create", *meta, "-e", "3", "-w", "3", "--placement", "rack_aware", "-o", "min_racks=3"
        ).stdout.strip()
        ensemble = json.loads(bk("ledger", "metadata", ledger_id, *meta).stdout)["fragments"][0][1]
        assert sorted(rack[b] for b in ensemble) == ["a", "b", "c"]
    refused = bk("ledger", "create", *meta, "-e", "4", "-w", "4", "--placement", "rack_aware",
                 "-o", "min_racks=4", "-o", "enforce_min_racks=true", check=False)
    assert refused.returncode == 1 and "no choice gives every write set 4 racks" in refused.stderr, refused.stderr
    unknown = bk("ledger", "create", *meta, "--placement", "rack_aware", "-o", "racks=4", check=False)
    assert unknown.returncode == 1 and "unknown key(s) racks" in unknown.stderr, unknown.stderr
