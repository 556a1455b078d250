"""Subscriptions over the wire: real bookies host a fake owner through the subscription host's
factory (the owner itself is tested in test_subscriptions.py), and consumers reach it with
:class:`RemoteOwner` -- lease, settle, leave, stats; a connection that closes makes its
consumers leave; NOT_OWNER is followed to the holder it names; a malformed SUB_* frame is
refused with why, and the bookie serves on. (The messages alone: tests/proto.)"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import attrs
import pytest
import trio

import bkframe
from bkframe.autorecovery.data_integrity import LimboRepair
from bkframe.bookie.service import BookieService
from bkframe.client.bookies.connection import connect_bookie
from bkframe.client.logs.positions import Position
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import NoSuchSubscriptionError, NotOwnerError
from bkframe.proto import table
from bkframe.proto.codes import Op, Status
from bkframe.proto.frames import pack_message
from bkframe.proto.ops.subscription import encode_sub_lease, encode_sub_stats
from bkframe.subscriptions.host import OwnerFactory, SubscriptionHost
from bkframe.subscriptions.owner import Settle
from bkframe.subscriptions.remote import RemoteOwner, rendezvous
from bkframe.testing.cluster import make_config
from bkframe.testing.kit import FAST, wait_until
from tests.subscriptions.fake_owner import DELIVERIES, STATS, Factory

LOG, SUB = "jobs", "workers"


@attrs.frozen
class Hosted:
    uri: str
    host: str
    port: int
    factory: Factory
    service: BookieService


@asynccontextmanager
async def hosting_bookie(
    tmp_path: Path, uri: str, bookie_id: str, factory: OwnerFactory
) -> AsyncIterator[tuple[BookieService, str, int]]:
    """A bookie whose subscription host takes owners with ``factory``."""
    config = make_config(tmp_path / bookie_id, metadata=uri, bookie_id=bookie_id)
    service = BookieService(
        config, PluginManager(), repair=LimboRepair, init_cluster=True,
        subscriptions=lambda bookie, store, bid: SubscriptionHost(bookie.config.subscriptions, bid, factory=factory),
    )
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(service.run)
        try:
            yield service, host, port
        finally:
            service.stop()


@pytest.fixture
async def one_bookie(tmp_path: Path) -> AsyncIterator[Hosted]:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    factory = Factory()
    async with hosting_bookie(tmp_path, uri, "bookie-0", factory) as (service, host, port):
        yield Hosted(uri, host, port, factory, service)


async def test_lease_settle_leave_and_stats_reach_the_owner(one_bookie: Hosted) -> None:
    uri, factory = one_bookie.uri, one_bookie.factory
    async with bkframe.open_client(uri, **FAST) as client:
        remote = RemoteOwner(client, LOG, SUB, failover_s=20)
        assert await remote.lease("c1", 10, 0.5, 7.5) == DELIVERIES
        assert remote.bookie == "bookie-0" and factory.takes == 1
        owner = factory.owner
        assert owner is not None and owner.leases == [("c1", 10, 0.5, 7.5)]
        settle = Settle(
            acks=(Position(1, 0),), ack_ranges=((Position(1, 1), Position(3, 4)),),
            nacks=((Position(2, 2**32 - 1), 0.25),), extends=(Position(9, 9),), lease_s=12.0,
        )
        await remote.settle("c1", settle)
        assert owner.settles == [("c1", settle)]
        await remote.settle("c2", Settle(acks=[Position(4, 4)]))
        assert owner.settles[1] == ("c2", Settle(acks=(Position(4, 4),)))
        await remote.leave("c1")
        assert owner.left == ["c1"]
        assert await remote.stats() == STATS
        assert factory.takes == 1  # one owner for every call


async def test_a_lease_waits_no_longer_than_the_bookie_allows(one_bookie: Hosted) -> None:
    uri, factory = one_bookie.uri, one_bookie.factory
    async with bkframe.open_client(uri, **FAST) as client:
        remote = RemoteOwner(client, LOG, SUB, failover_s=20)
        await remote.lease("c1", 1, 0)
        owner = factory.owner
        assert owner is not None
        with trio.move_on_after(0.2):  # the owner has nothing more: it would wait 10^6 s
            await remote.lease("c1", 1, 1e6)
        assert owner.leases[-1][2] == 60.0  # [subscriptions] max_lease_wait_s


async def test_a_closed_connection_makes_its_consumers_leave(one_bookie: Hosted) -> None:
    host, port, factory = one_bookie.host, one_bookie.port, one_bookie.factory
    async with connect_bookie(host, port) as conn:
        first = await conn.submit(table.SUB_LEASE, lambda rid: encode_sub_lease(rid, LOG, SUB, "gone", 8, 0)).wait()
        assert first.status == Status.OK and len(first.records) == 3
        waiting = conn.submit(table.SUB_LEASE, lambda rid: encode_sub_lease(rid, LOG, SUB, "gone", 8, 50_000), timeout_s=60)
        owner = factory.owner
        assert owner is not None
        await wait_until(lambda: len(owner.leases) == 2, "the second lease waiting at the owner")
        assert not owner.left
    # The connection closed with a lease waiting: the lease ends, then its consumer leaves.
    await wait_until(lambda: owner.left == ["gone"], "the consumer of the closed connection to leave")
    assert owner.cancelled == 1 and waiting.done()


async def test_a_consumer_that_leased_through_a_newer_connection_does_not_leave(one_bookie: Hosted) -> None:
    host, port, factory = one_bookie.host, one_bookie.port, one_bookie.factory
    server = one_bookie.service.server
    assert server is not None
    async with connect_bookie(host, port) as new:
        async with connect_bookie(host, port) as old:
            for conn in (old, new):  # the consumer reconnected: it leases through the new one now
                answer = await conn.submit(table.SUB_LEASE, lambda rid: encode_sub_lease(rid, LOG, SUB, "moved", 1, 0)).wait()
                assert answer.status == Status.OK
        await wait_until(lambda: server.connections == 1, "the bookie to see the old connection closed")
        stats = await new.submit(table.SUB_STATS, lambda rid: encode_sub_stats(rid, LOG, SUB)).wait()
        owner = factory.owner
        assert stats.status == Status.OK and owner is not None and owner.left == []
    await wait_until(lambda: owner.left == ["moved"], "the consumer to leave with its last connection")


async def test_not_owner_is_followed_to_the_holder(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    # The bookie the ranking asks first is not the owner: it names the other.
    first, other = rendezvous(LOG, SUB, ["bookie-a", "bookie-b"])
    owning = Factory()
    naming = Factory(refuse=lambda: NotOwnerError("owned elsewhere", holder=other))
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(hosting_bookie(tmp_path, uri, first, naming))
        await stack.enter_async_context(hosting_bookie(tmp_path, uri, other, owning))
        async with bkframe.open_client(uri, **FAST) as client:
            remote = RemoteOwner(client, LOG, SUB, failover_s=20)
            await wait_until(lambda: _writable(client, 2), "both bookies registered")
            assert await remote.lease("c1", 3, 0) == DELIVERIES
            assert naming.takes >= 1 and owning.takes == 1 and remote.bookie == other
            # Once lost, the owner is dropped and taken again.
            assert owning.owner is not None
            owning.owner.lost.set()
            await wait_until(lambda: owning.owner is not None and owning.owner.closed, "the lost owner closed")
            assert await remote.stats() == STATS
            assert owning.takes == 2


async def _writable(client: bkframe.Client, n: int) -> bool:
    return len((await client.pool.bookies.view(fresh=True)).writable) == n


async def test_a_subscription_that_does_not_exist_is_said_so(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    factory = Factory(refuse=lambda: NoSuchSubscriptionError(f"log {LOG!r} has no subscription {SUB!r}"))
    async with hosting_bookie(tmp_path, uri, "bookie-0", factory):
        async with bkframe.open_client(uri, **FAST) as client:
            with pytest.raises(NoSuchSubscriptionError, match="has no subscription"):
                await RemoteOwner(client, LOG, SUB, failover_s=20).stats()


async def test_a_malformed_sub_request_is_refused_with_why_and_the_bookie_serves_on(
    one_bookie: Hosted,
) -> None:
    host, port = one_bookie.host, one_bookie.port
    bad_name = pack_message(Op.SUB_LEASE, 0, 0, struct.pack("<BBBIII", 4, 1, 1, 1, 0, 0), b"../x", b"s", b"c")
    lying_count = pack_message(Op.SUB_SETTLE, 0, 0, struct.pack("<BBBIIIII", 1, 1, 1, 0, 2**32 - 1, 0, 0, 0), b"lsc")
    async with connect_bookie(host, port) as conn:
        for message, why in ((bad_name, "log name"), (lying_count, "more than")):
            answer = await conn.submit(table.SUB_LEASE, lambda rid, m=message: _with_id(m, rid)).wait()
            assert answer.status == Status.BAD_REQUEST and why in answer.message, answer
        stats = await conn.submit(table.SUB_STATS, lambda rid: encode_sub_stats(rid, LOG, SUB)).wait()
        assert stats.status == Status.OK and stats.backlog == STATS.backlog


def _with_id(message: bytes, request_id: int) -> bytes:
    out = bytearray(message)
    struct.pack_into("<Q", out, 6, request_id)
    return bytes(out)


async def test_a_dead_owner_bookie_is_left_for_the_next_one(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    first, second = rendezvous(LOG, SUB, ["bookie-a", "bookie-b"])
    factories = {first: Factory(), second: Factory()}
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(hosting_bookie(tmp_path, uri, second, factories[second]))
        client = await stack.enter_async_context(bkframe.open_client(uri, **FAST))
        async with hosting_bookie(tmp_path, uri, first, factories[first]):
            await wait_until(lambda: _writable(client, 2), "both bookies registered")
            remote = RemoteOwner(client, LOG, SUB, failover_s=30)
            assert await remote.lease("c1", 3, 0) == DELIVERIES and remote.bookie == first
        # The owner's bookie stopped: the call tries it, then the next of the ranking.
        assert await remote.stats() == STATS
        assert remote.bookie == second and factories[second].takes == 1


async def test_a_call_gives_up_once_its_failover_time_is_spent(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    nobody = Factory(refuse=lambda: NotOwnerError("owned by a process that is no bookie", holder=None))
    async with hosting_bookie(tmp_path, uri, "bookie-0", nobody):
        async with bkframe.open_client(uri, **FAST) as client:
            start = trio.current_time()
            with pytest.raises(NotOwnerError, match="no bookie"):
                await RemoteOwner(client, LOG, SUB, failover_s=1.0).lease("c1", 1, 0)
            assert trio.current_time() - start < 10  # bounded by failover_s and the last request
            assert nobody.takes >= 2  # tried again with a back-off, not once
