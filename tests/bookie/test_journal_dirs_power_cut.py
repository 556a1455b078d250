"""A bookie with two journal directories (``[journal] dirs``) loses power: every acknowledged
PD entry survives, through checkpoints, and a torn last group in one journal costs the
other journal nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import trio

import bkframe
from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.codes import Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import encode_add
from bkframe.testing.cluster import BookieProcess
from bkframe.testing.faults import powerloss, write_faults
from bkframe.testing.kit import wait_until

KEY = b"k"
#: How long a connection is watched for an answer that must not come (an add whose group's
#: fdatasync hangs). Nothing shows that it will not come: the hung sync leaves no trace, and
#: a later request on the connection (a BOOKIE_INFO) is not answered before the adds either.
UNANSWERED_S = 0.5

#: Journal 0 is DATA_DIR/journal, journal 1 DATA_DIR/journal/j1; even ledgers go to 0.
CONFIG = '[journal]\npreallocate_bytes = 0\nmax_file_size = 65536\ndirs = ["j1"]\n'


#: Not bkframe.testing.kit.payload: random bytes, so a torn or stale copy never matches by chance.
def payload(ledger: int, entry: int) -> bytes:
    return f"{ledger}:{entry}:".encode() + os.urandom(50 + entry % 300)


def journal_files(data_dir: Path, which: int) -> list[Path]:
    d = data_dir / "journal" / ("j1" if which else "")
    return sorted(d.glob("*.txn"))


async def add_all(b: BookieProcess, entries: dict[tuple[int, int], bytes]) -> None:
    async with connect_bookie(b.host, b.port) as bk:
        pending = [(key, bk.submit_add(key[0], key[1], data, master_key=KEY)) for key, data in entries.items()]
        for _, pend in pending:
            assert (await pend.wait()).status == Status.OK


async def read_all(b: BookieProcess, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes | None]:
    out: dict[tuple[int, int], bytes | None] = {}
    async with connect_bookie(b.host, b.port) as bk:
        pending = [(key, bk.submit_read(*key, master_key=KEY)) for key in keys]
        for key, pend in pending:
            r = await pend.wait()
            out[key] = r.data if r.status == Status.OK else None
    return out


async def checkpoints_after_now(b: BookieProcess, n: int = 2) -> None:
    """Wait until ``n`` more checkpoints have run, so at least one began after this call (not
    a fixed sleep: on a loaded machine a 0.3 s checkpoint interval can take seconds)."""
    async with connect_bookie(b.host, b.port) as bk:
        start = (await bk.info())["counters"]["checkpoints"]

        async def done() -> bool:
            return (await bk.info())["counters"]["checkpoints"] >= start + n

        await wait_until(done, f"{n} more checkpoints", 60)


def power_env(tmp_path: Path, monkeypatch: Any) -> tuple[Path, Path, Path]:
    data_dir = tmp_path / "bookie"
    data_dir.mkdir()
    shadow = tmp_path / "bookie-synced"
    monkeypatch.setenv(powerloss.SHADOW_ENV, str(shadow))
    monkeypatch.setenv(powerloss.ROOT_ENV, str(data_dir))
    config = tmp_path / "bookie.toml"
    return data_dir, shadow, config


async def test_acknowledged_entries_survive_a_power_cut_across_checkpoints(
    tmp_path: Path, bookie_processes: list[BookieProcess], monkeypatch: Any
) -> None:
    data_dir, shadow, config = power_env(tmp_path, monkeypatch)
    config.write_text("[bookie]\ncheckpoint_interval_s = 0.3\n" + CONFIG)
    b = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b)
    acked: dict[tuple[int, int], bytes] = {}
    batches = [{(ledger, e): payload(ledger, e) for ledger in (2, 3, 4, 5) for e in range(40 * n, 40 * n + 40)} for n in range(2)]
    # Journal 0 alone fills its file and moves on to a newer one; a checkpoint takes its
    # position as the mark; journal 1, whose file is older, gets the last entries: they
    # must be replayed from the mark too.
    batches.append({(2, e): payload(2, e) for e in range(80, 700)})
    batches.append({(2, e): payload(2, e) for e in range(700, 710)})  # in journal 0's next file
    batches.append({(3, e): payload(3, e) for e in range(80, 120)})
    for n, batch in enumerate(batches):
        await add_all(b, batch)
        acked |= batch
        if n < len(batches) - 1:
            await checkpoints_after_now(b)  # a checkpoint moves the mark and drops journal files
    assert journal_files(data_dir, 0) and journal_files(data_dir, 1)
    b.kill()
    powerloss.lose_power(data_dir, shadow)
    mark = json.loads((data_dir / "lastmark.json").read_text())
    assert mark["file_id"] == int(journal_files(data_dir, 0)[-1].stem, 16), "the mark is in journal 0"
    b2 = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b2)
    assert await read_all(b2, sorted(acked)) == acked
    assert b2.stop() == 0


async def test_a_torn_group_in_one_journal_loses_nothing_of_the_other(
    tmp_path: Path, bookie_processes: list[BookieProcess], monkeypatch: Any
) -> None:
    """Journal 1's disk stops answering fdatasync with a group written but not synced; the
    power is cut with some of its pages written back (zeros, then valid records). Journal 1
    is truncated where its last fsync ended; journal 0 is replayed whole."""
    data_dir, shadow, config = power_env(tmp_path, monkeypatch)
    control = tmp_path / "faults"
    control.mkdir()
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    config.write_text(CONFIG.replace("max_file_size = 65536", "max_file_size = 1048576"))
    b = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b)
    acked = {(ledger, e): payload(ledger, e) for ledger in (2, 3) for e in range(30)}
    await add_all(b, acked)
    journal0, journal1 = journal_files(data_dir, 0)[-1], journal_files(data_dir, 1)[-1]
    synced0, synced1 = journal0.stat().st_size, journal1.stat().st_size
    (control / write_faults.HANG_SYNC_FILE).write_text("/journal/j1/")
    # One frame of adds to ledgers 3 and 5 (journal 1), alternating so that they make many
    # records: one group, written, never synced or answered.
    adds = [b"".join(encode_add(100 + i, 3 + 2 * (i % 2), 30 + i // 2, -1, 0, KEY, b"unacked %d|" % i * 90)) for i in range(40)]
    stream = await trio.open_tcp_stream(b.host, b.port)
    await stream.send_all(pack_frame(adds))
    with trio.fail_after(30):
        while journal1.stat().st_size < synced1 + 3 * 4096:
            await trio.sleep(0.05)
    with trio.move_on_after(UNANSWERED_S):
        assert not await stream.receive_some(), "an add of the unsynced group was answered"
    unsynced = journal1.read_bytes()[synced1:]
    b.kill()
    await stream.aclose()
    powerloss.lose_power(data_dir, shadow)
    assert (journal0.stat().st_size, journal1.stat().st_size) == (synced0, synced1)
    with open(journal1, "ab") as f:
        f.write(bytes(4096) + unsynced[4096:])
    (control / write_faults.HANG_SYNC_FILE).unlink()
    b2 = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b2)
    assert await read_all(b2, sorted(acked)) == acked
    log = b2.log_path.read_text()
    truncated = [line for line in log.splitlines() if "truncating" in line]
    assert truncated and all("/journal/j1/" in line for line in truncated), truncated
    assert "none was acknowledged; truncating" in log
    await add_all(b2, {(2, 30): b"after the power cut", (3, 30): b"after, in journal 1"})
    assert b2.stop() == 0


async def test_vd_sync_covers_both_journals_across_a_power_cut(cluster_factory: Any) -> None:
    """BP-14 with two journal directories: two VD ledgers (consecutive ids, one per journal)
    are acknowledged while their records wait unsynced; sync() makes each durable in the
    journal that holds it, and a power cut of every bookie keeps what the syncs covered."""
    config = '[journal]\nplugin = "journal_fs"\nmax_lazy_wait_ms = 60000.0\npreallocate_bytes = 0\ndirs = ["j1"]\n'
    cluster = cluster_factory(3, config=config, powerloss=True)
    async with bkframe.open_client(cluster.metadata) as client:
        writers = [
            await client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=2, ledger_type="VD_JOURNAL", password=b"vd")
            for _ in range(2)
        ]
        assert {w.ledger_id % 2 for w in writers} == {0, 1}, "one ledger per journal"
        with trio.fail_after(10):  # acknowledged while their journal records wait
            for i in range(30):
                for w in writers:
                    await w.append(b"%d-acked-%d" % (w.ledger_id, i))
        assert all(w.lac <= 0 for w in writers)
        with trio.fail_after(10):  # a SYNC hurries the journals: no minute's wait
            for w in writers:
                assert await w.sync() == 29
    bookies = [cluster.by_id(b) for b in writers[0].metadata.fragments[0][1]]
    for b in bookies:
        b.lose_power()
    for b in bookies:
        b.start(*cluster.bookie_args, powerloss=True)
    async with bkframe.open_client(cluster.metadata) as client:
        for w in writers:
            recovered = await client.open_ledger(w.ledger_id, password=b"vd", recovery=True)
            assert recovered.lac == 29
            assert [e.payload for e in await recovered.read(0, 29)] == [b"%d-acked-%d" % (w.ledger_id, i) for i in range(30)]
