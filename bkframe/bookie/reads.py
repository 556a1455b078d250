"""READ (fencing reads included), READ_BATCH, READ_LAC (and its long poll) and LIST_ENTRIES.

A ledger in limbo (BP-46: this bookie may have lost writes in a crash) never answers an
explicit negative: what it lacks is UNKNOWN, not NO_ENTRY.

READ_BATCH (:func:`read_batch`) answers many consecutive entries of one ledger at once. A
reader of a range (a Spark task, a tailing consumer catching up, recovery) otherwise sends
one READ per entry and gets one answer per entry, and both ends pay their per-message work
for each. Here the bookie walks ``first..last`` and answers with the entries it holds, in
order, up to the first it lacks or about ``max_bytes``. It never answers "missing" for an
entry: it just stops, and the client reads what is left one entry at a time, where every
case (limbo, torn records, I/O errors, missing entries) already has its precise answer.
A storage that reads ranges (:class:`~bkframe.core.interfaces.ledger_storage.RangeReadStorage`, as the
default one does) answers with one read per run of adjacent records instead of one per entry.
"""

from __future__ import annotations

import logging
from functools import partial

import numpy as np

from bkframe.bookie.context import BookieContext
from bkframe.bookie.key_check import TIMEOUT_S, KeyCheckPending, Verdict
from bkframe.bookie.ledger_control import LedgerControl
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.journal import JournalWriteError
from bkframe.core.interfaces.ledger_storage import LedgerState, LedgerStorage, RangeReadStorage
from bkframe.core.ledger_keys import keys_equal
from bkframe.proto.codes import LAST_ENTRY, MAX_LIST_SPAN, Status
from bkframe.proto.ops.list_entries import ListEntriesRequest, encode_list_entries_response
from bkframe.proto.ops.read import ReadRequest, encode_read_response
from bkframe.proto.ops.read_batch import ReadBatchRequest, encode_read_batch_response
from bkframe.proto.ops.read_lac import ReadLacRequest, encode_read_lac_response
from bkframe.storage_kit.disk_full import is_disk_full

log = logging.getLogger("bkframe.bookie")


