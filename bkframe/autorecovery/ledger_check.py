"""Checking a ledger's replication: for each fragment, each replica bookie and which of the
entries it should hold (its positions in the fragment's write sets) it holds, asked with
LIST_ENTRIES -- as :mod:`.data_integrity` asks its peers. ``bkframe ledger check`` prints it;
autorecovery can use it to find ledgers whose replicas lost entries.

An entry is *under-replicated* when fewer than W reachable bookies hold it, *lost* when none
does. An unreachable bookie (not registered, not answering, or answering an error) holds
nothing that can be verified: the entries it should hold count as missing there. For an open
ledger the check goes up to the last entry any replica of its last fragment holds (entries
beyond the LAC may still be in flight there).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np
import trio

from bkframe.client.bookies.pool import BookiePool
from bkframe.client.distribution import stored_at
from bkframe.core.metadata import LedgerMetadata
from bkframe.proto.codes import Status

#: A bookie that does not answer one LIST_ENTRIES within this long is unreachable for the check.
LIST_TIMEOUT_S = 10.0

Runs = tuple[tuple[int, int], ...]


def runs_of(ids: np.ndarray) -> Runs:
    """Sorted entry ids as inclusive (first, last) runs."""
    if ids.size == 0:
        return ()
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks - 1, [ids.size - 1]))
    return tuple(zip(ids[starts].tolist(), ids[ends].tolist()))


def format_runs(runs: Iterable[tuple[int, int]], limit: int = 10) -> str:
    """``0-4, 7, 9-12`` (the first ``limit`` runs, then ``...``)."""
    runs = list(runs)
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit])
    return text + (", ..." if len(runs) > limit else "")


def count(runs: Runs) -> int:
    return sum(b - a + 1 for a, b in runs)


@attrs.frozen
class ReplicaCheck:
    """One bookie of one fragment."""

    bookie_id: str
    #: Why it could not be asked ("" when it answered).
    error: str
    #: Entries of the fragment it should hold.
    expected: int
    #: Of those, the ones it does not hold (all of them when unreachable), as runs.
    missing: Runs
    #: It answered that the ledger is in limbo there (BP-46: being repaired).
    limbo: bool = False

    @property
    def reachable(self) -> bool:
        return not self.error

    def to_json(self) -> dict[str, Any]:
        return {
            "bookie": self.bookie_id,
            "reachable": self.reachable,
            "error": self.error,
            "expected_entries": self.expected,
            "missing_entries": count(self.missing),
            "missing": [list(r) for r in self.missing],
            "limbo": self.limbo,
        }


@attrs.frozen
class FragmentCheck:
    first_entry: int
    #: Its last entry (-1 below ``first_entry`` when the fragment is empty).
    last_entry: int
    ensemble: tuple[str, ...]
    replicas: tuple[ReplicaCheck, ...]
    #: Entries held by fewer than W reachable bookies / by none, as runs.
    under_replicated: Runs
    lost: Runs

    def to_json(self) -> dict[str, Any]:
        return {
            "first_entry": self.first_entry,
            "last_entry": self.last_entry,
            "ensemble": list(self.ensemble),
            "replicas": [r.to_json() for r in self.replicas],
            "under_replicated": [list(r) for r in self.under_replicated],
            "lost": [list(r) for r in self.lost],
        }


@attrs.frozen
class LedgerCheck:
    ledger_id: int
    state: str
    #: The last entry checked: the ledger's last entry once closed, else the last any replica holds.
    last_entry: int
    write_quorum: int
    fragments: tuple[FragmentCheck, ...]

    @property
    def fully_replicated(self) -> bool:
        return not any(f.under_replicated for f in self.fragments)

    def unreachable(self) -> list[str]:
        return sorted({r.bookie_id for f in self.fragments for r in f.replicas if not r.reachable})

    def missing_by_bookie(self) -> dict[str, int]:
        """Entries each bookie should hold and does not (reachable bookies only)."""
        out: dict[str, int] = {}
        for f in self.fragments:
            for r in f.replicas:
                if r.reachable and r.missing:
                    out[r.bookie_id] = out.get(r.bookie_id, 0) + count(r.missing)
        return out

    def summary(self) -> str:
        if self.fully_replicated:
            return (
                f"ledger {self.ledger_id} is fully replicated: every entry 0..{self.last_entry} is on its "
                f"{self.write_quorum} bookies"
            )
        under = [r for f in self.fragments for r in f.under_replicated]
        lost = [r for f in self.fragments for r in f.lost]
        parts = [f"ledger {self.ledger_id} is under-replicated: {count(tuple(under))} entries ({format_runs(under)}) "
                 f"have fewer than {self.write_quorum} copies"]
        if lost:
            parts.append(f"{count(tuple(lost))} entries ({format_runs(lost)}) have no copy on any reachable bookie")
        if self.unreachable():
            parts.append(f"unreachable: {', '.join(self.unreachable())}")
        missing = self.missing_by_bookie()
        if missing:
            parts.append("missing entries on " + ", ".join(f"{b} ({n})" for b, n in sorted(missing.items())))
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "ledger_id": self.ledger_id,
            "state": self.state,
            "last_entry": self.last_entry,
            "write_quorum": self.write_quorum,
            "fully_replicated": self.fully_replicated,
            "unreachable": self.unreachable(),
            "missing_by_bookie": self.missing_by_bookie(),
            "fragments": [f.to_json() for f in self.fragments],
            "summary": self.summary(),
        }


async def list_held(pool: BookiePool, bookie_id: str, ledger_id: int, first: int, last: int) -> tuple[np.ndarray, bool]:
    """The entries of ``first..last`` ``bookie_id`` holds, and whether the ledger is in limbo
    there. ConnectionError (or trio.TooSlowError) when it cannot be asked; a bookie that
    does not know the ledger holds nothing."""
    conn = await pool.get(bookie_id)
    held: list[np.ndarray] = []
    limbo = False
    start = first
    while start != -1:
        r = await conn.submit_list_entries(ledger_id, start, last, timeout_s=LIST_TIMEOUT_S).wait()
        if r.status == Status.NO_LEDGER:
            break
        if r.status != Status.OK:
            raise ConnectionError(f"LIST_ENTRIES answered {r.status.name}: {r.message}")
        limbo = limbo or r.limbo
        held.extend(np.arange(a, b + 1, dtype=np.int64) for a, b in r.runs)
        start = r.next_first
    return (np.concatenate(held) if held else np.empty(0, dtype=np.int64)), limbo


async def _last_held(pool: BookiePool, md: LedgerMetadata) -> int:
    """The last entry any bookie of an open ledger's last fragment holds (READ_LAC reports it)."""
    first, ensemble = md.fragments[-1]
    last = first - 1

    async def ask(bookie_id: str) -> None:
        nonlocal last
        try:
            conn = await pool.get(bookie_id)
            r = await conn.submit_read_lac(md.ledger_id, timeout_s=LIST_TIMEOUT_S).wait()
        except (ConnectionError, trio.TooSlowError):
            return  # reported as unreachable by the check itself
        if r.status == Status.OK:
            last = max(last, r.last_entry)

    async with trio.open_nursery() as nursery:
        for b in ensemble:
            nursery.start_soon(ask, b)
    return last


