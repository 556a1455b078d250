"""The fault layers are installed by the test entry point only, never by ``bkframe bookie``."""

from __future__ import annotations

from pathlib import Path

from bkframe.testing.cluster import BOOKIE_COMMAND, TEST_BOOKIE_COMMAND, BookieProcess


def test_only_the_test_entry_point_installs_the_power_loss_layer(tmp_path: Path) -> None:
    for command, installed in ((BOOKIE_COMMAND, False), (TEST_BOOKIE_COMMAND, True)):
        name = "test" if installed else "real"
        bookie = BookieProcess(tmp_path / name, command=command)
        shadow = tmp_path / f"{name}-shadow"
        env = {"BKFRAME_POWERLOSS_SHADOW": str(shadow), "BKFRAME_POWERLOSS_ROOT": str(bookie.data_dir)}
        bookie.spawn(env=env)
        try:
            bookie.wait_started()
            assert bookie.port > 0
            # The layer copies every fsynced file of the data dir into the shadow.
            assert shadow.exists() is installed, command
        finally:
            assert bookie.stop() == 0
