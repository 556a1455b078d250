"""The filesystem journal: group commit, rolling, replay, torn tails, corruption, config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio
from bkframe_journal_fs.fs_journal import FsJournal
from bkframe_journal_fs.plugin import bkframe_journal

from bkframe.core.config import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.interfaces import Journal, JournalCorruptError


def make(tmp_path: Path, counters: Counters | None = None, **config: object) -> FsJournal:
    journal = bkframe_journal(
        name="journal_fs", config={"plugin": "journal_fs", **config}, directory=tmp_path, counters=counters or Counters()
    )
    assert isinstance(journal, FsJournal) and isinstance(journal, Journal)
    return journal


async def write_records(journal: FsJournal, records: list[bytes], writers: int = 1) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)

        async def writer(k: int) -> None:
            for rec in records[k::writers]:
                await journal.wait_durable(journal.append([rec[:3], rec[3:]]))

        async with trio.open_nursery() as inner:
            for k in range(writers):
                inner.start_soon(writer, k)
        await journal.aclose()
        nursery.cancel_scope.cancel()


def replayed(tmp_path: Path, since: object = None) -> list[bytes]:
    return [rec for _, rec in FsJournal(tmp_path, Counters()).replay(since)]  # type: ignore[arg-type]


async def test_records_replay_identically(tmp_path: Path) -> None:
    records = [os.urandom(i % 500) + b"#%d" % i for i in range(1000)]
    await write_records(make(tmp_path), records)
    assert replayed(tmp_path) == records


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    counters = Counters()
    records = [b"record-%d" % i for i in range(2000)]
    await write_records(make(tmp_path, counters), records, writers=50)
    assert sorted(replayed(tmp_path)) == sorted(records)
    assert 0 < counters.journal_fsyncs < len(records) / 5
    assert counters.journal_bytes_written >= sum(map(len, records))


async def test_rolling_by_size_and_replay_since_mark(tmp_path: Path) -> None:
    journal = make(tmp_path, max_file_size=10_000, preallocate_bytes=0)
    records = [os.urandom(300) for _ in range(200)]
    await write_records(journal, records)
    files = sorted(tmp_path.glob("*.txn"))
    assert len(files) >= 5
    positions = list(FsJournal(tmp_path, Counters()).replay(None))
    assert [r for _, r in positions] == records
    mark = positions[99][0]
    assert replayed(tmp_path, mark) == records[100:]
    # Files wholly before the mark can go; replay from the mark still sees the rest.
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
    assert replayed(tmp_path) == records[:-1] + [b"after"]


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
    with pytest.raises(ConfigError, match="unknown key.*max_wiat_ms"):
        make(tmp_path, max_wiat_ms=1)
    with pytest.raises(ConfigError, match="fsync = 'yes' should be true or false"):
        make(tmp_path, fsync="yes")
    assert bkframe_journal(name="other", config={}, directory=tmp_path, counters=Counters()) is None
