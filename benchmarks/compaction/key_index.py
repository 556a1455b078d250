"""The compaction key index's memory and speed (issue 48, item 4: a log of 100 million
distinct keys compacts in under 256 MB of memory, in time proportional to its size).

Feeds ``--records`` keyed records over ``--keys`` distinct keys (positions ascending, a
segment every 50,000) through :class:`bkframe.compaction.key_index.KeyIndex` with a memory
budget (``--memory-mb``), then reads every kept position back, and prints rows/s of each
pass, the peak resident memory of the process (``ru_maxrss``, which includes the interpreter
and numpy: ~40 MB) and the work directory's peak size.

    .venv/bin/python benchmarks/compaction/key_index.py --records 10000000 --keys 10000000
    .venv/bin/python benchmarks/compaction/key_index.py --records 100000000 --keys 100000000
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bkframe.compaction.key_index import KeyIndex

BATCH = 100_000


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--memory-mb", type=int, default=128)
    parser.add_argument("--hashed", action="store_true", help="feed 128-bit hashes directly (leave out key hashing)")
    args = parser.parse_args()
    rng = np.random.default_rng(48)
    with tempfile.TemporaryDirectory(prefix="keyindex-") as tmp:
        index = KeyIndex(Path(tmp), memory_bytes=args.memory_mb << 20)
        t0 = time.perf_counter()
        peak_disk = 0
        for lo in range(0, args.records, BATCH):
            n = min(BATCH, args.records - lo)
            ids = np.arange(lo, lo + n, dtype=np.uint64)
            pos = ((ids // 50_000) << np.uint64(32)) | (ids % 50_000)
            # The first pass over the keys is each key once (so every key exists), the rest at random.
            which = ids if lo < args.keys else rng.integers(0, args.keys, n, dtype=np.uint64)
            if args.hashed:
                h1 = which * np.uint64(0x9E3779B97F4A7C15)
                index.add_hashed(h1, which, pos)
            else:
                index.add([b"user-%d" % k for k in which.tolist()], pos)
            if lo % (BATCH * 50) == 0:
                peak_disk = max(peak_disk, dir_bytes(Path(tmp)))
        t1 = time.perf_counter()
        peak_disk = max(peak_disk, dir_bytes(Path(tmp)))
        kept = 0
        last = -1
        for chunk in index.latest(chunk_rows=1 << 20):
            assert int(chunk[0]) > last
            last = int(chunk[-1])
            kept += len(chunk)
        t2 = time.perf_counter()
        index.close()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "records": args.records, "keys": args.keys, "kept": kept, "memory_budget_mb": args.memory_mb,
        "hashed_in_advance": args.hashed, "add_rows_per_s": round(args.records / (t1 - t0)),
        "latest_rows_per_s": round(args.records / (t2 - t1)), "total_s": round(t2 - t0, 1),
        "peak_rss_mb": round(rss_mb), "peak_work_dir_mb": round(peak_disk / 2**20),
    }))
    assert kept == min(args.keys, args.records), kept


if __name__ == "__main__":
    main()
