"""Periodic background work (checkpoints, garbage collection) that logs and retries on failure.

A bookie's background task must never take the process down: a failed garbage collection
or checkpoint (a full disk, a metadata store that is away, a bug met by one odd ledger)
is logged and tried again, sooner at first and then backing off up to the task's own
interval, while the bookie goes on serving. Only cancellation ends the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio

from bkframe.bookie.runtime.read_only_mode import ReadOnlyMode
from bkframe.storage_kit.disk_full import is_disk_full

log = logging.getLogger("bkframe.background")

#: The first retry after a failure comes this soon (or after the interval, if shorter).
FIRST_RETRY_S = 1.0


async def run_periodically(
    name: str,
    interval_s: float,
    step: Callable[[], Awaitable[object]],
    *,
    first_retry_s: float = FIRST_RETRY_S,
    mode: ReadOnlyMode | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Await ``step()`` every ``interval_s`` seconds, forever; never raises but Cancelled.
    A step that fails for want of disk space turns the bookie read-only (``mode``) before
    it is retried.

    After a failure the next try comes after ``min(first_retry_s, interval_s)``, doubling
    with each further failure up to ``interval_s``. The first failure of a run of them is
    logged with its traceback, the later ones as one line each, and the recovery too.
    """
    task_status.started()
    failures = 0
    delay = interval_s
    while True:
        await trio.sleep(delay)
        try:
            await step()
        except Exception as e:  # Cancelled is a BaseException: cancellation still ends the loop
            if mode is not None and isinstance(e, OSError) and is_disk_full(e):
                mode.write_failed(e)
            failures += 1
            delay = min(min(first_retry_s, interval_s) * 2 ** (failures - 1), interval_s)
            if failures == 1:
                log.error("%s failed; retrying in %.1f s", name, delay, exc_info=True)
            else:
                log.error("%s failed again (%d times in a row): %s; retrying in %.1f s", name, failures, e, delay)
            continue
        if failures:
            log.warning("%s succeeded again after %d failure(s)", name, failures)
        failures = 0
        delay = interval_s
