"""Offloading a log by hand: its closed segments copied to a tier and recorded there.

``Logs.offload(name, tier=URI, until=POSITION)`` (and ``bkframe log offload``) takes every
closed segment with entries whose every entry is before ``until`` (default: every closed
one) and that is not offloaded yet, oldest first, and for each:

1. writes it as a Parquet object in the tier (:func:`~bkframe.tiering.segment_writer.write_segment_object`:
   put if absent; an identical object already there -- an earlier offload that died before
   step 3 -- is adopted, a different one deleted and written again);
2. verifies the object by ranged reads against what the ledger read found, and its bytes
   against what was put (:func:`~bkframe.tiering.verify.verify_object`);
3. records it: the segment gets its :class:`~bkframe.tiering.offload_record.Offload`
   by a compare-and-set on the record that holds it -- the log record, or the chunk record
   of an older segment -- changing nothing else; a conflict re-reads and retries.

So an offload is idempotent and resumable: run again, it finds what is recorded and skips
it, and what was put but not recorded is adopted, never put twice. A segment trimmed (or
the log deleted) while its object was written is skipped and its object deleted. The
ledger stays on the bookies: deleting it after the log's deletion lag is the offload
service's (:mod:`bkframe.tiering.offload_service`).

By hand, the log's password opens its ledgers (and is checked first). The offload service
runs as the cluster's own process and has no log's password: it passes ``open_ledger``, a
keyless opener its internal credential allows, and ``only``, the segments it chose.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from bkframe.client.logs.model import LogMetadata, Position, Segment
from bkframe.client.logs.records import LogRecords
from bkframe.client.read_handle import ReadHandle
from bkframe.errors import NoSuchLedgerError
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.keys import segment_key
from bkframe.tiering.offload_record import Offload
from bkframe.tiering.open_tiers import OpenTiers
from bkframe.tiering.segment_cas import change_segment

if TYPE_CHECKING:
    from bkframe.tiering.object_format import ObjectSummary

log = logging.getLogger("bkframe.logs")

#: Opens a segment's ledger for reading, by id.
LedgerOpener = Callable[[int], Awaitable[ReadHandle]]
#: Told each step of a segment's offload: ``"put"`` (its object written and verified, not
#: recorded yet) and ``"recorded"`` (the offload service's :meth:`step`).
StepHook = Callable[[str, Segment], None]


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


def _to_offload(
    segments: Sequence[Segment], until: Position | None, only: Collection[int] | None
) -> tuple[list[Segment], int]:
    """The closed, non-empty segments (up to ``until``, of ``only``) not offloaded yet, and
    how many such segments are offloaded already."""
    todo: list[Segment] = []
    already = 0
    for seg in segments:
        if not seg.closed or seg.entries <= 0 or (until is not None and not seg.passed_by(until)):
            continue
        if only is not None and seg.number not in only:
            continue
        if seg.offload is not None:
            already += 1
        else:
            todo.append(seg)
    return todo, already


async def offload(
    records: LogRecords,
    tiers: OpenTiers,
    name: str,
    *,
    password: bytes,
    tier: str,
    until: Position | None = None,
    spool_dir: Path | None = None,
    open_ledger: LedgerOpener | None = None,
    only: Collection[int] | None = None,
    step: StepHook | None = None,
) -> OffloadResult:
    """See the module. ``open_ledger`` given: the caller is the cluster's own process, which
    opens ledgers keyless (no password is checked); ``only``: just these segments."""
    record = await records.read(name)
    if open_ledger is None:
        records.check_password(record, password)

        async def open_ledger(ledger_id: int) -> ReadHandle:
            return await records.ledgers.open_ledger(ledger_id, password=password, recovery=False)

    target = await tiers.get(tier)
    spool = spool_dir if spool_dir is not None else Path(tempfile.gettempdir())
    todo, already = _to_offload(await records.segments(record), until, only)
    done: list[Segment] = []
    skipped: list[int] = []
    for seg in todo:
        summary = await _write(target, record, seg, open_ledger, spool)
        if summary is None:
            skipped.append(seg.number)
            continue
        if step is not None:
            step("put", seg)
        stored = Offload(
            target.uri, summary.key, summary.size, summary.entries, summary.checksum, summary.object_crc32c, time.time(),
            footer_crc32c=summary.footer_crc32c,
        )

        def record_it(current: Segment, stored: Offload = stored) -> Segment | None:
            # Recorded by another offload meanwhile (the same key): keep that one, and its
            # on_bookies, which the offload service may have cleared since.
            return None if current.offload is not None else attrs.evolve(current, offload=stored)

        recorded = await change_segment(records, name, record.uid, seg.number, seg.ledger_id, record_it)
        if recorded is not None and step is not None:
            step("recorded", recorded)
        if recorded is None:
            log.info("log %r: segment %d was trimmed while it was offloaded; deleting its object %s", name, seg.number,
                     summary.key)
            await target.delete(summary.key)
            skipped.append(seg.number)
        else:
            done.append(recorded)
    return OffloadResult(target.uri, tuple(done), already, tuple(skipped))


async def _write(
    tier: AsyncTier, record: LogMetadata, seg: Segment, open_ledger: LedgerOpener, spool: Path
) -> ObjectSummary | None:
    """The segment's object, written (or adopted) and verified; None if its ledger is gone."""
    # Here, not at the top: they need pyarrow, which ``import bkframe`` must not (it is the
    # optional ``bkframe[arrow]``, and every bookie and CLI process would pay its import).
    from bkframe.tiering.object_format import CorruptObjectError
    from bkframe.tiering.segment_writer import write_segment_object
    from bkframe.tiering.verify import verify_object

    try:
        handle = await open_ledger(seg.ledger_id)
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

