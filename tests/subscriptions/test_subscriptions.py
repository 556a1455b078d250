"""Subscriptions on real bookies (docs/subscriptions.md): consumers sharing a log, acks that
survive the owner's end, exact delivery counts, dead letters, scheduled records, key_shared
order, and a fenced owner that can confirm nothing."""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from contextlib import AsyncExitStack
from pathlib import Path

import prometheus_client
import pytest
import trio

import bkframe
from bkframe import Position
from bkframe.admin.metrics import bookie_registry
from bkframe.admin.status import StatusPage
from bkframe.bench.scale_metadata import Admin
from bkframe.client.blocking_extras import _DIRECT
from bkframe.errors import NotOwnerError, SubscriptionError, SubscriptionExistsError, UnauthorizedError
from bkframe.subscriptions.dispatcher import Dispatcher
from bkframe.subscriptions.owner import Settle
from bkframe.subscriptions.settings import unpack
from bkframe.subscriptions.state import DELIVER_AT
from bkframe.testing.cluster import make_config, running_bookie
from bkframe.testing.kit import wait_until


async def fill(bk: bkframe.Client, log: str, count: int, keys: int = 0, **settings: object) -> None:
    await bk.logs.create(log, rollover_entries=25, **settings)  # type: ignore[arg-type]
    async with await bk.logs.open_writer(log) as w:
        for i in range(count):
            await w.append(b"r%d" % i, key=b"k%d" % (i % keys) if keys else None)


async def test_consumers_share_a_log_and_each_record_is_acked_once(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "jobs", 120)  # five segments
        await bk.logs.create_subscription("jobs", "workers")
        seen: list[Position] = []
        by_consumer: Counter[int] = Counter()

        async def consume(n: int) -> None:
            async with await bk.logs.subscribe("jobs", "workers", prefetch=4) as sub:
                while len(seen) < 120:
                    msg = await sub.receive(timeout_s=0.5)
                    if msg is None:
                        continue
                    assert msg.delivery_count == 1
                    seen.append(msg.position)
                    by_consumer[n] += 1
                    await msg.ack()
                    await trio.sleep(0)

        async with trio.open_nursery() as nursery:
            for n in range(3):
                nursery.start_soon(consume, n)
        assert sorted(seen) == [Position(s, e) for s in range(5) for e in range(25)][:120]
        assert len(by_consumer) == 3  # the work was shared
        stats = await bk.logs.subscription_stats("jobs", "workers")
        assert (stats.backlog, stats.in_flight, stats.acked, stats.redelivered) == (0, 0, 120, 0)
        assert stats.mark_delete == Position(4, 20)
        assert stats.owner in {b.bookie_id for b in await bk.metadata.list_bookies()}  # a bookie hosts it


async def test_the_owners_numbers_are_on_its_processs_metrics(bookies: str) -> None:
    async with bkframe.open_client(bookies, subscription_owner="local") as bk:
        await fill(bk, "m", 30)
        await bk.logs.create_subscription("m", "s")
        async with await bk.logs.subscribe("m", "s") as sub:
            for _ in range(30):
                msg = await sub.receive()
                assert msg is not None
                await msg.ack()
        assert (await bk.logs.subscription_stats("m", "s")).backlog == 0
        metrics = prometheus_client.generate_latest(bk.metrics_registry).decode()
        assert 'bkframe_subscription_acked_total{log="m",subscription="s"} 30.0' in metrics
        assert 'bkframe_subscription_backlog{log="m",subscription="s"} 0.0' in metrics


async def test_a_new_owner_redelivers_only_what_was_not_acked_with_its_count(bookies: str) -> None:
    async with bkframe.open_client(bookies, subscription_owner="local") as bk:
        await fill(bk, "log", 40)
        await bk.logs.create_subscription("log", "s", lease_s=60)
        sub = await bk.logs.subscribe("log", "s", prefetch=40)
        got = [await sub.receive() for _ in range(40)]
        for msg in got:
            if msg is not None and msg.position.entry_id % 3:
                await msg.ack()
    # The client's block ended without the consumer leaving: its leases are still on record.
    async with bkframe.open_client(bookies, subscription_owner="local") as bk:
        record = await bk.logs.subscription("log", "s")
        assert record.epoch == 1
        stats = await bk.logs.subscription_stats("log", "s")
        assert stats.in_flight == 14 and stats.epoch == 2  # leases survive the owner's change
        owner = bk.logs._owner("log", "s", b"")
        dispatcher = owner.dispatcher
        assert dispatcher is not None
        # Their consumer is gone: it leaves, and the records go to the next one.
        await owner.leave(next(iter(dispatcher.state.leases.values())).consumer)
        async with await bk.logs.subscribe("log", "s") as sub2:
            again = [await sub2.receive(timeout_s=10) for _ in range(14)]
            assert sorted(m.position for m in again if m is not None) == [
                Position(s, e) for s in range(2) for e in range(25) if (s * 25 + e) < 40 and e % 3 == 0
            ]
            assert {m.delivery_count for m in again if m is not None} == {2}
            assert await sub2.receive(timeout_s=0.2) is None  # nothing acked comes back
            for m in again:
                assert m is not None
                await m.ack()
        assert (await bk.logs.subscription_stats("log", "s")).backlog == 0


