"""The subscription host's bounds, without a socket: a connection's calls under way, the
leases waiting on the bookie, the owners held. (Through a real bookie: test_wire.py.)"""

from __future__ import annotations

import trio

from bkframe.core.config import SubscriptionsConfig
from bkframe.proto.codes import Status
from bkframe.proto.ops.subscription import SubLeaseRequest, SubStatsRequest
from bkframe.proto.table import decode_responses
from bkframe.subscriptions.host import SubscriptionHost
from bkframe.testing.kit import wait_until
from tests.subscriptions.fake_owner import Factory


async def test_a_connection_beyond_its_calls_is_refused_and_a_lease_beyond_the_waiting_cap_waits_not() -> None:
    factory = Factory()
    host = SubscriptionHost(
        SubscriptionsConfig(max_calls_per_connection=2, max_waiting_leases=1), "bookie-0", factory=factory
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        conn = host.connection()
        answers: list[bytes] = []

        async def send(parts: list[bytes]) -> None:
            answers.extend(parts)

        nursery.start_soon(conn.run, send)
        assert conn.call(SubLeaseRequest(1, "l", "s", "c", 3, 0)) is None  # hands DELIVERIES out
        await wait_until(lambda: len(answers) == 1, "the first lease answered")
        assert conn.call(SubLeaseRequest(2, "l", "s", "c", 1, 50_000)) is None  # waits at the owner
        await wait_until(lambda: host.waiting_leases == 1, "a lease waiting")
        # The bookie's one waiting lease is taken: the next waits not.
        assert conn.call(SubLeaseRequest(3, "l", "s", "c", 1, 50_000)) is None
        (refused,) = decode_responses(conn.call(SubStatsRequest(4, "l", "s")) or b"")
        assert refused.status == Status.TOO_MANY_REQUESTS and "max_calls_per_connection" in refused.message
        await wait_until(lambda: len(answers) == 2, "the lease beyond the cap answered at once")
        owner = factory.owner
        assert owner is not None and [w for _, _, w, _ in owner.leases] == [0.0, 50.0, 0.0]
        conn.close()
        await wait_until(lambda: owner.left == ["c"] and host.calls == 0, "the closed connection's consumer left")
        nursery.cancel_scope.cancel()
    assert owner.closed  # given up with the host


async def test_a_bookie_owning_max_owners_sends_consumers_elsewhere() -> None:
    host = SubscriptionHost(SubscriptionsConfig(max_owners=1), "bookie-0", factory=Factory())
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        (first,) = decode_responses(await host.serve(SubStatsRequest(1, "l", "one")))
        (second,) = decode_responses(await host.serve(SubStatsRequest(2, "l", "two")))
        assert first.status == Status.OK
        assert (second.status, second.holder) == (Status.NOT_OWNER, "")  # type: ignore[attr-defined]
        assert "max_owners" in second.message
        nursery.cancel_scope.cancel()
