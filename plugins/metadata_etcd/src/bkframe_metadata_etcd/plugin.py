"""The ``metadata_etcd`` plugin: registers the ``etcd://HOST:PORT[,HOST:PORT...]/ROOT`` scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bkframe import MetadataError, hookimpl
from bkframe.core.registry import ComponentRegistry

if TYPE_CHECKING:
    from bkframe_metadata_etcd.store import EtcdMetadataStore


def open_store(uri: str, *, create: bool) -> EtcdMetadataStore:
    """``create`` makes no difference: etcd is a server; keys under ROOT are made as they
    are first written."""
    # Imported here, not at the top: every plugin manager (each bookie, client and CLI
    # command) imports this module, and etcd3gw and requests took 150 ms of every such start.
    try:
        from bkframe_metadata_etcd.store import EtcdMetadataStore
    except ImportError as e:
        raise MetadataError(
            f"{uri!r}: the etcd metadata plugin cannot import its client library ({e}); "
            f"reinstall it: pip install --force-reinstall bkframe-metadata-etcd"
        ) from None

    return EtcdMetadataStore(uri)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store("etcd", open_store, description="etcd://HOST:PORT[,...]/ROOT: etcd v3 (etcd3gw)")
