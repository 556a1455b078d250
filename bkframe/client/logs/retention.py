"""Trimming a log: whole closed segments leave its start and their ledgers are deleted.

Which segments may go is :func:`bkframe.client.logs.model.segments_to_trim` (before a
position, or past the log's retention; never one a cursor has not passed unless forced);
this module makes it so in the record, moves the cursors a forced trim passed, and deletes
the ledgers. Used by :meth:`Logs.trim` and by the writer after each rollover.
"""

from __future__ import annotations

import logging
import time

import attrs

from bkframe.client.logs.model import Position, TrimResult, segments_to_trim
from bkframe.client.logs.records import LogRecords
from bkframe.errors import BadVersionError

log = logging.getLogger("bkframe.logs")


async def trim(
    records: LogRecords, name: str, *, before: Position | None = None, retention: bool = False, force: bool = False
) -> TrimResult:
    """See :meth:`bkframe.client.logs.api.Logs.trim`."""
    while True:
        record = await records.read(name)
        cursors = await records.cursors(name)
        slowest = min((c.position for c in cursors), default=None)
        k = segments_to_trim(
            record, before=before, use_retention=retention, slowest_cursor=slowest, force=force, now=time.time()
        )
        if k == 0:
            return TrimResult((), record.start)
        removed = record.segments[:k]
        new = attrs.evolve(
            record,
            segments=record.segments[k:],
            first_segment=max(record.first_segment, removed[-1].number + 1),
            trimmed_entries=record.trimmed_entries + sum(s.entries for s in removed),
            trimmed_bytes=record.trimmed_bytes + sum(s.length for s in removed),
        ).with_garbage(s.ledger_id for s in removed)
        try:
            stored = await records.cas(new, record.version)
            break
        except BadVersionError:
            continue
    moved: list[str] = []
    if force:
        for c in cursors:
            if c.position < stored.start:
                await records.set_cursor(name, c.name, stored.start)
                moved.append(c.name)
    try:
        await records.collect_garbage(name)
    except Exception as e:  # noqa: BLE001 - the trim stands; the next trim deletes the rest
        log.warning("log %r: deleting trimmed ledgers failed (the next trim retries): %s", name, e)
    return TrimResult(tuple(removed), stored.start, tuple(moved))