class Reads:
    """One bookie's reads; a fencing read fences through ``control``."""

    def __init__(self, context: BookieContext, control: LedgerControl) -> None:
        self.context = context
        self.control = control
        self.storage = context.storage
        self.counters = context.counters

    def read(self, req: ReadRequest, batch: ResponseBatch) -> None:
        """READ: the entry, to a connection with the ledger's key or a principal that reads
        every ledger (:mod:`bkframe.bookie.access`); a fencing read fences the ledger first."""
        ledger_id = req.ledger_id
        state = self.storage.ledger_state(ledger_id)
        if req.fence and not req.master_key:
            self._reply(req, state, batch, Status.BAD_REQUEST, b"a fencing read must carry the ledger's master key")
            return
        if state is None and (not req.fence or ledger_id in self.context.tombstones or self.context.key_check is None):
            # Not held: nothing to read, and no fence without the metadata's word for the ledger.
            self._reply(req, state, batch, Status.NO_LEDGER, _not_here(ledger_id, req.fence, self.context).encode())
            return
        if state is not None and state.master_key and req.master_key:
            if not keys_equal(req.master_key, state.master_key):
                self._reply(req, state, batch, Status.UNAUTHORIZED, f"wrong master key for ledger {ledger_id}".encode())
                return
            self._serve_read(req, state, batch)
            return
        if not req.fence and batch.access.reads_without_key:
            assert state is not None
            self._serve_read(req, state, batch)
            return
        if not req.master_key:
            self._reply(req, state, batch, Status.UNAUTHORIZED, _needs_key(ledger_id, batch.access.principal).encode())
            return
        # A key for a ledger held without one, or a fence of one not held: the metadata decides.
        check = self.context.key_check
        if check is None:
            # No metadata store to ask (a standalone bookie): as for adds, the first key it
            # sees for a ledger is the ledger's (docs/security.md).
            self._read_vouched(req, Verdict.MATCH, batch)
            return
        verdict = check.cached(ledger_id, req.master_key)
        if verdict is None:
            batch.deferred.append(partial(self._read_after_key_check, req, batch.received, batch.access.try_again))
            return
        self._read_vouched(req, verdict, batch)

    def _reply(
        self, req: ReadRequest, state: LedgerState | None, batch: ResponseBatch, status: Status, payload: Buffer,
        entry_id: int | None = None,
    ) -> None:
        lac = state.lac if state is not None else -1
        entry = req.entry_id if entry_id is None else entry_id
        batch.parts.extend(encode_read_response(req.request_id, status, req.ledger_id, entry, lac, payload))

    def _read_vouched(self, req: ReadRequest, verdict: Verdict, batch: ResponseBatch) -> None:
        """Serve a read once the metadata said whether its key is the ledger's: a fence of a
        ledger not held makes it here, fenced; a ledger held without a key adopts this one."""
        ledger_id = req.ledger_id
        state = self.storage.ledger_state(ledger_id)
        if verdict is not Verdict.MATCH:
            status, message = (
                (Status.NO_LEDGER, f"ledger {ledger_id} does not exist in the metadata store")
                if verdict is Verdict.NO_LEDGER
                else (Status.UNAUTHORIZED, f"wrong master key for ledger {ledger_id}: it does not match its metadata")
            )
            self._reply(req, state, batch, status, message.encode())
            return
        if state is None and not req.fence:
            self._reply(req, state, batch, Status.NO_LEDGER, _not_here(ledger_id, False, self.context).encode())
            return
        if state is None and ledger_id in self.context.tombstones:
            self._reply(req, state, batch, Status.NO_LEDGER, f"ledger {ledger_id} was deleted".encode())
            return
        if state is None or not state.master_key:
            # Fence even a ledger this bookie never saw (the metadata knows it), so the old
            # writer cannot start writing to it after recovery has read around it.
            ledger_type = state.ledger_type if state else 0
            try:
                # A full bookie still fences: into its reserved space if need be.
                state = self.context.mode.again_if_released(
                    partial(self.storage.ensure_ledger, ledger_id, req.master_key, ledger_type)
                )
            except OSError as e:
                if not is_disk_full(e):
                    raise
                message = self.context.no_space(e, f"to fence ledger {ledger_id}")[1]
                self._reply(req, state, batch, Status.IO_ERROR, message.encode())
                return
            self.context.journal_master_key(ledger_id, state, batch)
        elif not keys_equal(req.master_key, state.master_key):
            self._reply(req, state, batch, Status.UNAUTHORIZED, f"wrong master key for ledger {ledger_id}".encode())
            return
        self._serve_read(req, state, batch)

    async def _read_after_key_check(self, req: ReadRequest, received: float, try_again: bool) -> bytes:
        """A read whose key the metadata store must vouch for (see :meth:`read`); TRY_AGAIN
        to a client that understands it once the check took ``key_check_wait_s``."""
        check = self.context.key_check
        assert check is not None
        sub = ResponseBatch()
        try:
            verdict = await check.check(req.ledger_id, req.master_key, wait_s=None if try_again else TIMEOUT_S)
        except KeyCheckPending as e:
            self.counters.key_checks_pending += 1
            self._reply(req, None, sub, Status.TRY_AGAIN, f"{e}: send this read again (the check goes on here)".encode())
            return b"".join(bytes(part) for part in sub.parts)
        except Exception as e:  # noqa: BLE001 - the store cannot say: nothing is made; the client retries
            log.warning("cannot check the master key of ledger %d: %s", req.ledger_id, e)
            message = f"this bookie cannot check the master key of ledger {req.ledger_id} now ({e!r}); retry"
            self._reply(req, None, sub, Status.IO_ERROR, message.encode())
            return b"".join(bytes(part) for part in sub.parts)
        self._read_vouched(req, verdict, sub)
        if sub.wait_seq > self.context.journal.durable_seq:
            try:
                await self.context.journal.wait_durable(sub.wait_seq)  # the fence, and the adopted key
            except JournalWriteError as e:
                status, message = self.context.lost_write(e, "the fence's journal write")
                return b"".join(encode_read_response(req.request_id, status, req.ledger_id, req.entry_id, -1, message.encode()))
        sub.received = received
        self.context.observe(sub)
        return b"".join(bytes(part) for part in sub.parts)

    def _serve_read(self, req: ReadRequest, state: LedgerState, batch: ResponseBatch) -> None:
        """The entry (the key, or the connection, is allowed); a fencing read fences first."""
        storage = self.storage
        ledger_id = req.ledger_id

        def reply(status: Status, entry_id: int, payload: Buffer) -> None:
            self._reply(req, state, batch, status, payload, entry_id)

        if req.fence:
            self.control.fence(ledger_id, state, batch)
        entry_id = req.entry_id
        # In limbo this bookie may have lost what it acknowledged: never an explicit negative.
        missing = Status.UNKNOWN if state.limbo else Status.NO_ENTRY
        if entry_id == LAST_ENTRY:
            entry_id = storage.last_entry_id(ledger_id)
            if entry_id < 0:
                reply(missing, LAST_ENTRY, _missing(state, f"ledger {ledger_id} has no entries here"))
                return
        try:
            data = storage.get_entry(ledger_id, entry_id)
        except Exception as e:  # noqa: BLE001 - the storage names the file and offset; the bookie keeps serving
            refusal = self.context.refusal_for(e, f"entry {ledger_id}:{entry_id}")
            if refusal is not None:
                reply(refusal[0], entry_id, refusal[1].encode())
                return
            if not state.limbo:
                log.error("read of entry %d:%d failed: %s", ledger_id, entry_id, e)
                reply(Status.IO_ERROR, entry_id, f"reading entry {ledger_id}:{entry_id} failed here: {e}".encode())
                return
            data = None  # a torn write from before the crash; the repair task replaces it
        if data is None:
            reply(missing, entry_id, _missing(state, f"entry {ledger_id}:{entry_id} is not on this bookie"))
            return
        self.counters.entries_read += 1
        self.context.timed(batch, self.counters.read_latency, state.ledger_type)
        reply(Status.OK, entry_id, data)

    def read_batch(self, req: ReadBatchRequest, batch: ResponseBatch) -> None:
        """READ_BATCH (see :mod:`bkframe.bookie.reads`): as READ, only with the ledger's key or a
        principal that reads every ledger."""
        state = self.storage.ledger_state(req.ledger_id)
        if state is not None and not batch.access.reads_without_key:
            refusal = None
            if not req.master_key:
                refusal = _needs_key(req.ledger_id, batch.access.principal)
            elif not state.master_key:
                # Held without a key (a copy): its key is checked by READ, one entry at a time.
                refusal = f"this bookie holds no master key for ledger {req.ledger_id}: read its entries one by one"
            elif not keys_equal(req.master_key, state.master_key):
                refusal = f"wrong master key for ledger {req.ledger_id}"
            if refusal is not None:
                batch.parts.extend(
                    encode_read_batch_response(req.request_id, Status.UNAUTHORIZED, req.ledger_id, -1, message=refusal)
                )
                return
        batch.parts.extend(read_batch(self.storage, self.counters, req))
        if state is not None:
            self.context.timed(batch, self.counters.read_latency, state.ledger_type)

    def list_entries(self, req: ListEntriesRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                encode_list_entries_response(
                    req.request_id, Status.NO_LEDGER, req.ledger_id, message=f"ledger {req.ledger_id} is not here"
                )
            )
            return
        last = min(req.last, req.first + MAX_LIST_SPAN - 1)
        held = np.asarray(self.storage.held_entries(req.ledger_id, req.first, last), dtype=np.int64)
        # Runs of consecutive ids: split where the step is not 1.
        breaks = np.flatnonzero(np.diff(held) != 1) + 1 if held.size else np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], breaks)) if held.size else breaks
        ends = np.concatenate((breaks - 1, [held.size - 1])) if held.size else breaks
        runs = list(zip(held[starts].tolist(), held[ends].tolist()))
        batch.parts.append(
            encode_list_entries_response(
                req.request_id,
                Status.OK,
                req.ledger_id,
                limbo=state.limbo,
                next_first=last + 1 if last < req.last else -1,
                runs=runs,
            )
        )

    def read_lac(self, req: ReadLacRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                encode_read_lac_response(
                    req.request_id, Status.NO_LEDGER, req.ledger_id, -1, -1, f"ledger {req.ledger_id} is not here"
                )
            )
            return
        if req.previous_lac is not None and state.lac <= req.previous_lac:
            batch.long_polls.append(req)  # the server registers it (see .lac_waiters)
            return
        last = self.storage.last_entry_id(req.ledger_id)
        batch.parts.append(encode_read_lac_response(req.request_id, Status.OK, req.ledger_id, state.lac, last))


