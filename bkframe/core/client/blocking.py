"""A blocking facade over the trio client, for synchronous code (scripts, Spark tasks).

The facade owns one thread that runs a trio event loop with the async client in it; each
blocking call hands its work to that loop with ``trio.from_thread.run`` and waits. This is
the one thread bkframe starts on its own, because synchronous callers have no loop to lend.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from bkframe.core.client.client import Client, open_client
from bkframe.core.client.read_handle import Entry, ReadHandle
from bkframe.core.client.write_handle import WriteHandle
from bkframe.core.metadata import LedgerMetadata

T = TypeVar("T")


class BlockingClient:
    """``with bkframe.connect(uri) as bk: ...``"""

    def __init__(self, metadata_uri: str) -> None:
        self._uri = metadata_uri
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._client: Client | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=self._thread_main, name="bkframe-client", daemon=True)
        self._thread.start()
        self._ready.wait()
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
        async with open_client(self._uri) as client:
            self._client = client
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            self._ready.set()
            await self._stop.wait()

    def _run(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        assert self._token is not None
        return trio.from_thread.run(fn, *args, trio_token=self._token)

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
            pending = [self.handle.append_async(p) for p in payloads]
            return [await pa.wait() for pa in pending]

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


def connect(metadata_uri: str) -> BlockingClient:
    return BlockingClient(metadata_uri)
