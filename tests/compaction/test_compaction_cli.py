"""``bkframe log create/configure --compaction``, ``log compact`` and ``log read
--compacted`` as a user runs them (real bookies: the shared sqlite cluster)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bkframe.testing.cluster import Cluster
from tests.cli.forked_cli import bkframe_text


def test_compact_a_log_from_the_command_line_and_read_it_as_a_table(shared_cluster: Cluster) -> None:
    meta = ("--metadata", shared_cluster.metadata)
    name = "cli-compacted"
    made = bkframe_text("log", "create", name, *meta, "-e", "1", "-w", "1", "-a", "1", "--rollover-entries", "20",
                        "--compaction", "key")
    assert made.returncode == 0, made.stderr
    # 60 updates of 6 keys, one key deleted (an empty value), and records without a key.
    lines = [f"user{i % 6}=v{i}" for i in range(55)] + ["user3=", "no key here", "user0=last", "plain", "user1=x"]
    appended = bkframe_text("log", "append", name, *meta, "--key-separator", "=", stdin="\n".join(lines) + "\n")
    assert appended.returncode == 0, appended.stderr
    done = bkframe_text("log", "compact", name, *meta, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["segments_read"] == 3 and result["records_read"] == 60 and result["records_dropped"] > 40
    assert result["tombstones"] == 1
    table = bkframe_text("log", "read", name, *meta, "--compacted", "--json")
    assert table.returncode == 0, table.stderr
    rows = [json.loads(line) for line in table.stdout.splitlines()]
    got = {(r.get("key"), r["payload"]) for r in rows}
    assert got == {
        ("user0", "last"), ("user1", "x"), ("user2", "v50"), ("user4", "v52"), ("user5", "v53"),
        (None, "no key here"), (None, "plain"),
    }
    # The whole log after compaction: the latest of each key, the tombstone, the keyless records.
    everything = bkframe_text("log", "read", name, *meta, "--keys")
    assert everything.returncode == 0
    assert "user3\t\n" in everything.stdout and everything.stdout.count("user0\t") == 1
    info = bkframe_text("log", "info", name, *meta)
    assert "compaction: key" in info.stdout and "compacted" in info.stdout
    changed = bkframe_text("log", "configure", name, *meta, "--compaction", "none")
    assert changed.returncode == 0 and "compaction: none" in changed.stdout


def test_compaction_mistakes_get_one_clear_line(shared_cluster: Cluster) -> None:
    meta = ("--metadata", shared_cluster.metadata)
    name = "cli-not-compacted"
    assert bkframe_text("log", "create", name, *meta, "-e", "1", "-w", "1", "-a", "1").returncode == 0
    for args, said in (
        (("log", "compact", name), "--compaction key"),
        (("log", "configure", name, "--compaction", "size"), "write one of none, key"),
        (("log", "configure", name, "--min-dirty-ratio", "2"), "from 0 to 1"),
        (("log", "compact", "no-such-log"), "no-such-log"),
    ):
        done = bkframe_text(*args, *meta)
        assert done.returncode != 0, args
        assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_issue_48_done_when(shared_cluster: Cluster, tmp_path: Path) -> None:
    """10,000 records over 100 keys, 10 of them deleted last: after 'log compact', 'log read
    --compacted --json' gives exactly the 90 latest records at their original positions, from
    the bookies and, after an offload and the ledgers' deletion, from the tier; the whole
    history reads before; appends go on after."""
    meta = ("--metadata", shared_cluster.metadata)
    name = "issue-48"
    tier = tmp_path / "tier"
    tier.mkdir()
    made = bkframe_text("log", "create", name, *meta, "-e", "2", "-w", "2", "-a", "2", "--rollover-entries", "2500",
                        "--compaction", "key", "--offload-deletion-lag", "0")
    assert made.returncode == 0, made.stderr
    lines = [f"key{i % 100}=value{i}" for i in range(9990)] + [f"key{k}=" for k in range(90, 100)]
    appended = bkframe_text("log", "append", name, *meta, "--key-separator", "=", stdin="\n".join(lines) + "\n")
    assert appended.returncode == 0, appended.stderr
    positions = appended.stdout.split()
    assert len(positions) == 10_000
    latest = {f"key{i % 100}": (positions[i], f"value{i}") for i in range(9900, 9990) if i % 100 < 90}
    history = bkframe_text("log", "read", name, *meta, "--json")
    assert len(history.stdout.splitlines()) == 10_000  # the whole history, before compaction

    def table() -> dict[str, tuple[str, str]]:
        done = bkframe_text("log", "read", name, *meta, "--compacted", "--json")
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        return {r["key"]: (r["position"], r["payload"]) for r in rows}

    compacted = bkframe_text("log", "compact", name, *meta)
    assert compacted.returncode == 0 and "dropped 9900 of 10000 record(s)" in compacted.stdout, compacted.stdout
    assert table() == latest
    whole = bkframe_text("log", "read", name, *meta, "--json")
    assert len(whole.stdout.splitlines()) == 100  # 90 values and 10 tombstones left
    offloaded = bkframe_text("log", "offload", name, *meta, "--tier", tier.as_uri())
    assert offloaded.returncode == 0, offloaded.stderr
    deleted = bkframe_text("offloader", *meta, "--once")  # no deletion lag: the ledgers go
    gone = re.search(r"deleted (\d+) ledger", deleted.stdout)
    assert deleted.returncode == 0 and gone and int(gone[1]) >= 4, deleted.stdout  # (other tests' logs share the cluster)
    assert table() == latest  # from the tier now: the ledgers are gone
    more = bkframe_text("log", "append", name, *meta, "--key-separator", "=", stdin="key1=again\nkey95=back\n")
    assert more.returncode == 0, more.stderr
    after = table()
    assert after["key1"][1] == "again" and after["key95"][1] == "back" and len(after) == 91
