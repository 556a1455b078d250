"""Reading a segment object: entries by range or by time, fetching only the row groups needed.

A reader opens the object's footer once (the object's size, from the log's metadata or a
``head``; then its tail: :mod:`~bkframe.tiering.footer`) and keeps it. A read of
entries ``first..last`` fetches each row group that holds some of them in one ranged get
and decodes it (page checksums checked); a seek by time fetches only the ``timestamp``
column chunk of the one row group the footer's statistics point to. Rows come back as the
connector's Arrow columns (what ``LogReader.arrow_batches`` gives for the same range) or as
:class:`~bkframe.client.logs.model.LogEntry` objects, equal to the hot reader's.

Two drivers over the same plan: :class:`SegmentObjectReader` blocks (worker threads, Spark
tasks) and calls the tier directly; :class:`AsyncSegmentObjectReader` calls it through an
:class:`~bkframe.tiering.async_tier.AsyncTier` (limiter, deadlines) and decodes in
worker threads.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence

import anyio
import numpy as np
import pyarrow as pa

from bkframe.client.logs import columns as log_columns
from bkframe.client.logs.envelope import NO_PROPERTIES
from bkframe.client.logs.model import LogEntry, Position
from bkframe.core.interfaces.tier import ObjectInfo, Tier
from bkframe.errors import NoSuchEntryError, NoSuchObjectError
from bkframe.tiering.async_tier import AsyncTier
from bkframe.tiering.footer import (
    ObjectFooter,
    RowGroupSpan,
    check_footer_crc,
    checked,
    footer_start,
    tail_range,
)
from bkframe.tiering.object_format import FLAGS, event_times, object_schema
from bkframe.tiering.ranged_file import Fetches


def connector_columns() -> list[str]:
    """The columns a read returns by default: the connector's (no ``flags``)."""
    return list(log_columns.schema().names)


