"""The filesystem journal's writer: appending, group commit, preallocation, rolling, fsync.

The file format (header, record framing, sync marks) is :mod:`.file_format`; reading the
files back at start, torn-tail repair included, is :mod:`.replay`.

**Sync marks.** Every group commit starts (in each file it writes to) with a sync mark:
the offset up to which this file was fsynced when the group was written -- where the last
*completed* fdatasync ended. Records are acknowledged only once their group's fdatasync
completed, so replay can tell an unfinished group (truncated) from damage to acknowledged
records (refused).

A group whose write or fsync fails for want of space (ENOSPC, EDQUOT) is cut off the file
again, so the file ends where the last durable group did; that group and every record
appended while it was being written are *lost* (:meth:`FsJournal.is_lost`, their waiters
get :class:`~bkframe.core.interfaces.journal.JournalWriteError`), and later records go on from
there: a full disk fails writes, not the bookie. Any other write or fsync failure is fatal
(:class:`JournalFailedError`): after a failed fsync the kernel may have dropped pages it
will never write, so nothing after the last good fsync can be vouched for.
"""

from __future__ import annotations

import bisect
import logging
import mmap
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path

import trio

from bkframe.core.counters import Counters
from bkframe.core.errors import BKError
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import JournalPosition, JournalWriteError
from bkframe.storage_kit.disk_full import DISK_FULL_ERRNOS
from bkframe.storage_kit.fsync import fsync_dir
from bkframe_journal_fs.config import FsJournalConfig
from bkframe_journal_fs.file_format import (
    FILE_HEADER,
    FILE_MAGIC,
    FORMAT_VERSION,
    RECORD_HEADER,
    SYNC_MARK_SIZE,
    journal_file_ids,
    journal_path,
    pack_sync_mark,
)
from bkframe_journal_fs.group_buffer import GroupBuffer
from bkframe_journal_fs.replay import replay_journal
from bkframe_journal_fs.worker_hop import run_in_worker

log = logging.getLogger("bkframe.journal_fs")


class JournalFailedError(BKError, OSError):
    """A journal write or fsync failed; the bookie must stop (acknowledging would lie)."""


