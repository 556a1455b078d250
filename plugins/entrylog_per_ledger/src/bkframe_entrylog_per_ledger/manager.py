"""An entry-log manager with one active log per ledger (BookKeeper's entry log per ledger).

A ledger's entries are appended to a log of its own, so a deleted ledger's logs become
wholly dead (garbage collection removes them without copying) and a ledger reads back
sequentially. Open logs cost file descriptors, so an active log is **sealed** (never
appended to again; a later append of its ledger starts a new log):

* after BP-32's advisory write close of its ledger (WRITE_CLOSE, or a fencing read), at
  the next flush — as the seed says, the manager only remembers the close and rotates at
  the next checkpoint;
* when it was not appended to for ``expire_after_access_s`` (checked at each flush);
* when more than ``max_active`` ledgers have an active log (the least recently used one);
* when it would grow past ``max_log_size``;
* when a write to it fails (before the error reaches the client).

File layout: ``DIR/{log_id:08x}.log``, log ids shared by all ledgers, each file starting
with a 24-byte header (magic, version, log id, ledger id). Logs of an earlier run are
sealed: a restart never appends to them (their tail may be torn).
"""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections import OrderedDict
from pathlib import Path

import attrs
import trio

from bkframe.core.counters import Counters
from bkframe.core.fsync import fsync_files
from bkframe.core.interfaces import Buffer

log = logging.getLogger(__name__)

LOG_MAGIC = b"BKEP"
LOG_VERSION = 1
#: magic, version u32, log id u64, ledger id u64.
LOG_HEADER = struct.Struct("<4sIQQ")
DEFAULT_MAX_ACTIVE = 64
DEFAULT_EXPIRE_AFTER_ACCESS_S = 300.0
DEFAULT_MAX_LOG_SIZE = 1 << 30
_LOG_NAME = re.compile(r"^([0-9a-f]{8})\.log$")


class EntryLogError(Exception):
    """An entry log is unreadable or a read falls outside it."""


@attrs.define
class _Active:
    log_id: int
    fd: int
    size: int
    last_access: float


class PerLedgerEntryLogManager:
    """:class:`bkframe.core.interfaces.EntryLogManager` with a log per ledger."""

    def __init__(
        self,
        directory: Path,
        counters: Counters,
        *,
        max_active: int = DEFAULT_MAX_ACTIVE,
        expire_after_access_s: float = DEFAULT_EXPIRE_AFTER_ACCESS_S,
        max_log_size: int = DEFAULT_MAX_LOG_SIZE,
    ) -> None:
        if max_active < 1:
            raise ValueError("max_active must be at least 1")
        if expire_after_access_s <= 0:
            raise ValueError("expire_after_access_s must be positive")
        if max_log_size <= LOG_HEADER.size:
            raise ValueError(f"max_log_size must be larger than the {LOG_HEADER.size}-byte log header")
        self._dir = Path(directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._counters = counters
        self._max_active = max_active
        self._expire_s = expire_after_access_s
        self._max_log_size = max_log_size
        #: Every log's fd by id (active logs read-write, sealed ones read-only or still rw).
        self._fds: dict[int, int] = {}
        #: The active log of each ledger, least recently appended first.
        self._active: OrderedDict[int, _Active] = OrderedDict()
        self._unflushed: set[int] = set()
        self._dir_dirty = False
        #: Ledgers write-closed since the last flush: their logs are sealed at the next one.
        self._closing: set[int] = set()
        self._limiter = trio.CapacityLimiter(1)
        self._flush_lock = trio.Lock()
        self._closed = False
        #: Logs sealed since start (for tests and logs).
        self.sealed_count = 0
        for name in sorted(os.listdir(self._dir)):
            m = _LOG_NAME.match(name)
            if m:
                log_id = int(m.group(1), 16)
                self._fds[log_id] = os.open(self._dir / name, os.O_RDONLY)
        self._next_id = max(self._fds, default=-1) + 1

    def _path(self, log_id: int) -> Path:
        return self._dir / f"{log_id:08x}.log"

    # -- the EntryLogManager protocol ----------------------------------------------------

    def append(self, ledger_id: int, data: Buffer) -> tuple[int, int]:
        if self._closed:
            raise EntryLogError(f"entry log manager over {self._dir} is closed")
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        active = self._active.get(ledger_id)
        if active is not None and active.size > LOG_HEADER.size and active.size + size > self._max_log_size:
            self._seal(ledger_id, "it is full")
            active = None
        if active is None:
            active = self._start(ledger_id)
        offset = active.size
        try:
            self._write(active, data)
        except OSError:
            # A log with a failed (maybe partial) write takes no more appends.
            self._seal(ledger_id, "a write to it failed")
            raise
        active.last_access = time.monotonic()
        self._active.move_to_end(ledger_id)
        return active.log_id, offset

    def _start(self, ledger_id: int) -> _Active:
        while len(self._active) >= self._max_active:
            oldest = next(iter(self._active))
            self._seal(oldest, f"more than max_active = {self._max_active} logs are open")
        log_id = self._next_id
        self._next_id += 1
        fd = os.open(self._path(log_id), os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        self._fds[log_id] = fd
        self._dir_dirty = True
        active = self._active[ledger_id] = _Active(log_id, fd, 0, time.monotonic())
        self._write(active, LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, log_id, ledger_id))
        return active

    def _write(self, active: _Active, data: Buffer) -> None:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(active.fd, view[written:])
        active.size += len(view)
        self._unflushed.add(active.log_id)
        self._counters.storage_bytes_written += len(view)

    def _seal(self, ledger_id: int, why: str) -> None:
        active = self._active.pop(ledger_id, None)
        if active is not None:
            self.sealed_count += 1
            log.debug("sealed entry log %08x of ledger %d: %s", active.log_id, ledger_id, why)

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
        active = {a.log_id for a in self._active.values()}
        return sorted(i for i in self._fds if i not in active)

    def active_ledgers(self) -> list[int]:
        """Ledgers with an active log, least recently appended first."""
        return list(self._active)

    def log_size(self, log_id: int) -> int:
        fd = self._fds.get(log_id)
        return os.fstat(fd).st_size if fd is not None else 0

    def write_close(self, ledger_id: int) -> None:
        if ledger_id in self._active:
            self._closing.add(ledger_id)

    async def remove_log(self, log_id: int) -> bool:
        if log_id not in self._fds or any(a.log_id == log_id for a in self._active.values()):
            return False
        async with self._flush_lock:
            fd = self._fds.pop(log_id)
            self._unflushed.discard(log_id)
            os.close(fd)
            self._path(log_id).unlink()
            self._dir_dirty = True
        return True

    async def flush(self) -> None:
        async with self._flush_lock:
            # Seal what was write-closed or idle since the last flush (BP-32: at checkpoint).
            now = time.monotonic()
            for ledger_id in sorted(self._closing):
                self._seal(ledger_id, "its writer closed it")
            self._closing.clear()
            for ledger_id, active in list(self._active.items()):
                if now - active.last_access >= self._expire_s:
                    self._seal(ledger_id, f"not appended to for {self._expire_s} s")
            if not self._unflushed and not self._dir_dirty:
                return
            todo = sorted(self._unflushed)
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
        self._active.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __repr__(self) -> str:
        return f"PerLedgerEntryLogManager({str(self._dir)!r}, logs={len(self._fds)}, active={len(self._active)})"
