"""The key index (docs/compaction.md, "The key index"): each key's latest position, the same
whether the rows fit in memory or go through bucket files, split buckets and merged runs."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from bkframe.compaction.key_index import KeyIndex, hash_keys


def reference(rows: list[tuple[bytes, int]]) -> list[int]:
    latest: dict[bytes, int] = {}
    for key, pos in rows:
        latest[key] = pos
    return sorted(latest.values())


def workload(n: int, keys: int, seed: int) -> list[tuple[bytes, int]]:
    rng = random.Random(seed)
    pos = 0
    rows = []
    for _ in range(n):
        pos += rng.randint(1, 3)
        if rng.random() < 0.01:
            pos = ((pos >> 32) + 1) << 32  # the next segment
        rows.append((b"key-%d" % rng.randrange(keys), pos))
    return rows


def index_latest(
    tmp_path: Path, rows: list[tuple[bytes, int]], memory_bytes: int, bits: int, batch: int = 777
) -> tuple[list[int], KeyIndex]:
    index = KeyIndex(tmp_path / "work", memory_bytes=memory_bytes, fanout_bits=bits)
    for lo in range(0, len(rows), batch):
        part = rows[lo : lo + batch]
        index.add([k for k, _ in part], [p for _, p in part])
    got = [int(p) for chunk in index.latest(chunk_rows=1000) for p in chunk]
    return got, index


@pytest.mark.parametrize(("n", "keys", "memory", "bits"), [
    (5_000, 300, 128 << 20, 8),     # in memory: never spilled
    (60_000, 20_000, 256 << 10, 8),  # spilled to bucket files, several runs merged
    (60_000, 50_000, 256 << 10, 2),  # buckets too large for the memory: split again
], ids=["in-memory", "spilled", "split"])
def test_the_latest_position_of_each_key_whatever_the_memory(
    tmp_path: Path, n: int, keys: int, memory: int, bits: int
) -> None:
    rows = workload(n, keys, seed=n + bits)
    got, index = index_latest(tmp_path, rows, memory, bits)
    assert got == reference(rows)
    assert (index.spilled_rows > 0) == (memory < 1 << 20)
    index.close()
    assert not any((tmp_path / "work").rglob("*.rows")) and not any((tmp_path / "work").rglob("*.u64"))


def test_the_split_case_splits_and_merges_several_runs(tmp_path: Path) -> None:
    rows = workload(60_000, 50_000, seed=60_002)
    index = KeyIndex(tmp_path / "w", memory_bytes=256 << 10, fanout_bits=2)
    index.add([k for k, _ in rows], [p for _, p in rows])
    index._spill()
    sizes = [f.stat().st_size for f in (tmp_path / "w" / "b").glob("*.rows")]
    assert max(sizes) * 4 > index.memory_bytes  # the parametrized case reaches the split
    assert sum(len(c) for c in index.latest()) == len(reference(rows))
    assert len(index._runs) > 1


def test_positions_must_come_in_order_once(tmp_path: Path) -> None:
    index = KeyIndex(tmp_path, memory_bytes=1 << 20)
    index.add([b"a", b"b"], [5, 9])
    with pytest.raises(ValueError, match="ascending"):
        index.add([b"c"], [9])
    with pytest.raises(ValueError, match="ascending"):
        index.add([b"c", b"d"], [12, 11])
    with pytest.raises(ValueError, match="2 keys but 1 positions"):
        index.add([b"c", b"d"], [20])
    with pytest.raises(ValueError, match="at least"):
        KeyIndex(tmp_path, memory_bytes=1000)


def test_a_key_hash_is_its_blake2b_and_tells_keys_apart() -> None:
    h1, h2 = hash_keys([b"a", b"b", b"a"])
    assert h1.dtype == np.uint64 and h1[0] == h1[2] and (h1[0], h2[0]) != (h1[1], h2[1])
    import hashlib

    digest = hashlib.blake2b(b"a", digest_size=16).digest()
    assert (int(h1[0]), int(h2[0])) == (int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big"))