class FsJournal:
    """A :class:`~bkframe.core.interfaces.journal.Journal` in ``directory``, made with the
    plugin's ``[journal]`` keys (:class:`~bkframe_journal_fs.config.FsJournalConfig`;
    ``dirs`` is :class:`~bkframe_journal_fs.multi_journal.MultiJournal`'s).

    ``max_wait_ms``: how long a group may wait for more records. ``buffered_bytes_threshold``:
    flush at once when this much is buffered. ``flush_when_queue_empty``: flush as soon as no
    task is ready to append (bounded by ``max_wait_ms``) -- if someone waits for the group
    (:meth:`wait_durable`); a group nobody waits for yet (VD_JOURNAL entries, acknowledged
    before their fsync) first waits up to ``max_lazy_wait_ms`` for a waiter or company.
    ``preallocate_bytes``: extend the open file this far ahead of the write position (0
    disables). ``max_file_size``: roll to a new file once a file exceeds this. ``fsync``:
    false skips fsync -- acknowledged records can then be lost on power failure; for
    benchmarks only. ``new_file_id``: gives the id of each new file (default: one more than
    the last); a :class:`~bkframe_journal_fs.multi_journal.MultiJournal` shares one counter
    among its directories, so that file ids order files across all of them.
    """

    def __init__(
        self,
        directory: Path,
        counters: Counters,
        config: FsJournalConfig | None = None,
        *,
        new_file_id: Callable[[], int] | None = None,
    ) -> None:
        config = config or FsJournalConfig()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._counters = counters
        self._max_wait = config.max_wait_ms / 1000.0
        self._lazy_wait = config.max_lazy_wait_ms / 1000.0
        self._threshold = config.buffered_bytes_threshold
        self._flush_when_empty = config.flush_when_queue_empty
        self._prealloc = config.preallocate_bytes
        self._max_file_size = config.max_file_size
        self._fsync = config.fsync
        self._drop_pages = config.drop_synced_pages
        self._limiter = trio.CapacityLimiter(1)
        #: Appended records not yet written, a group per file: a record's file
        #: is decided when it is appended, so positions are exact across rolls.
        self._segments: list[GroupBuffer] = []
        self._buffered = 0
        self._seq = 0  # sequence of the last appended record
        self._durable = 0
        self._group_done = trio.Event()
        self._wake = trio.Event()
        #: The highest sequence a hurrying waiter waits for, and the event that tells the
        #: group commit someone started waiting (or the buffer filled up).
        self._hurry_seq = 0
        self._hurry = trio.Event()
        self._failure: BaseException | None = None
        self._closed = False
        #: Sequence ranges ``(first, last)`` of records lost to writes that found no space,
        #: in order (touching ranges are merged), and the error of the latest such write.
        self._lost: list[tuple[int, int]] = []
        self._lost_error: OSError | None = None
        #: Where records go after a group was cut off: set by the worker thread.
        self._resume_at = JournalPosition(0, 0)
        self._new_file_id = new_file_id
        existing = self._file_ids()
        #: The file being written (opened by ``run``) and the first file of this run.
        self._file_id = new_file_id() if new_file_id is not None else (existing[-1] + 1) if existing else 1
        self._first_file_id = self._file_id
        self._fd: int | None = None
        #: Where the next appended record lands.
        self._append_file_id = self._file_id
        self._append_offset = FILE_HEADER.size
        #: Bytes of the open file written so far, and how far it is preallocated.
        self._written = 0
        self._allocated = 0
        #: Where the open file's last completed fdatasync ended (what sync marks record).
        self._synced = 0
        #: How much of the open file was dropped from the page cache (``drop_synced_pages``).
        self._dropped = 0

    # -- files ---------------------------------------------------------------------------

    def _file_ids(self) -> list[int]:
        return journal_file_ids(self.directory)

    def _path(self, file_id: int) -> Path:
        return journal_path(self.directory, file_id)

    def _open_file(self, file_id: int) -> None:
        """Runs in the worker thread: close the open file, create ``file_id`` with its header.

        If the new file cannot be made whole (no space for its header), it is removed again
        and no file is open: a headerless file would stop replay at the next start.
        """
        if self._fd is not None:
            os.ftruncate(self._fd, self._written)  # drop the unused preallocated tail
            if self._fsync:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        path = self._path(file_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        header = FILE_HEADER.pack(FILE_MAGIC, FORMAT_VERSION, file_id & 0xFFFFFFFF)
        try:
            written = 0
            while written < len(header):  # a short write means the next one says why
                written += os.pwrite(fd, header[written:], written)
            fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            path.unlink(missing_ok=True)
            raise
        self._fd = fd
        self._file_id = file_id
        self._written = len(header)
        self._allocated = 0
        self._synced = 0
        self._dropped = 0
        self._preallocate()

    def _preallocate(self) -> None:
        if self._prealloc <= 0 or self._fd is None:
            return
        while self._written + self._threshold > self._allocated:
            try:
                os.posix_fallocate(self._fd, self._allocated, self._prealloc)
            except OSError:
                return  # not supported here: writes extend the file instead
            self._allocated += self._prealloc

    # -- appending -----------------------------------------------------------------------

    def append(self, parts: Sequence[Buffer], key: int = 0) -> int:
        if self._failure is not None:
            raise JournalFailedError(f"journal in {self.directory} failed earlier: {self._failure}")
        if self._closed:
            raise JournalFailedError(f"journal in {self.directory} is closed")
        if self._append_offset > self._max_file_size:
            self.roll()
        segments = self._segments
        if not segments or segments[-1].file_id != self._append_file_id:
            # A new group (or its part in a new file) starts with room for its sync mark,
            # filled in when the group is written (only then is the fsynced end known).
            segments.append(GroupBuffer(self._append_file_id, SYNC_MARK_SIZE))
            self._buffered += SYNC_MARK_SIZE
            self._append_offset += SYNC_MARK_SIZE
        length = segments[-1].add(parts)
        size = RECORD_HEADER.size + length
        self._buffered += size
        self._counters.journal_queued_bytes = self._buffered
        self._append_offset += size
        self._seq += 1
        self._wake.set()
        if self._buffered >= self._threshold:
            self._hurry.set()
        return self._seq

    def roll(self) -> None:
        """Records appended from now on go to a new file (created when the first is written)."""
        self._append_file_id = self._new_file_id() if self._new_file_id is not None else self._append_file_id + 1
        self._append_offset = FILE_HEADER.size

    def hurry(self, seq: int) -> None:
        """Someone waits for record ``seq`` now: flush its group as soon as possible."""
        if seq > self._durable:
            self._hurry_seq = max(self._hurry_seq, seq)
            self._hurry.set()

    @property
    def durable_seq(self) -> int:
        return self._durable

    async def wait_durable(self, seq: int, *, hurry: bool = True) -> None:
        if hurry:
            self.hurry(seq)
        while self._durable < seq:
            if self._failure is not None:
                raise JournalFailedError(f"journal in {self.directory} failed: {self._failure}")
            await self._group_done.wait()
        if self._lost and self.is_lost(seq):
            error = self._lost_error
            raise JournalWriteError(
                error.errno if error is not None else None,
                f"journal record {seq} was not written to {self.directory}: {error}",
            )

    def is_lost(self, seq: int) -> bool:
        lost = self._lost
        if not lost or seq > lost[-1][1]:
            return False
        i = bisect.bisect_right(lost, seq, key=lambda r: r[0]) - 1
        return i >= 0 and lost[i][1] >= seq

    def position(self) -> JournalPosition:
        return JournalPosition(self._append_file_id, self._append_offset)

    def remove_files_before(self, mark: JournalPosition) -> int:
        removed = 0
        for file_id in self._file_ids():
            if file_id < mark.file_id and file_id < self._file_id:
                self._path(file_id).unlink(missing_ok=True)
                removed += 1
        return removed

    # -- group commit --------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            await trio.to_thread.run_sync(self._open_file, self._file_id, limiter=self._limiter)
        except OSError as e:
            if e.errno not in DISK_FULL_ERRNOS:
                raise
            # A full disk at start: the bookie can still serve reads. The first group
            # tries to create the file again (and is lost if there is still no space).
            log.warning("journal %s: no space to start a new journal file (%s); writes fail until there is", self.directory, e)
        task_status.started()
        try:
            while True:
                if not self._buffered:
                    await self._wake.wait()
                    self._wake = trio.Event()
                    if not self._buffered:
                        continue
                await self._gather_group()
                await self._flush_group()
        except BaseException as e:
            if not isinstance(e, trio.Cancelled) and self._failure is None:
                self._failure = e
                self._group_done.set()
            raise

    async def _gather_group(self) -> None:
        """Let more records join the group, within the configured bounds."""
        if self._buffered >= self._threshold:
            return
        if self._flush_when_empty:
            before = -1
            if self._hurry_seq <= self._durable and self._lazy_wait > 0:
                # Nobody waits for these records yet (VD entries are acknowledged before
                # their fsync): an fsync of its own for each would cost every add a thread
                # hop and a disk flush. Let them gather until a waiter comes (a SYNC, a PD
                # add, a fence), the buffer fills up, or the bound passes.
                with trio.move_on_after(self._lazy_wait):
                    while self._hurry_seq <= self._durable and self._buffered < self._threshold:
                        self._hurry = trio.Event()
                        await self._hurry.wait()
                # That wait let every task that was ready append already: no extra pass
                # for the waiter (a PD add whose writer task ran after this one).
                before = self._buffered
            # Let every task that is ready to run append first: that is the "queue". The
            # deadline keeps a steady stream of appenders from growing one group forever.
            deadline = trio.current_time() + self._max_wait
            while before != self._buffered and self._buffered < self._threshold and trio.current_time() < deadline:
                before = self._buffered
                await trio.lowlevel.checkpoint()
            return
        with trio.move_on_after(self._max_wait):
            while self._buffered < self._threshold:
                self._wake = trio.Event()
                await self._wake.wait()

    async def _flush_group(self) -> None:
        segments, self._segments = self._segments, []
        size, self._buffered = self._buffered, 0
        self._counters.journal_queued_bytes = 0
        seq = self._seq
        if not segments:
            return  # a concurrent aclose took the group; its flush sets durable_seq
        # Shielded: once the bytes are handed to the thread, the bookkeeping after it must
        # happen too, or waiters would never learn their records are durable.
        with trio.CancelScope(shield=True):
            started = trio.current_time()

            def written(syncs: int) -> None:
                # On the loop, as the thread's result comes back: the waiters run in the
                # next scheduler pass, not one after this task's (see worker_hop).
                self._counters.journal_bytes_written += size
                self._counters.journal_fsyncs += syncs
                # Write and fsync, with any wait for the previous group's thread (what a waiter sees).
                self._counters.journal_fsync_latency.observe(trio.current_time() - started)
                self._counters.journal_group_bytes.observe(size)
                # Groups reach the thread in limiter (FIFO) order, but max() keeps this
                # monotonic even if a concurrent aclose flush finished first.
                self._durable = max(self._durable, seq)
                done, self._group_done = self._group_done, trio.Event()
                done.set()

            try:
                await run_in_worker(partial(self._write_group, segments), self._limiter, written)
            except OSError as e:
                if e.errno not in DISK_FULL_ERRNOS or isinstance(e, JournalFailedError):
                    self._failure = e
                    self._group_done.set()
                    raise JournalFailedError(f"journal write to {self.directory} failed: {e}") from e
                self._lose_unwritten(e)
                return
            except BaseException as e:
                # Acknowledging anything after a failed write would lie: fail every waiter
                # (they see _failure when woken) and every later append.
                self._failure = e
                self._group_done.set()
                raise JournalFailedError(f"journal write to {self.directory} failed: {e}") from e

    def _lose_unwritten(self, error: OSError) -> None:
        """After a group was cut off for want of space: it, and every record appended while it
        was being written (their positions counted on its bytes), will never be written.
        Their waiters are told; later records go where the group would have started."""
        first, last = self._durable + 1, self._seq
        self._segments, self._buffered = [], 0
        self._counters.journal_queued_bytes = 0
        if self._lost and self._lost[-1][1] + 1 >= first:
            first = self._lost[-1][0]
            self._lost[-1] = (first, last)
        else:
            self._lost.append((first, last))
        self._lost_error = error
        self._durable = last  # settled: lost, which is_lost() tells
        self._append_file_id, self._append_offset = self._resume_at.file_id, self._resume_at.offset
        self._counters.journal_write_failures += 1
        log.warning(
            "journal %s: no space to write records up to %d (%s); they are lost (their requests fail) "
            "and the journal goes on at %s",
            self.directory, last, error, self._resume_at,
        )
        done, self._group_done = self._group_done, trio.Event()
        done.set()

    def _write_group(self, segments: list[GroupBuffer]) -> int:
        """Runs in the worker thread: :meth:`_write_and_sync`; if that finds no space, cut the
        open file back to where the group started (the durable end) and re-raise."""
        start = self._written if self._fd is not None else None
        start_file = self._file_id
        try:
            return self._write_and_sync(segments)
        except OSError as e:
            if e.errno not in DISK_FULL_ERRNOS:
                raise
            try:
                self._cut_back(start_file, start)
            except OSError as cut:
                raise JournalFailedError(
                    f"journal {self.directory}: a write found no space ({e}) and cutting the file back "
                    f"to its last durable record failed too ({cut})"
                ) from cut
            raise

    def _cut_back(self, start_file: int, start: int | None) -> None:
        """Runs in the worker thread: end the open file at its last durable byte, so that
        replay never meets half a group (shrinking needs no space)."""
        if self._fd is None:
            # No file open: the group's new file could not be created (and was removed).
            self._resume_at = JournalPosition(self._next_file_id(), FILE_HEADER.size)
            return
        # The file the group started in, or (it rolled) the new one: only its header is durable.
        end = start if start is not None and self._file_id == start_file else FILE_HEADER.size
        os.ftruncate(self._fd, end)
        self._written = self._allocated = end
        self._resume_at = JournalPosition(self._file_id, end)

    def _next_file_id(self) -> int:
        if self._new_file_id is not None:
            return self._new_file_id()
        return max(self._file_ids(), default=self._file_id - 1) + 1

    def _write_and_sync(self, segments: list[GroupBuffer]) -> int:
        """Runs in the worker thread: write each segment to its file, fsync; return fsyncs."""
        syncs = 0
        for group in segments:
            if self._fd is None or group.file_id != self._file_id:
                if self._fsync and self._fd is not None:
                    syncs += 1  # the roll fsyncs the file it closes
                self._open_file(group.file_id)
            assert self._fd is not None
            # The limiter runs groups one at a time, so _synced is the end of the last
            # fdatasync that completed before this group.
            pack_sync_mark(group.lead, self._synced)
            for view in group.pieces():
                while view:
                    n = os.pwrite(self._fd, view, self._written)
                    self._written += n
                    view = view[n:]
        if self._fsync:
            os.fdatasync(self._fd)  # type: ignore[arg-type]
            self._synced = self._written
            syncs += 1
            if self._drop_pages:
                # As BookKeeper's journalRemovePagesFromCache: the journal is read back only
                # at replay, so its synced pages would only push useful ones out of the cache.
                end = self._synced - self._synced % mmap.PAGESIZE
                if end > self._dropped:
                    os.posix_fadvise(self._fd, self._dropped, end - self._dropped, os.POSIX_FADV_DONTNEED)  # type: ignore[arg-type]
                    self._dropped = end
        self._preallocate()
        return syncs

    async def aclose(self) -> None:
        self._closed = True
        try:
            if self._buffered and self._failure is None:
                await self._flush_group()
        finally:
            if self._fd is not None:
                await trio.to_thread.run_sync(self._close_fd, limiter=self._limiter)

    def _close_fd(self) -> None:
        """Runs in the worker thread: give back the unused preallocated tail, close."""
        fd, self._fd = self._fd, None
        assert fd is not None
        try:
            if self._failure is None:
                os.ftruncate(fd, self._written)
        finally:
            os.close(fd)

    # -- replay --------------------------------------------------------------------------

    def replay(self, since: JournalPosition | None) -> Iterator[tuple[JournalPosition, bytes]]:
        # The files of earlier runs: this run's are still being written (see :mod:`.replay`).
        return replay_journal(self.directory, self._first_file_id, since)
