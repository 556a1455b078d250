"""A segment object read back from its tier and checked against what its ledger held.

Before a log's metadata may name an object (and long before the ledger leaves the
bookies), the object is read back the way readers will read it -- by ranged gets only: a
``head`` for its size, its tail for the footer, then each row group in one get -- and:

- its size, and a CRC32C of every byte, are the ones written (a truncated or replaced
  object, or one byte changed anywhere: footer, page headers, padding);
- its footer names the very segment: log uid, segment, ledger, entries, checksum, ...;
- every row group decodes with its page checksums right, its rows are the entries in
  order with no gap, their derived columns (log, position, segment, ledger, offset) agree;
- the entry checksum recomputed from the rows -- each entry's bytes rebuilt from its
  columns -- the entry count and bytes, and the time range, are the ledger read's.

Any difference is a :class:`~bkframe.tiering.object_format.CorruptObjectError`
naming the key and what differs. Decoding runs in worker threads, one row group at a time.
"""

from __future__ import annotations

import anyio
import attrs
import crc32c
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bkframe.client.logs.columns import offset_of
from bkframe.errors import NoSuchObjectError
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.footer import MAGIC, ObjectFooter, RowGroupSpan, checked
from bkframe.tiering.object_format import CorruptObjectError, EntryChecksum, SegmentContent, entry_parts
from bkframe.tiering.segment_reader import AsyncSegmentObjectReader


@attrs.frozen
class Verified:
    """An object that verified, and what reading it cost."""

    key: str
    size: int
    object_crc32c: int
    row_groups: int
    content: SegmentContent
    #: CRC32C of the footer's bytes (what a reader checks before parsing it).
    footer_crc32c: int
    #: Ranged gets made (the tail, then one a row group), and bytes fetched (the object's
    #: size, and the tail's bytes before the footer).
    gets: int
    bytes_read: int


async def verify_object(
    tier: AsyncTier,
    key: str,
    expected: SegmentContent,
    *,
    size: int | None = None,
    object_crc32c: int | None = None,
    footer_crc32c: int | None = None,
) -> Verified:
    """Check object ``key`` against ``expected`` (what the ledger read found) and, when
    given, the ``size``, ``object_crc32c`` and ``footer_crc32c`` it was written with (the
    footer's before it is parsed); see the module."""
    gets, bytes_read = tier.gets, tier.bytes_read
    info = await tier.head(key)
    if info is None:
        raise NoSuchObjectError(f"tier {tier.uri}: no object {key!r} to verify")
    if size is not None and info.size != size:
        raise CorruptObjectError(f"tier object {key!r} is {info.size} bytes; {size} were written (truncated or replaced)")
    footer = await AsyncSegmentObjectReader(tier, key, size=info.size, footer_crc32c=footer_crc32c).footer()
    wrong = footer.content.differences(expected)
    if wrong:
        raise CorruptObjectError(f"tier object {key!r}: its footer says {'; '.join(wrong)}")
    check = _Check(footer)
    crc = 0
    at = 0
    for group in sorted(footer.groups, key=lambda g: g.start):
        # From where the last one ended: the first get takes Parquet's leading magic along.
        if group.start < at or group.end > footer.start:
            raise CorruptObjectError(f"tier object {key!r}: row group {group.index}'s bytes overlap others or the footer")
        data = await _fetch(tier, key, at, group.end - at)
        if at == 0 and data[: len(MAGIC)] != MAGIC:
            raise CorruptObjectError(f"tier object {key!r} does not start with Parquet's magic bytes")
        crc = await anyio.to_thread.run_sync(_crc_and_check, check, group, at, data, crc)
        at = group.end
    if at < footer.start:  # nothing of ours writes between the row groups and the footer
        crc = crc32c.crc32c(await _fetch(tier, key, at, footer.start - at), crc)
    crc = crc32c.crc32c(footer.raw, crc)
    if object_crc32c is not None and crc != object_crc32c:
        raise CorruptObjectError(
            f"tier object {key!r}: its bytes' CRC32C is {crc:08x}, {object_crc32c:08x} was written (a byte changed)"
        )
    found = check.content()
    wrong = found.differences(expected)
    if wrong:
        raise CorruptObjectError(f"tier object {key!r}: its rows hold {'; '.join(wrong)}")
    return Verified(
        key,
        info.size,
        crc,
        len(footer.groups),
        found,
        crc32c.crc32c(footer.raw),
        tier.gets - gets,
        tier.bytes_read - bytes_read,
    )


