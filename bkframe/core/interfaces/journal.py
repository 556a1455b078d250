"""The journal a bookie writes every add to first (:class:`Journal`), where it is
(:class:`JournalPosition`, the checkpoint's LastLogMark), and the errors a journal raises."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import trio

from bkframe.core.interfaces import Buffer
from bkframe.errors import BKError


@attrs.frozen(order=True)
class JournalPosition:
    """A point in the journal: the file it is in and the byte offset inside that file.

    Positions order like the journal itself: by file id, then offset. The LastLogMark of a
    checkpoint is one of these (seed: bookkeeper-overview, "Data Flush").
    """

    file_id: int
    offset: int


@runtime_checkable
class Journal(Protocol):
    """An append-only, group-committed write-ahead log of opaque records.

    Records are opaque bytes to the journal; :mod:`bkframe.bookie.durability.journal_records` says what
    the bookie puts in them. The journal frames each record (length + CRC) so that a torn
    tail is detected at replay.

    Life cycle: ``replay`` is called once before ``run``; then the bookie starts ``run``
    in its nursery, calls ``append`` from the event loop and awaits ``wait_durable``.
    """

    def replay(self, since: JournalPosition | None) -> Iterable[tuple[JournalPosition, bytes]]:
        """Yield ``(position_after_record, record)`` for every complete record after ``since``.

        ``since=None`` replays every journal file present. Only what a completed fsync
        covered was acknowledged, so the tail after the last completed fsync may be torn
        in any way by a crash or power cut (an incomplete or CRC-failing record, zeros
        where pages never reached the disk, valid records after them): it is truncated.
        Damage to what was fsynced (in the middle of the last file, or anywhere in an
        earlier file, which was fsynced when the journal moved on) raises
        :class:`JournalCorruptError` naming file and offset. How the journal knows where
        its last completed fsync ended is its own business (``journal_fs`` writes a sync
        mark with each group commit). Must be fully consumed before ``run`` starts.
        """
        ...

    def append(self, parts: Sequence[Buffer], key: int = 0) -> int:
        """Append one record made of the concatenation of ``parts``; return its sequence.

        Never blocks and never waits for the disk. The returned sequence number is
        monotonic; pass it to :meth:`wait_durable` to wait until the record is fsynced.
        ``key`` (the bookie passes the record's ledger id): records of one key are replayed
        in the order they were appended; a journal with several writers may spread keys
        over them and replay records of different keys in another order.
        """
        ...

    async def wait_durable(self, seq: int, *, hurry: bool = True) -> None:
        """Return once every record up to and including ``seq`` is fsynced.

        ``hurry``: someone is waiting on this now (an acknowledgement, a SYNC), so the group
        commit should flush as soon as it can; ``hurry=False`` only watches (the bookie's
        BP-14 sync cursors), and lets a journal keep records nobody waits for a while longer
        to share one fsync among more of them (``journal_fs``: ``max_lazy_wait_ms``).

        Raises :class:`JournalWriteError` if record ``seq`` was lost to a write that failed
        in a way the journal survives (a full disk); it is then settled too (see
        :attr:`durable_seq`).
        """
        ...

    @property
    def durable_seq(self) -> int:
        """Every record up to this sequence number is settled: on disk (fsynced), or lost to
        a failed write, which :meth:`is_lost` tells."""
        ...

    def is_lost(self, seq: int) -> bool:
        """Whether record ``seq`` was dropped by a write that failed (e.g. ENOSPC): it is not
        durable and never will be, so nothing that depends on it may be acknowledged. Later
        records are written as usual; the journal stays replayable."""
        ...

    def position(self) -> JournalPosition:
        """The position just after the last appended record (the next LastLogMark)."""
        ...

    def remove_files_before(self, mark: JournalPosition) -> int:
        """Delete journal files wholly before ``mark``; return how many were deleted."""
        ...

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The group-commit loop: write and fsync appended records, off the event loop.

        Calls ``task_status.started()`` once it accepts appends; runs until cancelled.
        """
        ...

    async def aclose(self) -> None:
        """Write and fsync everything appended so far, then close the files."""
        ...


class JournalWriteError(BKError, OSError):
    """Journal records were not written because a write failed in a way the journal
    survives (the disk is full: ``errno`` is ENOSPC or EDQUOT). Those records are not
    durable and never will be; the journal goes on with later ones."""


class JournalCorruptError(BKError):
    """The journal is corrupt before its tail; the bookie must not start on it."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"journal file {path} is corrupt at offset {offset}: {reason}. Records after it "
            f"are intact, so this is not a torn tail; refusing to start rather than lose "
            f"acknowledged entries. Restore the file from a replica or backup, or move the "
            f"bookie's data dir aside and let the cluster re-replicate it."
        )
