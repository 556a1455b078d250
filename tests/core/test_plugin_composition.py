"""Plugins compose a bookie: a test plugin replaces the ledger storage and is used."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from bkframe import ConfigError, PluginError, UnknownLedgerTypeError, hookimpl
from bkframe.client.bookies.connection import connect_bookie
from bkframe.core.config import NoConfig, load_config
from bkframe.core.counters import Counters
from bkframe.core.interfaces import Buffer
from bkframe.core.interfaces.durability import DurabilityPolicy, LedgerType
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.core.interfaces.ledger_storage import LedgerState, LedgerStorage
from bkframe.core.plugin_manager import PluginManager
from bkframe.core.registry import ComponentRegistry
from bkframe.proto.codes import Status
from bkframe.testing.cluster import running_bookie


class DictStorage:
    """An in-memory ledger storage: enough to prove the bookie stores through the plugin."""

    def __init__(self) -> None:
        self.states: dict[int, LedgerState] = {}
        self.entries: dict[tuple[int, int], bytes] = {}
        self.checkpoints = 0

    def ledger_state(self, ledger_id: int) -> LedgerState | None:
        return self.states.get(ledger_id)

    def ensure_ledger(self, ledger_id: int, master_key: bytes, ledger_type: int) -> LedgerState:
        state = self.states.setdefault(ledger_id, LedgerState(ledger_id, master_key, ledger_type=ledger_type))
        if not state.master_key:
            state.master_key = master_key
        return state

    def set_fenced(self, ledger_id: int) -> bool:
        was = self.states[ledger_id].fenced
        self.states[ledger_id].fenced = True
        return not was

    def set_lac(self, ledger_id: int, lac: int) -> None:
        self.states[ledger_id].lac = max(self.states[ledger_id].lac, lac)

    def set_write_closed(self, ledger_id: int) -> None:
        self.states[ledger_id].write_closed = True

    def set_limbo(self, ledger_id: int, limbo: bool) -> None:
        self.states[ledger_id].limbo = limbo

    def add_entries(self, ledger_id: int, entry_ids: Sequence[int], entries: Sequence[Buffer]) -> int:
        for e, data in zip(entry_ids, entries):
            self.entries[(ledger_id, e)] = bytes(data)
        return sum(len(d) for d in entries)

    def get_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.entries.get((ledger_id, entry_id))

    def last_entry_id(self, ledger_id: int) -> int:
        return max((e for (led, e) in self.entries if led == ledger_id), default=-1)

    def held_entries(self, ledger_id: int, first: int, last: int) -> list[int]:
        return sorted(e for (led, e) in self.entries if led == ledger_id and first <= e <= last)

    def ledgers(self) -> Iterable[int]:
        return list(self.states)

    def delete_ledger(self, ledger_id: int) -> None:
        self.states.pop(ledger_id, None)
        self.entries = {k: v for k, v in self.entries.items() if k[0] != ledger_id}

    async def checkpoint(self) -> None:
        self.checkpoints += 1

    async def collect_garbage(self) -> int:
        return 0  # deleted ledgers' entries went with delete_ledger

    async def aclose(self) -> None:
        await self.checkpoint()


class DictStoragePlugin:
    def __init__(self) -> None:
        self.storage = DictStorage()

    def make(self, config: NoConfig, directory: Path, entry_logs: EntryLogManager, counters: Counters) -> LedgerStorage:
        return self.storage  # type: ignore[return-value]

    @hookimpl
    def bkframe_register_components(self, registry: ComponentRegistry) -> None:
        registry.add_ledger_storage("dict", self.make, config=NoConfig, description="in memory, for a test")


async def test_test_plugin_replaces_ledger_storage(tmp_path: Path) -> None:
    config_file = tmp_path / "bookie.toml"
    config_file.write_text('[ledger_storage]\nplugin = "dict"\n')
    config = load_config(config_file, {"data_dir": tmp_path / "data", "port": 0})
    plugin = DictStoragePlugin()
    pm = PluginManager(extra_plugins=[plugin])
    async with running_bookie(config, pm) as (service, host, port):
        assert service.bookie is not None and service.bookie.storage is plugin.storage
        async with connect_bookie(host, port) as bk:
            assert (await bk.add(4, 0, b"via plugin", master_key=b"k")).status == Status.OK
            assert (await bk.read(4, 0, master_key=b"k")).data == b"via plugin"
    assert plugin.storage.entries[(4, 0)] == b"via plugin"
    assert plugin.storage.checkpoints >= 1  # the clean stop flushed through the plugin
    names = {info.name for info in pm.plugins()}
    assert "journal_fs" in names  # the default journal, beside the test's storage


def test_unknown_plugin_name_is_a_clear_error(tmp_path: Path) -> None:
    from bkframe.bookie.bookie import Bookie

    config_file = tmp_path / "bookie.toml"
    config_file.write_text('[ledger_storage]\nplugin = "nosuch"\n')
    config = load_config(config_file, {"data_dir": tmp_path / "data"})
    with pytest.raises(ConfigError, match=r"plugin = 'nosuch'.*bkframe plugins"):
        Bookie(config, PluginManager())


class ExtraTypePlugin:
    @hookimpl
    def bkframe_register_components(self, registry: ComponentRegistry) -> None:
        registry.add_ledger_type(LedgerType("TEST_TYPE", 77, journal_data=True, sync_before_ack=True, description="a test type"))


def test_registered_ledger_types() -> None:
    pm = PluginManager(extra_plugins=[ExtraTypePlugin()])
    types = pm.ledger_types()
    assert types["PD_JOURNAL"].sync_before_ack and types["PD_JOURNAL"].type_id == 0
    assert isinstance(types["TEST_TYPE"], DurabilityPolicy)
    assert pm.ledger_type_by_id(77) is types["TEST_TYPE"]
    known = "BYPASS_JOURNAL, PD_JOURNAL, TEST_TYPE, VD_JOURNAL"
    with pytest.raises(UnknownLedgerTypeError, match=f"unknown ledger type 'NOPE'; known types: {known}"):
        pm.ledger_type("NOPE")


def test_ledger_type_id_clash_is_an_error_naming_both() -> None:
    class Clash:
        @hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_ledger_type(LedgerType("OTHER", 0, journal_data=True, sync_before_ack=True, description=""))

    with pytest.raises(
        PluginError,
        match=r"ledger types PD_JOURNAL \(plugin bkframe.plugins.durability, distribution bkframe\) and OTHER "
        r"\(plugin .*, distribution \(registered\)\) both use wire id 0",
    ):
        PluginManager(extra_plugins=[Clash()]).ledger_types()


def test_a_duplicate_component_name_is_an_error_naming_both_distributions() -> None:
    """A plugin answering a built-in's name never shadows it silently."""

    class Shadow:
        @hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_metadata_store("sqlite", lambda uri, *, create: None, description="an impostor")  # type: ignore[arg-type,return-value]

    pm = PluginManager(load_entry_points=False)
    pm.register(Shadow(), name="shadow", distribution="shady-dist")
    with pytest.raises(
        PluginError,
        match=r"metadata_store 'sqlite' is registered twice: by plugin bkframe.plugins.metadata_sqlite "
        r"\(distribution bkframe\) and by plugin shadow \(distribution shady-dist\)",
    ):
        pm.metadata_store("sqlite:///x.db")


