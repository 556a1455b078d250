"""The ``metadata_zk`` plugin: answers ``zk://HOST:PORT[,HOST:PORT...]/ROOT`` URIs."""

from __future__ import annotations

from bkframe.core.hookspecs import hookimpl
from bkframe_metadata_zk.store import SCHEME, ZkMetadataStore


@hookimpl
def bkframe_metadata_store(uri: str) -> ZkMetadataStore | None:
    return ZkMetadataStore(uri) if uri.startswith(SCHEME) else None
