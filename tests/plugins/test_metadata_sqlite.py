"""``sqlite://``: the metadata-store contract, and opening (or refusing to create) a store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio

from bkframe import MetadataError
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.metadata_contract import SharedMetadataStoreContract


class TestSqliteStore(SharedMetadataStoreContract):
    @pytest.fixture
    def store_uri(self, tmp_path: Path) -> str:
        return f"sqlite://{tmp_path / 'meta.db'}"


def test_unopenable_sqlite_uri_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(MetadataError, match=r"sqlite://.*file/meta\.db"):
        PluginManager().metadata_store(f"sqlite://{blocker / 'meta.db'}", create=True)


async def test_a_client_never_creates_a_store(tmp_path: Path) -> None:
    """Only bookies and the sandbox make a new store; a typo in a client's URI is an error,
    not a new, empty cluster (nor a new directory)."""
    uri = f"sqlite://{tmp_path / 'typo' / 'x.db'}"
    with pytest.raises(MetadataError, match=r"metadata store 'sqlite://.*/typo/x.db' does not exist"):
        PluginManager().metadata_store(uri)
    assert not (tmp_path / "typo").exists()
    created = PluginManager().metadata_store(uri, create=True)
    await created.aclose()
    opened = PluginManager().metadata_store(uri)
    assert await opened.list_ledgers() == []
    await opened.aclose()


async def test_a_lock_taken_over_after_expiry_is_lost_by_its_holder(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A holder that stalled past its TTL (here: its row expired and another took it) learns
    it from its next heartbeat: ``lost`` is set, and its release leaves the new row alone."""
    uri = f"sqlite://{tmp_path / 'meta.db'}"
    store = PluginManager().metadata_store(uri, create=True)
    lock = await store.try_lock("auditor", "stalled", 1.0, nursery)
    assert lock is not None
    with sqlite3.connect(tmp_path / "meta.db") as db:  # as if the row had expired and "heir" took it
        db.execute("UPDATE locks SET holder = 'heir', token = 'heir-token' WHERE name = 'auditor'")
    with trio.fail_after(5):
        await lock.lost.wait()
    await lock.release()
    assert await store.lock_holder("auditor") == "heir"
    await store.aclose()
