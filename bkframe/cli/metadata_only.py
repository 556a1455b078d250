"""Commands that talk to the metadata store alone (``log list``, ``cluster info``): the store
opened by its plugin, no client, no connection to a bookie -- so that such a command costs a
fraction of a second (docs/benchmarks/process-costs.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from bkframe.cli import interrupt

if TYPE_CHECKING:
    from bkframe.core.interfaces.metadata_store import MetadataStore

T = TypeVar("T")


def on_metadata_store(uri: str, fn: Callable[[MetadataStore], Awaitable[T]], *, create: bool = False) -> T:
    """``fn(store)`` on the metadata store ``uri`` (made if ``create``), closed after it, under
    :func:`bkframe.cli.interrupt.run`."""
    import trio

    from bkframe.core.plugin_manager import PluginManager

    async def main() -> T:
        store = PluginManager().metadata_store(uri, create=create)
        try:
            return await fn(store)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()

    return interrupt.run(main)
