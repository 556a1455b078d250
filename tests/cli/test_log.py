"""``bkframe log ...`` run as real processes against a cluster of bookie processes (the
mistakes, each its one-line error, are rows of tests/cli/test_bad_input.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.cli.test_ledger_and_sandbox import bk


def test_log_commands(cluster_factory: Any) -> None:
    meta = ["--metadata", cluster_factory(3).metadata]
    bk("log", "create", "events", *meta, "--rollover-entries", "3", "-e", "3", "-w", "3", "-a", "2")
    appended = bk("log", "append", "events", *meta, stdin="a\nb\nc\nd\ne\n")
    assert appended.stdout.split() == ["0:0", "0:1", "0:2", "1:0", "1:1"]
    assert bk("log", "read", "events", *meta).stdout == "a\nb\nc\nd\ne\n"
    assert bk("log", "read", "events", *meta, "--from", "0:2", "--to", "1:0").stdout == "c\nd\n"
    assert bk("log", "tail", "events", *meta, "--from", "1:1", "--positions").stdout == "1:1\te\n"
    assert bk("log", "list", *meta).stdout.split() == ["events"]
    assert bk("log", "cursor", "events", "reporting", *meta, "--to", "1:0", "--ttl", "7d").stdout.split() == [
        "reporting", "1:0"
    ]
    name, position, lag, _idle, ttl, state = bk("log", "cursors", "events", *meta).stdout.rstrip("\n").split("\t")
    assert (name, position, lag, ttl, state) == ("reporting", "1:0", "2", "7d", "active")
    info = bk("log", "info", "events", *meta).stdout
    assert "PD_JOURNAL E=3 W=3 A=2" in info and "start 0:0, end 1:2" in info
    assert "cursor reporting: at 1:0, lag 2 entries, idle " in info and "TTL 7d, active" in info
    rows = [line.split("\t") for line in info.splitlines() if line[:1].isdigit()]
    assert [(r[0], r[2], r[3]) for r in rows] == [("0", "closed", "3"), ("1", "closed", "2")]
    as_json = json.loads(bk("log", "info", "events", *meta, "--json").stdout)
    assert as_json["end"] == "1:2"
    reporting = as_json["cursors"]["reporting"]
    assert (reporting["position"], reporting["lag"], reporting["ttl_s"], reporting["expired"]) == ("1:0", 2, 604800.0, False)
    # Trimming stops at the cursor; segment 0 goes, and its ledger with it.
    first_ledger = as_json["segments"][0][1]
    trimmed = bk("log", "trim", "events", *meta, "--before", "2:0").stdout
    assert trimmed.startswith(f"removed segments: 0 (ledger {first_ledger}, 3 entries); the log starts at 1:0")
    assert str(first_ledger) not in bk("ledger", "list", *meta).stdout.split()
    assert bk("log", "read", "events", *meta).stdout == "d\ne\n"
    # A follower sees what a second writer appends, across rollovers, then the writer is done.
    follower = subprocess.Popen(
        [sys.executable, "-m", "bkframe", "log", "tail", "events", *meta, "-f", "--positions"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert follower.stdout is not None
        assert [follower.stdout.readline() for _ in range(2)] == ["1:0\td\n", "1:1\te\n"]
        more = bk("log", "append", "events", *meta, stdin="f\ng\nh\ni\n").stdout.split()
        assert more == ["2:0", "2:1", "2:2", "3:0"]
        assert [follower.stdout.readline() for _ in range(4)] == ["2:0\tf\n", "2:1\tg\n", "2:2\th\n", "3:0\ti\n"]
    finally:
        follower.kill()
        follower.wait()
    # tail as tail(1) and Kafka's console consumer: the last 10 records (across segments),
    # -n N the last N, --from earliest all of them (-n with --from: tests/cli/test_bad_input.py).
    letters = [chr(c) for c in range(ord("d"), ord("s") + 1)]  # d..s: 16 records, from 1:0 on
    bk("log", "append", "events", *meta, stdin="".join(f"{c}\n" for c in letters[6:]))
    assert bk("log", "tail", "events", *meta).stdout.split() == letters[-10:]
    assert bk("log", "tail", "events", *meta, "-n", "3", "--positions").stdout.splitlines() == [
        "6:1\tq", "6:2\tr", "7:0\ts"
    ]
    assert bk("log", "tail", "events", *meta, "--from", "earliest").stdout.split() == letters
    bk("log", "delete", "events", *meta)
    assert bk("log", "list", *meta).stdout == ""
    # Records with keys and properties: a key per line, shown by read, found by time.
    bk("log", "create", "keyed", *meta)
    stdin = "k1:one\nk2:two\nno key here\n"
    assert bk("log", "append", "keyed", *meta, "--key-separator", ":", "--property", "src=cli", stdin=stdin).stdout.split() == [
        "0:0", "0:1", "0:2"
    ]
    records = [json.loads(line) for line in bk("log", "read", "keyed", *meta, "--json").stdout.splitlines()]
    assert [(r["position"], r["key"], r["payload"], r["properties"]) for r in records] == [
        ("0:0", "k1", "one", {"src": "cli"}), ("0:1", "k2", "two", {"src": "cli"}), ("0:2", None, "no key here", {"src": "cli"})
    ]
    assert all(abs(r["timestamp"] / 1000 - time.time()) < 600 for r in records)
    assert bk("log", "read", "keyed", *meta, "--since", "10m", "--keys").stdout == "k1\tone\nk2\ttwo\n-\tno key here\n"
    assert bk("log", "read", "keyed", *meta, "--since", "2099-01-01T00:00:00").stdout == ""
