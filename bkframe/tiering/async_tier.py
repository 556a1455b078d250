"""A tier called from the event loop: each blocking call in a worker thread, through a limiter, under
a deadline of bkframe's own.

A tier's methods block (:mod:`bkframe.core.interfaces.tier`), and a plugin must time its calls out
itself; bkframe does not rely on that alone. A call that outlives its deadline is
*abandoned*: its caller gets :class:`~bkframe.errors.TierError` at once, while the thread
runs on and keeps its limiter token until the SDK returns, so calls that hang can never
pile up more threads than the limiter allows. The deadline grows with the bytes a call
moves (a put of a large object, a long ranged get): ``timeout_s`` plus the time they take
at ``min_bytes_per_s``.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TypeVar

import anyio
import attrs

from bkframe.core.interfaces.tier import ObjectInfo, Tier
from bkframe.errors import TierError

T = TypeVar("T")


@attrs.define
class AsyncTier:
    """``await tier.get_range(key, offset, length)`` and the rest of :class:`Tier`'s calls."""

    tier: Tier
    #: Calls in flight at once (each holds a worker thread).
    limiter: anyio.CapacityLimiter = attrs.field(factory=lambda: anyio.CapacityLimiter(8))
    timeout_s: float = 30.0
    #: The slowest transfer a call is allowed before it counts as hung.
    min_bytes_per_s: float = 1 << 20
    #: Ranged gets made, and the bytes they returned (what a read cost).
    gets: int = 0
    bytes_read: int = 0

    @property
    def uri(self) -> str:
        return self.tier.uri

    async def put(self, key: str, source: Path, *, if_absent: bool = False) -> ObjectInfo:
        size = source.stat().st_size
        return await self._call(f"put {key!r}", size, lambda: self.tier.put(key, source, if_absent=if_absent))

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        data = await self._call(
            f"get {key!r} bytes {offset}..{offset + length}", length, lambda: self.tier.get_range(key, offset, length)
        )
        self.gets += 1
        self.bytes_read += len(data)
        return data

    async def head(self, key: str) -> ObjectInfo | None:
        return await self._call(f"head {key!r}", 0, lambda: self.tier.head(key))

    async def delete(self, key: str) -> None:
        await self._call(f"delete {key!r}", 0, lambda: self.tier.delete(key))

    async def list(self, prefix: str = "", *, batch: int = 1000) -> AsyncGenerator[ObjectInfo, None]:
        """Every object whose key starts with ``prefix``, in key order. The tier's lazy
        listing is drawn ``batch`` objects per worker-thread call, each under the deadline,
        so a listing of millions of objects is never held in memory and a store that stops
        answering mid-listing is a TierError, not a hang. A listing abandoned by its
        deadline is not resumed (its thread may still be inside the tier's iterator)."""
        listing = await self._call(f"list {prefix!r}", 0, lambda: iter(self.tier.list(prefix)))
        while True:
            page = await self._call(f"list {prefix!r}", 0, lambda: list(itertools.islice(listing, batch)))
            for info in page:
                yield info
            if len(page) < batch:
                return

    async def _call(self, what: str, size: int, call: Callable[[], T]) -> T:
        deadline_s = self.timeout_s + size / self.min_bytes_per_s
        with anyio.move_on_after(deadline_s):
            return await anyio.to_thread.run_sync(call, limiter=self.limiter, abandon_on_cancel=True)
        raise TierError(f"tier {self.tier.uri}: {what} did not finish in {deadline_s:g} s (abandoned)")
