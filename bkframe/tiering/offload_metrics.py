"""Prometheus metrics of the offload service: segments and bytes offloaded per tier,
failures per tier, the offload lag, ledgers deleted after the deletion lag.

The service counts in plain numbers (:class:`OffloadCounters`); :class:`OffloadCollector`
reads them when a registry is scraped (``bkframe offloader --metrics-port``, or a registry
the caller exposes).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import Metric

PREFIX = "bkframe_offload_"


@attrs.define
class OffloadCounters:
    """What one offload service did since it started."""

    segments: defaultdict[str, int] = attrs.field(factory=lambda: defaultdict(int))
    #: Bytes of the objects put (Parquet, compressed).
    object_bytes: defaultdict[str, int] = attrs.field(factory=lambda: defaultdict(int))
    #: Bytes of the segments offloaded, as the ledgers stored them.
    segment_bytes: defaultdict[str, int] = attrs.field(factory=lambda: defaultdict(int))
    failures: defaultdict[str, int] = attrs.field(factory=lambda: defaultdict(int))
    #: Per tier, after the last pass: seconds since the oldest segment still due became due.
    lag_s: dict[str, float] = attrs.field(factory=dict)
    ledgers_deleted: int = 0
    passes: int = 0
    #: Logs a pass could not finish (not a tier's failure: a metadata or bookie error).
    log_errors: int = 0
    #: Objects no log names that the orphan sweeps deleted.
    orphans_deleted: int = 0


class OffloadCollector:
    def __init__(self, counters: OffloadCounters) -> None:
        self.counters = counters

    def collect(self) -> Iterator[Metric]:
        # prometheus_client is imported when scraped: every bookie counts its offloads, few
        # export them (prometheus_client alone is ~0.08 CPU-s to import).
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c = self.counters
        for name, values, doc in [
            ("segments", c.segments, "Segments offloaded to the tier"),
            ("object_bytes", c.object_bytes, "Bytes of the objects put in the tier"),
            ("segment_bytes", c.segment_bytes, "Bytes of the segments offloaded (as the ledgers stored them)"),
            ("failures", c.failures, "Offloads to the tier that failed (the tier unreachable, refusing, too slow)"),
        ]:
            family = CounterMetricFamily(PREFIX + name, doc, labels=["tier"])
            for tier, value in sorted(values.items()):
                family.add_metric([tier], value)
            yield family
        lag = GaugeMetricFamily(
            PREFIX + "lag_seconds", "Age of the oldest segment due for offload and not offloaded (0: none)", labels=["tier"]
        )
        for tier, seconds in sorted(c.lag_s.items()):
            lag.add_metric([tier], seconds)
        yield lag
        for name, value, doc in [
            ("ledgers_deleted", c.ledgers_deleted, "Offloaded segments' ledgers deleted from the bookies after the lag"),
            ("passes", c.passes, "Passes over the logs"),
            ("log_errors", c.log_errors, "Logs a pass could not finish (metadata or bookie errors)"),
            ("orphans_deleted", c.orphans_deleted, "Objects no log names that the orphan sweeps deleted"),
        ]:
            counter = CounterMetricFamily(PREFIX + name, doc)
            counter.add_metric([], value)
            yield counter


def offload_registry(counters: OffloadCounters, registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """``registry`` (a new one if None) with the service's collector on it."""
    from prometheus_client import CollectorRegistry

    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(OffloadCollector(counters))
    return registry
