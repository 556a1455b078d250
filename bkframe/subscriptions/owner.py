"""What a consumer asks of a subscription's owner. The in-process dispatcher and the wire
(a bookie hosting owners) serve the same calls, so the consumer's API is written once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from bkframe.client.logs.envelope import NO_PROPERTIES
from bkframe.client.logs.model import CommitResult
from bkframe.client.logs.positions import Position


@attrs.frozen
class Delivery:
    """One record leased to a consumer: the record, how many times it was delivered (1 the
    first time), and until when the lease holds (ms since the epoch)."""

    position: Position
    delivery_count: int
    deadline_ms: int
    payload: bytes
    key: bytes | None = None
    timestamp: int | None = None
    properties: Mapping[str, str] = NO_PROPERTIES


@attrs.frozen
class Settle:
    """A consumer's answers about records it leased, sent together."""

    acks: Sequence[Position] = ()
    #: Inclusive ranges: every position from the first to the last is acked.
    ack_ranges: Sequence[tuple[Position, Position]] = ()
    #: Records to deliver again, each after a delay (s; 0: now).
    nacks: Sequence[tuple[Position, float]] = ()
    #: Records whose lease is extended by ``lease_s`` (or the subscription's lease time).
    extends: Sequence[Position] = ()
    lease_s: float | None = None

    def __bool__(self) -> bool:
        return bool(self.acks or self.ack_ranges or self.nacks or self.extends)


@attrs.frozen
class SubscriptionStats:
    """``bkframe sub stats``: what a subscription holds and has done."""

    backlog: int
    in_flight: int
    waiting: int
    delayed: int
    delivered: int
    redelivered: int
    acked: int
    dead_lettered: int
    mark_delete: Position
    consumers: int
    owner: str | None = None
    epoch: int = 0


class SubscriptionOwner(Protocol):
    """The owner of one subscription, as a consumer sees it. Every call may raise
    :class:`~bkframe.errors.NotOwnerError` (ask the owner again) and
    :class:`~bkframe.errors.NoSuchSubscriptionError`."""

    async def lease(self, consumer: str, max_records: int, wait_s: float, lease_s: float | None = None) -> list[Delivery]:
        """Up to ``max_records`` records leased to ``consumer``, waiting up to ``wait_s`` for
        the first one (an empty list when none came)."""
        ...

    async def settle(self, consumer: str, settle: Settle) -> None:
        """Store ``settle``'s acks, nacks and extensions; returns once they are durable."""
        ...

    async def leave(self, consumer: str) -> None:
        """The consumer is gone: its leases end now (its records wait for redelivery)."""
        ...

    async def stats(self) -> SubscriptionStats: ...

    async def commit(
        self, consumer: str, positions: Sequence[Position], ledgers: Mapping[str, Iterable[int]], *,
        password: bytes | Mapping[str, bytes] = b"",
    ) -> dict[str, CommitResult]:
        """Ack ``positions`` and commit closed ``ledgers`` to other logs in one atomic step
        (exactly once through a worker: docs/subscriptions.md)."""
        ...
