"""Trimming a log: whole closed segments leave its start and their ledgers are deleted.

Which segments may go is :func:`segments_to_trim` (before a
position, or past the log's retention; never one a cursor has not passed unless forced);
this module makes it so in the record, moves the cursors a forced trim passed, and deletes
the ledgers (one already gone -- an offloaded segment's, deleted after its lag -- is no
error) and then the offloaded segments' objects (:mod:`bkframe.tiering.deletes`). Used by
:meth:`Logs.trim` and by the writer after each rollover.
"""

from __future__ import annotations

import logging
import time

import attrs

from bkframe.client.logs import chunks
from bkframe.client.logs.model import Chunk, LogMetadata, Position, Segment, TrimResult
from bkframe.client.logs.records import LogRecords
from bkframe.errors import BadVersionError
from bkframe.tiering.deletes import delete_objects

log = logging.getLogger("bkframe.logs")


def segments_to_trim(
    record: LogMetadata,
    *,
    before: Position | None,
    use_retention: bool,
    slowest_cursor: Position | None,
    force: bool,
    now: float,
) -> int:
    """How many leading segments a trim removes: those fully before ``before``, or too old
    or beyond the size limit (with ``use_retention``); never an open segment, and never one
    a cursor has not passed unless ``force``."""
    segs = record.segments
    closed_prefix = 0
    while closed_prefix < len(segs) and segs[closed_prefix].closed:
        closed_prefix += 1
    wanted = 0
    if before is not None:
        while wanted < closed_prefix and segs[wanted].passed_by(before):
            wanted += 1
    settings = record.settings
    if use_retention and settings.retention_s is not None:
        k = 0
        while k < closed_prefix and segs[k].aged_at() <= now - settings.retention_s:
            k += 1
        wanted = max(wanted, k)
    if use_retention and settings.retention_bytes is not None:
        total = sum(s.length for s in segs)
        k = 0
        while k < closed_prefix and total > settings.retention_bytes:
            total -= segs[k].length
            k += 1
        wanted = max(wanted, k)
    if not force and slowest_cursor is not None:
        allowed = 0
        while allowed < wanted and segs[allowed].passed_by(slowest_cursor):
            allowed += 1
        wanted = allowed
    return wanted


async def trim(
    records: LogRecords, name: str, *, before: Position | None = None, retention: bool = False, force: bool = False
) -> TrimResult:
    """See :meth:`bkframe.client.logs.api.Logs.trim`."""
    while True:
        record = await records.read(name)
        # Chunk records read fresh: an offload recorded on one since names an object to delete.
        records.forget_chunks(record.uid)
        cursors = await records.cursors(name)
        now = time.time()
        # An expired cursor (idle past its TTL) no longer holds the log back.
        holding = [c for c in cursors if not c.expired(record.settings, now)]
        slowest = min((c.position for c in holding), default=None)
        removed, gone, kept = await _plan(records, record, before, retention, slowest, force)
        if not removed:
            return TrimResult((), record.start)
        inline = sum(1 for s in removed if record.segment(s.number) is not None)
        new = attrs.evolve(
            record,
            segments=record.segments[inline:],
            chunks=kept,
            first_segment=max(record.first_segment, removed[-1].number + 1),
            trimmed_entries=record.trimmed_entries + sum(s.entries for s in removed),
            trimmed_bytes=record.trimmed_bytes + sum(s.length for s in removed),
        ).with_garbage(i for s in removed for i in s.ledgers())
        try:
            stored = await records.cas(new, record.version)
            break
        except BadVersionError:
            continue
    await records.delete_chunks(name, gone)
    moved: list[str] = []
    for c in cursors:
        if c.position < stored.start and (force or c not in holding):
            if not force:
                log.warning(
                    "log %r: cursor %r was idle %.0f s (its TTL is %.0f s): retention trimmed past it and moved it "
                    "from %s to %s; its consumer skips what was trimmed", name, c.name, now - c.updated_at,
                    c.effective_ttl(record.settings) or 0.0, c.position, stored.start,
                )
            await records.set_cursor(name, c.name, stored.start, touch=False)
            moved.append(c.name)
    try:
        await records.collect_garbage(name)
    except Exception as e:  # noqa: BLE001 - the trim stands; the next trim deletes the rest
        log.warning("log %r: deleting trimmed ledgers failed (the next trim retries): %s", name, e)
    await delete_objects(records.ledgers.context.tiers, name, removed)
    return TrimResult(tuple(removed), stored.start, tuple(moved))


async def _plan(
    records: LogRecords,
    record: LogMetadata,
    before: Position | None,
    retention: bool,
    slowest: Position | None,
    force: bool,
) -> tuple[list[Segment], list[Chunk], tuple[Chunk, ...]]:
    """The segments a trim removes (in order), the chunks it removes whole, and the chunks
    left (the first maybe cut). Chunks are decided as wholes first (a chunk goes exactly
    when each of its segments would); only the one the trim ends in, and those it removes,
    are read."""
    now = time.time()

    def count(items: tuple[Segment, ...]) -> int:
        return segments_to_trim(
            attrs.evolve(record, segments=items, chunks=()), before=before, use_retention=retention,
            slowest_cursor=slowest, force=force, now=now,
        )

    chunk_list = record.chunks
    whole = count(tuple(c.as_segment() for c in chunk_list) + record.segments)
    if whole >= len(chunk_list):
        removed = [s for c in chunk_list for s in await records.chunk(record, c)]
        removed.extend(record.segments[: whole - len(chunk_list)])
        return removed, list(chunk_list), ()
    boundary = await records.chunk(record, chunk_list[whole])
    items = (
        tuple(c.as_segment() for c in chunk_list[:whole])
        + tuple(boundary)
        + tuple(c.as_segment() for c in chunk_list[whole + 1 :])
        + record.segments
    )
    part = min(count(items) - whole, len(boundary))
    removed = [s for c in chunk_list[:whole] for s in await records.chunk(record, c)] + boundary[:part]
    if part == len(boundary):  # every segment of it goes after all
        return removed, list(chunk_list[: whole + 1]), chunk_list[whole + 1 :]
    kept = chunk_list[whole:]
    if part > 0:
        kept = (chunks.cut(kept[0], boundary[:part]), *kept[1:])
    return removed, list(chunk_list[:whole]), kept
