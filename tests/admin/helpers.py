"""Talking to a bookie's admin HTTP service from tests (urllib, off the event loop)."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from typing import Any

import trio


def fetch_sync(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


async def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str]:
    return await trio.to_thread.run_sync(fetch_sync, url, method, headers)


async def fetch_json(url: str, method: str = "GET") -> tuple[int, Any]:
    status, body = await fetch(url, method)
    return status, json.loads(body)


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one series in Prometheus text format (an error if it is not there)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = re.escape(name) + (r"\{" + re.escape(want) + r"\}" if want else "") + r" (\S+)$"
    for line in metrics.splitlines():
        m = re.match(pattern, line)
        if m:
            return float(m.group(1))
    raise AssertionError(f"no series {name}{{{want}}} in the metrics")
