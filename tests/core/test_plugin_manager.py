"""Loading third-party plugins: a broken one is reported and left out, the others work; an
external plugin can be disabled by configuration or environment."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bkframe import ConfigError, MetadataError
from bkframe.core.config import load_config
from bkframe.core.counters import Counters
from bkframe.core.plugin_manager import DISABLE_ENV, PluginManager
from bkframe.core.registry import ComponentKind


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution ``odd-plugins`` with five entry points: one that imports,
    one whose module does not exist, one with a misspelt hook, one with a retired hook, one
    whose registration raises."""
    site = tmp_path / "site"
    info = site / "odd_plugins-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: odd-plugins\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[bkframe]\n"
        "good = odd_good\n"
        "missing = odd_no_such_module\n"
        "misspelt = odd_misspelt\n"
        "retired = odd_retired\n"
        "raising = odd_raising\n"
    )
    (site / "odd_good.py").write_text(textwrap.dedent('''
        import bkframe
        from bkframe.core.interfaces.durability import LedgerType

        @bkframe.hookimpl
        def bkframe_register_components(registry):
            registry.add_ledger_type(LedgerType("ODD", 900, journal_data=True, sync_before_ack=True, description="odd"))
        '''))
    (site / "odd_misspelt.py").write_text(textwrap.dedent('''
        import bkframe

        @bkframe.hookimpl
        def bkframe_register_componets(registry):
            pass
        '''))
    (site / "odd_retired.py").write_text(textwrap.dedent('''
        import bkframe

        @bkframe.hookimpl
        def bkframe_placement_policy(registry):
            pass
        '''))
    (site / "odd_raising.py").write_text(textwrap.dedent('''
        import bkframe
        from bkframe.core.interfaces.durability import LedgerType

        @bkframe.hookimpl
        def bkframe_register_components(registry):
            registry.add_ledger_type(LedgerType("HALF", 901, journal_data=True, sync_before_ack=True, description="half"))
            raise RuntimeError("this plugin is buggy")
        '''))
    monkeypatch.syspath_prepend(str(site))
    return site


def test_broken_plugins_are_reported_and_the_others_work(third_party: Path) -> None:
    pm = PluginManager()
    types = pm.ledger_types()
    assert "ODD" in types and "PD_JOURNAL" in types
    assert "HALF" not in types, "a plugin whose registration failed leaves nothing behind"
    assert pm.components.get(ComponentKind.JOURNAL, "journal_fs") is not None
    broken = {b.name: (b.distribution, b.error) for b in pm.broken}
    assert set(broken) == {"missing", "misspelt", "retired", "raising"}
    assert broken["missing"][0] == "odd-plugins" and "odd_no_such_module" in broken["missing"][1]
    assert "bkframe_register_componets" in broken["misspelt"][1] and "misspelt" in broken["misspelt"][1]
    assert "this plugin is buggy" in broken["raising"][1]
    # A hook of earlier versions: the error says what to write instead.
    assert "bkframe_register_components replaced" in broken["retired"][1]
    assert "registry.add_placement_policy" in broken["retired"][1]


def test_plugins_command_reports_what_was_left_out(third_party: Path) -> None:
    env = {"PYTHONPATH": str(third_party), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "plugins"], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert "good  [odd-plugins]" in proc.stdout and "ODD (wire id 900)  [good, odd-plugins]" in proc.stdout
    assert "left out (broken): missing  [odd-plugins]: cannot load odd_no_such_module: ModuleNotFoundError" in proc.stdout
    assert "left out (broken): raising  [odd-plugins]" in proc.stdout


def test_an_external_plugin_can_be_disabled(third_party: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "ODD" not in PluginManager(disabled=["good"]).ledger_types()
    monkeypatch.setenv(DISABLE_ENV, "good, metadata_zk")
    pm = PluginManager()
    assert "ODD" not in pm.ledger_types()
    assert "zk" not in pm.components.names(ComponentKind.METADATA_STORE)
    assert {"good", "metadata_zk"} <= pm.disabled


def test_the_bookie_config_disables_plugins_too(tmp_path: Path) -> None:
    config_file = tmp_path / "bookie.toml"
    config_file.write_text('[plugins]\ndisable = ["metadata_zk"]\n')
    config = load_config(config_file, {"data_dir": tmp_path / "data"})
    assert config.plugins.disable == ("metadata_zk",)
    with pytest.raises(MetadataError, match=r"no installed plugin serves metadata URI 'zk://.*'"):
        PluginManager(disabled=config.plugins.disable).metadata_store("zk://127.0.0.1:1/x")
    assert "zk" in PluginManager().components.names(ComponentKind.METADATA_STORE)  # installed and not disabled


def test_built_in_plugins_cannot_be_disabled(tmp_path: Path) -> None:
    """What a default bookie needs (the built-ins, and the journal of bkframe-journal-fs, a
    dependency of bkframe) is always registered, even by a manager without entry points:
    ``disable`` cannot switch a bookie's own journal off by a typo'd config."""
    pm = PluginManager(disabled=["journal_fs", "bkframe_journal_fs.plugin"])
    assert "journal_fs" in pm.components.names(ComponentKind.JOURNAL)
    assert "journal_fs" in PluginManager(load_entry_points=False).components.names(ComponentKind.JOURNAL)


def test_without_the_default_journals_distribution_the_rest_works_and_a_bookie_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pip install --no-deps bkframe``: bkframe-journal-fs is missing. A manager still
    loads (clients, the command line); a bookie on the default journal gets one clear error."""
    monkeypatch.setitem(sys.modules, "bkframe_journal_fs.plugin", None)  # what an uninstalled module imports as
    pm = PluginManager(load_entry_points=False)
    assert [b.name for b in pm.broken] == ["journal_fs"] and "pip install bkframe-journal-fs" in pm.broken[0].error
    with pytest.raises(ConfigError, match=r"\[journal\] plugin = 'journal_fs'.*Install bkframe-journal-fs"):
        pm.journal(config={"plugin": "journal_fs"}, directory=tmp_path, counters=Counters())
