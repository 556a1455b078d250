"""Event-loop CPU per MB of FsJournal.append (before vs after: two fs_journal.py files), and the worker's CPU per
MB to write the group (fsync off, to leave the disk out), by thread CPU time.

    git show COMMIT:plugins/journal_fs/src/bkframe_journal_fs/fs_journal.py > /tmp/before.py
    (from issue 39 to issue 46 the file was bkframe/builtin/journal_fs/fs_journal.py)
    python benchmarks/scaling/loop_cost.py /tmp/before.py plugins/journal_fs/src/bkframe_journal_fs/fs_journal.py
"""

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bkframe.bookie.durability import journal_records as jr
from bkframe.core.counters import Counters


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


versions = {"before": load("fj_old", sys.argv[1]), "after": load("fj_new", sys.argv[2])}
for size, n, reps in ((65536, 256, 30), (1024, 1024, 200), (100, 1024, 400)):
    frame = os.urandom(size * n)
    view = memoryview(frame)
    entries = [view[i * size : (i + 1) * size] for i in range(n)]
    mb = size * n * reps / 1e6
    for label, mod in versions.items():
        best = None
        for _trial in range(3):
            d = Path(tempfile.mkdtemp(dir=os.environ.get("TMPDIR", "/tmp")))
            opts = {"preallocate_bytes": 0, "fsync": False, "max_file_size": 1 << 40}
            if hasattr(mod, "FsJournalConfig"):  # after issue 39 the keys are one value
                j = mod.FsJournal(d, Counters(), mod.FsJournalConfig(**opts))
            else:
                j = mod.FsJournal(d, Counters(), **opts)
            j._open_file(j._file_id)
            loop = work = 0.0
            for _ in range(reps):
                t = time.thread_time()
                j.append(jr.entries_record(1, list(range(n)), entries, -1))
                loop += time.thread_time() - t
                segs, j._segments, j._buffered = j._segments, [], 0
                t = time.thread_time()
                j._write_and_sync(segs)
                work += time.thread_time() - t
                os.ftruncate(j._fd, 0)
                j._written = 0
            shutil.rmtree(d)
            best = min(best or (9e9, 9e9), (loop, work))
        print(f"{size:>6} B x {n}: {label:<22} loop {1e3 * best[0] / mb:5.2f} ms/MB   worker {1e3 * best[1] / mb:5.2f} ms/MB")