async def test_records_failing_too_often_go_to_the_dead_letter_log_with_why(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "in", 3)
        await bk.logs.create_subscription("in", "s", max_deliveries=2, dead_letter="in-dlq")
        async with await bk.logs.subscribe("in", "s", prefetch=1) as sub:
            delivered: list[tuple[Position, int]] = []
            while True:
                msg = await sub.receive(timeout_s=2)
                if msg is None:
                    break
                delivered.append((msg.position, msg.delivery_count))
                if msg.position == Position(0, 1):
                    await msg.nack()  # this one always fails
                else:
                    await msg.ack()
            assert delivered.count((Position(0, 1), 1)) == 1 and delivered.count((Position(0, 1), 2)) == 1
            await wait_until(lambda: _dead(bk), "the dead letter is counted")
        reader = await bk.logs.reader("in-dlq")
        with trio.fail_after(30):
            dead = await anext(aiter(reader.tail("earliest")))
        assert dead.payload == b"r1"
        assert dead.properties["bkframe.dlq.from"] == "in:0:1" and dead.properties["bkframe.dlq.deliveries"] == "2"
        stats = await bk.logs.subscription_stats("in", "s")
        assert (stats.backlog, stats.dead_lettered, stats.acked) == (0, 1, 2)


async def _dead(bk: bkframe.Client) -> bool:
    return (await bk.logs.subscription_stats("in", "s")).dead_lettered == 1


