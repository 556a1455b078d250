"""The hand-written part of the blocking facade: the client's loop thread, and the few twins
that do something the async method does not (an iterator that ends when idle, a list where
the async API gives a range, a pyarrow reader pulled synchronously).

Everything else is generated into :mod:`bkframe.client.blocking_twins` by
``scripts/gen_blocking.py`` from the async classes; each generated twin inherits from its
class here, and a name defined here is not generated.

The blocking client owns one thread that runs an event loop (trio, or asyncio with
``loop="asyncio"``) with the async client in it; each blocking call hands its work to that
loop with ``anyio.from_thread.run`` and waits. This is the one thread bkframe starts on its
own, because synchronous callers have no loop to lend.
"""

from __future__ import annotations

import contextvars
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, TypeVarTuple, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import outcome
import trio

from bkframe.client.blocking_tail import BlockingTail, singly
from bkframe.client.client import Client
from bkframe.client.logs import columns
from bkframe.client.logs.model import EARLIEST, LogEntry, Position, Where
from bkframe.client.logs.reader import LogReader
from bkframe.client.logs.writer import LogWriter
from bkframe.client.read_handle import Entry, ReadHandle
from bkframe.client.run_ahead import RunAhead
from bkframe.client.write_handle import WriteHandle
from bkframe.subscriptions.consumer import Message, Subscription
from bkframe.subscriptions.direct import DirectAcks
from bkframe.subscriptions.remote import RemoteOwner

if TYPE_CHECKING:
    import pyarrow as pa


T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: The event loops the blocking client can run its async client in (``connect(..., loop=)``).
LOOPS = ("trio", "asyncio")


