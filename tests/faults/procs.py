"""The processes of a fault run as the harness keeps them: a worker process, resuming a
stopped one, the tail of a log."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import attrs

from bkframe.testing.cluster import BookieProcess


@attrs.define
class WorkerProc:
    role: str
    name: str
    #: Writer slot (the schedule's writer index) or reader index; -1 for recoveries.
    slot: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    stopping: bool = False



def resume_worker(worker: WorkerProc | BookieProcess) -> None:
    """SIGCONT, unless it is gone."""
    if worker.proc is not None and worker.proc.poll() is None:
        worker.proc.send_signal(signal.SIGCONT)


def file_tail(path: Path, size: int = 1500) -> str:
    try:
        data = path.read_bytes()[-size:]
    except OSError:
        return "(no log)"
    return data.decode(errors="replace")
