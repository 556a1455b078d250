"""Prometheus metrics of the subscriptions a process owns: per (log, subscription), the
backlog, records in flight, waiting and delayed, and the totals delivered, redelivered, acked
and dead-lettered (docs/subscriptions.md, docs/admin.md). Read from the owners' state when the
registry is scraped; the totals are the subscription's own (durable across owners), so they
stay whole when another process takes the subscription over."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from bkframe.subscriptions.dispatcher import Dispatcher

PREFIX = "bkframe_subscription_"


class SubscriptionCollector:
    def __init__(self, owners: Callable[[], Iterable[Dispatcher]]) -> None:
        self.owners = owners

    def collect(self) -> Iterator[Metric]:
        labels = ["log", "subscription"]
        gauges = {
            "backlog": GaugeMetricFamily(PREFIX + "backlog", "Records not acked, as of the owner's last count", labels=labels),
            "in_flight": GaugeMetricFamily(PREFIX + "in_flight", "Records leased to a consumer", labels=labels),
            "waiting": GaugeMetricFamily(PREFIX + "waiting", "Records read and waiting for a consumer", labels=labels),
            "epoch": GaugeMetricFamily(PREFIX + "owner_epoch", "Owners the subscription has had", labels=labels),
        }
        counters = {
            "delivered": CounterMetricFamily(PREFIX + "delivered", "Leases of records (each delivery)", labels=labels),
            "redelivered": CounterMetricFamily(PREFIX + "redelivered", "Leases of records delivered before", labels=labels),
            "acked": CounterMetricFamily(PREFIX + "acked", "Records acked", labels=labels),
            "dead_lettered": CounterMetricFamily(PREFIX + "dead_lettered", "Records sent to the dead-letter log", labels=labels),
            # This owner's (not the subscription's): events per entry is the group commit's doing.
            "state_entries": CounterMetricFamily(PREFIX + "state_entries", "State-ledger entries of events this owner appended",
                                                 labels=labels),
            "state_events": CounterMetricFamily(PREFIX + "state_events", "Events in those entries", labels=labels),
        }
        for d in self.owners():
            if d.lost.is_set():
                continue
            key = [d.record.log, d.record.name]
            state, c = d.state, d.state.counters
            gauges["backlog"].add_metric(key, d.backlog)
            gauges["in_flight"].add_metric(key, state.in_flight())
            gauges["waiting"].add_metric(key, len(state.held))
            gauges["epoch"].add_metric(key, d.record.epoch)
            for name, value in (("delivered", c.delivered), ("redelivered", c.redelivered), ("acked", c.acked),
                                ("dead_lettered", c.dead_lettered)):
                counters[name].add_metric(key, value)
            counters["state_entries"].add_metric(key, d.entries_sent)
            counters["state_events"].add_metric(key, d.events_sent)
        yield from gauges.values()
        yield from counters.values()