async def test_a_record_scheduled_for_later_waits_for_its_time(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await bk.logs.create("later")
        at = int(time.time() * 1000) + 1500
        async with await bk.logs.open_writer("later") as w:
            await w.append(b"later", properties={DELIVER_AT: str(at)})
            await w.append(b"now")
        await bk.logs.create_subscription("later", "s")
        async with await bk.logs.subscribe("later", "s") as sub:
            first = await sub.receive()
            assert first is not None and first.payload == b"now"
            await first.ack()
            second = await sub.receive()
            assert second is not None and second.payload == b"later"
            assert time.time() * 1000 >= at


async def test_key_shared_keeps_each_keys_order_across_consumers_and_nacks(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "keyed", 60, keys=4)
        await bk.logs.create_subscription("keyed", "s", kind="key_shared")
        acked: dict[bytes, list[int]] = defaultdict(list)
        in_flight: set[bytes] = set()
        nacked: set[Position] = set()

        async def consume() -> None:
            async with await bk.logs.subscribe("keyed", "s", prefetch=3) as sub:
                while sum(map(len, acked.values())) < 60:
                    msg = await sub.receive(timeout_s=0.5)
                    if msg is None:
                        continue
                    assert msg.key is not None and msg.key not in in_flight  # one record of a key at a time
                    in_flight.add(msg.key)
                    await trio.sleep(0)
                    in_flight.discard(msg.key)
                    if msg.position.entry_id % 7 == 0 and msg.position not in nacked:
                        nacked.add(msg.position)
                        await msg.nack()
                        continue
                    acked[msg.key].append(int(msg.payload[1:]))
                    await msg.ack()

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(consume)
        for key, numbers in acked.items():
            assert numbers == sorted(numbers), key  # in log order, nacks and all
        assert sum(map(len, acked.values())) == 60


async def test_a_fenced_owner_can_confirm_nothing(bookies: str) -> None:
    """An owner that still believes it owns the subscription (its lock expired unseen: a
    pause, a partition) after another took over: its next lease and ack fail, and nothing it
    tried shows in the new owner's state."""
    async with bkframe.open_client(bookies) as bk, bkframe.open_client(bookies) as other:
        await fill(bk, "f", 10)
        await bk.logs.create_subscription("f", "s")
        async with trio.open_nursery() as nursery:
            old = await Dispatcher.take(bk, "f", "s", holder="old", task_group=nursery)
            [first] = await old.lease("c", 1, 1.0)
            await old.settle("c", Settle(acks=(first.position,)))
            # The new owner skips the lock (as if the old one's had expired) and fences.
            lock = await other.metadata.try_lock("other-lock", "new", 10, nursery)
            assert lock is not None
            new = await Dispatcher._start(other, "f", "s", lock, b"", "new", nursery)
            nursery.start_soon(new._run)
            with pytest.raises(NotOwnerError):
                await old.lease("c", 1, 1.0)
            with pytest.raises(NotOwnerError):
                await old.settle("c", Settle(acks=(Position(0, 5),)))
            assert old.lost.is_set()
            assert new.state.is_acked(0) and not new.state.is_acked(5)
            leased = await new.lease("d", 10, 1.0)
            assert [d.position for d in leased] == [Position(0, i) for i in range(1, 10)]
            await new.aclose()
            nursery.cancel_scope.cancel()


async def test_subscription_names_are_a_cursors_and_a_subscription_is_not_moved_as_one(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "n", 3)
        await bk.logs.create_cursor("n", "c")
        with pytest.raises(SubscriptionExistsError):
            await bk.logs.create_subscription("n", "c")
        await bk.logs.create_subscription("n", "s")
        with pytest.raises(SubscriptionError, match="is a subscription"):
            await bk.logs.move_cursor("n", "s", Position(0, 2))
        with pytest.raises(ValueError, match="lease_s"):
            await bk.logs.create_subscription("n", "t", lease_s=0)
        # Retention sees it as a cursor: nothing it has not passed is trimmed.
        assert [c.name for c in await bk.logs.cursors("n")] == ["c", "s"]
        await bk.logs.delete_subscription("n", "s")
        assert await bk.logs.subscriptions("n") == []


async def test_the_blocking_consumer_is_the_same_api(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "b", 5)
        await bk.logs.create_subscription("b", "s")

    def consume() -> tuple[list[bytes], int]:
        with bkframe.connect(bookies) as blocking:
            got: list[bytes] = []
            with blocking.logs.subscribe("b", "s") as sub:
                for msg in sub:
                    got.append(msg.payload)
                    msg.ack()
                    if len(got) == 5:
                        break
                assert sub.receive(timeout_s=0.1) is None
            return got, blocking.logs.subscription_stats("b", "s").backlog

    got, backlog = await trio.to_thread.run_sync(consume)
    assert got == [b"r%d" % i for i in range(5)] and backlog == 0


async def test_a_blocking_consumers_acks_go_on_a_socket_of_their_own_and_the_async_way_when_that_fails(
    bookies: str,
) -> None:
    """The blocking consumer's confirmed acks go from its own thread to the owner's bookie
    (bkframe.subscriptions.direct); a broken socket or a bookie that is not the owner sends
    that ack the async way, and the next goes direct again. Every record is acked once."""
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "d", 9)
        await bk.logs.create_subscription("d", "s")
        bookie_ids = [b.bookie_id for b in (await bk.pool.bookies.view()).writable]

    def consume() -> tuple[int, int, object]:
        with bkframe.connect(bookies) as blocking, blocking.logs.subscribe("d", "s", prefetch=3) as sub:
            msgs = [sub.receive(timeout_s=10) for _ in range(9)]
            assert all(m is not None for m in msgs)
            msgs[0].ack()  # type: ignore[union-attr]
            direct = _DIRECT[sub.sub]
            assert direct is not None and (direct.sent, direct.passed) == (1, 0)
            msgs[1].ack()  # type: ignore[union-attr]
            assert blocking.logs.subscription_stats("d", "s").acked == 2  # durable once it returned
            assert direct._sock is not None
            direct._sock.close()  # the socket broke: this ack goes the async way
            msgs[2].ack()  # type: ignore[union-attr]
            assert (direct.sent, direct.passed) == (2, 1)
            msgs[3].ack()  # type: ignore[union-attr]
            assert (direct.sent, direct.passed) == (3, 1)  # connected again
            owner = sub.sub.owner
            holder = owner.bookie
            owner.bookie = next(b for b in bookie_ids if b != holder)  # as if the owner had moved
            msgs[4].ack()  # type: ignore[union-attr]  # NOT_OWNER there: the async way, which follows it
            assert (direct.sent, direct.passed) == (3, 2) and owner.bookie == holder
            for m in msgs[5:]:
                m.ack()  # type: ignore[union-attr]
            assert (direct.sent, direct.passed) == (7, 2)
            stats = blocking.logs.subscription_stats("d", "s")
            return stats.acked, stats.redelivered, stats.backlog

    assert await trio.to_thread.run_sync(consume) == (9, 0, 0)


