"""The group commit's hop to its worker thread, with the result handed back in one pass.

With ``trio.to_thread.run_sync`` the thread's return wakes the loop, a callback then
resumes the journal task, and only that task, one scheduler pass later, marks the group
durable and wakes its waiters (the connection writers holding its answers), which run one
pass later still. Here the callback that brings the thread's result back runs the
bookkeeping itself (``then``), so the waiters run in the pass right after the wakeup,
beside the journal task. Nor is there a pass before the thread starts: a free limiter is
taken without the checkpoint ``to_thread`` takes it with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import outcome
import trio

T = TypeVar("T")


def _cannot_abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
    return trio.lowlevel.Abort.FAILED  # (a thread cannot be stopped: the caller waits for it)


async def run_in_worker(fn: Callable[[], T], limiter: trio.CapacityLimiter, then: Callable[[T], None]) -> T:
    """Run ``fn()`` in a worker thread once ``limiter`` has room (one group at a time); call
    ``then(result)`` on the event loop as soon as it returns, before this task resumes; return
    ``result`` (or raise what ``fn`` or ``then`` raised). Not cancellable once the thread
    runs, as ``to_thread.run_sync`` without ``abandon_on_cancel``."""
    borrower = object()
    try:
        limiter.acquire_on_behalf_of_nowait(borrower)
    except trio.WouldBlock:
        await limiter.acquire_on_behalf_of(borrower)
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def resume(result: outcome.Outcome[T]) -> None:
        limiter.release_on_behalf_of(borrower)
        if isinstance(result, outcome.Value):
            try:
                then(result.value)
            except BaseException as e:  # noqa: BLE001 - handed to the waiting task, which raises it
                result = outcome.Error(e)
        trio.lowlevel.reschedule(task, result)

    def deliver(result: outcome.Outcome[T]) -> None:
        # In the worker thread: back to the loop (which waits for this task, so it still runs).
        token.run_sync_soon(resume, result)

    try:
        trio.lowlevel.start_thread_soon(fn, deliver)
    except BaseException:
        limiter.release_on_behalf_of(borrower)
        raise
    value: T = await trio.lowlevel.wait_task_rescheduled(_cannot_abort)
    return value
