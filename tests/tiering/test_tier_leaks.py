"""Nothing leaks, nothing is lost: trims and deletes take their objects with them, the orphan
sweep (``bkframe tier check``) reclaims what they could not, and a reader never returns a
damaged object's bytes nor hangs on an unreachable tier.

Real parts throughout: three bookies (the session's shared cluster), a directory tier whose
object files the tests damage in place, moto's S3 server behind an in-process TCP proxy that
blackholes it, and ``bkframe tier check`` run as a process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import attrs
import pytest
import trio

import bkframe
from bkframe import Position, Record
from bkframe.client.client import Client
from bkframe.client.logs.model import LogEntry, LogMetadata
from bkframe.client.logs.records import LogRecords
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import TierError
from bkframe.testing.cluster import Cluster
from bkframe.testing.faults.link_proxy import LinkFaults, LinkProxy
from bkframe.testing.servers import S3Server
from bkframe.tiering import sweep as tier_sweep
from bkframe.tiering.footer import footer_start
from bkframe.tiering.keys import segment_key
from bkframe.tiering.object_format import CorruptObjectError
from bkframe.tiering.segment_reader import SegmentObjectReader

PASSWORD = b"leaks"
PER_SEGMENT = 40
TIER_TIMEOUT_S = 1.0


async def write_log(client: Client, name: str, closed: int) -> list[LogEntry]:
    """A log of ``closed`` closed segments and an open one of 5 entries; every entry."""
    await client.logs.create(name, password=PASSWORD, rollover_entries=PER_SEGMENT)
    async with await client.logs.open_writer(name, password=PASSWORD) as writer:
        await writer.append_many(
            [Record(b"%s-%d-" % (name.encode(), i) + os.urandom(200), b"k%d" % (i % 3), 1_764_000_000_000 + i)
             for i in range(closed * PER_SEGMENT + 5)]
        )
    return await (await client.logs.reader(name, password=PASSWORD)).read()


async def offload(client: Client, name: str, tier: str, segments: int) -> LogMetadata:
    result = await client.logs.offload(name, tier=tier, password=PASSWORD, until=Position(segments, 0))
    assert len(result.offloaded) == segments
    return await client.logs.metadata(name)


async def off_the_bookies(client: Client, name: str, numbers: Iterable[int], *, delete_ledgers: bool = True) -> None:
    """What the deletion lag does (another part of issue 36): the segments' ledgers deleted
    from the bookies, and their offloads say so."""
    wanted = set(numbers)

    def change(r: LogMetadata) -> LogMetadata:
        for seg in r.segments:
            if seg.number in wanted and seg.offload is not None:
                r = r.replace_segment(attrs.evolve(seg, offload=attrs.evolve(seg.offload, on_bookies=False)))
        return r

    record = await LogRecords(client).update(name, change)
    if delete_ledgers:
        for seg in record.segments:
            if seg.number in wanted:
                await client.delete_ledger(seg.ledger_id)


def object_files(root: Path) -> dict[int, Path]:
    """The directory tier's segment objects, by segment number (one log's)."""
    return {int(p.name.split("-")[0]): p for p in root.rglob("*.parquet")}


def tier_check(metadata: str, tier: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkframe", "tier", "check", "--metadata", metadata, "--tier", tier, *args],
        capture_output=True, text=True, timeout=120,
    )


async def test_trim_and_delete_take_their_objects_and_the_sweep_reclaims_the_rest(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    root = tmp_path / "tier"
    root.mkdir()
    tier, uri = root.as_uri(), shared_cluster.metadata
    a, b = f"leak-a-{uuid.uuid4().hex[:6]}", f"leak-b-{uuid.uuid4().hex[:6]}"
    async with bkframe.open_client(uri) as client:
        await write_log(client, a, 4)
        hot_b = await write_log(client, b, 3)
        rec_a = await offload(client, a, tier, 4)
        await offload(client, b, tier, 3)
        a_dir = root / "segments" / rec_a.uid
        assert sorted(object_files(a_dir)) == [0, 1, 2, 3]
        # Segment 0's ledger is already gone (the deletion lag): the trim deletes it quietly.
        await off_the_bookies(client, a, [0])
        trimmed = await client.logs.trim(a, before=Position(2, 0))
        assert [s.number for s in trimmed.removed] == [0, 1]
        assert sorted(object_files(a_dir)) == [2, 3]
        # The tier unreachable during a trim: the trim stands, its object stays (an orphan).
        root.rename(tmp_path / "away")
        trimmed = await client.logs.trim(a, before=Position(3, 0))
        (tmp_path / "away").rename(root)
        assert [s.number for s in trimmed.removed] == [2]
        assert (await client.logs.metadata(a)).start == Position(3, 0)
        assert sorted(object_files(a_dir)) == [2, 3]
        await client.logs.delete(a)
        assert sorted(object_files(a_dir)) == [2]  # segment 3's went with the log
        old = object_files(a_dir)[2]
        # Log b, offloaded whole; then what a tier check must find in it:
        rec_b = await client.logs.metadata(b)
        b_dir = root / "segments" / rec_b.uid
        files = object_files(b_dir)
        files[1].unlink()  # missing, ledger deleted: at risk
        await off_the_bookies(client, b, [1])
        with files[0].open("ab") as f:  # wrong size, ledger on the bookies: reads fall back
            f.write(b"x")
        seg2 = rec_b.segment(2)
        assert seg2 is not None
        # Segment 2 recorded as not offloaded: its object is a put the next offload adopts.
        await LogRecords(client).update(b, lambda r: r.replace_segment(attrs.evolve(seg2, offload=None)))
        # Reads: segment 1 fails with one clear error; the others come back right.
        reader = await client.logs.reader(b, password=PASSWORD)
        with pytest.raises(TierError, match=rf"log {b!r}: segment 1 is only in tier {tier}.*tier check"):
            await reader.read_segment(1, 0, PER_SEGMENT - 1)
        assert await reader.read(Position(2, 0)) == [e for e in hot_b if e.position.segment >= 2]
        assert await reader.read_segment(0, 0, PER_SEGMENT - 1) == [e for e in hot_b if e.position.segment == 0]
    # A segment-0 orphan of a log that never existed, put just now: younger than the grace.
    young = root / "segments" / "f00d" / "0000000000-1.parquet"
    young.parent.mkdir()
    young.write_bytes(b"young")
    hours_ago = time.time() - 2 * 3600
    os.utime(old, (hours_ago, hours_ago))
    (root / "segments" / "notes.txt").write_text("not ours")

    checked = tier_check(uri, tier, "--grace", "1h")
    assert checked.returncode == 1, checked.stderr
    lines = checked.stdout.splitlines()
    kinds = sorted((line.split("\t")[0], line.split("\t")[1]) for line in lines[:-1])

    def key(path: Path) -> str:
        return path.relative_to(root).as_posix()

    assert kinds == sorted([
        ("orphan", key(old)), ("orphan", key(young)), ("unknown", "segments/notes.txt"),
        ("missing AT RISK", key(files[1])), ("wrong-size", key(files[0])), ("unrecorded", key(files[2])),
    ]), checked.stdout
    assert "would be deleted" in next(line for line in lines if key(old) in line)
    assert lines[-1].startswith(f"tier {tier}: 5 object(s)") and "(1 at risk)" in lines[-1]
    assert checked.stderr.splitlines() == [  # one line: the at-risk warning is not logged again
        "Error: 1 offloaded segment(s) are only in this tier and their object is missing or damaged: restore the "
        "objects listed above (AT RISK) from a backup of the tier"
    ]

    swept = tier_check(uri, tier, "--grace", "1h", "--delete-orphans", "--json")
    report = json.loads(swept.stdout)
    assert swept.returncode == 1 and report["summary"]["deleted"] == 1 and report["summary"]["young"] == 1
    assert [f["key"] for f in report["findings"] if f["deleted"]] == [key(old)]
    assert not old.exists() and young.exists() and files[2].exists() and files[0].exists()


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "page":  # bytes in the middle of the first row group's payload pages
        at = len(data) // 3
        data[at : at + 4] = bytes(x ^ 0xFF for x in data[at : at + 4])
    elif how == "footer":  # a digit of the footer's entry checksum
        at = data.index(b"bkframe.checksum") + len(b"bkframe.checksum")
        while not chr(data[at]).isdigit():
            at += 1
        data[at] = ord("1") if data[at] != ord("1") else ord("2")
    elif how == "truncated":
        del data[-100:]
    path.write_bytes(bytes(data))


async def test_a_damaged_object_is_never_returned_as_data(shared_cluster: Cluster, tmp_path: Path) -> None:
    name, tier = f"damaged-{uuid.uuid4().hex[:6]}", tmp_path.as_uri()
    kinds = ["page", "footer", "truncated"]
    async with bkframe.open_client(shared_cluster.metadata) as client:
        hot = await write_log(client, name, 4)
        await offload(client, name, tier, 4)
        files = object_files(tmp_path)
        for number, how in enumerate(kinds):
            damage(files[number], how)
        # While the ledgers are on the bookies, reads of the damaged segments come from there.
        reader = await client.logs.reader(name, password=PASSWORD)
        assert await reader.read() == hot
        assert reader.tier_reads.fallbacks == 3
        # Once they are deleted, each damaged segment is one clear error; segment 3 is intact.
        await off_the_bookies(client, name, range(4), delete_ledgers=False)
        reader = await client.logs.reader(name, password=PASSWORD)
        for number, how in enumerate(kinds):
            with pytest.raises(TierError) as raised:
                await reader.read_segment(number, 0, PER_SEGMENT - 1)
            text = str(raised.value)
            assert f"log {name!r}: segment {number} is only in tier {tier}" in text, how
            assert files[number].relative_to(tmp_path).as_posix() in text and "restore it" in text, how
        assert await reader.read_segment(3, 0, PER_SEGMENT - 1) == [e for e in hot if e.position.segment == 3]
        assert reader.tier_reads.object_reads >= 1
        intact = (await client.logs.metadata(name)).segment(3)
        # A damaged object already under segment 4's key (an orphan of an earlier put) is not
        # adopted, nor parsed: the offload writes the segment again.
        record = await client.logs.metadata(name)
        seg4 = record.segment(4)
        assert seg4 is not None and seg4.closed and seg4.offload is None
        planted = tmp_path / segment_key(record.uid, 4, seg4.ledger_id)
        data = files[3].read_bytes()
        at = footer_start("", len(data), data[-8:]) + 40
        planted.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
        result = await client.logs.offload(name, tier=tier, password=PASSWORD)
        assert [s.number for s in result.offloaded] == [4] and planted.read_bytes() != data
        reader = await client.logs.reader(name, password=PASSWORD)
        assert await reader.read(Position(4, 0)) == [e for e in hot if e.position.segment == 4]
        assert reader.tier_reads.fallbacks == 0 and reader.tier_reads.object_reads == 1
    # Every byte of the footer changed in turn is found before pyarrow parses it (pyarrow 26
    # aborts the whole process on some: a level histogram's size, thrown where nothing catches).
    assert intact is not None and intact.offload is not None and intact.offload.footer_crc32c
    o = intact.offload
    data = files[3].read_bytes()
    start = footer_start(o.key, len(data), data[-8:])
    tier_dir = PluginManager().tier(tmp_path.as_uri())
    for at in range(start, len(data) - 8):
        files[3].write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
        with pytest.raises(CorruptObjectError, match="footer's CRC32C"):
            SegmentObjectReader(tier_dir, o.key, size=o.size, footer_crc32c=o.footer_crc32c).footer()


async def test_an_unreachable_tier_fails_fast_and_reads_come_back(
    shared_cluster: Cluster, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3Server.ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3Server.SECRET_ACCESS_KEY)
    name, uri = f"unreachable-{uuid.uuid4().hex[:6]}", shared_cluster.metadata
    proxy = LinkProxy(("127.0.0.1", int(s3_server.endpoint.rsplit(":", 1)[1])))
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(proxy.serve, "127.0.0.1", 0)
        tier = f"s3://{s3_server.bucket()}?endpoint=http://{host}:{port}&region=us-east-1"
        async with bkframe.open_client(uri) as client:
            hot = await write_log(client, name, 2)
            await offload(client, name, tier, 2)
        proxy.set_faults(LinkFaults(blackhole=True))  # accepts, never answers
        # Each tier call is abandoned after 1 s (30 s by default), whatever the S3 SDK's own
        # timeouts and retries (here its defaults: 30 s reads, 3 attempts).
        async with bkframe.open_client(uri, tier_timeout_s=TIER_TIMEOUT_S) as client:
            reader = await client.logs.reader(name, password=PASSWORD)
            with trio.fail_after(20):
                assert await reader.read() == hot  # the offloaded ones from the bookies, the hot one as always
            assert reader.tier_reads.fallbacks >= 1 and reader.tier_reads.object_reads == 0
            await off_the_bookies(client, name, [1], delete_ledgers=False)
            reader = await client.logs.reader(name, password=PASSWORD)
            started = time.monotonic()
            with pytest.raises(TierError, match=r"segment 1 is only in tier s3://.*read again once it is back"):
                await reader.read_segment(1, 0, PER_SEGMENT - 1)
            assert time.monotonic() - started < TIER_TIMEOUT_S + 10  # slack for a loaded machine
        proxy.clear()
        async with bkframe.open_client(uri) as client:
            reader = await client.logs.reader(name, password=PASSWORD)
            assert await reader.read() == hot
            assert reader.tier_reads.object_reads >= 2 and reader.tier_reads.fallbacks == 0
            # The sweep lists S3 through the same deadlines, a batch at a time (here: one object).
            monkeypatch.setattr(tier_sweep, "LIST_BATCH", 1)
            summary = await tier_sweep.sweep_tier(client, tier, delete=True)
            assert (summary.objects, summary.recorded, summary.orphans, summary.missing) == (2, 2, 0, 0)
        nursery.cancel_scope.cancel()
