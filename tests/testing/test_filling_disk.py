"""The disk-full layer: writes under the data dir fail with ENOSPC past the capacity, the
disk-usage measurement agrees, and more capacity (or deleted files) makes room again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from bkframe.testing.faults.filling_disk import set_capacity, used_bytes


def test_writes_fail_past_the_capacity_and_space_comes_back(tmp_path: Path) -> None:
    data, outside, capacity = tmp_path / "data", tmp_path / "outside", tmp_path / "capacity"
    data.mkdir()
    outside.mkdir()
    set_capacity(capacity, 64 * 1024)
    script = textwrap.dedent(
        f"""
        import errno, os, shutil
        from bkframe.testing.faults.filling_disk import install_from_env, set_capacity
        from pathlib import Path
        assert install_from_env()
        d, out, cap = {str(data)!r}, {str(outside)!r}, Path({str(capacity)!r})

        def enospc(fn, *args):
            try:
                fn(*args)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                return True
            return False

        fd = os.open(d + "/log", os.O_RDWR | os.O_CREAT)
        assert os.write(fd, b"x" * 40_000) == 40_000
        u = shutil.disk_usage(d)
        assert (u.total, u.used, u.free) == (65536, 40960, 24576), u
        # A write that does not fit fails whole: nothing of it lands.
        assert enospc(os.write, fd, b"y" * 30_000)
        assert os.fstat(fd).st_size == 40_000
        assert enospc(os.pwrite, fd, b"y", 70_000)
        assert enospc(os.ftruncate, fd, 100_000)
        assert enospc(os.posix_fallocate, fd, 0, 100_000)
        # Overwriting allocated bytes needs no space; files elsewhere are not counted.
        assert os.pwrite(fd, b"z" * 1000, 0) == 1000
        ofd = os.open(out + "/big", os.O_WRONLY | os.O_CREAT)
        assert os.write(ofd, b"o" * 200_000) == 200_000
        assert shutil.disk_usage(out).total != 65536
        # More capacity: the write goes through at once.
        set_capacity(cap, 128 * 1024)
        assert os.write(fd, b"y" * 30_000) == 30_000
        assert shutil.disk_usage(d).used == 73728
        # Full again; deleting a file frees its blocks.
        fd2 = os.open(d + "/other", os.O_WRONLY | os.O_CREAT)
        assert os.write(fd2, b"a" * 50_000) == 50_000
        assert enospc(os.write, fd, b"y" * 10_000)
        os.close(fd2)
        os.unlink(d + "/other")
        assert os.write(fd, b"y" * 10_000) == 10_000
        print("ok")
        """
    )
    env = {**os.environ, "BKFRAME_DISKFULL_ROOT": str(data), "BKFRAME_DISKFULL_CAPACITY": str(capacity)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert used_bytes(data) == 81920  # 80,000 bytes in 4 KiB blocks


def test_not_installed_without_the_environment() -> None:
    script = "from bkframe.testing.faults.filling_disk import install_from_env; print(install_from_env())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKFRAME_DISKFULL")}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr
