"""Named logs through the client: create, write, read, commit, trim, cursors.

::

    async with bkframe.open_client(uri) as bk:
        logs = bk.logs                                       # or bkframe.Logs(bk)
        await logs.create("events", rollover_entries=10_000, retention_s=86_400)
        async with await logs.open_writer("events") as writer:
            position = await writer.append(b"hello")          # e.g. Position(0, 0), printed 0:0
        reader = await logs.reader("events")
        async for entry in reader.tail("earliest"):
            ...

The model (positions, records, cursors) is :mod:`bkframe.client.logs.model`; writing is
:mod:`bkframe.client.logs.writer`, reading :mod:`bkframe.client.logs.reader`; the stored
records, and the steps all three share, :mod:`bkframe.client.logs.records`; committing
closed ledgers (to one log or several at once) :mod:`bkframe.client.logs.commits`; trimming
:mod:`bkframe.client.logs.retention`.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs

from bkframe.client.logs import commits
from bkframe.client.logs.acks import CursorAcks
from bkframe.client.logs.envelope import ENVELOPE_CUSTOM
from bkframe.client.logs.ledgers import LedgerClient
from bkframe.client.logs.model import (
    DISCARD_PREFIX,
    EARLIEST,
    Commit,
    CommitResult,
    CompactionDefaults,
    Cursor,
    LogMetadata,
    LogSettings,
    Position,
    Segment,
    Staged,
    TrimResult,
    Where,
    check_name,
)
from bkframe.client.logs.reader import LogReader, count_entries
from bkframe.client.logs.records import LogRecords
from bkframe.client.logs.retention import trim
from bkframe.client.logs.writer import LogWriter
from bkframe.client.write_handle import WriteHandle
from bkframe.compaction.compactor import CompactionResult, compact
from bkframe.core.ledger_keys import password_hash
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import (
    BadVersionError,
    CursorExistsError,
    LogFencedError,
    NoSuchCursorError,
    NoSuchLedgerError,
    SubscriptionExistsError,
)
from bkframe.subscriptions.consumer import Subscription
from bkframe.subscriptions.dispatcher import Dispatcher, fence_name
from bkframe.subscriptions.dispatcher import read_record as read_subscription
from bkframe.subscriptions.local import LocalOwner
from bkframe.subscriptions.owner import SubscriptionOwner, SubscriptionStats
from bkframe.subscriptions.remote import RemoteOwner
from bkframe.subscriptions.settings import SubscriptionRecord, SubscriptionSettings
from bkframe.tiering.deletes import delete_objects
from bkframe.tiering.offload import OffloadResult, offload
from bkframe.tiering.offload_record import OffloadStats

log = logging.getLogger("bkframe.logs")

#: The settings :meth:`Logs.configure` changes on an existing log.
CONFIGURABLE = (
    "offload_after_s", "offload_beyond_bytes", "offload_deletion_lag_s", "offload_tier",
    "compaction", "min_compaction_lag_s", "tombstone_retention_s", "min_dirty_ratio",
)


@attrs.frozen
class CursorInfo:
    cursor: Cursor
    #: Confirmed entries from the cursor's position to the log's end.
    lag: int
    #: Seconds since it was last moved, and its inactivity TTL (its own or the log's; None: none).
    idle_s: float = 0.0
    ttl_s: float | None = None
    #: Idle past its TTL: retention no longer waits for it.
    expired: bool = False


@attrs.frozen
class LogInfo:
    """``bkframe log info``: the record, where the confirmed end is, cursors and their lag."""

    metadata: LogMetadata
    end: Position
    #: Confirmed entries per segment number (open segments: up to their LAC).
    entries: dict[int, int]
    cursors: tuple[CursorInfo, ...]
    #: Every segment, those in chunk records too (``metadata.segments`` holds the recent ones).
    segments: tuple[Segment, ...] = ()

    @property
    def offloaded(self) -> OffloadStats:
        """How many of its segments, entries and bytes are offloaded to a tier, and where."""
        return OffloadStats.of((s.entries, s.length, s.offload) for s in self.segments if s.offload is not None)


class Logs:
    """Named logs on a client: ``client.logs`` (or ``bkframe.Logs(client)``)."""

    client: LedgerClient

    def __init__(self, client: LedgerClient) -> None:
        self.client = client
        self.store = client.metadata
        self._records = LogRecords(client)
        # One client's acks are one set, however many Logs are made on it (bkframe.Logs(bk)
        # is bk.logs): the client flushes them when it closes.
        shared = getattr(client, "logs", None)
        self._acks: CursorAcks = (
            shared._acks
            if isinstance(shared, Logs)
            else CursorAcks(self._records, client.context.settings.cursor_flush_interval_s, client.context.nursery)
        )
        #: The subscriptions this client owns, shared the same way.
        self._owners: dict[tuple[str, str], SubscriptionOwner] = shared._owners if isinstance(shared, Logs) else {}

    # -- records ------------------------------------------------------------------------

    async def create(
        self, name: str, settings: LogSettings | None = None, *, password: bytes = b"", **overrides: Any
    ) -> LogMetadata:
        """Create an empty log. Keywords override :class:`LogSettings` fields
        (``rollover_entries=10_000``, ``ledger_type="VD_JOURNAL"``, ...)."""
        check_name(name)
        settings = settings if settings is not None else LogSettings()
        try:
            settings = attrs.evolve(settings, **overrides)
        except TypeError as e:
            known = ", ".join(f.name for f in attrs.fields(LogSettings))
            raise TypeError(f"create log: {e}; the settings are: {known}") from None
        self.client.context.ledger_types.named(settings.ledger_type)  # unknown type: a clear error now
        record = LogMetadata(name=name, settings=settings, password_hash=password_hash(password), uid=uuid.uuid4().hex)
        version = await self.store.create_log(name, record.serialize())
        return attrs.evolve(record, version=version)

    async def metadata(self, name: str) -> LogMetadata:
        return await self._records.read(name)

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        """Log names ``>= start``, sorted, at most ``limit`` (all if None)."""
        return await self.store.list_logs(start=start, limit=limit)

    async def delete(self, name: str) -> LogMetadata:
        """Delete the log, its cursors, every ledger it holds and its segments' objects in
        tiers (a tier that fails leaves them to the orphan sweep). A writer still writing it
        fails (its segments are gone). Returns the record as it was."""
        while True:
            record = await self.metadata(name)
            self._records.forget_chunks(record.uid)
            # The chunks' segments are read first: the chunk records go with the log record.
            chunked = await self._records.segments(attrs.evolve(record, segments=()))
            try:
                await self.store.delete_log(name, expected_version=record.version)
                break
            except BadVersionError:
                continue
        self._acks.forget(name)
        for ledger_id in sorted(record.ledger_ids() | {i for s in chunked for i in s.ledgers()}):
            await self._records.delete_ledger_quietly(ledger_id)
        await delete_objects(self.client.context.tiers, name, (*chunked, *record.segments))
        return record

    # -- writing ------------------------------------------------------------------------

    async def open_writer(self, name: str, *, password: bytes = b"") -> LogWriter:
        """Become the log's one writer: recover and close the segments the previous writer
        left open (fencing it), start a new segment. If another client opens the log at
        the same moment, one of the two gets :class:`LogFencedError`."""
        record = await self.metadata(name)
        self._records.check_password(record, password)
        writer_id = uuid.uuid4().hex
        s = record.settings
        first: WriteHandle | None = None
        try:
            while True:
                recovered = await self._recover_open_segments(record, password)
                if first is None:
                    first = await self.client.create_ledger(
                        ensemble=s.ensemble,
                        write_quorum=s.write_quorum,
                        ack_quorum=s.ack_quorum,
                        ledger_type=s.ledger_type,
                        digest=s.digest,
                        password=password,
                        custom={"bkframe.log": name, **ENVELOPE_CUSTOM},
                    )
                new = taken_over(record, recovered, first.ledger_id, writer_id, now=time.time())
                try:
                    stored = await self._records.cas(new, record.version)
                    break
                except BadVersionError:
                    latest = await self.metadata(name)
                    if latest.writer_epoch != record.writer_epoch:
                        raise LogFencedError(
                            f"log {name!r} was opened for writing by another client at the same moment; "
                            f"it is that client's now (open again to take it over)"
                        ) from None
                    record = latest
        except BaseException:
            if first is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await self._records.delete_ledger_quietly(first.ledger_id)
            raise
        writer = LogWriter(self._records, stored, first, writer_id, password)
        await writer._start()
        if stored.garbage:
            try:
                await self._records.collect_garbage(name)
            except Exception as e:  # noqa: BLE001 - the ledgers stay listed as garbage; a later pass retries
                log.warning("log %r: deleting unused ledgers failed (retried later): %s", name, e)
        return writer

    async def _recover_open_segments(self, record: LogMetadata, password: bytes) -> dict[int, LedgerMetadata | None]:
        """Recover (and so fence and close) the ledger of each open segment of ``record``:
        its metadata after recovery, by segment number (None: the ledger is gone)."""
        recovered: dict[int, LedgerMetadata | None] = {}
        for seg in record.open_segments():
            try:
                handle = await self.client.open_ledger(seg.ledger_id, password=password, recovery=True)
                recovered[seg.number] = handle.metadata
            except NoSuchLedgerError:
                # Deleted meanwhile: another opener dropped it (it was empty) and
                # won; our CAS fails and says so.
                recovered[seg.number] = None
        return recovered

    async def commit_ledgers(
        self,
        name: str,
        ledger_ids: Iterable[int],
        token: str,
        *,
        password: bytes = b"",
        time_bounds: Mapping[int, tuple[int, int]] | None = None,
    ) -> CommitResult:
        """Append closed ledgers to the log as consecutive segments, all in one CAS, so they
        become visible together or not at all. Idempotent per ``token``: committing a token
        again (a retry after a crash or a timeout) changes nothing and returns the first
        result. The ledgers must be closed and have the log's password; empty ones become no
        segment and are deleted; the log owns the others from then on.

        A ledger whose custom metadata says :data:`~bkframe.client.logs.envelope.FORMAT_KEY`
        ``= "1"`` holds records in envelopes (:func:`bkframe.encode_record`); any other holds
        plain payloads (a raw segment: no keys, no timestamps). ``time_bounds``: the smallest
        and largest timestamp of each ledger's records, for seeks by time and retention.

        The one-log case of :meth:`commit_many` (it works on every metadata store)."""
        if not token:
            raise ValueError("commit_ledgers needs a non-empty token (e.g. the job's or batch's id)")
        results = await commits.commit(self._records, {name: ledger_ids}, token, password=password, time_bounds=time_bounds)
        return results[name]

    async def commit_many(
        self,
        ledgers: Mapping[str, Iterable[int]],
        token: str,
        *,
        password: bytes | Mapping[str, bytes] = b"",
        time_bounds: Mapping[int, tuple[int, int]] | None = None,
    ) -> dict[str, CommitResult]:
        """:meth:`commit_ledgers` to several logs at once: ``ledgers`` maps each log's name to
        the closed ledgers it gets, and every log's record is stored in **one atomic step**
        of the metadata store -- all the logs get their segments, or none does. Idempotent
        per ``token`` across the logs: a commit whose token is found (in every one of its
        logs) changes nothing and returns the first results; a token found in some of the
        logs only is a :class:`~bkframe.errors.CommitError` (see docs/logs.md). In each
        log, the ledgers staged under ``token`` and left out are deleted. ``password``: one
        for every log, or a mapping with each log's. ``time_bounds`` by ledger id, as for
        :meth:`commit_ledgers`. Returns each log's :class:`CommitResult` by name.

        Several logs need a store that implements
        :class:`~bkframe.core.interfaces.metadata_store.MultiLogStore` (every built-in one does); another gets
        :class:`~bkframe.errors.UnsupportedError` before anything is changed."""
        return await commits.commit(self._records, ledgers, token, password=password, time_bounds=time_bounds)

    async def stage_ledger(self, name: str, ledger_id: int, token: str, *, group: str = "", password: bytes = b"") -> bool:
        """List ``ledger_id``, just created, in the log record as being written to be
        committed under ``token`` by the writer ``group`` (e.g. one run of a job). The commit
        of ``token`` deletes the staged ledgers it leaves out, :meth:`discard_staged` those
        of a group: so a writer that dies never leaves its ledger behind, and nothing lists
        the cluster's ledgers to find it. False (nothing stored) when it is too late: the
        token is committed or the group discarded; the caller deletes its ledger."""
        record = await self.metadata(name)
        self._records.check_password(record, password)
        staged = Staged(ledger_id, token, group)

        def stage(r: LogMetadata) -> LogMetadata:
            if r.commit(token) is not None or r.discarded(group) or staged in r.staged:
                return r
            return attrs.evolve(r, staged=(*r.staged, staged))

        stored = await self._records.update(name, stage)
        return staged in stored.staged

    async def discard_staged(self, name: str, group: str, *, password: bytes = b"") -> list[int]:
        """Give the staging ``group`` up: its staged ledgers are deleted, and a later
        :meth:`stage_ledger` for it returns False. Returns the ledgers deleted."""
        record = await self.metadata(name)
        self._records.check_password(record, password)

        ids: list[int] = []

        def discard(r: LogMetadata) -> LogMetadata:
            ids[:] = [s.ledger_id for s in r.staged if s.group == group]
            if r.discarded(group):
                return r
            mark = Commit(DISCARD_PREFIX + group, r.next_segment, r.next_segment - 1, time.time())
            return r.unstage(group=group).with_commit(mark)

        await self._records.update(name, discard)
        left = set((await self._records.collect_garbage(name)).garbage)
        return [i for i in ids if i not in left]

    async def discard_staged_many(
        self, names: Iterable[str], group: str, *, password: bytes | Mapping[str, bytes] = b""
    ) -> dict[str, list[int]]:
        """:meth:`discard_staged` of the staging ``group`` in each log of ``names`` (the abort
        of a write to several logs), one log after the other: not one atomic step, and it
        need not be -- each log's discard is final and doing it again is harmless, so an abort
        that failed midway is simply called again. ``password``: one for all, or per log.
        The ledgers deleted, by log."""
        wanted = sorted(set(names))
        passwords = commits.passwords_for(wanted, password, "discard_staged_many")
        return {name: await self.discard_staged(name, group, password=passwords[name]) for name in wanted}

    # -- reading ------------------------------------------------------------------------

    async def reader(self, name: str, *, password: bytes = b"") -> LogReader:
        record = await self.metadata(name)
        self._records.check_password(record, password)
        return LogReader(self._records, record, password)

    # -- tiered storage ---------------------------------------------------------------

    async def configure(self, name: str, *, password: bytes = b"", **changes: Any) -> LogMetadata:
        """Change settings of an existing log: those of :data:`CONFIGURABLE` (the offload
        and compaction settings), validated as at creation. Returns the record as stored."""
        wrong = sorted(set(changes) - set(CONFIGURABLE))
        if wrong:
            raise TypeError(f"configure log: {', '.join(wrong)} cannot be changed; these can: {', '.join(CONFIGURABLE)}")
        self._records.check_password(await self.metadata(name), password)

        def change(r: LogMetadata) -> LogMetadata:
            settings = attrs.evolve(r.settings, **changes)  # validators run: ValueError
            return r if settings == r.settings else attrs.evolve(r, settings=settings)

        return await self._records.update(name, change)

    async def offload(self, name: str, *, tier: str, until: Position | None = None, password: bytes = b"") -> OffloadResult:
        """Copy the log's closed segments (those wholly before ``until``; default: every
        closed one) not offloaded yet to the tier ``tier`` names (``file:///srv/tier``,
        ``s3://bucket/prefix?...``), each verified and then recorded on its segment. Safe to
        run again, or after a crash: see :mod:`bkframe.tiering.offload`. The ledgers stay
        on the bookies; readers read the objects from then on (docs/tiered-storage.md)."""
        return await offload(self._records, self.client.context.tiers, name, password=password, tier=tier, until=until)

    async def compact(
        self, name: str, *, password: bytes = b"", work_dir: Path | None = None, memory_bytes: int = 64 << 20,
        retire_lag_s: float = 600.0, lock_ttl_s: float = 30.0, defaults: CompactionDefaults | None = None,
    ) -> CompactionResult:
        """Compact the log by key once (docs/compaction.md): each key's older records in its
        closed segments are dropped, positions kept. The log's ``compaction`` must be ``key``
        (:class:`~bkframe.errors.CompactionError` if not, or if another compactor is at it).
        The key index takes at most about ``memory_bytes`` of memory and spills to
        ``work_dir`` (default: a temporary directory). A ledger a compaction replaced stays
        ``retire_lag_s`` for readers that opened it; a later run deletes it. Safe to kill at
        any step; a killed run's lock on the log vanishes ``lock_ttl_s`` later. ``defaults``:
        what the log's unset compaction settings are (the cluster's ``[offload]`` ones; built
        in if None)."""
        await self._acks.flush(name)
        with tempfile.TemporaryDirectory(prefix="bkframe-compaction-") as tmp:
            return await compact(
                self._records, name, password=password, work_dir=work_dir or Path(tmp), memory_bytes=memory_bytes,
                retire_lag_s=retire_lag_s, lock_ttl_s=lock_ttl_s, defaults=defaults,
            )

    # -- retention ----------------------------------------------------------------------

    async def trim(
        self, name: str, *, before: Position | None = None, retention: bool = False, force: bool = False
    ) -> TrimResult:
        """Remove whole closed segments from the start of the log and delete their ledgers:
        those before ``before``, and with ``retention`` those the log's ``retention_s`` /
        ``retention_bytes`` let go. Never a segment some cursor has not passed, unless
        ``force`` (which moves such cursors to the new start). This client's acks not
        stored yet are stored first."""
        await self._acks.flush(name)
        return await trim(self._records, name, before=before, retention=retention, force=force)

    # -- cursors ------------------------------------------------------------------------

    async def _where(self, name: str, where: Where, password: bytes) -> tuple[LogMetadata, Position]:
        reader = await self.reader(name, password=password)
        return reader.metadata, await reader.resolve(where)

    async def create_cursor(
        self, name: str, cursor: str, start: Where = EARLIEST, *, password: bytes = b"", ttl_s: float | None = None
    ) -> Cursor:
        """A durable cursor at ``start`` (``earliest``, ``latest``, a position, or a
        :class:`~datetime.datetime`: the first record at or after that time). ``ttl_s``: not
        moved for this long, it stops holding retention back (default: the log's
        ``cursor_ttl_s``; see docs/logs.md#cursors-that-do-not-pin-the-disk-forever)."""
        check_name(cursor, "cursor")
        record, position = await self._where(name, start, password)
        new = Cursor(name, cursor, position, log_uid=record.uid, ttl_s=ttl_s)
        try:
            version = await self.store.write_cursor(name, cursor, new.serialize(), None)
        except BadVersionError:
            raise CursorExistsError(f"log {name!r} has a cursor {cursor!r} already") from None
        created = attrs.evolve(new, version=version)
        if start == EARLIEST:
            # A trim that ran meanwhile may have passed it: start where the log starts now.
            latest = await self.metadata(name)
            if created.position < latest.start:
                created = await self.move_cursor(name, cursor, latest.start)
        return created

    async def cursor(self, name: str, cursor: str) -> Cursor:
        """The cursor as stored (with this client's acks: those not stored yet are stored first)."""
        await self._acks.flush(name, cursor)
        return await self._records.cursor(name, cursor)

    async def cursors(self, name: str) -> list[Cursor]:
        """The log's cursors as stored (this client's acks not stored yet are stored first)."""
        await self._acks.flush(name)
        return await self._records.cursors(name)

    async def move_cursor(
        self, name: str, cursor: str, position: Where, *, rewind: bool = False, password: bytes = b""
    ) -> Cursor:
        """Set where the consumer resumes: every entry before ``position`` is acknowledged
        (a :class:`~datetime.datetime`: every record before the first at or after that time).
        A cursor never moves back (an older position is ignored) unless ``rewind``. Stored
        at once, with this client's acks not stored yet if they are further (not with
        ``rewind``)."""
        target = position if isinstance(position, Position) else (await self._where(name, position, password))[1]
        return await self._acks.set(name, cursor, target, rewind=rewind)

    async def ack(self, name: str, cursor: str, position: Position) -> Cursor:
        """Acknowledge the entry at ``position`` and every one before it. The cursor moves in
        memory and is stored at most once per the client's ``cursor_flush_interval_s``
        (0: at once); returns the cursor as acknowledged. See :meth:`flush_cursors`."""
        return await self._acks.ack(name, cursor, position.next())

    async def flush_cursors(self, name: str | None = None, cursor: str | None = None) -> None:
        """Store the acks this client made and has not stored yet: of every cursor, of one
        log's, or of one cursor. The client does it when it closes; a consumer calls it
        where it must not see entries again after a crash (e.g. before a checkpoint)."""
        await self._acks.flush(name, cursor)

    async def set_cursor_ttl(self, name: str, cursor: str, ttl_s: float | None) -> Cursor:
        """Give the cursor an inactivity TTL of its own (None: the log's ``cursor_ttl_s``)."""
        if ttl_s is not None and not ttl_s > 0:
            raise ValueError(f"a cursor's ttl_s must be > 0 (or None), got {ttl_s!r}")
        while True:
            current = await self.cursor(name, cursor)
            if current.ttl_s == ttl_s:
                return current
            new = attrs.evolve(current, ttl_s=ttl_s)
            try:
                version = await self.store.write_cursor(name, cursor, new.serialize(), current.version)
                return attrs.evolve(new, version=version)
            except BadVersionError:
                continue

    async def delete_cursor(self, name: str, cursor: str) -> None:
        self._acks.forget(name, cursor)
        if not await self.store.delete_cursor(name, cursor):
            raise NoSuchCursorError(f"log {name!r} has no cursor {cursor!r}")

    # -- subscriptions (docs/subscriptions.md) ---------------------------------------------

    async def create_subscription(
        self, name: str, subscription: str, *, kind: str = "shared", lease_s: float = 30.0,
        max_deliveries: int | None = None, dead_letter: str | None = None, start: Where = EARLIEST,
        password: bytes = b"", state_ledger_type: str = "PD_JOURNAL",
    ) -> SubscriptionRecord:
        """A subscription of the log (``kind`` ``shared`` or ``key_shared``) whose consumers
        get the records from ``start`` on: each leased for ``lease_s``, and after
        ``max_deliveries`` deliveries without an ack appended to the log ``dead_letter``.
        ``state_ledger_type`` decides what a confirmed ack survives: ``PD_JOURNAL`` a power
        cut, ``BYPASS_JOURNAL`` any process crash but not a power cut of the bookies (faster;
        docs/subscriptions.md, "How durable an ack is")."""
        check_name(subscription, "subscription")
        if dead_letter is not None:
            check_name(dead_letter)
        settings = SubscriptionSettings(  # bad values: ValueError here
            kind, lease_s, max_deliveries, dead_letter, state_ledger_type=state_ledger_type
        )
        record, position = await self._where(name, start, password)
        new = SubscriptionRecord(name, subscription, settings, position, log_uid=record.uid)
        try:
            version = await self.store.write_cursor(name, subscription, new.serialize(), None)
        except BadVersionError:
            raise SubscriptionExistsError(f"log {name!r} has a subscription or cursor {subscription!r} already") from None
        return attrs.evolve(new, version=version)

    async def subscription(self, name: str, subscription: str) -> SubscriptionRecord:
        """The subscription's record as stored (its mark-delete as of its last snapshot)."""
        return await read_subscription(self.store, name, subscription)

    async def subscriptions(self, name: str) -> list[SubscriptionRecord]:
        found = await self.store.list_cursors(name)
        return [
            SubscriptionRecord.deserialize(name, c, v.value, v.version)
            for c, v in sorted(found.items()) if SubscriptionRecord.is_subscription(v.value)
        ]

    async def subscribe(
        self, name: str, subscription: str, *, prefetch: int = 16, lease_s: float | None = None, password: bytes = b"",
        group_acks: bool = False,
    ) -> Subscription:
        """A consumer of the subscription: ``async with await logs.subscribe(...) as sub:
        async for msg in sub: ...; await msg.ack()``. ``group_acks``: an ack returns at once
        and the acks go to the owner together (:class:`~bkframe.subscriptions.consumer.Subscription`)."""
        await read_subscription(self.store, name, subscription)  # none: a clear error now, not at the first lease
        return Subscription(self._owner(name, subscription, password), name, subscription, prefetch=prefetch,
                            lease_s=lease_s, group_acks=group_acks)

    async def subscription_stats(self, name: str, subscription: str, *, password: bytes = b"") -> SubscriptionStats:
        """Backlog, records in flight, redeliveries, dead letters (asks the owner)."""
        return await self._owner(name, subscription, password).stats()

    async def delete_subscription(self, name: str, subscription: str) -> None:
        """Delete the subscription and its state ledgers (its owner ends at its next store)."""
        record = await read_subscription(self.store, name, subscription)
        owner = self._owners.pop((name, subscription), None)
        if isinstance(owner, LocalOwner):
            await owner.aclose()
        await self.store.delete_cursor(name, subscription)
        await self._records.update(name, lambda r: r.without_fence(fence_name(subscription)))
        for ledger_id in record.state_ledgers:
            await self._records.delete_ledger_quietly(ledger_id)

    def _owner(self, name: str, subscription: str, password: bytes) -> SubscriptionOwner:
        """The subscription's owner as this client reaches it: on the bookies (over the wire),
        or in this process (``subscription_owner = "local"``), one per subscription."""
        owner = self._owners.get((name, subscription))
        if owner is None:
            settings = self.client.context.settings
            if settings.subscription_owner == "local":
                owner = LocalOwner(
                    self.client, name, subscription, password=password, owner_ttl_s=settings.subscription_owner_ttl_s,
                    failover_s=settings.subscription_wait_s,
                )
            else:
                owner = RemoteOwner(self.client, name, subscription, failover_s=settings.subscription_wait_s, password=password)
            self._owners[(name, subscription)] = owner
        return owner

    def owned_subscriptions(self) -> list[Dispatcher]:
        """The owners of the subscriptions this client owns now (for its metrics)."""
        return [
            o.dispatcher for o in self._owners.values()
            if isinstance(o, LocalOwner) and o.dispatcher is not None and not o.dispatcher.lost.is_set()
        ]

    async def close_subscriptions(self) -> None:
        """Give up the subscriptions this client owns (the client does it when it closes)."""
        owners = list(self._owners.values())
        self._owners.clear()  # in place: every Logs of this client shares it
        for owner in owners:
            if isinstance(owner, LocalOwner):
                await owner.aclose()

    # -- inspecting ---------------------------------------------------------------------

    async def end(self, name: str, *, password: bytes = b"") -> Position:
        """The position after the last confirmed entry (where ``latest`` starts)."""
        return await (await self.reader(name, password=password)).end()

    async def info(self, name: str, *, password: bytes = b"") -> LogInfo:
        """The record, the confirmed end, entries per segment, cursors and their lag."""
        reader = await self.reader(name, password=password)
        end = await reader.end()
        record = reader.metadata
        entries = {r.segment: r.entries for r in await reader.snapshot(record.start, end)}
        infos = await self._cursor_infos(reader, end)
        segments = tuple(await self._records.segments(record))
        return LogInfo(record, end, {s.number: entries.get(s.number, 0) for s in segments}, infos, segments)

    async def cursor_infos(self, name: str, *, password: bytes = b"") -> tuple[CursorInfo, ...]:
        """Each cursor with its lag, idle time and TTL (what ``info`` shows of cursors, read
        without every segment: the status page asks this per log)."""
        reader = await self.reader(name, password=password)
        return await self._cursor_infos(reader, await reader.end())

    async def _cursor_infos(self, reader: LogReader, end: Position) -> tuple[CursorInfo, ...]:
        record = reader.metadata
        now = time.time()
        infos = []
        for c in await self.cursors(reader.name):
            lag = await count_entries(reader, max(c.position, record.start)) if c.position < end else 0
            ttl = c.effective_ttl(record.settings)
            infos.append(CursorInfo(c, lag, max(0.0, now - c.updated_at), ttl, c.expired(record.settings, now)))
        return tuple(infos)


def taken_over(
    record: LogMetadata, recovered: dict[int, LedgerMetadata | None], ledger_id: int, writer_id: str, *, now: float
) -> LogMetadata:
    """``record`` as a new writer leaves it: each open segment closed at its recovered last
    entry (or dropped), the spares given up as garbage, a new segment on ``ledger_id``, and
    the writer's id and epoch."""
    new = record
    lost_in_flight = False
    dropped = []
    for seg in record.open_segments():
        md = recovered[seg.number]
        last = -1 if md is None else md.last_entry_id
        if lost_in_flight or last < 0:
            # It holds no entry, or follows a segment that lost entries in flight
            # (so none of its entries was acknowledged): it gives no position.
            dropped.append(seg.number)
        else:
            assert md is not None
            closed = attrs.evolve(seg, closed=True, last_entry_id=last, length=md.length, closed_at=now)
            new = new.replace_segment(closed)
        lost_in_flight = lost_in_flight or last < seg.last_sent
    new = new.drop_segments(dropped)
    new = attrs.evolve(new.with_garbage(new.spares), spares=())
    new = new.add_segment(ledger_id, now=now)
    return attrs.evolve(new, writer=writer_id, writer_epoch=record.writer_epoch + 1)
