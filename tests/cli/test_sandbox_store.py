"""Which metadata store ``bkframe sandbox`` runs on (issue 49): its own, in its data dir, unless
``--metadata`` names another on its command line -- never because the shell has
``$BKFRAME_METADATA`` set; it says which on its first line; it refuses, before any bookie
starts, to run its bookies where they are not theirs (never advising a cookie fix on another
cluster's store); and when it fails it says why before "sandbox stopped". Real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from bkframe.bookie.startup.cookies import Cookie
from bkframe.common.cluster_record import init_cluster
from bkframe.core.plugin_manager import PluginManager
from tests.cli.forked_cli import bkframe_text


def another_cluster_with_bookie_1(root: Path) -> str:
    """A store that is a cluster whose bookie-1 is known (as another sandbox's would be)."""
    uri = f"sqlite://{root / 'other.db'}"

    async def make() -> None:
        store = PluginManager().metadata_store(uri, create=True)
        try:
            await init_cluster(store)
            cookie = Cookie("bookie-1", "127.0.0.1:1", (str(root / "elsewhere"),), "0" * 32)
            await store.write_cookie("bookie-1", cookie.serialize(), None)
        finally:
            await store.aclose()

    trio.run(make)
    return uri


def test_the_environment_never_picks_the_sandboxs_store(tmp_path: Path) -> None:
    other = f"sqlite://{tmp_path / 'other.db'}"
    data_dir = tmp_path / "sandbox"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkframe", "sandbox", "--bookies", "1", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "BKFRAME_METADATA": other},
    )
    try:
        state_file = data_dir / "sandbox.json"
        deadline = time.monotonic() + 90
        while not state_file.exists() or not state_file.read_text().endswith("}\n"):
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
            time.sleep(0.1)
        own = f"sqlite://{data_dir / 'metadata.db'}"
        assert json.loads(state_file.read_text())["metadata"] == own
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert out.splitlines()[0] == (
        f"sandbox: metadata store {own} (its own; $BKFRAME_METADATA ({other}) is not used: a sandbox joins "
        f"another store only with --metadata)"
    ), out
    assert out.splitlines()[1] == f"sandbox: 1 bookie on {own}"
    assert err.splitlines() == ["terminated: sandbox stopped (1 bookie)"], err
    assert not (tmp_path / "other.db").exists()


def test_another_clusters_bookie_is_refused_before_any_bookie_starts(tmp_path: Path) -> None:
    """Given a store whose bookie-1 is another's, the sandbox says so and starts nothing: no
    bookie refuses a cookie, so no advice to re-stamp the other cluster's bookie-1."""
    other = another_cluster_with_bookie_1(tmp_path)
    data_dir = tmp_path / "sandbox"
    done = bkframe_text("sandbox", "--bookies", "1", "--data-dir", data_dir, "--metadata", other)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"sandbox: metadata store {other} (given with --metadata)"]
    assert done.stderr.splitlines() == [
        f"Error: the metadata store {other} knows another bookie-1 than this sandbox's ({data_dir / 'bookie-1'}: its "
        f"data dir has no cookie: the dir is new, missing or was wiped); a sandbox runs its own bookies: leave out "
        f"--metadata to run on the sandbox's own store, or give it a store that is no other cluster's",
        "sandbox stopped",
    ]
    assert "cookie fix" not in done.stderr and not (data_dir / "bookie-1.log").exists()


def test_a_data_dirs_bookies_stay_on_their_store(tmp_path: Path) -> None:
    """The bookies an earlier sandbox ran on its own store are not taken to another one."""
    data_dir = tmp_path / "sandbox"
    (data_dir / "bookie-1").mkdir(parents=True)
    own = f"sqlite://{data_dir / 'metadata.db'}"
    (data_dir / "sandbox.json").write_text(json.dumps({"metadata": own, "pid": 1, "bookies": []}))
    other = f"sqlite://{tmp_path / 'other.db'}"
    done = bkframe_text("sandbox", "--bookies", "1", "--data-dir", data_dir, "--metadata", other)
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"sandbox: metadata store {other} (given with --metadata)"]
    assert done.stderr.splitlines() == [
        f"Error: the bookies in {data_dir} belong to the metadata store {own} (an earlier sandbox ran them there); "
        f"to run a sandbox on {other}, give it another --data-dir (or leave out --metadata: that store is this "
        f"sandbox's own)"
    ]
    assert not (tmp_path / "other.db").exists()


def test_a_failed_sandbox_says_why_before_it_says_stopped(tmp_path: Path) -> None:
    (config := tmp_path / "bookie.toml").write_text('[journal]\nplugin = "no_such_journal"\n')
    done = bkframe_text("sandbox", "--bookies", "1", "--data-dir", tmp_path / "sandbox", "--config", config)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("Error: bookie bookie-1 did not start"), lines
    assert any("no_such_journal" in line for line in lines) and lines[-1] == "sandbox stopped", lines
    assert done.stdout.splitlines()[0].startswith("sandbox: metadata store sqlite://")
