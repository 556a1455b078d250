"""A consumer of a subscription: ``async for msg in sub: ...; await msg.ack()``
(docs/subscriptions.md, "Using it").

The consumer leases a few records at a time (``prefetch``) from the subscription's owner,
hands them out one by one, and sends each ack, nack or extension to the owner, which
answers once it is durable. With ``group_acks`` an ack returns at once and the acks go to the
owner together, in one request (see :class:`Subscription`). Closing the consumer ends its
leases at once, so the records it held go to the others without waiting for their leases to
end.
"""

from __future__ import annotations

import collections
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType

import anyio
import attrs

from bkframe.client.logs.envelope import NO_PROPERTIES
from bkframe.client.logs.model import CommitResult
from bkframe.client.logs.positions import Position
from bkframe.errors import BKError
from bkframe.subscriptions.owner import Delivery, Settle, SubscriptionOwner

log = logging.getLogger("bkframe.subscriptions")

#: How long one lease request waits at the owner for a record before asking again (s).
LEASE_WAIT_S = 5.0
#: With ``group_acks``: an ack made when the oldest one waiting is this old sends them all.
ACK_GROUP_S = 0.1


@attrs.define(eq=False)
class Message:
    """A leased record. Ack it once handled (:meth:`ack`), or :meth:`nack` it to have it
    delivered again; :meth:`extend` keeps the lease while handling takes long."""

    position: Position
    payload: bytes
    key: bytes | None
    timestamp: int | None
    properties: Mapping[str, str]
    #: 1 the first time the record is delivered, 2 the second, ...
    delivery_count: int
    #: Until when the lease holds (ms since the epoch), unless extended.
    deadline_ms: int
    _subscription: Subscription = attrs.field(repr=False)

    async def ack(self) -> None:
        """The record is done; returns once the ack is durable (with the consumer's
        ``group_acks``: at once, the ack sent with the next group)."""
        await self._subscription.ack(self.position)

    def ack_nowait(self) -> bool:
        """With the consumer's ``group_acks``: the ack added to its group (True), unless the
        group is due to be sent (False, nothing done: call :meth:`ack`)."""
        return self._subscription.ack_nowait(self.position)

    async def nack(self, delay_s: float = 0.0) -> None:
        """Deliver the record again (to any consumer), after ``delay_s``."""
        await self._subscription.nack(self.position, delay_s)

    async def extend(self, lease_s: float | None = None) -> None:
        """Hold the lease ``lease_s`` longer from now (default: the subscription's lease time)."""
        await self._subscription.extend(self.position, lease_s)

    async def commit(
        self, ledgers: Mapping[str, Iterable[int]], *, password: bytes | Mapping[str, bytes] = b""
    ) -> dict[str, CommitResult]:
        """Ack this record and commit the closed ``ledgers`` (by log) in one atomic step: see
        :meth:`Subscription.commit`."""
        return await self._subscription.commit([self.position], ledgers, password=password)


