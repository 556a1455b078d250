"""An owner that ends because one of its own tasks found it fenced ends quietly: the process
hosting it (a consumer's, later a bookie's) carries on. The fault runs found a consumer
SIGSTOPped past its lock's TTL die on SIGCONT: its timer's append to the fenced state ledger
raised NotOwnerError while the owner's scope was being cancelled, and the owner's task
group let the group of both out, through the client's nursery (tests/faults, seed 48 of
test_subscription_under_consumer_and_bookie_faults's config)."""

from __future__ import annotations

import trio

import bkframe
from bkframe.subscriptions.dispatcher import Dispatcher


async def test_an_owner_fenced_while_its_timer_stores_a_lease_end_ends_without_its_host(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk, bkframe.open_client(bookies) as other:
        await bk.logs.create("t", rollover_entries=25)
        async with await bk.logs.open_writer("t") as w:
            for i in range(5):
                await w.append(b"r%d" % i)
        await bk.logs.create_subscription("t", "s")
        async with trio.open_nursery() as nursery:
            old = await Dispatcher.take(bk, "t", "s", holder="old", task_group=nursery)
            await old.lease("c", 1, 1.0, lease_s=0.3)
            # A new owner fences the old one's state ledger (as if the old lock had expired
            # unseen: a pause); the old owner's next append is its timer's, ending that lease.
            lock = await other.metadata.try_lock("other-lock", "new", 10, nursery)
            assert lock is not None
            new = await Dispatcher._start(other, "t", "s", lock, b"", "new", nursery)
            with trio.fail_after(10):
                await old.lost.wait()
            assert "refused an append" in old.why_lost
            # Before the fix, the old owner's error group left its task group and failed
            # this nursery as it closed.
            await new.aclose()
            nursery.cancel_scope.cancel()
