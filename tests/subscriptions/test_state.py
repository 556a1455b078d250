"""The subscription state's decisions, without I/O (docs/subscriptions.md, "Invariants"):
leases, acks and mark-delete across segments, nacks, expiry, dead-letter dues, key_shared
order, and the rule that recovery (snapshot + events) rebuilds what the live owner decided."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bkframe.client.logs.model import LogEntry
from bkframe.client.logs.positions import Position
from bkframe.subscriptions import journal
from bkframe.subscriptions.settings import Kind, SubscriptionSettings, pack, unpack
from bkframe.subscriptions.state import DELIVER_AT, DeadLettered, Event, Segments, SubscriptionState

# Segment 0 closed with entries 0..9, segment 2 (1 was dropped) open.
SEGMENTS = Segments((0, 2), (9, None))


def entry(segment: int, entry_id: int, key: bytes | None = None, **props: str) -> LogEntry:
    return LogEntry(Position(segment, entry_id), 100 + segment, b"p%d:%d" % (segment, entry_id), key, 0, props)


def fresh(kind: Kind = Kind.SHARED, **settings: object) -> SubscriptionState:
    state = SubscriptionState(SubscriptionSettings(kind, **settings), 0)  # type: ignore[arg-type]
    state.set_segments(SEGMENTS)
    return state


def offer_all(state: SubscriptionState, entries: list[LogEntry]) -> None:
    for e in entries:
        state.offer(e, pack(e.position))


def run(state: SubscriptionState, event: Event | None, log: list[Event] | None = None) -> Event:
    assert event is not None
    state.apply(event)
    if log is not None:
        log.append(event)
    return event


def keys(event: Event) -> list[Position]:
    return [unpack(k) for k, _, _ in event.records]  # type: ignore[union-attr]


def test_leases_in_log_order_and_acks_move_mark_delete_across_a_segments_end() -> None:
    state = fresh()
    offer_all(state, [entry(0, i) for i in range(10)] + [entry(2, i) for i in range(3)])
    first = run(state, state.take("a", 4, 1000, 30_000))
    second = run(state, state.take("b", 100, 1000, 30_000))
    assert keys(first) == [Position(0, i) for i in range(4)]
    assert keys(second) == [Position(0, i) for i in range(4, 10)] + [Position(2, i) for i in range(3)]
    assert state.take("c", 1, 1000, 30_000) is None  # nothing left to lease
    run(state, state.ack(pack(Position(0, i)) for i in range(1, 10)))
    assert unpack(state.mark_delete) == Position(0, 0)  # 0:0 is not acked: the first hole
    run(state, state.ack([pack(Position(0, 0))]))
    assert unpack(state.mark_delete) == Position(2, 0)  # past segment 0's end and the dropped segment 1
    assert len(state.acked) == 0  # the bitmap keeps only what is past the first hole
    run(state, state.ack_range(pack(Position(2, 0)), pack(Position(2, 1))))
    assert unpack(state.mark_delete) == Position(2, 2)
    assert state.counters.acked == 12 and state.in_flight() == 1


def test_a_nack_redelivers_that_record_alone_with_its_count_and_after_its_delay() -> None:
    state = fresh()
    offer_all(state, [entry(0, i) for i in range(3)])
    run(state, state.take("a", 3, 1000, 30_000))
    run(state, state.release("a", [pack(Position(0, 1))], 5000))
    assert state.to_load() == [pack(Position(0, 1))]  # read again before it is leased
    state.offer(entry(0, 1), pack(Position(0, 1)))
    assert state.take("b", 10, 4999, 30_000) is None  # not before its delay
    again = run(state, state.take("b", 10, 5000, 30_000))
    assert again.records == ((pack(Position(0, 1)), 2, None),)  # type: ignore[union-attr]
    assert state.leases_of("a") == [pack(Position(0, 0)), pack(Position(0, 2))]  # its neighbours stay leased
    assert state.counters.redelivered == 1


def test_a_nack_by_a_consumer_that_lost_the_lease_changes_nothing() -> None:
    state = fresh()
    offer_all(state, [entry(0, 0)])
    run(state, state.take("a", 1, 1000, 30_000))
    assert state.release("b", [pack(Position(0, 0))], 0) is None
    assert state.extend("b", [pack(Position(0, 0))], 99_000) is None


def test_leases_end_at_their_deadline_and_extensions_move_it() -> None:
    state = fresh()
    offer_all(state, [entry(0, 0), entry(0, 1)])
    run(state, state.take("a", 2, 1000, 10_000))
    run(state, state.extend("a", [pack(Position(0, 1))], 50_000))
    assert state.next_deadline() == 11_000
    assert state.expired(10_999) == []
    assert state.expired(11_000) == [pack(Position(0, 0))]
    assert state.expired(49_999) == []
    assert state.expired(50_000) == [pack(Position(0, 1))]


def test_records_at_their_last_delivery_are_due_for_the_dead_letters() -> None:
    state = fresh(max_deliveries=2, dead_letter="dlq")
    offer_all(state, [entry(0, 0)])
    k = pack(Position(0, 0))
    run(state, state.take("a", 1, 1000, 10_000))
    assert state.due_for_dead_letter([k]) == []
    run(state, state.release("a", [k], 0))
    state.offer(entry(0, 0), k)
    run(state, state.take("a", 1, 1000, 10_000))
    assert state.due_for_dead_letter([k]) == [k]
    assert fresh(max_deliveries=2).due_for_dead_letter([k]) == []  # no dead-letter log: delivered again


def test_a_record_scheduled_for_later_is_not_leased_before_its_time() -> None:
    state = fresh()
    state.offer(entry(0, 0, **{DELIVER_AT: "7000"}), pack(Position(0, 0)))
    state.offer(entry(0, 1), pack(Position(0, 1)))
    assert keys(run(state, state.take("a", 10, 1000, 10_000))) == [Position(0, 1)]
    assert state.next_deadline() == 7000
    assert keys(run(state, state.take("a", 10, 7000, 10_000))) == [Position(0, 0)]


def test_key_shared_leases_one_record_of_a_key_at_a_time_in_log_order() -> None:
    state = fresh(Kind.KEY_SHARED)
    offer_all(state, [entry(0, 0, b"x"), entry(0, 1, b"x"), entry(0, 2, b"y"), entry(0, 3, None), entry(0, 4, b"x")])
    first = run(state, state.take("a", 10, 1000, 10_000))
    assert keys(first) == [Position(0, 0), Position(0, 2), Position(0, 3)]  # one x, one y, the keyless
    assert state.take("b", 10, 1000, 10_000) is None  # x's next waits for 0:0
    # x's record fails: it comes back first, and holds back only x.
    run(state, state.release("a", [pack(Position(0, 0))], 0))
    state.offer(entry(0, 0, b"x"), pack(Position(0, 0)))
    assert keys(run(state, state.take("b", 10, 1000, 10_000))) == [Position(0, 0)]
    run(state, state.ack([pack(Position(0, 0))]))
    assert keys(run(state, state.take("b", 10, 1000, 10_000))) == [Position(0, 1)]
    run(state, state.ack([pack(Position(0, 1))]))
    assert keys(run(state, state.take("a", 10, 1000, 10_000))) == [Position(0, 4)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), kind=st.sampled_from(list(Kind)), cut=st.integers(0, 200))
def test_recovery_rebuilds_what_the_owner_decided(seed: int, kind: Kind, cut: int) -> None:
    """A random run of leases, acks, nacks, extensions, expiries and dead letters; a snapshot
    taken at step ``cut`` plus the events after it gives the live state's durable part."""
    rng = random.Random(seed)
    live = fresh(kind, max_deliveries=3, dead_letter="dlq")
    entries = [entry(0, i, rng.choice([b"a", b"b", b"c", None])) for i in range(10)]
    entries += [entry(2, i, rng.choice([b"a", b"b", None])) for i in range(30)]
    offer_all(live, entries)
    by_key = {pack(e.position): e for e in entries}
    events: list[Event] = []
    snapshot, after = journal.encode_snapshot(live), 0
    now = 1000
    for step in range(200):
        if step == cut:
            snapshot, after = journal.encode_snapshot(live), len(events)
        now += rng.randrange(0, 3000)
        leased = sorted(live.leases)
        action = rng.randrange(6)
        if action == 0:
            event = live.take(rng.choice("xyz"), rng.randrange(1, 5), now, 5000)
        elif action == 1 and leased:
            event = live.ack(rng.sample(leased, min(len(leased), 3)))
        elif action == 2 and leased:
            k = rng.choice(leased)
            event = live.release(live.leases[k].consumer, [k], now + rng.choice([0, 2000]))
        elif action == 3 and leased:
            k = rng.choice(leased)
            event = live.extend(live.leases[k].consumer, [k], now + 9000)
        elif action == 4:
            expired = live.expired(now)
            due = live.due_for_dead_letter(expired)
            event = live.release(None, [k for k in expired if k not in due], 0)
            if due:
                run(live, live.release(None, due, 1 << 62), events)
                run(live, DeadLettered(tuple(due)), events)
        else:
            event = live.ack_range(pack(Position(0, 0)), pack(Position(0, rng.randrange(10))))
        if event is not None:
            run(live, event, events)
        for k in live.to_load():
            live.offer(by_key[k], k)
    recovered = journal.decode_snapshot(live.settings, snapshot)
    recovered.set_segments(SEGMENTS)
    for event in journal.decode_events(journal.encode_events(events[after:])) if events[after:] else []:
        recovered.apply(event)
    assert recovered.mark_delete == live.mark_delete
    assert set(recovered.acked) == set(live.acked)
    assert recovered.deliveries == live.deliveries
    assert {k: (v.consumer, v.deadline_ms) for k, v in recovered.leases.items()} == {
        k: (v.consumer, v.deadline_ms) for k, v in live.leases.items()
    }
    assert recovered.frontier == live.frontier
    assert recovered.counters == live.counters
    # What the recovered owner reads again: every record neither acked nor leased, once
    # (the released ones it knows of, and the holes between).
    holes = {k for first, last in recovered.start_scan() for k in range(first, last + 1)}
    assert not holes & set(recovered.to_load())
    holes |= set(recovered.to_load())
    expected = {k for k in by_key if k < live.frontier and not live.is_acked(k) and k not in live.leases}
    assert holes == expected


