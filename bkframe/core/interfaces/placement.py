"""Placement policies: which bookies hold a ledger's entries (the plugin API).

A :class:`PlacementPolicy` chooses bookies for (a) a new ledger's ensemble, (b) an ensemble
change (bookies of the current ensemble failed) and (c) re-replication (a fragment's lost
replica is copied elsewhere: the same call as (b), the fragment's other replicas being the
ensemble and the bookies to avoid left out of the candidates). Policies are pure choices
over :class:`Candidate` lists: the client (``bkframe.client.placement``) gathers the
candidates -- registered, writable, not excluded, with their rack, quarantine and load --
checks that the chosen ones are reachable, and asks again without those that are not. So
a policy never sees a read-only (or decommissioned) bookie and never does I/O.

Policies are registered by name in the ``bkframe_register_components`` hook
(``registry.add_placement_policy(name, factory, config=C)``); the client picks one by its
``placement`` setting and validates the policy's options against ``C``. Built-ins
(:mod:`bkframe.plugins.placement`): ``random`` (the default, ``RandomPlacement``),
``least_used`` and ``rack_aware``. The write-set helpers below are for policy authors.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

import attrs

from bkframe.errors import NotEnoughBookiesError

#: The name of the policy a client uses unless told otherwise.
DEFAULT_POLICY = "random"


@attrs.frozen
class Candidate:
    """A bookie a policy may choose (or, in ``ensemble``, one already chosen)."""

    bookie_id: str
    #: Its registered rack label; "" (no label) is one rack of its own, the default rack.
    rack: str = ""
    #: It failed a request lately (see ``bkframe.client.bookies.health``): take it last.
    quarantined: bool = False
    #: Ledgers it holds, as it last reported (GET_BOOKIE_INFO), plus those this client has
    #: placed on it since; None when unknown (filled only for policies with ``wants_load``).
    ledgers: int | None = None


class PlacementError(NotEnoughBookiesError):
    """No choice satisfies the policy (e.g. too few racks and ``enforce_min_racks``)."""


@runtime_checkable
class PlacementPolicy(Protocol):
    """Chooses bookies; raise :class:`~bkframe.errors.NotEnoughBookiesError` (or
    :class:`PlacementError`) with a clear message when the candidates do not allow a choice.

    ``candidates`` come in registration order (a policy orders them itself) and never
    include a bookie of ``ensemble``; at least the needed number are passed or the client
    says so itself before asking.
    """

    @property
    def wants_load(self) -> bool:
        """Whether the client should fill :attr:`Candidate.ledgers` (one GET_BOOKIE_INFO per
        candidate, cached a few seconds)."""
        ...

    def new_ensemble(self, candidates: Sequence[Candidate], *, ensemble_size: int, write_quorum: int) -> list[str]:
        """``ensemble_size`` distinct bookie ids from ``candidates``, in ensemble order
        (entry e goes to the ``write_quorum`` bookies from index e mod E on)."""
        ...

    def replacements(
        self,
        candidates: Sequence[Candidate],
        *,
        ensemble: Sequence[Candidate],
        failed: Sequence[int],
        write_quorum: int,
    ) -> dict[int, str]:
        """A bookie id from ``candidates`` for each index of ``failed`` (all distinct).
        ``ensemble`` is the current ensemble (rack labels of its registered members filled in)."""
        ...


def write_sets(ensemble_size: int, write_quorum: int) -> list[tuple[int, ...]]:
    """The distinct write sets of an ensemble, as index tuples: W consecutive indices
    (cyclic) from each index on (one set, the whole ensemble, when E = W)."""
    seen: set[frozenset[int]] = set()
    out: list[tuple[int, ...]] = []
    for start in range(ensemble_size):
        ws = tuple((start + i) % ensemble_size for i in range(write_quorum))
        if frozenset(ws) not in seen:
            seen.add(frozenset(ws))
            out.append(ws)
    return out


def racks_spanned(racks: Sequence[str], write_quorum: int) -> int:
    """The fewest distinct racks any write set of an ensemble with these racks spans."""
    return min(len({racks[i] for i in ws}) for ws in write_sets(len(racks), write_quorum))


def healthy_first(candidates: Iterable[Candidate]) -> list[Candidate]:
    """``candidates`` in their order, quarantined ones last (stable)."""
    candidates = list(candidates)
    return [c for c in candidates if not c.quarantined] + [c for c in candidates if c.quarantined]


def shuffled(candidates: Iterable[Candidate]) -> list[Candidate]:
    out = list(candidates)
    random.shuffle(out)
    return out


def too_few(needed: int, candidates: Sequence[Candidate], what: str) -> NotEnoughBookiesError:
    return NotEnoughBookiesError(f"{what} needs {needed} writable bookies, {len(candidates)} are available")
