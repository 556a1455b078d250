"""CPU seconds of this process's tree, by part: the Spark JVM, Spark's Python workers, the
bookies, the S3 server, this driver process (utime + stime from ``/proc``, all threads).

Take :func:`snapshot` before and after a step; :func:`spent` gives each part's CPU between
them. A process that exits in between loses its share (Spark reuses its Python workers, so
that is rare); one started in between counts from zero.
"""

from __future__ import annotations

import os
from pathlib import Path

PARTS = ("jvm", "workers", "bookies", "s3", "driver")
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of ``pid``; None if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def snapshot() -> dict[int, tuple[str, float]]:
    """Every descendant of this process (and itself): pid -> (part, CPU seconds)."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(int(p))) is not None}
    me = os.getpid()
    out = {me: ("driver", stats[me][1])} if me in stats else {}
    part_of = {me: "driver"}
    # Parents come before children in pid order only mostly: repeat until nothing is added.
    added = True
    while added:
        added = False
        for pid, (ppid, cpu) in stats.items():
            if pid in part_of or ppid not in part_of:
                continue
            cmd = _cmdline(pid)
            parent = part_of[ppid]
            if parent == "driver":
                part = ("jvm" if "java" in cmd.split(" ", 1)[0] else "bookies" if " bookie" in cmd
                        else "s3" if "moto" in cmd else "driver")
            else:
                part = "workers" if parent in ("jvm", "workers") else parent
            part_of[pid] = part
            out[pid] = (part, cpu)
            added = True
    return out


def spent(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds of each part between two snapshots."""
    out = dict.fromkeys(PARTS, 0.0)
    for pid, (part, cpu) in after.items():
        out[part] += cpu - before.get(pid, (part, 0.0))[1]
    return out


def threads(tree: dict[int, tuple[str, float]]) -> dict[int, str]:
    """Every thread of the processes of ``tree`` (a :func:`snapshot`): tid -> part (what
    ``perf report --sort pid`` names)."""
    out = {}
    for pid, (part, _) in tree.items():
        try:
            out.update({int(tid): part for tid in os.listdir(f"/proc/{pid}/task")})
        except OSError:
            continue
    return out
