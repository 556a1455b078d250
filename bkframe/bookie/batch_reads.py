"""READ_BATCH: many consecutive entries of one ledger in one answer.

A reader of a range (a Spark task, a tailing consumer catching up, recovery) otherwise sends
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
from typing import TYPE_CHECKING

from bkframe.core.interfaces.ledger_storage import RangeReadStorage
from bkframe.proto.codes import Status
from bkframe.proto.ops.read_batch import ReadBatchRequest, encode_read_batch_response

if TYPE_CHECKING:
    from bkframe.core.counters import Counters
    from bkframe.core.interfaces import Buffer
    from bkframe.core.interfaces.ledger_storage import LedgerStorage

log = logging.getLogger("bkframe.bookie")


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
