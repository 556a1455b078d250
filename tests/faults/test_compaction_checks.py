"""The compaction run's checks (compaction_checks.py) on records made by hand: an honest run
passes them, and each kind of breach is caught, alone."""

from __future__ import annotations

from typing import Any

import pytest

from bkframe import Position
from tests.faults.checks import CheckResult
from tests.faults.compaction_checks import KINDS, LogContents, check_compaction
from tests.faults.compaction_worker import record_of

WRITTEN = 60
READ_AT = 30


def _run() -> tuple[list[dict[str, Any]], LogContents]:
    """A writer's records 0..59 at positions 0:0..0:59 (each acknowledged at time seq), one
    table read to 0:30 begun at time 30.5, and the log as a clean compaction leaves it."""
    records: list[dict[str, Any]] = []
    written: LogContents = {}
    for seq in range(WRITTEN):
        key, data = record_of("tw", seq)
        records.append({"t": seq, "src": "tw", "ev": "tab-try", "seq": seq, "key": key and key.decode(), "tomb": not data})
        records.append({"t": seq + 0.1, "src": "tw", "ev": "tab-append", "pos": f"0:{seq}", "seq": seq,
                        "key": key and key.decode(), "tomb": not data})
        written[Position(0, seq)] = (key, data)
    before = {p: kv for p, kv in written.items() if p.entry_id < READ_AT}
    rows = [[str(p), k and k.decode(), int(v.decode().rsplit("/", 1)[1])] for p, (k, v) in _table(before).items()]
    records.append({"t": READ_AT + 0.5, "src": "tr", "ev": "tab-reading"})
    tombstones = [str(p) for p, (k, v) in before.items() if k is not None and not v]
    records.append({"t": READ_AT + 0.9, "src": "tr", "ev": "tab-read", "end": f"0:{READ_AT}", "rows": rows,
                    "unpassed_from": "0:0", "tombstones": tombstones})
    records.append({"t": 70, "src": "cp", "ev": "tab-compacted", "end": "1:0", "dropped": 10, "tombstones_dropped": 0,
                    "rewritten": 1})
    return records, _compacted(written)


def _latest(log: LogContents) -> dict[bytes, Position]:
    return {k: p for p, (k, _) in sorted(log.items()) if k is not None}


def _compacted(log: LogContents) -> LogContents:
    latest = set(_latest(log).values())
    return {p: kv for p, kv in log.items() if kv[0] is None or p in latest}


def _table(log: LogContents) -> LogContents:
    latest = set(_latest(log).values())
    return {p: kv for p, kv in log.items() if kv[0] is None or (p in latest and kv[1])}


def _judge(records: list[dict[str, Any]], log: LogContents, leftovers: list[str] = ()) -> CheckResult:  # type: ignore[assignment]
    result = CheckResult()
    check_compaction(records, log, _table(log), list(leftovers), result)
    return result


def test_the_compaction_checks_pass_an_honest_run() -> None:
    records, log = _run()
    result = _judge(records, log)
    assert result.failures == []
    assert result.stats["tab_appended"] == WRITTEN and result.stats["tab_reads"] == 1
    assert result.stats["tab_compactions"] == 1 and result.stats["tab_log_records"] == len(log)


def _some_key(log: LogContents) -> tuple[bytes, Position]:
    """A key whose latest record is a value, and that position."""
    return next((k, p) for k, p in sorted(_latest(log).items()) if log[p][1])


def _older(records: list[dict[str, Any]], key: bytes, before: Position) -> Position:
    """An acknowledged position of ``key`` before ``before``."""
    return max(
        Position.parse(r["pos"]) for r in records
        if r["ev"] == "tab-append" and r["key"] == key.decode() and Position.parse(r["pos"]) < before
    )


def _breach(kind: str) -> tuple[list[dict[str, Any]], LogContents, list[str]]:
    records, log = _run()
    key, latest = _some_key(log)
    if kind == "tab-wrong":
        log[latest] = (key, b"not what was written")
    elif kind == "tab-lost":
        del log[next(p for p, (k, _) in sorted(log.items()) if k is None)]
    elif kind == "tab-stale":  # the latest value gone, an older one back
        del log[latest]
        log[_older(records, key, latest)] = record_of("tw", _older(records, key, latest).entry_id)
    elif kind == "tab-twice":  # an older value left beside the latest
        log[_older(records, key, latest)] = record_of("tw", _older(records, key, latest).entry_id)
    elif kind == "tab-missing":  # the run's table read left a key out
        read = next(r for r in records if r["ev"] == "tab-read")
        keyed = [row for row in read["rows"] if row[1] is not None]
        read["rows"].remove(keyed[0])
    elif kind == "tab-early":  # the read found a tombstone gone that its cursor had not passed
        read = next(r for r in records if r["ev"] == "tab-read")
        read["tombstones"].pop()
    elif kind == "tab-leftover":
        return records, log, ["staged ledger 7 (compaction:abc)"]
    return records, log, []


@pytest.mark.parametrize("kind", KINDS)
def test_the_compaction_checks_catch_each_kind_of_breach(kind: str) -> None:
    records, log, leftovers = _breach(kind)
    result = _judge(records, log, leftovers)
    assert dict(result.kinds) == {kind: 1}, result.failures
