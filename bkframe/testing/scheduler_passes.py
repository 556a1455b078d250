"""Counting trio's scheduler passes, task steps and wakeups: how the per-message costs of
docs/benchmarks/latency.md ("Third round: one pass per message") are counted, in tests
(``trio.lowlevel.add_instrument(PassCounter())``) and in the sandbox's processes
(``benchmarks/latency/passes_per_add.py``).

A *pass* is one turn of trio's run loop, one ``epoll_wait`` (``before_io_wait``); a *busy*
pass is one taken while tasks were still runnable (timeout 0: a checkpoint's). Each wakeup
is counted by its edge ``waker -> woken``, where the waker is a task, ``io`` (the loop woke
the task for a socket), ``timer`` (a deadline), ``self`` (the task rescheduled itself: a
checkpoint) or ``loop`` (anything else the loop did between steps). Tasks are named by the
last two parts of their function's name; a task run through a wrapper ``run(task)`` (the
client's connection tasks) by the function it runs.
"""

from __future__ import annotations

import weakref
from collections import Counter
from typing import Any

import trio


class PassCounter(trio.abc.Instrument):
    """A trio instrument; its counts only grow (take differences)."""

    def __init__(self) -> None:
        self.passes = 0
        self.busy_passes = 0
        self.steps: Counter[str] = Counter()
        self.wakes: Counter[str] = Counter()
        self._names: weakref.WeakKeyDictionary[trio.lowlevel.Task, str] = weakref.WeakKeyDictionary()
        self._last: trio.lowlevel.Task | None = None
        #: Where the run loop is: "io" (handling I/O events), "timer" (deadlines), "step".
        self._phase = "step"

    def name(self, task: trio.lowlevel.Task, *, suspended: bool = False) -> str:
        name = self._names.get(task)
        if name is None or (suspended and name.endswith("<locals>.run")):
            name = self._names[task] = _name(task)  # (a running task's chain of awaits is cut short)
        return name

    def before_io_wait(self, timeout: float) -> None:
        self._phase = "io"
        self.passes += 1
        if timeout == 0:
            self.busy_passes += 1

    def after_io_wait(self, timeout: float) -> None:
        self._phase = "timer"

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._phase = "step"
        self.steps[self.name(task, suspended=True)] += 1

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        self._last = task

    def task_scheduled(self, task: trio.lowlevel.Task) -> None:
        try:
            waker = trio.lowlevel.current_task()
        except RuntimeError:
            source = self._phase if self._phase != "step" else "self" if task is self._last else "loop"
        else:
            source = "self" if waker is task else self.name(waker)
        self.wakes[f"{source} -> {self.name(task)}"] += 1

    def snapshot(self) -> dict[str, Any]:
        return {"passes": self.passes, "busy_passes": self.busy_passes, "steps": dict(self.steps), "wakes": dict(self.wakes)}


def _name(task: trio.lowlevel.Task) -> str:
    name = task.name
    if name.endswith("<locals>.run"):
        # anyio wraps each task's coroutine in one of its own: follow the awaits down to
        # the wrapper's frame and name the function it was given.
        coro: Any = task.coro
        while coro is not None:
            frame = getattr(coro, "cr_frame", None)
            inner = frame.f_locals.get("task") if frame is not None and frame.f_code.co_name == "run" else None
            if callable(inner):
                name = getattr(inner, "__qualname__", name)
                break
            coro = getattr(coro, "cr_await", None)
    return ".".join(name.rsplit(".", 2)[-2:])
