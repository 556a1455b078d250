"""How long the bookie's event loop is held: a task that sleeps a short period and measures
how late it wakes.

Every request, fsync hand-off and heartbeat of a bookie runs on one trio loop, so a step
that computes for 200 ms without awaiting (a scan over every ledger, a load) delays all of
them by 200 ms. :class:`LoopLag` makes that visible: the overshoot of each short sleep is
the time the loop was held by someone else. The admin metrics report the largest overshoot
of the last interval (``bkframe_event_loop_lag_seconds``) and since start.
"""

from __future__ import annotations

import trio

#: Sleep between two measurements: the lag of a loop held less than this is partly hidden.
DEFAULT_PERIOD_S = 0.01
#: The metric is the largest lag over at least this many seconds.
DEFAULT_WINDOW_S = 10.0


class LoopLag:
    def __init__(self, period_s: float = DEFAULT_PERIOD_S, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.period_s = period_s
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
        while True:
            asleep = trio.current_time()
            await trio.sleep(self.period_s)
            now = trio.current_time()
            self.observe(max(0.0, now - asleep - self.period_s), now)
