from __future__ import annotations

import tomllib
from pathlib import Path

import attrs
import pytest

from bkframe import ConfigError
from bkframe.core.config import (
    AutorecoveryConfig,
    BookieConfig,
    HttpConfig,
    LimitsConfig,
    LoggingConfig,
    OffloadConfig,
    PluginsConfig,
    SubscriptionsConfig,
    TLSConfig,
    load_config,
    parse_section,
)
from bkframe.core.plugin_manager import SECTION_KINDS, PluginManager
from bkframe.core.registry import ComponentKind

SAMPLE = Path(__file__).resolve().parents[2] / "conf" / "bookie.toml"


def test_sample_config_loads() -> None:
    config = load_config(SAMPLE)
    assert config.bookie.port == 3181
    assert config.journal["plugin"] == "journal_fs"
    # BookKeeper's defaults for read-only mode.
    assert (config.bookie.disk_usage_threshold, config.bookie.disk_usage_lwm) == (0.95, 0.90)


def test_overrides_beat_the_file(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text("[bookie]\nport = 4000\nhost = '0.0.0.0'\n")
    config = load_config(f, {"port": 0, "data_dir": tmp_path, "host": None})
    assert (config.bookie.port, config.bookie.host, config.bookie.data_dir) == (0, "0.0.0.0", tmp_path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[bookie]\nprot = 1\n", "unknown key.*prot.*known keys"),
        ("[bookie]\nport = 'x'\n", "port = 'x' should be an integer"),
        ("[bookie]\nport = 70000\n", "port"),
        ("[journl]\n", "unknown section.*journl"),
        ("[bookie\n", "not valid TOML"),
        ("[bookie]\ndisk_usage_threshold = 1.5\n", "disk_usage_threshold"),
        ("[bookie]\ndisk_usage_lwm = 0.97\n", "disk_usage_lwm = 0.97 must be .* at most disk_usage_threshold = 0.95"),
        ("[bookie]\ndisk_usage_threshold = 0.5\n", "disk_usage_lwm = 0.9 must be"),
        ("[bookie]\ndisk_check_interval_s = 0\n", "disk_check_interval_s"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "b.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(f)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[placement]\npolicy = 'nearest'\n", r"b.toml: \[placement\]: placement policy 'nearest': no installed plugin"),
        ("[placement]\npolicy = 'rack_aware'\nmin_racks = 0\n", r"min_racks = 0 should be an integer >= 1"),
        ("[placement]\nmin_racks = 2\n", r"placement policy 'random': unknown key\(s\) min_racks"),
        ("[placement]\npolicy = 3\n", r"policy = 3 should be a string"),
    ],
)
def test_bad_placement_section_is_a_clear_error_before_the_bookie_starts(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "b.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        PluginManager().check_config(load_config(f))


def test_placement_section(tmp_path: Path) -> None:
    f = tmp_path / "b.toml"
    f.write_text("[placement]\npolicy = 'rack_aware'\nmin_racks = 3\n[bookie]\nrack = 'r1'\n")
    config = load_config(f)
    assert (config.placement, config.bookie.rack) == ({"policy": "rack_aware", "min_racks": 3}, "r1")
    assert load_config(None).placement == {"policy": "random"}


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")


def test_sample_config_documents_every_key_at_its_default() -> None:
    """conf/bookie.toml never drifts from the config classes: every section is valid for the
    class that owns it (the core's, or the chosen component's), names every key of it, and
    shows each at its default."""
    raw = tomllib.loads(SAMPLE.read_text())
    config = load_config(SAMPLE)
    plugins = PluginManager()
    plugins.check_config(config)
    owners: dict[str, type] = {
        "bookie": BookieConfig,
        "plugins": PluginsConfig,
        "http": HttpConfig,
        "autorecovery": AutorecoveryConfig,
        "offload": OffloadConfig,
        "limits": LimitsConfig,
        "subscriptions": SubscriptionsConfig,
    }
    for section, kind in SECTION_KINDS.items():
        component = plugins.components.get(kind, raw[section]["plugin"])
        assert component is not None and component.config is not None
        owners[section] = component.config
    placement = plugins.components.get(ComponentKind.PLACEMENT_POLICY, raw["placement"]["policy"])
    assert placement is not None and placement.config is not None
    owners["placement"] = placement.config
    raw["placement"] = {"plugin": raw["placement"]["policy"], **{k: v for k, v in raw["placement"].items() if k != "policy"}}
    auth = plugins.components.get(ComponentKind.AUTH_PROVIDER, raw["auth"]["provider"])
    assert auth is not None and auth.config is not None
    owners.update(auth=auth.config, tls=TLSConfig, logging=LoggingConfig)
    raw["auth"] = {"plugin": raw["auth"]["provider"], **{k: v for k, v in raw["auth"].items() if k != "provider"}}
    assert set(raw) == set(owners)
    for section, cls in owners.items():
        keys = {k: v for k, v in raw[section].items() if k != "plugin"}
        assert set(keys) == {f.name for f in attrs.fields(cls)}, f"[{section}] should show every key of {cls.__name__}"
        assert parse_section(cls, keys, where=f"[{section}]") == cls(), f"[{section}] should show the defaults"
