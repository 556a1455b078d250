"""A blocking facade over the trio client, for synchronous code (scripts, Spark tasks).

The facade owns one thread that runs a trio event loop with the async client in it; each
blocking call hands its work to that loop with ``trio.from_thread.run`` and waits. This is
the one thread bkframe starts on its own, because synchronous callers have no loop to lend.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import trio

from bkframe.core.client.client import Client, open_client
from bkframe.core.client.log_client import LogInfo, Logs
from bkframe.core.client.log_reader import LogReader
from bkframe.core.client.log_writer import LogWriter
from bkframe.core.client.logs import (
    EARLIEST,
    CommitResult,
    Cursor,
    LogEntry,
    LogMetadata,
    LogSettings,
    Position,
    SegmentRange,
    TrimResult,
)
from bkframe.core.client.read_handle import Entry, ReadHandle
from bkframe.core.client.write_handle import WriteHandle
from bkframe.core.metadata import LedgerMetadata

T = TypeVar("T")


class BlockingClient:
    """``with bkframe.connect(uri) as bk: ...``"""

    def __init__(self, metadata_uri: str, *, timeout_s: float | None = None, **settings: Any) -> None:
        self._uri = metadata_uri
        self._settings: dict[str, Any] = dict(settings)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._thread_main, name="bkframe-client", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"bkframe client: metadata store {metadata_uri} did not open within {timeout_s} s")
        if self._error is not None:
            raise self._error

    def _thread_main(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as e:  # noqa: BLE001 - handed to the caller of __init__
            if not self._ready.is_set():
                self._error = e
                self._ready.set()

    async def _main(self) -> None:
        async with open_client(self._uri, **self._settings) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    @property
    def client(self) -> Client:
        """The trio client inside, for async functions given to :meth:`run`."""
        assert self._client is not None
        return self._client

    @property
    def alive(self) -> bool:
        """The client's event loop is still running (False after :meth:`close`)."""
        return self._thread.is_alive() and self._stop is not None and not self._stop.is_set()

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``fn(*args)`` in the client's event loop and wait for its result: how
        synchronous code (a Spark task) runs several client calls in one hop, e.g.
        ``bk.run(partial(read_chunk, bk.client, ...))``. Put the timeout inside ``fn``
        (``trio.fail_after``), at the call site."""
        return self._run(fn, *args)

    def create_ledger(self, **kwargs: Any) -> BlockingWriteHandle:
        assert self._client is not None
        client = self._client
        return BlockingWriteHandle(self, self._run(lambda: client.create_ledger(**kwargs)))

    def open_ledger(self, ledger_id: int, **kwargs: Any) -> BlockingReadHandle:
        assert self._client is not None
        client = self._client
        return BlockingReadHandle(self, self._run(lambda: client.open_ledger(ledger_id, **kwargs)))

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        assert self._client is not None
        return self._run(self._client.ledger_metadata, ledger_id)

    def delete_ledger(self, ledger_id: int) -> None:
        assert self._client is not None
        self._run(self._client.delete_ledger, ledger_id)

    def list_ledgers(self) -> list[int]:
        assert self._client is not None
        return self._run(self._client.list_ledgers)

    @property
    def logs(self) -> BlockingLogs:
        """Named logs (see :class:`bkframe.core.client.log_client.Logs`)."""
        assert self._client is not None
        return BlockingLogs(self, Logs(self._client))

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BlockingWriteHandle:
    def __init__(self, owner: BlockingClient, handle: WriteHandle) -> None:
        self._owner = owner
        self.handle = handle
        self.ledger_id = handle.ledger_id

    @property
    def lac(self) -> int:
        return self.handle.lac

    def append(self, payload: bytes) -> int:
        """Append and wait for confirmation; returns the entry id."""
        return self._owner._run(self.handle.append, payload)

    def append_many(self, payloads: list[bytes]) -> list[int]:
        """Append a batch pipelined; returns the entry ids once all are confirmed."""

        async def run() -> list[int]:
            return list(await self.handle.append_many(payloads))

        return self._owner._run(run)

    def close(self) -> LedgerMetadata:
        return self._owner._run(self.handle.close)


class BlockingReadHandle:
    def __init__(self, owner: BlockingClient, handle: ReadHandle) -> None:
        self._owner = owner
        self.handle = handle
        self.ledger_id = handle.ledger_id

    @property
    def lac(self) -> int:
        return self.handle.lac

    def read(self, first: int, last: int) -> list[Entry]:
        return self._owner._run(self.handle.read, first, last)

    def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        return self._owner._run(self.handle.read_unconfirmed, first, last)

    def read_lac(self) -> int:
        return self._owner._run(self.handle.read_lac)


# -- named logs ------------------------------------------------------------------------


class BlockingLogs:
    """``bk.logs``: the methods of :class:`~bkframe.core.log_client.Logs`, blocking."""

    def __init__(self, owner: BlockingClient, logs: Logs) -> None:
        self._owner = owner
        self._logs = logs

    def create(self, name: str, settings: LogSettings | None = None, *, password: bytes = b"", **overrides: Any) -> LogMetadata:
        return self._owner._run(lambda: self._logs.create(name, settings, password=password, **overrides))

    def metadata(self, name: str) -> LogMetadata:
        return self._owner._run(self._logs.metadata, name)

    def list_logs(self) -> list[str]:
        return self._owner._run(self._logs.list_logs)

    def delete(self, name: str) -> LogMetadata:
        return self._owner._run(self._logs.delete, name)

    def open_writer(self, name: str, *, password: bytes = b"") -> BlockingLogWriter:
        return BlockingLogWriter(self._owner, self._owner._run(lambda: self._logs.open_writer(name, password=password)))

    def reader(self, name: str, *, password: bytes = b"") -> BlockingLogReader:
        return BlockingLogReader(self._owner, self._owner._run(lambda: self._logs.reader(name, password=password)))

    def commit_ledgers(self, name: str, ledger_ids: Iterable[int], token: str, *, password: bytes = b"") -> CommitResult:
        ids = list(ledger_ids)
        return self._owner._run(lambda: self._logs.commit_ledgers(name, ids, token, password=password))

    def trim(self, name: str, *, before: Position | None = None, retention: bool = False, force: bool = False) -> TrimResult:
        return self._owner._run(lambda: self._logs.trim(name, before=before, retention=retention, force=force))

    def create_cursor(self, name: str, cursor: str, start: Position | str = EARLIEST, *, password: bytes = b"") -> Cursor:
        return self._owner._run(lambda: self._logs.create_cursor(name, cursor, start, password=password))

    def cursor(self, name: str, cursor: str) -> Cursor:
        return self._owner._run(self._logs.cursor, name, cursor)

    def cursors(self, name: str) -> list[Cursor]:
        return self._owner._run(self._logs.cursors, name)

    def move_cursor(
        self, name: str, cursor: str, position: Position | str, *, rewind: bool = False, password: bytes = b""
    ) -> Cursor:
        return self._owner._run(lambda: self._logs.move_cursor(name, cursor, position, rewind=rewind, password=password))

    def ack(self, name: str, cursor: str, position: Position) -> Cursor:
        return self._owner._run(self._logs.ack, name, cursor, position)

    def delete_cursor(self, name: str, cursor: str) -> None:
        self._owner._run(self._logs.delete_cursor, name, cursor)

    def end(self, name: str, *, password: bytes = b"") -> Position:
        return self._owner._run(lambda: self._logs.end(name, password=password))

    def info(self, name: str, *, password: bytes = b"") -> LogInfo:
        return self._owner._run(lambda: self._logs.info(name, password=password))


class BlockingLogWriter:
    def __init__(self, owner: BlockingClient, writer: LogWriter) -> None:
        self._owner = owner
        self.writer = writer
        self.name = writer.name

    def append(self, payload: bytes) -> Position:
        """Append and wait for confirmation; returns the entry's position."""
        return self._owner._run(self.writer.append, payload)

    def append_many(self, payloads: Iterable[bytes]) -> list[Position]:
        """Append a batch pipelined; returns the positions once all are confirmed."""
        data = list(payloads)

        async def run() -> list[Position]:
            pending = [self.writer.append_async(p) for p in data]
            return [await pa.wait() for pa in pending]

        return self._owner._run(run)

    def flush(self) -> None:
        self._owner._run(self.writer.flush)

    def roll(self) -> int:
        return self._owner._run(self.writer.roll)

    def close(self) -> LogMetadata:
        return self._owner._run(self.writer.close)

    def __enter__(self) -> BlockingLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.close()


