"""Prometheus metrics of one client: add latency, ensemble changes, recoveries.

The client counts in plain numbers (:class:`~bkframe.core.counters.ClientCounters`); this
collector reads them when the registry is scraped. There is no global registry: a client's
metrics go on the registry given to :func:`bkframe.open_client` (``metrics_registry=``), or on
one of its own (:attr:`Client.metrics_registry`), which the application exposes as it likes
(``prometheus_client.generate_latest(registry)``, ``start_http_server(port, registry=...)``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from bkframe.core.counters import ClientCounters

PREFIX = "bkframe_client_"


class ClientCollector:
    def __init__(self, counters: ClientCounters, client_id: str) -> None:
        self.counters = counters
        self.client_id = client_id

    def collect(self) -> Iterator[Metric]:
        c = self.counters
        labels = ["client_id"]
        h = c.add_latency
        latency = HistogramMetricFamily(
            PREFIX + "add_latency_seconds", "Seconds from append to confirmation (one per entry)", labels=labels
        )
        buckets: list[tuple[str, float]] = []
        cumulative = 0
        for bound, n in zip((*h.buckets, float("inf")), h.counts):
            cumulative += n
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        latency.add_metric([self.client_id], buckets, h.total)
        yield latency
        for name, value, doc in [
            ("ensemble_changes", c.ensemble_changes, "Ensemble changes committed by this client's writers"),
            ("recoveries", c.recoveries, "Ledgers this client recovered (opened with recovery and closed)"),
            ("recovery_failures", c.recovery_failures, "Recoveries that failed"),
            ("tries_again", c.tries_again, "Requests sent again to a bookie that answered TRY_AGAIN (a key check pending)"),
        ]:
            family = CounterMetricFamily(PREFIX + name, doc, labels=labels)
            family.add_metric([self.client_id], value)
            yield family


def client_registry(counters: ClientCounters, client_id: str, registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """``registry`` (a new one if None) with the client's collector registered on it."""
    registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
    registry.register(ClientCollector(counters, client_id))
    return registry
