"""The Spark part of ``bkframe sandbox --demo`` (the pipeline itself is tested in
plugins/spark/tests/test_pipeline.py): a clear error, before any bookie starts, when Spark
cannot run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_sandbox_demo_says_what_to_install_when_java_is_missing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path / "empty")  # no java on it
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "sandbox", "--data-dir", str(tmp_path / "data"), "--demo"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert proc.returncode != 0
    assert "needs Java 17" in proc.stderr and "default-jre-headless" in proc.stderr and "--no-spark" in proc.stderr
    assert not (tmp_path / "data" / "sandbox.json").exists()  # refused before any bookie started
