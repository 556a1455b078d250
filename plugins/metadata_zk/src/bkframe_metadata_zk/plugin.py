"""The ``metadata_zk`` plugin: registers the ``zk://HOST:PORT[,HOST:PORT...]/ROOT`` scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkframe import hookimpl
from bkframe.core.registry import ComponentRegistry

if TYPE_CHECKING:
    from bkframe_metadata_zk.store import ZkMetadataStore


def open_store(uri: str, *, create: bool) -> ZkMetadataStore:
    """``create`` makes no difference: ZooKeeper is a server; the store's nodes under ROOT
    are made as they are first written."""
    # Imported here, not at the top: every plugin manager (each bookie, client and CLI
    # command) imports this module, and kazoo took 80 ms of every such start.
    from bkframe_metadata_zk.store import ZkMetadataStore

    return ZkMetadataStore(uri)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store("zk", open_store, description="zk://HOST:PORT[,...]/ROOT: ZooKeeper (kazoo)")
