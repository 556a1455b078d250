"""A blocking facade over the trio client, for synchronous code (scripts, Spark tasks).

The facade owns one thread that runs a trio event loop with the async client in it; each
blocking call hands its work to that loop with ``trio.from_thread.run`` and waits. This is
the one thread bkframe starts on its own, because synchronous callers have no loop to lend.

Every public method and property of :class:`~bkframe.client.client.Client`, the ledger
handles, :class:`~bkframe.client.logs.api.Logs` and the log writer and reader has a twin
here with the same name and signature: ``await x.f(...)`` becomes ``x.f(...)``, an async
iterator a :class:`BlockingTail`. The twins are written out (not generated) so that type
checkers and readers see them; tests/client/test_api_parity.py fails when the two drift.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple

import trio
from prometheus_client import CollectorRegistry

from bkframe.client.blocking_tail import BlockingTail, singly
from bkframe.client.client import Client, open_client
from bkframe.client.logs import columns
from bkframe.client.logs.api import CursorInfo, LogInfo, Logs
from bkframe.client.logs.envelope import Record
from bkframe.client.logs.model import (
    EARLIEST,
    CommitResult,
    Cursor,
    LogEntry,
    LogMetadata,
    LogSettings,
    Position,
    SegmentRange,
    TrimResult,
    Where,
)
from bkframe.client.logs.offload import OffloadResult
from bkframe.client.logs.reader import LogReader
from bkframe.client.logs.tier_reads import TierReads
from bkframe.client.logs.writer import LogWriter
from bkframe.client.read_handle import Entry, EntryBlock, ReadHandle
from bkframe.client.run_ahead import RunAhead
from bkframe.client.settings import ClientSettings
from bkframe.client.write_handle import WriteHandle
from bkframe.core.metadata import DigestType, LedgerMetadata
from bkframe.core.plugin_manager import PluginManager

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as ds

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class BlockingClient:
    """``with bkframe.connect(uri) as bk: ...``: :class:`~bkframe.client.client.Client`, blocking."""

    def __init__(
        self,
        metadata_uri: str,
        *,
        plugins: PluginManager | None = None,
        settings: ClientSettings | None = None,
        metrics_registry: CollectorRegistry | None = None,
        timeout_s: float | None = None,
        **overrides: Any,
    ) -> None:
        self._uri = metadata_uri
        self._options: dict[str, Any] = dict(overrides, plugins=plugins, settings=settings, metrics_registry=metrics_registry)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._logs: BlockingLogs | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery
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
        async with open_client(self._uri, **self._options) as client, trio.open_nursery() as nursery:
            self._client = client
            self._nursery = nursery
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()
            # Work run ahead and not collected ends with the client.
            nursery.cancel_scope.cancel()

    def _run(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

    # -- blocking only -------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The trio client inside, for async functions given to :meth:`run`."""
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
        (``trio.fail_after``), at the call site."""
        return self._run(fn, *args)

    def run_ahead(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> RunAhead[T]:
        """Start ``fn(*args)`` in the client's loop and return at once: the caller does
        other work meanwhile and collects the outcome with :meth:`RunAhead.result` (what
        ``run`` would have returned or raised), or drops it with :meth:`RunAhead.cancel`.
        How a Spark task reads its next chunk while Spark consumes the current one. Put the
        timeout inside ``fn``; the work ends with the client at the latest."""
        assert self._token is not None
        ahead: RunAhead[T] = RunAhead(self._token, lambda: self.alive)
        trio.from_thread.run_sync(self._nursery.start_soon, ahead._run, fn, args, trio_token=self._token)
        return ahead

    def close(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the twins of Client -------------------------------------------------------------

    @property
    def settings(self) -> ClientSettings:
        return self.client.settings

    @property
    def client_id(self) -> str:
        return self.client.client_id

    @property
    def metrics_registry(self) -> CollectorRegistry:
        return self.client.metrics_registry

    @property
    def logs(self) -> BlockingLogs:
        """Named logs: :class:`~bkframe.client.logs.api.Logs`, blocking."""
        if self._logs is None:
            self._logs = BlockingLogs(self, self.client.logs)
        return self._logs

    def create_ledger(
        self,
        *,
        ensemble: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        ledger_type: str = "PD_JOURNAL",
        digest: DigestType | str = DigestType.CRC32C,
        password: bytes = b"",
        custom: Mapping[str, str] | None = None,
        claim: bool = True,
    ) -> BlockingWriteHandle:
        handle = self._run(
            lambda: self.client.create_ledger(
                ensemble=ensemble,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                ledger_type=ledger_type,
                digest=digest,
                password=password,
                custom=custom,
                claim=claim,
            )
        )
        return BlockingWriteHandle(self, handle)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._run(self.client.ledger_metadata, ledger_id)

    def open_ledger(self, ledger_id: int, *, password: bytes = b"", recovery: bool = True) -> BlockingReadHandle:
        handle = self._run(lambda: self.client.open_ledger(ledger_id, password=password, recovery=recovery))
        return BlockingReadHandle(self, handle)

    def open_writer(self, ledger_id: int, *, password: bytes = b"") -> BlockingWriteHandle:
        return BlockingWriteHandle(self, self._run(lambda: self.client.open_writer(ledger_id, password=password)))

    def delete_ledger(self, ledger_id: int) -> None:
        self._run(self.client.delete_ledger, ledger_id)

    def list_ledgers(self, *, start: int = 0, limit: int | None = None) -> list[int]:
        return self._run(lambda: self.client.list_ledgers(start=start, limit=limit))


class BlockingWriteHandle:
    """:class:`~bkframe.client.write_handle.WriteHandle`, blocking."""

    def __init__(self, owner: BlockingClient, handle: WriteHandle) -> None:
        self._owner = owner
        #: The async handle inside, for async functions given to :meth:`BlockingClient.run`.
        self.handle = handle

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata

    @property
    def lac(self) -> int:
        return self.handle.lac

    @property
    def lap(self) -> int:
        return self.handle.lap

    @property
    def length(self) -> int:
        return self.handle.length

    def append(self, payload: bytes) -> int:
        """Append and wait for confirmation; returns the entry id."""
        return self._owner._run(self.handle.append, payload)

    def append_many(self, payloads: Iterable[bytes]) -> list[int]:
        """Append a batch pipelined; returns the entry ids once all are confirmed."""
        data = list(payloads)

        async def run() -> list[int]:
            return list(await self.handle.append_many(data))

        return self._owner._run(run)

    def sync(self) -> int:
        """Make the bookies fsync what was appended (VD_JOURNAL); returns the new LAC."""
        return self._owner._run(self.handle.sync)

    def write_lac(self) -> int:
        return self._owner._run(self.handle.write_lac)

    def flush(self) -> None:
        self._owner._run(self.handle.flush)

    def close(self) -> LedgerMetadata:
        return self._owner._run(self.handle.close)


class BlockingReadHandle:
    """:class:`~bkframe.client.read_handle.ReadHandle`, blocking."""

    def __init__(self, owner: BlockingClient, handle: ReadHandle) -> None:
        self._owner = owner
        #: The async handle inside, for async functions given to :meth:`BlockingClient.run`.
        self.handle = handle

    @property
    def ledger_id(self) -> int:
        return self.handle.ledger_id

    @property
    def metadata(self) -> LedgerMetadata:
        return self.handle.metadata

    @property
    def lac(self) -> int:
        return self.handle.lac

    @property
    def closed(self) -> bool:
        return self.handle.closed

    def read(self, first: int, last: int) -> list[Entry]:
        return self._owner._run(self.handle.read, first, last)

    def read_block(self, first: int, last: int) -> EntryBlock:
        return self._owner._run(self.handle.read_block, first, last)

    def read_unconfirmed(self, first: int, last: int) -> list[Entry]:
        return self._owner._run(self.handle.read_unconfirmed, first, last)

    def read_lac(self) -> int:
        return self._owner._run(self.handle.read_lac)

    def refresh(self) -> LedgerMetadata:
        return self._owner._run(self.handle.refresh)

    def wait_for_lac(self, previous: int, *, timeout_s: float = 1.0) -> int:
        return self._owner._run(lambda: self.handle.wait_for_lac(previous, timeout_s=timeout_s))

    def tail(self, start: int = 0, *, poll_timeout_s: float = 1.0, idle_timeout_s: float | None = None) -> BlockingTail[Entry]:
        """Entries from ``start`` as they are confirmed, until the ledger is closed and read;
        with ``idle_timeout_s`` it ends once no entry came for that long."""
        return BlockingTail(self._owner, singly(self.handle.tail(start, poll_timeout_s=poll_timeout_s)), idle_timeout_s)


# -- named logs ------------------------------------------------------------------------


class BlockingLogs:
    """``bk.logs``: :class:`~bkframe.client.logs.api.Logs`, blocking."""

    def __init__(self, owner: BlockingClient, logs: Logs) -> None:
        self._owner = owner
        self._logs = logs

    @property
    def client(self) -> BlockingClient:
        return self._owner

    def create(self, name: str, settings: LogSettings | None = None, *, password: bytes = b"", **overrides: Any) -> LogMetadata:
        return self._owner._run(lambda: self._logs.create(name, settings, password=password, **overrides))

    def metadata(self, name: str) -> LogMetadata:
        return self._owner._run(self._logs.metadata, name)

    def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        return self._owner._run(lambda: self._logs.list_logs(start=start, limit=limit))

    def delete(self, name: str) -> LogMetadata:
        return self._owner._run(self._logs.delete, name)

    def open_writer(self, name: str, *, password: bytes = b"") -> BlockingLogWriter:
        return BlockingLogWriter(self._owner, self._owner._run(lambda: self._logs.open_writer(name, password=password)))

    def commit_ledgers(
        self,
        name: str,
        ledger_ids: Iterable[int],
        token: str,
        *,
        password: bytes = b"",
        time_bounds: Mapping[int, tuple[int, int]] | None = None,
    ) -> CommitResult:
        ids = list(ledger_ids)
        return self._owner._run(
            lambda: self._logs.commit_ledgers(name, ids, token, password=password, time_bounds=time_bounds)
        )

    def commit_many(
        self,
        ledgers: Mapping[str, Iterable[int]],
        token: str,
        *,
        password: bytes | Mapping[str, bytes] = b"",
        time_bounds: Mapping[int, tuple[int, int]] | None = None,
    ) -> dict[str, CommitResult]:
        lists = {name: list(ids) for name, ids in ledgers.items()}
        return self._owner._run(lambda: self._logs.commit_many(lists, token, password=password, time_bounds=time_bounds))

    def stage_ledger(self, name: str, ledger_id: int, token: str, *, group: str = "", password: bytes = b"") -> bool:
        return self._owner._run(lambda: self._logs.stage_ledger(name, ledger_id, token, group=group, password=password))

    def discard_staged(self, name: str, group: str, *, password: bytes = b"") -> list[int]:
        return self._owner._run(lambda: self._logs.discard_staged(name, group, password=password))

    def discard_staged_many(
        self, names: Iterable[str], group: str, *, password: bytes | Mapping[str, bytes] = b""
    ) -> dict[str, list[int]]:
        wanted = list(names)
        return self._owner._run(lambda: self._logs.discard_staged_many(wanted, group, password=password))

    def reader(self, name: str, *, password: bytes = b"") -> BlockingLogReader:
        return BlockingLogReader(self._owner, self._owner._run(lambda: self._logs.reader(name, password=password)))

    def configure(self, name: str, *, password: bytes = b"", **changes: Any) -> LogMetadata:
        return self._owner._run(lambda: self._logs.configure(name, password=password, **changes))

    def offload(
        self, name: str, *, tier: str, until: Position | None = None, password: bytes = b""
    ) -> OffloadResult:
        return self._owner._run(lambda: self._logs.offload(name, tier=tier, until=until, password=password))

    def trim(self, name: str, *, before: Position | None = None, retention: bool = False, force: bool = False) -> TrimResult:
        return self._owner._run(lambda: self._logs.trim(name, before=before, retention=retention, force=force))

    def create_cursor(
        self, name: str, cursor: str, start: Where = EARLIEST, *, password: bytes = b"", ttl_s: float | None = None
    ) -> Cursor:
        return self._owner._run(lambda: self._logs.create_cursor(name, cursor, start, password=password, ttl_s=ttl_s))

    def set_cursor_ttl(self, name: str, cursor: str, ttl_s: float | None) -> Cursor:
        return self._owner._run(self._logs.set_cursor_ttl, name, cursor, ttl_s)

    def cursor_infos(self, name: str, *, password: bytes = b"") -> tuple[CursorInfo, ...]:
        return self._owner._run(lambda: self._logs.cursor_infos(name, password=password))

    def cursor(self, name: str, cursor: str) -> Cursor:
        return self._owner._run(self._logs.cursor, name, cursor)

    def cursors(self, name: str) -> list[Cursor]:
        return self._owner._run(self._logs.cursors, name)

    def move_cursor(
        self, name: str, cursor: str, position: Where, *, rewind: bool = False, password: bytes = b""
    ) -> Cursor:
        return self._owner._run(lambda: self._logs.move_cursor(name, cursor, position, rewind=rewind, password=password))

    def ack(self, name: str, cursor: str, position: Position) -> Cursor:
        return self._owner._run(self._logs.ack, name, cursor, position)

    def flush_cursors(self, name: str | None = None, cursor: str | None = None) -> None:
        self._owner._run(self._logs.flush_cursors, name, cursor)

    def delete_cursor(self, name: str, cursor: str) -> None:
        self._owner._run(self._logs.delete_cursor, name, cursor)

    def end(self, name: str, *, password: bytes = b"") -> Position:
        return self._owner._run(lambda: self._logs.end(name, password=password))

    def info(self, name: str, *, password: bytes = b"") -> LogInfo:
        return self._owner._run(lambda: self._logs.info(name, password=password))


class BlockingLogWriter:
    """:class:`~bkframe.client.logs.writer.LogWriter`, blocking."""

    def __init__(self, owner: BlockingClient, writer: LogWriter) -> None:
        self._owner = owner
        #: The async writer inside, for async functions given to :meth:`BlockingClient.run`.
        self.writer = writer

    @property
    def name(self) -> str:
        return self.writer.name

    @property
    def writer_id(self) -> str:
        return self.writer.writer_id

    @property
    def epoch(self) -> int:
        return self.writer.epoch

    @property
    def settings(self) -> LogSettings:
        return self.writer.settings

    @property
    def segment(self) -> int:
        return self.writer.segment

    @property
    def metadata(self) -> LogMetadata:
        return self.writer.metadata

    def append(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        timestamp: int | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> Position:
        """Append and wait for confirmation; returns the entry's position."""
        return self._owner._run(
            lambda: self.writer.append(payload, key=key, timestamp=timestamp, properties=properties)
        )

    def append_many(self, records: Iterable[bytes | Record]) -> list[Position]:
        """Append a batch pipelined (one batch per bookie); returns the positions once all
        are confirmed. A record too large refuses the whole batch."""
        data = list(records)
        return self._owner._run(self.writer.append_many, data)

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
    """:class:`~bkframe.client.logs.reader.LogReader`, blocking."""

    def __init__(self, owner: BlockingClient, reader: LogReader) -> None:
        self._owner = owner
        #: The async reader inside, for async functions given to :meth:`BlockingClient.run`.
        self.reader = reader

    @property
    def name(self) -> str:
        return self.reader.name

    @property
    def tier_reads(self) -> TierReads:
        return self.reader.tier_reads

    @property
    def metadata(self) -> LogMetadata:
        return self.reader.metadata

    def refresh(self) -> LogMetadata:
        return self._owner._run(self.reader.refresh)

    def resolve(self, where: Where) -> Position:
        return self._owner._run(self.reader.resolve, where)

    def position_at(self, timestamp: int) -> Position:
        return self._owner._run(self.reader.position_at, timestamp)

    def end(self) -> Position:
        return self._owner._run(self.reader.end)

    def snapshot(self, start: Where = EARLIEST, end: Position | None = None) -> list[SegmentRange]:
        return self._owner._run(self.reader.snapshot, start, end)

    def advance(self, start: Where, max_entries: int, end: Position | None = None) -> Position:
        return self._owner._run(self.reader.advance, start, max_entries, end)

    def read_segment(self, segment: int, first: int, last: int) -> list[LogEntry]:
        return self._owner._run(self.reader.read_segment, segment, first, last)

    def read(
        self, start: Where = EARLIEST, end: Position | None = None, *, max_entries: int | None = None
    ) -> list[LogEntry]:
        return self._owner._run(lambda: self.reader.read(start, end, max_entries=max_entries))

    def chunks(self, start: Where = EARLIEST, end: Position | None = None) -> BlockingTail[list[LogEntry]]:
        return BlockingTail(self._owner, singly(self.reader.chunks(start, end)))

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
        chunks = self.reader.tail_chunks(start, poll_timeout_s=poll_timeout_s)
        return BlockingTail(self._owner, singly(chunks), idle_timeout_s)

    def arrow_batches(self, start: Where = EARLIEST, end: Position | None = None) -> BlockingTail[pa.RecordBatch]:
        return BlockingTail(self._owner, singly(self.reader.arrow_batches(start, end)))

    def to_arrow(self, start: Where = EARLIEST, end: Position | None = None) -> pa.Table:
        return self._owner._run(self.reader.to_arrow, start, end)

    def dataset(self, start: Where = EARLIEST, end: Position | None = None) -> ds.Dataset:
        return self._owner._run(self.reader.dataset, start, end)

    def record_batch_reader(self, start: Where = EARLIEST, end: Position | None = None) -> pa.RecordBatchReader:
        """The snapshot as a ``pyarrow.RecordBatchReader`` read a chunk at a time as consumed (DuckDB, Polars
        scan it lazily); ``end`` is fixed first (default: the end now): a repeatable prefix."""
        first = self.resolve(start)
        stop = end if end is not None else self.end()
        schema = columns.schema().with_metadata(
            {"bkframe.log": self.reader.name, "bkframe.start": str(first), "bkframe.end": str(max(stop, first))}
        )
        batches = iter(self.arrow_batches(first, stop)) if stop > first else iter(())
        return columns.pyarrow().RecordBatchReader.from_batches(schema, batches)


def connect(
    metadata_uri: str, *, plugins: PluginManager | None = None, settings: ClientSettings | None = None,
    metrics_registry: CollectorRegistry | None = None, timeout_s: float | None = None, **overrides: Any,
) -> BlockingClient:
    """A blocking client: :func:`~bkframe.client.client.open_client`'s arguments, and
    ``timeout_s`` bounds opening the metadata store."""
    return BlockingClient(
        metadata_uri, plugins=plugins, settings=settings, metrics_registry=metrics_registry, timeout_s=timeout_s, **overrides
    )
