"""The ``metadata_zk`` plugin: registers the ``zk://HOST:PORT[,HOST:PORT...]/ROOT`` scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkframe import MetadataError, hookimpl
from bkframe.core.registry import ComponentRegistry

if TYPE_CHECKING:
    from bkframe_metadata_zk.store import ZkMetadataStore


def open_store(uri: str, *, create: bool) -> ZkMetadataStore:
    """``create`` makes no difference: ZooKeeper is a server; the store's nodes under ROOT
    are made as they are first written."""
    # Imported here, not at the top: every plugin manager (each bookie, client and CLI
    # command) imports this module, and kazoo took 80 ms of every such start.
    try:
        from bkframe_metadata_zk.store import ZkMetadataStore
    except ImportError as e:
        raise MetadataError(
            f"{uri!r}: the zk metadata plugin cannot import its client library ({e}); "
            f"reinstall it: pip install --force-reinstall bkframe-metadata-zk"
        ) from None

    return ZkMetadataStore(uri)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store("zk", open_store, description="zk://HOST:PORT[,...]/ROOT: ZooKeeper (kazoo)")
