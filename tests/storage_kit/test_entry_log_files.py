"""A flush's fsyncs run in a worker thread while the event loop goes on: a log sealed (its fd
closed) meanwhile must still be the file that is fsynced, never whatever file reuses the fd."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import trio

from bkframe.core.counters import Counters
from bkframe.storage_kit import entry_log_files
from bkframe.storage_kit.entry_log_files import EntryLogFiles


async def test_a_log_sealed_during_a_flush_is_the_file_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = EntryLogFiles(tmp_path / "logs", Counters())
    fd = files.create(1)
    files.write(1, fd, b"x" * 100, 0)
    log_inode = os.fstat(fd).st_ino
    in_thread = threading.Event()
    go_on = threading.Event()
    synced: list[int] = []
    real = entry_log_files.fsync_files

    def slow_fsync_files(fds: list[int], directory: Path | None) -> int:
        in_thread.set()
        go_on.wait(10)
        synced.extend(os.fstat(f).st_ino for f in fds)
        return real(fds, directory)

    monkeypatch.setattr(entry_log_files, "fsync_files", slow_fsync_files)
    other = tmp_path / "other"
    async with trio.open_nursery() as nursery:
        nursery.start_soon(files.flush)
        await trio.to_thread.run_sync(in_thread.wait, 10)
        files.seal(1)  # the manager rotates: the log's fd is closed while the thread runs
        reused = os.open(other, os.O_CREAT | os.O_RDWR)  # takes the lowest free number: the log's old fd
        go_on.set()
    os.close(reused)
    assert synced == [log_inode], "the flush fsynced another file than the log it was flushing"
    files.close()
