"""The metadata store plugins implement (:class:`MetadataStore`: ledgers, bookie
registrations, cookies, locks, under-replication marks, named logs' records), its optional
parts (:class:`MultiLogStore`), and helpers that page through a store.

Every update of ledger metadata is a compare-and-set on ``version``: read, ``attrs.evolve``,
``update_ledger(new, expected_version=old.version)``. A store raises
:class:`~bkframe.errors.BadVersionError` when someone else updated first. Named logs
(:mod:`bkframe.client.logs.model`) keep one record per log and one per cursor; stores hold
them as opaque bytes with a version, compared-and-set like ledger metadata.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import anyio

from bkframe.core.metadata import (
    LEDGER_PAGE,
    BookieInfo,
    ClusterRecord,
    LedgerMetadata,
    UnderReplicated,
    Versioned,
)

if TYPE_CHECKING:  # a type only: the value imports trio (bkframe.core.interfaces)
    from bkframe.core.interfaces import Spawner


@runtime_checkable
class BookieRegistration(Protocol):
    """A live registration; it vanishes when closed or when its holder dies."""

    async def set_read_only(self, read_only: bool) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class Lock(Protocol):
    """A held lock (the auditor's leadership, a worker's claim on a ledger). It vanishes when
    released or when its holder dies (about ``ttl_s`` later, as a bookie registration)."""

    @property
    def name(self) -> str: ...

    @property
    def lost(self) -> anyio.Event:
        """Set if the store says the lock expired while held (e.g. a keep-alive failed for
        longer than the TTL, a ZooKeeper session was lost): the holder must stop what the
        lock protects."""
        ...

    async def release(self) -> None: ...


@runtime_checkable
class MetadataStore(Protocol):
    """Where ledgers and bookies are coordinated. Every method is async and may be
    called concurrently from several tasks, processes and machines."""

    uri: str

    async def init_cluster(self, record: ClusterRecord) -> bool:
        """Store the cluster record if the store holds none, atomically (of two processes
        making a cluster at once exactly one wins): True if it was stored, False if a record
        was there already (it is left as it is)."""
        ...

    async def read_cluster(self) -> ClusterRecord | None:
        """The cluster record, or None if the store holds none (it is no bkframe cluster yet)."""
        ...

    async def new_ledger_id(self) -> int:
        """A ledger id never returned before, by any client of this store (ids start at 1)."""
        ...

    async def new_ledger_ids(self, count: int) -> range:
        """``count`` consecutive ledger ids (``count >= 1``) never returned before, by either
        method, to any client: one round trip, so that a client allocates ids in blocks
        (BookKeeper's id ranges) instead of one hot counter update per create."""
        ...

    async def create_ledger(self, metadata: LedgerMetadata) -> LedgerMetadata:
        """Store new metadata; returns it with its version. LedgerExistsError if the id is taken
        by another record. The very same record stored already (a create sent again after its
        answer was lost to a connection loss or a timeout) is no error: it returns that record,
        so a retried create never makes the caller take another id and leave an orphan."""
        ...

    async def read_ledger(self, ledger_id: int) -> LedgerMetadata:
        """The current metadata with its version. NoSuchLedgerError if absent."""
        ...

    async def update_ledger(self, metadata: LedgerMetadata, expected_version: int) -> LedgerMetadata:
        """CAS: replace if the stored version is ``expected_version``; returns the new version.
        BadVersionError if it moved, NoSuchLedgerError if deleted."""
        ...

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata. NoSuchLedgerError if absent."""
        ...

    async def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        """Ledger ids ``>= start``, ascending, at most ``limit`` of them (every one if None).

        A page costs the store about ``limit`` ids of work, however many ledgers it holds:
        callers that may meet a large cluster page through :func:`iter_ledger_ids`."""
        ...

    async def ledgers_of_bookie(self, bookie_id: str, *, start: int = 0, limit: int | None = None) -> list[int]:
        """Ids ``>= start`` (ascending, at most ``limit``) of the ledgers whose metadata names
        ``bookie_id`` in any fragment: an index the store keeps in the same atomic step as
        each create, update and delete of ledger metadata, so that a bookie's garbage
        collection, its boot after an unclean stop and the auditor's reaction to a lost
        bookie read that bookie's ledgers, not the cluster's."""
        ...

    def watch_ledger(self, ledger_id: int) -> AsyncIterator[LedgerMetadata | None]:
        """Yields the current metadata at once, then each change (``None`` once deleted)."""
        ...

    async def register_bookie(
        self, info: BookieInfo, ttl_s: float, nursery: Spawner, *, replace: BookieInfo | None = None
    ) -> BookieRegistration:
        """Register a bookie for as long as the returned registration lives; if the holder
        dies, the registration expires within about ``ttl_s``. A live registration of the
        same id by another bookie (:meth:`BookieInfo.same_bookie` is false) is never replaced:
        :class:`~bkframe.errors.BookieIdInUseError`, atomically with the check; one of the
        same bookie (its previous life) is, and so is one equal to ``replace`` (a registration
        the caller knows is stale: its holder, a process of the caller's machine, is gone). What keeps it alive (a
        heartbeat, a lease keep-alive) runs in the caller's ``nursery``, logging and
        retrying on failure, until :meth:`BookieRegistration.aclose`."""
        ...

    async def list_bookies(self, *, writable_only: bool = False) -> list[BookieInfo]:
        """Registered, live bookies (only those taking writes if ``writable_only``: neither
        read-only nor decommissioned)."""
        ...

    async def read_cookie(self, bookie_id: str) -> Versioned | None:
        """The bookie's cookie with its version, or None."""
        ...

    async def write_cookie(self, bookie_id: str, value: bytes, expected_version: int | None) -> int:
        """CAS a cookie: ``expected_version=None`` creates (fails if it exists); returns the new version."""
        ...

    # -- named logs: one record per log, one per cursor (opaque bytes, versioned) ---------

    async def create_log(self, name: str, value: bytes) -> int:
        """Store a new log record; returns its version. LogExistsError if the name is taken."""
        ...

    async def read_log(self, name: str) -> Versioned:
        """The log record with its version. NoSuchLogError if absent."""
        ...

    async def update_log(self, name: str, value: bytes, expected_version: int) -> int:
        """CAS: replace if the stored version is ``expected_version``; returns the new version.
        BadVersionError if it moved, NoSuchLogError if deleted."""
        ...

    async def delete_log(self, name: str, expected_version: int | None = None) -> None:
        """Remove the log record and, in the same step, all of its cursors. With
        ``expected_version`` only if the record is still at it (else BadVersionError).
        NoSuchLogError if absent."""
        ...

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        """Log names ``>= start``, sorted, at most ``limit`` of them (every one if None): a
        page costs about ``limit`` names of work where the backend can range over names."""
        ...

    async def count_logs(self) -> int:
        """How many logs there are, without reading their names where the backend can."""
        ...

    async def read_cursor(self, log: str, cursor: str) -> Versioned | None:
        """The cursor record with its version, or None."""
        ...

    async def write_cursor(self, log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
        """CAS a cursor: ``expected_version=None`` creates (BadVersionError if it exists);
        returns the new version. NoSuchLogError if the log does not exist."""
        ...

    async def delete_cursor(self, log: str, cursor: str) -> bool:
        """Remove a cursor; False if there was none."""
        ...

    async def list_cursors(self, log: str) -> dict[str, Versioned]:
        """Every cursor of the log by name (empty if the log has none or does not exist)."""
        ...

    # -- autorecovery: locks, under-replicated ledgers, decommissioned bookies ----------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: Spawner) -> Lock | None:
        """Take the lock ``name`` (e.g. ``"auditor"``, ``"ledger/123"``) for ``holder`` if nobody
        holds it, without waiting: the :class:`Lock`, or None if it is held. What keeps it
        alive runs in ``nursery`` (as for :meth:`register_bookie`); if the holder dies it
        vanishes within about ``ttl_s``."""
        ...

    async def lock_holder(self, name: str) -> str | None:
        """Who holds the lock ``name`` now, or None."""
        ...

    async def mark_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        """Add ``bookies`` to the ledger's under-replicated mark (creating it, ``since`` = now)."""
        ...

    async def mark_many_under_replicated(self, ledger_ids: Collection[int], bookies: Collection[str]) -> int:
        """:meth:`mark_under_replicated` of each of ``ledger_ids`` with the same ``bookies``,
        in as few writes as the store allows (the auditor marks a lost bookie's ledgers a
        page at a time). Each ledger's mark is atomic against concurrent marks and clears as
        with :meth:`mark_under_replicated`; the page as a whole need not be: if it fails
        midway, some ledgers may be marked and others not (marking again is harmless).

        Returns how many marks it made or changed: ledgers already marked with all of
        ``bookies`` are not written and not counted (the auditor sweeps a lost bookie's
        ledgers again without listing the marks first)."""
        ...

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        """The marks of ledgers ``>= start``, by ledger id ascending, at most ``limit`` of them
        (every one if None).

        A page costs the store about ``limit`` marks of work, however many it holds (a lost
        bookie of 10^5 ledgers leaves 10^5 marks): workers read a few marks at a time, views
        a page, and callers that need them all page through :func:`iter_under_replicated`.
        A page is full (``limit`` marks) unless no more marks follow it."""
        ...

    async def count_under_replicated(self) -> int:
        """How many ledgers are marked, without reading the marks themselves (the views show
        the number and one page)."""
        ...

    async def clear_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        """Remove ``bookies`` from the mark, atomically against concurrent marks; the mark goes
        once no bookie is left. Bookies not in the mark, or no mark, are not an error."""
        ...

    async def set_decommissioned(self, bookie_id: str, decommissioned: bool) -> None:
        """Mark (or unmark) a bookie as decommissioned: it stays registered if alive (it serves
        reads while its ledgers are copied away) but ``list_bookies(writable_only=True)``
        leaves it out, so nothing new is placed on it. Persistent, not tied to the
        registration."""
        ...

    async def list_decommissioned(self) -> set[str]:
        """The bookie ids marked decommissioned."""
        ...

    async def aclose(self) -> None: ...


#: One log record's change in :meth:`MultiLogStore.update_logs`: (log name, new value,
#: the version it was read at).
LogChange = tuple[str, bytes, int]


@runtime_checkable
class MultiLogStore(Protocol):
    """A metadata store that changes several log records in one atomic step (how
    :meth:`bkframe.Logs.commit_many` commits to several logs at once, all or nothing).

    Optional for a store plugin: every built-in store has it; a store without it serves
    everything else, and a commit to several logs through it fails with
    :class:`~bkframe.errors.UnsupportedError` (the client looks for an ``update_logs`` method)."""

    async def update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        """Compare-and-set several log records at once: each ``(name, value,
        expected_version)`` replaces the record ``name`` if it is still at
        ``expected_version`` -- all of them, or none. Returns the new versions, in the order
        given. If one record moved: :class:`BadVersionError` naming that log; if one does not
        exist: :class:`NoSuchLogError` naming it; either way nothing was written. A name
        given twice, or a version no read returned (negative), is a ``ValueError``
        (:func:`check_log_changes`); no change at all writes nothing and returns ``[]``."""
        ...


def check_log_changes(changes: Sequence[LogChange]) -> list[LogChange]:
    """``changes`` for :meth:`MultiLogStore.update_logs`, checked: each log once, each
    expected version one a read returned (>= 0)."""
    checked = [(str(name), bytes(value), int(version)) for name, value, version in changes]
    seen: set[str] = set()
    twice: set[str] = set()
    for name, _, _ in checked:
        (twice if name in seen else seen).add(name)
    if twice:
        raise ValueError(f"update_logs: log(s) {sorted(twice)} given more than once; give each log's change once")
    bad = [(name, version) for name, _, version in checked if version < 0]
    if bad:
        raise ValueError(f"update_logs: {bad} are no versions a read returned (pass back the version read_log gave)")
    return checked


async def iter_ledger_ids(store: MetadataStore, *, start: int = 0, page: int = LEDGER_PAGE) -> AsyncIterator[list[int]]:
    """Every ledger id ``>= start`` in ascending pages of at most ``page`` ids: memory in
    proportion to a page, not to the cluster. A ledger created or deleted meanwhile may be
    seen or not, as with any listing."""
    async for ids in _pages(lambda first: store.list_ledgers(start=first, limit=page), start, page):
        yield ids


async def iter_ledgers_of_bookie(
    store: MetadataStore, bookie_id: str, *, start: int = 0, page: int = LEDGER_PAGE
) -> AsyncIterator[list[int]]:
    """:meth:`MetadataStore.ledgers_of_bookie` in ascending pages (as :func:`iter_ledger_ids`)."""
    async for ids in _pages(lambda first: store.ledgers_of_bookie(bookie_id, start=first, limit=page), start, page):
        yield ids


async def iter_under_replicated(
    store: MetadataStore, *, start: int = 0, page: int = LEDGER_PAGE
) -> AsyncIterator[list[UnderReplicated]]:
    """Every mark of a ledger ``>= start`` in ascending pages of at most ``page`` marks (as
    :func:`iter_ledger_ids`): for tests and one-off tools; nothing periodic should read
    every mark."""
    while True:
        marks = await store.list_under_replicated(start=start, limit=page)
        if not marks:
            return
        yield marks
        if len(marks) < page:
            return
        start = marks[-1].ledger_id + 1


async def _pages(fetch: Callable[[int], Awaitable[list[int]]], start: int, page: int) -> AsyncIterator[list[int]]:
    """Pages of ascending ids from ``fetch(first id)`` until one comes back short."""
    while True:
        ids = await fetch(start)
        if not ids:
            return
        yield ids
        if len(ids) < page:
            return
        start = ids[-1] + 1
