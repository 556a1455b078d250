"""The filesystem journal on a full disk: a group that finds no space is lost (its waiters
are told, nothing of it stays in the file), the journal goes on once there is space, and
replay sees exactly the records that were made durable."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from bkframe_journal_fs.config import FsJournalConfig
from bkframe_journal_fs.fs_journal import FsJournal

from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import JournalPosition, JournalWriteError


class FullDisk:
    """Makes os.pwrite to files under ``root`` find no space while ``full``: the first write
    lands half its bytes (as at a real disk's edge), every later one fails with ENOSPC."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = str(root)
        self.full = False
        self._short_done = False
        real = os.pwrite

        def pwrite(fd: int, data: Any, offset: int) -> int:
            if self.full and os.readlink(f"/proc/self/fd/{fd}").startswith(self.root):
                view = memoryview(data)
                if not self._short_done and view.nbytes > 1:
                    self._short_done = True
                    return real(fd, view[: view.nbytes // 2], offset)
                raise OSError(errno.ENOSPC, "No space left on device (test)")
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", pwrite)

    def fill(self) -> None:
        self.full, self._short_done = True, False

    def free(self) -> None:
        self.full = False


def records_after(tmp_path: Path, since: JournalPosition | None = None) -> list[tuple[JournalPosition, bytes]]:
    return list(FsJournal(tmp_path, Counters()).replay(since))


async def test_a_group_that_finds_no_space_is_lost_and_the_journal_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    disk = FullDisk(tmp_path, monkeypatch)
    counters = Counters()
    journal = FsJournal(tmp_path, counters, FsJournalConfig(preallocate_bytes=0))
    durable: list[tuple[JournalPosition, bytes]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for i in range(10):
            rec = b"before %d " % i + b"." * 300
            seq = journal.append([rec])
            durable.append((journal.position(), rec))
        await journal.wait_durable(seq)

        disk.fill()
        outcomes: dict[int, str] = {}

        async def waiter(seq: int) -> None:
            try:
                await journal.wait_durable(seq)
                outcomes[seq] = "durable"
            except JournalWriteError as e:
                assert e.errno == errno.ENOSPC
                outcomes[seq] = "lost"

        async with trio.open_nursery() as waiters:
            for i in range(30):
                waiters.start_soon(waiter, journal.append([b"doomed %d " % i + b"!" * 300]))
                if i % 7 == 0:
                    await trio.sleep(0)  # let groups form and fail
        # Nobody hung and nobody was told a record is durable.
        assert set(outcomes.values()) == {"lost"} and len(outcomes) == 30
        assert all(journal.is_lost(s) for s in outcomes) and not journal.is_lost(seq)
        assert journal.durable_seq == max(outcomes)
        assert counters.journal_write_failures >= 1

        disk.free()
        for i in range(10):
            rec = b"after %d " % i + b"." * 300
            seq = journal.append([rec])
            durable.append((journal.position(), rec))
        await journal.wait_durable(seq)
        assert not journal.is_lost(seq)
        await journal.aclose()
        nursery.cancel_scope.cancel()
    # No half group in the file: replay sees the durable records at the positions that
    # position() gave for them (the LastLogMarks), and from any of them on.
    assert records_after(tmp_path) == durable
    assert records_after(tmp_path, durable[12][0]) == durable[13:]


async def test_no_space_for_a_new_file_at_start_or_at_a_roll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = FullDisk(tmp_path, monkeypatch)
    disk.fill()
    journal = FsJournal(tmp_path, Counters(), FsJournalConfig(preallocate_bytes=0, max_file_size=4096))
    durable: list[bytes] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)  # starts although it cannot create its file
        assert list(tmp_path.glob("*.txn")) == []
        with pytest.raises(JournalWriteError):
            await journal.wait_durable(journal.append([b"no room"]))
        assert list(tmp_path.glob("*.txn")) == []  # no headerless file left behind
        disk.free()
        for i in range(40):  # several rolls
            rec = b"%03d" % i + b"." * 300
            await journal.wait_durable(journal.append([rec]))
            durable.append(rec)
        files = len(list(tmp_path.glob("*.txn")))
        # Full exactly when the next group rolls into a new file.
        while journal.position().offset + 312 <= 4096 + 312:
            rec = b"fill" + b"." * 300
            await journal.wait_durable(journal.append([rec]))
            durable.append(rec)
        disk.fill()
        with pytest.raises(JournalWriteError):
            await journal.wait_durable(journal.append([b"x" * 300]))
        disk.free()
        await journal.wait_durable(journal.append([b"last"]))
        durable.append(b"last")
        assert len(list(tmp_path.glob("*.txn"))) > files
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert [r for _, r in records_after(tmp_path)] == durable
