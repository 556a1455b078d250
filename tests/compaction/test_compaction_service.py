"""Compaction on a schedule (``bkframe offloader``): a log is compacted once its dirty part
reaches ``min_dirty_ratio``, not before; a log with a password is left alone; what was done
is counted for Prometheus. Real bookies (the shared sqlite cluster)."""

from __future__ import annotations

import bkframe
from bkframe.client.settings import ClientSettings
from bkframe.common.cluster_record import require_cluster
from bkframe.compaction.service import CompactionCollector, CompactionCounters, CompactionService
from bkframe.core.config import OffloadConfig
from bkframe.core.plugin_manager import PluginManager
from bkframe.testing.cluster import Cluster
from tests.cli.forked_cli import bkframe_text


async def _one_pass(uri: str, counters: CompactionCounters) -> None:
    plugins = PluginManager()
    store = plugins.metadata_store(uri)
    try:
        settings = ClientSettings().as_internal((await require_cluster(store)).secret)
        await CompactionService(store, plugins, OffloadConfig(), holder="test", settings=settings, counters=counters).run_once()
    finally:
        await store.aclose()


async def _write(logs: bkframe.Logs, name: str, values: range, *, keys: int, password: bytes = b"") -> None:
    async with await logs.open_writer(name, password=password) as writer:
        for i in values:
            writer.append_async(b"v%d" % i, key=b"k%d" % (i % keys))


async def test_a_log_is_compacted_when_its_dirty_part_is_due_and_not_before(shared_cluster: Cluster) -> None:
    uri = shared_cluster.metadata
    async with bkframe.open_client(uri) as client:
        logs = client.logs
        common = dict(ensemble=1, write_quorum=1, ack_quorum=1, rollover_entries=10, compaction="key")
        await logs.create("sched-due", min_dirty_ratio=0.5, **common)
        await logs.create("sched-secret", password=b"pw", **common)
        # 100 keys written once: the first pass compacts (all of it is dirty) and drops nothing.
        await _write(logs, "sched-due", range(100), keys=100)
        await _write(logs, "sched-secret", range(40), keys=3, password=b"pw")
        counters = CompactionCounters()
        # Other tests' logs share the cluster: a pass may compact them too, so what is
        # checked is this log's record and its own gauge.
        await _one_pass(uri, counters)
        first = await logs.metadata("sched-due")
        assert first.compaction_end == first.next_segment == 10 and counters.runs["done"] >= 1
        secret = await logs.metadata("sched-secret")
        assert all(s.compacted is None for s in secret.segments), "a log with a password is not the service's"
        # A few updates: a dirty part of about 10% is not due.
        await _write(logs, "sched-due", range(10), keys=100)
        await _one_pass(uri, counters)
        assert 0 < counters.dirty_ratio["sched-due"] < 0.5
        assert (await logs.metadata("sched-due")).compaction_end == first.compaction_end
        # Many more: due, compacted, the updated keys' older values dropped.
        await _write(logs, "sched-due", range(100, 250), keys=100)
        dropped_before = counters.records_dropped
        await _one_pass(uri, counters)
        assert (await logs.metadata("sched-due")).compaction_end > first.compaction_end
        assert counters.records_dropped - dropped_before >= 100
        assert counters.dirty_ratio["sched-due"] == 0.0
        # The metrics.
        families = {m.name: m for m in CompactionCollector(counters).collect()}
        assert next(s.value for s in families["bkframe_compaction_runs"].samples if s.labels["outcome"] == "done") >= 2
        assert "sched-due" in {s.labels["log"] for s in families["bkframe_compaction_dirty_ratio"].samples}


def test_the_offloader_compacts_once_from_the_command_line(shared_cluster: Cluster) -> None:
    meta = ("--metadata", shared_cluster.metadata)
    assert bkframe_text("log", "create", "sched-cli", *meta, "-e", "1", "-w", "1", "-a", "1", "--rollover-entries", "5",
                        "--compaction", "key").returncode == 0
    lines = "".join(f"k{i % 2}={i}\n" for i in range(20))
    assert bkframe_text("log", "append", "sched-cli", *meta, "--key-separator", "=", stdin=lines).returncode == 0
    done = bkframe_text("offloader", *meta, "--once")
    assert done.returncode == 0, done.stderr
    assert "compacted" in done.stdout, done.stdout
    table = bkframe_text("log", "read", "sched-cli", *meta, "--keys")
    assert table.stdout.splitlines() == ["k0\t18", "k1\t19"]
