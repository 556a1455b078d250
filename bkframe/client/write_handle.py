"""Writing a ledger: pipelined appends completing in entry order, ensemble change, close.

Each append is encoded once and sent to its write set (striped: entry e goes to the W
bookies starting at e mod E). Bookie responses arrive through callbacks, not tasks; the
LAC advances over the head of the queue while it has A acknowledgements, so completions
are always in entry order. When a bookie fails (an error, or no answer within
``add_timeout_s``), a PD_JOURNAL writer replaces it in a new fragment (metadata CAS) and
re-sends everything not yet confirmed that it should hold; the failed bookie is
quarantined (avoided, not banned: see :mod:`bkframe.client.bookies.health`). Whether it
may, with whom and the fragment's CAS are :mod:`bkframe.client.ensemble_change`.

Closing: once ``close()`` starts, new appends fail; close waits for every pending append,
then (bounded by the add timeout) for the remaining replicas' answers, so a ledger closed
among healthy bookies is fully replicated; then it records the end with a CAS. A closed
ledger's metadata is never changed again by this handle. The bookies are then told the
writer is done (BP-32, :mod:`bkframe.client.write_close`).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import anyio
import attrs

from bkframe.client.bookies.errors import ClientClosedError, error_for
from bkframe.client.bookies.pending_response import Completion
from bkframe.client.distribution import write_set
from bkframe.client.ensemble_change import check_still_open, commit_fragment, not_allowed, replacements
from bkframe.client.entry_format import Digester, max_payload, too_large
from bkframe.client.ledger_access import LedgerAccess
from bkframe.client.write_close import advise_write_close
from bkframe.core.metadata import LedgerMetadata, LedgerStateName
from bkframe.errors import (
    BadVersionError,
    BKError,
    LedgerClosedError,
    LedgerDeletedError,
    LedgerFencedError,
)
from bkframe.proto.codes import TARGET_FRAME_SIZE, Status
from bkframe.proto.ops.add_batch import AddBatchResponse

if TYPE_CHECKING:
    from bkframe.client.context import ClientContext

log = logging.getLogger("bkframe.client")


def lac_by_sync(last_add_synced: Sequence[int], write_quorum: int, ack_quorum: int, lap: int) -> int:
    """BP-14's rule for a VD_JOURNAL ledger: the LAC is the ``W - A``-th lowest LastAddSynced
    of the write set (so at least A bookies have synced it), never beyond the last add
    pushed (LAP)."""
    return min(sorted(last_add_synced)[write_quorum - ack_quorum], lap)


@attrs.define(eq=False, slots=True)
class PendingAppend(Completion):
    """An append in flight; ``await pending.wait()`` returns its entry id once confirmed.

    A pipelining appender that waits on every 256th append (or on the last of a batch, as
    :meth:`WriteHandle.append_many` does) pays for no event per entry (see
    :class:`~bkframe.client.bookies.pending_response.Completion`), and waiting on an append
    already done returns at once, without a trip through the scheduler.
    """

    entry_id: int
    data: bytes
    #: The ledger's length once this entry is in.
    length: int = 0
    acked: set[int] = attrs.Factory(set)
    error: BaseException | None = None
    #: When the append started (event-loop clock), for the client's add latency.
    started: float = 0.0

    async def wait(self) -> int:
        await self._until_done()
        if self.error is not None:
            raise self.error
        return self.entry_id

    def _finish(self, error: BaseException | None = None) -> None:
        if not self._done:
            self.error = error
            self._mark_done()


class WriteHandle(LedgerAccess):
    """Made by :meth:`Client.create_ledger` or :meth:`Client.open_writer`; the only writer of its ledger."""

    def __init__(self, ctx: ClientContext, metadata: LedgerMetadata, master_key: bytes, digester: Digester) -> None:
        super().__init__(ctx, metadata, master_key, digester)
        policy = ctx.ledger_types.named(metadata.ledger_type)
        self._type_id = policy.type_id
        self._can_change_ensemble = policy.sync_before_ack and policy.journal_data
        #: A lone append leaves at once only where bookies answer without an fsync: a PD
        #: add sent ahead of the appends that follow it in the same pass would take a group
        #: commit (an fsync) of its own on every bookie, and they would wait for the next.
        self._send_lone = not policy.sync_before_ack
        #: BP-14: acks come before the fsync, so the LAC follows the bookies' LastAddSynced.
        self._vd = policy.lac_by_sync
        self._las = [-1] * metadata.ensemble_size
        self._ensemble = list(metadata.fragments[-1][1])
        self._pending: deque[PendingAppend] = deque()
        self._next_entry = metadata.last_entry_id + 1
        self._lac = metadata.last_entry_id
        #: Last add pushed: acknowledged by an ack quorum, in order (= LAC for PD ledgers).
        self._lap = metadata.last_entry_id
        #: Ledger length with every entry appended so far (it goes in each entry's header)...
        self._length = metadata.length
        #: ... and with the entries acknowledged so far (what ``length`` reports).
        self._lap_length = metadata.length
        self._error: BKError | None = None
        #: close() was called: appends are refused from then on.
        self._closing = False
        #: The close CAS succeeded: the metadata is final.
        self._closed = False
        self._changing = False
        self._change_done = anyio.Event()
        self._change_done.set()
        self._held: list[PendingAppend] = []
        #: Appends waiting for the next batch send (a task sends them once the appender yields).
        self._unsent: list[PendingAppend] = []
        self._flush_scheduled = False
        #: Bookies of the current ensemble that failed and are being replaced.
        self._to_replace: set[str] = set()
        self._settings = ctx.settings
        #: Larger payloads are refused before they are sent (a bookie would refuse them).
        self._max_payload = max_payload(ctx.settings.max_entry_size, metadata.digest_type)
        #: Add requests sent and not answered yet (any outcome), for close().
        self._outstanding = 0
        self._all_answered = anyio.Event()
        self._all_answered.set()
        self._idle = anyio.Event()
        self._idle.set()
        #: Highest LAC the bookies have been told (piggybacked on an add or explicit).
        self._lac_sent = metadata.last_entry_id
        if ctx.settings.explicit_lac_interval_s > 0:
            ctx.nursery.start_soon(self._publish_lac_when_idle, ctx.settings.explicit_lac_interval_s)

    @property
    def lac(self) -> int:
        """Last add confirmed: every entry up to it is acknowledged by an ack quorum."""
        return self._lac

    @property
    def lap(self) -> int:
        """Last add pushed: acknowledged by an ack quorum (for VD ledgers maybe not yet synced)."""
        return self._lap

    @property
    def length(self) -> int:
        """Bytes of payload in the acknowledged entries (up to the LAP)."""
        return self._lap_length

    # -- appending -----------------------------------------------------------------------

    def append_async(self, payload: bytes) -> PendingAppend:
        """Start an append; completions of successive appends come in entry order."""
        return self._append(payload, alone=False)

    def _append(self, payload: bytes, *, alone: bool) -> PendingAppend:
        if self._error is not None:
            raise self._error
        if self._closing:
            raise LedgerClosedError(
                f"ledger {self.ledger_id} is {'closed' if self._closed else 'being closed'}; it takes no more "
                f"entries (its end is the last entry confirmed before close() was called)"
            )
        if len(payload) > self._max_payload:
            raise self._too_large(len(payload))
        entry_id = self._next_entry
        self._next_entry += 1
        self._length += len(payload)
        data = self._digester.encode(self.ledger_id, entry_id, self._lac, self._length, payload)
        pending = PendingAppend(entry_id, data, self._length, started=anyio.current_time())
        self._pending.append(pending)
        self._idle = anyio.Event() if self._idle.is_set() else self._idle
        if alone and self._send_lone and len(self._pending) == 1 and not self._unsent and not self._changing:
            # A synchronous writer's lone append joins no batch: it leaves now, not a
            # scheduler pass later in a flush task. Not for append_async: a pipelined
            # appender refilling a drained window would split its batches.
            self._send_entries([pending])
            return pending
        self._unsent.append(pending)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._ctx.nursery.start_soon(self._flush_soon)
        return pending

    async def append(self, payload: bytes) -> int:
        """Append one entry and wait until it is confirmed; returns its entry id."""
        # This task starts nothing more before the entry is confirmed: on an idle writer it
        # is alone, and may leave at once.
        return await self._append(payload, alone=True).wait()

    def append_many_async(self, payloads: Iterable[bytes]) -> list[PendingAppend]:
        """Start an append of each payload, in order; they leave in one batch per bookie.
        A payload over the maximum entry size refuses the whole batch (nothing is appended)."""
        batch = list(payloads)
        largest = max(map(len, batch), default=0)
        if largest > self._max_payload:
            raise self._too_large(largest)
        return [self._append(payload, alone=False) for payload in batch]

    def _too_large(self, size: int) -> BKError:
        return too_large(f"ledger {self.ledger_id}", size, self._settings.max_entry_size, self.metadata.digest_type)

    async def append_many(self, payloads: Iterable[bytes]) -> range:
        """Append the payloads (pipelined, one batch per bookie) and wait until all are
        confirmed; returns their entry ids. Appends complete in entry order and a failure
        fails every later append, so waiting for the last one is waiting for all."""
        pendings = self.append_many_async(payloads)
        if not pendings:
            return range(0)
        await pendings[-1].wait()
        return range(pendings[0].entry_id, pendings[-1].entry_id + 1)

    async def _flush_soon(self) -> None:
        # A new task first runs once the appender has yielded, so every entry it queued by
        # then shares one ADD_BATCH message per bookie (and one journal record on each
        # bookie). No extra checkpoint here: with one append in flight it would only delay
        # the send by a scheduler pass.
        self._flush_scheduled = False
        unsent, self._unsent = self._unsent, []
        if self._changing:
            self._held.extend(unsent)
        elif self._error is None:
            self._send_entries(unsent)

    def _send_entries(self, pendings: list[PendingAppend]) -> None:
        e, w = len(self._ensemble), self.metadata.write_quorum
        if w == e:
            for idx in range(e):
                self._send_batch(pendings, idx)
            return
        per_bookie: list[list[PendingAppend]] = [[] for _ in range(e)]
        for pa in pendings:
            for idx in write_set(pa.entry_id, e, w):
                per_bookie[idx].append(pa)
        for idx, batch in enumerate(per_bookie):
            if batch:
                self._send_batch(batch, idx)

    def _send_batch(self, pendings: list[PendingAppend], idx: int) -> None:
        bookie_id = self._ensemble[idx]
        client = self._ctx.pool.adds_to(bookie_id)
        if client is None:
            self._bookie_failed(bookie_id, "not connected")
            return
        start = 0
        while start < len(pendings):
            # Messages of about a frame each: big batches of big entries are cut.
            size = 0
            end = start
            while end < len(pendings) and (end == start or size < TARGET_FRAME_SIZE):
                size += len(pendings[end].data)
                end += 1
            chunk = pendings[start:end]
            start = end
            self._lac_sent = max(self._lac_sent, self._lac)
            try:
                response = client.submit_add_batch(
                    self.ledger_id,
                    [pa.entry_id for pa in chunk],
                    [pa.data for pa in chunk],
                    master_key=self._master_key,
                    lac=self._lac,
                    ledger_type=self._type_id,
                    timeout_s=self._settings.add_timeout_s,
                )
            except ConnectionError as err:
                self._connection_failed(bookie_id, err)
                return
            if self._outstanding == 0:
                self._all_answered = anyio.Event()
            self._outstanding += 1
            response.callback = partial(self._on_response, chunk, idx, bookie_id)

    def _on_response(
        self,
        pendings: list[PendingAppend],
        idx: int,
        bookie_id: str,
        response: AddBatchResponse | None,
        error: BaseException | None,
    ) -> None:
        self._outstanding -= 1
        if self._outstanding == 0:
            self._all_answered.set()
        if self._ensemble[idx] != bookie_id:
            return  # an answer from a bookie since replaced
        if response is not None and response.status == Status.OK:
            for pa in pendings:
                pa.acked.add(idx)
            if self._vd and response.last_add_synced > self._las[idx]:
                self._las[idx] = response.last_add_synced
            self._advance()
            return
        if response is not None and response.status in (Status.FENCED, Status.UNAUTHORIZED):
            self._fail(error_for(response.status, response.message, bookie_id, ledger_id=self.ledger_id))
            return
        if response is not None and response.status == Status.BAD_REQUEST:
            # The bookie finds the add malformed (say an entry over its max_entry_size, when
            # the client's setting is larger): a replacement would refuse it too, so this is
            # the writer's error, not a dead bookie to change the ensemble for.
            self._fail(error_for(response.status, response.message, bookie_id, ledger_id=self.ledger_id))
            return
        if response is not None and response.status == Status.NO_LEDGER:
            # Only a bookie that deleted the ledger refuses an add this way (tombstone).
            self._fail(LedgerDeletedError(f"ledger {self.ledger_id} was deleted: {bookie_id}: {response.message}"))
            return
        if error is not None:
            self._connection_failed(bookie_id, error)
            return
        self._bookie_failed(bookie_id, f"{response.status.name}: {response.message}")  # type: ignore[union-attr]

    def _advance(self) -> None:
        ack_quorum = self.metadata.ack_quorum
        pending = self._pending
        if pending and len(pending[0].acked) >= ack_quorum:
            now = anyio.current_time()
            latency = self._ctx.counters.add_latency
            while pending and len(pending[0].acked) >= ack_quorum:
                head = pending.popleft()
                self._lap = head.entry_id
                self._lap_length = head.length
                latency.observe(now - head.started)
                head._finish()
        if not self._vd:
            self._lac = self._lap
        else:
            self._advance_lac_by_sync()
        if not pending:
            self._idle.set()

    def _advance_lac_by_sync(self) -> None:
        lac = lac_by_sync(self._las, self.metadata.write_quorum, self.metadata.ack_quorum, self._lap)
        if lac > self._lac:
            self._lac = lac

    async def sync(self) -> int:
        """Wait for pending appends, make the bookies fsync them, return the new LAC.

        For VD ledgers this sends SYNC to the ensemble and returns as soon as the
        LastAddSynced rule confirms everything pushed, so a bookie that is down does not
        block it while enough others answer. For PD ledgers it is flush().
        """
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed; everything in it is synced already")
        await self.flush()
        if not self._vd or self._lac >= self._lap:
            return self._lac
        target = self._lap
        async with anyio.create_task_group() as nursery:

            async def sync_one(idx: int, bookie_id: str) -> None:
                try:
                    client = await self._ctx.pool.get(bookie_id)
                    # A sync waits for an fsync of what the bookie holds: an add's worth of time.
                    response = await client.submit_sync(self.ledger_id, timeout_s=self._settings.add_timeout_s).wait()
                except ConnectionError as e:
                    log.info("ledger %d: sync on bookie %s failed: %s", self.ledger_id, bookie_id, e)
                    return
                if response.status == Status.OK:
                    self._las[idx] = max(self._las[idx], response.last_add_synced)
                    self._advance_lac_by_sync()
                    if self._lac >= target:
                        nursery.cancel_scope.cancel()

            for idx, bookie_id in enumerate(self._ensemble):
                nursery.start_soon(sync_one, idx, bookie_id)
        return self._lac

    async def write_lac(self) -> int:
        """Tell the ensemble the current LAC now (journaled and synced on each bookie), so
        readers see every confirmed entry; adds only carry the LAC as of their sending."""
        await self.flush()
        lac = self._lac
        if lac < 0:
            return lac
        acks = 0
        refused: BKError | None = None
        needed = self.metadata.ack_quorum
        async with anyio.create_task_group() as nursery:

            async def write_one(bookie_id: str) -> None:
                nonlocal acks, refused
                try:
                    conn = await self._ctx.pool.get(bookie_id)
                    response = await conn.submit_write_lac(
                        self.ledger_id, lac, master_key=self._master_key, timeout_s=self._settings.add_timeout_s
                    ).wait()
                except ConnectionError:
                    return
                if response.status == Status.OK:
                    acks += 1
                    if acks >= needed:
                        nursery.cancel_scope.cancel()  # the ack quorum has it: done
                elif response.status in (Status.FENCED, Status.UNAUTHORIZED):
                    refused = error_for(response.status, response.message, bookie_id, ledger_id=self.ledger_id)
                    nursery.cancel_scope.cancel()

            for bookie_id in self._ensemble:
                nursery.start_soon(write_one, bookie_id)
        if refused is not None:
            raise refused
        if acks < needed:
            raise BKError(
                f"ledger {self.ledger_id}: only {acks} bookie(s) of {self._ensemble} took the explicit LAC {lac}, "
                f"{needed} (the ack quorum) are needed; retry when the bookies are back"
            )
        self._lac_sent = max(self._lac_sent, lac)
        return lac

    async def _publish_lac_when_idle(self, interval: float) -> None:
        while not self._closing and self._error is None:
            await anyio.sleep(interval)
            if self._lac > self._lac_sent and not self._closing and self._error is None:
                try:
                    await self.write_lac()
                except BKError as e:
                    log.info("ledger %d: explicit LAC not written: %s", self.ledger_id, e)

    def _fail(self, error: BKError) -> None:
        if self._error is None:
            self._error = error
        while self._pending:
            self._pending.popleft()._finish(self._error)
        self._idle.set()

    # -- ensemble change -----------------------------------------------------------------

    def _connection_failed(self, bookie_id: str, error: BaseException) -> None:
        if isinstance(error, ClientClosedError):
            if self._closed:
                return
            # This client closed the connection itself (it is closing, or was cancelled): the
            # bookie is fine, and an ensemble change could not even be recorded now.
            self._fail(ClientClosedError(f"ledger {self.ledger_id}: the client closed ({error})"))
            return
        self._bookie_failed(bookie_id, str(error))

    def _bookie_failed(self, bookie_id: str, reason: str) -> None:
        if self._error is not None or self._closed:
            return  # a closed ledger's metadata is final; a failed handle changes nothing
        if bookie_id not in self._ensemble or bookie_id in self._to_replace:
            return  # already replaced, or being replaced
        self._ctx.pool.health.failed(bookie_id, reason)
        if self._closing and not self._pending:
            # Every entry is confirmed; this bookie only missed some copies. The ledger is
            # closed without it (under-replicated until re-replicated), never changed.
            log.info(
                "ledger %d: bookie %s failed while closing (%s); the entries it lacks keep their other copies",
                self.ledger_id,
                bookie_id,
                reason,
            )
            return
        if not self._can_change_ensemble:
            self._fail(not_allowed(self.ledger_id, self.metadata.ledger_type, bookie_id, reason))
            return
        log.warning("ledger %d: bookie %s failed (%s); changing ensemble", self.ledger_id, bookie_id, reason)
        self._to_replace.add(bookie_id)
        if not self._changing:
            self._changing = True
            self._change_done = anyio.Event()
            self._ctx.nursery.start_soon(self._change_ensemble)

    async def _change_ensemble(self) -> None:
        try:
            while self._error is None:
                failed = [i for i, b in enumerate(self._ensemble) if b in self._to_replace]
                if not failed:
                    break
                await check_still_open(self._ctx, self.ledger_id)
                boundary = self._lac + 1
                resend = [pa for pa in self._pending if pa.entry_id >= boundary]
                for pa in resend:
                    pa.acked.difference_update(failed)
                new_ensemble = await replacements(self._ctx, self.metadata, self._ensemble, failed, self._to_replace)
                self.metadata = await commit_fragment(self._ctx, self.metadata, boundary, new_ensemble)
                self._ctx.counters.ensemble_changes += 1
                self._to_replace.difference_update(self._ensemble[i] for i in failed)
                self._ensemble = list(new_ensemble)
                e, w = len(self._ensemble), self.metadata.write_quorum
                held_ids = set(map(id, self._held))
                for idx in failed:
                    todo = [pa for pa in resend if id(pa) not in held_ids and idx in write_set(pa.entry_id, e, w)]
                    if todo:
                        self._send_batch(todo, idx)
        except BKError as err:
            self._fail(err)
        except Exception as err:  # noqa: BLE001 - metadata store failures end the writer, loudly
            self._fail(BKError(f"ensemble change of ledger {self.ledger_id} failed: {err!r}"))
        finally:
            self._changing = False
            self._change_done.set()
        held, self._held = self._held, []
        if self._error is None and held:
            self._send_entries(held)

    # -- closing -------------------------------------------------------------------------

    async def flush(self) -> None:
        """Wait until every append made so far is confirmed (or the handle failed)."""
        while self._pending and self._error is None:
            await self._idle.wait()
        if self._error is not None:
            raise self._error

    async def close(self) -> LedgerMetadata:
        """Refuse new appends, wait for pending ones (and, bounded by the add timeout, for
        every replica's answer), then record the last entry id and length (CAS).

        If it raises (bookies or the metadata store unreachable), the ledger stays open
        and ``close()`` may be called again; appends stay refused.
        """
        if self._closed:
            return self.metadata
        self._closing = True
        await self.sync()
        if self._lac < self._lap:
            raise BKError(
                f"ledger {self.ledger_id}: only entries up to {self._lac} of {self._lap} could be synced on "
                f"enough bookies; the ledger stays open: retry close() when the bookies are back"
            )
        # A closed ledger should be fully replicated when its bookies are healthy: let the
        # slower replicas answer too (their failure now changes nothing, see _bookie_failed).
        with anyio.move_on_after(self._settings.add_timeout_s):
            while self._outstanding or self._changing:
                if self._changing:
                    await self._change_done.wait()
                else:
                    await self._all_answered.wait()
        if self._error is not None:
            raise self._error
        md = self.metadata
        while True:
            new = attrs.evolve(md, state=LedgerStateName.CLOSED, last_entry_id=self._lac, length=self._lap_length)
            try:
                self.metadata = await self._ctx.metadata.update_ledger(new, md.version)
                self._closed = True
                ensemble = list(self._ensemble)
                self._ctx.nursery.start_soon(advise_write_close, self._ctx, self.ledger_id, self._master_key, ensemble)
                return self.metadata
            except BadVersionError:
                md = await self._ctx.metadata.read_ledger(self.ledger_id)
                if md.closed:
                    if md.last_entry_id == self._lac:
                        self.metadata = md
                        self._closed = True
                        return md
                    raise LedgerFencedError(
                        f"ledger {self.ledger_id} was closed by recovery at entry {md.last_entry_id}"
                    ) from None
                if md.state != LedgerStateName.OPEN:
                    raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client") from None
