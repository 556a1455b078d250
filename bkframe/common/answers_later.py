"""Answers a connection sends when they are ready rather than when their request is read:
its long polls (:class:`bkframe.bookie.lac_waiters.ConnectionPolls`) and its SUB_* calls
(:class:`bkframe.subscriptions.host.SubscriptionHost`'s connections)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs
import trio


@attrs.define(eq=False)
class AnswersLater:
    """Whatever makes an answer appends it to ``_ready`` and sets ``_changed``; one task of
    the connection sends them (:meth:`run`), all that are ready in one batch."""

    _ready: list[bytes] = attrs.field(factory=list, init=False)
    _changed: trio.Event = attrs.field(factory=trio.Event, init=False)
    _closed: bool = attrs.field(default=False, init=False)

    async def run(self, send: Callable[[list[bytes]], Awaitable[None]]) -> None:
        """Send the answers as they come (``send``), and return once the connection is
        closed and everything is sent."""
        while True:
            if self._ready:
                ready, self._ready = self._ready, []
                await send(ready)
                continue
            if self._closed:
                return
            self._changed = trio.Event()
            await self._wait()

    async def _wait(self) -> None:
        """Until ``_changed`` is set; a subclass may end it sooner for work of its own."""
        await self._changed.wait()
