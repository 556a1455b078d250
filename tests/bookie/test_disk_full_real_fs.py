"""A bookie on a real small filesystem (a tmpfs, and an ext4 image on a loop device with
1 KiB blocks) filled while ledgers are created, written, garbage-collected and reopened:
it never dies, turns read-only, serves every acknowledged entry byte for byte, and takes
writes again once space returns (issue 35: on a full 16 MiB tmpfs a bookie died of SIGBUS
reading sparse index tables through their mapping; on ext4 with blocks smaller than a page,
a write to a partly allocated page of a mapping does the same).

The index tables start tiny (16 entries), so that they grow (sparse) while the disk fills,
and recovery adds far beyond their ends grow them once it is full: every index then has
pages no block backs, which the GC's scan, the restart's check of each index and the reads
must never touch through the mapping. Adds go straight to the bookie, so that the test knows
exactly which were acknowledged.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import bkframe
from bkframe.client.bookies.connection import BookieClient
from bkframe.plugins.ledger_storage_default.ledger_index import HEADER_SIZE, RECORD_DTYPE, LedgerIndex
from bkframe.proto.codes import Status
from bkframe.storage_kit.mapped_file import PAGE, MappedFile
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.faults.small_fs import SmallFilesystem
from bkframe.testing.kit import wait_until
from tests.bookie.test_disk_full import _is, known, registered_read_only

MB = 1 << 20
SIZE = 8 * MB
KEY = b"k" * 20
ENTRY = 4096
#: Ledgers written from the start (their indexes grow), and how many entries each gets first.
GROWN = list(range(1, 7))
FIRST_ENTRIES = 40
#: A recovery add this far out grows an index by doubling to a table of mostly holes.
FAR = 5000


def data(ledger_id: int, entry_id: int) -> bytes:
    return (b"%d:%d:" % (ledger_id, entry_id)).ljust(ENTRY, bytes([ledger_id % 251]))


def config(path: Path, *, watching: bool) -> Path:
    """Blind (a disk check that never comes: only failing writes find the disk full) or
    watching (every 0.2 s); small index tables, journal files and entry logs, so that the
    disk fills with each kind of file and checkpoints and GC have something to free."""
    path.write_text(
        f"""
[bookie]
disk_check_interval_s = {0.2 if watching else 3600}
gc_interval_s = 0.5
checkpoint_interval_s = 0.5

[journal]
preallocate_bytes = 65536
max_file_size = 1048576

[entry_log_manager]
plugin = "single"
max_log_size = 262144

