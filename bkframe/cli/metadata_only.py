"""Commands that talk to the metadata store alone (``log list``, ``ledger list|metadata``,
``bookies list``, ``cluster info|init``): the store opened by its plugin, no client, no
connection to a bookie -- so that such a command costs a fraction of a second
(docs/benchmarks/process-costs.md).

They run on asyncio, through anyio, as the metadata stores are written (the client runs them
under either loop): importing trio would be a third of such a command's time. They hold
nothing a signal must close in order: Ctrl-C is Python's KeyboardInterrupt and SIGTERM ends
them as :func:`bkframe.cli.interrupt.reported` says, with its one line and exit status."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from bkframe.core.interfaces.metadata_store import MetadataStore

T = TypeVar("T")


def on_metadata_store(uri: str, fn: Callable[[MetadataStore], Awaitable[T]], *, create: bool = False) -> T:
    """``fn(store)`` on the metadata store ``uri`` (made if ``create``), closed after it."""
    import anyio

    from bkframe.core.plugin_manager import PluginManager

    async def main() -> T:
        store = PluginManager().metadata_store(uri, create=create)
        try:
            return await fn(store)
        finally:
            with anyio.CancelScope(shield=True):
                await store.aclose()

    return anyio.run(main, backend="asyncio")
