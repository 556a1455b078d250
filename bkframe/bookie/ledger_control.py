"""Ledger control: fencing (for recovery's fencing reads), WRITE_LAC (an explicit LAC) and
WRITE_CLOSE (BP-32: the writer is done).
"""

from __future__ import annotations

from bkframe.bookie.context import BookieContext
from bkframe.bookie.durability import journal_records as jr
from bkframe.bookie.response_batch import ResponseBatch
from bkframe.core.interfaces.ledger_storage import LedgerState
from bkframe.core.ledger_keys import keys_equal
from bkframe.proto.codes import Status
from bkframe.proto.ops.write_close import WriteCloseRequest, encode_write_close_response
from bkframe.proto.ops.write_lac import WriteLacRequest, encode_write_lac_response


class LedgerControl:
    def __init__(self, context: BookieContext) -> None:
        self.context = context
        self.journal = context.journal
        self.storage = context.storage
        self.counters = context.counters
        #: Journal sequence of each ledger's fence record, so a repeated fence waits for it.
        self._fence_seq: dict[int, int] = {}

    def forget(self, ledger_id: int) -> None:
        """A deleted ledger: drop its fence sequence."""
        self._fence_seq.pop(ledger_id, None)

    def fence(self, ledger_id: int, state: LedgerState, batch: ResponseBatch) -> None:
        """Fence the ledger (a fencing read whose key matched); the batch's answers wait until
        the fence is durable."""
        if self.journal.is_lost(self._fence_seq.get(ledger_id, 0)):
            # Its record found no space on the disk: into the journal again.
            self._fence_seq[ledger_id] = self.journal.append(jr.fence_record(ledger_id), ledger_id)
        if self.storage.set_fenced(ledger_id):
            self._fence_seq[ledger_id] = self.journal.append(jr.fence_record(ledger_id), ledger_id)
            self.counters.fenced_ledgers += 1
            if not state.write_closed:
                # BP-32: a fenced ledger's writer is done; only recovery adds may follow.
                self.storage.set_write_closed(ledger_id)
                self.counters.write_closed_ledgers += 1
        # A fence is acknowledged only once durable, also when an earlier request set it.
        batch.wait_seq = max(batch.wait_seq, self._fence_seq.get(ledger_id, 0))

    def write_lac(self, req: WriteLacRequest, batch: ResponseBatch) -> None:
        """Explicit LAC: journaled and synced for every ledger type (BYPASS ones included)."""
        state = self.storage.ledger_state(req.ledger_id)

        def reply(status: Status, message: str = "") -> None:
            lac = state.lac if state is not None else -1
            batch.parts.append(encode_write_lac_response(req.request_id, status, req.ledger_id, lac, message))

        if state is None:
            reply(Status.NO_LEDGER, f"ledger {req.ledger_id} is not on this bookie; add an entry first")
            return
        if not keys_equal(state.master_key, req.master_key):
            reply(Status.UNAUTHORIZED, f"wrong master key for ledger {req.ledger_id}")
            return
        if state.fenced:
            reply(Status.FENCED, f"ledger {req.ledger_id} is fenced")
            return
        if self.context.mode.read_only:
            reply(Status.READ_ONLY, self.context.read_only_refusal("explicit LACs"))
            return
        if req.lac > state.lac:
            self.storage.set_lac(req.ledger_id, req.lac)
            batch.wait_seq = max(batch.wait_seq, self.journal.append(jr.lac_record(req.ledger_id, req.lac), req.ledger_id))
            self.context.lac_waiters.moved(req.ledger_id)
        reply(Status.OK)

    def write_close(self, req: WriteCloseRequest, batch: ResponseBatch) -> None:
        """BP-32: advisory, so nothing is journaled; the storage keeps the flag."""
        state = self.storage.ledger_state(req.ledger_id)
        status, message = Status.OK, ""
        if state is None:
            status, message = Status.NO_LEDGER, f"ledger {req.ledger_id} is not on this bookie"
        elif not keys_equal(state.master_key, req.master_key):
            status, message = Status.UNAUTHORIZED, f"wrong master key for ledger {req.ledger_id}"
        elif not state.write_closed:
            self.storage.set_write_closed(req.ledger_id)
            self.counters.write_closed_ledgers += 1
        batch.parts.append(encode_write_close_response(req.request_id, status, req.ledger_id, message))
