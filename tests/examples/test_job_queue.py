"""examples/job_queue.py as users run it: the FastAPI producer and worker processes on the
shared cluster of bookie processes, jobs posted over real HTTP, one worker SIGKILLed mid-way
and replaced. Every job's result must be in the results log exactly once, under its key."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import bkframe
from bkframe.testing.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "job_queue.py"
JOBS = 60


def _producer(metadata: str, queue: str, stderr: Path) -> tuple[subprocess.Popen[bytes], str]:
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(EXAMPLE), "producer", "--metadata", metadata, "--queue", queue, "--port", "0"],
            stdout=err, stderr=err, cwd=ROOT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"Uvicorn running on (http://[\d.]+:\d+)", stderr.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        assert proc.poll() is None, stderr.read_text()
        time.sleep(0.05)
    raise AssertionError(f"the producer did not start: {stderr.read_text()}")


def _worker(metadata: str, queue: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, str(EXAMPLE), "worker", "--metadata", metadata, "--queue", queue],
            stdout=out, stderr=subprocess.DEVNULL, cwd=ROOT,
        )


def _post(base: str, body: bytes, key: str) -> dict[str, str]:
    request = urllib.request.Request(f"{base}/jobs", data=body, headers={"X-Job-Key": key}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.loads(answer.read()))


def _results(metadata: str, queue: str) -> list[bkframe.LogEntry]:
    with bkframe.connect(metadata) as bk:
        reader = bk.logs.reader(f"{queue}-results")
        return list(reader.read("earliest", reader.end()))


def test_jobs_are_done_once_each_though_a_worker_dies(shared_cluster: Cluster, tmp_path: Path) -> None:
    queue = f"q{uuid.uuid4().hex[:8]}"
    meta = shared_cluster.metadata
    producer, base = _producer(meta, queue, tmp_path / "producer.log")
    done_log = tmp_path / "done.jsonl"
    workers = [_worker(meta, queue, done_log), _worker(meta, queue, done_log)]
    try:
        posted = {f"job-{i}": _post(base, b"payload %d" % i, f"job-{i}")["position"] for i in range(JOBS)}
        assert len(set(posted.values())) == JOBS
        deadline = time.monotonic() + 120
        while len(done_log.read_text().splitlines()) < JOBS // 3:  # some done: kill one mid-way
            assert time.monotonic() < deadline, "the workers did no job"
            time.sleep(0.05)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        workers.append(_worker(meta, queue, done_log))  # its replacement
        while len(_results(meta, queue)) < JOBS:
            assert time.monotonic() < deadline, f"{len(_results(meta, queue))} of {JOBS} results"
            time.sleep(0.2)
        results = _results(meta, queue)
        keys = [r.key.decode() for r in results if r.key is not None]
        assert sorted(keys) == sorted(posted)  # each job once: no result twice, none missing
        for r in results:
            assert r.key is not None and r.payload == hashlib.sha256(b"payload %d" % int(r.key.decode()[4:])).hexdigest().encode()
        with urllib.request.urlopen(f"{base}/stats", timeout=30) as answer:
            stats = json.loads(answer.read())
        assert stats["backlog"] == 0
    finally:
        for proc in [*workers, producer]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
