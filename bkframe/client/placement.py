"""Choosing bookies: a new ledger's ensemble, and replacements for bookies that failed (an
ensemble change, recovery's write-back, or re-replication of a lost bookie's fragments).

The choice itself is the client's placement policy's (:mod:`bkframe.core.interfaces.placement`; it
travels with the pool). Here are the rules no policy can change: candidates are the
registered *writable* bookies (read-only and decommissioned ones are never listed by
``list_bookies(writable_only=True)``), minus the ensemble and ``exclude``, flagged when in
quarantine (:mod:`bkframe.client.bookies.health`), with their rack label; and a chosen bookie is taken only
once a connection to it is open -- an unreachable one is dropped and the policy asked again.

A new ledger takes its candidates from the client's cached listing (:mod:`bkframe.client.bookies.listing`), so
a create reads no bookie list; with too few there, it lists them afresh once before giving
up. Replacements (ensemble change, recovery, re-replication) always list them afresh.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import anyio

from bkframe.client.bookies.listing import BookieView
from bkframe.client.bookies.pool import BookiePool
from bkframe.core.interfaces.placement import Candidate
from bkframe.errors import NotEnoughBookiesError, PluginError

#: How long a bookie's reported ledger count is trusted (least-used placement).
LOAD_TTL_S = 5.0
#: How long a bookie may take to report its ledger count.
LOAD_TIMEOUT_S = 2.0


def _checked(chosen: Sequence[str], candidates: Sequence[Candidate], needed: int, policy: object) -> None:
    """A policy chooses among the candidates only (never a read-only bookie), each once."""
    allowed = {c.bookie_id for c in candidates}
    if len(chosen) != needed or len(set(chosen)) != needed or not set(chosen) <= allowed:
        raise PluginError(
            f"placement policy {type(policy).__name__} chose {list(chosen)}: it must choose {needed} distinct "
            f"bookies among the candidates {sorted(allowed)}"
        )


async def _with_load(pool: BookiePool, candidates: list[Candidate]) -> list[Candidate]:
    """``candidates`` with the ledger count each reports. A count not known yet is asked for
    now (a new bookie, or a client's first create); one older than ``LOAD_TTL_S`` is asked
    for again in the background while this choice uses it, so creates do not wait on the
    bookies once the client knows them."""
    now = anyio.current_time()
    counts = pool.ledger_counts

    async def ask(bookie_id: str) -> None:
        try:
            conn = await pool.get(bookie_id)
            info = await conn.info(timeout_s=LOAD_TIMEOUT_S)
            counts[bookie_id] = (int(info.get("ledgers", 0)), anyio.current_time())
        except ConnectionError as e:
            # Unknown load; quarantined, so that the next choices do not wait for it again.
            pool.health.failed(bookie_id, f"GET_BOOKIE_INFO failed: {e}")
        finally:
            pool.asking_counts.discard(bookie_id)

    async with anyio.create_task_group() as nursery:
        for c in candidates:
            if c.quarantined or c.bookie_id in pool.asking_counts:
                continue
            if c.bookie_id not in counts:
                pool.asking_counts.add(c.bookie_id)
                nursery.start_soon(ask, c.bookie_id)
            elif now - counts[c.bookie_id][1] > LOAD_TTL_S:
                pool.asking_counts.add(c.bookie_id)
                pool.nursery.start_soon(ask, c.bookie_id)
    return [
        Candidate(c.bookie_id, c.rack, c.quarantined, counts[c.bookie_id][0] if c.bookie_id in counts else None)
        for c in candidates
    ]


def _placed(pool: BookiePool, bookie_ids: Sequence[str]) -> None:
    """Count what this client just placed, so that a burst of new ledgers spreads before the
    bookies' own counts catch up (they count a ledger once it has entries)."""
    for b in bookie_ids:
        if b in pool.ledger_counts:
            count, at = pool.ledger_counts[b]
            pool.ledger_counts[b] = (count + 1, at)


async def _candidates(pool: BookiePool, view: BookieView, exclude: Collection[str]) -> list[Candidate]:
    """The writable bookies of ``view`` not in ``exclude``, with rack, quarantine (and load)."""
    candidates = [
        Candidate(b.bookie_id, b.rack, pool.health.quarantined(b.bookie_id)) for b in view.writable if b.bookie_id not in exclude
    ]
    if pool.placement.wants_load:
        candidates = await _with_load(pool, candidates)
    return candidates


async def _reachable(pool: BookiePool, bookie_id: str) -> str:
    """'' once connected, else why not (the pool quarantined it)."""
    try:
        await pool.get(bookie_id)
    except ConnectionError as e:
        return f"{bookie_id}: {e}"
    return ""


async def choose_ensemble(pool: BookiePool, size: int, *, write_quorum: int | None = None) -> list[str]:
    """``size`` reachable, writable bookies for a new ledger, as the client's placement
    policy orders them (``write_quorum``: the ledger's W, which rack-aware placement needs;
    by default ``size``)."""
    candidates = await _candidates(pool, await pool.bookies.view(), ())
    registered = len(candidates)
    listed_afresh = False
    unreachable: dict[str, str] = {}
    while True:
        if len(candidates) < size and not listed_afresh:
            # The cached listing may lack bookies registered since: look once more.
            listed_afresh = True
            fresh = await _candidates(pool, await pool.bookies.view(fresh=True), ())
            registered = len(fresh)
            candidates = [c for c in fresh if c.bookie_id not in unreachable]
        if len(candidates) < size:
            # Name them: "2 are reachable" alone leaves the user to find which one is missing.
            names = ", ".join(c.bookie_id for c in candidates) or "none"
            raise NotEnoughBookiesError(
                f"ensemble of {size} needs {size} writable bookies, {len(candidates)} are reachable: {names} "
                f"({registered} registered; unreachable: {'; '.join(unreachable.values()) or 'none'}); "
                + (
                    f"create the ledger with ensemble {len(candidates)} or fewer, or start more bookies"
                    if candidates
                    else "start bookies (bkframe bookie), or check that they can reach the metadata store"
                )
            )
        chosen = pool.placement.new_ensemble(candidates, ensemble_size=size, write_quorum=write_quorum or size)
        _checked(chosen, candidates, size, pool.placement)
        down = {b: why for b in chosen if (why := await _reachable(pool, b))}
        if not down:
            _placed(pool, chosen)
            return chosen
        unreachable.update(down)
        candidates = [c for c in candidates if c.bookie_id not in down]


async def choose_replacements(
    pool: BookiePool,
    ensemble: Sequence[str],
    failed: Sequence[int],
    *,
    exclude: Collection[str] = (),
    what: str = "ensemble change",
    write_quorum: int | None = None,
) -> list[str]:
    """``ensemble`` with a reachable, writable bookie in place of each index in ``failed``,
    taken from outside the ensemble and ``exclude``, as the placement policy chooses
    (``write_quorum``: the ledger's W, so rack-aware placement keeps every write set
    spanning its racks; by default ``len(ensemble)``, the whole ensemble as one set)."""
    # A failure path: the bookies as registered now, not as cached.
    view = await pool.bookies.view(fresh=True)
    candidates = await _candidates(pool, view, {*ensemble, *exclude})
    # The racks of the ensemble's bookies: registered ones, read-only included.
    racks = {b.bookie_id: b.rack for b in view.bookies}
    current = [Candidate(b, racks.get(b, ""), pool.health.quarantined(b)) for b in ensemble]
    unreachable: dict[str, str] = {}
    while True:
        if len(candidates) < len(failed):
            raise NotEnoughBookiesError(_no_replacement(what, view, ensemble, failed, exclude, unreachable))
        chosen = pool.placement.replacements(
            candidates, ensemble=current, failed=list(failed), write_quorum=write_quorum or len(ensemble)
        )
        if sorted(chosen) != sorted(failed):
            raise PluginError(f"placement policy {type(pool.placement).__name__} replaced {sorted(chosen)}, not {sorted(failed)}")
        _checked(list(chosen.values()), candidates, len(failed), pool.placement)
        down = {b: why for b in chosen.values() if (why := await _reachable(pool, b))}
        if not down:
            _placed(pool, list(chosen.values()))
            new = list(ensemble)
            for idx, bookie_id in chosen.items():
                new[idx] = bookie_id
            return new
        unreachable.update(down)
        candidates = [c for c in candidates if c.bookie_id not in down]


def _no_replacement(
    what: str,
    view: BookieView,
    ensemble: Sequence[str],
    failed: Sequence[int],
    exclude: Collection[str],
    unreachable: dict[str, str],
) -> str:
    """Why no bookie could replace the failed ones, bookie by bookie, and what would have
    survived: a user who lost one of three bookies under an ensemble of three needs to read
    that the ensemble left no spare, not only that bookies were lacking."""
    lost = [ensemble[i] for i in failed]
    writable = {b.bookie_id for b in view.writable}
    why: list[str] = []
    for bookie_id in sorted({b.bookie_id for b in view.bookies} | set(ensemble)):
        if bookie_id in lost:
            continue
        if bookie_id in ensemble:
            why.append(f"{bookie_id} is in the ensemble already")
        elif bookie_id in exclude:
            why.append(f"{bookie_id} is being replaced too")
        elif bookie_id not in writable:
            why.append(f"{bookie_id} is read-only or decommissioned")
        elif bookie_id in unreachable:
            why.append(f"{bookie_id} is unreachable ({unreachable[bookie_id].removeprefix(bookie_id + ': ')})")
    size = len(ensemble)
    known = len({b.bookie_id for b in view.bookies} | set(ensemble))
    if known <= size:
        advice = (
            f"with {known} bookies, an ensemble of {size} has no spare to replace a failed one: create ledgers with "
            f"ensemble {size - 1} or fewer (write and ack quorums at most that), or add a bookie"
        )
    else:
        advice = "start more bookies or free disk space on read-only ones"
    return (
        f"{what}: {', '.join(lost)} failed and no bookie can replace {'them' if len(lost) > 1 else 'it'} "
        f"(ensemble {list(ensemble)}; {'; '.join(why) or 'no other bookie is registered'}); {advice}"
    )