@pytest.mark.parametrize("blob_size", [0, 3 * journal.PART_BYTES + 5])
def test_a_large_snapshot_splits_into_parts_and_joins_again(blob_size: int) -> None:
    blob = bytes(random.Random(1).randrange(256) for _ in range(min(blob_size, 1000))) * max(1, blob_size // 1000)
    parts = journal.snapshot_parts(blob)
    assert all(len(p) <= journal.PART_BYTES + 1 for p in parts)
    assert journal.join_parts(parts) == blob


def test_ten_million_acks_out_of_order_stay_small() -> None:
    """Invariant 7's size: the acked set of every other position of 20 million (10 million
    acks, 10 million holes) is a few megabytes, stored and loaded whole."""
    state = fresh()
    state.set_segments(Segments((0,), (None,)))
    for start in range(1, 20_000_000, 200_000):  # ranges of one segment, acked in bulk by the bitmap
        state.acked.update(range(start, start + 200_000, 2))
    assert len(state.acked) == 10_000_000
    blob = journal.encode_snapshot(state)
    assert len(blob) < 8 << 20, len(blob)
    again = journal.decode_snapshot(state.settings, blob)
    assert len(again.acked) == 10_000_000 and unpack(again.mark_delete) == Position(0, 0)


def test_the_state_ledger_type_is_kept_in_the_record_and_the_default_reads_as_before() -> None:
    bypass = SubscriptionSettings(state_ledger_type="BYPASS_JOURNAL")
    assert SubscriptionSettings.from_json(bypass.to_json()) == bypass
    # The default is left out of the record, so a bkframe from before the setting reads it.
    assert "state_ledger_type" not in SubscriptionSettings().to_json()
    assert SubscriptionSettings.from_json({"kind": "shared"}).state_ledger_type == "PD_JOURNAL"
    with pytest.raises(ValueError, match="'VD_JOURNAL' is not one a subscription can use"):
        SubscriptionSettings(state_ledger_type="VD_JOURNAL")