class BlockingLogReader:
    def __init__(self, owner: BlockingClient, reader: LogReader) -> None:
        self._owner = owner
        self.reader = reader
        self.name = reader.name

    def end(self) -> Position:
        return self._owner._run(self.reader.end)

    def resolve(self, where: Position | str) -> Position:
        return self._owner._run(self.reader.resolve, where)

    def snapshot(self, start: Position | str = EARLIEST, end: Position | None = None) -> list[SegmentRange]:
        return self._owner._run(self.reader.snapshot, start, end)

    def read(
        self, start: Position | str = EARLIEST, end: Position | None = None, *, max_entries: int | None = None
    ) -> list[LogEntry]:
        return self._owner._run(lambda: self.reader.read(start, end, max_entries=max_entries))

    def read_segment(self, segment: int, first: int, last: int) -> list[LogEntry]:
        return self._owner._run(self.reader.read_segment, segment, first, last)

    def advance(self, start: Position | str, max_entries: int, end: Position | None = None) -> Position:
        return self._owner._run(self.reader.advance, start, max_entries, end)

    def tail(
        self, start: Position | str = EARLIEST, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None
    ) -> BlockingTail:
        """A plain iterator over every confirmed entry from ``start`` on, waiting for new
        ones; with ``idle_timeout_s`` it ends once no entry came for that long."""
        return BlockingTail(self._owner, self.reader, start, poll_timeout_s, idle_timeout_s)


