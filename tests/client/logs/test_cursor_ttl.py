"""Cursors that do not pin the disk forever: a cursor idle past its TTL (its own or the log's)
stops holding retention back, a trim passes it and moves it on, and its consumer coming back
makes it active again. Off by default. On three real bookie processes."""

from __future__ import annotations

import pytest

import bkframe
from bkframe import CursorInfo, Position
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import wait_until


async def test_an_idle_cursor_stops_pinning_the_log_after_its_ttl(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata, cursor_flush_interval_s=0) as client:
        logs = client.logs
        await logs.create("pinned", rollover_entries=2, cursor_ttl_s=0.5)
        async with await logs.open_writer("pinned") as writer:
            await writer.append_many([b"%d" % i for i in range(6)])  # segments 0, 1, 2
        # "dead": the log's TTL (0.5 s); "patient": a TTL of its own, an hour.
        await logs.create_cursor("pinned", "dead", "earliest")
        await logs.create_cursor("pinned", "patient", "earliest", ttl_s=3600)

        async def dead_expired() -> dict[str, CursorInfo] | None:
            infos = {c.cursor.name: c for c in await logs.cursor_infos("pinned")}
            return infos if infos["dead"].expired else None

        infos = await wait_until(dead_expired, "the dead cursor idle past the log's TTL", 30)
        assert infos["dead"].expired and infos["dead"].ttl_s == 0.5 and infos["dead"].lag == 6
        assert not infos["patient"].expired and infos["patient"].ttl_s == 3600
        # The patient cursor holds the log: nothing goes.
        assert (await logs.trim("pinned", before=Position(2, 0))).removed == ()
        # Back to the log's TTL, long passed: it no longer holds anything either.
        await logs.set_cursor_ttl("pinned", "patient", None)
        result = await logs.trim("pinned", before=Position(2, 0))
        assert [s.number for s in result.removed] == [0, 1]
        assert sorted(result.moved_cursors) == ["dead", "patient"]
        # Moved to the new start, and still idle: being moved by a trim is no sign of life.
        infos = {c.cursor.name: c for c in await logs.cursor_infos("pinned")}
        assert {c.cursor.position for c in infos.values()} == {Position(2, 0)}
        assert all(c.expired and c.idle_s >= 0.5 and c.lag == 2 for c in infos.values())
        # Its consumer comes back and acks: active again.
        await logs.ack("pinned", "dead", Position(2, 0))
        dead = {c.cursor.name: c for c in await logs.cursor_infos("pinned")}["dead"]
        assert not dead.expired and dead.lag == 1


async def test_without_a_ttl_a_cursor_pins_forever(shared_cluster: Cluster) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        await logs.create("forever", rollover_entries=2)
        async with await logs.open_writer("forever") as writer:
            await writer.append_many([b"a", b"b", b"c"])
        await logs.create_cursor("forever", "slow", "earliest")

        async def idle_a_while() -> CursorInfo | None:
            [info] = await logs.cursor_infos("forever")
            return info if info.idle_s >= 0.2 else None

        info = await wait_until(idle_a_while, "the cursor idle for 0.2 s", 30)
        assert info.ttl_s is None and not info.expired
        assert (await logs.trim("forever", before=Position(1, 0))).removed == ()
        with pytest.raises(ValueError, match="ttl_s must be > 0"):
            await logs.set_cursor_ttl("forever", "slow", 0)