async def test_grouped_acks_go_out_together_and_a_consumer_gone_before_loses_only_those(bookies: str) -> None:
    """``group_acks``: an ack returns at once; the group goes out when a prefetch's worth
    waits, at flush(), when the consumer asks for more and at close. A consumer gone before its group went out has just those
    records delivered again (at least once); the blocking consumer groups them too."""
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "g", 12)
        await bk.logs.create_subscription("g", "s", lease_s=300)
        sub = await bk.logs.subscribe("g", "s", prefetch=4, group_acks=True)
        first = [await sub.receive() for _ in range(4)]
        for msg in first[:3]:
            assert msg is not None
            await msg.ack()
        assert (await bk.logs.subscription_stats("g", "s")).acked == 0  # not sent yet
        assert first[3] is not None
        await first[3].ack()  # a prefetch's worth waiting: sent
        assert (await bk.logs.subscription_stats("g", "s")).acked == 4
        second = [await sub.receive() for _ in range(4)]
        for msg in second[:2]:
            assert msg is not None
            await msg.ack()
        await sub.flush()
        assert (await bk.logs.subscription_stats("g", "s")).acked == 6
        for msg in second[2:]:
            assert msg is not None
            await msg.ack()  # never sent: the consumer goes away without closing
        await sub.owner.leave(sub.consumer_id)
        again = await bk.logs.subscribe("g", "s", prefetch=8)
        back = [await again.receive(timeout_s=10) for _ in range(6)]
        assert sorted((m.position.entry_id, m.delivery_count) for m in back if m is not None) == [
            (6, 2), (7, 2), (8, 1), (9, 1), (10, 1), (11, 1)
        ]
        await again.aclose()

    def consume_and_count() -> tuple[int, int]:
        with bkframe.connect(bookies) as blocking:
            with blocking.logs.subscribe("g", "s", prefetch=4, group_acks=True) as sub:
                count = 0
                for msg in sub:
                    msg.ack()  # in this thread: added to the group
                    count += 1
                    if count == 6:
                        break
            return count, blocking.logs.subscription_stats("g", "s").backlog  # closing sent the last group

    assert await trio.to_thread.run_sync(consume_and_count) == (6, 0)


@pytest.mark.parametrize("inline_bytes", [0, 64 * 1024], ids=["snapshot-in-ledger", "snapshot-inline"])
async def test_a_snapshot_and_the_events_after_it_rebuild_the_state(
    bookies: str, inline_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("bkframe.subscriptions.dispatcher.INLINE_SNAPSHOT_BYTES", inline_bytes)
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "snap", 60)
        await bk.logs.create_subscription("snap", "s", lease_s=300)
        async with trio.open_nursery() as nursery:
            first = await Dispatcher.take(bk, "snap", "s", holder="one", task_group=nursery)
            leased = await first.lease("c", 40, 1.0)
            await first.settle("c", Settle(acks=tuple(d.position for d in leased if d.position.entry_id % 2)))
            await first._snapshot()  # then more events after it
            await first.settle("c", Settle(nacks=((leased[0].position, 0.0),)))
            await first.settle("c", Settle(acks=(leased[2].position,)))
            record = await bk.logs.subscription("snap", "s")
            assert len(record.state_ledgers) == 1 and record.snapshot is not None
            assert (record.snapshot.inline is None) == (inline_bytes == 0)
            before = (set(first.state.acked), first.state.mark_delete, dict(first.state.deliveries),
                      {k: v.deadline_ms for k, v in first.state.leases.items()})
            await first.lock.release()  # as if it died: no snapshot at the end
            second = await Dispatcher.take(bk, "snap", "s", holder="two", task_group=nursery)
            after = (set(second.state.acked), second.state.mark_delete, dict(second.state.deliveries),
                     {k: v.deadline_ms for k, v in second.state.leases.items()})
            assert after == before
            again: dict[Position, int] = {}
            while leased[0].position not in again:  # read again from the bookies first
                again |= {d.position: d.delivery_count for d in await second.lease("d", 100, 10.0)}
            assert again[leased[0].position] == 2  # nacked after the snapshot: its second delivery
            assert leased[2].position not in again and leased[1].position not in again  # acked before and after
            await second.aclose()
            nursery.cancel_scope.cancel()