[ledger_storage]
index_initial_entries = 16
"""
    )
    return path


async def add_all(conn: BookieClient, adds: list[tuple[int, int]], acked: dict[tuple[int, int], bytes], *,
                  recovery: bool = False) -> int:
    """Send all ``adds`` at once; record the acknowledged ones in ``acked``. Any answer but
    OK or READ_ONLY fails the test. Returns how many were acknowledged."""
    sent = [
        (ledger, entry, conn.submit_add(ledger, entry, data(ledger, entry), master_key=KEY, recovery=recovery, timeout_s=60))
        for ledger, entry in adds
    ]
    ok = 0
    for ledger, entry, pending in sent:
        r = await pending.wait()
        assert r.status in (Status.OK, Status.READ_ONLY), (ledger, entry, r.status, r.message)
        if r.status == Status.OK:
            acked[(ledger, entry)] = data(ledger, entry)
            ok += 1
    return ok


async def check_reads(conn: BookieClient, acked: dict[tuple[int, int], bytes], deleted: set[int]) -> None:
    """Every acknowledged entry of a ledger not deleted reads back byte for byte, one by one
    (READ) and as ranges (READ_BATCH); a deleted ledger is gone."""
    by_ledger: dict[int, list[int]] = {}
    for ledger, entry in sorted(acked):
        by_ledger.setdefault(ledger, []).append(entry)
    for ledger, entries in by_ledger.items():
        if ledger in deleted:
            assert (await conn.read(ledger, entries[0], master_key=KEY, timeout_s=60)).status == Status.NO_LEDGER
            continue
        reads = [conn.submit_read(ledger, e, master_key=KEY, timeout_s=60) for e in entries]
        for e, pending in zip(entries, reads):
            r = await pending.wait()
            assert r.status == Status.OK and bytes(r.data) == acked[(ledger, e)], (ledger, e, r.status, r.message)
        # The first run of consecutive ids, as one range.
        run = next((i for i, (a, b) in enumerate(pairwise(entries)) if b != a + 1), len(entries) - 1)
        batch = await conn.submit_read_batch(ledger, entries[0], entries[run], master_key=KEY, timeout_s=60).wait()
        assert batch.status == Status.OK, (ledger, batch.status, batch.message)
        got = [(e, bytes(d)) for e, d in batch.entries]
        assert got and got == [(e, acked[(ledger, e)]) for e in entries[: len(got)]]
        # What the bookie says it holds (LIST_ENTRIES, as repair asks): exactly those.
        listed = await conn.submit_list_entries(ledger, 0, FAR + 100, timeout_s=60).wait()
        assert listed.status == Status.OK and listed.next_first == -1, (listed.status, listed.message)
        assert [e for a, b in listed.runs for e in range(a, b + 1)] == entries


async def state(conn: BookieClient) -> dict[str, Any]:
    return await conn.info(timeout_s=30)


def assert_alive(bookie: BookieProcess) -> None:
    """Still running: a SIGBUS (exit status -7) or any crash shows here, with its log."""
    if not bookie.running:
        assert bookie.proc is not None
        raise AssertionError(f"the bookie died (exit status {bookie.proc.returncode}):\n{bookie.log()[-3000:]}")


def start(bookie: BookieProcess, cfg: Path) -> None:
    # The faulting thread's stack in the log, should a page fault kill it.
    bookie.spawn("--config", str(cfg), env={"PYTHONFAULTHANDLER": "1"})
    bookie.wait_started()


async def fill_collect_reopen(fs: SmallFilesystem, tmp_path: Path, make_room: Any, procs: list[BookieProcess]) -> None:
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    small = BookieProcess(fs.path / "bookie", bookie_id="small", metadata=metadata, log_path=tmp_path / "small.log")
    procs.append(small)
    try:
        await _fill_collect_reopen(small, fs, tmp_path, make_room, metadata)
    except Exception as e:
        # A dead bookie first shows as a closed connection: say what killed it.
        if small.proc is not None and small.proc.poll() not in (None, -9, 0):
            raise AssertionError(f"the bookie died (exit status {small.proc.returncode}):\n{small.log()[-3000:]}") from e
        raise


async def _fill_collect_reopen(small: BookieProcess, fs: SmallFilesystem, tmp_path: Path, make_room: Any, metadata: str) -> None:
    start(small, config(tmp_path / "blind.toml", watching=False))
    acked: dict[tuple[int, int], bytes] = {}
    fresh = iter(range(100, 10_000))
    async with bkframe.open_client(metadata) as client:
        await known(client, GROWN, KEY, "small")
        conn = await client.pool.get("small")
        # Room: the grown ledgers' indexes double twice.
        await add_all(conn, [(g, e) for g in GROWN for e in range(FIRST_ENTRIES)], acked)
        assert len(acked) == len(GROWN) * FIRST_ENTRIES
        # Someone else's file takes all but 512 KiB: new ledgers (each a new index file) and
        # more entries until the disk is full, found by the writes themselves (the disk
        # check is blind).
        fs.fill(leave=512 * 1024)
        next_entry = FIRST_ENTRIES
        for _ in range(50):
            new = [next(fresh) for _ in range(8)]
            await known(client, new, KEY, "small")
            round_ = [(g, next_entry + i) for g in GROWN for i in range(2)] + [(n, e) for n in new for e in range(2)]
            next_entry += 2
            if await add_all(conn, round_, acked) < len(round_):
                break
        else:
            raise AssertionError("the disk never filled up")
        fs.fill()  # and whatever a checkpoint freed since
        # Recovery adds still reach storage on a read-only bookie: far ones grow every
        # grown index to a table of holes that cannot be allocated.
        assert await add_all(conn, [(g, FAR) for g in GROWN], acked, recovery=True) == 0
        assert_alive(small)
        info = await state(conn)
        assert info["read_only"] is True and "No space left" in info["read_only_reason"], info
        await wait_until(lambda: _is(registered_read_only(client, "small"), True), "the read-only registration")
        await check_reads(conn, acked, set())

        # GC on the full disk: half the ledgers are deleted; the pass scans every index.
        ledgers = sorted({ledger for ledger, _ in acked})
        deleted = set(ledgers[::2])
        last = max(deleted)
        for ledger in deleted - {last}:
            await client.delete_ledger(ledger)
        await wait_until(lambda: _gc_deleted(conn, len(deleted) - 1), "the GC pass on the full disk")
        # Another pass, a scan of every index again: the one that collects the last ledger.
        await client.delete_ledger(last)
        await wait_until(lambda: _gc_deleted(conn, len(deleted)), "another GC pass on the full disk")
        assert_alive(small)
        await check_reads(conn, acked, deleted)

    # Reopened on the full disk: SIGKILL (a journal to replay), full again, restarted.
    assert_alive(small)
    small.kill()
    fs.fill()
    start(small, config(tmp_path / "watching.toml", watching=True))
    async with bkframe.open_client(metadata) as client:
        conn = await client.pool.get("small")
        info = await state(conn)
        assert info["read_only"] is True, info
        await check_reads(conn, acked, deleted)  # opens every index: each is checked against its logs
        refused = await conn.add(GROWN[1], FAR, data(GROWN[1], FAR), master_key=KEY, timeout_s=60)
        assert refused.status == Status.READ_ONLY, (refused.status, refused.message)
        # GC passes and checkpoints on the full disk: a pass collects one more ledger, and
        # two more checkpoints are tried (each done, or logged as failed).
        tried = checkpoints_tried((await state(conn))["counters"]["checkpoints"], small.log())
        extra = next(ledger for ledger in ledgers if ledger not in deleted and ledger not in GROWN)
        await client.delete_ledger(extra)
        deleted.add(extra)
        await wait_until(lambda: _gc_deleted(conn, 1), "a GC pass on the full disk after the restart")

        async def two_more_checkpoints() -> bool:
            return checkpoints_tried((await state(conn))["counters"]["checkpoints"], small.log()) >= tried + 2

        await wait_until(two_more_checkpoints, "two more checkpoints tried on the full disk")
        assert_alive(small)

        # Space comes back: writable again, the far entries and new ledgers go in.
        make_room()
        await wait_until(lambda: _is(registered_read_only(client, "small"), False), "the writable registration")
        kept = [g for g in GROWN if g not in deleted]
        new = [next(fresh) for _ in range(4)]
        await known(client, new, KEY, "small")
        later = [(g, FAR + i) for g in kept for i in range(3)] + [(n, e) for n in new for e in range(20)]
        assert await add_all(conn, later, acked) == len(later)
        await check_reads(conn, acked, deleted)
    assert small.stop() == 0, small.log()[-3000:]


def checkpoints_tried(done: int, log: str) -> int:
    """Checkpoints the bookie tried: ``done`` (its counter) and those its ``log`` says failed."""
    return done + log.count("no space to write the LastLogMark") + log.count("checkpoint failed")


async def _gc_deleted(conn: BookieClient, n: int) -> bool:
    return int((await state(conn))["counters"]["gc_ledgers_deleted"]) >= n


async def test_full_tmpfs(tmp_path: Path, small_filesystem: Any, bookie_processes: list[BookieProcess]) -> None:
    """tmpfs (a memory-backed Kubernetes ``emptyDir``): even a read of a hole through a
    mapping needs a page. Space comes back by growing the filesystem."""
    fs = small_filesystem("tmpfs", tmp_path / "tmpfs", SIZE)
    await fill_collect_reopen(fs, tmp_path, lambda: fs.resize(4 * SIZE), bookie_processes)


async def test_full_ext4(tmp_path: Path, small_filesystem: Any, bookie_processes: list[BookieProcess]) -> None:
    """ext4 with 1 KiB blocks: a write to a page of a mapping needs every block of the page.
    Space comes back by deleting the other file."""
    fs = small_filesystem("ext4", tmp_path / "ext4", SIZE)
    await fill_collect_reopen(fs, tmp_path, fs.free, bookie_processes)


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_index_pages_are_allocated_before_they_are_written(tmp_path: Path, small_filesystem: Any, kind: str) -> None:
    """The unit under the scenarios above, on a full filesystem: a new index is allocated
    whole (st_blocks), growth allocates nothing, a write to a grown table fails with ENOSPC
    before it touches a page, and reads of its holes allocate nothing."""
    from bkframe.core.interfaces.ledger_storage import LedgerState

    fs = small_filesystem(kind, tmp_path / kind, 4 * MB)
    # Whole pages: with ext4's 1 KiB blocks, a page written through a mapping needs all four.
    fd = os.open(fs.path / "mapped", os.O_RDWR | os.O_CREAT, 0o644)
    os.ftruncate(fd, 16 * PAGE)
    MappedFile(fd).allocate(PAGE + 100, PAGE + 116)
    assert os.fstat(fd).st_blocks * 512 == PAGE
    os.close(fd)
    path = fs.path / "0000000000000001.idx"
    idx = LedgerIndex.create(path, LedgerState(ledger_id=1, master_key=b"k"), 1024)
    size = HEADER_SIZE + 1024 * RECORD_DTYPE.itemsize
    assert os.stat(path).st_blocks * 512 >= size, "the whole table allocated when made"
    idx.store_one(0, 4096, 1, 100)
    fs.fill()
    idx.ensure_capacity(1 << 16)  # 1 MiB of table, none of it allocated
    # Written back first: ext4 may add an extent block when writeback converts the pages
    # written so far, which a later count would otherwise take for reads allocating.
    synced = os.open(path, os.O_RDONLY)
    os.fsync(synced)
    os.close(synced)
    blocks = os.stat(path).st_blocks
    assert blocks * 512 < size + PAGE
    with pytest.raises(OSError, match="No space left"):
        idx.reserve(50_000, 50_000)
    with pytest.raises(OSError, match="No space left"):
        idx.store_one(60_000, 8192, 1, 100)
    idx.close()
    # Opened again on the full disk: the whole table read, holes and all, allocates nothing.
    idx = LedgerIndex.open(path)
    assert [ids.tolist() for ids, _ in idx.held()] == [[0]] and idx.last_entry_id == 0
    assert idx.read_one(60_000) == (0, 0, 0) and idx.read_one(0) == (4096, 1, 100)
    assert not np.any(idx.read(1, idx.capacity)["length"])
    assert os.stat(path).st_blocks == blocks
    idx.clear(np.array([0]))  # a page that holds records is allocated: writable when full
    assert idx.last_entry_id == -1
    fs.free()
    idx.store_one(60_000, 8192, 1, 100)
    assert idx.read_one(60_000) == (8192, 1, 100)
    idx.close()


@pytest.mark.parametrize("kind", ["tmpfs", "ext4"])
def test_deletions_are_recorded_on_a_full_disk(tmp_path: Path, small_filesystem: Any, kind: str) -> None:
    """Deleting ledgers is how a full disk gets space back, and their tombstones come first:
    the file keeps room allocated past its end for thousands of them."""
    from bkframe.bookie.durability.tombstones import Tombstones

    fs = small_filesystem(kind, tmp_path / kind, 4 * MB)
    tombstones = Tombstones(fs.path, retention_s=3600)  # a bookie starting: the room is made
    fs.fill()
    for at in range(0, 3000, 1000):
        tombstones.record(range(10**15 + at, 10**15 + at + 1000))
    assert len(Tombstones(fs.path, retention_s=3600)) == 3000
