"""The filesystem journal: group commit, rolling, replay, torn tails, corruption, config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from bkframe_journal_fs.fs_journal import FsJournal

from bkframe import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import JournalCorruptError, JournalPosition
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.journal_contract import JournalContract, JournalFactory, write_records


def make(tmp_path: Path, counters: Counters | None = None, **config: object) -> FsJournal:
    """The journal a bookie makes of ``[journal] plugin = "journal_fs"`` and ``config``."""
    journal = PluginManager().journal(
        config={"plugin": "journal_fs", **config}, directory=tmp_path, counters=counters or Counters()
    )
    assert isinstance(journal, FsJournal)
    return journal


def replayed(tmp_path: Path, since: JournalPosition | None = None) -> list[bytes]:
    return [rec for _, rec in FsJournal(tmp_path, Counters()).replay(since)]


class TestFsJournal(JournalContract):
    """journal_fs keeps the journal contract, with files small enough to roll often."""

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        return lambda directory, counters: make(directory, counters, max_file_size=5_000, preallocate_bytes=64 * 1024)

    def check_positions(self, positions: list[JournalPosition]) -> None:
        assert len({p.file_id for p in positions}) >= 5, "the records should span files"


async def test_rolling_by_size_and_removing_files_before_a_mark(tmp_path: Path) -> None:
    journal = make(tmp_path, max_file_size=10_000, preallocate_bytes=0)
    records = [os.urandom(300) for _ in range(200)]
    await write_records(journal, records)
    files = sorted(tmp_path.glob("*.txn"))
    assert len(files) >= 5
    positions = list(FsJournal(tmp_path, Counters()).replay(None))
    assert [r for _, r in positions] == records
    mark = positions[99][0]
    # Files wholly before the mark go; replay from the mark still sees the rest.
    reopened = FsJournal(tmp_path, Counters())
    assert reopened.remove_files_before(mark) == mark.file_id - 1
    assert replayed(tmp_path, mark) == records[100:]


async def test_preallocation(tmp_path: Path) -> None:
    journal = make(tmp_path, preallocate_bytes=1 << 20)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.wait_durable(journal.append([b"x" * 100]))
        (path,) = tmp_path.glob("*.txn")
        assert path.stat().st_size >= 1 << 20
        await journal.aclose()
        nursery.cancel_scope.cancel()


async def test_torn_tail_is_truncated_and_journal_goes_on(tmp_path: Path) -> None:
    records = [b"rec-%04d" % i * 10 for i in range(100)]
    await write_records(make(tmp_path, preallocate_bytes=0), records)
    (path,) = tmp_path.glob("*.txn")
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size - 7)  # the last record is cut in the middle
    assert replayed(tmp_path) == records[:-1]
    # Garbage after the last complete record is a torn tail too.
    with open(path, "ab") as f:
        f.write(b"\x55\x1e\xc4\xb0garbage")
    journal = make(tmp_path)
    assert [r for _, r in journal.replay(None)] == records[:-1]
    await write_records(journal, [b"after"])
    assert replayed(tmp_path) == [*records[:-1], b"after"]


async def test_corruption_before_the_tail_refuses(tmp_path: Path) -> None:
    records = [b"record-%04d" % i for i in range(100)]
    await write_records(make(tmp_path), records)
    (path,) = tmp_path.glob("*.txn")
    data = bytearray(path.read_bytes())
    at = data.find(b"record-0010")
    data[at + 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError) as err:
        replayed(tmp_path)
    assert str(path) in str(err.value)
    assert f"offset {at - 12}" in str(err.value)


def test_config_errors_and_other_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key.*max_wiat_ms"):
        make(tmp_path, max_wiat_ms=1)
    with pytest.raises(ConfigError, match="fsync = 'yes' should be true or false"):
        make(tmp_path, fsync="yes")
    # The journal answers its own name only: another name is a clear error naming what is installed.
    with pytest.raises(ConfigError, match=r"plugin = 'other': no installed plugin provides it \(installed: journal_fs\)"):
        PluginManager().journal(config={"plugin": "other"}, directory=tmp_path, counters=Counters())


async def test_large_records_are_written_from_their_parts_and_checksummed_off_the_loop(tmp_path: Path) -> None:
    """Records of 64 KiB and more get their CRC in the worker thread and their large parts
    written where they are; they replay byte for byte among small ones, across rolls, and a
    damaged one is caught by its CRC."""
    journal = make(tmp_path, max_file_size=1 << 20, preallocate_bytes=0)
    records = []
    for i in range(60):
        parts = [b"head %d|" % i, os.urandom(70_000 + i), b"mid", os.urandom(1000 * (i % 20)), os.urandom(20_000)]
        records.append(parts[: 1 + i % 5] if i % 7 else [os.urandom(i)])
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        seqs = [journal.append(parts) for parts in records]
        await journal.wait_durable(seqs[-1])
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert len(list(tmp_path.glob("*.txn"))) >= 3
    assert replayed(tmp_path) == [b"".join(parts) for parts in records]
    # Flip one byte inside a large part of the last file's last record: its CRC fails.
    last = sorted(tmp_path.glob("*.txn"))[-1]
    data = bytearray(last.read_bytes())
    data[-5000] ^= 0xFF
    last.write_bytes(bytes(data))
    assert replayed(tmp_path) == [b"".join(parts) for parts in records][:-1]


class TestFsJournalDroppingSyncedPages(JournalContract):
    """``drop_synced_pages`` (posix_fadvise DONTNEED after each fsync) keeps the contract."""

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        return lambda directory, counters: make(
            directory, counters, max_file_size=5_000, preallocate_bytes=64 * 1024, drop_synced_pages=True
        )