async def test_bypass_journal_state_ledgers_hold_the_acks_for_the_next_owner(bookies: str) -> None:
    """``state_ledger_type="BYPASS_JOURNAL"``: every state ledger the owners make (the first,
    and the one a snapshot starts) has that type, and the next owner rebuilds the acks from
    them; a type that could lose acks to process crashes is refused with why."""
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "byp", 30)
        with pytest.raises(ValueError, match="VD_JOURNAL' is not one a subscription can use: PD_JOURNAL"):
            await bk.logs.create_subscription("byp", "vd", state_ledger_type="VD_JOURNAL")
        made = await bk.logs.create_subscription("byp", "s", lease_s=300, state_ledger_type="BYPASS_JOURNAL")
        assert made.settings.state_ledger_type == "BYPASS_JOURNAL"
        async with trio.open_nursery() as nursery:
            first = await Dispatcher.take(bk, "byp", "s", holder="one", task_group=nursery)
            leased = await first.lease("c", 20, 1.0)
            await first.settle("c", Settle(acks=tuple(d.position for d in leased[:10])))
            await first._snapshot()
            await first.settle("c", Settle(acks=tuple(d.position for d in leased[10:15])))
            record = await bk.logs.subscription("byp", "s")
            types = {(await bk.ledger_metadata(lid)).ledger_type for lid in record.state_ledgers}
            assert types == {"BYPASS_JOURNAL"} and record.settings.state_ledger_type == "BYPASS_JOURNAL"
            acked = (set(first.state.acked), first.state.mark_delete)
            assert unpack(first.state.mark_delete) == Position(0, 15)  # the first 15 acked
            await first.lock.release()  # as if it died: no snapshot at the end
            second = await Dispatcher.take(bk, "byp", "s", holder="two", task_group=nursery)
            assert (set(second.state.acked), second.state.mark_delete) == acked
            fresh = {d.position for d in await second.lease("d", 30, 10.0)}  # neither acked nor leased to "c"
            assert fresh and not fresh & {d.position for d in leased}
            record = await bk.logs.subscription("byp", "s")
            assert (await bk.ledger_metadata(record.state_ledgers[-1])).ledger_type == "BYPASS_JOURNAL"
            await second.aclose()
            nursery.cancel_scope.cancel()


async def test_settles_under_way_together_share_entries_and_a_snapshot_loses_none_waiting(bookies: str) -> None:
    """The group commit: acks that arrive while an entry is in flight go out as one entry;
    events still waiting when a snapshot switches ledgers go to the old ledger, so a new
    owner rebuilds the state exactly (a lease counted twice would show a third delivery)."""
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "group", 60)
        await bk.logs.create_subscription("group", "s", lease_s=300)
        async with trio.open_nursery() as nursery:
            first = await Dispatcher.take(bk, "group", "s", holder="one", task_group=nursery)
            leased = []
            while len(leased) < 60:  # the owner reads the log a segment at a time
                leased += await first.lease("c", 60, 1.0)
            before = first.journal.lac
            async with trio.open_nursery() as settles:
                for d in leased[:40]:
                    settles.start_soon(first.settle, "c", Settle(acks=(d.position,)))
            assert first.journal.lac - before <= 3  # 40 acks, one entry in flight at a time
            # An entry held in flight (as if slow): what is decided meanwhile waits in the batch.
            # (Once the last one is confirmed and its gather over: nothing else sends then.)
            await wait_until(lambda: first._journal_in_flight == 0, "the last entry confirmed")
            first._journal_in_flight += 1
            with trio.fail_after(30):  # the switch sends them: nothing else would
                async with trio.open_nursery() as waiting:
                    for d in leased[40:50]:
                        waiting.start_soon(first.settle, "c", Settle(nacks=((d.position, 0.0),)))
                    await wait_until(lambda: len(first._batch.events) == 10, "the ten nacks waiting in the batch")
                    await first._snapshot()
            first._journal_in_flight -= 1
            again = await first.lease("c", 10, 1.0)
            assert {d.position for d in again} == {d.position for d in leased[40:50]}
            state = first.state
            expected = (set(state.acked), state.mark_delete, dict(state.deliveries), set(state.leases))
            await first.lock.release()  # as if it died: no snapshot at the end
            second = await Dispatcher.take(bk, "group", "s", holder="two", task_group=nursery)
            state = second.state
            assert (set(state.acked), state.mark_delete, dict(state.deliveries), set(state.leases)) == expected
            assert {state.deliveries[k] for k in state.leases} == {1, 2}  # 2: the nacked ones, leased again
            await second.aclose()
            nursery.cancel_scope.cancel()


