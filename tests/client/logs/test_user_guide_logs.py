"""docs/user-guide.md's Python for named logs runs as printed (issue 49: the guide covers from
Python what the command line covers), each block in a process of its own, against the shared
sqlite cluster: its store for ``sqlite:///tmp/meta.db``, a log of its own for ``orders``."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from bkframe.testing.cluster import Cluster

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "user-guide.md"


def blocks() -> list[str]:
    """The Python blocks of the guide's "Named logs" section that use the log ``orders``."""
    section = GUIDE.read_text().split("\n## Named logs\n", 1)[1].split("\n## ", 1)[0]
    return [b for b in re.findall(r"```python\n(.*?)```", section, re.S) if '"orders"' in b]


def test_the_guide_has_both_apis() -> None:
    found = blocks()
    assert len(found) == 2 and "open_client" in found[0] and "connect" in found[1]
    assert all("idle_timeout_s" in b and "Record(" in b for b in found)


@pytest.mark.parametrize("index", [0, 1], ids=["async", "blocking"])
def test_a_guide_block_runs(shared_cluster: Cluster, index: int) -> None:
    name = f"orders-{uuid.uuid4().hex[:8]}"
    code = blocks()[index].replace("sqlite:///tmp/meta.db", shared_cluster.metadata).replace('"orders"', repr(name))
    if index == 1:
        code = "import bkframe\nfrom bkframe import Record\n" + code
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "b'order-1' b'paid'" in done.stdout, done.stdout
