"""A subscription owned in the consumer's own process: the :class:`SubscriptionOwner` that
takes the subscription (a :class:`~bkframe.subscriptions.dispatcher.Dispatcher` run by the
client) when it needs it, and takes it again when its owner ends — after a crash of the
process that owned it, once that one's lock has expired.

Every consumer of a subscription that uses it in one process shares one owner; consumers in
another process wait for it (until ``failover_s``), since they cannot reach it: reaching an
owner in another process is the bookie host's part (docs/subscriptions.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import anyio
import attrs

from bkframe.client.logs.model import CommitResult
from bkframe.client.logs.positions import Position
from bkframe.errors import NotOwnerError
from bkframe.subscriptions.dispatcher import Dispatcher
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionStats

T = TypeVar("T")


@attrs.define(eq=False)
class LocalOwner:
    """The owner of ``log``/``name`` in this process (see the module's docstring)."""

    client: object
    log: str
    name: str
    password: bytes = attrs.field(default=b"", kw_only=True)
    owner_ttl_s: float = attrs.field(default=10.0, kw_only=True)
    failover_s: float = attrs.field(default=60.0, kw_only=True)
    dispatcher: Dispatcher | None = attrs.field(default=None, init=False)
    _taking: anyio.Lock = attrs.field(factory=anyio.Lock, init=False)

    async def _owner(self) -> Dispatcher:
        async with self._taking:
            d = self.dispatcher
            if d is None or d.lost.is_set():
                ctx = self.client.context  # type: ignore[attr-defined]
                d = self.dispatcher = await Dispatcher.take(
                    self.client, self.log, self.name, holder=self.client.client_id,  # type: ignore[attr-defined]
                    task_group=ctx.nursery, owner_ttl_s=self.owner_ttl_s, password=self.password,
                )
            return d

    async def _call(self, call: Callable[[Dispatcher], Awaitable[T]]) -> T:
        give_up = anyio.current_time() + self.failover_s
        pause = 0.05
        while True:
            try:
                return await call(await self._owner())
            except NotOwnerError:
                if anyio.current_time() + pause > give_up:
                    raise
            # The previous owner's lock has not expired yet (or a race was lost): again soon.
            await anyio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def lease(self, consumer: str, max_records: int, wait_s: float, lease_s: float | None = None) -> list[Delivery]:
        return await self._call(lambda d: d.lease(consumer, max_records, wait_s, lease_s))

    async def settle(self, consumer: str, settle: Settle) -> None:
        await self._call(lambda d: d.settle(consumer, settle))

    async def leave(self, consumer: str) -> None:
        d = self.dispatcher
        if d is not None and not d.lost.is_set():
            await d.leave(consumer)

    async def stats(self) -> SubscriptionStats:
        return await self._call(lambda d: d.stats())

    async def commit(
        self, consumer: str, positions: Sequence[Position], ledgers: Mapping[str, Iterable[int]], *,
        password: bytes | Mapping[str, bytes] = b"",
    ) -> dict[str, CommitResult]:
        return await self._call(lambda d: d.commit(consumer, positions, ledgers, password=password))

    async def aclose(self) -> None:
        if self.dispatcher is not None:
            await self.dispatcher.aclose()
            self.dispatcher = None
