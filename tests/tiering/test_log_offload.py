"""A log made two-tiered by hand, on three real bookies and a directory tier (and moto's S3).

One log written across four closed segments (keys, event times, properties) and an open
one is offloaded -- by ``bkframe log offload`` as a real process, then by the API -- and
read back: from the start, from inside an offloaded segment, by time, as Arrow, and by a
tail that crosses from the objects into the hot segments while a writer appends. Every read
must equal what the bookies gave before the offload, and must come from the objects. Then
what can go wrong: a second offload, an offload killed -9 after its put, a segment trimmed
between its put and its record, a wrong password, the tier's directory gone.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import bkframe
from bkframe import Position, Record
from bkframe.admin.status import StatusPage
from bkframe.bench.scale_metadata import Admin
from bkframe.client.logs.api import LogInfo
from bkframe.client.logs.model import LogEntry
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import UnauthorizedError
from bkframe.testing.backends import on_both_backends
from bkframe.testing.cluster import Cluster
from bkframe.testing.servers import S3Server
from bkframe.tiering import segment_writer
from tests.cli.test_ledger_and_sandbox import bk

PASSWORD = b"offload"
BASE_MS = 1_764_140_400_000
PER_SEGMENT = 300


def records(count: int, first: int = 0) -> list[Record]:
    rng = random.Random(first)
    out = []
    for i in range(first, first + count):
        key = b"user-%d" % (i % 7) if i % 3 else None
        properties = {"source": "web", "n": str(i)} if i % 5 == 0 else None
        out.append(Record(rng.randbytes(rng.randrange(50, 400)), key, BASE_MS + 1000 * i, properties))
    return out


@attrs.frozen
class Written:
    uri: str
    name: str
    tier: str
    tier_root: Path
    #: Every entry as the bookies gave it before any offload.
    hot: list[LogEntry]
    info: LogInfo


async def _write(uri: str, name: str, **settings: object) -> list[LogEntry]:
    async with bkframe.open_client(uri) as client:
        await client.logs.create(name, password=PASSWORD, rollover_entries=PER_SEGMENT, **settings)
        async with await client.logs.open_writer(name, password=PASSWORD) as writer:
            await writer.append_many(records(4 * PER_SEGMENT + 50))  # four closed segments, then 50 more
        reader = await client.logs.reader(name, password=PASSWORD)
        return await reader.read()


@pytest.fixture(scope="module")
def written(shared_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    """The log, offloaded up to segment 2 by the CLI and then the rest by the API."""
    root = tmp_path_factory.mktemp("offload")
    tier_root = root / "tier"
    tier_root.mkdir()
    name = f"offload-{uuid.uuid4().hex[:8]}"
    uri = shared_cluster.metadata
    # Two segments a chunk: segments 0 and 1 move to a chunk record, whose CAS records theirs.
    hot = trio.run(lambda: _write(uri, name, offload_after_s=3600.0, segments_per_chunk=2))
    tier = tier_root.as_uri()
    meta = ["--metadata", uri, "--password", PASSWORD.decode()]
    out = bk("log", "offload", name, *meta, "--tier", tier, "--until", "2:0").stdout
    assert out.splitlines()[-1].startswith(f"offloaded 2 segment(s) to {tier} (")

    async def rest() -> LogInfo:
        async with bkframe.open_client(uri) as client:
            # Segment 4 (closed when the writer closed) stays on the bookies only.
            result = await client.logs.offload(name, tier=tier, password=PASSWORD, until=Position(4, 0))
            assert [s.number for s in result.offloaded] == [2, 3] and result.already == 2
            return await client.logs.info(name, password=PASSWORD)

    yield Written(uri, name, tier, tier_root, hot, trio.run(rest))


def objects(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet"))


async def test_offloaded_segments_read_back_from_the_tier_byte_for_byte(written: Written) -> None:
    record = written.info.metadata
    assert [(c.first, c.last) for c in record.chunks] == [(0, 1)]
    closed = [s for s in written.info.segments if s.closed]
    assert [s.number for s in closed] == [0, 1, 2, 3, 4]
    assert closed[4].offload is None
    closed = closed[:4]
    files = objects(written.tier_root)
    for seg in closed:
        o = seg.offload
        assert o is not None and o.tier == written.tier and o.on_bookies and o.entries == seg.entries == PER_SEGMENT
        assert (written.tier_root / o.key).stat().st_size == o.size
    assert len(files) == 4  # one object a segment
    assert record.settings.offload_after_s == 3600.0 and record.settings.offload_deletion_lag_s is None
    # The writer below publishes its LAC, so that the tail sees its last entries at once.
    async with bkframe.open_client(written.uri, explicit_lac_interval_s=0.1) as client:
        reader = await client.logs.reader(written.name, password=PASSWORD)
        assert await reader.read() == written.hot  # from the start: objects, then the open segment
        inside = Position(1, 123)
        assert await reader.read(inside) == [e for e in written.hot if e.position >= inside]
        assert await reader.read_segment(2, 10, 20) == [e for e in written.hot if e.position.segment == 2][10:21]
        # Seek by time into an offloaded segment: the first record at or after it.
        at = datetime.fromtimestamp((BASE_MS + 1000 * 777) / 1000, UTC)
        assert await reader.resolve(at) == Position(2, 777 - 2 * PER_SEGMENT)
        table = await reader.to_arrow(Position(0, 0), Position(3, 0))
        assert table.column("payload").to_pylist() == [e.payload for e in written.hot[: 3 * PER_SEGMENT]]
        assert table.column("key").to_pylist() == [e.key for e in written.hot[: 3 * PER_SEGMENT]]
        assert reader.tier_reads.fallbacks == 0 and reader.tier_reads.object_reads >= 8
        # The status page's tier column: segments 2 and 3 of the record's own (0 and 1 are in a chunk).
        store = PluginManager().metadata_store(written.uri)
        try:
            body = await StatusPage(Admin(store)).cluster(store)
        finally:
            await store.aclose()
        assert (f"<td>{written.tier}: 2 of the last 3 closed segments offloaded, 2 still on the bookies (older ones in "
                f"chunk records not counted)</td>") in body
        # The tail crosses from the objects into the hot segments while a writer appends.
        more = records(400, first=len(written.hot))
        seen: list[LogEntry] = []
        async with await client.logs.open_writer(written.name, password=PASSWORD) as writer:
            with trio.fail_after(60):
                tail = reader.tail("earliest", poll_timeout_s=0.2)
                async for entry in tail:
                    seen.append(entry)
                    if len(seen) == len(written.hot):
                        await writer.append_many(more)
                    if len(seen) == len(written.hot) + len(more):
                        break
                await tail.aclose()
        assert seen[: len(written.hot)] == written.hot
        assert [(e.payload, e.key, e.timestamp, dict(e.properties)) for e in seen[len(written.hot):]] == [
            (r.payload, r.key, r.timestamp, dict(r.properties or {})) for r in more
        ]
        info = await client.logs.info(written.name, password=PASSWORD)
        assert (info.offloaded.segments, info.offloaded.entries, info.offloaded.tiers) == (4, 4 * PER_SEGMENT, (written.tier,))
        assert info.offloaded.object_bytes == sum(f.stat().st_size for f in files)
        # Again: nothing to do, nothing written.
        again = await client.logs.offload(written.name, tier=written.tier, password=PASSWORD, until=Position(4, 0))
        assert again.offloaded == () and again.already == 4
        assert objects(written.tier_root) == files
        with pytest.raises(UnauthorizedError):
            await client.logs.reader(written.name, password=b"wrong")
        with pytest.raises(UnauthorizedError):
            await client.logs.offload(written.name, tier=written.tier, password=b"wrong")
    text = bk("log", "info", written.name, "--metadata", written.uri, "--password", PASSWORD.decode()).stdout
    assert f"offloaded: 4 segment(s), {4 * PER_SEGMENT} entries" in text and written.tier in text
    assert "offload: after 1h, beyond -; ledgers kept [offload] deletion_lag_s after" in text
    states = [line.split("\t")[2] for line in text.splitlines() if line[:1].isdigit()]
    assert states[:5] == ["offloaded"] * 4 + ["closed"]
    # The CLI reads across the tiers too: segments 1 to 3 from their objects, into 4 on the bookies.
    lines = bk(
        "log", "read", written.name, "--metadata", written.uri, "--password", PASSWORD.decode(), "--from", "1:0",
        "--to", "4:9", "--json",
    ).stdout.splitlines()
    wanted = [e for e in written.hot if Position(1, 0) <= e.position <= Position(4, 9)]
    got = [json.loads(line) for line in lines]
    assert [g["position"] for g in got] == [str(e.position) for e in wanted]
    assert [base64.b64decode(g["payload_base64"]) if "payload_base64" in g else g["payload"].encode() for g in got] == [
        e.payload for e in wanted
    ]


async def test_the_tier_gone_reads_fall_back_to_the_bookies(written: Written) -> None:
    span = (Position(0, 0), Position(4, 0))
    moved = written.tier_root.with_name("tier-away")
    written.tier_root.rename(moved)
    try:
        async with bkframe.open_client(written.uri) as client:
            reader = await client.logs.reader(written.name, password=PASSWORD)
            assert (await reader.read(*span)) == written.hot[: 4 * PER_SEGMENT]
            from_bookies = await reader.to_arrow(*span)
            assert reader.tier_reads.fallbacks >= 1 and reader.tier_reads.object_reads == 0
    finally:
        moved.rename(written.tier_root)
    # Back in place: the objects give the very table the bookies gave (every column).
    async with bkframe.open_client(written.uri) as client:
        reader = await client.logs.reader(written.name, password=PASSWORD)
        assert (await reader.to_arrow(*span)).equals(from_bookies)
        assert reader.tier_reads.fallbacks == 0 and reader.tier_reads.object_reads > 0
        # Settings change on an existing log; info shows them.
        await client.logs.configure(written.name, password=PASSWORD, offload_beyond_bytes=10**9)
        settings = (await client.logs.metadata(written.name)).settings
        assert (settings.offload_after_s, settings.offload_beyond_bytes) == (3600.0, 10**9)
        with pytest.raises(TypeError, match="cannot be changed"):
            await client.logs.configure(written.name, password=PASSWORD, ensemble=5)


KILL_AFTER_PUT = """
import os, signal, sys, trio, bkframe
from bkframe.tiering import offload

