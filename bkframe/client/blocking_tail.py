"""The blocking facade's iterators: an async iterator of the client's as a plain one
(``for entry in reader.tail(...)``), each step a hop into the client's loop.

Part of :mod:`bkframe.client.blocking` (which re-exports :class:`BlockingTail`); apart so
that neither module grows past what a reader takes in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar, TypeVarTuple

import anyio

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class LoopRunner(Protocol):
    """What runs a step in the client's loop: :class:`bkframe.client.blocking.BlockingClient`."""

    def _run(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T: ...


async def singly(items: AsyncIterator[T]) -> AsyncIterator[list[T]]:
    """``items`` one at a time, as the one-item batches :class:`BlockingTail` takes."""
    try:
        async for item in items:
            yield [item]
    finally:
        await _aclose(items)


async def _aclose(items: AsyncIterator[Any]) -> None:
    closer = getattr(items, "aclose", None)  # async generators have it; other async iterators may not
    if closer is not None:
        await closer()


class BlockingTail(Iterator[T]):
    """An async iterator of the client's, as a plain iterator: ``for entry in
    reader.tail(...)``. ``close()`` (or ``with``) ends it early; with ``idle_timeout_s``
    it ends once no item came for that long."""

    def __init__(self, owner: LoopRunner, batches: AsyncIterator[Sequence[T]], idle_timeout_s: float | None = None) -> None:
        self._owner = owner
        #: Items come from the client's loop a batch per hop (a tail's chunk of entries).
        self._batches: AsyncIterator[Sequence[T]] | None = batches
        self._idle = idle_timeout_s
        self._buffer: deque[T] = deque()
        self._ended = False

    async def _next_batch(self) -> Sequence[T] | None:
        assert self._batches is not None
        with anyio.move_on_after(self._idle if self._idle is not None else float("inf")):
            try:
                return await self._batches.__anext__()
            except StopAsyncIteration:
                return None
        return None

    def __next__(self) -> T:
        while not self._buffer:
            if self._ended:
                raise StopIteration
            batch = self._owner._run(self._next_batch)
            if batch is None:
                self.close()
                raise StopIteration
            self._buffer.extend(batch)
        return self._buffer.popleft()

    def close(self) -> None:
        self._ended = True
        batches, self._batches = self._batches, None
        if batches is not None:
            self._owner._run(_aclose, batches)

    def __enter__(self) -> BlockingTail[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
