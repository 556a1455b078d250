"""The default storage's range reads (READ_BATCH): the same bytes as ``get_entry``, one read
per run of adjacent records, stopping where ``get_entry`` would not give the entry."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import RangeReadStorage
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.plugins.ledger_storage_default import storage as storage_module
from bkframe.plugins.ledger_storage_default.storage import SPAN_GAP


def open_storage(root: Path, max_log_size: int = 1 << 20) -> DefaultLedgerStorage:
    counters = Counters()
    logs = SingleEntryLogManager(root / "entrylogs", counters, max_log_size=max_log_size)
    return DefaultLedgerStorage(root / "ledgers", logs, counters, index_initial_entries=8)


def entry(ledger_id: int, entry_id: int) -> bytes:
    return b"%d:%d|" % (ledger_id, entry_id) * (1 + entry_id % 7)


def got(storage: DefaultLedgerStorage, ledger_id: int, first: int, last: int, step: int = 1, max_bytes: int = 1 << 20):
    ids, parts = storage.get_entries(ledger_id, first, last, step, max_bytes)
    return list(ids), [bytes(p) for p in parts]


def test_range_reads_match_single_reads_across_batches_ledgers_and_logs(tmp_path: Path) -> None:
    # Small logs and two ledgers' batches interleaved: runs break at log ends and at the
    # other ledger's records.
    storage = open_storage(tmp_path, max_log_size=4096)
    assert isinstance(storage, RangeReadStorage)
    for lo in range(0, 300, 30):
        for lid in (1, 2):
            storage.add_entries(lid, list(range(lo, lo + 30)), [entry(lid, e) for e in range(lo, lo + 30)])
    for lid in (1, 2):
        assert got(storage, lid, 0, 299) == (list(range(300)), [entry(lid, e) for e in range(300)])
        assert got(storage, lid, 7, 100, step=3) == (list(range(7, 101, 3)), [entry(lid, e) for e in range(7, 101, 3)])
    assert got(storage, 1, 290, 400) == (list(range(290, 300)), [entry(1, e) for e in range(290, 300)])
    assert got(storage, 3, 0, 10) == ([], [])
    assert got(storage, 1, 300, 310) == ([], [])


def test_a_striped_bookies_range_read_skips_the_entries_it_does_not_hold(tmp_path: Path) -> None:
    # E=3, W=2: this bookie holds two of every three entries, adjacent in its log; a reader
    # asks it for every third.
    storage = open_storage(tmp_path)
    held = [e for e in range(300) if e % 3 != 2]
    for lo in range(0, len(held), 50):
        ids = held[lo : lo + 50]
        storage.add_entries(1, ids, [entry(1, e) for e in ids])
    for start in (0, 1):
        want = list(range(start, 300, 3))
        assert got(storage, 1, start, 299, step=3) == (want, [entry(1, e) for e in want])
    assert got(storage, 1, 2, 299, step=3) == ([], [])
    assert got(storage, 1, 0, 299)[0] == [0, 1]


def test_a_range_read_stops_at_a_gap_and_after_about_max_bytes(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.add_entries(1, [0, 1, 2, 4, 5], [b"a" * 100] * 5)
    assert got(storage, 1, 0, 5)[0] == [0, 1, 2]
    assert got(storage, 1, 3, 5) == ([], [])
    assert got(storage, 1, 0, 5, max_bytes=250)[0] == [0, 1]
    assert got(storage, 1, 0, 5, max_bytes=10)[0] == [0], "the first entry always"


def test_a_record_that_is_not_the_entry_ends_the_range_before_it(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.add_entries(1, list(range(10)), [entry(1, e) for e in range(10)])
    idx = storage._existing(1)
    assert idx is not None
    idx.store_one(6, *idx.read_one(2))  # the index points entry 6 at entry 2's record
    assert got(storage, 1, 0, 9) == (list(range(6)), [entry(1, e) for e in range(6)])
    assert got(storage, 1, 6, 9) == ([], [])


def test_a_torn_log_tail_ends_the_range_before_it(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.add_entries(1, list(range(10)), [entry(1, e) for e in range(10)])
    storage.add_entries(2, [0], [bytes(SPAN_GAP + 1)])  # another ledger's record: two spans of ledger 1
    storage.add_entries(1, list(range(10, 20)), [entry(1, e) for e in range(10, 20)])
    log = next((tmp_path / "entrylogs").rglob("*.log"))
    idx = storage._existing(1)
    assert idx is not None
    cut = idx.read_one(15)[0]
    os.truncate(log, cut)
    # The second run cannot be read whole: the range ends with the first (the client reads
    # the rest one by one, and get_entry says what is wrong with each).
    assert got(storage, 1, 0, 19) == (list(range(10)), [entry(1, e) for e in range(10)])
    assert got(storage, 1, 10, 19) == ([], [])


def test_a_range_read_reads_no_more_than_a_span_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = open_storage(tmp_path)
    storage.add_entries(1, list(range(40)), [entry(1, e) for e in range(40)])
    reads: list[int] = []
    real = storage._entry_logs.read

    def counted(log_id: int, offset: int, length: int) -> bytes:
        reads.append(length)
        return real(log_id, offset, length)

    monkeypatch.setattr(storage._entry_logs, "read", counted)
    monkeypatch.setattr(storage_module, "SPAN_BYTES", 200)
    assert got(storage, 1, 0, 39) == (list(range(40)), [entry(1, e) for e in range(40)])
    assert len(reads) > 1 and max(reads) <= 200
    reads.clear()
    monkeypatch.setattr(storage_module, "SPAN_BYTES", 4 << 20)
    assert got(storage, 1, 0, 39)[0] == list(range(40))
    assert len(reads) == 1, "one batch's records: one read"
