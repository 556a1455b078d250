"""The ``default`` storage holds many more ledgers than it keeps indexes open, and opens
nothing at start: ledger states come from one table, indexes from a bounded cache."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from bkframe.core.counters import Counters
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage, LedgerIndex
from bkframe.plugins.ledger_storage_default.index_cache import IndexCache
from bkframe.plugins.ledger_storage_default.ledger_index import encode_header
from bkframe.storage_kit.open_files import OutOfFilesError

LEDGERS = 60
LIMIT = 4


def open_storage(root: Path, limit: int = LIMIT) -> DefaultLedgerStorage:
    counters = Counters()
    logs = SingleEntryLogManager(root / "entrylogs", counters, max_log_size=16 * 1024, max_open_logs=2)
    return DefaultLedgerStorage(root / "ledgers", logs, counters, index_initial_entries=8, max_open_indexes=limit)


def entry(ledger_id: int, entry_id: int) -> bytes:
    return b"%d:%d|" % (ledger_id, entry_id) * (1 + entry_id)


async def test_many_ledgers_through_a_small_cache_survive_a_restart(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    for lid in range(LEDGERS):
        storage.ensure_ledger(lid, b"key%d" % lid, 0)
        # Interleaved: every ledger's index is evicted and opened again between its adds.
    for e in range(3):
        for lid in range(LEDGERS):
            storage.add_entries(lid, [e], [entry(lid, e)])
            assert len(storage.open_indexes) <= LIMIT
    storage.set_fenced(7)
    storage.set_limbo(8, True)
    storage.set_lac(9, 2)
    assert storage.open_indexes.evicted > LEDGERS
    await storage.checkpoint()
    storage.delete_ledger(10)
    await storage.aclose()

    reopened = open_storage(tmp_path)
    assert len(reopened.open_indexes) == 0
    assert reopened.ledgers() == [lid for lid in range(LEDGERS) if lid != 10]
    assert len(reopened.open_indexes) == 0, "listing ledgers opens no index"
    states = {lid: reopened.ledger_state(lid) for lid in reopened.ledgers()}
    assert len(reopened.open_indexes) == 0, "ledger states open no index"
    assert states[7] is not None and states[7].fenced and states[7].master_key == b"key7"
    assert states[8] is not None and states[8].limbo
    assert states[9] is not None and states[9].lac == 2
    for lid in reopened.ledgers():
        assert [reopened.get_entry(lid, e) for e in range(3)] == [entry(lid, e) for e in range(3)]
        assert reopened.last_entry_id(lid) == 2
    assert reopened.ledger_state(10) is None and reopened.get_entry(10, 0) is None
    assert len(reopened.open_indexes) <= LIMIT
    await reopened.aclose()


async def test_a_deleted_ledger_made_again_before_a_checkpoint_keeps_one_slot(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.ensure_ledger(1, b"a", 0)
    storage.ensure_ledger(2, b"b", 0)
    await storage.checkpoint()
    storage.delete_ledger(1)
    storage.ensure_ledger(3, b"c", 0)  # must not take ledger 1's slot before the deletion is durable
    storage.ensure_ledger(1, b"a2", 0)
    await storage.aclose()
    table = (tmp_path / "ledgers" / "ledgers.tbl").read_bytes()
    assert len(table) == 3 * 128
    reopened = open_storage(tmp_path)
    state = reopened.ledger_state(1)
    assert reopened.ledgers() == [1, 2, 3] and state is not None and state.master_key == b"a2"
    await reopened.aclose()


async def test_index_headers_of_an_older_data_dir_are_adopted(tmp_path: Path) -> None:
    """A data dir of a bkframe that kept ledger states only in index headers (no table)."""
    storage = open_storage(tmp_path)
    storage.ensure_ledger(5, b"k5", 0)
    storage.add_entries(5, [0, 1], [b"x", b"y"])
    await storage.aclose()
    path = tmp_path / "ledgers" / "index" / f"{5:016x}.idx"
    idx = LedgerIndex.open(path)
    idx.state.fenced = True
    os.pwrite(idx.fd, encode_header(idx.state), 0)  # as that bkframe kept it
    idx.sync()
    idx.close()
    (tmp_path / "ledgers" / "ledgers.tbl").unlink()
    reopened = open_storage(tmp_path)
    state = reopened.ledger_state(5)
    assert state is not None and state.fenced and state.master_key == b"k5"
    assert reopened.get_entry(5, 1) == b"y"
    await reopened.aclose()


def _failing_opener(failures: int) -> tuple[list[int], object]:
    calls: list[int] = []

    def opener(ledger_id: int, create: bool) -> LedgerIndex | None:
        calls.append(ledger_id)
        if len(calls) <= failures:
            raise OSError(errno.EMFILE, "Too many open files")
        return None

    return calls, opener


def test_an_open_without_fds_sheds_half_the_cache_and_retries() -> None:
    calls, opener = _failing_opener(1)
    cache = IndexCache(4, opener)  # type: ignore[arg-type]
    assert cache.get(1) is None
    assert calls == [1, 1]


def test_an_open_still_without_fds_is_out_of_files_not_an_io_error() -> None:
    _, opener = _failing_opener(2)
    cache = IndexCache(4, opener)  # type: ignore[arg-type]
    with pytest.raises(OutOfFilesError, match=r"no file descriptor left.*ulimit"):
        cache.get(1)


def test_the_limit_is_validated() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        IndexCache(1, lambda lid, create: None)
