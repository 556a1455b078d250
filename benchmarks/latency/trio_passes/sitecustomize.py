"""Counts trio scheduler passes, task steps and who wakes whom
(:class:`bkframe.testing.scheduler_passes.PassCounter`) in any process started with this
directory on ``PYTHONPATH`` and ``BKFRAME_PASS_COUNTS=DIR`` set: a measuring aid for
``benchmarks/latency/passes_per_add.py``, whose sandbox's bookies inherit both.

Every ``trio.run`` of the process gets a counter; on SIGUSR2 the process writes its counts
so far to ``DIR/PID.json`` (the script reads them before and after its timed appends).
"""
# ruff: noqa
from __future__ import annotations

import json
import os
import signal
from collections import Counter

OUT = os.environ.get("BKFRAME_PASS_COUNTS")
COUNTERS: list = []


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

    from bkframe.testing.scheduler_passes import PassCounter

    _run = trio.run

    def run(*args, **kwargs):
        counter = PassCounter()
        COUNTERS.append(counter)
        kwargs["instruments"] = [*kwargs.get("instruments", ()), counter]
        return _run(*args, **kwargs)

    trio.run = run
    signal.signal(signal.SIGUSR2, _dump)
