"""examples/web_service.py as users run it: a real uvicorn process on three real bookies,
driven by real HTTP requests (one at a time, then many at once), stopped with SIGTERM.

Every acknowledged POST's record must be in the log at the position the service answered,
with its body and key, and nothing else may be; the sequential POSTs' positions must follow
their order. After SIGTERM the service must have closed its writer: the log names no
writer and has no open segment, so the next writer opens it without recovery.
"""

from __future__ import annotations

import base64
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import bkframe
from bkframe import Position
from bkframe.testing.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
#: Small segments, so that the requests' records cross rollovers.
ROLLOVER = 25
HTTP_TIMEOUT_S = 30.0


def _start(metadata: str, log: str, stderr: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The service on a free port; its base URL once uvicorn says it is serving."""
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "examples" / "web_service.py"), "--metadata", metadata, "--log", log,
             "--port", "0", "--rollover-entries", str(ROLLOVER)],
            stdout=err, stderr=err, cwd=ROOT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"Uvicorn running on (http://[\d.]+:\d+)", stderr.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the service did not start:\n{stderr.read_text(errors='replace')}")


def _post(url: str, body: bytes, key: str | None = None) -> Position:
    headers = {"X-Record-Key": key} if key is not None else {}
    request = urllib.request.Request(f"{url}/records", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
        assert response.status == 201
        return Position.parse(json.loads(response.read())["position"])


def _get(url: str, last: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/records?last={last}", timeout=HTTP_TIMEOUT_S) as response:
        out: list[dict[str, Any]] = json.loads(response.read())
        return out


def test_web_service_appends_one_record_per_request(shared_cluster: Cluster, tmp_path: Path) -> None:
    log = f"web-{uuid.uuid4().hex[:8]}"
    proc, url = _start(shared_cluster.metadata, log, tmp_path / "service.log")
    posted: dict[Position, tuple[bytes, str | None]] = {}
    try:
        # One at a time: positions follow the requests' order.
        sequential = []
        for i in range(10):
            order, user = f"order {i}".encode(), f"user-{i % 3}"
            position = _post(url, order, user)
            sequential.append(position)
            posted[position] = (order, user)
        assert sequential == sorted(sequential) and len(set(sequential)) == 10

        # Many at once: each gets a position of its own; the writer pipelines them.
        bodies = [b"concurrent %d \xff" % i for i in range(80)]  # not UTF-8: the GET gives base64
        with ThreadPoolExecutor(max_workers=16) as pool:
            positions = list(pool.map(lambda b: _post(url, b), bodies))
        assert len(set(positions)) == len(bodies)
        posted.update({p: (b, None) for p, b in zip(positions, bodies)})

        # A reader sees the last records once their LAC reaches the bookies: the service
        # publishes it 0.2 s after the last append.
        last_five = sorted(posted)[-5:]
        deadline = time.monotonic() + 10
        recent = _get(url, 5)
        while [Position.parse(r["position"]) for r in recent] != last_five:
            assert time.monotonic() < deadline, (recent, last_five)
            time.sleep(0.1)
            recent = _get(url, 5)
        for r in recent:
            value, key = posted[Position.parse(r["position"])]
            assert r["key"] == key
            assert r.get("value", "").encode() == value or base64.b64decode(r.get("value_base64", "")) == value, r
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    output = (tmp_path / "service.log").read_text(errors="replace")
    # uvicorn re-raises the signal once it has shut down cleanly: the exit is SIGTERM's.
    assert code in (0, -signal.SIGTERM), output
    assert f"closed log {log!r}: the writer is released" in output, output
    assert "Traceback" not in output, output

    with bkframe.connect(shared_cluster.metadata) as bk:
        entries = bk.logs.reader(log).read()
        # Exactly the acknowledged records, each where the service said, in log order.
        assert [e.position for e in entries] == sorted(posted)
        for e in entries:
            value, key = posted[e.position]
            assert (e.payload, e.key) == (value, key.encode() if key else None), e.position
        assert len({e.position.segment for e in entries}) >= 3  # the requests crossed rollovers

        record = bk.logs.metadata(log)
        assert record.writer == "", "the service's writer still holds the log"
        assert all(s.closed for s in record.segments), record.segments
        started = time.monotonic()
        with bk.logs.open_writer(log) as writer:  # no segment to recover: opens at once
            opened_s = time.monotonic() - started
            assert writer.append(b"after") > max(posted)
        assert opened_s < 10, opened_s
