"""etcd v3 metadata store on etcd3gw (etcd's JSON gRPC gateway).

Why etcd3gw: it speaks HTTP/JSON to etcd's gateway, so it needs no protobuf or gRPC
build (the ``etcd3`` package needs ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``
with current protobuf) and it is maintained.

Keys under ROOT: ``ROOT/cluster`` (the cluster record, put once if absent), the ledgers,
their index by bookie and the id counter of :mod:`bkframe_metadata_etcd.ledgers`,
``ROOT/bookies/<id>`` (attached to a lease kept alive by a heartbeat; a dead bookie's
lease expires), ``ROOT/cookies/<id>`` (CAS on version), ``ROOT/logs/<name>`` (a named log's
record, CAS on version) and ``ROOT/logcursors/<name>/<cursor>`` (its cursors; a transaction
deletes them with the log); the autorecovery records (locks, under-replicated marks,
decommissioned bookies) are :mod:`bkframe_metadata_etcd.autorecovery`'s. Every call runs in a worker
thread with the store's limiter; with several hosts in the URI, a call that cannot reach
one tries the next. Listings that need no values (ledgers, logs) read keys only, in pages
(:func:`bkframe_metadata_etcd.kv.keys`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio
import attrs
import requests
from etcd3gw.client import Etcd3Client
from etcd3gw.exceptions import Etcd3Exception

from bkframe.core.heartbeat import Heartbeat
from bkframe.core.interfaces import Spawner
from bkframe.core.interfaces.metadata_store import LogChange, check_log_changes
from bkframe.core.metadata import BookieInfo, ClusterRecord, Versioned, id_in_use
from bkframe.errors import (
    BadVersionError,
    BookieIdInUseError,
    LedgerExistsError,
    LogExistsError,
    MetadataError,
    NoSuchLedgerError,
    NoSuchLogError,
)
from bkframe_metadata_etcd.autorecovery import TXN_OPS, EtcdAutorecovery
from bkframe_metadata_etcd.kv import b64 as _b64
from bkframe_metadata_etcd.kv import count, keys, prefix_end
from bkframe_metadata_etcd.leases import keep_alive, revoke
from bkframe_metadata_etcd.ledgers import EtcdLedgers

log = logging.getLogger("bkframe.metadata.etcd")

SCHEME = "etcd://"
T = TypeVar("T")
#: How long a call keeps retrying unreachable hosts before it fails.
DEADLINE_S = 30.0
#: Deadline of one HTTP request to one etcd member (the store's calls retry on the next one).
REQUEST_TIMEOUT_S = 5.0


def parse_uri(uri: str) -> tuple[list[tuple[str, int]], str]:
    rest = uri[len(SCHEME) :]
    hosts, _, root = rest.partition("/")
    endpoints = []
    for hp in filter(None, hosts.split(",")):
        host, _, port = hp.rpartition(":")
        try:
            endpoints.append((host or "127.0.0.1", int(port)))
        except ValueError:
            raise MetadataError(f"metadata URI {uri!r}: {hp!r} is not HOST:PORT") from None
    if not endpoints:
        raise MetadataError(f"metadata URI {uri!r} names no etcd host; use etcd://HOST:PORT/ROOT")
    return endpoints, "/" + (root.strip("/") or "bkframe")


def version_is(key: bytes, result: str, version: int) -> dict[str, Any]:
    """A transaction's comparison of ``key``'s version (``"EQUAL"``, ``"GREATER"``, ...) with ``version``."""
    return {"key": _b64(key), "result": result, "target": "VERSION", "version": version}


def cas_put(
    client: Etcd3Client, key: bytes, value: bytes, version: int, *, lease: int | None = None, also: Sequence[dict[str, Any]] = ()
) -> bool:
    """Put ``value`` if the key's version is ``version`` (0: the key must not exist) and each
    comparison of ``also`` holds, in one transaction; whether it did. With ``lease``, the key
    goes when that lease ends."""
    put: dict[str, Any] = {"key": _b64(key), "value": _b64(value)}
    if lease is not None:
        put["lease"] = lease
    txn = {"compare": [*also, version_is(key, "EQUAL", version)], "success": [{"request_put": put}], "failure": []}
    return bool(client.transaction(txn).get("succeeded", False))


class EtcdRegistration:
    def __init__(self, store: EtcdMetadataStore, info: BookieInfo, ttl_s: float, replace: BookieInfo | None = None) -> None:
        self._store = store
        self.info = info
        #: A stale registration the first put may replace (see MetadataStore.register_bookie).
        self.replace = replace
        self._ttl = max(2, math.ceil(ttl_s))
        self._lease: Any = None
        self._heartbeats = Heartbeat()

    def _key(self) -> bytes:
        return f"{self._store.root}/bookies/{self.info.bookie_id}".encode()

    def _put(self, client: Etcd3Client) -> None:
        """Put the key under a new lease, unless another bookie's live registration holds it
        (a transaction on the version read: two bookies starting at once cannot both win).
        A key of this bookie's previous life (its lease not expired yet) is replaced."""
        key = self._key()
        while True:
            found = client.get(key, metadata=True)
            version = 0
            if found:
                value, kv = found[0]
                held = BookieInfo.deserialize(value)
                if not held.same_bookie(self.info) and held != self.replace:
                    raise id_in_use(held, self.info)
                version = int(kv["version"])
            lease = client.lease(ttl=self._ttl)
            if cas_put(client, key, self.info.serialize(), version, lease=lease.id):
                self._lease = lease
                self.replace = None
                return
            lease.revoke()  # lost a race: look again

    def _ours(self, client: Etcd3Client) -> bool:
        found = client.get(self._key())
        return bool(found) and BookieInfo.deserialize(found[0]).same_bookie(self.info)

    def _refresh(self, client: Etcd3Client) -> None:
        if self._lease is None or keep_alive(client, self._lease.id, self._ttl / 4) <= 0:
            # The lease expired (etcd was away too long): register again.
            self._put(client)
            log.warning("bookie %s registered again with a new lease", self.info.bookie_id)

    async def _heartbeat(self) -> None:
        await self._heartbeats.run(lambda: self._ttl / 3, self._renew)

    async def _renew(self) -> bool:
        try:
            await self._store._call(self._refresh)
        except BookieIdInUseError as e:
            log.error("bookie %s cannot register again: %s", self.info.bookie_id, e)
            self._lease = None
        except Exception as e:  # noqa: BLE001 - never fatal: retried at the next beat
            log.warning("bookie %s: lease keep-alive failed: %s", self.info.bookie_id, e)
            self._lease = None
        return True  # a registration is never given up: a lost lease is put again

    async def set_read_only(self, read_only: bool) -> None:
        self.info = attrs.evolve(self.info, read_only=read_only)

        def put(client: Etcd3Client) -> None:
            if self._lease is None:
                self._put(client)  # the keep-alive lost the lease: never put the key without one
            elif self._ours(client):
                client.put(self._key(), self.info.serialize(), lease=self._lease)

        await self._store._call(put)

    async def aclose(self) -> None:
        await self._heartbeats.stop()

        def revoke_ours(client: Etcd3Client) -> None:
            if self._lease is not None:
                revoke(client, self._lease.id, REQUEST_TIMEOUT_S)  # takes our key with it
            if self._ours(client):  # never another bookie's (the id may be theirs after an expiry)
                client.delete(self._key())

        await self._store._call(revoke_ours)


