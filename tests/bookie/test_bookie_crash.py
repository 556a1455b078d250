"""Bookies as real processes: SIGKILL after acknowledged adds, torn and corrupt journals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from bkframe.client.bookies.connection import connect_bookie
from bkframe.proto.codes import Status
from bkframe.proto.frames import pack_frame
from bkframe.proto.ops.add import encode_add
from bkframe.testing.cluster import BookieProcess

KEY = b"k"
#: How long a connection is watched for an answer that must not come (an add whose group's
#: fdatasync hangs). Nothing shows that it will not come: the hung sync leaves no trace, and
#: a later request on the connection (a BOOKIE_INFO) is not answered before the adds either.
UNANSWERED_S = 0.5


#: Not bkframe.testing.kit.payload: random bytes, so a torn or stale copy never matches by chance.
def payload(ledger: int, entry: int) -> bytes:
    return f"{ledger}:{entry}:".encode() + os.urandom(entry % 300)


async def _add_all(b: BookieProcess, entries: dict[tuple[int, int], bytes]) -> set[tuple[int, int]]:
    acked: set[tuple[int, int]] = set()
    async with connect_bookie(b.host, b.port) as bk:
        pending = [(key, bk.submit_add(key[0], key[1], data, master_key=KEY)) for key, data in entries.items()]
        for key, pend in pending:
            r = await pend.wait()
            assert r.status == Status.OK
            acked.add(key)
    return acked


async def _read_all(b: BookieProcess, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes | None]:
    out: dict[tuple[int, int], bytes | None] = {}
    async with connect_bookie(b.host, b.port) as bk:
        pending = [(key, bk.submit_read(*key, master_key=KEY)) for key in keys]
        for key, pend in pending:
            r = await pend.wait()
            out[key] = r.data if r.status == Status.OK else None
    return out


async def test_sigkill_after_acks_loses_nothing(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    b = BookieProcess(tmp_path).start()
    bookie_processes.append(b)
    entries = {(ledger, e): payload(ledger, e) for ledger in (1, 2, 3) for e in range(400)}
    acked = await _add_all(b, entries)
    assert len(acked) == len(entries)
    b.kill()  # no clean shutdown: only the journal's fsyncs protect the data
    b2 = BookieProcess(tmp_path).start()
    bookie_processes.append(b2)
    got = await _read_all(b2, sorted(acked))
    assert all(got[key] == entries[key] for key in acked)
    assert b2.stop() == 0


async def test_sigterm_drains_and_exits_zero(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    b = BookieProcess(tmp_path).start()
    bookie_processes.append(b)
    async with connect_bookie(b.host, b.port) as bk:
        pending = [bk.submit_add(1, i, b"x" * 1000, master_key=KEY) for i in range(2000)]
        # Stop once the bookie is serving them (a fixed short sleep raced a loaded machine:
        # the signal could come before the bookie had read any frame).
        await pending[0].wait()
        b.proc.send_signal(signal.SIGTERM)
        statuses = []
        for pend in pending:
            try:
                statuses.append((await pend.wait()).status)
            except ConnectionError:
                statuses.append(None)
    assert b.proc.wait(timeout=60) == 0
    # Whatever was acknowledged before the stop is there after a restart.
    acked = [i for i, s in enumerate(statuses) if s == Status.OK]
    assert acked, "the bookie should have answered what it had read before draining"
    b2 = BookieProcess(tmp_path).start()
    bookie_processes.append(b2)
    got = await _read_all(b2, [(1, i) for i in acked])
    assert all(v == b"x" * 1000 for v in got.values())


def _journal_files(data_dir: Path) -> list[Path]:
    return sorted((data_dir / "journal").glob("*.txn"))


def _data_end(path: Path) -> int:
    """Offset after the last non-zero byte (the journal preallocates with zeros)."""
    data = path.read_bytes()
    return len(data.rstrip(b"\0"))


async def test_torn_journal_tail_keeps_complete_records(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    b = BookieProcess(tmp_path).start()
    bookie_processes.append(b)
    entries = {(1, e): payload(1, e) + b"!" * 200 for e in range(50)}
    await _add_all(b, entries)
    b.kill()
    last = _journal_files(tmp_path)[-1]
    end = _data_end(last)
    # Tear the last record: cut it in the middle, as a crash during the write would.
    with open(last, "r+b") as f:
        f.truncate(end - 100)
    # Nothing was checkpointed, so ledger storage may hold the entry; the journal must not
    # bring back a torn record, and every complete record must be there.
    b2 = BookieProcess(tmp_path).start()
    bookie_processes.append(b2)
    got = await _read_all(b2, sorted(entries))
    complete = [k for k in sorted(entries) if got[k] is not None]
    assert len(complete) >= 49
    assert all(got[k] == entries[k] for k in complete)
    # The bookie keeps working after the truncation.
    assert await _add_all(b2, {(2, 0): b"after"}) == {(2, 0)}
    assert b2.stop() == 0


async def test_corrupt_journal_middle_refuses_to_start(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    b = BookieProcess(tmp_path).start()
    bookie_processes.append(b)
    # Separate adds so that the journal holds many records.
    async with connect_bookie(b.host, b.port) as bk:
        for e in range(30):
            assert (await bk.add(1, e, b"payload-%d" % e * 20, master_key=KEY)).status == Status.OK
    b.kill()
    journal = _journal_files(tmp_path)[-1]
    data = bytearray(journal.read_bytes())
    offset = data.find(b"payload-3")
    data[offset] ^= 0xFF
    journal.write_bytes(bytes(data))
    proc = subprocess.run(
        [sys.executable, "-m", "bkframe", "bookie", "--data-dir", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "listening on" not in proc.stdout
    assert str(journal) in proc.stderr
    assert "offset" in proc.stderr


async def test_unclean_shutdown_is_detected(tmp_path: Path, bookie_processes: list[BookieProcess]) -> None:
    async def last_clean(b: BookieProcess) -> bool:
        async with connect_bookie(b.host, b.port) as bk:
            return bool((await bk.info())["last_shutdown_clean"])

    first = BookieProcess(tmp_path).start()
    bookie_processes.append(first)
    assert await last_clean(first)  # a new data dir counts as clean
    assert first.stop() == 0
    clean = BookieProcess(tmp_path).start()
    bookie_processes.append(clean)
    assert await last_clean(clean)
    clean.kill()
    crashed = BookieProcess(tmp_path).start()
    bookie_processes.append(crashed)
    assert not await last_clean(crashed)


async def test_power_cut_during_a_journal_fdatasync_boots_and_keeps_every_ack(
    tmp_path: Path, bookie_processes: list[BookieProcess], monkeypatch: Any
) -> None:
    """A power cut while a group's fdatasync is under way: the kernel had written back
    later pages of the group but not its first one, so the last journal file ends in zeros
    followed by valid records. None of that group was acknowledged: the bookie truncates
    there and starts, with every acknowledged entry."""
    from bkframe.testing.faults import powerloss, write_faults

    control = tmp_path / "faults"
    control.mkdir()
    data_dir = tmp_path / "bookie"
    data_dir.mkdir()
    shadow = tmp_path / "bookie-synced"
    monkeypatch.setenv(write_faults.CONTROL_ENV, str(control))
    monkeypatch.setenv(powerloss.SHADOW_ENV, str(shadow))
    monkeypatch.setenv(powerloss.ROOT_ENV, str(data_dir))
    config = tmp_path / "bookie.toml"
    config.write_text("[journal]\npreallocate_bytes = 0\n")
    b = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b)
    acked = {(1, e): payload(1, e) for e in range(20)}
    async with connect_bookie(b.host, b.port) as bk:
        for (ledger, e), data in acked.items():
            assert (await bk.add(ledger, e, data, master_key=KEY)).status == Status.OK
    journal = _journal_files(data_dir)[-1]
    synced_end = journal.stat().st_size
    # The disk stops answering fdatasync. One frame of adds to two other ledgers becomes
    # one group: written to the page cache, never synced, never acknowledged.
    (control / write_faults.HANG_SYNC_FILE).write_text("/journal/")
    adds = [b"".join(encode_add(100 + i, 2 + i % 2, i // 2, -1, 0, KEY, b"unacked %d|" % i * 90)) for i in range(40)]
    stream = await trio.open_tcp_stream(b.host, b.port)
    await stream.send_all(pack_frame(adds))
    with trio.fail_after(30):
        while journal.stat().st_size < synced_end + 3 * 4096:
            await trio.sleep(0.05)
    with trio.move_on_after(UNANSWERED_S):
        assert not await stream.receive_some(), "an add of the unsynced group was answered"
    unsynced = journal.read_bytes()[synced_end:]
    b.kill()
    await stream.aclose()
    # Power cut: what was fsynced survives, plus the group's pages the kernel had written
    # back -- all but the first.
    powerloss.lose_power(data_dir, shadow)
    assert journal.stat().st_size == synced_end
    with open(journal, "ab") as f:
        f.write(bytes(4096) + unsynced[4096:])
    (control / write_faults.HANG_SYNC_FILE).unlink()
    b2 = BookieProcess(data_dir).start("--config", str(config))
    bookie_processes.append(b2)
    got = await _read_all(b2, sorted(acked))
    assert got == acked
    assert await _add_all(b2, {(1, 20): b"after the power cut"}) == {(1, 20)}
    assert "none was acknowledged; truncating" in b2.log_path.read_text()
    assert b2.stop() == 0