class ClientBase:
    """The blocking client's own machinery: its thread, its loop, and :meth:`run`."""

    def __init__(
        self,
        open_: Callable[[], AbstractAsyncContextManager[Client]],
        metadata_uri: str,
        *,
        timeout_s: float | None = None,
        loop: str = "trio",
    ) -> None:
        """Run ``open_()`` (``open_client`` with the caller's arguments) in a thread of its own.
        The keyword-only parameters here are what ``connect`` takes besides ``open_client``'s,
        declared once: :func:`~bkframe.client.blocking.connect` adds them to its signature."""
        if loop not in LOOPS:
            raise ValueError(f"loop={loop!r}: the blocking client runs its event loop on one of {', '.join(LOOPS)}")
        self._loop = loop
        self._open = open_
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._token: anyio.lowlevel.EventLoopToken | None = None
        #: With the trio loop: its token and thread, for the blocking calls' own hop (:meth:`_run`).
        self._trio_token: trio.lowlevel.TrioToken | None = None
        self._loop_thread = 0
        self._stop: anyio.Event | None = None
        self._nursery: anyio.abc.TaskGroup
        self._thread = threading.Thread(target=self._thread_main, name="bkframe-client", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"bkframe client: metadata store {metadata_uri} did not open within {timeout_s} s")
        if self._error is not None:
            raise self._error

    def _thread_main(self) -> None:
        try:
            anyio.run(self._main, backend=self._loop)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of __init__
            if not self._ready.is_set():
                self._error = e
                self._ready.set()

    async def _main(self) -> None:
        async with self._open() as client, anyio.create_task_group() as nursery:
            self._client = client
            self._nursery = nursery
            self._token = anyio.lowlevel.current_token()
            if self._loop == "trio":
                self._trio_token = trio.lowlevel.current_trio_token()
                self._loop_thread = threading.get_ident()
            self._stop = anyio.Event()
            self._ready.set()
            await self._stop.wait()
            # Work run ahead and not collected ends with the client.
            nursery.cancel_scope.cancel()

    def _run(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        token = self._trio_token
        if token is not None and threading.get_ident() != self._loop_thread:
            return _hop(token, fn, args)
        assert self._token is not None
        # (every fn given here is a coroutine function: anyio's type says so, ours says Awaitable)
        return anyio.from_thread.run(_as_coroutine_function(fn), *args, token=self._token)

    @property
    def client(self) -> Client:
        """The async client inside, for async functions given to :meth:`run`."""
        assert self._client is not None
        return self._client

    @property
    def alive(self) -> bool:
        """The client's event loop is still running (False after :meth:`close`)."""
        return self._thread.is_alive() and self._stop is not None and not self._stop.is_set()

    def run(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Run ``fn(*args)`` in the client's event loop and wait for its result: how
        synchronous code (a Spark task) runs several client calls in one hop, e.g.
        ``bk.run(partial(read_chunk, bk.client, ...))``. Put the timeout inside ``fn``
        (``anyio.fail_after``), at the call site."""
        return self._run(fn, *args)

    def run_ahead(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> RunAhead[T]:
        """Start ``fn(*args)`` in the client's loop and return at once: the caller does
        other work meanwhile and collects the outcome with :meth:`RunAhead.result` (what
        ``run`` would have returned or raised), or drops it with :meth:`RunAhead.cancel`.
        How a Spark task reads its next chunk while Spark consumes the current one. Put the
        timeout inside ``fn``; the work ends with the client at the latest."""
        assert self._token is not None
        ahead: RunAhead[T] = RunAhead(self._token, lambda: self.alive)
        anyio.from_thread.run_sync(self._nursery.start_soon, ahead._run, fn, args, token=self._token)
        return ahead

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            anyio.from_thread.run_sync(self._stop.set, token=self._token)
        self._thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _as_coroutine_function(fn: Callable[[*Ts], Awaitable[T]]) -> Callable[[*Ts], Coroutine[Any, Any, T]]:
    return cast(Callable[[*Ts], Coroutine[Any, Any, T]], fn)


def _hop(token: trio.lowlevel.TrioToken, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
    """``await fn(*args)`` in the trio loop of ``token``, from another thread, and its
    outcome. What ``trio.from_thread.run`` does (a system task in the caller's context, its
    outcome handed back), without its layers: a blocking consumer's ack makes one of these
    per record, and anyio's and trio's checks and wrappers were most of its cost."""
    done = threading.Lock()
    done.acquire()
    box: list[outcome.Outcome[T]] = []

    async def job() -> None:
        try:
            box.append(outcome.Value(await fn(*args)))
        except BaseException as e:  # noqa: BLE001 - handed to the calling thread, as trio does
            box.append(outcome.Error(e))
        finally:
            done.release()

    context = contextvars.copy_context()

    def start() -> None:
        try:
            trio.lowlevel.spawn_system_task(job, name=fn, context=context)
        except RuntimeError:  # the system nursery is closed: the loop is ending
            box.append(outcome.Error(anyio.RunFinishedError()))
            done.release()

    try:
        token.run_sync_soon(start)
    except trio.RunFinishedError:
        raise anyio.RunFinishedError from None
    done.acquire()
    return box[0].unwrap()


class WriteHandleExtras:
    _owner: ClientBase
    handle: WriteHandle

    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """Append a batch pipelined; returns the entry ids once all are confirmed (a list, as
        it always was: the async one returns a range)."""
        data = list(payloads)

        async def run() -> list[int]:
            return list(await self.handle.append_many(data))

        return self._owner._run(run)


class ReadHandleExtras:
    _owner: ClientBase
    handle: ReadHandle

    def tail(self, start: int = 0, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None) -> BlockingTail[Entry]:
        """Entries from ``start`` as they are confirmed, until the ledger is closed and read;
        with ``idle_timeout_s`` it ends once no entry came for that long (a plain iterator
        cannot be cancelled from outside)."""
        return BlockingTail(self._owner, singly(self.handle.tail(start, poll_timeout_s=poll_timeout_s)), idle_timeout_s)


def twin_or_none(twin: Callable[[Any, Any], T], owner: Any, value: Any) -> T | None:
    """``value`` in its blocking twin, or None (a method that may return nothing)."""
    return None if value is None else twin(owner, value)


class LogsExtras:
    pass


class MessageExtras:
    #: The blocking client (typed loosely: the twins pass it on as the BlockingClient it is).
    _owner: Any
    message: Message

    def ack(self) -> None:
        """The record is done; returns once the ack is durable (with the consumer's
        ``group_acks``: at once, the ack sent with the next group)."""
        message = self.message
        if message.ack_nowait():
            return None
        if _ack_directly(self._owner, message._subscription, (message.position,)):
            return None
        return self._owner._run(message.ack)


class SubscriptionExtras:
    _owner: Any  # (as MessageExtras's)
    sub: Subscription

    def ack(self, *positions: Position) -> None:
        """Ack records by position; returns once durable (with ``group_acks``: once sent,
        or at once, see the class)."""
        sub = self.sub
        if sub.ack_nowait(*positions):
            return None
        if _ack_directly(self._owner, sub, positions):
            return None
        return self._owner._run(lambda: sub.ack(*positions))

    def aclose(self) -> None:
        """Leave: every record this consumer holds (handed out or not) goes back to the others."""
        try:
            self._owner._run(self.sub.aclose)
        finally:
            _close_direct(self.sub)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._owner._run(lambda: self.sub.__aexit__(exc_type, exc, tb))
        finally:
            _close_direct(self.sub)


#: Each blocking consumer's direct acks (None: it has none, e.g. its owner is in this process).
_DIRECT: weakref.WeakKeyDictionary[Subscription, DirectAcks | None] = weakref.WeakKeyDictionary()
_DIRECT_LOCK = threading.Lock()


def _ack_directly(owner: ClientBase, sub: Subscription, positions: tuple[Position, ...]) -> bool:
    """A confirmed ack from the caller's thread, on a socket of its own to the owner's bookie
    (:mod:`bkframe.subscriptions.direct`): True once durable, False to ack the async way."""
    if sub.group_acks:
        return False  # a group due: it goes with the flush (and the acks before it)
    if sub not in _DIRECT:
        with _DIRECT_LOCK:
            if sub not in _DIRECT:
                _DIRECT[sub] = _direct_acks(owner, sub)
    direct = _DIRECT.get(sub)
    return direct is not None and direct.ack(positions)


def _direct_acks(owner: ClientBase, sub: Subscription) -> DirectAcks | None:
    pool = owner.client.pool
    if not isinstance(sub.owner, RemoteOwner) or pool.tls:
        return None  # an owner in this process; TLS: the client's loop does it

    def resolve(bookie_id: str) -> str:
        return owner._run(lambda: pool.resolve(bookie_id))

    direct = DirectAcks(sub.owner, sub.consumer_id, resolve, pool.auth)
    weakref.finalize(sub, direct.close)  # a consumer never closed: its socket closes with it
    return direct


def _close_direct(sub: Subscription) -> None:
    direct = _DIRECT.pop(sub, None)
    if direct is not None:
        direct.close()


class LogWriterExtras:
    writer: LogWriter
    _owner: ClientBase

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self._owner._run(self.writer.close)


class LogReaderExtras:
    _owner: ClientBase
    reader: LogReader

    def tail(
        self, start: Where = EARLIEST, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> BlockingTail[LogEntry]:
        """A plain iterator over every confirmed entry from ``start`` on, waiting for new
        ones; with ``idle_timeout_s`` it ends once no entry came for that long."""
        # A chunk per hop to the client's thread, not an entry.
        return BlockingTail(self._owner, self.reader.tail_chunks(start, poll_timeout_s=poll_timeout_s), idle_timeout_s)

    def tail_chunks(
        self, start: Where = EARLIEST, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> BlockingTail[list[LogEntry]]:
        """:meth:`tail` a chunk of entries at a time."""
        chunks = self.reader.tail_chunks(start, poll_timeout_s=poll_timeout_s)
        return BlockingTail(self._owner, singly(chunks), idle_timeout_s)

    def record_batch_reader(self, start: Where = EARLIEST, end: Position | None = None) -> pa.RecordBatchReader:
        """The snapshot as a ``pyarrow.RecordBatchReader`` read a chunk at a time as consumed (DuckDB, Polars
        scan it lazily); ``end`` is fixed first (default: the end now): a repeatable prefix."""
        first = self._owner._run(self.reader.resolve, start)
        stop = end if end is not None else self._owner._run(self.reader.end)
        schema = columns.schema().with_metadata(
            {"bkframe.log": self.reader.name, "bkframe.start": str(first), "bkframe.end": str(max(stop, first))}
        )
        batches = iter(BlockingTail(self._owner, singly(self.reader.arrow_batches(first, stop)))) if stop > first else iter(())
        return columns.pyarrow().RecordBatchReader.from_batches(schema, batches)
