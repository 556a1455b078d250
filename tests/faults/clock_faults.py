"""A run's clock faults (``Fault.CLOCK``, bkframe.testing.faults.clocks): every bookie runs on
libfaketime with a clock file of its own; a fault moves that bookie's wall clock an hour
ahead or behind, or makes it run twice as fast from now, while the bookie runs, and
"clock_right" puts it right. The monotonic clock stays true, as under a real step (NTP,
``date -s``). The bookie serves on all the while, so it stays expected up: nothing of a
bookie's -- its registration's lease above all -- may depend on its wall clock."""

from __future__ import annotations

import time
from pathlib import Path

from bkframe.testing.faults.clocks import AHEAD, BEHIND, TRUE, clock_env, fast_from_now, libfaketime, set_clock
from tests.faults.schedule import Step

#: The schedule's clock actions (fault and heal).
CLOCK_ACTIONS = frozenset({"clock", "clock_right"})


class FaultClocks:
    def __init__(self, root: Path) -> None:
        if libfaketime() is None:
            raise RuntimeError("clock faults need libfaketime: install Debian's faketime package (scripts/test does)")
        self.root = root
        #: When each bookie's process started (monotonic): "fast" runs fast from the fault on.
        self.started: dict[str, float] = {}

    def env(self, bookie_id: str) -> dict[str, str]:
        """The environment of a bookie process about to start, on a true clock."""
        self.started[bookie_id] = time.monotonic()
        return clock_env(self.root / f"{bookie_id}.clock", TRUE)

    def execute(self, step: Step, bookie_id: str) -> None:
        age = time.monotonic() - self.started[bookie_id]
        kind = step.clock if step.action == "clock" else ""
        spec = {"ahead": AHEAD, "behind": BEHIND, "fast": fast_from_now(age), "": TRUE}[kind]
        set_clock(self.root / f"{bookie_id}.clock", spec)