def _not_here(ledger_id: int, fence: bool, context: BookieContext) -> str:
    if ledger_id in context.tombstones:
        return f"ledger {ledger_id} was deleted"
    if fence and context.key_check is None:
        return f"ledger {ledger_id} is not on this bookie (without a metadata store it fences only ledgers it holds)"
    return f"ledger {ledger_id} is not on this bookie"


def _needs_key(ledger_id: int, principal: str) -> str:
    return (
        f"reading ledger {ledger_id} needs its master key (open the ledger with its password), or a principal "
        f"allowed to read every ledger ([auth] readers); this connection is {principal!r}"
    )


def _missing(state: LedgerState, what: str) -> bytes:
    if state.limbo:
        return (
            f"{what}, but ledger {state.ledger_id} is in limbo here (this bookie may have lost "
            f"writes in a crash and is repairing it), so that says nothing; ask another replica"
        ).encode()
    return what.encode()


def read_batch(storage: LedgerStorage, counters: Counters, req: ReadBatchRequest) -> list[Buffer]:
    """The response parts for ``req``."""
    state = storage.ledger_state(req.ledger_id)
    if state is None:
        return encode_read_batch_response(
            req.request_id, Status.NO_LEDGER, req.ledger_id, -1, message=f"ledger {req.ledger_id} is not on this bookie"
        )
    if isinstance(storage, RangeReadStorage):
        got_ids, got = storage.get_entries(req.ledger_id, req.first, req.last, req.step, req.max_bytes)
        counters.entries_read += len(got)
        counters.entries_read_in_batches += len(got)
        return encode_read_batch_response(req.request_id, Status.OK, req.ledger_id, state.lac, got_ids, got)
    ids: list[int] = []
    entries: list[Buffer] = []
    size = 0
    for entry_id in range(req.first, req.last + 1, req.step):
        try:
            data = storage.get_entry(req.ledger_id, entry_id)
        except Exception as e:  # noqa: BLE001 - the client reads this entry alone and gets the precise error
            log.debug("batch read of %d:%d stopped: %s", req.ledger_id, entry_id, e)
            break
        if data is None or (ids and size + len(data) > req.max_bytes):
            break
        ids.append(entry_id)
        entries.append(data)
        size += len(data)
    counters.entries_read += len(ids)
    counters.entries_read_in_batches += len(ids)
    return encode_read_batch_response(req.request_id, Status.OK, req.ledger_id, state.lac, ids, entries)
