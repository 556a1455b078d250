"""The entry-log manager a ledger storage appends its records through: which log an entry
goes to, and the files themselves (:mod:`bkframe.storage_kit.entry_log_files` helps write one)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from bkframe.core.interfaces import Buffer


@runtime_checkable
class EntryLogManager(Protocol):
    """Chooses the entry log an entry goes to and owns the entry-log files.

    The ledger storage decides the byte format of what it appends; the manager only
    places bytes in files, reads them back and makes them durable.
    """

    def append(self, ledger_id: int, data: Buffer) -> tuple[int, int]:
        """Append ``data`` (records of one ledger) to a log; return ``(log_id, offset)``.

        If the write fails, raise, and leave no trace that could move later appends: cut
        the failed bytes off again, or seal the log and go on in a new one.
        """
        ...

    def read(self, log_id: int, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` of log ``log_id``.

        Raises :class:`bkframe.storage_kit.entry_log_files.EntryLogError` if the log does not
        hold them (no such log, or it ends before: a crash took its unsynced tail), and
        ``OSError`` for a failing disk.
        """
        ...

    def log_ids(self) -> list[int]:
        """Every entry log present, oldest first."""
        ...

    def sealed_log_ids(self) -> list[int]:
        """The logs that will never be appended to again (garbage collection only touches
        these). Once sealed, a log stays sealed."""
        ...

    def log_size(self, log_id: int) -> int:
        """Bytes in the log (0 if it does not exist)."""
        ...

    def write_close(self, ledger_id: int) -> None:
        """Advisory: the ledger's writer is done (BP-32). The default ignores it."""
        ...

    async def remove_log(self, log_id: int) -> bool:
        """Delete a log no index points into any more; False (and nothing done) for a log
        still being written. The deletion is durable after the next :meth:`flush`."""
        ...

    async def flush(self) -> None:
        """fsync every log written since the last flush (off the event loop)."""
        ...

    async def aclose(self) -> None:
        """Flush and close every log."""
        ...
