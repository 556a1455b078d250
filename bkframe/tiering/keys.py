"""Where a segment's object lives in a tier: its key.

::

    segments/<log uid>/<segment number, 10 digits>-<ledger id>.parquet
    segments/3f2a...c9/0000000041-90210.parquet

- The log's **uid** (made anew each time a log is created), not its name: a log deleted and
  created again under the same name never meets the old one's objects, and a log's objects
  are one prefix, listed (and deleted) together.
- The **segment number**, zero-padded so that a listing (in key order) is in log order.
- The **ledger id**: a segment number never names two ledgers of one log that both held
  entries, but an object is attributable to its ledger without reading it, and two offloads
  of different ledgers can never collide.

An object no log's metadata names (an offload that died between its put and its commit) is
attributable from its key alone: its log, segment and ledger.

A segment compacted in the tier (docs/compaction.md) gets a new object beside the old one,
``...-<ledger id>-c<generation>.parquet``; the segment's record then names the new one, and
the old one (the same segment and ledger, a lower generation) is an orphan.
"""

from __future__ import annotations

import re

import attrs

#: The prefix of every segment object: other kinds of objects may come beside it.
SEGMENTS = "segments/"
SUFFIX = ".parquet"
_KEY = re.compile(r"segments/([0-9a-zA-Z_-]+)/(\d{10,})-(\d+)(?:-c(\d+))?\.parquet")


@attrs.frozen
class SegmentKey:
    """What a segment object's key says."""

    log_uid: str
    segment: int
    ledger_id: int
    #: 0 for an offload; n for the object of the n-th compaction in the tier.
    generation: int = 0

    def __str__(self) -> str:
        return segment_key(self.log_uid, self.segment, self.ledger_id, self.generation)


def log_prefix(log_uid: str) -> str:
    """The prefix of every object of the log with uid ``log_uid`` (for listing)."""
    if not log_uid or not re.fullmatch(r"[0-9a-zA-Z_-]+", log_uid):
        raise ValueError(f"a log uid of letters, digits, '-' and '_' is needed for an object key, got {log_uid!r}")
    return f"{SEGMENTS}{log_uid}/"


def segment_key(log_uid: str, segment: int, ledger_id: int, generation: int = 0) -> str:
    """The key of segment ``segment`` (ledger ``ledger_id``) of the log with uid ``log_uid``
    (``generation``: of its ``generation``-th compaction in the tier)."""
    if segment < 0 or ledger_id < 0 or generation < 0:
        raise ValueError(f"segment {segment}, ledger {ledger_id} and generation {generation} must be >= 0")
    tail = f"-c{generation}" if generation else ""
    return f"{log_prefix(log_uid)}{segment:010d}-{ledger_id}{tail}{SUFFIX}"


def parse_segment_key(key: str) -> SegmentKey | None:
    """The parts of a segment object's key; None if ``key`` is no segment object's."""
    found = _KEY.fullmatch(key)
    if found is None:
        return None
    return SegmentKey(found[1], int(found[2]), int(found[3]), int(found[4] or 0))
