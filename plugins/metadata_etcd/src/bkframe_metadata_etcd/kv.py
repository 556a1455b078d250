"""Requests to etcd's JSON gateway beyond etcd3gw's conveniences: key encoding, ranges a
page at a time (a listing of 10^5 ledgers need not arrive in one response), reading keys
only where the values are not needed, and counts that read neither."""

from __future__ import annotations

import base64

from etcd3gw.client import Etcd3Client

#: Keys per range request of a listing.
PAGE = 10_000


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range holding every key that starts with ``prefix``."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def keys(client: Etcd3Client, start: bytes, end: bytes, *, limit: int | None = None) -> list[bytes]:
    """The keys in ``[start, end)``, ascending, at most ``limit`` of them (all if None), read
    with ``keys_only`` in requests of at most :data:`PAGE` keys. Consecutive requests are
    separate reads: a key put or deleted meanwhile may be seen or not, as with any listing."""
    return [key for key, _ in _range(client, start, end, limit, keys_only=True)]


def items(client: Etcd3Client, start: bytes, end: bytes, *, limit: int | None = None) -> list[tuple[bytes, bytes]]:
    """(key, value) in ``[start, end)``, ascending, at most ``limit`` of them (all if None),
    in requests of at most :data:`PAGE` keys (as :func:`keys`)."""
    return _range(client, start, end, limit, keys_only=False)


def count(client: Etcd3Client, start: bytes, end: bytes) -> int:
    """How many keys ``[start, end)`` holds: one ``count_only`` range (no key travels)."""
    payload = {"key": b64(start), "range_end": b64(end), "count_only": True}
    return int(client.post(client.get_url("/kv/range"), json=payload).get("count", 0))


def _range(client: Etcd3Client, start: bytes, end: bytes, limit: int | None, *, keys_only: bool) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    while limit is None or len(out) < limit:
        want = PAGE if limit is None else min(PAGE, limit - len(out))
        # etcd3gw base64-encodes a str key as latin-1: any bytes go through unchanged.
        found = client.get(
            start.decode("latin-1"), metadata=True, range_end=end.decode("latin-1"), limit=want, keys_only=keys_only
        )
        page = [(bytes(kv["key"]), bytes(value)) for value, kv in found]
        out.extend(page)
        if len(page) < want:
            break
        start = page[-1][0] + b"\0"
    return out
