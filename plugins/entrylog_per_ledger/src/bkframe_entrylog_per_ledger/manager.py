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
* when a write to it fails and cannot be cut off again (before the error reaches the
  client). A failed write that could be cut off (the usual case: shrinking a file needs no
  space) leaves the log as it was, and the next append goes where the failed one would have.

File layout: ``DIR/{log_id:08x}.log``, log ids shared by all ledgers, each file starting
with a 24-byte header (magic, version, log id, ledger id). Logs of an earlier run are
sealed: a restart never appends to them (their tail may be torn).

A sealed log keeps no file descriptor: it is opened when read, and at most
``max_open_logs`` sealed logs stay open (least recently read closed first), so a bookie
holding 10^5 ledgers, each with its log, needs no more fds than one holding a hundred.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import OrderedDict
from pathlib import Path

import attrs

from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.storage_kit.entry_log_files import EntryLogError, EntryLogFiles, EntryLogWriteError

log = logging.getLogger(__name__)

LOG_MAGIC = b"BKEP"
LOG_VERSION = 1
#: magic, version u32, log id u64, ledger id u64.
LOG_HEADER = struct.Struct("<4sIQQ")
DEFAULT_MAX_ACTIVE = 64
DEFAULT_EXPIRE_AFTER_ACCESS_S = 300.0
DEFAULT_MAX_LOG_SIZE = 1 << 30
DEFAULT_MAX_OPEN_LOGS = 128


@attrs.define
class _Active:
    log_id: int
    fd: int
    size: int
    last_access: float


class PerLedgerEntryLogManager:
    """:class:`bkframe.core.interfaces.entry_log.EntryLogManager` with a log per ledger."""

    def __init__(
        self,
        directory: Path,
        counters: Counters,
        *,
        max_active: int = DEFAULT_MAX_ACTIVE,
        expire_after_access_s: float = DEFAULT_EXPIRE_AFTER_ACCESS_S,
        max_log_size: int = DEFAULT_MAX_LOG_SIZE,
        max_open_logs: int = DEFAULT_MAX_OPEN_LOGS,
    ) -> None:
        if max_active < 1:
            raise ValueError("max_active must be at least 1")
        if expire_after_access_s <= 0:
            raise ValueError("expire_after_access_s must be positive")
        if max_log_size <= LOG_HEADER.size:
            raise ValueError(f"max_log_size must be larger than the {LOG_HEADER.size}-byte log header")
        self._files = EntryLogFiles(directory, counters, max_open_logs=max_open_logs)
        self._max_active = max_active
        self._expire_s = expire_after_access_s
        self._max_log_size = max_log_size
        #: The active log of each ledger, least recently appended first.
        self._active: OrderedDict[int, _Active] = OrderedDict()
        #: Ledgers write-closed since the last flush: their logs are sealed at the next one.
        self._closing: set[int] = set()
        self._closed = False
        #: Logs sealed since start (for tests and logs).
        self.sealed_count = 0
        self._files.open_existing()  # all sealed: never appended to again; nothing opened
        self._next_id = max(self._files.log_ids(), default=-1) + 1

    # -- the EntryLogManager protocol ----------------------------------------------------

    def append(self, ledger_id: int, data: Buffer) -> tuple[int, int]:
        if self._closed:
            raise EntryLogError(f"entry log manager over {self._files.dir} is closed")
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        active = self._active.get(ledger_id)
        if active is not None and active.size > LOG_HEADER.size and active.size + size > self._max_log_size:
            self._seal(ledger_id, "it is full")
            active = None
        if active is None:
            active = self._start(ledger_id)
        try:
            if active.size == 0:  # a new log, or one whose header write failed
                self._write(active, LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, active.log_id, ledger_id))
            offset = active.size
            self._write(active, data)
        except EntryLogWriteError as e:
            if not e.truncated:
                # Part of the failed write stays at the log's tail: no more appends to it.
                self._seal(ledger_id, "a write to it failed and could not be cut off")
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
        fd = self._files.create(log_id)
        active = self._active[ledger_id] = _Active(log_id, fd, 0, time.monotonic())
        return active

    def _write(self, active: _Active, data: Buffer) -> None:
        active.size += self._files.write(active.log_id, active.fd, data, active.size)

    def _seal(self, ledger_id: int, why: str) -> None:
        active = self._active.pop(ledger_id, None)
        if active is not None:
            self._files.seal(active.log_id)
            self.sealed_count += 1
            log.debug("sealed entry log %08x of ledger %d: %s", active.log_id, ledger_id, why)

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        return self._files.read(log_id, offset, length)

    def log_ids(self) -> list[int]:
        return self._files.log_ids()

    def sealed_log_ids(self) -> list[int]:
        active = {a.log_id for a in self._active.values()}
        return [i for i in self._files.log_ids() if i not in active]

    def open_fds(self) -> int:
        """File descriptors of entry logs open now."""
        return self._files.open_fds()

    def active_ledgers(self) -> list[int]:
        """Ledgers with an active log, least recently appended first."""
        return list(self._active)

    def log_size(self, log_id: int) -> int:
        return self._files.log_size(log_id)

    def write_close(self, ledger_id: int) -> None:
        if ledger_id in self._active:
            self._closing.add(ledger_id)

    async def remove_log(self, log_id: int) -> bool:
        if any(a.log_id == log_id for a in self._active.values()):
            return False  # still being written
        return await self._files.remove(log_id)

    async def flush(self) -> None:
        # Seal what was write-closed or idle since the last flush (BP-32: at checkpoint).
        now = time.monotonic()
        for ledger_id in sorted(self._closing):
            self._seal(ledger_id, "its writer closed it")
        self._closing.clear()
        for ledger_id, active in list(self._active.items()):
            if now - active.last_access >= self._expire_s:
                self._seal(ledger_id, f"not appended to for {self._expire_s} s")
        await self._files.flush()

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        self._active.clear()
        self._files.close()

    def __repr__(self) -> str:
        logs = len(self._files.log_ids())
        return f"PerLedgerEntryLogManager({str(self._files.dir)!r}, logs={logs}, active={len(self._active)})"
