"""A subscription's state and every decision on it, without I/O (docs/subscriptions.md).

The durable part changes only through :meth:`SubscriptionState.apply` of an event: the owner
builds an event (:meth:`~SubscriptionState.take`, :meth:`~SubscriptionState.ack`, ...),
applies it, appends it to the state ledger and only then answers; recovery applies the same
events to the snapshot. So what a live owner decided and what a recovering one rebuilds are
one code path.

The rest is rebuilt by reading the log: the records *held* (read, not leased: ahead of the
consumers, waiting for redelivery, delayed, or behind their key). A held record with no
entry yet must be read again (:meth:`~SubscriptionState.to_load`) before it is leased.

Positions are packed integers (:func:`~bkframe.subscriptions.settings.pack`).
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
from pyroaring import BitMap64

from bkframe.client.logs.model import LogEntry
from bkframe.subscriptions.settings import ENTRY_BITS, ENTRY_MASK, Kind, SubscriptionSettings

#: The property that schedules a record for later delivery (ms since the epoch).
DELIVER_AT = "bkframe.deliver_at"


def key_hash(key: bytes | None) -> int | None:
    """What the owner keeps of a record's key (key_shared): 8 bytes of BLAKE2b."""
    if key is None:
        return None
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")


# -- events: the only changes to the durable state ------------------------------------------


@attrs.frozen
class Leased:
    """Positions leased to ``consumer`` until ``deadline_ms``: (key, delivery count, key hash)."""

    consumer: str
    deadline_ms: int
    records: tuple[tuple[int, int, int | None], ...]


@attrs.frozen
class Acked:
    """Positions acked: inclusive ranges of packed positions (within one segment each)."""

    ranges: tuple[tuple[int, int], ...]


@attrs.frozen
class Released:
    """Leases ended without an ack (a nack, an expiry, a consumer gone): the records wait for
    redelivery, not before ``not_before_ms`` (0: now)."""

    not_before_ms: int
    keys: tuple[int, ...]


@attrs.frozen
class Extended:
    deadline_ms: int
    keys: tuple[int, ...]


@attrs.frozen
class DeadLettered:
    """Positions appended to the dead-letter log: they count as acked."""

    keys: tuple[int, ...]


@attrs.frozen
class Trimmed:
    """The log was trimmed past the subscription (a forced trim): everything before
    ``start`` is gone and counts as acked."""

    start: int


@attrs.frozen
class Committing:
    """An exactly-once ack under way: ``keys`` are acked by the multi-log commit ``token``
    if it lands. Until :class:`Committed` says, no other commit may ack them, and their
    leases do not end."""

    token: str
    keys: tuple[int, ...]


@attrs.frozen
class Committed:
    """The commit ``token`` landed (its keys are acked) or not (``done`` False)."""

    token: str
    done: bool


Event = Leased | Acked | Released | Extended | DeadLettered | Trimmed | Committing | Committed


# -- what the owner holds ---------------------------------------------------------------


@attrs.define
class Lease:
    consumer: str
    deadline_ms: int
    keyhash: int | None


@attrs.define
class Held:
    """A record read and not leased. ``entry`` None: to be read again before leasing."""

    keyhash: int | None
    entry: LogEntry | None
    not_before_ms: int = 0


@attrs.frozen
class Segments:
    """The log's segments as the state needs them: numbers in order, and each closed one's
    last entry id (None while open). Mark-delete moves across a segment's end with it."""

    numbers: tuple[int, ...] = ()
    last_entries: tuple[int | None, ...] = ()

    def next_key(self, key: int) -> int | None:
        """The position right after ``key``, skipping ends of closed segments and gaps in
        the numbers; None past the last segment known."""
        return self._at_or_after(key + 1)

    def normalize(self, key: int) -> int:
        """``key`` moved past ends of closed segments and gaps (a boundary to a position)."""
        found = self._at_or_after(key)
        return key if found is None else found

    def _at_or_after(self, key: int) -> int | None:
        """The first position at or after ``key`` in a known segment (an open one holds every
        entry id); None past the last segment known."""
        segment, entry = key >> ENTRY_BITS, key & ENTRY_MASK
        i = bisect.bisect_left(self.numbers, segment)
        while i < len(self.numbers):
            number, last = self.numbers[i], self.last_entries[i]
            if number > segment:
                return number << ENTRY_BITS
            if last is None or entry <= last:
                return key
            i += 1
            segment = -1  # the next segment's start
        return None

    def segment_end(self, key: int) -> int | None:
        """The last key of ``key``'s segment if closed, else None."""
        segment = key >> ENTRY_BITS
        i = bisect.bisect_left(self.numbers, segment)
        if i < len(self.numbers) and self.numbers[i] == segment and self.last_entries[i] is not None:
            return segment << ENTRY_BITS | self.last_entries[i]  # type: ignore[operator]
        return None


