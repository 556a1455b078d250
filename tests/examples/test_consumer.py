"""examples/consumer.py as users run it: a real process on three real bookies, killed and
started again mid-stream.

Killed with SIGKILL, the next run starts at the cursor's last stored ack: it may process
again what the first had acked in its last flush interval, but never skips a record.
Stopped with SIGTERM mid-stream, it stores its cursor right after the last record it
processed, so a next run (which starts at the cursor, as the second did) gets no record
twice. Two processes, not three: the stored cursor is what a third would start from.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

import bkframe
from bkframe import Position
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import wait_until

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 200


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
        """Until ``check()`` holds (the kit's wait_until); it fails at once if the consumer exits."""

        def done() -> bool:
            assert self.proc.poll() is None, "the consumer exited"
            return check()

        try:
            trio.run(partial(wait_until, done, condition, timeout_s, every_s=0.02))
        except AssertionError as e:
            self.proc.kill()
            raise AssertionError(f"consumer: no {condition} ({e}); stderr:\n{self.err.read_text()}") from None

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
            writer.append_many([bkframe.Record(b"r%d" % i, key=b"k%d" % (i % 5)) for i in range(RECORDS)])
        every = [e.position for e in bk.logs.reader(log).read()]

        first = Run(shared_cluster.metadata, log, tmp_path, 1)
        first.wait_for("40 records processed", lambda: len(first.processed()) >= 40)
        assert first.stop(signal.SIGKILL) == -signal.SIGKILL
        killed = first.processed()
        assert len(killed) < RECORDS, "killed too late: not mid-stream"

        second = Run(shared_cluster.metadata, log, tmp_path, 2)
        second.wait_for("20 records processed", lambda: len(second.processed()) >= 20)
        assert second.stop(signal.SIGTERM) == 0, second.err.read_text()
        stopped = second.processed()
        assert len(killed) + len(stopped) < RECORDS + 40, "stopped too late: not mid-stream"
        # Every record it processed is acked and stored: the next run starts right after the
        # last one (the run after a kill started where the cursor was, which it printed).
        resume = stopped[-1].next()
        assert bk.logs.cursor(log, "billing").position == resume
        assert f"stored at {resume}" in second.err.read_text()

    index = {p: i for i, p in enumerate(every)}
    runs = [[index[p] for p in killed], [index[p] for p in stopped]]
    for run in runs:
        assert run == list(range(run[0], run[0] + len(run))), "a run skipped or reordered records"
    assert runs[0][0] == 0
    assert f"consuming log {log!r} from {every[runs[1][0]]}" in second.err.read_text()
    # After SIGKILL: at most a replay of what the killed run processed, never a gap.
    assert runs[1][0] <= runs[0][-1] + 1
    for n, process in enumerate((first, second), 1):
        assert "Traceback" not in process.err.read_text(), f"run {n}: {process.err.read_text()}"
