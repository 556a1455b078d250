"""Prometheus metrics of one bookie, read at scrape time.

No metric object is updated on the add path: the bookie keeps plain ints and fixed-bucket
histograms in its :class:`~bkframe.core.counters.Counters` (the journal plugin counts through
them too, without importing prometheus), and :class:`BookieCollector` turns them and the
bookie's state into metric families when ``/metrics`` is scraped. Each bookie gets its own
:class:`~prometheus_client.CollectorRegistry` (no global state: tests run several bookies in
one process).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from bkframe.core.counters import Counters, Histogram
from bkframe.storage_kit.directory_lock import LOCK_FILE

if TYPE_CHECKING:
    from bkframe.bookie.bookie import Bookie
    from bkframe.bookie.service import BookieService
    from bkframe.core.interfaces.ledger_storage import LedgerStorage

PREFIX = "bkframe_bookie_"
#: Counters fields that are gauges (a level now), not totals.
GAUGE_FIELDS = frozenset({"journal_queued_bytes", "long_polls_waiting", "inflight_bytes"})
#: Derived from others (journal_fsyncs + storage_fsyncs): a sum in PromQL, not a series;
#: connections_open is the ``connections`` gauge below.
SKIPPED_FIELDS = frozenset({"fsyncs", "connections_open"})


def histogram_family(
    name: str, doc: str, by_label: dict[str, Histogram] | Histogram, label: str = ""
) -> HistogramMetricFamily:
    """A prometheus histogram from plain ones (one series per label value)."""
    family = HistogramMetricFamily(name, doc, labels=[label] if label else None)
    items = by_label.items() if isinstance(by_label, dict) else [("", by_label)]
    for value, h in sorted(items):
        cumulative = 0
        buckets: list[tuple[str, float]] = []
        for bound, n in zip((*h.buckets, float("inf")), h.counts):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        family.add_metric([value] if label else [], buckets, h.total)
    return family


def entry_log_files(directory: Path) -> tuple[int, int]:
    """(files, bytes) of the entry logs."""
    files = size = 0
    try:
        with os.scandir(directory) as it:
            for entry in it:
                if entry.is_file() and entry.name != LOCK_FILE:
                    files += 1
                    size += entry.stat().st_size
    except FileNotFoundError:
        pass
    return files, size


def open_fds() -> int:
    """File descriptors this process has open (0 where /proc is not there)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


class BookieCollector:
    """What a bookie has done (counters) and is (state), read when scraped."""

    def __init__(self, service: BookieService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        bookie = self.service.bookie
        if bookie is None:
            return
        yield from self._counters(bookie.counters)
        yield self._ledgers(bookie.storage)
        yield from self._bookie_gauges(bookie)

    @staticmethod
    def _counters(counters: Counters) -> Iterator[Metric]:
        for name, value in counters.as_dict().items():
            if name in SKIPPED_FIELDS:
                continue
            doc = f"Counters.{name} of the bookie (see bkframe/core/counters.py)"
            if name in GAUGE_FIELDS:
                yield GaugeMetricFamily(PREFIX + name, doc, value=value)
            else:
                yield CounterMetricFamily(PREFIX + name, doc, value=value)
        yield histogram_family(
            PREFIX + "add_request_latency_seconds",
            "Seconds from reading a frame of adds to sending their answers (after the fsync the ledger type needs)",
            counters.add_latency, "ledger_type",
        )
        yield histogram_family(
            PREFIX + "read_request_latency_seconds", "Seconds from reading a frame of reads to sending the entries",
            counters.read_latency, "ledger_type",
        )
        yield histogram_family(
            PREFIX + "journal_fsync_latency_seconds", "Seconds each journal group took to write and fsync",
            counters.journal_fsync_latency,
        )
        yield histogram_family(
            PREFIX + "journal_group_size_bytes", "Bytes per journal group commit", counters.journal_group_bytes
        )

    @staticmethod
    def _ledgers(storage: LedgerStorage) -> Metric:
        states = {"all": 0, "fenced": 0, "limbo": 0, "write_closed": 0}
        for ledger_id in storage.ledgers():
            state = storage.ledger_state(ledger_id)
            if state is None:
                continue
            states["all"] += 1
            states["fenced"] += state.fenced
            states["limbo"] += state.limbo
            states["write_closed"] += state.write_closed
        ledgers = GaugeMetricFamily(PREFIX + "ledgers", "Ledgers held here, all and by state", labels=["state"])
        for state_name, n in states.items():
            ledgers.add_metric([state_name], n)
        return ledgers

    def _bookie_gauges(self, bookie: Bookie) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            PREFIX + "read_only", "1 while the bookie refuses adds (read-only mode)", value=int(bookie.read_only)
        )
        server = self.service.server
        yield GaugeMetricFamily(PREFIX + "connections", "Client connections open now", value=server.connections if server else 0)
        files, size = entry_log_files(bookie.data_dir / "entrylogs")
        yield GaugeMetricFamily(PREFIX + "entry_log_files", "Entry log files on disk", value=files)
        yield GaugeMetricFamily(PREFIX + "entry_log_bytes", "Bytes of the entry log files on disk", value=size)
        usage = bookie.mode.usage
        if usage is not None:
            free = "Free bytes of the fullest filesystem the bookie writes, less its missing reserved space (last check)"
            yield GaugeMetricFamily(PREFIX + "disk_free_bytes", free, value=usage.free)
            total = "Size of the fullest filesystem the bookie writes (last check)"
            yield GaugeMetricFamily(PREFIX + "disk_total_bytes", total, value=usage.total)
        yield GaugeMetricFamily(PREFIX + "start_time_seconds", "Unix time the bookie started", value=bookie.started_at)
        yield GaugeMetricFamily(PREFIX + "open_fds", "File descriptors the bookie process has open", value=open_fds())
        lag = self.service.loop_lag
        yield GaugeMetricFamily(
            "bkframe_event_loop_lag_seconds",
            f"Longest the bookie's event loop was held (a {lag.period_s} s sleep woke late by this) in the last "
            f"{lag.window_s:g} to {2 * lag.window_s:g} s",
            value=lag.recent_max,
        )
        yield GaugeMetricFamily(
            "bkframe_event_loop_lag_max_seconds", "Longest the bookie's event loop was held since start",
            value=lag.max_since_start,
        )


def bookie_registry(service: BookieService) -> CollectorRegistry:
    """A registry of its own for one bookie: its own numbers, and the subscription owners it
    hosts (docs/subscriptions.md)."""
    from bkframe.subscriptions.metrics import SubscriptionCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BookieCollector(service))
    registry.register(SubscriptionCollector(lambda: _hosted_owners(service)))
    return registry


def _hosted_owners(service: BookieService) -> list[Any]:
    """The subscription owners the bookie's host holds (the dispatchers; a test's fakes not)."""
    bookie = service.bookie
    host = None if bookie is None else bookie.context.subscriptions
    owners = getattr(host, "owners", {})
    return [o for o in owners.values() if hasattr(o, "state") and hasattr(o, "record")]
