"""The contract every ledger storage keeps (:class:`~bkframe.core.interfaces.ledger_storage.LedgerStorage`),
as a test suite a storage plugin runs on its own implementation.

Subclass in a test module of your plugin and provide the ``storage_factory`` fixture: a
function ``(directory, counters) -> LedgerStorage`` making a new storage object over
``directory`` (called again to reopen it: after ``aclose``, or without it, as after a
crash)::

    class TestMyStorage(LedgerStorageContract):
        @pytest.fixture
        def storage_factory(self):
            return lambda directory, counters: MyStorage(directory, counters)

A storage that writes through an entry-log manager makes one over a subdirectory of
``directory`` (see ``tests/plugins/test_ledger_storage_default.py``). Garbage collection,
compaction and crash damage are each storage's own business, for its own tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from bkframe.core.counters import Counters
from bkframe.core.interfaces.ledger_storage import LedgerStorage

StorageFactory = Callable[[Path, Counters], LedgerStorage]


def payload(ledger_id: int, entry_id: int) -> bytes:
    # Varying sizes, including empty, so offsets are not all equal strides.
    return f"{ledger_id}:{entry_id}:".encode() * (entry_id % 7)


class LedgerStorageContract:
    """What every ledger storage does; see the module docstring."""

    @pytest.fixture
    def storage_factory(self) -> StorageFactory:
        raise NotImplementedError("a subclass provides storage_factory(directory, counters) -> LedgerStorage")

    async def test_is_a_ledger_storage(self, storage_factory: StorageFactory, tmp_path: Path) -> None:
        storage = storage_factory(tmp_path, Counters())
        assert isinstance(storage, LedgerStorage)
        await storage.aclose()

    async def test_interleaved_ledgers_round_trip(self, storage_factory: StorageFactory, tmp_path: Path) -> None:
        storage = storage_factory(tmp_path, Counters())
        ledgers = [3, 10, 2**40 + 5]
        for lid in ledgers:
            storage.ensure_ledger(lid, b"key", 1)
        # Batches of the three ledgers alternate, so their records interleave in one log.
        for start in range(0, 300, 25):
            for lid in ledgers:
                ids = list(range(start, start + 25))
                written = storage.add_entries(lid, ids, [payload(lid, e) for e in ids])
                assert written >= sum(len(payload(lid, e)) for e in ids)
        for lid in ledgers:
            assert storage.last_entry_id(lid) == 299
            for e in range(300):
                assert storage.get_entry(lid, e) == payload(lid, e)
        assert sorted(storage.ledgers()) == sorted(ledgers)
        await storage.aclose()

    async def test_overwrite_and_missing_entries(self, storage_factory: StorageFactory, tmp_path: Path) -> None:
        storage = storage_factory(tmp_path, Counters())
        storage.ensure_ledger(1, b"k", 0)
        storage.add_entries(1, [0, 1, 2], [b"a", b"b", b"c"])
        storage.add_entries(1, [1], [b"B-rewritten"])
        assert storage.get_entry(1, 1) == b"B-rewritten"
        assert storage.get_entry(1, 0) == b"a"
        storage.add_entries(1, [4], [b""])  # an empty entry is held, not absent
        assert storage.get_entry(1, 4) == b""
        assert storage.get_entry(1, 3) is None
        assert storage.get_entry(1, 10**6) is None
        assert storage.get_entry(1, -1) is None
        assert storage.get_entry(99, 0) is None
        assert storage.last_entry_id(99) == -1
        assert storage.ledger_state(99) is None
        with pytest.raises(ValueError):
            storage.add_entries(1, [-2], [b"x"])  # an entry it can never hold (answered BAD_REQUEST)
        await storage.aclose()

    async def test_held_entries_lists_what_is_held_in_a_range(
        self, storage_factory: StorageFactory, tmp_path: Path
    ) -> None:
        storage = storage_factory(tmp_path, Counters())
        storage.ensure_ledger(1, b"k", 0)
        ids = [0, 1, 2, 5, 9, 10, 400]
        storage.add_entries(1, ids, [b"x%d" % e for e in ids])
        assert list(storage.held_entries(1, 0, 1000)) == ids
        assert list(storage.held_entries(1, 2, 9)) == [2, 5, 9]
        assert list(storage.held_entries(1, 3, 4)) == []
        assert list(storage.held_entries(7, 0, 10)) == []
        await storage.aclose()

    async def test_state_survives_checkpoint_and_reopen(self, storage_factory: StorageFactory, tmp_path: Path) -> None:
        storage = storage_factory(tmp_path, Counters())
        key = bytes(range(64))
        state = storage.ensure_ledger(5, key, 7)
        assert (state.master_key, state.ledger_type, state.fenced, state.lac) == (key, 7, False, -1)
        assert storage.ensure_ledger(5, b"other", 1).master_key == key, "an existing key is kept"
        assert storage.set_fenced(5) is True
        assert storage.set_fenced(5) is False
        storage.set_lac(5, 41)
        storage.set_lac(5, 12)  # never lowers
        storage.ensure_ledger(6, b"", 0)
        storage.ensure_ledger(6, b"late-key", 3)  # keyless ledger adopts the first key offered
        storage.set_limbo(5, True)
        storage.set_write_closed(5)
        await storage.checkpoint()

        # A fresh storage over the same directory, without closing the first: a crash after checkpoint.
        crashed = storage_factory(tmp_path, Counters())
        s5, s6 = crashed.ledger_state(5), crashed.ledger_state(6)
        assert s5 is not None and s6 is not None
        assert (s5.master_key, s5.fenced, s5.lac, s5.ledger_type, s5.limbo, s5.write_closed) == (key, True, 41, 7, True, True)
        assert (s6.master_key, s6.ledger_type) == (b"late-key", 3)
        await crashed.aclose()
        await storage.aclose()

    async def test_entries_survive_crash_after_checkpoint_and_clean_close(
        self, storage_factory: StorageFactory, tmp_path: Path
    ) -> None:
        rng = random.Random(1)
        storage = storage_factory(tmp_path, Counters())
        expected: dict[tuple[int, int], bytes] = {}
        for _ in range(40):
            lid = rng.choice([1, 2, 3])
            storage.ensure_ledger(lid, b"k", 0)
            ids = rng.sample(range(200), 10)
            datas = [rng.randbytes(rng.randrange(0, 300)) for _ in ids]
            storage.add_entries(lid, ids, datas)
            expected.update({(lid, e): d for e, d in zip(ids, datas)})
        await storage.checkpoint()

        def check(s: LedgerStorage) -> None:
            for (lid, e), data in expected.items():
                assert s.get_entry(lid, e) == data
            for lid in (1, 2, 3):
                assert s.last_entry_id(lid) == max(e for (ledger, e) in expected if ledger == lid)

        crashed = storage_factory(tmp_path, Counters())
        check(crashed)
        await crashed.aclose()
        await storage.aclose()
        reopened = storage_factory(tmp_path, Counters())
        check(reopened)
        await reopened.aclose()

    async def test_delete_ledger(self, storage_factory: StorageFactory, tmp_path: Path) -> None:
        storage = storage_factory(tmp_path, Counters())
        storage.ensure_ledger(1, b"k", 0)
        storage.ensure_ledger(2, b"k", 0)
        storage.add_entries(1, [0], [b"gone"])
        storage.delete_ledger(1)
        storage.delete_ledger(1)  # forgetting twice is harmless
        assert storage.ledger_state(1) is None
        assert storage.get_entry(1, 0) is None
        assert list(storage.ledgers()) == [2]
        await storage.aclose()
        reopened = storage_factory(tmp_path, Counters())
        assert list(reopened.ledgers()) == [2]
        await reopened.aclose()
