"""One compaction of a real log, end to end (issue 48: time proportional to the log's size,
compaction MB/s against a plain read of the same log, memory bounded by the key index's
budget whatever the keys).

Starts a 3-bookie cluster (real processes, sqlite metadata), writes ``--records`` keyed
records of ``--size`` bytes over ``--keys`` keys (E3 W2 A2, ``--rollover`` entries a segment),
then, each in a process of its own (so its peak memory is its own): a whole read of the log
(``log read``), ``bkframe log compact`` and a table read (``log read --compacted``). Prints
each one's seconds, MB/s of the log's bytes before compaction and peak RSS (``ru_maxrss`` of
the child), and what the compaction dropped.

    .venv/bin/python benchmarks/compaction/compact.py --records 200000 --keys 20000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import bkframe
from bkframe import Record
from bkframe.testing.cluster import Cluster

BATCH = 1000


def run_child(args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Seconds, the child's own peak RSS (bytes, from its ``wait4`` rusage) and its stdout."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "bkframe", *args], env=env, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"bkframe {' '.join(args)} exited with {proc.returncode}")
    return time.perf_counter() - started, usage.ru_maxrss * 1024, out.decode(errors="replace")


async def write(uri: str, name: str, records: int, keys: int, size: int, rollover: int) -> int:
    async with bkframe.open_client(uri) as client:
        await client.logs.create(name, rollover_entries=rollover, compaction="key")
        payload = os.urandom(size).hex().encode()[:size]  # one line each when printed
        async with await client.logs.open_writer(name) as writer:
            for lo in range(0, records, BATCH):
                batch = [Record(payload, b"key-%d" % (i % keys)) for i in range(lo, min(records, lo + BATCH))]
                await writer.append_many(batch)
        return (await client.logs.metadata(name)).length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rollover", type=int, default=50_000)
    parser.add_argument("--memory-mb", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compact-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster", 3).start(parallel=True)
        try:
            uri, name = cluster.metadata, "bench-table"
            started = time.perf_counter()
            length = trio.run(write, uri, name, args.records, args.keys, args.size, args.rollover)
            wrote = time.perf_counter() - started
            env = {**os.environ, "BKFRAME_METADATA": uri}
            mb = length / 1e6
            out: dict[str, object] = {"records": args.records, "keys": args.keys, "size": args.size, "log_mb": round(mb, 1),
                                      "write_s": round(wrote, 1)}
            read_s, read_rss, _ = run_child(["log", "read", name], {**env})
            out.update(read_s=round(read_s, 1), read_mb_s=round(mb / read_s, 1), read_rss_mb=round(read_rss / 1e6))
            compact_s, compact_rss, text = run_child(
                ["log", "compact", name, "--json", "--memory", str(args.memory_mb), "--work-dir", str(Path(tmp) / "w")],
                env,
            )
            result = json.loads(text)
            out.update(
                compact_s=round(compact_s, 1), compact_mb_s=round(mb / compact_s, 1), compact_rss_mb=round(compact_rss / 1e6),
                compact_vs_read=round(read_s / compact_s, 2), dropped=result["records_dropped"],
                rewritten=len(result["rewritten"]),
            )
            table_s, table_rss, table = run_child(["log", "read", name, "--compacted"], env)
            out.update(table_s=round(table_s, 1), table_rows=len(table.splitlines()), table_rss_mb=round(table_rss / 1e6))
            print(json.dumps(out))
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
