"""An offloaded segment's ledger deleted from the bookies, after the deletion lag.

Two steps, in this order:

1. **unmark**: ``on_bookies`` cleared on the segment's
   :class:`~bkframe.tiering.offload_record.Offload`, by compare-and-set on the record
   that holds it (the log record or a chunk record: :mod:`.segment_cas`). A reader that
   reads the record from then on reads the segment from its object only: it never falls
   back to the ledger, so it cannot fall back to one that is about to go;
2. **delete** the ledger (its metadata; the bookies' garbage collectors then reclaim its
   entries).

A crash between the two leaves a segment marked off the bookies whose ledger is still
there: a later pass finds such ledgers (``on_bookies`` false, the ledger still in the
metadata store) and deletes them (:func:`delete_ledger` of a ledger already gone is no
error). The other order would leave, after a crash, a record that sends readers to a
deleted ledger. Nothing is lost either way: the object was verified against every entry of
the ledger before the offload was recorded, and a reader of such a segment reads it from
the tier (or fails with a clear error while the tier fails: never a gap). Readers that
read the record *before* step 1 may still turn to the ledger: the deletion lag
(``offload_deletion_lag_s``) is what gives them time to finish.
"""

from __future__ import annotations

from collections.abc import Awaitable

import attrs

from bkframe.client.logs.ledgers import LedgerClient
from bkframe.client.logs.model import Segment
from bkframe.client.logs.records import LogRecords
from bkframe.errors import NoSuchLedgerError
from bkframe.tiering.segment_cas import change_segment


async def unmark(records: LogRecords, name: str, uid: str, seg: Segment) -> Segment | None:
    """Step 1: the segment recorded as off the bookies (as stored), or None if it left the log."""

    def off(current: Segment) -> Segment | None:
        o = current.offload
        if o is None or not o.on_bookies:
            return None
        return attrs.evolve(current, offload=attrs.evolve(o, on_bookies=False))

    return await change_segment(records, name, uid, seg.number, seg.ledger_id, off)


async def delete_ledger(ledgers: LedgerClient, ledger_id: int) -> bool:
    """Step 2: True if the ledger was there and is deleted, False if it was gone already."""
    return await _found(ledgers.delete_ledger(ledger_id))


async def ledger_exists(ledgers: LedgerClient, ledger_id: int) -> bool:
    """Whether a segment marked off the bookies still has its ledger (a crash after step 1)."""
    return await _found(ledgers.ledger_metadata(ledger_id))


async def _found(call: Awaitable[object]) -> bool:
    """Whether ``call`` found its ledger (else it raised NoSuchLedgerError)."""
    try:
        await call
    except NoSuchLedgerError:
        return False
    return True
