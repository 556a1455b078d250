"""Cookies: new bookie, missing dir, replaced dir, auto-fix on and off, 'bkframe cookie fix'."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from bkframe.bookie.startup.cookies import DATA_LOSS_MARKER


def start(data_dir: Path, meta: str, bookie_id: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(data_dir), "--port", "0",
         "--metadata", meta, "--init-cluster", "--bookie-id", bookie_id, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def runs(data_dir: Path, meta: str, bookie_id: str, *extra: str) -> None:
    """The bookie starts (prints 'listening on') and stops cleanly."""
    proc = start(data_dir, meta, bookie_id, *extra)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("listening on"), proc.communicate(timeout=30)[1]
    proc.terminate()
    assert proc.wait(timeout=60) == 0


def refuses(data_dir: Path, meta: str, bookie_id: str) -> str:
    proc = start(data_dir, meta, bookie_id)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "listening on" not in out
    return err


def cookie(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bkframe", "cookie", *args], capture_output=True, text=True, timeout=60)


def test_cookie_cases(tmp_path: Path) -> None:
    meta = f"sqlite://{tmp_path / 'meta.db'}"
    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    # A new bookie stamps its data dir and the metadata store; restarts match.
    runs(b1, meta, "b1")
    runs(b2, meta, "b2")
    shown = json.loads(cookie("show", "--data-dir", str(b1), "--metadata", meta, "--bookie-id", "b1").stdout)
    assert shown["match"] and shown["data_dir"]["bookie_id"] == "b1"
    runs(b1, meta, "b1")
    # A missing (wiped) data dir is refused, with the command that fixes it.
    shutil.rmtree(b1)
    err = refuses(b1, meta, "b1")
    assert "refuses to start" in err and "bkframe cookie fix" in err and "auto_fix_cookies" in err
    # A replaced data dir (another bookie's) is refused too.
    err = refuses(b2, meta, "b1")
    assert "belongs to bookie 'b2'" in err
    # 'bkframe cookie fix' re-stamps; then the bookie starts.
    fixed = cookie("fix", "--data-dir", str(b1), "--metadata", meta, "--bookie-id", "b1")
    assert fixed.returncode == 0, fixed.stderr
    # The fix leaves a durable note that the next boot must protect every ledger (BP-46);
    # the boot clears it once that protection is on disk.
    assert (b1 / DATA_LOSS_MARKER).exists()
    runs(b1, meta, "b1")
    assert not (b1 / DATA_LOSS_MARKER).exists()
    # With auto_fix_cookies on, a wiped dir is re-stamped at boot instead.
    shutil.rmtree(b1)
    config = tmp_path / "autofix.toml"
    config.write_text("[bookie]\nauto_fix_cookies = true\n")
    runs(b1, meta, "b1", "--config", str(config))
    after = json.loads(cookie("show", "--data-dir", str(b1), "--metadata", meta, "--bookie-id", "b1").stdout)
    assert after["match"] and after["data_dir"]["instance_id"] != shown["data_dir"]["instance_id"]
