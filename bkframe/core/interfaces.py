"""The typed interfaces every storage and coordination plugin implements.

A plugin's factory hook (see :mod:`bkframe.core.hookspecs`) returns an object that
satisfies one of these protocols. The bookie core only ever talks to these methods, so a
plugin is free in how it stores things, as long as it keeps the documented guarantees.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import anyio
import attrs
import trio

from bkframe.errors import BKError

Buffer = bytes | bytearray | memoryview


#: Where a plugin starts a background task that must outlive the call starting it (a
#: registration's heartbeat, a lock's keep-alive): a trio nursery (the bookie) or an anyio
#: task group (the client, under asyncio or trio).
Spawner = anyio.abc.TaskGroup | trio.Nursery


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


@attrs.define
class LedgerState:
    """What a bookie keeps about one ledger besides its entries."""

    ledger_id: int
    master_key: bytes = b""
    fenced: bool = False
    limbo: bool = False
    write_closed: bool = False
    #: Highest LAC this bookie has seen for the ledger (piggybacked on adds or explicit).
    lac: int = -1
    #: Wire id of the ledger type the first add carried (see :class:`DurabilityPolicy`).
    ledger_type: int = 0


@runtime_checkable
class LedgerStorage(Protocol):
    """Where entries live after the journal: ledger storage (entry logs + index).

    Writes here need not be durable until :meth:`checkpoint` returns: the journal covers
    them until then. All methods but ``checkpoint`` and ``aclose`` are called from the event
    loop and must not block for long (page-cache writes and reads are fine).
    """

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        """The ledger's state, or ``None`` if this bookie has never seen the ledger."""
        ...

    def ensure_ledger(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerState:
        """Return the ledger's state, creating it with ``master_key`` if it is new."""
        ...

    def set_fenced(self, ledger_id: int) -> bool:
        """Mark the ledger fenced; return True if it was not fenced before."""
        ...

    def set_lac(self, ledger_id: int, lac: int) -> None:
        """Raise the ledger's known LAC to ``lac`` (never lowers it)."""
        ...

    def set_write_closed(self, ledger_id: int) -> None:
        """BP-32 advisory write close: the writer is done (closed, or the ledger was fenced).
        Kept across restarts; passed on to the entry-log manager's ``write_close``."""
        ...

    def set_limbo(self, ledger_id: int, limbo: bool) -> None:
        """Set or clear BP-46 limbo: the bookie may have lost entries of this ledger.

        Must survive a restart once :meth:`checkpoint` returns, like the fenced flag.
        """
        ...

    def add_entries(self, ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer]) -> int:
        """Store entries of one ledger (an existing entry id is overwritten); return bytes written.

        Raises ``ValueError`` for entries it can never hold (the bookie answers BAD_REQUEST).
        Any other exception is a storage failure (a full disk, EIO; the bookie answers
        IO_ERROR): then nothing of the batch is stored, what was stored before is intact,
        and later adds must land where the index says they are.
        """
        ...

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's bytes as added, or ``None`` if this bookie does not hold it."""
        ...

    def last_entry_id(self, ledger_id: int) -> int:
        """The highest entry id held for the ledger, -1 if none."""
        ...

    def held_entries(self, ledger_id: int, first: int, last: int) -> Sequence[int]:
        """Ascending ids of the entries held with ``first <= id <= last`` (without reading
        them: repair and LIST_ENTRIES call it over whole ledgers)."""
        ...

    def ledgers(self) -> Iterable[int]:
        """Every ledger id this storage holds."""
        ...

    def delete_ledger(self, ledger_id: int) -> None:
        """Forget the ledger: its index and state. Entry-log space is reclaimed by GC."""
        ...

    async def checkpoint(self) -> None:
        """Make every write made before the call durable (fsync logs, index, state)."""
        ...

    async def collect_garbage(self) -> int:
        """Reclaim space of deleted ledgers (e.g. entry logs no index points into any
        more); return the bytes freed. Called periodically by the bookie's GC."""
        ...

    async def aclose(self) -> None:
        """Flush and close. A later open of the same directory sees every write."""
        ...


