"""Which bookies of an ensemble hold which entry: round-robin striping, as BookKeeper's
``RoundRobinDistributionSchedule``.

In a fragment with ensemble size E and write quorum W, entry e goes to the W bookies at
ensemble indices ``e mod E, e+1 mod E, ..., e+W-1 mod E`` (its *write set*). With E = W
every bookie holds every entry.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def write_set(entry_id: int, ensemble_size: int, write_quorum: int) -> list[int]:
    """Indices into the ensemble of the bookies that store ``entry_id``."""
    return [(entry_id + i) % ensemble_size for i in range(write_quorum)]


def replicas(ensemble: Sequence[str], entry_id: int, write_quorum: int) -> list[str]:
    """The bookies of ``ensemble`` that store ``entry_id``, in write-set order."""
    return [ensemble[i] for i in write_set(entry_id, len(ensemble), write_quorum)]


def stored_at(index: int, entry_ids: np.ndarray, ensemble_size: int, write_quorum: int) -> np.ndarray:
    """A mask of the ``entry_ids`` whose write set holds ensemble index ``index`` (vectorized
    :func:`write_set`: entry x goes to the W bookies from x mod E on)."""
    return np.asarray((index - entry_ids) % ensemble_size < write_quorum)
