"""The etcd store's autorecovery records: locks, under-replicated marks, decommissioned bookies.

Keys under ROOT (next to the store's own, see :mod:`bkframe_metadata_etcd.store`):
``ROOT/locks/<name>`` (a held lock; value = the holder; attached to a lease of its own, made
in a transaction that requires ``create_revision == 0``), ``ROOT/underreplicated/L<id, 19 digits>``
(``{"bookies": [...], "since": unix time}``, rewritten by transactions that compare the
``mod_revision`` read, so a clear never deletes a mark somebody added to meanwhile) and
``ROOT/decommissioned/<bookie id>`` (empty).

A page of marks takes :data:`TXN_OPS` ledgers per request pair: one transaction reads their
marks, one writes those that change, each compared with what was read (``mod_revision``, or
``version`` 0 for a new mark), so each ledger's mark stays atomic against concurrent marks
and clears; a conflict on any ledger fails the write, and the batch is read again in halves.

A lock's lease is refreshed every TTL/3 from the holder's nursery. Unlike a registration's,
an expired lock lease is not replaced: the lock is ``lost`` (someone else may hold it now),
and so it is when no refresh got through for two thirds of a TTL -- the holder stops a third
of a TTL before etcd can expire the lease and hand the lock to another.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

import anyio
import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import Etcd3Exception
from etcd3gw.lease import Lease

from bkframe.core.heartbeat import Heartbeat
from bkframe.core.interfaces import Spawner
from bkframe.core.metadata import UnderReplicated
from bkframe_metadata_etcd.kv import MAX_ID, count, id_items, prefix_end
from bkframe_metadata_etcd.leases import keep_alive, revoke

log = logging.getLogger("bkframe.metadata.etcd")

T = TypeVar("T")
#: Ledgers per transaction when marking many: etcd refuses a transaction of more than
#: ``--max-txn-ops`` (default 128) operations in any of its lists.
TXN_OPS = 128


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _record(bookies: Collection[str], since: float) -> bytes:
    return json.dumps({"bookies": sorted(bookies), "since": since}, sort_keys=True).encode()


def _txn(compare: dict[str, Any], request: dict[str, Any]) -> dict[str, Any]:
    return {"compare": [compare], "success": [request], "failure": []}


class EtcdLock:
    def __init__(self, store: EtcdAutorecovery, name: str, holder: str, lease: Lease, ttl: int) -> None:
        self._store = store
        self.name = name
        self.holder = holder
        self._lease = lease
        self._ttl = ttl
        self.lost = anyio.Event()
        self._heartbeats = Heartbeat()
        #: When the last keep-alive that got an answer was sent (set as the heartbeat starts).
        self._alive_since = 0.0

    async def _keep_alive(self) -> None:
        self._alive_since = time.monotonic()
        await self._heartbeats.run(lambda: self._ttl / 3, self._renew)

    async def _renew(self) -> bool:
        # The lease lasts at least a TTL from the last refresh that was *sent* and answered;
        # the holder gives up a third of a TTL before that, so that it has stopped acting
        # before etcd can expire the lease and another holder take the lock.
        give_up_after = self._ttl * 2 / 3
        sent = time.monotonic()
        left: int | None = None
        # A hung request must not hide the lease's end: wait for it only as long as the
        # lease can still be alive.
        with anyio.move_on_after(max(0.0, self._alive_since + give_up_after - sent)):
            try:
                left = await self._store._call_once(lambda c: keep_alive(c, self._lease.id, self._ttl / 4))
            except (Etcd3Exception, requests.RequestException, OSError) as e:
                log.warning("lock %s: lease keep-alive failed: %s", self.name, e)
        if left is None and time.monotonic() - self._alive_since < give_up_after:
            return True
        if left is None or left <= 0:
            log.warning("lock %s of %s expired while held", self.name, self.holder)
            self.lost.set()
            return False
        self._alive_since = sent
        return True

    async def release(self) -> None:
        await self._heartbeats.stop()
        # Revoking our lease deletes our key and nothing else (after an expiry the name may
        # be someone else's, on their lease). If it fails, the lease still ends with its TTL.
        try:
            await self._store._call_once(lambda c: revoke(c, self._lease.id, self._ttl))
        except (Etcd3Exception, requests.RequestException, OSError) as e:
            if "not found" not in str(getattr(e, "detail_text", "")):
                log.warning("lock %s: revoking its lease failed (it expires by itself): %s", self.name, e)


class EtcdAutorecovery:
    """Mixed into :class:`~bkframe_metadata_etcd.store.EtcdMetadataStore`."""

    root: str
    _clients: list[Etcd3Client]
    _current: int
    _limiter: anyio.CapacityLimiter

    async def _call(self, fn: Callable[[Etcd3Client], T]) -> T:
        raise NotImplementedError

    def _ceiling(self, client: Etcd3Client) -> int:
        raise NotImplementedError

    async def _call_once(self, fn: Callable[[Etcd3Client], T]) -> T:
        """``fn`` on each host once, without the store's retries (keep-alives have a
        deadline of their own); abandoned if the caller is cancelled."""

        def run() -> T:
            for _ in range(len(self._clients) - 1):
                try:
                    return fn(self._clients[self._current])
                except (Etcd3Exception, requests.RequestException, OSError):
                    self._current = (self._current + 1) % len(self._clients)
            return fn(self._clients[self._current])  # the last host's error is the caller's

        return await anyio.to_thread.run_sync(run, limiter=self._limiter, abandon_on_cancel=True)

    def _lock_key(self, name: str) -> bytes:
        return f"{self.root}/locks/{name}".encode()

    def _mark_key(self, ledger_id: int) -> bytes:
        return self._marks_prefix() + f"{ledger_id:019d}".encode()

    # -- locks -----------------------------------------------------------------------------

    async def try_lock(self, name: str, holder: str, ttl_s: float, nursery: Spawner) -> EtcdLock | None:
        ttl = max(2, math.ceil(ttl_s))  # etcd's leases are whole seconds, at least 2
        key = self._lock_key(name)

        def take(client: Etcd3Client) -> Lease | None:
            lease = client.lease(ttl=ttl)
            if client.create(key, holder.encode(), lease=lease):
                return lease
            lease.revoke()
            return None

        lease = await self._call(take)
        if lease is None:
            return None
        lock = EtcdLock(self, name, holder, lease, ttl)
        nursery.start_soon(lock._keep_alive, name=f"bkframe-lock-{name}")
        return lock

    async def lock_holder(self, name: str) -> str | None:
        found = await self._call(lambda c: c.get(self._lock_key(name)))
        return bytes(found[0]).decode() if found else None

    # -- under-replicated marks ------------------------------------------------------------

    @staticmethod
    def _read_mark(client: Etcd3Client, key: bytes) -> tuple[dict[str, Any], int] | None:
        found = client.get(key, metadata=True)
        if not found:
            return None
        value, kv = found[0]
        return json.loads(value), int(kv["mod_revision"])

    @staticmethod
    def _unchanged_since(key: bytes, mod_revision: int) -> dict[str, Any]:
        return {"key": _b64(key), "result": "EQUAL", "target": "MOD", "mod_revision": mod_revision}

    async def mark_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        await self.mark_many_under_replicated([ledger_id], bookies)

    async def mark_many_under_replicated(self, ledger_ids: Collection[int], bookies: Collection[str]) -> int:
        adding, ids = set(bookies), sorted(set(ledger_ids))

        def mark_batch(client: Etcd3Client, batch: list[int]) -> int:
            """How many of ``batch``'s marks it made or changed."""
            while True:
                keys = [self._mark_key(ledger_id) for ledger_id in batch]
                read = {"compare": [], "success": [{"request_range": {"key": _b64(k)}} for k in keys], "failure": []}
                responses = client.transaction(read).get("responses", [])
                compare, success = [], []
                now = time.time()
                for key, response in zip(keys, responses, strict=True):
                    kvs = response.get("response_range", {}).get("kvs", [])
                    if not kvs:
                        compare.append({"key": _b64(key), "result": "EQUAL", "target": "VERSION", "version": 0})
                        success.append({"request_put": {"key": _b64(key), "value": _b64(_record(adding, now))}})
                        continue
                    current = json.loads(base64.b64decode(kvs[0]["value"]))
                    merged = set(current["bookies"]) | adding
                    if merged != set(current["bookies"]):
                        compare.append(self._unchanged_since(key, int(kvs[0]["mod_revision"])))
                        record = _record(merged, current["since"])
                        success.append({"request_put": {"key": _b64(key), "value": _b64(record)}})
                if not success:
                    return 0
                if client.transaction({"compare": compare, "success": success, "failure": []}).get("succeeded", False):
                    return len(success)
                if len(batch) > 1:  # one ledger changed meanwhile: fewer at a time, so the rest get through
                    half = len(batch) // 2
                    return mark_batch(client, batch[:half]) + mark_batch(client, batch[half:])

        def mark(client: Etcd3Client) -> int:
            return sum(mark_batch(client, ids[first : first + TXN_OPS]) for first in range(0, len(ids), TXN_OPS))

        return await self._call(mark) if ids else 0

    def _marks_prefix(self) -> bytes:
        return f"{self.root}/underreplicated/L".encode()

    async def list_under_replicated(self, *, start: int = 0, limit: int | None = None) -> list[UnderReplicated]:
        """Ranges from the key of ``start`` in windows of ids, as a ledger listing's
        (:func:`~bkframe_metadata_etcd.kv.id_items`), with the values: they are the marks."""
        prefix = self._marks_prefix()
        if limit == 0 or start > MAX_ID:
            return []
        found = await self._call(lambda c: id_items(c, prefix, max(start, 0), limit, self._ceiling(c), keys_only=False))
        marks = []
        for ledger_id, value in found:
            record = json.loads(value)
            marks.append(UnderReplicated(ledger_id, frozenset(record["bookies"]), float(record["since"])))
        return marks

    async def count_under_replicated(self) -> int:
        prefix = self._marks_prefix()
        return await self._call(lambda c: count(c, prefix, prefix_end(prefix)))

    async def clear_under_replicated(self, ledger_id: int, bookies: Collection[str]) -> None:
        key, removing = self._mark_key(ledger_id), set(bookies)

        def clear(client: Etcd3Client) -> None:
            while True:
                found = self._read_mark(client, key)
                if found is None:
                    return
                current, mod = found
                left = set(current["bookies"]) - removing
                if left == set(current["bookies"]):
                    return
                if left:
                    request = {"request_put": {"key": _b64(key), "value": _b64(_record(left, current["since"]))}}
                else:
                    request = {"request_delete_range": {"key": _b64(key)}}
                if client.transaction(_txn(self._unchanged_since(key, mod), request)).get("succeeded", False):
                    return

        await self._call(clear)

    # -- decommissioned bookies ------------------------------------------------------------

    async def set_decommissioned(self, bookie_id: str, decommissioned: bool) -> None:
        key = f"{self.root}/decommissioned/{bookie_id}".encode()
        if decommissioned:
            await self._call(lambda c: c.put(key, b""))
        else:
            await self._call(lambda c: c.delete(key))

    async def list_decommissioned(self) -> set[str]:
        prefix = f"{self.root}/decommissioned/".encode()
        items = await self._call(lambda c: c.get_prefix(prefix))
        return {bytes(kv["key"])[len(prefix) :].decode() for _, kv in items}
