"""Reading a segment object: entries by range or by time, fetching only the row groups needed.

A reader opens the object's footer once (the object's size, from the log's metadata or a
``head``; then its tail: :mod:`~bkframe.tiering.footer`) and keeps it. A read of
entries ``first..last`` fetches each row group that holds some of them in one ranged get
and decodes it (page checksums checked); a seek by time fetches only the ``timestamp``
column chunk of the one row group the footer's statistics point to. Rows come back as the
connector's Arrow columns (what ``LogReader.arrow_batches`` gives for the same range) or as
:class:`~bkframe.client.logs.model.LogEntry` objects, equal to the hot reader's.

The reading is written once, sans-IO: a :class:`SegmentPlan` decides which byte ranges to
fetch, parses the footer, cuts the rows and counts the fetches, and asks its driver for each
effect by yielding a step (:class:`Head`, :class:`Get`, :class:`Work`, :class:`Emit`). The
two drivers only perform the steps: :class:`SegmentObjectReader` blocks (worker threads,
Spark tasks) and calls the tier directly; :class:`AsyncSegmentObjectReader` calls it through
an :class:`~bkframe.tiering.async_tier.AsyncTier` (limiter, deadlines) and runs the
:class:`Work` (parsing, decoding) in worker threads. A blocking and an async read of the
same object thus fetch the same ranges and give the same rows, by construction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
import attrs
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

T = TypeVar("T")
#: The tier a driver calls: blocking, or from the event loop.
TierT = TypeVar("TierT", Tier, AsyncTier)


def connector_columns() -> list[str]:
    """The columns a read returns by default: the connector's (no ``flags``)."""
    return list(log_columns.schema().names)


# -- the steps a plan asks its driver for ---------------------------------------------------


@attrs.frozen
class Head:
    """The object's size is not known: answer with the tier's ``head`` of it (None if absent)."""


@attrs.frozen
class Get:
    """Answer with bytes ``offset..offset+length`` of the object (one ranged get)."""

    offset: int
    length: int


@attrs.frozen
class Work:
    """Answer with ``call()``: CPU work (parsing, decoding) that the async driver moves off the
    event loop, so it is a step and not a plain call."""

    call: Callable[[], object]


@attrs.frozen
class Emit:
    """Rows for the caller of a streaming read (answered with None)."""

    batches: list[pa.RecordBatch]


Step = Head | Get | Work | Emit
#: A plan: a generator of steps, each sent back its answer, returning ``T``. The answers'
#: types differ by step, hence ``Any``; only :meth:`SegmentPlan._get`, :meth:`SegmentPlan._size_by_head` and
#: :func:`_work` receive them, and each gives its caller a typed value.
Plan = Generator[Step, Any, T]


