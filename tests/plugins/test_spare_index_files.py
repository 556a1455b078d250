"""The ``default`` storage's spare index files: new ledgers' indexes made ahead of need by a
worker thread (so that a first add creates no file on the event loop), used again after a
restart, and not made on a disk with little free space."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
import trio

from bkframe.core.counters import Counters
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.plugins.ledger_storage_default import spare_index_files as spares_module
from bkframe.plugins.ledger_storage_default.ledger_index import index_path
from bkframe.testing.kit import wait_until


def open_storage(root: Path, spares: int) -> DefaultLedgerStorage:
    counters = Counters()
    logs = SingleEntryLogManager(root / "entrylogs", counters)
    return DefaultLedgerStorage(root / "ledgers", logs, counters, index_initial_entries=64, spare_index_files=spares)


async def wait_for_spares(storage: DefaultLedgerStorage, n: int) -> None:
    await wait_until(lambda: len(storage.spare_index_files) >= n, f"{n} spare index files", 10, every_s=0.01)


async def test_new_ledgers_take_spare_files_and_the_pool_is_refilled(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, spares=8)
    spare_dir = tmp_path / "ledgers" / spares_module.SPARE_DIR
    async with trio.open_nursery() as nursery:
        await nursery.start(storage.run)
        await wait_for_spares(storage, 8)
        inodes = {os.stat(p).st_ino for p in spare_dir.iterdir()}
        assert len(inodes) == 8
        for ledger in range(1, 11):  # more than the pool: it is refilled as it goes
            storage.ensure_ledger(ledger, b"k", 0)
            storage.add_entries(ledger, [0, 1], [b"a" * 10, b"b" * 20])
            await trio.sleep(0)
        # The first index files are spares renamed into place (the same files, not copies).
        assert os.stat(index_path(tmp_path / "ledgers" / "index", 1)).st_ino in inodes
        assert storage.spare_index_files.taken >= 4
        await wait_for_spares(storage, 8)
        nursery.cancel_scope.cancel()
    await storage.checkpoint()
    for ledger in range(1, 11):
        assert storage.get_entry(ledger, 1) == b"b" * 20
        assert storage.last_entry_id(ledger) == 1
    await storage.aclose()

    # A restart uses the spares left over; a file of another size there is deleted.
    (spare_dir / "stray.spare").write_bytes(b"x" * 10)
    left = sorted(p.name for p in spare_dir.iterdir() if p.name != "stray.spare")
    storage = open_storage(tmp_path, spares=8)
    async with trio.open_nursery() as nursery:
        await nursery.start(storage.run)
        assert sorted(p.name for p in spare_dir.iterdir()) == left
        assert len(storage.spare_index_files) == len(left)
        assert storage.get_entry(3, 0) == b"a" * 10  # the ledgers written before are all there
        storage.ensure_ledger(11, b"k", 0)
        storage.add_entries(11, [0], [b"c"])
        nursery.cancel_scope.cancel()
    assert storage.get_entry(11, 0) == b"c"
    await storage.aclose()


async def test_no_spares_on_a_disk_with_little_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spares_module, "MIN_FREE_BYTES", 1 << 62)
    storage = open_storage(tmp_path, spares=8)
    pool = storage.spare_index_files
    looks: list[tuple[list[Path], OSError | None]] = []
    make = pool._make

    def looked(n: int) -> tuple[list[Path], OSError | None]:  # in the filler's thread
        looks.append(made := make(n))
        return made

    monkeypatch.setattr(pool, "_make", looked)
    async with trio.open_nursery() as nursery:
        await nursery.start(storage.run)
        # The filler looked at the free space, and made nothing.
        await wait_until(lambda: looks, "the filler's first try", 10, every_s=0.01)
        assert all(look == ([], None) for look in looks) and len(pool) == 0
        storage.ensure_ledger(1, b"k", 0)
        storage.add_entries(1, [0], [b"x"])  # the index is made as before
        assert storage.spare_index_files.missed == 1
        nursery.cancel_scope.cancel()
    assert storage.get_entry(1, 0) == b"x"
    assert not any((tmp_path / "ledgers" / spares_module.SPARE_DIR).iterdir())
    await storage.aclose()


async def test_without_its_background_task_a_storage_makes_indexes_itself(tmp_path: Path) -> None:
    storage = open_storage(tmp_path, spares=8)
    storage.ensure_ledger(1, b"k", 0)
    storage.add_entries(1, [0, 5], [b"x", b"y"])
    assert storage.spare_index_files.taken == 0
    assert storage.last_entry_id(1) == 5
    await storage.aclose()


async def test_a_spare_that_cannot_be_opened_is_not_left_as_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = open_storage(tmp_path, spares=4)
    async with trio.open_nursery() as nursery:
        await nursery.start(storage.run)
        await wait_for_spares(storage, 4)
        real_open = os.open
        failed: list[str] = []

        def open_once_failing(path: Any, flags: int, *args: Any) -> int:
            if str(path).endswith(".idx") and os.path.exists(path) and not flags & os.O_CREAT and not failed:
                failed.append(str(path))
                raise OSError(errno.EIO, "injected: the renamed spare cannot be opened")
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", open_once_failing)
        storage.ensure_ledger(1, b"k", 0)
        storage.add_entries(1, [0], [b"x"])  # made the plain way instead
        monkeypatch.undo()
        nursery.cancel_scope.cancel()
    assert failed and storage.get_entry(1, 0) == b"x"
    await storage.checkpoint()
    await storage.aclose()