class BlockingTail(Iterator[LogEntry]):
    """``for entry in reader.tail(...)``; ``close()`` (or ``with``) ends it early."""

    def __init__(
        self, owner: BlockingClient, reader: LogReader, start: Position | str, poll_timeout_s: float, idle_timeout_s: float | None
    ) -> None:
        self._owner = owner
        self._reader = reader
        self._start = start
        self._poll = poll_timeout_s
        self._idle = idle_timeout_s
        self._chunks: AsyncIterator[list[LogEntry]] | None = None
        self._buffer: deque[LogEntry] = deque()
        self._ended = False

    async def _next_chunk(self) -> list[LogEntry] | None:
        if self._chunks is None:
            self._chunks = self._reader.tail_chunks(self._start, poll_timeout_s=self._poll)
        with trio.move_on_after(self._idle if self._idle is not None else float("inf")):
            return await self._chunks.__anext__()
        return None

    def __next__(self) -> LogEntry:
        while not self._buffer:
            if self._ended:
                raise StopIteration
            chunk = self._owner._run(self._next_chunk)
            if chunk is None:
                self.close()
                raise StopIteration
            self._buffer.extend(chunk)
        return self._buffer.popleft()

    def close(self) -> None:
        self._ended = True
        chunks, self._chunks = self._chunks, None
        if chunks is not None:
            closer = getattr(chunks, "aclose", None)
            if closer is not None:
                self._owner._run(closer)

    def __enter__(self) -> BlockingTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(metadata_uri: str, *, timeout_s: float | None = None, **settings: Any) -> BlockingClient:
    """A blocking client; ``timeout_s`` bounds opening the metadata store, ``settings``
    override :class:`~bkframe.core.client.settings.ClientSettings` fields (and, as in
    :func:`~bkframe.core.client.client.open_client`, give the placement policy's options)."""
    return BlockingClient(metadata_uri, timeout_s=timeout_s, **settings)
