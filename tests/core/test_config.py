from __future__ import annotations

from pathlib import Path

import pytest

from bkframe.core.config import ConfigError, load_config


def test_sample_config_loads() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "conf" / "bookie.toml")
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


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
