"""Compaction by key on real bookies (the shared sqlite cluster): what a reader of the log
sees after it -- every position it kept as it was, each key's latest record, every keyless
record and tombstone, the head untouched -- and what a compactor killed at any step leaves
(docs/compaction.md)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio

import bkframe
from bkframe import Position
from bkframe.client.logs.model import LogMetadata
from bkframe.compaction import compactor
from bkframe.testing.cluster import Cluster
from bkframe.testing.kit import wait_until

Written = dict[Position, tuple[bytes | None, bytes]]


async def _fill(writer: bkframe.LogWriter, n: int, keys: int, rng: random.Random, tag: str) -> Written:
    """``n`` records: most keyed (over ``keys`` keys), some keyless, some tombstones."""
    pending = []
    for i in range(n):
        roll = rng.random()
        key = None if roll < 0.1 else b"k%03d" % rng.randrange(keys)
        payload = b"" if key is not None and roll > 0.93 else f"{tag}-{i}".encode()
        pending.append((key, payload, writer.append_async(payload, key=key)))
    return {await p.wait(): (key, payload) for key, payload, p in pending}


async def _rolled_over(logs: bkframe.Logs, name: str, before: int) -> None:
    """Wait until every segment numbered below ``before`` shows closed (a segment rolled
    over is closed moments after its successor starts)."""

    async def closed() -> bool:
        md = await logs.metadata(name)
        return all(s.closed for s in md.segments if s.number < before)

    await wait_until(closed, f"log {name}'s rolled-over segments closed")


def _latest(written: Written) -> dict[bytes, Position]:
    out: dict[bytes, Position] = {}
    for position in sorted(written):
        key = written[position][0]
        if key is not None:
            out[key] = position
    return out


class Read(dict[Position, tuple[bytes | None, bytes]]):
    """The records a reader read, and the log's end it read to (an open segment's last
    entries are confirmed only by the writer's next add)."""

    end: Position


async def _read_all(logs: bkframe.Logs, name: str) -> Read:
    reader = await logs.reader(name)
    end = await reader.end()
    out = Read((e.position, (e.key, e.payload)) for e in await reader.read(end=end))
    out.end = end
    return out


def _check(read: Read, written: Written, head: Position | None) -> None:
    """What a reader must see after compactions of everything before ``head`` (None: of
    some segments, maybe not all)."""
    latest = _latest(written)
    for position, record in read.items():
        assert written[position] == record, position  # a kept record is as it was, where it was
    for position, (key, _) in written.items():
        if position >= read.end:
            continue
        if key is None or (head is not None and position >= head) or latest[key] == position:
            assert position in read, (position, key)  # keyless, in the head, or its key's latest
    if head is None:
        return
    below = [p for p in read if p < head and read[p][0] is not None]
    keys = [read[p][0] for p in below]
    assert len(keys) == len(set(keys)), "a key kept twice before the head"


