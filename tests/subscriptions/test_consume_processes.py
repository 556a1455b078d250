"""The issue's scenario on real processes: a log of keyed records consumed through
``bkframe sub consume`` by three processes on the shared cluster of bookie processes (a
bookie hosts the subscription's owner), one SIGKILLed mid-way and replaced. It ends with
backlog 0, every record printed at least once, a record printed twice only if the killed
process printed it (it died before its ack), and each process's records of one key in log
order (key_shared)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

from bkframe.testing.cluster import Cluster
from tests.cli.test_ledger_and_sandbox import bk

RECORDS = 300
KEYS = 12


def _consumer(meta: list[str], out: Path) -> subprocess.Popen[bytes]:
    with out.open("wb") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "bkframe", "sub", "consume", "procs", "workers", *meta, "--json", "--prefetch", "4",
             "--idle-timeout", "5"],
            stdout=f, stderr=subprocess.DEVNULL,
        )


def _printed(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("}")]


def test_consumer_processes_one_killed_and_replaced(shared_cluster: Cluster, tmp_path: Path) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    bk("log", "create", "procs", *meta, "--rollover-entries", "50")
    lines = "".join(f"k{i % KEYS}:record {i}\n" for i in range(RECORDS))
    bk("log", "append", "procs", *meta, "--key-separator", ":", stdin=lines)
    bk("sub", "create", "procs", "workers", *meta, "--key-shared", "--lease-s", "30")
    outs = [tmp_path / f"c{i}.jsonl" for i in range(4)]
    procs = [_consumer(meta, outs[i]) for i in range(3)]
    try:
        deadline = time.monotonic() + 120
        while len(_printed(outs[0])) < 20:  # the first one is well under way: kill it
            assert time.monotonic() < deadline and procs[0].poll() is None, "the first consumer printed too little"
            time.sleep(0.05)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait()
        procs.append(_consumer(meta, outs[3]))  # its replacement
        for p in procs[1:]:
            assert p.wait(timeout=180) == 0  # each stops once idle for 5 s: the backlog is done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    stats = json.loads(bk("sub", "stats", "procs", "workers", *meta, "--json").stdout)
    assert stats["backlog"] == 0 and stats["in_flight"] == 0
    printed = {i: _printed(out) for i, out in enumerate(outs)}
    by_position: dict[str, list[int]] = defaultdict(list)
    for i, records in printed.items():
        for r in records:
            by_position[str(r["position"])].append(i)
    assert len(by_position) == RECORDS  # every record printed at least once
    repeats = {p: who for p, who in by_position.items() if len(who) > 1}
    assert all(0 in who and len(who) == 2 for who in repeats.values()), repeats  # only the killed one's, once
    for i, records in printed.items():  # key_shared: each process saw each key's records in log order
        per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in records:
            seg, entry = map(int, str(r["position"]).split(":"))
            per_key[str(r["key"])].append((seg, entry))
        for key, positions in per_key.items():
            assert positions == sorted(positions), (i, key)
    assert sum(len(r) for r in printed.values()) == RECORDS + len(repeats)
