"""The bkframe client of a Spark process, and calls to it that always end.

Spark runs the data source's code in Python worker processes: the driver side plans and
commits in short-lived workers, tasks run in workers that Spark reuses from task to task
(``spark.python.worker.reuse``). Each process keeps one blocking client per metadata store,
opened on first use: a task then pays no connection set-up, and a task retried in the same
process after a bookie failed finds that bookie in the client's quarantine and places its
new ledger elsewhere.

Every call goes through :func:`call`, which bounds it with the ``timeoutSeconds`` option
(at the call site, as everywhere in bkframe), so a hung bookie or metadata store fails the
task -- and Spark retries it -- instead of hanging the job.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from bkframe import BlockingClient, connect
from bkframe.errors import BKError

T = TypeVar("T")

_clients: dict[str, BlockingClient] = {}
_lock = threading.Lock()


class ConnectorTimeoutError(BKError, TimeoutError):
    """A call from Spark to bkframe did not finish within ``timeoutSeconds``."""


def client_for(metadata: str, timeout_s: float) -> BlockingClient:
    """This process's client for ``metadata`` (opened now if there is none yet)."""
    with _lock:
        bk = _clients.get(metadata)
        if bk is None or not bk.alive:
            try:
                bk = connect(metadata, timeout_s=timeout_s)
            except TimeoutError:
                raise ConnectorTimeoutError(
                    f"bkframe: metadata store {metadata} did not open within {timeout_s:.0f} s (option timeoutSeconds)"
                ) from None
            _clients[metadata] = bk
        return bk


def call(bk: BlockingClient, what: str, timeout_s: float, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` in the client's loop; :class:`ConnectorTimeoutError` after ``timeout_s``."""

    async def bounded() -> T:
        with trio.fail_after(timeout_s):
            return await fn(*args)

    try:
        return bk.run(bounded)
    except trio.TooSlowError:
        raise ConnectorTimeoutError(f"bkframe: {what} did not finish within {timeout_s:.0f} s (option timeoutSeconds)") from None


def close_all() -> None:
    """Close this process's clients (tests and the demo call it before stopping Spark)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for bk in clients:
        bk.close()