class SegmentPlan:
    """What reading object ``key`` (in the tier at ``uri``) takes, without doing any I/O: the
    footer (read once, kept), the last row group decoded, and the fetches made so far. Each
    public method returns a plan for one read, for a driver to run."""

    def __init__(
        self,
        key: str,
        uri: str,
        *,
        size: int | None = None,
        footer: ObjectFooter | None = None,
        footer_crc32c: int | None = None,
    ) -> None:
        self.key, self.uri = key, uri
        self._size = size
        self._footer = footer
        self._footer_crc = footer_crc32c
        #: What the reads fetched: ranged gets and their bytes.
        self.fetches = Fetches()
        self._last = _LastGroup()

    def footer(self) -> Plan[ObjectFooter]:
        if self._footer is None:
            size = self._size if self._size is not None else (yield from self._size_by_head())
            offset, length = tail_range(size)
            tail = yield from self._get(offset, length)
            start = footer_start(self.key, size, tail)
            if start < offset:
                tail, offset = (yield from self._get(start, offset - start)) + tail, start
            check_footer_crc(self.key, tail[start - offset :], self._footer_crc)
            self._footer = yield from _work(partial(ObjectFooter.parse, self.key, size, offset, tail))
        return self._footer

    def batches(self, first: int, last: int, columns: Sequence[str] | None = None) -> Plan[None]:
        """Entries ``first..last`` (inclusive) as record batches of ``columns`` (default:
        the connector's), emitted one row group at a time."""
        footer = yield from self.footer()
        for group in _plan(footer, first, last):
            rows = yield from self._rows(footer, group, first, last, columns)
            yield Emit(rows.to_batches())

    def read_table(self, first: int, last: int, columns: Sequence[str] | None = None) -> Plan[pa.Table]:
        footer = yield from self.footer()
        batches: list[pa.RecordBatch] = []
        for group in _plan(footer, first, last):
            batches += (yield from self._rows(footer, group, first, last, columns)).to_batches()
        return pa.Table.from_batches(batches, schema=_schema(columns))

    def entries(self, first: int, last: int) -> Plan[list[LogEntry]]:
        """Entries ``first..last`` as the log reader gives them."""
        table = yield from self.read_table(first, last, [*connector_columns(), FLAGS])
        return (yield from _work(partial(log_entries, table)))

    def entry_at_time(self, timestamp: int) -> Plan[int | None]:
        """The first entry whose timestamp is at or after ``timestamp`` (ms), or None if
        every entry is earlier (or has none: a raw segment)."""
        footer = yield from self.footer()
        group = footer.group_at_time(timestamp)
        if group is None:
            return None
        # A row group with gaps (a compacted segment's) maps a row to its entry by its id.
        wanted = ["timestamp"] if group.last_entry_id - group.first_entry_id + 1 == group.rows else ["timestamp", "entry_id"]
        lo, hi = min(group.columns[c][0] for c in wanted), max(group.columns[c][1] for c in wanted)
        data = yield from self._get(lo, hi - lo)
        table = yield from _work(partial(footer.decode, group, {lo: data}, wanted))
        return _first_at(table, group, timestamp)

    def _rows(
        self, footer: ObjectFooter, group: RowGroupSpan, first: int, last: int, columns: Sequence[str] | None
    ) -> Plan[pa.Table]:
        """Rows ``first..last`` of ``group``, from the row group decoded last if it is this one."""
        decoded = _with_ids(columns)
        table = self._last.get(group, decoded)
        if table is None:
            data = yield from self._get(group.start, group.size)
            table = yield from _work(partial(footer.decode, group, {group.start: data}, decoded))
            self._last.put(group, decoded, table)
        return _cut(table, group, first, last, columns)

    def _size_by_head(self) -> Plan[int]:
        info: ObjectInfo | None = yield Head()
        return _size_of(self.key, self.uri, info)

    def _get(self, offset: int, length: int) -> Plan[bytes]:
        # Counted here, in the plan, so that every driver counts the same.
        data = checked(self.key, offset, length, (yield Get(offset, length)))
        self.fetches.requests += 1
        self.fetches.bytes += len(data)
        return data


def _work(call: Callable[[], T]) -> Plan[T]:
    result: T = yield Work(call)
    return result


# -- the drivers: they perform the steps, nothing else ------------------------------------


class _Driver(Generic[TierT]):
    """What both drivers hold: the tier, the object's key and the plan of its reads."""

    def __init__(
        self,
        tier: TierT,
        key: str,
        *,
        size: int | None = None,
        footer: ObjectFooter | None = None,
        footer_crc32c: int | None = None,
    ) -> None:
        self.tier: TierT = tier
        self.key = key
        self.plan = SegmentPlan(key, tier.uri, size=size, footer=footer, footer_crc32c=footer_crc32c)

    @property
    def fetches(self) -> Fetches:
        """What this reader fetched: ranged gets and their bytes."""
        return self.plan.fetches


