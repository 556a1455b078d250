"""Ledger storage: where entries live after the journal (:class:`LedgerStorage`), what a
bookie keeps about a ledger besides its entries (:class:`LedgerState`), and the optional
protocols a storage may add (background work, write-once large entries, range reads)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs
import trio

from bkframe.core.interfaces import Buffer


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
