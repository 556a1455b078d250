"""A full disk, on real bookie processes: BookKeeper's read-only mode (above
``disk_usage_threshold`` a bookie takes no adds, registers read-only, keeps serving reads
and fences, and comes back below ``disk_usage_lwm``), a write that fails with ENOSPC, and
a bookie that (re)starts on a full disk.

The small bookie's disk is the disk-full layer (:mod:`bkframe.testing.faults.filling_disk`) or, where
this machine lets the test mount one, a real size-limited filesystem (tmpfs: the
``small_filesystem`` fixture of :mod:`bkframe.testing.pytest_plugin`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import bkframe
from bkframe import Client, LedgerMetadata, WriteHandle
from bkframe.client.distribution import write_set
from bkframe.client.entry_format import Digester
from bkframe.core.ledger_keys import key_hash, master_key
from bkframe.proto.codes import LAST_ENTRY, Status
from bkframe.testing.cluster import BookieProcess, Cluster
from bkframe.testing.faults.filling_disk import used_bytes
from bkframe.testing.kit import PASSWORD, payload, wait_until

MB = 1 << 20
SMALL = "small"


def bookie_config(
    path: Path, *, threshold: float = 0.95, lwm: float = 0.90, interval_s: float = 0.1, checkpoint_s: float = 30.0
) -> Path:
    """The small bookie's config: its thresholds and disk check, and no journal
    preallocation (16 MiB chunks would not fit its few MiB)."""
    path.write_text(
        f"""
[bookie]
disk_usage_threshold = {threshold}
disk_usage_lwm = {lwm}
disk_check_interval_s = {interval_s}
checkpoint_interval_s = {checkpoint_s}

