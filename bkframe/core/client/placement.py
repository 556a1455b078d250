"""Choosing bookies: a new ledger's ensemble, and replacements for bookies that failed.

Candidates are the registered writable bookies, in random order (to spread ledgers), with
those in quarantine last (see :mod:`.bookie_health`): a bookie that failed lately is used
only when no other is left. A candidate is taken only once a connection to it is open.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from bkframe.core.client.bookie_pool import BookiePool
from bkframe.core.metadata import MetadataStore
from bkframe.errors import NotEnoughBookiesError


async def _candidates(pool: BookiePool, metadata: MetadataStore, exclude: Collection[str]) -> list[str]:
    bookies = [b.bookie_id for b in await metadata.list_bookies(writable_only=True) if b.bookie_id not in exclude]
    random.shuffle(bookies)
    return pool.health.healthy_first(bookies)


async def _reachable(pool: BookiePool, bookie_id: str) -> str:
    """'' once connected, else why not (the pool quarantined it)."""
    try:
        await pool.get(bookie_id)
    except ConnectionError as e:
        return f"{bookie_id}: {e}"
    return ""


async def choose_ensemble(pool: BookiePool, metadata: MetadataStore, size: int) -> list[str]:
    """``size`` reachable, writable bookies for a new ledger."""
    candidates = await _candidates(pool, metadata, ())
    chosen: list[str] = []
    for bookie_id in candidates:
        if len(chosen) == size:
            break
        if not await _reachable(pool, bookie_id):
            chosen.append(bookie_id)
    if len(chosen) < size:
        raise NotEnoughBookiesError(
            f"ensemble of {size} needs {size} writable bookies, {len(chosen)} are reachable "
            f"({len(candidates)} registered)"
        )
    return chosen


async def choose_replacements(
    pool: BookiePool,
    metadata: MetadataStore,
    ensemble: Sequence[str],
    failed: Sequence[int],
    *,
    exclude: Collection[str] = (),
    what: str = "ensemble change",
) -> list[str]:
    """``ensemble`` with a reachable, writable bookie in place of each index in ``failed``,
    taken from outside the ensemble and ``exclude``."""
    new = list(ensemble)
    candidates = await _candidates(pool, metadata, {*ensemble, *exclude})
    unreachable: list[str] = []
    for idx in failed:
        while candidates:
            candidate = candidates.pop(0)
            why_not = await _reachable(pool, candidate)
            if not why_not:
                new[idx] = candidate
                break
            unreachable.append(why_not)
        else:
            raise NotEnoughBookiesError(
                f"{what}: no reachable writable bookie left to replace {ensemble[idx]} "
                f"(ensemble {list(ensemble)}; unreachable: {'; '.join(unreachable) or 'none'}); "
                f"start more bookies or free disk space on read-only ones"
            )
    return new
