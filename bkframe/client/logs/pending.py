"""A log writer's segments in flight and its appends: what :mod:`.writer` hands out and
steers. An :class:`ActiveSegment` is a segment being appended to (its gate opens once its appends
may complete); a :class:`PendingLogAppend` an append waiting for its position."""

from __future__ import annotations

import time
from functools import partial
from itertools import repeat
from typing import TYPE_CHECKING, Protocol

import anyio
import attrs

from bkframe.client.logs.model import LogMetadata, Position, Segment
from bkframe.errors import BKError

if TYPE_CHECKING:
    from bkframe.client.write_handle import PendingAppend, WriteHandle
    from bkframe.core.metadata import LedgerMetadata


class Failing(Protocol):
    """The writer, as its segments see it: where a failure is recorded and converted."""

    def _failed(self, error: BaseException) -> BaseException: ...


#: ``Position(s, e)`` without the named tuple's Python-level ``__new__`` (one per append).
_position = tuple.__new__
#: ``_new_position((s, e))``: the same, as a one-argument callable for ``map`` (a batch's
#: positions made in C: half the cost of a comprehension, ~0.1 us less per entry).
_new_position = partial(tuple.__new__, Position)


@attrs.define(eq=False)
class SpareLedger:
    """A ledger made ready for the next segment."""

    handle: WriteHandle
    #: Its segment number if it is in the record already as the successor of ``after``,
    #: whose ``last_sent`` was set to ``planned_last`` in the same CAS; else it is only
    #: listed among the record's spares.
    number: int = -1
    after: ActiveSegment | None = None
    planned_last: int = -1


@attrs.define(eq=False)
class ActiveSegment:
    """A segment this writer appends (or appended) to."""

    writer: Failing
    #: None until the segment's ledger is ready (appends are queued meanwhile).
    handle: WriteHandle | None
    spare: SpareLedger | None = None
    #: The segment number, known once the segment is in the log record.
    number: int = -1
    appended: int = 0
    size: int = 0
    started: float = attrs.Factory(time.monotonic)
    queued: list[tuple[bytes, PendingLogAppend]] = attrs.Factory(list)
    #: The smallest and largest timestamp appended here (recorded when it closes).
    min_ts: int = 1 << 62
    max_ts: int = -1
    registered: anyio.Event = attrs.Factory(anyio.Event)
    #: Set once this segment's appends may complete: it is in the record and every append
    #: of the earlier segments is confirmed (or something failed: see ``error``).
    gate: anyio.Event = attrs.Factory(anyio.Event)
    #: ``gate.is_set()``, as a plain attribute for the per-append checks.
    open: bool = False
    error: BaseException | None = None

    def open_gate(self) -> None:
        self.open = True
        self.gate.set()


class PendingLogAppend:
    """An append in flight; ``await pending.wait()`` returns its position once confirmed."""

    __slots__ = ("_inner", "_seg")

    def __init__(self, seg: ActiveSegment, inner: PendingAppend | None) -> None:
        self._seg = seg
        #: None while queued for a segment whose ledger is not ready yet.
        self._inner = inner

    def done(self) -> bool:
        inner = self._inner
        return self._seg.open and (inner is None or inner.done())

    def result(self) -> Position:
        """The position of a :meth:`done` append (raises what :meth:`wait` would)."""
        seg = self._seg
        inner = self._inner
        if not seg.open or inner is None or not inner.done():
            if seg.open and seg.error is not None:
                raise seg.error
            raise RuntimeError("the append is not confirmed yet; await wait() instead")
        if seg.error is not None:
            raise seg.error
        if inner.error is not None:
            raise seg.writer._failed(inner.error) if isinstance(inner.error, BKError) else inner.error
        return _position(Position, (seg.number, inner.entry_id))

    async def wait(self) -> Position:
        seg = self._seg
        if not seg.open:
            await seg.gate.wait()
        if seg.error is not None:
            raise seg.error
        assert self._inner is not None  # the gate opens once the segment's appends are sent
        try:
            entry_id = await self._inner.wait()
        except BKError as e:
            raise seg.writer._failed(e) from None
        return _position(Position, (seg.number, entry_id))


class PendingLogBatch:
    """The appends of one :meth:`LogWriter.append_many_async`, in order: per segment it went
    to, that segment and the ledger's appends (no wrapper per entry: a batch's bookkeeping
    is per batch), or the queued appends of a segment whose ledger was not ready."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[tuple[ActiveSegment, list[PendingAppend]] | list[PendingLogAppend]]) -> None:
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(p[1]) if isinstance(p, tuple) else len(p) for p in self.parts)

    def done(self) -> bool:
        for part in self.parts:
            if isinstance(part, tuple):
                seg, inner = part
                if not seg.open or not inner[-1].done():
                    return False
            elif not all(p.done() for p in part):
                return False
        return True

    async def wait(self) -> list[Position]:
        """The positions, once every append is confirmed (raises the first failure)."""
        out: list[Position] = []
        for part in self.parts:
            if not isinstance(part, tuple):
                out.extend([await p.wait() for p in part])
                continue
            seg, inner = part
            if not seg.open:
                await seg.gate.wait()
            if seg.error is not None:
                raise seg.error
            # A ledger's appends complete in order and a failure fails every later one:
            # the last one's confirmation covers the part.
            try:
                await inner[-1].wait()
            except BKError as e:
                raise seg.writer._failed(e) from None
            number, first = seg.number, inner[0].entry_id  # a part's entry ids are consecutive
            out.extend(map(_new_position, zip(repeat(number), range(first, first + len(inner)))))
        return out


def closed_segment(current: Segment, seg: ActiveSegment, md: LedgerMetadata, now: float) -> Segment:
    """``current`` closed with what the ledger holds, and the time bounds the writer saw."""
    closed = attrs.evolve(current, closed=True, last_entry_id=md.last_entry_id, length=md.length, closed_at=now)
    if seg.max_ts >= 0 and md.last_entry_id >= 0:
        closed = attrs.evolve(closed, min_ts=seg.min_ts, max_ts=seg.max_ts)
    return closed


def mark_closed(r: LogMetadata, seg: ActiveSegment, md: LedgerMetadata) -> LogMetadata:
    """The log record with ``seg`` closed (unchanged if it is not there or closed already)."""
    current = r.segment(seg.number)
    if current is None or current.closed:
        return r
    return r.replace_segment(closed_segment(current, seg, md, time.time()))
