"""The power-loss layer keeps exactly what was fsynced."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from bkframe.testing.faults.powerloss import lose_power


def test_only_synced_writes_survive(tmp_path: Path) -> None:
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    data.mkdir()
    script = textwrap.dedent(
        f"""
        import os
        from bkframe.testing.faults.powerloss import install_from_env
        assert install_from_env()
        d = {str(data)!r}
        fd = os.open(d + "/synced", os.O_WRONLY | os.O_CREAT)
        os.write(fd, b"durable")
        os.fdatasync(fd)
        os.write(fd, b"-volatile")
        fd2 = os.open(d + "/never", os.O_WRONLY | os.O_CREAT)
        os.write(fd2, b"gone")
        fd3 = os.open(d + "/mark.tmp", os.O_WRONLY | os.O_CREAT)
        os.write(fd3, b"mark")
        os.fsync(fd3)
        os.replace(d + "/mark.tmp", d + "/mark")
        dfd = os.open(d, os.O_RDONLY)
        os.fsync(dfd)
        """
    )
    env = {"BKFRAME_POWERLOSS_SHADOW": str(shadow), "BKFRAME_POWERLOSS_ROOT": str(data), "PATH": ""}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    # Before the power cut the page cache has everything.
    assert (data / "synced").read_bytes() == b"durable-volatile"
    lose_power(data, shadow)
    assert (data / "synced").read_bytes() == b"durable"
    assert not (data / "never").exists()
    assert (data / "mark").read_bytes() == b"mark" and not (data / "mark.tmp").exists()


def test_a_file_replaced_durably_survives_with_its_new_content(tmp_path: Path) -> None:
    """write_durably renames over the old file (a LastLogMark, a cookie): after the directory
    fsync the new content is what a power cut leaves, not the first version."""
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    data.mkdir()
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from bkframe.testing.faults.powerloss import install_from_env
        from bkframe.storage_kit.fsync import write_durably
        assert install_from_env()
        for n in range(3):
            write_durably(Path({str(data)!r}) / "lastmark", b"mark %d" % n)
        """
    )
    env = {"BKFRAME_POWERLOSS_SHADOW": str(shadow), "BKFRAME_POWERLOSS_ROOT": str(data), "PATH": ""}
    subprocess.run([sys.executable, "-c", script], check=True, env=env)
    lose_power(data, shadow)
    assert (data / "lastmark").read_bytes() == b"mark 2"
    assert sorted(p.name for p in data.iterdir()) == ["lastmark"]
