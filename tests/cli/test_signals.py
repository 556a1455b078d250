"""Ctrl-C and SIGTERM on commands that stream, as real signals to real processes on one
cluster of real bookie processes: each closes what it opened (a ledger at its last
acknowledged entry, a log writer released, a cursor's acks stored), prints one line on
stderr, no traceback, and exits 130 (SIGINT) or 143 (SIGTERM)."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import pytest
import trio

import bkframe
from bkframe.client.bookie_client import ClientClosedError
from bkframe.testing.cluster import Cluster
from tests.cli.test_ledger_and_sandbox import bk

#: How long a stopped command may take to close what it opened and exit (the machine runs
#: the suite at a load of 15).
EXIT_S = 60


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "bkframe", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def feed(stdin: IO[str], lines: list[str], stop: threading.Event) -> threading.Thread:
    """Write ``line-0``, ``line-1``, ... to ``stdin`` until ``stop`` (or the process stops
    reading), recording each line written, in a thread."""

    def run() -> None:
        try:
            while not stop.is_set():
                batch = [f"line-{len(lines) + i}" for i in range(50)]
                stdin.write("".join(f"{line}\n" for line in batch))
                stdin.flush()
                lines.extend(batch)
                time.sleep(0.01)
        except (BrokenPipeError, ValueError, OSError):
            pass  # the process stopped reading: as a signal should make it

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def read_until(out: IO[str], count: int) -> list[str]:
    """The first ``count`` lines the process prints (it fails the test if it ends first)."""
    got = []
    while len(got) < count:
        line = out.readline()
        assert line, f"the process ended after {got[-3:]}"
        got.append(line.rstrip("\n"))
    return got


def stop(proc: subprocess.Popen[str], signum: int, printed: list[str], feeder: threading.Event | None = None) -> str:
    """Send ``signum``; the rest of stdout goes to ``printed``; returns stderr."""
    proc.send_signal(signum)
    assert proc.stdout is not None and proc.stderr is not None
    try:
        rest = proc.stdout.read()
        err = proc.stderr.read()
        proc.wait(timeout=EXIT_S)
    finally:
        if feeder is not None:
            feeder.set()
        proc.kill()
    printed.extend(rest.split())
    return err


def one_line(err: str, signum: int) -> str:
    """The one line a stopped command prints, checked for what must not be there."""
    assert "Traceback" not in err and "changing ensemble" not in err and " failed " not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("interrupted: " if signum == signal.SIGINT else "terminated: "), err
    return lines[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ledger_append_closes_its_ledger_at_the_last_acknowledged_entry(shared_cluster: Cluster, signum: int) -> None:
    meta = ["--metadata", shared_cluster.metadata]
    ledger_id = bk("ledger", "create", *meta, "-e", "3", "-w", "3", "-a", "2", "--password", "pw").stdout.strip()
    proc = start("ledger", "append", ledger_id, *meta, "--password", "pw")
    assert proc.stdin is not None and proc.stdout is not None
    written: list[str] = []
    done = threading.Event()
    feed(proc.stdin, written, done)
    printed = read_until(proc.stdout, 500)  # well under way: acknowledgements flowing
    line = one_line(stop(proc, signum, printed, done), signum)
    assert proc.returncode == 128 + signum
    last = int(printed[-1])
    assert printed == [str(i) for i in range(last + 1)]
    assert line == f"{'interrupted' if signum == signal.SIGINT else 'terminated'}: ledger {ledger_id} closed at entry {last}"
    # Closed by the command itself: opened without recovery, it is CLOSED at that entry, and
    # holds the lines in order.
    md = json.loads(bk("ledger", "metadata", ledger_id, *meta).stdout)
    assert (md["state"], md["last_entry_id"]) == ("CLOSED", last)
    assert bk("ledger", "read", ledger_id, *meta, "--password", "pw").stdout.split() == written[: last + 1]


async def test_a_client_that_closes_with_appends_in_flight_blames_no_bookie(
    shared_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """What a cancelled command's client does to its connections is no bookie failure: no
    warning, no quarantine, no ensemble change."""
    caplog.set_level(logging.INFO, "bkframe")
    async with bkframe.open_client(shared_cluster.metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2)
        await writer.append(b"connected")
        pendings = [writer.append_async(b"x" * 4096) for _ in range(5000)]
        await trio.sleep(0.02)  # sent, far from all acknowledged (20 MB)
    in_flight = [pa for pa in pendings if isinstance(pa.error, ClientClosedError)]
    assert in_flight, "every append was acknowledged before the client closed: nothing was tested"
    assert not [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert client.context.counters.ensemble_changes == 0
    assert not any(client.pool.health.quarantined(b) for b in writer.metadata.bookies())
