"""journal_fs with several directories: the contract, keys spread over writers, marks,
replay order when the number of directories changes, the guard against a dropped one."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from bkframe_journal_fs.fs_journal import FsJournal
from bkframe_journal_fs.multi_journal import JournalDirsChangedError, MultiJournal

from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import Journal, JournalPosition, JournalWriteError
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.journal_contract import JournalContract, JournalFactory


def make(directory: Path, counters: Counters | None = None, **config: object) -> Journal:
    """The journal a bookie makes of ``[journal] plugin = "journal_fs"`` and ``config``."""
    return PluginManager().journal(
        config={"plugin": "journal_fs", **config}, directory=directory, counters=counters or Counters()
    )


def make_multi(directory: Path, counters: Counters | None = None, dirs: int = 2, **config: object) -> MultiJournal:
    journal = make(directory, counters, dirs=[f"d{i}" for i in range(1, dirs)], **config)
    assert isinstance(journal, MultiJournal)
    return journal


def replay(directory: Path, dirs: int = 2, since: JournalPosition | None = None) -> list[bytes]:
    return [rec for _, rec in make_multi(directory, dirs=dirs).replay(since)]


class TestMultiJournal(JournalContract):
    """Two directories keep the journal contract (its records all have one key, so they
    all go to the first directory; the tests below spread keys)."""

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        return lambda directory, counters: make_multi(
            directory, counters, max_file_size=5_000, preallocate_bytes=64 * 1024
        )


def keyed(key: int, i: int) -> bytes:
    return b"%d:%d:" % (key, i) + os.urandom(i % 200)


def key_of(record: bytes) -> int:
    return int(record.split(b":")[0])


def per_key(records: list[bytes]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for r in records:
        out.setdefault(key_of(r), []).append(r)
    return out


async def append_keyed(journal: Journal, records: list[bytes], writers: int = 8) -> list[bytes]:
    """Append ``records`` (key from their text) from ``writers`` tasks, waiting for each;
    return them in the order they were appended."""
    order: list[bytes] = []

    async def writer(k: int) -> None:
        for rec in records[k::writers]:
            seq = journal.append([rec], key_of(rec))
            order.append(rec)
            await journal.wait_durable(seq)

    async with trio.open_nursery() as nursery:
        for k in range(writers):
            nursery.start_soon(writer, k)
    return order


async def test_keys_are_spread_over_the_directories_and_replay_in_order_per_key(tmp_path: Path) -> None:
    counters = Counters()
    journal = make_multi(tmp_path, counters, dirs=3, max_file_size=20_000, preallocate_bytes=0)
    records = [keyed(i % 7, i) for i in range(3000)]
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        order = await append_keyed(journal, records, writers=48)
        assert journal.durable_seq == len(records)
        await journal.aclose()
        nursery.cancel_scope.cancel()
    # Every directory wrote and fsynced its own files.
    for d in (tmp_path, tmp_path / "d1", tmp_path / "d2"):
        assert len(list(d.glob("*.txn"))) >= 2, d
    assert all(j.durable_seq > 0 for j in journal.journals)
    assert 0 < counters.journal_fsyncs < len(records) / 3
    # File ids are unique across the directories.
    ids = [int(p.stem, 16) for p in tmp_path.rglob("*.txn")]
    assert len(ids) == len(set(ids))
    got = replay(tmp_path, dirs=3)
    assert sorted(got) == sorted(records)
    assert per_key(got) == per_key(order)


async def test_a_mark_covers_every_directory(tmp_path: Path) -> None:
    """What a checkpoint does: records appended after position() replay from it, exactly;
    removing the files before it keeps them. Without rolling the other journals at the
    mark, records of the journal with the older file would be missed."""
    journal = make_multi(tmp_path, max_file_size=4096, preallocate_bytes=0)
    before = [keyed(i % 2, i) for i in range(200)]
    after = [keyed(i % 2, i) for i in range(200, 400)]
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await append_keyed(journal, before)
        # File ids are unique: one journal's current file is older than the mark's.
        mark = journal.position()
        after = await append_keyed(journal, after)
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert sorted(replay(tmp_path, since=mark)) == sorted(after)
    assert make_multi(tmp_path).remove_files_before(mark) > 0
    assert sorted(replay(tmp_path, since=mark)) == sorted(after)
    assert per_key(replay(tmp_path, since=mark)) == per_key(after)


async def test_replay_keeps_a_keys_order_when_the_number_of_directories_changes(tmp_path: Path) -> None:
    """Key 3 is in directory 1 of 2, then directory 0 of 3: replay by directory would put
    the second run's records first; replay by file id does not."""
    runs = [[keyed(k, i) for i in range(50 * n, 50 * n + 50) for k in range(6)] for n in range(2)]
    for records, dirs in zip(runs, (2, 3)):
        journal = make_multi(tmp_path, dirs=dirs, preallocate_bytes=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            await append_keyed(journal, records, writers=1)
            await journal.aclose()
            nursery.cancel_scope.cancel()
    assert per_key(replay(tmp_path, dirs=3)) == per_key(runs[0] + runs[1])


async def test_dropping_a_directory_that_holds_files_refuses_to_start(tmp_path: Path) -> None:
    journal = make_multi(tmp_path, dirs=2, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await append_keyed(journal, [keyed(1, 1)], writers=1)
        await journal.aclose()
        nursery.cancel_scope.cancel()
    with pytest.raises(JournalDirsChangedError, match="d1"):
        make(tmp_path)
    with pytest.raises(JournalDirsChangedError, match="d1"):
        make(tmp_path, dirs=["elsewhere"])
    # More directories are fine; so is dropping one once its files are gone.
    assert isinstance(make(tmp_path, dirs=["d1", "d2"]), MultiJournal)
    for f in (tmp_path / "d1").glob("*.txn"):
        f.unlink()
    assert isinstance(make(tmp_path), FsJournal)


async def test_wait_durable_waits_for_every_directory(tmp_path: Path) -> None:
    """A record's sequence covers the records before it in the other journals too."""
    journal = make_multi(tmp_path, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        first = journal.append([b"in journal 1"], 1)
        second = journal.append([b"in journal 0"], 0)
        await journal.wait_durable(second)
        assert journal.durable_seq >= second > first
        assert all(j.durable_seq == 1 for j in journal.journals)
        await journal.aclose()
        nursery.cancel_scope.cancel()


async def test_a_full_disk_under_one_directory_loses_only_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records of journal 1 find no space: they are lost (their waiters are told, is_lost
    says so by the shared sequence); journal 0's, appended in between, are durable."""
    full = False
    real = os.pwrite

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if full and os.readlink(f"/proc/self/fd/{fd}").startswith(str(tmp_path / "d1")):
            raise OSError(errno.ENOSPC, "No space left on device (test)")
        return real(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    journal = make_multi(tmp_path, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await append_keyed(journal, [keyed(i % 2, i) for i in range(20)], writers=1)
        full = True
        outcomes: dict[int, tuple[int, str]] = {}

        async def waiter(seq: int, key: int) -> None:
            try:
                await journal.wait_durable(seq)
                outcomes[seq] = (key, "durable")
            except JournalWriteError:
                outcomes[seq] = (key, "lost")

        async with trio.open_nursery() as waiters:
            for i in range(20, 60):
                waiters.start_soon(waiter, journal.append([keyed(i % 2, i)], i % 2), i % 2)
        assert {key for key, what in outcomes.values() if what == "lost"} == {1}
        assert all(what == "durable" for key, what in outcomes.values() if key == 0)
        assert all(journal.is_lost(seq) == (key == 1) for seq, (key, _) in outcomes.items())
        assert journal.durable_seq == max(outcomes)
        full = False
        await append_keyed(journal, [keyed(1, 100), keyed(0, 101)], writers=1)
        await journal.aclose()
        nursery.cancel_scope.cancel()
    got = per_key(replay(tmp_path))
    assert len(got[0]) == 10 + 20 + 1 and len(got[1]) == 10 + 1
