"""The ``metadata_etcd`` plugin: answers ``etcd://HOST:PORT[,HOST:PORT...]/ROOT`` URIs."""

from __future__ import annotations

from bkframe.core.hookspecs import hookimpl
from bkframe_metadata_etcd.store import SCHEME, EtcdMetadataStore


@hookimpl
def bkframe_metadata_store(uri: str) -> EtcdMetadataStore | None:
    return EtcdMetadataStore(uri) if uri.startswith(SCHEME) else None
