"""Compaction on a schedule: ``bkframe offloader`` compacts, each pass, the logs with
``compaction = key`` whose dirty part reached their ``min_dirty_ratio`` (docs/compaction.md,
"One compactor per log"), and counts what it did for Prometheus.

The dirty part of a log is what was written since its last compaction ended
(:attr:`~bkframe.client.logs.model.LogMetadata.compaction_end`): its ratio is the closed
bytes from there on over all the closed bytes. A log with a password is skipped (the
service has no log's password, and a compacted ledger must open with it: run ``bkframe log
compact --password``). Each log's run holds its compaction lock (:func:`compact`); a run
that fails is logged and tried at the next pass, and never stops the service.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import attrs
import trio

from bkframe.client.client import Client
from bkframe.client.context import ClientContext
from bkframe.client.logs.model import CompactionDefaults, LogMetadata, Segment
from bkframe.client.logs.records import LogRecords
from bkframe.client.settings import ClientSettings
from bkframe.compaction.compactor import compact
from bkframe.core.config import OffloadConfig
from bkframe.core.interfaces.metadata_store import MetadataStore
from bkframe.core.ledger_keys import password_hash
from bkframe.core.plugin_manager import PluginManager
from bkframe.errors import BKError, CompactionError, NoSuchLogError

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

log = logging.getLogger("bkframe.compaction")

PREFIX = "bkframe_compaction_"
#: Logs listed per metadata request.
LOG_PAGE = 500
NO_PASSWORD = password_hash(b"")


@attrs.define
class CompactionCounters:
    """What one service's compactions did since it started."""

    #: Runs by outcome: ``done``, ``failed``, ``busy`` (another compactor held the log).
    runs: defaultdict[str, int] = attrs.field(factory=lambda: defaultdict(int))
    records_read: int = 0
    records_dropped: int = 0
    bytes_read: int = 0
    bytes_dropped: int = 0
    tombstones_dropped: int = 0
    seconds: float = 0.0
    #: Each compacted log's dirty ratio as the last pass found it.
    dirty_ratio: dict[str, float] = attrs.field(factory=dict)


def defaults_of(config: OffloadConfig) -> CompactionDefaults:
    """The cluster's compaction defaults in a process's ``[offload]`` config."""
    return CompactionDefaults(config.compaction_lag_s, config.tombstone_retention_s, min(1.0, config.min_dirty_ratio))


def dirty_ratio(record: LogMetadata, segments: list[Segment]) -> float:
    """The share of the log's closed bytes written since its last compaction ended."""
    closed = [s for s in segments if s.closed]
    total = sum(s.length for s in closed)
    dirty = sum(s.length for s in closed if s.number >= record.compaction_end)
    return dirty / total if total else 0.0


