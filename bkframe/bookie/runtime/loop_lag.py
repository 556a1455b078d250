"""What holds the bookie's event loop: :class:`LoopLag` measures it (a task that sleeps a
short period and measures how late it wakes), :func:`settle_python_gc` keeps Python's cyclic
garbage collector from doing it.

Every request, fsync hand-off and heartbeat of a bookie runs on one trio loop, so a step
that computes for 200 ms without awaiting (a scan over every ledger, a load) delays all of
them by 200 ms. :class:`LoopLag` makes that visible: the overshoot of each short sleep is
the time the loop was held by someone else. The admin metrics report the largest overshoot
of the last interval (``bkframe_event_loop_lag_seconds``) and since start.

Waking every 10 ms costs the loop ~200 µs a time: an idle bookie spent 94% of its CPU (1.2
CPU-s a minute) on this measure alone. So it sleeps longer (``idle_period_s``) while the
loop is idle -- its thread computed less than ``IDLE_CPU_SHARE`` of a core for a second --
and goes back to the short period as soon as one of those longer sleeps saw the loop work.
A step that holds the loop computes, which the thread's CPU time shows; only a step that
holds it without computing (a blocking call on the loop) in an idle loop is seen no better
than by how far it outlasts the longer sleep.

CPython's collector stops the process while it walks the objects it tracks, and a full
(generation 2) collection walks all of them: in a bookie holding 3x10^4 ledgers that was
up to 49 ms on this project's 2-core machine, ~150 ms at 10^5 -- the event loop held that
long, every request and heartbeat late by as much (issue 27: no step may hold it more
than 50 ms). Most of those objects live as long as the process: the modules, and each
ledger's state in the storage's table.

:func:`settle_python_gc` is called once the storage is loaded and before the bookie serves:
one full collection, then ``gc.freeze()`` moves every surviving object to the permanent
generation, which later collections do not walk. Frozen objects are still freed by reference
counting; only a reference cycle among them would never be collected, and what exists at
that point (modules, the storage's table) lives until the process ends anyway.

The young generations' threshold is raised too: a bookie allocates a few objects per
request and frees almost all of them by reference counting, so a collection every 700
allocations (CPython's default) mostly walks objects that are about to be freed anyway.
"""

from __future__ import annotations

import gc
import logging
import time

import trio

#: Sleep between two measurements: the lag of a loop held less than this is partly hidden.
DEFAULT_PERIOD_S = 0.01
#: Sleep between two measurements while the loop is idle.
IDLE_PERIOD_S = 0.25
#: The loop counts as idle below this share of a core ... The 10 ms wake-ups alone are ~2%
#: on a quiet machine and more on a loaded one (5% was never reached under the test suite's
#: load); a loop that holds the loop computes well above it.
IDLE_CPU_SHARE = 0.15
#: ... for this long.
IDLE_AFTER_S = 1.0
#: The metric is the largest lag over at least this many seconds.
DEFAULT_WINDOW_S = 10.0


class LoopLag:
    def __init__(
        self, period_s: float = DEFAULT_PERIOD_S, window_s: float = DEFAULT_WINDOW_S, idle_period_s: float = IDLE_PERIOD_S
    ) -> None:
        self.period_s = period_s
        self.idle_period_s = max(idle_period_s, period_s)
        #: Whether the last sleep was the idle one, and the loop's share of a core at the
        #: last look that decided it (for tests and the curious).
        self.idle = False
        self.cpu_share = 0.0
        self.window_s = window_s
        #: Largest lag seen since start (seconds).
        self.max_since_start = 0.0
        self._current = 0.0
        self._previous = 0.0
        self._window_started = 0.0

    @property
    def recent_max(self) -> float:
        """The largest lag of the last ``window_s`` to ``2 * window_s`` seconds."""
        return max(self._current, self._previous)

    def observe(self, lag: float, now: float) -> None:
        if now - self._window_started >= self.window_s:
            self._previous, self._current = self._current, 0.0
            self._window_started = now
        self._current = max(self._current, lag)
        self.max_since_start = max(self.max_since_start, lag)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Measure until cancelled."""
        self._window_started = trio.current_time()
        task_status.started()
        # The loop's thread (this task runs on it): its CPU time is what the loop computed.
        cpu = time.thread_time()
        # The loop's CPU since the current look at whether it is idle began.
        look_started, look_cpu = trio.current_time(), cpu
        while True:
            period = self.idle_period_s if self.idle else self.period_s
            asleep = trio.current_time()
            await trio.sleep(period)
            now = trio.current_time()
            self.observe(max(0.0, now - asleep - period), now)
            cpu = time.thread_time()
            share = (cpu - look_cpu) / max(now - look_started, 1e-9)
            # Idle: each long sleep is a look of its own (the loop working in one of them means
            # short sleeps again). Working: a look lasts IDLE_AFTER_S.
            if self.idle or now - look_started >= IDLE_AFTER_S:
                self.idle, self.cpu_share = share <= IDLE_CPU_SHARE, share
                look_started, look_cpu = now, cpu


log = logging.getLogger("bkframe.bookie")

#: Allocations (net of frees) between two young collections; CPython's default is 700.
GC_YOUNG_THRESHOLD = 20_000


def settle_python_gc() -> None:
    """Collect once and freeze what survives (see the module docstring). Blocking: call it
    before serving, where a pause costs no request anything."""
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)
    log.debug("python gc settled in %.0f ms: %d objects frozen", (time.perf_counter() - start) * 1000, gc.get_freeze_count())
