"""``python -m bkframe.testing.faults.offloader ARGS``: ``bkframe offloader ARGS`` that kills
itself (SIGKILL) at one step of a segment's offload, so that a test stops a real process at
a chosen instant: ``BKFRAME_OFFLOADER_CRASH_AT=put`` (an object written and verified, not
recorded yet), ``recorded`` (recorded in the log), ``unmarked`` (marked off the bookies, its
ledger not deleted yet). :func:`install_from_env` does it in any process that runs an
:class:`~bkframe.tiering.offload_service.OffloadService`."""

from __future__ import annotations

import logging
import os
import signal
import sys

from bkframe.client.logs.model import Segment
from bkframe.tiering.offload_service import OffloadService

CRASH_AT_ENV = "BKFRAME_OFFLOADER_CRASH_AT"
CRASH_POINTS = ("put", "recorded", "unmarked")

log = logging.getLogger("bkframe.testing.faults")


def install(crash_at: str) -> None:
    """Every offload service of this process kills the process when a segment reaches ``crash_at``."""
    if crash_at not in CRASH_POINTS:
        raise ValueError(f"{CRASH_AT_ENV}={crash_at!r}: not one of {', '.join(CRASH_POINTS)}")
    reached = OffloadService.step

    def step(self: OffloadService, step: str, seg: Segment) -> None:
        reached(self, step, seg)
        if step == crash_at:
            log.warning("%s=%s: killing this process at segment %d (a test's crash point)", CRASH_AT_ENV, step, seg.number)
            os.kill(os.getpid(), signal.SIGKILL)

    OffloadService.step = step  # type: ignore[method-assign]


def install_from_env() -> None:
    crash_at = os.environ.get(CRASH_AT_ENV)
    if crash_at:
        install(crash_at)


def main() -> None:
    install_from_env()
    from bkframe.cli.main import main as cli

    cli(["offloader", *sys.argv[1:]], prog_name="python -m bkframe.testing.faults.offloader")


if __name__ == "__main__":
    main()
