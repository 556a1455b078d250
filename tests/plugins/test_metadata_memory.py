"""``memory://``: the metadata-store contract, and the in-process stand-in for a dying holder."""

from __future__ import annotations

import os

import pytest
import trio

from bkframe.core.metadata import BookieInfo
from bkframe.plugins.metadata_memory import MemoryMetadataStore, reset_shared
from bkframe.testing.metadata_contract import MetadataStoreContract


class TestMemoryStore(MetadataStoreContract):
    @pytest.fixture
    def store_uri(self) -> str:
        reset_shared()
        return f"memory://contract-{os.getpid()}"


async def test_registration_expires_when_the_holder_dies(nursery: trio.Nursery) -> None:
    """In one process "dies" can only be simulated: ``expire`` drops the registration."""
    store = MemoryMetadataStore("memory://")
    await store.register_bookie(BookieInfo("gone", "127.0.0.1:1"), ttl_s=1, nursery=nursery)
    assert [b.bookie_id for b in await store.list_bookies()] == ["gone"]
    store.expire("gone")
    assert await store.list_bookies() == []
