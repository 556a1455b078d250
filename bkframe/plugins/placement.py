"""Built-in placement policies: ``random``, ``least_used`` and ``rack_aware``.

``random`` (the default) is :class:`RandomPlacement`. ``least_used``
takes the bookies holding the fewest ledgers; the figure is what each bookie reports in
GET_BOOKIE_INFO (``ledgers``: the ledgers in its storage), which the client asks for while
it connects to the candidates anyway, caches a few seconds and bumps for each ledger it
places itself -- one cheap request per bookie, instead of reading every ledger's metadata.
``rack_aware`` makes every write set span ``min_racks`` racks (bookies register a rack
label: ``[bookie] rack``), when the registered bookies allow it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import attrs

from bkframe.core.config import NoConfig, at_least
from bkframe.core.hookspecs import hookimpl
from bkframe.core.interfaces.placement import Candidate, PlacementError, healthy_first, shuffled, too_few, write_sets
from bkframe.core.registry import ComponentRegistry

log = logging.getLogger("bkframe.placement")

#: Choices the rack-aware search tries before it gives up (it tries one bookie per rack at
#: each position and finds a feasible ensemble in about E steps; this bounds the time an
#: infeasible shape costs on the event loop to some tens of milliseconds).
MAX_SEARCH_STEPS = 5000


class _Counted:
    """A built-in policy's two choices, each made once there are candidates enough for it
    (:func:`too_few` otherwise): the policy itself chooses in :meth:`_new_ensemble` and
    :meth:`_replacements`."""

    wants_load = False

    def new_ensemble(self, candidates: Sequence[Candidate], *, ensemble_size: int, write_quorum: int) -> list[str]:
        if len(candidates) < ensemble_size:
            raise too_few(ensemble_size, candidates, f"an ensemble of {ensemble_size}")
        return self._new_ensemble(candidates, ensemble_size, write_quorum)

    def replacements(
        self,
        candidates: Sequence[Candidate],
        *,
        ensemble: Sequence[Candidate],
        failed: Sequence[int],
        write_quorum: int,
    ) -> dict[int, str]:
        if len(candidates) < len(failed):
            raise too_few(len(failed), candidates, f"replacing {len(failed)} bookie(s)")
        return self._replacements(candidates, ensemble, failed, write_quorum)

    def _new_ensemble(self, candidates: Sequence[Candidate], ensemble_size: int, write_quorum: int) -> list[str]:
        raise NotImplementedError

    def _replacements(
        self, candidates: Sequence[Candidate], ensemble: Sequence[Candidate], failed: Sequence[int], write_quorum: int
    ) -> dict[int, str]:
        raise NotImplementedError


class RandomPlacement(_Counted):
    """Random order, healthy bookies first: ledgers spread evenly over time, and a bookie
    that failed lately is taken only when no other is left (BookKeeper's default)."""

    def _order(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        """The candidates best first (a policy that only orders differently overrides this)."""
        return healthy_first(shuffled(candidates))

    def _new_ensemble(self, candidates: Sequence[Candidate], ensemble_size: int, write_quorum: int) -> list[str]:
        return [c.bookie_id for c in self._order(candidates)[:ensemble_size]]

    def _replacements(
        self, candidates: Sequence[Candidate], ensemble: Sequence[Candidate], failed: Sequence[int], write_quorum: int
    ) -> dict[int, str]:
        return {idx: c.bookie_id for idx, c in zip(failed, self._order(candidates))}


def _random(config: NoConfig) -> RandomPlacement:
    return RandomPlacement()


class LeastUsedPlacement(RandomPlacement):
    """The bookies holding the fewest ledgers, healthy ones first; ties in random order."""

    wants_load = True

    def _order(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        # Unknown load (the bookie did not answer GET_BOOKIE_INFO) sorts after known loads:
        # a bookie that does not answer is a poor choice anyway.
        return sorted(
            shuffled(candidates),
            key=lambda c: (c.quarantined, c.ledgers is None, c.ledgers or 0),
        )


def _least_used(config: NoConfig) -> LeastUsedPlacement:
    return LeastUsedPlacement()


@attrs.frozen
class RackAwareConfig:
    """The options of ``rack_aware`` (``[placement]`` keys, or ``open_client`` keywords)."""

    #: Every write set spans at least this many racks (at most W: a write set of W bookies
    #: cannot span more).
    min_racks: int = attrs.field(default=2, validator=at_least(1))
    #: When the registered bookies cannot give every write set ``min_racks`` racks: refuse
    #: (NotEnoughBookiesError) instead of logging a warning and spreading as well as possible.
    enforce_min_racks: bool = False


class RackAwarePlacement(_Counted):
    """Every write set (W consecutive bookies of the ensemble) spans ``min_racks`` racks.

    Bookies are tried healthy first, in random order; at each position a bookie from a rack
    its write sets do not have yet comes first. A depth-first search (one bookie per rack
    at each position: bookies of one rack are interchangeable for the rule) finds an
    ensemble that keeps the rule whenever one exists; replacements keep it in the write sets
    that hold the replaced positions. Without one: a warning and the most racks a greedy
    choice gives, or :class:`PlacementError` with ``enforce_min_racks``.
    """

    def __init__(self, config: RackAwareConfig) -> None:
        self.min_racks = config.min_racks
        self.enforce = config.enforce_min_racks

    def _new_ensemble(self, candidates: Sequence[Candidate], ensemble_size: int, write_quorum: int) -> list[str]:
        slots: list[Candidate | None] = [None] * ensemble_size
        what = f"a new ensemble of {ensemble_size} (write quorum {write_quorum})"
        placed = self._place(candidates, slots, list(range(ensemble_size)), write_quorum, what)
        return [c.bookie_id for c in placed]

    def _replacements(
        self, candidates: Sequence[Candidate], ensemble: Sequence[Candidate], failed: Sequence[int], write_quorum: int
    ) -> dict[int, str]:
        slots: list[Candidate | None] = [None if i in failed else c for i, c in enumerate(ensemble)]
        what = f"replacing {', '.join(ensemble[i].bookie_id for i in failed)} in {[c.bookie_id for c in ensemble]}"
        placed = self._place(candidates, slots, list(failed), write_quorum, what)
        return {i: placed[i].bookie_id for i in failed}

    def _place(
        self, candidates: Sequence[Candidate], slots: list[Candidate | None], open_: list[int], w: int, what: str
    ) -> list[Candidate]:
        need = min(self.min_racks, w)
        windows = [ws for ws in write_sets(len(slots), w) if any(i in open_ for i in ws)]
        order = healthy_first(shuffled(candidates))
        racks = sorted({c.rack for c in candidates} | {c.rack for c in slots if c is not None})
        found = _search(order, list(slots), open_, windows, need) if len(racks) >= need else None
        if found is not None:
            return found
        message = (
            f"rack-aware placement: {what}: no choice gives every write set {need} racks "
            f"(the writable bookies and the rest of the ensemble span {len(racks)} rack(s): "
            f"{', '.join(repr(r) for r in racks)}); label more bookies with other racks ([bookie] rack)"
        )
        if self.enforce:
            raise PlacementError(message + ", or unset enforce_min_racks")
        log.warning("%s; spreading over as many racks as it can", message)
        return _greedy(order, list(slots), open_, windows)


def _by_rack_preference(
    order: list[Candidate], used: set[str], slots: list[Candidate | None], windows: list[tuple[int, ...]], i: int
) -> list[Candidate]:
    """For position ``i``: the first unused bookie of each (rack, quarantined) in ``order``
    (bookies of one rack are interchangeable for the rule), healthy first, then those whose
    rack the write sets holding ``i`` have least."""
    firsts: dict[tuple[str, bool], Candidate] = {}
    for c in order:
        if c.bookie_id not in used:
            firsts.setdefault((c.rack, c.quarantined), c)
    present = [_racks(slots, ws, but=i) for ws in windows if i in ws]
    return sorted(firsts.values(), key=lambda c: (c.quarantined, sum(c.rack in racks for racks in present)))


def _racks(slots: list[Candidate | None], ws: tuple[int, ...], *, but: int = -1) -> set[str]:
    """The racks of the filled positions of write set ``ws`` (except position ``but``)."""
    return {c.rack for j in ws if j != but and (c := slots[j]) is not None}


def _search(
    order: list[Candidate], slots: list[Candidate | None], open_: list[int], windows: list[tuple[int, ...]], need: int
) -> list[Candidate] | None:
    """Fill the ``open_`` positions so every write set in ``windows`` spans ``need`` racks."""
    used = {c.bookie_id for c in slots if c is not None}
    steps = 0

    def feasible(i: int) -> bool:
        for ws in windows:
            if i in ws:
                if len(_racks(slots, ws)) + sum(1 for j in ws if slots[j] is None) < need:
                    return False
        return True

    def fill(k: int) -> bool:
        nonlocal steps
        if k == len(open_):
            return True
        i = open_[k]
        for c in _by_rack_preference(order, used, slots, windows, i):
            steps += 1
            if steps > MAX_SEARCH_STEPS:
                return False
            slots[i] = c
            used.add(c.bookie_id)
            if feasible(i) and fill(k + 1):
                return True
            slots[i] = None
            used.discard(c.bookie_id)
        return False

    if not fill(0):
        return None
    return [c for c in slots if c is not None]


def _greedy(
    order: list[Candidate], slots: list[Candidate | None], open_: list[int], windows: list[tuple[int, ...]]
) -> list[Candidate]:
    """Each open position in turn gets the bookie whose rack its write sets have least
    (healthy first among those)."""
    for i in open_:
        used = {s.bookie_id for s in slots if s is not None}
        present = [_racks(slots, ws, but=i) for ws in windows if i in ws]
        free = [c for c in order if c.bookie_id not in used]
        slots[i] = min(free, key=lambda c: (sum(c.rack in racks for racks in present), c.quarantined))
    return [c for c in slots if c is not None]


def _rack_aware(config: RackAwareConfig) -> RackAwarePlacement:
    return RackAwarePlacement(config)


@hookimpl
def bkframe_register_components(registry: ComponentRegistry) -> None:
    registry.add_placement_policy(
        "random", _random, config=NoConfig, description="random order, healthy bookies first (the default)"
    )
    registry.add_placement_policy(
        "least_used", _least_used, config=NoConfig,
        description="the bookies holding the fewest ledgers (GET_BOOKIE_INFO), healthy first",
    )
    registry.add_placement_policy(
        "rack_aware", _rack_aware, config=RackAwareConfig,
        description="every write set spans min_racks racks (bookies' [bookie] rack labels) when possible",
    )
