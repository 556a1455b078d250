from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bkframe.bookie.durability.sync_cursor import SyncCursor


def test_in_order_and_out_of_order() -> None:
    c = SyncCursor()
    c.synced([0, 1])
    assert c.last_add_synced == 1
    c.synced([5, 6])
    c.synced([3])
    assert (c.last_add_synced, c.ranges) == (1, [(3, 3), (5, 6)])
    c.synced([2])
    assert (c.last_add_synced, c.ranges) == (3, [(5, 6)])
    c.synced([4])
    assert (c.last_add_synced, c.ranges) == (6, [])


def test_lac_advances_the_cursor() -> None:
    c = SyncCursor()
    c.synced([10, 11])
    c.confirmed(8)
    assert c.last_add_synced == 8
    c.confirmed(9)
    assert (c.last_add_synced, c.ranges) == (11, [])
    c.confirmed(5)  # never backwards
    assert c.last_add_synced == 11


@given(st.permutations(range(60)), st.integers(1, 60))
def test_any_order_ends_at_the_longest_prefix(order: list[int], upto: int) -> None:
    c = SyncCursor()
    done = set()
    for e in order[:upto]:
        c.synced([e])
        done.add(e)
        prefix = -1
        while prefix + 1 in done:
            prefix += 1
        assert c.last_add_synced == prefix
        assert all(a > prefix + 1 and a <= b for a, b in c.ranges)
