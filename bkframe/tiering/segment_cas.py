"""Changing one closed segment of a log by compare-and-set, wherever it is stored.

A closed segment is in the log record, or -- once it is old -- in a chunk record of its own
(:mod:`bkframe.client.logs.chunks`). What tiered storage changes on it (its
:class:`~bkframe.tiering.offload_record.Offload` recorded, then ``on_bookies`` cleared
once its ledger is to go) is a compare-and-set on the record that holds it, changing
nothing else, the change computed from that record *as read for the CAS* -- never from a
cached copy, so that two changes never undo each other (an offload recorded again over a
cleared ``on_bookies`` would send readers to a deleted ledger).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from bkframe.client.logs import chunks
from bkframe.client.logs.model import Segment
from bkframe.client.logs.records import LogRecords
from bkframe.errors import BadVersionError, MetadataError, NoSuchLogError

#: ``change(current)``: the segment to store instead, or None when there is nothing to do.
Change = Callable[[Segment], Segment | None]


async def change_segment(records: LogRecords, name: str, uid: str, number: int, ledger_id: int, change: Change) -> Segment | None:
    """Store ``change(current)`` over segment ``number`` of log ``name`` (uid ``uid``, the
    segment of ledger ``ledger_id``) by CAS on the record that holds it, re-reading and
    retrying on a conflict. Returns the segment as stored (``current`` itself when
    ``change`` had nothing to do), or None if it left the log (trimmed, or the log deleted
    and made again)."""
    while True:
        try:
            record = await records.read(name)
        except NoSuchLogError:
            return None
        if record.uid != uid or number < record.first_segment:
            return None
        current = record.segment(number)
        if current is not None:
            if current.ledger_id != ledger_id:
                return None
            new = change(current)
            if new is None:
                return current
            try:
                await records.cas(record.replace_segment(new), record.version)
            except BadVersionError:
                continue
            return new
        chunk = next((c for c in record.chunks if c.first <= number <= c.last), None)
        if chunk is None:
            return None
        stored = await records.store.read_cursor(name, chunks.record_name(chunk.key))
        if stored is None:
            return None
        try:
            held = chunks.deserialize(record, attrs.evolve(chunk, first=chunk.key), stored.value)
        except (ValueError, TypeError, KeyError) as e:
            raise MetadataError(f"log {name!r}: chunk record {chunk.key} does not parse: {e}") from None
        current = next((s for s in held if s.number == number), None)
        if current is None or current.ledger_id != ledger_id:
            return None
        new = change(current)
        if new is None:
            return current
        data = chunks.with_segment(uid, stored.value, new)
        if data is None:
            return None
        try:
            await records.store.write_cursor(name, chunks.record_name(chunk.key), data, stored.version)
        except BadVersionError:
            continue
        finally:
            records.forget_chunks(uid)
        # A trim that removed the segment between the read and the write leaves the chunk
        # record behind it (or deletes it: then the write failed above); check once more.
        after = await records.read(name)
        if after.uid != uid or not any(c.first <= number <= c.last for c in after.chunks):
            return None
        return new
