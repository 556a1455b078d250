"""The ``single`` entry-log manager: placement, rotation, reopen, flush and counters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bkframe import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.plugin_manager import PluginManager
from bkframe.plugins.entry_log_single import LOG_HEADER, EntryLogError, SingleEntryLogManager


async def test_append_read_round_trip(tmp_path: Path) -> None:
    mgr = SingleEntryLogManager(tmp_path, Counters())
    placed = [(mgr.append(i % 3, f"payload-{i}".encode()), f"payload-{i}".encode()) for i in range(50)]
    for (log_id, offset), data in placed:
        assert mgr.read(log_id, offset, len(data)) == data
    # Everything went to the one active log, after its header.
    assert {log_id for (log_id, _), _ in placed} == {0}
    assert placed[0][0][1] == LOG_HEADER.size
    await mgr.aclose()


async def test_rotation_by_size_keeps_old_logs_readable(tmp_path: Path) -> None:
    mgr = SingleEntryLogManager(tmp_path, Counters(), max_log_size=1000)
    placed = []
    for i in range(40):
        data = bytes([i]) * 100
        placed.append((mgr.append(7, data), data))
    assert len(mgr.log_ids()) >= 4
    for (log_id, offset), data in placed:
        assert mgr.read(log_id, offset, len(data)) == data
    for log_id in mgr.log_ids()[:-1]:
        assert (tmp_path / f"{log_id:08x}.log").stat().st_size <= 1000
    await mgr.aclose()


async def test_reopen_starts_a_new_log_and_reads_old_ones(tmp_path: Path) -> None:
    mgr = SingleEntryLogManager(tmp_path, Counters())
    loc = mgr.append(1, b"before restart")
    await mgr.aclose()

    mgr2 = SingleEntryLogManager(tmp_path, Counters())
    loc2 = mgr2.append(1, b"after restart")
    assert loc2[0] > loc[0], "must never append to a log of an earlier run"
    assert mgr2.read(*loc, len(b"before restart")) == b"before restart"
    assert mgr2.read(*loc2, len(b"after restart")) == b"after restart"
    assert mgr2.log_ids() == [loc[0], loc2[0]]
    await mgr2.aclose()

    # A run that writes nothing leaves no empty log behind.
    idle = SingleEntryLogManager(tmp_path, Counters())
    await idle.aclose()
    assert SingleEntryLogManager(tmp_path, Counters()).log_ids() == [loc[0], loc2[0]]


async def test_flush_counts_fsyncs_including_rotated_logs(tmp_path: Path) -> None:
    counters = Counters()
    mgr = SingleEntryLogManager(tmp_path, counters, max_log_size=200)
    written_before = counters.storage_bytes_written
    mgr.append(1, b"x" * 150)
    mgr.append(1, b"y" * 150)  # rotates: the first log still holds unsynced bytes
    assert counters.storage_bytes_written - written_before == 300 + 2 * LOG_HEADER.size
    await mgr.flush()
    # Both logs and the directory (a log was created) were fsynced.
    assert counters.storage_fsyncs == 3
    await mgr.flush()
    assert counters.storage_fsyncs == 3, "nothing written since the last flush"
    mgr.append(1, b"z")
    await mgr.flush()
    assert counters.storage_fsyncs == 4
    await mgr.aclose()


async def test_short_read_is_a_clear_error(tmp_path: Path) -> None:
    mgr = SingleEntryLogManager(tmp_path, Counters())
    log_id, offset = mgr.append(1, b"abc")
    with pytest.raises(EntryLogError, match="shorter than the index says"):
        mgr.read(log_id, offset, 100)
    with pytest.raises(EntryLogError, match="does not exist"):
        mgr.read(99, 0, 1)
    await mgr.aclose()


async def test_bad_log_header_names_the_file(tmp_path: Path) -> None:
    mgr = SingleEntryLogManager(tmp_path, Counters())
    mgr.append(1, b"data")
    await mgr.aclose()
    path = tmp_path / "00000000.log"
    path.write_bytes(b"JUNK" + path.read_bytes()[4:])
    with pytest.raises(EntryLogError, match=re.escape(str(path))):
        SingleEntryLogManager(tmp_path, Counters())


def test_registered_as_single_and_other_names_are_errors(tmp_path: Path) -> None:
    pm = PluginManager(load_entry_points=False)
    mgr = pm.entry_log_manager(config={"plugin": "single", "max_log_size": 4096}, directory=tmp_path, counters=Counters())
    assert isinstance(mgr, SingleEntryLogManager)
    with pytest.raises(ConfigError, match=r"plugin = 'other': no installed plugin provides it \(installed: single\)"):
        pm.entry_log_manager(config={"plugin": "other"}, directory=tmp_path, counters=Counters())
    # A plugin of this repository's distributions, not installed: the error names what to install.
    with pytest.raises(ConfigError, match=r"plugin = 'per_ledger'.*Install bkframe-entrylog-per-ledger"):
        pm.entry_log_manager(config={"plugin": "per_ledger"}, directory=tmp_path, counters=Counters())


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"plugin": "single", "max_log_sise": 10}, "unknown key.*max_log_sise"),
        ({"plugin": "single", "max_log_size": "1G"}, "max_log_size"),
        ({"plugin": "single", "max_log_size": 4}, "max_log_size"),
    ],
)
def test_bad_config_is_a_config_error(tmp_path: Path, config: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        PluginManager().entry_log_manager(config=config, directory=tmp_path, counters=Counters())
