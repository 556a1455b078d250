"""The contract every journal keeps (:class:`~bkframe.core.interfaces.journal.Journal`), as a test
suite a journal plugin runs on its own implementation.

Subclass in a test module of your plugin and provide the ``journal_factory`` fixture: a
function ``(directory, counters) -> Journal`` making a new journal object over
``directory`` (called again to reopen it, as a restarted bookie does)::

    class TestMyJournal(JournalContract):
        @pytest.fixture
        def journal_factory(self):
            return lambda directory, counters: MyJournal(directory, counters, small_files=True)

Configure it so that files roll often (small files): the suite then checks positions,
marks and file removal across rolls. What a crash may tear is each journal's own format,
so torn tails and corruption are for the plugin's own tests.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from bkframe.core.counters import Counters
from bkframe.core.interfaces.journal import Journal, JournalPosition

JournalFactory = Callable[[Path, Counters], Journal]


async def write_records(journal: Journal, records: list[bytes], writers: int = 1) -> None:
    """Append ``records`` (each as two parts) from ``writers`` tasks, each waiting for
    durability, then close the journal."""
    async with trio.open_nursery() as nursery:
        await nursery.start(journal.run)

        async def writer(k: int) -> None:
            for rec in records[k::writers]:
                await journal.wait_durable(journal.append([rec[:3], rec[3:]]))

        async with trio.open_nursery() as inner:
            for k in range(writers):
                inner.start_soon(writer, k)
        await journal.aclose()
        nursery.cancel_scope.cancel()


class JournalContract:
    """What every journal does; see the module docstring."""

    @pytest.fixture
    def journal_factory(self) -> JournalFactory:
        raise NotImplementedError("a subclass provides journal_factory(directory, counters) -> Journal")

    def replay(self, factory: JournalFactory, directory: Path, since: JournalPosition | None = None) -> list[bytes]:
        return [record for _, record in factory(directory, Counters()).replay(since)]

    def check_positions(self, positions: list[JournalPosition]) -> None:
        """Override to assert more about the positions of many records (e.g. that they span files)."""

    def test_is_a_journal(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        assert isinstance(journal_factory(tmp_path, Counters()), Journal)

    async def test_records_replay_identically(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        records = [os.urandom(i % 500) + b"#%d" % i for i in range(1000)]
        await write_records(journal_factory(tmp_path, Counters()), records)
        assert self.replay(journal_factory, tmp_path) == records

    async def test_group_commit_shares_fsyncs(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        counters = Counters()
        records = [b"record-%d" % i for i in range(2000)]
        await write_records(journal_factory(tmp_path, counters), records, writers=50)
        assert sorted(self.replay(journal_factory, tmp_path)) == sorted(records)
        assert 0 < counters.journal_fsyncs < len(records) / 5
        assert counters.journal_bytes_written >= sum(map(len, records))

    async def test_position_is_where_replay_says_the_record_ends(
        self, journal_factory: JournalFactory, tmp_path: Path
    ) -> None:
        """position() after each append is the LastLogMark: it must match replay."""
        journal = journal_factory(tmp_path, Counters())
        records = [os.urandom(1 + i * 7 % 400) for i in range(150)]
        positions = []
        async with trio.open_nursery() as nursery:
            await nursery.start(journal.run)
            for rec in records:
                seq = journal.append([rec])
                positions.append(journal.position())
                if seq % 10 == 0:
                    await journal.wait_durable(seq)
            await journal.aclose()
            nursery.cancel_scope.cancel()
        replayed = list(journal_factory(tmp_path, Counters()).replay(None))
        assert [r for _, r in replayed] == records
        assert [p for p, _ in replayed] == positions
        assert positions == sorted(positions) and len(set(positions)) == len(positions)
        self.check_positions(positions)
        # Replay from any mark yields exactly the records after it.
        assert self.replay(journal_factory, tmp_path, positions[77]) == records[78:]

    async def test_files_before_a_mark_can_go(self, journal_factory: JournalFactory, tmp_path: Path) -> None:
        records = [os.urandom(300) for _ in range(200)]
        await write_records(journal_factory(tmp_path, Counters()), records)
        positions = [p for p, _ in journal_factory(tmp_path, Counters()).replay(None)]
        mark = positions[99]
        assert self.replay(journal_factory, tmp_path, mark) == records[100:]
        # What a checkpoint does once the mark is persisted: replay from it still sees the rest.
        assert journal_factory(tmp_path, Counters()).remove_files_before(mark) >= 0
        assert self.replay(journal_factory, tmp_path, mark) == records[100:]

    async def test_aclose_makes_every_appended_record_durable(
        self, journal_factory: JournalFactory, tmp_path: Path
    ) -> None:
        journal = journal_factory(tmp_path, Counters())
        with trio.move_on_after(5) as timeout:
            async with trio.open_nursery() as nursery:
                await nursery.start(journal.run)
                first = journal.append([b"one"])
                await journal.wait_durable(first)
                assert journal.durable_seq >= first and not journal.is_lost(first)
                nursery.cancel_scope.cancel()
        assert not timeout.cancelled_caught, "run() must end when cancelled"
        # The loop is gone: records appended now are made durable by aclose.
        seq = journal.append([b"two"])
        assert journal.durable_seq < seq
        await journal.aclose()
        assert journal.durable_seq == seq and not journal.is_lost(seq)
        assert self.replay(journal_factory, tmp_path) == [b"one", b"two"]

    async def test_a_reopened_journal_goes_on_after_what_it_replayed(
        self, journal_factory: JournalFactory, tmp_path: Path
    ) -> None:
        await write_records(journal_factory(tmp_path, Counters()), [b"first run %d" % i for i in range(10)])
        reopened = journal_factory(tmp_path, Counters())
        assert len(list(reopened.replay(None))) == 10
        await write_records(reopened, [b"second run"])
        assert self.replay(journal_factory, tmp_path) == [b"first run %d" % i for i in range(10)] + [b"second run"]
