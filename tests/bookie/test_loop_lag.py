"""The event-loop lag measure sees a step that holds the loop, and forgets it after its window;
the bookie serves a long frame in short steps."""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from bkframe.bookie.runtime.loop_lag import GC_YOUNG_THRESHOLD, LoopLag, settle_python_gc
from bkframe.bookie.serving.server import SERVE_STEP_S
from bkframe.core.interfaces import Buffer
from bkframe.proto.codes import Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import encode_add
from bkframe.proto.table import Response, decode_responses
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import wait_until


async def test_a_held_loop_shows_as_lag() -> None:
    lag = LoopLag(period_s=0.005, window_s=60)
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        await trio.testing.wait_all_tasks_blocked()  # the sampler waits for its next tick
        time.sleep(0.2)  # a step that computes without awaiting
        await wait_until(lambda: lag.max_since_start >= 0.15, "the sampler to see the hold", 10, every_s=0.005)
        nursery.cancel_scope.cancel()
    assert 0.15 <= lag.recent_max == lag.max_since_start


def compute(seconds: float) -> None:
    """Hold the loop computing (a hold that sleeps uses no CPU, which the idle rule watches)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_an_idle_loop_is_sampled_seldom_and_work_brings_the_short_period_back() -> None:
    """Sleeping 10 ms was 94% of an idle bookie's CPU: an idle loop is sampled at the longer
    period; work on the loop brings back the short one, and a hold is measured as before."""
    lag = LoopLag(window_s=60, idle_period_s=0.1)
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        assert not lag.idle
        until = trio.current_time() + 15
        while not lag.idle:
            assert trio.current_time() < until, f"never idle: the loop used {lag.cpu_share:.1%} of a core"
            await trio.sleep(0.05)
        end = trio.current_time() + 0.3
        while trio.current_time() < end:  # a busy loop: many short steps
            compute(0.002)
            await trio.sleep(0)
        assert not lag.idle
        await trio.testing.wait_all_tasks_blocked()  # the sampler waits for its next tick
        compute(0.2)
        await wait_until(lambda: lag.max_since_start >= 0.15, "the sampler to see the hold", 10, every_s=0.005)
        nursery.cancel_scope.cancel()


def test_the_recent_maximum_covers_one_to_two_windows() -> None:
    lag = LoopLag(window_s=10)
    lag.observe(0.3, now=1)
    lag.observe(0.01, now=12)  # a new window: the last one's maximum still counts
    assert lag.recent_max == 0.3
    lag.observe(0.02, now=23)
    assert lag.recent_max == 0.02 and lag.max_since_start == 0.3


async def test_a_frame_of_many_adds_is_served_in_steps_other_tasks_run_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame of 100 adds to 100 ledgers, each add's storage step made slow (2 ms holding
    the loop, as an index opened on a busy disk): the bookie serves the frame in steps of
    about SERVE_STEP_S, another task runs between them, and every add is answered, in order."""
    async with running_bookie(make_config(tmp_path)) as (service, host, port):
        assert service.bookie is not None
        storage = service.bookie.storage
        ticks = 0
        served_at_tick: list[int] = []
        real_add = storage.add_entries

        def slow_add(ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer]) -> int:
            time.sleep(0.002)
            served_at_tick.append(ticks)
            return real_add(ledger_id, entry_ids, entries)

        monkeypatch.setattr(storage, "add_entries", slow_add)

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await trio.sleep(0)

        n = 100
        frame = pack_frame(
            part
            for i in range(n)
            for part in encode_add(i, 1000 + i, 0, -1, 0, b"key", f"entry {i}".encode())
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(frame)
                answers: list[Response] = []
                buf = bytearray()
                with trio.fail_after(30):
                    while len(answers) < n:
                        buf += await stream.receive_some()
                        while len(buf) >= 4 and len(buf) >= 4 + int.from_bytes(buf[:4], "little"):
                            size = 4 + int.from_bytes(buf[:4], "little")
                            answers += decode_responses(bytes(buf[4:size]))
                            del buf[:size]
            nursery.cancel_scope.cancel()
    assert [(a.request_id, a.status) for a in answers] == [(i, Status.OK) for i in range(n)]
    most_in_one_step = max(served_at_tick.count(t) for t in set(served_at_tick))
    # 10 ms of 2 ms adds: at most a handful per step (all 100 in one step without the limit).
    # Trio runs each runnable task once per batch in random order, so two steps may run
    # back to back (the last of one batch, the first of the next) before the ticker's turn.
    assert most_in_one_step <= 2 * (int(SERVE_STEP_S / 0.002) + 1), most_in_one_step


def test_settling_the_python_gc_freezes_what_is_loaded() -> None:
    thresholds = gc.get_threshold()
    loaded = [object() for _ in range(1000)]  # e.g. the ledger table's states
    try:
        settle_python_gc()
        assert gc.get_freeze_count() >= len(loaded)
        assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