async def test_compaction_keeps_positions_latest_values_keyless_records_and_the_head(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    rng = random.Random(48)
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-basic"
        await logs.create(name, ensemble=2, write_quorum=2, ack_quorum=2, rollover_entries=100, compaction="key")
        writer = await logs.open_writer(name)
        with trio.fail_after(120):
            written = await _fill(writer, 750, 60, rng, "a")
            await _rolled_over(logs, name, 7)
        # The head: the open segment (entries 700..749) is never compacted.
        result = await logs.compact(name, work_dir=tmp_path, retire_lag_s=3600)
        assert result.end == Position(7, 0)
        assert result.segments_read == 7 and len(result.rewritten) == 7 and result.records_read == 700
        assert result.records_dropped > 400 and result.tombstones > 0
        read = await _read_all(logs, name)
        _check(read, written, result.end)
        assert len(read) == read.end.entry_id + 700 - result.records_dropped
        # The replaced ledgers stay for readers that opened them (the lag), then go.
        md = await logs.metadata(name)
        replaced = [s.compacted.replaced for s in md.segments if s.compacted is not None]
        assert len(replaced) == 7 and all(i >= 0 for i in replaced)
        await client.ledger_metadata(replaced[0])  # still there
        # A read from a dropped position reads on from the next kept one.
        dropped = min(p for p in written if p not in read)
        reader = await logs.reader(name)
        first = (await reader.read(dropped, max_entries=1))[0]
        assert first.position == min(p for p in read if p > dropped)

        # More records, a rollover: the next run compacts the compacted segments again with
        # the new ones, and retires the ledgers replaced before.
        with trio.fail_after(120):
            written.update(await _fill(writer, 300, 60, rng, "b"))
            await _rolled_over(logs, name, 10)
        again = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        # Retired: the ledgers the first run replaced in segments 0-2 (not rewritten again),
        # and with no lag those this run replaced in segments 3-9; the first run's ledgers
        # of 3-6, replaced in turn, went at once.
        assert again.end == Position(10, 0) and again.rewritten == tuple(range(3, 10)) and again.retired == 10
        md = await logs.metadata(name)
        assert not md.staged and not md.garbage
        for seg in md.segments:
            if seg.compacted is not None:
                assert seg.compacted.replaced == -1 and seg.compacted.generation in (1, 2)
        for ledger_id in replaced:
            with pytest.raises(bkframe.NoSuchLedgerError):
                await client.ledger_metadata(ledger_id)
        _check(await _read_all(logs, name), written, again.end)
        # The writer goes on where it was; its records are read after the rest.
        position = await writer.append(b"after", key=b"k000")
        assert position.segment == 10
        await writer.close()
        read = await _read_all(logs, name)
        assert read[position] == (b"k000", b"after")


async def test_a_log_without_the_key_policy_is_refused_and_the_setting_can_be_changed(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-policy"
        await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=10)
        with pytest.raises(bkframe.CompactionError, match="--compaction key"):
            await logs.compact(name, work_dir=tmp_path)
        md = await logs.configure(name, compaction="key", min_compaction_lag_s=3600)
        assert md.settings.compaction == "key"
        with pytest.raises(ValueError):
            await logs.configure(name, compaction="size")
        async with await logs.open_writer(name) as writer:
            for i in range(30):
                writer.append_async(b"v%d" % i, key=b"one")
        # Everything is younger than the lag: nothing is compacted.
        result = await logs.compact(name, work_dir=tmp_path)
        assert result.segments_read == 0 and result.end == Position(0, 0)
        assert len(await (await logs.reader(name)).read()) == 30


class _Killed(BaseException):
    """Stands for the compactor's process dying: nothing after it runs but what a crash
    leaves (no ``except Exception`` handler catches it)."""


@pytest.mark.parametrize("step", ["written", "swapped-one", "swapped-all"])
async def test_a_compactor_killed_at_any_step_leaves_the_log_whole_and_the_next_run_settles_it(
    shared_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    rng = random.Random(step)
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = f"compact-killed-{step}"
        await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=50, compaction="key")
        async with await logs.open_writer(name) as writer:
            written = await _fill(writer, 200, 20, rng, "x")
        real_swap = compactor.change_segment
        swaps = 0

        async def dying_swap(*args: object, **kw: object) -> object:
            nonlocal swaps
            if step == "written" or (step == "swapped-one" and swaps == 1):
                raise _Killed()
            swaps += 1
            return await real_swap(*args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(compactor, "change_segment", dying_swap)
        if step == "swapped-all":

            async def dying_retire(*args: object, **kw: object) -> int:
                raise _Killed()

            monkeypatch.setattr(compactor, "retire_replaced", dying_retire)
        with pytest.raises(BaseException) as killed:
            await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        assert killed.type is _Killed or killed.group_contains(_Killed, depth=None)
        monkeypatch.undo()
        # Killed: the log reads whole (each key's latest, every keyless record), whatever was swapped.
        md = await logs.metadata(name)
        if step == "swapped-all":  # killed after unstaging: the replaced ledgers wait for retirement
            assert not md.staged and all(s.compacted and s.compacted.replaced >= 0 for s in md.segments)
        else:
            assert md.staged, "the run's ledgers are staged until it unstages them"
        # (Some segments may be compacted and some not: no claim on repeats.)
        _check(await _read_all(logs, name), written, None)
        # The next run (the lock of the killed one released with its nursery here; a killed
        # process's expires) settles what the killed one left, and compacts.
        result = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        md = await logs.metadata(name)
        assert not md.staged and not md.garbage
        _check(await _read_all(logs, name), written, result.end)
        assert all(s.compacted is not None for s in md.segments)
        await _no_stray_ledgers(client, md, name)


async def _no_stray_ledgers(client: bkframe.Client, md: LogMetadata, name: str) -> None:
    """Every ledger made for the log is one of its segments (the killed run's are deleted)."""
    listed = set()
    for ledger_id in await client.metadata.list_ledgers():
        found = await client.ledger_metadata(ledger_id)
        if found.custom.get("bkframe.log") == name:
            listed.add(ledger_id)
    assert listed == {s.ledger_id for s in md.segments}


def _table(written: Written, end: Position) -> dict[Position, tuple[bytes | None, bytes]]:
    """The log up to ``end`` as a table: each key's latest record unless a tombstone, and
    every keyless record."""
    upto = {p: r for p, r in written.items() if p < end}
    latest = set(_latest(upto).values())
    return {p: (k, v) for p, (k, v) in upto.items() if k is None or (p in latest and v)}


async def test_the_compacted_read_is_the_table_before_and_after_compaction_in_python_arrow_and_duckdb(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    import duckdb

    rng = random.Random(5)
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-table"
        await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=80, compaction="key")
        async with await logs.open_writer(name) as writer:
            written = await _fill(writer, 500, 40, rng, "t")
        expected = _table(written, Position(10**6, 0))
        for compacted_before in (False, True):
            if compacted_before:
                await logs.compact(name, work_dir=tmp_path)
            reader = await logs.reader(name)
            rows = await reader.read(compacted=True)
            assert [e.position for e in rows] == sorted(expected)  # in position order, once each
            assert {e.position: (e.key, e.payload) for e in rows} == expected
            table = await reader.to_arrow(compacted=True)
            assert table.schema.metadata[b"bkframe.compacted"] == b"true"
            assert table.column("position").to_pylist() == [str(p) for p in sorted(expected)]
            dataset = await reader.dataset(compacted=True)  # noqa: F841 - duckdb reads it by name
            found = duckdb.sql("select key, payload from dataset where key is not null").fetchall()
            assert sorted(found) == sorted((k, v) for k, v in expected.values() if k is not None)
            if not compacted_before:
                # A range, before compaction: the table of what is before its end. (After,
                # the log no longer holds the values later records replaced.)
                end = Position(3, 10)
                part = await reader.read(end=end, compacted=True)
                assert {e.position: (e.key, e.payload) for e in part} == _table(written, end)


async def test_a_tombstone_goes_only_once_nothing_older_is_left_every_cursor_passed_it_and_it_is_old_enough(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-tombstones"
        await logs.create(
            name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=4, compaction="key",
            tombstone_retention_s=3600,
        )
        async with await logs.open_writer(name) as writer:
            for i in range(3):
                for key in (b"a", b"b", b"c"):
                    await writer.append(b"%s%d" % (key, i), key=key)
            deleted = await writer.append(b"", key=b"b")  # b's tombstone
            for key in (b"a", b"c"):
                await writer.append(key + b"-last", key=key)
        await logs.create_cursor(name, "slow-reader")  # at the start: it has not seen the delete

        async def keys_of(**kw: object) -> dict[bytes | None, bytes]:
            return {e.key: e.payload for e in await (await logs.reader(name)).read(**kw)}  # type: ignore[arg-type]

        # 1st run: b's older values go, its tombstone stays (its older values were there).
        first = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        assert first.tombstones == 1 and first.tombstones_dropped == 0
        assert (await keys_of())[b"b"] == b""
        assert (await logs.metadata(name)).compacted_until == first.end.segment
        # 2nd run: nothing older is left and it is old enough, but the cursor has not passed it.
        await logs.configure(name, tombstone_retention_s=0)
        second = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        assert second.tombstones_dropped == 0 and (await keys_of())[b"b"] == b""
        # The cursor passes it: but it is younger than tombstone_retention_s.
        await logs.move_cursor(name, "slow-reader", deleted.next())
        await logs.configure(name, tombstone_retention_s=3600)
        third = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        assert third.tombstones_dropped == 0 and b"b" in await keys_of()
        # Old enough now: it goes, and the key is gone from the log altogether.
        await logs.configure(name, tombstone_retention_s=0)
        fourth = await logs.compact(name, work_dir=tmp_path, retire_lag_s=0)
        assert fourth.tombstones_dropped == 1
        assert await keys_of() == {b"a": b"a-last", b"c": b"c-last"}
        assert await keys_of(compacted=True) == {b"a": b"a-last", b"c": b"c-last"}


async def test_compacted_segments_offload_with_their_gaps_and_read_back_from_the_tier(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    rng = random.Random(9)
    (tmp_path / "tier").mkdir()
    tier = (tmp_path / "tier").as_uri()
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-offload"
        await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=100, compaction="key")
        async with await logs.open_writer(name) as writer:
            await _fill(writer, 420, 30, rng, "o")
        await logs.compact(name, work_dir=tmp_path / "work")
        reader = await logs.reader(name)
        before = [(e.position, e.key, e.payload, e.timestamp) for e in await reader.read()]
        table = [(e.position, e.key, e.payload) for e in await reader.read(compacted=True)]
        # Every segment is compacted (the last one, 400..419, too: the writer closed it).
        result = await logs.offload(name, tier=tier)
        assert len(result.offloaded) == 5 and all(s.compacted is not None for s in result.offloaded)
        assert all(s.offload is not None and s.offload.entries == s.compacted.kept for s in result.offloaded)  # type: ignore[union-attr]
        reader = await logs.reader(name)
        assert all(reader.tier_reads.offloaded(s) for s in (await logs.metadata(name)).segments)
        assert [(e.position, e.key, e.payload, e.timestamp) for e in await reader.read()] == before
        assert reader.tier_reads.fallbacks == 0  # from the objects, not the bookies
        assert [(e.position, e.key, e.payload) for e in await reader.read(compacted=True)] == table
        # A range that starts and ends on dropped positions; Arrow; a seek by time.
        dropped = [Position(2, i) for i in range(100) if Position(2, i) not in {p for p, *_ in before}]
        part = await reader.read(dropped[0], dropped[-1])
        assert [(e.position, e.key, e.payload, e.timestamp) for e in part] == [
            r for r in before if dropped[0] <= r[0] < dropped[-1]
        ]
        arrow = await reader.to_arrow()
        assert arrow.column("position").to_pylist() == [str(p) for p, *_ in before]
        third = before[len(before) // 3]
        assert await reader.position_at(third[3]) <= third[0]


async def test_segments_offloaded_before_compaction_are_compacted_in_the_tier(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    from bkframe.client.settings import ClientSettings
    from bkframe.common.cluster_record import require_cluster
    from bkframe.core.config import OffloadConfig
    from bkframe.core.plugin_manager import PluginManager
    from bkframe.tiering.offload_service import OffloadService
    from bkframe.tiering.sweep import sweep_tier

    rng = random.Random(11)
    (tmp_path / "tier").mkdir()
    tier = (tmp_path / "tier").as_uri()
    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-in-tier"
        await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=100, compaction="key",
                          offload_deletion_lag_s=0)
        async with await logs.open_writer(name) as writer:
            written = await _fill(writer, 350, 25, rng, "t")
        await logs.offload(name, tier=tier)
        # The offload service deletes the ledgers (no lag): the segments are only in the tier.
        plugins = PluginManager()
        settings = ClientSettings().as_internal((await require_cluster(client.metadata)).secret)
        await OffloadService(client.metadata, plugins, OffloadConfig(), holder="t", settings=settings).run_once()
        md = await logs.metadata(name)
        assert all(s.offload is not None and not s.offload.on_bookies for s in md.segments)
        old_keys = {s.offload.key for s in md.segments if s.offload is not None}
        result = await logs.compact(name, work_dir=tmp_path / "work")
        assert result.rewritten == (0, 1, 2, 3) and result.records_dropped > 200
        md = await logs.metadata(name)
        assert all(s.offload is not None and s.offload.key.endswith("-c1.parquet") for s in md.segments)
        assert all(s.compacted is None for s in md.segments)  # the ledgers were not rewritten: gone
        read = await _read_all(logs, name)
        _check(read, written, result.end)
        assert (await logs.reader(name)).tier_reads.fallbacks == 0
        # Compacted again: the next generation; the replaced objects are orphans the sweep takes.
        async with await logs.open_writer(name) as writer:
            written.update(await _fill(writer, 100, 25, rng, "u"))
        await logs.offload(name, tier=tier)
        await OffloadService(client.metadata, plugins, OffloadConfig(), holder="t", settings=settings).run_once()
        again = await logs.compact(name, work_dir=tmp_path / "work")
        _check(await _read_all(logs, name), written, again.end)
        swept = await sweep_tier(client, tier, grace_s=0)
        assert swept.deleted >= len(old_keys)
        left = {p.name for p in (tmp_path / "tier").rglob("*.parquet")}
        recorded = {s.offload.key.rsplit("/", 1)[1] for s in (await logs.metadata(name)).segments if s.offload}
        assert left == recorded


async def test_settings_a_log_leaves_unset_are_the_clusters_defaults(shared_cluster: Cluster, tmp_path: Path) -> None:
    from bkframe.client.logs.model import CompactionDefaults

    async with bkframe.open_client(shared_cluster.metadata) as client:
        logs = client.logs
        name = "compact-defaults"
        md = await logs.create(name, ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=10, compaction="key")
        assert md.settings.min_compaction_lag_s is None and md.settings.tombstone_retention_s is None
        async with await logs.open_writer(name) as writer:
            for i in range(30):
                writer.append_async(b"v%d" % i, key=b"one")
        # The cluster's lag of an hour: nothing is old enough.
        held = await logs.compact(name, work_dir=tmp_path, defaults=CompactionDefaults(min_compaction_lag_s=3600))
        assert held.segments_read == 0
        # The log's own setting wins over the cluster's.
        await logs.configure(name, min_compaction_lag_s=0)
        done = await logs.compact(name, work_dir=tmp_path, defaults=CompactionDefaults(min_compaction_lag_s=3600))
        assert done.segments_read == 3 and done.records_dropped == 29