async def _fetch(tier: AsyncTier, key: str, offset: int, length: int) -> bytes:
    return checked(key, offset, length, await tier.get_range(key, offset, length))


def _crc_and_check(check: _Check, group: RowGroupSpan, start: int, data: bytes, crc: int) -> int:
    check.group(group, {start: data})
    return crc32c.crc32c(data, crc)


class _Check:
    """The object's rows, recounted row group by row group (in a worker thread)."""

    def __init__(self, footer: ObjectFooter) -> None:
        self._footer = footer
        self._checksum = EntryChecksum()
        self._next = footer.content.first_entry_id
        #: Rows recounted, and whether their ids may skip (a compacted segment's object).
        self._rows = 0
        c = footer.content
        self._gaps = c.entries != c.last_entry_id - c.first_entry_id + 1
        self._entry_bytes = 0
        self._payload_bytes = 0
        self._min_ts: int | None = None
        self._max_ts: int | None = None

    def group(self, group: RowGroupSpan, windows: dict[int, bytes]) -> None:
        footer, key = self._footer, self._footer.key
        c = footer.content
        table = footer.decode(group, windows)
        n = table.num_rows
        ids = table.column("entry_id").to_numpy()
        if self._gaps:
            in_order = n == 0 or bool(ids[0] >= self._next and np.all(np.diff(ids) > 0) and ids[-1] <= c.last_entry_id)
        else:
            in_order = np.array_equal(ids, np.arange(self._next, self._next + n))
        if not in_order:
            raise CorruptObjectError(
                f"tier object {key!r}: row group {group.index} does not hold entries {self._next}.. in order"
            )
        self._next = int(ids[-1]) + 1 if n else self._next
        self._rows += n
        expected = {
            "log": pa.scalar(c.log, pa.string()),
            "segment": pa.scalar(c.segment, pa.int64()),
            "ledger_id": pa.scalar(c.ledger_id, pa.int64()),
        }
        for name, value in expected.items():
            if table.column(name).null_count or not pc.all(pc.equal(table.column(name), value)).as_py():
                raise CorruptObjectError(f"tier object {key!r}: row group {group.index}'s {name} is not {value} in every row")
        positions = [f"{c.segment}:{i}" for i in ids.tolist()]
        if table.column("position").to_pylist() != positions:
            raise CorruptObjectError(f"tier object {key!r}: row group {group.index}'s positions are not its entries'")
        if not np.array_equal(table.column("offset").to_numpy(), offset_of(c.segment, 0) | ids):
            raise CorruptObjectError(f"tier object {key!r}: row group {group.index}'s offsets are not its entries'")
        for entry_id, parts in entry_parts(table):
            self._checksum.add_parts(entry_id, parts)
            self._entry_bytes += sum(map(len, parts))
        self._payload_bytes += int(pc.sum(pc.binary_length(table.column("payload"))).as_py() or 0)
        times = table.column("timestamp").cast(pa.int64())
        if times.null_count != (0 if c.enveloped else n):
            raise CorruptObjectError(f"tier object {key!r}: row group {group.index} has {times.null_count} null timestamps")
        if c.enveloped and n:
            lo, hi = (v.as_py() for v in pc.min_max(times).values())
            self._min_ts = lo if self._min_ts is None else min(lo, self._min_ts)
            self._max_ts = hi if self._max_ts is None else max(hi, self._max_ts)

    def content(self) -> SegmentContent:
        c = self._footer.content
        return attrs.evolve(
            c,
            # With gaps, the last rows may have been dropped: the footer says where it ends.
            last_entry_id=c.last_entry_id if self._gaps else self._next - 1,
            entries=self._rows,
            entry_bytes=self._entry_bytes,
            payload_bytes=self._payload_bytes,
            checksum=self._checksum.value,
            min_ts=self._min_ts if self._min_ts is not None else -1,
            max_ts=self._max_ts if self._max_ts is not None else -1,
        )
