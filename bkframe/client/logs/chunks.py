"""Chunk records: a log's older closed segments, moved out of its record so it stays bounded.

A segment costs about 70 bytes of the log record, and every change rewrites the record:
ZooKeeper's 1 MB node would fill at ~14,000 segments, and etcd keeps a revision of each
rewrite. So once the record holds twice ``segments_per_chunk`` closed segments before its
first open one, the oldest ``segments_per_chunk`` of them move to a *chunk record* -- written
once, never changed -- in the same step that stores the record (:meth:`LogRecords.cas`);
the record keeps a :class:`~bkframe.client.logs.model.Chunk` per chunk (its segment range,
entries, bytes and latest close time, ~60 bytes). A writer, a tailing reader or a commit
reads the record only; a reader seeking back, ``info``, a trim that removes old segments and
``delete`` read the chunks they need. The one change a chunk record takes is an offload
recorded on one of its segments (:func:`with_segment`, a compare-and-set on the chunk
record alone: the log record's :class:`~bkframe.client.logs.model.Chunk` holds nothing of
it); a client that cached the chunk before it reads the segment from the bookies, which
still hold it.

Chunk records are stored as cursor records of the log named ``~segments.<first segment>``
(a name no cursor can have): the store deletes them with the log, in the same operation,
and no store needs anything new. The chunk record is written before the log record names
it; a crash in between leaves a record nothing names (deleted with the log), and the next
attempt writes the same name with the same segments (closed segments never change).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from bkframe.client.logs.model import Chunk, LogMetadata, Segment
from bkframe.errors import MetadataError

#: Cursor-record names of chunk records start with this (cursor names cannot).
PREFIX = "~segments."


def record_name(key: int) -> str:
    return f"{PREFIX}{key:012d}"


def is_chunk(cursor_name: str) -> bool:
    return cursor_name.startswith(PREFIX)


def serialize(uid: str, segments: Sequence[Segment]) -> bytes:
    return json.dumps({"log_uid": uid, "segments": [s.to_json() for s in segments]}, separators=(",", ":")).encode()


def deserialize(record: LogMetadata, chunk: Chunk, data: bytes) -> list[Segment]:
    """The chunk's segments that are not trimmed."""
    try:
        raw = json.loads(data)
        if raw["log_uid"] != record.uid:
            raise ValueError(f"it belongs to another log of that name (uid {raw['log_uid']!r})")
        segments = [Segment.from_json(s) for s in raw["segments"]]
    except (ValueError, TypeError, KeyError) as e:
        raise MetadataError(f"log {record.name!r}: chunk record {record_name(chunk.key)!r} does not parse: {e}") from None
    return [s for s in segments if chunk.first <= s.number <= chunk.last]


def with_segment(uid: str, data: bytes, seg: Segment) -> bytes | None:
    """The chunk record ``data`` with its segment numbered ``seg.number`` replaced by
    ``seg`` (an offload recorded on it), or None if it holds no such segment of that
    ledger. Trims never rewrite a chunk record (they move the chunk's ``first``), so the
    record keeps every segment it was written with."""
    raw = json.loads(data)
    segments = [Segment.from_json(s) for s in raw["segments"]]
    if raw["log_uid"] != uid or not any(s.number == seg.number and s.ledger_id == seg.ledger_id for s in segments):
        return None
    return serialize(uid, [seg if s.number == seg.number else s for s in segments])


def spill(record: LogMetadata, *, before: int | None = None) -> tuple[LogMetadata, list[tuple[Chunk, tuple[Segment, ...]]]]:
    """``record`` with its oldest closed segments moved to new chunks (while it holds twice
    ``segments_per_chunk`` before its first open segment), and the chunks to write first.

    ``before``: only segments numbered below it move. A commit passes its record's
    ``next_segment`` as read: its own segments' numbers are not settled until its
    compare-and-set lands (a retry after a conflict may number them differently), while a
    chunk record, once written, is never rewritten -- so they move at a later change."""
    n = record.settings.segments_per_chunk
    segments = record.segments
    closed = 0
    while closed < len(segments) and segments[closed].closed and (before is None or segments[closed].number < before):
        closed += 1
    moved: list[tuple[Chunk, tuple[Segment, ...]]] = []
    start = 0
    while closed - start >= 2 * n:
        part = segments[start : start + n]
        chunk = Chunk(
            key=part[0].number,
            first=part[0].number,
            last=part[-1].number,
            count=len(part),
            entries=sum(s.entries for s in part),
            length=sum(s.length for s in part),
            closed_at=max(s.closed_at for s in part),
            last_entry_id=part[-1].last_entry_id,
            max_ts=_latest_ms(part),
        )
        moved.append((chunk, part))
        start += n
    if not moved:
        return record, []
    chunks = (*record.chunks, *(c for c, _ in moved))
    return attrs.evolve(record, segments=segments[start:], chunks=chunks), moved


def _latest_ms(segments: Sequence[Segment]) -> int:
    """The latest time of the segments' entries, or -1 if one of them does not say."""
    times = [s.latest_ms() for s in segments]
    return -1 if any(t is None for t in times) else max(t for t in times if t is not None)


def cut(chunk: Chunk, removed: Sequence[Segment]) -> Chunk:
    """The chunk after a trim removed ``removed``, its first segments (not all of them)."""
    return attrs.evolve(
        chunk,
        first=removed[-1].number + 1,
        count=chunk.count - len(removed),
        entries=chunk.entries - sum(s.entries for s in removed),
        length=chunk.length - sum(s.length for s in removed),
    )