@attrs.define
class CompactionService:
    """``await nursery.start(service.run)``: a pass every ``config.interval_s`` until
    cancelled; ``await service.run_pass()`` runs one. ``work_dir``: where key indexes spill
    (default: ``<spool_dir>/bkframe-compaction``)."""

    store: MetadataStore
    plugins: PluginManager
    config: OffloadConfig
    holder: str = attrs.field(kw_only=True)
    settings: ClientSettings | None = attrs.field(default=None, kw_only=True)
    counters: CompactionCounters = attrs.field(factory=CompactionCounters, kw_only=True)
    work_dir: Path = attrs.field(kw_only=True)
    defaults: CompactionDefaults = attrs.field(init=False)
    _records: LogRecords | None = attrs.field(default=None, init=False)
    _warned: set[str] = attrs.field(factory=set, init=False)

    @work_dir.default
    def _spool(self) -> Path:
        spool = Path(self.config.spool_dir) if self.config.spool_dir else Path(tempfile.gettempdir())
        return spool / "bkframe-compaction"

    def __attrs_post_init__(self) -> None:
        self.defaults = defaults_of(self.config)

    @property
    def records(self) -> LogRecords:
        assert self._records is not None, "run() or run_once() first"
        return self._records

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with anyio.create_task_group() as nursery:
            self._records = LogRecords(Client(ClientContext.create(nursery, self.store, self.plugins, self.settings)))
            task_status.started()
            while True:
                started = trio.current_time()
                try:
                    await self.run_pass()
                except Exception as e:  # noqa: BLE001 - the store down, a bug: logged, and the next pass runs
                    log.warning("compaction pass failed (%r); the next one starts in %g s", e, self.config.interval_s)
                await trio.sleep_until(started + self.config.interval_s)

    async def run_once(self) -> None:
        async with anyio.create_task_group() as nursery:
            self._records = LogRecords(Client(ClientContext.create(nursery, self.store, self.plugins, self.settings)))
            try:
                await self.run_pass()
            finally:
                nursery.cancel_scope.cancel()

    async def run_pass(self) -> None:
        """Each log whose dirty part is due, compacted once."""
        start = ""
        while True:
            with trio.fail_after(self.config.request_timeout_s):
                names = await self.store.list_logs(start=start, limit=LOG_PAGE)
            for name in names:
                await self.serve_log(name)
            if len(names) < LOG_PAGE:
                return
            start = names[-1] + "\0"

    async def serve_log(self, name: str) -> None:
        try:
            with trio.fail_after(self.config.request_timeout_s):
                record = await self.records.read(name)
                if record.settings.compaction != "key":
                    self.counters.dirty_ratio.pop(name, None)
                    return
                segments = await self.records.segments(record, record.start.segment)
        except NoSuchLogError:
            return
        except (BKError, OSError, trio.TooSlowError) as e:
            log.warning("log %r: not looked at for compaction this pass: %s", name, e or type(e).__name__)
            return
        ratio = dirty_ratio(record, segments)
        self.counters.dirty_ratio[name] = ratio
        if ratio < self.defaults.dirty_ratio(record.settings) or ratio == 0:
            return
        if record.password_hash != NO_PASSWORD:
            if name not in self._warned:
                self._warned.add(name)
                log.warning("log %r has a password: compact it with 'bkframe log compact %s --password'", name, name)
            return
        started = time.monotonic()
        try:
            result = await compact(
                self.records, name, password=b"", work_dir=self.work_dir,
                memory_bytes=self.config.compaction_memory_mb << 20, holder=self.holder,
                lock_ttl_s=self.config.lock_ttl_s, defaults=self.defaults,
            )
        except CompactionError as e:
            self.counters.runs["busy"] += 1
            log.info("log %r: %s", name, e)
            return
        except Exception as e:  # noqa: BLE001 - one log never stops the pass; the next pass retries it
            self.counters.runs["failed"] += 1
            self.counters.seconds += time.monotonic() - started
            log.warning("log %r: compaction failed, retried at the next pass: %r", name, e)
            return
        c = self.counters
        c.runs["done"] += 1
        c.records_read += result.records_read
        c.records_dropped += result.records_dropped
        c.bytes_read += result.bytes_read
        c.bytes_dropped += result.bytes_dropped
        c.tombstones_dropped += result.tombstones_dropped
        c.seconds += result.seconds
        c.dirty_ratio[name] = 0.0


class CompactionCollector:
    def __init__(self, counters: CompactionCounters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c = self.counters
        runs = CounterMetricFamily(PREFIX + "runs", "Compactions of logs, by outcome (done, failed, busy)", labels=["outcome"])
        for outcome, times in sorted(c.runs.items()):
            runs.add_metric([outcome], times)
        yield runs
        counted: list[tuple[str, float, str]] = [
            ("records_read", c.records_read, "Records compactions read"),
            ("records_dropped", c.records_dropped, "Records compactions dropped (older values, tombstones)"),
            ("bytes_read", c.bytes_read, "Bytes compactions read"),
            ("bytes_dropped", c.bytes_dropped, "Bytes compactions dropped"),
            ("tombstones_dropped", c.tombstones_dropped, "Tombstones compactions dropped"),
            ("seconds", c.seconds, "Seconds compactions took"),
        ]
        for name, value, doc in counted:
            counter = CounterMetricFamily(PREFIX + name, doc)
            counter.add_metric([], value)
            yield counter
        dirty = GaugeMetricFamily(PREFIX + "dirty_ratio", "Share of a log written since its last compaction", labels=["log"])
        for name, ratio in sorted(c.dirty_ratio.items()):
            dirty.add_metric([name], ratio)
        yield dirty


def register(counters: CompactionCounters, registry: CollectorRegistry) -> CollectorRegistry:
    registry.register(CompactionCollector(counters))
    return registry
