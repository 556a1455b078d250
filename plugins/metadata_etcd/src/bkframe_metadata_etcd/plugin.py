"""The ``metadata_etcd`` plugin: registers the ``etcd://HOST:PORT[,HOST:PORT...]/ROOT`` scheme."""

from __future__ import annotations

from bkframe import hookimpl
from bkframe.core.registry import ComponentRegistry
from bkframe_metadata_etcd.store import EtcdMetadataStore


def open_store(uri: str, *, create: bool) -> EtcdMetadataStore:
    """``create`` makes no difference: etcd is a server; keys under ROOT are made as they
    are first written."""
    return EtcdMetadataStore(uri)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_metadata_store("etcd", open_store, description="etcd://HOST:PORT[,...]/ROOT: etcd v3 (etcd3gw)")
