"""Counts trio scheduler passes, task steps and who wakes whom, in any process started with
this directory on ``PYTHONPATH`` and ``BKFRAME_PASS_COUNTS=DIR`` set (a measuring aid for
``scripts/latency/passes_per_add.py``: the sandbox's bookies inherit both).

Every ``trio.run`` of the process gets :class:`PassCounter`; on SIGUSR2 the process writes its
counts so far to ``DIR/PID.json`` (the script reads them before and after its timed appends).
A *pass* is one turn of trio's run loop: one ``epoll_wait`` (``before_io_wait``); a pass with
timeout 0 is one the loop took while tasks were still runnable (a checkpoint's). Wakeups are
counted by edge ``waker -> woken``: ``io`` when the loop woke the task for a socket event,
``self`` when the task rescheduled itself (a checkpoint), ``TrioToken.run_sync_soon`` for
a thread's result coming back.
"""
# ruff: noqa
from __future__ import annotations

import json
import os
import signal
import weakref
from collections import Counter

OUT = os.environ.get("BKFRAME_PASS_COUNTS")
#: Task -> short name, found while the task is suspended (its chain of awaits is there).
_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _short(task, suspended: bool = False) -> str:
    name = _NAMES.get(task)
    if name is None or (suspended and name.endswith("<locals>.run")):
        name = _NAMES[task] = _name(task)  # (a running task's chain of awaits is cut short)
    return name


def _name(task) -> str:
    name = task.name
    if name.endswith("<locals>.run"):
        # The client's connection tasks run under one wrapper: name them by what it runs.
        # (anyio wraps each task's coroutine in one of its own: follow the awaits.)
        coro = task.coro
        while coro is not None:
            frame = getattr(coro, "cr_frame", None)
            inner = frame.f_locals.get("task") if frame is not None and frame.f_code.co_name == "run" else None
            if callable(inner):
                name = inner.__qualname__
                break
            coro = getattr(coro, "cr_await", None)
    return ".".join(name.rsplit(".", 2)[-2:])


class PassCounter:
    def __init__(self) -> None:
        self.passes = 0
        self.busy_passes = 0  # timeout 0: taken while tasks were runnable
        self.steps: Counter[str] = Counter()
        self.wakes: Counter[str] = Counter()
        self._last = None
        #: Where the loop is: "io" (processing I/O events), "timer" (deadlines), "step".
        self._phase = "step"

    def before_io_wait(self, timeout: float) -> None:
        self._phase = "io"
        self.passes += 1
        if timeout == 0:
            self.busy_passes += 1

    def after_io_wait(self, timeout: float) -> None:
        self._phase = "timer"

    def before_task_step(self, task) -> None:
        self._phase = "step"
        self.steps[_short(task, suspended=True)] += 1

    def after_task_step(self, task) -> None:
        self._last = task

    def task_scheduled(self, task) -> None:
        import trio

        try:
            waker = trio.lowlevel.current_task()
            name = "self" if waker is task else _short(waker)
        except RuntimeError:
            name = self._phase if self._phase != "step" else "self" if task is self._last else "loop"
        self.wakes[f"{name} -> {_short(task)}"] += 1

    def snapshot(self) -> dict:
        return {"passes": self.passes, "busy_passes": self.busy_passes, "steps": dict(self.steps), "wakes": dict(self.wakes)}


COUNTERS: list[PassCounter] = []


def _dump(signum, frame) -> None:
    total: dict = {"passes": 0, "busy_passes": 0, "steps": Counter(), "wakes": Counter()}
    for c in COUNTERS:
        s = c.snapshot()
        total["passes"] += s["passes"]
        total["busy_passes"] += s["busy_passes"]
        total["steps"].update(s["steps"])
        total["wakes"].update(s["wakes"])
    path = os.path.join(OUT, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(total, f)
    os.replace(path + ".tmp", path)


if OUT:
    import trio

    _run = trio.run

    def run(*args, **kwargs):
        counter = PassCounter()
        COUNTERS.append(counter)
        kwargs["instruments"] = [*kwargs.get("instruments", ()), counter]
        return _run(*args, **kwargs)

    trio.run = run
    signal.signal(signal.SIGUSR2, _dump)