[journal]
preallocate_bytes = 0
"""
    )
    return path


def add_small_bookie(cluster: Cluster, config: Path, *, disk_capacity: int | None, data_dir: Path | None = None) -> BookieProcess:
    small = BookieProcess(data_dir or cluster.root / SMALL, bookie_id=SMALL, metadata=cluster.metadata)
    small.start("--config", str(config), disk_capacity=disk_capacity)
    cluster.bookies.append(small)  # killed with the cluster
    return small


async def registered_read_only(client: Client, bookie_id: str) -> bool | None:
    for b in await client.metadata.list_bookies():
        if b.bookie_id == bookie_id:
            return b.read_only
    return None


async def info(client: Client, bookie_id: str) -> dict[str, Any]:
    """GET_BOOKIE_INFO; after a restart the pool may still hold the dead process's
    connection for a moment: then once more on a new one."""
    for attempt in range(2):
        try:
            return await (await client.pool.get(bookie_id)).info()
        except ConnectionError:
            if attempt:
                raise
            await trio.sleep(0.5)
    raise AssertionError("unreachable")


async def create_including(client: Client, bookie_id: str, **kw: Any) -> WriteHandle:
    """A new ledger whose ensemble includes ``bookie_id`` (placement is random)."""
    for _ in range(100):
        writer = await client.create_ledger(password=PASSWORD, **kw)
        if bookie_id in writer.metadata.fragments[0][1]:
            return writer
        await writer.close()
        await client.delete_ledger(writer.ledger_id)
    raise AssertionError(f"no ensemble with {bookie_id} in 100 tries")


async def fill_until_replaced(writer: WriteHandle, bookie_id: str, size: int, limit: int, window: int = 16) -> list[bytes]:
    """Append until the writer has replaced ``bookie_id`` in its ensemble (plus a few more
    entries), ``window`` appends in flight; every append must be acknowledged, in order.
    Returns the payloads."""
    payloads: list[bytes] = []
    pending: list[tuple[int, Any]] = []
    extra = 20
    while len(payloads) < limit and extra > 0:
        data = payload(writer.ledger_id, len(payloads), size=size)
        pending.append((len(payloads), writer.append_async(data)))
        payloads.append(data)
        if len(pending) >= window:
            index, pa = pending.pop(0)
            assert await pa.wait() == index
        if bookie_id not in writer.metadata.fragments[-1][1]:
            extra -= 1
    for index, pa in pending:
        assert await pa.wait() == index
    assert bookie_id not in writer.metadata.fragments[-1][1], f"{bookie_id} was never replaced in {limit} entries"
    return payloads


async def check_held(client: Client, md: LedgerMetadata, bookie_id: str, payloads: list[bytes]) -> int:
    """Every entry the metadata places on ``bookie_id`` (up to the last entry) reads back from
    it byte for byte; returns how many that was."""
    conn = await client.pool.get(bookie_id)
    digester = Digester.for_ledger(md.digest_type, PASSWORD)
    bounds = [first for first, _ in md.fragments[1:]] + [md.last_entry_id + 1]
    checked = 0
    for (first, ensemble), end in zip(md.fragments, bounds):
        if bookie_id not in ensemble:
            continue
        me = ensemble.index(bookie_id)
        for entry_id in range(first, end):
            if me not in write_set(entry_id, len(ensemble), md.write_quorum):
                continue
            r = await conn.read(md.ledger_id, entry_id, master_key=master_key(PASSWORD))
            assert r.status == Status.OK, (entry_id, r.status, r.message)
            assert digester.decode(md.ledger_id, entry_id, r.data)[2] == payloads[entry_id]
            checked += 1
    return checked


def placed(md: LedgerMetadata, bookie_id: str) -> set[int]:
    """The entries (up to the last) the metadata places on ``bookie_id``: it acknowledged them."""
    bounds = [first for first, _ in md.fragments[1:]] + [md.last_entry_id + 1]
    out: set[int] = set()
    for (first, ensemble), end in zip(md.fragments, bounds):
        if bookie_id in ensemble:
            me = ensemble.index(bookie_id)
            out.update(e for e in range(first, end) if me in write_set(e, len(ensemble), md.write_quorum))
    return out


def journaled(data_dir: Path, md: LedgerMetadata) -> set[int]:
    """The entries of the ledger in the journal files of a stopped bookie, checked against
    their digests."""
    from bkframe_journal_fs.fs_journal import FsJournal

    from bkframe.bookie.durability import journal_records as jr
    from bkframe.core.counters import Counters

    digester = Digester.for_ledger(md.digest_type, PASSWORD)
    out: set[int] = set()
    for _, raw in FsJournal(data_dir / "journal", Counters()).replay(None):
        rec = jr.decode(raw)
        if isinstance(rec, jr.EntriesRecord) and rec.ledger_id == md.ledger_id:
            for entry_id, data in zip(rec.entry_ids, rec.entries):
                digester.decode(md.ledger_id, entry_id, bytes(data))
                out.add(entry_id)
    return out


async def read_all(client: Client, ledger_id: int) -> list[bytes]:
    reader = await client.open_ledger(ledger_id, password=PASSWORD)
    return [e.payload for e in await reader.read(0, reader.lac)] if reader.lac >= 0 else []


def bookies_list(metadata: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookies", "list", "--json", "--metadata", metadata],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    return {d["id"]: d["state"] for d in map(json.loads, out.splitlines())}


async def test_read_only_above_threshold_and_writable_again_below_lwm(cluster_factory: Any, tmp_path: Path) -> None:
    cluster = cluster_factory(3)
    # Half the disk is the limit: the disk check (every 0.1 s) sees it long before the disk
    # is actually full, however fast the writer is. No checkpoint while the test runs: it
    # would trim the journal, whose half of the usage would take the bookie below the
    # low-water mark (writable again) before the test gives it more space.
    config = bookie_config(tmp_path / "small.toml", threshold=0.5, lwm=0.3, checkpoint_s=3600.0)
    small = add_small_bookie(cluster, config, disk_capacity=16 * MB)
    async with bkframe.open_client(cluster.metadata) as client:
        assert (await info(client, SMALL))["read_only"] is False
        writer = await create_including(client, SMALL, ensemble=3, write_quorum=2, ack_quorum=2)
        payloads = await fill_until_replaced(writer, SMALL, 32 * 1024, limit=2000, window=4)
        md = await writer.close()
        # The disk check turned it read-only before any write failed: it keeps running.
        state = await info(client, SMALL)
        assert state["read_only"] is True and state["disk_usage"] >= 0.5, state
        assert "disk_usage_threshold" in state["read_only_reason"], state["read_only_reason"]
        assert small.running
        await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration")
        assert bookies_list(cluster.metadata)[SMALL] == "read-only"
        # Adds are refused with READ_ONLY; reads of what it holds still work.
        conn = await client.pool.get(SMALL)
        refused = await conn.add(md.ledger_id + 1000, 0, b"x", master_key=b"k")
        assert refused.status == Status.READ_ONLY
        lac = await conn.submit_write_lac(md.ledger_id, md.last_entry_id, master_key=master_key(PASSWORD)).wait()
        assert lac.status == Status.READ_ONLY
        assert await read_all(client, md.ledger_id) == payloads
        assert await check_held(client, md, SMALL, payloads) > 0
        # New ledgers avoid it.
        for _ in range(10):
            other = await client.create_ledger(ensemble=3, write_quorum=2, ack_quorum=2, password=PASSWORD)
            assert SMALL not in other.metadata.fragments[0][1]
            await other.close()
        with pytest.raises(bkframe.NotEnoughBookiesError):
            await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
        # More space: below the low-water mark it takes writes again and new ledgers use it.
        small.set_disk_capacity(64 * MB)
        await wait_until(lambda: _is(registered_read_only(client, SMALL), False), "the writable registration")
        assert bookies_list(cluster.metadata)[SMALL] == "writable"
        assert (await info(client, SMALL))["read_only"] is False
        again = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
        assert SMALL in again.metadata.fragments[0][1]
        fresh = [payload(again.ledger_id, i, size=1000) for i in range(100)]
        for data in fresh:
            await again.append(data)
        md2 = await again.close()
        assert len(md2.fragments) == 1
        assert await read_all(client, again.ledger_id) == fresh
        assert await check_held(client, md2, SMALL, fresh) == 50
        assert await read_all(client, md.ledger_id) == payloads


async def _is(value: Awaitable[Any], expected: Any) -> bool:
    return await value == expected


async def _gc_counted(client: Client) -> bool:
    counters = (await info(client, SMALL))["counters"]
    return bool(counters["gc_ledgers_deleted"] and counters["gc_bytes_freed"])


async def test_deleting_ledgers_frees_a_read_only_bookie(cluster_factory: Any, tmp_path: Path) -> None:
    """Nobody deletes files by hand: a deleted ledger's entry logs are collected, the journal
    is trimmed by checkpoints, and below the low-water mark the bookie takes writes again."""
    cluster = cluster_factory(3)
    config = tmp_path / "small.toml"
    config.write_text(
        """
