"""``sqlite://``: the metadata-store contract, and opening (or refusing to create) a store."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import MetadataError
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
