"""A failed entry-log write (a short write, then ENOSPC) under the default ledger storage,
with each entry-log manager: the add fails with a clear error, no later entry is indexed
at a wrong offset, and nothing stored before is lost, also across a reopen."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from bkframe_entrylog_per_ledger.manager import PerLedgerEntryLogManager

from bkframe.core.counters import Counters
from bkframe.core.interfaces.entry_log import EntryLogManager
from bkframe.plugins.entry_log_single import SingleEntryLogManager
from bkframe.plugins.ledger_storage_default import DefaultLedgerStorage
from bkframe.storage_kit.entry_log_files import EntryLogError
from bkframe.testing.faults import write_faults

MANAGERS = ["single", "per_ledger"]


def open_storage(root: Path, manager: str) -> DefaultLedgerStorage:
    counters = Counters()
    logs: EntryLogManager
    if manager == "single":
        logs = SingleEntryLogManager(root / "entrylogs", counters, max_log_size=64 * 1024)
    else:
        logs = PerLedgerEntryLogManager(root / "entrylogs", counters, max_log_size=64 * 1024)
    return DefaultLedgerStorage(root / "ledgers", logs, counters, compaction_threshold=0)


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The write-fault layer in this process; arm it by writing CONTROL/enospc."""
    control = tmp_path / "faults"
    control.mkdir()
    # Registered first so that monkeypatch puts the real functions back after the test.
    for name in ("write", "pwrite", "posix_fallocate", "fsync", "fdatasync"):
        monkeypatch.setattr(os, name, getattr(os, name))
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    assert write_faults.install_from_env()
    return control


def data(ledger: int, entry: int) -> bytes:
    return b"%d:%d|" % (ledger, entry) * (20 + entry % 50)


@pytest.mark.parametrize("manager", MANAGERS)
@pytest.mark.parametrize("fail_on", ["entries", "new log header"])
@pytest.mark.parametrize("failed_adds", [1, 2])
async def test_failed_write_fails_the_add_and_misplaces_nothing(
    tmp_path: Path, faults: Path, manager: str, fail_on: str, failed_adds: int
) -> None:
    storage = open_storage(tmp_path / "bookie", manager)
    for ledger in (1, 2):
        storage.ensure_ledger(ledger, b"k", 0)
    stored: dict[tuple[int, int], bytes] = {}
    if fail_on == "entries":
        for e in range(10):
            for ledger in (1, 2):
                storage.add_entries(ledger, [e], [data(ledger, e)])
                stored[(ledger, e)] = data(ledger, e)
    # A short write, then ENOSPC: the batches fail, with a message naming the cause.
    (faults / write_faults.ENOSPC_FILE).write_text("/entrylogs/")
    for e in (10, 11)[:failed_adds]:
        with pytest.raises(EntryLogError, match="No space left on device"):
            storage.add_entries(1, [e, e + 100], [data(1, e), data(1, e + 100)])
    (faults / write_faults.ENOSPC_FILE).unlink()
    # Space is back: later entries land where the index says.
    for e in range(12, 40):
        for ledger in (1, 2):
            storage.add_entries(ledger, [e], [data(ledger, e)])
            stored[(ledger, e)] = data(ledger, e)
    for (ledger, e), want in stored.items():
        assert storage.get_entry(ledger, e) == want, f"entry {ledger}:{e}"
    # What failed was not stored (nothing at all, not a piece of it).
    for e in (10, 11, 110, 111):
        assert storage.get_entry(1, e) is None
    await storage.checkpoint()
    await storage.aclose()
    reopened = open_storage(tmp_path / "bookie", manager)
    for (ledger, e), want in stored.items():
        assert reopened.get_entry(ledger, e) == want, f"entry {ledger}:{e} after reopen"
    await reopened.aclose()


@pytest.mark.parametrize("manager", MANAGERS)
async def test_no_room_for_the_index_fails_the_add_before_anything_is_stored(
    tmp_path: Path, faults: Path, manager: str
) -> None:
    """Index records go through a mapping of a sparse file: storing one into a hole on a
    full disk would be a SIGBUS. The storage allocates the blocks first, so a full disk
    is an error the add reports, and the entry log gets nothing of that batch."""
    storage = open_storage(tmp_path / "bookie", manager)
    storage.ensure_ledger(1, b"k", 0)
    storage.add_entries(1, [0], [data(1, 0)])
    logs_before = {p.name: p.stat().st_size for p in (tmp_path / "bookie" / "entrylogs").iterdir()}
    (faults / write_faults.ENOSPC_FILE).write_text("/index/")
    far = 5_000_000  # far beyond the records allocated so far
    with pytest.raises(OSError, match="No space left on device"):
        storage.add_entries(1, [far], [data(1, far)])
    assert {p.name: p.stat().st_size for p in (tmp_path / "bookie" / "entrylogs").iterdir()} == logs_before
    (faults / write_faults.ENOSPC_FILE).unlink()
    storage.add_entries(1, [far], [data(1, far)])
    assert storage.get_entry(1, 0) == data(1, 0) and storage.get_entry(1, far) == data(1, far)
    await storage.aclose()


async def test_a_failed_fsync_is_never_trusted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a failed fsync the kernel may have dropped the dirty pages, and a second fsync
    would "succeed" without writing them: no later checkpoint may claim them durable (the
    bookie's LastLogMark then stays put and the journal keeps the entries)."""
    storage = open_storage(tmp_path / "bookie", "single")
    storage.ensure_ledger(1, b"k", 0)
    storage.add_entries(1, [0], [data(1, 0)])
    real_fsync = os.fsync

    def failing_fsync(fd: int) -> None:
        if "/entrylogs/" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(EntryLogError, match="Input/output error"):
        await storage.checkpoint()
    monkeypatch.setattr(os, "fsync", real_fsync)
    with pytest.raises(EntryLogError, match="Restart the bookie"):
        await storage.checkpoint()
    # Reads and adds go on (the journal covers them until a restart).
    storage.add_entries(1, [1], [data(1, 1)])
    assert [storage.get_entry(1, e) for e in (0, 1)] == [data(1, 0), data(1, 1)]
