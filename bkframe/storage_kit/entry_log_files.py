"""The files under an entry-log manager: ``DIR/{log_id:08x}.log``, their fds, what is not
yet fsynced, and the flush that makes it durable.

Entry-log managers (the built-in ``single``, ``plugins/entrylog_per_ledger``) differ only in
which log an append goes to and when a log is sealed; they keep their files in one of these.

File descriptors are bounded whatever the number of logs: a log being appended to keeps the
fd :meth:`EntryLogFiles.create` gave until its manager calls :meth:`EntryLogFiles.seal`;
every other log is opened read-only when read, and at most ``max_open_logs`` of those stay
open (least recently read closed first). A flush fsyncs a sealed log through an fd of its
own, by path (Linux reports a writeback error to the first fsync after it, whichever fd).
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError
from bkframe.storage_kit.fsync import fsync_files
from bkframe.storage_kit.open_files import open_or_evict

_LOG_NAME = re.compile(r"^([0-9a-f]{8})\.log$")
#: Sealed logs kept open for reads at most, by default.
DEFAULT_MAX_OPEN_LOGS = 64


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
    def __init__(
        self,
        directory: Path,
        counters: Counters,
        *,
        drop_synced_pages: bool = False,
        max_open_logs: int = DEFAULT_MAX_OPEN_LOGS,
    ) -> None:
        if max_open_logs < 1:
            raise ValueError("max_open_logs must be at least 1")
        self.dir = Path(directory)
        #: After each flush, drop the flushed logs' pages from the page cache.
        self._drop_pages = drop_synced_pages
        self.dir.mkdir(parents=True, exist_ok=True)
        self._counters = counters
        #: Every log present.
        self._logs: set[int] = set()
        #: Fds of the logs being appended to (until sealed).
        self._writable: dict[int, int] = {}
        #: Read-only fds of other logs, least recently read first.
        self._readers: OrderedDict[int, int] = OrderedDict()
        self.max_open_logs = max_open_logs
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
        import trio  # here, not at import: registering the plugins that use this module needs no trio

        self._limiter = trio.CapacityLimiter(1)
        self._flush_lock = trio.Lock()
        #: Why an fsync failed, once one did (see :meth:`flush`).
        self._sync_failure: str | None = None

    def path(self, log_id: int) -> Path:
        return self.dir / f"{log_id:08x}.log"

    def open_existing(self, check: Callable[[int, int], None] | None = None) -> None:
        """Know every log already in the directory; ``check(log_id, fd)`` (given a read-only
        fd of each, one at a time) may raise (its header is wrong), and then every fd opened
        so far is closed. Without ``check`` nothing is opened."""
        try:
            for name in sorted(os.listdir(self.dir)):
                m = _LOG_NAME.match(name)
                if m:
                    log_id = int(m.group(1), 16)
                    self._logs.add(log_id)
                    if check is not None:
                        check(log_id, self._reader(log_id))
        except BaseException:
            self.close()
            raise

    def create(self, log_id: int) -> int:
        """A new, empty log open for appends; returns its fd, valid until :meth:`seal`."""
        fd = open_or_evict(
            lambda: os.open(self.path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644),
            self._shed,
            f"new entry log {self.path(log_id)}",
        )
        self._writable[log_id] = fd
        self._logs.add(log_id)
        self._dir_dirty = True
        return fd

    def seal(self, log_id: int) -> None:
        """The manager appends to the log no more: its fd is closed (the next flush fsyncs
        what it wrote, by path; reads open it again)."""
        fd = self._writable.pop(log_id, None)
        if fd is not None:
            os.close(fd)

    def _fd(self, log_id: int) -> int | None:
        """An fd of the log (opened read-only if need be), None if there is no such log."""
        fd = self._writable.get(log_id)
        if fd is not None:
            return fd
        if log_id not in self._logs:
            return None
        return self._reader(log_id)

    def _reader(self, log_id: int) -> int:
        fd = self._readers.get(log_id)
        if fd is not None:
            self._readers.move_to_end(log_id)
            return fd
        while len(self._readers) >= self.max_open_logs:
            os.close(self._readers.popitem(last=False)[1])
        fd = open_or_evict(lambda: os.open(self.path(log_id), os.O_RDONLY), self._shed, f"entry log {self.path(log_id)}")
        self._readers[log_id] = fd
        return fd

    def _shed(self) -> int:
        """Close the least recently read half of the read-only fds; return how many."""
        n = (len(self._readers) + 1) // 2
        for _ in range(n):
            os.close(self._readers.popitem(last=False)[1])
        return n

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
        fd = self._fd(log_id)
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
        return sorted(self._logs)

    def log_size(self, log_id: int) -> int:
        fd = self._writable.get(log_id)
        if fd is None:
            fd = self._readers.get(log_id)
        if fd is not None:
            return os.fstat(fd).st_size
        if log_id not in self._logs:
            return 0
        try:
            return os.stat(self.path(log_id)).st_size  # no fd needed
        except FileNotFoundError:
            return 0

    async def remove(self, log_id: int) -> bool:
        """Delete a log (the caller knows it is sealed); durable after the next flush."""
        async with self._flush_lock:  # never under a flush thread's fsync
            if log_id not in self._logs:
                return False
            self._logs.discard(log_id)
            self._unflushed.discard(log_id)
            for fds in (self._writable, self._readers):
                fd = fds.pop(log_id, None)
                if fd is not None:
                    os.close(fd)
            self.path(log_id).unlink()
            self._dir_dirty = True
        return True

    async def flush(self) -> None:
        """fsync every log written since the last flush, and the directory if it changed."""
        import trio

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
            # Logs still appended to through duplicates of their fds, the others (sealed) by
            # path: the event loop may seal (close) or evict fds while the thread runs, and an
            # fd closed there could be reused by another file -- the fsync would then sync
            # that file and this flush call the log durable (seen in the soak: EBADF).
            fds = [os.dup(self._writable[i]) for i in todo if i in self._writable]
            paths = [self.path(i) for i in todo if i not in self._writable]
            try:
                n = await trio.to_thread.run_sync(
                    _sync, fds, paths, self.dir if dir_dirty else None, self._drop_pages, limiter=self._limiter
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
            finally:
                for fd in fds:  # the thread is done with them (run_sync waits for it)
                    os.close(fd)
            self._flushed_writes = writes
            self._counters.storage_fsyncs += n

    def open_fds(self) -> int:
        """File descriptors open now (for metrics and tests)."""
        return len(self._writable) + len(self._readers)

    def close(self) -> None:
        for fds in (self._writable, self._readers):
            for fd in fds.values():
                os.close(fd)
            fds.clear()


def _sync(fds: list[int], paths: list[Path], directory: Path | None, drop_pages: bool) -> int:
    """In a worker thread: fsync the logs (``fds``, and ``paths`` of sealed ones, one fd at
    a time; a log removed meanwhile is skipped), then the directory; then, if asked, drop
    their now clean pages from the page cache, so that a long stream of writes does not
    fill it and make the kernel reclaim in the writers' path (reads of those entries go to disk)."""
    n = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            if drop_pages:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        n += 1
    n += fsync_files(fds, directory)
    if drop_pages:
        for fd in fds:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    return n
