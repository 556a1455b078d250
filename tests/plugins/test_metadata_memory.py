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


async def test_lock_is_freed_and_lost_when_its_holder_dies(nursery: trio.Nursery) -> None:
    """``expire_lock`` is the in-process "holder died": the lock is free and its holder told."""
    store = MemoryMetadataStore("memory://")
    lock = await store.try_lock("auditor", "doomed", 1, nursery)
    assert lock is not None and not lock.lost.is_set()
    store.expire_lock("auditor")
    assert lock.lost.is_set() and await store.lock_holder("auditor") is None
    heir = await store.try_lock("auditor", "heir", 1, nursery)
    assert heir is not None and await store.lock_holder("auditor") == "heir"
    await lock.release()  # the dead holder's release must not free the heir's lock
    assert await store.lock_holder("auditor") == "heir" and not heir.lost.is_set()
