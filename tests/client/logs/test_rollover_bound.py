"""A log writer's rollover that meets a metadata store that does not answer fails within the
client's ``metadata_timeout_s`` (issue 35, item 4), not after the store's own ~30 s of retries.

The client's store is the real sqlite store behind a switch: once thrown, every call blocks
in a worker thread until released, as a store client retrying an unreachable server does
(cancelling its caller does not stop it). The bookie, in process, uses the store directly.
"""

from __future__ import annotations

import inspect
import threading
from pathlib import Path
from typing import Any

import pytest
import trio

import bkframe
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentRegistry
from bkframe.plugins.metadata_sqlite import SqliteMetadataStore
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import PASSWORD

#: The client's metadata_timeout_s here, and slack for a loaded machine.
TIMEOUT_S = 1.0
SLACK_S = 3.0


class Unanswering:
    """A metadata store that stops answering once ``hung``: each call then waits in a worker
    thread until :meth:`release`."""

    def __init__(self, inner: SqliteMetadataStore) -> None:
        self._inner = inner
        self.hung = False
        self._released = threading.Event()

    def release(self) -> None:
        self._released.set()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr) or name == "aclose":
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            if self.hung:
                await trio.to_thread.run_sync(self._released.wait)
            return await attr(*args, **kwargs)

        return call


class UnansweringPlugin:
    """``unanswering:///PATH``: the sqlite store at PATH behind the switch."""

    @bkframe.hookimpl
    def bkframe_register_components(self, registry: ComponentRegistry) -> None:
        def open_store(uri: str, *, create: bool) -> Unanswering:
            return Unanswering(SqliteMetadataStore("sqlite://" + uri.removeprefix("unanswering://"), create=create))

        registry.add_metadata_store("unanswering", open_store, description="sqlite behind a switch (tests)")


async def test_a_rollover_that_meets_a_store_that_does_not_answer_fails_within_metadata_timeout_s(tmp_path: Path) -> None:
    db = tmp_path / "metadata.db"
    plugins = PluginManager()
    plugins.register(UnansweringPlugin())
    async with running_bookie(make_config(tmp_path / "bookie", metadata=f"sqlite://{db}")):
        async with bkframe.open_client(f"unanswering://{db}", plugins=plugins, metadata_timeout_s=TIMEOUT_S) as client:
            store = client.context.metadata
            assert isinstance(store, Unanswering)
            try:
                await client.logs.create("events", password=PASSWORD, ensemble=1, write_quorum=1, ack_quorum=1)
                writer = await client.logs.open_writer("events", password=PASSWORD)
                acked = [await writer.append(b"record %d" % i) for i in range(5)]
                store.hung = True
                started = trio.current_time()
                await writer.roll()  # an early rollover records its boundary with a CAS
                with trio.fail_after(30), pytest.raises(bkframe.LogError, match="metadata_timeout_s") as failed:
                    await writer.append(b"after the rollover")
                took = trio.current_time() - started
                assert took < TIMEOUT_S + SLACK_S, f"the writer failed after {took:.1f} s: {failed.value}"
            finally:
                store.release()
            # Nothing acknowledged before is lost: the next writer recovers the open segment.
            await (await client.logs.open_writer("events", password=PASSWORD)).close()
            reader = await client.logs.reader("events", password=PASSWORD)
            records = [(r.position, r.payload) for r in await reader.read()]
            assert records[: len(acked)] == [(p, b"record %d" % i) for i, p in enumerate(acked)]
            # The failed append's outcome is unknown, as any write's that timed out: the
            # abandoned CAS may land once the store answers, and its record with it.
            assert [payload for _, payload in records[len(acked) :]] in ([], [b"after the rollover"])
