"""The ledger command line and the sandbox, run as real processes (the sandbox's demo:
test_readme_walkthrough.py, the README's first command)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bkframe.testing.cluster import Cluster
from tests.cli.forked_cli import bkframe_text


def bk(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``bkframe ARGS`` as a process of its own (forked from one that imported the CLI once:
    tests/cli/forked_cli.py), its output as text."""
    proc = bkframe_text(*args, stdin=stdin)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ledger_commands(shared_cluster: Cluster) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    ledger_id = bk("ledger", "create", *meta, "-e", "3", "-w", "2", "-a", "2", "--password", "pw").stdout.strip()
    assert ledger_id.isdigit()
    appended = bk("ledger", "append", ledger_id, *meta, "--password", "pw", stdin="alpha\nbeta\ngamma\n")
    assert appended.stdout.split() == ["0", "1", "2"]
    assert bk("ledger", "read", ledger_id, *meta, "--password", "pw").stdout == "alpha\nbeta\ngamma\n"
    assert bk("ledger", "read", ledger_id, *meta, "--password", "pw", "--from", "1", "--to", "1").stdout == "beta\n"
    md = json.loads(bk("ledger", "metadata", ledger_id, *meta).stdout)
    assert (md["state"], md["last_entry_id"], md["ledger_type"], md["ensemble_size"]) == ("CLOSED", 2, "PD_JOURNAL", 3)
    # As the HTTP API's: the password's hash (a guess tester) never leaves the store.
    assert "password_hash" not in md and isinstance(md["version"], int), md
    assert ledger_id in bk("ledger", "list", *meta).stdout.split()
    assert bk("ledger", "list", *meta, "--start", ledger_id, "--limit", "1").stdout.split() == [ledger_id]
    # A second writer may not claim the ledger, and it is closed anyway.
    again = bk("ledger", "append", ledger_id, *meta, "--password", "pw", stdin="x\n", check=False)
    assert again.returncode != 0 and "CLOSED" in again.stderr
    bk("ledger", "delete", ledger_id, *meta)
    assert ledger_id not in bk("ledger", "list", *meta).stdout.split()


def test_ledger_command_errors(shared_cluster: Cluster) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    ledger_id = bk("ledger", "create", *meta, "--password", "pw").stdout.strip()
    for args, message in [
        (["ledger", "read", ledger_id, *meta, "--password", "wrong"], "wrong password"),
        (["ledger", "read", "999999", *meta], "ledger 999999 does not exist"),
        (["ledger", "create", *meta, "--type", "NOPE"], "unknown ledger type 'NOPE'"),
        (["ledger", "create", *meta, "-e", "2", "-w", "3"], "E >= W >= A >= 1"),
    ]:
        proc = bk(*args, check=False)
        assert proc.returncode != 0
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], proc.stderr


def test_passwords_from_a_file_or_the_environment(shared_cluster: Cluster, tmp_path: Path) -> None:
    """--password-file (its first line) and $BKFRAME_PASSWORD stand for --password, which ps shows."""
    meta = ["--metadata", shared_cluster.metadata]
    (password_file := tmp_path / "password").write_text("s3cret\n")
    ledger_id = bk("ledger", "create", *meta, "--password-file", str(password_file)).stdout.strip()
    env = {**os.environ, "BKFRAME_PASSWORD": "s3cret"}
    appended = subprocess.run([sys.executable, "-m", "bkframe", "ledger", "append", ledger_id, *meta], input="one\n",
                              capture_output=True, text=True, env=env, timeout=120)
    assert appended.returncode == 0 and appended.stdout.split() == ["0"], appended.stderr
    assert bk("ledger", "read", ledger_id, *meta, "--password", "s3cret").stdout == "one\n"
    wrong = bk("ledger", "read", ledger_id, *meta, check=False)  # no password given: the empty one
    assert wrong.returncode == 1 and "wrong password" in wrong.stderr


def test_keep_open_then_recover_with_close(shared_cluster: Cluster) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    ledger_id = bk("ledger", "create", *meta).stdout.strip()
    bk("ledger", "append", ledger_id, *meta, "--keep-open", stdin="one\ntwo\n")
    assert json.loads(bk("ledger", "metadata", ledger_id, *meta).stdout)["state"] == "OPEN"
    assert bk("ledger", "read", ledger_id, *meta, "--unconfirmed", "--to", "1").stdout == "one\ntwo\n"
    assert bk("ledger", "close", ledger_id, *meta).stdout.strip() == f"ledger {ledger_id} closed at entry 1"
    assert bk("ledger", "read", ledger_id, *meta).stdout == "one\ntwo\n"


def test_sandbox_runs_until_sigterm(tmp_path: Path) -> None:
    """...and a second sandbox on its directory is refused before it touches anything, saying
    how to reach the running one; the running one goes on."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkframe", "sandbox", "--bookies", "3", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 60
        state_file = tmp_path / "sandbox.json"
        while not state_file.exists() or not state_file.read_text().endswith("}\n"):  # written, not only made
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        written = (state_file.read_bytes(), state_file.stat().st_mtime_ns)
        state = json.loads(written[0])
        assert state["pid"] == proc.pid
        second = bk("sandbox", "--bookies", "1", "--data-dir", str(tmp_path), check=False)
        assert second.returncode == 1 and "Traceback" not in second.stderr
        assert second.stderr.strip().splitlines() == [
            f"Error: a sandbox is already running on {tmp_path} (pid {proc.pid}); reach it with --metadata "
            f"{state['metadata']} (or BKFRAME_METADATA={state['metadata']}); its bookies are in {state_file}. Stop it "
            f"(Ctrl-C in its shell, or kill {proc.pid}) before starting another there, or give this one another --data-dir"
        ]
        assert (state_file.read_bytes(), state_file.stat().st_mtime_ns) == written
        assert all(Path(f"/proc/{b['pid']}").exists() for b in state["bookies"])
        meta = ["--metadata", state["metadata"]]
        ledger_id = bk("ledger", "create", *meta).stdout.strip()
        bk("ledger", "append", ledger_id, *meta, stdin="hello\n")
        assert bk("ledger", "read", ledger_id, *meta).stdout == "hello\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143 and err.splitlines() == ["terminated: sandbox stopped (3 bookies)"], err
        pids = [b["pid"] for b in state["bookies"]]
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    finally:
        if proc.poll() is None:
            proc.kill()
