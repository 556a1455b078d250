"""The ``default`` ledger storage: entries, index growth, state, durability, corruption."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bkframe import ConfigError
from bkframe.core.config import parse_section
from bkframe.core.counters import Counters
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage, DefaultStorageConfig, IndexCorruptError
from bkframe.testing.storage_contract import LedgerStorageContract, StorageFactory, payload


def open_storage(
    root: Path,
    counters: Counters | None = None,
    *,
    max_log_size: int = 1 << 30,
    initial: int = 1024,
    compaction_threshold: float = 0.5,
) -> DefaultLedgerStorage:
    counters = counters or Counters()
    logs = SingleEntryLogManager(root / "entrylogs", counters, max_log_size=max_log_size)
    return DefaultLedgerStorage(
        root / "ledgers", logs, counters, index_initial_entries=initial, compaction_threshold=compaction_threshold
    )


class TestDefaultStorage(LedgerStorageContract):
    """The default storage keeps the storage contract, on small entry logs and indexes that
    rotate and grow during the tests."""

    @pytest.fixture
    def storage_factory(self) -> StorageFactory:
        return lambda directory, counters: open_storage(directory, counters, max_log_size=4096, initial=8)


async def test_entry_ids_beyond_initial_index_size(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, initial=4)
    storage.ensure_ledger(1, b"k", 0)
    ids = [0, 3, 4, 100, 5000]
    storage.add_entries(1, ids, [payload(1, e) + b"!" for e in ids])
    storage.add_entries(1, [70000], [b"far"])
    for e in ids:
        assert storage.get_entry(1, e) == payload(1, e) + b"!"
    assert storage.get_entry(1, 70000) == b"far"
    assert storage.get_entry(1, 69999) is None
    assert storage.last_entry_id(1) == 70000
    await storage.aclose()

    reopened = open_storage(tmp_path, initial=4)
    assert reopened.last_entry_id(1) == 70000
    assert reopened.get_entry(1, 5000) == payload(1, 5000) + b"!"
    await reopened.aclose()


async def test_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    """(Overwrites and missing entries are in the storage contract.)"""
    storage = open_storage(tmp_path)
    storage.ensure_ledger(1, b"k", 0)
    with pytest.raises(ValueError, match="entry ids"):
        storage.add_entries(1, [-2], [b"x"])
    with pytest.raises(KeyError, match="ensure_ledger"):
        storage.set_fenced(12345)
    with pytest.raises(ValueError, match="master key"):
        storage.ensure_ledger(7, b"x" * 65, 0)
    await storage.aclose()


async def test_log_rotation_keeps_old_entries_readable(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, max_log_size=2000)
    storage.ensure_ledger(1, b"k", 0)
    for e in range(100):
        storage.add_entries(1, [e], [bytes([e]) * 100])
    logs = storage._entry_logs.log_ids()
    assert len(logs) >= 5
    for e in range(100):
        assert storage.get_entry(1, e) == bytes([e]) * 100
    await storage.aclose()


async def test_corrupt_state_names_the_table_slot(tmp_path: Path) -> None:
    storage = open_storage(tmp_path)
    storage.ensure_ledger(0xABC, b"k", 0)
    await storage.aclose()
    path = tmp_path / "ledgers" / "ledgers.tbl"
    raw = bytearray(path.read_bytes())
    raw[30] ^= 0xFF  # inside the master key: only the CRC can tell
    path.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match=f"slot 0 of ledger table {re.escape(str(path))}.*CRC"):
        open_storage(tmp_path)
    raw[0:4] = b"XXXX"
    path.write_bytes(bytes(raw))
    with pytest.raises(IndexCorruptError, match=f"{re.escape(str(path))}.*magic"):
        open_storage(tmp_path)


async def test_corrupt_index_header_names_the_file(tmp_path: Path) -> None:
    """An index is opened when it is first needed, and checked then."""
    storage = open_storage(tmp_path)
    storage.ensure_ledger(0xABC, b"k", 0)
    storage.add_entries(0xABC, [0], [b"x"])
    await storage.aclose()
    path = tmp_path / "ledgers" / "index" / f"{0xABC:016x}.idx"
    raw = bytearray(path.read_bytes())
    raw[30] ^= 0xFF
    path.write_bytes(bytes(raw))
    storage = open_storage(tmp_path)
    assert storage.ledger_state(0xABC) is not None
    with pytest.raises(IndexCorruptError, match=f"{re.escape(str(path))}.*CRC"):
        storage.get_entry(0xABC, 0)
    await storage.aclose()


async def test_never_written_index_is_dropped(tmp_path: Path) -> None:
    # A crash can leave an index file whose header never reached the disk.
    (tmp_path / "ledgers" / "index").mkdir(parents=True)
    (tmp_path / "ledgers" / "index" / f"{9:016x}.idx").write_bytes(bytes(128 + 16 * 8))
    storage = open_storage(tmp_path)
    assert storage.ledgers() == []
    await storage.aclose()


async def test_counters_count_bytes_and_fsyncs(tmp_path: Path) -> None:
    counters = Counters()
    storage = open_storage(tmp_path, counters)
    storage.ensure_ledger(1, b"k", 0)
    before = counters.storage_bytes_written
    storage.add_entries(1, list(range(10)), [b"x" * 1000] * 10)
    # Entry data plus record headers in the log, plus index records.
    assert counters.storage_bytes_written - before >= 10 * 1000 + 10 * 20 + 10 * 16
    fsyncs = counters.storage_fsyncs
    await storage.checkpoint()
    # At least the entry log and the index file.
    assert counters.storage_fsyncs >= fsyncs + 2
    fsyncs = counters.storage_fsyncs
    await storage.checkpoint()
    assert counters.storage_fsyncs == fsyncs, "a checkpoint with nothing new fsyncs nothing"
    await storage.aclose()


async def test_registered_as_default_and_other_names_are_errors(tmp_path: Path) -> None:
    pm = PluginManager(load_entry_points=False)
    counters = Counters()
    logs = pm.entry_log_manager(config={"plugin": "single"}, directory=tmp_path / "e", counters=counters)
    storage = pm.ledger_storage(
        config={"plugin": "default", "index_initial_entries": 16},
        directory=tmp_path / "l",
        entry_logs=logs,
        counters=counters,
    )
    assert isinstance(storage, DefaultLedgerStorage)
    with pytest.raises(ConfigError, match=r"plugin = 'rocksdb': no installed plugin provides it \(installed: default\)"):
        pm.ledger_storage(config={"plugin": "rocksdb"}, directory=tmp_path, entry_logs=logs, counters=counters)
    await storage.aclose()


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"plugin": "default", "index_entries": 10}, "unknown key.*index_entries"),
        ({"plugin": "default", "index_initial_entries": 0}, "index_initial_entries"),
        ({"plugin": "default", "index_initial_entries": True}, "index_initial_entries"),
    ],
)
async def test_bad_config_is_a_config_error(tmp_path: Path, config: dict[str, object], match: str) -> None:
    logs = SingleEntryLogManager(tmp_path / "e", Counters())
    with pytest.raises(ConfigError, match=match):
        PluginManager().ledger_storage(config=config, directory=tmp_path / "l", entry_logs=logs, counters=Counters())
    await logs.aclose()


async def test_garbage_collection_removes_only_dead_sealed_logs(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, max_log_size=4096, compaction_threshold=0)  # removal alone
    blob = b"x" * 1000
    # Ledger 1 fills the first logs alone; then ledgers 2 and 3 interleave.
    storage.ensure_ledger(1, b"k", 0)
    for e in range(8):
        storage.add_entries(1, [e], [blob])
    for lid in (2, 3):
        storage.ensure_ledger(lid, b"k", 0)
    for e in range(8):
        for lid in (2, 3):
            storage.add_entries(lid, [e], [blob])
    logs = tmp_path / "entrylogs"
    before = sorted(p.name for p in logs.glob("*.log"))
    assert len(before) >= 6  # 3 entries a log: 3 of ledger 1 alone, 3+ mixed
    assert await storage.collect_garbage() == 0  # every log still has a live entry
    storage.delete_ledger(1)
    freed = await storage.collect_garbage()
    after = sorted(p.name for p in logs.glob("*.log"))
    assert freed > 0 and len(after) < len(before)
    storage.delete_ledger(2)
    await storage.collect_garbage()
    # Ledger 3 is intact, and the newest (active) log was never removed.
    assert [storage.get_entry(3, e) for e in range(8)] == [blob] * 8
    assert before[-1] in sorted(p.name for p in logs.glob("*.log"))
    storage.delete_ledger(3)
    await storage.collect_garbage()
    assert sorted(p.name for p in logs.glob("*.log")) == [before[-1]]
    await storage.aclose()
    # A restart sees the same: no ledger, one (empty of live entries) log.
    storage = open_storage(tmp_path, max_log_size=4096)
    assert storage.ledgers() == []
    await storage.aclose()


async def test_compaction_moves_live_entries_out_of_mostly_dead_logs(tmp_path: Path) -> None:
    counters = Counters()
    logs_dir = tmp_path / "entrylogs"

    def reopen() -> DefaultLedgerStorage:
        logs = SingleEntryLogManager(logs_dir, counters, max_log_size=8192)
        return DefaultLedgerStorage(tmp_path / "ledgers", logs, counters, compaction_threshold=0.6)

    storage = reopen()
    kept = [payload(1, e) + b"!" * 700 for e in range(30)]
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
    # Every log holds entries of both ledgers: deleting ledger 2 leaves each about half live.
    for e in range(30):
        storage.add_entries(1, [e], [kept[e]])
        storage.add_entries(2, [e], [b"?" * 700])
    before = sorted(p.name for p in logs_dir.glob("*.log"))
    assert len(before) >= 5
    assert await storage.collect_garbage() == 0  # nothing deleted: nothing to gain
    storage.delete_ledger(2)
    freed = await storage.collect_garbage()
    after = sorted(p.name for p in logs_dir.glob("*.log"))
    assert freed > 10_000 and counters.compacted_bytes > 0
    assert not set(before[:-1]) & set(after)  # every sealed log was compacted away
    assert [storage.get_entry(1, e) for e in range(30)] == kept
    await storage.aclose()
    storage = reopen()  # the moved locations were made durable
    assert [storage.get_entry(1, e) for e in range(30)] == kept
    await storage.aclose()


def test_compaction_threshold_is_validated() -> None:
    with pytest.raises(ConfigError, match="compaction_threshold = 2 should be a number from 0 to 1"):
        parse_section(DefaultStorageConfig, {"compaction_threshold": 2}, where="[ledger_storage]")


async def test_compaction_keeps_an_entry_rewritten_while_it_ran(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, max_log_size=8192, compaction_threshold=0.6)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
    for e in range(30):
        storage.add_entries(1, [e], [b"old-%d" % e + b"." * 700])
        storage.add_entries(2, [e], [b"?" * 700])
    storage.delete_ledger(2)
    await storage.checkpoint()
    logs = storage._entry_logs
    real_flush = logs.flush
    calls = 0
    rewritten = False

    async def flush_after_a_rewrite() -> None:
        # The second flush of the pass is the one that makes the copies durable, before
        # the indexes move to them: a recovery add rewrites entry 3 just then, and
        # compaction must not point it back at the old bytes.
        nonlocal calls, rewritten
        calls += 1
        if calls == 2:
            rewritten = True
            storage.add_entries(1, [3], [b"new-3"])
        await real_flush()

    logs.flush = flush_after_a_rewrite  # type: ignore[method-assign]
    assert await storage.collect_garbage() > 0 and rewritten
    assert storage.get_entry(1, 3) == b"new-3"
    assert [storage.get_entry(1, e) for e in range(30) if e != 3] == [b"old-%d" % e + b"." * 700 for e in range(30) if e != 3]
    await storage.aclose()


def _cut_log(path: Path, keep: int) -> None:
    """What a power cut leaves of an entry log whose tail was never fsynced."""
    with open(path, "r+b") as f:
        f.truncate(keep)


async def test_compaction_treats_entries_past_a_cut_log_as_missing(tmp_path: Path) -> None:
    """A power cut can leave an index pointing past its entry log's synced end (the index
    pages reached the disk first). Compaction must not fail on such entries (it used to
    raise "read of N bytes at offset M got only 0", at every GC): they are missing here."""
    counters = Counters()
    storage = open_storage(tmp_path, counters, max_log_size=64 * 1024, compaction_threshold=0.6)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
    kept = {e: b"kept %d|" % e * 20 for e in range(40)}
    for e in range(40):
        storage.add_entries(1, [e], [kept[e]])
        storage.add_entries(2, [e], [b"?" * 900])
    storage.add_entries(2, [40], [b"?" * 64 * 1024])  # log 0 is full: appends go to log 1
    (log0,) = [p for p in (tmp_path / "entrylogs").glob("*.log") if p.name == "00000000.log"]
    storage.delete_ledger(2)
    # Log 0 lost its tail while the bookie ran on (seen by GC, not at open): the last
    # entries of ledger 1 in it are gone.
    cut = storage.locate(1, 30)[1]
    _cut_log(log0, cut)
    assert await storage.collect_garbage() > 0  # no error; log 0 compacted away
    assert not log0.exists()
    assert counters.storage_entries_dropped == 10
    assert [storage.get_entry(1, e) for e in range(30)] == [kept[e] for e in range(30)]
    assert [storage.get_entry(1, e) for e in range(30, 40)] == [None] * 10
    assert storage.held_entries(1, 0, 39) == list(range(30))
    assert storage.last_entry_id(1) == 29
    await storage.aclose()


async def test_open_drops_index_records_past_the_end_of_their_log(tmp_path: Path) -> None:
    """After a power cut the index can point past an entry log's end, or into a log that
    never reached the disk. As it opens an index (first use) the storage drops those records (the entries are
    missing here; journal replay or BP-46 repair brings back what was promised), so reads
    answer "not here" instead of an I/O error, and index and logs agree from the first
    checkpoint on."""
    counters = Counters()
    storage = open_storage(tmp_path, counters, max_log_size=16 * 1024)
    storage.ensure_ledger(1, b"k", 0)
    data = {e: b"entry %d|" % e * 30 for e in range(100)}  # about 19 KB: two logs
    for e, d in data.items():
        storage.add_entries(1, [e], [d])
    await storage.aclose()
    logs = sorted((tmp_path / "entrylogs").glob("*.log"))
    assert len(logs) == 2
    reopened = open_storage(tmp_path, counters, max_log_size=16 * 1024)
    first_in_log1 = next(e for e in range(100) if reopened.locate(1, e)[0] == 1)
    cut = reopened.locate(1, first_in_log1 - 5)[1]
    await reopened.aclose()
    _cut_log(logs[0], cut)  # log 0 lost its last 5 entries
    logs[1].unlink()  # log 1 never reached the disk at all
    counters = Counters()
    storage = open_storage(tmp_path, counters)
    lost = set(range(first_in_log1 - 5, 100))
    assert counters.storage_entries_dropped == 0, "nothing is opened before it is needed"
    assert [storage.get_entry(1, e) for e in range(100)] == [None if e in lost else data[e] for e in range(100)]
    assert counters.storage_entries_dropped == len(lost)
    assert storage.last_entry_id(1) == first_in_log1 - 6
    await storage.checkpoint()
    await storage.aclose()
    counters = Counters()
    storage = open_storage(tmp_path, counters)  # the fix was made durable by the checkpoint
    assert storage.held_entries(1, 0, 99) == [e for e in range(100) if e not in lost]
    assert counters.storage_entries_dropped == 0
    await storage.aclose()


async def test_compaction_keeps_a_corrupt_record_and_its_log(tmp_path: Path) -> None:
    """A record that is there but is not the entry the index names is corruption, not a
    lost tail: compaction moves the rest, leaves that one (and its log) in place, and
    does not fail."""
    counters = Counters()
    storage = open_storage(tmp_path, counters, max_log_size=64 * 1024, compaction_threshold=0.6)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
    kept = {e: b"kept %d|" % e * 20 for e in range(20)}
    for e in range(20):
        storage.add_entries(1, [e], [kept[e]])
        storage.add_entries(2, [e], [b"?" * 900])
    storage.add_entries(2, [20], [b"?" * 64 * 1024])
    log0 = tmp_path / "entrylogs" / "00000000.log"
    storage.delete_ledger(2)
    at = storage.locate(1, 7)[1]
    with open(log0, "r+b") as f:
        f.seek(at + 4)
        f.write(b"\x99")  # the record's ledger id byte
    await storage.collect_garbage()
    assert log0.exists() and counters.storage_entries_dropped == 0
    assert [storage.get_entry(1, e) for e in range(20) if e != 7] == [kept[e] for e in range(20) if e != 7]
    assert storage.held_entries(1, 0, 19) == list(range(20))
    await storage.aclose()


class TestDefaultStorageDroppingSyncedPages(LedgerStorageContract):
    """With the entry logs' pages dropped from the page cache after each flush, and large
    entries written once configured, the storage still keeps the contract."""

    @pytest.fixture
    def storage_factory(self) -> StorageFactory:
        def make(directory: Path, counters: Counters) -> DefaultLedgerStorage:
            logs = SingleEntryLogManager(directory / "entrylogs", counters, max_log_size=4096, drop_synced_pages=True)
            return DefaultLedgerStorage(
                directory / "ledgers", logs, counters, index_initial_entries=8, large_entry_bytes=1024
            )

        return make
