"""The ledger check as a library (autorecovery's use): an open ledger with two fragments,
one of which lost a bookie."""

from __future__ import annotations

from typing import Any

import trio

import bkframe
from bkframe.autorecovery.ledger_check import check_ledger, count
from bkframe.testing.kit import PASSWORD


async def test_check_of_an_open_ledger_after_an_ensemble_change(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    async with bkframe.open_client(cluster.metadata, add_timeout_s=2.0) as client:
        writer = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
        for i in range(12):
            await writer.append(b"%d" % i)
        first = writer.metadata.fragments[0][1]
        result = await check_ledger(client.pool, await client.ledger_metadata(writer.ledger_id))
        assert result.fully_replicated and result.last_entry == 11 and result.state == "OPEN"

        dead = first[2]
        cluster.by_id(dead).kill()
        with trio.fail_after(60):
            for i in range(12, 24):
                await writer.append(b"%d" % i)
        md = await client.ledger_metadata(writer.ledger_id)
        assert len(md.fragments) == 2
        result = await check_ledger(client.pool, md)
        # Open: checked up to the last entry its last fragment's bookies hold.
        assert result.last_entry == 23 and not result.fully_replicated
        assert result.unreachable() == [dead]
        old, new = result.fragments
        assert (old.first_entry, new.first_entry, new.last_entry) == (0, md.fragments[1][0], 23)
        gone = next(r for r in old.replicas if r.bookie_id == dead)
        assert not gone.reachable and count(gone.missing) == gone.expected > 0
        assert old.under_replicated == gone.missing and old.lost == ()
        assert all(r.reachable and not r.missing for r in new.replicas) and new.under_replicated == ()
        assert f"unreachable: {dead}" in result.summary()
        await writer.close()
