"""READ (fencing reads included), READ_BATCH, READ_LAC (and its long poll) and LIST_ENTRIES.

A ledger in limbo (BP-46: this bookie may have lost writes in a crash) never answers an
explicit negative: what it lacks is UNKNOWN, not NO_ENTRY.
"""

from __future__ import annotations

import logging

import numpy as np

from bkframe import proto as p
from bkframe.bookie.batch_reads import read_batch
from bkframe.bookie.context import BookieContext
from bkframe.bookie.ledger_control import LedgerControl
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.disk_full import is_disk_full
from bkframe.core.interfaces import Buffer, LedgerState
from bkframe.core.ledger_keys import keys_equal

log = logging.getLogger("bkframe.bookie")


class Reads:
    """One bookie's reads; a fencing read fences through ``control``."""

    def __init__(self, context: BookieContext, control: LedgerControl) -> None:
        self.context = context
        self.control = control
        self.storage = context.storage
        self.counters = context.counters

    def read(self, req: p.ReadRequest, batch: ResponseBatch) -> None:
        storage = self.storage
        ledger_id = req.ledger_id
        state = storage.ledger_state(ledger_id)

        def reply(status: p.Status, entry_id: int, payload: Buffer) -> None:
            lac = state.lac if state is not None else -1
            batch.parts.extend(p.encode_read_response(req.request_id, status, ledger_id, entry_id, lac, payload))

        if req.fence:
            if not req.master_key:
                reply(p.Status.BAD_REQUEST, req.entry_id, b"a fencing read must carry the ledger's master key")
                return
            if state is None and ledger_id in self.context.tombstones:
                reply(p.Status.NO_LEDGER, req.entry_id, f"ledger {ledger_id} was deleted".encode())
                return
            if state is None:
                # Fence even a ledger this bookie never saw, so the old writer cannot
                # start writing to it after recovery has read around it.
                try:
                    state = storage.ensure_ledger(ledger_id, req.master_key, 0)
                except OSError as e:
                    if not is_disk_full(e):
                        raise
                    message = self.context.no_space(e, f"to fence ledger {ledger_id}")[1]
                    reply(p.Status.IO_ERROR, req.entry_id, message.encode())
                    return
                self.context.journal_master_key(ledger_id, state, batch)
        if state is None:
            reply(p.Status.NO_LEDGER, req.entry_id, f"ledger {ledger_id} is not on this bookie".encode())
            return
        if req.master_key and state.master_key and not keys_equal(req.master_key, state.master_key):
            reply(p.Status.UNAUTHORIZED, req.entry_id, f"wrong master key for ledger {ledger_id}".encode())
            return
        if req.fence:
            self.control.fence(ledger_id, state, batch)
        entry_id = req.entry_id
        # In limbo this bookie may have lost what it acknowledged: never an explicit negative.
        missing = p.Status.UNKNOWN if state.limbo else p.Status.NO_ENTRY
        if entry_id == p.LAST_ENTRY:
            entry_id = storage.last_entry_id(ledger_id)
            if entry_id < 0:
                reply(missing, p.LAST_ENTRY, _missing(state, f"ledger {ledger_id} has no entries here"))
                return
        try:
            data = storage.get_entry(ledger_id, entry_id)
        except Exception as e:  # noqa: BLE001 - the storage names the file and offset; the bookie keeps serving
            if not state.limbo:
                log.error("read of entry %d:%d failed: %s", ledger_id, entry_id, e)
                reply(p.Status.IO_ERROR, entry_id, f"reading entry {ledger_id}:{entry_id} failed here: {e}".encode())
                return
            data = None  # a torn write from before the crash; the repair task replaces it
        if data is None:
            reply(missing, entry_id, _missing(state, f"entry {ledger_id}:{entry_id} is not on this bookie"))
            return
        self.counters.entries_read += 1
        self.context.timed(batch, self.counters.read_latency, state.ledger_type)
        reply(p.Status.OK, entry_id, data)

    def read_batch(self, req: p.ReadBatchRequest, batch: ResponseBatch) -> None:
        """READ_BATCH: see :mod:`.batch_reads`."""
        batch.parts.extend(read_batch(self.storage, self.counters, req))
        if (state := self.storage.ledger_state(req.ledger_id)) is not None:
            self.context.timed(batch, self.counters.read_latency, state.ledger_type)

    def list_entries(self, req: p.ListEntriesRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                p.encode_list_entries_response(
                    req.request_id, p.Status.NO_LEDGER, req.ledger_id, message=f"ledger {req.ledger_id} is not here"
                )
            )
            return
        last = min(req.last, req.first + p.MAX_LIST_SPAN - 1)
        held = np.asarray(self.storage.held_entries(req.ledger_id, req.first, last), dtype=np.int64)
        # Runs of consecutive ids: split where the step is not 1.
        breaks = np.flatnonzero(np.diff(held) != 1) + 1 if held.size else np.empty(0, dtype=np.int64)
        starts = np.concatenate(([0], breaks)) if held.size else breaks
        ends = np.concatenate((breaks - 1, [held.size - 1])) if held.size else breaks
        runs = list(zip(held[starts].tolist(), held[ends].tolist()))
        batch.parts.append(
            p.encode_list_entries_response(
                req.request_id,
                p.Status.OK,
                req.ledger_id,
                limbo=state.limbo,
                next_first=last + 1 if last < req.last else -1,
                runs=runs,
            )
        )

    def read_lac(self, req: p.ReadLacRequest, batch: ResponseBatch) -> None:
        state = self.storage.ledger_state(req.ledger_id)
        if state is None:
            batch.parts.append(
                p.encode_read_lac_response(
                    req.request_id, p.Status.NO_LEDGER, req.ledger_id, -1, -1, f"ledger {req.ledger_id} is not here"
                )
            )
            return
        if req.previous_lac is not None and state.lac <= req.previous_lac:
            batch.long_polls.append(req)  # the server registers it (see .lac_waiters)
            return
        last = self.storage.last_entry_id(req.ledger_id)
        batch.parts.append(p.encode_read_lac_response(req.request_id, p.Status.OK, req.ledger_id, state.lac, last))


def _missing(state: LedgerState, what: str) -> bytes:
    if state.limbo:
        return (
            f"{what}, but ledger {state.ledger_id} is in limbo here (this bookie may have lost "
            f"writes in a crash and is repairing it), so that says nothing; ask another replica"
        ).encode()
    return what.encode()
