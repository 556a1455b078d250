"""A subscription's durable form: events and snapshots as entries of its state ledgers, and
the state read back from them (docs/subscriptions.md, "Where it is kept").

An entry is one of
- ``E`` + a JSON list of events (the decisions of one group commit, in the order taken);
- ``P`` + a part of a snapshot too large for the record (the parts, in order, make it).

A snapshot is ``u32 header length`` + a JSON header (mark-delete, frontier, delivery counts,
delays, leases, counters) + the acked set in Roaring's portable format.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from typing import Any

from pyroaring import BitMap64

from bkframe.errors import MetadataError
from bkframe.subscriptions.settings import SubscriptionRecord, SubscriptionSettings, pack
from bkframe.subscriptions.state import (
    Acked,
    Committed,
    Committing,
    Counters,
    DeadLettered,
    Event,
    Extended,
    Leased,
    Released,
    SubscriptionState,
    Trimmed,
)

EVENTS = b"E"
PART = b"P"
#: A snapshot larger than this is written as several entries.
PART_BYTES = 1 << 20
#: A group of events larger than this (encoded) is split over several entries.
ENTRY_BYTES = 1 << 20
_HEADER_LEN = struct.Struct(">I")


def _event_json(event: Event) -> list[Any]:
    if isinstance(event, Leased):
        flat: list[Any] = []
        for key, count, kh in event.records:
            flat += (key, count, kh)
        return ["L", event.consumer, event.deadline_ms, flat]
    if isinstance(event, Acked):
        return ["A", [n for r in event.ranges for n in r]]
    if isinstance(event, Released):
        return ["R", event.not_before_ms, list(event.keys)]
    if isinstance(event, Extended):
        return ["X", event.deadline_ms, list(event.keys)]
    if isinstance(event, DeadLettered):
        return ["D", list(event.keys)]
    if isinstance(event, Trimmed):
        return ["T", event.start]
    if isinstance(event, Committing):
        return ["C", event.token, list(event.keys)]
    if isinstance(event, Committed):
        return ["K", event.token, event.done]
    raise TypeError(f"not an event: {event!r}")


def _event_from_json(raw: list[Any]) -> Event:
    tag = raw[0]
    if tag == "L":
        flat = raw[3]
        records = tuple((int(flat[i]), int(flat[i + 1]), None if flat[i + 2] is None else int(flat[i + 2]))
                        for i in range(0, len(flat), 3))
        return Leased(str(raw[1]), int(raw[2]), records)
    if tag == "A":
        flat = raw[1]
        return Acked(tuple((int(flat[i]), int(flat[i + 1])) for i in range(0, len(flat), 2)))
    if tag == "R":
        return Released(int(raw[1]), tuple(int(k) for k in raw[2]))
    if tag == "X":
        return Extended(int(raw[1]), tuple(int(k) for k in raw[2]))
    if tag == "D":
        return DeadLettered(tuple(int(k) for k in raw[1]))
    if tag == "T":
        return Trimmed(int(raw[1]))
    if tag == "C":
        return Committing(str(raw[1]), tuple(int(k) for k in raw[2]))
    if tag == "K":
        return Committed(str(raw[1]), bool(raw[2]))
    raise ValueError(f"unknown event {tag!r}")


def encode_events(events: Sequence[Event]) -> bytes:
    return EVENTS + json.dumps([_event_json(e) for e in events], separators=(",", ":")).encode()


def decode_events(data: bytes) -> list[Event]:
    if data[:1] != EVENTS:
        raise ValueError(f"not an events entry (starts {data[:1]!r})")
    return [_event_from_json(raw) for raw in json.loads(data[1:])]


# -- snapshots ---------------------------------------------------------------------------


def encode_snapshot(state: SubscriptionState) -> bytes:
    consumers = sorted({lease.consumer for lease in state.leases.values()})
    index = {c: i for i, c in enumerate(consumers)}
    header = {
        "mark_delete": state.mark_delete,
        "frontier": state.frontier,
        "deliveries": [n for kv in sorted(state.deliveries.items()) for n in kv],
        "delays": [n for kv in sorted(state.delays.items()) for n in kv],
        "consumers": consumers,
        "leases": [[k, index[lease.consumer], lease.deadline_ms, lease.keyhash] for k, lease in sorted(state.leases.items())],
        "committing": [[token, list(keys)] for token, keys in sorted(state.committing.items())],
        "counters": [state.counters.delivered, state.counters.redelivered, state.counters.acked,
                     state.counters.dead_lettered],
    }
    head = json.dumps(header, separators=(",", ":")).encode()
    state.acked.run_optimize()
    return _HEADER_LEN.pack(len(head)) + head + state.acked.serialize()


def decode_snapshot(settings: SubscriptionSettings, data: bytes) -> SubscriptionState:
    try:
        (n,) = _HEADER_LEN.unpack_from(data)
        header = json.loads(data[4 : 4 + n])
        state = SubscriptionState(settings, int(header["mark_delete"]))
        state.acked = BitMap64.deserialize(data[4 + n :])
        state.frontier = int(header["frontier"])
        state.scan_at = state.frontier
        d = header["deliveries"]
        state.deliveries = {int(d[i]): int(d[i + 1]) for i in range(0, len(d), 2)}
        t = header["delays"]
        state.delays = {int(t[i]): int(t[i + 1]) for i in range(0, len(t), 2)}
        consumers = header["consumers"]
        for key, ci, deadline, kh in header["leases"]:
            state.apply(Leased(consumers[ci], int(deadline), ((int(key), state.deliveries.get(int(key), 1), kh),)))
        for token, keys in header.get("committing", []):
            state.apply(Committing(str(token), tuple(int(k) for k in keys)))
        state.counters = Counters(*(int(c) for c in header["counters"]))
        return state
    except (ValueError, KeyError, IndexError, TypeError, struct.error) as e:
        raise MetadataError(f"a subscription's snapshot does not parse: {e!r}") from None


def snapshot_parts(blob: bytes) -> list[bytes]:
    return [PART + blob[i : i + PART_BYTES] for i in range(0, len(blob), PART_BYTES)] or [PART]


def join_parts(entries: Sequence[bytes]) -> bytes:
    for e in entries:
        if e[:1] != PART:
            raise MetadataError("a subscription's snapshot entry is not a snapshot part")
    return b"".join(e[1:] for e in entries)


# -- writing and reading the state ledgers -----------------------------------------------


def entries(events: list[Event]) -> list[bytes]:
    """``events`` as state-ledger entries of at most about ENTRY_BYTES each (one group commit)."""
    entry = encode_events(events)
    if len(entry) <= ENTRY_BYTES or len(events) == 1:
        return [entry]
    half = len(events) // 2
    return entries(events[:half]) + entries(events[half:])


async def recover(client: object, record: SubscriptionRecord, password: bytes) -> SubscriptionState:
    """The state as the record and its state ledgers hold it. Opening the ledgers with
    recovery fences them: a previous owner can append nothing more."""
    ref = record.snapshot
    ledgers = list(record.state_ledgers)
    if ref is not None and ref.ledger_id in ledgers:
        ledgers = ledgers[ledgers.index(ref.ledger_id) :]
    handles = [await client.open_ledger(lid, password=password, recovery=True) for lid in ledgers]  # type: ignore[attr-defined]
    if ref is None:
        state = SubscriptionState(record.settings, pack(record.mark_delete))
        start = 0
    elif ref.inline is not None:
        state = decode_snapshot(record.settings, ref.inline)
        start = ref.last + 1
    else:
        parts = await handles[0].read(ref.first, ref.last)
        state = decode_snapshot(record.settings, join_parts([e.payload for e in parts]))
        start = ref.last + 1
    for i, handle in enumerate(handles):
        first = start if i == 0 else 0
        for lo in range(first, handle.lac + 1, 1000):
            for entry in await handle.read(lo, min(handle.lac, lo + 999)):
                if entry.payload[:1] == PART:
                    continue  # a snapshot the record did not name yet: the events before it are here
                try:
                    events = decode_events(entry.payload)
                except ValueError as e:
                    raise MetadataError(
                        f"subscription {record.name!r} of log {record.log!r}: state ledger {handle.ledger_id} entry "
                        f"{entry.entry_id} does not parse ({e})"
                    ) from None
                for event in events:
                    state.apply(event)
    return state


__all__ = [
    "decode_events",
    "decode_snapshot",
    "encode_events",
    "encode_snapshot",
    "entries",
    "join_parts",
    "recover",
    "snapshot_parts",
]
