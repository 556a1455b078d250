"""The ``per_ledger`` entry-log manager under the default ledger storage and in a bookie:
a log per ledger, sealed on write close (at the next flush), on expiry, above max_active
and when full; sealed logs of deleted ledgers are removed without copying."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import attrs
import bkframe_entrylog_per_ledger.manager as manager_module
import pytest
from bkframe_entrylog_per_ledger.manager import PerLedgerEntryLogManager
from bkframe_entrylog_per_ledger.plugin import PerLedgerConfig

from bkframe import ConfigError
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.config import load_config, parse_section
from bkframe.core.counters import Counters
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.proto.codes import Status
from bkframe.testing.storage_contract import LedgerStorageContract, StorageFactory


def open_storage(root: Path, **kw: float) -> tuple[DefaultLedgerStorage, PerLedgerEntryLogManager]:
    counters = Counters()
    logs = PerLedgerEntryLogManager(root / "entrylogs", counters, **kw)  # type: ignore[arg-type]
    return DefaultLedgerStorage(root / "ledgers", logs, counters, compaction_threshold=0), logs


class TestDefaultStorageOnPerLedgerLogs(LedgerStorageContract):
    """The default ledger storage keeps the storage contract on these entry logs too (small
    ones, few active at a time, so that logs are sealed and started during the tests)."""

    @pytest.fixture
    def storage_factory(self) -> StorageFactory:
        return lambda directory, counters: open_storage(directory, max_active=2, max_log_size=4096)[0]


async def test_each_ledger_has_its_own_log_and_reads_back(tmp_path: Path) -> None:
    storage, logs = open_storage(tmp_path)
    assert isinstance(logs, EntryLogManager)
    for lid in (1, 2, 3):
        storage.ensure_ledger(lid, b"k", 0)
    for e in range(20):
        for lid in (1, 2, 3):
            storage.add_entries(lid, [e], [b"%d:%d" % (lid, e)])
    assert logs.active_ledgers() == [1, 2, 3] and len(logs.log_ids()) == 3 and logs.sealed_log_ids() == []
    assert [storage.get_entry(2, e) for e in range(20)] == [b"2:%d" % e for e in range(20)]
    await storage.aclose()
    # After a restart every log is sealed (never appended to again) and still readable.
    storage, logs = open_storage(tmp_path)
    assert logs.sealed_log_ids() == logs.log_ids() and len(logs.log_ids()) == 3
    assert [storage.get_entry(3, e) for e in range(20)] == [b"3:%d" % e for e in range(20)]
    storage.add_entries(3, [20], [b"3:20"])
    assert len(logs.log_ids()) == 4
    await storage.aclose()


async def test_write_close_seals_at_the_next_flush(tmp_path: Path) -> None:
    storage, logs = open_storage(tmp_path)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
        storage.add_entries(lid, [0], [b"x"])
    storage.set_write_closed(1)
    assert logs.active_ledgers() == [1, 2]  # BP-32: remembered, applied at the checkpoint
    await storage.checkpoint()
    assert logs.active_ledgers() == [2] and len(logs.sealed_log_ids()) == 1
    await storage.aclose()


async def test_too_many_open_logs_seal_the_least_recently_used(tmp_path: Path) -> None:
    storage, logs = open_storage(tmp_path, max_active=2)
    for lid in (1, 2, 3):
        storage.ensure_ledger(lid, b"k", 0)
    storage.add_entries(1, [0], [b"a"])
    storage.add_entries(2, [0], [b"b"])
    storage.add_entries(1, [1], [b"c"])  # 2 is now the least recently used
    storage.add_entries(3, [0], [b"d"])
    assert logs.active_ledgers() == [1, 3]
    assert [storage.get_entry(2, 0), storage.get_entry(1, 1)] == [b"b", b"c"]
    await storage.aclose()


async def test_idle_and_full_logs_are_sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The manager's clock, moved by the test: idleness without waiting on the real one.
    now = [1000.0]
    monkeypatch.setattr(manager_module, "time", SimpleNamespace(monotonic=lambda: now[0]))
    storage, logs = open_storage(tmp_path, expire_after_access_s=0.05, max_log_size=4096)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
    for e in range(6):
        storage.add_entries(1, [e], [b"y" * 1000])  # about 4 entries a log
    assert len(logs.log_ids()) == 2 and logs.active_ledgers() == [1]
    await storage.checkpoint()
    assert logs.active_ledgers() == [1]  # not idle yet
    now[0] += 0.06  # past expire_after_access_s
    storage.add_entries(2, [0], [b"fresh"])
    await storage.checkpoint()
    assert logs.active_ledgers() == [2]  # ledger 1 idled past expire_after_access_s
    assert [storage.get_entry(1, e) for e in range(6)] == [b"y" * 1000] * 6
    await storage.aclose()


async def test_a_deleted_ledgers_sealed_logs_are_removed_without_copying(tmp_path: Path) -> None:
    storage, logs = open_storage(tmp_path, max_log_size=4096)
    for lid in (1, 2):
        storage.ensure_ledger(lid, b"k", 0)
        for e in range(10):
            storage.add_entries(lid, [e], [b"z" * 1000])
    storage.set_write_closed(1)
    storage.delete_ledger(1)
    freed = await storage.collect_garbage()  # its checkpoint seals ledger 1's last log first
    assert freed > 10_000
    assert all(storage.get_entry(2, e) == b"z" * 1000 for e in range(10))
    assert logs.active_ledgers() == [2]
    await storage.aclose()


def test_config_is_validated(tmp_path: Path) -> None:
    manager = PluginManager().entry_log_manager(
        config={"plugin": "per_ledger", "max_active": 8}, directory=tmp_path, counters=Counters()
    )
    assert isinstance(manager, PerLedgerEntryLogManager) and manager._max_active == 8
    with pytest.raises(ConfigError, match="max_active = 0 should be an integer >= 1"):
        parse_section(PerLedgerConfig, {"max_active": 0}, where="[entry_log_manager]")
    with pytest.raises(ConfigError, match=r"unknown key.*colour"):
        parse_section(PerLedgerConfig, {"colour": "red"}, where="[entry_log_manager]")


async def test_a_bookie_seals_a_ledgers_log_when_its_writer_closes(tmp_path: Path) -> None:
    """Composed from config; WRITE_CLOSE reaches this manager through the bookie."""
    from bkframe.testing.cluster import running_bookie

    config = attrs.evolve(load_config(None, {"data_dir": tmp_path, "port": 0}), entry_log_manager={"plugin": "per_ledger"})
    async with running_bookie(config, PluginManager(load_entry_points=True)) as (service, host, port):
        logs = service.bookie.storage._entry_logs  # type: ignore[union-attr]
        assert isinstance(logs, PerLedgerEntryLogManager)
        async with connect_bookie(host, port) as bk:
            for lid in (1, 2):
                assert (await bk.add(lid, 0, b"e", master_key=b"k")).status == Status.OK
            assert logs.active_ledgers() == [1, 2]
            assert (await bk.submit_write_close(1, master_key=b"k").wait()).status == Status.OK
            await service.bookie.checkpoint()  # type: ignore[union-attr]
            assert logs.active_ledgers() == [2]
            assert (await bk.read(1, 0, master_key=b"k")).data == b"e"