class Subscription:
    """One consumer of a subscription (made by :meth:`bkframe.Logs.subscribe`).

    ``prefetch``: how many records it leases at once (the others wait at the owner for any
    consumer); ``lease_s``: its leases' length (default: the subscription's).

    ``group_acks``: :meth:`ack` returns at once, and the acks waiting go to the owner in one
    request when the consumer asks for more records (its prefetched ones used up), when
    ``prefetch`` of them wait, with the first ack made once the oldest waited
    :data:`ACK_GROUP_S`, and at :meth:`flush` and :meth:`aclose`. A consumer that dies before
    its acks went out has those records delivered again (at least once, as for any consumer
    that dies holding records). Without it (the default) every ack returns once durable."""

    def __init__(
        self, owner: SubscriptionOwner, log: str, name: str, *, prefetch: int = 16, lease_s: float | None = None,
        consumer_id: str | None = None, group_acks: bool = False,
    ) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be >= 1, got {prefetch}")
        #: The subscription's owner, as this consumer reaches it.
        self.owner: SubscriptionOwner = owner
        self.log: str = log
        self.name: str = name
        self.prefetch: int = prefetch
        self.lease_s: float | None = lease_s
        #: Who this consumer is to the owner (its leases are held under it).
        self.consumer_id: str = consumer_id or uuid.uuid4().hex
        self.group_acks: bool = group_acks
        self._buffer: collections.deque[Delivery] = collections.deque()
        #: With group_acks: the acks not sent yet, and since when the oldest waits.
        self._acks: list[Position] = []
        self._acks_since = 0.0
        self._closed = False

    async def receive(self, timeout_s: float | None = None) -> Message | None:
        """The next leased record, waiting up to ``timeout_s`` (None: until one comes); None
        if none came in time."""
        self._check_open()
        deadline = None if timeout_s is None else anyio.current_time() + timeout_s
        while not self._buffer:
            wait = LEASE_WAIT_S if deadline is None else max(0.0, min(LEASE_WAIT_S, deadline - anyio.current_time()))
            if self._acks:
                await self._lease_and_flush(wait)
            else:
                self._buffer.extend(await self.owner.lease(self.consumer_id, self.prefetch, wait, self.lease_s))
            if not self._buffer and deadline is not None and anyio.current_time() >= deadline:
                return None
        return self._message(self._buffer.popleft())

    async def _lease_and_flush(self, wait_s: float) -> None:
        """Lease and send the grouped acks side by side (one round trip, not two); both have
        ended when it returns, and it raises what either raised (not a group of them)."""
        errors: list[BKError] = []

        async def lease() -> None:
            try:
                self._buffer.extend(await self.owner.lease(self.consumer_id, self.prefetch, wait_s, self.lease_s))
            except BKError as e:
                errors.append(e)

        async def flush() -> None:
            try:
                await self.flush()
            except BKError as e:
                errors.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(lease)
            tg.start_soon(flush)
        if errors:
            raise errors[0]

    @property
    def unsent_acks(self) -> int:
        """With ``group_acks``: how many acks wait to be sent (0: every ack made so far went
        out and was confirmed, unless a call raised)."""
        return len(self._acks)

    def receive_nowait(self) -> Message | None:
        """The next record already leased to this consumer, without asking the owner (None
        if there is none, or the consumer is closed: call :meth:`receive`)."""
        return self._message(self._buffer.popleft()) if self._buffer else None

    def _message(self, d: Delivery) -> Message:
        return Message(d.position, d.payload, d.key, d.timestamp, d.properties or NO_PROPERTIES, d.delivery_count,
                       d.deadline_ms, self)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Message:
        if self._closed:
            raise StopAsyncIteration
        message = await self.receive()
        assert message is not None  # no timeout: receive waits until a record comes
        return message

    async def ack(self, *positions: Position) -> None:
        """Ack records by position; returns once durable (with ``group_acks``: once sent,
        or at once, see the class)."""
        if not self.group_acks:
            await self.owner.settle(self.consumer_id, Settle(acks=positions))
        elif not self.ack_nowait(*positions):
            self._acks += positions
            await self.flush()

    def ack_nowait(self, *positions: Position) -> bool:
        """With ``group_acks``: add the acks to the group and return True, unless the group is
        due to be sent (then False, nothing done: call :meth:`ack`). The blocking consumer
        acks this way without a trip to the client's thread."""
        if not self.group_acks:
            return False
        now = time.monotonic()
        if len(self._acks) + len(positions) >= self.prefetch or (self._acks and now - self._acks_since >= ACK_GROUP_S):
            return False
        if not self._acks:
            self._acks_since = now
        self._acks += positions
        return True

    async def flush(self) -> None:
        """Send the grouped acks waiting (``group_acks``); returns once they are durable."""
        if not self._acks:
            return
        acks = tuple(self._acks)
        self._acks.clear()
        try:
            await self.owner.settle(self.consumer_id, Settle(acks=acks))
        except BaseException:
            self._acks[:0] = acks  # sent with the next group, or at close
            raise

    async def ack_range(self, first: Position, last: Position) -> None:
        """Ack every record from ``first`` to ``last`` (inclusive), held by this consumer or not."""
        await self.owner.settle(self.consumer_id, Settle(ack_ranges=((first, last),)))

    async def nack(self, position: Position, delay_s: float = 0.0) -> None:
        if delay_s < 0:
            raise ValueError(f"a nack's delay_s must be >= 0, got {delay_s}")
        await self.owner.settle(self.consumer_id, Settle(nacks=((position, delay_s),)))

    async def extend(self, position: Position, lease_s: float | None = None) -> None:
        await self.owner.settle(self.consumer_id, Settle(extends=(position,), lease_s=lease_s or self.lease_s))

    async def commit(
        self, positions: Iterable[Position], ledgers: Mapping[str, Iterable[int]], *,
        password: bytes | Mapping[str, bytes] = b"",
    ) -> dict[str, CommitResult]:
        """Exactly once through a worker: ack ``positions`` and commit the closed ``ledgers``
        to their logs (log name -> ledger ids, as :meth:`bkframe.Logs.commit_many`) in **one**
        atomic step. A worker that crashes between its output and its ack never leaves its
        output twice: the records come again, and whichever delivery commits first wins; a
        later one gets :class:`~bkframe.errors.SubscriptionError` ("acked already"), nothing
        of it committed, and drops its output. Returns each output log's commit result."""
        return await self.owner.commit(self.consumer_id, list(positions), ledgers, password=password)

    async def aclose(self) -> None:
        """Leave: every record this consumer holds (handed out or not) goes back to the others."""
        if self._closed:
            return
        self._closed = True
        self._buffer.clear()
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                await self.flush()
            except BKError as e:  # its records are delivered again: at least once
                log.info("consumer %s of %s/%s: %d grouped acks not sent (%s)", self.consumer_id, self.log, self.name,
                         len(self._acks), e)
            try:
                await self.owner.leave(self.consumer_id)
            except BKError as e:  # its leases end with their deadlines instead: nothing is lost
                log.info("consumer %s of %s/%s: leaving failed (%s); its leases end at their deadlines",
                         self.consumer_id, self.log, self.name, e)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the consumer of subscription {self.name!r} of log {self.log!r} is closed")
