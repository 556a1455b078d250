"""Is PD throughput steady? 64 KiB PD appends through the client (E3 W3 A2, 256 in flight) on
a running cluster; prints overall MB/s and MB/s per slice (docs/benchmarks/large-entries.md, "Large
entries written once").

    bkframe sandbox --data-dir /tmp/sb [--config on.toml] &
    .venv/bin/python benchmarks/large_entries/steady.py sqlite:///tmp/sb/metadata.db 20000 2000
"""

import json
import os
import sys
import time
from collections import deque

import trio

import bkframe


async def main(metadata: str, count: int, slice_n: int) -> None:
    payload = os.urandom(65536)
    async with bkframe.open_client(metadata) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, password=b"steady")
        inflight: deque = deque()
        sent = done = 0
        start = mark = time.perf_counter()
        rates = []
        while done < count:
            while sent < count and len(inflight) < 256:
                inflight.append(writer.append_async(payload))
                sent += 1
            await inflight[0].wait()
            while inflight and inflight[0].done():
                pending = inflight.popleft()
                if pending.error is not None:
                    raise pending.error
                done += 1
                if done % slice_n == 0:
                    now = time.perf_counter()
                    rates.append(round(slice_n * len(payload) / 1e6 / (now - mark), 1))
                    mark = now
        total = time.perf_counter() - start
        await writer.close()
        print(json.dumps({"mb_per_s": round(count * len(payload) / 1e6 / total, 1), "slices": rates}))


if __name__ == "__main__":
    trio.run(main, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
