"""The checks of a compaction run (RunConfig.compaction): what the compacted log and the
table reads during the run must show, given what its writer, compactors and reader recorded
(compaction_worker.py) and what the log holds after the run (settled, then compacted once
more with no fault).

Kinds of breach (each a failure):

``tab-wrong``     a record in the log, or a row of a table read, is not what was written at
                  its position (another key, another payload)
``tab-lost``      an acknowledged record without a key is gone, or an acknowledged value is
                  gone while no later record of its key remains: compaction dropped what it
                  must keep
``tab-stale``     a key's latest record in the log, or a table read's row, is older than an
                  acknowledged record of the key (an older value came back)
``tab-missing``   a table read left out a key whose latest acknowledged record (before the
                  read began) is a value, with no tombstone of it tried since (before the read
                  returned): a reader saw the key set with a key missing
``tab-twice``     a key appears twice in a table read, or twice in the log after the final
                  compaction (it was not compacted)
``tab-leftover``  the final compaction left staged ledgers or garbage in the log's record
``tab-early``     a tombstone the reader's cursor had not passed was gone (dropped early),
                  though no later record of its key was tried before the read returned
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import attrs

from bkframe import Position
from tests.faults.checks import CheckResult
from tests.faults.compaction_worker import record_of

KINDS = ("tab-wrong", "tab-lost", "tab-stale", "tab-missing", "tab-twice", "tab-leftover", "tab-early")

#: The log after the run: each position's (key, payload).
LogContents = dict[Position, tuple[bytes | None, bytes]]


@attrs.frozen
class Acked:
    position: Position
    seq: int
    key: str | None
    tomb: bool
    t: float
    src: str


def _expected(src: str, seq: int) -> tuple[bytes | None, bytes]:
    return record_of(src, seq)


def check_compaction(
    records: list[dict[str, Any]], log: LogContents, table: LogContents, leftovers: list[str], result: CheckResult
) -> None:
    """Judge a compaction run (see the module); ``leftovers``: what the final compaction left
    in the log's record (staged ledgers, garbage), described."""
    acked = [
        Acked(Position.parse(r["pos"]), r["seq"], r["key"], r["tomb"], r["t"], r["src"])
        for r in records if r["ev"] == "tab-append"
    ]
    tried_tombs: dict[str, list[tuple[int, float]]] = defaultdict(list)  # key -> (seq, time) of tombstones tried
    for r in records:
        if r["ev"] == "tab-try" and r["tomb"]:
            tried_tombs[r["key"]].append((r["seq"], r["t"]))
    by_position = {a.position: a for a in acked}
    s = result.stats
    s["tab_appended"] = len(acked)
    s["tab_compactions"] = sum(1 for r in records if r["ev"] == "tab-compacted")
    s["tab_compact_errors"] = sum(1 for r in records if r["ev"] == "tab-compact-error")
    s["tab_offloaded"] = sum(len(r["segments"]) for r in records if r["ev"] == "tab-offloaded")
    s["tab_dropped"] = sum(r["dropped"] for r in records if r["ev"] == "tab-compacted")
    s["tab_tombstones_dropped"] = sum(r["tombstones_dropped"] for r in records if r["ev"] == "tab-compacted")
    s["tab_log_records"] = len(log)
    for what in leftovers:
        result.fail("tab-leftover", what)

    # The log: what it holds is what was written there.
    for position, (key, data) in log.items():
        a = by_position.get(position)
        if a is not None and (key, data) != _expected(a.src, a.seq):
            result.fail("tab-wrong", f"the log's {position} holds {key!r}={data[:40]!r}, not {a.src}'s record {a.seq}")
    latest_in_log: dict[str, Position] = {}
    seen_keys: defaultdict[str, int] = defaultdict(int)
    for position in sorted(log):
        key = log[position][0]
        if key is not None:
            latest_in_log[key.decode()] = position
            seen_keys[key.decode()] += 1
    for name, count in seen_keys.items():
        if count > 1:
            result.fail("tab-twice", f"key {name} has {count} records in the log after the final compaction")
    latest_acked: dict[str, Acked] = {}
    for a in sorted(acked, key=lambda a: a.position):
        if a.key is None:
            if a.position not in log:
                result.fail("tab-lost", f"{a.src}'s keyless record {a.seq} at {a.position} (acknowledged) is gone")
        else:
            latest_acked[a.key] = a
    for name, a in latest_acked.items():
        found = latest_in_log.get(name)
        if found is not None and found < a.position:
            result.fail("tab-stale", f"key {name}: the log's latest is at {found}, before its acknowledged {a.position}")
        elif found is None and not a.tomb:
            result.fail("tab-lost", f"key {name}: its acknowledged value at {a.position} is gone and nothing later remains")

    # The final table: the log's latest record of each key unless a tombstone, and the keyless.
    expected_table = {
        p: kv for p, kv in log.items() if kv[0] is None or (latest_in_log[kv[0].decode()] == p and kv[1])
    }
    if table != expected_table:
        extra = sorted(set(table) - set(expected_table))[:5]
        missing = sorted(set(expected_table) - set(table))[:5]
        result.fail("tab-missing", f"the final table read differs from the log's latest records: rows not expected "
                                   f"{extra}, rows missing {missing}")

    # The table reads during the run.
    _check_reads(records, acked, tried_tombs, result)
    _check_tombstones(records, acked, result)


