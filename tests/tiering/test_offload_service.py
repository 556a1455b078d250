"""The offload service on real processes: ``bkframe offloader`` SIGKILLed at each step of a
segment's way to the tier and off the bookies, two services at once, a tier that goes away
and comes back -- on the session's three real bookies, directory tiers and moto's S3 server.

Whatever happened, in the end every record reads back byte for byte (a reader opened before
the ledgers were deleted too), each closed segment is one object in the tier and the tier
holds no object the metadata does not name, and no ledger of a segment past its deletion lag
is left.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
from prometheus_client import generate_latest

import bkframe
from bkframe import Record
from bkframe.autorecovery.service import AutorecoveryService
from bkframe.client.logs.model import LogEntry, Segment
from bkframe.client.settings import ClientSettings
from bkframe.common.cluster_record import require_cluster
from bkframe.core.config import AutorecoveryConfig, OffloadConfig
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import NoSuchLedgerError
from bkframe.testing.cluster import Cluster
from bkframe.testing.faults.offloader import CRASH_AT_ENV
from bkframe.testing.kit import wait_until
from bkframe.testing.servers import S3Server
from bkframe.tiering.keys import segment_key
from bkframe.tiering.offload_metrics import OffloadCounters, offload_registry
from bkframe.tiering.offload_service import OffloadService, lock_name

PASSWORD = b"offloader"
PER_SEGMENT = 60
#: Event times in 2025: every closed segment is older than any offload_after_s below.
BASE_MS = 1_750_000_000_000
#: The service's [offload] in these tests: short periods, graces and back-offs (a lock's TTL
#: long enough for its keep-alive to get through at load 30; the crash test waits it out).
FAST = dict(interval_s=0.2, lock_ttl_s=10.0, request_timeout_s=20.0, tier_timeout_s=10.0, min_backoff_s=0.2,
            max_backoff_s=0.8)


@pytest.fixture(scope="module")
def offload_cluster(module_cluster_factory: Any) -> Cluster:
    """A cluster of this module's own: an offload service works on every log of its cluster,
    and the shared one holds other modules' logs with offload settings of their own."""
    cluster: Cluster = module_cluster_factory(3)
    return cluster


def records(count: int, first: int = 0) -> list[Record]:
    rng = random.Random(first)
    return [
        Record(rng.randbytes(rng.randrange(40, 300)), b"k%d" % (i % 5) if i % 2 else None, BASE_MS + 1000 * i,
               {"n": str(i)} if i % 7 == 0 else None)
        for i in range(first, first + count)
    ]


async def write_log(uri: str, name: str, segments: int, **settings: Any) -> list[LogEntry]:
    """A log of ``segments`` + 1 closed segments; every entry as the bookies give it."""
    async with bkframe.open_client(uri) as client:
        await client.logs.create(name, password=PASSWORD, rollover_entries=PER_SEGMENT, **settings)
        async with await client.logs.open_writer(name, password=PASSWORD) as writer:
            await writer.append_many(records(segments * PER_SEGMENT + 5))  # the last 5: closed with the writer
        return await (await client.logs.reader(name, password=PASSWORD)).read()


