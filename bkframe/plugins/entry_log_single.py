"""Entry-log manager ``single``: one active entry log shared by every ledger.

Entries of all ledgers are interleaved in one append-only file at a time (seed:
bookkeeper-overview, "Data Management in Bookies"), so the disk sees sequential writes
whatever the number of ledgers. Appends go to the page cache with ``os.pwrite`` at the
offset the manager keeps; only :meth:`SingleEntryLogManager.flush` (called from the storage
checkpoint) pays for fsync, and it does so off the event loop.

A failed append (a short write, then ENOSPC or EIO) is cut off the log again, so the next
append goes exactly where the failed one would have; if even that fails, the log is sealed
and appends go on in a new one. Either way the offsets handed to the ledger storage are
where the bytes are.

File layout: ``DIR/{log_id:08x}.log``, starting with a 16-byte header (magic, version,
log id) followed by whatever bytes the ledger storage appended.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import attrs

from bkframe.core.config import at_least
from bkframe.core.counters import Counters
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces import Buffer
from bkframe.core.registry import ComponentRegistry
from bkframe.storage_kit.entry_log_files import DEFAULT_MAX_OPEN_LOGS, EntryLogError, EntryLogFiles, EntryLogWriteError

log = logging.getLogger(__name__)

PLUGIN_NAME = "single"
LOG_MAGIC = b"BKEL"
LOG_VERSION = 1
#: magic, version u32, log id u64.
LOG_HEADER = struct.Struct("<4sIQ")
DEFAULT_MAX_LOG_SIZE = 1 << 30


class SingleEntryLogManager:
    """One active log for all ledgers, rotated by size; older logs stay open for reads.

    :param directory: where the ``*.log`` files live (created if missing).
    :param counters: ``storage_bytes_written`` and ``storage_fsyncs`` are counted here.
    :param max_log_size: a new log is started before an append that would take the
        active log past this size (one append is never split, so a single append larger
        than this makes a log that large).
    :param max_open_logs: older logs kept open for reads at most (opened again when read).
    """

    def __init__(
        self,
        directory: Path,
        counters: Counters,
        *,
        max_log_size: int = DEFAULT_MAX_LOG_SIZE,
        drop_synced_pages: bool = False,
        max_open_logs: int = DEFAULT_MAX_OPEN_LOGS,
    ) -> None:
        if max_log_size <= LOG_HEADER.size:
            raise ValueError(f"max_log_size must be larger than the {LOG_HEADER.size}-byte log header")
        self._files = EntryLogFiles(
            directory, counters, drop_synced_pages=drop_synced_pages, max_open_logs=max_open_logs
        )
        self._max_log_size = max_log_size
        self._closed = False
        self._files.open_existing(self._check_header)
        # Never append to a log of an earlier run: its tail may be torn. The new log is
        # created on the first append, so restarts without writes leave no empty logs.
        self._active_id = max(self._files.log_ids(), default=-1) + 1
        self._active_fd = -1
        self._active_size = 0

    def _check_header(self, log_id: int, fd: int) -> None:
        path = self._files.path(log_id)
        header = os.pread(fd, LOG_HEADER.size, 0)
        if len(header) < LOG_HEADER.size:
            # Created but never flushed before a crash: no checkpointed index can point
            # into it (checkpoints fsync logs before the index), so it is harmless.
            log.warning("entry log %s has no complete header; ignoring its contents", path)
            return
        magic, version, stored_id = LOG_HEADER.unpack(header)
        if magic != LOG_MAGIC or version != LOG_VERSION or stored_id != log_id:
            raise EntryLogError(
                f"entry log {path} has a bad header (magic {magic!r}, version {version}, log id "
                f"{stored_id}; expected {LOG_MAGIC!r}, {LOG_VERSION}, {log_id}). It is not a bkframe "
                f"entry log of this version or it is corrupt; move it aside to start the bookie."
            )

    def _start_log(self, log_id: int) -> None:
        if self._active_fd >= 0:
            self._files.seal(self._active_id)
            self._active_fd = -1
        # The new id first: if the create fails (no fd left), the next append tries it again.
        self._active_id = log_id
        self._active_size = 0  # the header is written by the first append
        self._active_fd = self._files.create(log_id)

    def _write(self, data: Buffer) -> None:
        try:
            self._active_size += self._files.write(self._active_id, self._active_fd, data, self._active_size)
        except EntryLogWriteError as e:
            # Cut back: the next append goes where this one would have. Otherwise the
            # log's tail holds part of the failed write: seal it, later appends go to a
            # new log (whose offsets start afresh).
            if not e.truncated:
                log.warning("sealing entry log %s after a failed write it could not cut back", self._files.path(self._active_id))
                self._files.seal(self._active_id)
                self._active_id += 1
                self._active_fd = -1
            raise

    # -- the EntryLogManager protocol ----------------------------------------------------

    def append(self, ledger_id: int, data: Buffer) -> tuple[int, int]:
        if self._closed:
            raise EntryLogError(f"entry log manager over {self._files.dir} is closed")
        size = len(data) if not isinstance(data, memoryview) else data.nbytes
        if self._active_fd < 0:
            self._start_log(self._active_id)
        elif self._active_size > LOG_HEADER.size and self._active_size + size > self._max_log_size:
            self._start_log(self._active_id + 1)
        if self._active_size == 0:  # a new log, or one whose header write failed
            self._write(LOG_HEADER.pack(LOG_MAGIC, LOG_VERSION, self._active_id))
        offset = self._active_size
        self._write(data)
        return self._active_id, offset

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        return self._files.read(log_id, offset, length)

    def log_ids(self) -> list[int]:
        return self._files.log_ids()

    def sealed_log_ids(self) -> list[int]:
        # Appends go to the active log only; every other log (earlier ids, or logs of an
        # earlier run: a restart never appends to them) is sealed.
        return [i for i in self._files.log_ids() if i != self._active_id]

    def log_size(self, log_id: int) -> int:
        return self._files.log_size(log_id)

    def write_close(self, ledger_id: int) -> None:
        # One log is shared by all ledgers, so a writer finishing changes nothing here.
        return None

    async def remove_log(self, log_id: int) -> bool:
        if log_id == self._active_id:
            return False  # still being written
        return await self._files.remove(log_id)

    async def flush(self) -> None:
        await self._files.flush()

    async def aclose(self) -> None:
        if self._closed:
            return
        await self.flush()
        self._closed = True
        self._files.close()

    def __repr__(self) -> str:
        return f"SingleEntryLogManager({str(self._files.dir)!r}, logs={len(self._files.log_ids())})"


@attrs.frozen
class SingleConfig:
    """``[entry_log_manager]`` with ``plugin = "single"``."""

    #: A new log is started before an append that would take the active log past this size.
    max_log_size: int = attrs.field(default=DEFAULT_MAX_LOG_SIZE, validator=at_least(LOG_HEADER.size + 1))
    #: After each flush (a checkpoint, or the fsync of large PD entries written once), drop
    #: the logs' synced pages from the page cache.
    drop_synced_pages: bool = False
    #: Older (sealed) logs kept open for reads at most; the least recently read is closed.
    max_open_logs: int = attrs.field(default=DEFAULT_MAX_OPEN_LOGS, validator=at_least(1))


def make_manager(config: SingleConfig, directory: Path, counters: Counters) -> SingleEntryLogManager:
    return SingleEntryLogManager(
        directory,
        counters,
        max_log_size=config.max_log_size,
        drop_synced_pages=config.drop_synced_pages,
        max_open_logs=config.max_open_logs,
    )


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_entry_log_manager(
        PLUGIN_NAME, make_manager, config=SingleConfig, description="one active entry log for all ledgers, rotated by size"
    )
