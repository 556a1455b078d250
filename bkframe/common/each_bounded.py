"""Many awaits with at most a few in flight (reads of many records, marks of many pages)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

import trio

T = TypeVar("T")


async def each_bounded(items: Iterable[T], limit: int, fn: Callable[[T], Awaitable[None]]) -> None:
    """``fn(item)`` for each item, ``limit`` at once; the first error is raised as itself
    (not in an exception group) once the others are done or cancelled, and no new item
    starts after it."""
    failed: list[Exception] = []
    limiter = trio.CapacityLimiter(limit)

    async def one(item: T) -> None:
        async with limiter:
            if failed:
                return
            try:
                await fn(item)
            except Exception as e:  # noqa: BLE001 - re-raised below, outside the nursery
                failed.append(e)

    async with trio.open_nursery() as nursery:
        for item in items:
            nursery.start_soon(one, item)
    if failed:
        raise failed[0]
