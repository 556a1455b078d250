"""Entry-log manager ``single``: one active entry log shared by every ledger.

Entries of all ledgers are interleaved in one append-only file at a time (seed:
bookkeeper-overview, "Data Management in Bookies"), so the disk sees sequential writes
whatever the number of ledgers. Appends go to the page cache with ``os.write``; only
:meth:`SingleEntryLogManager.flush` (called from the storage checkpoint) pays for fsync,
and it does so off the event loop.

File layout: ``DIR/{log_id:08x}.log``, starting with a 16-byte header (magic, version,
log id) followed by whatever bytes the ledger storage appended.
"""

from __future__ import annotations

import logging
import os
import re
import struct
from pathlib import Path
from typing import Any

import trio

from bkframe.core.config import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.fsync import fsync_files
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces import Buffer

log = logging.getLogger(__name__)

PLUGIN_NAME = "single"
LOG_MAGIC = b"BKEL"
LOG_VERSION = 1
#: magic, version u32, log id u64.
LOG_HEADER = struct.Struct("<4sIQ")
DEFAULT_MAX_LOG_SIZE = 1 << 30
_LOG_NAME = re.compile(r"^([0-9a-f]{8})\.log$")


class EntryLogError(Exception):
    """An entry log is unreadable or a read falls outside it."""


