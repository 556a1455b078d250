"""The files under an entry-log manager: ``DIR/{log_id:08x}.log``, open fds by log id, what
is not yet fsynced, and the flush that makes it durable.

Entry-log managers (the built-in ``single``, ``plugins/entrylog_per_ledger``) differ only in
which log an append goes to and when a log is sealed; they keep their files in one of these.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import trio

from bkframe.core.counters import Counters
from bkframe.core.fsync import fsync_files
from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError

_LOG_NAME = re.compile(r"^([0-9a-f]{8})\.log$")


class EntryLogError(BKError):
    """An entry log is unreadable, a read falls outside it, or a write or fsync to it failed."""


class EntryLogWriteError(EntryLogError):
    """A write to an entry log failed. ``truncated``: the log was cut back to where the
    write started, so the next append may go on at that offset; otherwise the manager must
    seal the log (its tail holds part of the failed write)."""

    def __init__(self, message: str, *, truncated: bool) -> None:
        super().__init__(message)
        self.truncated = truncated


class EntryLogFiles:
    def __init__(self, directory: Path, counters: Counters, *, drop_synced_pages: bool = False) -> None:
        self.dir = Path(directory)
        #: After each flush, drop the flushed logs' pages from the page cache.
        self._drop_pages = drop_synced_pages
        self.dir.mkdir(parents=True, exist_ok=True)
        self._counters = counters
        #: Every log's fd by id.
        self._fds: dict[int, int] = {}
        #: Logs with writes not yet fsynced. A log a manager stopped appending to stays
        #: here until a flush has fsynced it, so rotation never loses un-synced bytes.
        self._unflushed: set[int] = set()
        #: Log files were created or removed since the last flush: the directory needs an fsync.
        self._dir_dirty = False
        #: Writes made so far, and how many of them the last good flush covered: a flush
        #: whose writes an fsync already covered returns without one of its own (large PD
        #: entries written once wait for a flush each; one fsync serves them all).
        self._writes = 0
        self._flushed_writes = 0
        # One thread is enough: fsyncs of one disk do not go faster in parallel, and a
        # limiter of our own keeps them from starving trio's default thread pool.
        self._limiter = trio.CapacityLimiter(1)
        self._flush_lock = trio.Lock()
        #: Why an fsync failed, once one did (see :meth:`flush`).
        self._sync_failure: str | None = None

    def path(self, log_id: int) -> Path:
        return self.dir / f"{log_id:08x}.log"

    def open_existing(self, check: Callable[[int, int], None]) -> None:
        """Open every log already in the directory read-only; ``check(log_id, fd)`` may raise
        (its header is wrong), and then every fd opened so far is closed."""
        try:
            for name in sorted(os.listdir(self.dir)):
                m = _LOG_NAME.match(name)
                if m:
                    log_id = int(m.group(1), 16)
                    fd = self._fds[log_id] = os.open(self.dir / name, os.O_RDONLY)
                    check(log_id, fd)
        except BaseException:
            self.close()
            raise

    def create(self, log_id: int) -> int:
        """A new, empty log open for appends; returns its fd."""
        fd = os.open(self.path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._fds[log_id] = fd
        self._dir_dirty = True
        return fd

    def write(self, log_id: int, fd: int, data: Buffer, offset: int) -> int:
        """Write ``data`` at ``offset`` of the log (page cache only); return the bytes written.

        The caller says where: a failed write never moves where the next one goes, so a
        short write followed by an error (a full disk's edge) cannot shift later entries
        away from the offsets the index records for them. On failure the log is cut back
        to ``offset`` and :class:`EntryLogWriteError` says whether that worked.
        """
        view = memoryview(data)
        total = view.nbytes
        written = 0
        try:
            while written < total:  # os.pwrite may be partial (e.g. on a full disk's edge)
                written += os.pwrite(fd, view[written:], offset + written)
        except OSError as e:
            truncated = True
            try:
                os.ftruncate(fd, offset)  # shrinking needs no space
            except OSError:
                truncated = False
            raise EntryLogWriteError(
                f"write of {total} bytes to entry log {self.path(log_id)} at offset {offset} failed after "
                f"{written} bytes: {e}", truncated=truncated
            ) from e
        self._unflushed.add(log_id)
        self._writes += 1
        self._counters.storage_bytes_written += total
        return total

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        fd = self._fds.get(log_id)
        if fd is None:
            raise EntryLogError(f"entry log {self.path(log_id)} does not exist (or the manager is closed)")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise EntryLogError(
                f"entry log {self.path(log_id)}: read of {length} bytes at offset {offset} got only "
                f"{len(data)}; the log is shorter than the index says (lost unsynced tail?)"
            )
        return data

    def log_ids(self) -> list[int]:
        return sorted(self._fds)

    def log_size(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        return os.fstat(fd).st_size if fd is not None else 0

    async def remove(self, log_id: int) -> bool:
        """Delete a log (the caller knows it is sealed); durable after the next flush."""
        async with self._flush_lock:  # never under a flush thread's fsync
            fd = self._fds.pop(log_id, None)
            if fd is None:
                return False
            self._unflushed.discard(log_id)
            os.close(fd)
            self.path(log_id).unlink()
            self._dir_dirty = True
        return True

    async def flush(self) -> None:
        """fsync every log written since the last flush, and the directory if it changed."""
        target = self._writes
        async with self._flush_lock:
            if self._sync_failure is not None:
                raise EntryLogError(self._sync_failure)
            if (not self._unflushed or self._flushed_writes >= target) and not self._dir_dirty:
                return
            todo = sorted(self._unflushed)
            writes = self._writes
            # Taken before the thread starts: appends made while it runs re-add their log
            # and are covered by the next flush, not silently by this one.
            self._unflushed.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            fds = [self._fds[i] for i in todo]
            try:
                n = await trio.to_thread.run_sync(
                    _sync, fds, self.dir if dir_dirty else None, self._drop_pages, limiter=self._limiter
                )
            except OSError as e:
                # After a failed fsync the kernel may have dropped the dirty pages (and a
                # retry would then "succeed"): nothing written since the last good flush
                # can be trusted to reach the disk, so no later flush may say it did. The
                # journal still holds those entries (the checkpoint's mark does not move)
                # and a restart replays them into new logs.
                self._unflushed.update(todo)
                self._sync_failure = (
                    f"an fsync of the entry logs in {self.dir} failed ({e}); what was written to them since "
                    f"the last good flush may be lost, so no checkpoint can complete any more. Restart the "
                    f"bookie: it replays the journal from its last good checkpoint (BYPASS_JOURNAL ledgers "
                    f"are repaired from peers)"
                )
                raise EntryLogError(self._sync_failure) from e
            except BaseException:
                self._unflushed.update(todo)
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            self._flushed_writes = writes
            self._counters.storage_fsyncs += n

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def _sync(fds: list[int], directory: Path | None, drop_pages: bool) -> int:
    """In a worker thread: fsync the logs (and the directory); then, if asked, drop their
    now clean pages from the page cache, so that a long stream of writes does not fill it
    and make the kernel reclaim in the writers' path (reads of those entries go to disk)."""
    n = fsync_files(fds, directory)
    if drop_pages:
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return n
