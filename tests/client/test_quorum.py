"""The quorum coverage rule LAC reads and long polls decide by (:func:`bkframe.client.quorum.covered`),
checked against what it promises: any A bookies of a write set include one heard from."""

from __future__ import annotations

from itertools import combinations

import pytest

from bkframe.client.distribution import write_set
from bkframe.client.quorum import covered


def _promise(e: int, w: int, a: int, heard: set[int]) -> bool:
    """Every ack quorum (A bookies of an entry's write set) has one of ``heard`` in it."""
    return all(
        any(b in heard for b in acked)
        for entry in range(e)
        for acked in combinations(write_set(entry, e, w), a)
    )


@pytest.mark.parametrize(("e", "w", "a"), [(3, 3, 2), (3, 2, 2), (5, 3, 2), (4, 3, 1), (5, 5, 3), (1, 1, 1)])
def test_covered_is_exactly_every_ack_quorum_meeting_a_bookie_heard_from(e: int, w: int, a: int) -> None:
    for size in range(e + 1):
        for heard in map(set, combinations(range(e), size)):
            assert covered(e, w, a, heard) == _promise(e, w, a, heard), (e, w, a, heard)


def test_covered_examples() -> None:
    assert not covered(3, 3, 2, {2}) and covered(3, 3, 2, {0, 2})  # E3 W3 A2: any two of three
    assert not covered(5, 3, 2, {0, 2, 3})  # write set (4, 0, 1) could have been acked by 4 and 1
    assert covered(5, 3, 2, {0, 1, 2, 3})