async def killed(*args, **kwargs):  # the object is put and verified: die before recording it
    os.kill(os.getpid(), signal.SIGKILL)

offload.change_segment = killed

async def main():
    async with bkframe.open_client(sys.argv[1]) as client:
        await client.logs.offload(sys.argv[2], tier=sys.argv[3], password=sys.argv[4].encode())

trio.run(main)
"""


def test_an_offload_killed_after_its_put_is_recorded_once_when_run_again(
    shared_cluster: Cluster, tmp_path: Path
) -> None:
    name = f"killed-{uuid.uuid4().hex[:8]}"
    uri, tier = shared_cluster.metadata, tmp_path.as_uri()
    hot = trio.run(_write, uri, name)
    died = subprocess.run([sys.executable, "-c", KILL_AFTER_PUT, uri, name, tier, PASSWORD.decode()], timeout=120)
    assert died.returncode == -signal.SIGKILL
    [orphan] = objects(tmp_path)  # segment 0's object, put and never recorded
    inode = orphan.stat().st_ino

    async def again() -> None:
        async with bkframe.open_client(uri) as client:
            assert all(s.offload is None for s in (await client.logs.metadata(name)).segments)
            result = await client.logs.offload(name, tier=tier, password=PASSWORD)
            assert [s.number for s in result.offloaded] == [0, 1, 2, 3, 4]
            reader = await client.logs.reader(name, password=PASSWORD)
            assert await reader.read() == hot and reader.tier_reads.object_reads > 0

    trio.run(again)
    assert len(objects(tmp_path)) == 5
    assert orphan.stat().st_ino == inode  # adopted, not put again


@on_both_backends  # the S3 tier's worker threads come back to either loop
async def test_offload_to_s3_with_credentials_from_the_environment(
    shared_cluster: Cluster, s3_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3Server.ACCESS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3Server.SECRET_ACCESS_KEY)
    name = f"s3-{uuid.uuid4().hex[:8]}"
    tier = f"s3://{s3_server.bucket()}/logs?endpoint={s3_server.endpoint}&region=us-east-1"
    hot = await _write(shared_cluster.metadata, name)
    async with bkframe.open_client(shared_cluster.metadata) as client:
        result = await client.logs.offload(name, tier=tier, password=PASSWORD, until=Position(1, 0))
        [seg] = result.offloaded
        assert seg.offload is not None and seg.offload.tier.startswith(tier.split("?")[0])
        assert os.environ["AWS_SECRET_ACCESS_KEY"] not in repr(await client.logs.metadata(name))
        reader = await client.logs.reader(name, password=PASSWORD)
        assert await reader.read() == hot and reader.tier_reads.object_reads > 0


async def test_a_segment_trimmed_while_it_is_offloaded_is_skipped_and_its_object_deleted(
    shared_cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"trimmed-{uuid.uuid4().hex[:8]}"
    uri, tier = shared_cluster.metadata, tmp_path.as_uri()
    await _write(uri, name)
    write = segment_writer.write_segment_object

    async def write_then_trim(*args: Any, **kwargs: Any) -> Any:
        summary = await write(*args, **kwargs)
        if kwargs["segment"].number == 0:  # a real trim lands between the put and the record
            async with bkframe.open_client(uri) as other:
                await other.logs.trim(name, before=Position(1, 0))
        return summary

    monkeypatch.setattr(segment_writer, "write_segment_object", write_then_trim)
    async with bkframe.open_client(uri) as client:
        result = await client.logs.offload(name, tier=tier, password=PASSWORD, until=Position(2, 0))
    assert result.skipped == (0,) and [s.number for s in result.offloaded] == [1]
    [kept] = objects(tmp_path)
    assert kept.name.startswith("0000000001-")
