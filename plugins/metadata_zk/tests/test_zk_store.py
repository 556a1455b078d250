"""The ZooKeeper store keeps the metadata-store contract, on a real ZooKeeper server."""

from __future__ import annotations

import uuid

import pytest

from bkframe.testing.metadata_contract import SharedMetadataStoreContract
from bkframe.testing.servers import ZooKeeperServer


class TestZkStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, zk_server: ZooKeeperServer) -> str:
        return f"zk://{zk_server.address}/t-{uuid.uuid4().hex[:12]}"
