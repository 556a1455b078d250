"""Ack state at scale (issue 47, item 7): 10 million acks out of order, their memory, and how
long a new owner takes to resume them.

A subscription's owner (in this process, on a sandbox of 3 bookie processes) gets
``--acks`` acks of every other position of a log's segment, in shuffled batches of
``--batch`` (each batch one ack call, durable in the state ledger before it returns), so the
acked set has as many holes as acks. Then it snapshots (the state goes to the state ledger
in parts) and gives the subscription up, and a second owner takes it over: opening the state
ledgers with recovery, loading the snapshot and replaying what came after.

Printed: the owner process's RSS growth while holding the state, the acked set's size in
memory (Roaring's count), the snapshot's size, and the takeover's time.

    .venv/bin/python benchmarks/subscriptions/ack_state.py --acks 10000000
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

import anyio
import psutil

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import bkframe  # noqa: E402
from bkframe import Position  # noqa: E402
from bkframe.launcher import Cluster  # noqa: E402
from bkframe.subscriptions import journal  # noqa: E402
from bkframe.subscriptions.dispatcher import Dispatcher  # noqa: E402
from bkframe.subscriptions.owner import Settle  # noqa: E402


async def run(uri: str, acks: int, batch: int) -> dict[str, float]:
    process = psutil.Process()
    async with bkframe.open_client(uri) as bk:
        await bk.logs.create("big")
        async with await bk.logs.open_writer("big") as w:
            await w.append(b"one record: the segment exists; acks may name positions ahead of the log's end")
        await bk.logs.create_subscription("big", "s")
        async with anyio.create_task_group() as tg:
            owner = await Dispatcher.take(bk, "big", "s", holder="first", task_group=tg)
            rss0 = process.memory_info().rss
            # Every other position (a hole between each two acks), the batches in random order.
            batches = list(range((acks + batch - 1) // batch))
            random.Random(7).shuffle(batches)
            started = time.perf_counter()
            for b in batches:
                part = range(1 + 2 * b * batch, 1 + 2 * min(acks, (b + 1) * batch), 2)
                await owner.settle("c", Settle(acks=tuple(Position(0, p) for p in part)))
            ack_s = time.perf_counter() - started
            rss1 = process.memory_info().rss
            stats = owner.state.acked.get_statistics()
            bitmap = int(stats["n_bytes_array_containers"] + stats["n_bytes_run_containers"] + stats["n_bytes_bitset_containers"])
            snapshot = len(journal.encode_snapshot(owner.state))
            await owner.aclose()  # its last snapshot, in parts in the state ledger
            started = time.perf_counter()
            second = await Dispatcher.take(bk, "big", "s", holder="second", task_group=tg)
            takeover_s = time.perf_counter() - started
            assert len(second.state.acked) == acks
            await second.aclose()
            tg.cancel_scope.cancel()
    return {
        "acks": acks, "acks_per_s": round(acks / ack_s), "owner_rss_growth_mb": round((rss1 - rss0) / 1e6, 1),
        "acked_set_mb": round(bitmap / 1e6, 2), "snapshot_mb": round(snapshot / 1e6, 2),
        "takeover_s": round(takeover_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--acks", type=int, default=10_000_000)
    parser.add_argument("--batch", type=int, default=10_000, help="Acks per call.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ackstate-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster", 3).start(parallel=True)
        try:
            print(json.dumps(anyio.run(run, cluster.metadata, args.acks, args.batch)))
        finally:
            cluster.close()


if __name__ == "__main__":
    main()
