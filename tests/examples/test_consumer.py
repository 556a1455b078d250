"""examples/consumer.py as users run it: a real process on three real bookies, killed and
started again mid-stream.

Killed with SIGKILL, the next run may process again what the first had acked in its last
flush interval, but never skips a record; stopped with SIGTERM, it stores its cursor at the
record after the last it processed, and the next run starts exactly there, following the
log as a writer appends more. Across the runs every record is processed, in log order.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import bkframe
from bkframe import Position
from bkframe.testing.cluster import Cluster

ROOT = Path(__file__).resolve().parents[2]
FIRST, MORE = 200, 30


class Run:
    """One consumer process, its stdout (the records it processed) and stderr in files."""

    def __init__(self, metadata: str, log: str, root: Path, n: int) -> None:
        self.out, self.err = root / f"run-{n}.out", root / f"run-{n}.err"
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(ROOT / "examples" / "consumer.py"), "--metadata", metadata, "--log", log,
                 "--cursor", "billing", "--delay-ms", "2"],
                stdout=out, stderr=err, cwd=ROOT,
            )

    def processed(self) -> list[Position]:
        # A line cut by SIGKILL mid-write has no newline yet: not processed as far as we know.
        text = self.out.read_text()
        return [Position.parse(line.split("\t")[0]) for line in text.splitlines(keepends=True) if line.endswith("\n")]

    def wait_for(self, condition: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.proc.kill()
        raise AssertionError(f"consumer: no {condition}; stderr:\n{self.err.read_text()}")

    def stop(self, sig: signal.Signals) -> int:
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def test_consumer_resumes_after_its_last_ack(shared_cluster: Cluster, tmp_path: Path) -> None:
    log = f"consume-{uuid.uuid4().hex[:8]}"
    with bkframe.connect(shared_cluster.metadata) as bk:
        bk.logs.create(log, rollover_entries=60)
        with bk.logs.open_writer(log) as writer:
            writer.append_many([bkframe.Record(b"r%d" % i, key=b"k%d" % (i % 5)) for i in range(FIRST)])

        first = Run(shared_cluster.metadata, log, tmp_path, 1)
        first.wait_for("40 records processed", lambda: len(first.processed()) >= 40)
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        killed = first.processed()
        assert len(killed) < FIRST, "killed too late: not mid-stream"

        second = Run(shared_cluster.metadata, log, tmp_path, 2)
        second.wait_for("20 records processed", lambda: len(second.processed()) >= 20)
        assert second.stop(signal.SIGTERM) == 0, second.err.read_text()
        stopped = second.processed()
        resume = stopped[-1].next()
        assert f"stored at {resume}" in second.err.read_text()
        assert bk.logs.cursor(log, "billing").position == resume  # every record processed is acked

        third = Run(shared_cluster.metadata, log, tmp_path, 3)
        third.wait_for("a record processed", lambda: len(third.processed()) >= 1)
        with bk.logs.open_writer(log) as writer:  # more while it tails
            writer.append_many([b"r%d" % i for i in range(FIRST, FIRST + MORE)])
        every = [e.position for e in bk.logs.reader(log).read()]
        third.wait_for("record of the tail", lambda: third.processed()[-1:] == every[-1:])
        assert third.stop(signal.SIGTERM) == 0, third.err.read_text()
        resumed = third.processed()

    assert len(every) == FIRST + MORE
    index = {p: i for i, p in enumerate(every)}
    runs = [[index[p] for p in killed], [index[p] for p in stopped], [index[p] for p in resumed]]
    for run in runs:
        assert run == list(range(run[0], run[0] + len(run))), "a run skipped or reordered records"
    assert runs[0][0] == 0
    # After SIGKILL: at most a replay of what the killed run processed, never a gap.
    assert runs[1][0] <= runs[0][-1] + 1
    # After SIGTERM: right after the last record processed, nothing twice.
    assert runs[2][0] == runs[1][-1] + 1
    assert runs[2][-1] == len(every) - 1
    for n, run in enumerate((first, second, third), 1):
        assert "Traceback" not in run.err.read_text(), f"run {n}: {run.err.read_text()}"
    assert re.search(r"consuming log '.*' from 0:0", first.err.read_text())