async def test_a_logs_password_guards_its_subscription_over_the_wire(bookies: str) -> None:
    """The bookie-hosted owner answers only a consumer that knows the log's password: no
    record leaves and no ack lands for one that does not (docs/security.md)."""
    async with bkframe.open_client(bookies) as bk:
        await bk.logs.create("secret", password=b"pw")
        async with await bk.logs.open_writer("secret", password=b"pw") as w:
            await w.append(b"classified")
        await bk.logs.create_subscription("secret", "s", password=b"pw")
        async with await bk.logs.subscribe("secret", "s", password=b"pw") as sub:
            msg = await sub.receive()
            assert msg is not None and msg.payload == b"classified"
            await msg.nack()  # back to the backlog
    async with bkframe.open_client(bookies) as stranger:
        async with await stranger.logs.subscribe("secret", "s", password=b"guess") as sub:
            with pytest.raises(UnauthorizedError):
                await sub.receive(timeout_s=1)
            with pytest.raises(UnauthorizedError):
                await sub.ack(Position(0, 0))
        async with await stranger.logs.subscribe("secret", "s") as sub:  # no password at all
            with pytest.raises(UnauthorizedError):
                await sub.receive(timeout_s=1)
    async with bkframe.open_client(bookies) as bk:
        stats = await bk.logs.subscription_stats("secret", "s", password=b"pw")
        assert (stats.backlog, stats.acked) == (1, 0)  # the stranger acked nothing


async def test_a_bookie_shows_the_owners_it_hosts_on_its_metrics(tmp_path: Path) -> None:
    uri = f"sqlite://{tmp_path / 'metadata.db'}"
    async with AsyncExitStack() as stack:
        services = [
            (await stack.enter_async_context(running_bookie(make_config(tmp_path / f"b{i}", metadata=uri))))[0]
            for i in range(3)
        ]
        async with bkframe.open_client(uri) as bk:
            await fill(bk, "watched", 10)
            await bk.logs.create_subscription("watched", "s")
            async with await bk.logs.subscribe("watched", "s") as sub:
                for _ in range(10):
                    msg = await sub.receive()
                    assert msg is not None
                    await msg.ack()
            owner = (await bk.logs.subscription_stats("watched", "s")).owner
        [host] = [s for s in services if s.bookie is not None and s.bookie.bookie_id == owner]
        metrics = prometheus_client.generate_latest(bookie_registry(host)).decode()
        assert 'bkframe_subscription_acked_total{log="watched",subscription="s"} 10.0' in metrics
        assert host.bookie is not None
        # The owner's state-ledger appends to the bookie hosting it went in-process, not by a socket.
        assert host.bookie.context.subscriptions.in_bookie.served > 0  # type: ignore[attr-defined]


async def test_the_status_page_shows_a_subscriptions_backlog_and_owner(bookies: str) -> None:
    async with bkframe.open_client(bookies) as bk:
        await fill(bk, "shown", 12)
        await bk.logs.create_cursor("shown", "reader")
        await bk.logs.create_subscription("shown", "s")
        async with await bk.logs.subscribe("shown", "s", prefetch=2) as sub:
            for _ in range(5):
                msg = await sub.receive()
                assert msg is not None
                await msg.ack()
            held = await sub.receive()  # leased, not acked: in flight
            assert held is not None
            body = await StatusPage(Admin(bk.metadata, client=bk)).cluster(bk.metadata)
        owner = (await bk.logs.subscription_stats("shown", "s")).owner
        row = re.search(r"subscription s: backlog (\d+), in flight (\d+), redelivered (\d+) \(owner ([^)]*)\)", body)
        assert row is not None, body[body.find("<h2>Logs") :][:1500]
        assert (row[1], row[3], row[4]) == ("7", "0", owner) and int(row[2]) >= 1  # the held one, at least
        assert "reader: lag 12" in body  # a plain cursor beside it, as before