def test_plugins_command_lists_plugins_and_components_by_kind() -> None:
    from click.testing import CliRunner

    from bkframe.cli.main import main

    result = CliRunner().invoke(main, ["plugins"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "journal_fs  [bkframe-journal-fs]  hooks: bkframe_register_components" in out
    assert "entrylog_per_ledger  [bkframe-entrylog-per-ledger]  hooks: bkframe_register_components" in out
    assert "metadata_zk  [bkframe-metadata-zk]  hooks: bkframe_register_components" in out
    assert "bkframe.plugins.ledger_storage_default  [bkframe]" in out
    kinds = ["journal:", "entry_log_manager:", "ledger_storage:", "metadata_store:", "ledger_type:", "tier:"]
    assert [out.index(f"  {k}\n") for k in kinds] == sorted(out.index(f"  {k}\n") for k in kinds)
    for line in [
        "journal_fs  [journal_fs, bkframe-journal-fs]",
        "single  [bkframe.plugins.entry_log_single, bkframe]",
        "per_ledger  [entrylog_per_ledger, bkframe-entrylog-per-ledger]",
        "default  [bkframe.plugins.ledger_storage_default, bkframe]",
        "sqlite://  [bkframe.plugins.metadata_sqlite, bkframe]",
        "zk://  [metadata_zk, bkframe-metadata-zk]",
        "etcd://  [metadata_etcd, bkframe-metadata-etcd]",
        "PD_JOURNAL (wire id 0)  [bkframe.plugins.durability, bkframe]",
        "file://  [bkframe.plugins.tier_filesystem, bkframe]",
        "s3://  [tier_s3, bkframe-tier-s3]",
    ]:
        assert f"    {line}: " in out, line


def test_metadata_stores_are_picked_by_scheme() -> None:
    from bkframe.errors import MetadataError

    marker = object()

    class SchemePlugin:
        @hookimpl
        def bkframe_register_components(self, registry: ComponentRegistry) -> None:
            registry.add_metadata_store("test", lambda uri, *, create: marker)  # type: ignore[arg-type,return-value]

    pm = PluginManager(extra_plugins=[SchemePlugin()])
    assert pm.metadata_store("test://anything") is marker
    with pytest.raises(MetadataError, match=r"no installed plugin serves metadata URI 'nosuch://x' \(scheme 'nosuch'\)"):
        pm.metadata_store("nosuch://x")


async def test_third_party_ledger_type_end_to_end(tmp_path: Path) -> None:
    """A plugin's own ledger type is usable by bookie and client alike."""
    from bkframe.client.client import open_client
    from bkframe.plugins.metadata_memory import reset_shared

    reset_shared()
    pm = PluginManager(extra_plugins=[ExtraTypePlugin()])
    config = load_config(None, {"data_dir": tmp_path, "port": 0, "metadata": "memory://third-party"})
    async with running_bookie(config, pm), open_client("memory://third-party", plugins=pm) as client:
        writer = await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="TEST_TYPE")
        assert await writer.append(b"typed") == 0
        md = await writer.close()
        assert md.ledger_type == "TEST_TYPE"
        reader = await client.open_ledger(writer.ledger_id)
        assert [e.payload for e in await reader.read(0, 0)] == [b"typed"]
        with pytest.raises(UnknownLedgerTypeError, match="unknown ledger type 'NOPE'"):
            await client.create_ledger(ensemble=1, write_quorum=1, ack_quorum=1, ledger_type="NOPE")