#: What etcd answers to a write once its backend is over ``--quota-backend-bytes`` (its
#: NOSPACE alarm is raised then, and every write is refused until it is disarmed).
NOSPACE = "database space exceeded"


def quota_full(error: Etcd3Exception, uri: str) -> MetadataError | None:
    """etcd's NOSPACE answer as a clear error (retrying cannot help); None for others."""
    if NOSPACE not in f"{error.detail_text or ''} {error}":
        return None
    return MetadataError(
        f"etcd's space quota is full ({uri}: {NOSPACE}), so it refuses every write: compact and defragment it "
        f"(etcdctl compact, etcdctl defrag, etcdctl alarm disarm), run it with --auto-compaction-mode / "
        f"--auto-compaction-retention, or raise --quota-backend-bytes; see docs/deployment.md#etcd"
    )


class EtcdMetadataStore(EtcdLedgers, EtcdAutorecovery):
    def __init__(self, uri: str) -> None:
        self.uri = uri
        endpoints, self.root = parse_uri(uri)
        self._clients = [Etcd3Client(host=h, port=p, timeout=REQUEST_TIMEOUT_S) for h, p in endpoints]
        self._current = 0
        self._counter = (0, 0)
        self._limiter = anyio.CapacityLimiter(4)

    async def _call(self, fn: Callable[[Etcd3Client], T]) -> T:
        def run() -> T:
            deadline = time.monotonic() + DEADLINE_S
            delay = 0.1
            while True:
                client = self._clients[self._current]
                try:
                    return fn(client)
                except (MetadataError, LedgerExistsError, NoSuchLedgerError, BadVersionError):
                    raise
                except (Etcd3Exception, requests.RequestException, OSError) as e:
                    if isinstance(e, Etcd3Exception) and (full := quota_full(e, self.uri)) is not None:
                        raise full from None
                    if time.monotonic() > deadline:
                        raise MetadataError(
                            f"cannot reach the etcd metadata store {self.uri!r} ({str(e) or type(e).__name__}); "
                            f"is etcd running at that address?"
                        ) from None
                    self._current = (self._current + 1) % len(self._clients)
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)

        return await anyio.to_thread.run_sync(run, limiter=self._limiter)

    @staticmethod
    def _get(client: Etcd3Client, key: bytes) -> tuple[bytes, int] | None:
        found = client.get(key, metadata=True)
        if not found:
            return None
        value, kv = found[0]
        return value, int(kv["version"])

    # -- the cluster record --------------------------------------------------------------

    async def init_cluster(self, record: ClusterRecord) -> bool:
        key = f"{self.root}/cluster".encode()
        return await self._call(lambda c: cas_put(c, key, record.serialize(), 0))

    async def read_cluster(self) -> ClusterRecord | None:
        found = await self._call(lambda c: self._get(c, f"{self.root}/cluster".encode()))
        return None if found is None else ClusterRecord.deserialize(found[0])

    # -- bookies -------------------------------------------------------------------------

    async def register_bookie(
        self, info: BookieInfo, ttl_s: float, nursery: Spawner, *, replace: BookieInfo | None = None
    ) -> EtcdRegistration:
        registration = EtcdRegistration(self, info, ttl_s, replace)
        await self._call(registration._put)
        nursery.start_soon(registration._heartbeat, name=f"bkframe-lease-{info.bookie_id}")
        return registration

    async def list_bookies(self, *, writable_only: bool = False) -> list[BookieInfo]:
        items = await self._call(lambda c: c.get_prefix(f"{self.root}/bookies/".encode()))
        infos = sorted((BookieInfo.deserialize(value) for value, _ in items), key=lambda b: b.bookie_id)
        if not writable_only:
            return infos
        decommissioned = await self.list_decommissioned()
        return [b for b in infos if not (b.read_only or b.bookie_id in decommissioned)]

    # -- cookies -------------------------------------------------------------------------

    async def read_cookie(self, bookie_id: str) -> Versioned | None:
        found = await self._call(lambda c: self._get(c, f"{self.root}/cookies/{bookie_id}".encode()))
        return None if found is None else Versioned(found[0], found[1])

    async def write_cookie(self, bookie_id: str, value: bytes, expected_version: int | None) -> int:
        key = f"{self.root}/cookies/{bookie_id}".encode()
        version = 0 if expected_version is None else expected_version
        if expected_version == 0 or not await self._call(lambda c: cas_put(c, key, value, version)):
            raise BadVersionError(f"cookie of {bookie_id} is not at version {expected_version}")
        return version + 1

    # -- named logs ----------------------------------------------------------------------

    def _log(self, name: str) -> bytes:
        return f"{self.root}/logs/{name}".encode()

    def _cursors(self, log: str) -> bytes:
        return f"{self.root}/logcursors/{log}/".encode()

    async def _write_on_log(self, log: str, write: Callable[[Etcd3Client], bool], refused: str) -> None:
        """``write``: one transaction on the log ``log`` or one of its cursors, compared with
        the versions the caller expects. When it does not go through, the log is read to say
        why: :class:`NoSuchLogError` if it is gone, else :class:`BadVersionError` (``refused``)."""

        def run(client: Etcd3Client) -> None:
            if write(client):
                return
            if self._get(client, self._log(log)) is None:
                raise NoSuchLogError(log)
            raise BadVersionError(refused)

        await self._call(run)

    async def create_log(self, name: str, value: bytes) -> int:
        if not await self._call(lambda c: cas_put(c, self._log(name), value, 0)):
            raise LogExistsError(name)
        return 1

    async def read_log(self, name: str) -> Versioned:
        found = await self._call(lambda c: self._get(c, self._log(name)))
        if found is None:
            raise NoSuchLogError(name)
        return Versioned(found[0], found[1])

    async def update_log(self, name: str, value: bytes, expected_version: int) -> int:
        await self._write_on_log(
            name,
            lambda c: expected_version > 0 and cas_put(c, self._log(name), value, expected_version),
            f"log {name!r} is not at version {expected_version}",
        )
        return expected_version + 1

    async def update_logs(self, changes: Sequence[LogChange]) -> list[int]:
        """One transaction: each key's version compared, every key put if all match; if one
        does not, the failure branch reads the keys (in the same revision) to say which."""
        checked = check_log_changes(changes)
        if not checked:
            return []
        if len(checked) > TXN_OPS:
            raise MetadataError(
                f"etcd metadata store {self.uri}: {len(checked)} logs in one update; etcd takes at most "
                f"--max-txn-ops (default {TXN_OPS}) operations in a transaction: update at most {TXN_OPS} logs at once"
            )
        txn: dict[str, list[dict[str, Any]]] = {"compare": [], "success": [], "failure": []}
        for name, value, expected_version in checked:
            key = self._log(name)
            # A version below 1 is never a stored one (etcd's start at 1; 0 is "absent"):
            # "LESS than 0" is never true, so such a change fails, as it must.
            matches = ("EQUAL", expected_version) if expected_version > 0 else ("LESS", 0)
            txn["compare"].append(version_is(key, *matches))
            txn["success"].append({"request_put": {"key": _b64(key), "value": _b64(value)}})
            txn["failure"].append({"request_range": {"key": _b64(key)}})

        def update(client: Etcd3Client) -> None:
            reply = client.transaction(txn)
            if reply.get("succeeded", False):
                return
            responses = reply.get("responses", [])
            for (name, _, expected_version), response in zip(checked, responses):
                kvs = response.get("response_range", {}).get("kvs", [])
                if not kvs:
                    raise NoSuchLogError(name)
                if int(kvs[0]["version"]) != expected_version:
                    raise BadVersionError(f"log {name!r} is at version {kvs[0]['version']}, not {expected_version}")
            raise MetadataError(f"etcd metadata store {self.uri}: updating logs failed, though every log is as expected")

        await self._call(update)
        return [expected_version + 1 for _, _, expected_version in checked]

    async def delete_log(self, name: str, expected_version: int | None = None) -> None:
        key = self._log(name)
        prefix = self._cursors(name)
        compare = version_is(key, "GREATER", 0) if expected_version is None else version_is(key, "EQUAL", expected_version)

        def delete(client: Etcd3Client) -> bool:
            txn = {
                "compare": [compare],
                "success": [
                    {"request_delete_range": {"key": _b64(key)}},
                    {"request_delete_range": {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}},
                ],
                "failure": [],
            }
            return bool(client.transaction(txn).get("succeeded", False))

        await self._write_on_log(name, delete, f"log {name!r} is not at version {expected_version}")

    async def list_logs(self, *, start: str = "", limit: int | None = None) -> list[str]:
        prefix = f"{self.root}/logs/".encode()
        if limit is not None and limit <= 0:
            return []
        # Log keys are ``logs/<name>`` (cursors live under ``logcursors/``): a page is a key range.
        found = await self._call(lambda c: keys(c, prefix + start.encode(), prefix_end(prefix), limit=limit))
        return sorted(key[len(prefix) :].decode() for key in found)

    async def count_logs(self) -> int:
        prefix = f"{self.root}/logs/".encode()
        return await self._call(lambda c: count(c, prefix, prefix_end(prefix)))

    async def read_cursor(self, log: str, cursor: str) -> Versioned | None:
        found = await self._call(lambda c: self._get(c, self._cursors(log) + cursor.encode()))
        return None if found is None else Versioned(found[0], found[1])

    async def write_cursor(self, log: str, cursor: str, value: bytes, expected_version: int | None) -> int:
        key = self._cursors(log) + cursor.encode()
        version = 0 if expected_version is None else expected_version
        # The log must exist in the same transaction: a cursor never outlives its log.
        log_exists = version_is(self._log(log), "GREATER", 0)
        await self._write_on_log(
            log,
            lambda c: expected_version != 0 and cas_put(c, key, value, version, also=[log_exists]),
            f"cursor {cursor!r} of log {log!r} is not at version {expected_version}",
        )
        return version + 1

    async def delete_cursor(self, log: str, cursor: str) -> bool:
        return bool(await self._call(lambda c: c.delete(self._cursors(log) + cursor.encode())))

    async def list_cursors(self, log: str) -> dict[str, Versioned]:
        prefix = self._cursors(log)
        items = await self._call(lambda c: c.get_prefix(prefix))
        found = {bytes(kv["key"])[len(prefix) :].decode(): Versioned(value, int(kv["version"])) for value, kv in items}
        return dict(sorted(found.items()))

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
