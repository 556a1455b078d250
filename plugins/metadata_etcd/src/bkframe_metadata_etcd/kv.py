"""Requests to etcd's JSON gateway beyond etcd3gw's conveniences: key encoding, ranges a
page at a time (a listing of 10^5 ledgers need not arrive in one response), reading keys
only where the values are not needed, and counts that read neither.

etcd (3.4) counts every key of the range a request names, whatever its ``limit``: a page of
10 ids asked from id 0 to the end of ``ROOT/ledgers/`` walks all 10^6 keys of its index
(0.3 s here; the 100 pages of a full listing took 54 s). Ranges of keys that end in
zero-padded ids are therefore asked in windows of ids (:func:`id_items`)."""

from __future__ import annotations

import base64

from etcd3gw.client import Etcd3Client

#: Keys per range request of a listing.
PAGE = 10_000
#: The largest id a 19-digit key can hold.
MAX_ID = 10**19 - 1


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


def count(client: Etcd3Client, start: bytes, end: bytes) -> int:
    """How many keys ``[start, end)`` holds: one ``count_only`` range (no key travels)."""
    payload = {"key": b64(start), "range_end": b64(end), "count_only": True}
    return int(client.post(client.get_url("/kv/range"), json=payload).get("count", 0))


def id_items(
    client: Etcd3Client, prefix: bytes, start: int, limit: int | None, ceiling: int, *, keys_only: bool
) -> list[tuple[int, bytes]]:
    """(id, value) of the keys ``prefix + <id, 19 digits>`` with ids ``>= start``, ascending,
    at most ``limit`` (all if None); values empty if ``keys_only``.

    Asked in windows of ids, so that etcd counts only the keys of each window: the first is
    :data:`PAGE` ids wide (ids are handed out densely), and a window that comes back short
    is followed by one twice as wide (an index of one bookie holds a few ids in a hundred).
    Windows end at ``ceiling``, the largest id handed out; the keys above it (an id a
    client chose itself; usually none) are asked in one range to the prefix's end."""
    out: list[tuple[int, bytes]] = []
    first, window = start, PAGE
    while first <= MAX_ID and (limit is None or len(out) < limit):
        want = PAGE if limit is None else min(PAGE, limit - len(out))
        last_window = first > ceiling
        end_id = MAX_ID + 1 if last_window else min(first + window, ceiling + 1)
        end = prefix_end(prefix) if last_window else prefix + f"{end_id:019d}".encode()
        found = _range(client, prefix + f"{first:019d}".encode(), end, want, keys_only=keys_only)
        out.extend((int(key[len(prefix) :]), value) for key, value in found)
        if len(found) == want:
            first = out[-1][0] + 1
        elif last_window:
            break
        else:
            first, window = end_id, window * 2
    return out


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
