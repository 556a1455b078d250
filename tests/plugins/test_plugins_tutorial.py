"""docs/plugins.md's tutorials are working plugins (issue 49, item 2): the python blocks of each
"Tutorial: ..., step by step" section, joined in order, make a module on the plugin API only,
whose registered component keeps its contract -- the journal's and the ledger storage's own,
the entry-log manager's as the `default` storage over it keeps the ledger-storage contract --
and the journal's torn tails are cut where the tutorial says."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import JournalCorruptError, JournalPosition
from bkframe.core.interfaces.ledger_storage import LedgerStorage
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.journal_contract import JournalContract, JournalFactory, write_records
from bkframe.testing.storage_contract import LedgerStorageContract, StorageFactory

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
JOURNAL = "## Tutorial: a journal, step by step"
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
def journal_tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    yield from load(JOURNAL, tmp_path_factory.mktemp("journal"))


@pytest.fixture(scope="module")
def storage_tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    yield from load(LEDGER_STORAGE, tmp_path_factory.mktemp("storage"))


@pytest.fixture(scope="module")
def entry_log_tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    yield from load(ENTRY_LOG, tmp_path_factory.mktemp("entrylog"))


@pytest.mark.parametrize("title", [JOURNAL, LEDGER_STORAGE, ENTRY_LOG])
def test_it_imports_only_the_plugin_api(title: str) -> None:
    imported = set(re.findall(r"^(?:from|import) (bkframe[.\w]*)", tutorial_source(title), re.M))
    assert imported and all(m.startswith(("bkframe.core", "bkframe.storage_kit")) for m in imported), imported


def storage_factory_of(plugins: PluginManager, entry_log: dict[str, object], storage: dict[str, object]) -> StorageFactory:
    def open_storage(directory: Path, counters: Counters) -> LedgerStorage:
        entry_logs = plugins.entry_log_manager(config=entry_log, directory=directory / "entrylogs", counters=counters)
        return plugins.ledger_storage(config=storage, directory=directory / "ledgers", entry_logs=entry_logs, counters=counters)

    return open_storage


class TestTutorialJournal(JournalContract):
    """Small files, so that the suite sees them roll."""

    def check_positions(self, positions: list[JournalPosition]) -> None:
        assert len({p.file_id for p in positions}) >= 5, "the records should span files"

    @pytest.fixture
    def journal_factory(self, journal_tutorial: ModuleType) -> JournalFactory:
        plugins = PluginManager(load_entry_points=False, extra_plugins=[journal_tutorial])
        section = {"plugin": "simple", "max_file_size": 5_000}
        return lambda directory, counters: plugins.journal(config=section, directory=directory, counters=counters)

    async def test_a_torn_tail_is_cut_and_the_next_run_goes_on(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        first = [b"first run %d " % i * 20 for i in range(100)]
        await write_records(journal_factory(tmp_path, Counters()), first)
        files = sorted(tmp_path.glob("*.journal"))
        assert len(files) >= 3
        with files[-1].open("r+b") as f:  # a crash in the middle of the last record's write
            f.truncate(files[-1].stat().st_size - 3)
        await write_records(journal_factory(tmp_path, Counters()), [b"second run"])
        assert self.replay(journal_factory, tmp_path) == [*first[:-1], b"second run"]

    async def test_damage_before_a_runs_last_file_is_refused(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        await write_records(journal_factory(tmp_path, Counters()), [b"record %d " % i * 20 for i in range(100)])
        first = sorted(tmp_path.glob("*.journal"))[0]
        data = bytearray(first.read_bytes())
        data[40] ^= 0xFF  # inside a record the next file's existence says was fsynced
        first.write_bytes(bytes(data))
        with pytest.raises(JournalCorruptError, match=first.name):
            self.replay(journal_factory, tmp_path)


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