class SegmentObjectReader(_Driver[Tier]):
    """Blocking reads of one segment object in ``tier``; ``size`` (if known) saves a
    ``head``, ``footer`` (one read before) saves fetching it again; ``footer_crc32c`` (the
    record's) is checked before the footer is parsed."""

    def footer(self) -> ObjectFooter:
        return self._run(self.plan.footer())

    def batches(self, first: int, last: int, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
        """Entries ``first..last`` (inclusive) as record batches of ``columns`` (default:
        the connector's), one row group at a time."""
        plan = self.plan.batches(first, last, columns)
        answer: object = None
        while True:
            try:
                step = plan.send(answer)
            except StopIteration:
                return
            if isinstance(step, Emit):
                yield from step.batches
                answer = None
            else:
                answer = self._perform(step)

    def read_table(self, first: int, last: int, columns: Sequence[str] | None = None) -> pa.Table:
        return self._run(self.plan.read_table(first, last, columns))

    def entries(self, first: int, last: int) -> list[LogEntry]:
        """Entries ``first..last`` as the log reader gives them."""
        return self._run(self.plan.entries(first, last))

    def entry_at_time(self, timestamp: int) -> int | None:
        """The first entry whose timestamp is at or after ``timestamp`` (ms), or None if
        every entry is earlier (or has none: a raw segment)."""
        return self._run(self.plan.entry_at_time(timestamp))

    def _run(self, plan: Plan[T]) -> T:
        answer: object = None
        while True:
            try:
                step = plan.send(answer)
            except StopIteration as done:
                result: T = done.value
                return result
            assert not isinstance(step, Emit), "only batches() emits rows"
            answer = self._perform(step)

    def _perform(self, step: Head | Get | Work) -> object:
        if isinstance(step, Head):
            return self.tier.head(self.key)
        if isinstance(step, Get):
            return self.tier.get_range(self.key, step.offset, step.length)
        return step.call()


class AsyncSegmentObjectReader(_Driver[AsyncTier]):
    """:class:`SegmentObjectReader` for the event loop: tier calls through ``tier``'s limiter and
    deadlines, decoding in worker threads."""

    async def footer(self) -> ObjectFooter:
        return await self._run(self.plan.footer())

    async def batches(self, first: int, last: int, columns: Sequence[str] | None = None) -> AsyncIterator[pa.RecordBatch]:
        """Entries ``first..last`` (inclusive) as record batches of ``columns`` (default:
        the connector's), one row group at a time."""
        plan = self.plan.batches(first, last, columns)
        answer: object = None
        while True:
            try:
                step = plan.send(answer)
            except StopIteration:
                return
            if isinstance(step, Emit):
                for batch in step.batches:
                    yield batch
                answer = None
            else:
                answer = await self._perform(step)

    async def read_table(self, first: int, last: int, columns: Sequence[str] | None = None) -> pa.Table:
        return await self._run(self.plan.read_table(first, last, columns))

    async def entries(self, first: int, last: int) -> list[LogEntry]:
        """Entries ``first..last`` as the log reader gives them."""
        return await self._run(self.plan.entries(first, last))

    async def entry_at_time(self, timestamp: int) -> int | None:
        """The first entry whose timestamp is at or after ``timestamp`` (ms), or None if
        every entry is earlier (or has none: a raw segment)."""
        return await self._run(self.plan.entry_at_time(timestamp))

    async def _run(self, plan: Plan[T]) -> T:
        answer: object = None
        while True:
            try:
                step = plan.send(answer)
            except StopIteration as done:
                result: T = done.value
                return result
            assert not isinstance(step, Emit), "only batches() emits rows"
            answer = await self._perform(step)

    async def _perform(self, step: Head | Get | Work) -> object:
        if isinstance(step, Head):
            return await self.tier.head(self.key)
        if isinstance(step, Get):
            return await self.tier.get_range(self.key, step.offset, step.length)
        return await anyio.to_thread.run_sync(step.call)


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
    """The rows of entries ``first..last`` of a row group's table (rows are entries in
    ascending order: consecutive, or with gaps in a compacted segment's object), with the
    columns asked for."""
    ids = table.column("entry_id").to_numpy()
    if len(ids) != group.rows or (len(ids) and (ids[0] != group.first_entry_id or ids[-1] != group.last_entry_id)):
        raise NoSuchEntryError(f"row group {group.index} does not hold entries {first}..{last} where its footer says")
    lo, hi = int(np.searchsorted(ids, first, "left")), int(np.searchsorted(ids, last, "right"))
    return table.slice(lo, hi - lo).select(list(columns) if columns is not None else connector_columns())


def _first_at(table: pa.Table, group: RowGroupSpan, timestamp: int) -> int | None:
    times = table.column("timestamp").cast(pa.int64()).fill_null(-1).to_numpy()
    at = np.flatnonzero(times >= timestamp)
    if not at.size:
        return None
    if "entry_id" in table.column_names:
        return int(table.column("entry_id")[int(at[0])].as_py())
    return group.first_entry_id + int(at[0])


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
