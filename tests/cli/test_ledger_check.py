"""``bkframe ledger check`` on real bookie processes: a fully replicated ledger, a bookie
that is down, and a bookie that lost its data and came back (fixed cookie)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from bkframe.client.distribution import replicas
from tests.cli.forked_cli import bkframe_text

#: Bookies that come back with an empty data dir re-stamp their cookie and start; without
#: BP-46 protection they do not repair themselves, so the loss stays for the check to see.
LOSSY = """
[bookie]
auto_fix_cookies = true
data_loss_protection = false
"""


def bk(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = bkframe_text(*args, stdin=stdin)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ledger_check(cluster_factory: Any) -> None:
    cluster = cluster_factory(3, config=LOSSY)
    meta = ["--metadata", cluster.metadata]
    ledger_id = bk("ledger", "create", *meta, "-e", "3", "-w", "2", "-a", "2").stdout.strip()
    bk("ledger", "append", ledger_id, *meta, stdin="".join(f"entry-{i}\n" for i in range(30)))
    ensemble = json.loads(bk("ledger", "metadata", ledger_id, *meta).stdout)["fragments"][0][1]

    ok = bk("ledger", "check", ledger_id, *meta)
    assert f"ledger {ledger_id} is fully replicated: every entry 0..29 is on its 2 bookies" in ok.stdout
    assert all(f"{b}\tholds 20/20" in ok.stdout for b in ensemble), ok.stdout
    report = json.loads(bk("ledger", "check", ledger_id, *meta, "--json").stdout)
    assert report["fully_replicated"] and report["unreachable"] == [] and report["last_entry"] == 29

    # A bookie is down: what it should hold cannot be verified.
    victim = cluster.by_id(ensemble[1])
    should_hold = [e for e in range(30) if victim.bookie_id in replicas(ensemble, e, 2)]
    victim.kill()
    down = bk("ledger", "check", ledger_id, *meta, check=False)
    assert down.returncode == 2, down.stderr
    assert f"{victim.bookie_id}\tUNREACHABLE" in down.stdout
    assert f"ledger {ledger_id} is under-replicated: 20 entries" in down.stdout
    assert f"unreachable: {victim.bookie_id}" in down.stdout
    report = json.loads(bk("ledger", "check", ledger_id, *meta, "--json", check=False).stdout)
    assert report["unreachable"] == [victim.bookie_id] and report["fragments"][0]["lost"] == []
    under = [e for a, b in report["fragments"][0]["under_replicated"] for e in range(a, b + 1)]
    assert under == should_hold

    # It lost its disk and came back: reachable, and it names each entry it lacks (index 1
    # of the ensemble holds the entries e with e mod 3 in {0, 1}).
    shutil.rmtree(victim.data_dir)
    victim.start(*cluster.bookie_args)
    lost = bk("ledger", "check", ledger_id, *meta, check=False)
    assert lost.returncode == 2, lost.stderr
    missing = "0-1, 3-4, 6-7, 9-10, 12-13, 15-16, 18-19, 21-22, 24-25, 27-28"
    assert f"{victim.bookie_id}\tholds 0/20, MISSING {missing}\n" in lost.stdout, lost.stdout
    assert f"missing entries on {victim.bookie_id} (20)" in lost.stdout
    report = json.loads(bk("ledger", "check", ledger_id, *meta, "--json", check=False).stdout)
    assert report["unreachable"] == [] and report["missing_by_bookie"] == {victim.bookie_id: 20}
    replica = next(r for r in report["fragments"][0]["replicas"] if r["bookie"] == victim.bookie_id)
    assert [e for a, b in replica["missing"] for e in range(a, b + 1)] == should_hold
