"""Exactly once through a worker (docs/subscriptions.md, "Exactly once"): a record's ack
commits in one atomic step with the worker's output to other logs, so two deliveries of one
record never both leave output, and an owner that was replaced cannot commit at all."""

from __future__ import annotations

import pytest
import trio

import bkframe
from bkframe import Position
from bkframe.client.logs import commits
from bkframe.client.logs.envelope import FORMAT_ENVELOPE, FORMAT_KEY, encode_record
from bkframe.errors import CommitError, NotOwnerError, SubscriptionError
from bkframe.subscriptions.dispatcher import Dispatcher, fence_name
from bkframe.subscriptions.owner import Settle
from bkframe.subscriptions.settings import pack
from bkframe.subscriptions.state import Committing


async def output_ledger(bk: bkframe.Client, *payloads: bytes, password: bytes = b"out-pw") -> int:
    """A closed ledger of records, as a worker writes its output before committing it."""
    handle = await bk.create_ledger(custom={FORMAT_KEY: str(FORMAT_ENVELOPE)}, password=password)
    for p in payloads:
        await handle.append(encode_record(p))
    await handle.close()
    return handle.ledger_id


async def outputs(bk: bkframe.Client, log: str, password: bytes = b"out-pw") -> list[bytes]:
    reader = await bk.logs.reader(log, password=password)
    return [e.payload for e in await reader.read("earliest", await reader.end())]


@pytest.mark.parametrize("where", ["bookies", "local"])
async def test_two_deliveries_of_a_record_leave_its_output_once(bookies: str, where: str) -> None:
    """Over the wire (a bookie owns the subscription: SUB_COMMIT) and with the owner in the
    worker's process alike."""
    async with bkframe.open_client(bookies, subscription_owner=where) as bk:
        await bk.logs.create("in")
        await bk.logs.create("out", password=b"out-pw")
        async with await bk.logs.open_writer("in") as w:
            await w.append_many([b"a", b"b"])
        await bk.logs.create_subscription("in", "s")
        async with await bk.logs.subscribe("in", "s", prefetch=1) as first, \
                await bk.logs.subscribe("in", "s", prefetch=1) as second:
            slow = await first.receive()
            assert slow is not None and slow.payload == b"a"
            await slow.nack()  # as if its lease ended: the record goes to the other worker
            while True:  # b may come first: a is read again from the bookies before it is leased
                fast = await second.receive()
                assert fast is not None
                if fast.position == slow.position:
                    break
                await fast.commit({"out": [await output_ledger(bk, fast.payload.upper())]}, password=b"out-pw")
            assert fast.delivery_count == 2
            await fast.commit({"out": [await output_ledger(bk, b"A")]}, password=b"out-pw")
            with pytest.raises(SubscriptionError, match="acked already"):
                await slow.commit({"out": [await output_ledger(bk, b"A again")]}, password=b"out-pw")
            if (nxt := await first.receive(timeout_s=0.5)) is not None:
                await nxt.commit({"out": [await output_ledger(bk, nxt.payload.upper())]}, password=b"out-pw")
        assert sorted(await outputs(bk, "out")) == [b"A", b"B"]  # once each
        stats = await bk.logs.subscription_stats("in", "s")
        assert (stats.backlog, stats.acked) == (0, 2)


async def test_a_replaced_owner_cannot_commit(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk, bkframe.open_client(bookies) as other:
        await bk.logs.create("in2")
        await bk.logs.create("out2", password=b"out-pw")
        async with await bk.logs.open_writer("in2") as w:
            await w.append(b"x")
        await bk.logs.create_subscription("in2", "s")
        async with trio.open_nursery() as nursery:
            old = await Dispatcher.take(bk, "in2", "s", holder="old", task_group=nursery)
            [d] = await old.lease("c", 1, 1.0)
            lock = await other.metadata.try_lock("other-lock", "new", 10, nursery)
            assert lock is not None
            new = await Dispatcher._start(other, "in2", "s", lock, b"", "new", nursery)  # as if the old lock expired unseen
            nursery.start_soon(new._run)
            assert (await other.logs.metadata("in2")).fences == {fence_name("s"): 2}
            with pytest.raises((NotOwnerError, CommitError)):
                await old.commit("c", [d.position], {"out2": [await output_ledger(bk, b"X")]}, password=b"out-pw")
            assert await outputs(bk, "out2") == []
            assert not new.state.is_acked(pack(d.position))
            await new.aclose()
            nursery.cancel_scope.cancel()


async def test_a_commit_the_dead_owner_left_under_way_is_settled_by_the_next(bookies: str) -> None:
    """The owner wrote its intent and the commit landed, then it died before saying so: the
    next owner finds the token in the log and counts the record acked (and a commit that
    did not land leaves it to deliver again)."""
    async with bkframe.open_client(bookies) as bk:
        await bk.logs.create("in3")
        await bk.logs.create("out3", password=b"out-pw")
        async with await bk.logs.open_writer("in3") as w:
            await w.append_many([b"p", b"q"])
        await bk.logs.create_subscription("in3", "s")
        async with trio.open_nursery() as nursery:
            old = await Dispatcher.take(bk, "in3", "s", holder="old", task_group=nursery)
            leased = await old.lease("c", 2, 1.0)
            landed, lost = pack(leased[0].position), pack(leased[1].position)
            await old._commit([old._apply(Committing("t-landed", (landed,)))])
            await old._commit([old._apply(Committing("t-lost", (lost,)))])
            await commits.commit(bk.logs._records, {"out3": [await output_ledger(bk, b"P")], "in3": []}, "t-landed",
                                 fences={"in3": (fence_name("s"), 1)}, password={"out3": b"out-pw", "in3": b""})
            await old.lock.release()  # it dies here
            new = await Dispatcher.take(bk, "in3", "s", holder="new", task_group=nursery)
            assert new.state.is_acked(landed) and not new.state.is_acked(lost)
            assert new.state.committing == {}
            await new.settle("c", Settle(acks=(Position(0, 1),)))
            await new.aclose()
            nursery.cancel_scope.cancel()
        assert await outputs(bk, "out3") == [b"P"]
