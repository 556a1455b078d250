"""The bkframe client of a Spark process, and calls to it that always end.

Spark runs the data source's code in Python worker processes: the driver side plans and
commits in short-lived workers, tasks run in workers that Spark reuses from task to task
(``spark.python.worker.reuse``). Each process keeps one blocking client per metadata store
and security settings (TLS files, token), opened on first use: a task then pays no
connection set-up, and a task retried in the same process after a bookie failed finds that
bookie in the client's quarantine and places its new ledger elsewhere.

Every call goes through :func:`call` (or :func:`call_ahead`, started now and collected
later: a task's next read chunk), which bounds it with the ``timeoutSeconds`` option (at
the call site, as everywhere in bkframe), so a hung bookie or metadata store fails the
task -- and Spark retries it -- instead of hanging the job.
"""

from __future__ import annotations

import gc
import hashlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from bkframe import BlockingClient, Client, RunAhead, connect
from bkframe.errors import BKError

if TYPE_CHECKING:
    from bkframe_spark.options import Options

T = TypeVar("T")

#: Clients by (metadata URI, TLS files, a digest of the token): two queries with other
#: credentials in one worker never share a client.
_clients: dict[tuple[str, ...], BlockingClient] = {}
#: Clients whose bookies have answered an authenticated request (see :func:`check_bookies`).
_checked: weakref.WeakSet[Client] = weakref.WeakSet()
_lock = threading.Lock()
#: This process has run a task (see :func:`task_starts`).
_ran_a_task = False


class ConnectorTimeoutError(BKError, TimeoutError):
    """A call from Spark to bkframe did not finish within ``timeoutSeconds``."""


def client_for(opts: Options) -> BlockingClient:
    """This process's client for the options' metadata store and security settings (opened
    now if there is none yet)."""
    metadata, timeout_s = opts.metadata, opts.timeout_s
    sec = opts.security()
    token = sec["auth_token"]
    key = (metadata, sec["tls_ca"], sec["tls_cert"], sec["tls_key"], hashlib.sha256(token.encode()).hexdigest() if token else "")
    with _lock:
        bk = _clients.get(key)
        if bk is None or not bk.alive:
            try:
                bk = connect(
                    metadata,
                    timeout_s=timeout_s,
                    tls_ca=sec["tls_ca"],
                    tls_cert=sec["tls_cert"],
                    tls_key=sec["tls_key"],
                    auth_token=token,
                )
            except TimeoutError:
                raise ConnectorTimeoutError(
                    f"bkframe: metadata store {metadata} did not open within {timeout_s:.0f} s (option timeoutSeconds)"
                ) from None
            _clients[key] = bk
        return bk


async def check_bookies(client: Client, ledger_id: int, entry_id: int, password: bytes) -> None:
    """Read one entry, once per client: on the driver, before tasks start, so that bookies
    refusing this client (a wrong or missing token, TLS) fail the query with that message
    first, instead of failing every task attempt. (Planning a read of closed segments, or a
    write, needs no bookie otherwise.)"""
    if client in _checked:
        return
    handle = await client.open_ledger(ledger_id, password=password, recovery=False)
    await handle.read(entry_id, entry_id)
    _checked.add(client)


def call(bk: BlockingClient, what: str, timeout_s: float, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """Run ``fn(*args)`` in the client's loop; :class:`ConnectorTimeoutError` after ``timeout_s``."""

    async def bounded() -> T:
        with anyio.fail_after(timeout_s):
            return await fn(*args)

    try:
        return bk.run(bounded)
    except TimeoutError:
        raise ConnectorTimeoutError(f"bkframe: {what} did not finish within {timeout_s:.0f} s (option timeoutSeconds)") from None


class Ahead(Generic[T]):
    """A :func:`call` started now and collected later (:func:`call_ahead`)."""

    def __init__(self, ahead: RunAhead[T], what: str, timeout_s: float) -> None:
        self._ahead = ahead
        self._what = what
        self._timeout_s = timeout_s

    def result(self) -> T:
        """What :func:`call` would have returned or raised."""
        try:
            return self._ahead.result()
        except TimeoutError:
            raise ConnectorTimeoutError(
                f"bkframe: {self._what} did not finish within {self._timeout_s:.0f} s (option timeoutSeconds)"
            ) from None

    def cancel(self) -> None:
        self._ahead.cancel()


def call_ahead(bk: BlockingClient, what: str, timeout_s: float, fn: Callable[..., Awaitable[T]], *args: Any) -> Ahead[T]:
    """:func:`call`, started in the client's loop now and collected with ``result()``: the
    task does other work (Spark consumes a batch) while it runs."""

    async def bounded() -> T:
        with anyio.fail_after(timeout_s):
            return await fn(*args)

    return Ahead(bk.run_ahead(bounded), what, timeout_s)


def task_starts() -> None:
    """Called as Spark runs a task of this data source in this (Python worker) process: what
    the process holds now is moved out of the reach of Python's cyclic collector
    (``gc.freeze``).

    pyspark's worker runs a *full* collection after every task (``pyspark.daemon``), which
    walks every object the process holds -- pyspark, pyarrow, numpy, bkframe and the client:
    ~30-40 ms each time, as much CPU as a 1 KiB-row task spends on thousands of rows
    (docs/benchmarks/spark.md). Frozen, those objects are not walked again. What a task
    leaves behind is still collected (by that collection, before the next task freezes);
    what is frozen is what was alive when a task started -- modules, the client, caches --
    and is freed as usual when its count drops, unless it is in a cycle by then."""
    global _ran_a_task
    if not _ran_a_task:  # the garbage of starting the worker: not worth keeping
        _ran_a_task = True
        gc.collect()
    gc.freeze()


def close_all() -> None:
    """Close this process's clients (tests and the demo call it before stopping Spark)."""
    with _lock:
        clients = list(_clients.values())
        _clients.clear()
    for bk in clients:
        bk.close()
