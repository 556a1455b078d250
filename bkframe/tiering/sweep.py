"""A tier against the metadata, both ways: the orphan sweep and ``bkframe tier check``.

:func:`sweep_tier` lists a tier's segment objects (``segments/<log uid>/...``, in key order,
a batch at a time) and every log's segments, and reports (:class:`TierFinding`):

- **orphans**: objects of a segment no log holds any more -- the log is gone (its uid, in
  the key, names no log: a log deleted and made again under the same name is another uid),
  or the segment left it (trimmed while its object was put, or a trim's delete failed), or
  an offload died between its put and its commit of a segment since trimmed. With
  ``delete``, an orphan older than ``grace_s`` (by the store's modification time) is
  deleted; a younger one is left for a later sweep.
- **unrecorded** objects: of a segment the log still holds (the same segment number and
  ledger) that is not recorded on this tier -- a put whose offload died before its commit
  (the next offload adopts it: it checks the object entry by entry), or a copy on a tier
  other than the one the segment's record names. Never deleted here: a URI spelled another
  way may reach the very store the record names, and an offload may be adopting it.
- **missing** and **wrong-size** objects: recorded on this tier, but absent from the listing
  or of another size than recorded. While the segment's ledger is on the bookies reads fall
  back to it; once it is deleted (``on_bookies`` false) the segment's data is **at risk**.

Why it is safe against a concurrent offload: an offload puts its object, then commits it to
the segment's record, and adopts an object only of a segment its log holds. The sweep
deletes only objects of segments no log holds -- which never come back: segment numbers
are never reused for another ledger, and a trimmed segment is never recorded (the offload
that finds its segment trimmed deletes its own object) -- and only once they are older than
the grace, far longer (6 h by default) than any offload takes from its put to its commit.
Ages count from the sweep's start, so a log made while it lists (whose uid it did not see)
has only younger objects. Memory: the logs' uids, and one log's objects and segments at a
time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Literal

import attrs

from bkframe.client.logs.ledgers import LedgerClient
from bkframe.client.logs.model import Segment
from bkframe.client.logs.records import LogRecords
from bkframe.core.interfaces.tier import ObjectInfo
from bkframe.errors import BKError, NoSuchLogError
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.keys import SEGMENTS, SegmentKey, parse_segment_key

log = logging.getLogger("bkframe.tiering")

#: How old an object no log names must be before the sweep deletes it: longer than any
#: offload can take from its put to its commit.
DEFAULT_GRACE_S = 6 * 3600.0
#: Log names read per metadata request, and objects per listing batch.
LOGS_PAGE = 1000
LIST_BATCH = 1000

Kind = Literal["orphan", "unrecorded", "missing", "wrong-size", "unknown"]


@attrs.frozen
class TierFinding:
    """One object (or recorded object) that is not as the metadata says."""

    kind: Kind
    key: str
    #: The object's bytes (a missing one: the bytes recorded).
    size: int
    #: Seconds since the object was stored (0 for a missing one).
    age_s: float = 0.0
    log: str | None = None
    segment: int | None = None
    #: An orphan deleted by this sweep.
    deleted: bool = False
    #: A recorded object missing or wrong whose segment's ledger is no longer on the bookies.
    at_risk: bool = False
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.define
class TierSummary:
    """What a sweep found, counted."""

    tier: str
    grace_s: float
    #: Objects listed under ``segments/``, and their bytes.
    objects: int = 0
    bytes: int = 0
    #: Logs seen, and the offloads they record on this tier.
    logs: int = 0
    recorded: int = 0
    orphans: int = 0
    orphan_bytes: int = 0
    #: Orphans deleted, and those left because they are younger than the grace.
    deleted: int = 0
    deleted_bytes: int = 0
    young: int = 0
    unrecorded: int = 0
    #: Recorded objects missing or of the wrong size, and of those, the ones at risk.
    missing: int = 0
    at_risk: int = 0
    unknown: int = 0
    #: Other tiers the logs' offloads name (a check against a URI spelled another way
    #: than the records' shows up here).
    other_tiers: list[str] = attrs.Factory(list)
    elapsed_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


async def sweep_tier(
    client: LedgerClient,
    tier: str,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    delete: bool = True,
    on_finding: Callable[[TierFinding], None] | None = None,
) -> TierSummary:
    """Compare the tier ``tier`` (a URI: ``file:///srv/tier``, ``s3://...``; opened through
    the client's tiers) with every log's metadata in ``client``'s store (see the module),
    deleting orphans older than ``grace_s`` when ``delete``; each finding goes to
    ``on_finding`` as it is made, and the counts come back.

    The offload service calls this periodically per tier (``sweep_tier(client, uri)``:
    ``delete=True``, the default grace); a failure -- a
    :class:`~bkframe.errors.TierError` from the listing, a metadata error -- raises: log it
    and retry later. A failed delete is reported (``detail``) and the sweep goes on.
    ``bkframe tier check`` calls it once (``delete`` only with ``--delete-orphans``)."""
    if not grace_s >= 0:
        raise ValueError(f"grace_s must be >= 0, got {grace_s!r}")
    now = time.time()
    started = time.monotonic()
    target = await client.context.tiers.get(tier)
    sweep = _Sweep(LogRecords(client), target, grace_s, delete, now, on_finding or (lambda f: None))
    live = await sweep.live_logs()
    # The listing is in key order of UTF-8 bytes: live logs walked in the same order meet
    # their objects' groups, and a log with no object at all is still checked.
    order = sorted(live, key=lambda uid: f"{uid}/".encode())
    at = 0
    group_uid: str | None = None
    group: dict[str, ObjectInfo] = {}
    async with contextlib.aclosing(target.list(SEGMENTS, batch=LIST_BATCH)) as listing:
        async for info in listing:
            sweep.summary.objects += 1
            sweep.summary.bytes += info.size
            parsed = parse_segment_key(info.key)
            if parsed is None:
                sweep.report(TierFinding("unknown", info.key, info.size, now - info.modified,
                                         detail="not a segment object's key: left alone"))
                continue
            if parsed.log_uid != group_uid:
                if group_uid is not None:
                    await sweep.log_group(group_uid, live.get(group_uid), group)
                group_uid, group = parsed.log_uid, {}
                while at < len(order) and f"{order[at]}/".encode() < f"{group_uid}/".encode():
                    await sweep.log_group(order[at], live[order[at]], {})
                    at += 1
                if at < len(order) and order[at] == group_uid:
                    at += 1
            group[info.key] = info
    if group_uid is not None:
        await sweep.log_group(group_uid, live.get(group_uid), group)
    for uid in order[at:]:
        await sweep.log_group(uid, live[uid], {})
    sweep.summary.elapsed_s = time.monotonic() - started
    return sweep.summary


@attrs.define
class _Sweep:
    records: LogRecords
    tier: AsyncTier
    grace_s: float
    delete: bool
    now: float
    on_finding: Callable[[TierFinding], None]
    summary: TierSummary = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.summary = TierSummary(self.tier.uri, self.grace_s)

    async def live_logs(self) -> dict[str, str]:
        """Every log's uid -> name, a page of names at a time."""
        live: dict[str, str] = {}
        start = ""
        while True:
            names = await self.records.store.list_logs(start=start, limit=LOGS_PAGE)
            for name in names:
                try:
                    live[(await self.records.read(name)).uid] = name
                except NoSuchLogError:
                    pass  # deleted meanwhile: its objects are orphans
            if len(names) < LOGS_PAGE:
                return live
            start = names[-1] + "\0"

    async def log_group(self, uid: str, name: str | None, objects: dict[str, ObjectInfo]) -> None:
        """One log's objects (maybe none) against its segments, read now."""
        segments = await self._segments(uid, name) if name is not None else None
        if segments is None:
            for info in objects.values():
                await self._orphan(info, None, "its log is gone")
            return
        self.summary.logs += 1
        held = {(s.number, s.ledger_id): s for s in segments}
        for info in objects.values():
            parsed = parse_segment_key(info.key)
            assert parsed is not None
            seg = held.get((parsed.segment, parsed.ledger_id))
            if seg is None:
                await self._orphan(info, name, f"segment {parsed.segment} (ledger {parsed.ledger_id}) left the log")
            elif self._replaced_here(seg, parsed):
                await self._orphan(info, name, f"segment {parsed.segment} was compacted into a newer object")
            elif not self._recorded_here(seg, info.key):
                where = f"offloaded to {seg.offload.tier}" if seg.offload is not None else "not offloaded yet"
                self.summary.unrecorded += 1
                self.report(TierFinding(
                    "unrecorded", info.key, info.size, self.now - info.modified, name, seg.number,
                    detail=f"the log holds the segment, {where}: kept (an offload adopts it)",
                ))
        for seg in segments:
            o = seg.offload
            if o is None:
                continue
            if o.tier != self.tier.uri:
                if o.tier not in self.summary.other_tiers:
                    self.summary.other_tiers.append(o.tier)
                continue
            self.summary.recorded += 1
            found = objects.get(o.key)
            if found is not None and found.size == o.size:
                continue
            kind: Kind = "missing" if found is None else "wrong-size"
            what = "is missing" if found is None else f"has {found.size} bytes, {o.size} recorded"
            if o.on_bookies:
                risk = "reads fall back to the bookies while its ledger is there: restore the object before it is deleted"
            else:
                risk = "its ledger is deleted: its data is AT RISK; restore the object from a backup"
            self.summary.missing += 1
            self.summary.at_risk += not o.on_bookies
            finding = TierFinding(
                kind, o.key, o.size if found is None else found.size, 0.0 if found is None else self.now - found.modified,
                name, seg.number, at_risk=not o.on_bookies, detail=f"recorded object {what}; {risk}",
            )
            if finding.at_risk:
                log.warning("tier %s: log %r segment %d: %s", self.tier.uri, name, seg.number, finding.detail)
            self.report(finding)

    async def _segments(self, uid: str, name: str) -> list[Segment] | None:
        """The log's segments, read now; None if it is gone (or another log has its name)."""
        try:
            record = await self.records.read(name)
            if record.uid != uid:
                return None
            self.records.forget_chunks(uid)
            return await self.records.segments(record)
        except NoSuchLogError:
            return None

    def _replaced_here(self, seg: Segment, parsed: SegmentKey) -> bool:
        """The segment's record names a later generation's object (compaction in the tier)."""
        if seg.offload is None or seg.offload.tier != self.tier.uri:
            return False
        recorded = parse_segment_key(seg.offload.key)
        return recorded is not None and recorded.generation > parsed.generation

    def _recorded_here(self, seg: Segment, key: str) -> bool:
        return seg.offload is not None and seg.offload.key == key and seg.offload.tier == self.tier.uri

    async def _orphan(self, info: ObjectInfo, name: str | None, why: str) -> None:
        age = self.now - info.modified
        self.summary.orphans += 1
        self.summary.orphan_bytes += info.size
        parsed = parse_segment_key(info.key)
        segment = parsed.segment if parsed is not None else None
        if age < self.grace_s:
            self.summary.young += 1
            self.report(TierFinding("orphan", info.key, info.size, age, name, segment,
                                    detail=f"{why}; younger than the grace, deleted after it"))
            return
        if not self.delete:
            self.report(TierFinding("orphan", info.key, info.size, age, name, segment,
                                    detail=f"{why}; past the grace, would be deleted"))
            return
        try:
            await self.tier.delete(info.key)
        except BKError as e:
            self.report(TierFinding("orphan", info.key, info.size, age, name, segment,
                                    detail=f"{why}; deleting it failed (a later sweep retries): {e}"))
            return
        self.summary.deleted += 1
        self.summary.deleted_bytes += info.size
        log.info("tier %s: deleted orphan %s (%d bytes, %.0f s old): %s", self.tier.uri, info.key, info.size, age, why)
        self.report(TierFinding("orphan", info.key, info.size, age, name, segment, deleted=True,
                                detail=f"{why}; deleted"))

    def report(self, finding: TierFinding) -> None:
        if finding.kind == "unknown":
            self.summary.unknown += 1
        self.on_finding(finding)
