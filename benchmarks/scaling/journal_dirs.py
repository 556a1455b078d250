"""The journal alone (docs/scaling.md, several journal directories): FsJournal (1 dir) vs
MultiJournal (N dirs) under T writer tasks, each appending records of S bytes (key = task % 64,
as ledgers) and waiting for each to be durable.

    python benchmarks/scaling/journal_dirs.py DIRS RECORD_SIZE TOTAL_MB TASKS
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio

from bkframe.core.counters import Counters
from bkframe.core.plugin_manager import PluginManager

dirs, size, total_mb, tasks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])


async def main() -> None:
    base = Path(tempfile.mkdtemp(prefix="mc-jb-", dir=os.environ.get("TMPDIR", "/tmp")))
    counters = Counters()
    journal = PluginManager().journal(
        config={"plugin": "journal_fs", "dirs": [f"j{i}" for i in range(1, dirs)]}, directory=base, counters=counters
    )
    rec = os.urandom(size)
    n = total_mb * 1_000_000 // size
    per = n // tasks

    async def writer(k: int) -> None:
        for _ in range(per):
            await journal.wait_durable(journal.append([rec], k % 64))

    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        t0 = time.perf_counter()
        async with trio.open_nursery() as inner:
            for k in range(tasks):
                inner.start_soon(writer, k)
        dt = time.perf_counter() - t0
        await journal.aclose()
        nursery.cancel_scope.cancel()
    shutil.rmtree(base)
    print(
        json.dumps(
            {
                "dirs": dirs,
                "size": size,
                "tasks": tasks,
                "MB_s": round(per * tasks * size / dt / 1e6, 1),
                "records_s": round(per * tasks / dt),
                "fsyncs_s": round(counters.journal_fsyncs / dt),
            }
        )
    )


trio.run(main)