class SingleEntryLogManager:
    """One active log for all ledgers, rotated by size; older logs stay open for reads.

    :param directory: where the ``*.log`` files live (created if missing).
    :param counters: ``storage_bytes_written`` and ``storage_fsyncs`` are counted here.
    :param max_log_size: a new log is started before an append that would take the
        active log past this size (one append is never split, so a single append larger
        than this makes a log that large).
    """

    def __init__(self, directory: Path, counters: Counters, *, max_log_size: int = DEFAULT_MAX_LOG_SIZE) -> None:
        if max_log_size <= LOG_HEADER.size:
            raise ValueError(f"max_log_size must be larger than the {LOG_HEADER.size}-byte log header")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._counters = counters
        self._max_log_size = max_log_size
        #: Every log's fd by id; the active one is read-write, older ones read-only.
        self._fds: dict[int, int] = {}
        #: Logs with writes not yet fsynced. A rotated-away log stays here until a flush
        #: has fsynced it, so rotation never loses un-synced bytes from a checkpoint.
        self._unflushed: set[int] = set()
        #: A log file was created since the last flush: its directory entry needs an fsync.
        self._dir_dirty = False
        # One thread is enough: fsyncs of one disk do not go faster in parallel, and a
        # limiter of our own keeps them from starving trio's default thread pool.
        self._limiter = trio.CapacityLimiter(1)
        self._flush_lock = trio.Lock()
        self._closed = False
        try:
            for name in sorted(os.listdir(self._dir)):
                m = _LOG_NAME.match(name)
                if m:
                    log_id = int(m.group(1), 16)
                    self._fds[log_id] = self._open_existing(log_id)
            # Never append to a log of an earlier run: its tail may be torn. The new log is
            # created on the first append, so restarts without writes leave no empty logs.
            self._active_id = max(self._fds, default=-1) + 1
            self._active_fd = -1
            self._active_size = 0
        except BaseException:
            self._close_fds()
            raise

    # -- opening ------------------------------------------------------------------------

    def _path(self, log_id: int) -> Path:
        return self._dir / f"{log_id:08x}.log"

    def _open_existing(self, log_id: int) -> int:
        path = self._path(log_id)
        fd = os.open(path, os.O_RDONLY)
        header = os.pread(fd, LOG_HEADER.size, 0)
        if len(header) < LOG_HEADER.size:
            # Created but never flushed before a crash: no checkpointed index can point
            # into it (checkpoints fsync logs before the index), so it is harmless.
            log.warning("entry log %s has no complete header; ignoring its contents", path)
            return fd
        magic, version, stored_id = LOG_HEADER.unpack(header)
        if magic != LOG_MAGIC or version != LOG_VERSION or stored_id != log_id:
            os.close(fd)
            raise EntryLogError(
                f"entry log {path} has a bad header (magic {magic!r}, version {version}, log id "
                f"{stored_id}; expected {LOG_MAGIC!r}, {LOG_VERSION}, {log_id}). It is not a bkframe "
                f"entry log of this version or it is corrupt; move it aside to start the bookie."
            )
        return fd

    def _start_log(self, log_id: int) -> None:
        fd = os.open(self._path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._fds[log_id] = fd
        self._active_id = log_id
        self._active_fd = fd
        self._active_size = 0
        self._dir_dirty = True
        self._write(LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, log_id))

    def _write(self, data: Buffer) -> None:
        view = memoryview(data)
        total = len(view)
        written = 0
        while written < total:  # os.write may be partial (e.g. on a full disk's edge)
            written += os.write(self._active_fd, view[written:])
        self._active_size += total
        self._unflushed.add(self._active_id)
        self._counters.storage_bytes_written += total

    # -- the EntryLogManager protocol ----------------------------------------------------

    def append(self, ledger_id: int, data: Buffer) -> tuple[int, int]:
        if self._closed:
            raise EntryLogError(f"entry log manager over {self._dir} is closed")
        size = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._active_fd < 0:
            self._start_log(self._active_id)
        elif self._active_size > LOG_HEADER.size and self._active_size + size > self._max_log_size:
            self._start_log(self._active_id + 1)
        offset = self._active_size
        self._write(data)
        return self._active_id, offset

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        fd = self._fds.get(log_id)
        if fd is None:
            raise EntryLogError(f"entry log {self._path(log_id)} does not exist (or the manager is closed)")
        data = os.pread(fd, length, offset)
        if len(data) != length:
            raise EntryLogError(
                f"entry log {self._path(log_id)}: read of {length} bytes at offset {offset} got only "
                f"{len(data)}; the log is shorter than the index says (lost unsynced tail?)"
            )
        return data

    def log_ids(self) -> list[int]:
        return sorted(self._fds)

    def sealed_log_ids(self) -> list[int]:
        # Appends go to the active log only; every other log (earlier ids, or logs of an
        # earlier run: a restart never appends to them) is sealed.
        return sorted(i for i in self._fds if i != self._active_id)

    def log_size(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        return os.fstat(fd).st_size if fd is not None else 0

    def write_close(self, ledger_id: int) -> None:
        # One log is shared by all ledgers, so a writer finishing changes nothing here.
        return None

    async def remove_log(self, log_id: int) -> bool:
        if log_id == self._active_id or log_id not in self._fds:
            return False  # still being written (or already gone)
        async with self._flush_lock:  # never under a flush thread's fsync
            fd = self._fds.pop(log_id)
            self._unflushed.discard(log_id)
            os.close(fd)
            self._path(log_id).unlink()
            self._dir_dirty = True
        return True

    async def flush(self) -> None:
        async with self._flush_lock:
            if not self._unflushed and not self._dir_dirty:
                return
            todo = sorted(self._unflushed)
            # Taken before the thread starts: appends made while it runs re-add their log
            # and are covered by the next flush, not silently by this one.
            self._unflushed.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            fds = [self._fds[i] for i in todo]
            try:
                n = await trio.to_thread.run_sync(
                    fsync_files, fds, self._dir if dir_dirty else None, limiter=self._limiter
                )
            except BaseException:
                self._unflushed.update(todo)
                self._dir_dirty = self._dir_dirty or dir_dirty
                raise
            self._counters.storage_fsyncs += n

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        self._close_fds()

    def _close_fds(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __repr__(self) -> str:
        return f"SingleEntryLogManager({str(self._dir)!r}, logs={len(self._fds)})"


def parse_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate the ``[entry_log_manager]`` section; return constructor keyword arguments."""
    known = {"plugin", "max_log_size"}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ConfigError(
            f"[entry_log_manager] plugin 'single': unknown key(s) {', '.join(unknown)}; "
            f"known keys: max_log_size (bytes, default {DEFAULT_MAX_LOG_SIZE})"
        )
    kwargs: dict[str, Any] = {}
    if "max_log_size" in config:
        value = config["max_log_size"]
        if isinstance(value, bool) or not isinstance(value, int) or value <= LOG_HEADER.size:
            raise ConfigError(
                f"[entry_log_manager] max_log_size = {value!r} should be an integer number of bytes "
                f"larger than {LOG_HEADER.size}"
            )
        kwargs["max_log_size"] = value
    return kwargs


@hookimpl
def bkframe_entry_log_manager(
    name: str, config: dict[str, Any], directory: Path, counters: Counters
) -> SingleEntryLogManager | None:
    if name != PLUGIN_NAME:
        return None
    return SingleEntryLogManager(directory, counters, **parse_config(config))
