"""A blocking facade over the async client, for synchronous code (scripts, Spark tasks):
``with bkframe.connect(uri) as bk: ...``.

Every public method and property of :class:`~bkframe.client.client.Client`, the ledger
handles, :class:`~bkframe.client.logs.api.Logs` and the log writer and reader has a twin
with the same name and signature: ``await x.f(...)`` becomes ``x.f(...)``, an async iterator
a :class:`BlockingTail`. The twins are generated (:mod:`bkframe.client.blocking_twins`, by
``scripts/gen_blocking.py``) from the async classes, so signatures, defaults and docstrings
live once; what differs is written in :mod:`bkframe.client.blocking_extras`.
tests/client/test_api_parity.py checks the two APIs against each other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bkframe.client.blocking_tail import BlockingTail
from bkframe.client.blocking_twins import (
    BlockingClient,
    BlockingLogReader,
    BlockingLogs,
    BlockingLogWriter,
    BlockingReadHandle,
    BlockingWriteHandle,
)
from bkframe.client.run_ahead import RunAhead
from bkframe.client.settings import ClientSettings
from bkframe.core.plugin_manager import PluginManager

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

__all__ = [
    "BlockingClient",
    "BlockingLogReader",
    "BlockingLogWriter",
    "BlockingLogs",
    "BlockingReadHandle",
    "BlockingTail",
    "BlockingWriteHandle",
    "RunAhead",
    "connect",
]


def connect(
    metadata_uri: str,
    *,
    plugins: PluginManager | None = None,
    settings: ClientSettings | None = None,
    metrics_registry: CollectorRegistry | None = None,
    timeout_s: float | None = None,
    loop: str = "trio",
    **overrides: Any,
) -> BlockingClient:
    """A blocking client: :func:`~bkframe.client.client.open_client`'s arguments, and
    ``timeout_s`` bounds opening the metadata store; ``loop`` is the event loop its thread
    runs the async client in (``"trio"`` or ``"asyncio"``: the same client either way)."""
    return BlockingClient(
        metadata_uri,
        plugins=plugins,
        settings=settings,
        metrics_registry=metrics_registry,
        timeout_s=timeout_s,
        loop=loop,
        **overrides,
    )
