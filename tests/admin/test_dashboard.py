"""docs/grafana-dashboard.json asks only for metrics a bookie and a client expose."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from bkframe.admin.metrics import bookie_registry
from bkframe.client.metrics import client_registry
from bkframe.core.counters import ClientCounters
from bkframe.testing.cluster import make_config, running_bookie

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def series_names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names.update(family.name + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count"))
    return names


async def test_dashboard_uses_only_exposed_metrics(tmp_path: Path) -> None:
    async with running_bookie(make_config(tmp_path / "b")) as (service, _, _):
        exposed = series_names(bookie_registry(service))
    exposed |= series_names(client_registry(ClientCounters(), "c"))
    dashboard = json.loads(DASHBOARD.read_text())
    used = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\bbkframe_[a-z_]+", target["expr"])
    }
    assert len(used) > 20
    assert used <= exposed, f"not exposed: {sorted(used - exposed)}"