[bookie]
disk_usage_threshold = 0.6
disk_usage_lwm = 0.4
disk_check_interval_s = 0.1
gc_interval_s = 0.5
checkpoint_interval_s = 0.5

[journal]
preallocate_bytes = 0
max_file_size = 1048576

[entry_log_manager]
plugin = "single"
max_log_size = 524288
"""
    )
    small = add_small_bookie(cluster, config, disk_capacity=8 * MB)
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await create_including(client, SMALL, ensemble=3, write_quorum=2, ack_quorum=2)
        payloads = await fill_until_replaced(writer, SMALL, 32 * 1024, limit=2000, window=4)
        await writer.close()
        assert (await info(client, SMALL))["read_only"] is True
        await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration")
        assert await read_all(client, writer.ledger_id) == payloads
        await client.delete_ledger(writer.ledger_id)
        await wait_until(lambda: _is(registered_read_only(client, SMALL), False), "the writable registration")
        # The space is back as the GC pass removes entry logs; the pass counts the bytes it
        # freed when it ends (it yields while it runs, so a loaded machine may see it later).
        await wait_until(lambda: _gc_counted(client), "the GC pass's counters")
        state = await info(client, SMALL)
        assert state["read_only"] is False and state["disk_usage"] < 0.4, state
        assert state["counters"]["gc_ledgers_deleted"] == 1 and state["counters"]["gc_bytes_freed"] > 0
        again = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
        fresh = [payload(again.ledger_id, i, size=1000) for i in range(100)]
        for data in fresh:
            await again.append(data)
        md = await again.close()
        assert await read_all(client, again.ledger_id) == fresh
        assert await check_held(client, md, SMALL, fresh) == 50
    assert small.running


async def test_read_only_bookie_still_fences_and_takes_recovery_adds(cluster_factory: Any, tmp_path: Path) -> None:
    """Recovery must be able to close a ledger whose ensemble has a read-only bookie: with
    E=W=3, A=2 and one of the other two bookies dead, fencing (E-A+1 = 2) and writing back
    (A = 2) both need the read-only one."""
    cluster = cluster_factory(3)
    config = bookie_config(tmp_path / "small.toml", threshold=0.8, lwm=0.6)
    small = add_small_bookie(cluster, config, disk_capacity=64 * MB)
    payloads = [payload(0, i, size=10_000) for i in range(20)]
    async with bkframe.open_client(cluster.metadata) as writer_client:
        writer = await create_including(writer_client, SMALL, ensemble=3, write_quorum=3, ack_quorum=2)
        for data in payloads:
            await writer.append(data)
        ledger_id, ensemble = writer.ledger_id, writer.metadata.fragments[0][1]
        # The writer goes away without closing: the bookies' LAC is behind the last entry.
    async with bkframe.open_client(cluster.metadata) as client:
        # Someone else fills the disk to 85 %: the bookie turns read-only, with room left
        # for what recovery writes.
        small.set_disk_capacity(int(used_bytes(small.data_dir) / 0.85))
        await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration")
        cluster.by_id(next(b for b in ensemble if b != SMALL)).kill()
        reader = await client.open_ledger(ledger_id, password=PASSWORD)  # recovery
        assert reader.metadata.closed and reader.metadata.last_entry_id == 19
        assert [e.payload for e in await reader.read(0, 19)] == payloads
        state = await info(client, SMALL)
        assert state["read_only"] is True and state["counters"]["fenced_ledgers"] == 1, state


async def known(client: bkframe.Client, ledger_ids: list[int], key: bytes, bookie: str) -> None:
    """Ledgers the metadata store knows, with ``key``: a bookie takes adds only for those."""
    for ledger_id in ledger_ids:
        md = bkframe.LedgerMetadata(ledger_id, 1, 1, 1, ((0, (bookie,)),), password_hash=key_hash(key))  # type: ignore[arg-type]
        await client.metadata.create_ledger(md)


async def test_an_add_whose_journal_write_finds_no_space_is_not_acknowledged(tmp_path: Path) -> None:
    """Room for the entry log's copy of an add but not for its journal record: the add is
    answered READ_ONLY (never OK), the bookie stays up, and takes adds again once it has room."""
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    small = BookieProcess(tmp_path / SMALL, bookie_id=SMALL, metadata=metadata)
    small.start("--config", str(bookie_config(tmp_path / "b.toml", interval_s=0.2, checkpoint_s=3600)), disk_capacity=64 * MB)
    key = b"k" * 20
    try:
        async with bkframe.open_client(metadata) as client:
            await known(client, [7], key, SMALL)
            conn = await client.pool.get(SMALL)
            assert (await conn.add(7, 0, b"first", master_key=key)).status == Status.OK
            # 100 KiB more fits once (the entry log's copy), not twice (the journal's); what
            # is left is under 10 %, so it stays read-only until it gets more space.
            small.set_disk_capacity(used_bytes(small.data_dir) + 110 * 1024)
            lost = await conn.add(7, 1, os.urandom(100 * 1024), master_key=key, lac=0)
            assert lost.status == Status.READ_ONLY, (lost.status, lost.message)
            assert "journal" in lost.message and "No space left" in lost.message, lost.message
            assert small.running
            assert (await conn.read(7, 0, master_key=key)).data == b"first"
            assert (await info(client, SMALL))["counters"]["journal_write_failures"] == 1
            await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration")
            small.set_disk_capacity(64 * MB)
            await wait_until(lambda: _is(registered_read_only(client, SMALL), False), "the writable registration")
            assert (await conn.add(7, 1, b"second", master_key=key, lac=0)).status == Status.OK
        small.kill()
        small.start("--config", str(tmp_path / "b.toml"))
        async with bkframe.open_client(metadata) as client:
            conn = await client.pool.get(SMALL)
            assert [(await conn.read(7, e, master_key=key)).data for e in (0, 1)] == [b"first", b"second"]
    finally:
        if small.running:
            small.kill()


async def test_what_replay_finds_already_stored_survives_a_later_power_cut(tmp_path: Path) -> None:
    """Replay writes nothing storage already holds (so a full disk can restart), but that
    state may only be in the page cache of the killed run: it must be made durable before
    the first checkpoint trims the journal that covered it."""
    metadata = f"sqlite://{tmp_path / 'metadata.db'}"
    bookie = BookieProcess(tmp_path / "b", bookie_id="b", metadata=metadata)
    config = tmp_path / "b.toml"
    config.write_text("[bookie]\ncheckpoint_interval_s = 3600\n[journal]\npreallocate_bytes = 0\n")
    bookie.start("--config", str(config), powerloss=True)
    key = b"k" * 20
    try:
        async with bkframe.open_client(metadata) as client:
            await known(client, [3, 4], key, "b")
            conn = await client.pool.get("b")
            for e in range(50):
                assert (await conn.add(3, e, b"entry %d" % e, master_key=key, lac=e - 1)).status == Status.OK
            fence = await conn.read(4, LAST_ENTRY, master_key=key, fence=True)
            assert fence.status in (Status.OK, Status.NO_ENTRY)
        bookie.kill()  # the page cache (the data dir) keeps the entry logs and index headers
        bookie.start("--config", str(config), powerloss=True)  # replays, checkpoints, trims the journal
        bookie.lose_power()  # only what was fsynced stays
        bookie.start("--config", str(config))
        async with bkframe.open_client(metadata) as client:
            conn = await client.pool.get("b")
            assert [(await conn.read(3, e, master_key=key)).data for e in range(50)] == [b"entry %d" % e for e in range(50)]
            assert (await conn.add(4, 0, b"late", master_key=key)).status == Status.FENCED
    finally:
        if bookie.running:
            bookie.kill()


async def test_write_failure_on_a_full_disk_then_restart_while_full(cluster_factory: Any, tmp_path: Path) -> None:
    """Issue 18: a bookie whose writes fail with ENOSPC stays up (read-only), restarts on the
    full disk, serves what it holds, and takes writes again once it has space."""
    cluster = cluster_factory(3)
    # A disk check that never comes: only the failing writes can tell the bookie its disk is full.
    blind = bookie_config(tmp_path / "blind.toml", interval_s=3600, checkpoint_s=3600)
    small = add_small_bookie(cluster, blind, disk_capacity=4 * MB)
    await _full_disk_scenario(
        cluster,
        small,
        tmp_path,
        grow=lambda: small.set_disk_capacity(used_bytes(small.data_dir) + 64 * MB),
        make_full=lambda: small.set_disk_capacity(used_bytes(small.data_dir)),
    )


async def _full_disk_scenario(
    cluster: Cluster, small: BookieProcess, tmp_path: Path, *, grow: Callable[[], None], make_full: Callable[[], None]
) -> None:
    async with bkframe.open_client(cluster.metadata) as client:
        writer = await create_including(client, SMALL, ensemble=3, write_quorum=2, ack_quorum=2)
        payloads = await fill_until_replaced(writer, SMALL, 16 * 1024, limit=5000)
        md = await writer.close()
        assert small.running, small.log()[-3000:]
        state = await info(client, SMALL)
        assert state["read_only"] is True, state
        assert "No space left" in state["read_only_reason"], state["read_only_reason"]
        await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration")
        assert await read_all(client, md.ledger_id) == payloads
        held = await check_held(client, md, SMALL, payloads)
        assert held > 0
        # Restart on the full disk (SIGKILL: the journal has to be replayed).
        small.kill()
        # No checkpoint ran (checkpoint_interval_s): every entry the bookie acknowledged
        # must be in what its journal holds, although some of its journal writes failed.
        assert journaled(small.data_dir, md) >= placed(md, SMALL)
        make_full()
        small.start("--config", str(bookie_config(tmp_path / "watching.toml", interval_s=0.2)))
        state = await info(client, SMALL)
        assert state["read_only"] is True, state
        await wait_until(lambda: _is(registered_read_only(client, SMALL), True), "the read-only registration after restart")
        assert await check_held(client, md, SMALL, payloads) == held
        refused = await (await client.pool.get(SMALL)).add(md.ledger_id, 0, b"x", master_key=b"k")
        assert refused.status == Status.READ_ONLY
        # Space comes back: writable again, without anyone deleting files.
        grow()
        await wait_until(lambda: _is(registered_read_only(client, SMALL), False), "the writable registration")
        again = await client.create_ledger(ensemble=4, write_quorum=2, ack_quorum=2, password=PASSWORD)
        assert SMALL in again.metadata.fragments[0][1]
        fresh = [payload(again.ledger_id, i, size=4000) for i in range(200)]
        for data in fresh:
            await again.append(data)
        md2 = await again.close()
        assert len(md2.fragments) == 1
        assert await read_all(client, again.ledger_id) == fresh
        assert await check_held(client, md2, SMALL, fresh) == 100
        assert await check_held(client, md, SMALL, payloads) == held
    # And it still starts after a clean stop.
    assert small.stop() == 0
    small.start("--config", str(tmp_path / "watching.toml"))
    async with bkframe.open_client(cluster.metadata) as client:
        assert await check_held(client, md2, SMALL, fresh) == 100


async def test_real_size_limited_filesystem(cluster_factory: Any, tmp_path: Path, small_filesystem: Any) -> None:
    """The same on a real tmpfs of a few MiB: the kernel's ENOSPC, the kernel's df (more on
    real filesystems, tmpfs and ext4, in test_disk_full_real_fs.py)."""
    cluster = cluster_factory(3)
    fs = small_filesystem("tmpfs", tmp_path / "tmpfs", 4 * MB)
    data_dir = fs.path / SMALL
    blind = bookie_config(tmp_path / "blind.toml", interval_s=3600, checkpoint_s=3600)
    small = add_small_bookie(cluster, blind, disk_capacity=None, data_dir=data_dir)
    # Before the restart, shrink it to what is used: full, whatever the failed write left free.
    await _full_disk_scenario(cluster, small, tmp_path, grow=lambda: fs.resize(64 * MB),
                              make_full=lambda: fs.resize(shutil.disk_usage(data_dir).used))
