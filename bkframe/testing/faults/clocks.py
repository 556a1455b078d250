"""Clock faults for tests: one process's wall clock jumping or running fast, with Debian's
libfaketime (``LD_PRELOAD``), changed while the process runs.

A process started with :func:`clock_env` reads its clock offset from a file of its own
(``FAKETIME_TIMESTAMP_FILE``, re-read at most once a second); :func:`set_clock` writes
``+3600`` (an hour ahead), ``-3600`` or ``+0 x2`` (twice as fast) there, and ``+0 x1`` puts
it right again. Only the wall clock (``CLOCK_REALTIME``: ``time.time()``) is faked:
``DONT_FAKE_MONOTONIC=1`` keeps ``CLOCK_MONOTONIC`` (``time.monotonic()``, trio's clock)
true, as a real clock step does -- NTP stepping the clock, an operator's ``date -s``, a
VM resumed with its old time never move the monotonic clock. It is also the only mode that
works for Python here: with a faked monotonic clock libfaketime 0.9.10 makes
``Lock.acquire(timeout=...)`` wait for ever (trio's worker threads use it).

Children inherit the environment, so a process started through ``ip netns exec`` (a
simulated host) gets the fault too.

Files keep their times (``NO_FAKE_STAT``), as under a real step, and ``FAKETIME_WAIT_MS=0``
keeps libfaketime 0.9.10 from slowing every lock handed between threads to tens of ms.
One more libfaketime defect is worked around here: with a real monotonic clock, Python's
``time.sleep`` (``clock_nanosleep`` on an absolute monotonic deadline) fails with EINVAL.
:func:`install_from_env`, called by the test entry points (``bkframe.testing.faults.bookie``,
the fault suite's workers), puts a sleep on a condition wait (which works) in its place;
``python -m bkframe.testing.faults.clocks ARGS`` is ``bkframe ARGS`` with it installed.
"""

from __future__ import annotations

import glob
import os
import sys
import threading
import time
from pathlib import Path
from typing import SupportsIndex

from bkframe.testing.kit import missing

#: Debian's libfaketime (package ``faketime``), whatever the architecture's directory.
LIBFAKETIME_GLOB = "/usr/lib/*/faketime/libfaketime.so.1"
#: An hour: the size of the jumps the tests and the fault suite make.
HOUR = 3600

AHEAD = f"+{HOUR}"
BEHIND = f"-{HOUR}"
#: Twice as fast, counted from the process's start: a process that has run for a while
#: leaps ahead by its age first (:func:`fast_from_now` does not).
FAST = "+0 x2"
#: "x1" too: libfaketime keeps a rate it was given until told another.
TRUE = "+0 x1"


def fast_from_now(age_s: float) -> str:
    """Twice as fast from now on, for a process started ``age_s`` seconds ago: libfaketime
    applies a rate from the process's start, so take its age off first (no leap)."""
    return f"-{max(0.0, age_s):.2f} x2"


def libfaketime() -> str | None:
    found = sorted(glob.glob(LIBFAKETIME_GLOB))
    return found[0] if found else None


def require_faketime() -> str:
    """The library's path; fail (under ``CI=true``) or skip the test when it is missing."""
    lib = libfaketime()
    if lib is None:
        missing("libfaketime is not installed", "scripts/test installs it (Debian package faketime)")
    return lib


def clock_env(clock_file: Path, spec: str = TRUE) -> dict[str, str]:
    """The environment that starts a process on the clock of ``clock_file`` (set to ``spec``)."""
    lib = libfaketime()
    if lib is None:
        raise RuntimeError("libfaketime is not installed (Debian package faketime)")
    set_clock(clock_file, spec)
    preload = " ".join(p for p in (lib, os.environ.get("LD_PRELOAD", "")) if p)
    return {
        "LD_PRELOAD": preload,
        "FAKETIME_TIMESTAMP_FILE": str(clock_file),
        # Re-read once a second: a change lands within a second, and reading the file at
        # every clock call (FAKETIME_NO_CACHE) costs ~10 us a call.
        "FAKETIME_CACHE_DURATION": "1",
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        # Files keep the times they were written with, as under a real step; and shifting
        # every stat() made a bookie's start (Python's imports) up to twice as slow.
        "NO_FAKE_STAT": "1",
        # Unset, libfaketime 0.9.10 makes a lock handed between threads take 30-40 ms
        # instead of 0.05 (measured here): trio's worker threads, so every fsync, every
        # sqlite call, and a bookie's adds 15-30 times slower.
        "FAKETIME_WAIT_MS": "0",
    }


def set_clock(clock_file: Path, spec: str) -> None:
    """Move the clock of every process started on ``clock_file``: ``AHEAD``, ``BEHIND``,
    ``FAST``, ``TRUE`` or any libfaketime offset (``+90``, ``-1d``, ``+0 x0.5``). Written whole
    by a rename, so a process never reads half a line."""
    clock_file.parent.mkdir(parents=True, exist_ok=True)
    tmp = clock_file.with_name(clock_file.name + ".tmp")
    tmp.write_text(spec + "\n")
    os.replace(tmp, clock_file)


def _condition_sleep(secs: float | SupportsIndex, /) -> None:
    seconds = float(secs)
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    if seconds > 0:
        threading.Event().wait(seconds)


def install_from_env() -> None:
    """Under libfaketime (``LD_PRELOAD``) with a real monotonic clock, replace ``time.sleep``,
    which fails there (see the module's docstring), by a wait that works."""
    if "faketime" not in os.environ.get("LD_PRELOAD", ""):
        return
    try:
        time.sleep(0.001)
    except OSError:
        time.sleep = _condition_sleep


def main() -> None:
    install_from_env()
    from bkframe.cli.main import main as cli

    cli(sys.argv[1:], prog_name="python -m bkframe.testing.faults.clocks")


if __name__ == "__main__":
    main()
