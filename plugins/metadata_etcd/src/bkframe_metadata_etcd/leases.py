"""Lease keep-alives and revokes through whichever etcd member the store talks to now.

etcd3gw's ``Lease`` object sends them through the client it was made with: one member. Once
that member is cut off, every keep-alive waits for the client's timeout and fails, although
the other members would take it, and the lease expires -- and with it a bookie's
registration or a lock. These go through the client given (the store's current member,
which its retry loop moves to the next one on a failure), with a deadline of their own that
is shorter than the lease, so a silent member costs a fraction of the TTL, not all of it.
"""

from __future__ import annotations

from typing import Any

import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import ConnectionFailedError, ConnectionTimeoutError, Etcd3Exception


def _post(client: Etcd3Client, path: str, body: dict[str, Any], timeout_s: float) -> Any:
    try:
        resp = client.session.post(client.get_url(path), json=body, timeout=timeout_s)
    except requests.exceptions.Timeout as e:
        raise ConnectionTimeoutError(str(e)) from None
    except requests.exceptions.ConnectionError as e:
        raise ConnectionFailedError(str(e)) from None
    if resp.status_code != requests.codes["ok"]:
        raise Etcd3Exception(resp.text, resp.reason)
    return resp.json()


def keep_alive(client: Etcd3Client, lease_id: int, timeout_s: float) -> int:
    """The lease's TTL after this keep-alive; -1 if it had expired."""
    result = _post(client, "/lease/keepalive", {"ID": lease_id}, timeout_s)
    return int(result.get("result", {}).get("TTL", -1))


def revoke(client: Etcd3Client, lease_id: int, timeout_s: float) -> None:
    """Revoke the lease: every key attached to it goes with it."""
    _post(client, "/kv/lease/revoke", {"ID": lease_id}, timeout_s)
