"""Cursor acks are stored at most once per cursor per interval, flushed on demand and at
close, and two clients of one cursor never overwrite each other's progress (docs/logs.md).

A log with cursors needs no bookie (no entry is read): the metadata store is ``memory://``
and time is trio's autojump clock, so intervals cost nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing

import bkframe
from bkframe import Client, Position


@pytest.fixture
def uri() -> str:
    return f"memory://acks-{uuid.uuid4().hex}"


@asynccontextmanager
async def counting_client(uri: str, **settings: Any) -> AsyncIterator[tuple[Client, list[bytes]]]:
    """A client whose cursor writes are recorded (the values stored, in order)."""
    async with bkframe.open_client(uri, **settings) as client:
        store = client.metadata
        writes: list[bytes] = []
        original: Callable[..., Awaitable[int]] = store.write_cursor

        async def write_cursor(log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
            version = await original(log, cursor, value, expected_version)
            writes.append(value)
            return version

        store.write_cursor = write_cursor  # type: ignore[method-assign]
        yield client, writes


async def stored(uri: str, cursor: str = "c") -> Position:
    """The position as another client, reading the store, finds it."""
    async with bkframe.open_client(uri) as other:
        return (await other.logs.cursor("log", cursor)).position


async def test_a_burst_of_acks_is_one_write_per_interval_and_close_stores_the_last(
    uri: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with counting_client(uri, cursor_flush_interval_s=1.0) as (client, writes):
        logs = client.logs
        await logs.create("log")
        await logs.create_cursor("log", "c")
        writes.clear()
        start = trio.current_time()
        for i in range(3000):  # 300 acks a second for 10 s
            acked = await logs.ack("log", "c", Position(0, i))
            assert acked.position == Position(0, i + 1)
            await trio.sleep(1 / 300)
        elapsed = trio.current_time() - start
        assert 9 <= len(writes) <= elapsed + 1, len(writes)
        # Not stored yet: what a crash now would leave (the consumer would see those again).
        assert Position(0, 2000) < await stored(uri) < Position(0, 3000)
        await trio.sleep(1.01)
        assert await stored(uri) == Position(0, 3000)
        await logs.ack("log", "c", Position(0, 3000))
        await logs.ack("log", "c", Position(0, 3001))
    # The block's end stored the acks still pending.
    assert await stored(uri) == Position(0, 3002)


async def test_flush_stores_now_and_every_ack_is_a_write_with_interval_zero(
    uri: str, autojump_clock: trio.testing.MockClock
) -> None:
    async with counting_client(uri, cursor_flush_interval_s=60.0) as (client, writes):
        logs = client.logs
        await logs.create("log")
        await logs.create_cursor("log", "c")
        await logs.ack("log", "c", Position(0, 0))
        await trio.sleep(0.1)
        for i in range(1, 10):
            await logs.ack("log", "c", Position(0, i))
        await trio.sleep(1)
        assert await stored(uri) == Position(0, 1)  # the first ack went at once; the rest wait a minute
        await logs.flush_cursors("log")
        assert await stored(uri) == Position(0, 10)
        # The client's own reads and trims see its acks.
        await logs.ack("log", "c", Position(0, 10))
        assert (await logs.cursor("log", "c")).position == Position(0, 11)
    async with counting_client(uri, cursor_flush_interval_s=0) as (client, writes):
        writes.clear()
        for i in range(11, 21):
            await client.logs.ack("log", "c", Position(0, i))
            assert await stored(uri) == Position(0, i + 1)
        assert len(writes) == 10


async def test_two_consumers_of_one_cursor_and_a_rewind(uri: str, autojump_clock: trio.testing.MockClock) -> None:
    async with counting_client(uri, cursor_flush_interval_s=1.0) as (a, _), counting_client(
        uri, cursor_flush_interval_s=1.0
    ) as (b, _):
        await a.logs.create("log")
        await a.logs.create_cursor("log", "c")
        await a.logs.ack("log", "c", Position(0, 0))
        await b.logs.ack("log", "c", Position(0, 0))
        await trio.sleep(1.5)
        # Both ack; b is further: whatever order the flushes come in, the cursor ends at b's.
        await a.logs.ack("log", "c", Position(0, 50))
        await b.logs.ack("log", "c", Position(0, 80))
        await a.logs.ack("log", "c", Position(0, 60))
        await trio.sleep(3)
        assert await stored(uri) == Position(0, 81)
        await a.logs.ack("log", "c", Position(0, 90))
        await trio.sleep(3)
        assert await stored(uri) == Position(0, 91)  # a's flush re-read b's write and went on from it
        # An operator rewinds the cursor while a has acks not stored yet: the rewind wins.
        await a.logs.ack("log", "c", Position(0, 95))  # due a second after the last write
        async with bkframe.open_client(uri) as operator:
            await operator.logs.move_cursor("log", "c", Position(0, 10), rewind=True)
        await trio.sleep(3)
        assert await stored(uri) == Position(0, 10)
        # move_cursor stores at once, taking this client's pending acks along when they are further.
        await a.logs.ack("log", "c", Position(0, 30))
        moved = await a.logs.move_cursor("log", "c", Position(0, 20))
        assert moved.position == Position(0, 31) == await stored(uri)


async def test_a_deleted_cursor_drops_its_pending_acks(uri: str, autojump_clock: trio.testing.MockClock) -> None:
    async with counting_client(uri, cursor_flush_interval_s=5.0) as (client, _):
        logs = client.logs
        await logs.create("log")
        await logs.create_cursor("log", "c")
        await logs.ack("log", "c", Position(0, 0))
        await logs.ack("log", "c", Position(0, 5))
        async with bkframe.open_client(uri) as other:
            await other.logs.delete_cursor("log", "c")
        await trio.sleep(10)  # the background flush finds it gone and gives up (logged)
        await logs.flush_cursors()  # nothing left to store
        with pytest.raises(bkframe.NoSuchCursorError):
            await logs.ack("log", "c", Position(0, 9))