@runtime_checkable
class BackgroundStorage(Protocol):
    """Optional, besides :class:`LedgerStorage`: work a storage does beside the requests
    (e.g. making files ahead of need, off the event loop). The bookie runs :meth:`run` in
    its background tasks, after journal replay, for as long as it serves."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Call ``task_status.started()`` once running; run until cancelled. A failure is
        logged and tried again: an exception here stops the bookie."""
        ...


@runtime_checkable
class WriteOnceStorage(Protocol):
    """Optional, besides :class:`LedgerStorage`: large PD entries written once.

    A PD add whose entries are at least :attr:`large_entry_bytes` long is stored with
    ``add_entries`` as usual, but only a small STORED record (where each entry's record is,
    and a CRC32C of its data) goes to the journal; the ack waits for the journal's fsync AND
    for :meth:`sync_entries`. Replay re-indexes such an entry through :meth:`index_stored`.
    The storage must keep every location it handed out readable, or durably indexed
    elsewhere, before it removes or moves it (compaction: copies durable and indexed first).
    """

    @property
    def large_entry_bytes(self) -> int:
        """Entries at least this long are written once (0: never)."""
        ...

    def locate(self, ledger_id: int, entry_id: int) -> tuple[int, int, int]:
        """``(log_id, offset, record_length)`` of an entry just stored by ``add_entries``."""
        ...

    async def sync_entries(self) -> None:
        """Return once every entry stored before the call is durable where ``locate`` says
        (one sync serves every caller waiting for it). Raises if that cannot be done."""
        ...

    def index_stored(self, ledger_id: int, entry_id: int, log_id: int, offset: int, length: int, crc: int) -> bool:
        """Replay: index the entry from its record at ``log_id``/``offset`` if that record is
        the entry and its data has CRC32C ``crc``; False (nothing indexed) otherwise."""
        ...


@runtime_checkable
class RangeReadStorage(Protocol):
    """Optional, besides :class:`LedgerStorage`: consecutive entries in one call, for
    READ_BATCH. A storage without it is read with ``get_entry``, one entry at a time."""

    def get_entries(
        self, ledger_id: int, first: int, last: int, step: int, max_bytes: int
    ) -> tuple[Sequence[int], Sequence[Buffer]]:
        """``(entry_ids, entries)``: the entries ``first, first + step, ...`` up to ``last``
        that are held, in order, up to the first that is not (or cannot be read as the
        index says: its own ``get_entry`` then gives the precise error) and for about
        ``max_bytes`` (at least one entry, if ``first`` is held). The entries are the
        bytes as added (views of a larger buffer are fine)."""
        ...


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

        Raises :class:`bkframe.core.entry_log_files.EntryLogError` if the log does not
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


@runtime_checkable
class DurabilityPolicy(Protocol):
    """A ledger type: how an add to a ledger of this type is made durable and acknowledged.

    Read-only attributes: a frozen attrs class (like :class:`LedgerType`) satisfies it.
    """

    @property
    def name(self) -> str:
        """The ledger type's name as users and metadata spell it, e.g. ``"PD_JOURNAL"``."""
        ...

    @property
    def type_id(self) -> int:
        """The id carried in ADD requests on the wire (0-65535, unique per bookie)."""
        ...

    @property
    def journal_data(self) -> bool:
        """Entry data is written to the journal."""
        ...

    @property
    def sync_before_ack(self) -> bool:
        """The add is acknowledged only after the journal record is fsynced."""
        ...

    @property
    def description(self) -> str:
        """One line for ``bkframe plugins`` and the docs."""
        ...

    @property
    def lac_by_sync(self) -> bool:
        """BP-14: acks do not mean durable, so bookies track LastAddSynced and the client
        advances the LAC by the LastAddSynced rule (otherwise: on A acknowledgements)."""
        ...


@attrs.frozen
class LedgerType:
    """A plain :class:`DurabilityPolicy` value, enough for most ledger types."""

    name: str
    type_id: int
    journal_data: bool
    sync_before_ack: bool
    description: str
    lac_by_sync: bool = False


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
