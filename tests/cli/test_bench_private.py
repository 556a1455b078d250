"""``bkframe bench appends`` starts a private bookie: with ``$BKFRAME_METADATA`` set (a user's shell
that works with a cluster), that bookie must not join the cluster it names -- it used to,
leaving a bookie registration and a cookie there. Real processes: a real (sqlite) cluster
store made by ``bkframe cluster init``, the bench with its bookie."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.cli.forked_cli import bkframe_text


def bk(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return bkframe_text(*args, env=env, cwd=cwd, timeout=180)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file of the store (sqlite's journal and WAL too) by its content."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


@pytest.mark.subprocess
def test_bench_leaves_the_cluster_of_the_environment_alone(tmp_path: Path) -> None:
    store = tmp_path / "users-cluster"
    store.mkdir()
    uri = f"sqlite://{store}/metadata.db"
    made = bk("cluster", "init", "--metadata", uri)
    assert made.returncode == 0, made.stderr
    before = snapshot(store)

    env = {**os.environ, "BKFRAME_METADATA": uri}
    bench = bk("bench", "appends", "--count", "200", "--entry-size", "100", env=env, cwd=tmp_path)
    assert bench.returncode == 0, bench.stderr
    assert "entries/s" in bench.stdout, bench.stdout

    assert snapshot(store) == before  # no registration, no cookie: not one byte written
    listed = bk("bookies", "list", "--metadata", uri)
    assert listed.returncode == 0 and listed.stdout.strip() == "", listed
