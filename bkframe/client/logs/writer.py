"""Writing a named log: one fenced writer, pipelined appends, rollover without a pause.

Opening a log for writing (:meth:`bkframe.client.logs.api.Logs.open_writer`) recovers every
segment the previous writer left open (ledger recovery fences it: its next add fails), then
adds a new segment and names itself the writer, bumping the writer epoch, in one CAS on the
log record. Every later change this writer makes to the record is a CAS that first checks
the epoch is still its own: a writer that lost the log gets :class:`LogFencedError`.

Rollover never stops appends. The next segment's ledger (a *spare*) is created ahead of
time and put in the log record at once, so a crash cannot leak it. For the usual rollover,
by entry count, the boundary is known in advance: the spare goes in as the next segment
already, with the current segment's ``last_sent`` (see :class:`~bkframe.client.logs.model.Segment`)
set to the boundary, and the switch needs no metadata write at all. A rollover that comes
earlier (by bytes, by age, or :meth:`LogWriter.roll`) records the true boundary with one
CAS. Either way, appends go to the new segment at once and are sent to its bookies; their
acknowledgements wait until the record holds the new segment with the old one's exact
``last_sent``, and until every append of the earlier segments is confirmed, so completions
stay in append order and no position is acknowledged before its segment is in the log. The
old segment's ledger is then closed and marked closed in the record in the background.
Should a burst of appends outrun the spare's creation, the writer still switches on time:
appends to the new segment are queued and sent as soon as its ledger exists. A rollover
whose new segment is not in the record within the client's ``metadata_timeout_s`` (a store
that does not answer) fails the writer then, not after the store's own retries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import anyio
import attrs

from bkframe.client.entry_format import LIMIT_SOURCE, max_payload
from bkframe.client.logs import envelope
from bkframe.client.logs.envelope import Record
from bkframe.client.logs.model import LogMetadata, LogSettings, Position
from bkframe.client.logs.pending import ActiveSegment, PendingLogAppend, PendingLogBatch, SpareLedger, closed_segment, mark_closed
from bkframe.client.logs.records import LogRecords
from bkframe.client.logs.retention import trim
from bkframe.client.metadata_deadline import MetadataTimeoutError, bounded
from bkframe.core.metadata import LedgerMetadata
from bkframe.errors import BadVersionError, BKError, EntryTooLargeError, LedgerFencedError, LogError, LogFencedError

if TYPE_CHECKING:
    from bkframe.client.write_handle import PendingAppend, WriteHandle

log = logging.getLogger("bkframe.logs")

#: Background metadata work (closing a rolled segment, preparing a spare) retries this many
#: times, backing off from 0.1 s to 5 s, before it leaves the job to the next writer.
BACKGROUND_ATTEMPTS = 8


class LogWriter:
    """The one writer of a named log; made by :meth:`Logs.open_writer`."""

    def __init__(self, records: LogRecords, record: LogMetadata, first: WriteHandle, writer_id: str, password: bytes) -> None:
        self._records = records
        self._client = records.ledgers
        self.name: str = record.name
        self.writer_id: str = writer_id
        self.epoch: int = record.writer_epoch
        self.settings: LogSettings = record.settings
        self._max_entries = record.settings.rollover_entries
        self._max_bytes = record.settings.rollover_bytes
        self._password = password
        self._record = record
        seg = ActiveSegment(self, first, number=record.segments[-1].number)
        seg.registered.set()
        seg.open_gate()
        self._current = seg
        self._spare: SpareLedger | None = None
        self._spare_ready = anyio.Event()
        #: Why the last attempt to make a spare gave up (raised to a segment waiting for one).
        self._spare_failure: BaseException | None = None
        self._preparing = False
        self._md_lock = anyio.Lock()
        self._error: BaseException | None = None
        #: Why appends are refused (the first failure, or closing); None while they are not.
        self._refuse: BaseException | None = None
        self._closing = False
        self._closed = False
        self._tasks = 0
        self._tasks_done = anyio.Event()
        self._tasks_done.set()
        self._timer = anyio.CancelScope()
        #: Larger payloads are refused before they are sent (every segment has the log's digest).
        self._max_entry_size = self._client.context.settings.max_entry_size
        self._max_payload = max_payload(self._max_entry_size, record.settings.digest)
        #: The envelope of a plain record appended in millisecond ``_head_ts``.
        self._head_ts = -1
        self._head = b""

    async def _start(self) -> None:
        """Have the first spare ready (so the first rollover is on time), start the age timer."""
        try:
            await self._prepare_spare()
        except LogFencedError as e:
            raise self._failed(e) from None  # another writer took the log at once
        except BKError as e:
            log.warning("log %r: no spare ledger yet (the writer retries at rollover): %s", self.name, e)
        self._spawn(self._age_timer)

    @property
    def segment(self) -> int:
        """The number of the segment appends go to (-1 for a moment after a rollover)."""
        return self._current.number

    @property
    def metadata(self) -> LogMetadata:
        """The log record as this writer last stored it."""
        return self._record

    # -- appending ---------------------------------------------------------------------

    def append_async(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        timestamp: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> PendingLogAppend:
        """Start an append; successive appends complete in order, across rollovers.
        ``timestamp``: the record's event time in ms since the epoch (default: now, the
        publish time); ``key`` and ``properties`` are optional (docs/logs.md#records)."""
        if self._refuse is not None:
            raise self._refuse
        if key is None and timestamp is None and not properties:
            # The usual record: one header per millisecond, shared by its appends.
            ts = time.time_ns() // 1_000_000
            if ts != self._head_ts:
                self._head_ts, self._head = ts, envelope.head(ts)
            data = self._head + payload
        else:
            ts = timestamp if timestamp is not None else envelope.now_ms()
            data = envelope.encode(payload, key, timestamp, properties, now=ts)
        if len(data) > self._max_payload:
            raise self._too_large(len(payload), len(data) - len(payload))
        seg = self._current
        # Entries and bytes here; age is the timer's (a clock read per append costs).
        if seg.appended >= self._max_entries or seg.size >= self._max_bytes:
            seg = self._switch()
        seg.appended += 1
        seg.size += len(data)
        if ts > seg.max_ts:
            seg.max_ts = ts
        if ts < seg.min_ts:
            seg.min_ts = ts
        handle = seg.handle
        if handle is None:
            pending = PendingLogAppend(seg, None)
            seg.queued.append((data, pending))
            return pending
        try:
            return PendingLogAppend(seg, handle.append_async(data))
        except BKError as e:
            raise self._failed(e) from None

    async def append(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        timestamp: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Position:
        """Append one record and wait until it is confirmed; returns its position (see
        :meth:`append_async` for the keywords)."""
        return await self.append_async(payload, key=key, timestamp=timestamp, properties=properties).wait()

    def append_many_async(self, records: Iterable[bytes | Record]) -> PendingLogBatch:
        """Start appending ``records`` (payloads, or :class:`~bkframe.Record` with a key,
        timestamp or properties), in order: they leave in one batch per bookie, and the
        log's bookkeeping is per batch, not per entry. A record over the maximum entry
        size refuses the whole batch (nothing is appended).

        Long on purpose: the log's append path, once per batch; its steps (envelopes, the
        size check that refuses the whole batch, the ledger's batch, the bookkeeping) share
        the batch's locals and are read in order.
        """
        if self._refuse is not None:
            raise self._refuse
        now = envelope.now_ms()
        datas: list[bytes] = []
        #: Event times given, by index in the batch (the others are ``now``).
        stamps: dict[int, int] = {}
        plain = envelope.head(now)
        batch = list(records)
        if all(type(r) is bytes for r in batch):
            # The usual batch: one shared header, no loop in Python.
            datas = list(map(plain.__add__, cast(list[bytes], batch)))
        else:
            for i, r in enumerate(batch):
                if isinstance(r, Record):
                    datas.append(envelope.encode(r.payload, r.key, r.timestamp, r.properties, now=now))
                    if r.timestamp is not None:
                        stamps[i] = r.timestamp
                else:
                    datas.append(plain + bytes(r))
        if not datas:
            return PendingLogBatch([])
        if max(map(len, datas)) > self._max_payload:
            i = next(i for i, d in enumerate(datas) if len(d) > self._max_payload)
            r = batch[i]
            size = len(r.payload) if isinstance(r, Record) else len(r)
            raise self._too_large(size, len(datas[i]) - size)
        parts: list[tuple[ActiveSegment, list[bytes]]] = []
        at = 0
        while at < len(datas):
            seg = self._current
            if seg.appended >= self._max_entries or seg.size >= self._max_bytes:
                seg = self._switch()
            # Up to the entry-count boundary; the byte limit is checked per batch part.
            take = datas[at : at + max(1, self._max_entries - seg.appended)]
            if stamps:
                times = [stamps.get(i, now) for i in range(at, at + len(take))]
                lo, hi = min(times), max(times)
            else:
                lo = hi = now
            at += len(take)
            seg.appended += len(take)
            seg.size += sum(map(len, take))
            if hi > seg.max_ts:
                seg.max_ts = hi
            if lo < seg.min_ts:
                seg.min_ts = lo
            parts.append((seg, take))
        out: list[tuple[ActiveSegment, list[PendingAppend]] | list[PendingLogAppend]] = []
        for seg, take in parts:
            handle = seg.handle
            if handle is None:
                queued = [PendingLogAppend(seg, None) for _ in take]
                seg.queued.extend(zip(take, queued))
                out.append(queued)
                continue
            try:
                out.append((seg, handle.append_many_async(take)))
            except BKError as e:
                raise self._failed(e) from None
        return PendingLogBatch(out)

    async def append_many(self, records: Iterable[bytes | Record]) -> list[Position]:
        """Append ``records`` (see :meth:`append_many_async`) and wait until all are
        confirmed; returns their positions."""
        return await self.append_many_async(records).wait()

    def _too_large(self, payload_size: int, overhead: int) -> BKError:
        """:class:`EntryTooLargeError` for a record no bookie would take (its payload's size,
        and the most a payload with its key and properties may have); the writer goes on."""
        limit = self._max_payload - overhead
        return EntryTooLargeError(
            f"log {self.name!r}: an entry of {payload_size} bytes is over the maximum of {limit} for this record "
            f"(max_entry_size {self._max_entry_size} less {self._max_entry_size - limit} bytes of header, envelope, "
            f"key and properties; {LIMIT_SOURCE}); split it. Nothing was sent: the writer takes further records",
            payload_size,
            limit,
        )

    async def flush(self) -> None:
        """Wait until every append made so far is confirmed (raises if one failed)."""
        seg = self._current
        await seg.gate.wait()
        if seg.error is not None:
            raise seg.error
        assert seg.handle is not None
        try:
            await seg.handle.flush()
        except BKError as e:
            raise self._failed(e) from None

    async def roll(self) -> int:
        """Start a new segment now; returns the number of the segment that was current."""
        if self._error is not None:
            raise self._error
        old = self._current
        if old.appended > 0:
            self._switch()
        await old.registered.wait()
        return old.number

    def _should_roll(self, seg: ActiveSegment) -> bool:
        s = self.settings
        return seg.appended > 0 and (
            seg.appended >= s.rollover_entries or seg.size >= s.rollover_bytes or time.monotonic() - seg.started >= s.rollover_s
        )

    def _switch(self) -> ActiveSegment:
        """Direct appends to a new segment, now; :meth:`_roll` does the rest."""
        old = self._current
        spare, self._spare = self._spare, None
        if spare is not None:
            self._spare_ready = anyio.Event()
        new = ActiveSegment(self, spare.handle if spare is not None else None, spare)
        self._current = new
        # The next spare is made once ``old`` is closed: one CAS records both (see _roll).
        self._spawn(self._roll, old, new)
        return new

    async def _take_spare(self) -> SpareLedger:
        while self._spare is None:
            if self._error is not None:
                raise self._error
            if self._spare_failure is not None:
                raise self._spare_failure
            if not self._preparing:
                self._spawn(self._prepare_spare)
            await self._spare_ready.wait()
        spare, self._spare = self._spare, None
        self._spare_ready = anyio.Event()
        return spare

    # -- errors and background work ----------------------------------------------------

    def _failed(self, error: BaseException) -> BaseException:
        """Record the writer's first failure (converted for the user) and return it."""
        if isinstance(error, LedgerFencedError):
            error = LogFencedError(
                f"log {self.name!r}: another writer opened the log and fenced this one ({error}); nothing this "
                f"writer had acknowledged is lost; open the log again to write"
            )
        if self._error is None:
            self._error = self._refuse = error
            self._timer.cancel()
        return error

    def _spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        if self._tasks == 0:
            self._tasks_done = anyio.Event()
        self._tasks += 1

        async def run() -> None:
            try:
                await fn(*args)
            except BKError as e:
                self._failed(e)
            except Exception as e:  # a background task never takes the client down
                log.exception("log %r: background task %s failed", self.name, getattr(fn, "__name__", fn))
                self._failed(LogError(f"log {self.name!r}: {getattr(fn, '__name__', fn)} failed: {e!r}"))
            finally:
                self._tasks -= 1
                if self._tasks == 0:
                    self._tasks_done.set()

        self._client.context.nursery.start_soon(run)

    async def _retrying(self, what: str, fn: Callable[[], Awaitable[Any]]) -> bool:
        """Run ``fn`` until it succeeds (True), the writer fails, or attempts run out (False)."""
        delay = 0.1
        for attempt in range(BACKGROUND_ATTEMPTS):
            if self._error is not None:
                return False
            try:
                await fn()
                return True
            except (LedgerFencedError, LogFencedError):
                raise
            except BKError as e:
                log.warning("log %r: %s failed (attempt %d): %s", self.name, what, attempt + 1, e)
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)
        return False

    # -- the log record ------------------------------------------------------------------

    async def _update(self, change: Callable[[LogMetadata], LogMetadata]) -> LogMetadata:
        """CAS ``change`` into the log record while this writer still owns it; each store
        call bounded by ``metadata_timeout_s`` (:mod:`bkframe.client.metadata_deadline`)."""
        context = self._client.context
        call = partial(bounded, context.nursery, context.settings.metadata_timeout_s, f"updating the log {self.name!r}")
        async with self._md_lock:
            record = self._record
            while True:
                if record.writer_epoch != self.epoch or record.writer != self.writer_id:
                    raise LogFencedError(
                        f"log {self.name!r}: another writer opened the log (writer epoch {record.writer_epoch}, "
                        f"this one's is {self.epoch}); open the log again to write"
                    )
                try:
                    changed = change(record)
                    self._record = await call(lambda: self._records.cas(changed, record.version))  # noqa: B023 - awaited here
                    return self._record
                except BadVersionError:
                    record = await call(lambda: self._records.read(self.name))

    async def _prepare_spare(self, closed: tuple[ActiveSegment, LedgerMetadata] | None = None) -> None:
        """Create the next segment's ledger and put it in the record: as the current
        segment's successor (reserved at the entry-count boundary) when the current segment
        is in the record, else among the spares. ``closed``: a rolled segment and its
        closed ledger, marked closed in the same CAS.

        Long on purpose: the ledger it creates must end in the record or be deleted, and the
        ``try`` that guarantees it (and clears ``_preparing`` and wakes the waiters whatever
        happens) holds every step.
        """
        if self._preparing or self._spare is not None:
            if closed is not None:
                await self._update(lambda r: mark_closed(r, *closed))
            return
        self._preparing = True
        try:
            made: list[WriteHandle] = []

            async def create() -> None:
                s = self.settings
                made.append(
                    await self._client.create_ledger(
                        ensemble=s.ensemble,
                        write_quorum=s.write_quorum,
                        ack_quorum=s.ack_quorum,
                        ledger_type=s.ledger_type,
                        digest=s.digest,
                        password=self._password,
                        custom={"bkframe.log": self.name, **envelope.ENVELOPE_CUSTOM},
                    )
                )

            if not await self._retrying("creating the next segment's ledger", create):
                if self._error is None:
                    self._spare_failure = LogError(
                        f"log {self.name!r}: the next segment's ledger could not be created (see the log for why); "
                        f"close the writer or open the log again"
                    )
                    if closed is not None:
                        await self._update(lambda r: mark_closed(r, *closed))
                return
            spare = SpareLedger(made[0])
            ledger_id = spare.handle.ledger_id
            current = self._current
            if current.handle is not None:
                await current.registered.wait()

            def put(r: LogMetadata) -> LogMetadata:
                if closed is not None:
                    r = mark_closed(r, *closed)
                spare.number, spare.after = -1, None
                cur = self._current
                seg = r.segment(cur.number) if cur.number >= 0 else None
                if cur.handle is None or seg is None or seg.closed or self._closing or cur.appended > self._max_entries:
                    return attrs.evolve(r, spares=(*r.spares, ledger_id))
                spare.planned_last = self._max_entries - 1
                r = r.replace_segment(attrs.evolve(seg, last_sent=spare.planned_last))
                spare.number, spare.after = r.next_segment, cur
                return r.add_segment(ledger_id, now=time.time())

            try:
                await self._update(put)
            except MetadataTimeoutError:
                raise  # the record may yet list the ledger: it stays (the next writer collects it)
            except BaseException:
                with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                    await self._records.delete_ledger_quietly(ledger_id)
                raise
            if self._error is not None:
                return  # the next writer moves it to the garbage
            self._spare = spare
            self._spare_failure = None
        finally:
            self._preparing = False
            self._spare_ready.set()

    async def _age_timer(self) -> None:
        """Roll a segment over once it is ``rollover_s`` old, even if no append comes."""
        with self._timer:
            while not self._closing:
                seg = self._current
                left = self.settings.rollover_s - (time.monotonic() - seg.started)
                await anyio.sleep(max(left, 0.0) + 0.01)
                if self._current is seg and self._should_roll(seg) and not self._closing:
                    self._switch()
                elif self._current is seg and seg.appended == 0:
                    await anyio.sleep(min(self.settings.rollover_s, 1.0))  # nothing to roll yet

    async def _roll(self, old: ActiveSegment, new: ActiveSegment) -> None:
        """Make ``new`` the next segment in the record, open its gate once ``old``'s appends
        are all in, then close ``old`` and record it closed."""
        timeout_s = self._client.context.settings.metadata_timeout_s
        try:
            await old.registered.wait()  # segment numbers follow the order of appends
            if old.error is not None:
                raise old.error
            with anyio.move_on_after(timeout_s) as rolling:  # the store calls in it give up on cancel
                spare = new.spare
                if spare is None:
                    spare = new.spare = await self._take_spare()
                    new.handle = spare.handle
                    queued, new.queued = new.queued, []
                    for data, pending in queued:
                        pending._inner = new.handle.append_async(data)
                # Nothing goes to the old segment any more: its end is known now.
                last_sent = old.appended - 1
                if spare.after is old and spare.number >= 0 and spare.planned_last == last_sent:
                    new.number = spare.number  # reserved with this very boundary: nothing to write
                else:
                    new.number = await self._register(old, spare, last_sent)
            if rolling.cancelled_caught:
                raise LogError(
                    f"log {self.name!r}: the rollover to a new segment could not be recorded in {timeout_s:g} s "
                    f"(metadata_timeout_s): the metadata store does not answer; nothing acknowledged is lost; "
                    f"open the log again once the store is back"
                )
            new.registered.set()
            await old.gate.wait()
            if old.error is not None:
                raise old.error
            assert old.handle is not None
            await old.handle.flush()
        except BaseException as e:
            new.error = self._failed(e) if isinstance(e, Exception) else e
            raise
        finally:
            new.registered.set()
            new.open_gate()
        md = await self._close_ledger(old)
        if md is not None:
            # Marked closed together with the next spare's reservation: one CAS.
            await self._prepare_spare(closed=(old, md))
        elif self._spare is None and not self._preparing:
            await self._prepare_spare()
        if self.settings.retention_s is not None or self.settings.retention_bytes is not None:
            try:
                await trim(self._records, self.name, retention=True)
            except BKError as e:
                log.warning("log %r: retention after a rollover failed (the next one tries again): %s", self.name, e)

    async def _register(self, old: ActiveSegment, spare: SpareLedger, last_sent: int) -> int:
        """Record ``old``'s true boundary and ``spare`` as the next segment; its number."""
        ledger_id = spare.handle.ledger_id

        def register(r: LogMetadata) -> LogMetadata:
            previous = r.segment(old.number)
            if previous is not None and not previous.closed:
                r = r.replace_segment(attrs.evolve(previous, last_sent=last_sent))
            if spare.number >= 0 and r.segment(spare.number) is not None:
                return r  # reserved already: only the boundary moved
            if ledger_id not in r.spares:
                raise LogFencedError(f"log {self.name!r}: this writer's spare ledger {ledger_id} was taken away")
            r = attrs.evolve(r, spares=tuple(i for i in r.spares if i != ledger_id))
            return r.add_segment(ledger_id, now=time.time())

        record = await self._update(register)
        return next(s.number for s in reversed(record.segments) if s.ledger_id == ledger_id)

    async def _close_ledger(self, seg: ActiveSegment) -> LedgerMetadata | None:
        """Close a rolled segment's ledger; None if that failed (left to the next writer)."""
        closed_md: list[LedgerMetadata] = []

        async def close() -> None:
            assert seg.handle is not None
            closed_md.append(await seg.handle.close())

        try:
            if not await self._retrying(f"closing segment {seg.number}", close):
                return None  # left open in the record: the next writer recovers it
        except LedgerFencedError as e:
            self._failed(e)
            return None
        return closed_md[0]

    # -- closing -----------------------------------------------------------------------

    async def close(self) -> LogMetadata:
        """Wait for every append, close the current segment, and give the log up (the next
        writer opens it without recovery). Returns the log record as stored."""
        if self._closed:
            return self._record
        self._closing = True
        if self._refuse is None:
            self._refuse = LogError(f"log {self.name!r}: this writer is closed; open the log again to write")
        self._timer.cancel()
        await self.flush()
        seg = self._current
        assert seg.handle is not None
        md = await seg.handle.close()
        await self._tasks_done.wait()
        if self._error is not None:
            raise self._error
        now = time.time()

        def release(r: LogMetadata) -> LogMetadata:
            current = r.segment(seg.number)
            # The current segment, and the successor reserved for it (empty, never written).
            unused = [s for s in r.segments if s.number > seg.number and not s.closed]
            if current is not None and md.last_entry_id < 0:
                unused.append(current)  # nothing was ever written to it: it gives no position
            elif current is not None and not current.closed:
                r = r.replace_segment(closed_segment(current, seg, md, now))
            r = r.drop_segments(s.number for s in unused).with_garbage(r.spares)
            return attrs.evolve(r, spares=(), writer="")

        record = await self._update(release)
        self._closed = True
        if record.garbage:
            try:
                record = await self._records.collect_garbage(self.name)
            except Exception as e:  # noqa: BLE001 - the ledgers stay listed; the next writer or trim deletes them
                log.warning("log %r: deleting unused ledgers failed (the next writer or trim retries): %s", self.name, e)
        return record

    async def __aenter__(self) -> LogWriter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if exc[0] is None:
            await self.close()
