"""The in-flight memory budget's rules, one by one (the attacks on a real bookie are in
test_hostile_clients.py): room is taken in order, a frame larger than the budget goes
alone, one address that holds its share never stops the others, and a waiter that gives
up takes nothing."""

from __future__ import annotations

from functools import partial

import trio
import trio.testing

from bkframe.bookie.serving.inflight_memory import ConnectionMemory, FrameMemory, InflightMemory
from bkframe.core.counters import Counters


async def take_into(memory: InflightMemory, got: list[str], name: str, address: str, size: int) -> None:
    """Take ``size`` bytes for ``address``, then note ``name`` in ``got``."""
    await memory.take(address, size)
    got.append(name)


def budget(capacity: int = 100, per_address: int = 60) -> InflightMemory:
    return InflightMemory(capacity, per_address, Counters())


async def test_waiters_get_room_in_order_and_a_large_frame_goes_alone() -> None:
    memory = budget()
    assert memory.try_take("a", 50)
    got: list[str] = []
    take = partial(take_into, memory, got)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "huge", "b", 500)  # larger than the whole budget
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(take, "small", "c", 10)  # would fit, but waits its turn
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and not memory.try_take("d", 1)
        memory.release("a", 50)  # nothing held: the huge frame goes alone
        await trio.testing.wait_all_tasks_blocked()
        assert got == ["huge"] and memory.used == 500
        memory.release("b", 500)
    assert got == ["huge", "small"] and memory.used == 10 and memory.counters.inflight_bytes == 10


async def test_an_address_holding_its_share_does_not_stop_the_others() -> None:
    memory = budget()
    assert memory.try_take("flood", 60)
    got: list[str] = []
    take = partial(take_into, memory, got)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take, "flood again", "flood", 30)
        await trio.testing.wait_all_tasks_blocked()
        assert memory.try_take("honest", 30)  # passes the waiting flood
        nursery.start_soon(take, "honest waits", "honest", 20)  # no room in the whole budget
        await trio.testing.wait_all_tasks_blocked()
        memory.release("honest", 30)  # room again: for the honest waiter, not the flood's
        await trio.testing.wait_all_tasks_blocked()
        assert got == ["honest waits"]
        memory.release("flood", 60)
    assert got == ["honest waits", "flood again"]


async def test_a_waiter_that_gives_up_takes_nothing_and_lets_the_next_go() -> None:
    memory = budget()
    assert memory.try_take("a", 90)
    with trio.move_on_after(0.01):
        await memory.take("b", 50)
    assert memory.used == 90 and memory.try_take("c", 10)


async def test_a_frame_gives_its_memory_back_once_every_answer_is_sent() -> None:
    memory = budget()
    connection = ConnectionMemory(memory, "a")
    assert await connection.reserve(0, 40) == 40
    frame = FrameMemory(connection, 40)
    connection.charge(5)
    batch_sent = frame.hold(5)
    deferred_sent = frame.hold()
    frame.done()  # the reader is through with the frame
    batch_sent()
    assert memory.used == 40  # a deferred answer still keeps its requests
    deferred_sent()
    assert memory.used == 0
    connection.charge(7)
    connection.close()  # what a connection holds goes with it, and nothing twice
    connection.release(7)
    assert memory.used == 0 and connection.held == 0
