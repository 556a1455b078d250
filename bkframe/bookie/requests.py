"""How a bookie answers requests: the dispatcher, and when answers may leave.

``RequestHandler.handle`` turns a frame's requests into a :class:`ResponseBatch`: the encoded
responses plus what must be durable before they may be sent (a journal sequence, the
entry-log fsync of large entries written once). It does all its work synchronously on the
event loop (page-cache writes, memory copies), by concern: :mod:`bkframe.bookie.adds` (ADD, ADD_BATCH,
SYNC), :mod:`bkframe.bookie.reads` (READ, READ_BATCH, READ_LAC, LIST_ENTRIES), :mod:`bkframe.bookie.ledger_control`
(fences, WRITE_LAC, WRITE_CLOSE), each given the connection's :class:`~bkframe.bookie.access.Access` in
the batch. Every operation of :mod:`bkframe.proto.table`, ADD included, is served through
its :class:`OpHandler` row, keyed by op: who serves it, and what it owes its request when a
journal write is lost. ``RequestHandler.durable_answers`` is the only wait on the add path (apart from
a ledger's first adds here, which wait for the metadata's word on their key, :mod:`.key_check`):
the server's connection writer hands it the batches it holds and sends what it returns.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from itertools import islice
from typing import Any

import attrs
import trio

from bkframe.bookie.access import ANONYMOUS, Access
from bkframe.bookie.adds import Adds
from bkframe.bookie.context import BookieContext
from bkframe.bookie.ledger_control import LedgerControl
from bkframe.bookie.reads import Reads
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import JournalWriteError
from bkframe.proto.base import BadMessage
from bkframe.proto.codes import Op, Status
from bkframe.proto.ops.add import AddRequest
from bkframe.proto.ops.add_batch import AddBatchRequest
from bkframe.proto.ops.bookie_info import BookieInfoRequest, encode_bookie_info_response
from bkframe.proto.ops.connection_setup import AuthRequest, FeaturesRequest, encode_auth_response
from bkframe.proto.ops.read import ReadRequest, encode_read_response
from bkframe.proto.ops.read_lac import ReadLacRequest
from bkframe.proto.ops.subscription import SubRequest
from bkframe.proto.ops.write_lac import WriteLacRequest, encode_write_lac_response
from bkframe.proto.table import OPERATIONS, Request, encode_error_response
from bkframe.storage_kit.disk_full import is_disk_full

log = logging.getLogger("bkframe.bookie")


def _never(req: object) -> bool:
    return False


def _always(req: object) -> bool:
    return True


def _fencing(req: ReadRequest) -> bool:
    return req.fence


def _recovery(req: AddRequest | AddBatchRequest) -> bool:
    return req.recovery


def _long_poll(req: ReadLacRequest) -> bool:
    return req.previous_lac is not None


@attrs.frozen
class OpHandler:
    """How this bookie serves one operation (its row in :class:`RequestHandler`'s table, as
    :class:`~bkframe.proto.table.Operation` is its row on the wire), and what it owes a
    request of it whose journal records were lost (:meth:`RequestHandler.lost_write_responses`)."""

    #: Serves a request into its frame's batch (with ``runs``, a run of them).
    serve: Callable[[Any, ResponseBatch], None]
    #: A frame's consecutive requests of this op to one ledger are served together (stored
    #: with one append, journaled as one record): ``serve`` gets the run.
    runs: bool = False
    #: Whether the request's answer acknowledges journal records. When they were lost it is
    #: answered ``refuse(request, status, why)`` instead: nothing of it may be acknowledged.
    #: A request that journals nothing is served again.
    journaled: Callable[[Any], bool] = _never
    refuse: Callable[[Any, Status, str], list[Buffer]] | None = None
    #: What a read-only bookie still writes for (a fence, a recovery add): when the lost write
    #: found no space, served once more, into the reserved space it released.
    duty: Callable[[Any], bool] = _never
    #: Answered by a task of its own (a sync, a long poll), which a lost record does not change.
    own_answer: Callable[[Any], bool] = _never


class RequestHandler:
    """One bookie's request semantics (the network server is :mod:`bkframe.bookie.serving.server`).

    :param info: what GET_BOOKIE_INFO answers (:meth:`Bookie.info <bkframe.bookie.bookie.Bookie.info>`).
    """

    def __init__(self, context: BookieContext, info: Callable[[], dict[str, Any]]) -> None:
        self.context = context
        self.info = info
        self.journal = context.journal
        self.counters = context.counters
        self.adds = Adds(context)
        self.control = LedgerControl(context)
        self.reads = Reads(context, self.control)
        adds, reads, control = self.adds, self.reads, self.control
        #: Who serves each operation, and what it journals: a row for every row of proto/table.py.
        self.handlers: dict[Op, OpHandler] = {
            Op.ADD: OpHandler(adds.add, runs=True, journaled=_always, refuse=self._add_lost, duty=_recovery),
            Op.ADD_BATCH: OpHandler(adds.add_batch, journaled=_always, refuse=self._add_lost, duty=_recovery),
            Op.SYNC: OpHandler(adds.sync_request, own_answer=_always),
            Op.READ: OpHandler(reads.read, journaled=_fencing, refuse=_fence_lost, duty=_fencing),
            Op.READ_BATCH: OpHandler(reads.read_batch),
            Op.READ_LAC: OpHandler(reads.read_lac, own_answer=_long_poll),
            Op.LIST_ENTRIES: OpHandler(reads.list_entries),
            Op.WRITE_LAC: OpHandler(control.write_lac, journaled=_always, refuse=_write_lac_lost),
            Op.WRITE_CLOSE: OpHandler(control.write_close),
            Op.GET_BOOKIE_INFO: OpHandler(self._bookie_info),
            Op.AUTH: OpHandler(self._late_auth),
            Op.FEATURES: OpHandler(self._late_features),
            # Subscriptions: answered by the owner this bookie hosts, by the connection's task.
            Op.SUB_LEASE: OpHandler(_subscription_call, own_answer=_always),
            Op.SUB_SETTLE: OpHandler(_subscription_call, own_answer=_always),
            Op.SUB_LEAVE: OpHandler(_subscription_call, own_answer=_always),
            Op.SUB_STATS: OpHandler(_subscription_call, own_answer=_always),
            Op.SUB_COMMIT: OpHandler(_subscription_call, own_answer=_always),
        }
        unserved = sorted(Op(op).name for op in OPERATIONS.keys() - self.handlers.keys())
        if unserved:
            raise RuntimeError(f"operations of proto/table.py without a handler on the bookie: {', '.join(unserved)}")
        # Looked up by the decoded request's class: one dict lookup a request, on the add path too.
        self._by_class: dict[type, OpHandler] = {OPERATIONS[op].request: h for op, h in self.handlers.items()}
        self._by_class[BadMessage] = OpHandler(self._bad_message)

    def forget(self, ledger_id: int) -> None:
        """A deleted ledger: drop its fence sequence; its long polls answer NO_LEDGER."""
        self.control.forget(ledger_id)
        self.context.lac_waiters.moved(ledger_id)

    def handle(
        self,
        requests: Sequence[Request | BadMessage],
        access: Access = ANONYMOUS,
        *,
        answer_limit: int = 0,
        time_limit_s: float = 0.0,
    ) -> ResponseBatch:
        """Serve one frame's requests from a connection with ``access``; never raises for bad
        input or a failing disk.

        With ``answer_limit``, stop once the answers made pass that many bytes (a frame of
        many reads of large entries); with ``time_limit_s``, once serving took that long (a
        frame of hundreds of adds to ledgers whose indexes are not open: the event loop is
        held for as long as this runs). ``batch.requests`` is what was served, and the
        server serves the rest after it (after other tasks had their turn)."""
        batch = ResponseBatch(requests=requests, received=trio.current_time(), access=access)
        i = 0
        n = len(requests)
        answer_bytes = 0
        stop_at = time.perf_counter() + time_limit_s if time_limit_s else math.inf
        by_class = self._by_class
        while i < n:
            req = requests[i]
            handler = by_class[type(req)]
            j = i + 1
            served: Any = req
            if handler.runs:
                kind = type(req)
                ledger_id = req.ledger_id  # type: ignore[union-attr]
                while j < n and type(requests[j]) is kind and requests[j].ledger_id == ledger_id:  # type: ignore[union-attr]
                    j += 1
                served = requests[i:j]
            parts = len(batch.parts)
            try:
                handler.serve(served, batch)
            except Exception as e:
                # Storage failures are answered where they are expected (adds, reads); this
                # is the net under the rest (e.g. a full disk under a fence's new index):
                # the requests get IO_ERROR, the connection and the bookie go on.
                refusal = self.context.refusal_for(e, type(req).__name__)
                if refusal is None:
                    log.exception("serving %s failed", type(req).__name__)
                status, message = refusal or (Status.IO_ERROR, f"this bookie failed to serve the request: {e}")
                for r in requests[i:j]:
                    batch.parts.append(encode_error_response(r.request_id, status, message))
            i = j
            if answer_limit:
                answer_bytes += sum(map(len, islice(batch.parts, parts, None)))  # a part per entry read: in C
                if answer_bytes >= answer_limit and i < n:
                    batch.requests = requests[:i]
                    break
            if i < n and time.perf_counter() >= stop_at:
                batch.requests = requests[:i]
                break
        self.counters.requests += i
        return batch

    def _add_lost(self, req: AddRequest | AddBatchRequest, status: Status, message: str) -> list[Buffer]:
        return [self.adds.refused(req, status, message)]

    def _bookie_info(self, req: BookieInfoRequest, batch: ResponseBatch) -> None:
        batch.parts.append(encode_bookie_info_response(req.request_id, self.info()))

    def _late_auth(self, req: AuthRequest, batch: ResponseBatch) -> None:
        # After another request of its frame (the server's AuthGate answers an AUTH that
        # starts a frame): the connection's access stays what it is.
        message = "AUTH must start a frame: this one was not used; the connection's access is unchanged"
        batch.parts.append(encode_auth_response(req.request_id, Status.BAD_REQUEST, message))

    def _late_features(self, req: FeaturesRequest, batch: ResponseBatch) -> None:
        # Not right after an AUTH that starts its frame (see AuthGate): not used.
        message = "FEATURES must follow the AUTH that starts a frame: this one was not used"
        batch.parts.append(encode_error_response(req.request_id, Status.BAD_REQUEST, message))

    def _bad_message(self, req: BadMessage, batch: ResponseBatch) -> None:
        self.counters.bad_requests += 1
        batch.parts.append(encode_error_response(req.request_id, Status.BAD_REQUEST, req.reason))

    async def durable_answers(self, batches: Sequence[ResponseBatch], *, again: bool = True) -> list[Buffer]:
        """Wait until what these batches' answers acknowledge is durable -- their journal
        records and, for large entries written once, the entry-log fsync -- and return the
        answers to send, in order: a batch whose records were lost answers with errors
        (:meth:`lost_write_responses`; with ``again``, its fences and recovery adds are
        served once more first, into the reserved space). Never raises for a failed write."""
        journal = self.journal
        wait = 0
        sync_storage = False
        for b in batches:
            if b.wait_seq > wait:
                wait = b.wait_seq
            sync_storage = sync_storage or b.sync_storage
        lost: JournalWriteError | None = None
        unsynced: Exception | None = None
        if sync_storage:
            lost, unsynced = await self._durable_and_synced(wait)
        elif wait > journal.durable_seq:
            try:
                await journal.wait_durable(wait)
            except JournalWriteError as e:
                lost = e  # settled up to ``wait``: each batch is checked below
        parts: list[Buffer] = []
        for b in batches:
            # A batch's records were appended together, so they were written (or lost)
            # together: its highest sequence tells for all of them.
            if b.wait_seq and journal.is_lost(b.wait_seq):
                error = lost or JournalWriteError(None, f"journal record {b.wait_seq} was not written")
                parts.extend(await self.lost_write_responses(b, error, again=again))
            elif b.sync_storage and unsynced is not None:
                parts.extend(await self.lost_write_responses(b, unsynced, "the entry-log fsync", again=again))
            else:
                parts.extend(b.parts)
        return parts

    async def _durable_and_synced(self, wait: int) -> tuple[JournalWriteError | None, Exception | None]:
        """Wait for the journal up to ``wait`` and, at the same time, for the entry-log fsync
        that large entries written once need (see :mod:`bkframe.bookie.durability.write_once`); return what failed."""
        journal = self.journal
        lost: JournalWriteError | None = None
        unsynced: Exception | None = None

        async def sync_storage() -> None:
            nonlocal unsynced
            try:
                await self.adds.sync_storage()
            except Exception as e:  # noqa: BLE001 - answered per batch by the caller
                unsynced = e

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sync_storage)
            if wait > journal.durable_seq:
                try:
                    await journal.wait_durable(wait)
                except JournalWriteError as e:
                    lost = e
        return lost, unsynced

    def answered(self, batches: Sequence[ResponseBatch]) -> None:
        """The server sent these batches' answers: observe their request latencies."""
        now = trio.current_time()
        for b in batches:
            for histogram in b.timed:
                histogram.observe(now - b.received)

    async def lost_write_responses(
        self, batch: ResponseBatch, error: BaseException, what: str = "the journal write", *, again: bool = True
    ) -> list[Buffer]:
        """Answers for a frame whose journal records were lost (a write found no space).

        Whatever needed those records to be durable (adds, explicit LACs, fences) gets an
        error; nothing of it may be acknowledged. The rest of the frame (plain reads, LAC
        reads, info, ...) journals nothing and is served again. SYNC and long polls answer
        on their own. With ``again``, when the write found no space, the frame's read-only
        duties -- fences and recovery adds, which a full bookie must still take so that its
        ledgers can be closed -- are served once more, into the reserved space the failed
        write released (:mod:`bkframe.bookie.runtime.space_reserve`); the answers of that
        second try are sent.
        """
        status, message = self.context.lost_write(error, what)
        by_class = self._by_class
        duties: list[Request | BadMessage] = []
        if again and is_disk_full(error):
            duties = [req for req in batch.requests if by_class[type(req)].duty(req)]
        parts: list[Buffer] = []
        redo: list[Request | BadMessage] = []
        for req in batch.requests:
            handler = by_class[type(req)]
            if duties and handler.duty(req):
                continue
            if handler.refuse is not None and handler.journaled(req):
                parts.extend(handler.refuse(req, status, message))
            elif not handler.own_answer(req):
                redo.append(req)
        if redo:
            parts.extend(self.handle(redo, batch.access).parts)
        if duties:
            self.counters.duties_served_again += len(duties)
            second = self.handle(duties, batch.access)
            parts.extend(await self.durable_answers([second], again=False))
            for deferred in second.deferred:  # a fence of a ledger new here waits for its key check
                parts.append(await deferred())
        return parts


def _subscription_call(req: SubRequest, batch: ResponseBatch) -> None:
    batch.subscription_calls.append(req)  # the server hands it to the connection's calls


def _fence_lost(req: ReadRequest, status: Status, message: str) -> list[Buffer]:
    # IO_ERROR whatever ``status`` says (READ_ONLY for a full disk): a read-only bookie still
    # fences, so the reader asks again rather than moving on.
    return encode_read_response(req.request_id, Status.IO_ERROR, req.ledger_id, req.entry_id, -1, message.encode())


def _write_lac_lost(req: WriteLacRequest, status: Status, message: str) -> list[Buffer]:
    return [encode_write_lac_response(req.request_id, status, req.ledger_id, -1, message)]
