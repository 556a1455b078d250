"""The owner of a subscription: elected through the metadata store, fenced through the
bookies, reading the log ahead of the consumers (docs/subscriptions.md, "Who dispatches").

:meth:`Dispatcher.take` takes the subscription's lock, opens its state ledgers with recovery
(fencing any previous owner), rebuilds the state and stores the record with a new state
ledger and ``epoch + 1``. From then on every decision is applied to the state, appended to
the state ledger and only then answered; an append that fails (fenced: another owner took
over) ends this owner (:attr:`Dispatcher.lost`), and every call raises
:class:`~bkframe.errors.NotOwnerError`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

import anyio
import attrs

from bkframe.client.logs import commits
from bkframe.client.logs.model import CommitResult, LogEntry, LogMetadata, Segment
from bkframe.client.logs.positions import Position
from bkframe.client.logs.reader import LogReader, count_entries
from bkframe.client.logs.writer import LogWriter
from bkframe.client.write_handle import PendingAppend, WriteHandle
from bkframe.core.interfaces import Spawner
from bkframe.core.interfaces.metadata_store import Lock
from bkframe.errors import (
    BadVersionError,
    BKError,
    LogExistsError,
    NoSuchSubscriptionError,
    NotOwnerError,
    SubscriptionError,
)
from bkframe.subscriptions import journal
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionStats
from bkframe.subscriptions.settings import (
    INLINE_SNAPSHOT_BYTES,
    SnapshotRef,
    SubscriptionRecord,
    pack,
    unpack,
)
from bkframe.subscriptions.state import (
    Committed,
    Committing,
    DeadLettered,
    Event,
    Segments,
    SubscriptionState,
    Trimmed,
)

log = logging.getLogger("bkframe.subscriptions")

#: The not-before time of a record on its way to the dead-letter log: never leased again.
NEVER_MS = 1 << 62
#: Snapshot after this many events, or this often (s) when anything changed.
SNAPSHOT_EVENTS = 50_000
SNAPSHOT_INTERVAL_S = 30.0
#: How often the owner counts its backlog for the metrics (s).
BACKLOG_COUNT_S = 5.0
#: Records read again per read (redeliveries, holes after a recovery).
READ_RUN = 500
#: State-ledger entries in flight at once. The events decided while they are in flight wait
#: and go out together as the next entry (a group commit): under load, one entry (one
#: replicated, fsynced add) carries the settles of many consumers; a lone one goes at once.
JOURNAL_IN_FLIGHT = 1
#: Once an entry is confirmed, the next waits (at most this long, s) for as many calls as
#: that entry answered: see :meth:`Dispatcher._gather`.
GATHER_MAX_S = 0.002


def lock_name(log_name: str, name: str) -> str:
    return f"subscription/{log_name}/{name}"


def fence_name(name: str) -> str:
    """The fence in the log's record a subscription's commits must match (its owner's epoch)."""
    return f"subscription/{name}"


def now_ms() -> int:
    return int(time.time() * 1000)


async def read_record(store: object, log_name: str, name: str) -> SubscriptionRecord:
    found = await store.read_cursor(log_name, name)  # type: ignore[attr-defined]
    if found is None or not SubscriptionRecord.is_subscription(found.value):
        raise NoSuchSubscriptionError(f"log {log_name!r} has no subscription {name!r}")
    return SubscriptionRecord.deserialize(log_name, name, found.value, found.version)


@attrs.define(eq=False)
class _Batch:
    """Events applied to the state and waiting to go out as one state-ledger entry."""

    events: list[Event] = attrs.Factory(list)
    #: Set once the entry is durable, or failed (``error``).
    done: anyio.Event = attrs.Factory(anyio.Event)
    error: BKError | None = None
    #: Called (with ``error``) once it is done: a bookie's settle answered without a task
    #: of its own waiting for it (:meth:`Dispatcher.settle_nowait`).
    callbacks: list[Callable[[BKError | None], None]] = attrs.Factory(list)
    #: The calls (settles, leases, ...) whose events it carries.
    calls: int = 0

    def finish(self, error: BKError | None) -> None:
        if self.done.is_set():
            return
        self.error = error
        self.done.set()
        callbacks, self.callbacks = self.callbacks, []
        for callback in callbacks:
            callback(error)


#: What :meth:`Dispatcher.settle_nowait` returns: the batch whose entry makes the settle
#: durable (None: nothing to wait for).
Durable = _Batch


def segments_of(segments: Sequence[Segment]) -> Segments:
    return Segments(tuple(s.number for s in segments), tuple(s.last_entry_id if s.closed else None for s in segments))


class Dispatcher:
    """One subscription's owner (see the module's docstring). Made by :meth:`take`."""

    def __init__(
        self, client: object, reader: LogReader, record: SubscriptionRecord, state: SubscriptionState,
        journal_handle: WriteHandle, lock: Lock, password: bytes, holder: str, tasks: Spawner,
    ) -> None:
        self.client = client
        self.logs = client.logs  # type: ignore[attr-defined]
        self.store = client.metadata  # type: ignore[attr-defined]
        self.reader = reader
        self.record = record
        self.state = state
        self.journal = journal_handle
        self.lock = lock
        self.password = password
        #: Who owns it (the lock's holder: a client's or a bookie's id).
        self.holder = holder
        #: Set when this owner ended (fenced, lock lost, closed, failed): ask again.
        self.lost = anyio.Event()
        self.why_lost = ""
        self._changed = anyio.Event()
        #: The timers' task sleeps until ``_timer_at`` (ms) unless woken by this: set when a
        #: deadline earlier than that appears (not at every change: most add none).
        self._timer_wake = anyio.Event()
        self._timer_at = 0
        #: Set once SNAPSHOT_EVENTS events wait for a snapshot.
        self._snapshot_due = anyio.Event()
        self._reload = anyio.Event()
        self._dead: set[int] = set()
        self._dead_wake = anyio.Event()
        self._events = 0
        #: The group commit: the events waiting for the next entry, and entries in flight.
        self._batch = _Batch()
        self._journal_in_flight = 0
        #: The last batch sent and not confirmed yet.
        self._in_flight: _Batch | None = None
        #: State-ledger entries of events this owner appended, and the events in them (the
        #: group commit's work: events per entry; metrics, benchmarks).
        self.entries_sent = 0
        self.events_sent = 0
        #: While a gather waits (:meth:`_gather`): the calls it waits for, and its wake-up.
        self._gather_want = 0
        self._gathered = anyio.Event()
        #: Where the tasks confirming state-ledger entries run.
        self._tasks = tasks
        #: Records not acked, as of the last count (the metrics' backlog; stats() counts afresh).
        self.backlog = 0
        self._log_version = -1
        self._scope = anyio.CancelScope()

    # -- taking a subscription ------------------------------------------------------------

    @classmethod
    async def take(
        cls, client: object, log_name: str, name: str, *, holder: str, task_group: Spawner,
        owner_ttl_s: float = 10.0, password: bytes = b"",
    ) -> Dispatcher:
        """Become the subscription's owner, or raise :class:`NotOwnerError` naming who is."""
        store = client.metadata  # type: ignore[attr-defined]
        lock = await store.try_lock(lock_name(log_name, name), holder, owner_ttl_s, task_group)
        if lock is None:
            current = await store.lock_holder(lock_name(log_name, name))
            raise NotOwnerError(f"subscription {name!r} of log {log_name!r} is owned by {current}", holder=current)
        try:
            dispatcher = await cls._start(client, log_name, name, lock, password, holder, task_group)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await lock.release()
            raise
        task_group.start_soon(dispatcher._run)
        return dispatcher

    @classmethod
    async def _start(
        cls, client: object, log_name: str, name: str, lock: Lock, password: bytes, holder: str, tasks: Spawner,
    ) -> Dispatcher:
        store = client.metadata  # type: ignore[attr-defined]
        record = await read_record(store, log_name, name)
        reader = await client.logs.reader(log_name, password=password)  # type: ignore[attr-defined]
        state = await journal.recover(client, record, password)
        settings = reader.metadata.settings
        handle = await client.create_ledger(  # type: ignore[attr-defined]
            ensemble=settings.ensemble, write_quorum=settings.write_quorum, ack_quorum=settings.ack_quorum,
            ledger_type=record.settings.state_ledger_type, digest=settings.digest, password=password,
            custom={"bkframe.subscription": f"{log_name}/{name}"},
        )
        new = attrs.evolve(
            record, epoch=record.epoch + 1, state_ledgers=(*record.state_ledgers, handle.ledger_id), updated_at=time.time()
        )
        try:
            version = await store.write_cursor(log_name, name, new.serialize(), record.version)
        except BadVersionError:
            await _discard(client, handle)
            raise NotOwnerError(f"subscription {name!r} of log {log_name!r} changed while being taken; ask again") from None
        dispatcher = cls(client, reader, attrs.evolve(new, version=version), state, handle, lock, password, holder, tasks)
        await dispatcher._fence_commits()
        await dispatcher._refresh_segments(force=True)
        dispatcher._dead.update(k for k, t in state.delays.items() if t >= NEVER_MS)
        if dispatcher._dead:
            dispatcher._dead_wake.set()
        dispatcher._reload.set()  # the records released before the recovery are read again
        log.info("subscription %s/%s: owner epoch %d (mark-delete %s, %d in flight)", log_name, name, new.epoch,
                 unpack(state.mark_delete), len(state.leases))
        return dispatcher

    async def _fence_commits(self) -> None:
        """Raise this owner's epoch in the log's record, so that no commit an older owner
        still sends can land (:meth:`commit`); then settle the commits the older owners left
        under way: acked if their token is in the log, not if it is not."""
        fence, epoch = fence_name(self.record.name), self.record.epoch
        logs_records = self.logs._records
        stamped = await logs_records.update(self.record.log, lambda r: r.with_fence(fence, epoch))
        events: list[Event] = []
        for token in sorted(self.state.committing):
            events.append(self._apply(Committed(token, stamped.commit(token) is not None)))
        if events:
            await self._commit(events)

    # -- what consumers ask -----------------------------------------------------------------

    async def commit(
        self, consumer: str, positions: Sequence[Position], ledgers: Mapping[str, Iterable[int]], *,
        password: bytes | Mapping[str, bytes] = b"",
    ) -> dict[str, CommitResult]:
        """Ack ``positions`` and commit closed ``ledgers`` to other logs in **one** atomic
        step (a multi-log commit): either the outputs land and the records are acked, or
        neither. Refused (:class:`SubscriptionError`, nothing changed) if a record is acked
        already or being committed: another delivery's output landed; drop this one."""
        self._check()
        log_name = self.record.log
        if log_name in ledgers:
            raise SubscriptionError(f"a subscription's commit cannot append to its own log {log_name!r}")
        keys = sorted({pack(p) for p in positions})
        why = self.state.commit_refusal(keys)
        if why is not None:
            raise SubscriptionError(f"subscription {self.record.name!r} of log {log_name!r}: {why}; drop this one")
        token = f"~subscription/{self.record.name}/{self.record.epoch}/{uuid.uuid4().hex}"
        await self._commit([self._apply(Committing(token, tuple(keys)))])
        outputs = {name: list(ids) for name, ids in ledgers.items()}
        passwords = dict(password) if isinstance(password, Mapping) else {name: bytes(password) for name in outputs}
        passwords[log_name] = self.password
        failure: BaseException | None = None
        try:
            results = await commits.commit(
                self.logs._records, {**outputs, log_name: []}, token, password=passwords,
                fences={log_name: (fence_name(self.record.name), self.record.epoch)},
            )
            done = True
        except BKError as e:
            failure = e
            try:  # a commit whose answer was lost may have landed: the log's record says
                done = (await self.logs._records.read(log_name)).commit(token) is not None
            except BKError as unknown:
                self._end(f"a commit's outcome is unknown ({unknown}); the next owner settles it")
                raise NotOwnerError("this owner ended while committing; the next owner settles the commit") from e
            results = {}
        await self._commit([self._apply(Committed(token, done))])
        if not done:
            assert failure is not None
            raise failure
        return {name: r for name, r in results.items() if name != log_name}

    async def lease(self, consumer: str, max_records: int, wait_s: float, lease_s: float | None = None) -> list[Delivery]:
        self._check()
        lease_ms = int((lease_s if lease_s is not None else self.state.settings.lease_s) * 1000)
        give_up = anyio.current_time() + max(0.0, wait_s)
        while True:
            now = now_ms()
            event = self.state.take(consumer, max(1, max_records), now, lease_ms)
            if event is not None:
                entries = [self.state.held[key].entry for key, _, _ in event.records]
                await self._commit([self._apply(event)])
                return [
                    Delivery(e.position, count, event.deadline_ms, e.payload, e.key, e.timestamp, e.properties)
                    for (key, count, _), e in zip(event.records, entries, strict=True) if e is not None
                ]
            left = give_up - anyio.current_time()
            if left <= 0:
                return []
            changed = self._changed
            nxt = self.state.next_deadline()
            if nxt is not None:
                left = min(left, max(0.001, (nxt - now) / 1000))
            with anyio.move_on_after(left):
                await changed.wait()
            self._check()

    async def settle(self, consumer: str, settle: Settle) -> None:
        batch = self.settle_nowait(consumer, settle)
        if batch is not None:
            await self._durable(batch)

    def settle_nowait(self, consumer: str, settle: Settle) -> Durable | None:
        """:meth:`settle` without waiting: ``settle`` applied and its events queued for the
        state ledger; returns the batch whose entry makes it durable (its ``callbacks`` are
        called once it is, with the error if it failed: then this owner ended), or None when
        nothing need be waited for. A bookie answers SUB_SETTLE this way, with no task per
        call. A settle that changes nothing (its records acked already) still waits for the
        entries under way: the ack it repeats may be in one of them, not durable yet."""
        self._check()
        events = self._settle_events(consumer, settle)
        if events:
            return self._queue(events)
        if self._batch.events:
            return self._batch
        return self._in_flight

    def _settle_events(self, consumer: str, settle: Settle) -> list[Event]:
        events: list[Event] = []
        if settle.acks:
            self._add(events, self.state.ack(pack(p) for p in settle.acks))
        for first, last in settle.ack_ranges:
            self._add(events, self.state.ack_range(pack(first), pack(last)))
        if settle.extends:
            lease_s = settle.lease_s if settle.lease_s is not None else self.state.settings.lease_s
            self._add(events, self.state.extend(consumer, (pack(p) for p in settle.extends), now_ms() + int(lease_s * 1000)))
        for position, delay_s in settle.nacks:
            not_before = now_ms() + int(delay_s * 1000) if delay_s > 0 else 0
            events += self._release(consumer, [pack(position)], not_before)
        return events

    async def leave(self, consumer: str) -> None:
        self._check()
        events = self._release(consumer, self.state.leases_of(consumer), 0)
        if events:
            await self._commit(events)

    async def stats(self) -> SubscriptionStats:
        self._check()
        try:  # a deleted subscription's owner must not go on answering for it
            await read_record(self.store, self.record.log, self.record.name)
        except NoSuchSubscriptionError:
            self._end("the subscription was deleted")
            raise
        state, now = self.state, now_ms()
        mark = unpack(state.segments.normalize(state.mark_delete))
        try:
            total = await count_entries(self.reader, mark)
        except BKError:
            total = 0
        backlog = self.backlog = max(0, total - state.acked_after(state.mark_delete))
        c = state.counters
        return SubscriptionStats(
            backlog=backlog, in_flight=state.in_flight(), waiting=state.waiting(now), delayed=state.delayed(now),
            delivered=c.delivered, redelivered=c.redelivered, acked=c.acked, dead_lettered=c.dead_lettered,
            mark_delete=mark, consumers=state.consumers(), owner=self.holder, epoch=self.record.epoch,
        )

    async def aclose(self) -> None:
        """Give the subscription up: a snapshot if it can, then the lock."""
        if not self.lost.is_set():
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                try:
                    await self._snapshot()
                except BKError as e:
                    log.warning("subscription %s/%s: no snapshot at close: %s", self.record.log, self.record.name, e)
        self._end("closed")
        with anyio.CancelScope(shield=True), anyio.move_on_after(5):
            try:
                await self.lock.release()
            except BKError:
                pass

    # -- applying and journaling --------------------------------------------------------------

    def _apply(self, event: Event) -> Event:
        self.state.apply(event)
        return event

    def _add(self, events: list[Event], event: Event | None) -> None:
        if event is not None:
            events.append(self._apply(event))

    def _release(self, consumer: str | None, keys: Sequence[int], not_before_ms: int) -> list[Event]:
        """Applied events ending leases; records at their last delivery go to the dead letters."""
        due = set(self.state.due_for_dead_letter(keys))
        events: list[Event] = []
        self._add(events, self.state.release(consumer, [k for k in keys if k not in due], not_before_ms))
        mine = self.state.release(consumer, [k for k in keys if k in due], NEVER_MS)
        if mine is not None:
            events.append(self._apply(mine))
            self._dead.update(mine.keys)
            self._dead_wake.set()
        self._reload.set()
        return events

    async def _commit(self, events: list[Event]) -> None:
        """Journal applied ``events``; returns once they are durable in the state ledger.

        A group commit: while :data:`JOURNAL_IN_FLIGHT` entries are in flight, the events
        decided meanwhile wait in one batch, which goes out as the next entry once one of
        them is confirmed. Entries go out in the order their events were applied (a batch is
        appended before any later event can be), so recovery applies them in that order."""
        await self._durable(self._queue(events))

    def _queue(self, events: list[Event]) -> _Batch:
        """Queue applied ``events`` for the next entry (sent now if none is in flight); the
        batch they went into."""
        batch = self._batch
        batch.events += events
        batch.calls += 1
        if self._gather_want and batch.calls >= self._gather_want:
            self._gathered.set()
        self._events += len(events)
        if self._events >= SNAPSHOT_EVENTS:
            self._snapshot_due.set()
        self._notify()
        if self._journal_in_flight < JOURNAL_IN_FLIGHT:
            self._send_batch()
        return batch

    async def _durable(self, batch: _Batch) -> None:
        await batch.done.wait()
        if batch.error is not None:
            raise NotOwnerError(f"subscription {self.record.name!r}: this owner ended ({self.why_lost}); ask again")

    def _send_batch(self) -> None:
        """Append the waiting batch to the state ledger now (before any other task runs)."""
        batch = self._batch
        if not batch.events:
            return
        self._batch = _Batch()
        try:
            pending = [self.journal.append_async(entry) for entry in journal.entries(batch.events)]
        except BKError as e:
            self._failed(batch, e)
            return
        self.entries_sent += len(pending)
        self.events_sent += len(batch.events)
        self._journal_in_flight += 1
        self._in_flight = batch
        self._tasks.start_soon(self._confirm, batch, pending)

    async def _confirm(self, batch: _Batch, pending: list[PendingAppend]) -> None:
        # Cancelled (the hosting process stops) before the entry was confirmed: the settles
        # waiting for it are told it failed, never that it is durable.
        error: BKError | None = BKError("the owner stopped before its state-ledger entry was confirmed")
        try:
            for p in pending:
                await p.wait()
            error = None
        except BKError as e:
            error = e
            self._failed(batch, e)
        finally:
            if self._in_flight is batch:
                self._in_flight = None
            batch.finish(error)
            if error is None and not self.lost.is_set():
                with anyio.CancelScope(shield=True):
                    await self._gather(batch.calls)
            self._journal_in_flight -= 1
            if not self.lost.is_set():
                self._send_batch()  # what was decided while this entry was in flight
            else:
                self._failed(self._batch, None)

    async def _gather(self, answered: int) -> None:
        """Before the next entry goes out, wait (at most GATHER_MAX_S) until as many calls
        wait for it as the entry just confirmed answered.

        Each consumer has one call at a time waiting for the state ledger (an ack, a lease),
        so without this the consumers split into two cohorts: those answered by the entry in
        flight, whose next calls come a moment after it is confirmed, and the others, whose
        calls came while it was in flight and go out at once as the next entry -- each entry
        half the calls it could carry, twice the appends (each replicated and fsynced), which
        on a busy machine is the owner's and the bookies' CPU. Waiting for the answered
        cohort to call again merges them; a consumer alone is never held (its next call is
        the one waited for), a slow or gone one at most GATHER_MAX_S, and the wait shrinks
        with the calls the next entry carries."""
        if answered <= 1 or self._batch.calls >= answered:
            return  # (one: its next call goes at once when it comes, merging nothing by waiting)
        self._gather_want = answered
        self._gathered = gathered = anyio.Event()
        with anyio.move_on_after(GATHER_MAX_S):
            await gathered.wait()
        self._gather_want = 0

    def _failed(self, batch: _Batch, error: BKError | None) -> None:
        if error is not None:
            self._end(f"its state ledger refused an append ({error}): another owner took over, or the bookies failed")
        batch.finish(error or BKError(self.why_lost))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
        nxt = self.state.next_deadline()
        if nxt is not None and nxt < self._timer_at:
            self._timer_wake.set()

    def _check(self) -> None:
        if self.lost.is_set():
            raise NotOwnerError(
                f"subscription {self.record.name!r} of log {self.record.log!r}: this owner ended ({self.why_lost}); ask again"
            )

    def _end(self, why: str) -> None:
        if not self.lost.is_set():
            self.why_lost = why
            self.lost.set()
            log.info("subscription %s/%s: owner epoch %d ended: %s", self.record.log, self.record.name, self.record.epoch, why)
        self._scope.cancel()
        self._notify()

    # -- the owner's tasks --------------------------------------------------------------------

    async def _run(self) -> None:
        with self._scope:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch_lock)
                    tg.start_soon(self._read_log)
                    tg.start_soon(self._read_again)
                    tg.start_soon(self._timers)
                    tg.start_soon(self._dead_letters)
                    tg.start_soon(self._snapshots)
                    tg.start_soon(self._count_backlog)
            # except*: the task group raises a group, and when a task's error ends this owner
            # (which cancels its scope) the group holds the tasks' Cancelled too; a plain
            # except missed it and the group took the hosting process's nursery down.
            except* NotOwnerError:
                pass
            except* BKError as group:
                e = group.exceptions[0]
                log.warning("subscription %s/%s: the owner failed: %s", self.record.log, self.record.name, e)
                self._end(f"it failed: {e}")
            except* Exception as group:  # a bug must end this owner, not the process that hosts it
                log.error("subscription %s/%s: the owner failed", self.record.log, self.record.name, exc_info=group)
                self._end(f"it failed: {group.exceptions[0]!r}")
        self._end(self.why_lost or "stopped")

    async def _watch_lock(self) -> None:
        await self.lock.lost.wait()
        self._end("its lock in the metadata store was lost")

    async def _refresh_segments(self, *, force: bool = False) -> None:
        record: LogMetadata = self.reader.metadata
        if force or record.version != self._log_version:
            mark = unpack(self.state.mark_delete)
            segments = await self.logs._records.segments(record, mark.segment)
            self.state.set_segments(segments_of(segments))
            self._log_version = record.version
            if record.start > unpack(self.state.segments.normalize(self.state.mark_delete)):
                # Trimmed past us (a forced trim): what is gone counts as acked.
                await self._commit([self._apply(Trimmed(pack(record.start)))])

    async def _room(self) -> None:
        while not self.state.wants_more():
            changed = self._changed
            await changed.wait()

    async def _read_log(self) -> None:
        """The holes below the frontier (after a recovery), then the log from the frontier on."""
        for first, last in list(self.state.start_scan()):
            await self._room()
            await self._read_run(first, last)
        position = unpack(self.state.scan_at)
        async for chunk in self.reader.tail_chunks(position):
            await self._refresh_segments()
            for entry in chunk:
                self.state.offer(entry, pack(entry.position))
            self._notify()
            await self._room()

    async def _read_run(self, first: int, last: int) -> list[LogEntry]:
        p, q = unpack(first), unpack(last)
        entries: list[LogEntry] = []
        for lo in range(p.entry_id, q.entry_id + 1, READ_RUN):
            part = await self.reader.read_segment(p.segment, lo, min(q.entry_id, lo + READ_RUN - 1))
            for entry in part:
                self.state.offer(entry, pack(entry.position))
            entries += part
        self._notify()
        return entries

    async def _read_again(self) -> None:
        """Records released for redelivery are read again before they are leased."""
        while True:
            await self._reload.wait()
            self._reload = anyio.Event()
            for first, last in _runs(self.state.to_load()):
                await self._read_run(first, last)

    async def _timers(self) -> None:
        """Leases that end, delayed records that come due. It sleeps until the next of them,
        woken earlier only when an earlier one appears (see :meth:`_notify`)."""
        while True:
            now = now_ms()
            expired = self.state.expired(now)
            if expired:
                events = self._release(None, expired, 0)
                if events:
                    await self._commit(events)
            if self.state.wake(now):
                self._notify()
            # A new event before the next deadline is read: a deadline added from here on
            # (by another task, while this one sleeps) is compared with _timer_at and wakes it.
            self._timer_wake = wake = anyio.Event()
            nxt = self.state.next_deadline()
            self._timer_at = NEVER_MS if nxt is None else nxt
            with anyio.move_on_after(1.0 if nxt is None else max(0.001, (nxt - now_ms()) / 1000)):
                await wake.wait()

    async def _dead_letters(self) -> None:
        """Records at their last delivery: appended to the dead-letter log, then acked. The
        writer is closed after each batch, so the dead-letter log's readers see every record
        at once (dead letters are rare; a segment a batch is their price)."""
        settings = self.state.settings
        while True:
            await self._dead_wake.wait()
            self._dead_wake = anyio.Event()
            keys = sorted(self._dead)
            if not keys or settings.dead_letter is None:
                continue
            writer = await self._dead_letter_writer(settings.dead_letter)
            try:
                for first, last in _runs(keys):
                    p, q = unpack(first), unpack(last)
                    for e in await self.reader.read_segment(p.segment, p.entry_id, q.entry_id):
                        props = {
                            **e.properties, "bkframe.dlq.from": f"{self.record.log}:{e.position}",
                            "bkframe.dlq.reason": "delivered max_deliveries times without an ack",
                            "bkframe.dlq.deliveries": str(self.state.deliveries.get(pack(e.position), 0)),
                        }
                        await writer.append(e.payload, key=e.key, properties=props)
            finally:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await writer.close()
            await self._commit([self._apply(DeadLettered(tuple(keys)))])
            self._dead.difference_update(keys)

    async def _dead_letter_writer(self, name: str) -> LogWriter:
        try:
            await self.logs.create(name, password=self.password)
        except LogExistsError:
            pass
        writer: LogWriter = await self.logs.open_writer(name, password=self.password)
        return writer

    async def _count_backlog(self) -> None:
        """The backlog for the metrics, counted now and then (a count reads the log's record)."""
        while True:
            try:
                await self.stats()
            except BKError as e:
                log.debug("subscription %s: backlog not counted: %s", self.record.name, e)
            await anyio.sleep(BACKLOG_COUNT_S)

    async def _snapshots(self) -> None:
        if len(self.record.state_ledgers) > 1:
            await self._snapshot()  # the previous owners' ledgers go: the next recovery reads less
        last = anyio.current_time()
        while True:
            # Woken when SNAPSHOT_EVENTS events wait or the interval is up, not at every
            # change; past the interval with nothing changed, at the next change.
            self._snapshot_due = due_now = anyio.Event()
            left = last + SNAPSHOT_INTERVAL_S - anyio.current_time()
            if self._events < SNAPSHOT_EVENTS and (left > 0 or not self._events):
                wake = due_now if left > 0 else self._changed
                with anyio.move_on_after(left if left > 0 else SNAPSHOT_INTERVAL_S):
                    await wake.wait()
            due = self._events >= SNAPSHOT_EVENTS or (self._events and anyio.current_time() - last >= SNAPSHOT_INTERVAL_S)
            if due:
                await self._snapshot()
                last = anyio.current_time()

    async def _snapshot(self) -> None:
        """Write the state whole into a new state ledger, name it in the record, drop the old
        ledgers (docs/subscriptions.md, "Where it is kept").

        The record names the new ledger *before* any event goes to it, so a crash at any step
        recovers from the old snapshot and every ledger's events; only then the snapshot
        (its first entries, or inline) becomes the record's."""
        settings = self.reader.metadata.settings
        handle = await self.client.create_ledger(  # type: ignore[attr-defined]
            ensemble=settings.ensemble, write_quorum=settings.write_quorum, ack_quorum=settings.ack_quorum,
            ledger_type=self.record.settings.state_ledger_type, digest=settings.digest, password=self.password,
            custom={"bkframe.subscription": f"{self.record.log}/{self.record.name}"},
        )
        try:
            await self._store(lambda r: attrs.evolve(r, state_ledgers=(*r.state_ledgers, handle.ledger_id)))
        except BaseException:
            await _discard(self.client, handle)
            raise
        # From here to the switch no other task runs: the snapshot is the state at the
        # switch, and every later event goes to the new ledger after it. The events
        # waiting for the group commit are in the snapshot: they go to the old ledger now,
        # so that a recovery from the old snapshot has them too.
        self._send_batch()
        blob = journal.encode_snapshot(self.state)
        inline = len(blob) <= INLINE_SNAPSHOT_BYTES
        parts = [] if inline else [handle.append_async(p) for p in journal.snapshot_parts(blob)]
        old, self.journal, self._events = self.journal, handle, 0
        old_ids = [i for i in self.record.state_ledgers if i != handle.ledger_id]
        ref = SnapshotRef(handle.ledger_id, 0, len(parts) - 1, blob if inline else None)
        for p in parts:
            await p.wait()
        mark = unpack(self.state.segments.normalize(self.state.mark_delete))
        await self._store(
            lambda r: attrs.evolve(r, mark_delete=max(mark, r.mark_delete), state_ledgers=(handle.ledger_id,), snapshot=ref)
        )
        with anyio.CancelScope(shield=True):
            try:
                await old.close()
            except BKError:
                pass
            for ledger_id in old_ids:
                try:
                    await self.client.delete_ledger(ledger_id)  # type: ignore[attr-defined]
                except BKError as e:
                    log.warning("subscription %s: state ledger %d not deleted: %s", self.record.name, ledger_id, e)

    async def _store(self, change: Callable[[SubscriptionRecord], SubscriptionRecord]) -> None:
        """Store ``change(record)`` by compare-and-set. A record another owner moved ends this
        one; one moved by a forced trim (as it moves a cursor) is taken as acked up to there."""
        while True:
            new = attrs.evolve(change(self.record), updated_at=time.time())
            try:
                version = await self.store.write_cursor(self.record.log, self.record.name, new.serialize(), self.record.version)
            except BadVersionError:
                stored = await read_record(self.store, self.record.log, self.record.name)
                if stored.epoch != self.record.epoch:
                    self._end(f"owner epoch {stored.epoch} took over")
                    raise NotOwnerError("another owner took the subscription over") from None
                self.record = attrs.evolve(self.record, version=stored.version, mark_delete=stored.mark_delete)
                if pack(stored.mark_delete) > self.state.mark_delete:
                    await self._commit([self._apply(Trimmed(pack(stored.mark_delete)))])
                continue
            self.record = attrs.evolve(new, version=version)
            return


def _runs(keys: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted keys as inclusive runs within one segment each."""
    runs: list[tuple[int, int]] = []
    for key in keys:
        if runs and runs[-1][1] + 1 == key and (runs[-1][0] >> 32) == (key >> 32) and key - runs[-1][0] < READ_RUN:
            runs[-1] = (runs[-1][0], key)
        else:
            runs.append((key, key))
    return runs


async def _discard(client: object, handle: WriteHandle) -> None:
    with anyio.CancelScope(shield=True):
        try:
            await handle.close()
            await client.delete_ledger(handle.ledger_id)  # type: ignore[attr-defined]
        except BKError:
            pass


__all__ = ["Dispatcher", "lock_name"]
