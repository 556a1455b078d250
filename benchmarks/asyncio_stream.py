"""The client under asyncio on asyncio's own transport against anyio's stream, and trio, in
one run on one cluster of 3 bookies (E3 W3 A2, BYPASS_JOURNAL, 1 KiB), the three taking
turns for ROUNDS rounds: window-1 p50 latency and the client's CPU per append, and
throughput with 256 appends in flight. Prints the medians over the rounds.

    .venv/bin/python benchmarks/asyncio_stream.py [ROUNDS]

Why: :mod:`bkframe.client.bookies.asyncio_stream` (docs/benchmarks/event-loops.md, "asyncio vs trio").
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

import bkframe
from bkframe.testing.cluster import Cluster

WINDOW_1 = 2000
PIPELINED = 20000
WINDOW = 256


async def one_run(uri: str, asyncio_transport: bool) -> tuple[float, float, float, float]:
    """(window-1 p50 ms, its CPU µs per append, pipelined appends/s, their CPU µs per append)."""
    async with bkframe.open_client(uri, asyncio_transport=asyncio_transport) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="BYPASS_JOURNAL")
        data = b"x" * 1024
        for _ in range(200):
            await writer.append(data)
        latencies = []
        cpu = time.process_time()
        for _ in range(WINDOW_1):
            started = time.perf_counter()
            await writer.append(data)
            latencies.append(time.perf_counter() - started)
        cpu_1 = (time.process_time() - cpu) / WINDOW_1
        started, cpu = time.perf_counter(), time.process_time()
        pending = []
        for _ in range(PIPELINED):
            pending.append(writer.append_async(data))
            if len(pending) >= WINDOW:
                await pending.pop(0).wait()
        for p in pending:
            await p.wait()
        elapsed, cpu_n = time.perf_counter() - started, (time.process_time() - cpu) / PIPELINED
        await writer.close()
        return statistics.median(latencies) * 1e3, cpu_1 * 1e6, PIPELINED / elapsed, cpu_n * 1e6


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    variants = {
        "asyncio, its transport": ("asyncio", True),
        "asyncio, anyio's stream": ("asyncio", False),
        "trio": ("trio", True),
    }
    results: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as root:
        cluster = Cluster(Path(root), 3, None).start()
        try:
            for _ in range(rounds):
                for name, (backend, own_transport) in variants.items():
                    results[name].append(anyio.run(one_run, cluster.metadata, own_transport, backend=backend))
        finally:
            cluster.close()
    for name, runs in results.items():
        p50, cpu_1, rate, cpu_n = (statistics.median(column) for column in zip(*runs))
        print(
            f"{name:24s} window 1: p50 {p50:.3f} ms, CPU {cpu_1:.0f} us/append;"
            f"  {WINDOW} in flight: {rate:,.0f} appends/s, CPU {cpu_n:.1f} us/append"
        )


if __name__ == "__main__":
    main()
