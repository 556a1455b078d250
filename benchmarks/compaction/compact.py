"""One compaction of a real log, end to end (issue 48: time proportional to the log's size,
compaction MB/s against a plain read of the same log, memory bounded by the key index's
budget whatever the keys).

Starts a 3-bookie cluster (real processes, sqlite metadata), writes ``--records`` keyed
records of ``--size`` bytes over ``--keys`` keys (E3 W2 A2, ``--rollover`` entries a segment),
then, each in a process of its own (its peak memory its own ``VmHWM``): a whole read of the log
(``log read``), ``bkframe log compact`` and a table read (``log read --compacted``). Prints
each one's seconds, MB/s of the log's bytes before compaction and peak RSS (``ru_maxrss`` of
the child), and what the compaction dropped.

    .venv/bin/python benchmarks/compaction/compact.py --records 200000 --keys 20000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
    """Seconds, the child's own peak RSS (bytes: its ``VmHWM``, sampled until it exits;
    ``ru_maxrss`` would count this process's pages, which survive the child's exec) and its
    stdout."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, "-m", "bkframe", *args], env=env, stdout=out)
        peak = 0
        while proc.poll() is None:
            try:
                status = Path(f"/proc/{proc.pid}/status").read_text()
                peak = max(peak, int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))))
            except (OSError, StopIteration):
                pass
            time.sleep(0.05)
        if proc.returncode:
            raise SystemExit(f"bkframe {' '.join(args)} exited with {proc.returncode}")
        out.seek(0)
        return time.perf_counter() - started, peak * 1024, out.read().decode(errors="replace")


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
    parser.add_argument("--rounds", type=int, default=1, help="logs written alike, each read then compacted (in turns)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-compact-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster", 3).start(parallel=True)
        try:
            uri = cluster.metadata
            env = {**os.environ, "BKFRAME_METADATA": uri}
            rows = []
            for r in range(args.rounds):
                # Two logs written alike: one read whole, the other compacted, in turns.
                name, twin = f"bench-table-{r}", f"bench-twin-{r}"
                started = time.perf_counter()
                length = trio.run(write, uri, name, args.records, args.keys, args.size, args.rollover)
                out: dict[str, object] = {"round": r + 1, "records": args.records, "keys": args.keys, "size": args.size,
                                          "log_mb": round(length / 1e6, 1), "write_s": round(time.perf_counter() - started, 1)}
                trio.run(write, uri, twin, args.records, args.keys, args.size, args.rollover)
                mb = length / 1e6
                steps = [("read", ["log", "read", twin]), ("compact", [
                    "log", "compact", name, "--json", "--memory", str(args.memory_mb), "--work-dir", str(Path(tmp) / "w"),
                ])]
                for step, argv in steps if r % 2 == 0 else list(reversed(steps)):
                    seconds, rss, text = run_child(argv, env)
                    out.update({f"{step}_s": round(seconds, 2), f"{step}_mb_s": round(mb / seconds, 1),
                                f"{step}_rss_mb": round(rss / 1e6)})
                    if step == "compact":
                        result = json.loads(text)
                        out.update(dropped=result["records_dropped"], rewritten=len(result["rewritten"]))
                table_s, table_rss, table = run_child(["log", "read", name, "--compacted"], env)
                out.update(table_s=round(table_s, 2), table_rows=len(table.splitlines()), table_rss_mb=round(table_rss / 1e6),
                           compact_vs_read=round(float(out["read_s"]) / float(out["compact_s"]), 2))  # type: ignore[arg-type]
                rows.append(out)
                print(json.dumps(out), flush=True)
            if len(rows) > 1:
                ratios = [float(r["compact_vs_read"]) for r in rows]  # type: ignore[arg-type]
                print(json.dumps({"median_compact_vs_read": statistics.median(ratios), "rounds": ratios}))
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