@attrs.define
class Counters:
    delivered: int = 0
    redelivered: int = 0
    acked: int = 0
    dead_lettered: int = 0


class SubscriptionState:
    """One subscription's state (see the module's docstring)."""

    def __init__(self, settings: SubscriptionSettings, mark_delete: int) -> None:
        self.settings = settings
        self.key_shared = settings.kind == Kind.KEY_SHARED
        # -- durable (snapshot + events) --
        self.mark_delete = mark_delete
        #: Acked positions at or after mark-delete.
        self.acked = BitMap64()
        #: The first position never leased: below it, what is not acked or leased is held
        #: (a hole) and is read again after a recovery.
        self.frontier = mark_delete
        self.deliveries: dict[int, int] = {}
        #: Not-before times of released records (a nack with a delay).
        self.delays: dict[int, int] = {}
        self.leases: dict[int, Lease] = {}
        #: Exactly-once acks under way: token -> keys (see :class:`Committing`).
        self.committing: dict[str, tuple[int, ...]] = {}
        self.committing_keys: set[int] = set()
        self.counters = Counters()
        # -- rebuilt by reading the log --
        self.held: dict[int, Held] = {}
        #: Where reading the log goes on: every position below it not acked is leased or held.
        self.scan_at = mark_delete
        self.segments = Segments()
        self._ready: list[int] = []  # heap of held keys that may be leasable now
        self._timers: list[tuple[int, int]] = []  # heap of (not before, key)
        self._deadlines: list[tuple[int, int]] = []  # heap of (deadline, key), lazily stale
        #: key_shared: per key hash, its held positions in order, and the one leased.
        self._queues: dict[int, list[int]] = {}
        self._busy: dict[int, int] = {}

    # -- reading the log ------------------------------------------------------------------

    def set_segments(self, segments: Segments) -> None:
        self.segments = segments
        self._advance()

    def wants_more(self) -> bool:
        """Room to hold more records read ahead."""
        return len(self.held) < self.settings.max_held

    def start_scan(self) -> Iterator[tuple[int, int]]:
        """After a recovery: the ranges (first, last keys, inclusive, within one segment) of
        the holes below the frontier to read again, in order. Reading then goes on at the
        frontier (:attr:`scan_at`)."""
        key = self.segments.normalize(self.mark_delete)
        self.scan_at = max(self.frontier, self.mark_delete)
        run: list[int] = []
        while key < self.frontier:
            if key not in self.acked and key not in self.leases and key not in self.held:
                if run and (run[1] + 1 != key or key >> ENTRY_BITS != run[0] >> ENTRY_BITS):
                    yield run[0], run[1]
                    run = []
                run = [run[0] if run else key, key]
            nxt = self.segments.next_key(key)
            if nxt is None:
                break
            key = nxt
        if run:
            yield run[0], run[1]

    def offer(self, entry: LogEntry, key: int) -> bool:
        """A record read from the log: held if it is still to be delivered. True if held."""
        if key >= self.scan_at:
            nxt = self.segments.next_key(key)
            self.scan_at = nxt if nxt is not None else key + 1
        if key < self.mark_delete or key in self.acked or key in self.leases:
            return False
        current = self.held.get(key)
        if current is not None:
            if current.entry is None:  # read again for a redelivery
                current.entry = entry
                self._push_ready(key)
            return True
        not_before = self.delays.get(key, 0)
        deliver_at = entry.properties.get(DELIVER_AT) if entry.properties else None
        if deliver_at is not None:
            try:
                not_before = max(not_before, int(deliver_at))
            except ValueError:
                pass  # not a time: deliver now (the writer's mistake must not hold the log back)
        kh = key_hash(entry.key) if self.key_shared else None
        self.held[key] = Held(kh, entry, not_before)
        if kh is not None:
            bisect.insort(self._queues.setdefault(kh, []), key)
        self._schedule(key, not_before)
        return True

    def to_load(self) -> list[int]:
        """Held records to read again (released ones), in order."""
        return sorted(k for k, h in self.held.items() if h.entry is None)

    # -- deciding ---------------------------------------------------------------------------

    def take(self, consumer: str, max_records: int, now_ms: int, lease_ms: int) -> Leased | None:
        """The event leasing up to ``max_records`` records to ``consumer`` (not applied)."""
        self.wake(now_ms)
        picked: list[tuple[int, int, int | None]] = []
        picked_keys: set[int] = set()
        keys_taken: set[int] = set()
        while self._ready and len(picked) < max_records:
            key = heapq.heappop(self._ready)
            held = self.held.get(key)
            if held is None or held.entry is None or held.not_before_ms > now_ms or key in picked_keys:
                continue  # (a key may be in the heap more than once: pushed by each change)
            kh = held.keyhash
            if kh is not None:
                queue = self._queues.get(kh)
                if kh in self._busy or kh in keys_taken or not queue or queue[0] != key:
                    continue  # pushed again when its key frees up
                keys_taken.add(kh)
            picked.append((key, self.deliveries.get(key, 0) + 1, kh))
            picked_keys.add(key)
        if not picked:
            return None
        return Leased(consumer, now_ms + lease_ms, tuple(picked))

    def ack(self, keys: Iterable[int]) -> Acked | None:
        """The event acking ``keys`` (those not acked already, nor being acked by a commit)."""
        return self._acked_ranges(sorted(k for k in set(keys) if not self.is_acked(k) and k not in self.committing_keys))

    def commit_refusal(self, keys: Sequence[int]) -> str | None:
        """Why an exactly-once ack of ``keys`` may not go ahead, or None: one is acked already
        (another delivery's output was committed: drop this one) or being committed."""
        for key in keys:
            if self.is_acked(key):
                return f"{key >> ENTRY_BITS}:{key & ENTRY_MASK} is acked already (another delivery's output was committed)"
            if key in self.committing_keys:
                return f"{key >> ENTRY_BITS}:{key & ENTRY_MASK} is being committed by another delivery"
        return None

    def ack_range(self, first: int, last: int) -> Acked | None:
        """The event acking every position from ``first`` to ``last``, across segments."""
        ranges: list[tuple[int, int]] = []
        key = self.segments.normalize(max(first, self.mark_delete))
        while key <= last:
            end = self.segments.segment_end(key)
            seg_last = last if end is None else min(last, end)
            if seg_last >> ENTRY_BITS != key >> ENTRY_BITS:
                seg_last = (key >> ENTRY_BITS) << ENTRY_BITS | ENTRY_MASK if end is None else seg_last
            ranges.append((key, seg_last))
            nxt = self.segments.next_key(seg_last)
            if nxt is None or nxt <= seg_last:
                break
            key = nxt
        return Acked(tuple(ranges)) if ranges else None

    def release(self, consumer: str | None, keys: Iterable[int], not_before_ms: int) -> Released | None:
        """The event ending ``consumer``'s leases of ``keys`` (any consumer's if None)."""
        mine = tuple(sorted(k for k in set(keys) if (lease := self.leases.get(k)) is not None
                            and (consumer is None or lease.consumer == consumer) and k not in self.committing_keys))
        return Released(not_before_ms, mine) if mine else None

    def extend(self, consumer: str, keys: Iterable[int], deadline_ms: int) -> Extended | None:
        mine = tuple(sorted(k for k in set(keys) if (lease := self.leases.get(k)) is not None and lease.consumer == consumer))
        return Extended(deadline_ms, mine) if mine else None

    def leases_of(self, consumer: str) -> list[int]:
        return [k for k, lease in self.leases.items() if lease.consumer == consumer]

    def expired(self, now_ms: int) -> list[int]:
        """Leases whose deadline has come."""
        out = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            deadline, key = heapq.heappop(self._deadlines)
            lease = self.leases.get(key)
            if lease is not None and lease.deadline_ms == deadline and key not in self.committing_keys:
                out.append(key)
        return out

    def next_deadline(self) -> int | None:
        """When the next lease ends or delayed record comes due (ms), for the owner's timer."""
        times = [t for t in (self._deadlines[0][0] if self._deadlines else None,
                             self._timers[0][0] if self._timers else None) if t is not None]
        return min(times) if times else None

    def due_for_dead_letter(self, keys: Iterable[int]) -> list[int]:
        """Of ``keys`` (released, or held), those delivered ``max_deliveries`` times: they go
        to the dead-letter log instead of being delivered again."""
        limit = self.settings.max_deliveries
        if limit is None or self.settings.dead_letter is None:
            return []
        return [k for k in keys if self.deliveries.get(k, 0) >= limit and not self.is_acked(k)]

    def wake(self, now_ms: int) -> int:
        """Delayed records whose time has come become leasable; how many did."""
        woken = 0
        while self._timers and self._timers[0][0] <= now_ms:
            _, key = heapq.heappop(self._timers)
            held = self.held.get(key)
            if held is not None and held.not_before_ms <= now_ms:
                self._push_ready(key)
                woken += 1
        return woken

    # -- applying events --------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        if isinstance(event, Leased):
            self._apply_leased(event)
        elif isinstance(event, Acked):
            for first, last in event.ranges:
                self._acked_between(first, last)
            self._advance()
        elif isinstance(event, Released):
            self._apply_released(event)
        elif isinstance(event, Extended):
            for key in event.keys:
                lease = self.leases.get(key)
                if lease is not None:
                    lease.deadline_ms = event.deadline_ms
                    heapq.heappush(self._deadlines, (event.deadline_ms, key))
        elif isinstance(event, DeadLettered):
            for key in event.keys:
                if self._mark_acked(key):
                    self.counters.dead_lettered += 1
                    self.counters.acked -= 1  # counted as dead-lettered, not as acked
            self._advance()
        elif isinstance(event, Committing):
            self.committing[event.token] = event.keys
            self.committing_keys.update(event.keys)
        elif isinstance(event, Committed):
            keys = self.committing.pop(event.token, ())
            self.committing_keys.difference_update(keys)
            if event.done:
                for key in keys:
                    self._mark_acked(key)
                self._advance()
            else:  # their leases go on: their deadlines count again
                for key in keys:
                    lease = self.leases.get(key)
                    if lease is not None:
                        heapq.heappush(self._deadlines, (lease.deadline_ms, key))
        elif isinstance(event, Trimmed):
            for key in [k for k in (*self.leases, *self.held) if k < event.start]:
                self._forget(key)
            self.mark_delete = max(self.mark_delete, event.start)
            self.acked.remove_range(0, self.mark_delete)
            self.frontier = max(self.frontier, self.mark_delete)
            self.scan_at = max(self.scan_at, self.mark_delete)
            self._advance()
        else:  # pragma: no cover - the union is closed
            raise TypeError(f"not an event: {event!r}")

    def _apply_leased(self, event: Leased) -> None:
        for key, count, kh in event.records:
            if self.is_acked(key):
                continue
            if count > 1:
                self.counters.redelivered += 1
            self.counters.delivered += 1
            self.deliveries[key] = count
            self.delays.pop(key, None)
            self._unhold(key)
            self.leases[key] = Lease(event.consumer, event.deadline_ms, kh)
            heapq.heappush(self._deadlines, (event.deadline_ms, key))
            if kh is not None:
                self._busy[kh] = key
            if key >= self.frontier:
                nxt = self.segments.next_key(key)
                self.frontier = nxt if nxt is not None and nxt > key else key + 1
            if key >= self.scan_at:
                self.scan_at = self.frontier

    def _apply_released(self, event: Released) -> None:
        for key in event.keys:
            lease = self.leases.pop(key, None)
            if lease is None:
                continue
            if lease.keyhash is not None and self._busy.get(lease.keyhash) == key:
                del self._busy[lease.keyhash]
            if event.not_before_ms:
                self.delays[key] = event.not_before_ms
            self.held[key] = Held(lease.keyhash, None, event.not_before_ms)
            if lease.keyhash is not None:
                bisect.insort(self._queues.setdefault(lease.keyhash, []), key)
            self._schedule(key, event.not_before_ms)

    # -- the acked set and mark-delete -------------------------------------------------------

    def is_acked(self, key: int) -> bool:
        return key < self.mark_delete or key in self.acked

    def _acked_ranges(self, keys: Sequence[int]) -> Acked | None:
        if not keys:
            return None
        ranges: list[tuple[int, int]] = []
        for key in keys:
            if ranges and ranges[-1][1] + 1 == key and (key >> ENTRY_BITS) == (ranges[-1][0] >> ENTRY_BITS):
                ranges[-1] = (ranges[-1][0], key)
            else:
                ranges.append((key, key))
        return Acked(tuple(ranges))

    def _acked_between(self, first: int, last: int) -> None:
        first = max(first, self.mark_delete)
        if first > last:
            return
        # The few keys someone holds or leases are forgotten one by one; the range goes into
        # the bitmap at once (a range ack of a million positions is one call).
        if last - first < 64:  # the common case, one ack: look the keys up
            for key in range(first, last + 1):
                self._mark_acked(key)
            return
        for key in [k for k in (*self.leases, *self.held) if first <= k <= last]:
            self._forget(key)
        before = self.acked.range_cardinality(first, last + 1)
        self.acked.add_range(first, last + 1)
        self.counters.acked += (last + 1 - first) - before
        for key in [k for k in self.deliveries if first <= k <= last]:
            del self.deliveries[key]
        for key in [k for k in self.delays if first <= k <= last]:
            del self.delays[key]

    def _mark_acked(self, key: int) -> bool:
        if self.is_acked(key):
            return False
        self._forget(key)
        self.acked.add(key)
        self.counters.acked += 1
        self.deliveries.pop(key, None)
        self.delays.pop(key, None)
        return True

    def _forget(self, key: int) -> None:
        """``key`` is done (acked, dead-lettered, trimmed): not leased, not held; its key frees up."""
        lease = self.leases.pop(key, None)
        if lease is not None and lease.keyhash is not None and self._busy.get(lease.keyhash) == key:
            del self._busy[lease.keyhash]
            self._next_of_key(lease.keyhash)
        held = self._unhold(key)
        if held is not None and held.keyhash is not None:
            self._next_of_key(held.keyhash)

    def _unhold(self, key: int) -> Held | None:
        held = self.held.pop(key, None)
        if held is not None and held.keyhash is not None:
            queue = self._queues.get(held.keyhash)
            if queue:
                i = bisect.bisect_left(queue, key)
                if i < len(queue) and queue[i] == key:
                    del queue[i]
                if not queue:
                    del self._queues[held.keyhash]
        return held

    def _advance(self) -> None:
        """Move mark-delete over the acked run it starts, across closed segments' ends, and
        drop those bits: the bitmap keeps only what is past the first hole."""
        key = self.segments.normalize(self.mark_delete)
        while key in self.acked:
            end = self.segments.segment_end(key)
            run = self._run_end(key, end)
            if end is not None and run == end:
                nxt = self.segments.next_key(end)
                if nxt is None:
                    key = end + 1
                    break
                key = nxt
            else:
                key = run + 1
                break
        if key > self.mark_delete:
            self.acked.remove_range(0, key)
            self.mark_delete = key
            self.frontier = max(self.frontier, key)
            self.scan_at = max(self.scan_at, key)

    def _run_end(self, key: int, end: int | None) -> int:
        """The last key of the run of acked keys starting at ``key`` (not past ``end``)."""
        limit = end if end is not None else (key | ENTRY_MASK)
        step, last = 1, key
        while last < limit:  # gallop, then halve: O(log run) bitmap calls
            probe = min(last + step, limit)
            if self.acked.range_cardinality(key, probe + 1) == probe + 1 - key:
                last, step = probe, step * 2
            elif step == 1:
                break
            else:
                step = 1
        return last

    # -- readiness ----------------------------------------------------------------------------

    def _schedule(self, key: int, not_before_ms: int) -> None:
        if not_before_ms:
            heapq.heappush(self._timers, (not_before_ms, key))
        self._push_ready(key)  # take() checks the time again

    def _push_ready(self, key: int) -> None:
        heapq.heappush(self._ready, key)

    def _next_of_key(self, kh: int) -> None:
        queue = self._queues.get(kh)
        if queue:
            self._push_ready(queue[0])

    # -- numbers ------------------------------------------------------------------------------

    def in_flight(self) -> int:
        return len(self.leases)

    def waiting(self, now_ms: int) -> int:
        return sum(1 for h in self.held.values() if h.not_before_ms <= now_ms)

    def delayed(self, now_ms: int) -> int:
        return sum(1 for h in self.held.values() if h.not_before_ms > now_ms)

    def acked_after(self, key: int) -> int:
        """Acked positions at or after ``key`` (for the backlog's count)."""
        return int(self.acked.range_cardinality(key, 1 << 63))

    def consumers(self) -> int:
        return len({lease.consumer for lease in self.leases.values()})

    def describe(self) -> dict[str, Any]:
        return {"mark_delete": self.mark_delete, "frontier": self.frontier, "acked": len(self.acked),
                "leases": len(self.leases), "held": len(self.held), "deliveries": len(self.deliveries)}
