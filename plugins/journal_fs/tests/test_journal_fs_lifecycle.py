"""The filesystem journal's life cycle: positions, failures, cancellation, crash recovery."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest
import trio
import trio.testing
from bkframe_journal_fs.file_format import FILE_HEADER
from bkframe_journal_fs.fs_journal import FsJournal, JournalFailedError

from bkframe import ConfigError
from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import JournalCorruptError, JournalPosition
from bkframe.core.plugin_manager import PluginManager


def make(tmp_path: Path, counters: Counters | None = None, **config: object) -> FsJournal:
    journal = PluginManager().journal(
        config={"plugin": "journal_fs", **config}, directory=tmp_path, counters=counters or Counters()
    )
    assert isinstance(journal, FsJournal)
    return journal


def replay_all(tmp_path: Path, since: JournalPosition | None = None) -> list[tuple[JournalPosition, bytes]]:
    return list(FsJournal(tmp_path, Counters()).replay(since))


async def test_write_failure_fails_every_waiter_and_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = make(tmp_path)
    failures: list[BaseException] = []

    def broken_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "simulated disk error")

    async def waiter(seq: int) -> None:
        try:
            await journal.wait_durable(seq)
        except JournalFailedError as e:
            failures.append(e)

    with pytest.RaisesGroup(JournalFailedError, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            await journal.wait_durable(journal.append([b"before the failure"]))
            monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
            async with trio.open_nursery() as waiters:
                for i in range(20):
                    waiters.start_soon(waiter, journal.append([b"doomed %d" % i]))
    # Nobody hung, nobody was told a lost record is durable.
    assert len(failures) == 20
    assert journal.durable_seq == 1
    with pytest.raises(JournalFailedError):
        journal.append([b"after the failure"])
    await journal.aclose()


async def test_a_closed_journal_refuses_appends(tmp_path: Path) -> None:
    """(That aclose makes what was appended durable is in the journal contract.)"""
    journal = make(tmp_path)
    journal.append([b"one"])
    await journal.aclose()
    assert [r for _, r in replay_all(tmp_path)] == [b"one"]
    with pytest.raises(JournalFailedError, match="closed"):
        journal.append([b"three"])


async def test_max_wait_groups_without_flush_when_queue_empty(tmp_path: Path, mock_clock: trio.testing.MockClock) -> None:
    """On trio's mock clock (it moves only when the test jumps it): the bound is exact."""
    counters = Counters()
    journal = make(tmp_path, counters, flush_when_queue_empty=False, max_wait_ms=20.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        # A lone record waits for company up to max_wait, and is written when it passes.
        seq = journal.append([b"alone"])
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(0.019)
        await trio.testing.wait_all_tasks_blocked()
        assert counters.journal_queued_bytes > 0 and counters.journal_fsyncs == 0  # still gathering
        mock_clock.jump(0.002)
        await journal.wait_durable(seq)
        # Many at once make few groups (the clock now jumps to each bound when all wait).
        mock_clock.autojump_threshold = 0
        before = counters.journal_fsyncs
        async with trio.open_nursery() as writers:
            for i in range(300):
                writers.start_soon(lambda i=i: journal.wait_durable(journal.append([b"r%d" % i])))
        assert counters.journal_fsyncs - before < 300 / 5
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert len(replay_all(tmp_path)) == 301


async def test_a_group_nobody_waits_for_waits_for_a_waiter(tmp_path: Path) -> None:
    """VD entries are acknowledged before their fsync: their records gather (up to
    max_lazy_wait_ms) until someone waits for them, who is then not kept waiting."""
    counters = Counters()
    journal = make(tmp_path, counters, max_lazy_wait_ms=60_000.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        seqs = [journal.append([b"lazy %d" % i]) for i in range(3)]
        watched = trio.Event()

        async def watch() -> None:
            await journal.wait_durable(seqs[-1], hurry=False)
            watched.set()

        async with trio.open_nursery() as watchers:
            # A watcher (the bookie's BP-14 sync cursors) does not hurry the group: once
            # every task is parked (only the 60 s bound could wake the group commit), the
            # records are still queued, unwritten...
            watchers.start_soon(watch)
            await trio.testing.wait_all_tasks_blocked()
            assert counters.journal_queued_bytes > 0 and journal.durable_seq == 0 and counters.journal_fsyncs == 0
            # ...a waiter does (far sooner than the 60 s bound), and the watcher learns of it.
            with trio.fail_after(10):
                await journal.wait_durable(seqs[0])
                await watched.wait()
        assert journal.durable_seq == seqs[-1]
        # A record a waiter already waits for when it is appended is not held back either.
        with trio.fail_after(10):
            await journal.wait_durable(journal.append([b"waited for"]))
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert [r for _, r in replay_all(tmp_path)] == [b"lazy 0", b"lazy 1", b"lazy 2", b"waited for"]


async def test_a_group_nobody_waits_for_is_written_when_the_bound_passes(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """With nobody hurrying it, a group waits exactly ``max_lazy_wait_ms`` (on trio's mock
    clock, which moves only when the test jumps it) and is then written by itself."""
    counters = Counters()
    journal = make(tmp_path, counters, max_lazy_wait_ms=20.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        seq = journal.append([b"unwatched"])
        watched = trio.Event()

        async def watch() -> None:
            await journal.wait_durable(seq, hurry=False)
            watched.set()

        nursery.start_soon(watch)
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(0.019)
        await trio.testing.wait_all_tasks_blocked()
        assert counters.journal_queued_bytes > 0 and counters.journal_fsyncs == 0  # held back, up to the bound
        mock_clock.jump(0.002)
        await watched.wait()  # past it: written, though nobody waits with hurry
        assert journal.durable_seq == seq and counters.journal_fsyncs == 1
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert [r for _, r in replay_all(tmp_path)] == [b"unwatched"]


async def test_remove_files_before_keeps_the_mark_file_and_later(tmp_path: Path) -> None:
    journal = make(tmp_path, max_file_size=4096, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for i in range(60):
            await journal.wait_durable(journal.append([b"%03d" % i + b"." * 500]))
        ids_before = sorted(int(p.stem, 16) for p in tmp_path.glob("*.txn"))
        assert ids_before == list(range(1, ids_before[-1] + 1))
        # Even a mark beyond every file never deletes the file being written.
        assert journal.remove_files_before(JournalPosition(4, 0)) == 3
        assert journal.remove_files_before(JournalPosition(10**6, 0)) == len(ids_before) - 4
        await journal.wait_durable(journal.append([b"still writing"]))
        await journal.aclose()
        nursery.cancel_scope.cancel()
    assert sorted(int(p.stem, 16) for p in tmp_path.glob("*.txn")) == [ids_before[-1]]
    assert replay_all(tmp_path)[-1][1] == b"still writing"


async def test_crash_with_preallocated_tail_replays_and_appends_to_a_new_file(tmp_path: Path) -> None:
    journal = make(tmp_path, preallocate_bytes=1 << 20)
    records = [b"durable %d" % i for i in range(50)]
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for rec in records:
            seq = journal.append([rec])
        await journal.wait_durable(seq)
        (path,) = tmp_path.glob("*.txn")
        data_end = journal.position().offset
        assert path.stat().st_size >= 1 << 20 > data_end  # preallocated beyond the data
        nursery.cancel_scope.cancel()
    os.close(journal._fd)  # type: ignore[arg-type]  # a crash: no aclose, zeros stay on disk
    reopened = make(tmp_path)
    assert [r for _, r in reopened.replay(None)] == records
    async with trio.open_nursery() as nursery:
        await nursery.start(reopened.run)
        await reopened.wait_durable(reopened.append([b"after restart"]))
        assert reopened.position().file_id == 2
        await reopened.aclose()
        nursery.cancel_scope.cancel()
    # A clean close gives the unused preallocation back.
    assert (tmp_path / f"{2:016x}.txn").stat().st_size == reopened.position().offset
    assert [r for _, r in replay_all(tmp_path)] == [*records, b"after restart"]


@pytest.mark.parametrize("hole_records", [1, 20])  # a short hole, and one past the 4 KiB zero scan
async def test_zeroed_hole_before_records_a_later_group_proves_synced_is_corruption(
    tmp_path: Path, hole_records: int
) -> None:
    """Zeros followed by valid records in the LAST file: every record here was acknowledged
    (each waited for its fsync), and the group commits after the hole record that the file
    was fsynced past it. So the hole lost acknowledged records: refuse, naming the offset."""
    journal = make(tmp_path, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for i in range(40):
            await journal.wait_durable(journal.append([b"%03d" % i + b"." * 297]))
        await journal.aclose()
        nursery.cancel_scope.cancel()
    (path,) = tmp_path.glob("*.txn")
    ends = [pos.offset for pos, _ in replay_all(tmp_path)]
    data = bytearray(path.read_bytes())
    hole = ends[2]  # from the fourth record's group on, as if never written
    data[hole : ends[2 + hole_records]] = bytes(ends[2 + hole_records] - hole)
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="fsynced up to offset") as err:
        replay_all(tmp_path)
    assert err.value.path == str(path) and err.value.offset == hole


async def _write_torn_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: list[bytes], torn: list[bytes]) -> int:
    """Journal ``durable`` (each acknowledged), then ``torn`` as one group whose fdatasync
    never completes; return the offset where the last completed fdatasync ended."""
    journal = make(tmp_path, preallocate_bytes=0)

    def unfinished_fdatasync(fd: int) -> None:
        raise OSError(errno.EIO, "power cut during fdatasync")

    with pytest.RaisesGroup(JournalFailedError):
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            for rec in durable:
                await journal.wait_durable(journal.append([rec]))
            synced_end = journal.position().offset
            monkeypatch.setattr(os, "fdatasync", unfinished_fdatasync)
            for rec in torn:
                seq = journal.append([rec])
            with pytest.raises(JournalFailedError):
                await journal.wait_durable(seq)  # never acknowledged
    monkeypatch.undo()
    await journal.aclose()
    return synced_end


async def test_torn_last_group_is_truncated_where_the_last_fsync_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Page write-back during an fdatasync that never completed: later pages of the group
    reached the disk, its first page did not (zeros). Nothing of that group was
    acknowledged, so replay truncates there and keeps every acknowledged record."""
    durable = [b"durable %03d|" % i * 30 for i in range(30)]
    torn = [b"never acknowledged %03d|" % i * 30 for i in range(60)]
    synced_end = await _write_torn_group(tmp_path, monkeypatch, durable, torn)
    (path,) = tmp_path.glob("*.txn")
    data = bytearray(path.read_bytes())
    assert len(data) > synced_end + 3 * 4096  # the whole group was written, not synced
    data[synced_end : synced_end + 4096] = bytes(4096)
    path.write_bytes(bytes(data))
    assert [r for _, r in replay_all(tmp_path)] == durable
    assert path.stat().st_size == synced_end  # truncated: the next start sees a clean end
    # A journal reopened on it goes on in a new file, and replays both.
    reopened = make(tmp_path, preallocate_bytes=0)
    assert [r for _, r in reopened.replay(None)] == durable
    async with trio.open_nursery() as nursery:
        await nursery.start(reopened.run)
        await reopened.wait_durable(reopened.append([b"after restart"]))
        await reopened.aclose()
        nursery.cancel_scope.cancel()
    assert [r for _, r in replay_all(tmp_path)] == [*durable, b"after restart"]


async def test_torn_group_in_a_rolled_file_is_corruption(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same damage in a file the journal rolled away from (fsynced when rolled) cannot
    be an unfinished group: refuse to start, naming the file and offset."""
    durable = [b"durable %03d|" % i * 30 for i in range(30)]
    synced_end = await _write_torn_group(tmp_path, monkeypatch, durable, [b"torn %03d|" % i * 30 for i in range(60)])
    (first,) = tmp_path.glob("*.txn")
    data = bytearray(first.read_bytes())
    data[synced_end : synced_end + 4096] = bytes(4096)
    first.write_bytes(bytes(data))
    journal = make(tmp_path, preallocate_bytes=0)  # a later run wrote a newer file
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        await journal.wait_durable(journal.append([b"newer"]))
        await journal.aclose()
        nursery.cancel_scope.cancel()
    with pytest.raises(JournalCorruptError) as err:
        replay_all(tmp_path)
    assert err.value.path == str(first) and err.value.offset == synced_end


async def test_torn_record_in_an_older_file_is_corruption(tmp_path: Path) -> None:
    journal = make(tmp_path, max_file_size=4096, preallocate_bytes=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)
        for _ in range(40):
            await journal.wait_durable(journal.append([b"x" * 300]))
        await journal.aclose()
        nursery.cancel_scope.cancel()
    first = tmp_path / f"{1:016x}.txn"
    with open(first, "r+b") as f:
        f.truncate(first.stat().st_size - 5)
    with pytest.raises(JournalCorruptError, match=str(first)):
        replay_all(tmp_path)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("buffered_bytes_threshold", 1.5, "buffered_bytes_threshold = 1.5 should be"),
        ("max_wait_ms", -1, "max_wait_ms = -1 should be"),
        ("preallocate_bytes", "16MiB", "preallocate_bytes = '16MiB' should be"),
        ("max_file_size", 100, "max_file_size = 100 should be an integer >= 4096"),
        ("flush_when_queue_empty", 1, "flush_when_queue_empty = 1 should be true or false"),
    ],
)
def test_bad_config_values_name_the_key(tmp_path: Path, key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make(tmp_path, **{key: value})


def test_record_framing_is_little_endian_magic_length_crc(tmp_path: Path) -> None:
    """The on-disk format docs/protocol.md describes; other tools parse it."""
    import crc32c

    async def write() -> None:
        journal = make(tmp_path, preallocate_bytes=0)
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            await journal.wait_durable(journal.append([b"ab", b"cd"]))
            await journal.wait_durable(journal.append([b"ef"]))
            await journal.aclose()
            nursery.cancel_scope.cancel()

    def sync_mark(synced_end: int) -> bytes:
        body = struct.pack("<Q", synced_end)
        return struct.pack("<III", 0xB0C45CED, 8, crc32c.crc32c(body)) + body

    trio.run(write)
    data = (tmp_path / f"{1:016x}.txn").read_bytes()
    assert data[:FILE_HEADER.size] == b"BKFJRNL1" + struct.pack("<II", 2, 1)
    # Each group: a sync mark (where the last completed fsync ended), then its records.
    first = sync_mark(0) + struct.pack("<III", 0xB0C41E55, 4, crc32c.crc32c(b"abcd")) + b"abcd"
    second = sync_mark(FILE_HEADER.size + len(first)) + struct.pack("<III", 0xB0C41E55, 2, crc32c.crc32c(b"ef")) + b"ef"
    assert data[FILE_HEADER.size :] == first + second
