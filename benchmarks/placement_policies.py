"""What choosing bookies costs per placement policy, on a local cluster of real bookies.

    .venv/bin/python benchmarks/placement_policies.py [--bookies 6] [--ledgers 200] [--rounds 2]

Starts BOOKIES bookie processes labelled with 3 racks (sqlite metadata under a temporary
directory), then per policy and round: ``choose_ensemble`` alone (list the writable bookies,
the policy's choice, the reachability check; least_used also asks GET_BOOKIE_INFO every 5 s),
and create + close of LEDGERS ledgers (E=3 W=2 A=2). Policies run in alternating order.
Prints one line per policy and round: mean milliseconds per choice and per create + close.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

import bkframe
from bkframe.client.placement import choose_ensemble
from bkframe.testing.cluster import Cluster

POLICIES = (("random", {}), ("least_used", {}), ("rack_aware", {"min_racks": 2}))


async def measure(metadata: str, policy: str, options: dict[str, int], ledgers: int) -> tuple[float, float]:
    async with bkframe.open_client(metadata, placement=policy, **options) as client:
        await choose_ensemble(client.pool, client.metadata, 3, write_quorum=2)  # connect first
        start = time.perf_counter()
        for _ in range(ledgers):
            await choose_ensemble(client.pool, client.metadata, 3, write_quorum=2)
        choose_ms = (time.perf_counter() - start) / ledgers * 1000
        start = time.perf_counter()
        for _ in range(ledgers):
            writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2)
            await writer.close()
        create_ms = (time.perf_counter() - start) / ledgers * 1000
    return choose_ms, create_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bookies", type=int, default=6)
    parser.add_argument("--ledgers", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bkframe-placement-") as root:
        cluster = Cluster(Path(root), args.bookies, racks=("rack-a", "rack-b", "rack-c")).start(parallel=True)
        try:
            for r in range(args.rounds):
                order = POLICIES if r % 2 == 0 else POLICIES[::-1]
                for policy, options in order:
                    choose_ms, create_ms = trio.run(measure, cluster.metadata, policy, options, args.ledgers)
                    print(f"round {r + 1}  {policy:<11} choose_ensemble {choose_ms:6.2f} ms  create+close {create_ms:6.2f} ms")
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