def config_file(tmp: Path, **offload: Any) -> Path:
    path = tmp / f"offload-{uuid.uuid4().hex[:6]}.toml"
    lines = ["[offload]"] + [f"{k} = {v!r}" if not isinstance(v, str) else f'{k} = "{v}"' for k, v in offload.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


#: ``bkframe offloader ARGS`` in a process that has imported the command, the plugins and the
#: Parquet writer, and waits for a line on stdin to run it: the imports (seconds at load 15,
#: what a long-running service pays once) overlap the test's other work.
WARM = (
    "import sys; from bkframe.cli.offloader import offloader; from bkframe.core.plugin_manager import PluginManager; "
    "from bkframe.testing.faults.offloader import install_from_env; install_from_env(); "
    "PluginManager(); import bkframe.tiering.segment_writer; "
    "sys.stdin.readline(); offloader(prog_name='bkframe offloader')"
)


def offloader(uri: str, config: Path, *, crash_at: str | None = None) -> subprocess.Popen[str]:
    """``bkframe offloader --once``, started (importing) but not running: :func:`finish` runs it."""
    env = {k: v for k, v in os.environ.items() if k != CRASH_AT_ENV}
    if crash_at is not None:
        env[CRASH_AT_ENV] = crash_at
    return subprocess.Popen(
        [sys.executable, "-c", WARM, "--metadata", uri, "--config", str(config), "--once"],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def finish(proc: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate("go\n", timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


async def until_lock_free(uri: str, name: str) -> None:
    """A killed service's lock on the log vanishes ``lock_ttl_s`` after it died: a service
    started before then skips the log this pass."""
    store = PluginManager().metadata_store(uri)

    async def free() -> bool:
        return await store.lock_holder(lock_name(name)) is None

    try:
        await wait_until(free, f"the lock on {name} to vanish", 30, every_s=0.1)
    finally:
        await store.aclose()


async def one_pass(uri: str, config: OffloadConfig) -> OffloadCounters:
    """A pass of a service in this process, as the cluster's own (as ``bkframe offloader --once``)."""
    counters = OffloadCounters()
    plugins = PluginManager()
    store = plugins.metadata_store(uri)
    try:
        settings = ClientSettings().as_internal((await require_cluster(store)).secret)
        await OffloadService(store, plugins, config, holder="test", settings=settings, counters=counters).run_once()
    finally:
        await store.aclose()
    return counters


def tier_keys(uri: str) -> list[str]:
    tier = PluginManager().tier(uri)
    try:
        return [o.key for o in tier.list("segments/")]
    finally:
        tier.close()


async def closed_segments(uri: str, name: str) -> list[Segment]:
    async with bkframe.open_client(uri) as client:
        record = await client.logs.metadata(name)
        return [s for s in await client.logs._records.segments(record) if s.closed and s.entries > 0]


async def assert_done(uri: str, name: str, tier: str, hot: list[LogEntry]) -> None:
    """Everything offloaded once, off the bookies, readable byte for byte, nothing unnamed."""
    closed = await closed_segments(uri, name)
    assert closed and all(s.offload is not None and not s.offload.on_bookies for s in closed), closed
    keys = tier_keys(tier)
    assert sorted(keys) == sorted(s.offload.key for s in closed if s.offload is not None)  # one each, no stray
    async with bkframe.open_client(uri) as client:
        for seg in closed:
            with pytest.raises(NoSuchLedgerError):
                await client.ledger_metadata(seg.ledger_id)
        reader = await client.logs.reader(name, password=PASSWORD)
        assert await reader.read() == hot
        assert (await reader.to_arrow()).column("payload").to_pylist() == [e.payload for e in hot]


async def test_killed_at_every_step_a_restarted_service_finishes_the_job(offload_cluster: Cluster, tmp_path: Path) -> None:
    """SIGKILLed after the put (before the record), after the record (before the deletion),
    and after the unmark (before the ledger's deletion): each run picks up where the last
    died, and the last finishes."""
    uri, name = offload_cluster.metadata, f"crash-{uuid.uuid4().hex[:8]}"
    tier_root = tmp_path / "tier"
    tier_root.mkdir()
    tier = tier_root.as_uri()
    config = config_file(tmp_path, tier=tier, **{**FAST, "lock_ttl_s": 2.5})
    steps = {step: offloader(uri, config, crash_at=step) for step in ("put", "recorded", "unmarked")}
    # The log names no tier: the service's default applies; a lag of 0 deletes at once.
    hot = await write_log(uri, name, 3, offload_after_s=60.0, offload_deletion_lag_s=0.0)
    async with bkframe.open_client(uri) as client:
        # Readers whose record says: all on the bookies. Two of them are half way through
        # segment 0 (a read in chunks, a tail) when the ledgers go, and go on after.
        early, reading, tailing = [await client.logs.reader(name, password=PASSWORD) for _ in range(3)]
        assert await early.read() == hot
        chunks = reading.chunks()
        read = list(await chunks.__anext__())
        tail = tailing.tail("earliest", poll_timeout_s=0.2)
        tailed = [await tail.__anext__() for _ in range(PER_SEGMENT // 2)]
        for step, proc in steps.items():
            await until_lock_free(uri, name)
            died = await trio.to_thread.run_sync(finish, proc)
            assert died.returncode == -signal.SIGKILL, (step, died.stderr)
            assert f"{CRASH_AT_ENV}={step}" in died.stderr
        after = {s.number: s.offload for s in await closed_segments(uri, name)}
        # Segment 0: put, adopted and recorded, unmarked; its ledger not deleted yet. The
        # others were offloaded by the last run before it died at segment 0's deletion.
        assert after[0] is not None and not after[0].on_bookies
        assert all(o is not None and o.on_bookies for n, o in after.items() if n > 0)
        assert (await client.ledger_metadata(hot[0].ledger_id)).ledger_id == hot[0].ledger_id
        fast = OffloadConfig(tier=tier, **FAST)
        await until_lock_free(uri, name)
        done = await one_pass(uri, fast)  # a service started again
        assert (sum(done.segments.values()), done.ledgers_deleted) == (0, len(after))
        await assert_done(uri, name, tier, hot)
        # The readers opened before any of it find the ledgers gone and read the objects.
        assert await early.read() == hot
        assert (await early.to_arrow()).column("key").to_pylist() == [e.key for e in hot]
        at = hot[PER_SEGMENT + 7]
        assert at.timestamp is not None
        assert await early.resolve(datetime.fromtimestamp(at.timestamp / 1000, UTC)) == at.position
        with trio.fail_after(30):
            read += [e async for c in chunks for e in c]
            while len(tailed) < len(hot):
                tailed.append(await tail.__anext__())
        await tail.aclose()
        assert read == hot and tailed == hot
    again = await one_pass(uri, fast)
    assert (sum(again.segments.values()), again.ledgers_deleted, again.log_errors) == (0, 0, 0)


async def test_two_services_at_once_offload_each_segment_once_to_s3(
    offload_cluster: Cluster, s3_server: S3Server, tmp_path: Path
) -> None:
    """Two ``bkframe offloader`` processes started together over four logs: the lock gives
    each log one owner, so each segment is offloaded by exactly one of them."""
    uri = offload_cluster.metadata
    credentials = s3_server.credentials_file(tmp_path / "s3.ini")
    tier = f"s3://{s3_server.bucket()}/lake?endpoint={s3_server.endpoint}&credentials={credentials}&region=us-east-1"
    names = [f"pair-{i}-{uuid.uuid4().hex[:6]}" for i in range(4)]
    hot: dict[str, list[LogEntry]] = {}

    async def write(name: str) -> None:  # the tier named by each log; the deletion lag long: the ledgers stay
        hot[name] = await write_log(uri, name, 1, offload_tier=tier, offload_beyond_bytes=1)

    config = config_file(tmp_path, **FAST)
    procs = [offloader(uri, config) for _ in range(2)]
    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(write, name)
    for proc in procs:  # both at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outs = [await trio.to_thread.run_sync(finish, p) for p in procs]
    assert [o.returncode for o in outs] == [0, 0], [o.stderr for o in outs]
    counts = [int(o.stdout.split()[1]) for o in outs]
    assert sum(counts) == 4 * 2, outs  # each of the 8 segments once, by one of the two
    keys = tier_keys(tier)
    named = []
    for name in names:
        closed = await closed_segments(uri, name)
        assert [s.offload is not None and s.offload.on_bookies for s in closed] == [True] * 2
        named += [s.offload.key for s in closed if s.offload is not None]
    assert sorted(keys) == sorted(named)
    async with bkframe.open_client(uri) as client:
        for name in names:
            reader = await client.logs.reader(name, password=PASSWORD)
            assert await reader.read() == hot[name]
            assert reader.tier_reads.object_reads > 0 and reader.tier_reads.fallbacks == 0


async def test_a_tier_that_goes_away_is_backed_off_and_resumed(
    offload_cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The tier's directory missing: the service -- run by autorecovery with ``[offload]
    enabled`` -- backs off (one warning, not one per try) while the log is written and read
    as ever, and a log of another tier is offloaded meanwhile; back, it offloads and says so.
    The other tier's orphan sweep deletes an object no log names once past the grace, and
    leaves a younger one."""
    uri, name, other = offload_cluster.metadata, f"away-{uuid.uuid4().hex[:8]}", f"here-{uuid.uuid4().hex[:8]}"
    tier_root = tmp_path / "tier"
    tier = tier_root.as_uri()
    (tmp_path / "tier2").mkdir()
    tier2 = (tmp_path / "tier2").as_uri()
    hot = await write_log(uri, name, 2, offload_tier=tier, offload_after_s=60.0, offload_deletion_lag_s=0.0)
    await write_log(uri, other, 1, offload_tier=tier2, offload_after_s=60.0)
    old_orphan, young_orphan = (tmp_path / "tier2" / segment_key(uuid.uuid4().hex, 0, 1) for _ in range(2))
    for orphan in (old_orphan, young_orphan):
        orphan.parent.mkdir(parents=True)
        orphan.write_bytes(b"an offload that died between its put and its commit")
    two_hours_ago = datetime.now(UTC).timestamp() - 7200
    os.utime(old_orphan, (two_hours_ago, two_hours_ago))
    caplog.set_level(logging.INFO, logger="bkframe.offload")
    async with bkframe.open_client(uri) as client:
        store = PluginManager().metadata_store(uri)
        secret = (await require_cluster(store)).secret
        settings = client.settings.as_internal(secret)
        service = AutorecoveryService(
            store, PluginManager(), AutorecoveryConfig(), holder="test", settings=settings,
            offload=OffloadConfig(enabled=True, **FAST, sweep_interval_s=0.5, orphan_grace_s=3600.0),
        )
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run)
                assert service.offloader is not None
                counters = service.offloader.counters
                with trio.fail_after(30):
                    while counters.failures[tier] < 3 or counters.segments[tier2] < 2:
                        await trio.sleep(0.05)
                # Meanwhile the log takes writes and its hot segments read as ever.
                async with await client.logs.open_writer(name, password=PASSWORD) as writer:
                    await writer.append_many(more := records(30, first=10_000))
                reader = await client.logs.reader(name, password=PASSWORD)
                now = await reader.read()
                assert now[: len(hot)] == hot and [e.payload for e in now[len(hot):]] == [r.payload for r in more]
                assert counters.segments[tier] == 0 and counters.lag_s[tier] > 0
                tier_root.mkdir()
                with trio.fail_after(30):
                    while counters.ledgers_deleted < 4 or not counters.orphans_deleted:  # segments 0 to 2, and
                        await trio.sleep(0.05)  # the one the writer above closed; the old orphan
                    # The lag is a whole pass's figure, set as the pass ends: wait for the end of
                    # the pass that offloaded the last segment (else it is the pass before's).
                    settled = counters.passes + 1
                    while counters.passes < settled:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        finally:
            await store.aclose()
    failing = [r for r in caplog.records if f"tier {tier} is failing" in r.getMessage()]
    assert len(failing) == 1, [r.getMessage() for r in failing]
    assert any("works again" in r.getMessage() for r in caplog.records)
    assert counters.segments[tier] == 4 and counters.lag_s.get(tier, 0.0) == 0.0
    metrics = generate_latest(offload_registry(counters)).decode()
    assert f'bkframe_offload_segments_total{{tier="{tier}"}} 4.0' in metrics
    assert f'bkframe_offload_failures_total{{tier="{tier}"}}' in metrics
    assert "bkframe_offload_ledgers_deleted_total 4.0" in metrics
    assert "bkframe_offload_orphans_deleted_total 1.0" in metrics
    assert not old_orphan.exists() and young_orphan.exists()
    await assert_done(uri, name, tier, now)
