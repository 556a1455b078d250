"""``bkframe log create/configure --compaction``, ``log compact`` and ``log read
--compacted`` as a user runs them (real bookies: the shared sqlite cluster)."""

from __future__ import annotations

import json

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
