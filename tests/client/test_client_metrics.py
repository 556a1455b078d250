"""The client's own Prometheus metrics: add latency, ensemble changes, recoveries, on a
registry per client (none global)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

import bkframe

FAST = {"add_timeout_s": 2.0, "connect_timeout_s": 2.0}


def value(registry: CollectorRegistry, name: str, client_id: str) -> float:
    v = registry.get_sample_value(name, {"client_id": client_id})
    assert v is not None, f"no {name} for client {client_id}:\n{generate_latest(registry).decode()}"
    return v


async def test_client_metrics_count_adds_ensemble_changes_and_recoveries(cluster_factory: Any) -> None:
    cluster = cluster_factory(4)
    mine = CollectorRegistry()
    async with bkframe.open_client(cluster.metadata, metrics_registry=mine, **FAST) as writer_client:
        assert writer_client.metrics_registry is mine
        me = writer_client.client_id
        w = await writer_client.create_ledger(ensemble=3, write_quorum=3, ack_quorum=3, password=b"pw")
        await w.append_many([b"x"] * 10)
        assert value(mine, "bkframe_client_add_latency_seconds_count", me) == 10
        assert value(mine, "bkframe_client_add_latency_seconds_sum", me) > 0
        assert value(mine, "bkframe_client_ensemble_changes_total", me) == 0
        # A bookie of the ensemble dies: the next appends (A = W) wait for an ensemble change.
        cluster.by_id(w.metadata.fragments[0][1][0]).kill()
        await w.append_many([b"y"] * 5)
        assert value(mine, "bkframe_client_add_latency_seconds_count", me) == 15
        assert value(mine, "bkframe_client_ensemble_changes_total", me) == 1

        # Another client recovers the ledger the first still has open; its own registry counts it.
        async with bkframe.open_client(cluster.metadata, **FAST) as other:
            reader = await other.open_ledger(w.ledger_id, password=b"pw")
            assert reader.lac == 14
            theirs = other.metrics_registry
            assert theirs is not mine and theirs is other.metrics_registry
            assert value(theirs, "bkframe_client_recoveries_total", other.client_id) == 1
            assert value(theirs, "bkframe_client_add_latency_seconds_count", other.client_id) == 0
        assert value(mine, "bkframe_client_recoveries_total", me) == 0
