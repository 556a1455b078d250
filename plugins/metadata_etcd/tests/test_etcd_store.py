"""The etcd store keeps the metadata-store contract, on a real etcd server."""

from __future__ import annotations

import uuid

import pytest

from bkframe.testing.metadata_contract import SharedMetadataStoreContract
from bkframe.testing.servers import EtcdServer


class TestEtcdStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, etcd_server: EtcdServer) -> str:
        return f"etcd://{etcd_server.address}/t-{uuid.uuid4().hex[:12]}"
