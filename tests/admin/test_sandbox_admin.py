"""A 3-bookie sandbox with its admin HTTP services: /metrics after N appends counts exactly
that work, and the status page, rendered by headless chromium, shows the whole cluster."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bkframe
from bkframe.testing.kit import missing, wait_until
from tests.admin.helpers import fetch, sample

N = 200
SIZE = 300


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("sandbox")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bkframe", "sandbox", "--bookies", "3", "--data-dir", str(data)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not (data / "sandbox.json").exists():
            assert time.monotonic() < deadline and proc.poll() is None, "the sandbox did not start"
            time.sleep(0.1)
        yield json.loads((data / "sandbox.json").read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 143  # 128 + SIGTERM, as for every command a signal stops
        assert "status page: http://127.0.0.1:" in out and out.count("admin http http://127.0.0.1:") == 3
    finally:
        if proc.poll() is None:
            proc.kill()


async def test_metrics_count_the_work_done(sandbox: dict[str, Any]) -> None:
    bookies = sandbox["bookies"]
    assert all(b["http"].startswith("http://127.0.0.1:") for b in bookies)
    before = {b["id"]: (await fetch(b["http"] + "/metrics"))[1] for b in bookies}
    async with bkframe.open_client(sandbox["metadata"]) as client:
        w = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        for i in range(N):  # one at a time: N frames of one add each
            await w.append(bytes([i % 256]) * SIZE)
        await w.close()
        reader = await client.open_ledger(w.ledger_id, password=b"pw")
        assert len(await reader.read(0, N - 1)) == N
    read = 0.0
    for b in bookies:
        status, after = await fetch(b["http"] + "/metrics")
        assert status == 200

        def delta(name: str, metrics: str = after, bookie: dict[str, Any] = b, **labels: str) -> float:
            return sample(metrics, name, **labels) - sample(before[bookie["id"]], name, **labels)

        assert delta("bkframe_bookie_entries_added_total") == N, b["id"]
        assert delta("bkframe_bookie_journal_bytes_written_total") >= N * SIZE
        assert delta("bkframe_bookie_journal_fsyncs_total") >= 1
        # PD_JOURNAL adds: one latency observation per frame, N frames of one add.
        assert sample(after, "bkframe_bookie_add_request_latency_seconds_count", ledger_type="PD_JOURNAL") == N
        assert sample(after, "bkframe_bookie_add_request_latency_seconds_sum", ledger_type="PD_JOURNAL") > 0
        groups = sample(after, "bkframe_bookie_journal_fsync_latency_seconds_count")
        assert 1 <= groups <= sample(after, "bkframe_bookie_journal_fsyncs_total")
        assert sample(after, "bkframe_bookie_journal_group_size_bytes_sum") == sample(
            after, "bkframe_bookie_journal_bytes_written_total"
        )
        assert sample(after, "bkframe_bookie_ledgers", state="all") >= 1
        assert sample(after, "bkframe_bookie_read_only") == 0
        assert sample(after, "bkframe_bookie_entry_log_files") >= 1
        read += delta("bkframe_bookie_entries_read_total")
    assert read == N  # each entry read once, from one of the three bookies


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    return None


async def test_status_page_in_headless_chromium(sandbox: dict[str, Any], tmp_path: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        missing("chromium is not installed", "scripts/test installs Debian's chromium")
    async with bkframe.open_client(sandbox["metadata"]) as client:
        w = await client.create_ledger(ensemble=2, write_quorum=2, ack_quorum=2, password=b"pw")
        await w.append(b"shown on the status page")
        await w.close()
        # A log with a cursor behind, idle past the log's cursor TTL.
        await client.logs.create("watched", ensemble=2, write_quorum=2, ack_quorum=2, cursor_ttl_s=0.1)
        async with await client.logs.open_writer("watched") as log_writer:
            await log_writer.append_many([b"a", b"b", b"c"])
        await client.logs.create_cursor("watched", "reporting", "earliest")

        async def expired() -> bool:
            return all(c.expired for c in await client.logs.cursor_infos("watched"))

        await wait_until(expired, "the cursor idle past its TTL", 30)
    url = sandbox["bookies"][1]["http"] + "/"
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )
    dom = proc.stdout
    assert proc.returncode == 0 and "<table" in dom, proc.stderr[-2000:]
    for b in sandbox["bookies"]:
        assert f"<td>{b['id']}</td>" in dom and f"<td>{b['address']}</td>" in dom
    assert dom.count("<td>writable</td>") == 3
    assert f"<td>{w.ledger_id}</td>" in dom
    assert "nothing is under-replicated" in dom and "no ledger is in limbo" in dom
    assert "<td>watched</td>" in dom and "reporting: lag 3, idle" in dom and "expired (TTL 0.1 s)" in dom
