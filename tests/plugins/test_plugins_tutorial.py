"""docs/plugins.md's tutorial is a working plugin: the python blocks of its section "Tutorial: a
ledger storage, step by step", joined in order, make a module whose registered storage keeps
the ledger-storage contract (issue 49, item 2)."""

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
SECTION = "## Tutorial: a ledger storage, step by step"


def tutorial_source() -> str:
    text = DOC.read_text()
    assert SECTION in text, f"docs/plugins.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) >= 6, "the tutorial's steps are python blocks"
    return "\n".join(blocks)


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    path = tmp_path_factory.mktemp("tutorial") / "bkframe_storage_files_tutorial.py"
    path.write_text(tutorial_source())
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # attrs and dataclass-like tools look their module up
    spec.loader.exec_module(module)
    yield module
    del sys.modules[path.stem]


def test_it_imports_only_the_plugin_api(tutorial: ModuleType) -> None:
    imported = set(re.findall(r"^(?:from|import) (bkframe[.\w]*)", tutorial_source(), re.M))
    assert imported and all(m.startswith(("bkframe.core", "bkframe.storage_kit")) for m in imported), imported


class TestTutorialStorage(LedgerStorageContract):
    @pytest.fixture
    def storage_factory(self, tutorial: ModuleType) -> StorageFactory:
        plugins = PluginManager(load_entry_points=False, extra_plugins=[tutorial])

        def open_storage(directory: Path, counters: Counters) -> LedgerStorage:
            entry_logs = plugins.entry_log_manager(
                config={"plugin": "single"}, directory=directory / "entrylogs", counters=counters
            )
            return plugins.ledger_storage(
                config={"plugin": "files"}, directory=directory / "ledgers", entry_logs=entry_logs, counters=counters
            )

        return open_storage
