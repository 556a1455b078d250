"""What serves a bookie's SUB_* requests (docs/subscriptions.md): the bookie only routes them.

The owners of subscriptions run with the client library, which the bookie never imports:
whoever starts the bookie hands it a :class:`SubscriptionCalls` (normally
:class:`bkframe.subscriptions.host.SubscriptionHost`, see :mod:`bkframe.bookie.service`).
Without one -- or before it runs -- every SUB_* request is answered NOT_OWNER with no
holder at once, so a consumer asks another bookie.

Each connection gets its own :class:`ConnectionCalls`, as it gets its long polls
(:mod:`bkframe.bookie.lac_waiters`): the server hands it the connection's SUB_* requests,
runs :meth:`ConnectionCalls.run` as one task of the connection to send the answers as they
come, and calls :meth:`ConnectionCalls.close` when the connection's reader ends, so that no
call outlives its connection (and the host learns which consumers left with it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from bkframe.proto.codes import Op, Status
from bkframe.proto.ops.subscription import (
    SubCommitRequest,
    SubLeaseRequest,
    SubLeaveRequest,
    SubRequest,
    SubSettleRequest,
    SubStatsRequest,
    encode_sub_refusal,
)

#: The op of each SUB_* request class (its answer's, a refusal's too).
SUB_OPS: dict[type[SubRequest], Op] = {
    SubLeaseRequest: Op.SUB_LEASE,
    SubSettleRequest: Op.SUB_SETTLE,
    SubLeaveRequest: Op.SUB_LEAVE,
    SubStatsRequest: Op.SUB_STATS,
    SubCommitRequest: Op.SUB_COMMIT,
}


class ConnectionCalls(Protocol):
    """One connection's SUB_* calls under way."""

    def call(self, req: SubRequest) -> bytes | None:
        """Start serving ``req``: its answer now (a refusal: a cap met, not hosted), or None
        (:meth:`run` sends it once the owner answered)."""
        ...

    async def run(self, send: Callable[[list[bytes]], Awaitable[None]]) -> None:
        """Run the calls and ``send`` their answers as they come; return once :meth:`close`
        was called and every call ended."""
        ...

    def close(self) -> None:
        """The connection's reader ended: end its calls now (a waiting lease is answered
        with what it has), then its consumers leave."""
        ...


class SubscriptionCalls(Protocol):
    """What hosts subscription owners on this bookie."""

    def connection(self) -> ConnectionCalls: ...


def refusal(req: SubRequest, status: Status, message: str, holder: str = "") -> bytes:
    """The answer refusing ``req`` (of any SUB_* op)."""
    return encode_sub_refusal(SUB_OPS[type(req)], req.request_id, status, message, holder)


class _NotHosted:
    """A connection's calls on a bookie that hosts no owners: every one is refused at once."""

    def __init__(self) -> None:
        self._closed = trio.Event()

    def call(self, req: SubRequest) -> bytes | None:
        return refusal(req, Status.NOT_OWNER, "this bookie hosts no subscription owners ([subscriptions] enabled, or starting)")

    async def run(self, send: Callable[[list[bytes]], Awaitable[None]]) -> None:
        await self._closed.wait()

    def close(self) -> None:
        self._closed.set()


class NotHosted:
    """The :class:`SubscriptionCalls` of a bookie without a host."""

    def connection(self) -> ConnectionCalls:
        return _NotHosted()
