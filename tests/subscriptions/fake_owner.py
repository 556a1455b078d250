"""A fake subscription owner for the wire's tests: it records what it is asked, and the
factory that hands it to a bookie's subscription host."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import attrs

from bkframe.client.logs.positions import Position
from bkframe.subscriptions.host import HostedOwner
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionStats

DELIVERIES = [
    Delivery(Position(1, 0), 1, 1_700_000_000_000, b"first", b"k1", 1_699_000_000_000, {"a": "b"}),
    Delivery(Position(1, 1), 3, 1_700_000_000_001, b"", None, None),
    Delivery(Position(2, 2**32 - 1), 2, 5, b"x" * 10_000, b"", 0, {"ключ": "значение", "": ""}),
]
STATS = SubscriptionStats(7, 3, 1, 2, 40, 5, 30, 1, Position(1, 0), 2, owner="bookie-0", epoch=4)


@attrs.define(eq=False)
class FakeOwner:
    """An owner that records what it was asked; its leases hand out DELIVERIES once, then
    wait (for ``wait_s``, or until cancelled) and hand out nothing."""

    leases: list[tuple[str, int, float, float | None]] = attrs.Factory(list)
    settles: list[tuple[str, Settle]] = attrs.Factory(list)
    left: list[str] = attrs.Factory(list)
    #: Leases cut in their wait (their connection closed).
    cancelled: int = 0
    lost: anyio.Event = attrs.Factory(anyio.Event)
    closed: bool = False
    handed_out: bool = False

    async def lease(self, consumer: str, max_records: int, wait_s: float, lease_s: float | None = None) -> list[Delivery]:
        self.leases.append((consumer, max_records, wait_s, lease_s))
        if not self.handed_out:
            self.handed_out = True
            return DELIVERIES[:max_records]
        try:
            await anyio.sleep(wait_s)
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        return []

    async def settle(self, consumer: str, settle: Settle) -> None:
        self.settles.append((consumer, settle))

    async def leave(self, consumer: str) -> None:
        self.left.append(consumer)

    async def stats(self) -> SubscriptionStats:
        return STATS

    async def commit(self, *args: object, **kw: object) -> dict[str, object]:
        raise NotImplementedError

    async def aclose(self) -> None:
        self.closed = True


@attrs.define(eq=False)
class Factory:
    """Hands out ``owner`` (taking it anew once it is lost), or raises ``refuse()``."""

    owner: FakeOwner | None = None
    refuse: Callable[[], Exception] | None = None
    takes: int = 0

    async def __call__(self, log: str, name: str, password: bytes = b"") -> HostedOwner:
        self.takes += 1
        if self.refuse is not None:
            raise self.refuse()
        if self.owner is None or self.owner.lost.is_set():
            self.owner = FakeOwner()
        return self.owner