class SegmentObjectReader:
    """Blocking reads of one segment object in ``tier``; ``size`` (if known) saves a
    ``head``, ``footer`` (one read before) saves fetching it again; ``footer_crc32c`` (the
    record's) is checked before the footer is parsed."""

    def __init__(
        self,
        tier: Tier,
        key: str,
        *,
        size: int | None = None,
        footer: ObjectFooter | None = None,
        footer_crc32c: int | None = None,
    ) -> None:
        self.tier, self.key = tier, key
        self._size = size
        self._footer = footer
        self._footer_crc = footer_crc32c
        #: What this reader fetched: ranged gets and their bytes.
        self.fetches = Fetches()
        self._last = _LastGroup()

    def footer(self) -> ObjectFooter:
        if self._footer is None:
            size = self._size if self._size is not None else _size_of(self.key, self.tier.uri, self.tier.head(self.key))
            offset, length = tail_range(size)
            tail = self._get(offset, length)
            start = footer_start(self.key, size, tail)
            if start < offset:
                tail, offset = self._get(start, offset - start) + tail, start
            check_footer_crc(self.key, tail[start - offset :], self._footer_crc)
            self._footer = ObjectFooter.parse(self.key, size, offset, tail)
        return self._footer

    def batches(self, first: int, last: int, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Entries ``first..last`` (inclusive) as record batches of ``columns`` (default:
        the connector's), one row group at a time."""
        footer = self.footer()
        decoded = _with_ids(columns)
        for group in _plan(footer, first, last):
            table = self._last.get(group, decoded)
            if table is None:
                table = footer.decode(group, {group.start: self._get(group.start, group.size)}, decoded)
                self._last.put(group, decoded, table)
            yield from _cut(table, group, first, last, columns).to_batches()

    def read_table(self, first: int, last: int, columns: Sequence[str] | None = None) -> pa.Table:
        batches = list(self.batches(first, last, columns))
        return pa.Table.from_batches(batches, schema=_schema(columns))

    def entries(self, first: int, last: int) -> list[LogEntry]:
        """Entries ``first..last`` as the log reader gives them."""
        return log_entries(self.read_table(first, last, [*connector_columns(), FLAGS]))

    def entry_at_time(self, timestamp: int) -> int | None:
        """The first entry whose timestamp is at or after ``timestamp`` (ms), or None if
        every entry is earlier (or has none: a raw segment)."""
        footer = self.footer()
        group = footer.group_at_time(timestamp)
        if group is None:
            return None
        lo, hi = group.columns["timestamp"]
        table = footer.decode(group, {lo: self._get(lo, hi - lo)}, ["timestamp"])
        return _first_at(table, group, timestamp)

    def _get(self, offset: int, length: int) -> bytes:
        data = checked(self.key, offset, length, self.tier.get_range(self.key, offset, length))
        self.fetches.requests += 1
        self.fetches.bytes += len(data)
        return data


class AsyncSegmentObjectReader:
    """:class:`SegmentObjectReader` for the event loop: tier calls through ``tier``'s limiter and
    deadlines, decoding in worker threads."""

    def __init__(
        self,
        tier: AsyncTier,
        key: str,
        *,
        size: int | None = None,
        footer: ObjectFooter | None = None,
        footer_crc32c: int | None = None,
    ) -> None:
        self.tier, self.key = tier, key
        self._size = size
        self._footer = footer
        self._footer_crc = footer_crc32c
        self._last = _LastGroup()

    async def footer(self) -> ObjectFooter:
        if self._footer is None:
            size = self._size if self._size is not None else _size_of(self.key, self.tier.uri, await self.tier.head(self.key))
            offset, length = tail_range(size)
            tail = await self._get(offset, length)
            start = footer_start(self.key, size, tail)
            if start < offset:
                tail, offset = await self._get(start, offset - start) + tail, start
            check_footer_crc(self.key, tail[start - offset :], self._footer_crc)
            self._footer = await anyio.to_thread.run_sync(ObjectFooter.parse, self.key, size, offset, tail)
        return self._footer

    async def batches(self, first: int, last: int, columns: Sequence[str] | None = None) -> AsyncIterator[pa.RecordBatch]:
        footer = await self.footer()
        decoded = _with_ids(columns)
        for group in _plan(footer, first, last):
            table = self._last.get(group, decoded)
            if table is None:
                data = await self._get(group.start, group.size)
                table = await anyio.to_thread.run_sync(footer.decode, group, {group.start: data}, decoded)
                self._last.put(group, decoded, table)
            for batch in _cut(table, group, first, last, columns).to_batches():
                yield batch

    async def read_table(self, first: int, last: int, columns: Sequence[str] | None = None) -> pa.Table:
        batches = [b async for b in self.batches(first, last, columns)]
        return pa.Table.from_batches(batches, schema=_schema(columns))

    async def entries(self, first: int, last: int) -> list[LogEntry]:
        table = await self.read_table(first, last, [*connector_columns(), FLAGS])
        return await anyio.to_thread.run_sync(log_entries, table)

    async def entry_at_time(self, timestamp: int) -> int | None:
        footer = await self.footer()
        group = footer.group_at_time(timestamp)
        if group is None:
            return None
        lo, hi = group.columns["timestamp"]
        data = await self._get(lo, hi - lo)
        table = await anyio.to_thread.run_sync(footer.decode, group, {lo: data}, ["timestamp"])
        return _first_at(table, group, timestamp)

    async def _get(self, offset: int, length: int) -> bytes:
        return checked(self.key, offset, length, await self.tier.get_range(self.key, offset, length))


class _LastGroup:
    """The row group a reader decoded last, kept: sequential reads in small ranges (a tail,
    a log reader's read chunks) take many ranges from one row group of tens of MiB, which
    is fetched and decoded once."""

    def __init__(self) -> None:
        self._which: tuple[int, tuple[str, ...]] | None = None
        self._table: pa.Table | None = None

    def get(self, group: RowGroupSpan, columns: Sequence[str]) -> pa.Table | None:
        return self._table if self._which == (group.index, tuple(columns)) else None

    def put(self, group: RowGroupSpan, columns: Sequence[str], table: pa.Table) -> None:
        self._which, self._table = (group.index, tuple(columns)), table


def _size_of(key: str, uri: str, info: ObjectInfo | None) -> int:
    if info is None:
        raise NoSuchObjectError(f"tier {uri}: no object {key!r}")
    return info.size


def _plan(footer: ObjectFooter, first: int, last: int) -> list[RowGroupSpan]:
    c = footer.content
    if first < c.first_entry_id or last > c.last_entry_id or last < first:
        raise NoSuchEntryError(
            f"tier object {footer.key!r} holds entries {c.first_entry_id}..{c.last_entry_id} of segment {c.segment}, "
            f"not {first}..{last}"
        )
    return footer.groups_for(first, last)


def _with_ids(columns: Sequence[str] | None) -> list[str]:
    """The columns to decode: those asked for, and ``entry_id`` (to cut the range by)."""
    wanted = list(columns) if columns is not None else connector_columns()
    return wanted if "entry_id" in wanted else [*wanted, "entry_id"]


def _schema(columns: Sequence[str] | None) -> pa.Schema:
    full = object_schema()
    return pa.schema([full.field(name) for name in (columns if columns is not None else connector_columns())])


def _cut(table: pa.Table, group: RowGroupSpan, first: int, last: int, columns: Sequence[str] | None) -> pa.Table:
    """Rows ``first..last`` of a row group's table (rows are entries in order, no gap), with
    the columns asked for."""
    lo = max(first, group.first_entry_id) - group.first_entry_id
    hi = min(last, group.last_entry_id) - group.first_entry_id
    part = table.slice(lo, hi - lo + 1)
    ids = part.column("entry_id")
    if len(ids) and (ids[0].as_py() != group.first_entry_id + lo or ids[-1].as_py() != group.first_entry_id + hi):
        raise NoSuchEntryError(f"row group {group.index} does not hold entries {first}..{last} where its footer says")
    return part.select(list(columns) if columns is not None else connector_columns())


def _first_at(table: pa.Table, group: RowGroupSpan, timestamp: int) -> int | None:
    times = table.column("timestamp").cast(pa.int64()).fill_null(-1).to_numpy()
    at = np.flatnonzero(times >= timestamp)
    return group.first_entry_id + int(at[0]) if at.size else None


def log_entries(table: pa.Table) -> list[LogEntry]:
    """Rows of the connector's columns and ``flags`` as log entries (equal to the hot
    reader's: no key, timestamp or properties in a raw segment)."""
    if table.num_rows == 0:
        return []
    segments = table.column("segment").to_pylist()
    ids = table.column("entry_id").to_pylist()
    ledgers = table.column("ledger_id").to_pylist()
    payloads = table.column("payload").to_pylist()
    keys = table.column("key").to_pylist()
    times = table.column("timestamp").cast(pa.int64()).to_pylist()
    has_props = np.concatenate([np.diff(c.offsets.to_numpy()) > 0 for c in table.column("properties").chunks])
    props = table.column("properties").to_pylist() if has_props.any() else None
    events = event_times(table.column(FLAGS))
    return [
        LogEntry(
            Position(segments[i], ids[i]),
            ledgers[i],
            payloads[i],
            keys[i],
            times[i],
            dict(props[i]) if props is not None and has_props[i] else NO_PROPERTIES,
            events[i],
        )
        for i in range(table.num_rows)
    ]
