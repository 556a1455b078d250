"""Offloading a log by hand: its closed segments copied to a tier and recorded there.

``Logs.offload(name, tier=URI, until=POSITION)`` (and ``bkframe log offload``) takes every
closed segment with entries whose every entry is before ``until`` (default: every closed
one) and that is not offloaded yet, oldest first, and for each:

1. writes it as a Parquet object in the tier (:func:`~bkframe.client.tiering.segment_writer.write_segment_object`:
   put if absent; an identical object already there -- an earlier offload that died before
   step 3 -- is adopted, a different one deleted and written again);
2. verifies the object by ranged reads against what the ledger read found, and its bytes
   against what was put (:func:`~bkframe.client.tiering.verify.verify_object`);
3. records it: the segment gets its :class:`~bkframe.client.logs.offload_record.Offload`
   by a compare-and-set on the record that holds it -- the log record, or the chunk record
   of an older segment -- changing nothing else; a conflict re-reads and retries.

So an offload is idempotent and resumable: run again, it finds what is recorded and skips
it, and what was put but not recorded is adopted, never put twice. A segment trimmed (or
the log deleted) while its object was written is skipped and its object deleted. The
ledger stays on the bookies: deleting it after the log's ``offload_deletion_lag_s`` is the
offload service's (next), so a reader can always fall back to it.
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from bkframe.client.logs.model import LogMetadata, Position, Segment
from bkframe.client.logs.offload_record import Offload
from bkframe.client.logs.records import LogRecords
from bkframe.client.tiering.async_tier import AsyncTier
from bkframe.client.tiering.keys import segment_key
from bkframe.client.tiering.open_tiers import OpenTiers
from bkframe.errors import BadVersionError, NoSuchLedgerError, NoSuchLogError

if TYPE_CHECKING:
    from bkframe.client.tiering.object_format import ObjectSummary

log = logging.getLogger("bkframe.logs")


@attrs.frozen
class OffloadResult:
    """What an offload did: the segments it recorded (with their objects), how many were
    offloaded already, and the numbers of those it skipped (trimmed meanwhile)."""

    tier: str
    offloaded: tuple[Segment, ...] = ()
    already: int = 0
    skipped: tuple[int, ...] = ()

    @property
    def object_bytes(self) -> int:
        return sum(s.offload.size for s in self.offloaded if s.offload is not None)


async def offload(
    records: LogRecords,
    tiers: OpenTiers,
    name: str,
    *,
    password: bytes,
    tier: str,
    until: Position | None = None,
    spool_dir: Path | None = None,
) -> OffloadResult:
    """See the module."""
    record = await records.read(name)
    records.check_password(record, password)
    target = await tiers.get(tier)
    spool = spool_dir if spool_dir is not None else Path(tempfile.gettempdir())
    todo: list[Segment] = []
    already = 0
    for seg in await records.segments(record):
        if not seg.closed or seg.entries <= 0 or (until is not None and not seg.passed_by(until)):
            continue
        if seg.offload is not None:
            already += 1
        else:
            todo.append(seg)
    done: list[Segment] = []
    skipped: list[int] = []
    for seg in todo:
        summary = await _write(records, target, record, seg, password, spool)
        if summary is None:
            skipped.append(seg.number)
            continue
        stored = Offload(
            target.uri, summary.key, summary.size, summary.entries, summary.checksum, summary.object_crc32c, time.time(),
            footer_crc32c=summary.footer_crc32c,
        )
        recorded = await _record(records, name, record.uid, attrs.evolve(seg, offload=stored))
        if recorded is None:
            log.info("log %r: segment %d was trimmed while it was offloaded; deleting its object %s", name, seg.number,
                     summary.key)
            await target.delete(summary.key)
            skipped.append(seg.number)
        else:
            done.append(recorded)
    return OffloadResult(target.uri, tuple(done), already, tuple(skipped))


async def _write(
    records: LogRecords, tier: AsyncTier, record: LogMetadata, seg: Segment, password: bytes, spool: Path
) -> ObjectSummary | None:
    """The segment's object, written (or adopted) and verified; None if its ledger is gone."""
    # Here, not at the top: they need pyarrow, which ``import bkframe`` must not (it is the
    # optional ``bkframe[arrow]``, and every bookie and CLI process would pay its import).
    from bkframe.client.tiering.object_format import CorruptObjectError
    from bkframe.client.tiering.segment_writer import write_segment_object
    from bkframe.client.tiering.verify import verify_object

    try:
        handle = await records.ledgers.open_ledger(seg.ledger_id, password=password, recovery=False)
    except NoSuchLedgerError:
        return None  # trimmed since the record was read
    for attempt in range(2):
        try:
            summary = await write_segment_object(
                handle, tier, log=record.name, log_uid=record.uid, segment=seg, spool_dir=spool
            )
            await verify_object(
                tier, summary.key, summary.content, size=summary.size, object_crc32c=summary.object_crc32c,
                footer_crc32c=summary.footer_crc32c,
            )
            return summary
        except CorruptObjectError as e:
            # An object under the key that is not this segment's (a bad earlier put, or a
            # store that changed it): it was never recorded, so it goes and is written again.
            if attempt:
                raise
            log.warning("log %r: segment %d: %s; deleting it and writing it again", record.name, seg.number, e)
            await tier.delete(segment_key(record.uid, seg.number, seg.ledger_id))
    raise AssertionError("unreachable")


async def _record(records: LogRecords, name: str, uid: str, seg: Segment) -> Segment | None:
    """``seg`` (with its offload) stored over its namesake by CAS on the record that holds
    it; None if it left the log (trimmed, or the log deleted and made again)."""
    while True:
        try:
            record = await records.read(name)
        except NoSuchLogError:
            return None
        if record.uid != uid or seg.number < record.first_segment:
            return None
        if record.segment(seg.number) is not None:
            current = record.segment(seg.number)
            if current is None or current.ledger_id != seg.ledger_id:
                return None
            if current.offload is not None:
                return current  # recorded by another offload meanwhile (the same key)
            try:
                await records.cas(record.replace_segment(seg), record.version)
            except BadVersionError:
                continue
            return seg
        chunk = next((c for c in record.chunks if c.first <= seg.number <= c.last), None)
        if chunk is None:
            return None
        current = await records.segment(record, seg.number)
        if current is not None and current.offload is not None:
            return current
        try:
            stored = await records.replace_chunked_segment(record, chunk, seg)
        except BadVersionError:
            continue
        if not stored:
            return None
        # A trim that removed the segment between the read and the write leaves the chunk
        # record behind it (or deletes it: then the write failed above); check once more.
        after = await records.read(name)
        if after.uid != uid or not any(c.first <= seg.number <= c.last for c in after.chunks):
            return None
        return seg
