"""Safety invariants in the spirit of the TLA+ model of the BookKeeper protocol.

Random runs on a real 4-bookie cluster: a writer appends with many entries in flight,
a bookie is killed at a random point, the writer is abandoned mid-stream (its process
"crashes"), and another client recovers the ledger. After every run:

1. every acknowledged entry is readable after recovery;
2. once closed, the closed last entry never moves (a second recovery agrees);
3. no client's LAC ever exceeds the closed last entry (the old writer's included, and
   the old writer can add nothing more).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
import trio

import bkframe
from bkframe.testing.kit import PASSWORD


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_recovery_invariants(cluster_factory: Any, seed: int) -> None:
    rng = random.Random(seed)
    cluster = cluster_factory(4)
    e, w, a = rng.choice([(3, 3, 2), (3, 2, 2), (3, 3, 3)])
    total = rng.randrange(300, 900)
    kill_at = rng.randrange(50, total)
    abandon_at = rng.randrange(kill_at, total + 1)
    acked: set[int] = set()
    async with bkframe.open_client(cluster.metadata) as writer_client:
        writer = await writer_client.create_ledger(ensemble=e, write_quorum=w, ack_quorum=a, password=PASSWORD)
        victim = cluster.by_id(rng.choice(writer.metadata.fragments[0][1]))
        pending = []
        for i in range(abandon_at):
            if i == kill_at:
                victim.kill()
            pending.append(writer.append_async(b"%d:" % i + bytes(rng.randrange(200))))
            if len(pending) > 32:
                first = pending.pop(0)
                try:
                    acked.add(await first.wait())
                except bkframe.BKError:
                    break
        # Harvest what completed by itself, then abandon the rest mid-flight.
        await trio.sleep(0.05)
        acked.update(pa.entry_id for pa in pending if pa.done() and pa.error is None)
        writer_lac = writer.lac
        assert acked == set(range(len(acked))), "acknowledgements must come in entry order"

        async with bkframe.open_client(cluster.metadata) as recoverer:
            with trio.fail_after(60):
                reader = await recoverer.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
            closed_last = reader.lac
            # (1) every acknowledged entry is readable, and what is read is what was written.
            if acked:
                assert closed_last >= max(acked)
            entries = await reader.read(0, closed_last) if closed_last >= 0 else []
            assert [int(x.payload.split(b":")[0]) for x in entries] == list(range(closed_last + 1))
            # (3) the old writer's LAC never exceeds the closed end, and it can add nothing.
            assert writer_lac <= closed_last
            with pytest.raises(bkframe.BKError):
                await writer.append(b"after recovery")
            assert writer.lac <= closed_last
            # (2) the end never moves: another recovery, from another client, agrees.
            async with bkframe.open_client(cluster.metadata) as third:
                again = await third.open_ledger(writer.ledger_id, password=PASSWORD, recovery=True)
                assert again.lac == closed_last
                assert await again.read_lac() == closed_last
                assert (await third.ledger_metadata(writer.ledger_id)).last_entry_id == closed_last