async def check_ledger(pool: BookiePool, md: LedgerMetadata) -> LedgerCheck:
    """Ask every replica of every fragment of ``md`` which entries it holds (in parallel)."""
    w = md.write_quorum
    bounds = [first - 1 for first, _ in md.fragments[1:]]
    held: dict[tuple[int, str], tuple[np.ndarray, bool] | str] = {}

    async def ask(index: int, bookie_id: str, first: int, last: int) -> None:
        try:
            held[(index, bookie_id)] = await list_held(pool, bookie_id, md.ledger_id, first, last)
        except (ConnectionError, trio.TooSlowError) as e:
            held[(index, bookie_id)] = str(e) or type(e).__name__

    # The last fragment ends at the ledger's last entry, or (open) at the last one held there.
    end = md.last_entry_id if md.closed else await _last_held(pool, md)
    bounds.append(end)

    async with trio.open_nursery() as nursery:
        for index, ((first, ensemble), last) in enumerate(zip(md.fragments, bounds)):
            if last < first:
                continue
            for b in ensemble:
                if (index, b) not in held:
                    nursery.start_soon(ask, index, b, first, last)

    fragments = []
    for index, ((first, ensemble), last) in enumerate(zip(md.fragments, bounds)):
        ids = np.arange(first, last + 1, dtype=np.int64)
        copies = np.zeros(ids.size, dtype=np.int64)
        replicas = []
        for pos, b in enumerate(ensemble):
            expected = ids[stored_at(pos, ids, len(ensemble), w)]
            got = held[(index, b)] if ids.size else (np.empty(0, dtype=np.int64), False)
            if isinstance(got, str):
                replicas.append(ReplicaCheck(b, got, expected.size, runs_of(expected)))
                continue
            entries, limbo = got
            has = np.isin(expected, entries)
            copies[np.isin(ids, expected[has])] += 1
            replicas.append(ReplicaCheck(b, "", expected.size, runs_of(expected[~has]), limbo))
        fragments.append(
            FragmentCheck(
                first_entry=first,
                last_entry=last,
                ensemble=tuple(ensemble),
                replicas=tuple(replicas),
                under_replicated=runs_of(ids[copies < w]),
                lost=runs_of(ids[copies == 0]),
            )
        )
    return LedgerCheck(
        ledger_id=md.ledger_id, state=md.state.value, last_entry=end, write_quorum=w, fragments=tuple(fragments)
    )