def _check_reads(
    records: list[dict[str, Any]], acked: list[Acked], tried_tombs: dict[str, list[tuple[int, float]]],
    result: CheckResult,
) -> None:
    by_position = {a.position: a for a in acked}
    started: dict[str, float] = {}
    reads = 0
    for r in sorted(records, key=lambda r: r["t"]):
        if r["ev"] == "tab-reading":
            started[r["src"]] = r["t"]
            continue
        if r["ev"] != "tab-read":
            continue
        reads += 1
        began = started.get(r["src"], r["t"])
        end = Position.parse(r["end"])
        rows: dict[str, Position] = {}
        for pos_text, key, seq in r["rows"]:
            position = Position.parse(pos_text)
            a = by_position.get(position)
            if a is not None and (a.key != key or a.seq != seq):
                result.fail("tab-wrong", f"a table read's row at {position} is {key}/{seq}, not {a.src}'s {a.key}/{a.seq}")
            if key is not None:
                if key in rows:
                    result.fail("tab-twice", f"a table read (to {end}) has key {key} at {rows[key]} and at {position}")
                rows[key] = position
        # Each key's latest record acknowledged before the read began (so before its end).
        before: dict[str, Acked] = {}
        for a in acked:
            if a.key is not None and a.t < began and a.position < end:
                if a.key not in before or before[a.key].position < a.position:
                    before[a.key] = a
        for key, a in before.items():
            found = rows.get(key)
            if found is not None and found < a.position:
                result.fail("tab-stale", f"a table read (to {end}) has key {key} at {found}, older than its "
                                         f"acknowledged {a.position}")
            elif found is None and not a.tomb and not any(s > a.seq and t < r["t"] for s, t in tried_tombs.get(key, ())):
                result.fail("tab-missing", f"a table read (to {end}) left out key {key}, whose value at {a.position} "
                                           f"was acknowledged before it began, with no tombstone tried since")
    result.stats["tab_reads"] = reads


def _check_tombstones(records: list[dict[str, Any]], acked: list[Acked], result: CheckResult) -> None:
    """Every acknowledged tombstone the reader's cursor had not passed was in what it read
    there, unless a later record of its key was tried before the read returned (that one
    would replace it: a tombstone that is not its key's latest goes as any older record)."""
    tries: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in records:
        if r["ev"] == "tab-try" and r["key"] is not None:
            tries[r["key"]].append((r["seq"], r["t"]))
    started: dict[str, float] = {}
    for r in sorted(records, key=lambda r: r["t"]):
        if r["ev"] == "tab-reading":
            started[r["src"]] = r["t"]
        if r["ev"] != "tab-read":
            continue
        began = started.get(r["src"], r["t"])
        first, end = Position.parse(r["unpassed_from"]), Position.parse(r["end"])
        seen = {Position.parse(p) for p in r["tombstones"]}
        for a in acked:
            if not a.tomb or a.t >= began or not first <= a.position < end or a.position in seen:
                continue
            assert a.key is not None
            if any(s > a.seq and t < r["t"] for s, t in tries[a.key]):
                continue
            result.fail("tab-early", f"tombstone of key {a.key} at {a.position} was gone from a read from {first} "
                                     f"(the reader's cursor) to {end}")
