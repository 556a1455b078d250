"""docs/plugins.md's tutorials are working plugins (issue 49, item 2): the python blocks of each
"Tutorial: ..., step by step" section, joined in order, make a module on the plugin API only,
whose registered component keeps its contract -- the ledger storage's own, the entry-log
manager's as the `default` storage over it keeps the ledger-storage contract."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import LedgerStorage
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.storage_contract import LedgerStorageContract, StorageFactory

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
LEDGER_STORAGE = "## Tutorial: a ledger storage, step by step"
ENTRY_LOG = "## Tutorial: an entry-log manager, step by step"


def tutorial_source(title: str) -> str:
    text = DOC.read_text()
    assert title in text, f"docs/plugins.md has no section {title!r}"
    section = text.split(title, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 5, "the tutorial's steps are python blocks"
    return "\n".join(blocks)


def load(title: str, directory: Path) -> Iterator[ModuleType]:
    path = directory / "tutorial_plugin.py"
    path.write_text(tutorial_source(title))
    spec = importlib.util.spec_from_file_location(f"tutorial_{directory.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # attrs resolves the module's annotations through it
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


@pytest.fixture(scope="module")
def storage_tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    yield from load(LEDGER_STORAGE, tmp_path_factory.mktemp("storage"))


@pytest.fixture(scope="module")
def entry_log_tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    yield from load(ENTRY_LOG, tmp_path_factory.mktemp("entrylog"))


@pytest.mark.parametrize("title", [LEDGER_STORAGE, ENTRY_LOG])
def test_it_imports_only_the_plugin_api(title: str) -> None:
    imported = set(re.findall(r"^(?:from|import) (bkframe[.\w]*)", tutorial_source(title), re.M))
    assert imported and all(m.startswith(("bkframe.core", "bkframe.storage_kit")) for m in imported), imported


def storage_factory_of(plugins: PluginManager, entry_log: dict[str, object], storage: dict[str, object]) -> StorageFactory:
    def open_storage(directory: Path, counters: Counters) -> LedgerStorage:
        entry_logs = plugins.entry_log_manager(config=entry_log, directory=directory / "entrylogs", counters=counters)
        return plugins.ledger_storage(config=storage, directory=directory / "ledgers", entry_logs=entry_logs, counters=counters)

    return open_storage


class TestTutorialLedgerStorage(LedgerStorageContract):
    @pytest.fixture
    def storage_factory(self, storage_tutorial: ModuleType) -> StorageFactory:
        plugins = PluginManager(load_entry_points=False, extra_plugins=[storage_tutorial])
        return storage_factory_of(plugins, {"plugin": "single"}, {"plugin": "files"})


class TestTutorialEntryLogManager(LedgerStorageContract):
    """Small logs, so that they roll during the suite."""

    @pytest.fixture
    def storage_factory(self, entry_log_tutorial: ModuleType) -> StorageFactory:
        plugins = PluginManager(load_entry_points=False, extra_plugins=[entry_log_tutorial])
        return storage_factory_of(plugins, {"plugin": "rolling", "max_log_size": 4096}, {"plugin": "default"})
