"""The event-loop lag measure sees a step that holds the loop, and forgets it after its window."""

from __future__ import annotations

import time

import trio

from bkframe.bookie.loop_lag import LoopLag


async def test_a_held_loop_shows_as_lag() -> None:
    lag = LoopLag(period_s=0.005, window_s=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        await trio.sleep(0.05)
        time.sleep(0.2)  # a step that computes without awaiting
        await trio.sleep(0.05)
        nursery.cancel_scope.cancel()
    assert 0.15 <= lag.recent_max == lag.max_since_start


def test_the_recent_maximum_covers_one_to_two_windows() -> None:
    lag = LoopLag(window_s=10)
    lag.observe(0.3, now=1)
    lag.observe(0.01, now=12)  # a new window: the last one's maximum still counts
    assert lag.recent_max == 0.3
    lag.observe(0.02, now=23)
    assert lag.recent_max == 0.02 and lag.max_since_start == 0.3
