"""CPU seconds per entry of a sandbox's bookies and of one client appending 1 KiB entries
(or SIZE bytes).

Usage: python3 benchmarks/cpu_per_entry.py CHECKOUT {PD_JOURNAL|VD_JOURNAL|BYPASS_JOURNAL} N [SIZE]

CHECKOUT is a bkframe checkout with its .venv (e.g. a git worktree of an older commit). Compare
two builds in alternating runs: CPU per entry drifts less with the machine's load than rates do.
Prints one JSON line: the append rate, and CPU microseconds per entry of the three bookie
processes (summed) and of the client.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

DRIVER = r"""
import os, sys, time
from collections import deque
import trio, bkframe
meta, ltype, n, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
payload = os.urandom(size)
async def main():
    async with bkframe.open_client(meta) as c:
        w = await c.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type=ltype, password=b"pb")
        inflight, sent, done = deque(), 0, 0
        started = time.perf_counter()
        while done < n:
            while sent < n and len(inflight) < 256:
                inflight.append(w.append_async(payload))
                sent += 1
            await inflight[0].wait()
            while inflight and inflight[0].done():
                inflight.popleft()
                done += 1
        await w.close()
        print(n / (time.perf_counter() - started))
trio.run(main)
"""


def descendants(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    found: list[int] = []
    for child in map(int, out):
        found += [child, *descendants(child)]
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    checkout, ledger_type, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else 1024
    # Bytecode first: a fresh worktree has none, and with PYTHONDONTWRITEBYTECODE set (this
    # machine sets it) the client would compile what it imports again in every run, counted
    # as its CPU (~7 us an entry of 60,000).
    sources = [os.path.join(checkout, "bkframe"), *glob.glob(os.path.join(checkout, ".venv/lib/python3*/site-packages"))]
    subprocess.run([os.path.join(checkout, ".venv/bin/python"), "-m", "compileall", "-q", *sources], capture_output=True)
    workdir = tempfile.mkdtemp(prefix="cpu-per-entry-")
    log = open(os.path.join(workdir, "sandbox.log"), "w")
    sandbox = subprocess.Popen(
        [os.path.join(checkout, ".venv/bin/bkframe"), "sandbox", "--bookies", "3", "--data-dir", f"{workdir}/sb"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=checkout,
    )
    try:
        info = f"{workdir}/sb/sandbox.json"
        deadline = time.time() + 90
        while not (os.path.exists(info) and os.path.getsize(info)):
            if time.time() > deadline or sandbox.poll() is not None:
                sys.exit(f"the sandbox did not start; see {log.name}")
            time.sleep(0.2)
        time.sleep(0.5)
        metadata = json.load(open(info))["metadata"]
        bookies = [sandbox.pid, *descendants(sandbox.pid)]
        before = cpu_seconds(bookies)
        children = resource.getrusage(resource.RUSAGE_CHILDREN)  # (compileall's is not the client's)
        run = subprocess.run(
            [os.path.join(checkout, ".venv/bin/python"), "-c", DRIVER, metadata, ledger_type, str(count), str(size)],
            capture_output=True,
            text=True,
            cwd=checkout,
        )
        bookie_cpu = cpu_seconds(bookies) - before
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        print(
            json.dumps(
                {
                    "checkout": checkout,
                    "type": ledger_type,
                    "rate": run.stdout.strip(),
                    "error": run.stderr[-500:],
                    "bookie_cpu_us_per_entry": round(bookie_cpu / count * 1e6, 1),
                    "client_cpu_us_per_entry": round(
                        (usage.ru_utime + usage.ru_stime - children.ru_utime - children.ru_stime) / count * 1e6, 1
                    ),
                }
            )
        )
    finally:
        os.killpg(sandbox.pid, signal.SIGTERM)
        sandbox.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)  # (2.4 GB of preallocated journals and logs)


if __name__ == "__main__":
    main()
