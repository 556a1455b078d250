"""Reading a log's offloaded segments from their objects in a tier, without the bookies.

An offloaded segment is a Parquet object (:mod:`bkframe.tiering`) that holds the
connector's columns. On the driver, :func:`plan_objects` reads each such object's footer
(one ranged get of its tail, kept per process: objects never change) and cuts the segment's
range at row groups into partitions of about ``bytesPerPartition``, each with its row
groups' time range, so a timestamp filter skips row groups and a position range reads only
the row groups that hold it. A task (:func:`read_object_partition`) fetches each row group
in one ranged get through the client's tier (worker threads, deadlines), decodes only the
columns the query reads, and hands Spark the row group's Arrow batches while the next row
group is fetched.

Positions never change: an object holds its segment's entry ids, and a segment is read from
one place only (its object, or its ledger when it is not offloaded or ``offloaded=bookies``).
A tier that fails on the driver or in a task is logged and the range is read from the
bookies while the segment's ledger is still there (from the first entry not yet handed to
Spark, so no row is read twice); otherwise the query fails with a
:class:`~bkframe.errors.TierError` naming the segment, the tier and the key.

The tier holds plain data: the log's password is checked by the client against the log's
record when the read is planned (as for the rest of the read); who may read the objects is
the object store's access control.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio
import pyarrow as pa

from bkframe import Client, SegmentRange
from bkframe.errors import BKError, TierError
from bkframe_spark.connection import Ahead, call, call_ahead, client_for
from bkframe_spark.partitions import EntryRange

if TYPE_CHECKING:
    from bkframe.tiering import ObjectFooter, RowGroupSpan
    from bkframe_spark.options import Options

logger = logging.getLogger("bkframe.spark")

#: Footers kept per process (driver and Python workers), by (tier URI, key).
MAX_FOOTERS = 256
_footers: OrderedDict[tuple[str, str], ObjectFooter] = OrderedDict()
_lock = threading.Lock()

#: About this many bytes per Arrow batch handed to Spark: a row group (32 MiB) is cut, so the
#: JVM turns one batch into rows while the worker writes the next, rather than each waiting
#: for the other's whole row group.
HANDOFF_BYTES = 4 << 20

ReadLedger = Callable[["Options", EntryRange, pa.Schema], Iterator[pa.RecordBatch]]


def check_on_bookies(log: str, ranges: Sequence[SegmentRange]) -> None:
    """With ``offloaded=bookies``: every segment read must still have its ledger."""
    for r in ranges:
        if r.offload is not None and not r.offload.on_bookies:
            raise TierError(
                f"log {log!r}: segment {r.segment} is only in tier {r.offload.tier} (its ledger was deleted from the "
                "bookies); read it with option offloaded=tier (the default)"
            )


async def _footer(client: Client, part: EntryRange) -> ObjectFooter:
    """The footer of ``part``'s object (kept per process), checked against what the log's
    record says of the object before it is parsed and after: its CRC32C, then the segment,
    ledger, entry count and entry checksum it names."""
    with _lock:
        found = _footers.get((part.tier, part.key))
    if found is not None:
        return found
    from bkframe.tiering import AsyncSegmentObjectReader, CorruptObjectError

    tier = await client.context.tiers.get(part.tier)
    found = await AsyncSegmentObjectReader(
        tier, part.key, size=part.object_size, footer_crc32c=part.footer_crc32c or None
    ).footer()
    c = found.content
    if (c.segment, c.ledger_id, c.entries, c.checksum) != (
        part.segment,
        part.ledger_id,
        part.object_entries,
        part.object_checksum,
    ):
        raise CorruptObjectError(
            f"tier object {part.key!r}: its footer says segment {c.segment} (ledger {c.ledger_id}), {c.entries} "
            f"entries, checksum {c.checksum}; the log's record says segment {part.segment} (ledger {part.ledger_id}), "
            f"{part.object_entries} entries, checksum {part.object_checksum}"
        )
    with _lock:
        _footers[(part.tier, part.key)] = found
        while len(_footers) > MAX_FOOTERS:
            _footers.popitem(last=False)
    return found


def _cut(part: EntryRange, groups: Sequence[RowGroupSpan], bytes_per_partition: int) -> list[EntryRange]:
    """``part`` as partitions of whole row groups (the first and last clipped to its range),
    each about ``bytes_per_partition`` bytes of the object at most (one row group at least)."""
    out: list[EntryRange] = []
    run: list[RowGroupSpan] = []

    def close() -> None:
        first, last = max(part.first, run[0].first_entry_id), min(part.last, run[-1].last_entry_id)
        timed = [g for g in run if g.max_ts >= 0]
        min_ts = min(g.min_ts for g in timed) if timed else -1
        max_ts = max(g.max_ts for g in timed) if timed else -1
        out.append(replace(part, first=first, last=last, min_ts=min_ts, max_ts=max_ts))

    for group in groups:
        if run and sum(g.size for g in run) + group.size > bytes_per_partition:
            close()
            run = []
        run.append(group)
    if run:
        close()
    return out


async def plan_objects(client: Client, parts: Sequence[EntryRange], bytes_per_partition: int) -> list[EntryRange]:
    """``parts`` with each offloaded segment's range planned as partitions of its object's
    row groups (the others as they are). A tier that fails here: the range is read from the
    bookies if its ledger is there, else the read fails."""
    from bkframe.tiering import CorruptObjectError

    # The footers are fetched at once (the client's tier limiter bounds the gets in flight):
    # one ranged get each, so a log of many offloaded segments plans in a few round trips.
    found: dict[tuple[str, str], ObjectFooter | Exception] = {}

    async def fetch(part: EntryRange) -> None:
        try:
            found[(part.tier, part.key)] = await _footer(client, part)
        except (BKError, OSError, ImportError, CorruptObjectError) as e:
            found[(part.tier, part.key)] = e

    async with anyio.create_task_group() as nursery:
        for part in {(p.tier, p.key): p for p in parts if p.key}.values():
            nursery.start_soon(fetch, part)
    out: list[EntryRange] = []
    for part in parts:
        if not part.key:
            out.append(part)
            continue
        footer = found[(part.tier, part.key)]
        if isinstance(footer, Exception):
            if not part.on_bookies:
                raise TierError(
                    f"log {part.log!r}: segment {part.segment} is only in tier {part.tier}, object {part.key!r}, and "
                    f"reading its footer failed: {footer}"
                ) from footer
            logger.warning(
                "log %r: segment %s's object %r in tier %s failed (%s): reading it from the bookies",
                part.log,
                part.segment,
                part.key,
                part.tier,
                footer,
            )
            out.append(on_bookies(part))
            continue
        out += _cut(part, footer.groups_for(part.first, part.last), bytes_per_partition)
    return out


def on_bookies(part: EntryRange) -> EntryRange:
    """``part`` read from its ledger on the bookies instead of its object."""
    return replace(part, tier="", key="", object_size=0)


def read_object_partition(
    opts: Options, part: EntryRange, schema: pa.Schema, read_ledger: ReadLedger
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the partition's entries from its object, row group by row group
    (the next one fetched while Spark takes the current one); from the bookies (by
    ``read_ledger``) from the first entry not handed over yet if the tier fails and the
    ledger is still there."""
    from bkframe.tiering import AsyncSegmentObjectReader, CorruptObjectError

    bk = client_for(opts)
    what = f"reading segment {part.segment} of log {part.log!r} from tier {part.tier}, object {part.key!r}"
    columns = list(schema.names)
    next_entry = part.first
    ahead: Ahead[pa.Table] | None = None
    try:
        footer = call(bk, what, opts.timeout_s, _footer, bk.client, part)
        groups = [
            (max(part.first, g.first_entry_id), min(part.last, g.last_entry_id)) for g in footer.groups_for(part.first, part.last)
        ]

        async def fetch(lo: int, hi: int) -> pa.Table:
            tier = await bk.client.context.tiers.get(part.tier)
            reader = AsyncSegmentObjectReader(tier, part.key, size=part.object_size, footer=footer)
            return await reader.read_table(lo, hi, columns)

        ahead = call_ahead(bk, what, opts.timeout_s, fetch, *groups[0]) if groups else None
        for i, (_, hi) in enumerate(groups):
            assert ahead is not None
            table = ahead.result()
            ahead = call_ahead(bk, what, opts.timeout_s, fetch, *groups[i + 1]) if i + 1 < len(groups) else None
            table = table.cast(schema)
            rows = max(1, HANDOFF_BYTES * table.num_rows // max(1, table.nbytes))
            yield from table.to_batches(max_chunksize=rows)
            next_entry = hi + 1
    except (BKError, OSError, ImportError, CorruptObjectError) as e:
        if not part.on_bookies:
            raise TierError(f"{what} failed, and its ledger is no longer on the bookies: {e}") from e
        logger.warning("%s failed (%s): reading entries %d..%d from the bookies", what, e, next_entry, part.last)
        if ahead is not None:  # the next row group's fetch: not wanted any more
            ahead.cancel()
            ahead = None
        yield from read_ledger(opts, replace(on_bookies(part), first=next_entry), schema)
    finally:
        if ahead is not None:
            ahead.cancel()
