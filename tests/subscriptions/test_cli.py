"""``bkframe sub ...`` as real processes against the shared cluster of bookie processes."""

from __future__ import annotations

import json

from bkframe.testing.cluster import Cluster
from tests.cli.test_ledger_and_sandbox import bk


def test_sub_commands(shared_cluster: Cluster) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    bk("log", "create", "sub-cli", *meta, "--rollover-entries", "4")
    bk("log", "append", "sub-cli", *meta, "--key-separator", ":", stdin="".join(f"k{i % 3}:job {i}\n" for i in range(10)))
    made = bk("sub", "create", "sub-cli", "workers", *meta, "--key-shared", "--lease-s", "20", "--max-deliveries", "3",
              "--dead-letter", "sub-cli-dlq")
    assert made.stdout.strip() == "created subscription workers of log sub-cli (key_shared) at 0:0"
    assert bk("sub", "list", "sub-cli", *meta).stdout.split("\t")[:2] == ["workers", "key_shared"]
    first = bk("sub", "consume", "sub-cli", "workers", *meta, "-n", "4", "--json")
    lines = [json.loads(line) for line in first.stdout.splitlines()]
    assert [line["position"] for line in lines] == ["0:0", "0:1", "0:2", "0:3"]
    assert [line["payload"] for line in lines] == ["job 0", "job 1", "job 2", "job 3"]
    assert [line["key"] for line in lines] == ["k0", "k1", "k2", "k0"]
    assert {line["delivery_count"] for line in lines} == {1} and "consumed 4 record(s)" in first.stderr
    stats = json.loads(bk("sub", "stats", "sub-cli", "workers", *meta, "--json").stdout)
    assert (stats["backlog"], stats["in_flight"], stats["acked"], stats["redelivered"]) == (6, 0, 4, 0)
    rest = bk("sub", "consume", "sub-cli", "workers", *meta, "--idle-timeout", "1")
    positions = ["1:0", "1:1", "1:2", "1:3", "2:0", "2:1"]
    assert rest.stdout.splitlines() == [f"{p}\tjob {i}" for i, p in zip(range(4, 10), positions, strict=True)]
    stats = json.loads(bk("sub", "stats", "sub-cli", "workers", *meta, "--json").stdout)
    assert (stats["backlog"], stats["acked"], stats["dead_lettered"]) == (0, 10, 0)
    assert bk("sub", "delete", "sub-cli", "workers", *meta).stdout.strip() == "deleted subscription workers of log sub-cli"
    # Mistakes: one line each, what was wrong and what to do.
    gone = bk("sub", "stats", "sub-cli", "workers", *meta, check=False)
    assert gone.returncode != 0 and "has no subscription 'workers'" in gone.stderr and "Traceback" not in gone.stderr
    bad = bk("sub", "create", "sub-cli", "bad/name", *meta, check=False)
    assert bad.returncode != 0 and "bad subscription name" in bad.stderr and "Traceback" not in bad.stderr
    exists = bk("sub", "create", "sub-cli", "w2", *meta)
    assert exists.returncode == 0
    again = bk("sub", "create", "sub-cli", "w2", *meta, check=False)
    assert again.returncode != 0 and "already" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    bk("sub", "create", "sub-cli", "w3", *meta, "--state-ledger-type", "BYPASS_JOURNAL")
    listed = {line.split("\t")[0]: line.split("\t")[-1] for line in bk("sub", "list", "sub-cli", *meta).stdout.splitlines()}
    assert listed == {"w2": "PD_JOURNAL", "w3": "BYPASS_JOURNAL"}
    vd = bk("sub", "create", "sub-cli", "w4", *meta, "--state-ledger-type", "VD_JOURNAL", check=False)
    assert vd.returncode != 0 and "--state-ledger-type" in vd.stderr and "Traceback" not in vd.stderr
